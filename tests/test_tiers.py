"""The context tier and the drafter against brute force on small vocabularies."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracle import OracleTier

from hdlib.databases import parse_tiers
from hdlib.drafter import Drafter
from hdlib.errors import HDError
from hdlib.ngram import NGramIndex
from hdlib.tiers import ContextSettings, ContextTier, Tier
from hdlib.tiers.context import SCAN


def scan_lookup(tokens: list[int], budget: int, s: ContextSettings) -> list[tuple[int, ...]]:
    """The context tier's contract, by scanning the text instead of an index.

    For each key length, longest first: the SCAN most recent occurrences of the suffix (the suffix
    itself among them, with nothing after it), most recent first, at most per_key drafts each; a
    continuation that runs past the end goes round the loop it is; drafts merge as in a trie (one
    that extends a kept draft replaces it and pays for its new tokens; one a kept draft already
    holds is dropped), within the budget.
    """
    n = len(tokens)
    kept: list[tuple[int, ...]] = []
    left = budget
    seen_pos: set[int] = set()
    for m in range(min(s.max_key, n), s.min_key - 1, -1):
        ends = [p for p in range(m, n + 1) if tokens[p - m : p] == tokens[n - m :]][-SCAN:]
        taken = 0
        for p in reversed(ends):
            if left <= 0 or taken == s.per_key:
                break
            if p == n or p in seen_pos:
                continue
            seen_pos.add(p)
            d = tuple(tokens[p + i % (n - p)] for i in range(s.draft_len))
            extends = [i for i, k in enumerate(kept) if len(d) > len(k) and d[: len(k)] == k]
            if extends:
                i = extends[0]
                longer = d[: len(kept[i]) + left]
                left -= len(longer) - len(kept[i])
                kept[i] = longer
            else:
                d = d[:left]
                if any(k[: len(d)] == d for k in kept):
                    continue
                kept.append(d)
                left -= len(d)
            taken += 1
    return kept


@given(
    prompt=st.lists(st.integers(0, 4), min_size=1, max_size=30),
    chunks=st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=5), max_size=6),
    budget=st.integers(1, 20),
    keys=st.tuples(st.integers(1, 4), st.integers(0, 3)),
    draft_len=st.integers(1, 6),
    per_key=st.integers(1, 4),
)
def test_context_tier_matches_a_scan_of_the_text(prompt, chunks, budget, keys, draft_len, per_key):
    max_key, min_key = keys[0], max(1, keys[0] - keys[1])
    s = ContextSettings(max_key=max_key, min_key=min_key, draft_len=draft_len, per_key=per_key)
    tier = ContextTier(s)
    tier.begin(prompt)
    text = list(prompt)
    for chunk in [[], *chunks]:  # updated step by step, as in decoding
        tier.update(chunk)
        text += chunk
        got = tier.lookup(text, budget)
        assert got == scan_lookup(text, budget, s)
        assert sum(map(len, got)) <= budget
        assert not any(a != b and b[: len(a)] == a for a in got for b in got)  # the trie merges nothing


def test_context_tier_drafts_a_phrase_generated_one_step_ago():
    tier = ContextTier(ContextSettings(max_key=2, draft_len=3))
    tier.begin([9, 8])
    tier.update([1, 2, 3, 4])  # generated: 1 2 3 4
    tier.update([1, 2])  # the model starts repeating itself
    assert tier.lookup([9, 8, 1, 2, 3, 4, 1, 2], 10)[0] == (3, 4, 1)


def test_ngram_index_walks_suffixes_longest_first():
    index: NGramIndex[str] = NGramIndex(max_key=3)
    index.add([1, 2, 3], "three")
    index.add([2, 3], "two")
    index.add([3], "one")
    assert [m for m, _ in index.suffix_matches([0, 1, 2, 3])] == [3, 2, 1]
    assert list(index.suffix_matches([5])) == []
    with pytest.raises(HDError):
        NGramIndex(max_key=0)


class Fixed(OracleTier):
    def __init__(self, tier: Tier, drafts):
        self.tier, self.drafts, self.asked = tier, drafts, []

    def lookup(self, context, budget):
        self.asked.append(budget)
        return self.drafts


def test_drafter_fills_the_budget_in_tier_order_and_merges():
    c = Fixed(Tier.CONTEXT, [(1, 2, 3), (1, 2)])
    m = Fixed(Tier.MODEL, [(1, 2, 4), (5, 6, 7, 8)])
    s = Fixed(Tier.STATISTICS, [(9,)])
    tree, lookups = Drafter([c, m, s]).draft([0], budget=6, max_depth=10)
    assert c.asked == [6] and m.asked == [3] and s.asked == []  # S is never asked: budget full
    assert [(x.tier, x.added) for x in lookups] == [(Tier.CONTEXT, 3), (Tier.MODEL, 3)]
    assert tree.n_drafted == 6
    assert tree.tokens == [0, 1, 2, 3, 4, 5, 6]
    assert tree.tiers == [None, Tier.CONTEXT, Tier.CONTEXT, Tier.CONTEXT, Tier.MODEL, Tier.MODEL, Tier.MODEL]


def test_tier_names_and_errors():
    assert parse_tiers("context, M,statistics") == [Tier.CONTEXT, Tier.MODEL, Tier.STATISTICS]
    assert parse_tiers("") == []
    with pytest.raises(HDError, match="unknown tier 'lexicon'"):
        parse_tiers("lexicon")
    with pytest.raises(HDError, match="once"):
        parse_tiers("C,context")
    with pytest.raises(HDError):
        ContextSettings(max_key=0)
