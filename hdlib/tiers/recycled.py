"""The recycled-guesses tier: the target model's own next-token guesses from recent passes (Token
Recycling's idea, drafted hdlib's way).

Every verification pass computes the model's logits at every node of the tree, and most of them
are thrown away. The decoding loop keeps, for each token and each token pair, the model's most
likely next tokens (and their probabilities) the last time it saw them (`hdlib.tiers.guesses`), in
one table per generation that it hands to this tier. Drafting walks the table from the newest
token, best-first by the product of those probabilities, into a small tree; each drafted token
carries its probability as the tier's confidence. Luo et al. (Token Recycling, 2024) draft from
such a table too, with a static tree and a table kept across requests (`hdlib.tiers.other_methods`); here
the table starts empty with each request, and the value-ranked tree learns how far each rank and
depth can be trusted.

The table is learned online from the model's passes, not built offline: this is not the paper's
model-dependent database (`hdlib.tiers.model`), and every record names it apart.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from hdlib.tiers.base import DraftTier, Proposal, StepOutcome, Tier, token_before_newest
from hdlib.tiers.guesses import Successors, check_width

WIDTH = 8  # the model's most likely next tokens kept per token (Token Recycling keeps 8 too)


class RecycledTier(DraftTier):
    """Drafts the model's own recent guesses: paths from the newest token through the table of what
    the model predicted after each token (and token pair), best-first.

    Its table starts empty with each request (`begin`) and learns what the model said in every step
    (`update`).
    """

    tier = Tier.RECYCLED

    def __init__(self, width: int = WIDTH, max_depth: int = 8) -> None:
        check_width(width)
        self.table = Successors(width)
        self.max_depth = max_depth

    def begin(self, prompt: Sequence[int]) -> None:
        self.table.clear()

    def update(self, step: StepOutcome) -> None:
        self.table.update(step)

    def propose(self, context: Sequence[int], budget: int) -> list[Proposal]:
        return best_paths(self.table, context, budget, self.max_depth)

    def __repr__(self) -> str:
        return f"RecycledTier({len(self.table.table):,} keys of width {self.table.width})"


def best_paths(table: Successors, context: Sequence[int], budget: int, max_depth: int = 8) -> list[Proposal]:
    """Paths from the newest token of `context` through `table`, best-first; each adds one node to
    the trie. A proposal's key length is the order of the entry its last token came from.

    A node's score is the product of the probabilities on its path. Each node's guesses are best
    first, so a node's first child and its next sibling are the only candidates it opens: the heap
    holds about two entries per proposal instead of the table's width. Equal scores go in the order
    they entered the heap."""
    found: list[Proposal] = []
    start = (token_before_newest(context), int(context[-1]))
    # (-score, entry number, path, its probabilities, order used, the parent's score and guesses, rank)
    heap: list[tuple[float, int, tuple[int, ...], tuple[float, ...], int, float, tuple, int]] = []
    entries = 0

    def open_child(
        score: float, path: tuple[int, ...], probs: tuple[float, ...], used: int, guesses: tuple, rank: int
    ) -> None:
        nonlocal entries
        nxt, p = guesses[rank]
        heapq.heappush(heap, (-score * p, entries, (*path, nxt), (*probs, p), used, score, guesses, rank))
        entries += 1

    used, guesses = table.guesses(start[1], start[0])
    if guesses and max_depth > 0:
        open_child(1.0, (), (), used, guesses, 0)
    while heap and len(found) < budget:
        neg_score, _, path, probs, order, parent_score, siblings, rank = heapq.heappop(heap)
        found.append(Proposal(path, key_length=order, confidence=probs))
        if rank + 1 < len(siblings):
            open_child(parent_score, path[:-1], probs[:-1], order, siblings, rank + 1)
        if len(path) < max_depth:
            used, guesses = table.guesses(path[-1], (start + path)[-2])
            if guesses:
                open_child(-neg_score, path, probs, used, guesses, 0)
    return found
