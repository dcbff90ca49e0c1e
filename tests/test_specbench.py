"""Spec-Bench questions (`hdlib.bench.specbench`): good input read right, bad input refused clearly."""

from __future__ import annotations

import json

import pytest

from hdlib.bench.specbench import load_questions, per_task
from hdlib.errors import HDError


def write(path, rows):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_tasks_and_per_task(tmp_path):
    rows = [
        {"question_id": 1, "category": "writing", "turns": ["a", "b"]},
        {"question_id": 2, "category": "coding", "turns": ["c", "d"]},
        {"question_id": 3, "category": "rag", "turns": ["e"]},
        {"question_id": 4, "category": "translation", "turns": ["f"]},
        {"question_id": 5, "category": "rag", "turns": ["g"]},
    ]
    qs = load_questions(write(tmp_path / "q.jsonl", rows))
    assert [q.task for q in qs] == ["mt_bench", "mt_bench", "rag", "translation", "rag"]
    assert [q.question_id for q in per_task(qs, 1)] == [1, 4, 3]  # Spec-Bench's task order
    assert [q.question_id for q in per_task(qs, None, ["rag"])] == [3, 5]
    assert [q.question_id for q in per_task(qs, None, ["rag", "translation", "rag"])] == [4, 3, 5]  # named: same order
    with pytest.raises(HDError, match="unknown task"):
        per_task(qs, 1, ["poetry"])


@pytest.mark.parametrize(
    "bad, message",
    [
        ("{not json", "line 2"),
        (json.dumps({"question_id": 9, "turns": ["x"]}), "line 2"),
        (json.dumps({"question_id": 9, "category": "qa", "turns": []}), "no turns"),
    ],
)
def test_a_malformed_line_stops_with_its_number(tmp_path, bad, message):
    path = write(tmp_path / "q.jsonl", [{"question_id": 1, "category": "qa", "turns": ["a"]}, bad])
    with pytest.raises(HDError, match=message):
        load_questions(path)


def test_missing_file(tmp_path):
    with pytest.raises(HDError, match="cannot read questions file"):
        load_questions(tmp_path / "nope.jsonl")


