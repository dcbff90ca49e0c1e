"""Lossless sampling: HD draws its answers from exactly the distribution plain sampling does.

Three kinds of evidence. The acceptance rule, enumerated exactly over its outcomes, gives back the
target distribution for any candidate list. The warpers agree with transformers' own. And end to
end, on a tiny model with an 8-token vocabulary, the first three tokens of thousands of answers pass
a chi-square test against the exact distribution computed by enumerating every 3-token continuation
with the model: plain sampling's, and HD's under the rejection rule (several tiers, budgets, top-k
and top-p settings); HD under the Gumbel rule gives plain sampling's answer seed by seed on the same
settings. An acceptance rule that accepts every draft fails these tests (the negative controls).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.oracle import OracleTier, TruthTier
from support.oracle import prompts as lossless_prompts
from support.tiny import VOCAB as TINY_VOCAB
from support.tiny import tiny_gemma3, tiny_llama
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

import hdlib.engine.sampling
from hdlib.engine.budget import FixedBudget
from hdlib.engine.drafter import Drafter
from hdlib.engine.forward_time import flat_profile
from hdlib.engine.loop import DecodeSettings, run
from hdlib.engine.sampling import Warp, position_noise
from hdlib.engine.value import ValueBudget
from hdlib.errors import HDError
from hdlib.tiers import BONUS, ContextTier, RecycledTier, Tier
from hdlib.tiers.base import Draft, DraftTier
from hdlib.viz.sampling import (
    accept_every_draft,
    chi_square_p_value,
    node_trials,
    outcome_distribution,
    sampler_outcomes,
)

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
    assert [(t.token, t.reach, t.accept) for t in trials] == [
        (1, 1.0, pytest.approx(0.3)),
        (0, pytest.approx(0.7), pytest.approx(0.5 / 0.7)),
    ]
    torch.testing.assert_close(trials[1].residual, torch.tensor([0.5, 0.0, 0.2], dtype=torch.float64) / 0.7)
    torch.testing.assert_close(final, torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64))


def test_drawn_outcomes_pass_the_chi_square_test_and_a_broken_rule_fails_it():
    p = torch.tensor([0.4, 0.25, 0.2, 0.1, 0.05], dtype=torch.float64)
    exact = {i: float(q) for i, q in enumerate(p)}
    fair = sampler_outcomes(p, [3, 1], 4000, seed=1, rule="rejection")
    assert sum(fair.values()) == 4000 and chi_square_p_value(fair, exact) > 1e-3
    broken = sampler_outcomes(p, [3, 1], 4000, seed=1, rule=accept_every_draft)
    assert broken == {3: 4000} and chi_square_p_value(broken, exact) < 1e-6


# --- the warpers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"), [(1.0, 0, 1.0), (0.7, 5, 1.0), (1.3, 0, 0.8), (0.5, 20, 0.9)]
)
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
        ({"temperature": 1.0, "sampling_rule": "coin"}, "sampling rule must be one of gumbel, rejection"),
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

    def propose(self, context: Sequence[int], budget: int) -> list[Draft]:
        context = tuple(context)
        left = len(PROMPT) + self.n_new - len(context)
        chain: list[int] = []
        for _ in range(left):
            chain.append(int(next_distribution(context + tuple(chain), self.warp).argmax()))
        order = next_distribution(context, self.warp).argsort(descending=True).tolist()
        return [tuple(chain), (order[1],), (order[-1],)]


def answers(
    warp: Warp,
    tiers: str,
    budget: int | str,
    n: int,
    n_new: int = N_NEW,
    eos: int | None = None,
    rule: str = "gumbel",
    first: int = 0,
) -> list[tuple[int, ...]]:
    """The answers for seeds `first` to n-1. `budget` "value": the value-ranked tree on a flat
    forward profile (it learns across steps)."""
    make = {"C": lambda: ContextTier(), "L": lambda: LikelyTier(warp, n_new)}
    got_all: list[tuple[int, ...]] = []
    accepted_drafts = 0
    for seed in range(first, n):
        drafter = Drafter([make[c]() for c in tiers])
        settings = DecodeSettings(n_new, warp.temperature, warp.top_p, warp.top_k, seed=seed, sampling_rule=rule)
        policy = ValueBudget(flat_profile(), candidates=8) if budget == "value" else FixedBudget(budget)
        got = run(small_model(), PROMPT, drafter, settings, () if eos is None else (eos,), policy)
        got_all.append(tuple(got.tokens))
        accepted_drafts += sum(t is not BONUS for t in got.token_tiers)
    if tiers and budget:
        assert accepted_drafts > n / 4  # the drafts were used: the test exercised acceptance
    return got_all


def sample_answers(warp: Warp, tiers: str, budget: int | str, n: int, **options) -> Counter[tuple[int, ...]]:
    return Counter(answers(warp, tiers, budget, n, **options))


PLAIN: dict[tuple, list[tuple[int, ...]]] = {}  # (warp, n_new, eos) -> the answers of seeds 0, 1, ...


def plain_answers(warp: Warp, n: int, n_new: int = N_NEW, eos: int | None = None) -> list[tuple[int, ...]]:
    """Plain sampling's answers for seeds 0 to n-1, each seed drawn once per setting: for the
    chi-square test, and for the HD answers that must equal them."""
    drawn = PLAIN.setdefault((warp, n_new, eos), [])
    if len(drawn) < n:
        drawn += answers(warp, "", 0, n, n_new, eos, first=len(drawn))
    return drawn[:n]


CASES = [
    pytest.param(Warp(1.0), "L", 8, id="T1-likely-budget8"),
    pytest.param(Warp(0.7, top_p=0.9, top_k=4), "CL", 3, id="T0.7-topk4-topp0.9-context+likely-budget3"),
    pytest.param(Warp(1.5, top_k=5), "LC", 16, id="T1.5-topk5-likely+context-budget16"),
    pytest.param(Warp(1.0), "", 0, id="plain-sampling"),
    pytest.param(Warp(1.0), "LC", "value", id="T1-likely+context-value-tree"),
]


# Each rule's own distribution, by chi-square over 3,000 answers: plain sampling (the Gumbel rule with
# no drafts), and the rejection rule on the cases with the most tiers and the value-ranked tree.
DISTRIBUTION_CASES = [pytest.param(*c.values, "gumbel", id=f"{c.id}-gumbel") for c in CASES if not c.values[1]] + [
    pytest.param(*c.values, "rejection", id=f"{c.id}-rejection") for c in CASES if "context" in c.id
]


@pytest.mark.parametrize(("warp", "tiers", "budget", "rule"), DISTRIBUTION_CASES)
def test_hd_samples_follow_the_exact_distribution(warp, tiers, budget, rule):
    n = 3000
    drawn = Counter(plain_answers(warp, n)) if not tiers else sample_answers(warp, tiers, budget, n, rule=rule)
    p = chi_square_p_value(drawn, exact_joint(warp))
    assert p > 1e-3, f"chi-square p = {p:.2e}"


# The Gumbel rule with drafts gives plain sampling's answer, seed by seed: a stricter check than a
# chi-square test of HD's answers (a wrong token on any seed fails it), and with plain sampling's
# distribution tested above, HD's follows. 600 seeds each, against the plain answers of the same seeds.
@pytest.mark.parametrize(("warp", "tiers", "budget"), [c for c in CASES if c.values[1]])
def test_hd_samples_under_the_gumbel_rule_are_plain_samples_seed_by_seed(warp, tiers, budget):
    n = 600
    want = plain_answers(warp, n)
    got = answers(warp, tiers, budget, n)
    assert [seed for seed in range(n) if got[seed] != want[seed]] == []


DEEP = Warp(0.8, top_k=3)  # few tokens per position, so that five positions can be enumerated


def likely_eos() -> int:
    """A token that the first position draws often, but not always: some answers end early."""
    p = next_distribution(PROMPT, DEEP)
    return int(p.argsort(descending=True)[1])


@pytest.mark.parametrize(
    ("eos", "rule"),
    [(False, "gumbel"), (True, "rejection")],
    ids=["five-tokens-gumbel", "five-tokens-end-of-sequence-rejection"],
)
def test_hd_samples_five_tokens_deep_and_through_an_end_token_exactly(eos, rule):
    """Accepted runs as long as the answer; with an end token, answers that stop early, at any depth."""
    end = likely_eos() if eos else None
    samples = sample_answers(DEEP, "L", 8, n=3000, n_new=5, eos=end, rule=rule)
    if eos:
        assert sum(c for s, c in samples.items() if len(s) < 5) > 300  # the end token was met, early
    p = chi_square_p_value(samples, exact_joint(DEEP, 5, end))
    assert p > 1e-3, f"chi-square p = {p:.2e}"


def test_hd_samples_through_an_end_token_under_the_gumbel_rule_are_plain_samples_seed_by_seed():
    """Five tokens deep, answers that stop early at any depth: seed by seed, plain sampling's."""
    end, n = likely_eos(), 600
    want = plain_answers(DEEP, n, n_new=5, eos=end)
    got = answers(DEEP, "L", 8, n, n_new=5, eos=end)
    assert sum(len(answer) < 5 for answer in got) > 60  # the end token was met, early
    assert [seed for seed in range(n) if got[seed] != want[seed]] == []


def test_negative_control_accepting_every_draft_fails_the_deep_chi_square_test(monkeypatch):
    monkeypatch.setattr(hdlib.engine.sampling, "reject_step", accept_every_draft)
    p = chi_square_p_value(sample_answers(DEEP, "L", 8, n=1000, n_new=5, rule="rejection"), exact_joint(DEEP, 5))
    assert p < 1e-6


def test_negative_control_accepting_every_draft_fails_the_chi_square_test(monkeypatch):
    monkeypatch.setattr(hdlib.engine.sampling, "reject_step", accept_every_draft)
    warp = Warp(1.0)
    p = chi_square_p_value(sample_answers(warp, "L", 8, n=1000, rule="rejection"), exact_joint(warp))
    assert p < 1e-6


def test_negative_control_noise_shared_by_every_position_fails_the_chi_square_test(monkeypatch):
    """The Gumbel rule's randomness must be the position's own: one noise for all positions draws
    each token from its distribution but ties the tokens of an answer together."""
    noise = hdlib.engine.sampling.position_noise
    monkeypatch.setattr(hdlib.engine.sampling, "position_noise", lambda seed, position, vocab: noise(seed, 0, vocab))
    warp = Warp(1.0)
    p = chi_square_p_value(sample_answers(warp, "L", 8, n=1000), exact_joint(warp))
    assert p < 1e-6


def test_negative_control_accepting_every_draft_under_the_gumbel_rule_is_not_plain_sampling(monkeypatch):
    """The seed-by-seed comparison catches a rule that keeps drafts the position's sample is not."""
    want = plain_answers(Warp(1.0), 200)
    monkeypatch.setattr(
        hdlib.engine.sampling.DraftTree, "child", lambda tree, node, token: next(iter(tree.children(node)), None)
    )
    got = answers(Warp(1.0), "L", 8, 200)
    assert sum(g != w for g, w in zip(got, want, strict=True)) > 20


def test_negative_control_accepting_every_draft_under_the_gumbel_rule_fails_the_chi_square_test(monkeypatch):
    """A drafted child accepted whatever the position's sample is (as if every draft were the sample)."""
    monkeypatch.setattr(
        hdlib.engine.sampling.DraftTree, "child", lambda tree, node, token: next(iter(tree.children(node)), None)
    )
    warp = Warp(1.0)
    p = chi_square_p_value(sample_answers(warp, "L", 8, n=1000), exact_joint(warp))
    assert p < 1e-6


# --- seeds, greedy, provenance ---------------------------------------------------------------------


@pytest.mark.parametrize("make_model", [small_model, lambda: tiny_gemma3(vocab_size=V)])
def test_a_seed_replays_the_same_answer(make_model):
    model = make_model()

    def answer(seed):
        return run(
            model, PROMPT * 3, Drafter([ContextTier()]), DecodeSettings(40, 3.0, 0.95, seed=seed), (), FixedBudget(8)
        )

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
    hd = run(
        model, PROMPT, Drafter([ContextTier()]), DecodeSettings(20, 0.0, top_p=0.5, top_k=2, seed=1), (), FixedBudget(8)
    )
    assert hd.tokens == plain.tokens and hd.seed is None
    logits = small_model()(torch.tensor([PROMPT])).logits[0, -1]
    assert plain.tokens[0] == int(logits.argmax())


def test_sampled_tokens_carry_the_tier_of_their_node():
    got = run(
        small_model(), PROMPT, Drafter([LikelyTier(Warp(1.0))]), DecodeSettings(N_NEW, 1.0, seed=3), (), FixedBudget(8)
    )
    for step in got.steps:
        assert step.tiers[-1] is BONUS
        drafted = [step.tree.tokens[n] for n in step.accepted_nodes[1:]]
        assert list(step.tokens[: len(drafted)]) == drafted[: len(step.tokens)]
        assert all(t is Tier.MODEL for t in step.tiers[:-1])


# --- the same sample: HD's answer is plain sampling's, token for token (the Gumbel rule) -----------

SAME_MODELS = {"llama": tiny_llama, "gemma3": tiny_gemma3}
WARPS = [Warp(1.0), Warp(0.7, top_k=5), Warp(1.3, top_p=0.8), Warp(0.5, top_p=0.9, top_k=20), Warp(4.0)]


@functools.cache
def same_model(name: str):
    return SAME_MODELS[name]()


def sampled(warp: Warp, max_new: int, seed: int, rule: str = "gumbel") -> DecodeSettings:
    return DecodeSettings(max_new, warp.temperature, warp.top_p, warp.top_k, seed=seed, sampling_rule=rule)


@functools.cache
def plain_sample(name: str, prompt: tuple[int, ...], max_new: int, warp: Warp, seed: int, eos: int | None = None):
    return run(same_model(name), prompt, None, sampled(warp, max_new, seed), () if eos is None else (eos,)).tokens


def truth_drafter(order: str, truth: list[int], seed: int) -> Drafter:
    """C: the context tier; O: an oracle that drafts the true answer with corruptions and decoys; R:
    the recycled tier, the model's own top guesses from earlier passes."""
    make = {
        "C": lambda: ContextTier(),
        "O": lambda: OracleTier(truth, TINY_VOCAB, seed, tier=Tier.STATISTICS),
        "R": lambda: RecycledTier(),
    }
    return Drafter([make[c]() for c in order])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(SAME_MODELS)),
    prompt=lossless_prompts,
    order=st.sampled_from(["C", "O", "CO", "OC", "ROC", "RC"]),
    budget=st.one_of(st.integers(0, 24), st.just("value")),
    warp=st.sampled_from(WARPS),
    max_new=st.integers(1, 40),
    seed=st.integers(0, 2**63 - 1),
)
def test_sampled_hd_is_plain_sampling_token_for_token(name, prompt, order, budget, warp, max_new, seed):
    """Whatever the tiers, their order, the budget (fixed, or the value-ranked tree) and the warp."""
    want = plain_sample(name, prompt, max_new, warp, seed)
    drafter = truth_drafter(order, list(prompt) + want, seed % 1000)
    policy = ValueBudget(flat_profile(), candidates=12) if budget == "value" else FixedBudget(budget)
    got = run(same_model(name), prompt, drafter, sampled(warp, max_new, seed), (), policy)
    assert got.tokens == want and got.seed == seed and got.sampling_rule == "gumbel"
    if "O" in order and budget and max_new > 8:
        assert got.mat > 1.0  # the oracle's truths were accepted: the test exercised acceptance


@pytest.mark.parametrize("name", sorted(SAME_MODELS))
def test_sampled_hd_meets_an_end_token_mid_tree_as_plain_sampling_does(name):
    prompt, warp, seed = (5, 6, 7, 8, 9) * 3, Warp(1.0), 11
    full = plain_sample(name, prompt, 30, warp, seed)
    end = full[6]
    want = plain_sample(name, prompt, 30, warp, seed, end)
    assert want[-1] == end and len(want) <= 7
    truth = list(prompt) + full
    drafter = Drafter([TruthTier(truth)])  # drafts the sampled answer exactly: the path runs past the end token
    got = run(same_model(name), prompt, drafter, sampled(warp, 30, seed), (end,), FixedBudget(16))
    assert got.tokens == want and got.stop_reason == "eos"
    last = got.steps[-1]
    accepted = [last.tree.tokens[n] for n in last.accepted_nodes[1:]]
    assert len(accepted) > len(last.tokens) and list(last.tokens) == accepted[: len(last.tokens)]


@pytest.mark.parametrize("name", sorted(SAME_MODELS))
def test_the_rejection_rule_gives_the_same_distribution_but_another_sample(name):
    """The negative control of the token-for-token test: the earlier default rule fails it. (A high
    temperature, since the tiny models' distributions are peaked: the rules part where they are not.)"""
    prompt, warp = (5, 6, 7, 8, 9) * 3, Warp(4.0)
    differ = 0
    for seed in range(5):
        want = run(same_model(name), prompt, None, sampled(warp, 30, seed, "rejection"), ()).tokens
        drafter = truth_drafter("OC", list(prompt) + want, seed)
        got = run(same_model(name), prompt, drafter, sampled(warp, 30, seed, "rejection"), (), FixedBudget(12))
        differ += got.tokens != want
    assert differ >= 3


def test_the_gumbel_rule_records_each_childs_probability_as_its_chance_of_acceptance():
    prompt, warp, seed = (5, 6, 7, 8, 9) * 3, Warp(1.0), 4
    want = plain_sample("llama", prompt, 30, warp, seed)
    got = run(
        same_model("llama"),
        prompt,
        truth_drafter("OC", list(prompt) + want, seed),
        sampled(warp, 30, seed),
        (),
        FixedBudget(12),
    )
    for step in got.steps:
        reached = set(step.accepted_nodes)
        for node in range(1, len(step.tree)):
            parent = step.tree.parents[node]
            assert (step.accept_probs[node] is not None) == (parent in reached)
        for parent in reached:
            kids = step.tree.children(parent)
            assert sum(step.accept_probs[k] for k in kids) <= 1 + 1e-9  # at most one child is the sample


def test_gumbel_draws_follow_the_distribution_and_ignore_the_candidates():
    p = torch.tensor([0.4, 0.25, 0.2, 0.1, 0.05], dtype=torch.float64)
    exact = {i: float(q) for i, q in enumerate(p)}
    counts = sampler_outcomes(p, [], 4000, seed=1)  # the Gumbel rule
    assert sum(counts.values()) == 4000 and chi_square_p_value(counts, exact) > 1e-3
    assert sampler_outcomes(p, [], 50, seed=1) == sampler_outcomes(p, [], 50, seed=1)  # a function of seed, position
    assert sampler_outcomes(p, [3, 1], 50, seed=1) == sampler_outcomes(p, [], 50, seed=1)  # whatever was drafted
    noise = position_noise(3, 17, 5)
    assert torch.equal(noise, position_noise(3, 17, 5)) and not torch.equal(noise, position_noise(3, 18, 5))
