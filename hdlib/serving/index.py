"""One request's context tier as the proposer keeps it: the text, and where each short key ended.

The engine's context tier (`hdlib.tiers.context`) indexes every key in a Python dict as its text
grows, a few microseconds a token: fine for one request, but a served request brings its whole prompt
at once, and every row of the batch waits while it is indexed. Here the prompt is indexed with numpy:
for each key length m, the hash of every m tokens ending at each position, sorted, beside those end
positions (the "base"); a lookup is a binary search. Tokens arriving later, a few a step, go into a
small dict (the "delta"); when the delta has grown as large as half the base, the base is rebuilt
over everything, so the work per token stays constant on average and a step reads only its new tokens.

What it answers is what the engine's context tier drafts first: the tokens that followed the most
recent earlier occurrence of the longest suffix of the text that occurred before (keys of `max_key`
down to `min_key` tokens), read round the loop where the match overlaps its own continuation (as
`hdlib.tiers.context.continuation` does). A hash never decides alone: every occurrence found is
checked token by token.
"""

from __future__ import annotations

import numpy as np

PRIME = np.uint64(0x100000001B3)  # FNV's 64-bit prime: a key's hash is its tokens' polynomial mod 2**64,
MIX = np.uint64(0x9E3779B97F4A7C15)  # times 2**64 over the golden ratio, which spreads it to the high bits
MASK = (1 << 64) - 1
SHIFT = np.uint64(32)
LOW = (1 << 32) - 1  # an entry's low bits: where its key ended
REBUILD_MIN = 256  # delta positions below which the base is never rebuilt (a rebuild costs a sort)


def key_hashes(tokens: np.ndarray, m: int) -> np.ndarray:
    """(n - m + 1,) uint64: the hash of tokens[e - m : e] for every end e from m to n."""
    t = tokens.astype(np.uint64, copy=False)
    n = len(t)
    h = np.zeros(max(n - m + 1, 0), dtype=np.uint64)
    for j in range(m):
        h = h * PRIME + t[j : n - m + 1 + j]  # wraps mod 2**64, as intended
    return h * MIX


def key_hash(key: list[int]) -> int:
    """The hash `key_hashes` gives `key`, computed in Python for one key."""
    h, prime = 0, int(PRIME)
    for token in key:
        h = (h * prime + token) & MASK
    return (h * int(MIX)) & MASK


class ContextIndex:
    """The text of one request and an index of its keys of `min_key`..`max_key` tokens."""

    def __init__(self, tokens: np.ndarray, min_key: int = 1, max_key: int = 4) -> None:
        if not 1 <= min_key <= max_key:
            raise ValueError(f"context index: need 1 <= min_key <= max_key, got {min_key}, {max_key}")
        self.min_key, self.max_key = min_key, max_key
        self._buf = np.empty(max(64, 2 * len(tokens)), dtype=np.int32)  # the text, with room to grow
        self.n = 0
        self._base_n = 0  # tokens the sorted base covers
        self._entries: dict[int, np.ndarray] = {}  # key length -> sorted (hash << 32 | end), uint64
        self._delta: dict[tuple[int, ...], list[int]] = {}  # keys ending after the base -> their ends
        self._delta_size = 0
        self._base_bytes = 0
        self.extend(tokens)

    @property
    def tokens(self) -> np.ndarray:
        return self._buf[: self.n]

    @property
    def nbytes(self) -> int:
        """Bytes held: the text buffer, the base's arrays, and about 100 per delta position."""
        return self._buf.nbytes + self._base_bytes + 100 * self._delta_size

    def extend(self, new: np.ndarray) -> None:
        """Append `new` tokens and index every key that ends at one of them."""
        start, self.n = self.n, self.n + len(new)
        if self.n > len(self._buf):
            grown = np.empty(2 * self.n, dtype=np.int32)
            grown[:start] = self._buf[:start]
            self._buf = grown
        self._buf[start : self.n] = new
        if self.n - self._base_n > max(REBUILD_MIN, self._base_n // 2):
            self._rebuild()
            return
        offset = max(0, start - self.max_key + 1)
        tail = self._buf[offset : self.n].tolist()  # the keys that end at a new token, and no more
        delta, lo, hi = self._delta, self.min_key, self.max_key
        for end in range(start + 1 - offset, self.n + 1 - offset):
            at = end + offset
            for m in range(lo, (hi if at >= hi else at) + 1):
                key = tuple(tail[end - m : end])
                if key in delta:
                    delta[key].append(at)
                else:
                    delta[key] = [at]
        self._delta_size += (self.n - start) * (hi - lo + 1)  # (a few too many at the text's start: no matter)

    def _rebuild(self) -> None:
        tokens = self.tokens
        for m in range(self.min_key, self.max_key + 1):
            # Each entry packs a key's hash (its high 32 bits) over where the key ended, so one plain
            # sort orders the entries by key and, within a key, by position.
            ends = np.arange(m, self.n + 1, dtype=np.uint64)
            self._entries[m] = np.sort((key_hashes(tokens, m) >> SHIFT << SHIFT) | ends)
        self._base_n, self._delta, self._delta_size = self.n, {}, 0
        self._base_bytes = sum(a.nbytes for a in self._entries.values())

    def match(self) -> int | None:
        """Where the text went on after the most recent earlier occurrence of its longest suffix
        that occurred before (None: no suffix did). A key that occurred before has every suffix of it
        occur before too, so the keys are tried from the shortest up, until one has not occurred."""
        n = self.n
        last = self._buf[max(0, n - self.max_key) : n].tolist()
        found = None
        for m in range(self.min_key, min(self.max_key, n) + 1):
            end = self._latest(last[len(last) - m :], n)
            if end is None:
                break
            found = end
        return found

    def _latest(self, key: list[int], n: int) -> int | None:
        """Where the most recent occurrence of `key` ended, before the text's own end `n`."""
        for end in reversed(self._delta.get(tuple(key), ())):
            if end < n:  # end == n is the suffix itself
                return end
        m, entries = len(key), self._entries.get(len(key))
        if entries is None:
            return None
        h = key_hash(key) >> 32 << 32
        lo, hi = int(entries.searchsorted(np.uint64(h))), int(entries.searchsorted(np.uint64(h | LOW)))
        while hi > lo:  # the most recent first, a few at a time: the first is nearly always it
            for entry in reversed(entries[max(lo, hi - 8) : hi].tolist()):
                end = entry & LOW
                if end < n and self._buf[end - m : end].tolist() == key:
                    return end
            hi -= 8
        return None

    def draft(self, length: int) -> np.ndarray:
        """The `length` tokens after the match, round the loop past the text's end; empty without one."""
        pos = self.match()
        if pos is None or length <= 0:
            return self._buf[:0]
        period = self.n - pos
        if length <= period:
            return self._buf[pos : pos + length]
        return self._buf[pos + np.arange(length) % period]
