"""The budget policies: fixed budgets are checked, the adaptive one follows cost and acceptance."""

from __future__ import annotations

import numpy as np
import pytest
from tiny import tiny_llama

from hdlib.budget import AdaptiveBudget, FixedBudget, ForwardProfile
from hdlib.errors import HDError
from hdlib.tiers.base import BONUS, Tier
from hdlib.trace import Step, StepTimes
from hdlib.tree import DraftTree

CPU_LIKE = ForwardProfile(tuple([0.055] + [0.09 + 0.002 * k for k in range(1, 64)]), 256, "cpu-like")
FLAT = ForwardProfile(tuple([0.05] * 64), 256, "flat")


def test_forward_time_is_interpolated_and_extended_beyond_the_measured_counts():
    assert CPU_LIKE.forward_s(1) == pytest.approx(0.055) and CPU_LIKE.forward_s(2.5) == pytest.approx(0.093)
    # Beyond 64 tokens it keeps growing along its line (0.002 s a token here), not stuck at forward(64).
    assert CPU_LIKE.forward_s(80) == pytest.approx(CPU_LIKE.seconds[-1] + 16 * 0.002)
    assert FLAT.forward_s(np.array([64.0, 200.0])).tolist() == pytest.approx([0.05, 0.05])
    assert np.isnan(CPU_LIKE.forward_s(np.nan))


def step(budget: int, drafted: int, accepted: int) -> Step:
    """A step whose tree is one chain of `drafted` tokens, the first `accepted` of them right."""
    tree = DraftTree(root=0)
    tree.add(list(range(1, drafted + 1)), Tier.CONTEXT, drafted, drafted)
    return Step(0, 10, budget, tree, tuple(range(accepted + 1)), (0,) * (accepted + 1), (BONUS,), StepTimes(0, 0, 0, 0, 0))


def drive(policy: AdaptiveBudget, drafted: int, accepted: int, steps: int = 40) -> list[int]:
    for _ in range(steps):
        k = policy.budget(100)
        n = min(k, drafted)
        policy.observe(step(k, n, min(accepted, n)))
    return policy.history


def test_fixed_budget_rejects_negative_values():
    assert FixedBudget(0).budget(5) == 0
    with pytest.raises(HDError):
        FixedBudget(-1)


def test_drafts_that_are_never_accepted_are_not_worth_a_cpu_forward_pass():
    history = drive(AdaptiveBudget(CPU_LIKE), drafted=10, accepted=0)
    assert history[0] == 8  # nothing known yet: the start budget
    assert history[-16:].count(0) >= 12  # then mostly plain steps, probing now and then


def test_long_accepted_drafts_earn_a_large_budget():
    history = drive(AdaptiveBudget(CPU_LIKE), drafted=30, accepted=30)
    assert max(history[-8:]) >= 16


def test_a_flat_forward_cost_grows_the_budget_to_what_is_accepted():
    history = drive(AdaptiveBudget(FLAT), drafted=64, accepted=40)
    assert history[-1] >= 40


def test_steps_without_drafts_teach_nothing():
    policy = AdaptiveBudget(CPU_LIKE)
    policy.observe(step(8, 0, 0))
    assert policy.weight.sum() == 0


def test_failed_probes_back_off_and_come_back_when_drafts_pay_again():
    policy = AdaptiveBudget(CPU_LIKE, probe_every=8, max_probe_every=64)
    history = drive(policy, drafted=10, accepted=0, steps=400)
    probes = [k for k in history[40:] if k > 0]
    assert 0 < len(probes) <= 360 // 32  # backed off to one probe per 32..64 steps, never to none
    drive(policy, drafted=10, accepted=10, steps=80)  # the text turns repetitive
    assert policy.history[-16:].count(0) <= 4  # found within one probe wait, then drafting every step


def test_the_forward_profile_times_a_grid_of_k_and_interpolates_between(monkeypatch):
    """Every k up to 16, then every fourth and the last; the k between lie on the line between."""
    import hdlib.profile

    timed = []

    def time_pass(verifier, tokens, past_len):
        timed.append(len(tokens))
        return 0.010 + 0.001 * len(tokens) + (0.005 if len(tokens) >= 4 else 0)  # a step at 4 rows

    monkeypatch.setattr(hdlib.profile, "time_pass", time_pass)
    profile = hdlib.profile.measure_forward(tiny_llama(), context_len=4, max_k=30, repeats=1, progress=False)
    grid = [*range(1, 17), 20, 24, 28, 30]
    assert hdlib.profile.measured_ks(30) == grid and sorted(set(timed)) == grid
    assert len(profile.seconds) == 30
    for k in grid:
        assert profile.seconds[k - 1] == pytest.approx(0.015 + 0.001 * k if k >= 4 else 0.010 + 0.001 * k)
    assert profile.seconds[21] == pytest.approx((profile.seconds[19] + profile.seconds[23]) / 2)  # k = 22
    with pytest.raises(HDError, match="ks must hold both"):
        hdlib.profile.measure_forward(tiny_llama(), context_len=4, max_k=30, ks=[1, 8], progress=False)
