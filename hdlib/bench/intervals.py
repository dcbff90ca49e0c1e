"""Numbers with their spread: each method's speedup, MAT and tokens per second over a run's
questions, with a 95 % interval from a bootstrap over questions, and paired ratios of two methods.

The unit of a benchmark is the question: its methods ran side by side on one machine (shuffled
within each repeat, `hdlib.bench.run`), so whatever slowed the machine during a question slowed
them alike, and a method's ratio to another on the same question is the paired measurement. Its
repeats are pooled first: a question's throughput for a method is its tokens over its seconds,
summed over every turn of every repeat. Then, over the questions:

- speedup: the geometric mean of the per-question ratio to `ar`'s throughput (a ratio's natural
  mean: A/B and B/A come out as reciprocals);
- a paired comparison A/B (`compare`): the geometric mean of the per-question ratio of A's
  throughput to B's; "on par" where its interval holds 1;
- MAT: all tokens over all steps (a ratio of sums, as Spec-Bench counts it);
- tokens per second: the mean of the per-question throughputs.

Each interval is scipy's percentile bootstrap (`scipy.stats.bootstrap`, 9,999 resamples of the
questions, a fixed seed so the same results give the same intervals): what another draw of questions
like these would have shown, not what another machine would. With few questions (a task's 3, say)
it is rough, so the number of questions stands beside it.

A latency's spread is a percentile of its sample (`percentile`: p99), not a bootstrap.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import bootstrap

CONFIDENCE = 0.95
RESAMPLES = 9_999
SEED = 0  # the bootstrap's own: intervals are a function of the results, redrawn alike every time


@dataclass(frozen=True)
class Estimate:
    """A number over `n` questions with its 95 % interval [low, high] (both the value itself when
    fewer than two questions, or no spread, leave nothing to resample)."""

    value: float
    low: float
    high: float
    n: int

    def contains(self, v: float) -> bool:
        return self.low <= v <= self.high

    def to_json(self) -> dict[str, float]:
        return {"value": self.value, "low": self.low, "high": self.high, "n": self.n}

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> Estimate:
        return cls(float(row["value"]), float(row["low"]), float(row["high"]), int(row["n"]))

    def describe(self, fmt: str = ".2f", suffix: str = "") -> str:
        """'1.85x [1.62, 2.10]' (with `suffix` "x")."""
        return f"{self.value:{fmt}}{suffix} [{self.low:{fmt}}, {self.high:{fmt}}]"


def _interval(samples: tuple[np.ndarray, ...], statistic: Callable[..., np.ndarray], value: float) -> Estimate:
    """`value` with the percentile bootstrap's interval of `statistic` (vectorised: it takes `axis`)."""
    n = len(samples[0])
    if n < 2 or all(np.ptp(s) == 0 for s in samples):
        return Estimate(value, value, value, n)
    with warnings.catch_warnings():  # a handful of questions: scipy warns that the spread is rough; n says so
        warnings.simplefilter("ignore")
        ci = bootstrap(
            samples, statistic, paired=len(samples) > 1, vectorized=True, axis=0, n_resamples=RESAMPLES,
            confidence_level=CONFIDENCE, method="percentile", rng=np.random.default_rng(SEED),
        ).confidence_interval  # fmt: skip
    low, high = float(ci.low), float(ci.high)
    if not (math.isfinite(low) and math.isfinite(high)):
        return Estimate(value, value, value, n)
    return Estimate(value, min(low, value), max(high, value), n)


def geometric_mean(ratios: Sequence[float]) -> Estimate:
    """The geometric mean of per-question ratios, with its interval."""
    logs = np.log(np.asarray(ratios, dtype=float))
    est = _interval((logs,), np.mean, float(np.mean(logs)))
    return Estimate(math.exp(est.value), math.exp(est.low), math.exp(est.high), est.n)


def mean(values: Sequence[float]) -> Estimate:
    v = np.asarray(values, dtype=float)
    return _interval((v,), np.mean, float(np.mean(v)))


def ratio_of_sums(numerators: Sequence[float], denominators: Sequence[float]) -> Estimate:
    """sum(numerators) / sum(denominators), questions resampled as pairs (MAT: tokens over steps)."""
    a, b = np.asarray(numerators, dtype=float), np.asarray(denominators, dtype=float)
    value = float(a.sum() / b.sum()) if b.sum() > 0 else 0.0
    return _interval((a, b), lambda x, y, axis: x.sum(axis) / np.maximum(y.sum(axis), 1e-300), value)


def percentile(values: Sequence[float], q: float) -> float:
    """The `q` quantile of a sample (0.99: its p99): the value at rank q (n - 1) of the sorted sample,
    rounded down (numpy's method "lower"), a value the sample holds."""
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


def verdict(ratio: Estimate, above: str = "faster", below: str = "slower") -> str:
    """What a paired ratio's interval allows one to say: `above` ('faster'), `below` ('slower'), or
    'on par' (it holds 1)."""
    if ratio.contains(1.0):
        return "on par"
    return above if ratio.low > 1 else below


@dataclass(frozen=True)
class Comparison:
    """Method `a` against method `b` over the same questions: the geometric mean of the paired
    per-question throughput ratio a/b, overall and per task."""

    a: str
    b: str
    overall: Estimate
    tasks: dict[str, Estimate]

    @property
    def verdict(self) -> str:
        return verdict(self.overall)

    def sentence(self) -> str:
        """'hd against suffix: 1.04x [0.98, 1.10] over 18 questions: on par'."""
        return f"{self.a} against {self.b}: {self.overall.describe(suffix='x')} over {self.overall.n} questions: " + (
            "on par (the interval holds 1)" if self.verdict == "on par" else f"{self.a} {self.verdict}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "overall": self.overall.to_json(),
            "tasks": {t: e.to_json() for t, e in self.tasks.items()},
        }

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> Comparison:
        tasks = {str(t): Estimate.from_json(e) for t, e in row.get("tasks", {}).items()}
        return cls(str(row["a"]), str(row["b"]), Estimate.from_json(row["overall"]), tasks)
