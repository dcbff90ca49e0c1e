"""What the notebooks say of committed runs and of the theory, checked: a sentence a teacher reads
aloud holds for the files and the engine it names (notebook 04's claims: tests/test_viz_paper_tasks.py and
tests/test_viz_paper_temperature.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "xeon-amx"


def text_of(stem: str) -> str:
    """The notebook's cells, code and markdown, as one line of words (line breaks do not matter)."""
    nb = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", as_version=4)
    return " ".join(" ".join(c.source for c in nb.cells).split())


def identical_questions(raw: Path, method: str) -> tuple[int, int]:
    """(questions whose every turn of `method` equals ar's, questions) in a bench's raw records."""
    same = total = 0
    for line in raw.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if "runs" not in record:
            continue
        total += 1
        same += all(a["digest"] == b["digest"] for a, b in zip(record["runs"]["ar"], record["runs"][method]))
    return same, total


def test_what_notebook_01_says_of_bfloat16_holds():
    text = text_of("01_speculative_decoding")
    said = re.search(r"identical to plain decoding's for only (\d+) of the (\d+) questions", text)
    assert said, "notebook 01 no longer cites the bfloat16 run"
    assert identical_questions(RESULTS / "specbench_bf16.raw.jsonl", "hd") == (int(said[1]), int(said[2]))
    assert json.loads((RESULTS / "specbench_bf16.json").read_text())["dtype"] == "bfloat16"
