"""What the bench tests share (tests/test_bench_*.py): the methods they run, Spec-Bench questions
written to a file, `hdlib bench`'s command line, and results files built by hand."""

from __future__ import annotations

import json

METHODS = ["hf", "hf-pld", "hd:C"]  # besides ar, which every run has
TOP_KEYS = {
    "machine", "model", "device", "dtype", "temperature", "prompt_format", "max_new_tokens", "questions", "methods",
    "order_seed", "prior", "comparisons", "provenance",
}  # fmt: skip
ROWS = [
    {"question_id": 11, "category": "writing", "turns": ["hello world how are you", "how are you world"]},
    {"question_id": 12, "category": "rag", "turns": ["you are hello hello world world"]},
    {"question_id": 13, "category": "translation", "turns": ["world world how how are"]},
    {"question_id": 14, "category": "rag", "turns": ["hello how hello how hello how"]},
]


def write_questions(path, rows=ROWS):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def bench_argv(folder, questions, out, *extra):
    return ["bench", "--questions", str(questions), "--model", str(folder), "--methods", ",".join(METHODS),
            "--max-new-tokens", "8", "--out", str(out), *extra]  # fmt: skip


def metrics(**given: object) -> dict:
    neutral = {"speedup": 1.0, "mat": 1.0, "tokens_per_s": 1.0, "draft_ms": 0.0, "overhead_frac": 0.0}
    return {**neutral, "identical_frac": 1.0, "tier_share": {}, **given}


def synthetic(overall: dict[str, dict], **top: object) -> dict:
    """The JSON of a results file whose methods have these overall metrics (the rest neutral)."""
    head = {"model": "m", "device": "cpu", "dtype": "float32", "machine": {}, "temperature": 0.0, "max_new_tokens": 8}
    head |= {"questions": 1, **top}
    return head | {"methods": {n: {"overall": metrics(**m), "tasks": {"qa": metrics(**m)}} for n, m in overall.items()}}
