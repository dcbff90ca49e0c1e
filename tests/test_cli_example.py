"""The README's and docs/cli.md's command-line example is a committed run's output
(benchmarks/cli_example.py), as it printed it, with what made it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("page", ["README.md", "docs/cli.md"])
def test_the_example_is_the_committed_runs_output_as_it_printed_it(page):
    [found] = sorted((ROOT / "benchmarks" / "results").glob("*/cli_example.json"))
    run = json.loads(found.read_text(encoding="utf-8"))
    block = f"```console\n$ {run['cli']}\n{run['output']}\n```"
    text = (ROOT / page).read_text(encoding="utf-8")
    assert block in text
    assert f"benchmarks/results/{found.parent.name}/cli_example.json" in text.replace("\n", " ")
    assert run["provenance"]["clean"] is True and run["command"] == "python -m benchmarks.cli_example"
