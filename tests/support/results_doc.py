"""What the tests of docs/benchmarks.md and of the results' provenance share (tests/test_benchmarks_doc.py,
tests/test_provenance.py): the generator, the committed results, and a copy of them to change."""

from __future__ import annotations

import importlib
import json
import os
import shutil
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
DOC = ROOT / "docs" / "benchmarks.md"


def generator() -> ModuleType:
    """scripts/benchmarks_doc.py, as `python -m scripts.benchmarks_doc` imports it from the root."""
    return importlib.import_module("scripts.benchmarks_doc")


def linked_copy(tmp_path: Path) -> Path:
    """benchmarks/results/ as links to the committed files (a file to change is replaced by a copy)."""
    copy = tmp_path / "results"
    shutil.copytree(RESULTS, copy, copy_function=os.symlink)
    return copy


def rewrite(path: Path, change) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.unlink()
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
