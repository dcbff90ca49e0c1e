"""hdlib.viz.game: the predict game's rounds scored against the engine's records, on a tiny model."""

from __future__ import annotations

import pytest
from support.oracle import OracleTier
from support.tiny import VOCAB
from support.tiny_prompts import MAX_NEW, PROMPTS

import hdlib
from hdlib import viz
from hdlib.errors import HDError
from hdlib.tiers import BONUS, Tier

C, R, M, S, T = Tier.CONTEXT, Tier.RECYCLED, Tier.MODEL, Tier.STATISTICS, BONUS


def accepted_prefix(path: list[int], accepted: tuple[int, ...]) -> int:
    """Brute force: drafts of `path` (root first) that are accepted nodes."""
    return sum(node in accepted for node in path[1:])


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_round_scores_the_accepted_drafts_and_the_tier_that_drafted_most_of_them(lm, truths, temperature):
    prompt = PROMPTS["first"]
    tiers = [OracleTier(truths[prompt], VOCAB, seed=2, tier=t) for t in (C, M)]
    gen = hdlib.generate(lm, prompt, tiers=tiers, max_new_tokens=MAX_NEW, budget=16, temperature=temperature, seed=4)
    seen = set()
    for step in gen.steps:
        outcome = viz.Outcome.of(step)
        drafts = [t.name for t in step.tiers if t != BONUS]  # the emitted tokens but the bonus
        assert outcome.accepted == len(step.accepted_nodes) - 1 == len(drafts)
        if drafts:
            counts = {n: drafts.count(n) for n in drafts}
            assert counts[outcome.tier] == max(counts.values())
            assert outcome.tier == next(n for n in drafts if counts[n] == max(counts.values()))  # a tie: the first
        else:
            assert outcome.tier == viz.game.NONE
        seen.add(outcome.tier)
        other = next(t for t in viz.game.tier_options(gen) if t != outcome.tier)
        worth = 2 if outcome.accepted else 1  # no draft accepted: the count alone
        cases = [(outcome.accepted, outcome.tier if outcome.accepted else other, worth),
                 (outcome.accepted + 1, outcome.tier, worth - 1), (outcome.accepted, other, 1),
                 (outcome.accepted + 1, other, 0)]  # fmt: skip
        for accepted, tier, points in cases:
            r = viz.Round(step.index, accepted, tier, outcome)
            assert (r.points, r.worth) == (points, worth), (accepted, tier, outcome)
    assert (len(seen) > 1 or temperature > 0) and viz.game.tier_options(gen) == ["context", "model"]
    guesses = [(s.index, s.index % 3, "context") for s in gen.steps]

    def points(i: int, a: int, t: str) -> int:
        o = viz.Outcome.of(gen.steps[i])
        return (a == o.accepted) + (o.accepted > 0 and t == o.tier)

    assert viz.game.score(gen, guesses) == sum(points(*g) for g in guesses)
    game = viz.Game([0, 1])
    game.play(gen.steps[0], 0, "context")
    with pytest.raises(HDError, match="one guess per step"):
        game.play(gen.steps[0], 1, "context")
    worth = 2 if viz.Outcome.of(gen.steps[0]).accepted else 1
    assert game.next_step == 1 and game.summary.startswith(f"score: {game.points} of {worth} points after 1 step")
