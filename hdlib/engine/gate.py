"""The hierarchy: whether asking the next tier pays.

HD asks its databases in order of temporal locality so that a slow database that seldom adds
anything is seldom reached. The value-ranked tree (`hdlib.engine.value`) could take candidates from every
tier at every step; the gate asks the tiers in their order and, before each tier after the first,
weighs what that tier has added in steps like this one against what asking it costs:

    ask tier t   iff   gain(t, band) >= r * lookup(t)

- gain(t, band): t's share of the accepted draft tokens per step it was asked in (a token t drafted
  alone counts 1, one it drafted with k-1 other tiers 1/k: the value-ranked tree trusts a token more
  that several tiers agree on, so a tier that only confirms what others drafted still adds something,
  and no tier is favoured by its place in the order), among the steps whose tree drafted so far had
  its expected accepted tokens (the value-ranked tree's estimate, before t is asked) in the same
  band; each new step weighs more than the ones before (a decay per measurement), and a band with
  few steps is shrunk toward the tier's gain over all bands, which starts optimistic;
- lookup(t): the seconds the tier took to draft, weighed the same way;
- r: the tokens per second the generation achieves, so r * lookup(t) is the tokens the generation
  would have made in the time the lookup takes.

On a CPU, where a token costs tens of milliseconds, a lookup of a fraction of a millisecond nearly
always pays; on a fast device, where a token costs a few, a tier that adds little where the tree is
already likely is skipped there. A tier left out is asked again after a wait, so that its estimate
stays fresh: the wait doubles each time it still does not pay (`Retry`, as for the Lookahead window).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass

from hdlib.engine.trace import Step
from hdlib.tiers.base import Tier

EXPECTED_EDGES = (0.25, 0.5, 1.0, 2.0, 4.0)  # bands of the expected accepted tokens of the tree so far
RETRY_SHORTEST, RETRY_LONGEST = 16, 256  # steps something left out waits before it is tried again


def expected_band(expected: float) -> int:
    """0..len(EXPECTED_EDGES): the band of the tree's expected accepted draft tokens."""
    return bisect_right(EXPECTED_EDGES, expected)


class Retry:
    """A choice that does not pay is tried again now and then: left out `wait` times in a row, it is
    taken once; each time it still does not pay the wait doubles (up to `longest`), and once it pays
    the wait is `shortest` again."""

    def __init__(self, shortest: int = RETRY_SHORTEST, longest: int = RETRY_LONGEST) -> None:
        self.shortest, self.longest = shortest, longest
        self.wait = shortest
        self.since = 0  # times left out since it was last taken

    def decide(self, pays: bool) -> bool:
        """Whether to take it now, given whether it pays."""
        if pays:
            self.wait = self.shortest
            return True
        if self.since >= self.wait:
            self.wait = min(2 * self.wait, self.longest)
            return True
        return False

    def record(self, taken: bool) -> None:
        self.since = 0 if taken else self.since + 1


@dataclass
class _Sums:
    """A quantity over the steps it was measured in, older measurements fading (`decay` per new one):
    what is not measured keeps its estimate, and `Retry` measures it again."""

    total: float = 0.0
    steps: float = 0.0

    def add(self, value: float, decay: float) -> None:
        self.total = decay * self.total + value
        self.steps = decay * self.steps + 1.0


class TierGate:
    """Whether each tier after the first is worth asking (see the module docstring).

    `asks` is called before a tier is asked, with the expected accepted tokens of the tree drafted
    so far and the generation's rate; `update` learns from the step once it is verified.
    """

    def __init__(self, decay: float = 0.98, strength: float = 2.0, first_gain: float = 1.0) -> None:
        self.decay = decay
        self.strength = strength  # steps a tier's overall gain is worth to one band's
        self.first_gain = first_gain  # a tier's gain before it was measured: one token, so it is asked
        self._gain: dict[tuple[Tier, int], _Sums] = {}
        self._overall: dict[Tier, _Sums] = {}
        self._lookup: dict[Tier, _Sums] = {}
        self._retry: dict[Tier, Retry] = {}
        self._pending: dict[Tier, int] = {}  # the tiers decided on in the step in progress -> their band

    def gain(self, tier: Tier, band: int) -> float:
        """The accepted tokens `tier` is expected to add, asked in a step of this band."""
        overall = self._overall.get(tier, _Sums())
        prior = (overall.total + self.first_gain) / (overall.steps + 1.0)
        sums = self._gain.get((tier, band), _Sums())
        return (sums.total + self.strength * prior) / (sums.steps + self.strength)

    def lookup_s(self, tier: Tier) -> float | None:
        """The tier's seconds per lookup (None: never asked)."""
        sums = self._lookup.get(tier)
        return sums.total / sums.steps if sums is not None and sums.steps > 0 else None

    def pays(self, tier: Tier, band: int, rate: float | None) -> bool:
        seconds = self.lookup_s(tier)
        return rate is None or seconds is None or self.gain(tier, band) >= rate * seconds

    def asks(self, tier: Tier, expected: float, rate: float | None) -> bool:
        """Whether to ask `tier` now: the tree drafted so far is expected to have `expected` tokens
        accepted, and the generation makes `rate` tokens per second (None: not known yet)."""
        band = expected_band(expected)
        ask = self._retry.setdefault(tier, Retry()).decide(self.pays(tier, band, rate))
        self._pending[tier] = band
        return ask

    def update(self, step: Step) -> None:
        """Learn from a verified step: each asked tier's lookup time, and for each tier decided on,
        if it was asked, its share of the accepted draft tokens."""
        share: Counter[Tier] = Counter()
        for proposers in step.accepted_proposers():
            for tier in proposers:
                share[tier] += 1.0 / len(proposers)
        asked = set(step.asked)
        for lookup in step.lookups:
            self._lookup.setdefault(lookup.tier, _Sums()).add(lookup.seconds, self.decay)
        for tier, band in self._pending.items():
            self._retry[tier].record(tier in asked)
            if tier in asked:
                self._gain.setdefault((tier, band), _Sums()).add(share[tier], self.decay)
                self._overall.setdefault(tier, _Sums()).add(share[tier], self.decay)
        self._pending.clear()
