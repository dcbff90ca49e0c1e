"""hdlib.viz.step_settings: the step-through's logic without widgets (its widgets' tests:
tests/test_viz_step_through.py)."""

from __future__ import annotations

from pathlib import Path

import hdlib
from hdlib import viz


def test_prompt_choices_reads_the_project_prompt_set():
    choices = viz.prompt_choices()
    path = Path(hdlib.__file__).resolve().parents[1] / "data" / "prompts" / "prompts.jsonl"
    assert len(choices) == len(path.read_text().strip().splitlines())
    assert all(text.strip() for text in choices.values())
