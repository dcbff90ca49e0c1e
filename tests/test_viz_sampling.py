"""What notebooks 05 and 06 teach, asserted: the textbook rule, chains, several candidates, the
Gumbel coupling, one chain's causal mask, and precision (hdlib.viz.sampling, hdlib.viz.mechanics)."""

from __future__ import annotations

import dataclasses
import statistics

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support.tiny import save_tiny

import hdlib.viz.mechanics
import hdlib.viz.sampling
from hdlib.bench.divergence import DIVERGENCE
from hdlib.engine.sampling import Warp, gumbel_token, position_noise, reject_step
from hdlib.engine.tree import DraftTree
from hdlib.errors import HDError
from hdlib.models.loading import load_model
from hdlib.tiers import BONUS
from hdlib.viz import (
    candidates_output,
    chain_lengths,
    chain_tree,
    coupling,
    expected_tokens_per_step,
    point_mass,
    precision_runs,
    residual,
    sampler_outcomes,
    textbook_figure,
    textbook_output,
    textbook_parts,
)
from hdlib.viz.mechanics import attention_mask_figure, position_ids_figure
from hdlib.viz.sampling import chi_square_p_value, outcome_distribution

V = 6
EXACT = 1e-9  # the rules are computed exactly, in float64
distributions = st.lists(st.floats(0, 1), min_size=V, max_size=V).filter(lambda xs: sum(xs) > 1e-3)


def tensor(xs) -> torch.Tensor:
    t = torch.tensor(xs, dtype=torch.float64)
    return t / t.sum()


# --- the textbook rule, exactly -------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(p=distributions, q=distributions)
def test_the_textbook_rule_emits_exactly_p_whatever_the_draft_distribution(p, q):
    p, q = tensor(p), tensor(q)
    assert (textbook_output(p, q) - p).abs().max() < EXACT
    accepted, rejected, rest = textbook_parts(p, q)
    assert abs(rejected - (1 - float(torch.minimum(p, q).sum()))) < EXACT
    assert float(rest.sum()) == pytest.approx(1.0) and bool((rest[p <= q] == 0).all() or rejected < EXACT)


def test_negative_control_drawing_from_p_instead_of_the_residual_is_not_p():
    p, q = tensor([0.5, 0.3, 0.15, 0.05]), tensor([0.1, 0.6, 0.1, 0.2])
    accepted, rejected, _ = textbook_parts(p, q)
    assert (accepted + rejected * p - p).abs().max() > 0.05
    assert textbook_output(p, p).equal(p) and residual(p, p).equal(p)  # q = p: never a rejection


def test_textbook_figure_stacks_to_p():
    p, q = tensor([0.5, 0.3, 0.15, 0.05]), tensor([0.1, 0.6, 0.1, 0.2])
    fig = textbook_figure(p, q)
    _, accepted, after, target = fig.data
    stacked = [a + b for a, b in zip(accepted.y, after.y)]
    assert stacked == pytest.approx(list(target.y), abs=EXACT) and list(after.base) == list(accepted.y)


@settings(max_examples=100, deadline=None)
@given(p=distributions, token=st.integers(0, V - 1))
def test_a_deterministic_draft_is_accepted_with_p_x_else_p_without_x_as_hdlibs_reject_step(p, token):
    p = tensor(p)
    accepted, rejected, rest = textbook_parts(p, point_mass(token, V))
    assert abs(float(accepted.sum()) - float(p[token])) < EXACT
    accept, left = reject_step(p, token)
    assert abs(accept - float(p[token])) < EXACT
    if rejected > EXACT:
        assert (rest - left / left.sum()).abs().max() < EXACT


@settings(max_examples=200, deadline=None)
@given(p=distributions, qs=st.lists(distributions, min_size=1, max_size=3))
def test_several_candidates_by_specinfers_rule_emit_exactly_p(p, qs):
    p = tensor(p)
    assert (candidates_output(p, [tensor(q) for q in qs]) - p).abs().max() < EXACT


@settings(max_examples=100, deadline=None)
@given(p=distributions, candidates=st.permutations(range(V)), n=st.integers(0, V))
def test_deterministic_candidates_by_specinfers_rule_are_hdlibs_rejection_rule(p, candidates, n):
    p = tensor(p)
    masses = [point_mass(t, V) for t in candidates[:n]]
    assert (candidates_output(p, masses) - outcome_distribution(p, candidates[:n])).abs().max() < EXACT


def test_negative_control_several_candidates_without_the_residual_update_are_not_p():
    p = tensor([0.4, 0.3, 0.2, 0.1])
    masses = [point_mass(0, 4), point_mass(1, 4)]
    assert (candidates_output(p, masses, update=False) - p).abs().max() > 0.05


# --- a chain of drafts, walked by hdlib's Sampler -------------------------------------------------


@pytest.mark.parametrize(("a", "g"), [(0.0, 3), (0.3, 1), (0.7, 4), (0.9, 8), (1.0, 5)])
def test_expected_tokens_per_step_is_the_geometric_sum(a, g):
    assert expected_tokens_per_step(a, g) == pytest.approx(sum(a**i for i in range(g + 1)))


@pytest.mark.parametrize("rule", ["rejection", "gumbel"])
@pytest.mark.parametrize(("a", "g"), [(0.5, 3), (0.8, 6)])
def test_the_samplers_walk_down_a_chain_averages_the_expected_tokens_per_step(rule, a, g):
    lengths = chain_lengths(a, g, 3000, seed=1, rule=rule)
    error = statistics.stdev(lengths) / len(lengths) ** 0.5
    assert abs(statistics.mean(lengths) - expected_tokens_per_step(a, g)) < 4 * error
    assert abs(statistics.mean(lengths) - expected_tokens_per_step(a, g - 1)) > 4 * error  # the formula's g matters


def test_a_chain_accepted_always_or_never():
    assert set(chain_lengths(1.0, 4, 50)) == {5} and set(chain_lengths(0.0, 4, 50)) == {1}
    with pytest.raises(HDError):
        expected_tokens_per_step(1.5, 2)


def test_the_samplers_node_draws_follow_p_and_the_gumbel_rule_ignores_the_candidates():
    p = tensor([0.45, 0.25, 0.15, 0.1, 0.05])
    expected = dict(enumerate(p.tolist()))
    plain = sampler_outcomes(p, [], 4000, seed=2)
    drafted = sampler_outcomes(p, [1, 3], 4000, seed=2)
    rejection = sampler_outcomes(p, [1, 3], 4000, seed=2, rule="rejection")
    assert plain == drafted  # the coupling: the same draws, with or without drafts
    assert rejection != plain
    for counts in (plain, rejection):
        assert chi_square_p_value(counts, expected) > 1e-3
    assert chi_square_p_value(sampler_outcomes(tensor([0.1, 0.2, 0.3, 0.2, 0.2]), [], 4000), expected) < 1e-3


# --- the Gumbel coupling on a real (tiny) model ---------------------------------------------------


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    return load_model(str(save_tiny(tmp_path_factory.mktemp("tiny") / "m")))


PROMPT = [5, 6, 7, 8, 9] * 3


@pytest.mark.parametrize("seed", [0, 7, 123])
def test_plain_samplings_token_at_one_node_is_the_gumbel_max_draw_at_its_position(tiny_lm, seed):
    warp = Warp(temperature=1.5)
    with torch.inference_mode():
        probs = warp(tiny_lm.model(torch.tensor([PROMPT])).logits[0, -1])
    want = gumbel_token(probs, position_noise(seed, len(PROMPT), probs.shape[-1]))
    got = hdlib.viz.sampling.generate(tiny_lm, PROMPT, tiers=(), temperature=1.5, seed=seed, max_new_tokens=1)
    assert got.tokens == [want]


def test_hd_under_the_gumbel_rule_is_plain_sampling_token_for_token_and_the_rejection_rule_is_not(tiny_lm):
    differ = 0
    for seed in range(4):
        same = coupling(tiny_lm, PROMPT, 4.0, seed, max_new_tokens=24, tiers=("context",), budget=8)
        assert same.same and same.parted_at is None and "token for token" in same.describe()
        assert same.plain.steps and all(not s.tree.n_drafted for s in same.plain.steps)  # plain: no drafts
        other = coupling(tiny_lm, PROMPT, 4.0, seed, max_new_tokens=24, rule="rejection", tiers=("context",), budget=8)
        differ += not other.same
    assert differ >= 2


# --- notebook 05: one chain, then the tree; precision ---------------------------------------------


def test_one_chains_mask_is_the_causal_lower_triangle_after_the_cache():
    tree = chain_tree([11, 12, 13, 14, 15])
    fig = attention_mask_figure(tree, past_len=7, past_shown=3)
    z = torch.tensor(fig.data[0].z)
    assert z[:, :3].eq(1).all() and z[:, 3:].equal(torch.tril(torch.ones(5, 5, dtype=z.dtype)))
    assert "causal mask of a chain" in fig.layout.title.text
    assert list(position_ids_figure(tree, past_len=7).data[0].customdata[0]) == [7, 8, 9, 10, 11]


def test_a_trees_mask_lets_each_node_see_its_ancestors_only():
    tree = DraftTree(root=1)
    tree.add([2, 3], BONUS, max_new=4, max_depth=4)
    tree.add([4], BONUS, max_new=4, max_depth=4)  # a sibling of node 1
    fig = attention_mask_figure(tree, past_len=2, past_shown=2)
    z = torch.tensor(fig.data[0].z)[:, 2:]
    ancestors = [[int(j in tree.path_to(i)) for j in range(len(tree))] for i in range(len(tree))]
    assert z.tolist() == ancestors and not z.equal(torch.tril(torch.ones_like(z)))
    assert "tree attention mask" in fig.layout.title.text


def test_precision_runs_find_float32_identical_and_weigh_any_parting(tiny_lm, tmp_path):
    bf16 = load_model(str(save_tiny(tmp_path / "m")), dtype="bfloat16")
    runs = precision_runs([tiny_lm, bf16], PROMPT, max_new_tokens=24, tiers=("context",), budget=8)
    assert [r.dtype for r in runs] == ["float32", "bfloat16"]
    assert runs[0].same and "identical" in runs[0].describe()
    assert any(s.tree.n_drafted for s in runs[0].hd.steps)  # HD verified drafts: its passes were trees
    assert all(r.same or r.divergence.near_tie for r in runs[1:])


def test_negative_control_a_corrupted_hd_answer_is_reported_beyond_the_near_tie_bound(tiny_lm, monkeypatch):
    real = hdlib.viz.mechanics.generate

    def corrupt(lm, prompt, tiers=(), **kwargs):
        g = real(lm, prompt, tiers, **kwargs)
        if tiers:
            step = g.steps[1]
            g.steps[1] = dataclasses.replace(step, tokens=((step.tokens[0] + 1) % 96, *step.tokens[1:]))
        return g

    monkeypatch.setattr(hdlib.viz.mechanics, "generate", corrupt)
    (run,) = precision_runs([tiny_lm], PROMPT, max_new_tokens=16, tiers=("context",), budget=8)
    assert not run.same and run.divergence.kind == DIVERGENCE and "part at token" in run.describe()


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.01, 1.0), min_size=4, max_size=8), st.randoms(use_true_random=False))
def test_the_order_of_deterministic_candidates_changes_conditional_rates_not_what_is_emitted_nor_the_speed(
    weights, rng
):
    """Notebook 06, "Try this" 1: under the rejection rule each deterministic candidate is taken with
    probability p(x) whatever its place, so the emitted distribution and the chance that the walk
    goes on to any given child (the speed) are the same in every order; only the rate of a candidate
    once it is tried (conditional on those before it being rejected) changes."""
    p = torch.tensor(weights, dtype=torch.float64)
    p /= p.sum()
    candidates = list(range(len(weights) - 1))  # one token is never drafted: some mass stays for the final draw
    shuffled = candidates[:]
    rng.shuffle(shuffled)
    taken, rates = {}, {}
    for order in (candidates, shuffled):
        trials, _ = hdlib.viz.sampling.node_trials(p, order)
        taken[tuple(order)] = {t.token: t.reach * t.accept for t in trials}
        rates[tuple(order)] = {t.token: t.accept for t in trials}
        assert (outcome_distribution(p, order) - p).abs().max() < EXACT
    for order, chances in taken.items():
        assert all(abs(chances[x] - float(p[x])) < EXACT for x in candidates), order
    first, last = candidates[0], candidates[-1]
    reversed_rates = {t.token: t.accept for t in hdlib.viz.sampling.node_trials(p, candidates[::-1])[0]}
    assert rates[tuple(candidates)][first] == pytest.approx(float(p[first]))  # tried first: its own p
    assert reversed_rates[first] > float(p[first])  # tried last: its share of a smaller residual
    assert rates[tuple(candidates)][last] > reversed_rates[last]


# --- the trials and outcome figures ---------------------------------------------------------------

from hdlib import viz  # noqa: E402
from hdlib.viz.sampling import accept_every_draft, node_trials  # noqa: E402


def test_the_trials_and_outcome_figures_show_the_rule():
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    trials, final = node_trials(p, [1, 0])
    fig = viz.trials_figure(p, trials, final, label=lambda t: f"t{t}")
    assert len(fig.data) == 4  # the distribution, two trials, the final draw
    assert "accept with p = 0.30" in fig.layout.annotations[1].text
    assert list(fig.data[3].y) == pytest.approx([0.0, 0.0, 1.0])  # t0, t1 rejected: only t2 is left
    runs = {
        "HD": sampler_outcomes(p, [1, 0], 2000, seed=3, rule="rejection"),
        "broken": sampler_outcomes(p, [1, 0], 2000, rule=accept_every_draft),
    }
    out = viz.outcomes_figure(p, runs)
    assert [t.name.split(":")[0] for t in out.data] == ["exact", "HD", "broken"]
    assert out.data[2].marker.color == "#D55E00" and out.data[1].marker.color != "#D55E00"  # the broken rule fails
