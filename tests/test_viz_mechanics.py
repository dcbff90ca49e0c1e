"""hdlib.viz.mechanics: the tree attention mask, position ids and cache compaction of a step, against
the engine's own buffers, on hand-made traces."""

from __future__ import annotations

import numpy as np
import pytest
from support.hand_traces import first_tree, hand_trace, times

from hdlib import viz
from hdlib.engine.trace import Step
from hdlib.engine.tree import ancestor_matrix, tree_buffers
from hdlib.errors import HDError
from hdlib.tiers import BONUS, Tier

C, R, M, S, T = Tier.CONTEXT, Tier.RECYCLED, Tier.MODEL, Tier.STATISTICS, BONUS


@pytest.mark.parametrize("past_shown", [2, 4, 9])
def test_attention_mask_figure_is_the_cache_then_the_ancestors(past_shown):
    step = hand_trace().steps[0]  # context_len 6: 5 cached tokens
    z = np.array(viz.attention_mask_figure(step, past_shown=past_shown).data[0].z)
    tree, shown = step.tree, min(past_shown, 5)
    assert z.shape == (len(tree), shown + len(tree))
    assert (z[:, :shown] == 1).all()
    assert (z[:, shown:] == ancestor_matrix(tree.parents)).all()
    for i in range(len(tree)):  # brute force: a node sees itself and its ancestors only
        assert {j for j in range(len(tree)) if z[i, shown + j]} == set(tree.path_to(i))


def test_mechanics_take_a_bare_tree_with_its_past():
    tree = first_tree()
    mask = np.array(viz.attention_mask_figure(tree, past_len=1, past_shown=3).data[0].z)
    assert mask.shape == (len(tree), 1 + len(tree))
    positions = viz.position_ids_figure(tree, past_len=40).data[0]
    assert [int(p) for p in positions.text[1]] == tree_buffers(tree, 40, "cpu").position_ids.tolist()
    assert [int(d) for d in positions.text[0]] == tree.depths


def test_position_ids_figure_matches_tree_buffers():
    step = hand_trace().steps[0]
    heat = viz.position_ids_figure(step).data[0]
    want = tree_buffers(step.tree, step.context_len - 1, "cpu").position_ids.tolist()
    assert [int(p) for p in heat.text[1]] == want == [5, 6, 7, 8, 7, 6]
    assert np.array(heat.z).shape == (2, len(step.tree))


def test_compaction_is_what_compact_cache_does():
    assert viz.compaction(3, 6, [0, 1, 2]) == [0, 1, 2, 3, 4, 5]  # contiguous: nothing moves
    assert viz.compaction(3, 6, [0, 2, 5]) == [0, 1, 2, 3, 5, 8]
    assert viz.compaction(0, 4, [0, 3]) == [0, 3]


def test_cache_compaction_figure_rows():
    step = hand_trace().steps[1]  # 8 cached, tree of 3 nodes, path (0, 1)
    heat = viz.cache_compaction_figure(step, past_shown=2).data[0]
    before, after = heat.z
    assert list(before) == [1, 1, 1, 1, 0]  # two past slots, then nodes 0, 1 kept and node 2 dropped
    assert list(after) == [1, 1, 1, 1, None]
    assert "node 2: token 8" in heat.hovertext[0][4]
    assert "node 1: token 6" in heat.hovertext[1][3]


def test_showcase_step_branches_with_drafts_accepted_and_rejected():
    gen = hand_trace()
    assert viz.showcase_step(gen) is gen.steps[0]  # 3 branches, 2 of 5 drafts accepted
    chain, flat = gen.steps[1], Step(3, 13, 8, first_tree(), (0,), (5,), (T,), times(0.1))
    gen.steps = [flat, chain]  # the branching tree accepted nothing: the most accepted drafts wins
    assert viz.showcase_step(gen) is chain
    gen.steps = []
    with pytest.raises(HDError):
        viz.showcase_step(gen)
