"""docs/notebooks.md's class plan fits its hour: reading, measured running and exercises per slot
(scripts/lesson_plan.py computes it; these tests fail when a notebook grows past its slot, a cell
changes without being measured again, or the committed plan is not the computed one)."""

from __future__ import annotations

import json

import pytest

from scripts.lesson_plan import (
    BFLOAT16_LIMIT_S,
    CLASS_MINUTES,
    DOC,
    LATER,
    NOTEBOOKS,
    PLAN,
    PLAN_MINUTES,
    TIMINGS,
    WORDS_PER_MINUTE,
    in_class_cells,
    need,
    plan_markdown,
    read_aloud,
    shows,
)


@pytest.fixture(scope="module")
def timings() -> dict:
    return json.loads(TIMINGS.read_text(encoding="utf-8"))


def test_folded_text_is_not_read_aloud():
    assert read_aloud("one two <details><summary>More</summary>\n\nthree four five\n</details> six") == 3


def test_what_a_cell_shows_is_its_last_expression_or_what_it_prints():
    assert shows("fig = figure()\nfig") == "figure" and shows("view") == "figure"
    assert shows("x = 1\nprint(x)") == "printed" and shows("for a in b:\n    print(a)\nx = 2") == "printed"
    assert shows("x = 1") is None and shows("print(1)") == "printed"


def test_the_plan_reads_at_150_words_a_minute_and_gives_each_figure_and_printout_its_minutes(timings):
    """The issue's reading speed, and every in-class cell that shows something counted in its slot."""
    assert WORDS_PER_MINUTE == 150
    for slot in PLAN:
        if slot.notebook:
            shown = [shows(c.source) for c in in_class_cells(slot.notebook) if c.cell_type == "code"]
            n = need(slot, timings)
            assert (n.figures, n.printed) == (shown.count("figure"), shown.count("printed")), slot.notebook
            assert n.figures > 0, slot.notebook


def test_the_plan_fits_in_its_minutes_with_slack(timings):
    assert sum(slot.minutes for slot in PLAN) <= PLAN_MINUTES <= CLASS_MINUTES - 10
    needs = {slot.what: need(slot, timings) for slot in PLAN}
    for slot in PLAN:
        assert needs[slot.what].minutes <= slot.minutes, (slot.what, needs[slot.what])
    assert sum(n.minutes for n in needs.values()) <= PLAN_MINUTES


def test_every_in_class_cell_was_measured_as_it_now_reads(timings):
    for slot in PLAN:
        if slot.notebook:
            assert need(slot, timings).unmeasured == (), f"{slot.notebook}: python -m scripts.lesson_plan --measure"


def test_every_notebook_was_measured_in_bfloat16_within_its_limit(timings):
    assert set(timings["bfloat16_s"]) == {p.stem for p in NOTEBOOKS.glob("*.ipynb")}
    assert max(timings["bfloat16_s"].values()) < BFLOAT16_LIMIT_S, timings["bfloat16_s"]


def test_the_docs_show_the_computed_plan(timings):
    assert plan_markdown(timings) in DOC.read_text(encoding="utf-8"), "python -m scripts.lesson_plan --write"


def test_the_plan_covers_every_notebook():
    planned = {slot.notebook for slot in PLAN if slot.notebook} | set(LATER)
    assert planned == {p.stem for p in NOTEBOOKS.glob("*.ipynb")}


def test_what_the_docs_say_of_the_run_times_holds(timings):
    doc = " ".join(DOC.read_text(encoding="utf-8").split())
    for slot in PLAN:
        if slot.notebook:
            assert need(slot, timings).run_s < 40, slot.notebook  # "the in-class part of each runs in under 40 seconds"
    whole_04 = sum(timings["notebooks"]["04_order_ablation"].values())
    assert f"all of 04, with its live run after class, took {whole_04:.0f} s" in doc
    slowest = max(timings["bfloat16_s"], key=timings["bfloat16_s"].get)
    assert f"each took at most {timings['bfloat16_s'][slowest]:.0f} s top to bottom ({slowest[:2]};" in doc
