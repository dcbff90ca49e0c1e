"""The one interface every draft database implements, and the typed names of the tiers.

HD asks its databases in order of temporal locality. Each database is a `DraftTier`: it proposes
drafts for the current context within a token budget and learns from the tokens the target model
just accepted. The engine knows nothing else about a tier, so a new database (a suffix automaton,
Token Recycling's adjacency matrix, a test oracle) plugs in without touching the engine.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

from hdlib.errors import HDError
from hdlib.tiers.guesses import Said
from hdlib.tiers.rider import PassRider

Draft = tuple[int, ...]
"""A proposed continuation of the context: token ids, first token first."""


def token_before_newest(context: Sequence[int]) -> int:
    """The context's token before its newest one (a draft tree's root), -1 where there is none."""
    return int(context[-2]) if len(context) > 1 else -1


@dataclass(frozen=True)
class Proposal:
    """A draft with what the tier knows about it: what a value-ranked tree estimates its worth from."""

    tokens: Draft
    key_length: int = 0  # tokens of the context the draft was matched on (0: not a suffix match)
    source: str = ""  # which part of the tier drafted it, for tiers made of several ("window")
    # Per token, the tier's own estimate that it follows the tokens before it (a corpus share, the
    # model's probability); shorter than `tokens` where the tier does not know.
    confidence: tuple[float, ...] = ()


# Paul Tol's muted scheme, colour-blind safe: a tier that names no colour gets one by its letter.
LETTER_COLORS = ("#332288", "#88CCEE", "#44AA99", "#117733", "#999933", "#DDCC77", "#CC6677", "#882255", "#AA4499")


@dataclass(frozen=True)
class Tier:
    """Who drafted a token: a tier's name, its one-letter code (orders such as `hd:CMS` are spelled
    in letters) and its colour in every figure, legend and summary.

    The tiers hdlib ships are `Tier.CONTEXT`, `Tier.RECYCLED`, `Tier.MODEL` and `Tier.STATISTICS`; a new database
    names itself, `Tier("echo", "X")` (or with a colour of its choice, `Tier("echo", "X", "#332288")`),
    and is shown like them everywhere. `BONUS` is not a tier: it labels the target model's own token
    that ends every step.

    >>> Tier("echo", "X")
    Tier(name='echo', letter='X', color='#882255')
    """

    name: str  # lower case, unique among the tiers of a generation
    letter: str  # one upper-case letter or digit, unique too
    color: str = ""  # "#RRGGBB"; empty: one of LETTER_COLORS, chosen by the letter

    CONTEXT: ClassVar[Tier]
    RECYCLED: ClassVar[Tier]
    MODEL: ClassVar[Tier]
    STATISTICS: ClassVar[Tier]

    def __post_init__(self) -> None:
        if not (self.name and self.name == self.name.strip().lower() and not set(self.name) & set(",:@")):
            raise HDError(f"a tier's name is lower-case text without ',', ':' or '@', got {self.name!r}")
        if not re.fullmatch(r"[A-Z0-9+]", self.letter):  # ("+" is the bonus token's)
            raise HDError(f"tier {self.name!r}: its letter is one upper-case letter or digit, got {self.letter!r}")
        if not self.color:
            object.__setattr__(self, "color", LETTER_COLORS[ord(self.letter) % len(LETTER_COLORS)])
        if not re.fullmatch(r"#[0-9A-Fa-f]{6}", self.color):
            raise HDError(f"tier {self.name!r}: its colour is '#RRGGBB', got {self.color!r}")

    def __str__(self) -> str:
        return self.name


# Colour-blind safe, shared by every view: Okabe-Ito's green, blue and reddish purple, and Paul Tol's olive
# for the recycled tier, a hue apart from the others (its wine was too close to the statistics tier's purple).
Tier.CONTEXT = Tier("context", "C", "#009E73")  # n-grams of the prompt and of the text generated so far
Tier.RECYCLED = Tier("recycled", "R", "#999933")  # the model's own guesses from recent passes (learned online)
Tier.MODEL = Tier("model", "M", "#0072B2")  # phrases of the model's own answers (built offline): the paper's
Tier.STATISTICS = Tier("statistics", "S", "#CC79A7")  # frequent continuations in a large corpus
BONUS = Tier("bonus", "+", "#555555")  # not a database: the target model's own token after the accepted drafts


@dataclass(frozen=True)
class DraftRow:
    """One draft a tier would propose, with what it ranks it by: what `DraftTier.explain` returns."""

    tokens: Draft
    count: int | None = None  # how often the tier saw it (in the text, the answers, the corpus); None: not counted
    score: float | None = None  # the tier's confidence in its first token (a share, a probability); None: none
    key_length: int | None = None  # tokens of the context's suffix it continues; None: not a suffix match
    source: str = ""  # which part of the tier drafted it, for tiers made of several ("window")


class DraftTier(ABC):
    """A draft database: set `tier` (its name and letter) and implement `propose`.

    `propose` may return plain tuples of token ids; a tier that knows more about a draft (the key
    it matched, its own confidence) returns `Proposal`s, which the value-ranked tree learns from.
    A tier that learns from the running text overrides `begin` and `update`.

    >>> class Echo(DraftTier):
    ...     tier = Tier("echo", "X")
    ...     def propose(self, context, budget):
    ...         return [tuple(context[-1:]) * 4]
    >>> Echo().lookup([5, 7], budget=8)
    [(7, 7, 7, 7)]
    >>> Echo.tier.color  # a colour of its own, from its letter
    '#882255'
    """

    tier: Tier

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "lookup" in vars(cls) and cls.propose is DraftTier.propose:
            raise HDError(
                f"{cls.__name__} defines lookup(context, budget): a tier's one method is now "
                "propose(context, budget), which may return the same plain tuples; rename it"
            )

    def begin(self, prompt: Sequence[int]) -> None:
        """A new request starts with these prompt tokens. Static databases ignore it."""

    @abstractmethod
    def propose(self, context: Sequence[int], budget: int) -> Sequence[Proposal | Sequence[int]]:
        """Drafts for what follows `context`, best first, holding at most `budget` tokens in all: plain
        token tuples, or `Proposal`s with what the tier knows of each."""

    def lookup(self, context: Sequence[int], budget: int) -> list[Draft]:
        """The drafts' tokens alone."""
        return [proposal(p).tokens for p in self.propose(context, budget)]

    def explain(self, context: Sequence[int], budget: int) -> list[DraftRow]:
        """What the tier would draft after `context`, best first, each draft with what the tier knows
        of it. Leaves the tier as it was. Tiers that count override it; the default is `propose`."""
        return [
            DraftRow(p.tokens, None, p.confidence[0] if p.confidence else None, p.key_length or None, p.source)
            for p in map(proposal, self.propose(context, budget))
        ]

    def update(self, step: StepOutcome) -> None:
        """Learn from a step the engine just took: `step.tokens` were appended to the context (the
        accepted drafts and the model's own token); `step.guesses`, the model's most likely next
        tokens after every node it verified."""

    # The one hook for a tier's own work in the model's pass (`hdlib.tiers.rider`): a tier fed by a
    # Lookahead window sets it to the window (and begins it in `begin`); the engine then puts the
    # rows in the passes where they pay, and the window learns from the step like a tier (`update`).
    # The n-grams land in the window's pool, which the tier reads.
    rider: PassRider | None = None


class StepOutcome(Said, Protocol):
    """What a learner reads of a step (`hdlib.engine.trace.Step` is one): the tokens the step
    appended to the context, and what the model said after every node it verified (`guesses`, None
    where no one asked)."""

    tokens: tuple[int, ...]


def proposal(draft: Proposal | Sequence[int]) -> Proposal:
    """A tier's draft as a `Proposal` (a plain token sequence is one that says nothing more).

    >>> proposal((4, 2))
    Proposal(tokens=(4, 2), key_length=0, source='', confidence=())
    """
    return draft if isinstance(draft, Proposal) else Proposal(tuple(int(t) for t in draft))


def check_tokens(tier: DraftTier, tokens: Sequence[int], vocab_size: int) -> None:
    if tokens and not (0 <= min(tokens) and max(tokens) < vocab_size):
        bad = next(t for t in tokens if not 0 <= t < vocab_size)
        raise HDError(
            f"the {tier.tier.name} tier ({type(tier).__name__}) drafted token id {bad}, outside the model's "
            f"vocabulary (0..{vocab_size - 1}): was its database built for another tokenizer?"
        )
