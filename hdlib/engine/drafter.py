"""The drafter: ask the tiers in order and merge their drafts into one trie.

Temporal locality decides the order. With a fixed budget the first tier gets the whole budget, the
next only what is left, and a tier is not asked once the budget is full. With the value-ranked tree
every tier asked may propose candidates of its own, and before each tier after the first the budget
policy decides whether asking it pays (`BudgetPolicy.ask`: the hierarchy). Drafts that repeat, or
are prefixes of one another, merge in the trie and cost nothing twice; a shared token is credited to
the tier that proposed it first, and the trie keeps every tier that proposed it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from hdlib.engine.trace import TierLookup
from hdlib.engine.tree import DraftTree
from hdlib.errors import HDError
from hdlib.tiers.base import DraftTier, ModelGuesses, Tier, check_tokens
from hdlib.tiers.guesses import Successors
from hdlib.tiers.rider import PassRider

Ask = Callable[[DraftTier, DraftTree, Sequence[int]], bool]  # (tier, the tree so far, context) -> ask it?


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

    def use_guesses(self, table: Successors) -> None:
        for tier in self.tiers:
            if tier.successors_wanted:
                tier.use_guesses(table)

    def draft(
        self,
        context: Sequence[int],
        budget: int,
        max_depth: int,
        per_tier: bool = False,
        vocab_size: int | None = None,
        ask: Ask | None = None,
    ) -> tuple[DraftTree, tuple[TierLookup, ...]]:
        """A trie rooted at the newest context token with at most `budget` draft tokens, and each
        tier asked with its time.

        With `per_tier`, every tier may add `budget` tokens of its own (candidates for a policy that
        keeps only the nodes worth verifying); otherwise a tier gets what the tiers before it left.
        `ask` decides, before every tier but the first, whether to ask it (None: ask every tier).
        With `vocab_size`, a draft token outside 0..vocab_size - 1 is refused, naming its tier: the
        model could not read it (on CUDA, a device-side assert that leaves the GPU unusable).
        """
        tree = DraftTree(root=context[-1])
        lookups: list[TierLookup] = []
        if max_depth <= 0:
            return tree, ()
        for tier in self.tiers:
            left = budget if per_tier else budget - tree.n_drafted
            if left <= 0:
                break
            if lookups and ask is not None and not ask(tier, tree, context):
                continue
            start, before = time.perf_counter(), len(tree)
            for p in tier.propose(context, left):
                left -= tree.add(p.tokens, tier.tier, left, max_depth, p.key_length, p.source, p.confidence)
                if left <= 0:
                    break
            lookups.append(TierLookup(tier.tier, time.perf_counter() - start, len(tree) - before))
            if vocab_size is not None:
                check_tokens(tier, tree.tokens[before:], vocab_size)  # what the model will read
        return tree, tuple(lookups)
