"""HD against plain sampling at several temperatures, on Spec-Bench: the kit's points beside the
paper's curve of ten temperatures (notebook 04).

    python -m benchmarks.sampling --questions PATH [--per-task 2] [--split report] [--max-new-tokens 128]
        [--temperatures 0.2,0.4,0.6,0.8,1.0] [--repeats 1] [--out benchmarks/results/<machine>/sampling.json]

For each temperature, `ar` and `hd` (default tiers and order, adaptive budget from the packaged
prior, the Gumbel rule) answer the same questions, in an order shuffled per question and repeat
(hdlib.bench), both sampling with the same seeds. Prints speedup and MAT per task for each
temperature, with their intervals over questions; writes every result as JSON with the machine.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any

from benchmarks.bench_tables import bench_tables, runs_of
from benchmarks.common import load, spec_bench_parser, write_results
from hdlib.bench import progress_line, run_benchmark, table


def main() -> None:
    parser = spec_bench_parser(__doc__, "hd", "sampling.json")
    parser.add_argument("--temperatures", default="0.2,0.4,0.6,0.8,1.0")
    parser.add_argument("--repeats", type=int, default=1, help="each method answers each question this often")
    args = parser.parse_args()
    questions, lm = load(args)
    runs = []
    for temperature in (float(t) for t in args.temperatures.split(",")):

        def progress(question, answers, temperature=temperature):
            print(f"T={temperature:g} {progress_line(question, answers)}", file=sys.stderr, flush=True)

        results = run_benchmark(
            lm,
            questions,
            args.methods.split(","),
            args.max_new_tokens,
            progress,
            temperature,
            repeats=args.repeats,
            split=args.split or "",
        ).to_json()
        for metric in ("speedup", "mat"):
            print(f"temperature {temperature:g}\n{table(results, metric)}", end="\n\n", flush=True)
        results["date"] = time.strftime("%Y-%m-%d")
        runs.append(results)
    write_results(args.out, "sampling", provenance=runs[0]["provenance"], runs=runs)  # the first run's, from its start


def tables(data: Mapping[str, Any]) -> list[str]:
    """benchmarks/sampling.py: one bench result per temperature."""
    out = []
    for run in runs_of(data):
        out += [f"**Temperature {float(run['temperature']):g}**", *bench_tables(run)]
    return out


if __name__ == "__main__":
    main()
