"""The field's database drafters as tiers, so that hdlib's engine verifies them and only the drafting
differs: Token Recycling (Luo et al., 2024), REST (He et al., NAACL 2024), SuffixDecoding
(Oliaro et al., NeurIPS 2025, with its authors' own engine) and Lookahead decoding (Fu et al., ICML
2024: its Jacobi window is `hdlib.tiers.window`).

Each is a `DraftTier` with a `Tier` of its own, so it runs alone as a bench method (`recycling`,
`rest`, `suffix`, `lookahead`, at its published size) or in an HD order beside hdlib's tiers (`hd:CT`). The
settings follow the authors' code; where hdlib's index cannot do what theirs does, the docstring
says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hdlib.errors import HDError
from hdlib.tiers.base import Draft, DraftTier, Proposal, StepOutcome, Tier
from hdlib.tiers.guesses import Successors, check_width
from hdlib.tiers.statistics import StatisticsSettings, StatisticsTier
from hdlib.tiers.window import WINDOW_SOURCE, LookaheadWindow, WindowSettings

RECYCLING = Tier("recycling", "T", "#E69F00")  # Token Recycling: the model's own last top-8 successors
REST = Tier("rest", "E", "#D55E00")  # REST: continuations of the longest suffix found in a corpus
SUFFIX = Tier("suffix", "U", "#56B4E9")  # SuffixDecoding: suffix trees of the request and of earlier answers
LOOKAHEAD = Tier("lookahead", "L", "#AA8800")  # Lookahead decoding: the n-grams its Jacobi window harvested

# Token Recycling's static tree (version "2.2.2" of its authors' code): for each node, named by the
# successor ranks on its path from the root, how many children it has; a node's children are its
# token's successors of rank 0, 1, ... By depth: 8, 21, 25, 15, 8 and 3 nodes, 80 in all.
RECYCLING_BRANCHES: dict[str, int] = {
    "": 8,
    **{"0": 8, "1": 4, "2": 3, "3": 2, "4": 1, "5": 1, "6": 1, "7": 1},
    **{"00": 8, "01": 3, "02": 2, "03": 1, "04": 1, "05": 1, "06": 1, "07": 1, "10": 2, "11": 1},
    **{"20": 1, "30": 1, "40": 1, "50": 1},
    **{"000": 5, "001": 2, "002": 1, "003": 1, "004": 1, "010": 1, "020": 1, "100": 1, "200": 1, "300": 1},
    **{"0000": 3, "0001": 1, "0002": 1, "0010": 1, "0100": 1, "1000": 1},
    **{"00000": 2, "00010": 1},
}
RECYCLING_WIDTH = 8  # successors kept per token (the adjacency matrix's width)


def tree_template(branches: dict[str, int]) -> list[tuple[int, ...]]:
    """The nodes of a static tree as rank paths, breadth first (a parent before its children, and
    siblings in rank order): {"": 2, "0": 1} -> [(0,), (1,), (0, 0)]."""
    nodes: list[tuple[int, ...]] = []
    level: list[tuple[int, ...]] = [()]
    while level:
        level = [(*parent, rank) for parent in level for rank in range(branches.get(_name(parent), 0))]
        nodes += level
    unknown = set(branches) - {_name(n) for n in [(), *nodes]}
    if unknown:
        raise HDError(f"static tree: nodes without a parent in the tree: {sorted(unknown)}")
    return nodes


def _name(ranks: tuple[int, ...]) -> str:
    return "".join(str(r) for r in ranks)


class TokenRecyclingTier(DraftTier):
    """Token Recycling: for every token, the model's `width` most likely next tokens from the last
    pass in which the token was a node (an adjacency matrix refreshed from every pass, all nodes of
    the tree included); drafts fill a static tree breadth first from the newest token.

    As in the authors' code the table outlives a request (a hot start: what the model guessed in
    earlier answers drafts the next); `begin` keeps it, `clear` empties it. A tier made by name
    (`make_tier("recycling")`) starts empty; a bench run keeps one per method across its questions.
    Only the token itself keys the table (no token pairs: that is hdlib's model tier's refinement).
    """

    tier = RECYCLING

    def __init__(self, branches: dict[str, int] | None = None, width: int = RECYCLING_WIDTH) -> None:
        self.template = tree_template(RECYCLING_BRANCHES if branches is None else branches)
        if any(rank >= width for path in self.template for rank in path):
            raise HDError(f"token recycling: the static tree asks for successor ranks beyond the width {width}")
        # Unlike the recycled tier's (`hdlib.tiers.recycled`), its table is kept across requests.
        check_width(width)
        self.table = Successors(width)

    def clear(self) -> None:
        self.table.clear()

    def update(self, step: StepOutcome) -> None:
        self.table.update(step)

    def propose(self, context: Sequence[int], budget: int) -> list[Proposal]:
        """One proposal per node of the static tree the table can fill, breadth first, at most
        `budget`: a node's path from the root, each token with the model's probability of it."""
        filled: dict[tuple[int, ...], tuple[Draft, tuple[float, ...]]] = {(): ((), ())}
        found: list[Proposal] = []
        newest = int(context[-1])
        for ranks in self.template:
            if len(found) >= budget:
                break
            parent = filled.get(ranks[:-1])
            if parent is None:
                continue
            tokens, probs = parent
            order, guesses = self.table.guesses(tokens[-1] if tokens else newest)
            if ranks[-1] >= len(guesses):
                continue
            token, p = guesses[ranks[-1]]
            filled[ranks] = node = ((*tokens, token), (*probs, p))
            found.append(Proposal(node[0], key_length=order, source=RECYCLING.name, confidence=node[1]))
        return found

    def __repr__(self) -> str:
        return f"TokenRecyclingTier({len(self.template)}-node static tree, {len(self.table.table):,} keys)"


# REST's search, within what hdlib's statistics file is sorted by (16 tokens): REST tries suffixes
# of 16 down to 2 tokens and keeps the continuations of the longest one it finds; here 8 down to 2,
# continuations of 8 tokens. Of their trie, the most frequent nodes are verified (REST: 64).
REST_SETTINGS = StatisticsSettings(max_key=8, min_key=2, draft_len=8, fill=False)


class RestTier(StatisticsTier):
    """REST over hdlib's statistics database: the longest suffix of the context the corpus holds,
    its continuations merged into a trie, the most frequent nodes kept."""

    tier = REST

    @classmethod
    def over(cls, statistics: StatisticsTier, settings: StatisticsSettings | None = None) -> RestTier:
        """REST on the corpus (the same suffix array, not a copy) of an opened statistics tier."""
        return super().over(statistics, settings or REST_SETTINGS)  # type: ignore[return-value]  (a RestTier)


@dataclass(frozen=True)
class SuffixSettings:
    """SuffixDecoding's settings (vLLM's `suffix` method takes the same four)."""

    max_tree_depth: int = 24  # the longest pattern matched, and the deepest draft
    max_cached_requests: int = 10_000  # earlier answers the global tree keeps
    max_spec_factor: float = 1.0  # a draft may be this many times as long as the pattern it matched
    min_token_prob: float = 0.1  # nodes the tree estimates less likely than this are not drafted


class SuffixDecodingTier(DraftTier):
    """SuffixDecoding through Snowflake's `arctic-inference` (the authors' own C++ suffix trees): a
    tree over the request's prompt and output, and a global one over earlier answers, as a server
    keeps them. Each step the newest tokens are matched in both; the most frequent continuations
    form a tree whose size scales with the match (`max_spec_factor`), each node with the share of
    occurrences that go on with it. A new request (`begin`) puts the previous answer into the
    global tree."""

    tier = SUFFIX

    def __init__(self, settings: SuffixSettings | None = None) -> None:
        try:
            from arctic_inference.suffix_decoding import SuffixDecodingCache
        except ImportError as error:
            raise HDError(
                f"the suffix tier needs Snowflake's arctic-inference ({error}); `make setup` builds it "
                "(see docs/peers.md)"
            ) from None
        self.settings = s = settings or SuffixSettings()
        self.cache = SuffixDecodingCache(max_tree_depth=s.max_tree_depth, max_cached_requests=s.max_cached_requests)
        self._requests = 0
        self._active: int | None = None

    def begin(self, prompt: Sequence[int]) -> None:
        if self._active is not None:
            self.cache.stop_request(self._active)  # its answer stays in the global tree
        self._requests += 1
        self._active = self._requests
        self.cache.start_request(self._active, [int(t) for t in prompt])

    def update(self, step: StepOutcome) -> None:
        if self._active is not None:
            self.cache.add_active_response(self._active, [int(t) for t in step.tokens])

    def propose(self, context: Sequence[int], budget: int) -> list[Proposal]:
        """One proposal per node of the speculated tree (parents come first in it): the node's path
        from the root, each token with the tree's estimate of it."""
        if self._active is None:
            self.begin(context)
        s = self.settings
        pattern = [int(t) for t in context[-s.max_tree_depth :]]
        tree = self.cache.speculate(
            self._active, pattern, max_spec_tokens=budget, max_spec_factor=s.max_spec_factor,
            min_token_prob=s.min_token_prob, use_tree_spec=True,
        )  # fmt: skip
        paths: list[tuple[Draft, tuple[float, ...]]] = []
        for token, parent, prob in zip(tree.token_ids, tree.parents, tree.probs, strict=True):
            tokens, probs = paths[parent] if parent >= 0 else ((), ())
            paths.append(((*tokens, int(token)), (*probs, float(prob))))
        return [Proposal(t, key_length=int(tree.match_len), confidence=c) for t, c in paths[:budget]]


class LookaheadTier(DraftTier):
    """Lookahead decoding's drafts: the n-grams its Jacobi window (`hdlib.tiers.window`) harvested, found
    by the newest token, the most recent first: at most G drafts of N - 1 tokens (W = 7, N = 5, G = 7
    as Lookahead's defaults). The pool starts empty with each request, as in the authors' code, and
    only the window fills it (not the prompt, not the answer)."""

    tier = LOOKAHEAD

    def __init__(self, settings: WindowSettings | None = None) -> None:
        self.settings = settings or WindowSettings()
        self.window = self.rider = LookaheadWindow(self.settings)

    def begin(self, prompt: Sequence[int]) -> None:
        self.window.begin(prompt)

    def propose(self, context: Sequence[int], budget: int) -> list[Proposal]:
        grams = self.window.pool.get(context[-1])[: self.settings.guesses]
        found, left = [], budget
        for gram in grams:
            if left <= 0:
                break
            found.append(Proposal(gram[:left], key_length=1, source=WINDOW_SOURCE))
            left -= len(found[-1].tokens)
        return found
