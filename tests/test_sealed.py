"""The sealed split and its plan (benchmarks/plans/sealed_issue57.md, and its addendum): no committed
result asks a sealed question but the runs the plan names and their readings (scripts/reanalyse.py
`--out`); those runs are the plan's commands as written (`--resume` where a run was continued, as
the addendum says), made from clean checkouts of commits that already held the plan."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from hdlib.bench.specbench import Question, split

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PLAN = ROOT / "benchmarks" / "plans" / "sealed_issue57.md"
SEALED_IDS = [*range(147, 151), *range(156, 161), *(i for start in (232, 312, 392, 472, 552)
                                                    for i in range(start, start + 9))]  # fmt: skip


def planned() -> dict[str, str]:
    """The plan's commands, by the results file each writes (relative to benchmarks/results/)."""
    text = PLAN.read_text(encoding="utf-8")
    commands = [" ".join(block.replace("\\\n", " ").split()) for block in re.findall(r"```\n(.*?)```", text, re.S)]
    return {re.search(r"--out benchmarks/results/(\S+)", c).group(1): c for c in commands}  # type: ignore[union-attr]


def asked(path: Path) -> Iterator[int]:
    """The question ids a results file (or its raw records: a bench's one answer a line, a served run's
    one block of answers a line, each after a line of settings) holds answers to."""
    if path.name.endswith(".raw.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines()[1:]:
            yield from (int(i) for i in re.findall(r'"question_id": (\d+)', line))
        return
    text = path.read_text(encoding="utf-8")
    yield from (int(i) for i in re.findall(r'"question_id": (\d+)', text))
    for ids in re.findall(r'"question_ids": \[([^\]]*)\]', text):
        yield from (int(i) for i in re.findall(r"\d+", ids))


def test_the_sealed_split_is_each_tasks_last_9_of_spec_benchs_non_dev_questions():
    """On Spec-Bench's layout (its categories and their sizes, in file order): 54 questions, these."""
    sizes = [(c, 10) for c in ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem",
                                "humanities")] + [(c, 80) for c in ("translation", "summarization", "qa",
                                                                    "math_reasoning", "rag")]  # fmt: skip
    rows, qid = [], 81
    for category, n in sizes:
        rows += [Question(qid + i, category, ("x",)) for i in range(n)]
        qid += n
    assert [q.question_id for q in split(rows, "sealed")] == SEALED_IDS


READINGS = {"epyc-avx512/sealed_bench_reread.json": "epyc-avx512/sealed_bench.json",
            "epyc-avx512/sealed_bench_undisturbed.json": "epyc-avx512/sealed_bench.json",
            "epyc-avx512/sealed_served_plan.json": "epyc-avx512/sealed_served.json"}  # fmt: skip
UNDISTURBED = "59-74"  # the addendum's disturbed records of the bench


def test_no_committed_result_asks_a_sealed_question_but_the_planned_runs():
    allowed = {*planned(), *(rel.replace(".json", ".raw.jsonl") for rel in planned()), *READINGS}
    sealed = set(SEALED_IDS)
    for path in sorted(p for p in RESULTS.rglob("*") if p.suffix in (".json", ".jsonl")):
        rel = path.relative_to(RESULTS).as_posix()
        touched = sealed.intersection(asked(path))
        assert rel in allowed or not touched, f"{rel} asks sealed questions {sorted(touched)[:5]}"


def test_the_plan_names_its_two_runs_with_the_sealed_split():
    runs = planned()
    assert set(runs) == {"epyc-avx512/sealed_bench.json", "epyc-avx512/sealed_served.json"}
    assert all("--split sealed" in c for c in runs.values())


@pytest.mark.parametrize("rel", sorted(planned()))
def test_a_planned_run_is_the_plans_command_from_a_clean_commit_that_held_the_plan(rel):
    path = RESULTS / rel
    if not path.exists():
        pytest.skip(f"{rel}: not run yet")
    data = json.loads(path.read_text(encoding="utf-8"))
    made = data["provenance"]
    recorded = [a for a in shlex.split(data["command"]) if a != "--resume"]
    wanted = shlex.split(planned()[rel])
    assert recorded[recorded.index("--questions") + 2 :] == wanted[wanted.index("--questions") + 2 :]
    for made in [made, *(s["provenance"] for s in data.get("starts", []))]:  # every start of a run continued
        assert made["clean"] is True and made["commit"]
        held = subprocess.run(["git", "cat-file", "-e", f"{made['commit']}:{PLAN.relative_to(ROOT)}"], cwd=ROOT,
                              capture_output=True)  # fmt: skip
        if held.returncode != 0 and b"Not a valid object name" in held.stderr:
            pytest.skip("this clone does not hold the run's commit (a shallow clone)")
        assert held.returncode == 0, f"{rel} was made at {made['commit']}, which does not hold the plan"


@pytest.mark.parametrize("rel", sorted(READINGS))
def test_a_reading_of_a_planned_run_is_its_records_read_again_and_says_which(rel):
    """The readings beside a sealed run: its command, provenance and every value, other intervals (the
    check without the disturbed records: without those the addendum names, and saying so)."""
    from scripts.reanalyse import PLAN_READING, REREAD, WITHOUT, reanalysed, records

    path, run = RESULTS / rel, RESULTS / READINGS[rel]
    if not path.exists():
        pytest.skip(f"{rel}: not made yet")
    data = json.loads(path.read_text(encoding="utf-8"))
    plan, without = rel.endswith("_plan.json"), rel.endswith("_undisturbed.json")
    assert data["analysis"].startswith(WITHOUT) if without else data["analysis"] == (PLAN_READING if plan else REREAD)
    dropped = frozenset(records(UNDISTURBED)) if without else frozenset()
    if without:
        assert "records 59 to 74" in (ROOT / "benchmarks" / "plans" / "sealed_issue57_addendum.md").read_text()
    assert data == reanalysed(run, again=True, plan=plan, without=dropped)
