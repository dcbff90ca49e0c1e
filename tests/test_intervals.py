"""The estimators (hdlib.bench.intervals): intervals over questions (a bootstrap that resamples whole
questions, each with its repeats, BCa, widened for few questions), over repeats (a t-interval, from
five repeats on), the verdict words and their margin; and a simulation of their coverage on data
shaped like the bench's (few questions, repeats that share their question's effect, skewed)."""

from __future__ import annotations

import json
import math
from pathlib import Path

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
    crossed,
    geometric_mean,
    margin,
    mean,
    ratio_of_sums,
    ratio_over_repeats,
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
    assert (five.low, five.high) == (
        pytest.approx(math.exp(logs.mean() - half)),
        pytest.approx(math.exp(logs.mean() + half)),
    )
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


# Coverage, simulated. Two laws for a question's log ratio: a skew-normal (shape -4, a longer tail of
# questions where a method does badly, skewness -0.78, spread 0.25, as hd/ar's 0.31 and hd/suffix's 0.15
# on the report half), and the report half's own 18 hd/suffix ratios resampled (skewness -1.7, excess
# kurtosis 4.4: one question at 0.58). Five repeats per question share its effect, each with noise of
# its own (0.15, as measured within questions there). Each estimator's interval is drawn on 600 data
# sets at the question counts a run has (8 to 54); a 95 % interval should hold the truth in 95 % of them
# (the simulation's own error is 0.9 points), within 3 points.

SIMULATIONS = 600
RESAMPLES = 1_999  # the library's 9,999 make the same intervals, 5 times slower; the coverage is the estimator's
RAW = Path(__file__).resolve().parents[1] / "benchmarks/results/xeon-amx/report_half.raw.jsonl"


def skewed(rng: np.random.Generator, n: int, shape: float = -4.0, sd: float = 0.25) -> np.ndarray:
    """n draws of mean 0 and standard deviation `sd` from a skew-normal law."""
    d = shape / math.sqrt(1 + shape * shape)
    m, s = d * math.sqrt(2 / math.pi), math.sqrt(1 - 2 * d * d / math.pi)
    return (stats.skewnorm.rvs(shape, size=n, random_state=rng) - m) / s * sd


def report_half_logs(a: str = "hd", b: str = "suffix") -> np.ndarray:
    """Each report-half question's log ratio of a's tokens per second to b's, over its repeats."""
    rates: dict[int, dict[str, list[float]]] = {}
    for line in RAW.read_text(encoding="utf-8").splitlines()[1:]:
        row = json.loads(line)
        for name, turns in row["runs"].items():
            rate = sum(t["tokens"] for t in turns) / sum(t["wall_s"] for t in turns)
            rates.setdefault(row["question_id"], {}).setdefault(name, []).append(rate)
    return np.array([np.mean(np.log(np.divide(r[a], r[b]))) for r in rates.values()])


REAL = report_half_logs()
LAWS = {"skew-normal": lambda rng, n: skewed(rng, n), "report half": lambda rng, n: rng.choice(REAL - REAL.mean(), n)}


def coverage(draw, truth: float, estimate) -> float:
    rng = np.random.default_rng(57)
    held = sum(estimate(draw(rng)).contains(truth) for _ in range(SIMULATIONS))
    return held / SIMULATIONS


def questions_by_repeat(law: str, n: int, repeats: int = 5):
    """A draw of (question, repeat) ratios whose geometric mean over all questions is 1.3."""

    def draw(rng):
        logs = math.log(1.3) + LAWS[law](rng, n)[:, None] + 0.15 * rng.standard_normal((n, repeats))
        return {(q, r): math.exp(logs[q, r]) for q in range(n) for r in range(repeats)}

    return draw


@pytest.mark.parametrize("law, n", [(law, n) for law in LAWS for n in (8, 16, 54)])
def test_the_interval_over_questions_of_a_paired_ratio_covers_95_percent(law, n):
    held = coverage(questions_by_repeat(law, n), 1.3,
                    lambda ratios: geometric_mean(list(by_question(ratios).values()), RESAMPLES))  # fmt: skip
    assert abs(held - 0.95) <= 0.03, held


def test_without_its_expansion_and_floor_the_bootstrap_covers_too_little_with_few_heavy_tailed_questions():
    """The negative control of the test above: scipy's BCa alone, on the report half's law."""

    def plain_bca(ratios):
        logs = np.log(list(by_question(ratios).values()))
        ci = stats.bootstrap((logs,), np.mean, method="BCa", n_resamples=RESAMPLES,
                             rng=np.random.default_rng(0)).confidence_interval  # fmt: skip
        return Estimate(0.0, math.exp(ci.low), math.exp(ci.high), len(logs))

    assert coverage(questions_by_repeat("report half", 16), 1.3, plain_bca) < 0.92


def test_the_sealed_plans_interval_widened_but_not_floored_covers_less_than_95_percent_there():
    """Issue 57's sealed plan named the widened BCa interval without the t-interval floor: on the
    report half's law with 16 questions it covers a few points short of 95 % (its "faster" or
    "slower" that the floored interval does not repeat is reported as unconfirmed: the plan's
    addendum)."""
    draw = questions_by_repeat("report half", 16)
    plan = coverage(draw, 1.3, lambda r: geometric_mean(list(by_question(r).values()), RESAMPLES, floor=False))
    floored = coverage(draw, 1.3, lambda r: geometric_mean(list(by_question(r).values()), RESAMPLES))
    assert plan < 0.935 and plan < floored - 0.01, (plan, floored)


def test_the_interval_over_questions_of_mat_and_of_tokens_per_second_covers_95_percent():
    n = 16

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


def test_the_interval_over_repeats_covers_95_percent_when_a_repeat_moves_its_block_by_a_skewed_law():
    """The same 54 questions asked in every repeat; a repeat's whole block of requests moves together
    (the machine's speed in its minutes: a skewed law, spread 4 %), each request has its own noise. The
    truth: the geometric mean over these questions that repeats would average to. And the served MAT,
    a ratio over repeats of tokens to steps."""
    effects = skewed(np.random.default_rng(5), 54)
    for repeats in (5, 8):

        def draw(rng):
            logs = math.log(1.1) + effects[:, None] + skewed(rng, repeats, sd=0.04) + 0.15 * rng.standard_normal(
                (54, repeats))  # fmt: skip
            return {(q, r): math.exp(logs[q, r]) for q in range(54) for r in range(repeats)}

        truth = math.exp(math.log(1.1) + effects.mean())
        held = coverage(draw, truth, lambda ratios: t_over_repeats(list(by_repeat(ratios).values())))
        assert abs(held - 0.95) <= 0.03, (repeats, held)

        def served(rng):  # a repeat's tokens, and its steps at a MAT of 1.8 moved by the repeat
            tokens = rng.integers(6_000, 8_000, size=repeats).astype(float)
            return tokens, tokens / (1.8 * np.exp(skewed(rng, repeats, sd=0.05)))

        many = 1.8 * np.exp(skewed(np.random.default_rng(2), 2_000_000, sd=0.05))
        held = coverage(served, 1 / float(np.mean(1 / many)), lambda ts: ratio_over_repeats(*ts))
        assert abs(held - 0.95) <= 0.03, (repeats, held)


@pytest.mark.parametrize("n, repeats, spread", [(8, 8, 0.04), (16, 8, 0.04), (54, 8, 0.04), (16, 8, 0.08)])
def test_the_crossed_interval_covers_95_percent_where_reading_the_two_together_does_not(n, repeats, spread):
    """A served run's shape: the same questions in every repeat (spread `spread` between questions,
    skewed), a repeat moving its whole block (0.06), each request its own noise (0.08). The crossed
    interval covers 95 %. Where the two spreads are alike (16 questions of spread 0.08: 0.02 on their
    mean, 8 repeats of 0.06: 0.021), the two intervals read together (their outer bounds) each hold
    one of them and cover some 90 %, so say "faster" or "slower" of equal methods twice as often as
    they should (negative control)."""

    def draw(rng):
        logs = (skewed(rng, n, sd=spread)[:, None] + 0.06 * rng.standard_normal(repeats)
                + 0.08 * rng.standard_normal((n, repeats)))  # fmt: skip
        return {(q, r): math.exp(logs[q, r]) for q in range(n) for r in range(repeats)}

    held = coverage(draw, 1.0, crossed)
    assert abs(held - 0.95) <= 0.03, held
    if spread == 0.08:

        def together(ratios):
            found = [geometric_mean(list(by_question(ratios).values()), RESAMPLES),
                     t_over_repeats(list(by_repeat(ratios).values()))]  # fmt: skip
            return Estimate(1.0, min(e.low for e in found), max(e.high for e in found), n)

        assert coverage(draw, 1.0, together) < held - 0.03


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


def test_the_interval_without_its_t_floor_is_the_plans_and_never_wider():
    """`floor=False` gives the interval issue 57's sealed plan named (BCa, expanded), which the floored
    one always holds: a verdict of faster, slower or on par by the floored one is the plan's too."""
    rng = np.random.default_rng(3)
    for n in (8, 18, 54):
        ratios = np.exp(skewed(rng, n, sd=0.2))
        plan, now = geometric_mean(ratios, RESAMPLES, floor=False), geometric_mean(ratios, RESAMPLES)
        assert plan.value == now.value and now.low <= plan.low <= plan.high <= now.high
