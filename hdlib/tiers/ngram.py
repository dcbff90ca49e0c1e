"""One n-gram index for every tier that matches the suffix of the context.

An `NGramIndex` maps keys of 1..max_key tokens to a list of values in insertion order. What a value
means is the tier's business: the context tier stores where the key ended in the running text (so a
continuation is read live and grows as the text grows); an offline tier stores ranked continuations.
Lookup walks the suffixes of the context from the longest key down, which is what "match the
longest suffix it can" means for every tier.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Generic, TypeVar

from hdlib.errors import HDError

V = TypeVar("V")


class NGramIndex(Generic[V]):
    """Values by n-gram key, one table per key length from `min_key` to `max_key` tokens.

    >>> index = NGramIndex(max_key=2)
    >>> index.add([3, 4], "after 3 4"); index.add([4], "after 4")
    >>> list(index.suffix_matches([9, 3, 4]))  # the longest suffix that is a key first
    [(2, ['after 3 4']), (1, ['after 4'])]
    """

    def __init__(self, max_key: int, min_key: int = 1) -> None:
        if not 1 <= min_key <= max_key:
            raise HDError(f"n-gram keys need 1 <= min_key <= max_key, got {min_key} and {max_key}")
        self.max_key = max_key
        self.min_key = min_key
        # One dict per key length: a long key never shadows a short one with the same tail.
        self._tables: dict[int, dict[tuple[int, ...], list[V]]] = {
            m: {} for m in range(min_key, max_key + 1)
        }

    def add(self, key: Sequence[int], value: V) -> None:
        self._tables[len(key)].setdefault(tuple(key), []).append(value)

    def get(self, key: Sequence[int]) -> list[V]:
        table = self._tables.get(len(key))
        return table.get(tuple(key), []) if table is not None else []

    def suffix_matches(self, context: Sequence[int]) -> Iterator[tuple[int, list[V]]]:
        """(key length, values) for each suffix of `context` that is a key, longest first."""
        for m in range(min(self.max_key, len(context)), self.min_key - 1, -1):
            values = self._tables[m].get(tuple(context[len(context) - m :]))
            if values:
                yield m, values

    def __len__(self) -> int:
        return sum(len(t) for t in self._tables.values())


class DraftSet:
    """Drafts gathered, best first, within a token budget, with nothing the drafter's trie would merge.

    A candidate that is a prefix of a kept draft (or equal to one) adds no trie node, so it is
    dropped; one that extends a kept draft takes that draft's place and rank and pays only for its
    new tokens. So no kept draft is a prefix of another and the budget buys only new paths. Each
    draft carries a note (whatever the tier wants to explain it with: a count, a position).
    """

    def __init__(self, budget: int) -> None:
        self.drafts: list[tuple[int, ...]] = []
        self.notes: list[object] = []
        self.left = budget  # tokens still to spend

    @property
    def full(self) -> bool:
        return self.left <= 0

    def offer(self, candidate: Sequence[int], note: object = None) -> bool:
        """Keep `candidate` (cut to the budget) unless it adds nothing; whether it was kept."""
        candidate = tuple(candidate)
        if self.left <= 0 or not candidate:
            return False
        for i, kept in enumerate(self.drafts):
            if len(candidate) > len(kept) and candidate[: len(kept)] == kept:
                extended = candidate[: len(kept) + self.left]
                self.left -= len(extended) - len(kept)
                self.drafts[i], self.notes[i] = extended, note
                return True
        draft = candidate[: self.left]
        if any(kept[: len(draft)] == draft for kept in self.drafts):
            return False
        self.drafts.append(draft)
        self.notes.append(note)
        self.left -= len(draft)
        return True
