"""Context, context+model and context+model+statistics against plain decoding, on Spec-Bench.

    python benchmarks/tiers.py --questions ../shared/specbench/question.jsonl [--per-task 2]
        [--max-new-tokens 128] [--out benchmarks/tiers.json]

Two questions per task by default (the first two of each of the six tasks, every turn), greedy,
all methods interleaved question by question in one process (hdlib.bench). Prints speedup, MAT and
the share of identical outputs per task; writes the full results as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from hdlib.bench import progress_line, run_benchmark, table
from hdlib.models import load_model
from hdlib.specbench import load_questions, per_task

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=Path, default=ROOT.parent / "shared/specbench/question.jsonl")
    parser.add_argument("--per-task", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--methods", default="hd:C,hd:CM,hd:CMS")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/tiers.json")
    args = parser.parse_args()

    questions = per_task(load_questions(args.questions), args.per_task)
    lm = load_model("smollm2-135m")

    def progress(question, runs):
        print(progress_line(question, runs), file=sys.stderr, flush=True)

    results = run_benchmark(lm, questions, args.methods.split(","), args.max_new_tokens, progress)
    results["command"] = " ".join(["python benchmarks/tiers.py", *sys.argv[1:]])
    results["date"] = time.strftime("%Y-%m-%d")
    for metric in ("speedup", "mat", "identical_frac"):
        print(table(results, metric), end="\n\n")
    args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
