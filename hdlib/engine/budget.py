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

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol

from hdlib.engine.trace import Step, TierLookup
from hdlib.engine.tree import DraftTree
from hdlib.errors import HDError
from hdlib.tiers.base import DraftTier
from hdlib.tiers.rider import PassRider

MAX_BUDGET = 64  # draft tokens the forward-time profile is measured for (1 + 64 tokens a pass)
FIXED_BUDGET = 16  # draft tokens per step where a fixed budget is wanted and none is given (the notebooks' too)
# The most draft tokens a fixed budget may verify per step: four times the profile's range. Every
# draft token is a row of the forward pass, and on a CPU a pass of 2,000 rows took 4.7 s.
MAX_FIXED_BUDGET = 4 * MAX_BUDGET


class BudgetPolicy(Protocol):
    """How much a step drafts and verifies: a gate (which tiers to ask, and for how many tokens), a
    selector (which drafted nodes to verify), and `update`, which learns from every step."""

    def gate(self, tier: DraftTier, tree: DraftTree, context: Sequence[int], asked: Sequence[TierLookup]) -> int:
        """The draft tokens `tier` may add to `tree` (the tiers asked so far, `asked`, drafted it
        after `context`); 0: it is not asked. For the first tier (nothing asked yet) it is the step's
        budget."""
        ...

    def select(self, tree: DraftTree, context: Sequence[int], rider: PassRider | None) -> Selection:
        """The part of the drafted tree to verify, and whether `rider`'s rows ride in the pass."""
        ...

    def update(self, step: Step) -> None:
        """Learn from a step the engine just took."""
        ...


@dataclass(frozen=True)
class Selection:
    """What a step verifies: the kept tree; per kept node the estimated probability that it is
    accepted and the kinds that estimate was made from (None where the policy does not estimate);
    whether the rider's rows ride in the pass."""

    tree: DraftTree
    estimates: tuple[float, ...] | None = None
    kinds: tuple[Hashable, ...] | None = None
    ride: bool = True


class FixedBudget:
    """Up to `k` draft tokens a step, the tiers filling them in order, every one verified (a rider's
    rows in every pass, as Lookahead decoding runs its window); nothing learned.

    >>> from hdlib.tiers import ContextTier
    >>> FixedBudget(16).gate(ContextTier(), DraftTree(root=7), [7], ())
    16
    """

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

    def gate(self, tier: DraftTier, tree: DraftTree, context: Sequence[int], asked: Sequence[TierLookup]) -> int:
        return self.k - tree.n_drafted

    def select(self, tree: DraftTree, context: Sequence[int], rider: PassRider | None) -> Selection:
        return Selection(tree)

    def update(self, step: Step) -> None:
        pass
