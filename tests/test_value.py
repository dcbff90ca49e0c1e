"""The value-ranked tree: estimates, the choice of nodes, the prior on disk; the table of the model's
guesses and the recycled tier that drafts from it."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hdlib.engine.forward_time import ForwardProfile
from hdlib.engine.trace import Step, StepTimes
from hdlib.engine.tree import DraftTree
from hdlib.engine.value import (
    DEFAULT_PRIOR,
    AcceptanceModel,
    AcceptancePrior,
    ValueBudget,
    best_size,
    node_kinds,
    path_probabilities,
    prior_name,
    tree_kinds,
)
from hdlib.errors import HDError
from hdlib.tiers.base import BONUS, Tier
from hdlib.tiers.guesses import ModelGuesses, Successors
from hdlib.tiers.recycling import RecycledTier, best_paths

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
        tree.add(draft, tier, 64, 64, key_length=i % 4, source="x" if i % 2 else "")
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
    kept, estimates = policy.select(tree)
    probs = path_probabilities(tree, model, tree_kinds(tree))
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
    kept, estimates = policy.select(tree)
    assert kept.n_drafted == 0 and estimates == (1.0,)
    policy.model = AcceptanceModel({"statistics//-1/-1": (0.99, SURE)})
    assert policy.select(tree)[0].n_drafted == 3


def test_path_probability_is_the_product_along_the_path():
    tree = build([((1, 2, 3), Tier.CONTEXT)])
    model = AcceptanceModel({"context//-1/-1": (0.5, SURE)})
    assert path_probabilities(tree, model, tree_kinds(tree)).tolist() == pytest.approx([1.0, 0.5, 0.25, 0.125])


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
    tree.add((1,), Tier.STATISTICS, 8, 8, confidence=(0.9,))
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


def test_observe_learns_only_from_nodes_whose_parent_was_accepted():
    tree = DraftTree(root=0)
    tree.add((1, 2), Tier.CONTEXT, 8, 8)  # nodes 1 -> 2
    tree.add((3,), Tier.CONTEXT, 8, 8)  # node 3
    policy = ValueBudget(FLAT)
    policy.model = AcceptanceModel(decay=1.0)
    step = Step(0, 5, 8, tree, (0, 3), (3, 7), (Tier.CONTEXT, BONUS), StepTimes(0, 0, 0, 0, 0))
    policy.observe(step)
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
    policy = ValueBudget(FLAT, AcceptancePrior(path))
    tree = build([((1,), Tier.CONTEXT)])
    policy.observe(Step(0, 5, 8, tree, (0, 1), (1, 7), (Tier.CONTEXT, BONUS), StepTimes(0, 0, 0, 0, 0)))
    policy.finish()
    assert json.loads(path.read_text())["context//-1/-1"][0] == 1.0


def test_a_prior_with_rates_above_one_is_dropped_with_one_line(tmp_path, capsys):
    """A damaged prior (every rate 3.0) made a child's path probability pass its parent's and the
    tree selection raise ("node 4 is kept without its parent 3"). Now the file is refused on load."""
    from oracle import OracleTier
    from tiny import VOCAB, tiny_llama

    from hdlib.engine.drafter import Drafter
    from hdlib.engine.loop import DecodeSettings, run
    from hdlib.tiers import ContextTier

    model, prompt, path = tiny_llama(), (5, 6, 7, 8, 5, 6, 7, 8, 5, 6), tmp_path / "prior.json"
    truth = list(prompt) + run(model, prompt, None, DecodeSettings(max_new_tokens=24)).tokens

    def generate() -> list[int]:
        tiers = Drafter([ContextTier(), OracleTier(truth, VOCAB, seed=1)])
        policy = ValueBudget(SHORT, AcceptancePrior(path))  # at most 3 nodes kept: the best, not all
        return run(model, prompt, tiers, DecodeSettings(max_new_tokens=24), budget=policy).tokens

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


KIND = "context//-1/-1"


def test_a_read_only_prior_ignores_merges_and_a_learning_one_folds_them_in_and_writes_its_file(tmp_path):
    path = tmp_path / "prior.json"
    AcceptancePrior(path).merge({KIND: (0.8, 10.0)})
    before = path.read_text()
    for read_only in (AcceptancePrior.from_file(path), AcceptancePrior.fresh(), AcceptancePrior(path, learns=False)):
        rates, digest = read_only.rates(), read_only.digest()
        read_only.merge({KIND: (0.0, 100.0), "recycled//-1/-1": (0.5, 3.0)})
        assert not read_only.learns and read_only.rates() == rates and read_only.digest() == digest
        assert path.read_text() == before and sorted(p.name for p in tmp_path.iterdir()) == ["prior.json"]
    learned = AcceptancePrior(path)
    learned.merge({KIND: (0.0, 10.0)})
    assert learned.learns and learned.rates() == {KIND: pytest.approx((0.4, 20.0))}
    assert path.read_text() != before and AcceptancePrior.from_file(path).digest() == learned.digest()
    in_memory = AcceptancePrior()  # learns, and has no file to write
    in_memory.merge({KIND: (0.5, 2.0)})
    assert in_memory.rates() == {KIND: (0.5, 2.0)} and in_memory.path is None


def test_a_snapshot_keeps_the_rates_of_its_moment_and_their_digest(tmp_path):
    original = AcceptancePrior(tmp_path / "prior.json")
    original.merge({KIND: (0.8, 10.0)})
    snap = original.snapshot()
    at_snapshot = original.digest()
    original.merge({KIND: (0.0, 50.0), "model//-1/-1": (0.3, 4.0)})
    assert snap.digest() == at_snapshot != original.digest()
    assert snap.rates() == {KIND: (0.8, 10.0)} and not snap.learns and snap.source == "learned"
    snap.merge({KIND: (0.0, 50.0)})  # read-only: no file of the original's is written either
    assert snap.rates() == {KIND: (0.8, 10.0)} and original.rates()[KIND][1] == 60.0


def test_a_prior_saved_to_a_file_reads_back_with_its_digest_and_the_file_as_its_source(tmp_path):
    prior = AcceptancePrior()
    prior.merge({KIND: (0.25, 8.0), "model/x/3/-1": (1.0, 1.0)})
    path = prior.save(tmp_path / "sub" / "mine.json")
    read = AcceptancePrior.from_file(path)
    assert read.rates() == prior.rates() and read.digest() == prior.digest() and read.source == str(path)
    assert len(prior.digest()) == 16 and int(prior.digest(), 16) >= 0
    assert AcceptancePrior.fresh().digest() == AcceptancePrior().digest() != prior.digest()  # empty rates
    assert AcceptancePrior.fresh().source == "fresh" and AcceptancePrior.fresh().rates() == {}


def test_a_users_prior_file_missing_or_invalid_is_an_error_naming_it_and_is_kept(tmp_path):
    missing = tmp_path / "nowhere.json"
    with pytest.raises(HDError, match=f"acceptance prior {missing}: no such file"):
        AcceptancePrior.from_file(missing)
    for bad in ("{not json", '{"x": [1.5, 1]}', '{"x": [0.5, -1]}', "[1, 2]"):
        path = tmp_path / "bad.json"
        path.write_text(bad)
        with pytest.raises(HDError, match=f"{path} is not an acceptance prior"):
            AcceptancePrior.from_file(path)
        assert path.read_text() == bad  # a user's file is never removed, unlike the cache's own


def test_bad_settings_are_refused():
    with pytest.raises(HDError):
        ValueBudget(FLAT, candidates=-1)
    with pytest.raises(HDError):
        AcceptanceModel(decay=0)
    with pytest.raises(HDError):
        Successors(width=0)


def test_recycled_successors_are_drafted_best_first_one_node_each():
    table = Successors(width=2)
    assert best_paths(table, [5], budget=8) == []
    table.observe(
        ModelGuesses([5, 6, 7], [-1, -1, -1], [[6, 8], [7, 9], [5, 6]], [[0.9, 0.05], [0.8, 0.1], [0.5, 0.4]])
    )
    found = best_paths(table, [5], budget=5, max_depth=3)
    paths = [p.tokens for p in found]
    assert paths[0] == (6,) and paths[1] == (6, 7)  # the top guess, then the top guess after it
    assert len(paths) == 5 and len(set(paths)) == 5
    assert all(p[:-1] in paths or len(p) == 1 for p in paths)  # each adds one node below a drafted one
    assert all(len(p) <= 3 and q.key_length == 1 for p, q in zip(paths, found))
    table.observe(ModelGuesses([5], [-1], [[8, 6]], [[0.6, 0.3]]))  # newer guesses replace older ones
    assert best_paths(table, [5], budget=1)[0].tokens == (8,)


def every_path_best_first(table: Successors, context: list[int], budget: int, max_depth: int) -> list[tuple]:
    """Brute force: every path through the table up to `max_depth` with the order of the entry its
    last token came from and its probabilities, sorted by the product of those (best first; shorter
    first among equal scores, which distinct random probabilities never give); the first `budget`."""
    paths, frontier = [], [((), ())]
    while frontier:
        path, probs = frontier.pop()
        if len(path) == max_depth:
            continue
        before, token = ((-1, *context) + path)[-2:]
        used, guesses = table.guesses(token, before)
        for nxt, p in guesses:
            paths.append(((*path, nxt), used, (*probs, p)))
            frontier.append(((*path, nxt), (*probs, p)))
    paths.sort(key=lambda x: (-math.prod(x[2]), len(x[0])))
    return paths[:budget]


@given(st.integers(0, 10_000), st.integers(1, 40), st.integers(1, 6))
def test_recycled_drafts_are_the_best_paths_through_the_table(seed, budget, max_depth):
    """The walk opens only a node's first child and next sibling: the same paths, in the same order,
    with the same probabilities, as scoring every path through the table. The guesses after a token
    are larger tokens, so no two paths hold the same probabilities in another order (a tie)."""
    rng = np.random.default_rng(seed)
    table = Successors(width=3)
    for _ in range(int(rng.integers(1, 12))):
        token, before = (int(t) for t in rng.integers(0, 6, size=2))
        nexts = [int(t) for t in token + 1 + rng.choice(9 - token - 1, size=3, replace=False)]
        probs = sorted((float(p) for p in rng.random(3) / 3), reverse=True)
        table.observe(ModelGuesses([token], [before if rng.random() < 0.5 else -1], [nexts], [probs]))
    context = [int(t) for t in rng.integers(0, 6, size=2)]
    found = best_paths(table, context, budget, max_depth)
    want = every_path_best_first(table, context, budget, max_depth)
    assert [(p.tokens, p.key_length, p.confidence) for p in found] == want


def test_a_drafted_tree_keeps_what_the_tiers_said_of_each_node():
    tree = DraftTree(root=0)
    tree.add((1, 2), Tier.CONTEXT, 8, 8, key_length=3)
    tree.add((1, 4), Tier.CONTEXT, 8, 8, key_length=1, source="window")
    assert tree.key_lengths == [0, 3, 3, 1] and tree.sources == ["", "", "", "window"]
    assert [tree.sibling_rank(i) for i in range(4)] == [0, 0, 0, 1]
    sub = tree.subtree([1, 3])
    assert sub.tokens == [0, 1, 4] and sub.parents == [-1, 0, 1] and sub.tiers[2] is Tier.CONTEXT
    with pytest.raises(ValueError):
        tree.subtree([3])
    assert np.array_equal(sub.depths, [0, 1, 2])


def test_the_model_tier_drafts_its_phrases_only_and_the_recycled_tier_the_models_guesses_only():
    """The split: the model tier is the paper's model-dependent database (phrases built offline); the
    model's guesses from recent passes are the recycled tier's, and never the model tier's."""
    from hdlib.tiers.model import ModelTier

    model = ModelTier(np.array([[1, 2, 3, 4]]), np.array([5]))
    recycled = RecycledTier()
    assert model.successors_wanted == 0 and recycled.successors_wanted > 0
    table = Successors(recycled.successors_wanted)
    recycled.use_guesses(table)
    table.observe(ModelGuesses([2], [1], [[7, 8]], [[0.7, 0.2]]))
    assert [p.tokens for p in model.propose([1, 2], 8)] == [(3, 4)]
    assert [p.tokens for p in recycled.propose([1, 2], 8)] == [(7,), (8,)]
    assert recycled.propose([1, 2], 8)[0].confidence == (0.7,)


def test_a_step_buys_tokens_at_the_generations_rate_not_at_its_own_ratio():
    profile = ForwardProfile((1.0, 1.05, 1.1), 0, "cheap")
    probs = np.array([1.0, 0.1])  # one draft, accepted one time in ten
    assert best_size(probs, profile)[1] == 1  # 1.1 tokens for 1.05 the time: the step's own ratio gains
    assert best_size(probs, profile, rate=3.0)[1] == 0  # 0.1 token is not worth 0.05 s at 3 tokens/s
    assert best_size(np.array([1.0, 0.9]), profile, rate=3.0)[1] == 1
