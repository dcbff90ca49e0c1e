"""Lookup latency of the three tiers on the packaged model, and what their databases cost to open.

    python -m benchmarks.lookup_latency [--budgets 8,16] [--out benchmarks/results/<machine>/lookup_latency.json]

Contexts: every position of the packaged model's own greedy answers kept in
`benchmarks/results/unrecorded/statistics_tier.json` (the 12 project prompts and 12 held-out
ShareGPT prompts, 80 new tokens each): the contexts a tier meets at decode time, each of them timed by
`hdlib.databases.registry.lookup_latency` (the context tier begun with the context first, untimed, so it
holds exactly that text). Per call: wall time, median and p99, in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, UNRECORDED, results_path, write_results
from benchmarks.markdown import count, f2, table
from hdlib.bench.intervals import percentile
from hdlib.databases.registry import load_tier, lookup_latency
from hdlib.models.loading import load_model
from hdlib.tiers import ContextTier, Tier

ROOT = Path(__file__).resolve().parents[1]


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
    write_results(args.out, "lookup_latency", lm=lm, **results)


def tables(data: Mapping[str, Any]) -> list[str]:
    rows = [
        [tier, budget, f"{v['median_ms']:.4f}", f"{v['p99_ms']:.4f}"]
        for tier, budgets in data["tiers"].items()
        for budget, v in budgets.items()
    ]
    return [
        (
            f"{count(data['contexts'])} contexts; opening the model tier's database took {f2(data['model_open_s'])} s, "
            f"the statistics tier's {f2(data['statistics_open_s'])} s."
        ),
        table(["tier", "budget", "median ms", "p99 ms"], rows),
    ]


if __name__ == "__main__":
    main()
