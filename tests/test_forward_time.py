"""Forward time (`hdlib.engine.forward_time`): the profile of forward(k) interpolated and extended past
its measured counts, timed on a grid of k, and keyed by everything its times depend on; measured
robustly (a noisy or falling k timed again, a busy machine's profile used but not kept), and read
from a file.

No GPU is needed: CUDA's answers (the device's name) are monkeypatched; a fake timer stands for the
machine, so no test depends on this machine's speed.
"""

from __future__ import annotations

import json
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from support.tiny import tiny_llama

import hdlib.engine.forward_time
from hdlib.engine import forward_time
from hdlib.engine.forward_time import ForwardProfile, load_or_measure, measure_forward, profile_key, read_profile
from hdlib.errors import HDError

CPU_LIKE = ForwardProfile(tuple([0.055] + [0.09 + 0.002 * k for k in range(1, 64)]), 256, "cpu-like")
FLAT = ForwardProfile(tuple([0.05] * 64), 256, "flat")


def test_forward_time_is_interpolated_and_extended_beyond_the_measured_counts():
    assert CPU_LIKE.forward_s(1) == pytest.approx(0.055) and CPU_LIKE.forward_s(2.5) == pytest.approx(0.093)
    # Beyond 64 tokens it keeps growing along its line (0.002 s a token here), not stuck at forward(64).
    assert CPU_LIKE.forward_s(80) == pytest.approx(CPU_LIKE.seconds[-1] + 16 * 0.002)
    assert FLAT.forward_s(np.array([64.0, 200.0])).tolist() == pytest.approx([0.05, 0.05])
    assert np.isnan(CPU_LIKE.forward_s(np.nan))


def test_the_forward_profile_times_a_grid_of_k_and_interpolates_between():
    """Every k up to 16, then every fourth and the last; the k between lie on the line between."""
    timed = []

    def timer(k):
        timed.append(k)
        return 0.010 + 0.001 * k + (0.005 if k >= 4 else 0)  # a step at 4 rows

    profile = measure_forward(tiny_llama(), context_len=4, max_k=30, repeats=1, timer=timer)
    grid = [*range(1, 17), 20, 24, 28, 30]
    assert forward_time.measured_ks(30) == grid and sorted(set(timed)) == grid
    assert len(profile.seconds) == 30 and profile.ks == tuple(grid)
    for k in grid:
        assert profile.seconds[k - 1] == pytest.approx(0.015 + 0.001 * k if k >= 4 else 0.010 + 0.001 * k)
    assert profile.seconds[21] == pytest.approx((profile.seconds[19] + profile.seconds[23]) / 2)  # k = 22
    with pytest.raises(HDError, match="ks must hold both"):
        measure_forward(tiny_llama(), context_len=4, max_k=30, ks=[1, 8], timer=timer)


def test_a_real_pass_is_timed_through_the_verifier():
    timer = forward_time.pass_timer(tiny_llama(), context_len=8, max_k=4)
    assert all(0 < timer(k) < 10 for k in (1, 4))


def test_the_profile_key_names_dtype_device_torch_and_cuda(monkeypatch):
    model = tiny_llama()
    key = profile_key(model, 256, 64)
    assert profile_key(model, 256, 64) == key
    assert profile_key(tiny_llama().to(torch.bfloat16), 256, 64) != key

    monkeypatch.setattr(hdlib.engine.forward_time, "_cpu_name", lambda: "Another CPU")
    assert profile_key(model, 256, 64) != key
    monkeypatch.undo()
    assert profile_key(model, 256, 64) == key

    monkeypatch.setattr(torch, "__version__", "0.0.1")
    assert profile_key(model, 256, 64) != key
    monkeypatch.undo()
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    assert profile_key(model, 256, 64) != key


def test_on_cuda_the_profile_key_names_the_gpu(monkeypatch):
    """An A100's profile must not serve an H100 from a shared home folder."""
    model = tiny_llama()
    on_gpu = SimpleNamespace(
        config=model.config, dtype=torch.bfloat16, device=torch.device("cuda", 0), modules=model.modules
    )
    keys = {}
    for name in ("NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"):
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None, name=name: name)
        keys[name] = profile_key(on_gpu, 256, 64)
    assert len(set(keys.values())) == 2


# Measured robustly: a fake timer stands for the machine, so no test depends on this machine's speed.


class Machine:
    """A fake pass timer: 10 ms plus 1 ms a token, times `noise(k, n)` for the n-th pass of k."""

    def __init__(self, noise=lambda k, n: 1.0 + 0.01 * (n % 3)):  # quiet: passes within 2 %
        self.noise, self.passes = noise, Counter()

    def __call__(self, k: int) -> float:
        self.passes[k] += 1
        return (0.010 + 0.001 * k) * self.noise(k, self.passes[k])


def busy(k, n):
    return 2.0 if n % 2 == 0 else 1.0  # every other pass twice as long: the median stands, its IQR is as large


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache folder, and a fresh process's memory of the profiles it did not keep."""
    monkeypatch.setenv("HDLIB_CACHE", str(tmp_path))
    monkeypatch.setattr(forward_time, "_unkept", {})
    return tmp_path / "forward"


def test_a_quiet_machines_profile_is_kept_with_each_ks_spread(cache):
    model, machine = tiny_llama(), Machine()
    profile = load_or_measure(model, context_len=4, max_k=30, timer=machine)
    assert set(machine.passes.values()) == {forward_time.REPEATS}  # five passes of each k, none timed again
    assert profile.verdict == "quiet" and profile.ks == tuple(forward_time.measured_ks(30))
    assert len(profile.spread) == len(profile.ks) and max(profile.spread) < 0.02 and profile.fall == 0
    (kept,) = cache.iterdir()
    assert json.loads(kept.read_text())["verdict"] == "quiet" and json.loads(kept.read_text())["spread"]

    def no_timing(k):
        raise AssertionError("a kept profile was measured again")

    assert load_or_measure(model, context_len=4, max_k=30, timer=no_timing) == profile


def test_a_noisy_k_is_timed_again_and_a_busy_spell_that_passed_leaves_a_quiet_profile(cache):
    """The first round of k = 8 and k = 20 was noisy: those two, and only they, are timed again, and
    their fresh passes replace the noisy ones."""
    machine = Machine(lambda k, n: busy(k, n) if k in (8, 20) and n <= forward_time.REPEATS else 1.0)
    profile = load_or_measure(tiny_llama(), context_len=4, max_k=30, timer=machine)
    assert {k for k, n in machine.passes.items() if n > forward_time.REPEATS} == {8, 20}
    assert profile.verdict == "quiet" and profile.seconds[7] == pytest.approx(0.018)
    assert len(list(cache.iterdir())) == 1


def test_on_a_busy_machine_the_profile_is_timed_again_then_used_by_this_process_only_and_said(cache, capsys):
    model, machine = tiny_llama(), Machine(busy)
    profile = load_or_measure(model, context_len=4, max_k=30, timer=machine)
    assert set(machine.passes.values()) == {(1 + forward_time.RETRIES) * forward_time.REPEATS}
    assert profile.verdict == "busy" and min(profile.spread) == pytest.approx(1.0)
    assert not cache.exists()  # nothing kept: the next process measures again
    said = " ".join(capsys.readouterr().err.split())
    assert "measured on a busy machine" in said and "spread by up to 100% of their median" in said
    assert "used by this process only and not kept" in said and "next process measures it again" in said
    assert "while nothing else runs (`hdlib warmup`)" in said

    def no_timing(k):
        raise AssertionError("measured twice in one process")

    assert load_or_measure(model, context_len=4, max_k=30, timer=no_timing) is profile
    forward_time._unkept.clear()  # a new process
    assert load_or_measure(model, context_len=4, max_k=30, timer=Machine()).verdict == "quiet"
    assert len(list(cache.iterdir())) == 1


def test_a_k_slower_than_a_larger_one_is_timed_again_and_a_lasting_fall_is_the_machines_own_and_capped(cache):
    """A spike at k = 12 in the first round is timed again and gone; where k = 12 stays 30 % slower than
    k = 16 (and the larger k) with passes that agree, that is the machine's kernels, not its load: the
    cap keeps forward time from falling, and the profile is kept (a quiet EPYC measured such falls
    of up to 27 %, every time)."""
    spike = Machine(lambda k, n: 1.3 if k == 12 and n <= forward_time.REPEATS else 1.0)
    profile = measure_forward(tiny_llama(), context_len=4, max_k=30, timer=spike)
    assert {k for k, n in spike.passes.items() if n > forward_time.REPEATS} == {12, 13}  # 13: the larger k below it
    assert profile.verdict == "quiet" and profile.fall == 0
    lasting = Machine(lambda k, n: 1.3 if k == 12 else 1.0)
    profile = load_or_measure(tiny_llama(), context_len=4, max_k=30, timer=lasting)
    assert profile.verdict == "quiet" and profile.fall == pytest.approx(1 - 0.023 / 0.0286)
    assert lasting.passes[12] == (1 + forward_time.RETRIES) * forward_time.REPEATS  # timed again, each time
    assert profile.seconds[11] == pytest.approx(0.023) and list(profile.seconds) == sorted(profile.seconds)
    assert len(list(cache.iterdir())) == 1  # kept


def test_a_cache_file_of_an_older_hdlib_without_a_spread_still_loads(cache):
    model = tiny_llama()
    key = profile_key(model, 4, 3)
    cache.mkdir()
    (cache / f"{key}.json").write_text(json.dumps({"seconds": [0.01, 0.02, 0.03], "context_len": 4, "key": key}))
    profile = load_or_measure(model, context_len=4, max_k=3, timer=lambda k: pytest.fail("measured again"))
    assert profile == ForwardProfile((0.01, 0.02, 0.03), 4, key) and profile.verdict == ""


def test_a_profile_file_is_read_for_a_test_and_a_bad_one_is_said(tmp_path):
    good = tmp_path / "laptop.json"
    good.write_text(json.dumps({"seconds": [0.05, 0.06], "provenance": {"cpu": "x"}}))
    assert read_profile(good) == ForwardProfile((0.05, 0.06), 0, "laptop")  # the key from the name
    bad = tmp_path / "bad.json"
    for text, said in [
        ("{", "not a JSON file"),
        ('{"seconds": []}', 'no "seconds"'),
        ('{"second": [1]}', 'no "seconds"'),
        ('{"seconds": [0.1, -1]}', '"seconds" must be positive finite numbers'),
        ('{"seconds": [0.1, "x"]}', '"seconds" must be positive finite numbers'),
        ('{"seconds": [0.1], "context_len": "long"}', "invalid literal"),
    ]:
        bad.write_text(text)
        with pytest.raises(HDError, match=f"forward profile {bad}: {said}"):
            read_profile(bad)
    with pytest.raises(HDError, match=f"HDLIB_FORWARD_PROFILE: forward profile {tmp_path / 'none.json'}: no such"):
        read_profile(tmp_path / "none.json", "HDLIB_FORWARD_PROFILE: ")
