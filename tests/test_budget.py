"""The budget policies: fixed budgets are checked, the adaptive one follows cost and acceptance."""

from __future__ import annotations

import pytest

from hdlib.budget import AdaptiveBudget, FixedBudget, ForwardProfile
from hdlib.errors import HDError
from hdlib.tiers.base import Tier
from hdlib.trace import Step, StepTimes
from hdlib.tree import DraftTree

CPU_LIKE = ForwardProfile(tuple([0.055] + [0.09 + 0.002 * k for k in range(1, 64)]), 256, "cpu-like")
FLAT = ForwardProfile(tuple([0.05] * 64), 256, "flat")


def chain(drafted: int, tier: Tier = Tier.CONTEXT) -> DraftTree:
    tree = DraftTree(root=0)
    tree.add(list(range(1, drafted + 1)), tier, drafted, drafted)
    return tree


def step(budget: int, drafted: int, accepted: int, tier: Tier = Tier.CONTEXT) -> Step:
    """A step whose tree is one chain of `drafted` tokens from `tier`, the first `accepted` of them right."""
    tree = chain(drafted, tier)
    return Step(0, 10, budget, tree, tuple(range(accepted + 1)), (0,) * (accepted + 1), (Tier.TARGET,), StepTimes(0, 0, 0, 0, 0))


def drive(policy: AdaptiveBudget, drafted: int, accepted: int, steps: int = 40, tier: Tier = Tier.CONTEXT) -> list[int]:
    """Steps as the decoding loop makes them: draft up to budget(), verify the first trim() nodes."""
    for _ in range(steps):
        drafts = min(policy.budget(100), drafted)
        k = policy.trim(chain(drafts, tier))
        n = min(k, drafts)
        policy.observe(step(k, n, min(accepted, n), tier))
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


def test_each_leading_tier_earns_its_own_budget():
    policy = AdaptiveBudget(CPU_LIKE)
    for _ in range(60):  # the context tier's drafts are right, the statistics tier's wrong
        drive(policy, drafted=30, accepted=30, steps=1, tier=Tier.CONTEXT)
        drive(policy, drafted=30, accepted=0, steps=1, tier=Tier.STATISTICS)
    context_led, statistics_led = policy.history[-40::2], policy.history[-39::2]
    assert min(context_led) >= 16
    assert statistics_led.count(0) >= 16
    assert policy.budget(100) >= 16  # the drafter may draft what the context tier would take


def test_one_record_for_all_tiers_when_asked():
    policy = AdaptiveBudget(CPU_LIKE, by_tier=False)
    for _ in range(60):
        drive(policy, drafted=30, accepted=30, steps=1, tier=Tier.CONTEXT)
        drive(policy, drafted=30, accepted=0, steps=1, tier=Tier.STATISTICS)
    assert min(policy.history[-39::2]) > 0  # the statistics-led steps get the shared, larger budget


def test_trim_keeps_the_first_nodes_as_a_trie():
    tree = DraftTree(root=0)
    tree.add([1, 2, 3], Tier.CONTEXT, 10, 10)
    tree.add([1, 5], Tier.STATISTICS, 10, 10)
    tree.add([6], Tier.STATISTICS, 10, 10)
    cut = tree.truncated(3)
    assert cut.tokens == [0, 1, 2, 3] and cut.children(1) == [2] and cut.children(0) == [1]
    assert tree.truncated(9) is tree and len(tree.truncated(0)) == 1
