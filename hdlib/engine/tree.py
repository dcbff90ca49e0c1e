"""Drafts as a trie, and the tensors that let the target model verify the whole trie in one pass.

Node 0 is the root: the newest token of the context, not yet in the KV cache. Every other node is a
draft token; a node's parent is the token before it. Nodes are numbered in the order they were
added, so a parent always comes before its children and the order is the drafter's priority.

`tree_buffers` turns a trie into what one forward pass needs (Medusa's "tree buffers"):

    input_ids        (N,)        the node tokens
    position_ids     (N,)        past_len + depth: siblings share a position
    ancestors        (N, N)      bool, node i may attend to node j (j is i or an ancestor of i)

It is a pure function with an explicit device, so a notebook can draw the mask on the CPU. A tier's
rider (`hdlib.tiers.rider`: the Lookahead window) rides in the same pass as M rows after the tree's
N: they see the root and each other as the rider says, and no tree node sees them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from hdlib.tiers.base import Tier
from hdlib.tiers.rider import RiderRows


@dataclass
class DraftTree:
    """A trie of draft tokens. Node 0 is the root (the newest context token)."""

    root: int
    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    tiers: list[Tier | None] = field(default_factory=list)
    key_lengths: list[int] = field(default_factory=list)  # context tokens the node's draft matched on
    sources: list[str] = field(default_factory=list)  # the part of its tier that drafted the node
    confidences: list[float] = field(default_factory=list)  # the tier's own estimate for the node; -1: none
    # The tiers (and parts) that proposed each node: the first one, then any other that drafted it too.
    proposers: list[set[tuple[Tier | None, str]]] = field(default_factory=list, repr=False)
    _children: list[dict[int, int]] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if not self.tokens:
            self.tokens, self.parents, self.tiers = [self.root], [-1], [None]
            self.key_lengths, self.sources, self.confidences, self._children = [0], [""], [1.0], [{}]
            self.proposers = [set()]

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def n_drafted(self) -> int:
        return len(self.tokens) - 1

    def add(
        self,
        draft: Sequence[int],
        tier: Tier,
        max_new: int,
        max_depth: int,
        key_length: int = 0,
        source: str = "",
        confidence: Sequence[float] = (),
    ) -> int:
        """Insert a draft below the root; return how many new nodes it made.

        A prefix already in the trie is shared, and its nodes keep the tier that added them first
        (the higher tier). At most `max_new` nodes are added and no node goes deeper than
        `max_depth`, so a draft may be cut.
        """
        node, added = 0, 0
        for i, token in enumerate(draft[:max_depth]):
            child = self._shared(node, token)
            if child is None:
                if added == max_new:
                    break
                child = len(self.tokens)
                self.tokens.append(token)
                self.parents.append(node)
                self.tiers.append(tier)
                self.key_lengths.append(key_length)
                self.sources.append(source)
                self.confidences.append(confidence[i] if i < len(confidence) else -1.0)
                self.proposers.append(set())
                self._children.append({})
                self._link(node, token, child)
                added += 1
            self.proposers[child].add((tier, source))
            node = child
        return added

    @property
    def depths(self) -> list[int]:
        """Every node's depth (the root's 0), derived from `parents` (a parent comes before its child)."""
        depths = [0]
        for parent in self.parents[1:]:
            depths.append(depths[parent] + 1)
        return depths

    def depth(self, node: int) -> int:
        """How many edges from the root to `node`."""
        depth = 0
        while node > 0:
            node, depth = self.parents[node], depth + 1
        return depth

    def _shared(self, node: int, token: int) -> int | None:
        """The node a draft's `token` after `node` goes to, where the tree has it already: a trie
        shares every prefix."""
        return self._children[node].get(token)

    def _link(self, parent: int, token: int, child: int) -> None:
        self._children[parent][token] = child

    def child(self, node: int, token: int) -> int | None:
        """The child of `node` with this token."""
        return self._children[node].get(token)

    def children(self, node: int) -> list[int]:
        """The children of `node`, in the order they were added (the drafter's priority)."""
        return list(self._children[node].values())

    def accepted_path(self, choices: Sequence[int]) -> list[int]:
        """The nodes greedy decoding accepts, root first, given the model's choice after every node:
        from the root, the child whose token is the model's choice after its parent, as long as
        there is one (a trie has at most one child per token, so this is the longest root path whose
        every draft token is the model's choice)."""
        path = [0]
        while (child := self.child(path[-1], choices[path[-1]])) is not None:
            path.append(child)
        return path

    def path_to(self, node: int) -> list[int]:
        """Node indices from the root to `node`, both included."""
        path = []
        while node >= 0:
            path.append(node)
            node = self.parents[node]
        return path[::-1]

    def leaves(self) -> list[int]:
        return [i for i, kids in enumerate(self._children) if not kids]

    def agreement(self, node: int) -> int:
        """How many tiers (or parts of one) besides the first also drafted this node."""
        return max(len(self.proposers[node]) - 1, 0)

    def proposing_tiers(self, node: int) -> frozenset[Tier]:
        """Every tier that drafted this node (its parts merged: a tier fed by a window is one tier)."""
        return frozenset(tier for tier, _ in self.proposers[node] if tier is not None)

    def sibling_rank(self, node: int) -> int:
        """0 for the first child its parent got, 1 for the second, ... (the root: 0)."""
        parent = self.parents[node]
        return 0 if parent < 0 else self.children(parent).index(node)

    def previous_tokens(self, before_root: int = -1) -> list[int]:
        """The token before each node: its parent's, and for the root `before_root` (the context token
        before it; -1: none)."""
        return [before_root, *(self.tokens[p] for p in self.parents[1:])]

    def subtree(self, keep: Sequence[int]) -> DraftTree:
        """The tree of the nodes `keep` (closed under ancestors; the root is always kept), in node
        order, of this tree's kind."""
        kept = sorted(set(keep) | {0})
        new = {old: i for i, old in enumerate(kept)}
        tree = type(self)(root=self.root)
        for old in kept[1:]:
            if self.parents[old] not in new:
                raise ValueError(f"node {old} is kept without its parent {self.parents[old]}")
            parent = new[self.parents[old]]
            tree.tokens.append(self.tokens[old])
            tree.parents.append(parent)
            tree.tiers.append(self.tiers[old])
            tree.key_lengths.append(self.key_lengths[old])
            tree.sources.append(self.sources[old])
            tree.confidences.append(self.confidences[old])
            tree.proposers.append(self.proposers[old])
            tree._children.append({})
            tree._link(parent, self.tokens[old], new[old])
        return tree


@dataclass(frozen=True)
class TreeBuffers:
    input_ids: torch.Tensor  # (N,) long
    position_ids: torch.Tensor  # (N,) long
    ancestors: torch.Tensor  # (N, N) bool


def ancestor_matrix(parents: Sequence[int]) -> np.ndarray:
    """(N, N) bool: row i is True at i and at every ancestor of i. Parents precede children."""
    n = len(parents)
    anc = np.zeros((n, n), dtype=bool)
    for i in range(n):
        if parents[i] >= 0:
            anc[i] = anc[parents[i]]
        anc[i, i] = True
    return anc


def tree_buffers(
    tree: DraftTree, past_len: int, device: torch.device | str, rider: RiderRows | None = None
) -> TreeBuffers:
    """The trie's tensors on `device` (with a rider's rows after the tree's), built on the host and
    copied in one transfer (pinned and asynchronous on CUDA): the three are views of one int64 buffer
    there."""
    n = len(tree)
    m = len(rider) if rider is not None else 0
    rows = n + m
    packed = np.zeros(2 * rows + rows * rows, dtype=np.int64)
    packed[:n] = tree.tokens
    packed[rows : rows + n] = np.asarray(tree.depths, dtype=np.int64) + past_len
    ancestors = packed[2 * rows :].reshape(rows, rows)
    ancestors[:n, :n] = ancestor_matrix(tree.parents)
    if rider is not None:
        packed[n:rows] = rider.tokens
        packed[rows + n : 2 * rows] = np.asarray(rider.offsets, dtype=np.int64) + past_len
        ancestors[n:, 0] = 1  # the root
        ancestors[n:, n:] = rider.sees
    host = torch.from_numpy(packed)
    device = torch.device(device)
    if device.type == "cuda":
        on_device = host.pin_memory().to(device, non_blocking=True)
    else:
        on_device = host.to(device)
    return TreeBuffers(
        input_ids=on_device[:rows],
        position_ids=on_device[rows : 2 * rows],
        ancestors=on_device[2 * rows :].view(rows, rows).bool(),
    )
