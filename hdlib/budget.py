"""The budget policy's interface, the fixed budget, and the measured forward time they read.

A step costs forward(1 + k) for k draft tokens. On a GPU that is nearly flat up to k ~ 64; on a CPU
it grows at once (the numbers for the packaged model are in benchmarks/, `cpu_forward.py`), so how
many drafts a step should verify depends on the hardware and on the text. forward(.) is measured
once per model and device for 1..64 tokens and cached on disk (`hdlib.forward_time`); the policies only
read it (`ForwardProfile`), so they need neither torch nor a model.

`generate`'s default (budget None) is the value-ranked tree (`hdlib.value.ValueBudget`), which decides
node by node; `FixedBudget` verifies every node the drafter drafted, up to its k.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from hdlib.errors import HDError
from hdlib.tiers.base import ModelGuesses
from hdlib.trace import Step
from hdlib.tree import DraftTree

MAX_BUDGET = 64
FIXED_BUDGET = 16  # draft tokens per step where a fixed budget is wanted and none is given (the notebooks' too)


class BudgetPolicy(Protocol):
    per_tier: bool  # the budget is each tier's (candidates), not the tiers' together

    def budget(self, context_len: int) -> int: ...

    def select(self, tree: DraftTree, context: Sequence[int] = ()) -> tuple[DraftTree, tuple[float, ...] | None]:
        """The part of the drafted tree to verify (`context`: the text so far, the tree's root last),
        and each kept node's estimated acceptance (or None)."""
        ...

    def observe(self, step: Step) -> None: ...

    successors_wanted: int  # the model's most likely next tokens per verified node, for observe_model

    def observe_model(self, guesses: ModelGuesses) -> None: ...

    def finish(self) -> None:
        """The generation is over."""
        ...


class _VerifyAll:
    """Budget policies that verify the whole drafted tree and keep nothing across generations."""

    per_tier = False
    successors_wanted = 0

    def observe_model(self, guesses: ModelGuesses) -> None:
        pass

    def select(self, tree: DraftTree, context: Sequence[int] = ()) -> tuple[DraftTree, tuple[float, ...] | None]:
        return tree, None

    def finish(self) -> None:
        pass


class FixedBudget(_VerifyAll):
    def __init__(self, k: int) -> None:
        if not isinstance(k, int) or k < 0:
            raise HDError(f"the draft budget must be a non-negative integer, got {k!r}")
        self.k = k

    def budget(self, context_len: int) -> int:
        return self.k

    def observe(self, step: Step) -> None:
        pass


@dataclass(frozen=True)
class ForwardProfile:
    """Median seconds of one forward pass over k = 1..len(seconds) new tokens."""

    seconds: tuple[float, ...]
    context_len: int
    key: str

    def forward_s(self, n_tokens: float | np.ndarray) -> np.ndarray:
        """Seconds for a forward pass over `n_tokens`: interpolated between the measured counts,
        beyond the last one extended along the line through the middle and the last (NaN stays NaN)."""
        k, seconds = np.arange(1, len(self.seconds) + 1), np.asarray(self.seconds)
        n = np.asarray(n_tokens, dtype=float)
        mid = len(k) // 2
        slope = (seconds[-1] - seconds[mid]) / (k[-1] - k[mid]) if len(k) > 1 else 0.0
        return np.where(n > k[-1], seconds[-1] + slope * (n - k[-1]), np.interp(n, k, seconds))


def flat_profile(seconds: Sequence[float] | None = None) -> ForwardProfile:
    """A profile for tests and GPUs-in-theory: forward time independent of k."""
    return ForwardProfile(tuple(seconds or [1.0] * MAX_BUDGET), 0, "flat")
