"""`hd` against vLLM's SuffixDecoding over all sixty ten-per-task questions on one machine (docs/peers.md).

The one-machine run (benchmarks/results/epyc-avx512/field_one_machine*.json) answered four tasks;
the ten-per-task run answered math_reasoning and rag (questions 401 on) on that machine in both its
passes. This joins the two runs' raw records, each pass with its own `ar`, and prints each method's
metrics as `hdlib bench` aggregates them (hdlib.bench.records.aggregate): overall, then per task.

    python scripts/field_one_machine.py
"""

from __future__ import annotations

import json
from pathlib import Path

from hdlib.bench.records import QuestionRuns, aggregate

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "epyc-avx512"
FIRST_OF_THE_OTHER_TASKS = 401  # math_reasoning's first question; rag's follow


def records(name: str, first: int = 0) -> list[QuestionRuns]:
    rows = (json.loads(line) for line in (RESULTS / name).read_text(encoding="utf-8").splitlines())
    return [QuestionRuns.from_json(r) for r in rows if "runs" in r and r["question_id"] >= first]


def main() -> None:
    passes = {
        "hdlib's engine": (["ar", "hd", "suffix"], "field_one_machine.raw.jsonl", "field.raw.jsonl"),
        "vLLM's engine": (["ar", "vllm-suffix"], "field_one_machine-vllm.raw.jsonl", "field-vllm.raw.jsonl"),
    }
    for label, (names, four_tasks, ten_per_task) in passes.items():
        answered = records(four_tasks) + records(ten_per_task, FIRST_OF_THE_OTHER_TASKS)
        machines = {json.dumps(r.machine, sort_keys=True) for r in answered}
        print(f"{label}: {len(answered)} questions, {len(machines)} machine(s)")
        for name, result in aggregate(answered, names).items():
            o = result.overall
            tasks = ", ".join(f"{t} {m.speedup:.2f}x" for t, m in result.tasks.items())
            print(
                f"  {name:12} {o.speedup:.2f}x  MAT {o.mat:.2f}  {o.tokens_per_s:.1f} tokens/s  "
                f"identical {o.identical_frac:.0%}  ({tasks})"
            )


if __name__ == "__main__":
    main()
