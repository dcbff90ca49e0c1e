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
        for accepted, tier, points in [(outcome.accepted, outcome.tier, 2), (outcome.accepted + 1, outcome.tier, 1),
                                       (outcome.accepted, other, 1), (outcome.accepted + 1, other, 0)]:  # fmt: skip
            assert viz.Round(step.index, accepted, tier, outcome).points == points
    assert (len(seen) > 1 or temperature > 0) and viz.game.tier_options(gen) == ["none", "context", "model"]
    guesses = [(s.index, s.index % 3, "context") for s in gen.steps]
    expected = sum((a == viz.Outcome.of(gen.steps[i]).accepted) + (t == viz.Outcome.of(gen.steps[i]).tier)
                   for i, a, t in guesses)  # fmt: skip
    assert viz.game.score(gen, guesses) == expected
    game = viz.Game([0, 1])
    game.play(gen.steps[0], 0, "none")
    with pytest.raises(HDError, match="one guess per step"):
        game.play(gen.steps[0], 1, "none")
    assert game.next_step == 1 and game.summary.startswith(f"score: {game.points} of 2 points after 1 step")
