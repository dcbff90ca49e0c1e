"""The context tier: n-grams of the prompt and of everything generated so far.

Temporal locality at its strongest: a summary repeats its passage, code repeats its identifiers, a
list repeats its own phrasing. The tier keeps the running text and an index from every key of
1..max_key tokens to the positions where that key ended. A lookup takes the longest suffix of the
context found in the index and reads the tokens that followed its most recent occurrences; shorter
suffixes fill what budget is left. The index grows after every step with every n-gram that ends at
one of the new tokens, so a phrase generated one step ago can be drafted in the next.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from hdlib.errors import HDError
from hdlib.ngram import NGramIndex
from hdlib.tiers.base import Draft, DraftTier, Proposal, Tier


SHARE_WINDOW = 32  # recent occurrences of a key that its continuations' shares are counted over


@dataclass(frozen=True)
class ContextSettings:
    max_key: int = 4  # longest suffix matched; longer keys find fewer but surer continuations
    min_key: int = 2  # a one-token key matches often and is seldom right: on a CPU a wrong draft costs
    draft_len: int = 10  # tokens per continuation; a copy of a passage is long, a guess is not
    per_key: int = 4  # continuations read per key, most recent first

    def __post_init__(self) -> None:
        if not 1 <= self.min_key <= self.max_key:
            raise HDError(f"context tier: need 1 <= min_key <= max_key, got {self.min_key}, {self.max_key}")
        if self.draft_len < 1 or self.per_key < 1:
            raise HDError("context tier: draft_len and per_key must be at least 1")


class ContextTier(DraftTier):
    tier = Tier.CONTEXT

    def __init__(self, settings: ContextSettings | None = None) -> None:
        self.settings = settings or ContextSettings()
        self._tokens: list[int] = []
        self._index: NGramIndex[int] = NGramIndex(self.settings.max_key, self.settings.min_key)

    def begin(self, prompt: Sequence[int]) -> None:
        s = self.settings
        self._tokens = []
        self._index = NGramIndex(s.max_key, s.min_key)
        self.update(prompt)

    def update(self, accepted: Sequence[int]) -> None:
        tokens = self._tokens
        start = len(tokens)
        tokens.extend(accepted)
        lo, hi = self._index.min_key, self._index.max_key
        # Index every key that ends at a new token, the newest included: the value is the
        # position right after the key, where its continuation starts.
        for end in range(start + 1, len(tokens) + 1):
            for m in range(lo, min(hi, end) + 1):
                self._index.add(tokens[end - m : end], end)

    def lookup(self, context: Sequence[int], budget: int) -> list[Draft]:
        return [p.tokens for p in self.propose(context, budget)]

    def propose(self, context: Sequence[int], budget: int) -> list[Proposal]:
        # The tier keeps its own copy of the text (fed by begin/update), which equals `context`.
        tokens = self._tokens
        n = len(tokens)
        s = self.settings
        drafts: list[Proposal] = []
        seen_positions: set[int] = set()
        seen_drafts: set[Draft] = set()
        for key_length, positions in self._index.suffix_matches(tokens):
            # How often the key's recent occurrences went on with each token: the tier's confidence.
            recent = [tokens[p] for p in positions[-SHARE_WINDOW:] if p < n]
            follows = Counter(recent)
            taken = 0
            for pos in reversed(positions):  # most recent first
                if budget <= 0:
                    return drafts
                if taken == s.per_key:
                    break
                if pos >= n or pos in seen_positions:  # pos == n is the suffix itself: no continuation
                    continue
                seen_positions.add(pos)
                draft = tuple(tokens[pos : pos + min(s.draft_len, budget)])
                if draft in seen_drafts:
                    continue
                seen_drafts.add(draft)
                drafts.append(Proposal(draft, key_length, confidence=(follows[draft[0]] / len(recent),)))
                budget -= len(draft)
                taken += 1
        return drafts
