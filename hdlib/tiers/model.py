"""The model tier: phrases the target model itself tends to produce.

Built offline (see `hdlib.databases.modeldb`) from the model's own greedy answers to many prompts: the n-grams
found in the most answers, each with its document frequency. Every n-gram is indexed under each of
its first 1..n-1 tokens as a key, its remaining tokens being the continuation; a key keeps its
`per_key` most frequent continuations. A lookup takes the longest suffix of the context that is a
key, offers its continuations most frequent first, and lets shorter keys (longer continuations) fill
what budget is left. Continuations that the drafter's trie would merge are merged here too (see
`DraftSet`), so a 1-token guess from a 4-token key grows into the 4-token phrase of a 1-token key
instead of paying for the shared token twice.

This is the paper's model-dependent database: phrases of the model's own answers, built offline.
What the model guessed in recent passes of the running request is another tier
(`hdlib.tiers.recycled`, "recycled").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hdlib.errors import HDError
from hdlib.store import read_db
from hdlib.tiers.base import Draft, DraftRow, DraftTier, Proposal, Tier
from hdlib.tiers.ngram import DraftSet, NGramIndex

Continuation = tuple[Draft, int]  # (tokens after the key, document frequency)


@dataclass(frozen=True)
class ModelSettings:
    max_key: int | None = None  # longest suffix matched; None: n - 1, every key the n-grams have
    # The authors key on the last token alone. On a CPU a draft is not free, and a 1-token key matches
    # at nearly every step: behind the context tier it adds a few accepted tokens and many more drafted
    # ones, whose forward time costs more than those tokens save; a 2-token key drafts where it is right.
    min_key: int = 2
    per_key: int = 4  # continuations kept per key, most frequent first

    def __post_init__(self) -> None:
        if self.min_key < 1 or (self.max_key is not None and self.max_key < self.min_key):
            raise HDError(f"model tier: need 1 <= min_key <= max_key, got {self.min_key}, {self.max_key}")
        if self.per_key < 1:
            raise HDError("model tier: per_key must be at least 1")


class ModelTier(DraftTier):
    tier = Tier.MODEL

    def __init__(
        self,
        ngrams: np.ndarray,
        doc_freq: np.ndarray,
        settings: ModelSettings | None = None,
        meta: dict[str, Any] | None = None,
    ) -> None:
        """`ngrams` (K, n) token ids and `doc_freq` (K,): in how many answers each n-gram occurs."""
        ngrams, doc_freq = np.asarray(ngrams), np.asarray(doc_freq)
        if ngrams.ndim != 2 or ngrams.shape[1] < 2 or doc_freq.shape != (ngrams.shape[0],):
            raise HDError(
                f"model tier: need n-grams of shape (K, n >= 2) and K counts, got {ngrams.shape} and {doc_freq.shape}"
            )
        self.settings = s = settings or ModelSettings()
        self.n = n = int(ngrams.shape[1])
        max_key = n - 1 if s.max_key is None else s.max_key
        if max_key > n - 1:
            raise HDError(f"model tier: max_key {max_key} needs n-grams longer than the database's n = {n}")
        self.meta = dict(meta or {})
        self.size = int(ngrams.shape[0])
        min_key = min(s.min_key, max_key)  # a database of short n-grams has only short keys
        self._index: NGramIndex[Continuation] = NGramIndex(max_key, min_key)
        ngrams, doc_freq = _merge_duplicates(ngrams.astype(np.int64), doc_freq.astype(np.int64))
        for m in range(min_key, max_key + 1):
            for row, count in _top_per_key(ngrams, doc_freq, m, s.per_key):
                self._index.add(row[:m], (tuple(row[m:]), count))

    @classmethod
    def empty(cls, why: str) -> ModelTier:
        """A model tier with no phrases (no database was built for the model): it drafts nothing."""
        return cls(np.zeros((0, 2), dtype=np.int64), np.zeros(0, dtype=np.int64), meta={"model": why})

    @classmethod
    def from_file(cls, path: str | Path, fingerprint: str | None, settings: ModelSettings | None = None) -> ModelTier:
        """Open a model database, refused unless it is whole and was built for this tokenizer (the
        fingerprint of `LoadedModel`; None skips that check, to inspect a file without its model)."""
        if not Path(path).is_file():
            raise HDError(f"no model database at {path}: build it with `hdlib build-db model`")
        meta, arrays = read_db(path, tier=Tier.MODEL.name, fingerprint=fingerprint)
        if "ngrams" not in arrays or "doc_freq" not in arrays:
            raise HDError(f"{path} lacks the arrays 'ngrams' and 'doc_freq': rebuild it with `hdlib build-db model`")
        try:
            return cls(arrays["ngrams"], arrays["doc_freq"], settings, meta)
        except HDError as error:
            raise HDError(f"{path}: {error}: rebuild it with `hdlib build-db model`") from None

    def propose(self, context: Sequence[int], budget: int) -> list[Proposal]:
        return [p for p, _ in self._drafts(context, budget)]

    def explain(self, context: Sequence[int], budget: int = 16) -> list[DraftRow]:
        """The drafts, each with the document frequency of its n-gram (in how many of the model's
        answers it occurs)."""
        return [
            DraftRow(p.tokens, count, p.confidence[0] if p.confidence else None, p.key_length or None, p.source)
            for p, count in self._drafts(context, budget)
        ]

    def _drafts(self, context: Sequence[int], budget: int) -> list[tuple[Proposal, int]]:
        """The drafts with their counts; each draft's confidence is its first token's share of the
        key's continuations."""
        found = self._collect(context, budget)
        return [
            (Proposal(d, key_length, confidence=(share,)), int(count))
            for d, (count, key_length, share) in zip(found.drafts, found.notes, strict=True)  # type: ignore[misc]
        ]

    def _collect(self, context: Sequence[int], budget: int) -> DraftSet:
        found = DraftSet(budget)
        for key_length, continuations in self._index.suffix_matches(context):
            total = sum(count for _, count in continuations)
            first: Counter[int] = Counter()
            for continuation, count in continuations:
                first[continuation[0]] += count
            for continuation, count in continuations:
                if found.full:
                    return found
                found.offer(continuation, (count, key_length, first[continuation[0]] / total))
        return found

    def __repr__(self) -> str:
        return (
            f"ModelTier({self.size:,} {self.n}-grams of {self.meta.get('model', '?')!r}, keys of {len(self._index):,})"
        )


def _merge_duplicates(ngrams: np.ndarray, doc_freq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Identical n-grams (never in a built database, possible in hand-made arrays) add their counts."""
    unique, inverse = np.unique(ngrams, axis=0, return_inverse=True)
    if len(unique) == len(ngrams):
        return ngrams, doc_freq
    return unique, np.bincount(inverse.reshape(-1), weights=doc_freq, minlength=len(unique)).astype(np.int64)


def _top_per_key(ngrams: np.ndarray, doc_freq: np.ndarray, m: int, per_key: int) -> list[tuple[list[int], int]]:
    """(n-gram, count) for the `per_key` most frequent continuations of every m-token key, in rank order.

    Ties go to the smaller continuation (token ids compared in order), so the ranking is deterministic.
    """
    if len(ngrams) == 0:
        return []
    n = ngrams.shape[1]
    # lexsort's last key is the primary one: key tokens, then count descending, then continuation.
    order = np.lexsort(
        [ngrams[:, j] for j in range(n - 1, m - 1, -1)] + [-doc_freq] + [ngrams[:, j] for j in range(m - 1, -1, -1)]
    )
    keys = ngrams[order, :m]
    starts = np.flatnonzero(np.r_[True, np.any(keys[1:] != keys[:-1], axis=1)])
    rank = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    kept = order[rank < per_key]
    return list(zip(ngrams[kept].tolist(), doc_freq[kept].tolist(), strict=True))
