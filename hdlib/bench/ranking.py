"""A run's tier orders ranked against the HD paper's order ablation (Spearman, Kendall)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hdlib.bench.methods import split_budget
from hdlib.bench.records import BenchResults, Results
from hdlib.errors import HDError

# The HD paper's order ablation (Spec-Bench, greedy, Vicuna-7B on an A100-class GPU): speedup by order.
PAPER_ORDERS = {
    "CMS": 1.72,
    "CSM": 1.67,
    "C": 1.63,
    "MCS": 1.31,
    "MSC": 1.22,
    "M": 1.15,
    "SCM": 1.07,
    "SMC": 1.07,
    "S": 1.06,
}


def ranks(values: Sequence[float]) -> list[float]:
    """1 for the largest; tied values share the mean of their ranks."""
    order = sorted(range(len(values)), key=lambda i: -values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation: Pearson's of the ranks (ties averaged)."""
    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    norm = (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5
    return cov / norm if norm > 0 else 0.0


def kendall(a: Sequence[float], b: Sequence[float]) -> float:
    """Kendall's tau-b: (concordant - discordant pairs) over the pairs not tied, ties in both corrected."""
    concordant = discordant = ties_a = ties_b = 0
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            da, db = a[i] - a[j], b[i] - b[j]
            if da == 0 and db == 0:
                continue
            if da == 0:
                ties_a += 1
            elif db == 0:
                ties_b += 1
            elif (da > 0) == (db > 0):
                concordant += 1
            else:
                discordant += 1
    n0 = concordant + discordant
    norm = ((n0 + ties_a) * (n0 + ties_b)) ** 0.5
    return (concordant - discordant) / norm if norm > 0 else 0.0


@dataclass(frozen=True)
class OrderComparison:
    """A run's tier orders ranked against a reference (the paper's), on the orders both measured."""

    orders: list[str]  # the orders both hold, best first in the run
    speedups: dict[str, float]  # the run's `metric` by order
    reference: dict[str, float]  # the reference's speedups, by order
    spearman: float
    kendall: float
    metric: str = "speedup"  # what the run's orders are ranked by (speedup, or mat: timing-free)

    @property
    def first(self) -> tuple[str, str]:
        """(the run's fastest order, the reference's)."""
        return self.orders[0], max(self.orders, key=lambda o: self.reference[o])

    @property
    def last(self) -> tuple[str, str]:
        return self.orders[-1], min(self.orders, key=lambda o: self.reference[o])


def compare_orders(
    results: Results, reference: Mapping[str, float] = PAPER_ORDERS, metric: str = "speedup"
) -> OrderComparison:
    """The `hd:ORDER` methods of `results` (`@N` or not) against `reference` by `metric`'s overall value."""
    r = BenchResults.of(results)
    ours = {
        split_budget(name)[0][3:]: getattr(m.overall, metric) for name, m in r.methods.items() if name.startswith("hd:")
    }
    common = sorted((o for o in ours if o in reference), key=lambda o: -ours[o])
    if len(common) < 2:
        raise HDError(f"the results share {len(common)} order(s) with the reference: at least 2 are needed to rank")
    a, b = [ours[o] for o in common], [float(reference[o]) for o in common]
    mine, theirs = {o: ours[o] for o in common}, {o: float(reference[o]) for o in common}
    return OrderComparison(common, mine, theirs, spearman(a, b), kendall(a, b), metric)
