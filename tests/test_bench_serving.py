"""vLLM's engines as bench methods (`hdlib.bench.serving`): their names, HD's proposer settings in them,
the second pass in vLLM's environment and a kill passed on to it."""

from __future__ import annotations

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
