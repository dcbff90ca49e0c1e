"""What the target model said after each node of a verification pass, and the one table that keeps it.

Every verification pass computes the model's logits at every node of the tree; the decoding loop
reads each node's most likely next tokens (`ModelGuesses`) and keeps them in one `Successors` table
per generation, which it hands to whoever reads the model's guesses: the recycled-guesses tier
drafts from it, the value-ranked tree reads the model's opinion of a draft from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from hdlib.errors import HDError


@dataclass(frozen=True)
class ModelGuesses:
    """What one verification pass said: after each of its tokens, the model's most likely next ones.
    Plain Python ints and floats (the verifier reads them so), kept as they come by the tables."""

    tokens: Sequence[int]  # the tokens of the pass (the tree's nodes)
    previous: Sequence[int]  # the token before each of them (-1: none)
    successors: Sequence[Sequence[int]]  # per token: the most likely next tokens, best first
    probabilities: Sequence[Sequence[float]]  # ... and their probabilities (softmax of the logits)


class Said(Protocol):
    """A step as far as the model's guesses go (`hdlib.engine.trace.Step` is one): what it said after
    every node of the pass, None where they were not read."""

    guesses: ModelGuesses | None


Guess = tuple[int, float]  # (next token, the model's probability of it)
GUESSES = 8  # the model's most likely next tokens after every verified node that a step records (`Step.guesses`)


def check_width(width: int) -> None:
    """A table of the model's guesses keeps at most the GUESSES a step records."""
    if not isinstance(width, int) or not 1 <= width <= GUESSES:
        raise HDError(
            f"the model's guesses: a table keeps 1 to {GUESSES} per token (a step records as many), got {width!r}"
        )


class Successors:
    """The model's most likely next tokens after a token (order 1) and after a token pair (order 2),
    the last time the model saw them, whatever the context.

    An order-2 entry is more specific to the context (the model saw that very pair) and is used
    where there is one; order 1 fills in.
    """

    def __init__(self, width: int = 8) -> None:
        if width < 1:
            raise HDError(f"the model's guesses: width must be at least 1, got {width}")
        self.width = width
        # (token,) or (previous token, token) -> (next token, probability), best first
        self.table: dict[tuple[int, ...], tuple[Guess, ...]] = {}

    def clear(self) -> None:
        self.table.clear()

    def update(self, step: Said) -> None:
        """Learn what the model said in a step (`Step.guesses`; None says nothing)."""
        if step.guesses is not None:
            self.observe(step.guesses)

    def observe(self, guesses: ModelGuesses) -> None:
        """Keep the pass's guesses after every token and token pair; newer ones replace older ones."""
        g, table, width = guesses, self.table, self.width
        for token, before, nexts, probs in zip(g.tokens, g.previous, g.successors, g.probabilities, strict=True):
            entry = tuple(zip(nexts[:width], probs))
            table[(token,)] = entry
            if before >= 0:
                table[(before, token)] = entry

    def guesses(self, token: int, before: int = -1) -> tuple[int, tuple[Guess, ...]]:
        """(order used, guesses) after `token` preceded by `before`: (0, ()) when never seen."""
        for key in ((before, token), (token,)) if before >= 0 else ((token,),):
            found = self.table.get(key)
            if found is not None:
                return len(key), found
        return 0, ()

    def probability(self, token: int, after: int, before: int = -1) -> float:
        """The model's probability of `token` after (`before`, `after`) when it last saw them: 0 if it
        was not among the `width` most likely, -1 if it never saw `after`.

        >>> table = Successors(width=2)
        >>> table.observe(ModelGuesses(tokens=[5], previous=[-1], successors=[[8, 6]], probabilities=[[0.6, 0.3]]))
        >>> table.probability(8, after=5), table.probability(7, after=5), table.probability(8, after=9)
        (0.6, 0.0, -1.0)
        """
        order, guesses = self.guesses(after, before)
        if order == 0:
            return -1.0
        return next((p for t, p in guesses if t == token), 0.0)
