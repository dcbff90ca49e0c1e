"""The hierarchy's gate (`hdlib.engine.gate`): a tier after the first is asked only where asking it pays, and
what is left out is asked again after a wait."""

from __future__ import annotations

import functools
import time

import pytest
from support.tiny import VOCAB, tiny_llama

from hdlib.engine.drafter import Drafter
from hdlib.engine.forward_time import flat_profile
from hdlib.engine.gate import RETRY_LONGEST, RETRY_SHORTEST, Retry, TierGate, expected_band
from hdlib.engine.loop import DecodeSettings, run
from hdlib.engine.trace import Step, StepTimes, TierLookup
from hdlib.engine.tree import DraftTree
from hdlib.engine.value import ValueBudget
from hdlib.tiers import BONUS, ContextTier, DraftTier, Tier

C, S = Tier.CONTEXT, Tier.STATISTICS


def step(asked: list[tuple[Tier, float]], drafted: list[Tier | tuple[Tier, ...]]) -> Step:
    """A verified step whose tiers took these seconds and whose emitted drafts, a chain, were drafted
    by these tiers (a tuple: by several, the first credited; a tier drafts a prefix of the chain)."""
    chain = [t if isinstance(t, tuple) else (t,) for t in drafted]
    tree = DraftTree(root=0)
    for tier in dict.fromkeys(t for ts in chain for t in ts):
        depth = max(i + 1 for i, ts in enumerate(chain) if tier in ts)
        tree.add(range(1, depth + 1), tier, max_new=99, max_depth=99)
    return Step(
        index=0,
        context_len=1,
        budget=16,
        tree=tree,
        accepted_nodes=tuple(range(len(chain) + 1)),
        tokens=tuple(range(len(chain) + 1)),
        tiers=(*(ts[0] for ts in chain), BONUS),
        times=StepTimes(0, 0, 0, 0, 0),
        lookups=tuple(TierLookup(t, s, 1) for t, s in asked),
    )


def decisions(gate: TierGate, rate: float, gain: int, steps: int, every: int = 1) -> list[bool]:
    """Whether the gate asks S at each step, S costing 10 ms and adding `gain` tokens when asked (in
    every `every`-th step it is asked in)."""
    said = []
    for _ in range(steps):
        ask = gate.asks(S, expected=2.0, rate=rate)
        said.append(ask)
        adds = ask and sum(said) % every == 0
        gate.update(step([(C, 0.001), *([(S, 0.010)] if ask else [])], [S] * gain if adds else []))
    return said


def test_a_tier_that_cannot_pay_is_skipped_and_asked_again_after_a_wait_that_doubles():
    """At 100 tokens/s a 10 ms lookup is worth one token; a tier that adds none is asked once to be
    measured, then left out RETRY_SHORTEST steps, asked, left out twice as long, ..."""
    said = decisions(TierGate(), rate=100.0, gain=0, steps=1 + 16 + 1 + 32 + 1 + 64 + 1)
    asked_at = [i for i, ask in enumerate(said) if ask]
    assert RETRY_SHORTEST == 16
    assert asked_at == [0, 17, 50, 115]


def test_a_tier_that_pays_is_asked_every_step():
    assert all(decisions(TierGate(), rate=100.0, gain=2, steps=300))  # 2 tokens for a token's worth of time
    # A slow device: 10 ms are 0.01 token, and a tier that adds a token every tenth step pays.
    assert all(decisions(TierGate(), rate=1.0, gain=1, steps=300, every=10))
    assert not all(decisions(TierGate(), rate=1.0, gain=0, steps=300))  # one that never adds does not


def test_what_pays_is_learned_per_band_of_the_tree_so_far():
    """S adds a token where the tree so far is unlikely (band 0) and nothing where it is likely: at a
    rate where its lookup is worth half a token it is asked in the first kind of step, not the second."""
    gate = TierGate()
    for i in range(200):
        expected = 0.0 if i % 2 else 4.5
        ask = gate.asks(S, expected=expected, rate=50.0)
        gate.update(step([(C, 0.001), *([(S, 0.010)] if ask else [])], [S] if ask and i % 2 else []))
    assert expected_band(0.0) != expected_band(4.5)
    assert gate.pays(S, expected_band(0.0), 50.0) and not gate.pays(S, expected_band(4.5), 50.0)


def test_retry_waits_double_up_to_the_longest_and_reset_once_it_pays():
    retry = Retry(shortest=2, longest=8)
    taken = []
    for pays in [False] * 30 + [True] + [False] * 4:
        take = retry.decide(pays)
        retry.record(take)
        taken.append(take)
    assert [i for i, t in enumerate(taken) if t] == [2, 7, 16, 25, 30, 33]
    assert RETRY_LONGEST == 256


class SlowAndSeldomRight(DraftTier):
    """A slow tier (5 ms a lookup) that drafts the model's next token in one lookup of four, a wrong
    one in the others: a quarter of a token per lookup."""

    tier = S

    def __init__(self, truth: list[int]) -> None:
        self.truth, self.asked = truth, 0

    def propose(self, context, budget):
        self.asked += 1
        time.sleep(0.005)
        right = self.truth[len(context)] if len(context) < len(self.truth) else 0
        return [(right if self.asked % 4 == 0 else (right + 1) % VOCAB,)]


@functools.cache
def tiny():
    return tiny_llama()


PROMPT = (5, 6, 7, 8, 9, 10) * 3


@pytest.mark.parametrize("pass_s, most", [(1e-3, 0.5), (1.0, 1.0)])
def test_decoding_skips_a_tier_that_cannot_pay_on_a_fast_device_and_asks_it_on_a_slow_one(pass_s, most):
    """On a fast device (1 ms a pass) a quarter of a token does not pay for 5 ms, and the tier is
    skipped in most steps; on a slow one (1 s a pass) it pays, and is asked at every step. The answer
    is plain decoding's either way."""
    settings = DecodeSettings(max_new_tokens=60)
    want = run(tiny(), PROMPT, None, settings).tokens
    seldom = SlowAndSeldomRight([*PROMPT, *want])
    policy = ValueBudget(flat_profile([pass_s] * 64))
    got = run(tiny(), PROMPT, Drafter([ContextTier(), seldom]), settings, (), policy)
    assert got.tokens == want
    drafted = [s for s in got.steps if s.asked]  # all but a last step with no room for a draft
    assert len(got.steps) - len(drafted) <= 1 and all(s.asked[0] == C for s in drafted)
    asked = [S in s.asked for s in drafted]
    assert asked[0] and seldom.asked == sum(asked)  # a skipped tier is not asked at all
    assert sum(asked) <= most * len(asked), asked
    if most == 1:
        assert all(asked)
    stats = {r.tier: r for r in got.tier_stats()}
    assert stats[S].asked == sum(asked) and stats[C].asked == len(drafted)
    assert stats[S].lookup_s >= 0.005 * stats[S].asked  # each lookup timed, the sleep in it


def test_a_tier_gains_its_share_of_the_tokens_it_drafted_whatever_its_place():
    """A token S drafted alone counts 1 to S; one C drafted too counts a half to each: a tier that
    only confirms what a tier before it drafted still gains something, but less than one that adds."""
    gate = TierGate(decay=1.0, strength=0.0)
    band = expected_band(1.0)
    for tier in (C, S):
        gate.asks(tier, expected=1.0, rate=None)
    gate.update(step([(C, 0.001), (S, 0.001)], [(C, S), (C, S), S]))
    assert gate.gain(C, band) == pytest.approx(1.0) and gate.gain(S, band) == pytest.approx(2.0)
