"""Lookup latency of the three tiers on the packaged model, and what their databases cost to open.

    python benchmarks/lookup_latency.py [--budgets 8,16] [--out benchmarks/results/<machine>/lookup_latency.json]

Contexts: every position of the packaged model's own greedy answers kept in
`benchmarks/results/unrecorded/statistics_tier.json` (the 12 project prompts and 12 held-out
ShareGPT prompts, 80 new tokens each): the contexts a tier meets at decode time, each of them timed by
`hdlib.databases.lookup_latency` (the context tier begun with the context first, untimed, so it
holds exactly that text). Per call: wall time, median and p99, in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from common import RESULTS, UNRECORDED, results_path

from hdlib.databases import load_tier, lookup_latency
from hdlib.models import load_model
from hdlib.tiers import ContextTier, Tier

ROOT = Path(__file__).resolve().parents[1]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--budgets", default="8,16")
    parser.add_argument("--out", type=Path, default=results_path("lookup_latency.json"))
    args = parser.parse_args()

    answers = json.loads((RESULTS / UNRECORDED / "statistics_tier.json").read_text())["model_answers"]
    lm = load_model("smollm2-135m")
    results: dict[str, object] = {"contexts": sum(len(a["answer_ids"]) for a in answers), "tiers": {}}
    for tier in (Tier.MODEL, Tier.STATISTICS):
        lm.databases.pop(tier, None)
        start = time.perf_counter()
        load_tier(tier, lm)
        results[f"{tier.name}_open_s"] = round(time.perf_counter() - start, 3)
    tiers = [ContextTier(), load_tier(Tier.MODEL, lm), load_tier(Tier.STATISTICS, lm)]
    contexts = [a["prompt_ids"] + a["answer_ids"][:i] for a in answers for i in range(len(a["answer_ids"]))]
    for budget in (int(b) for b in args.budgets.split(",")):
        for tier, seconds in lookup_latency(tiers, contexts, budget).items():
            ms = [1e3 * t for t in seconds]
            row = {"median_ms": round(statistics.median(ms), 4), "p99_ms": round(percentile(ms, 0.99), 4)}
            results["tiers"].setdefault(tier.name, {})[str(budget)] = row
            print(f"{tier.name:10} budget {budget:2}: median {row['median_ms']:.3f} ms, p99 {row['p99_ms']:.3f} ms")
    results["command"] = " ".join(["python benchmarks/lookup_latency.py", *sys.argv[1:]])
    results["date"] = time.strftime("%Y-%m-%d")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
