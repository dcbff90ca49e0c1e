"""HD against plain sampling at temperatures 0, 0.5 and 1.0, on Spec-Bench.

    python -m benchmarks.sampling --questions PATH [--per-task 2] [--max-new-tokens 128]
        [--temperatures 0,0.5,1.0] [--out benchmarks/results/<machine>/sampling.json]

For each temperature, `ar` and `hd` (default tiers and order, adaptive budget) answer the same
questions interleaved question by question (hdlib.bench), both sampling with the same seeds. Prints
speedup and MAT per task for each temperature; writes every result as JSON.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from typing import Any

from benchmarks.bench_tables import bench_tables, runs_of
from benchmarks.common import load, spec_bench_parser
from hdlib.bench import progress_line, run_benchmark, table


def main() -> None:
    parser = spec_bench_parser(__doc__, "hd", "sampling.json")
    parser.add_argument("--temperatures", default="0,0.5,1.0")
    args = parser.parse_args()
    questions, lm = load(args)
    runs = []
    for temperature in (float(t) for t in args.temperatures.split(",")):

        def progress(question, answers, temperature=temperature):
            print(f"T={temperature:g} {progress_line(question, answers)}", file=sys.stderr, flush=True)

        results = run_benchmark(
            lm, questions, args.methods.split(","), args.max_new_tokens, progress, temperature
        ).to_json()
        for metric in ("speedup", "mat"):
            print(f"temperature {temperature:g}\n{table(results, metric)}", end="\n\n", flush=True)
        results["date"] = time.strftime("%Y-%m-%d")
        runs.append(results)
    command = " ".join(["python -m benchmarks.sampling", *sys.argv[1:]])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"command": command, "runs": runs}, indent=1))


def tables(data: Mapping[str, Any]) -> list[str]:
    """benchmarks/sampling.py: one bench result per temperature."""
    out = []
    for run in runs_of(data):
        out += [f"**Temperature {float(run['temperature']):g}**", *bench_tables(run)]
    return out


if __name__ == "__main__":
    main()
