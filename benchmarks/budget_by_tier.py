"""The adaptive budget with one record per leading tier against one record for all trees.

    python benchmarks/budget_by_tier.py [--per-task 2] [--max-new-tokens 128] [--out benchmarks/budget_by_tier.json]

Methods, interleaved turn by turn in one process after a warm-up: `ar` (plain decoding), `hd:C`
(context tier alone), `hd` (default tiers, budget per leading tier: the default) and `hd one
record` (default tiers, one budget record for every tree, as before the leading tier counted).
Greedy; speedup = mean per-question throughput against `ar`, MAT = tokens per step.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from common import load, spec_bench_parser

from hdlib.budget import AdaptiveBudget, load_or_measure
from hdlib.decoding import generate
from hdlib.tiers import DEFAULT_TIERS, Tier

METHODS = {
    "ar": ((), True),
    "hd:C": ((Tier.CONTEXT,), True),
    "hd": (DEFAULT_TIERS, True),
    "hd one record": (DEFAULT_TIERS, False),
}


def main() -> None:
    parser = spec_bench_parser(__doc__, ",".join(METHODS), "benchmarks/budget_by_tier.json")
    args = parser.parse_args()
    questions, lm = load(args)
    tally: dict[str, dict[str, list]] = {m: {"throughput": [], "tokens": [], "steps": [], "same": []} for m in METHODS}

    profile = load_or_measure(lm.model)

    def answer(name: str, prompt_ids: list[int], max_new_tokens: int):
        tiers, by_tier = METHODS[name]
        budget = AdaptiveBudget(profile, by_tier=by_tier) if tiers else None
        return generate(lm, prompt_ids, tiers, max_new_tokens=max_new_tokens, budget=budget)

    warm = lm.encode_prompt("Say hello.")
    for name in METHODS:
        answer(name, warm, 8)
    for question in questions:
        messages: list[dict[str, str]] = []
        runs: dict[str, list] = {m: [] for m in METHODS}
        for turn in question.turns:
            messages.append({"role": "user", "content": turn})
            ids = lm.encode_prompt(messages)
            for name in METHODS:
                runs[name].append(answer(name, ids, args.max_new_tokens))
            messages.append({"role": "assistant", "content": runs["ar"][-1].text})
        for name, gens in runs.items():
            t = tally[name]
            t["throughput"].append(sum(len(g.tokens) for g in gens) / sum(g.wall_s for g in gens))
            t["tokens"].append(sum(len(g.tokens) for g in gens))
            t["steps"].append(sum(len(g.steps) for g in gens))
            t["same"].append(all(g.tokens == a.tokens for g, a in zip(gens, runs["ar"])))
        line = " ".join(f"{n}: MAT {sum(len(g.tokens) for g in r) / sum(len(g.steps) for g in r):.2f}" for n, r in runs.items())
        print(f"q{question.question_id} ({question.task}) {line}", file=sys.stderr, flush=True)

    base = statistics.mean(tally["ar"]["throughput"])
    results = {
        name: {
            "speedup": statistics.mean(t["throughput"]) / base,
            "mat": sum(t["tokens"]) / sum(t["steps"]),
            "identical_frac": sum(t["same"]) / len(t["same"]),
        }
        for name, t in tally.items()
    }
    for name, r in results.items():
        print(f"{name:14} speedup {r['speedup']:.2f}x  MAT {r['mat']:.2f}  identical {100 * r['identical_frac']:.0f} %")
    command = " ".join(["python benchmarks/budget_by_tier.py", *sys.argv[1:]])
    out = {"command": command, "date": time.strftime("%Y-%m-%d"), "questions": len(questions), "methods": results}
    args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
