"""The drafter: ask the tiers in order and merge their drafts into one trie.

Temporal locality decides the order. Before each tier the budget policy's gate says how many draft
tokens the tier may add (`BudgetPolicy.gate`; 0: it is not asked): with a fixed budget the first
tier gets the whole budget, the next what is left; with the value-ranked tree every tier asked may
propose candidates of its own, and a tier after the first is asked only where asking it pays (the
hierarchy). Drafts that repeat, or are prefixes of one another, merge in the trie and cost nothing
twice; a shared token is credited to the tier that proposed it first, and the trie keeps every tier
that proposed it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from hdlib.engine.trace import TierLookup
from hdlib.engine.tree import DraftTree
from hdlib.errors import HDError
from hdlib.tiers.base import DraftTier, Tier, check_tokens
from hdlib.tiers.rider import PassRider

# (tier, the tree so far, the context, the tiers asked so far) -> draft tokens the tier may add (0: not asked)
Gate = Callable[[DraftTier, DraftTree, Sequence[int], Sequence[TierLookup]], int]


def ask_all(budget: int) -> Gate:
    """A gate that gives each tier what the tiers before it left of `budget` (a fixed budget's)."""
    return lambda tier, tree, context, asked: budget - tree.n_drafted


class Drafter:
    def __init__(self, tiers: Sequence[DraftTier]) -> None:
        for i, tier in enumerate(tiers):
            if not isinstance(getattr(tier, "tier", None), Tier):
                raise HDError(f"{type(tier).__name__} has no `tier` (a Tier with its name and letter)")
            for other in tiers[:i]:
                if tier.tier.name == other.tier.name or tier.tier.letter == other.tier.letter:
                    raise HDError(
                        f"each tier may appear once, and no two share a name or a letter: "
                        f"{tier.tier.name} ({tier.tier.letter}) and {other.tier.name} ({other.tier.letter})"
                    )
        riders = [t for t in tiers if t.rider is not None]
        if len(riders) > 1:
            raise HDError(
                "one Lookahead window (one rider in the pass) per generation: "
                + ", ".join(f"{t.tier.name} ({type(t).__name__})" for t in riders)
                + " each have one"
            )
        self.tiers = list(tiers)

    @property
    def rider(self) -> PassRider | None:
        """The rows one of the tiers rides in the pass (its Lookahead window), if any."""
        return next((t.rider for t in self.tiers if t.rider is not None), None)

    @property
    def order(self) -> list[Tier]:
        return [t.tier for t in self.tiers]

    def begin(self, prompt: Sequence[int]) -> None:
        for tier in self.tiers:
            tier.begin(prompt)

    def draft(
        self, context: Sequence[int], max_depth: int, gate: Gate, vocab_size: int | None = None
    ) -> tuple[DraftTree, tuple[TierLookup, ...], int]:
        """A trie rooted at the newest context token, each tier asked with its time, and the budget
        (the draft tokens the gate gave the first tier).

        With `vocab_size`, a draft token outside 0..vocab_size - 1 is refused, naming its tier: the
        model could not read it (on CUDA, a device-side assert that leaves the GPU unusable).
        """
        tree = DraftTree(root=context[-1])
        budget = gate(self.tiers[0], tree, context, ()) if self.tiers else 0
        lookups: list[TierLookup] = []
        for tier in self.tiers if max_depth > 0 else ():
            left = gate(tier, tree, context, lookups) if lookups else budget
            if left <= 0:
                continue
            start, before = time.perf_counter(), len(tree)
            for p in tier.propose(context, left):
                left -= tree.add(p, tier.tier, left, max_depth)
                if left <= 0:
                    break
            lookups.append(TierLookup(tier.tier, time.perf_counter() - start, len(tree) - before))
            if vocab_size is not None:
                check_tokens(tier, tree.tokens[before:], vocab_size)  # what the model will read
        return tree, tuple(lookups), budget
