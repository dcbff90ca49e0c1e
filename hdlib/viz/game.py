"""The predict game of `StepThrough`: before a step is shown, guess how many drafts the model
accepts at that step and which tier drafted them; the reveal scores the guess against the engine's
own record of the step.

The rule (`RULE`, shown on the widget): a point for the number of accepted drafts (the bonus token
not counted); where the model accepts any, a point for the tier credited with most of them (a tie
goes to the tier whose draft comes first on the accepted path). A step where the model accepts no
draft is worth the one point: "none accepted" is one judgement, not two. `Game` keeps the rounds of
a sequence of steps, played in the generation's order; `pick_steps` chooses them from a seed, so
that a class given the same seed plays the same steps.

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

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hdlib.engine.trace import Generation, Step
from hdlib.errors import HDError
from hdlib.tiers.base import BONUS

NONE = "none"  # the tier credited when the model accepts no draft (not a guess: that step is worth one point)
GAME_STEPS = 5  # steps a game plays unless told otherwise
RULE = (
    "A point for the number of drafts the model accepts (its bonus token not counted); where it accepts any, a "
    "point for the tier credited with most of them (a tie: the tier whose draft comes first on the accepted path). "
    "A step where it accepts none is worth one point."
)


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
    """One guess, scored (`RULE`): a point for the number of accepted drafts, and, where the model
    accepted any, a point for the tier."""

    step: int
    accepted: int  # guessed
    tier: str  # guessed
    outcome: Outcome

    @property
    def worth(self) -> int:
        """The points the step is worth: two, or one where the model accepted no draft."""
        return 2 if self.outcome.accepted else 1

    @property
    def points(self) -> int:
        right_tier = self.outcome.accepted > 0 and self.tier == self.outcome.tier
        return int(self.accepted == self.outcome.accepted) + int(right_tier)

    @property
    def message(self) -> str:
        o = self.outcome
        if o.accepted:
            what = f"the model accepted {o.accepted} draft{'s' * (o.accepted != 1)}, most of them the {o.tier} tier's"
            guessed = f"{self.accepted} and {self.tier}"
        else:
            what, guessed = "the model accepted no draft", str(self.accepted)
        worth = f"{self.worth} point{'s' * (self.worth != 1)}"
        return f"step {self.step}: {what}; you guessed {guessed}: {self.points} of {worth}"


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
    def worth(self) -> int:
        return sum(r.worth for r in self.rounds)

    @property
    def summary(self) -> str:
        n = len(self.rounds)
        return f"score: {self.points} of {self.worth} points after {n} step{'s' * (n != 1)}"


def tier_options(gen: Generation) -> list[str]:
    """What a student may guess as the tier: a tier of the generation, in its order."""
    return [t.name for t in gen.tier_order if t != BONUS]


def pick_steps(gen: Generation, n: int = GAME_STEPS, seed: int = 0) -> list[int]:
    """`n` steps of `gen` worth guessing, in the generation's order: steps where the tiers drafted
    something (at a step with no draft the model can accept none), drawn by `seed`, so that a class
    given the same seed, on the same generation, plays the same steps. Fewer where fewer drafted."""
    if n < 1:
        raise HDError(f"a game plays at least one step, got {n}")
    worth = [s.index for s in gen.steps if s.tree.n_drafted > 0]
    if not worth:
        raise HDError("no step of this generation drafted anything: there is nothing to guess")
    return sorted(random.Random(seed).sample(worth, min(n, len(worth))))


def score(gen: Generation, guesses: Mapping[int, tuple[int, str]] | Sequence[tuple[int, int, str]]) -> int:
    """The points of `guesses` (step -> (accepted drafts, tier), or (step, accepted, tier) triples)
    against `gen`'s record, computed afresh: what the game's running score must equal."""
    items = guesses.items() if isinstance(guesses, Mapping) else ((s, (a, t)) for s, a, t in guesses)
    game = Game([])
    return sum(game.play(gen.steps[s], a, t).points for s, (a, t) in items)
