"""Lossless sampling: HD draws its answers from exactly the distribution plain sampling does.

Three kinds of evidence. The acceptance rule, enumerated exactly over its outcomes, gives back the
target distribution for any candidate list. The warpers agree with transformers' own. And end to
end, on a tiny model with an 8-token vocabulary, the first three tokens of thousands of HD answers
(several tiers, budgets, top-k and top-p settings) pass a chi-square test against the exact
distribution computed by enumerating every 3-token continuation with the model; an acceptance rule
that accepts every draft fails the same tests (the negative controls).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny import tiny_gemma3, tiny_llama
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

import hdlib.sampling
from hdlib.budget import FixedBudget, flat_profile
from hdlib.decoding import DecodeSettings, run
from hdlib.drafter import Drafter
from hdlib.errors import HDError
from hdlib.sampling import (
    Warp,
    accept_every_draft,
    chi_square_p_value,
    node_trials,
    outcome_distribution,
    sample_outcomes,
)
from hdlib.tiers import BONUS, ContextTier, Tier
from hdlib.tiers.base import Draft, DraftTier
from hdlib.value import ValueTree

V = 8  # vocabulary of the chi-square tests' model
PROMPT = (3, 4, 5, 3, 4, 5, 3)
N_NEW = 3  # the joint distribution of the first three tokens is tested


# --- the rule, exactly ----------------------------------------------------------------------------


distributions = st.lists(st.floats(0, 1), min_size=V, max_size=V).filter(lambda xs: sum(xs) > 1e-3)


@settings(max_examples=300, deadline=None)
@given(weights=distributions, candidates=st.permutations(range(V)), n=st.integers(0, V))
def test_the_acceptance_rule_emits_exactly_the_target_distribution(weights, candidates, n):
    p = torch.tensor(weights, dtype=torch.float64)
    got = outcome_distribution(p, candidates[:n])
    torch.testing.assert_close(got, p / p.sum(), rtol=0, atol=1e-12)


def test_negative_control_accepting_every_draft_is_caught_by_the_enumeration():
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    with pytest.raises(AssertionError):
        torch.testing.assert_close(outcome_distribution(p, [2], accept_every_draft), p, rtol=0, atol=1e-12)


def test_each_trial_says_how_likely_it_was_reached_and_accepted():
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    trials, final = node_trials(p, [1, 0])
    assert [(t.token, t.reach, t.accept) for t in trials] == [(1, 1.0, pytest.approx(0.3)), (0, pytest.approx(0.7), pytest.approx(0.5 / 0.7))]
    torch.testing.assert_close(trials[1].residual, torch.tensor([0.5, 0.0, 0.2], dtype=torch.float64) / 0.7)
    torch.testing.assert_close(final, torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64))


def test_drawn_outcomes_pass_the_chi_square_test_and_a_broken_rule_fails_it():
    p = torch.tensor([0.4, 0.25, 0.2, 0.1, 0.05], dtype=torch.float64)
    exact = {i: float(q) for i, q in enumerate(p)}
    fair = sample_outcomes(p, [3, 1], n=4000, seed=1)
    assert sum(fair.values()) == 4000 and chi_square_p_value(fair, exact) > 1e-3
    broken = sample_outcomes(p, [3, 1], n=4000, seed=1, rule=accept_every_draft)
    assert broken == {3: 4000} and chi_square_p_value(broken, exact) < 1e-6


# --- the warpers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("temperature", "top_k", "top_p"), [(1.0, 0, 1.0), (0.7, 5, 1.0), (1.3, 0, 0.8), (0.5, 20, 0.9)])
def test_warpers_agree_with_transformers(temperature, top_k, top_p):
    torch.manual_seed(0)
    logits = torch.randn(16, 100, dtype=torch.float64) * 3
    want = TemperatureLogitsWarper(temperature)(None, logits.clone())
    if top_k:
        want = TopKLogitsWarper(top_k)(None, want)
    if top_p < 1:
        want = TopPLogitsWarper(top_p)(None, want)
    got = Warp(temperature, top_p, top_k)(logits)
    torch.testing.assert_close(got, want.softmax(dim=-1), rtol=0, atol=1e-12)
    kept = (got > 0).sum(dim=-1)
    if top_k:
        assert (kept <= top_k).all()
    assert torch.allclose(got.sum(dim=-1), torch.ones(16, dtype=torch.float64))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -0.5}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"temperature": 1.0, "top_p": 0.0}, "top_p"),
        ({"temperature": 1.0, "top_p": 1.5}, "top_p"),
        ({"temperature": 1.0, "top_k": -1}, "top_k"),
        ({"temperature": 1.0, "top_k": 2.5}, "top_k"),
        ({"temperature": 1.0, "seed": -3}, "seed"),
    ],
)
def test_bad_sampling_settings_are_refused(kwargs, message):
    with pytest.raises(HDError, match=message):
        DecodeSettings(**kwargs)


# --- end to end: chi-square against the exact distribution ---------------------------------------


@functools.cache
def small_model():
    return tiny_llama(vocab_size=V)


@functools.cache
def next_distribution(context: tuple[int, ...], warp: Warp) -> torch.Tensor:
    with torch.inference_mode():
        logits = small_model()(torch.tensor([context])).logits[0, -1]
    return warp(logits)


def exact_joint(warp: Warp, n_new: int = N_NEW, eos: int | None = None) -> dict[tuple[int, ...], float]:
    """P(first `n_new` tokens) by enumerating every continuation with the model (no cache, no tree);
    with `eos`, an answer ends at that token, and its probability is that of the shorter sequence."""
    joint: dict[tuple[int, ...], float] = {}

    def extend(seq: tuple[int, ...], prob: float) -> None:
        if len(seq) == n_new or (seq and seq[-1] == eos):
            joint[seq] = prob
            return
        p = next_distribution(PROMPT + seq, warp)
        for token in range(V):
            if float(p[token]) > 0:
                extend((*seq, token), prob * float(p[token]))

    extend((), 1.0)
    return joint


class LikelyTier(DraftTier):
    """Drafts what the exact distribution says is likely, and one token it says is not.

    From any context: the most likely chain to the end of the tested span, the second most likely
    token, and the least likely one (often 0 after top-k/top-p), so that steps meet long accepted
    runs, rejections and branches.
    """

    tier = Tier.MODEL

    def __init__(self, warp: Warp, n_new: int = N_NEW) -> None:
        self.warp = warp
        self.n_new = n_new

    def lookup(self, context: Sequence[int], budget: int) -> list[Draft]:
        context = tuple(context)
        left = len(PROMPT) + self.n_new - len(context)
        chain: list[int] = []
        for _ in range(left):
            chain.append(int(next_distribution(context + tuple(chain), self.warp).argmax()))
        order = next_distribution(context, self.warp).argsort(descending=True).tolist()
        return [tuple(chain), (order[1],), (order[-1],)]


def sample_answers(
    warp: Warp, tiers: str, budget: int | str, n: int, model=None, n_new: int = N_NEW, eos: int | None = None
) -> Counter[tuple[int, ...]]:
    """`budget` "value": the value-ranked tree on a flat forward profile (it learns across steps)."""
    model = model or small_model()
    make = {"C": lambda: ContextTier(), "L": lambda: LikelyTier(warp, n_new)}
    counts: Counter[tuple[int, ...]] = Counter()
    accepted_drafts = 0
    for seed in range(n):
        drafter = Drafter([make[c]() for c in tiers])
        settings = DecodeSettings(n_new, warp.temperature, warp.top_p, warp.top_k, seed=seed)
        policy = ValueTree(flat_profile(), candidates=8) if budget == "value" else FixedBudget(budget)
        got = run(model, PROMPT, drafter, settings, () if eos is None else (eos,), policy)
        counts[tuple(got.tokens)] += 1
        accepted_drafts += sum(t is not BONUS for t in got.token_tiers)
    if tiers and budget:
        assert accepted_drafts > n / 4  # the drafts were used: the test exercised acceptance
    return counts


CASES = [
    pytest.param(Warp(1.0), "L", 8, id="T1-likely-budget8"),
    pytest.param(Warp(0.7, top_p=0.9, top_k=4), "CL", 3, id="T0.7-topk4-topp0.9-context+likely-budget3"),
    pytest.param(Warp(1.5, top_k=5), "LC", 16, id="T1.5-topk5-likely+context-budget16"),
    pytest.param(Warp(1.0), "", 0, id="plain-sampling"),
    pytest.param(Warp(1.0), "LC", "value", id="T1-likely+context-value-tree"),
]


@pytest.mark.parametrize(("warp", "tiers", "budget"), CASES)
def test_hd_samples_follow_the_exact_distribution(warp, tiers, budget):
    p = chi_square_p_value(sample_answers(warp, tiers, budget, n=3000), exact_joint(warp))
    assert p > 1e-3, f"chi-square p = {p:.2e}"


DEEP = Warp(0.8, top_k=3)  # few tokens per position, so that five positions can be enumerated


def likely_eos() -> int:
    """A token that the first position draws often, but not always: some answers end early."""
    p = next_distribution(PROMPT, DEEP)
    return int(p.argsort(descending=True)[1])


@pytest.mark.parametrize("eos", [False, True], ids=["five-tokens", "five-tokens-end-of-sequence"])
def test_hd_samples_five_tokens_deep_and_through_an_end_token_exactly(eos):
    """Accepted runs as long as the answer; with an end token, answers that stop early, at any depth."""
    end = likely_eos() if eos else None
    samples = sample_answers(DEEP, "L", 8, n=3000, n_new=5, eos=end)
    if eos:
        assert sum(c for s, c in samples.items() if len(s) < 5) > 300  # the end token was met, early
    p = chi_square_p_value(samples, exact_joint(DEEP, 5, end))
    assert p > 1e-3, f"chi-square p = {p:.2e}"


def test_negative_control_accepting_every_draft_fails_the_deep_chi_square_test(monkeypatch):
    monkeypatch.setattr(hdlib.sampling, "reject_step", accept_every_draft)
    p = chi_square_p_value(sample_answers(DEEP, "L", 8, n=1000, n_new=5), exact_joint(DEEP, 5))
    assert p < 1e-6


def test_negative_control_accepting_every_draft_fails_the_chi_square_test(monkeypatch):
    monkeypatch.setattr(hdlib.sampling, "reject_step", accept_every_draft)
    warp = Warp(1.0)
    p = chi_square_p_value(sample_answers(warp, "L", 8, n=1000), exact_joint(warp))
    assert p < 1e-6


# --- seeds, greedy, provenance ---------------------------------------------------------------------


@pytest.mark.parametrize("make_model", [small_model, lambda: tiny_gemma3(vocab_size=V)])
def test_a_seed_replays_the_same_answer(make_model):
    model = make_model()

    def answer(seed):
        return run(model, PROMPT * 3, Drafter([ContextTier()]), DecodeSettings(40, 3.0, 0.95, seed=seed), (), FixedBudget(8))

    first, again, other = answer(7), answer(7), answer(8)
    assert first.tokens == again.tokens and first.seed == 7
    assert first.tokens != other.tokens
    assert first.temperature == 3.0
    drawn = run(model, PROMPT, None, DecodeSettings(5, 1.0), ())
    assert drawn.seed is not None
    assert run(model, PROMPT, None, DecodeSettings(5, 1.0, seed=drawn.seed), ()).tokens == drawn.tokens


def test_temperature_zero_stays_greedy_whatever_top_p_and_top_k_say():
    model = small_model()
    plain = run(model, PROMPT, None, DecodeSettings(20), ())
    hd = run(model, PROMPT, Drafter([ContextTier()]), DecodeSettings(20, 0.0, top_p=0.5, top_k=2, seed=1), (), FixedBudget(8))
    assert hd.tokens == plain.tokens and hd.seed is None
    logits = small_model()(torch.tensor([PROMPT])).logits[0, -1]
    assert plain.tokens[0] == int(logits.argmax())


def test_sampled_tokens_carry_the_tier_of_their_node():
    got = run(small_model(), PROMPT, Drafter([LikelyTier(Warp(1.0))]), DecodeSettings(N_NEW, 1.0, seed=3), (), FixedBudget(8))
    for step in got.steps:
        assert step.tiers[-1] is BONUS
        drafted = [step.tree.tokens[n] for n in step.accepted_nodes[1:]]
        assert list(step.tokens[: len(drafted)]) == drafted[: len(step.tokens)]
        assert all(t is Tier.MODEL for t in step.tiers[:-1])
