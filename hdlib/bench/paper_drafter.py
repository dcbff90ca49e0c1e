"""The paper's HD as its authors ran it (Cho et al., NAACL Findings 2025; their code: a Lookahead
code base inside the Spec-Bench harness), as a drafter for hdlib's engine: so that what each of
hdlib's changes buys can be measured against it, on the same verifier.

Each step, as their code does it: the context store and the model database
are keyed by the newest token, the statistics by the newest two tokens, else the newest one; every
draft is 4 tokens (n-grams of 5); the context store keeps at most 7 continuations per key, the
least recently seen dropped; at most 7 drafts in all, the tiers asked in order until there are 7;
the drafts laid side by side as chains and the longest accepted kept. Their defects are kept unless
`mend` is set:

- drafts are not de-duplicated across tiers;
- when the context store gave some drafts but fewer than 7, the model database gives its *least*
  frequent entries for the rest;
- the n-gram ending at the newest token of each step's output never enters the context store.

Their Lookahead (Jacobi) window, 7 columns of 4 levels, rides in every pass and feeds the context
store (`hdlib.tiers.window`; Lookahead's mask and its harvest of one n-gram per column and pass).

`trie` merges the drafts' shared prefixes, as hdlib's drafter does, instead of separate chains.
Not reproduced: their model-database script's stop after 11 prompts (hdlib's database is built
whole), and their first sampled step's bias (hdlib's verifier is lossless when sampling too).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from hdlib.databases.modeldb import default_model_db_path
from hdlib.databases.registry import load_tier, opened
from hdlib.engine.drafter import Drafter, Gate
from hdlib.engine.trace import TierLookup
from hdlib.engine.tree import DraftTree
from hdlib.models.loading import LoadedModel
from hdlib.tiers import DraftTier, ModelSettings, ModelTier, StatisticsSettings, StatisticsTier, Tier
from hdlib.tiers.base import Draft, Proposal, StepOutcome, check_tokens, proposal
from hdlib.tiers.window import LookaheadWindow, NGramPool, WindowSettings


@dataclass(frozen=True)
class PaperSettings:
    ngram: int = 5  # the authors' LEVEL: a key of 1 token, drafts of 4
    max_drafts: int = 7  # per step, the tiers together
    per_key: int = 7  # continuations per key in the context store (and taken from the model database)
    mend: bool = False  # fix the three defects above
    trie: bool = False  # merge shared prefixes (hdlib's trie) instead of laying drafts side by side

    @property
    def draft_len(self) -> int:
        return self.ngram - 1

    @property
    def budget(self) -> int:
        """The most draft tokens a step can hold: every draft full length."""
        return self.max_drafts * self.draft_len


class PaperContextTier(DraftTier):
    """The authors' context store: after each token, the 4 tokens that followed it, at most `per_key`
    of them, most recently seen first; from the prompt, from the answer as it grows, and from the
    n-grams of a Lookahead window of 7 columns and 4 levels riding in every pass (`hdlib.tiers.window`)."""

    tier = Tier.CONTEXT

    def __init__(self, settings: PaperSettings | None = None) -> None:
        self.settings = s = settings or PaperSettings()
        self.store = NGramPool(s.per_key)
        self.window = self.rider = LookaheadWindow(WindowSettings(ngram=s.ngram, guesses=s.per_key), pool=self.store)
        self.text: list[int] = []

    def begin(self, prompt: Sequence[int]) -> None:
        self.window.begin(prompt)  # empties the store
        self.text = [int(t) for t in prompt]
        for end in range(len(self.text)):
            self._add(end)

    def update(self, step: StepOutcome) -> None:
        start = len(self.text)
        self.text += [int(t) for t in step.tokens]
        # Their off-by-one: the n-gram ending at the newest token is left out, and the next step
        # adds only n-grams ending at its own new tokens.
        last = len(self.text) if self.settings.mend else len(self.text) - 1
        for end in range(start, last):
            self._add(end)

    def _add(self, end: int) -> None:
        """The n-gram ending at position `end`."""
        n = self.settings.ngram
        if end + 1 >= n:
            self.store.add(self.text[end + 1 - n : end + 1])

    def propose(self, context: Sequence[int], budget: int) -> list[Draft]:
        return self.store.get(context[-1])[: max(budget // self.settings.draft_len, 0)]


@dataclass
class ChainTree(DraftTree):
    """Drafts laid side by side as chains, as verifiers without a trie lay them (the paper's HD):
    each draft a chain of its own from the root, sharing nothing. Two chains may then give a node
    two children with one token, twins: the first is the node's child by that token, the others are
    kept here, by parent. Greedy decoding keeps the longest accepted chain, the first of equals."""

    _twins: dict[int, list[int]] = field(default_factory=dict, repr=False)

    def add(self, draft: Proposal | Sequence[int], tier: Tier, max_new: int = 1 << 30, max_depth: int = 1 << 30) -> int:
        """Lay a draft as a chain of its own from the root (it shares no prefix with the chains before
        it); return how many nodes it made (at most `max_new`, none deeper than `max_depth`)."""
        p = proposal(draft)
        node = 0
        for token in p.tokens[: min(max_depth, max_new)]:
            node = self.add_node(node, token, tier, p.key_length, p.source)
        return min(len(p.tokens), max_depth, max_new)

    def add_node(
        self,
        parent: int,
        token: int,
        tier: Tier | None,
        key_length: int = 0,
        source: str = "",
        confidence: float = -1.0,
        proposers: set[tuple[Tier | None, str]] | None = None,
    ) -> int:
        """`DraftTree.add_node`; a node whose parent has a child with its token already is a twin."""
        child = super().add_node(parent, token, tier, key_length, source, confidence, proposers)
        if self.child(parent, token) != child:
            self._twins.setdefault(parent, []).append(child)
        return child

    def subtree(self, keep: Sequence[int]) -> ChainTree:
        """The chains through the nodes `keep` (closed under ancestors), twins kept apart."""
        return self.copy_into(ChainTree(root=self.root), keep)

    @property
    def has_twins(self) -> bool:
        """Whether a node has two children with one token."""
        return bool(self._twins)

    def children_with(self, node: int, token: int) -> list[int]:
        """Every child of `node` with this token, first added first."""
        first = self.child(node, token)
        if first is None:
            return []
        return [first, *(c for c in self._twins.get(node, ()) if self.tokens[c] == token)]

    def children(self, node: int) -> list[int]:
        kids = super().children(node)
        return sorted(kids + self._twins[node]) if node in self._twins else kids

    def accepted_path(self, choices: Sequence[int]) -> list[int]:
        """The longest chain whose every draft token is the model's choice (the first of equals)."""
        return self._longest_accepted(choices, 0)

    def _longest_accepted(self, choices: Sequence[int], node: int) -> list[int]:
        best = [node]
        for child in self.children_with(node, choices[node]):
            below = self._longest_accepted(choices, child)
            if len(below) + 1 > len(best):
                best = [node, *below]
        return best


class PaperDrafter(Drafter):
    """The authors' drafting: up to `max_drafts` drafts of `draft_len` tokens from the context store,
    the model database, then the statistics, as chains side by side (or merged, with `trie`)."""

    def __init__(
        self,
        context: PaperContextTier,
        model: ModelTier | None,
        statistics: StatisticsTier | None,
        settings: PaperSettings | None = None,
    ) -> None:
        super().__init__([t for t in (context, model, statistics) if t is not None])
        self.model = model
        self.settings = settings or PaperSettings()

    def draft(
        self, context: Sequence[int], max_depth: int, gate: Gate, vocab_size: int | None = None
    ) -> tuple[DraftTree, tuple[TierLookup, ...], int]:
        """As `Drafter.draft`, the authors' way: `choose`'s drafts laid out in order (the gate asked
        once, for the budget: their tiers share one count of drafts, asked until it is reached)."""
        s = self.settings
        tree = DraftTree(root=context[-1]) if s.trie else ChainTree(root=context[-1])
        budget = gate(self.tiers[0], tree, context, ())
        if budget <= 0:
            return tree, (), budget
        left = min(budget, s.budget)
        chosen, seconds = self.choose(context)
        added: dict[Tier, int] = dict.fromkeys(seconds, 0)
        for tier, draft in chosen:
            if left <= 0 or max_depth <= 0:
                break
            before = len(tree)
            new = tree.add(draft, tier.tier, left, max_depth)
            left, added[tier.tier] = left - new, added[tier.tier] + new
            if vocab_size is not None:
                check_tokens(tier, tree.tokens[before:], vocab_size)
        return tree, tuple(TierLookup(tier, seconds[tier], added[tier]) for tier in seconds), budget

    def choose(self, context: Sequence[int]) -> tuple[list[tuple[DraftTier, Draft]], dict[Tier, float]]:
        """The step's drafts in the order they are laid out, each with its tier; and the seconds of
        each tier's lookup (the tiers asked)."""
        s = self.settings
        chosen: list[tuple[DraftTier, Draft]] = []
        seen: set[Draft] = set()
        seconds: dict[Tier, float] = {}
        for tier in self.tiers:
            want = s.max_drafts - len(chosen)
            if want <= 0:
                break
            start = time.perf_counter()
            found = [tuple(d[: s.draft_len]) for d in tier.lookup(context, s.per_key * s.draft_len)]
            seconds[tier.tier] = time.perf_counter() - start
            if s.mend:
                found = [d for d in dict.fromkeys(found) if d not in seen]
            least_frequent = tier is self.model and chosen and not s.mend  # their defect
            for draft in found[-want:] if least_frequent else found[:want]:
                chosen.append((tier, draft))
                seen.add(draft)
        return chosen, seconds


# The authors' keys: the newest token for the model database, the newest two, else one, for the
# statistics; continuations of 4 tokens.
PAPER_MODEL = ModelSettings(max_key=1, min_key=1, per_key=PaperSettings().per_key)
PAPER_STATISTICS = StatisticsSettings(max_key=2, min_key=1, draft_len=PaperSettings().draft_len, fill=False)


def paper_drafter(lm: LoadedModel, settings: PaperSettings | None = None) -> PaperDrafter:
    """The paper's drafter for `lm`: a new context store, and `lm`'s model database (none where it was
    not built) and statistics corpus with the authors' keys, opened once per loaded model."""

    def make() -> tuple[ModelTier | None, StatisticsTier]:
        path = default_model_db_path(lm)
        model = ModelTier.from_file(path, lm.fingerprint, PAPER_MODEL) if path.is_file() else None
        statistics = load_tier(Tier.STATISTICS, lm)
        assert isinstance(statistics, StatisticsTier)
        return model, StatisticsTier.over(statistics, PAPER_STATISTICS)

    model, statistics = opened(lm, "paper", make)
    settings = settings or PaperSettings()
    return PaperDrafter(PaperContextTier(settings), model, statistics, settings)
