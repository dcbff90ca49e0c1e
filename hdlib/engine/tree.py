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
from typing import TypeVar

import numpy as np
import torch

from hdlib.tiers.base import Proposal, Tier, proposal
from hdlib.tiers.rider import RiderRows

T = TypeVar("T", bound="DraftTree")


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

    def add(self, draft: Proposal | Sequence[int], tier: Tier, max_new: int = 1 << 30, max_depth: int = 1 << 30) -> int:
        """Insert a tier's draft (a `Proposal`, or plain token ids) below the root; return how many
        new nodes it made.

        A prefix already in the trie is shared, and its nodes keep the tier that added them first
        (the higher tier). At most `max_new` nodes are added and no node goes deeper than
        `max_depth`, so a draft may be cut.

        >>> tree = DraftTree(root=1)
        >>> tree.add((2, 3), Tier.CONTEXT), tree.add((2, 4), Tier.MODEL)
        (2, 1)
        >>> tree.tokens, tree.parents, [str(t) for t in tree.tiers]
        ([1, 2, 3, 4], [-1, 0, 1, 1], ['None', 'context', 'context', 'model'])
        """
        p = proposal(draft)
        node, added = 0, 0
        for i, token in enumerate(p.tokens[:max_depth]):
            child = self.child(node, token)
            if child is None:
                if added == max_new:
                    break
                confidence = p.confidence[i] if i < len(p.confidence) else -1.0
                child = self.add_node(node, token, tier, p.key_length, p.source, confidence, set())
                added += 1
            self.proposers[child].add((tier, p.source))
            node = child
        return added

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
        """Append one node below `parent` and return its index; it becomes the parent's child by its
        token unless the parent has one already (a trie never makes a second: `add` shares it)."""
        index = len(self.tokens)
        self.tokens.append(token)
        self.parents.append(parent)
        self.tiers.append(tier)
        self.key_lengths.append(key_length)
        self.sources.append(source)
        self.confidences.append(confidence)
        self.proposers.append({(tier, source)} if proposers is None else proposers)
        self._children.append({})
        self._children[parent].setdefault(token, index)
        return index

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
        every draft token is the model's choice).

        >>> tree = DraftTree(root=1)
        >>> tree.add((2, 3), Tier.CONTEXT), tree.add((2, 4), Tier.MODEL)
        (2, 1)
        >>> tree.accepted_path(choices=[2, 4, 0, 9])  # after 1 the model says 2, after 2 it says 4
        [0, 1, 3]
        """
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
        """The trie of the nodes `keep` (closed under ancestors; the root is always kept), in node
        order.

        >>> tree = DraftTree(root=1)
        >>> tree.add((2, 3), Tier.CONTEXT), tree.add((4,), Tier.MODEL)
        (2, 1)
        >>> tree.subtree([1, 3]).tokens
        [1, 2, 4]
        """
        return self.copy_into(DraftTree(root=self.root), keep)

    def copy_into(self, tree: T, keep: Sequence[int]) -> T:
        """`tree` (empty, with this tree's root) given the nodes `keep` (closed under ancestors; the
        root is always kept) in node order, each through its `add_node`, with all it knew of them."""
        kept = sorted(set(keep) | {0})
        new = {old: i for i, old in enumerate(kept)}
        for old in kept[1:]:
            if self.parents[old] not in new:
                raise ValueError(f"node {old} is kept without its parent {self.parents[old]}")
            tree.add_node(
                new[self.parents[old]], self.tokens[old], self.tiers[old], self.key_lengths[old],
                self.sources[old], self.confidences[old], self.proposers[old],
            )  # fmt: skip
        return tree


@dataclass(frozen=True)
class TreeBuffers:
    input_ids: torch.Tensor  # (N,) long
    position_ids: torch.Tensor  # (N,) long
    ancestors: torch.Tensor  # (N, N) bool


def ancestor_matrix(parents: Sequence[int]) -> np.ndarray:
    """(N, N) bool: row i is True at i and at every ancestor of i. Parents precede children: the
    tree attention mask, where node i sees the cache and the nodes its row marks.

    >>> ancestor_matrix([-1, 0, 1, 0]).astype(int)
    array([[1, 0, 0, 0],
           [1, 1, 0, 0],
           [1, 1, 1, 0],
           [1, 0, 0, 1]])
    """
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
