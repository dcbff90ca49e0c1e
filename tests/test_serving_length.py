"""The served chain's length (hdlib.serving.length): the step's measured cost and the learned rates."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hdlib.errors import HDError
from hdlib.serving.length import MEASURED, MEMORY, PRIOR, SURE, Acceptance, StepClock, StepCost, outcome, worth

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "xeon-amx"


def test_the_measured_step_cost_is_the_committed_benchmarks():
    """MEASURED is the step times of vllm_step_cost.json at 1 and 64 rows and of its rerun at 4 and 16
    (rounded to 0.1 ms), both measured on the machine they name."""
    first, rerun = (
        StepCost.from_file(RESULTS / name).ms for name in ("vllm_step_cost.json", "vllm_step_cost_rerun.json")
    )
    committed = {1: first[1], 4: rerun[4], 16: rerun[16], 64: first[64]}
    assert MEASURED.keys() == committed.keys()
    for rows, by_k in committed.items():
        assert MEASURED[rows] == pytest.approx(by_k, abs=0.05)
    for name in ("vllm_step_cost.json", "vllm_step_cost_rerun.json"):
        machine = json.loads((RESULTS / name).read_text())["machine"]
        assert machine["threads"] == 2 and "avx512f" in machine["vector_flags"]


def test_the_marginal_cost_follows_the_measured_steps():
    cost = StepCost({1: {0: 100.0, 1: 110.0, 2: 113.5, 4: 120.5, 8: 134.5}, 16: {0: 200.0, 2: 264.0}})
    assert cost.marginal(1, 1) == pytest.approx(0.1)  # the first draft: 10 ms on a step of 100
    assert cost.marginal(1, 2) == pytest.approx(0.035)  # the later ones: the line through K >= 1, 3.5 ms a draft
    assert cost.marginal(1, 16) == cost.marginal(1, 2)  # the line goes on past the measured drafts
    assert cost.marginal(16, 1) == cost.marginal(16, 5) == pytest.approx(32 / 16 / 200)  # K = 2 alone: 32 ms each
    halfway = 4  # (between 1 and 16 in log)
    assert cost.marginal(halfway, 1) == pytest.approx((0.1 + 0.01) / 2)
    assert cost.marginal(64, 1) == cost.marginal(16, 1)  # past the measured sizes, the nearest
    assert StepCost({1: {0: 100.0, 1: 90.0}}).marginal(1, 1) == 0  # a draft never pays for itself


def test_a_step_cost_is_checked():
    with pytest.raises(HDError, match="no draft"):
        StepCost({1: {1: 100.0, 2: 110.0}})
    with pytest.raises(HDError, match="no draft"):
        StepCost({})


def test_a_step_cost_file_is_read_or_refused(tmp_path):
    good, bad = tmp_path / "cost.json", tmp_path / "bad.json"
    good.write_text(json.dumps({"step_ms": {"1": {"0": 50, "4": 60}}}))
    bad.write_text(json.dumps({"step_ms": [1, 2]}))
    assert StepCost.from_file(good).ms == {1: {0: 50.0, 4: 60.0}}
    for path in (bad, tmp_path / "missing.json"):
        with pytest.raises(HDError, match="not a vllm_step_cost results file"):
            StepCost.from_file(path)


def test_a_rate_is_learned_from_the_chains_and_shrunk_to_the_position_before():
    acceptance = Acceptance()
    assert acceptance.rate(("C", 1, 0)) == PRIOR
    for _ in range(98):
        acceptance.learn(["C", "C", "M"], 1, 0)  # the first accepted, the second refused, the third unseen
    assert acceptance.rate(("C", 1, 0)) == pytest.approx((98 + PRIOR * 2) / 100)
    assert acceptance.rate(("C", 2, 0)) == pytest.approx(acceptance.rate(("C", 1, 0)) * 2 / 100)
    assert ("M", 3, 0) not in acceptance.tries  # never reached
    assert acceptance.rate(("C", 1, 2)) == PRIOR  # another outcome: learned apart


def test_a_sources_rate_is_learned_apart_and_shrunk_to_its_tiers():
    acceptance = Acceptance()
    for _ in range(50):
        acceptance.learn(["C1"], 0, 0)  # after a match of one token: refused
        acceptance.learn(["C8"], 1, 0)  # after one of 8 or more: accepted
    assert acceptance.rate(("C", 1, 0)) == pytest.approx((50 + PRIOR * 2) / 102)  # the tier: all of its drafts
    assert acceptance.rate(("C1", 1, 0)) < 0.05 and acceptance.rate(("C8", 1, 0)) > 0.95
    assert acceptance.rate(("C4", 1, 0)) == acceptance.rate(("C", 1, 0))  # never seen: the tier's rate


def test_old_chains_fade():
    acceptance = Acceptance()
    for _ in range(int(MEMORY)):
        acceptance.learn(["C"], 0, 0)
    for _ in range(int(MEMORY)):
        acceptance.learn(["C"], 1, 0)
    assert 0.6 < acceptance.rate(("C", 1, 0)) < 0.9  # the refusals still weigh, less than the acceptances
    assert acceptance.tries[("C", 1, 0)] <= MEMORY


def test_the_measured_cost_does_not_fall_after_the_first_draft():
    """`worth` stops at the first later draft that costs more than it adds: right only while the cost
    does not fall after the first draft, as StepCost's, at every batch size."""
    cost = StepCost.measured()
    for rows in (1, 2, 3, 4, 8, 16, 40, 64, 256):
        later = [cost.marginal(rows, k) for k in range(2, 17)]
        assert later == sorted(later)


def test_a_chain_fares():
    assert [outcome(0, 0), outcome(3, 0), outcome(3, 2), outcome(3, 3)] == [0, 0, 1, 2]


@given(
    rates=st.lists(st.floats(0, 1), min_size=0, max_size=8),
    first=st.floats(0, 2),
    later=st.lists(st.floats(0, 2), min_size=7, max_size=7),
)
def test_worth_is_the_prefix_that_adds_the_most(rates, first, later):
    costs = [first, *sorted(later)]  # (after the first draft, a cost that does not fall, as StepCost's)
    acceptance = Acceptance()
    for j, rate in enumerate(rates, start=1):  # a_j = rate, exactly: many chains, none shrunk
        acceptance.tries[("C", j, 0)], acceptance.hits[("C", j, 0)] = 1e12, rate * 1e12
    letters = ["C"] * len(rates)
    p = list(itertools.accumulate(rates, lambda a, b: a * b))
    value = [sum(p[i] - costs[i] for i in range(k)) for k in range(len(rates) + 1)]
    kept = worth(letters, 0, acceptance, costs)
    assert math.isclose(value[kept], max(value), abs_tol=1e-9)


def test_what_the_docs_say_a_draft_must_be_worth_holds():
    """docs/serving.md: the chance from which a first and a later draft are worth verifying, alone in
    the batch and among 64 rows, from this machine's measured step times (c_k(R) E / L)."""
    doc = " ".join((Path(__file__).resolve().parents[1] / "docs" / "serving.md").read_text(encoding="utf-8").split())
    cost = StepCost.measured()
    for rows, emitted, load, said in ((1, 2, 1.2, "alone in the batch"), (64, 96, 1.5, "among 64 rows")):
        first, later = (cost.marginal(rows, k) * emitted / load for k in (1, 2))
        assert f"{said} (E = {emitted}, L = {load}) a first draft" in doc
        assert f"from {first:.2f} and each later one from {later:.2f}" in doc or (
            f"from a chance of {first:.2f} and each later one from {later:.2f}" in doc
        )


def served_steps(clock: StepClock, kappa: float, rho: float, steps: int, rows: int = 48, noise: float = 0.0) -> None:
    """`steps` steps of `rows` rows, their drafts' modelled load M spread over 0.1 to 0.6, each taking
    kappa T0 (1 + rho M) (times 1 plus or minus `noise`, alternately)."""
    for i in range(steps):
        drafted = 0.1 + 0.5 * ((i * 7) % 11) / 10
        ms = kappa * clock.cost.plain(rows) * (1 + rho * drafted) * (1 + noise * (-1) ** i)
        clock.see(rows, drafted, ms / 1e3)


def test_the_clock_learns_what_the_served_steps_cost_over_the_measured():
    """Steps whose no-draft time is 0.7 of the measured and whose drafts cost twice the measured: the
    clock's line gives kappa 0.7 and rho 2 for their batch size's class (32 to 63 rows), nothing for
    another class, and nothing before 8 steps."""
    clock = StepClock(StepCost.measured())
    served_steps(clock, 0.7, 2.0, 7)
    assert clock.fit(48) is None
    served_steps(clock, 0.7, 2.0, 200)
    kappa, rho = clock.fit(48)
    assert kappa == pytest.approx(0.7, rel=1e-3) and rho == pytest.approx(2.0, rel=1e-3)
    assert clock.fit(33) == clock.fit(63) and clock.fit(64) is None and clock.fit(16) is None


def test_the_clock_says_nothing_of_steps_that_drafted_alike_and_shrinks_a_noisy_rho_to_the_measured():
    alike = StepClock(StepCost.measured())
    for _ in range(50):
        alike.see(8, 0.3, 0.2)
    assert alike.fit(8) is None  # no spread in M: no line
    noisy, quiet = StepClock(StepCost.measured()), StepClock(StepCost.measured())
    served_steps(noisy, 1.0, 3.0, 12, noise=0.3)
    served_steps(quiet, 1.0, 3.0, 12, noise=0.0)
    assert quiet.fit(48)[1] == pytest.approx(3.0, rel=1e-3)
    assert 1.0 < noisy.fit(48)[1] < 2.5  # a line through few noisy steps, pulled towards 1 (prior sd SURE)
    assert SURE == 0.5


def test_the_plain_step_is_interpolated_in_log_rows():
    cost = StepCost({1: {0: 100.0, 1: 110.0}, 16: {0: 400.0, 1: 500.0}})
    assert [cost.plain(rows) for rows in (1, 4, 16)] == pytest.approx([100.0, 200.0, 400.0])
    assert cost.plain(32) == pytest.approx(800.0)  # past the measured sizes: in proportion to the rows
