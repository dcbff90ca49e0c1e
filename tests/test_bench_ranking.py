"""Against the paper's order ablation (`hdlib.bench.ranking`): rank correlations, and a run's orders
ranked against the paper's on the orders both hold."""

from __future__ import annotations

import pytest
from support.bench_inputs import synthetic

from hdlib.bench import compare_orders, kendall, spearman
from hdlib.errors import HDError


def test_rank_correlations_by_hand():
    assert spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)  # 1 - 6 * 2 / (4 * 15)
    assert kendall([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)  # 5 concordant pairs, 1 discordant
    assert spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(1.5 / 3**0.5)  # ties share the mean rank
    assert kendall([1, 1, 2], [1, 2, 3]) == pytest.approx(2 / 6**0.5)  # tau-b: a tie in one list counted
    assert spearman([3, 2, 1], [1, 2, 3]) == pytest.approx(-1.0) == kendall([3, 2, 1], [1, 2, 3])


def test_orders_are_ranked_against_the_paper_on_the_orders_both_hold():
    speedups = {"ar": 1.0, "hd:S@16": 1.5, "hd:C@16": 1.4, "hd:CMS@16": 1.3, "hd:MC@16": 2.0, "hf": 1.0}
    got = compare_orders(synthetic({n: {"speedup": s} for n, s in speedups.items()}))
    assert got.orders == ["S", "C", "CMS"]  # MC: not in the paper's ablation; fastest first
    assert got.reference == {"S": 1.06, "C": 1.63, "CMS": 1.72}
    assert got.spearman == pytest.approx(-1.0) and got.kendall == pytest.approx(-1.0)
    assert got.first == ("S", "CMS") and got.last == ("CMS", "S")
    with pytest.raises(HDError, match="at least 2"):
        compare_orders(synthetic({"ar": {}, "hd:C": {}}))
