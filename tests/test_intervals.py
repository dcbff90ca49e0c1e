"""The estimators (hdlib.bench.intervals): intervals over questions (a bootstrap that resamples whole
questions, each with its repeats, BCa, widened for few questions), over repeats (a t-interval, from
five repeats on), the verdict words and their margin; and a simulation of their coverage on data
shaped like the bench's (few questions, repeats that share their question's effect, skewed)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from hdlib.bench.intervals import (
    MIN_QUESTIONS,
    MIN_REPEATS,
    QUESTIONS,
    REPEATS,
    Comparison,
    Estimate,
    by_question,
    by_repeat,
    geometric_mean,
    margin,
    mean,
    ratio_of_sums,
    t_over_repeats,
    verdict,
)


def test_no_spread_gives_the_value_itself_and_too_few_questions_no_interval():
    assert geometric_mean([2.0] * 8) == Estimate(pytest.approx(2.0), pytest.approx(2.0), pytest.approx(2.0), 8)
    few = mean([5.0, 6.0, 7.0])
    assert (few.value, few.low, few.high, few.n, few.over) == (6.0, None, None, 3, QUESTIONS)
    assert few.values == (5.0, 6.0, 7.0) and not few.has_interval
    assert few.describe(".1f") == "6.0 (3 questions: 5.0, 6.0, 7.0; too few for an interval)"
    assert mean([1.0] * (MIN_QUESTIONS - 1)).low is None and mean(list(range(MIN_QUESTIONS))).low is not None


def test_a_geometric_mean_of_reciprocals_is_the_reciprocal_with_its_interval_flipped():
    ratios = np.random.default_rng(1).lognormal(0.2, 0.3, size=20)
    up, down = geometric_mean(ratios), geometric_mean(1 / ratios)
    assert up.value == pytest.approx(math.exp(np.mean(np.log(ratios))))
    assert down.value == pytest.approx(1 / up.value)
    assert (down.low, down.high) == (pytest.approx(1 / up.high, rel=0.02), pytest.approx(1 / up.low, rel=0.02))
    assert up.low < up.value < up.high


def test_the_interval_narrows_with_more_questions_and_is_wider_than_the_plain_percentile_one_for_few():
    rng = np.random.default_rng(2)
    widths = {n: (e := geometric_mean(rng.lognormal(0.1, 0.4, size=n))).high - e.low for n in (8, 128)}
    assert widths[128] < widths[8] / 2  # about 1/sqrt(16) as wide
    logs = np.log(rng.lognormal(0.1, 0.4, size=8))
    plain = stats.bootstrap((logs,), np.mean, method="percentile", rng=np.random.default_rng(0)).confidence_interval
    ours = geometric_mean(np.exp(logs))
    assert math.log(ours.high) - math.log(ours.low) > 1.1 * (plain.high - plain.low)  # Hesterberg's expansion


def test_mat_is_a_ratio_of_sums_resampled_in_pairs():
    e = ratio_of_sums([30, 10, 50, 20, 40, 30], [10, 10, 10, 10, 10, 10])
    assert e.value == pytest.approx(3.0) and e.n == 6
    assert 1.0 <= e.low < 3.0 < e.high <= 5.5  # about the questions' own ratios


def test_the_same_results_give_the_same_interval_every_time():
    data = np.random.default_rng(3).lognormal(0, 0.5, size=12)
    assert geometric_mean(data) == geometric_mean(data)


def test_a_questions_repeats_are_one_cluster_and_each_repeat_one_value():
    """Four questions asked five times are four questions: too few for an interval over questions,
    however many requests; over the five repeats a t-interval."""
    ratios = {(q, r): 1.1 + 0.01 * q + 0.02 * r for q in range(4) for r in range(5)}
    per_question, per_repeat = by_question(ratios), by_repeat(ratios)
    assert len(per_question) == 4 and len(per_repeat) == 5
    assert per_question[0] == pytest.approx(math.exp(np.mean([math.log(1.1 + 0.02 * r) for r in range(5)])))
    assert not geometric_mean(list(per_question.values())).has_interval
    over = t_over_repeats(list(per_repeat.values()))
    assert over.over == REPEATS and over.n == 5 and over.low < over.value < over.high


def test_fewer_than_five_repeats_give_the_repeats_and_no_interval():
    four = t_over_repeats([1.1, 1.2, 1.05, 1.15])
    assert four.low is None and four.n == 4 and four.values == (1.1, 1.2, 1.05, 1.15)
    assert four.describe(suffix="x") == "1.12x (4 repeats: 1.10, 1.20, 1.05, 1.15; too few for an interval)"
    five = t_over_repeats([1.1, 1.2, 1.05, 1.15, 1.1])
    logs = np.log([1.1, 1.2, 1.05, 1.15, 1.1])
    half = stats.t.ppf(0.975, 4) * logs.std(ddof=1) / math.sqrt(5)
    assert (five.low, five.high) == (pytest.approx(math.exp(logs.mean() - half)), pytest.approx(
        math.exp(logs.mean() + half)))
    assert MIN_REPEATS == 5


@pytest.mark.parametrize(
    "low, high, said",
    [(1.02, 1.20, "faster"), (0.80, 0.97, "slower"), (0.97, 1.04, "on par"), (0.96, 1.10, "not told apart"),
     (0.90, 1.03, "not told apart"), (1.001, 1.02, "faster"), (1 / 1.05, 1.05, "on par")],
)  # fmt: skip
def test_the_verdict_needs_1_excluded_for_faster_and_the_margin_for_on_par(low, high, said):
    c = Comparison("hd", "suffix", Estimate(1.0, low, high, 18), {})
    assert c.verdict() == said
    assert c.sentence().startswith(f"hd against suffix: 1.00x [{low:.2f}, {high:.2f}] over 18 questions")
    assert Comparison.from_json(c.to_json()) == c


def test_the_verdict_reads_every_interval_together_and_an_aa_run_can_widen_the_margin():
    by_q, by_r = Estimate(1.06, 1.02, 1.10, 54), Estimate(1.06, 0.99, 1.13, 6, REPEATS)
    assert verdict(by_q) == "faster" and verdict(by_q, by_r) == "not told apart"
    near = Estimate(1.0, 0.94, 1.06, 54)
    aa = Estimate(1.02, 0.93, 1.07, 54)  # one method against itself reached 1/0.93 = 1.075
    assert margin(aa) == pytest.approx(1 / 0.93 - 1) and margin(Estimate(1.0, 0.99, 1.01, 54)) == 0.05
    assert verdict(near) == "not told apart" and verdict(near, within=margin(aa)) == "on par"
    assert verdict(Estimate(1.0, None, None, 3)) == "not told apart"  # no interval tells nothing apart
    c = Comparison("hd", "suffix", by_q, {}, by_r)
    assert c.verdict() == "not told apart" and "over repeats 1.06x [0.99, 1.13]" in c.sentence()
    assert Comparison.from_json(c.to_json()) == c


def test_an_estimate_written_before_the_estimators_changed_still_reads():
    old = {"value": 1.5, "low": 1.2, "high": 1.9, "n": 18}
    assert Estimate.from_json(old) == Estimate(1.5, 1.2, 1.9, 18, QUESTIONS)


# Coverage, simulated. The data are shaped like the bench's (tests/test_intervals.py's module docstring):
# per question a log ratio drawn from a skewed law (skew-normal, shape -4: a longer tail of questions
# where a method does badly; skewness -0.78), spread 0.25, as hd/ar's 0.31 and hd/suffix's 0.15 on the
# report half; five repeats per question that share the question's effect, each with its own noise
# (0.15, as measured within questions there). Each estimator's interval is drawn on 600 data sets; a
# 95 % interval should hold the truth in 95 % of them (the simulation's own error is 0.9 points).

SIMULATIONS = 600
RESAMPLES = 1_999  # the library's 9,999 make the same intervals, 5 times slower; the coverage is the estimator's


def skewed(rng: np.random.Generator, n: int, shape: float = -4.0, sd: float = 0.25) -> np.ndarray:
    """n draws of mean 0 and standard deviation `sd` from a skew-normal law."""
    d = shape / math.sqrt(1 + shape * shape)
    m, s = d * math.sqrt(2 / math.pi), math.sqrt(1 - 2 * d * d / math.pi)
    return (stats.skewnorm.rvs(shape, size=n, random_state=rng) - m) / s * sd


def coverage(draw, truth: float, estimate) -> float:
    rng = np.random.default_rng(57)
    held = sum(estimate(draw(rng)).contains(truth) for _ in range(SIMULATIONS))
    return held / SIMULATIONS


@pytest.mark.parametrize("n", [12, 18, 54])
def test_the_interval_over_questions_of_a_paired_ratio_covers_95_percent(n):
    def draw(rng):  # (question, repeat) ratios; the truth: a geometric mean of 1.3 over all questions
        logs = math.log(1.3) + skewed(rng, n)[:, None] + 0.15 * rng.standard_normal((n, 5))
        return {(q, r): math.exp(logs[q, r]) for q in range(n) for r in range(5)}

    held = coverage(draw, 1.3, lambda ratios: geometric_mean(list(by_question(ratios).values()), RESAMPLES))
    assert abs(held - 0.95) <= 0.03, held


def test_the_interval_over_questions_of_mat_and_of_tokens_per_second_covers_95_percent():
    n = 18

    def questions(rng):  # per question its MAT (about 2.3, skewed) and tokens over five repeats
        return np.exp(math.log(2.3) + skewed(rng, n, sd=0.2)), rng.integers(100, 257, size=n) * 5.0

    # the truth, a ratio of expectations: E[tokens] / E[tokens / MAT] (tokens drawn apart from MAT)
    many = np.exp(math.log(2.3) + skewed(np.random.default_rng(0), 2_000_000, sd=0.2))
    mat_truth = 1 / np.mean(1 / many)
    held = coverage(lambda rng: questions(rng), mat_truth,
                    lambda q: ratio_of_sums(q[1], q[1] / q[0], RESAMPLES))  # fmt: skip
    assert abs(held - 0.95) <= 0.03, held
    rate_truth = 25.0 * float(np.mean(np.exp(skewed(np.random.default_rng(1), 2_000_000, sd=0.3))))
    held = coverage(lambda rng: 25.0 * np.exp(skewed(rng, n, sd=0.3)), rate_truth, lambda v: mean(v, RESAMPLES))
    assert abs(held - 0.95) <= 0.03, held


@pytest.mark.parametrize("repeats", [5, 6])
def test_the_interval_over_repeats_covers_95_percent(repeats):
    """The same 54 questions asked in every repeat; a repeat's whole block of requests moves together
    (the machine's speed in its minutes: 4 % of spread), each request has its own noise. The truth: the
    geometric mean over these questions that repeats would average to."""
    effects = skewed(np.random.default_rng(5), 54)

    def draw(rng):
        logs = math.log(1.1) + effects[:, None] + 0.04 * rng.standard_normal(repeats) + 0.15 * rng.standard_normal(
            (54, repeats))  # fmt: skip
        return {(q, r): math.exp(logs[q, r]) for q in range(54) for r in range(repeats)}

    truth = math.exp(math.log(1.1) + effects.mean())
    held = coverage(draw, truth, lambda ratios: t_over_repeats(list(by_repeat(ratios).values())))
    assert abs(held - 0.95) <= 0.03, held


def test_the_simulation_can_fail_counting_repeats_as_questions_or_bootstrapping_three_repeats_covers_too_little():
    """Negative controls, the two estimators the served benchmark used before: every (question,
    repeat) resampled as a question of its own, and a percentile bootstrap over three repeats."""
    def pairs(rng):
        logs = math.log(1.3) + skewed(rng, 18)[:, None] + 0.15 * rng.standard_normal((18, 5))
        return np.exp(logs).ravel()

    def as_questions(ratios):
        logs = np.log(ratios)
        ci = stats.bootstrap((logs,), np.mean, method="percentile", n_resamples=RESAMPLES,
                             rng=np.random.default_rng(0)).confidence_interval  # fmt: skip
        return Estimate(0.0, math.exp(ci.low), math.exp(ci.high), len(logs))

    assert coverage(pairs, 1.3, as_questions) < 0.8
    effects = skewed(np.random.default_rng(5), 54)

    def three(rng):
        return np.exp(math.log(1.1) + effects.mean() + 0.04 * rng.standard_normal(3) + 0.15 * rng.standard_normal(
            (54, 3)).mean(0))  # fmt: skip

    def bootstrap_over_repeats(values):
        logs = np.log(values)
        ci = stats.bootstrap((logs,), np.mean, method="percentile", n_resamples=RESAMPLES,
                             rng=np.random.default_rng(0)).confidence_interval  # fmt: skip
        return Estimate(0.0, math.exp(ci.low), math.exp(ci.high), 3, REPEATS)

    assert coverage(three, math.exp(math.log(1.1) + effects.mean()), bootstrap_over_repeats) < 0.85
