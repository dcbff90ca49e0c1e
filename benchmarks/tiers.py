"""Context, context+model and context+model+statistics against plain decoding, on Spec-Bench.

    python -m benchmarks.tiers --questions data/spec_bench/question.jsonl [--per-task 2]
        [--max-new-tokens 128] [--out benchmarks/results/<machine>/tiers.json]

Two questions per task by default (the first two of each of the six tasks, every turn), greedy,
all methods interleaved question by question in one process (hdlib.bench). Prints speedup, MAT and
the share of identical outputs per task; writes the full results as JSON.
"""

from __future__ import annotations

import sys

from benchmarks.common import load, spec_bench_parser, write_results
from hdlib.bench import progress_line, run_benchmark, table


def main() -> None:
    parser = spec_bench_parser(__doc__, "hd:C,hd:CM,hd:CMS", "tiers.json")
    args = parser.parse_args()
    questions, lm = load(args)

    def progress(question, runs):
        print(progress_line(question, runs), file=sys.stderr, flush=True)

    results = run_benchmark(lm, questions, args.methods.split(","), args.max_new_tokens, progress).to_json()
    for metric in ("speedup", "mat", "identical_frac"):
        print(table(results, metric), end="\n\n")
    write_results(args.out, "tiers", **results)  # with the run's provenance, made at its start


if __name__ == "__main__":
    main()
