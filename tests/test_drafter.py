"""The drafter (`hdlib.engine.drafter`): it fills the budget in tier order and merges drafts into one
trie, and refuses a draft token outside the model's vocabulary, naming the tier that drafted it (issue
11: seen to fail on the engine before the fix); drafts inside the vocabulary still pass."""

from __future__ import annotations

import pytest
from support.greedy import PROMPT, model, plain
from support.oracle import OracleTier
from support.tiny import VOCAB

from hdlib.engine.budget import FixedBudget
from hdlib.engine.drafter import Drafter
from hdlib.engine.loop import DecodeSettings, run
from hdlib.errors import HDError
from hdlib.tiers import ContextTier
from hdlib.tiers.base import Draft, DraftTier, Tier


class Fixed(OracleTier):
    def __init__(self, tier: Tier, drafts):
        self.tier, self.drafts, self.asked = tier, drafts, []

    def propose(self, context, budget):
        self.asked.append(budget)
        return self.drafts


def test_drafter_fills_the_budget_in_tier_order_and_merges():
    c = Fixed(Tier.CONTEXT, [(1, 2, 3), (1, 2)])
    m = Fixed(Tier.MODEL, [(1, 2, 4), (5, 6, 7, 8)])
    s = Fixed(Tier.STATISTICS, [(9,)])
    tree, lookups, budget = Drafter([c, m, s]).draft([0], max_depth=10, gate=FixedBudget(6).gate)
    assert budget == 6
    assert c.asked == [6] and m.asked == [3] and s.asked == []  # S is never asked: budget full
    assert [(x.tier, x.added) for x in lookups] == [(Tier.CONTEXT, 3), (Tier.MODEL, 3)]
    assert tree.n_drafted == 6
    assert tree.tokens == [0, 1, 2, 3, 4, 5, 6]
    assert tree.tiers == [None, Tier.CONTEXT, Tier.CONTEXT, Tier.CONTEXT, Tier.MODEL, Tier.MODEL, Tier.MODEL]


class FixedDrafts(DraftTier):
    """A user's own tier that drafts the same tokens whatever the context."""

    tier = Tier.STATISTICS

    def __init__(self, draft: Draft) -> None:
        self.draft = draft

    def propose(self, context, budget):
        return [self.draft[:budget]]


@pytest.mark.parametrize("bad", [VOCAB, VOCAB + 1000, -1])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_draft_token_outside_the_vocabulary_is_refused_naming_its_tier(bad, temperature):
    drafter = Drafter([ContextTier(), FixedDrafts((7, bad, 8))])
    settings = DecodeSettings(max_new_tokens=10, temperature=temperature, seed=1)
    with pytest.raises(HDError, match=rf"statistics tier \(FixedDrafts\) drafted token id {bad}, outside"):
        run(model("llama"), PROMPT, drafter, settings, (), FixedBudget(8))


def test_drafts_inside_the_vocabulary_still_pass():
    want = plain(model("llama"))
    drafter = Drafter([FixedDrafts((0, VOCAB - 1, 3))])  # the first and last ids are fine
    assert run(model("llama"), PROMPT, drafter, DecodeSettings(max_new_tokens=20), (), FixedBudget(8)).tokens == want
