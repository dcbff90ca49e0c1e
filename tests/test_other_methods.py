"""The field's drafters as tiers (hdlib.tiers.other_methods): Token Recycling's static tree, REST's search and
SuffixDecoding's trees (its authors' engine), each lossless under hdlib's engine, and each a bench method."""

from __future__ import annotations

import functools
from collections import Counter

import pytest
from support.arctic import needs_arctic_inference
from support.outcome import appended
from support.tiny import VOCAB, tiny_llama

from hdlib.bench import parse_methods
from hdlib.databases.registry import find_tier, make_tier
from hdlib.engine.budget import FixedBudget
from hdlib.engine.drafter import Drafter
from hdlib.engine.loop import DecodeSettings, run
from hdlib.engine.tree import DraftTree
from hdlib.errors import HDError
from hdlib.tiers import BONUS, ContextTier, ModelGuesses, RecycledTier, StatisticsTier
from hdlib.tiers.other_methods import (
    RECYCLING,
    RECYCLING_BRANCHES,
    REST,
    REST_SETTINGS,
    SUFFIX,
    RestTier,
    SuffixDecodingTier,
    TokenRecyclingTier,
    tree_template,
)


def test_token_recyclings_static_tree_has_80_nodes_breadth_first():
    nodes = tree_template(RECYCLING_BRANCHES)
    assert len(nodes) == 80 and len(set(nodes)) == 80
    assert Counter(len(n) for n in nodes) == {1: 8, 2: 21, 3: 25, 4: 15, 5: 8, 6: 3}
    seen = {()}
    for node in nodes:
        assert node[:-1] in seen  # a parent before its children
        seen.add(node)
    assert nodes[:8] == [(r,) for r in range(8)] and nodes[8:12] == [(0, 0), (0, 1), (0, 2), (0, 3)]
    assert tree_template({"": 2, "0": 1}) == [(0,), (1,), (0, 0)]
    with pytest.raises(HDError, match=r"without a parent.*'5'"):
        tree_template({"": 2, "5": 1})


def guesses(table: dict[int, list[int]]) -> ModelGuesses:
    """A pass in which each key token's successors were these, best first (probabilities halving)."""
    tokens = list(table)
    halving = [[0.5**i for i in range(1, 9)]] * len(tokens)
    return ModelGuesses(tokens, [-1] * len(tokens), [table[t] for t in tokens], halving)


def test_recycling_fills_the_static_tree_from_the_newest_token():
    tier = TokenRecyclingTier({"": 3, "0": 2, "1": 1})  # (0) (1) (2), (0 0) (0 1), (1 0)
    tier.update(appended(guesses=guesses({5: [10, 11, 12], 10: [20, 21, 22], 11: [30], 12: [40]})))
    found = tier.propose([1, 2, 5], budget=16)
    assert [p.tokens for p in found] == [(10,), (11,), (12,), (10, 20), (10, 21), (11, 30)]
    assert found[3].confidence == (0.5, 0.5) and found[5].confidence == (0.25, 0.5) and found[0].source == "recycling"
    assert [p.tokens for p in tier.propose([1, 2, 5], budget=4)] == [(10,), (11,), (12,), (10, 20)]
    tree = DraftTree(root=5)
    for p in found:
        assert tree.add(p.tokens, RECYCLING, 16, 8) == 1  # each proposal is one new node of the trie
    # A token the model has not been seen to continue drafts nothing; a rank the table lacks, no subtree.
    assert tier.propose([7], budget=16) == []
    tier.update(appended(guesses=guesses({5: [10]})))
    assert [p.tokens for p in tier.propose([5], budget=16)] == [(10,), (10, 20), (10, 21)]


def test_the_recycling_table_outlives_a_request_until_cleared():
    tier, recycled = TokenRecyclingTier(), RecycledTier()
    for each in (recycled, tier):
        each.update(appended(guesses=guesses({5: [10]})))
        each.begin([1, 2, 3])  # a new request: the authors' matrix is kept (a hot start), hdlib's not
    assert recycled.table.table == {}
    assert [p.tokens for p in tier.propose([5], 80)] == [(10,)]
    tier.clear()
    assert tier.propose([5], 80) == []
    with pytest.raises(HDError, match="beyond the width 2"):
        TokenRecyclingTier({"": 3}, width=2)


@functools.cache
def llama():
    return tiny_llama()


@pytest.mark.parametrize("budget", [80, 7, 0])
@pytest.mark.parametrize("prompt", [(5, 6, 7, 8) * 3, (40, 41, 9, 3, 70)])
def test_recycling_alone_and_after_the_context_tier_equals_plain_greedy(prompt, budget):
    want = run(llama(), prompt, None, DecodeSettings(max_new_tokens=40)).tokens
    tier = TokenRecyclingTier()
    for tiers in ([tier], [ContextTier(), tier]):
        got = run(llama(), prompt, Drafter(tiers), DecodeSettings(max_new_tokens=40), (), FixedBudget(budget))
        assert got.tokens == want
        assert all(s.tree.n_drafted <= budget for s in got.steps)
    # The table was kept from the first run: the second drew on it, and the model accepted some of it.
    if budget:
        assert got.tier_counts[RECYCLING] > 0 and got.mat > 1.0
    assert got.steps[-1].tiers[-1] is BONUS


CORPUS = [[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 7], [9, 3, 4, 8, 8], [2, 3, 4, 5, 6, 1]]


def test_rest_continues_only_the_longest_suffix_found_of_two_tokens_or_more():
    statistics = StatisticsTier.from_documents(CORPUS)
    rest = RestTier.over(statistics)
    assert rest.index is statistics.index and rest.settings == REST_SETTINGS and rest.tier == REST
    # Key (2, 3, 4) occurs three times: the trie of its continuations, nodes by count (5: 3, 5 6: 2,
    # then 5 7 and 5 6 1 once each), drafts its leaves; the one-token key (4,), which the statistics
    # tier also uses to fill its budget, is not asked.
    assert rest.lookup([0, 2, 3, 4], 16) == [(5, 7), (5, 6, 1)]
    assert {d for d in statistics.lookup([0, 2, 3, 4], 16)} > {(5, 6, 1), (5, 7)}
    assert rest.lookup([0, 0, 4], 16) == []  # only a one-token suffix is in the corpus: REST drafts nothing
    assert rest.lookup([0, 2, 3, 4], 2) == [(5, 6)]  # the two most frequent nodes: 5 (3 times), then 6 (2)


def test_the_peers_are_known_tiers_and_bench_methods():
    assert find_tier("T") == RECYCLING and find_tier("rest") == REST
    assert isinstance(make_tier("recycling"), TokenRecyclingTier)
    methods = {m.name: m for m in parse_methods("recycling,rest,suffix,recycling@16,hd:CT")}
    assert (methods["recycling"].tiers, methods["recycling"].budget) == ((RECYCLING,), 80)
    assert (methods["rest"].tiers, methods["rest"].budget) == ((REST,), 64)
    assert (methods["suffix"].tiers, methods["suffix"].budget) == ((SUFFIX,), 24) and find_tier("U") == SUFFIX
    assert methods["recycling@16"].budget == 16 and methods["hd:CT"].tiers[1] == RECYCLING
    assert VOCAB > 8  # the tiny models have room for a top-8 table


def test_suffix_drafts_from_the_request_and_from_earlier_answers():
    needs_arctic_inference()
    tier = SuffixDecodingTier()
    tier.begin([1, 2, 3, 4, 5, 6, 1, 2, 3])
    found = tier.propose([1, 2, 3, 4, 5, 6, 1, 2, 3], budget=16)
    assert found[0].tokens == (4,) and (4, 5, 6) in {p.tokens for p in found}  # what followed 1 2 3 before
    tree = DraftTree(root=3)
    for p in found:
        assert tree.add(p.tokens, SUFFIX, 16, 24) == 1  # each proposal is one new node, parents first
    assert tier.propose([1, 2, 3, 4, 5, 6, 1, 2, 3], budget=2) == found[:2]
    tier.update(appended([40, 41, 42, 43, 44]))  # the answer
    tier.begin([7, 8])  # the next request: the earlier answer is in the global tree
    assert tier.propose([7, 8, 40, 41], budget=8)[0].tokens == (42,)
    assert SuffixDecodingTier().propose([7, 8, 40, 41], budget=8) == []  # a tier of its own knows nothing


@pytest.mark.parametrize("budget", [24, 5])
def test_suffix_alone_and_after_the_context_tier_equals_plain_greedy(budget):
    needs_arctic_inference()
    for prompt in [(5, 6, 7, 8) * 3, (40, 41, 9, 3, 70)]:
        want = run(llama(), prompt, None, DecodeSettings(max_new_tokens=40)).tokens
        tier = SuffixDecodingTier()
        for tiers in ([tier], [ContextTier(), tier]):
            got = run(llama(), prompt, Drafter(tiers), DecodeSettings(max_new_tokens=40), (), FixedBudget(budget))
            assert got.tokens == want and all(s.tree.n_drafted <= budget for s in got.steps)
        assert got.mat > 1.0
