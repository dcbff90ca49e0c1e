"""Spec-Bench's questions (`hdlib.bench.specbench`): bad lines reported and skipped, tasks chosen, the
dev and report halves."""

from __future__ import annotations

import json

import pytest
from support.bench_inputs import ROWS, bench_argv, write_questions

from hdlib.bench.log import raw_path
from hdlib.bench.specbench import Question, load_questions, per_task, split
from hdlib.cli import main
from hdlib.errors import HDError


def test_bad_lines_are_reported_with_their_number_and_skipped(tmp_path):
    rows = [
        ROWS[0],
        "{not json",
        json.dumps({"question_id": "12", "category": "qa", "turns": ["x"]}),
        json.dumps({"question_id": 11, "category": "qa", "turns": ["again"]}),
        json.dumps({"question_id": 15, "category": "qa", "turns": "not a list"}),
        json.dumps({"question_id": 16, "category": "qa", "turns": ["  "]}),
        ROWS[1],
    ]
    path = write_questions(tmp_path / "q.jsonl", rows)
    reported: list[str] = []
    questions = load_questions(path, on_bad_line=reported.append)
    assert [q.question_id for q in questions] == [11, 12]
    assert [m.split(", line ")[1].split(":")[0] for m in reported] == ["2", "3", "4", "5", "6"]
    assert "repeats line 1" in reported[2] and "empty turn" in reported[4]
    with pytest.raises(HDError, match="line 2"):
        load_questions(path)  # without a reporter the first bad line stops the reading
    with pytest.raises(HDError, match="no valid question"):
        load_questions(write_questions(tmp_path / "bad.jsonl", rows[1:3]), on_bad_line=reported.append)


def test_cli_tasks_keeps_only_their_questions(capsys, folder, tmp_path):
    questions = write_questions(tmp_path / "q.jsonl")
    out = tmp_path / "r.json"
    assert main(bench_argv(folder, questions, out, "--tasks", "rag, translation,rag")) == 0
    results = json.loads(out.read_text())
    assert results["questions"] == 3 and set(results["methods"]["ar"]["tasks"]) == {"translation", "rag"}
    raw = [json.loads(line) for line in raw_path(out).read_text().splitlines()[1:]]
    assert [r["question_id"] for r in raw] == [13, 12, 14]  # Spec-Bench's task order, then file order


def test_cli_refuses_bad_questions_before_loading_the_model(capsys, tmp_path, no_model_load):
    cases = [
        (tmp_path / "missing.jsonl", "cannot read questions file"),
        (write_questions(tmp_path / "bad.jsonl", ["{not json", "[1, 2]"]), "holds no valid question"),
        (
            write_questions(tmp_path / "task.jsonl", [{"question_id": 1, "category": "poetry", "turns": ["x"]}]),
            "unknown task",
        ),
    ]
    errors = []
    for path, message in cases:
        assert main(["bench", "--questions", str(path), "--out", str(tmp_path / "r.json")]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.strip().splitlines()[-1].startswith("hdlib: error: ") and message in err, err
        errors.append(err.splitlines())
    assert [line.split(", line ")[1][0] for line in errors[1][:2]] == ["1", "2"]  # each skipped line reported


def test_the_split_gives_each_category_first_half_to_dev_and_of_the_rest_each_tasks_last_9_in_40_to_sealed():
    rows = [Question(i, cat, ("x",)) for cat, n in (("writing", 10), ("coding", 10), ("qa", 80), ("rag", 5)) for i in
            range(1000 * len(cat), 1000 * len(cat) + n)]  # fmt: skip
    dev, report, sealed = split(rows, "dev"), split(rows, "report"), split(rows, "sealed")
    # qa: 40 not dev, the last 9 sealed; mt_bench (writing, coding): 10 not dev, the last 2 sealed; rag: 3, none
    assert len(dev) == 5 + 5 + 40 + 2 and len(report) == 8 + 31 + 3 and len(sealed) == 2 + 9
    ids = [{q.question_id for q in s} for s in (dev, report, sealed)]
    assert ids[0].isdisjoint(ids[1]) and ids[0].isdisjoint(ids[2]) and ids[1].isdisjoint(ids[2])
    assert sorted(dev + report + sealed, key=rows.index) == rows
    by_cat = {c: [q for q in rows if q.category == c] for c in ("writing", "coding", "qa", "rag")}
    assert [q for q in dev if q.category == "qa"] == by_cat["qa"][:40]  # the first half, in file order
    assert [q for q in report if q.category == "rag"] == by_cat["rag"][2:]
    assert [q for q in sealed if q.category == "qa"] == by_cat["qa"][71:]  # the task's last 9 of its 40
    assert sealed[:2] == by_cat["coding"][8:]  # MT-bench's categories as one task: its last questions
    assert per_task(report, 3)[:3] == by_cat["writing"][5:8]  # --split report --per-task 3: the report half's first
    with pytest.raises(HDError, match="unknown split 'test'"):
        split(rows, "test")
