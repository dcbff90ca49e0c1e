"""The predict game of `StepThrough`: before a step is shown, guess how many drafts the model
accepts at that step and which tier drafted them; the reveal scores the guess against the engine's
own record of the step.

A round is worth two points: one for the number of accepted drafts (the bonus token not counted),
one for the tier credited with most of them (`NONE` when the model accepted no draft; a tie goes to
the tier whose draft comes first on the accepted path). `Game` keeps the rounds of a sequence of
steps, which a teacher can fix so that the whole class plays the same game.

    >>> from hdlib.engine.tree import DraftTree
    >>> from hdlib.engine.trace import Step, StepTimes
    >>> from hdlib.tiers import BONUS, Tier
    >>> tree = DraftTree(root=5)
    >>> tree.add([6, 7], Tier.CONTEXT, 10, 10)
    2
    >>> times = StepTimes(0.0, 0.0, 0.0, 0.0, 0.0)
    >>> step = Step(0, 1, 16, tree, (0, 1, 2), (6, 7, 9), (Tier.CONTEXT, Tier.CONTEXT, BONUS), times)
    >>> Outcome.of(step)
    Outcome(accepted=2, tier='context')
    >>> game = Game([0])
    >>> game.play(step, 2, "model").points
    1
    >>> game.summary
    'score: 1 of 2 points after 1 step'
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hdlib.engine.trace import Generation, Step
from hdlib.errors import HDError
from hdlib.tiers.base import BONUS

NONE = "none"  # the tier guessed, and credited, when the model accepts no draft


@dataclass(frozen=True)
class Outcome:
    """What a step did: the drafts the model accepted, and the tier credited with most of them."""

    accepted: int
    tier: str

    @classmethod
    def of(cls, step: Step) -> Outcome:
        drafted = [t.name for t in step.tiers if t != BONUS]
        if not drafted:
            return cls(0, NONE)
        counts = Counter(drafted)
        most = max(counts.values())
        return cls(len(drafted), next(name for name in drafted if counts[name] == most))


@dataclass(frozen=True)
class Round:
    """One guess, scored: a point for the number of accepted drafts, a point for the tier."""

    step: int
    accepted: int  # guessed
    tier: str  # guessed
    outcome: Outcome

    @property
    def points(self) -> int:
        return int(self.accepted == self.outcome.accepted) + int(self.tier == self.outcome.tier)

    @property
    def message(self) -> str:
        o = self.outcome
        drafts = f"{o.accepted} draft{'s' * (o.accepted != 1)}"
        what = f"the model accepted {drafts}" + (f", most of them the {o.tier} tier's" if o.accepted else "")
        return f"step {self.step}: {what}; you guessed {self.accepted} and {self.tier}: {self.points} of 2 points"


@dataclass
class Game:
    """The rounds played over `steps`, in order (the teacher's sequence, or every step)."""

    steps: list[int]
    rounds: list[Round] = field(default_factory=list)

    def round_of(self, step: int) -> Round | None:
        """The round played on step `step` (None: not played yet)."""
        return next((r for r in self.rounds if r.step == step), None)

    def play(self, step: Step, accepted: int, tier: str) -> Round:
        if self.round_of(step.index) is not None:
            raise HDError(f"step {step.index} was played already: one guess per step")
        done = Round(step.index, int(accepted), tier, Outcome.of(step))
        self.rounds.append(done)
        return done

    @property
    def points(self) -> int:
        return sum(r.points for r in self.rounds)

    @property
    def next_step(self) -> int | None:
        """The first step of the sequence not played yet (None: the game is over)."""
        return next((s for s in self.steps if self.round_of(s) is None), None)

    @property
    def summary(self) -> str:
        n = len(self.rounds)
        return f"score: {self.points} of {2 * n} points after {n} step{'s' * (n != 1)}"


def tier_options(gen: Generation) -> list[str]:
    """What a student may guess as the tier: none, or a tier of the generation, in its order."""
    return [NONE, *(t.name for t in gen.tier_order if t != BONUS)]


def score(gen: Generation, guesses: Mapping[int, tuple[int, str]] | Sequence[tuple[int, int, str]]) -> int:
    """The points of `guesses` (step -> (accepted drafts, tier), or (step, accepted, tier) triples)
    against `gen`'s record, computed afresh: what the game's running score must equal."""
    items = guesses.items() if isinstance(guesses, Mapping) else ((s, (a, t)) for s, a, t in guesses)
    game = Game([])
    return sum(game.play(gen.steps[s], a, t).points for s, (a, t) in items)
