"""Hand-made traces for the viz tests (tests/test_viz_*.py): a three-step generation whose first step
drafts from three tiers, its trees, and `trace_of`, a figure's trace by name."""

from __future__ import annotations

from hdlib.engine.trace import Generation, Step, StepTimes
from hdlib.engine.tree import DraftTree
from hdlib.tiers import BONUS, Tier

C, R, M, S, T = Tier.CONTEXT, Tier.RECYCLED, Tier.MODEL, Tier.STATISTICS, BONUS


def times(total: float) -> StepTimes:
    return StepTimes(draft=0.0, tree=0.0, forward=total, accept=0.0, update=0.0)


def first_tree() -> DraftTree:
    tree = DraftTree(root=7)
    tree.add([1, 2, 3], C, 10, 10)  # nodes 1, 2, 3
    tree.add([1, 4], M, 10, 10)  # node 4 under node 1
    tree.add([5], S, 10, 10)  # node 5
    return tree


def hand_trace(pieces: bool = True) -> Generation:
    second = DraftTree(root=9)
    second.add([6, 8], M, 10, 10)
    steps = [
        Step(0, 6, 8, first_tree(), (0, 1, 2), (1, 2, 9), (C, C, T), times(0.2)),
        Step(1, 9, 8, second, (0, 1), (6, 3), (M, T), times(0.3)),
        Step(2, 11, 0, DraftTree(root=3), (0,), (4,), (T,), times(0.1)),
    ]
    return Generation(
        prompt_ids=[10, 11, 12, 13, 14, 7],
        steps=steps,
        stop_reason="max_new_tokens",
        wall_s=0.75,
        prefill_s=0.15,
        tier_order=[C, M],
        pieces=["a", " b", "\n", "c", " d", " e"] if pieces else [],
    )


def trace_of(fig, name: str):
    (found,) = [t for t in fig.data if t.name == name]
    return found
