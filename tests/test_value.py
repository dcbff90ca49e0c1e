"""The value-ranked tree: estimates, the choice of nodes, the prior on disk; the table of the model's
guesses and the recycled tier that drafts from it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hdlib.engine.forward_time import ForwardProfile
from hdlib.engine.prior import AcceptancePrior
from hdlib.engine.trace import Step, StepTimes
from hdlib.engine.tree import DraftTree
from hdlib.engine.value import DEFAULT_PRIOR, AcceptanceModel, ValueBudget, best_size, estimate, node_kinds, prior_name
from hdlib.errors import HDError
from hdlib.tiers.base import BONUS, Proposal, Tier
from hdlib.tiers.guesses import Successors

FLAT = ForwardProfile(tuple([0.05] * 64), 256, "flat")
SHORT = ForwardProfile((0.05, 0.06, 0.07, 0.08), 256, "short")  # measured up to 4 tokens
STEEP = ForwardProfile(tuple(0.05 * (1 + 0.5 * k) for k in range(64)), 256, "steep")  # each token costs half a pass
SURE = 1e9  # observations behind a prior rate that the estimate should equal

trees = st.lists(
    st.tuples(
        st.lists(st.integers(0, 5), min_size=1, max_size=6),
        st.sampled_from([Tier.CONTEXT, Tier.MODEL, Tier.STATISTICS]),
    )
)


def build(drafts) -> DraftTree:
    tree = DraftTree(root=9)
    for i, (draft, tier) in enumerate(drafts):
        tree.add(Proposal(tuple(draft), key_length=i % 4, source="x" if i % 2 else ""), tier, 64, 64)
    return tree


@settings(max_examples=60, deadline=None)
@given(drafts=trees, rates=st.lists(st.just(0.0) | st.floats(0.01, 1.0), min_size=3, max_size=3), steep=st.booleans())
def test_the_kept_nodes_are_the_most_probable_and_closed_under_ancestors(drafts, rates, steep):
    tree = build(drafts)
    model = AcceptanceModel(
        {
            f"{t.name}/{part}/-1/-1": (r, SURE)
            for t, r in zip([Tier.CONTEXT, Tier.MODEL, Tier.STATISTICS], rates)
            for part in ("", "x")
        }
    )
    policy = ValueBudget(STEEP if steep else FLAT)
    policy.model = model
    chosen = policy.select(tree, (), None)
    kept, estimates = chosen.tree, chosen.estimates
    _, probs = estimate(tree, model, Successors())
    order, n = best_size(probs, policy.profile)
    assert kept.n_drafted == n and estimates is not None and len(estimates) == len(kept)
    chosen = set(order[:n].tolist()) | {0}
    assert all(tree.parents[i] in chosen for i in chosen if i)  # closed under ancestors
    left_out = [probs[i] for i in range(1, len(tree)) if i not in chosen]
    assert all(probs[i] >= max(left_out, default=0) for i in chosen)  # the most probable ones
    # The kept subtree is the same trie: every kept path spells the same tokens.
    assert sorted(tuple(kept.tokens[j] for j in kept.path_to(i)) for i in range(len(kept))) == sorted(
        tuple(tree.tokens[j] for j in tree.path_to(i)) for i in chosen
    )
    if not steep:  # a free forward pass: everything with a chance is worth verifying (that float sums can tell),
        # up to what one pass may hold: the profile's largest pass, the root and 63 drafts
        most = len(policy.profile.seconds) - 1
        assert min(sum(p > 1e-12 for p in probs[1:]), most) <= n <= min(sum(p > 0 for p in probs[1:]), most)


def test_nothing_is_verified_when_drafts_do_not_pay_on_a_steep_profile():
    tree = build([((1, 2, 3), Tier.STATISTICS)])
    policy = ValueBudget(STEEP)
    policy.model = AcceptanceModel({"statistics//-1/-1": (0.3, SURE)})  # 1.3 tokens for 1.5 times the time
    chosen = policy.select(tree, (), None)
    assert chosen.tree.n_drafted == 0 and chosen.estimates == (1.0,)
    policy.model = AcceptanceModel({"statistics//-1/-1": (0.99, SURE)})
    assert policy.select(tree, (), None).tree.n_drafted == 3


def test_path_probability_is_the_product_along_the_path():
    tree = build([((1, 2, 3), Tier.CONTEXT)])
    model = AcceptanceModel({"context//-1/-1": (0.5, SURE)})
    assert estimate(tree, model, Successors())[1].tolist() == pytest.approx([1.0, 0.5, 0.25, 0.125])


def test_the_estimate_follows_what_a_kind_achieved_and_shrinks_toward_the_coarser_one():
    tree = build([((1, 2), Tier.CONTEXT), ((4,), Tier.MODEL)])
    model = AcceptanceModel(decay=1.0, strength=4.0)
    first = node_kinds(tree, 1)
    assert model.probability(first) == pytest.approx(DEFAULT_PRIOR)
    for _ in range(40):
        model.observe(first, True)
    assert model.probability(first) > 0.9
    # A kind never seen of the same tier and part borrows the tier's estimate, not the prior.
    deeper = node_kinds(tree, 2)
    assert model.probability(deeper) > 0.8
    assert model.probability(node_kinds(tree, 3)) == pytest.approx(DEFAULT_PRIOR)  # another tier


def test_an_estimate_starts_from_the_models_opinion_else_the_tiers_confidence():
    tree = DraftTree(root=0)
    tree.add(Proposal((1,), confidence=(0.9,)), Tier.STATISTICS, 8, 8)
    tree.add((2,), Tier.STATISTICS, 8, 8)
    model = AcceptanceModel()
    assert model.probability(node_kinds(tree, 1)) == pytest.approx(0.875)  # the band 0.8-0.95
    assert model.probability(node_kinds(tree, 1, model_opinion=0.1)) == pytest.approx(0.125)  # the model knows better
    assert model.probability(node_kinds(tree, 2)) == pytest.approx(DEFAULT_PRIOR)


def test_a_prior_weighs_as_much_as_the_observations_behind_it():
    tree = build([((1,), Tier.CONTEXT)])
    kinds = node_kinds(tree, 1)
    coarse = prior_name(kinds[-1])
    # One rejection on an earlier run moves the estimate a little; it must not pin the kind at zero,
    # where it would never be verified, observed or corrected again.
    once = AcceptanceModel({coarse: (0.0, 1.0)}, strength=4.0).probability(kinds)
    assert once == pytest.approx(4.0 * DEFAULT_PRIOR / 5.0)
    assert AcceptanceModel({coarse: (0.0, 1000.0)}, strength=4.0).probability(kinds) < 0.01


def test_old_evidence_fades():
    tree = build([((1,), Tier.CONTEXT)])
    kinds = node_kinds(tree, 1)
    model = AcceptanceModel(decay=0.9)
    for _ in range(30):
        model.observe(kinds, True)
        model.next_step()
    high = model.probability(kinds)
    for _ in range(30):
        model.observe(kinds, False)
        model.next_step()
    assert high > 0.9 and model.probability(kinds) < 0.1


def verified(tree: DraftTree, path: tuple[int, ...], tokens: tuple[int, ...], tiers: tuple[Tier, ...]) -> Step:
    """The record of a step that verified all of `tree` and accepted `path`, with the kinds a fresh
    estimate gives its nodes."""
    kinds = tuple(estimate(tree, AcceptanceModel(), Successors())[0])
    return Step(0, 5, 8, tree, path, tokens, tiers, StepTimes(0, 0, 0, 0, 0), kinds=kinds)


def test_update_learns_only_from_nodes_whose_parent_was_accepted():
    tree = DraftTree(root=0)
    tree.add((1, 2), Tier.CONTEXT, 8, 8)  # nodes 1 -> 2
    tree.add((3,), Tier.CONTEXT, 8, 8)  # node 3
    policy = ValueBudget(FLAT)
    policy.model = AcceptanceModel(decay=1.0)
    policy.update(verified(tree, (0, 3), (3, 7), (Tier.CONTEXT, BONUS)))
    counts = policy.model._counts
    assert counts[node_kinds(tree, 3)[-1]].seen == 2  # nodes 1 (rejected) and 3 (accepted); 2 unseen
    assert counts[node_kinds(tree, 3)[-1]].accepted == 1




def test_the_prior_is_kept_on_disk_and_merged(tmp_path):
    path = tmp_path / "prior.json"
    prior = AcceptancePrior(path)
    assert prior.rates() == {}
    prior.merge({"context//-1/-1": (0.8, 10.0)})
    prior.merge({"context//-1/-1": (0.2, 10.0)})
    assert AcceptancePrior(path).rates() == {"context//-1/-1": pytest.approx((0.5, 20.0))}
    path.write_text("{not json")
    assert AcceptancePrior(path).rates() == {}  # a damaged file is started again
    prior = AcceptancePrior(path)
    policy = ValueBudget(FLAT, prior)
    tree = build([((1,), Tier.CONTEXT)])
    policy.update(verified(tree, (0, 1), (1, 7), (Tier.CONTEXT, BONUS)))
    prior.merge(policy.rates())  # what `generate` does after a generation
    assert json.loads(path.read_text())["context//-1/-1"][0] == 1.0


def test_a_prior_with_rates_above_one_is_dropped_with_one_line(tmp_path, capsys):
    """A damaged prior (every rate 3.0) made a child's path probability pass its parent's and the
    tree selection raise ("node 4 is kept without its parent 3"). Now the file is refused on load."""
    from support.oracle import OracleTier
    from support.tiny import VOCAB, tiny_llama

    from hdlib.engine.drafter import Drafter
    from hdlib.engine.loop import DecodeSettings, run
    from hdlib.tiers import ContextTier

    model, prompt, path = tiny_llama(), (5, 6, 7, 8, 5, 6, 7, 8, 5, 6), tmp_path / "prior.json"
    truth = list(prompt) + run(model, prompt, None, DecodeSettings(max_new_tokens=24)).tokens

    def generate() -> list[int]:
        tiers = Drafter([ContextTier(), OracleTier(truth, VOCAB, seed=1)])
        prior = AcceptancePrior(path)
        policy = ValueBudget(SHORT, prior)  # at most 3 nodes kept: the best, not all
        tokens = run(model, prompt, tiers, DecodeSettings(max_new_tokens=24), policy=policy).tokens
        prior.merge(policy.rates())  # as `generate` does
        return tokens

    assert generate() == truth[len(prompt) :]
    rates = json.loads(path.read_text())
    assert len(rates) > 3
    path.write_text(json.dumps({kind: [3.0, weight] for kind, (_, weight) in rates.items()}))
    assert generate() == truth[len(prompt) :]
    err = capsys.readouterr().err
    assert err.count("not a valid acceptance prior") == 1 and str(path) in err
    assert all(0 <= rate <= 1 for rate, _ in json.loads(path.read_text()).values())  # written afresh
    for bad in ("[1, 2]", '{"x": [0.5, -1]}', '{"x": [NaN, 1]}', '{"x": "0.5"}'):
        path.write_text(bad)
        assert AcceptancePrior(path).rates() == {}


def test_bad_settings_are_refused():
    with pytest.raises(HDError):
        ValueBudget(FLAT, candidates=-1)
    with pytest.raises(HDError):
        AcceptanceModel(decay=0)
    with pytest.raises(HDError):
        Successors(width=0)


def test_a_step_buys_tokens_at_the_generations_rate_not_at_its_own_ratio():
    profile = ForwardProfile((1.0, 1.05, 1.1), 0, "cheap")
    probs = np.array([1.0, 0.1])  # one draft, accepted one time in ten
    assert best_size(probs, profile)[1] == 1  # 1.1 tokens for 1.05 the time: the step's own ratio gains
    assert best_size(probs, profile, rate=3.0)[1] == 0  # 0.1 token is not worth 0.05 s at 3 tokens/s
    assert best_size(np.array([1.0, 0.9]), profile, rate=3.0)[1] == 1
