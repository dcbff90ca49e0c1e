"""Forward time (`hdlib.engine.forward_time`): the profile of forward(k) interpolated and extended past
its measured counts, timed on a grid of k, and keyed by everything its times depend on.

No GPU is needed: CUDA's answers (the device's name) are monkeypatched.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from support.tiny import tiny_llama

import hdlib.engine.forward_time
from hdlib.engine.forward_time import ForwardProfile, profile_key
from hdlib.errors import HDError

CPU_LIKE = ForwardProfile(tuple([0.055] + [0.09 + 0.002 * k for k in range(1, 64)]), 256, "cpu-like")
FLAT = ForwardProfile(tuple([0.05] * 64), 256, "flat")


def test_forward_time_is_interpolated_and_extended_beyond_the_measured_counts():
    assert CPU_LIKE.forward_s(1) == pytest.approx(0.055) and CPU_LIKE.forward_s(2.5) == pytest.approx(0.093)
    # Beyond 64 tokens it keeps growing along its line (0.002 s a token here), not stuck at forward(64).
    assert CPU_LIKE.forward_s(80) == pytest.approx(CPU_LIKE.seconds[-1] + 16 * 0.002)
    assert FLAT.forward_s(np.array([64.0, 200.0])).tolist() == pytest.approx([0.05, 0.05])
    assert np.isnan(CPU_LIKE.forward_s(np.nan))


def test_the_forward_profile_times_a_grid_of_k_and_interpolates_between(monkeypatch):
    """Every k up to 16, then every fourth and the last; the k between lie on the line between."""
    import hdlib.engine.forward_time

    timed = []

    def time_pass(verifier, tokens, past_len):
        timed.append(len(tokens))
        return 0.010 + 0.001 * len(tokens) + (0.005 if len(tokens) >= 4 else 0)  # a step at 4 rows

    monkeypatch.setattr(hdlib.engine.forward_time, "time_pass", time_pass)
    measure = hdlib.engine.forward_time.measure_forward
    profile = measure(tiny_llama(), context_len=4, max_k=30, repeats=1)
    grid = [*range(1, 17), 20, 24, 28, 30]
    assert hdlib.engine.forward_time.measured_ks(30) == grid and sorted(set(timed)) == grid
    assert len(profile.seconds) == 30
    for k in grid:
        assert profile.seconds[k - 1] == pytest.approx(0.015 + 0.001 * k if k >= 4 else 0.010 + 0.001 * k)
    assert profile.seconds[21] == pytest.approx((profile.seconds[19] + profile.seconds[23]) / 2)  # k = 22
    with pytest.raises(HDError, match="ks must hold both"):
        hdlib.engine.forward_time.measure_forward(tiny_llama(), context_len=4, max_k=30, ks=[1, 8])


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
