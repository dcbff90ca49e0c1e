"""The hierarchy's gate on a fast device, replayed on this CPU: with it and without it, side by side.

    python -m benchmarks.gate_replay [--per-task 2] [--max-new-tokens 256] [--pass-ms 10]
        [--out benchmarks/results/<machine>/gate_replay.json]

HD answers the same Spec-Bench questions here, its budget policy (the value-ranked tree) seeing the
forward-time profile of a fast device: flat, `--pass-ms` a pass whatever its size, as a 7B model's
pass on a GPU nearly is. The answers are decoded for real on this CPU (and checked against plain
decoding's); each step's time is counted as the profile's forward time plus the host time measured
here (drafting, the policy, the tree's tensors, acceptance, the cache and the tiers' update), which
is what the step would cost on a device that fast with this host. `hd` (the gate on) and
`hd+ask-all` (every tier asked at every step) answer turn by turn, each with an acceptance prior of
its own that starts empty.

It reports, per method: MAT, tokens per second in that clock (overall and per task), the host
milliseconds per step, and per tier the share of steps it was asked in and its drafting ms per step;
and where the gate decided: per tier, the steps it was asked in and skipped in, by band of the
expected accepted tokens of the tree drafted before it (`hdlib.engine.gate.EXPECTED_EDGES`).
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks.common import load, spec_bench_parser, write_results
from benchmarks.markdown import code, count, f1, f2, pct, table, x
from hdlib.databases.registry import make_tier
from hdlib.engine.drafter import Drafter
from hdlib.engine.forward_time import ForwardProfile, flat_profile
from hdlib.engine.gate import EXPECTED_EDGES, TierGate, expected_band
from hdlib.engine.loop import DecodeSettings, run
from hdlib.engine.prior import AcceptancePrior
from hdlib.engine.trace import Generation
from hdlib.engine.value import ValueBudget
from hdlib.models.cpu import describe_machine
from hdlib.models.loading import LoadedModel
from hdlib.tiers import DEFAULT_TIERS, Tier

METHODS = {"hd": True, "hd+ask-all": False}  # name -> the gate on


class LoggedGate(TierGate):
    """The gate, counting its decisions by tier and band."""

    def __init__(self, decay: float, log: Counter) -> None:
        super().__init__(decay)
        self.log = log

    def asks(self, tier: Tier, expected: float, rate: float | None) -> bool:
        ask = super().asks(tier, expected, rate)
        self.log[(tier.name, expected_band(expected), ask)] += 1
        return ask


def device_seconds(g: Generation, profile: ForwardProfile) -> float:
    """The generation's step time on the profile's device with this host."""
    return sum(float(profile.forward_s(1 + s.tree.n_drafted + s.window)) + s.times.overhead for s in g.steps)


def answer(lm: LoadedModel, ids: list[int], gate: bool, profile: ForwardProfile, prior: AcceptancePrior,
           max_new_tokens: int, log: Counter) -> Generation:  # fmt: skip
    policy = ValueBudget(profile, prior, gate=gate)
    if gate:
        policy.tier_gate = LoggedGate(policy.model.decay, log)
    drafter = Drafter([make_tier(t, lm) for t in DEFAULT_TIERS])
    gen = run(lm.model, ids, drafter, DecodeSettings(max_new_tokens=max_new_tokens), lm.eos_token_ids, policy)
    prior.merge(policy.rates())  # as `generate` does: the next answer starts where this one left off
    return gen


def main() -> None:
    parser = spec_bench_parser(__doc__, ",".join(METHODS), "gate_replay.json")
    parser.set_defaults(max_new_tokens=256)
    parser.add_argument("--pass-ms", type=float, default=10.0, help="the fast device's forward pass (default 10 ms)")
    args = parser.parse_args()
    chosen = args.methods.split(",")
    if sorted(chosen) != sorted(METHODS):
        parser.error(f"--methods: this benchmark compares {' and '.join(METHODS)}, both")
    questions, lm = load(args)
    profile = flat_profile([args.pass_ms / 1e3] * 64)
    priors = tempfile.TemporaryDirectory()
    prior = {name: AcceptancePrior.for_model(profile.key, Path(priors.name) / name) for name in METHODS}
    sums: dict[str, dict[str, Counter]] = {name: defaultdict(Counter) for name in METHODS}
    logs: dict[str, Counter] = {name: Counter() for name in METHODS}
    identical = Counter()
    for q in questions:
        messages: list[dict[str, str]] = []
        same = dict.fromkeys(METHODS, True)
        for turn in q.turns:
            messages.append({"role": "user", "content": turn})
            ids = lm.encode_prompt(messages)
            plain = run(lm.model, ids, None, DecodeSettings(max_new_tokens=args.max_new_tokens), lm.eos_token_ids)
            for name, gate in METHODS.items():
                g = answer(lm, ids, gate, profile, prior[name], args.max_new_tokens, logs[name])
                same[name] &= g.tokens == plain.tokens
                for key in ("overall", q.task):
                    t = sums[name][key]
                    t["tokens"] += len(g.tokens)
                    t["steps"] += len(g.steps)
                    t["seconds"] += device_seconds(g, profile)
                    t["host_s"] += g.step_time.overhead
                    for r in g.tier_stats():
                        t[f"asked {r.tier.name}"] += r.asked
                        t[f"lookup_s {r.tier.name}"] += r.lookup_s
            messages.append({"role": "assistant", "content": lm.decode(plain.tokens)})
        identical.update(name for name, ok in same.items() if ok)
        line = " ".join(f"{n} {s['overall']['tokens'] / s['overall']['seconds']:.0f} tok/s" for n, s in sums.items())
        print(f"q{q.question_id} ({q.task}): {line}", file=sys.stderr, flush=True)

    def metrics(t: Counter) -> dict:
        tiers = [x.name for x in DEFAULT_TIERS]
        return {
            "mat": t["tokens"] / t["steps"],
            "tokens_per_s": t["tokens"] / t["seconds"],
            "host_ms_per_step": 1e3 * t["host_s"] / t["steps"],
            "asked": {x: t[f"asked {x}"] / t["steps"] for x in tiers},
            "lookup_ms_per_step": {x: 1e3 * t[f"lookup_s {x}"] / t["steps"] for x in tiers},
        }

    methods = {
        name: {
            "identical_frac": identical[name] / len(questions),
            "overall": metrics(s["overall"]),
            "tasks": {task: metrics(t) for task, t in s.items() if task != "overall"},
        }
        for name, s in sums.items()
    }
    gated = methods["hd"]["overall"]["tokens_per_s"] / methods["hd+ask-all"]["overall"]["tokens_per_s"]
    decided: dict[tuple[str, int], Counter] = defaultdict(Counter)  # (tier, band) -> asked and skipped steps
    for (tier, band, ask), n in logs["hd"].items():
        decided[(tier, band)]["asked" if ask else "skipped"] += n
    decisions = [
        {"tier": t, "band": b, "asked": c["asked"], "skipped": c["skipped"]} for (t, b), c in sorted(decided.items())
    ]
    results = {
        "command": " ".join(["python -m benchmarks.gate_replay", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d"),
        "machine": describe_machine(),
        "model": "smollm2-135m",
        "questions": len(questions),
        "max_new_tokens": args.max_new_tokens,
        "pass_ms": args.pass_ms,
        "tiers": [t.name for t in DEFAULT_TIERS],
        "band_edges": list(EXPECTED_EDGES),
        "gate_speedup": gated,
        "methods": methods,
        "gate_decisions": decisions,
    }
    write_results(args.out, "gate_replay", lm=lm, profile=profile, **results)  # the fast device's flat profile
    for name, m in methods.items():
        o = m["overall"]
        asked = ", ".join(f"{x} {100 * a:.0f} %" for x, a in o["asked"].items())
        print(f"{name}: MAT {o['mat']:.2f}, {o['tokens_per_s']:.0f} tok/s at {args.pass_ms:g} ms a pass, host "
              f"{o['host_ms_per_step']:.2f} ms a step; asked: {asked}; identical {100 * m['identical_frac']:.0f} %")
    print(f"the gate: {gated:.3f}x the tokens per second of asking every tier; written to {args.out}")


def tables(data: Mapping[str, Any]) -> list[str]:
    """benchmarks/gate_replay.py: the gate on a fast device's profile, with and without it."""
    methods = data["methods"]
    tiers = data["tiers"]
    rows = [
        [
            code(name),
            f2(m["overall"]["mat"]),
            f1(m["overall"]["tokens_per_s"]),
            f2(m["overall"]["host_ms_per_step"]),
            pct(m["identical_frac"]),
            *(pct(m["overall"]["asked"][t]) for t in tiers),
            *(f2(m["overall"]["lookup_ms_per_step"][t]) for t in tiers),
        ]
        for name, m in methods.items()
    ]
    tasks = list(next(iter(methods.values()))["tasks"])
    by_task = [[code(name), *(f1(m["tasks"][t]["tokens_per_s"]) for t in tasks)] for name, m in methods.items()]
    edges = [0.0, *data["band_edges"]]
    bands = [f"{a:g}-{b:g}" for a, b in zip(edges, edges[1:])] + [f"{edges[-1]:g}+"]
    decided = [
        [d["tier"], bands[d["band"]], count(d["asked"]), count(d["skipped"]),
         pct(d["asked"] / (d["asked"] + d["skipped"]))]
        for d in data["gate_decisions"]
    ]  # fmt: skip
    return [
        f"Settings: {data['model']}, {data['questions']} questions, {data['max_new_tokens']} new tokens per turn, "
        f"a flat profile of {data['pass_ms']:g} ms a pass; the tiers {', '.join(tiers)}. With the gate "
        f"`hd` makes {x(data['gate_speedup'])} the tokens per second of `hd+ask-all` in that clock.",
        table(
            [
                "method",
                "MAT",
                "tokens/s",
                "host ms/step",
                "identical to ar",
                *(f"{t} asked" for t in tiers),
                *(f"{t} ms/step" for t in tiers),
            ],
            rows,
        ),  # fmt: skip
        "Tokens per second by task:",
        table(["method", *tasks], by_task),
        "Where the gate decided (`hd`): per tier after the first, the steps it was asked in and skipped in, by "
        "the expected accepted tokens of the tree drafted before it:",
        table(["tier", "tree so far", "asked", "skipped", "asked share"], decided),
    ]


if __name__ == "__main__":
    main()
