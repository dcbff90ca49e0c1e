"""The model's choices after every node of a verified tree, from the pass's logits: its most likely
tokens and their probabilities (`model_choices`), exact ties settled as the argmax settles them. The
path greedy decoding accepts from them is the tree's own walk (`DraftTree.accepted_path`).

One computation serves greedy acceptance, the step's records and the recycled guesses, so that all
three name the same token. The probabilities need the softmax's normalizer over the whole
vocabulary, an exponential of every logit: the largest part of the step's work outside the forward
pass on a CPU, written into a buffer kept from step to step (`SoftmaxBuffer`).
"""

from __future__ import annotations

import functools

import torch


def model_choices(
    logits: torch.Tensor, k: int, out: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The model's most likely tokens after each row of (N, V) `logits`, on the logits' device: (N, K)
    token ids best first, their probabilities (float32 softmax), and (N,) whether the two best are
    tied, K = max(k, 2). `out`, a float32 (N, V) tensor, takes the softmax (see `SoftmaxBuffer`).

    Column 0 is the greedy choice: the token acceptance compares the drafts with, the step's records
    and the recycled guesses all come from this one computation. Where no row is tied it is the
    argmax; `topk` orders exact ties as it likes (common in bfloat16), so a step that meets a tie
    calls `settle_ties`, which puts the argmax (the first of equal maxima) first.
    """
    values, indices = top_tokens(logits, max(k, 2))
    # softmax, then the K picked: on a CPU logsumexp over the vocabulary costs several softmaxes
    probs = torch.softmax(logits, dim=-1, dtype=torch.float32, out=out).gather(1, indices)
    return indices, probs, values[:, 0] == values[:, 1]


class SoftmaxBuffer:
    """A float32 (N, V) tensor for `model_choices`' softmax, kept from step to step and grown as
    needed. On a CPU a fresh tensor of rows x vocabulary each step is new pages each time, and their
    page faults cost a large share of the softmax itself."""

    def __init__(self) -> None:
        self._flat: torch.Tensor | None = None

    def like(self, logits: torch.Tensor) -> torch.Tensor:
        n, v = logits.shape
        flat = self._flat
        if flat is None or flat.numel() < n * v or flat.device != logits.device:
            flat = self._flat = torch.empty(n * v, dtype=torch.float32, device=logits.device)
        return flat[: n * v].view(n, v)


TOP_BLOCK = 64  # vocabulary entries per block in `top_tokens`


def top_tokens(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The `k` largest values of each row of (N, V) `logits` and their indices, best first: the values
    of `topk`, found in blocks.

    Each row is cut into blocks of TOP_BLOCK; the k largest values lie in the k blocks with the
    largest maxima (a block holding one of them has a maximum at least the k-th value, and at most k
    blocks can), so `topk` runs over the block maxima and then over those k blocks only. A row's
    maximum is one fast vectorised pass; `topk` and `argmax` over the whole vocabulary are each
    several times slower on a CPU. Among equal values the order is unspecified, as with `topk` (see `settle_ties`).
    """
    n, v = logits.shape
    if v % TOP_BLOCK or v < 4 * k * TOP_BLOCK:
        return logits.topk(k, dim=-1)
    chosen = logits.view(n, v // TOP_BLOCK, TOP_BLOCK).amax(dim=-1).topk(k, dim=-1).indices  # (N, k) blocks
    # The vocabulary ids of the chosen blocks' entries, (N, k * TOP_BLOCK); the k largest among them.
    candidates = (chosen[:, :, None] * TOP_BLOCK + _block_offsets(logits.device)).view(n, k * TOP_BLOCK)
    values, where = logits.gather(1, candidates).topk(k, dim=-1)
    return values, candidates.gather(1, where)


@functools.cache
def _block_offsets(device: torch.device) -> torch.Tensor:
    return torch.arange(TOP_BLOCK, device=device)


def settle_ties(logits: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """`indices` (from `model_choices`) with each row's argmax first: a tied token `topk` put first
    changes places with it (their values are equal, so the order of values holds); where `topk`
    left the argmax out (more tied tokens than columns), it replaces column 0."""
    choice = logits.argmax(dim=-1)
    indices = indices.clone()
    where = indices == choice[:, None]
    column = where.to(torch.int32).argmax(dim=-1)  # where topk put the argmax; 0 where it left it out
    rows = torch.arange(indices.shape[0], device=indices.device)
    indices[rows, column] = torch.where(where.any(dim=-1), indices[:, 0], indices[rows, column])
    indices[:, 0] = choice
    return indices
