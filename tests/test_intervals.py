"""Intervals over questions (hdlib.bench.intervals): scipy's bootstrap, used as a paired ratio's
interval, a geometric mean's and a ratio of sums'; and what the bench makes of them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hdlib.bench.intervals import Comparison, Estimate, geometric_mean, mean, ratio_of_sums


def test_no_spread_or_one_question_gives_the_value_itself():
    assert geometric_mean([2.0, 2.0, 2.0]) == Estimate(pytest.approx(2.0), pytest.approx(2.0), pytest.approx(2.0), 3)
    one = mean([5.0])
    assert (one.value, one.low, one.high, one.n) == (5.0, 5.0, 5.0, 1)


def test_a_geometric_mean_of_reciprocals_is_the_reciprocal_with_its_interval_flipped():
    ratios = np.random.default_rng(1).lognormal(0.2, 0.3, size=20)
    up, down = geometric_mean(ratios), geometric_mean(1 / ratios)
    assert up.value == pytest.approx(math.exp(np.mean(np.log(ratios))))
    assert down.value == pytest.approx(1 / up.value)
    assert (down.low, down.high) == (pytest.approx(1 / up.high), pytest.approx(1 / up.low))
    assert up.low < up.value < up.high


def test_the_interval_narrows_with_more_questions_and_mostly_holds_the_truth():
    rng = np.random.default_rng(2)
    widths, held = {}, 0
    for n in (8, 128):
        draws = rng.lognormal(0.1, 0.4, size=n)
        e = geometric_mean(draws)
        widths[n] = e.high - e.low
    assert widths[128] < widths[8] / 2  # about 1/sqrt(16) as wide
    for _ in range(40):  # the true geometric mean exp(0.1) is inside most 95 % intervals
        held += geometric_mean(rng.lognormal(0.1, 0.4, size=30)).contains(math.exp(0.1))
    assert held >= 33


def test_mat_is_a_ratio_of_sums_resampled_in_pairs():
    e = ratio_of_sums([30, 10, 50], [10, 10, 10])
    assert e.value == pytest.approx(3.0) and e.n == 3
    assert 1.0 <= e.low < 3.0 < e.high <= 5.0  # within the extreme questions' own ratios


def test_the_same_results_give_the_same_interval_every_time():
    data = np.random.default_rng(3).lognormal(0, 0.5, size=12)
    assert geometric_mean(data) == geometric_mean(data)


@pytest.mark.parametrize(
    "low, high, verdict", [(0.95, 1.10, "on par"), (1.02, 1.20, "faster"), (0.80, 0.97, "slower"), (1.0, 1.1, "on par")]
)
def test_a_comparison_says_on_par_where_its_interval_holds_one(low, high, verdict):
    c = Comparison("hd", "suffix", Estimate(1.04, low, high, 18), {})
    assert c.verdict == verdict
    assert c.sentence().startswith(f"hd against suffix: 1.04x [{low:.2f}, {high:.2f}] over 18 questions")
    assert ("on par" in c.sentence()) == (verdict == "on par")
    assert Comparison.from_json(c.to_json()) == c
