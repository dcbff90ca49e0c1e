"""The budget policies: fixed budgets are checked, the adaptive one follows cost and acceptance."""

from __future__ import annotations

import numpy as np
import pytest
from tiny import tiny_llama

from hdlib.budget import MAX_FIXED_BUDGET, FixedBudget
from hdlib.errors import HDError
from hdlib.forward_time import ForwardProfile

CPU_LIKE = ForwardProfile(tuple([0.055] + [0.09 + 0.002 * k for k in range(1, 64)]), 256, "cpu-like")
FLAT = ForwardProfile(tuple([0.05] * 64), 256, "flat")


def test_forward_time_is_interpolated_and_extended_beyond_the_measured_counts():
    assert CPU_LIKE.forward_s(1) == pytest.approx(0.055) and CPU_LIKE.forward_s(2.5) == pytest.approx(0.093)
    # Beyond 64 tokens it keeps growing along its line (0.002 s a token here), not stuck at forward(64).
    assert CPU_LIKE.forward_s(80) == pytest.approx(CPU_LIKE.seconds[-1] + 16 * 0.002)
    assert FLAT.forward_s(np.array([64.0, 200.0])).tolist() == pytest.approx([0.05, 0.05])
    assert np.isnan(CPU_LIKE.forward_s(np.nan))


def test_fixed_budget_rejects_negative_values_and_more_than_a_tree_can_usefully_hold():
    assert FixedBudget(0).draft_budget(5) == 0
    assert FixedBudget(MAX_FIXED_BUDGET).draft_budget(5) == MAX_FIXED_BUDGET
    with pytest.raises(HDError):
        FixedBudget(-1)
    with pytest.raises(HDError, match=f"more than a draft tree can usefully hold: at most {MAX_FIXED_BUDGET}"):
        FixedBudget(MAX_FIXED_BUDGET + 1)
    with pytest.raises(HDError, match="at most"):
        FixedBudget(100_000)


def test_the_forward_profile_times_a_grid_of_k_and_interpolates_between(monkeypatch):
    """Every k up to 16, then every fourth and the last; the k between lie on the line between."""
    import hdlib.forward_time

    timed = []

    def time_pass(verifier, tokens, past_len):
        timed.append(len(tokens))
        return 0.010 + 0.001 * len(tokens) + (0.005 if len(tokens) >= 4 else 0)  # a step at 4 rows

    monkeypatch.setattr(hdlib.forward_time, "time_pass", time_pass)
    profile = hdlib.forward_time.measure_forward(tiny_llama(), context_len=4, max_k=30, repeats=1, progress=False)
    grid = [*range(1, 17), 20, 24, 28, 30]
    assert hdlib.forward_time.measured_ks(30) == grid and sorted(set(timed)) == grid
    assert len(profile.seconds) == 30
    for k in grid:
        assert profile.seconds[k - 1] == pytest.approx(0.015 + 0.001 * k if k >= 4 else 0.010 + 0.001 * k)
    assert profile.seconds[21] == pytest.approx((profile.seconds[19] + profile.seconds[23]) / 2)  # k = 22
    with pytest.raises(HDError, match="ks must hold both"):
        hdlib.forward_time.measure_forward(tiny_llama(), context_len=4, max_k=30, ks=[1, 8], progress=False)
