"""What the Spec-Bench benchmark scripts share: their common options and the questions and model they load."""

from __future__ import annotations

import argparse
from pathlib import Path

from hdlib.models import LoadedModel, load_model
from hdlib.specbench import Question, load_questions, per_task

ROOT = Path(__file__).resolve().parents[1]


def spec_bench_parser(doc: str, methods: str, out: str) -> argparse.ArgumentParser:
    """--questions (Spec-Bench's file beside the project), --per-task, --max-new-tokens, --methods, --out."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--questions", type=Path, default=ROOT.parent / "shared/specbench/question.jsonl")
    parser.add_argument("--per-task", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--methods", default=methods)
    parser.add_argument("--out", type=Path, default=ROOT / out)
    return parser


def load(args: argparse.Namespace) -> tuple[list[Question], LoadedModel]:
    return per_task(load_questions(args.questions), args.per_task), load_model("smollm2-135m")
