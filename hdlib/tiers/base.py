"""The one interface every draft database implements, and the typed names of the tiers.

HD asks its databases in order of temporal locality. Each database is a `DraftTier`: it proposes
drafts for the current context within a token budget and learns from the tokens the target model
just accepted. The engine knows nothing else about a tier, so a new database (a suffix automaton,
Token Recycling's adjacency matrix, a test oracle) plugs in without touching the engine.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from hdlib.errors import HDError

Draft = tuple[int, ...]
"""A proposed continuation of the context: token ids, first token first."""


@dataclass(frozen=True)
class ModelGuesses:
    """What one verification pass said: after each of its tokens, the model's most likely next ones."""

    tokens: Sequence[int]  # the tokens of the pass (the tree's nodes)
    previous: Sequence[int]  # the token before each of them (-1: none)
    successors: Sequence[Sequence[int]]  # per token: the most likely next tokens, best first
    probabilities: Sequence[Sequence[float]]  # ... and their probabilities (softmax of the logits)


@dataclass(frozen=True)
class Proposal:
    """A draft with what the tier knows about it: what a value-ranked tree estimates its worth from."""

    tokens: Draft
    key_length: int = 0  # tokens of the context the draft was matched on (0: not a suffix match)
    source: str = ""  # which part of the tier drafted it, for tiers made of several ("recycled")
    # Per token, the tier's own estimate that it follows the tokens before it (a corpus share, the
    # model's probability); shorter than `tokens` where the tier does not know.
    confidence: tuple[float, ...] = ()


class Tier(str, Enum):
    """Where a token came from. The first three are databases; TARGET is the model's own token."""

    CONTEXT = "context"  # n-grams of the prompt and of the text generated so far
    MODEL = "model"  # phrases the target model tends to produce (built offline)
    STATISTICS = "statistics"  # frequent continuations in a large corpus (built offline)
    TARGET = "target"  # not a database: the bonus token, chosen by the target model itself

    @property
    def letter(self) -> str:
        return self.name[0]

    @classmethod
    def parse(cls, name: str | Tier) -> Tier:
        """A database tier from its name or letter ("context", "C", ...)."""
        if isinstance(name, Tier) and name is not Tier.TARGET:
            return name
        key = str(name).strip().lower()
        for tier in (cls.CONTEXT, cls.MODEL, cls.STATISTICS):
            if key in (tier.value, tier.letter.lower()):
                return tier
        known = ", ".join(t.value for t in (cls.CONTEXT, cls.MODEL, cls.STATISTICS))
        raise HDError(f"unknown tier {name!r}: choose from {known}")


class DraftTier(ABC):
    """A draft database. Subclasses set `tier` and implement `lookup`."""

    tier: Tier

    def begin(self, prompt: Sequence[int]) -> None:
        """A new request starts with these prompt tokens. Static databases ignore it."""

    @abstractmethod
    def lookup(self, context: Sequence[int], budget: int) -> list[Draft]:
        """Drafts for what follows `context`, best first, holding at most `budget` tokens in all."""

    def propose(self, context: Sequence[int], budget: int) -> list[Proposal]:
        """`lookup` with what is known of each draft; tiers that know their key lengths override it."""
        return [Proposal(tuple(d)) for d in self.lookup(context, budget)]

    def update(self, accepted: Sequence[int]) -> None:
        """These tokens were just appended to the context (accepted drafts and the bonus token)."""

    # Tiers that learn from the target model set this: the engine then hands them, after every
    # verification pass, the model's most likely next tokens at every node of the tree.
    successors_wanted: int = 0

    def observe_model(self, guesses: ModelGuesses) -> None:
        """What the model said after every node of the pass just verified."""
