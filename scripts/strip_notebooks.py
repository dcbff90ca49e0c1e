#!/usr/bin/env python3
"""Keep notebooks as committed source: no outputs, no execution counts, no volatile metadata.

    python scripts/strip_notebooks.py            # strip every notebook in notebooks/, in place
    python scripts/strip_notebooks.py --check    # exit 1, naming them, if any notebook is not clean
    python scripts/strip_notebooks.py A.ipynb    # only these files

Outputs hold plots, widget state and timings that change on every run and make diffs unreadable;
the test suite executes the notebooks anyway. Written as nbformat writes (sorted keys, indent 1),
so a notebook saved by JupyterLab and then stripped differs only where it was edited.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
VOLATILE_NOTEBOOK_KEYS = ("widgets", "language_info", "vscode", "toc")  # widget state, kernel versions, editors
VOLATILE_CELL_KEYS = ("execution", "ExecuteTime", "collapsed", "scrolled")  # timings, view state


def strip(nb: dict) -> dict:
    """The notebook without outputs, execution counts and volatile metadata (a new dict)."""
    nb = json.loads(json.dumps(nb))
    for key in VOLATILE_NOTEBOOK_KEYS:
        nb.get("metadata", {}).pop(key, None)
    for cell in nb.get("cells", []):
        for key in VOLATILE_CELL_KEYS:
            cell.get("metadata", {}).pop(key, None)
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    return nb


def dumps(nb: dict) -> str:
    return json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks (default: every notebooks/*.ipynb)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a notebook is not clean")
    args = parser.parse_args(argv)
    paths = args.paths or sorted(NOTEBOOKS.glob("*.ipynb"))
    dirty = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        clean = dumps(strip(json.loads(text)))
        if clean != text:
            dirty.append(path)
            if not args.check:
                path.write_text(clean, encoding="utf-8")
    verb = "not clean (run: python scripts/strip_notebooks.py)" if args.check else "stripped"
    for path in dirty:
        print(f"{path}: {verb}", file=sys.stderr if args.check else sys.stdout)
    return 1 if args.check and dirty else 0


if __name__ == "__main__":
    sys.exit(main())
