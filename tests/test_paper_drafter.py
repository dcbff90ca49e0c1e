"""The paper's HD as its authors ran it (hdlib.bench.paper_drafter): their context store, their choice of drafts with
its defects and the switch that mends them, drafts side by side as chains (the longest accepted
kept), lossless on a tiny Llama; and `hd-paper` as a bench method on the packaged model."""

from __future__ import annotations

import functools

import pytest
from support.outcome import appended
from support.paper import model_tier
from support.tiny import tiny_llama

from hdlib.bench import Method, parse_methods
from hdlib.bench.paper_drafter import (
    PAPER_STATISTICS,
    ChainTree,
    PaperContextTier,
    PaperDrafter,
    PaperSettings,
)
from hdlib.engine.budget import FixedBudget
from hdlib.engine.loop import DecodeSettings, run
from hdlib.engine.tree import DraftTree
from hdlib.errors import HDError
from hdlib.tiers import StatisticsTier, Tier

C, M, S = Tier.CONTEXT, Tier.MODEL, Tier.STATISTICS


def test_the_context_store_keeps_seven_continuations_per_token_most_recent_first():
    store = PaperContextTier()
    store.begin([1, 2, 3, 4, 5, 1, 6, 7, 8, 9])
    assert store.lookup([9, 1], 28) == [(6, 7, 8, 9), (2, 3, 4, 5)]  # the later one first
    assert store.lookup([9, 1], 4) == [(6, 7, 8, 9)]  # the budget in tokens: one draft of 4
    store.begin([x for i in range(9) for x in (1, 10 + i, 20, 30, 40)] + [1])
    assert store.lookup([1], 99) == [(10 + i, 20, 30, 40) for i in range(8, 1, -1)]  # 7 kept, the oldest gone


@pytest.mark.parametrize("mend", [False, True])
def test_the_ngram_ending_at_the_newest_token_is_left_out_unless_mended(mend):
    store = PaperContextTier(PaperSettings(mend=mend))
    store.begin([5, 1, 2, 3])
    store.update(appended([4, 6]))  # n-grams ending at 4 (5 1 2 3 4) and at 6 (1 2 3 4 6)
    assert store.lookup([5], 28) == [(1, 2, 3, 4)]
    assert store.lookup([1], 28) == ([(2, 3, 4, 6)] if mend else [])  # their off-by-one
    store.update(appended([7, 8]))  # the next step adds only n-grams ending at its own tokens
    assert store.lookup([2], 28) == [(3, 4, 6, 7)]
    assert store.lookup([1], 28) == ([(2, 3, 4, 6)] if mend else [])  # never added
    assert store.lookup([3], 28) == ([(4, 6, 7, 8)] if mend else [])


def drafter(settings: PaperSettings, context_prompt: list[int]) -> PaperDrafter:
    store = PaperContextTier(settings)
    store.begin(context_prompt)
    model = model_tier(*[((9, 10 + i, 20, 30, 40), 100 - i) for i in range(6)], ((9, 2, 3, 4, 5), 50))
    statistics = StatisticsTier.from_documents([[9, 2, 3, 4, 5], [8, 9, 7, 7, 7, 7]], PAPER_STATISTICS)
    return PaperDrafter(store, model, statistics, settings)


def test_seven_drafts_and_the_model_databases_least_frequent_after_a_part_full_context_store():
    prompt = [9, 2, 3, 4, 5, 0, 9, 6, 6, 6, 6]  # the context store: after 9, (6 6 6 6) then (2 3 4 5)
    chosen, seconds = drafter(PaperSettings(), prompt).choose([9])
    assert [(t.tier, d) for t, d in chosen] == [
        (C, (6, 6, 6, 6)),
        (C, (2, 3, 4, 5)),
        *[(M, (10 + i, 20, 30, 40)) for i in range(2, 6)],  # their defect: M's 5 least frequent of 7,
        (M, (2, 3, 4, 5)),  # the last again what the context store drafted: no de-duplication
    ]
    assert list(seconds) == [C, M]  # the statistics were not asked: 7 drafts were found before them
    mended, _ = drafter(PaperSettings(mend=True), prompt).choose([9])
    assert [(t.tier, d) for t, d in mended] == [
        (C, (6, 6, 6, 6)),
        (C, (2, 3, 4, 5)),
        *[(M, (10 + i, 20, 30, 40)) for i in range(5)],  # the most frequent, none drafted before
    ]
    alone, _ = drafter(PaperSettings(), [0]).choose([8, 9])  # nothing in context: M's 7 in full
    assert [d for _, d in alone] == [*[(10 + i, 20, 30, 40) for i in range(6)], (2, 3, 4, 5)]


def test_chains_side_by_side_and_the_longest_accepted_one_kept():
    tree = ChainTree(root=9)
    for draft in [(2, 3, 7), (2, 3, 4, 5), (6,)]:
        tree.add(draft, C, 64, 8)
    assert len(tree) == 1 + 3 + 4 + 1 and tree.has_twins
    assert tree.children(0) == [1, 4, 8] and tree.children_with(0, 2) == [1, 4] and tree.sibling_rank(4) == 1
    choices = {0: 2, 1: 3, 2: 4, 4: 3, 5: 4, 6: 5, 7: 11}  # the model: 9 -> 2 3 4 5 11
    wanted = [choices.get(i, 0) for i in range(len(tree))]
    assert tree.accepted_path(wanted) == [0, 4, 5, 6, 7]  # the second chain: the first failed at 7
    merged = DraftTree(root=9)
    for draft in [(2, 3, 7), (2, 3, 4, 5), (6,)]:
        merged.add(draft, C, 64, 8)
    assert len(merged) == 1 + 3 + 2 + 1 and merged.children(0) == [1, 6]
    assert [merged.tokens[n] for n in merged.path_to(merged.leaves()[1])] == [9, 2, 3, 4, 5]
    kept = tree.subtree([1, 2, 4, 5])
    assert kept.children_with(0, 2) == [1, 3]  # a subtree keeps twins apart


@functools.cache
def llama():
    return tiny_llama()


@pytest.mark.parametrize("switches", ["", "+mend", "+trie", "+mend+trie"])
def test_the_papers_drafting_equals_plain_greedy(switches):
    settings = Method.parse("hd-paper" + switches).paper
    assert settings is not None
    twins = 0
    for prompt in [(5, 6, 7, 8) * 3, (40, 41, 9, 3, 70), (9, 2, 3, 4, 5, 9)]:
        want = run(llama(), prompt, None, DecodeSettings(max_new_tokens=40)).tokens
        model = model_tier(*[((t, t + 1, t + 2, t + 3, t + 4), 10) for t in range(3, 80)])
        statistics = StatisticsTier.from_documents([list(want[:20]), [5, 6, 7, 8] * 3], PAPER_STATISTICS)
        d = PaperDrafter(PaperContextTier(settings), model, statistics, settings)
        got = run(llama(), prompt, d, DecodeSettings(max_new_tokens=40), (), FixedBudget(settings.budget))
        assert got.tokens == want
        assert all(s.tree.n_drafted <= settings.budget for s in got.steps)
        twins += sum(isinstance(s.tree, ChainTree) and s.tree.has_twins for s in got.steps)
        assert got.mat > 1.0
    assert (twins > 0) == (not settings.trie)  # chains shared a first token: the longest-chain rule ran


def test_the_paper_methods_by_name():
    methods = {m.name: m for m in parse_methods("hd-paper,hd-paper+mend+trie,hd-paper@8")}
    assert methods["hd-paper"].paper == PaperSettings() and methods["hd-paper"].budget == 28
    assert methods["hd-paper+mend+trie"].paper == PaperSettings(mend=True, trie=True)
    assert methods["hd-paper@8"].budget == 8 and methods["hd-paper"].drafts and not methods["ar"].drafts
    for bad in ("hd-paper+foo", "hd-paper+mend+mend"):
        with pytest.raises(HDError, match=r"\+mend .*\+trie"):
            parse_methods(bad)


@pytest.mark.slow
def test_hd_paper_on_the_packaged_model_is_lossless_and_drafts_from_all_three():
    from hdlib.bench import run_benchmark
    from hdlib.bench.specbench import Question
    from hdlib.models.loading import load_model

    lm = load_model("smollm2-135m")
    questions = [Question(1, "summarization", ("Summarize: the cat sat on the mat. The cat sat on the mat again.",))]
    r = run_benchmark(lm, questions, ["hd-paper", "hd-paper+mend+trie"], max_new_tokens=48)
    for name in ("hd-paper", "hd-paper+mend+trie"):
        overall = r.methods[name].overall
        assert overall.identical_frac == 1.0 and overall.mat > 1.0
    assert set(r.methods["hd-paper"].overall.tier_share) >= {"context", "bonus"}
