"""What the benchmark scripts share: where their results go (benchmarks/results/<machine>/), and for the
Spec-Bench ones their common options and the questions and model they load."""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hdlib.bench.specbench import Question
    from hdlib.engine.forward_time import ForwardProfile
    from hdlib.models.loading import LoadedModel

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
UNRECORDED = "unrecorded"  # the folder of results that do not say which processor they ran on
QUESTIONS_HELP = (
    "Spec-Bench's question file: data/spec_bench/question.jsonl in a clone of https://github.com/hemingkx/Spec-Bench"
)


def machine_folder(machine: object) -> str:
    """The folder under benchmarks/results/ for a result measured on `machine`, as `hdlib.models.cpu.describe_machine`
    records it: the processor family and its widest vector extension (`epyc-avx2`, `epyc-avx512`, `xeon-amx`);
    `unrecorded` when the record does not name the processor."""
    from hdlib.models.cpu import widest_vector  # here: hdlib (and torch) only where a folder is asked for

    if not isinstance(machine, Mapping) or not machine.get("cpu"):
        return UNRECORDED
    name = re.sub(r"\((r|tm)\)", "", str(machine["cpu"]).lower())
    family = next((f for f in ("epyc", "xeon") if f in name), None) or re.sub(r"[^a-z0-9]+", "-", name).strip("-")
    widest = widest_vector(machine.get("vector_flags") or ())
    return f"{family}-{widest}" if widest else family


def results_path(name: str) -> Path:
    """benchmarks/results/<this machine's folder>/<name>: where a script writes by default, and where
    scripts/benchmarks_doc.py reads (the folder is made when the result is written)."""
    from hdlib.models.cpu import describe_machine

    return RESULTS / machine_folder(describe_machine()) / name


def spec_bench_parser(doc: str, methods: str, out: str) -> argparse.ArgumentParser:
    """--questions (Spec-Bench's file, required), --per-task, --split, --max-new-tokens, --methods,
    --out (default: `out` in this machine's results folder)."""
    from hdlib.bench.specbench import SPLITS

    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--questions", type=Path, required=True, help=QUESTIONS_HELP)
    parser.add_argument("--per-task", type=int, default=2)
    parser.add_argument(
        "--split", choices=SPLITS, default=None, help="only this split of the questions (default: all)"
    )
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--methods", default=methods)
    parser.add_argument("--out", type=Path, default=results_path(out))
    return parser


def questions_of(args: argparse.Namespace, half: str | None = None) -> list[Question]:
    """The questions `--questions`, `--split` (or `half`) and `--per-task` choose."""
    from hdlib.bench.specbench import load_questions, per_task, split

    questions = load_questions(args.questions)
    half = half or getattr(args, "split", None)
    return per_task(split(questions, half) if half else questions, args.per_task)


def load(args: argparse.Namespace) -> tuple[list[Question], LoadedModel]:
    from hdlib.models.loading import load_model

    return questions_of(args), load_model("smollm2-135m")


def write_results(
    out: Path | str,
    script: str,
    *,
    lm: LoadedModel | None = None,
    profile: ForwardProfile | None = None,
    serving: bool = False,
    **fields: object,
) -> None:
    """Write a script's results to `out`: its command as run, the date, this machine, the packaged
    model, what made them (`provenance`, `hdlib.bench.provenance`), then `fields`.

    `lm`: the model the script loaded (its kernel choices are recorded); `profile`: the forward profile
    its auto budget weighed drafts against, where it used one (`hdlib.decoding.forward_profile(lm)`,
    as `generate` does); `serving`: it served through vLLM's environment, whose versions are asked
    too. `fields` holding their own `provenance` (a `hdlib bench` run's, made at its start) keep it.
    """
    import json
    import sys
    import time

    from hdlib.bench.provenance import provenance
    from hdlib.models.cpu import describe_machine
    from hdlib.store import write_text_atomic

    if "provenance" not in fields:
        fields = {"provenance": provenance(lm, profile, serving), **fields}
    results = {
        "command": " ".join([f"python -m benchmarks.{script}", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d"),
        "machine": describe_machine(),
        "model": "smollm2-135m",
        **fields,
    }
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(Path(out), json.dumps(results, indent=1) + "\n")
    print(f"written to {out}")
