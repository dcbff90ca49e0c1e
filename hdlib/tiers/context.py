"""The context tier: n-grams of the prompt and of everything generated so far.

Temporal locality at its strongest: a summary repeats its passage, code repeats its identifiers, a
list repeats its own phrasing. The tier keeps the running text and an index from every key of
1..max_key tokens to the positions where that key ended. A lookup takes the longest suffix of the
context found in the index and reads the tokens that followed its most recent occurrences; shorter
suffixes fill what budget is left. The index grows after every step with every n-gram that ends at
one of the new tokens, so a phrase generated one step ago can be drafted in the next.

Repetition loops (a small model stuck repeating a phrase) are where this tier pays most and could
cost most: every occurrence of the key is a match. So a lookup reads at most the `SCAN` most recent
occurrences of a key; a match that overlaps the suffix itself is read on past the end of the text
as the loop it is (after `a b c a b`, the key `a b` at the start continues `c a b c a ...`, not
just `c a b`); and drafts gather in a `DraftSet`, so none is a prefix of another.

With `ContextSettings(window=WindowSettings())` the tier is also fed by a Lookahead window
(`hdlib.tiers.window`): its rows ride in the verification passes (where the value-ranked tree finds they
pay), and the n-grams it harvests are drafted after the text's own matches, by the newest token
(their source "window").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from hdlib.errors import HDError
from hdlib.tiers.base import Draft, DraftRow, DraftTier, Proposal, StepOutcome, Tier
from hdlib.tiers.ngram import DraftSet, NGramIndex
from hdlib.tiers.window import WINDOW_SOURCE, LookaheadWindow, WindowSettings

SHARE_WINDOW = 32  # recent occurrences of a key that its continuations' shares are counted over
SCAN = 32  # the most recent occurrences of a key a lookup reads: a loop has thousands, all alike


@dataclass(frozen=True)
class ContextSettings:
    max_key: int = 4  # longest suffix matched; longer keys find fewer but surer continuations
    min_key: int = 2  # a one-token key matches often and is seldom right: on a CPU a wrong draft costs
    draft_len: int = 10  # tokens per continuation; a copy of a passage is long, a guess is not
    per_key: int = 4  # continuations read per key, most recent first
    window: WindowSettings | None = None  # a Lookahead window feeding the tier; None: none
    # The key's most recent occurrences its continuations' shares are counted over, the context's own
    # last tokens (which have no continuation yet) among them.
    share_window: int = SHARE_WINDOW

    def __post_init__(self) -> None:
        if not 1 <= self.min_key <= self.max_key:
            raise HDError(f"context tier: need 1 <= min_key <= max_key, got {self.min_key}, {self.max_key}")
        if self.draft_len < 1 or self.per_key < 1:
            raise HDError("context tier: draft_len and per_key must be at least 1")
        if self.share_window < 2:
            raise HDError(
                f"context tier: share_window must be at least 2 (the context's own last tokens are one of the "
                f"occurrences it counts), got {self.share_window}"
            )


class ContextTier(DraftTier):
    tier = Tier.CONTEXT

    def __init__(self, settings: ContextSettings | None = None) -> None:
        self.settings = settings or ContextSettings()
        self._tokens: list[int] = []
        self._index: NGramIndex[int] = NGramIndex(self.settings.max_key, self.settings.min_key)
        self.window = LookaheadWindow(self.settings.window) if self.settings.window is not None else None
        self.rider = self.window

    def begin(self, prompt: Sequence[int]) -> None:
        s = self.settings
        self._tokens = []
        self._index = NGramIndex(s.max_key, s.min_key)
        self._extend(prompt)
        if self.window is not None:
            self.window.begin(prompt)

    def update(self, step: StepOutcome) -> None:
        self._extend(step.tokens)

    def _extend(self, accepted: Sequence[int]) -> None:
        tokens = self._tokens
        start = len(tokens)
        tokens.extend(accepted)
        lo, hi = self._index.min_key, self._index.max_key
        # Index every key that ends at a new token, the newest included: the value is the
        # position right after the key, where its continuation starts.
        for end in range(start + 1, len(tokens) + 1):
            for m in range(lo, min(hi, end) + 1):
                self._index.add(tokens[end - m : end], end)

    def explain(self, context: Sequence[int], budget: int) -> list[DraftRow]:
        """The drafts after `context` from the text (read by a fresh tier: this one is left as it is),
        each with how many occurrences of its key the text goes on from with it (read as a lookup
        reads, round a loop) and the share of the key's recent occurrences that go on with its first
        token. A window's n-grams are not explained: they depend on the passes so far."""
        fresh = ContextTier(replace(self.settings, window=None))
        fresh.begin(context)
        text = fresh._tokens
        rows = []
        for p in fresh.propose(context, budget):
            ends = fresh._index.get(text[len(text) - p.key_length :])
            count = sum(continuation(text, end, len(p.tokens)) == p.tokens for end in ends if end < len(text))
            rows.append(DraftRow(p.tokens, count, p.confidence[0], p.key_length))
        return rows

    def propose(self, context: Sequence[int], budget: int) -> list[Proposal]:
        # The tier keeps its own copy of the text (fed by begin/update), which equals `context`.
        tokens = self._tokens
        n = len(tokens)
        s = self.settings
        found = DraftSet(budget)
        seen_positions: set[int] = set()
        for key_length, positions in self._index.suffix_matches(tokens):
            # How often the key's recent occurrences went on with each token: the tier's confidence.
            recent = [tokens[p] for p in positions[-s.share_window :] if p < n]
            follows = Counter(recent)
            taken = 0
            for pos in reversed(positions[-SCAN:]):  # most recent first
                if found.full or taken == s.per_key:
                    break
                if pos >= n or pos in seen_positions:  # pos == n is the suffix itself: no continuation
                    continue
                seen_positions.add(pos)
                draft = continuation(tokens, pos, s.draft_len)
                if found.offer(draft, (key_length, (follows[draft[0]] / len(recent),), "")):
                    taken += 1
        if self.window is not None and tokens:
            for gram in self.window.pool.get(tokens[-1]):
                found.offer(gram, (1, (), WINDOW_SOURCE))
        return [
            Proposal(draft, key_length, source, confidence)
            for draft, (key_length, confidence, source) in zip(found.drafts, found.notes, strict=True)  # type: ignore[misc]
        ]


def continuation(tokens: Sequence[int], pos: int, length: int) -> Draft:
    """The `length` tokens that follow `tokens[:pos]` if the text goes on as it went on from `pos`.

    Where that runs past the end, the match overlaps its own continuation: the text from `pos` is a
    loop of period len(tokens) - pos, and the draft goes round it.
    """
    period = len(tokens) - pos
    if length <= period:
        return tuple(tokens[pos : pos + length])
    loop = tokens[pos:]
    return tuple(loop[i % period] for i in range(length))
