"""The Lookahead window (Fu et al., ICML 2024, "Break the Sequential Dependency of LLM Inference
Using Lookahead Decoding"): Jacobi iteration riding in the verification pass, and the n-grams it
harvests.

The window holds N - 1 levels of W guessed tokens (n-grams of N; Lookahead's defaults W = 7, N = 5).
Token (l, i), level l and column i, stands at position past + 1 + i + l, past being the tokens in the
KV cache: level 0 guesses the W tokens after the root, and each level above guesses one position
further on. In the pass, token (l, i) sees the cache, the root, level 0's tokens of columns 0..i and
the tokens of levels 1..l of its own column, so the tokens of column i up to level l stand in
consecutive positions and the model's next token after the top one completes an n-gram of N tokens,
which is harvested into an `NGramPool`. Then the window moves up a level: level 0 is dropped, each
level becomes the one below it, and the model's next tokens after the top level become the new top
level. While the window fills (its first N - 2 passes) those next tokens become a new level instead,
and nothing is harvested.

The draft tree's nodes never see the window's tokens, and the window sees only the tree's root, so
what the model says about the drafts is what it would say without the window: lossless, whatever
the window holds. The window's entries in the KV cache are dropped with the rejected branches.
"""

from __future__ import annotations

import functools
import random
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hdlib.errors import HDError
from hdlib.tiers.rider import RiderOutcome, RiderRows

Gram = tuple[int, ...]
WINDOW_SOURCE = "window"  # the source of a draft that a window harvested (in a tier of several parts)


@dataclass(frozen=True)
class WindowSettings:
    width: int = 7  # W: the window's columns, n-grams harvested per pass once it is full
    ngram: int = 5  # N: the harvested n-grams' length; the window has N - 1 levels, drafts are N - 1 long
    guesses: int = 7  # G: n-grams kept per first token and drafted per step, the most recent first

    def __post_init__(self) -> None:
        for name, least in (("width", 1), ("ngram", 2), ("guesses", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or value < least:
                raise HDError(f"Lookahead window: {name} must be an integer of at least {least}, got {value!r}")

    @property
    def levels(self) -> int:
        return self.ngram - 1

    @property
    def size(self) -> int:
        """Tokens the full window adds to a pass."""
        return self.width * self.levels

    @property
    def reach(self) -> int:
        """How far past the root the window's farthest token stands."""
        return self.width + self.levels - 1


class NGramPool:
    """n-grams by their first token: at most `per_key` continuations a key, the most recently added
    first; adding one again makes it the most recent, and the least recent goes when a key is full."""

    def __init__(self, per_key: int) -> None:
        if per_key < 1:
            raise HDError(f"an n-gram pool keeps at least one continuation per key, got {per_key}")
        self.per_key = per_key
        self._pool: dict[int, OrderedDict[Gram, None]] = {}

    def add(self, gram: Sequence[int]) -> None:
        key, *rest = (int(t) for t in gram)
        continuations = self._pool.setdefault(key, OrderedDict())
        continuations[tuple(rest)] = None
        continuations.move_to_end(tuple(rest), last=False)
        if len(continuations) > self.per_key:
            continuations.popitem(last=True)

    def get(self, key: int) -> list[Gram]:
        """The continuations after `key`, the most recent first."""
        return list(self._pool.get(int(key), ()))

    def clear(self) -> None:
        self._pool.clear()

    def __len__(self) -> int:
        return sum(len(c) for c in self._pool.values())


class LookaheadWindow:
    """One request's Jacobi window; the n-grams it harvests go into `pool`.

    `begin` seeds level 0 with tokens of the prompt (drawn with `seed`, so a run replays), `rows` is
    its part of the next pass, `advance` takes the model's next token after each top-level token (which
    `update` reads from a step the window rode in): a `PassRider` (`hdlib.tiers.rider`), the engine's
    one hook for rows in a pass.
    """

    source = WINDOW_SOURCE

    def __init__(self, settings: WindowSettings | None = None, pool: NGramPool | None = None, seed: int = 0) -> None:
        self.settings = settings or WindowSettings()
        self.pool = pool if pool is not None else NGramPool(self.settings.guesses)
        self.seed = seed
        self.levels: list[list[int]] = []
        self.passes = 0  # passes the window rode in, this request

    def begin(self, prompt: Sequence[int]) -> None:
        """A new request: an empty pool, level 0 drawn from the prompt."""
        if len(prompt) == 0:
            raise HDError("the Lookahead window starts from the prompt's tokens: the prompt is empty")
        rng = random.Random(self.seed)
        self.levels = [[int(rng.choice(prompt)) for _ in range(self.settings.width)]]
        self.pool.clear()
        self.passes = 0

    @property
    def size(self) -> int:
        """Tokens the window adds to the next pass."""
        return self.settings.width * len(self.levels)

    def fits(self, past_len: int, tree_size: int, limit: int) -> bool:
        """Whether the window's farthest position and the pass's cache entries stay within the context."""
        return past_len + self.settings.reach < limit and past_len + tree_size + self.size <= limit

    def rows(self) -> RiderRows:
        if not self.levels:
            raise HDError("the Lookahead window has not begun: call begin(prompt) first")
        width = self.settings.width
        tokens = [t for level in self.levels for t in level]
        offsets = [1 + i + level for level in range(len(self.levels)) for i in range(width)]
        return RiderRows(tokens, offsets, window_mask(width, len(self.levels)), width)

    def update(self, step: RiderOutcome) -> None:
        if step.window:
            self.advance(step.window_next)

    def advance(self, next_tokens: Sequence[int]) -> list[Gram]:
        """The model's next token after each top-level token (W of them): fill a level, or harvest
        the W n-grams they complete and move the window up. Returns the n-grams harvested."""
        width = self.settings.width
        if len(next_tokens) != width:
            raise HDError(f"the Lookahead window wants {width} next tokens, got {len(next_tokens)}")
        self.passes += 1
        top = [int(t) for t in next_tokens]
        if len(self.levels) < self.settings.levels:
            self.levels.append(top)
            return []
        grams = [tuple(level[i] for level in self.levels) + (top[i],) for i in range(width)]
        for gram in grams:
            self.pool.add(gram)
        self.levels = [*self.levels[1:], top]
        return grams


@functools.cache
def window_mask(width: int, levels: int) -> np.ndarray:
    """(M, M) bool, M = width * levels, rows and columns level by level: token (l, i) sees level 0's
    columns 0..i and levels 1..l of column i. Made once per shape (every pass of a window asks),
    read-only."""
    m = width * levels
    sees = np.zeros((m, m), dtype=bool)
    for level in range(levels):
        for i in range(width):
            row = level * width + i
            sees[row, : i + 1] = True
            sees[row, [k * width + i for k in range(1, level + 1)]] = True
    sees.setflags(write=False)
    return sees
