"""The recycled tier (`hdlib.tiers.recycled`): the model's own guesses, drafted best first from the
table it learns from every step's record."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from hdlib.engine.trace import Step, StepTimes
from hdlib.engine.tree import DraftTree
from hdlib.tiers.base import BONUS
from hdlib.tiers.guesses import ModelGuesses, Successors
from hdlib.tiers.recycled import RecycledTier, best_paths


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


def test_the_model_tier_drafts_its_phrases_only_and_the_recycled_tier_the_models_guesses_only():
    """The split: the model tier is the paper's model-dependent database (phrases built offline); the
    model's guesses from recent passes are the recycled tier's, and never the model tier's."""
    from hdlib.tiers.model import ModelTier

    model = ModelTier(np.array([[1, 2, 3, 4]]), np.array([5]))
    recycled = RecycledTier()
    said = Step(0, 2, 8, DraftTree(root=2), (0,), (7,), (BONUS,), StepTimes(0, 0, 0, 0, 0))
    said = dataclasses.replace(said, guesses=ModelGuesses([2], [1], [[7, 8]], [[0.7, 0.2]]))
    model.update(said)
    recycled.update(said)
    assert [p.tokens for p in model.propose([1, 2], 8)] == [(3, 4)]
    assert [p.tokens for p in recycled.propose([1, 2], 8)] == [(7,), (8,)]
    assert recycled.propose([1, 2], 8)[0].confidence == (0.7,)
