"""vLLM's engines as bench methods (`hdlib.bench.serving`): their names, HD's proposer settings in them,
the second pass in vLLM's environment and a kill passed on to it."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from hdlib.bench import Method, parse_methods
from hdlib.errors import HDError


def test_hds_proposer_in_vllm_takes_its_tier_order_in_its_name():
    from hdlib.bench.serving import TIERS_ENV, vllm_method

    assert Method.parse("vllm-hd:sc").serving and Method.parse("vllm-hd").serving
    assert vllm_method("vllm-hd:sc") == ("vllm-hd", {TIERS_ENV: "SC"})  # the engine starts with it
    assert vllm_method("vllm-suffix") == ("vllm-suffix", {}) and vllm_method("hd:SC") is None
    for bad, message in [("vllm-hd:CR", "C, M, S"), ("vllm-hd:CC", "each once"), ("vllm-hd:CS@8", "fixed budget")]:
        with pytest.raises(HDError, match=message):
            Method.parse(bad)


def test_hds_proposer_in_vllm_takes_its_drafts_cost_and_clock_in_its_name():
    from hdlib.bench.serving import vllm_method
    from hdlib.serving.proposer import CLOCK_ENV, COST_SCALE_ENV, TIERS_ENV

    assert vllm_method("vllm-hd+cost=0.5") == ("vllm-hd", {COST_SCALE_ENV: "0.5"})
    assert vllm_method("vllm-hd:SC+cost=2") == ("vllm-hd", {TIERS_ENV: "SC", COST_SCALE_ENV: "2.0"})
    assert vllm_method("vllm-hd+clock=0") == ("vllm-hd", {CLOCK_ENV: "0"})
    assert vllm_method("vllm-hd:CS+clock=1+cost=1.5") == (
        "vllm-hd", {TIERS_ENV: "CS", CLOCK_ENV: "1", COST_SCALE_ENV: "1.5"}
    )  # fmt: skip
    assert Method.parse("vllm-hd+cost=0").serving and Method.parse("vllm-hd+clock=0").serving
    assert vllm_method("hd+cost=1") is None
    for bad, message in [("vllm-hd+cost=-1", "at least 0"), ("vllm-hd+cost=x", "at least 0"),
                         ("vllm-hd+clock=2", "0 or 1"), ("vllm-hd+speed=1", "0 or 1"),
                         ("vllm-suffix+cost=1", "only vllm-hd"), ("vllm+clock=0", "only vllm-hd")]:  # fmt: skip
        with pytest.raises(HDError, match=message):
            vllm_method(bad)


def test_the_vllm_methods_by_name_and_their_second_pass():
    from hdlib.bench.serving import second_pass_path, strip_options

    methods = {m.name: m for m in parse_methods("vllm,vllm-ngram,vllm-suffix")}
    assert all(methods[n].serving and not methods[n].drafts for n in ("vllm", "vllm-ngram", "vllm-suffix"))
    with pytest.raises(HDError, match="only the methods hdlib verifies"):
        parse_methods("vllm-ngram@8")
    argv = ["bench", "--methods", "hd,vllm", "--out=r.json", "--per-task", "2", "--html", "r.html", "--resume"]
    assert strip_options(argv, {"--methods", "--out", "--html"}) == ["bench", "--per-task", "2", "--resume"]
    assert second_pass_path("results/field.json") == Path("results/field-vllm.json")


def test_a_killed_bench_passes_the_kill_on_to_its_vllm_pass(tmp_path, monkeypatch):
    from hdlib.bench import serving

    mark = tmp_path / "mark"
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!/bin/sh\ntrap 'echo stopped > {mark}; exit 130' TERM\necho started > {mark}\n"
                      "while true; do sleep 0.05; done\n")  # fmt: skip
    python.chmod(0o755)
    monkeypatch.setattr(serving, "VLLM_VENV", python.parent.parent)

    def kill_once_started():
        while not mark.exists():
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=kill_once_started, daemon=True).start()
    with pytest.raises(serving.Terminated), serving.stop_on_terminate():
        serving.second_pass(["bench", "--methods", "vllm", "--out", "r.json"], ["vllm"], tmp_path / "r.json")
    assert mark.read_text() == "stopped\n"  # the vLLM pass was told, and has ended


def test_each_compare_pair_goes_to_the_pass_that_runs_both_its_methods(tmp_path, monkeypatch, folder, capsys):
    """The new user's command: --compare hd:C,hf-pld is made in the first pass, --compare
    vllm-hd,vllm-suffix in vLLM's, which is handed that pair alone (it used to get both, and refuse the
    first after the first pass had run); an A/A arm of a vLLM method reaches vLLM's pass named again."""
    from support.bench_inputs import write_questions

    from hdlib.bench import serving
    from hdlib.cli import main

    handed = {}
    monkeypatch.setattr(serving, "has_vllm", lambda: False)
    monkeypatch.setattr(serving, "second_pass", lambda argv, later, out, compare=(): handed.update(
        later=later, compare=list(compare)) or 0)  # fmt: skip
    out = tmp_path / "r.json"
    argv = ["bench", "--questions", str(write_questions(tmp_path / "q.jsonl")), "--model", str(folder),
            "--methods", "hf-pld,hd:C,vllm-hd,vllm-suffix,vllm-hd", "--max-new-tokens", "4", "--out", str(out),
            "--compare", "hd:C,hf-pld", "--compare", "vllm-hd,vllm-suffix"]  # fmt: skip
    assert main(argv) == 0
    assert [(c["a"], c["b"]) for c in json.loads(out.read_text())["comparisons"]][0] == ("hd:C", "hf-pld")
    assert handed == {"later": ["vllm-hd", "vllm-suffix", "vllm-hd#2"], "compare": [("vllm-hd", "vllm-suffix")]}


def test_the_vllm_pass_is_given_its_own_pairs_and_methods_by_name(tmp_path, monkeypatch):
    from hdlib.bench import serving

    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    seen = tmp_path / "argv"
    python.write_text(f'#!/bin/sh\necho "$@" > {seen}\n')
    python.chmod(0o755)
    monkeypatch.setattr(serving, "VLLM_VENV", python.parent.parent)
    argv = ["bench", "--methods", "hd,vllm-hd,vllm-hd", "--compare", "hd,ar", "--compare=vllm-hd#2,vllm-hd",
            "--out", "r.json"]  # fmt: skip
    assert serving.second_pass(argv, ["vllm-hd", "vllm-hd#2"], tmp_path / "r.json", [("vllm-hd#2", "vllm-hd")]) == 0
    args = seen.read_text().split()
    assert args[args.index("--methods") + 1] == "vllm-hd,vllm-hd" and "hd,ar" not in args
    assert args.count("--compare") == 1 and args[args.index("--compare") + 1] == "vllm-hd#2,vllm-hd"
