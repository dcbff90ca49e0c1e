"""The suffix array the statistics tier searches (hdlib.tiers.suffix_array): sorted as `sorted` sorts, every
occurrence of a key found, prefixes counted."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.documents import documents

from hdlib.errors import HDError
from hdlib.tiers.suffix_array import SEPARATOR, SuffixIndex, build_suffix_array, count_prefixes, join_documents


def sort_key(tokens: np.ndarray, i: int, depth: int | None) -> list[int]:
    tail = [t if t >= 0 else 1 << 40 for t in tokens[i:].tolist()]  # a separator sorts after tokens
    return tail if depth is None else tail[:depth]


# Suffix array ----------------------------------------------------------------------------------


@given(docs=documents, depth=st.sampled_from([None, 1, 2, 3, 5]))
def test_suffix_array_sorts_like_sorted(docs, depth):
    tokens = join_documents(docs)
    sa = build_suffix_array(tokens, depth)
    starts = [i for i in range(len(tokens)) if tokens[i] >= 0]
    want = sorted(starts, key=lambda i: sort_key(tokens, i, depth))
    assert sorted(sa.tolist()) == starts  # every token starts exactly one suffix; separators none
    assert [sort_key(tokens, i, depth) for i in sa] == [sort_key(tokens, i, depth) for i in want]
    if depth is None:
        assert sa.tolist() == want


@given(docs=documents, key=st.lists(st.integers(0, 4), min_size=1, max_size=4))
def test_range_search_finds_every_occurrence(docs, key):
    tokens = join_documents(docs)
    index = SuffixIndex(tokens, build_suffix_array(tokens, 8), 8)
    lo, hi = index.find(key)
    found = sorted(index.suffixes[lo:hi].tolist())
    scan = [i for i in range(len(tokens) - len(key) + 1) if tokens[i : i + len(key)].tolist() == key]
    assert found == scan


def test_keys_longer_than_the_sort_depth_are_refused():
    tokens = join_documents([[1, 2, 3, 4]])
    index = SuffixIndex(tokens, build_suffix_array(tokens, 2), 2)
    with pytest.raises(HDError, match="sorted by at least 3"):
        index.find([1, 2, 3])


@given(rows=st.lists(st.lists(st.sampled_from([0, 1, 2, SEPARATOR]), min_size=3, max_size=3), min_size=1, max_size=12))
def test_count_prefixes_counts_every_prefix_without_a_separator(rows):
    rows = sorted(rows, key=lambda r: [t if t >= 0 else 9 for t in r])
    got = count_prefixes(np.array(rows, np.int32))
    nodes = Counter(tuple(got.rows[f, :d].tolist()) for f, d in zip(got.first, got.depth))
    assert all(c == 1 for c in nodes.values())  # each node once
    want = Counter(tuple(r[:d]) for r in rows for d in range(1, 4) if SEPARATOR not in r[:d])
    assert {tuple(got.rows[f, :d].tolist()): int(c) for f, d, c in zip(got.first, got.depth, got.count)} == want
