"""The drafter: ask the tiers in order and fill the token budget with a trie of drafts.

Temporal locality decides the order: the first tier gets the whole budget, the next only what is
left, and a tier is not asked at all once the budget is full. Drafts that repeat, or are prefixes of
one another, merge in the trie and cost nothing twice; a shared token keeps the tier that proposed
it first.
"""

from __future__ import annotations

from collections.abc import Sequence

from hdlib.errors import HDError
from hdlib.tiers.base import DraftTier, ModelGuesses, Tier
from hdlib.tree import DraftTree
from hdlib.window import LookaheadWindow


class Drafter:
    def __init__(self, tiers: Sequence[DraftTier]) -> None:
        for i, tier in enumerate(tiers):
            if not isinstance(getattr(tier, "tier", None), Tier):
                raise HDError(f"{type(tier).__name__} has no `tier` (a Tier with its name, letter and colour)")
            for other in tiers[:i]:
                if tier.tier.name == other.tier.name or tier.tier.letter == other.tier.letter:
                    raise HDError(
                        f"each tier may appear once, and no two share a name or a letter: "
                        f"{tier.tier.name} ({tier.tier.letter}) and {other.tier.name} ({other.tier.letter})"
                    )
        windows = [t for t in tiers if t.window is not None]
        if len(windows) > 1:
            raise HDError(
                "one Lookahead window per generation: "
                + ", ".join(f"{t.tier.name} ({type(t).__name__})" for t in windows)
                + " each have one"
            )
        self.tiers = list(tiers)

    @property
    def window(self) -> LookaheadWindow | None:
        """The Lookahead window one of the tiers is fed by, if any."""
        return next((t.window for t in self.tiers if t.window is not None), None)

    @property
    def order(self) -> list[Tier]:
        return [t.tier for t in self.tiers]

    def begin(self, prompt: Sequence[int]) -> None:
        for tier in self.tiers:
            tier.begin(prompt)

    def update(self, accepted: Sequence[int]) -> None:
        for tier in self.tiers:
            tier.update(accepted)

    @property
    def successors_wanted(self) -> int:
        """How many of the model's most likely next tokens per verified node the tiers learn from."""
        return max((t.successors_wanted for t in self.tiers), default=0)

    def observe_model(self, guesses: ModelGuesses) -> None:
        for tier in self.tiers:
            if tier.successors_wanted:
                tier.observe_model(guesses)

    def draft(
        self,
        context: Sequence[int],
        budget: int,
        max_depth: int,
        per_tier: bool = False,
        vocab_size: int | None = None,
    ) -> DraftTree:
        """A trie rooted at the newest context token with at most `budget` draft tokens.

        With `per_tier`, every tier may add `budget` tokens of its own (candidates for a policy that
        keeps only the nodes worth verifying); otherwise a tier gets what the tiers before it left.
        With `vocab_size`, a draft token outside 0..vocab_size - 1 is refused, naming its tier: the
        model could not read it (on CUDA, a device-side assert that leaves the GPU unusable).
        """
        tree = DraftTree(root=context[-1])
        if max_depth <= 0:
            return tree
        for tier in self.tiers:
            left = budget if per_tier else budget - tree.n_drafted
            if left <= 0:
                break
            proposals = tier.propose(context, left)
            before = len(tree)
            for p in proposals:
                left -= tree.add(p.tokens, tier.tier, left, max_depth, p.key_length, p.source, p.confidence)
                if left <= 0:
                    break
            if vocab_size is not None:
                check_tokens(tier, tree.tokens[before:], vocab_size)  # what the model will read
        return tree


def check_tokens(tier: DraftTier, tokens: Sequence[int], vocab_size: int) -> None:
    if tokens and not (0 <= min(tokens) and max(tokens) < vocab_size):
        bad = next(t for t in tokens if not 0 <= t < vocab_size)
        raise HDError(
            f"the {tier.tier.name} tier ({type(tier).__name__}) drafted token id {bad}, outside the model's "
            f"vocabulary (0..{vocab_size - 1}): was its database built for another tokenizer?"
        )
