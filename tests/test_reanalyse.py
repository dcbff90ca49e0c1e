"""The committed results' intervals are what today's estimators make of their own records
(scripts/reanalyse.py): running it again would change nothing, and it never changes a value."""

from __future__ import annotations

import json

import pytest
from support.results_doc import RESULTS

from scripts.reanalyse import reanalysed, values_kept


@pytest.mark.parametrize("path", sorted(RESULTS.rglob("*.json")), ids=lambda p: p.relative_to(RESULTS).as_posix())
def test_a_committed_results_intervals_are_todays_estimators_of_its_records(path):
    again = reanalysed(path)
    if again is None:
        pytest.skip("not a file the script reads, or one with its provenance (kept as it came out)")
    assert again == json.loads(path.read_text(encoding="utf-8"))


def test_a_value_that_would_change_is_named():
    assert values_kept({"a": {"value": 1.0, "low": 0.5}}, {"a": {"value": 1.0, "low": 0.7}}) == []
    assert values_kept({"a": {"value": 1.0}}, {"a": {"value": 1.1}}) == [".a.value"]
