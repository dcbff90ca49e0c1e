"""Unit tests of the trie, its tensors, acceptance and cache compaction, each against brute force."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from support.tiny import VOCAB, tiny_gemma3, tiny_llama

from hdlib.engine.tree import DraftTree, ancestor_matrix, tree_buffers
from hdlib.engine.verifier import AttentionLayout, compact_cache, new_cache, prefill, tree_logits
from hdlib.tiers.base import Proposal, Tier

drafts_strategy = st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=6), max_size=8)


def build(drafts, budget=100, max_depth=100, root=7) -> DraftTree:
    tree = DraftTree(root=root)
    for i, d in enumerate(drafts):
        budget -= tree.add(d, Tier.CONTEXT if i % 2 == 0 else Tier.MODEL, budget, max_depth)
    return tree


@given(drafts_strategy, st.integers(0, 30), st.integers(0, 7))
def test_trie_holds_exactly_the_distinct_prefixes(drafts, budget, max_depth):
    tree = build(drafts, budget, max_depth)
    paths = {tuple(tree.tokens[n] for n in tree.path_to(i)[1:]) for i in range(1, len(tree))}
    assert len(paths) == tree.n_drafted <= budget  # no node twice
    assert all(len(p) <= max_depth for p in paths)
    if budget >= 100:  # uncut: every prefix of every draft (within max_depth) is a node
        wanted = {tuple(d[:j]) for d in drafts for j in range(1, min(len(d), max_depth) + 1)}
        assert paths == wanted


def test_shared_prefix_keeps_the_first_tier():
    tree = DraftTree(root=0)
    tree.add([1, 2, 3], Tier.CONTEXT, 10, 10)
    assert tree.add([1, 2, 4], Tier.MODEL, 10, 10) == 1
    assert tree.tiers == [None, Tier.CONTEXT, Tier.CONTEXT, Tier.CONTEXT, Tier.MODEL]
    assert tree.add([1, 2], Tier.STATISTICS, 10, 10) == 0


@given(drafts_strategy, st.integers(0, 50))
def test_buffers_match_brute_force(drafts, past_len):
    tree = build(drafts)
    buf = tree_buffers(tree, past_len, "cpu")
    n = len(tree)
    assert buf.input_ids.tolist() == tree.tokens
    for i in range(n):
        ancestors = set(tree.path_to(i))
        assert buf.position_ids[i] == past_len + len(ancestors) - 1
        assert {j for j in range(n) if buf.ancestors[i, j]} == ancestors
    assert (ancestor_matrix(tree.parents) == buf.ancestors.numpy()).all()


def longest_matching_path(tree: DraftTree, predictions: list[int]) -> list[int]:
    """Brute force: of all root-to-node paths whose every draft is the model's choice after its
    parent, the longest."""
    matching = [
        path
        for path in (tree.path_to(node) for node in range(len(tree)))
        if all(tree.tokens[child] == predictions[parent] for parent, child in itertools.pairwise(path))
    ]
    return max(matching, key=len)


@given(drafts_strategy, st.data())
def test_the_accepted_path_is_the_longest_matching_path(drafts, data):
    tree = build(drafts)
    predictions = data.draw(st.lists(st.integers(0, 5), min_size=len(tree), max_size=len(tree)))
    assert tree.accepted_path(predictions) == longest_matching_path(tree, predictions)


@pytest.mark.parametrize("build_model", [tiny_llama, tiny_gemma3])
def test_tree_logits_equal_sequential_logits(build_model):
    """Every node sees exactly its ancestors, at the right positions; Gemma's window is crossed."""
    model = build_model()
    rng = random.Random(1)
    context = [rng.randrange(3, VOCAB) for _ in range(11)]
    drafts = [[rng.randrange(3, 8) for _ in range(rng.randrange(1, 6))] for _ in range(7)]
    tree = build(drafts, root=context[-1])
    cache = new_cache()
    prefill(model, context[:-1], cache)
    buf = tree_buffers(tree, len(context) - 1, "cpu")
    with torch.inference_mode():
        got = tree_logits(model, AttentionLayout.of(model), buf, cache, len(context) - 1)
        for node in range(len(tree)):
            seq = context[:-1] + [tree.tokens[n] for n in tree.path_to(node)]
            want = model(input_ids=torch.tensor([seq])).logits[0, -1]
            torch.testing.assert_close(got[node], want, atol=5e-4, rtol=1e-4)


@pytest.mark.parametrize("build_model", [tiny_llama, tiny_gemma3])
def test_compacted_cache_equals_the_cache_of_the_accepted_text(build_model):
    model = build_model()
    rng = random.Random(2)
    context = [rng.randrange(3, VOCAB) for _ in range(9)]
    tree = build([[4, 5, 6], [4, 7], [8, 9, 10, 11], [4, 5, 3]], root=context[-1])
    keep = tree.path_to(tree.child(tree.child(tree.child(0, 4), 5), 3))  # a branch added late
    assert keep != list(range(len(keep)))
    cache = new_cache()
    prefill(model, context[:-1], cache)
    past = len(context) - 1
    with torch.inference_mode():
        tree_logits(model, AttentionLayout.of(model), tree_buffers(tree, past, "cpu"), cache, past)
        compact_cache(cache, past, keep)
        accepted = context[:-1] + [tree.tokens[n] for n in keep]
        reference = new_cache()
        prefill(model, accepted, reference)
    assert cache.get_seq_length() == len(accepted)
    for got, want in zip(cache.layers, reference.layers):
        torch.testing.assert_close(got.keys, want.keys, atol=5e-4, rtol=1e-4)
        torch.testing.assert_close(got.values, want.values, atol=5e-4, rtol=1e-4)


def test_a_drafted_tree_keeps_what_the_tiers_said_of_each_node():
    tree = DraftTree(root=0)
    tree.add(Proposal((1, 2), key_length=3), Tier.CONTEXT, 8, 8)
    tree.add(Proposal((1, 4), key_length=1, source="window"), Tier.CONTEXT, 8, 8)
    assert tree.key_lengths == [0, 3, 3, 1] and tree.sources == ["", "", "", "window"]
    assert [tree.sibling_rank(i) for i in range(4)] == [0, 0, 0, 1]
    sub = tree.subtree([1, 3])
    assert sub.tokens == [0, 1, 4] and sub.parents == [-1, 0, 1] and sub.tiers[2] is Tier.CONTEXT
    with pytest.raises(ValueError):
        tree.subtree([3])
    assert np.array_equal(sub.depths, [0, 1, 2])
