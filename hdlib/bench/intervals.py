"""Numbers with their spread, and the words a comparison may use: the estimators that `hdlib bench`,
the served benchmark (benchmarks/served_load.py) and docs/benchmarks.md all use.

The unit of a benchmark is the question. Its methods ran side by side on one machine, so a method's
ratio to another on the same question is the paired measurement; a question asked several times
(repeats) is still one question: its repeats are pooled first (its cluster), and an interval over
questions resamples whole questions, each with all its repeats. Counting a question's repeats as
questions of their own makes an interval as narrow as if there were that many questions, which
there were not.

Three intervals, for three questions one may ask of a run:

- **over questions** (`cluster_bootstrap`): what another draw of questions like these would have
  shown. scipy's BCa bootstrap (`scipy.stats.bootstrap`, 9,999 resamples of the questions, a fixed
  seed so the same results give the same interval), its half-widths scaled by Hesterberg's factor
  sqrt(n / (n - 1)) t(n - 1) / z for n questions ("What teachers should know about the bootstrap",
  The American Statistician 69, 2015, whose expanded percentile interval moves the percentile levels
  by it), and never narrower than the Student t-interval over the questions' own values (linearised
  for a ratio of sums): with a few heavy-tailed questions BCa's corrections, estimated from those
  few, narrow it (on the report half's own hd/suffix ratios, resampled, it covered 90 % at 8 to 54
  questions, the t-interval 93 to 94 %, the wider of the two 93 to 95 %; tests/test_intervals.py
  simulates both that and a skew-normal law). With fewer than `MIN_QUESTIONS` questions there is no
  interval: the values are given as they are.
- **over repeats** (`t_over_repeats`): what another run of these same questions would show, holding
  what moves a whole repeat (the machine's speed in the minutes of one method's block against
  another's). A t-interval over the repeats' own values, and only with at least `MIN_REPEATS`; a
  bootstrap over two to five repeats covers 49 % to 84 %, not 95 %. Fewer: the repeats are given,
  no interval.
- **over both** (`crossed`): where every question was asked in every repeat and a repeat moves its
  whole block of requests (a served run), what another run of other questions would show: a
  t-interval from the two-way analysis of variance of the logs (questions and repeats crossed,
  Satterthwaite's degrees of freedom). Neither interval alone holds both spreads, nor does reading
  the two together (their outer bounds): where the two spreads are alike (16 questions, 8 repeats,
  simulated in tests/test_intervals.py) that covered some 90 %, not 95 %.

What a paired ratio A/B allows one to say (`verdict`): "faster" where every interval it is read by
lies above 1, "slower" where every one lies below, "on par" where every one lies within the
equivalence margin (within ±5 %: between 1/1.05 and 1.05, so that A/B and B/A agree; or within what
an A/A run of the same harness, one method against itself, spread to, where that is wider:
`margin`), and "not told apart" otherwise, and wherever one of them has too few questions or
repeats for an interval: an interval that holds 1 but reaches beyond the margin says only that the
run could not tell.

Over questions:
- a paired ratio A/B and a speedup: the geometric mean of the per-question ratio (its natural mean:
  A/B and B/A come out as reciprocals);
- MAT: all tokens over all steps (a ratio of sums, as Spec-Bench counts it), questions resampled
  as pairs of sums;
- tokens per second: the mean of the per-question throughputs.

A latency's spread is a percentile of its sample (`percentile`: p99), not a bootstrap.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from hdlib.bench.arms import twins

CONFIDENCE = 0.95
RESAMPLES = 9_999
SEED = 0  # the bootstrap's own: intervals are a function of the results, redrawn alike every time
MIN_QUESTIONS = 6  # below it a bootstrap has too few distinct resamples to mean anything (462 at 6)
MIN_REPEATS = 5  # below it no interval over repeats (a t-interval over 3 spans +-4.3 of their spread)
MARGIN = 0.05  # "on par": both bounds within 1/1.05 .. 1.05, unless an A/A run spread wider

QUESTIONS, REPEATS = "questions", "repeats"  # what an interval resamples
VERDICTS = ("faster", "slower", "on par", "not told apart")


@dataclass(frozen=True)
class Estimate:
    """A number over `n` questions or repeats (`over`) with its 95 % interval [low, high]; with
    too few of them, no interval (low and high None) and `values`, each one's own number."""

    value: float
    low: float | None
    high: float | None
    n: int
    over: str = QUESTIONS
    values: tuple[float, ...] = field(default=(), compare=False)

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None

    def contains(self, v: float) -> bool:
        """Whether the interval holds `v` (no interval: it can tell nothing apart, so True)."""
        return not self.has_interval or self.low <= v <= self.high  # type: ignore[operator]

    def to_json(self) -> dict[str, Any]:
        row: dict[str, Any] = {"value": self.value, "low": self.low, "high": self.high, "n": self.n, "over": self.over}
        return row | ({"values": list(self.values)} if self.values else {})

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> Estimate:
        def bound(key: str) -> float | None:
            return None if row.get(key) is None else float(row[key])

        values = tuple(float(v) for v in row.get("values", ()))
        return cls(float(row["value"]), bound("low"), bound("high"), int(row["n"]), row.get("over", QUESTIONS), values)

    def map(self, f: Callable[[float], float]) -> Estimate:
        """The same estimate through an increasing function `f` (exp: from logs to ratios)."""
        low, high = (None, None) if not self.has_interval else (f(self.low), f(self.high))  # type: ignore[arg-type]
        return Estimate(f(self.value), low, high, self.n, self.over, tuple(f(v) for v in self.values))

    def describe(self, fmt: str = ".2f", suffix: str = "") -> str:
        """'1.85x [1.62, 2.10]' (with `suffix` "x"); without an interval '1.85x (3 repeats: 1.80, 1.85,
        1.90; too few for an interval)'."""
        if self.has_interval:
            return f"{self.value:{fmt}}{suffix} [{self.low:{fmt}}, {self.high:{fmt}}]"
        return f"{self.value:{fmt}}{suffix} ({self.too_few(fmt)})"

    def too_few(self, fmt: str = ".2f") -> str:
        """'3 repeats: 1.80, 1.85, 1.90; too few for an interval'."""
        unit = self.over if self.n != 1 else self.over.removesuffix("s")
        listed = f": {', '.join(f'{v:{fmt}}' for v in self.values)}" if self.values else ""
        return f"{self.n} {unit}{listed}; too few for an interval"


def no_interval(value: float, values: Sequence[float], over: str = QUESTIONS) -> Estimate:
    return Estimate(value, None, None, len(values), over, tuple(float(v) for v in values))


def expansion(n: int, confidence: float = CONFIDENCE) -> float:
    """Hesterberg's factor for a bootstrap interval over n units: sqrt(n / (n - 1)) t(n - 1) / z."""
    q = (1 + confidence) / 2
    return math.sqrt(n / (n - 1)) * float(stats.t.ppf(q, n - 1) / stats.norm.ppf(q))


def cluster_bootstrap(
    columns: Sequence[Sequence[float]],
    statistic: Callable[..., np.ndarray],
    value: float,
    values: Sequence[float],
    resamples: int = RESAMPLES,
    influence: Sequence[float] | None = None,
    floor: bool = True,
) -> Estimate:
    """`value` with its interval over questions: `columns` hold one number per question each (a
    question's repeats already pooled: resampling a row resamples the whole question), `statistic`
    computes `value` from them (vectorised: it takes `axis`), `values` is each question's own number
    (listed where there are too few questions for an interval), `influence` each question's share of
    `value`'s error, whose mean's t-interval is the floor (default `values`: the statistic is their
    mean). BCa, percentile where BCa cannot be computed (a jackknife with no spread), expanded for few
    questions, never narrower than the t-interval (module docstring); `floor=False`: without that
    floor, the interval before issue 57's review, which its sealed plan named (as a second reading)."""
    data = tuple(np.asarray(c, dtype=float) for c in columns)
    n = len(data[0])
    if n < MIN_QUESTIONS:
        return no_interval(value, values)
    if all(np.ptp(c) == 0 for c in data):
        return Estimate(value, value, value, n)
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():  # scipy warns where BCa degenerates; the percentile one takes over
            warnings.simplefilter("ignore")
            ci = stats.bootstrap(
                data, statistic, paired=len(data) > 1, vectorized=True, axis=0, n_resamples=resamples,
                confidence_level=CONFIDENCE, method=method, rng=np.random.default_rng(SEED),
            ).confidence_interval  # fmt: skip
        low, high = float(ci.low), float(ci.high)
        if math.isfinite(low) and math.isfinite(high):
            break
    else:
        return no_interval(value, values)
    f = expansion(n)
    shares = np.asarray(values if influence is None else influence, dtype=float)
    half = float(stats.t.ppf((1 + CONFIDENCE) / 2, n - 1) * np.std(shares, ddof=1) / math.sqrt(n))
    low, high = value - f * max(value - low, 0.0), value + f * max(high - value, 0.0)
    if floor:
        low, high = min(low, value - half), max(high, value + half)
    return Estimate(value, low, high, n)


def geometric_mean(ratios: Sequence[float], resamples: int = RESAMPLES, floor: bool = True) -> Estimate:
    """The geometric mean of per-question ratios (one per question, its repeats pooled), with its
    interval over questions (`floor`: `cluster_bootstrap`'s)."""
    logs = np.log(np.asarray(ratios, dtype=float))
    est = cluster_bootstrap((logs,), np.mean, float(np.mean(logs)), logs.tolist(), resamples, floor=floor)
    return est.map(math.exp)


def mean(values: Sequence[float], resamples: int = RESAMPLES) -> Estimate:
    """The mean of per-question values, with its interval over questions."""
    v = np.asarray(values, dtype=float)
    return cluster_bootstrap((v,), np.mean, float(np.mean(v)), v.tolist(), resamples)


def ratio_of_sums(numerators: Sequence[float], denominators: Sequence[float], resamples: int = RESAMPLES) -> Estimate:
    """sum(numerators) / sum(denominators), questions resampled as pairs (MAT: each question's tokens
    over its steps, every repeat of it summed)."""
    a, b = np.asarray(numerators, dtype=float), np.asarray(denominators, dtype=float)
    value = float(a.sum() / b.sum()) if b.sum() > 0 else 0.0
    own = (a / np.maximum(b, 1e-300)).tolist()
    linear = (a - value * b) / max(float(np.mean(b)), 1e-300)  # the delta method's share of each question
    return cluster_bootstrap(
        (a, b), lambda x, y, axis: x.sum(axis) / np.maximum(y.sum(axis), 1e-300), value, own, resamples, linear
    )


def t_over_repeats(values: Sequence[float], log: bool = True) -> Estimate:
    """The mean of one number per repeat with its t-interval over the repeats (`log`: of ratios, on
    their logs: a geometric mean); fewer than `MIN_REPEATS` repeats: the repeats, no interval."""
    v = np.asarray(values, dtype=float)
    x = np.log(v) if log else v
    back: Callable[[float], float] = math.exp if log else float
    centre = float(np.mean(x))
    if len(x) < MIN_REPEATS:
        return no_interval(back(centre), v.tolist(), REPEATS)
    half = float(stats.t.ppf((1 + CONFIDENCE) / 2, len(x) - 1) * np.std(x, ddof=1) / math.sqrt(len(x)))
    return Estimate(back(centre), back(centre - half), back(centre + half), len(x), REPEATS)


def ratio_over_repeats(numerators: Sequence[float], denominators: Sequence[float]) -> Estimate:
    """sum(numerators) / sum(denominators) over repeats (MAT of a served run: each repeat's tokens over
    its steps), with the ratio estimator's t-interval over repeats (its standard error from the
    residuals a - R b, the delta method); fewer than `MIN_REPEATS`: each repeat's ratio, no interval."""
    a, b = np.asarray(numerators, dtype=float), np.asarray(denominators, dtype=float)
    value = float(a.sum() / b.sum())
    if len(a) < MIN_REPEATS:
        return no_interval(value, (a / b).tolist(), REPEATS)
    se = math.sqrt(float(np.sum((a - value * b) ** 2)) / (len(a) * (len(a) - 1))) / float(np.mean(b))
    half = float(stats.t.ppf((1 + CONFIDENCE) / 2, len(a) - 1)) * se
    return Estimate(value, value - half, value + half, len(a), REPEATS)


def crossed(ratios: Mapping[tuple[Hashable, int], float]) -> Estimate:
    """The geometric mean over every question and repeat of ratios keyed by (question, repeat), with a
    t-interval from the two-way analysis of variance of their logs, questions and repeats crossed:
    Var(mean) = (MSQ + MSR - MSE) / (n R), each variance component floored at 0, with Satterthwaite's
    degrees of freedom (module docstring) over the three mean squares, a floored component's counted
    at the error's: conservative where one is floored (fewer degrees of freedom than the mean
    squares that remain would give). Only questions asked in every repeat count; fewer than
    `MIN_QUESTIONS` of them or `MIN_REPEATS` repeats: no interval, and the questions' (or the
    repeats') own values (n: questions x repeats)."""
    repeats = sorted({r for _, r in ratios})
    everywhere = [q for q in dict.fromkeys(q for q, _ in ratios) if all((q, r) in ratios for r in repeats)]
    y = np.log([[ratios[q, r] for r in repeats] for q in everywhere]).reshape(len(everywhere), len(repeats))
    n, k = y.shape
    centre = float(y.mean()) if y.size else 0.0
    if n < MIN_QUESTIONS:  # too few questions (none: n 0), each question's own geometric mean listed
        return no_interval(math.exp(centre), np.exp(y.mean(axis=1)).tolist() if y.size else [], QUESTIONS)
    if k < MIN_REPEATS:
        return no_interval(math.exp(centre), np.exp(y.mean(axis=0)).tolist(), REPEATS)
    rows, cols = y.mean(axis=1), y.mean(axis=0)
    msq = k * float(np.sum((rows - centre) ** 2)) / (n - 1)
    msr = n * float(np.sum((cols - centre) ** 2)) / (k - 1)
    mse = float(np.sum((y - rows[:, None] - cols[None, :] + centre) ** 2)) / ((n - 1) * (k - 1))
    q, r = max(msq, mse), max(msr, mse)  # a component's mean square below the error's: that component is 0
    var = (q + r - mse) / (n * k)
    df = (q + r - mse) ** 2 / (q**2 / (n - 1) + r**2 / (k - 1) + mse**2 / ((n - 1) * (k - 1)))
    half = float(stats.t.ppf((1 + CONFIDENCE) / 2, df)) * math.sqrt(var)
    return Estimate(math.exp(centre), math.exp(centre - half), math.exp(centre + half), n * k, "questions x repeats")


def by_question(ratios: Mapping[tuple[Hashable, int], float]) -> dict[Hashable, float]:
    """Ratios keyed by (question, repeat) -> one per question: the geometric mean over its repeats."""
    logs: dict[Hashable, list[float]] = {}
    for (question, _), ratio in ratios.items():
        logs.setdefault(question, []).append(math.log(ratio))
    return {q: math.exp(sum(v) / len(v)) for q, v in logs.items()}


def by_repeat(ratios: Mapping[tuple[Hashable, int], float]) -> dict[int, float]:
    """Ratios keyed by (question, repeat) -> one per repeat: the geometric mean over its questions."""
    logs: dict[int, list[float]] = {}
    for (_, repeat), ratio in ratios.items():
        logs.setdefault(repeat, []).append(math.log(ratio))
    return {r: math.exp(sum(v) / len(v)) for r, v in sorted(logs.items())}


def percentile(values: Sequence[float], q: float) -> float:
    """The `q` quantile of a sample (0.99: its p99): the value at rank q (n - 1) of the sorted sample,
    rounded down (numpy's method "lower"), a value the sample holds."""
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


def margin(aa: Estimate | None = None) -> float:
    """The equivalence margin for "on par": `MARGIN`, or how far from 1 an A/A run's interval (the
    harness's own spread, one method against itself) reached, where that is further."""
    if aa is None or not aa.has_interval:
        return MARGIN
    return max(MARGIN, aa.high - 1, 1 / aa.low - 1)  # type: ignore[operator]


def verdict(*estimates: Estimate, within: float = MARGIN, above: str = "faster", below: str = "slower") -> str:
    """What the intervals of one paired ratio that it is read by (over questions, over repeats, over
    both) allow one to say: `above` where every one lies above 1, `below` where every one lies below,
    "on par" where every one lies within the margin (1/(1 + within) .. 1 + within), else "not told
    apart", and so wherever one of them has too few questions or repeats for an interval."""
    if not estimates or not all(e.has_interval for e in estimates):
        return "not told apart"
    low, high = min(e.low for e in estimates), max(e.high for e in estimates)  # type: ignore[type-var]
    if low > 1:
        return above
    if high < 1:
        return below
    if low >= 1 / (1 + within) and high <= 1 + within:
        return "on par"
    return "not told apart"


@dataclass(frozen=True)
class Comparison:
    """Method `a` against method `b` over the same questions: the geometric mean of the paired
    per-question throughput ratio a/b, overall (over questions) and per task, and overall over
    repeats (`by_repeat`, a t-interval where the run has at least `MIN_REPEATS`)."""

    a: str
    b: str
    overall: Estimate
    tasks: dict[str, Estimate]
    by_repeat: Estimate | None = None

    def verdict(self, within: float = MARGIN) -> str:
        """Read by its interval over questions, and over repeats where the run has enough of them (the
        bench's methods answer each question side by side, so a repeat's drift falls on both)."""
        repeats = [self.by_repeat] if self.by_repeat is not None and self.by_repeat.has_interval else []
        return verdict(self.overall, *repeats, within=within)

    def sentence(self, within: float = MARGIN) -> str:
        """'hd against suffix: 1.04x [0.98, 1.10] over 18 questions: not told apart'."""
        said = self.verdict(within)
        repeats = "" if self.by_repeat is None else f"; over repeats {self.by_repeat.describe(suffix='x')}"
        why = {
            "on par": f" (within ±{100 * within:.0f} %)",
            "not told apart": f" (an interval holds 1 and reaches beyond ±{100 * within:.0f} %)",
        }.get(said, "")
        told = f"{self.a} {said}" if said in ("faster", "slower") else said
        return f"{self.a} against {self.b}: {self.overall.describe(suffix='x')} over {self.overall.n} questions" + (
            f"{repeats}: {told}{why}"
        )

    def to_json(self) -> dict[str, Any]:
        row = {
            "a": self.a,
            "b": self.b,
            "overall": self.overall.to_json(),
            "tasks": {t: e.to_json() for t, e in self.tasks.items()},
        }
        return row | ({"by_repeat": self.by_repeat.to_json()} if self.by_repeat is not None else {})

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> Comparison:
        tasks = {str(t): Estimate.from_json(e) for t, e in row.get("tasks", {}).items()}
        repeats = Estimate.from_json(row["by_repeat"]) if row.get("by_repeat") else None
        return cls(str(row["a"]), str(row["b"]), Estimate.from_json(row["overall"]), tasks, repeats)


def aa_margin(comparisons: Iterable[Comparison]) -> float:
    """The margin for "on par" in a run with A/A arms (`hd#2` against `hd`, hdlib.bench.arms): how far
    the widest of their intervals reached from 1, where further than `MARGIN`."""
    found = [MARGIN]
    for c in comparisons:
        if twins([c.a, c.b]) == [(c.a, c.b)]:
            found += [margin(e) for e in (c.overall, c.by_repeat) if e is not None]
    return max(found)
