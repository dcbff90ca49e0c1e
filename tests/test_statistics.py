"""The statistics tier (hdlib.tiers.statistics) against brute force on small corpora, its settings,
and losslessness with the tier in the engine; the suffix array is tests/test_suffix_array.py's, the
database file tests/test_statsdb.py's."""

from __future__ import annotations

import functools
import statistics
import time
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.documents import documents, occurrences
from support.tiny import VOCAB, tiny_llama

from hdlib.databases.statsdb import default_statistics_path
from hdlib.engine.budget import FixedBudget
from hdlib.engine.drafter import Drafter
from hdlib.engine.loop import DecodeSettings, run
from hdlib.errors import HDError
from hdlib.tiers.statistics import StatisticsSettings, StatisticsTier
from hdlib.tiers.suffix_array import SuffixIndex, build_suffix_array, join_documents

# Lookup against brute force ---------------------------------------------------------------------


def brute_force(docs, context, budget, s: StatisticsSettings):
    """The tier's contract by scanning: from the longest suffix with at least min_count occurrences
    down, each key's continuation prefixes by count (ties: shorter, then smaller tokens) join the
    trie until it holds `budget` nodes; without fill only the first key that adds one. Drafts: the
    trie's leaves in the order they joined."""
    chosen, matches = {}, []
    for m in range(min(s.max_key, len(context)), s.min_key - 1, -1):
        if len(chosen) >= budget:
            break
        key = tuple(context[len(context) - m :])
        found = occurrences(docs, key)
        if len(found) < s.min_count:
            continue
        counts = Counter()
        for d, p in found:
            cont = docs[d][p : p + s.draft_len]  # a document's end cuts it: no separator crossed
            for k in range(1, len(cont) + 1):
                counts[tuple(cont[:k])] += 1
        ranked = sorted((n for n, c in counts.items() if c >= s.min_count), key=lambda n: (-counts[n], len(n), n))
        before = len(chosen)
        for n in ranked:
            if len(chosen) >= budget:
                break
            chosen.setdefault(n, (counts[n], m))
        if len(chosen) > before:
            matches.append((key, len(found)))
            if not s.fill:
                break
    inner = {n[:-1] for n in chosen}
    return matches, [(n, c, m) for n, (c, m) in chosen.items() if n not in inner]


@settings(max_examples=150, deadline=None)
@given(
    docs=documents,
    context=st.lists(st.integers(0, 3), min_size=1, max_size=10),
    budget=st.integers(0, 12),
    max_key=st.integers(1, 5),
    draft_len=st.integers(1, 5),
    min_count=st.integers(1, 3),
    fill=st.booleans(),
)
def test_lookup_matches_brute_force_counting(docs, context, budget, max_key, draft_len, min_count, fill):
    s = StatisticsSettings(max_key=max_key, draft_len=draft_len, min_count=min_count, sample=10_000, fill=fill)
    tier = StatisticsTier.from_documents(docs, s)
    got = tier.search(context, budget)
    matches, drafts = brute_force(docs, context, budget, s)
    assert [(m.key, m.occurrences) for m in got.matches] == matches
    assert got.drafts == drafts and all(m.exact for m in got.matches)
    # Each token's share: of the occurrences of what precedes it, how many go on with it.
    per_key = {len(m.key): m.occurrences for m in got.matches}
    for d, shares in zip(got.drafts, got.shares, strict=True):
        assert len(shares) == len(d.tokens) and all(0 < c <= 1 for c in shares)
        if d.key_length == len(got.key):  # every prefix counted under the same key: the shares multiply out
            assert np.prod(shares) * per_key[d.key_length] == pytest.approx(d.count)
    assert tier.lookup(context, budget) == [d for d, _, _ in drafts]
    # The budget counts trie nodes: every distinct prefix of the drafts.
    assert len({d[:k] for d, _, _ in got.drafts for k in range(1, len(d) + 1)}) <= budget
    # No draft crosses a separator: key + draft occurs inside one document, as often as counted.
    for draft, count, m in got.drafts:
        assert len(occurrences(docs, tuple(context[len(context) - m :]) + draft)) == count >= min_count


def test_the_longest_suffix_comes_first_and_shorter_ones_fill_the_budget():
    docs = [[1, 2, 3, 7]] + [[2, 3, 5]] * 5
    only = StatisticsTier.from_documents(docs, StatisticsSettings(fill=False))
    got = only.search([9, 1, 2, 3], budget=4)
    assert got.key == (1, 2, 3) and got.drafts == [((7,), 1, 3)]
    filled = StatisticsTier.from_documents(docs).search([9, 1, 2, 3], budget=4)
    assert filled.drafts == [((7,), 1, 3), ((5,), 5, 2)] and [m.key for m in filled.matches] == [(1, 2, 3), (2, 3)]
    assert filled.key_length == 3 and "after 2" in filled.format()
    # With min_count 2 the single occurrence of (1, 2, 3) is no statistic: (2, 3) comes first.
    strict = StatisticsTier.from_documents(docs, StatisticsSettings(min_count=2))
    assert strict.search([9, 1, 2, 3], budget=4).drafts == [((5,), 5, 2)]


def test_drafts_form_a_trie_of_the_most_frequent_continuations():
    docs = [[0, 1, 2, 3]] * 6 + [[0, 1, 2, 4]] * 3 + [[0, 5, 6]] * 2
    tier = StatisticsTier.from_documents(docs)
    got = tier.search([0], budget=5)
    # Nodes by count: (1) 9, (1,2) 9, (1,2,3) 6, (1,2,4) 3, (5) 2: the leaves, most frequent first.
    assert got.drafts == [((1, 2, 3), 6, 1), ((1, 2, 4), 3, 1), ((5,), 2, 1)]
    assert tier.lookup([0], budget=3) == [(1, 2, 3)]
    assert tier.lookup([0], budget=0) == [] and tier.lookup([8], budget=5) == []
    assert tier.search([8], 5).format() == "no suffix of the context is continued in the corpus"


def test_sampled_counts_are_scaled_estimates():
    docs = [[0, 1]] * 300 + [[0, 2]] * 100
    tier = StatisticsTier.from_documents(docs, StatisticsSettings(sample=40))
    got = tier.search([0], budget=2)
    assert not got.matches[0].exact and got.matches[0].read == 40 and got.matches[0].occurrences == 400
    assert got.drafts == [((1,), 300, 1), ((2,), 100, 1)]
    assert "estimated from 40" in got.format()


def test_settings_are_validated():
    with pytest.raises(HDError):
        StatisticsSettings(min_key=3, max_key=2)
    with pytest.raises(HDError):
        StatisticsSettings(draft_len=0)
    tokens = join_documents([[1, 2, 3]])
    with pytest.raises(HDError, match="sorted by 4"):
        StatisticsTier(
            SuffixIndex(tokens, build_suffix_array(tokens, 4), 4), StatisticsSettings(max_key=2, draft_len=3)
        )


# Lossless in the engine -------------------------------------------------------------------------


@functools.cache
def llama():
    return tiny_llama()


@functools.cache
def plain(prompt: tuple[int, ...], max_new: int) -> list[int]:
    return run(llama(), prompt, None, DecodeSettings(max_new_tokens=max_new)).tokens


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prompt=st.lists(st.integers(3, VOCAB - 1), min_size=1, max_size=8).map(tuple),
    budget=st.integers(1, 16),
    seed=st.integers(0, 100),
)
def test_hd_with_the_statistics_tier_equals_plain_greedy(prompt, budget, seed):
    rng = np.random.default_rng(seed)
    want = plain(prompt, 24)
    # The corpus holds this answer with corrupted copies (rejected branches) and random text.
    truth = list(prompt) + want
    docs = [
        truth,
        *(np.where(rng.random(len(truth)) < 0.2, rng.integers(3, VOCAB, len(truth)), truth) for _ in range(3)),
    ]
    docs += [rng.integers(3, VOCAB, 30).tolist() for _ in range(5)]
    tier = StatisticsTier.from_documents(docs)
    got = run(llama(), prompt, Drafter([tier]), DecodeSettings(max_new_tokens=24), (), FixedBudget(budget))
    assert got.tokens == want
    assert got.mat > 1.0  # drafts from the corpus were accepted: the test exercised acceptance


# The real database ------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_default_database_drafts_fast_and_sensibly():
    """On the full ShareGPT database when it is built (`hdlib build-db statistics`, about 2 minutes)."""
    from hdlib.models.loading import load_model
    from hdlib.models.packaged import is_installed

    if not is_installed("smollm2-135m"):
        pytest.skip("the packaged model is not installed")
    lm = load_model()
    path = default_statistics_path(lm)
    if not path.is_file():
        pytest.skip(f"no statistics database at {path}: build it with `hdlib build-db statistics`")
    tier = StatisticsTier.from_file(path, lm.fingerprint)
    assert tier.meta["counts"]["tokens"] > 10_000_000 and tier.meta["source"]["sharegpt"]["truncated"]
    ids = lm.tokenizer("Here is a Python function that returns the sum of a list of numbers", add_special_tokens=False)[
        "input_ids"
    ]
    got = tier.search(ids[:-3], budget=16)
    assert got.key_length >= 3 and got.drafts and got.drafts[0].count >= 2
    times = []
    for end in range(2, len(ids)):
        start = time.perf_counter()
        tier.lookup(ids[:end], 16)
        times.append(time.perf_counter() - start)
    assert statistics.median(times) < 0.005  # the benchmark measures 1 ms goals on a quiet machine
