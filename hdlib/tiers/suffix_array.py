"""A suffix array over a tokenized corpus: built with numpy, searched by comparing bytes.

The corpus is one int32 array of token ids, documents separated by `SEPARATOR` (-1), ending with
one. Its suffix array lists the start of every suffix that starts with a token, in lexicographic
order of the suffixes; a separator sorts after every token and is never part of a key, so no match
crosses a document boundary. All the suffixes that start with a key form one contiguous range, and
inside that range they are sorted by what follows the key: identical continuations sit together.

Building: prefix doubling (Manber and Myers) with numpy's argsort, O(n log n) per round. A lookup
only ever compares a key of at most `max_key` tokens plus a continuation of `draft_len` tokens, so
the suffixes need only be sorted by their first `depth` tokens; four rounds sort by 16 tokens,
whatever the corpus or vocabulary size. Ties beyond `depth` keep an unspecified order.

Searching: the corpus is also kept as big-endian uint32 bytes, whose byte order is the token order
(the separator, 0xFFFFFFFF, last), so comparing a suffix with a key is one C-level `bytes`
comparison and the range search is `bisect` over the suffix array. A table of where each first
token's range starts saves the first ~15 of the ~25 bisection steps.
"""

from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from hdlib.errors import HDError

SEPARATOR = -1  # between documents; never a token, never matched
MAX_TOKEN = 2**30  # token ids stay below this, so that two of them pack into one int64 sort key


def join_documents(documents: Iterable[Sequence[int] | np.ndarray]) -> np.ndarray:
    """One int32 corpus: every document followed by a separator. Empty documents are dropped."""
    parts: list[np.ndarray] = []
    for doc in documents:
        arr = np.asarray(doc, dtype=np.int64)
        if arr.size == 0:
            continue
        if arr.min() < 0 or arr.max() >= MAX_TOKEN:
            raise HDError(f"token ids must lie in 0 .. {MAX_TOKEN - 1}")
        parts.append(arr.astype(np.int32))
        parts.append(np.array([SEPARATOR], np.int32))
    return np.concatenate(parts) if parts else np.array([SEPARATOR], np.int32)


def build_suffix_array(
    tokens: np.ndarray, depth: int | None = None, progress: Callable[[int], None] | None = None
) -> np.ndarray:
    """The int32 start positions of the suffixes of `tokens` that start with a token (not a separator),
    sorted by their first `depth` tokens (all of them when None); a separator sorts after every token,
    and the end of the corpus before everything. `progress(d)` is called when sorted to depth d."""
    tokens = np.asarray(tokens)
    n = len(tokens)
    if n == 0:
        return np.zeros(0, np.int32)
    if n >= 2**31 - 1:
        raise HDError(f"a corpus of {n:,} tokens is too large for int32 positions")
    if depth is not None and depth < 1:
        raise HDError(f"suffix array depth must be at least 1, got {depth}")
    # Values 1..MAX_TOKEN + 1: tokens + 1, the separator after all of them; 0 is "past the end".
    value = tokens.astype(np.int64)
    value[value < 0] = MAX_TOKEN
    value += 1
    # First round: two tokens per key, packed into one int64 (each value fits in 32 bits).
    key = value << 32
    if depth != 1:
        key[:-1] |= value[1:]
    del value
    sorted_depth = 1 if depth == 1 else 2
    while True:
        order = np.argsort(key)  # ties only beyond `sorted_depth` tokens: their order does not matter
        ordered = key[order]
        new = np.empty(n, bool)
        new[0] = True
        np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
        del ordered
        rank = np.empty(n, np.int64)
        rank[order] = np.cumsum(new, dtype=np.int64)  # 1..n, 0 stays "past the end"
        distinct = int(np.count_nonzero(new))
        del new
        if progress is not None:
            progress(sorted_depth)
        if distinct == n or (depth is not None and sorted_depth >= depth):
            break
        # Sorted by `sorted_depth` tokens; pairing a suffix's rank with the rank `sorted_depth`
        # tokens later sorts by twice as many.
        del key
        key = rank << 32
        key[:-sorted_depth] |= rank[sorted_depth:]
        del rank
        sorted_depth *= 2
    del key, rank
    return order[tokens[order] >= 0].astype(np.int32)


@dataclass(frozen=True)
class Prefixes:
    """The distinct continuations of a key, as trie nodes: node i is `rows[first[i], :depth[i]]`,
    seen `count[i]` times among the rows read (rows are sorted, so each node's rows are contiguous)."""

    rows: np.ndarray  # (S, L) int32, separators (and everything after one) set to SEPARATOR
    depth: np.ndarray  # (K,) 1..L
    first: np.ndarray  # (K,) index of the node's first row
    count: np.ndarray  # (K,) rows that start with the node's tokens


def count_prefixes(rows: np.ndarray) -> Prefixes:
    """Every distinct prefix of the (lexicographically sorted) rows that holds no separator."""
    rows = np.asarray(rows)
    s, length = rows.shape
    if s == 0 or length == 0:
        empty = np.zeros(0, np.int64)
        return Prefixes(rows, empty, empty, empty)
    # A row's tokens from its first separator on are not text: make them all separators.
    rows = np.where(np.logical_or.accumulate(rows == SEPARATOR, axis=1), SEPARATOR, rows)
    # A row starts a node at depth d when it differs from the row before within its first d tokens:
    # at every depth above `shared[r]`, the tokens it shares with the row before (row 0: none).
    differ = rows[1:] != rows[:-1]
    shared = np.zeros(s, np.int64)
    shared[1:] = np.where(differ.any(axis=1), differ.argmax(axis=1), length)
    starts = shared[None, :] < np.arange(1, length + 1)[:, None]  # (L, S): depth d-1, row r
    flat = np.flatnonzero(starts)  # (depth - 1) * S + row, by depth, then row
    level, first = flat // s, flat % s  # level = depth - 1
    # A node's rows run to the next node start at the same depth, or to the last row.
    after = np.append(flat[1:], length * s)
    end = np.where(after // s == level, after % s, s)
    separator = rows == SEPARATOR
    text_len = np.where(separator.any(axis=1), separator.argmax(axis=1), length)  # tokens before one
    keep = level < text_len[first]  # a node holding a separator is no continuation
    return Prefixes(rows, level[keep] + 1, first[keep], (end - first)[keep])


class SuffixIndex:
    """Search a corpus and its suffix array (see `build_suffix_array`)."""

    def __init__(self, tokens: np.ndarray, suffixes: np.ndarray, depth: int | None) -> None:
        tokens = np.ascontiguousarray(tokens, dtype=np.int32)
        if len(tokens) == 0 or tokens[-1] != SEPARATOR:
            raise HDError("a corpus must end with a separator")
        self.depth = depth  # suffixes are sorted by this many tokens (None: entirely)
        # The big-endian bytes are what the search compares; the int32 array is a view of them.
        self._bytes = tokens.astype(">u4").tobytes()
        self.tokens = np.frombuffer(self._bytes, dtype=">u4").view(">i4")
        self.suffixes = np.ascontiguousarray(suffixes, dtype=np.int32)
        self._sa = memoryview(self.suffixes)  # plain ints on indexing: fast inside bisect
        words = tokens[tokens >= 0]
        self.vocab_size = int(words.max()) + 1 if len(words) else 0
        # Where the range of suffixes starting with token t begins: t's rank among all tokens.
        starts = np.zeros(self.vocab_size + 1, np.int64)
        np.cumsum(np.bincount(words, minlength=self.vocab_size), out=starts[1:])
        if starts[-1] != len(self.suffixes):
            raise HDError("the suffix array does not match its corpus")
        self._starts = starts.tolist()

    def __len__(self) -> int:
        return len(self.suffixes)

    def find(self, key: Sequence[int]) -> tuple[int, int]:
        """The range [lo, hi) of suffix-array entries whose suffixes start with `key` (hi - lo = its
        number of occurrences)."""
        m = len(key)
        if m == 0:
            return 0, len(self.suffixes)
        if self.depth is not None and m > self.depth:
            raise HDError(f"keys of {m} tokens need suffixes sorted by at least {m}, this index has {self.depth}")
        first = int(key[0])
        if not 0 <= first < self.vocab_size:
            return 0, 0
        lo, hi = self._starts[first], self._starts[first + 1]
        if m == 1 or lo == hi:
            return lo, hi
        try:
            target = struct.pack(f">{m}I", *key)
        except struct.error:  # a token id outside 0 .. 2**32 - 1 is in no corpus
            return 0, 0
        width, text = 4 * m, self._bytes

        def prefix(position: int) -> bytes:
            return text[4 * position : 4 * position + width]

        lo = bisect_left(self._sa, target, lo, hi, key=prefix)
        hi = bisect_right(self._sa, target, lo, hi, key=prefix)
        return lo, hi

    def positions(self, lo: int, hi: int, at_most: int | None = None) -> np.ndarray:
        """Corpus positions of the suffix-array entries lo..hi-1, or of `at_most` of them evenly spaced
        (in suffix-array order either way)."""
        count = hi - lo
        if at_most is None or count <= at_most:
            return self.suffixes[lo:hi].astype(np.int64)
        picks = lo + (np.arange(at_most, dtype=np.int64) * count) // at_most
        return self.suffixes[picks].astype(np.int64)

    def following(self, positions: np.ndarray, length: int) -> np.ndarray:
        """(len(positions), length) int32: the tokens from each position on (separators past the end)."""
        cols = positions[:, None] + np.arange(length)
        np.minimum(cols, len(self.tokens) - 1, out=cols)  # the corpus ends with a separator
        return self.tokens[cols].astype(np.int32)

    def continuations(self, key: Sequence[int], length: int, at_most: int | None = None) -> tuple[Prefixes, int]:
        """The trie of the `length`-token continuations of `key` (of `at_most` evenly spaced
        occurrences when there are more), and the number of occurrences of `key`."""
        if self.depth is not None and len(key) + length > self.depth:
            raise HDError(
                f"continuations of {length} tokens after a {len(key)}-token key need suffixes sorted by "
                f"{len(key) + length} tokens, this index has {self.depth}"
            )
        lo, hi = self.find(key)
        rows = self.following(self.positions(lo, hi, at_most) + len(key), length)
        return count_prefixes(rows), hi - lo
