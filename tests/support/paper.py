"""The paper's model database, made by hand: n-grams of 5 tokens with their counts, opened with the
authors' keys (`hdlib.bench.paper_drafter.PAPER_MODEL`)."""

from __future__ import annotations

import numpy as np

from hdlib.bench.paper_drafter import PAPER_MODEL
from hdlib.tiers import ModelTier


def model_tier(*ngrams_and_counts: tuple[tuple[int, ...], int]) -> ModelTier:
    ngrams = np.array([n for n, _ in ngrams_and_counts])
    return ModelTier(ngrams, np.array([c for _, c in ngrams_and_counts]), PAPER_MODEL)
