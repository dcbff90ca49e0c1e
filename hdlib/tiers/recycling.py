"""The model tier's online part: the target model's own next-token guesses, recycled (Token Recycling).

Every verification pass computes the model's logits at every node of the tree, and most of them
are thrown away. This table keeps, for each token, the model's `width` most likely next tokens (and
their probabilities) the last time that token was a node, whatever its context. Drafting walks the
table from the newest token, best-first by the product of those probabilities, into a small tree;
each drafted token carries its probability as the tier's confidence. Luo et al. (Token Recycling,
2024) draft Spec-Bench's answers this way; here the table is one part of the model tier, beside the
offline phrase database, and the value-ranked tree learns how far each rank and depth can be trusted.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from hdlib.errors import HDError
from hdlib.tiers.base import ModelGuesses, Proposal, token_before_newest

SOURCE = "recycled"


class Successors:
    """The model's most likely next tokens after a token (order 1) and after a token pair (order 2).

    An order-2 entry is more specific to the context (the model saw that very pair) and is used
    where there is one; order 1 fills in.
    """

    def __init__(self, width: int = 8) -> None:
        if width < 1:
            raise HDError(f"recycled successors: width must be at least 1, got {width}")
        self.width = width
        # (token,) or (previous token, token) -> (next token, probability), best first
        self.table: dict[tuple[int, ...], tuple[tuple[int, float], ...]] = {}
        self._last: ModelGuesses | None = None  # the pass observed last

    def clear(self) -> None:
        self.table.clear()
        self._last = None

    def observe(self, guesses: ModelGuesses) -> None:
        """Keep the pass's guesses after every token and token pair; newer ones replace older ones.
        A table shared by several readers (`share_successors`) takes each pass once."""
        if guesses is self._last:
            return
        self._last = g = guesses
        table, width = self.table, self.width
        for token, before, nexts, probs in zip(g.tokens, g.previous, g.successors, g.probabilities, strict=True):
            entry = tuple(zip(nexts[:width], probs))
            table[(token,)] = entry
            if before >= 0:
                table[(before, token)] = entry

    def guesses(self, token: int, before: int = -1) -> tuple[int, tuple[tuple[int, float], ...]]:
        """(order used, guesses) after `token` preceded by `before`: (0, ()) when never seen."""
        for key in ((before, token), (token,)) if before >= 0 else ((token,),):
            found = self.table.get(key)
            if found is not None:
                return len(key), found
        return 0, ()

    def probability(self, token: int, after: int, before: int = -1) -> float:
        """The model's probability of `token` after (`before`, `after`) when it last saw them: 0 if it
        was not among the `width` most likely, -1 if it never saw `after`."""
        order, guesses = self.guesses(after, before)
        if order == 0:
            return -1.0
        return next((p for t, p in guesses if t == token), 0.0)

    def propose(self, context: Sequence[int], budget: int, max_depth: int = 8) -> list[Proposal]:
        """Paths from the newest token of `context` through the table, best-first; each adds one
        node to the trie. A proposal's key length is the order of the entry its last token came from.

        A node's score is the product of the probabilities on its path. Each node's guesses are
        best first, so a node's first child and its next sibling are the only candidates it opens:
        the heap holds about two entries per proposal instead of `width`. Equal scores go in the
        order they entered the heap."""
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

        used, guesses = self.guesses(start[1], start[0])
        if guesses and max_depth > 0:
            open_child(1.0, (), (), used, guesses, 0)
        while heap and len(found) < budget:
            neg_score, _, path, probs, order, parent_score, siblings, rank = heapq.heappop(heap)
            found.append(Proposal(path, key_length=order, source=SOURCE, confidence=probs))
            if rank + 1 < len(siblings):
                open_child(parent_score, path[:-1], probs[:-1], order, siblings, rank + 1)
            if len(path) < max_depth:
                used, guesses = self.guesses(path[-1], (start + path)[-2])
                if guesses:
                    open_child(-neg_score, path, probs, used, guesses, 0)
        return found


def share_successors(readers: Sequence[object]) -> None:
    """Give every reader of the model's recycled guesses (an object with a `successors` table: the
    model tier, the value-ranked tree) of one width the same table, so that each verification pass
    fills one table once instead of one per reader."""
    shared: dict[int, Successors] = {}
    for reader in readers:
        table = getattr(reader, "successors", None)
        if isinstance(table, Successors):
            reader.successors = shared.setdefault(table.width, table)  # type: ignore[attr-defined]
