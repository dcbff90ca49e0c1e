"""One request's context tier as the proposer keeps it: the text, and where each short key last ended.

The engine's context tier (`hdlib.tiers.context`) indexes every key in a Python dict as its text
grows, a few microseconds a token: fine for one request, but a served request brings its whole prompt
at once, every row of the batch waits while it is indexed, and at hundreds of rows even the few new
tokens of each step add up. Here the index is a hash table in two numpy arrays (each key's hash, and
where the key last ended), filled and searched by a handful of small loops that numba compiles where
it is installed (vLLM depends on it, so wherever the proposer serves); without numba, in hdlib's own
environment, the same functions run as Python. A step files only the keys that end at its new tokens.

What it answers is what the engine's context tier drafts first: the tokens that followed the most
recent earlier occurrence of the longest suffix of the text that occurred before (keys of `max_key`
down to `min_key` tokens), read round the loop where the match overlaps its own continuation (as
`hdlib.tiers.context.continuation` does). The table holds the keys ending before the text's last
token, so a lookup of the text's own suffix finds only an earlier occurrence. A hash never decides
alone: the occurrence found is checked token by token, and a key whose slot another key holds (two
keys with one 64-bit hash) is taken as not found, which costs a draft, never a wrong one.
"""

from __future__ import annotations

import contextlib

import numpy as np

PRIME = np.uint64(0x100000001B3)  # FNV's 64-bit prime: a key's hash is its tokens' polynomial mod 2**64,
MIX = np.uint64(0x9E3779B97F4A7C15)  # times 2**64 over the golden ratio, which spreads it to the high bits
ONE, ZERO = np.uint64(1), np.uint64(0)  # (an empty slot holds 0, and every hash is odd)
REACH = 16  # a match is followed back this far, to say how long it is (a longer one is likelier right)
LOAD = 0.6  # the table's slots, at most this share taken: past it, it doubles


def key_hash(buf, end, m):
    """The hash of the `m` tokens ending before `end` (buf[end - m:end]), seeded with `m`: never 0."""
    h = np.uint64(m)
    for j in range(end - m, end):
        h = h * PRIME + np.uint64(buf[j])  # wraps mod 2**64, as intended
    return (h * MIX) | ONE


def slot(keys, h, bits):
    """The slot that holds hash `h`, or the empty one where it goes: from the slot its high `bits`
    name, on to the next until one of the two."""
    mask, i = (1 << bits) - 1, np.int64(h >> np.uint64(64 - bits))
    while keys[i] != h and keys[i] != ZERO:
        i = (i + 1) & mask
    return i


def file_keys(buf, first, last, lo, hi, keys, ends, bits):
    """File every key of `lo`..`hi` tokens ending at each of `first`..`last` (the latest end wins);
    the slots newly taken."""
    taken = 0
    for end in range(first, last + 1):
        for m in range(lo, min(hi, end) + 1):
            h = key_hash(buf, end, m)
            i = slot(keys, h, bits)
            taken += keys[i] == ZERO
            keys[i], ends[i] = h, end
    return taken


def latest_match(buf, n, lo, hi, keys, ends, bits, reach):
    """Where the most recent filed occurrence of the text's longest suffix of `lo`..`hi` tokens
    ended (-1: none), and how many tokens before it (at most `reach`, at least that suffix's) equal
    the text's last ones (0: none). A key that occurred has every suffix of it occur too, so the keys
    are tried from the shortest up, until one has not occurred."""
    found, length = -1, 0
    for m in range(lo, min(hi, n) + 1):
        i = slot(keys, key_hash(buf, n, m), bits)
        if keys[i] == ZERO:
            break
        end, same = ends[i], True
        for j in range(1, m + 1):
            if buf[end - j] != buf[n - j]:
                same = False  # another key's slot: taken as not found
                break
        if not same:
            break
        found, length = end, m
    while 0 < length < reach and found - length > 0 and buf[found - length - 1] == buf[n - length - 1]:
        length += 1
    return found, length


def refile(old_keys, old_ends, keys, ends, bits):
    """Every filed key of the old table, in the new one."""
    for k in range(len(old_keys)):
        if old_keys[k] != ZERO:
            i = slot(keys, old_keys[k], bits)
            keys[i], ends[i] = old_keys[k], old_ends[k]


COMPILED = False  # whether the functions above are numba's compiled ones (see compile_once)
_TRIED = False  # whether compile_once has looked for numba (without it, once is enough)


def compile_once() -> None:
    """Put numba's compiled versions of the functions above in their place, once, where numba is
    installed (their first call compiles them, or loads them from numba's cache); elsewhere leave them
    Python. Done when the first index is made, not at import: vLLM 0.32's CPU worker, as it starts,
    reads every imported module's objects and fails on llvmlite's, so a module that a process imports
    before its vLLM engine starts must not import numba."""
    global COMPILED, _TRIED, key_hash, slot, file_keys, latest_match, refile
    if _TRIED:
        return
    _TRIED = True
    try:
        from numba import njit
    except ImportError:
        return
    key_hash, slot = njit(cache=True)(key_hash), njit(cache=True)(slot)  # (the others call these two)
    file_keys, latest_match, refile = (njit(cache=True)(f) for f in (file_keys, latest_match, refile))
    COMPILED = True


def quiet() -> contextlib.AbstractContextManager:
    """Run as Python, numpy's scalars warn where a hash wraps, as it is meant to: silenced."""
    return contextlib.nullcontext() if COMPILED else np.errstate(over="ignore")


class ContextIndex:
    """The text of one request and an index of its keys of `min_key`..`max_key` tokens."""

    def __init__(self, tokens: np.ndarray, min_key: int = 1, max_key: int = 4) -> None:
        if not 1 <= min_key <= max_key:
            raise ValueError(f"context index: need 1 <= min_key <= max_key, got {min_key}, {max_key}")
        compile_once()
        self.min_key, self.max_key = min_key, max_key
        self._buf = np.empty(max(64, 2 * len(tokens)), dtype=np.int32)  # the text, with room to grow
        self.n = 0
        self._filed = 0  # the keys ending at positions up to this one are in the table
        self._taken = 0  # the table's slots taken
        self._bits = 6
        self._keys = np.zeros(1 << self._bits, dtype=np.uint64)
        self._ends = np.zeros(1 << self._bits, dtype=np.int32)
        self._match = -1  # where the latest match ended (-1: none), as of the last extend
        self.match_length = 0  # the tokens before the text's end it repeats, at most REACH (0: none)
        self.extend(tokens)

    @property
    def tokens(self) -> np.ndarray:
        return self._buf[: self.n]

    @property
    def nbytes(self) -> int:
        """Bytes held: the text buffer and the table (some 60 to 120 a token at 4 key lengths)."""
        return self._buf.nbytes + self._keys.nbytes + self._ends.nbytes

    def extend(self, new: np.ndarray) -> None:
        """Append `new` tokens, file every key that ends before the last of them, and find the match."""
        start, self.n = self.n, self.n + len(new)
        if self.n > len(self._buf):
            grown = np.empty(2 * self.n, dtype=np.int32)
            grown[:start] = self._buf[:start]
            self._buf = grown
        self._buf[start : self.n] = new
        last = self.n - 1  # the keys ending at the last token are filed at the next extend
        if last > self._filed:
            self._reserve((last - self._filed) * (self.max_key - self.min_key + 1))
            with quiet():
                self._taken += int(file_keys(self._buf, self._filed + 1, last, self.min_key, self.max_key,
                                             self._keys, self._ends, self._bits))  # fmt: skip
            self._filed = last
        with quiet():
            found, length = latest_match(self._buf, self.n, self.min_key, self.max_key,
                                         self._keys, self._ends, self._bits, REACH)  # fmt: skip
        self._match, self.match_length = int(found), int(length)

    def _reserve(self, more: int) -> None:
        """Room for `more` keys within the load: the table doubled (and refiled) as often as needed."""
        bits = self._bits
        while self._taken + more > LOAD * (1 << bits):
            bits += 1
        if bits != self._bits:
            keys, ends = np.zeros(1 << bits, dtype=np.uint64), np.zeros(1 << bits, dtype=np.int32)
            refile(self._keys, self._ends, keys, ends, bits)
            self._keys, self._ends, self._bits = keys, ends, bits

    def draft(self, length: int) -> np.ndarray:
        """The `length` tokens after the match, round the loop past the text's end; empty without one."""
        pos = self._match
        if pos < 0 or length <= 0:
            return self._buf[:0]
        period = self.n - pos
        if length <= period:
            return self._buf[pos : pos + length]
        return self._buf[pos + np.arange(length) % period]
