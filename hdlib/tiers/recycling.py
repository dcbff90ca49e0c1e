"""The model tier's online part: the target model's own next-token guesses, recycled (Token Recycling).

Every verification pass computes the model's logits at every node of the tree, and most of them
are thrown away. This table keeps, for each token, the model's `width` most likely next tokens (and
their probabilities) the last time that token was a node, whatever its context. Drafting walks the
table from the newest token, best-first by the product of those probabilities, into a small tree;
each drafted token carries its probability as the tier's confidence. Luo et al. (Token Recycling, 2024) draft
Spec-Bench's answers this way; here the table is one part of the model tier, beside the offline
phrase database, and the value-ranked tree learns how far each rank and depth can be trusted.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from hdlib.errors import HDError
from hdlib.tiers.base import Proposal

SOURCE = "recycled"


class Successors:
    def __init__(self, width: int = 8) -> None:
        if width < 1:
            raise HDError(f"recycled successors: width must be at least 1, got {width}")
        self.width = width
        self.table: dict[int, tuple[tuple[int, float], ...]] = {}  # token -> (next token, probability), best first

    def clear(self) -> None:
        self.table.clear()

    def observe(
        self, tokens: Sequence[int], successors: Sequence[Sequence[int]], probabilities: Sequence[Sequence[float]]
    ) -> None:
        """`successors[i]`: the model's most likely tokens after node `tokens[i]`, best first, with
        their `probabilities[i]`."""
        for token, nexts, probs in zip(tokens, successors, probabilities, strict=True):
            self.table[int(token)] = tuple((int(t), float(p)) for t, p in zip(nexts[: self.width], probs))

    def propose(self, root: int, budget: int, max_depth: int = 8) -> list[Proposal]:
        """Paths from `root` through the table, best-first; each adds one node to the trie."""
        found: list[Proposal] = []
        heap: list[tuple[float, int, tuple[int, ...], tuple[float, ...]]] = [(-1.0, 0, (), ())]
        tie = 1
        while heap and len(found) < budget:
            neg_score, _, path, probs = heapq.heappop(heap)
            if path:
                found.append(Proposal(path, key_length=1, source=SOURCE, confidence=probs))
            if len(path) == max_depth:
                continue
            for token, p in self.table.get(path[-1] if path else root, ()):
                heapq.heappush(heap, (neg_score * p, tie, (*path, token), (*probs, p)))
                tie += 1
        return found
