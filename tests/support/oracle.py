"""A test tier that knows the right answer and lies about it on purpose.

It drafts the true continuation (from a plain decoding run) with random corruptions, truncations
and decoys, so that the engine meets full acceptance, partial acceptance, rejected branches and
shared prefixes in every combination. It plugs into the engine like any database: the interface is
all the engine sees.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from hypothesis import strategies as st

from hdlib.tiers.base import Draft, DraftTier, Tier

from .tiny import VOCAB


class OracleTier(DraftTier):
    def __init__(self, truth: Sequence[int], vocab: int, seed: int = 0, tier: Tier = Tier.MODEL) -> None:
        self.truth = list(truth)
        self.vocab = vocab
        self.rng = random.Random(seed)
        self.tier = tier

    def propose(self, context: Sequence[int], budget: int) -> list[Draft]:
        rng = self.rng
        n = len(context)
        drafts: list[Draft] = []
        for _ in range(rng.randrange(1, 4)):
            true = self.truth[n : n + rng.randrange(1, 9)]
            if not true or rng.random() < 0.2:
                true = [rng.randrange(self.vocab) for _ in range(rng.randrange(1, 5))]  # a decoy
            elif rng.random() < 0.5:
                true[rng.randrange(len(true))] = rng.randrange(self.vocab)  # a corruption
            drafts.append(tuple(true[:budget]))
            budget -= len(drafts[-1])
            if budget <= 0:
                break
        return drafts


class TruthTier(OracleTier):
    """Drafts the next 8 tokens of the plain answer, uncorrupted."""

    def __init__(self, truth: list[int]) -> None:
        super().__init__(truth, VOCAB, tier=Tier.CONTEXT)

    def propose(self, context, budget):
        return [tuple(self.truth[len(context) : len(context) + min(8, budget)])]


# Prompts that repeat themselves (a unit, repeated, and a tail): the context tier finds drafts in them.
prompts = st.builds(
    lambda unit, reps, tail: tuple(unit * reps + tail),
    st.lists(st.integers(3, VOCAB - 1), min_size=1, max_size=10),
    st.integers(1, 4),
    st.lists(st.integers(3, VOCAB - 1), max_size=4),
)
