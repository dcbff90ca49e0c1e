"""The field's database drafters as tiers, so that hdlib's engine verifies them and only the drafting
differs: Token Recycling (Luo et al., 2024) and REST (He et al., NAACL 2024).

Each is a `DraftTier` with a `Tier` of its own, so it runs alone as a bench method (`recycling`,
`rest`, at its published tree size) or in an HD order beside hdlib's tiers (`hd:CR`). The settings
follow the authors' code; where hdlib's index cannot do what theirs does, the docstring says so.
"""

from __future__ import annotations

from collections.abc import Sequence

from hdlib.errors import HDError
from hdlib.tiers.base import Draft, DraftTier, ModelGuesses, Proposal, Tier
from hdlib.tiers.recycling import Successors
from hdlib.tiers.statistics import StatisticsSettings, StatisticsTier

RECYCLING = Tier("recycling", "T", "#E69F00")  # Token Recycling: the model's own last top-8 successors
REST = Tier("rest", "E", "#D55E00")  # REST: continuations of the longest suffix found in a corpus

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
        self.successors = Successors(width)
        self.successors_wanted = width

    def clear(self) -> None:
        self.successors.clear()

    def observe_model(self, guesses: ModelGuesses) -> None:
        self.successors.observe(guesses)

    def lookup(self, context: Sequence[int], budget: int) -> list[Draft]:
        return [p.tokens for p in self.propose(context, budget)]

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
            order, guesses = self.successors.guesses(tokens[-1] if tokens else newest)
            if ranks[-1] >= len(guesses):
                continue
            token, p = guesses[ranks[-1]]
            filled[ranks] = node = ((*tokens, token), (*probs, p))
            found.append(Proposal(node[0], key_length=order, source=RECYCLING.name, confidence=node[1]))
        return found

    def __repr__(self) -> str:
        return f"TokenRecyclingTier({len(self.template)}-node static tree, {len(self.successors.table):,} keys)"


# REST's search, within what hdlib's statistics file is sorted by (16 tokens): REST tries suffixes
# of 16 down to 2 tokens and keeps the continuations of the longest one it finds; here 8 down to 2,
# continuations of 8 tokens. Of their trie, the most frequent nodes are verified (REST: 64).
REST_SETTINGS = StatisticsSettings(max_key=8, min_key=2, draft_len=8, fill=False)


class RestTier(StatisticsTier):
    """REST over hdlib's statistics database: the longest suffix of the context the corpus holds,
    its continuations merged into a trie, the most frequent nodes kept."""

    tier = REST

    @classmethod
    def over(cls, statistics: StatisticsTier, settings: StatisticsSettings = REST_SETTINGS) -> RestTier:
        """REST on the corpus (the same suffix array, not a copy) of an opened statistics tier."""
        return cls(statistics.index, settings, statistics.meta)
