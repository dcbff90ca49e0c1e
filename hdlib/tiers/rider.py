"""The one hook through which a tier does work of its own in the model's verification pass.

A tier may carry a `PassRider`: rows that ride in the pass after the draft tree's. The engine asks
the budget policy whether they pay (its `select`), puts `rows()` in the pass where they `fit` in the
context, and records the model's next token after each of its top rows in the step
(`Step.window_next`), from which the rider learns (`update`); the policy credits the rider with the
accepted drafts whose part of their tier is the rider's `source`. The tree's nodes never see a
rider's rows and the rows see only the tree's root, so what the model says of the drafts is what it
would say without them: lossless, whatever a rider holds. hdlib's rider is the Lookahead window
(`hdlib.tiers.window`); the engine knows only this interface.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class RiderRows:
    """A rider's part of one pass: its tokens, their positions past the root's, and which of them
    each sees (besides the KV cache and the root, which all of them see)."""

    tokens: list[int]
    offsets: list[int]  # position - past_len: the root stands at 0
    sees: np.ndarray  # (M, M) bool
    width: int  # the last `width` rows are the top ones, whose next tokens the step records

    def __len__(self) -> int:
        return len(self.tokens)


class PassRider(Protocol):
    source: str  # the part of its tier that drafts what the rider found (`DraftRow.source`)

    @property
    def size(self) -> int:
        """Rows the rider adds to the next pass."""
        ...

    def fits(self, past_len: int, tree_size: int, limit: int) -> bool:
        """Whether its rows, after a tree of `tree_size` nodes and `past_len` cached tokens, stay
        within a context of `limit` positions."""
        ...

    def rows(self) -> RiderRows: ...

    def update(self, step: RiderOutcome) -> None:
        """Learn from a step: where its rows rode (`step.window` rows), the model's next token after
        each of the top ones (`step.window_next`)."""
        ...


class RiderOutcome(Protocol):
    """What a rider reads of a step (`hdlib.engine.trace.Step` is one)."""

    window: int  # its rows in the pass (0: it did not ride)
    window_next: tuple[int, ...]  # the model's next token after each of its top rows
