"""The raw results file (`hdlib.bench.log`): a run interrupted or killed keeps what it answered and
resumes where it stopped, on this machine or another; other settings are refused."""

from __future__ import annotations

import json
import os
import signal

import pytest
from support.bench_inputs import bench_argv, write_questions

import hdlib.bench.run
import hdlib.models.cpu
from hdlib.bench import BenchResults, QuestionRuns, Turn
from hdlib.bench.log import ResultsLog, raw_path, run_settings
from hdlib.bench.specbench import Question
from hdlib.cli import main
from hdlib.errors import HDError


def structure(results):
    """The results without the measured numbers: keys, tasks, settings, identity (not how and when
    the command was given)."""
    return {
        "top": {k: v for k, v in results.items() if k not in ("methods", "command", "date", "comparisons")},
        "pairs": [(c["a"], c["b"]) for c in results.get("comparisons", [])],
        "methods": {
            name: {
                "metrics": sorted(m["overall"]),
                "tasks": list(m["tasks"]),
                "identical": m["overall"]["identical_frac"],
            }
            for name, m in results["methods"].items()
        },
    }


def test_an_interrupted_run_resumes_where_it_stopped(capsys, folder, tmp_path, monkeypatch):
    questions = write_questions(tmp_path / "q.jsonl")
    whole, part = tmp_path / "whole.json", tmp_path / "part.json"
    assert main(bench_argv(folder, questions, whole)) == 0

    append = ResultsLog.append

    def interrupt_after_first(self, answered):
        append(self, answered)
        raise KeyboardInterrupt

    monkeypatch.setattr(ResultsLog, "append", interrupt_after_first)
    capsys.readouterr()
    assert main(bench_argv(folder, questions, part)) == 130
    err = capsys.readouterr().err
    assert "1 of 4 questions done" in err and err.rstrip().endswith(f"--out {part} --resume")
    assert not part.exists()
    first = raw_path(part).read_text().splitlines()
    assert len(first) == 2

    monkeypatch.setattr(ResultsLog, "append", append)
    assert main(bench_argv(folder, questions, part)) == 2  # no silent overwrite of a started run
    assert "pass --resume" in capsys.readouterr().err
    assert main(bench_argv(folder, questions, part, "--resume")) == 0
    lines = raw_path(part).read_text().splitlines()
    assert lines[:2] == first  # the answered question was kept, not answered again
    assert sorted(json.loads(line)["question_id"] for line in lines[1:]) == [11, 12, 13, 14]
    assert structure(json.loads(part.read_text())) == structure(json.loads(whole.read_text()))


def test_a_run_resumed_on_another_machine_says_so_and_gives_each_machines_ratios(capsys, folder, tmp_path, monkeypatch):
    questions = write_questions(tmp_path / "q.jsonl")
    out = tmp_path / "moved.json"
    append = ResultsLog.append

    def interrupt_after_first(self, answered):
        append(self, answered)
        raise KeyboardInterrupt

    monkeypatch.setattr(ResultsLog, "append", interrupt_after_first)
    assert main(bench_argv(folder, questions, out)) == 130
    monkeypatch.setattr(ResultsLog, "append", append)
    here = hdlib.models.cpu.describe_machine()
    elsewhere = {"cpu": "Elsewhere CPU", "vector_flags": ["avx", "avx2"], "threads": 2, "torch": "x"}
    monkeypatch.setattr(hdlib.models.cpu, "describe_machine", lambda: elsewhere)
    monkeypatch.setattr(hdlib.bench.run, "describe_machine", lambda: elsewhere)
    capsys.readouterr()
    assert main(bench_argv(folder, questions, out, "--resume")) == 0
    said = capsys.readouterr()
    assert "answered on another machine than this one (Elsewhere CPU, avx2, 2 threads)" in said.err
    rows = [json.loads(line) for line in raw_path(out).read_text().splitlines()[1:]]
    assert [r["machine"] for r in rows] == [here, elsewhere, elsewhere, elsewhere]  # each question's own
    data = json.loads(out.read_text())
    assert data["machine"] == elsewhere
    split = data["by_machine"]
    assert [p["machine"] for p in split] == [here, elsewhere]
    ids = [r["question_id"] for r in rows]
    assert [sorted(p["question_ids"]) for p in split] == [ids[:1], sorted(ids[1:])]
    assert all(list(p["methods"]) == list(data["methods"]) for p in split)
    assert split[0]["methods"]["ar"] == {"speedup": 1.0, "mat": 1.0}
    assert "answered on several machines" in said.out and "Elsewhere CPU, avx2, 2 threads (3 q)" in said.out
    assert BenchResults.from_json(data).by_machine == split  # read back as written
    monkeypatch.setattr(hdlib.bench.run, "describe_machine", lambda: here)
    again = tmp_path / "again.json"
    assert main(bench_argv(folder, questions, again)) == 0  # one machine: no split, no warning
    assert "by_machine" not in json.loads(again.read_text()) and "another machine" not in capsys.readouterr().err


def test_a_kill_stops_a_run_as_ctrl_c_does(capsys, folder, tmp_path, monkeypatch):
    questions = write_questions(tmp_path / "q.jsonl")
    out = tmp_path / "killed.json"
    append, before = ResultsLog.append, signal.getsignal(signal.SIGTERM)

    def kill_after_first(self, answered):
        append(self, answered)
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(ResultsLog, "append", kill_after_first)
    assert main(bench_argv(folder, questions, out)) == 130
    assert "1 of 4 questions done" in capsys.readouterr().err and not out.exists()
    assert len(raw_path(out).read_text().splitlines()) == 2  # the answered question kept
    assert signal.getsignal(signal.SIGTERM) == before  # the handler is the run's only


def test_resume_refuses_other_settings_and_drops_a_cut_line(tmp_path):
    questions = [Question(1, "qa", ("a",)), Question(2, "qa", ("b",))]
    settings = run_settings("m", "cpu", 0.0, 8, ["ar", "hf"], questions)
    turn = Turn(3, 3, 0.1, 0.0, 0.01, 0.1, {"bonus": 3}, "abc")
    path = tmp_path / "r.raw.jsonl"
    log = ResultsLog(path, settings, resume=False)
    log.append(QuestionRuns(1, "qa", {"ar": [turn], "hf": [turn]}))
    with path.open("a") as f:
        f.write('{"question_id": 2, "task": "qa", "ru')  # a write cut short
    resumed = ResultsLog(path, settings, resume=True)
    assert [a.question_id for a in resumed.done] == [1] and resumed.done[0].runs["hf"] == [turn]
    resumed.append(QuestionRuns(2, "qa", {"ar": [turn], "hf": [turn]}))
    assert [a.question_id for a in ResultsLog(path, settings, resume=True).done] == [1, 2]

    other = run_settings("m", "cpu", 0.0, 16, ["ar", "hf"], questions)
    with pytest.raises(HDError, match="other settings.*max_new_tokens: 8 there, 16 now"):
        ResultsLog(path, other, resume=True)
    changed = run_settings("m", "cpu", 0.0, 8, ["ar", "hf"], [Question(1, "qa", ("a!",)), questions[1]])
    with pytest.raises(HDError, match="questions_digest"):
        ResultsLog(path, changed, resume=True)
