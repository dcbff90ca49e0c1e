"""The one interface every draft database implements, and the typed names of the tiers.

HD asks its databases in order of temporal locality. Each database is a `DraftTier`: it proposes
drafts for the current context within a token budget and learns from the tokens the target model
just accepted. The engine knows nothing else about a tier, so a new database (a suffix automaton,
Token Recycling's adjacency matrix, a test oracle) plugs in without touching the engine.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from enum import Enum

from hdlib.errors import HDError

Draft = tuple[int, ...]
"""A proposed continuation of the context: token ids, first token first."""


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

    def update(self, accepted: Sequence[int]) -> None:
        """These tokens were just appended to the context (accepted drafts and the bonus token)."""
