"""The context tier (`hdlib.tiers.context`) and its n-gram index against brute force on small
vocabularies; in a repetition loop, a bounded lookup that drafts round the loop and stays lossless; tier
names. The drafter is tested in test_drafter.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.greedy import model
from support.outcome import appended

from hdlib.databases.registry import parse_tiers
from hdlib.engine.budget import FixedBudget
from hdlib.engine.drafter import Drafter
from hdlib.engine.loop import DecodeSettings, run
from hdlib.errors import HDError
from hdlib.tiers import ContextSettings, ContextTier, Tier
from hdlib.tiers.context import SCAN
from hdlib.tiers.ngram import NGramIndex


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
        tier.update(appended(chunk))
        text += chunk
        got = tier.lookup(text, budget)
        assert got == scan_lookup(text, budget, s)
        assert sum(map(len, got)) <= budget
        assert not any(a != b and b[: len(a)] == a for a in got for b in got)  # the trie merges nothing


def test_context_tier_drafts_a_phrase_generated_one_step_ago():
    tier = ContextTier(ContextSettings(max_key=2, draft_len=3))
    tier.begin([9, 8])
    tier.update(appended([1, 2, 3, 4]))  # generated: 1 2 3 4
    tier.update(appended([1, 2]))  # the model starts repeating itself
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


# --- repetition loops (issue 11: seen to fail on the engine before the fix) ---------------------------


class CountingList(list):
    """A key's occurrence list that counts the occurrences a lookup reads."""

    read = 0

    def __reversed__(self):
        for item in super().__reversed__():
            CountingList.read += 1
            yield item

    def __getitem__(self, index):
        got = super().__getitem__(index)
        CountingList.read += len(got) if isinstance(index, slice) else 1
        return got


def looping_tier(length: int) -> tuple[ContextTier, list[int]]:
    text = [11, 12, 13] * (length // 3) + [11]  # a small model stuck in a loop of period 3
    tier = ContextTier()
    tier.begin(text)
    matches = tier._index.suffix_matches
    tier._index.suffix_matches = lambda context: ((m, CountingList(v)) for m, v in matches(context))
    return tier, text


@pytest.mark.parametrize("budget", [16, 64])
def test_a_lookup_in_a_repetition_loop_reads_a_bounded_number_of_occurrences(budget):
    reads = []
    for length in (3_000, 30_000):
        tier, text = looping_tier(length)
        CountingList.read = 0
        tier.lookup(text, budget)
        reads.append(CountingList.read)
    assert reads[0] == reads[1] <= 3 * 2 * 32  # 3 key lengths, the SCAN most recent occurrences (read twice)


def test_a_loop_is_drafted_round_and_no_draft_is_a_prefix_of_another():
    tier, text = looping_tier(3_000)
    drafts = tier.lookup(text, 64)
    assert drafts[0] == (12, 13, 11) * 3 + (12,)  # the whole draft length, round the loop
    assert not any(a != b and b[: len(a)] == a for a in drafts for b in drafts)
    # A match far enough back: the text that followed it, cut at draft_len (10).
    text = [*range(1, 15), 1, 2]
    tier = ContextTier()
    tier.begin(text)
    assert tier.lookup(text, 16) == [tuple(range(3, 13))]
    # One nearer than draft_len overlaps its own continuation: it goes round.
    text = [1, 2, 3, 4, 5, 6, 7, 1, 2]
    tier.begin(text)
    assert tier.lookup(text, 16) == [(3, 4, 5, 6, 7, 1, 2, 3, 4, 5)]


def test_the_context_tier_in_a_loop_stays_lossless():
    """The model's own loop: HD drafts it round and the output is still plain greedy's."""
    m = model("llama")
    prompt = (20, 21, 22) * 10
    want = run(m, prompt, None, DecodeSettings(max_new_tokens=40)).tokens
    got = run(m, prompt, Drafter([ContextTier()]), DecodeSettings(max_new_tokens=40), (), FixedBudget(32))
    assert got.tokens == want


def test_tier_names_and_errors():
    assert parse_tiers("context, M,statistics") == [Tier.CONTEXT, Tier.MODEL, Tier.STATISTICS]
    assert parse_tiers("") == []
    with pytest.raises(HDError, match="unknown tier 'lexicon'"):
        parse_tiers("lexicon")
    with pytest.raises(HDError, match="once"):
        parse_tiers("C,context")
    with pytest.raises(HDError):
        ContextSettings(max_key=0)


def _cielab_hue(color: str) -> float:
    """The hue angle of an sRGB colour in CIELAB (D65), in degrees."""
    import math

    def linear(c: float) -> float:
        return ((c + 0.055) / 1.055) ** 2.4 if c > 0.04045 else c / 12.92

    r, g, b = (linear(int(color[i : i + 2], 16) / 255) for i in (1, 3, 5))
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883
    f = [v ** (1 / 3) if v > 0.008856 else 7.787 * v + 16 / 116 for v in (x, y, z)]
    return math.degrees(math.atan2(200 * (f[1] - f[2]), 500 * (f[0] - f[1]))) % 360


def test_the_shipped_tiers_colours_are_hues_apart():
    """A student tells the tiers apart by hue, not by shade: every two shipped tiers' colours are at
    least 30 degrees apart on CIELAB's hue circle (the recycled tier's old wine, #882255, was 8 from
    the statistics tier's purple)."""
    tiers = [Tier.CONTEXT, Tier.RECYCLED, Tier.MODEL, Tier.STATISTICS]
    for i, a in enumerate(tiers):
        for b in tiers[i + 1 :]:
            gap = abs(_cielab_hue(a.color) - _cielab_hue(b.color))
            assert min(gap, 360 - gap) >= 30, (a.name, b.name, round(gap))
    gap = abs(_cielab_hue("#882255") - _cielab_hue(Tier.STATISTICS.color))
    assert min(gap, 360 - gap) < 30  # the check tells the old pair apart from the new
