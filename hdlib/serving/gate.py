"""Whether asking an offline tier for a row pays, at the size of the batch being served.

The engine's gate (`hdlib.engine.gate`) weighs a tier's lookup against what it adds; here the same
rule is weighed with a served batch's numbers:

    ask tier t for a row   iff   gain(t) >= rate * lookup(t)

- gain(t): the draft tokens accepted per lookup of t: a lookup whose draft began its row's chain is
  credited the tokens accepted of that chain at the next step, any other lookup none; a running mean
  that starts at `OPTIMISTIC`, so that a tier is tried before it is judged;
- lookup(t): its seconds per lookup, a running mean;
- rate: the tokens per second the whole batch emits (the tokens emitted between two calls of the
  proposer over the seconds between them), so that rate * lookup(t) is what the batch would have
  emitted while every one of its rows waited for the lookup.

Alone in a batch on a CPU (some 15 tokens a second), a lookup of a third of a millisecond pays if
it adds one token in two hundred lookups; among 256 rows a step emits hundreds of tokens, and a
lookup holding all of them up must add about as many tokens as the batch emits meanwhile. A tier left
out is still asked once in `RETRY` rows, so that its gain stays measured.
"""

from __future__ import annotations

import time
from collections.abc import Callable

OPTIMISTIC = 1.0  # accepted tokens per lookup assumed of a tier not yet measured
WEIGHT = 0.02  # each new measurement's weight in a running mean
RETRY = 64  # a tier left out is asked for one row in this many


class Gate:
    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.gain: dict[str, float] = {}  # tier letter -> accepted tokens per lookup
        self.lookup: dict[str, float] = {}  # tier letter -> seconds per lookup
        self.rate: float | None = None  # the batch's tokens per second (None: not measured yet)
        self.skipped: dict[str, int] = {}  # tier letter -> rows it was left out of since it was last asked
        self._last: float | None = None  # when the proposer was last called

    def step(self, emitted: int) -> None:
        """The proposer is called: `emitted` tokens came out of the step since its last call."""
        now = self.clock()
        if self._last is not None and now > self._last and emitted:
            self.rate = running(self.rate, emitted / (now - self._last), WEIGHT * 10)
        self._last = now

    def ask(self, letter: str) -> bool:
        """Whether asking the tier of `letter` for a row pays now (and, once in RETRY, when it does not)."""
        if self.rate is None or letter not in self.lookup:
            return True
        if self.gain.get(letter, OPTIMISTIC) >= self.rate * self.lookup[letter]:
            return True
        self.skipped[letter] = self.skipped.get(letter, 0) + 1
        if self.skipped[letter] >= RETRY:
            self.skipped[letter] = 0
            return True
        return False

    def took(self, letter: str, seconds: float) -> None:
        self.lookup[letter] = running(self.lookup.get(letter), seconds, WEIGHT)

    def credit(self, letter: str, accepted: int) -> None:
        """A lookup of the tier of `letter` led to `accepted` draft tokens accepted."""
        self.gain[letter] = running(self.gain.get(letter, OPTIMISTIC), float(accepted), WEIGHT)


def running(mean: float | None, value: float, weight: float) -> float:
    """A running mean: `value` itself when there is none yet."""
    return value if mean is None else (1 - weight) * mean + weight * value
