"""How long a served row's chain is: each draft token is proposed only while it is worth verifying.

A row's k-th draft token adds a token to the step's output only if it and every draft before it are
accepted, which happens with probability

    p_k = a_1 a_2 ... a_k,

where a_j is the chance that a chain's j-th draft is accepted once the ones before it were. Verifying
it costs the step time. A step that emits E tokens (all its rows together) in T seconds yields E / T
tokens a second, and one more draft token adds to that rate only if p_k / cost_k >= E / T. Writing
the cost as a share of a step with no drafts, cost_k = c_k(R) T0, and the step's time as T = L T0,
the rule no longer needs a clock: the k-th draft token adds p_k - c_k(R) E / L tokens to the step,
net of what it costs, and a row verifies the prefix of its chain whose drafts add the most (none,
if every prefix costs more than it adds).

c_k(R) is the step's relative marginal cost of a k-th draft token on one row of a batch of R rows,
from the step times T(R, K) that `benchmarks/vllm_step_cost.py` measures (every row drafting K
tokens, all refused): for the first, (T(R, 1) - T(R, 0)) / (R T(R, 0)); for each later one, the
slope of the least-squares line through T(R, K) for K >= 1, over R T(R, 0). `StepCost.measured()`
holds this machine's (`benchmarks/results/xeon-amx/vllm_step_cost.json`); on another machine (a GPU
above all, where a step's cost hardly grows with its drafts) run that benchmark there and name its
file in `HDLIB_VLLM_STEP_COST`. Between the measured batch sizes c_k is interpolated in log R.

a_j is learned while serving (`Acceptance`), per source of the draft (its tier, and how long a match
the draft followed: a context draft after 8 repeated tokens is likelier right than after one), position
j and how the row's last chain fared (none or its first draft refused; part accepted; all accepted).
E is the tokens the batch emitted at the step before, and L that step's time over a step with no
drafts as c_k models it (1 plus the c_k of every draft its rows verified). A weight multiplies the
cost: 1 is the rule as derived, and `SCALE` was chosen on Spec-Bench's dev half (docs/serving.md).

The measured c_k are one benchmark's: 64 rows of one prompt, in lockstep. A served batch's drafts
cost its steps more or less than that, so while serving, `StepClock` times the engine's own steps
and learns, per batch-size class, rho: how much more a draft costs them than c_k says. The k-th
draft then costs rho c_k(R) E / (1 + rho M), M the c_k of the last step's drafts.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hdlib.errors import HDError

# vLLM's CPU engine serving the packaged model (float32) on a 2-core Xeon with AVX-512 and AMX, milliseconds
# a step by batch size and draft tokens a row: 1 and 64 rows from benchmarks/results/xeon-amx/
# vllm_step_cost.json, 4 and 16 from vllm_step_cost_rerun.json (measured again alone: the first run's
# were slowed by other work on the machine's 2 cores); a test checks that these are their numbers.
MEASURED: dict[int, dict[int, float]] = {
    1: {0: 70.1, 1: 79.5, 2: 80.4, 4: 85.4, 8: 89.9},
    4: {0: 102.2, 1: 110.1, 2: 121.1, 4: 181.4, 8: 196.3},
    16: {0: 269.7, 1: 312.1, 2: 366.4, 4: 435.1, 8: 632.4},
    64: {0: 905.5, 1: 1246.6, 2: 1297.0, 4: 1918.0, 8: 2912.2},
}

SCALE = 1.0  # the cost's weight: the rule as derived; of 0.75 to 1.5, the best on the dev half (docs/serving.md)
PRIOR = 0.5  # a_1 assumed before anything is learned (a_j's, j > 1: a_(j-1)'s as learned)
PRIOR_WEIGHT = 2.0  # ... worth this many chains
MEMORY = 2000.0  # the chains a rate remembers: past it, the old counts fade by half
EXPLORE = 64  # one chain in this many is verified whole, so that rates too low to draft are still learned
FADE = 0.995  # the served steps a clock's fit remembers: each older by one step counts this much less (~200)
SURE = 0.5  # the prior's spread on how much more (or less) a draft costs served than measured: its sd


@dataclass(frozen=True)
class StepCost:
    """Milliseconds a step by batch size (rows) and draft tokens a row; the relative marginal cost."""

    ms: Mapping[int, Mapping[int, float]]
    _spent: dict[int, list[float]] = field(default_factory=dict, repr=False, compare=False)  # by rows: c_1 + .. c_K

    def __post_init__(self) -> None:
        if not self.ms or any(len(by_k) < 2 or 0 not in by_k or by_k[0] <= 0 for by_k in self.ms.values()):
            raise HDError("a step cost needs, for each batch size, the time with no draft and with at least one more K")

    @classmethod
    def from_file(cls, path: str | Path) -> StepCost:
        """From a `benchmarks/vllm_step_cost.py` results file."""
        try:
            data = json.loads(Path(path).read_text())
            return cls({int(r): {int(k): float(ms) for k, ms in by_k.items()} for r, by_k in data["step_ms"].items()})
        except (OSError, ValueError, KeyError, AttributeError, TypeError) as error:
            raise HDError(f"{path}: not a vllm_step_cost results file with step_ms by rows ({error})") from error

    @classmethod
    def measured(cls) -> StepCost:
        return cls(MEASURED)

    def marginal(self, rows: int, k: int) -> float:
        """c_k(rows): what a k-th draft token on one row adds to a step of `rows` rows, as a share of the
        step with no drafts."""
        lo, hi, w = self._bracket(rows)
        return (1 - w) * self._at(lo, k) + w * self._at(hi, k)

    def spent(self, rows: int, drafts: int) -> float:
        """What a row's `drafts` draft tokens add to a step of `rows` rows, over the step with no
        drafts: c_1(rows) + ... + c_drafts(rows)."""
        known = self._spent.setdefault(rows, [0.0])
        while len(known) <= drafts:
            known.append(known[-1] + self.marginal(rows, len(known)))
        return known[drafts]

    def plain(self, rows: int) -> float:
        """T(rows, 0): milliseconds a step with no drafts, interpolated in log rows (past the largest
        measured size: in proportion to the rows)."""
        lo, hi, w = self._bracket(rows)
        ms = math.exp((1 - w) * math.log(self.ms[lo][0]) + w * math.log(self.ms[hi][0]))
        return ms * max(rows / hi, 1.0)

    def _bracket(self, rows: int) -> tuple[int, int, float]:
        """The measured batch sizes on either side of `rows` and its weight towards the larger, in log
        rows (outside the measured sizes: the nearest, twice)."""
        sizes = sorted(self.ms)
        if rows <= sizes[0] or rows >= sizes[-1]:
            edge = sizes[0] if rows <= sizes[0] else sizes[-1]
            return edge, edge, 0.0
        hi = next(s for s in sizes if s >= rows)
        lo = sizes[sizes.index(hi) - 1]
        return lo, hi, (math.log(rows) - math.log(lo)) / (math.log(hi) - math.log(lo))

    def _at(self, rows: int, k: int) -> float:
        """c_k at a measured batch size: the first draft, what K = 1 costs over K = 0; each later one,
        the slope of the least-squares line through the step times of K >= 1 (one line, so that the
        noise of one measurement does not make a draft free or dear), or K = 1's alone where it was
        the only one measured."""
        by_k = self.ms[rows]
        ks = sorted(by_k)
        first = by_k[ks[1]] - by_k[0] if ks[1] == 1 else (by_k[ks[1]] - by_k[0]) / ks[1]
        later = [(x, by_k[x]) for x in ks if x >= 1]
        if k == 1 or len(later) < 2:
            slope = first
        else:
            mx, my = sum(x for x, _ in later) / len(later), sum(y for _, y in later) / len(later)
            slope = sum((x - mx) * (y - my) for x, y in later) / sum((x - mx) ** 2 for x, _ in later)
        return max(slope, 0.0) / (rows * by_k[0])


@dataclass
class Acceptance:
    """a_j, learned: per key (source, position j, the row's last outcome), the chains whose first
    j - 1 drafts were accepted and how many of them had the j-th accepted too.

    A draft's source is its tier's letter, followed by what the tier said of it (`source`): the
    context tier's "C3" is a draft that followed a match of 3 tokens. Each source's rate is learned
    apart and shrunk towards its tier's (all the tier's drafts at that position), so that a source
    seldom seen starts from its tier's rate; a tier's rate is shrunk towards its rate a position
    earlier (towards PRIOR at the first)."""

    tries: dict[tuple[str, int, int], float] = field(default_factory=dict)
    hits: dict[tuple[str, int, int], float] = field(default_factory=dict)
    _rates: dict[tuple[str, int], dict[str, list[float]]] = field(default_factory=dict, repr=False)

    def rate(self, key: tuple[str, int, int]) -> float:
        """a_j for `key`, shrunk as the class says while it has few chains."""
        source, j, last = key
        return self.rates(source, last, j)[j - 1]

    def rates(self, source: str, last: int, n: int) -> list[float]:
        """a_1 .. a_n (at least) of drafts from `source` after a chain that fared `last`."""
        cached = self._rates.setdefault((source[0], last), {})
        known = cached.setdefault(source, [])
        if len(known) >= n:
            return known
        coarse = self.rates(source[0], last, n) if len(source) > 1 else None
        while len(known) < n:
            j = len(known) + 1
            prior = coarse[j - 1] if coarse is not None else known[-1] if known else PRIOR
            key = (source, j, last)
            known.append((self.hits.get(key, 0.0) + prior * PRIOR_WEIGHT) / (self.tries.get(key, 0.0) + PRIOR_WEIGHT))
        return known

    def learn(self, sources: Sequence[str], accepted: int, last: int) -> None:
        """A chain whose j-th draft came from `sources[j - 1]` had its first `accepted` drafts
        accepted; `last`: how the row's chain before it fared. Each draft counts for its source and
        for its tier."""
        for j, source in enumerate(sources[: accepted + 1], start=1):
            self._rates.pop((source[0], last), None)
            for key in {(source, j, last), (source[0], j, last)}:
                tries = self.tries.get(key, 0.0) + 1
                hits = self.hits.get(key, 0.0) + (j <= accepted)
                if tries > MEMORY:
                    tries, hits = tries / 2, hits / 2
                self.tries[key], self.hits[key] = tries, hits


def outcome(proposed: int, accepted: int) -> int:
    """How a row's chain fared: 0 none drafted or its first draft refused, 1 part accepted, 2 all."""
    return 0 if accepted <= 0 or proposed <= 0 else 2 if accepted >= proposed else 1


def worth(sources: Sequence[str], last: int, acceptance: Acceptance, cost: Sequence[float]) -> int:
    """How many of a chain's drafts (the j-th from `sources[j - 1]`) to verify: the prefix
    whose drafts add the most, the k-th adding p_k - cost[k - 1] (tokens a step, net of what its
    verification costs in the step's tokens: c_k(R) E / L). The longest such prefix wins a tie; none, if
    no prefix adds more than it costs. `cost` must not fall after its second draft (so that once p_k
    is below it, no later draft adds anything)."""
    p, total, best, best_k = 1.0, 0.0, 0.0, 0
    rates: dict[str, list[float]] = {}
    for k, source in enumerate(sources, start=1):
        if source not in rates:
            rates[source] = acceptance.rates(source, last, len(sources))
        p *= rates[source][k - 1]
        if k > 1 and p < cost[k - 1]:
            break  # p only falls, and the cost does not: no later draft adds anything
        total += p - cost[k - 1]
        if total >= best:
            best, best_k = total, k
    return best_k


@dataclass
class StepClock:
    """What the served engine's own steps cost, learned while serving, per batch-size class.

    A step of R rows whose drafts the step cost models as adding M = sum of c_k(R) over its rows'
    drafts (so a load of 1 + M) takes, on the served engine, T = kappa T0(R) (1 + rho M): kappa is
    how much slower (or faster) a step with no drafts runs than measured, rho how much more a draft
    costs. A least-squares line of T / T0(R) against M through the steps seen (old ones fading by
    `FADE` a step) gives both; rho is shrunk towards 1 (the measured cost) by its standard error,
    with a prior spread of `SURE`. Only steps that no request entered and where every row emitted a
    token are seen (a prompt's prefill would count as a draft's cost).

    The drafter times a step from its call's return to its next call: the engine's forward pass that
    verified the drafts it returned, the sampling and the scheduling around it."""

    cost: StepCost
    now: Callable[[], float] = time.perf_counter  # seconds, the clock the drafter times the steps by
    _sums: dict[int, list[float]] = field(default_factory=dict, repr=False)  # by class: w, Sx, Sy, Sxx, Sxy, Syy

    def see(self, rows: int, drafted: float, seconds: float) -> None:
        """A step of `rows` rows with `drafted` = M took `seconds`."""
        if rows < 1 or not seconds > 0:
            return
        y = seconds * 1e3 / self.cost.plain(rows)
        sums = self._sums.setdefault(rows.bit_length(), [0.0] * 6)
        for i, value in enumerate((1.0, drafted, y, drafted * drafted, drafted * y, y * y)):
            sums[i] = sums[i] * FADE + value

    def seen(self, rows: int) -> float:
        """The steps seen in the class of `rows`, the older counting less (`FADE`)."""
        return self._sums.get(rows.bit_length(), [0.0])[0]

    def fit(self, rows: int) -> tuple[float, float] | None:
        """(kappa, rho) for a step of `rows` rows, or None while its class has too few steps to say."""
        if self.seen(rows) < 8:
            return None
        w, sx, sy, sxx, sxy, syy = self._sums[rows.bit_length()]
        mx, my = sx / w, sy / w
        vx, cxy, vy = sxx / w - mx * mx, sxy / w - mx * my, syy / w - my * my
        if vx <= 1e-9:
            return None  # every step drafted alike: no line through them
        beta = cxy / vx
        kappa = my - beta * mx
        if kappa <= 0:
            return None
        residual = max(vy - beta * cxy, 0.0) / max(w - 2, 1.0)
        se = math.sqrt(residual / vx) / kappa  # of rho = beta / kappa
        rho, sure = beta / kappa, 1 / max(se, 1e-9) ** 2  # (sure: its precision, against the prior's)
        shrunk = (rho * sure + 1 / SURE**2) / (sure + 1 / SURE**2)
        return kappa, max(shrunk, 0.0)
