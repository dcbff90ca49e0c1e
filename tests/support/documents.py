"""Small corpora for the suffix array and the statistics tier: documents drawn by hypothesis, and
every occurrence of a key found by scanning them."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from hdlib.tiers.suffix_array import SEPARATOR

documents = st.lists(st.lists(st.integers(0, 3), max_size=12), min_size=1, max_size=5)


def occurrences(docs: list[list[int]], key: tuple[int, ...]) -> list[tuple[int, int]]:
    """(document, position after the key) of every occurrence of `key`, by scanning."""
    m = len(key)
    return [(d, p + m) for d, doc in enumerate(docs) for p in range(len(doc) - m + 1) if tuple(doc[p : p + m]) == key]


def split_documents(tokens: np.ndarray) -> list[list[int]]:
    """A joined corpus's documents again, its separators dropped."""
    docs, doc = [], []
    for t in tokens.tolist():
        if t == SEPARATOR:
            docs.append(doc)
            doc = []
        else:
            doc.append(t)
    return docs
