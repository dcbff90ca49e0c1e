"""The Lookahead window (hdlib.tiers.window): its mask and positions against the model run plainly, its
harvest, the methods and tiers it feeds (each lossless), and the value-ranked tree's choice of the
passes it rides in."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from support.tiny import tiny_llama

from hdlib.bench import parse_methods
from hdlib.databases.registry import find_tier, make_tier
from hdlib.engine.budget import FixedBudget
from hdlib.engine.drafter import Drafter
from hdlib.engine.forward_time import flat_profile
from hdlib.engine.loop import DecodeSettings, run
from hdlib.engine.tree import DraftTree
from hdlib.engine.value import WINDOW_EXPLORE, ValueBudget
from hdlib.engine.verifier import Verifier
from hdlib.errors import HDError
from hdlib.tiers import ContextSettings, ContextTier, Tier
from hdlib.tiers.other_methods import LOOKAHEAD, LookaheadTier
from hdlib.tiers.window import WINDOW_SOURCE, LookaheadWindow, NGramPool, WindowSettings, window_mask


@functools.cache
def llama():
    return tiny_llama()


def test_the_mask_lets_each_token_see_level_0_up_to_its_column_and_its_own_column_above():
    sees = window_mask(width=3, levels=3)  # rows: (0,0) (0,1) (0,2) (1,0) (1,1) (1,2) (2,0) (2,1) (2,2)
    assert sees.shape == (9, 9)
    assert np.flatnonzero(sees[1]).tolist() == [0, 1]  # (0,1): level 0, columns 0..1
    assert np.flatnonzero(sees[4]).tolist() == [0, 1, 4]  # (1,1): level 0 up to column 1, then itself
    assert np.flatnonzero(sees[8]).tolist() == [0, 1, 2, 5, 8]  # (2,2): ... (1,2), itself
    assert np.flatnonzero(sees[6]).tolist() == [0, 3, 6]


def test_the_window_fills_its_levels_then_harvests_one_ngram_per_column_and_moves_up():
    window = LookaheadWindow(WindowSettings(width=2, ngram=3, guesses=2))
    window.begin([7, 8, 9])
    drawn = list(window.levels[0])
    assert set(drawn) <= {7, 8, 9}
    window.levels = [first := [1, 2]]
    assert window.size == 2 and window.rows().offsets == [1, 2]
    assert window.advance([10, 11]) == []  # the second level, filled
    rows = window.rows()
    assert rows.tokens == [*first, 10, 11] and rows.offsets == [1, 2, 2, 3] and rows.width == 2
    assert window.advance([20, 21]) == [(first[0], 10, 20), (first[1], 11, 21)]
    assert window.levels == [[10, 11], [20, 21]] and window.pool.get(first[0]) == [(10, 20)]
    with pytest.raises(HDError, match="wants 2 next tokens"):
        window.advance([1])
    again = LookaheadWindow(WindowSettings(width=2, ngram=3, guesses=2))
    again.begin([7, 8, 9])
    assert again.levels[0] == drawn  # seeded from the prompt: a run replays
    with pytest.raises(HDError, match="prompt is empty"):
        again.begin([])
    with pytest.raises(HDError, match="ngram must be an integer of at least 2"):
        WindowSettings(ngram=1)


def test_the_pool_keeps_the_most_recent_continuations_per_first_token():
    pool = NGramPool(per_key=2)
    for gram in [(1, 2, 3), (1, 4, 5), (1, 2, 3), (1, 6, 7), (2, 9, 9)]:
        pool.add(gram)
    assert pool.get(1) == [(6, 7), (2, 3)]  # (4, 5), the least recently seen, went
    assert pool.get(3) == [] and len(pool) == 3


def plain_next(model, ids: list[int]) -> int:
    with torch.inference_mode():
        return int(model(torch.tensor([ids])).logits[0, -1].argmax())


def test_the_window_in_the_pass_sees_what_the_model_run_plainly_would_and_changes_no_draft():
    model = llama()
    prompt = [5, 6, 7, 8, 9, 3, 2]
    window = LookaheadWindow(WindowSettings(width=3, ngram=4))
    window.begin(prompt)
    window.levels += [[11, 12, 13], [21, 22, 23]]  # three levels, as after two passes
    tree = DraftTree(root=prompt[-1])
    tree.add([4, 5], Tier.CONTEXT, 8, 8)
    tree.add([6], Tier.CONTEXT, 8, 8)
    past = len(prompt) - 1

    alone = Verifier(model)
    alone.prefill(prompt[:-1])
    without = alone.score(tree, past)
    both = Verifier(model)
    both.prefill(prompt[:-1])
    scored = both.score(tree, past, window.rows())
    assert scored.logits.shape == without.logits.shape
    torch.testing.assert_close(scored.logits, without.logits)  # the tree's rows do not see the window

    level0 = window.levels[0]
    for i in range(3):  # the top level's token of column i, after level 0 up to i and its column above
        seen = [*prompt, *level0[: i + 1], window.levels[1][i], window.levels[2][i]]
        assert scored.rider_next[i] == plain_next(model, seen)
    both.compact(past, [0])  # the window's cache entries go with the rejected branches
    assert both.cache.get_seq_length() == past + 1


@pytest.mark.parametrize("prompt", [(5, 6, 7, 8) * 3, (40, 41, 9, 3, 70)])
def test_lookahead_and_the_context_tier_with_a_window_equal_plain_greedy(prompt):
    want = run(llama(), prompt, None, DecodeSettings(max_new_tokens=48)).tokens
    lookahead = LookaheadTier()
    got = run(llama(), prompt, Drafter([lookahead]), DecodeSettings(max_new_tokens=48), (), FixedBudget(28))
    assert got.tokens == want and got.mat > 1.0 and got.tier_counts[LOOKAHEAD] > 0
    assert [s.window for s in got.steps[:5]] == [7, 14, 21, 28, 28]  # filling, then full: every pass
    context = ContextTier(ContextSettings(window=WindowSettings()))
    for budget in (FixedBudget(16), ValueBudget(flat_profile())):
        got = run(llama(), prompt, Drafter([context]), DecodeSettings(max_new_tokens=48), (), budget)
        assert got.tokens == want
        assert any(s.tree.sources[n] == WINDOW_SOURCE for s in got.steps for n in s.accepted_nodes[1:])


def test_one_window_per_generation():
    with pytest.raises(HDError, match="one Lookahead window .one rider in the pass. per generation"):
        Drafter([LookaheadTier(), ContextTier(ContextSettings(window=WindowSettings()))])


def test_the_window_is_a_tier_and_an_option_of_the_hd_methods():
    assert find_tier("L") == LOOKAHEAD and isinstance(make_tier("lookahead"), LookaheadTier)
    methods = {m.name: m for m in parse_methods("lookahead,hd+window,hd:CM+window@64")}
    assert (methods["lookahead"].tiers, methods["lookahead"].budget) == ((LOOKAHEAD,), 28)
    context = methods["hd+window"].tiers[0]
    assert isinstance(context, ContextTier) and context.window is not None and methods["hd+window"].budget is None
    assert methods["hd:CM+window@64"].budget == 64 and methods["hd:CM+window@64"].tiers[1] == Tier.MODEL
    for bad, said in [("hd:MS+window", "has none"), ("hd-paper+window", "go after hd or hd:ORDER")]:
        with pytest.raises(HDError, match=said):
            parse_methods(bad)


FULL = SimpleNamespace(size=28, source=WINDOW_SOURCE)  # a full window of 7 x 4 rows, as the policy sees it


def steep_profile() -> ValueBudget:
    """A CPU-like policy: each token in a pass costs as much as the first."""
    return ValueBudget(flat_profile([0.01 * k for k in range(1, 65)]))


def test_the_value_ranked_tree_lets_the_window_ride_where_it_pays_and_tries_it_again_later():
    assert ValueBudget(flat_profile()).rider_pays(FULL)  # a GPU-like flat profile: always
    policy = steep_profile()
    assert policy.rider_pays(FULL)  # the first pass: no rate yet, it is tried
    # Passes in which it rode and none of its n-grams were accepted, at a rate of 1 token a pass.
    tree = DraftTree(root=1)
    from hdlib.engine.trace import Step, StepTimes

    def step(window: int) -> Step:
        return Step(0, 5, 0, tree, (0,), (7,), (Tier.CONTEXT,), StepTimes(0, 0, 0, 0, 0), window=window)

    for _ in range(30):
        policy.update(step(28))
    rides = []
    for _ in range(3 * WINDOW_EXPLORE + 2):
        rides.append(policy.rider_pays(FULL))
        policy.update(step(28 if rides[-1] else 0))
    # Left out, measured again, and while it does not pay, left out twice as long.
    assert [i for i, ride in enumerate(rides) if ride] == [WINDOW_EXPLORE, 3 * WINDOW_EXPLORE + 1]


def test_a_sampled_answer_with_a_window_is_plain_samplings_for_the_seed():
    settings = DecodeSettings(max_new_tokens=32, temperature=0.8, seed=3)
    prompt = (5, 6, 7, 8) * 3
    want = run(llama(), prompt, None, settings).tokens
    got = run(llama(), prompt, Drafter([LookaheadTier()]), settings, (), FixedBudget(28))
    assert got.tokens == want and any(s.window for s in got.steps)
