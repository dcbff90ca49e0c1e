"""The GPU regime on any machine: MAT at a fixed draft budget, per tier set.

    python -m benchmarks.fixed_budget [--per-task 2] [--max-new-tokens 128] [--budget 64|auto|top12[,...]]
        [--methods C,CM,CS,CMS,M,R,CR,CRMS] [--out benchmarks/results/<machine>/fixed_budget.json]

On a GPU a forward pass over 65 tokens costs about what one over 1 token does, so the budget is
large and the MAT it reaches is the speedup. This runs `ar` and, at a fixed budget, the tier sets
given by their letters (C context, R the model's recycled guesses, M the model's phrases, S the
statistics), on the same Spec-Bench questions, every turn, the conversation so far being `ar`'s. It
reports MAT, the draft tokens verified per step, MAT per verified node, and, for every part of every
tier, the tokens it drafted and the share of them accepted. `--budget auto` runs the
value-ranked tree instead, to compare its precision (MAT per verified node) with a fixed budget's;
`--budget topN` the value-ranked tree verifying its N best candidates at every step, as it would where
a pass over 1 + N tokens costs what one over 1 does: the precision of its ranking, apart from what
this machine's forward time lets it afford. Several budgets (`--budget auto,top12,top6`) run side by
side, interleaved turn by turn, so that their speeds against `ar` can be compared.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

from benchmarks.common import load, spec_bench_parser, write_results
from benchmarks.markdown import code, count, f1, f2, f3, pct, table, x
from hdlib.databases.registry import load_tier
from hdlib.decoding import generate
from hdlib.engine.drafter import Drafter
from hdlib.engine.forward_time import flat_profile, load_or_measure
from hdlib.engine.loop import DecodeSettings, run
from hdlib.engine.prior import AcceptancePrior
from hdlib.engine.trace import Generation
from hdlib.engine.value import ValueBudget
from hdlib.models.cpu import describe_machine
from hdlib.tiers import ContextTier, RecycledTier, Tier


def main() -> None:
    parser = spec_bench_parser(__doc__, "C,CM,CS,CMS,M,R,CR,CRMS", "fixed_budget.json")
    parser.add_argument(
        "--budget",
        default="64",
        help="draft tokens per step, auto (the value-ranked tree) or topN (its N best); several: comma-separated",
    )
    args = parser.parse_args()
    budgets = args.budget.split(",")
    for b in budgets:
        if not (b == "auto" or b.isdigit() or (b.startswith("top") and b[3:].isdigit())):
            parser.error(f"--budget: {b!r} is not a number of tokens, auto or topN")
    questions, lm = load(args)
    model_db = load_tier(Tier.MODEL, lm)
    statistics = load_tier(Tier.STATISTICS, lm)

    def tiers(name: str) -> list:
        make = {"C": ContextTier, "R": RecycledTier, "M": lambda: model_db, "S": lambda: statistics}
        return [make[letter]() for letter in name]

    def generate_with(name: str, ids: list[int], budget: str) -> Generation:
        if budget.startswith("top"):
            settings, policy = DecodeSettings(max_new_tokens=args.max_new_tokens), top_n(int(budget[3:]))
            gen = run(lm.model, ids, Drafter(tiers(name)), settings, lm.eos_token_ids, policy)
            policy.prior.merge(policy.rates())  # type: ignore[union-attr]  (as `generate` does)
            return gen
        fixed = None if budget == "auto" else int(budget)
        return generate(lm, ids, tiers(name), max_new_tokens=args.max_new_tokens, budget=fixed)

    prior_key = load_or_measure(lm.model).key  # the prior `generate` uses: acceptance does not depend on time

    def top_n(n: int) -> ValueBudget:
        """The value-ranked tree under a flat forward time up to 1 + n tokens: it verifies its n best nodes."""
        prior = AcceptancePrior.for_model(prior_key)
        return ValueBudget(flat_profile([1.0] * (n + 1)), prior)

    names = [f"{name}@{b}" for name in args.methods.split(",") for b in budgets]
    totals = {n: Counter() for n in ["ar", *names]}
    identical = {n: 0 for n in names}
    for q in questions:
        messages, answers = [], {n: [] for n in ["ar", *names]}
        for turn in q.turns:
            messages.append({"role": "user", "content": turn})
            ids = lm.encode_prompt(messages)
            base = generate(lm, ids, (), max_new_tokens=args.max_new_tokens)
            answers["ar"].append(base.tokens)
            for name in names:
                tier_set, b = name.split("@")
                g = generate_with(tier_set, ids, b)
                answers[name].append(g.tokens)
                t = totals[name]
                t["tokens"] += len(g.tokens)
                t["steps"] += len(g.steps)
                t["wall_ms"] += round(1e3 * g.wall_s)
                for s in g.steps:
                    t["verified"] += s.tree.n_drafted
                    for node in range(1, len(s.tree)):
                        part = f"{s.tree.tiers[node].name}{'/' + s.tree.sources[node] if s.tree.sources[node] else ''}"
                        t[f"drafted {part}"] += 1
                    for node in s.accepted_nodes[1:]:
                        part = f"{s.tree.tiers[node].name}{'/' + s.tree.sources[node] if s.tree.sources[node] else ''}"
                        t[f"accepted {part}"] += 1
            totals["ar"]["tokens"] += len(base.tokens)
            totals["ar"]["steps"] += len(base.steps)
            totals["ar"]["wall_ms"] += round(1e3 * base.wall_s)
            messages.append({"role": "assistant", "content": base.text})
        for name in names:
            identical[name] += answers[name] == answers["ar"]
        line = " ".join(f"{n} {totals[n]['tokens'] / totals[n]['steps']:.2f}" for n in names)
        print(f"q{q.question_id} ({q.task}) running MAT: {line}", file=sys.stderr, flush=True)

    methods = {}
    for name in names:
        t = totals[name]
        part_names = sorted({k.split(" ", 1)[1] for k in t if k.startswith("drafted ")})
        methods[name] = {
            "mat": t["tokens"] / t["steps"],
            "verified_per_step": t["verified"] / t["steps"],
            "mat_per_verified_node": (t["tokens"] / t["steps"] - 1) / max(t["verified"] / t["steps"], 1e-9),
            "speed_vs_ar": (t["tokens"] / t["wall_ms"]) / (totals["ar"]["tokens"] / totals["ar"]["wall_ms"]),
            "identical_frac": identical[name] / len(questions),
            "parts": {
                p: {
                    "drafted": t[f"drafted {p}"],
                    "accepted": t[f"accepted {p}"],
                    "accepted_share": t[f"accepted {p}"] / max(t[f"drafted {p}"], 1),
                }
                for p in part_names
            },
        }
    results = {
        "command": " ".join(["python -m benchmarks.fixed_budget", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d"),
        "machine": describe_machine(),
        "questions": len(questions),
        "max_new_tokens": args.max_new_tokens,
        "budget": int(args.budget) if args.budget.isdigit() else args.budget,
        "methods": methods,
    }
    profile = load_or_measure(lm.model) if "auto" in budgets else None  # what `generate`'s auto budget read
    write_results(args.out, "fixed_budget", lm=lm, profile=profile, **results)
    for name, m in methods.items():
        parts_line = ", ".join(f"{p} {v['accepted']}/{v['drafted']}" for p, v in m["parts"].items())
        print(
            f"{name:16} MAT {m['mat']:.2f}  verified/step {m['verified_per_step']:5.1f}  "
            f"MAT-1 per node {m['mat_per_verified_node']:.3f}  identical {100 * m['identical_frac']:.0f} %  "
            f"accepted/drafted: {parts_line}"
        )


def tables(data: Mapping[str, Any]) -> list[str]:
    rows = []
    for name, m in data["methods"].items():
        parts = "; ".join(f"{p} {count(v['accepted'])} / {count(v['drafted'])}" for p, v in m["parts"].items())
        rows.append(
            [
                code(name),
                f2(m["mat"]),
                f1(m["verified_per_step"]),
                f3(m["mat_per_verified_node"]),
                x(m["speed_vs_ar"]),
                pct(m["identical_frac"]),
                parts,
            ]
        )
    header = ["tiers@budget", "MAT", "verified per step", "(MAT - 1) per verified node", "speed vs `ar`", "identical"]
    return [
        (
            f"Settings: budget {data['budget']}, {data['questions']} questions, "
            f"{data['max_new_tokens']} new tokens per turn."
        ),
        table([*header, "accepted / drafted, by part"], rows),
    ]


if __name__ == "__main__":
    main()
