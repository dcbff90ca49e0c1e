"""The budget policy's interface and the fixed budget.

A step costs forward(1 + k) for k draft tokens. On a GPU that is nearly flat up to k ~ 64; on a CPU
it grows at once (the numbers for the packaged model are in benchmarks/, `cpu_forward.py`), so how
many drafts a step should verify depends on the hardware and on the text. forward(.) is measured
once per model and device for 1..64 tokens and cached on disk (`hdlib.engine.forward_time`); a policy only
reads the profile (`ForwardProfile`), so it needs neither a model nor a pass of its own.

`generate`'s default (budget None) is the value-ranked tree (`hdlib.engine.value.ValueBudget`), which decides
node by node; `FixedBudget` verifies every node the drafter drafted, up to its k.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from hdlib.engine.trace import Step
from hdlib.engine.tree import DraftTree
from hdlib.errors import HDError
from hdlib.tiers.base import DraftTier
from hdlib.tiers.guesses import Successors
from hdlib.tiers.rider import PassRider

MAX_BUDGET = 64  # draft tokens the forward-time profile is measured for (1 + 64 tokens a pass)
FIXED_BUDGET = 16  # draft tokens per step where a fixed budget is wanted and none is given (the notebooks' too)
# The most draft tokens a fixed budget may verify per step: four times the profile's range. Every
# draft token is a row of the forward pass, and on a CPU a pass of 2,000 rows took 4.7 s.
MAX_FIXED_BUDGET = 4 * MAX_BUDGET


class BudgetPolicy(Protocol):
    per_tier: bool  # the budget is each tier's (candidates), not the tiers' together

    def draft_budget(self, context_len: int) -> int:
        """Draft tokens the tiers may propose this step (each tier as many, where `per_tier`)."""
        ...

    def ask(self, tier: DraftTier, tree: DraftTree, context: Sequence[int]) -> bool:
        """Whether the drafter asks `tier` next, with `tree` drafted so far (asked before every tier
        but the first: the hierarchy)."""
        ...

    def select(self, tree: DraftTree, context: Sequence[int] = ()) -> tuple[DraftTree, tuple[float, ...] | None]:
        """The part of the drafted tree to verify (`context`: the text so far, the tree's root last),
        and each kept node's estimated acceptance (or None)."""
        ...

    def observe(self, step: Step) -> None: ...

    def run_rider(self, rider: PassRider) -> bool:
        """Whether the next pass carries `rider`'s rows (a tier's Lookahead window; asked before
        `select`, only in a generation with a rider)."""
        ...

    successors_wanted: int  # the model's most likely next tokens per verified node the policy reads

    def use_guesses(self, table: Successors) -> None:
        """The generation's table of the model's guesses (when `successors_wanted`)."""
        ...

    def finish(self) -> None:
        """The generation is over."""
        ...


class _VerifyAll:
    """Budget policies that verify the whole drafted tree and keep nothing across generations."""

    per_tier = False
    successors_wanted = 0

    def use_guesses(self, table: Successors) -> None:
        pass

    def ask(self, tier: DraftTier, tree: DraftTree, context: Sequence[int]) -> bool:
        return True  # the drafter stops asking once the budget is full

    def select(self, tree: DraftTree, context: Sequence[int] = ()) -> tuple[DraftTree, tuple[float, ...] | None]:
        return tree, None

    def run_rider(self, rider: PassRider) -> bool:
        return True  # every pass, as Lookahead decoding runs its window

    def finish(self) -> None:
        pass


class FixedBudget(_VerifyAll):
    def __init__(self, k: int) -> None:
        if not isinstance(k, int) or isinstance(k, bool) or k < 0:
            raise HDError(f"the draft budget must be a non-negative integer, got {k!r}")
        if k > MAX_FIXED_BUDGET:
            raise HDError(
                f"a fixed budget of {k} draft tokens per step is more than a draft tree can usefully hold: at most "
                f"{MAX_FIXED_BUDGET} (every draft token is a row of the forward pass; the budget None, the "
                "value-ranked tree, chooses per step)"
            )
        self.k = k

    def draft_budget(self, context_len: int) -> int:
        return self.k

    def observe(self, step: Step) -> None:
        pass
