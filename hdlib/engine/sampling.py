"""Lossless sampling: the warpers, and the two rules that accept drafts over a tree.

Plain sampling and HD share everything here. The target's distribution at a node is `warp(logits)`:
temperature, then top-k, then top-p, as transformers applies them. A step walks the tree from the
root, and a rule decides at each node which child (if any) the walk moves down to; where it stops,
the step's last token is drawn. Two rules, both exact (every emitted token is drawn from the
target's distribution given the accepted text before it, as in plain sampling):

`"gumbel"`, the default: **the same sample as plain sampling.** Each position of the text has its own
randomness, a pure function of the seed and the position (Gumbel noise from the counter-based Philox
generator, keyed by the two), and the token at a position is `argmax(log p + noise)`, the Gumbel-max
trick: a draw from p. A node's sample is computed from its own distribution and the noise of the
position after it, and a drafted child is accepted exactly when it is that token. Nothing depends on
the drafts, so HD's answer is, token for token, plain sampling's answer for the same seed, whatever
the tiers, their order, the budget, the acceptance prior or the machine's load. Drafts are
deterministic, so a node keeps one of its children with probability the sum of their probabilities,
as under the rejection rule: acceptance is the same. The idea is drafter-invariant speculative
decoding by a Gumbel coupling: M. Daliri, C. Musco, A. T. Suresh, "Coupling without Communication and
Drafter-Invariant Speculative Decoding" (arXiv:2408.07978, 2024); Gumbel-max: E. J. Gumbel (1954),
as used by Maddison, Tarlow and Minka, "A* Sampling" (NeurIPS 2014); Philox: Salmon et al., "Parallel
Random Numbers: As Easy as 1, 2, 3" (SC 2011).

`"rejection"`: **the same distribution**, recursive rejection sampling. At each node the residual
distribution starts as the node's warped distribution; its children are tried in the drafter's
order, child x accepted with probability residual(x) (the residual normalised); a rejected x is
removed from the residual. If a child is accepted the walk moves down to it; if every child is
rejected (or the node has none) the step's last token is drawn from what is left of the residual.
Why it is exact: drafts are deterministic (a tier proposes tokens, it does not sample them), so
"accept x with probability p(x), else remove x and renormalise" is just a way of drawing from p one
candidate at a time: P(first child) = p(x1), P(second) = (1 - p(x1)) p(x2) / (1 - p(x1)) = p(x2),
and so on, the rest of the mass going to the final draw. It consumes its random numbers one per
tried draft, then one final draw, so the n-th random number means something else for every tree:
the same seed gives another answer than plain sampling, and another again when the tree changes
(the value-ranked tree weighs measured times and a prior that learns across runs).

`reject_step` is the one step the rejection sampler takes at a candidate (`Sampler.walk` takes another).
The statistics that show, on fixed distributions and without a model, that both rules emit exactly
the target distribution and that a broken rule does not, are the teaching module's
(`hdlib.viz.sampling`): they drive this `Sampler` rather than walk a tree of their own.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from hdlib.engine.tree import DraftTree
from hdlib.errors import HDError


@dataclass(frozen=True)
class Warp:
    """How logits become the distribution tokens are drawn from. temperature 0 means greedy."""

    temperature: float = 0.0
    top_p: float = 1.0  # keep the smallest set of most likely tokens holding this much mass; 1 keeps all
    top_k: int = 0  # keep the k most likely tokens (ties at the k-th kept too); 0 keeps all

    def __post_init__(self) -> None:
        if (
            not isinstance(self.temperature, (int, float))
            or not self.temperature >= 0
            or self.temperature == float("inf")
        ):
            raise HDError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        if not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1:
            raise HDError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.top_k, int) or isinstance(self.top_k, bool) or self.top_k < 0:
            raise HDError(f"top_k must be an integer >= 0 (0 keeps every token), got {self.top_k!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        """Probabilities over the last dimension of `logits` (float64; rows sum to 1)."""
        if self.greedy:
            raise HDError("temperature 0 is greedy decoding: there is no distribution to sample from")
        scores = logits.to(torch.float64) / self.temperature
        if self.top_k and self.top_k < scores.shape[-1]:
            kth = scores.topk(self.top_k, dim=-1).values[..., -1:]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        probs = scores.softmax(dim=-1)
        return nucleus(probs, self.top_p) if self.top_p < 1 else probs


NUCLEUS_START = 256  # candidates a nucleus is first looked for among; 16 times more at each miss


def nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """`probs` cut to the smallest set of most likely tokens holding `top_p`, renormalised.

    Sorting the whole vocabulary for every visited node costs milliseconds a node, and more the
    larger the vocabulary (`benchmarks/engine_traps.py` measures it); the nucleus is usually small,
    so it is looked for among the most likely few hundred first, among more only where they hold
    less than `top_p`. A token is kept when the mass ranked before it is below `top_p` (the most likely
    always is).
    """
    vocab = probs.shape[-1]
    k = min(vocab, NUCLEUS_START)
    while True:
        top, order = probs.topk(k, dim=-1)  # sorted, most likely first
        if k == vocab or bool((top.sum(dim=-1) >= top_p).all()):
            break  # every row's nucleus lies within its k most likely tokens
        k = min(vocab, 16 * k)
    mass_before = top.cumsum(dim=-1) - top
    kept = torch.zeros_like(probs).scatter_(-1, order, top.masked_fill(mass_before >= top_p, 0.0))
    return kept / kept.sum(dim=-1, keepdim=True)


RejectStep = Callable[[torch.Tensor, int], tuple[float, torch.Tensor]]  # (residual, token) -> (accept, rest)


def reject_step(residual: torch.Tensor, token: int) -> tuple[float, torch.Tensor]:
    """The rule at one candidate: (probability of accepting `token`, the residual if it is rejected).

    `residual` is a non-negative, unnormalised distribution; it is not modified.
    """
    total = float(residual.sum())
    if total <= 0:
        raise HDError("internal error: the residual distribution is empty")
    accept = float(residual[token]) / total
    rest = residual.clone()
    rest[token] = 0.0
    return accept, rest


SAMPLING_RULES = ("gumbel", "rejection")  # the first is the default (see the module docstring)


def check_rule(rule: str) -> str:
    if rule not in SAMPLING_RULES:
        raise HDError(
            f"sampling rule must be one of {', '.join(SAMPLING_RULES)} (gumbel: the same sample as plain "
            f"sampling for a seed; rejection: recursive rejection sampling, the same distribution), got {rule!r}"
        )
    return rule


def position_noise(seed: int, position: int, vocab: int) -> torch.Tensor:
    """Gumbel noise (vocab,) float64 for one position of the text: a pure function of (seed, position),
    drawn by Philox keyed by the two, so any position's noise is had without drawing the others'."""
    generator = np.random.Generator(np.random.Philox(key=np.array([seed, position], dtype=np.uint64)))
    uniform = torch.from_numpy(generator.random(vocab))  # [0, 1): 0 gives -inf noise, a token never drawn
    return uniform.log_().neg_().log_().neg_()  # -log(-log u), in place (torch's log is the faster here)


def gumbel_token(probs: torch.Tensor, noise: torch.Tensor) -> int:
    """The Gumbel-max draw: the token maximising log p + noise (p as `Warp` gives it, float64)."""
    return int((probs.log() + noise).argmax())


class Sampler:
    """Draws a step's accepted path and last token from the tree's logits, by `rule` with `seed`.

    The randomness lives on the CPU and only the rows of the nodes the walk visits are warped and
    copied there, so the same seed gives the same answer on every device with the same logits.
    """

    def __init__(self, warp: Warp, seed: int | None = None, rule: str = SAMPLING_RULES[0]) -> None:
        if warp.greedy:
            raise HDError("a Sampler needs temperature > 0; temperature 0 is greedy decoding")
        self.warp = warp
        self.seed = secrets.randbits(63) if seed is None else int(seed)
        self.rule = check_rule(rule)
        self.generator = torch.Generator().manual_seed(self.seed)  # the rejection rule's stream

    def _uniform(self) -> float:
        return float(torch.rand((), generator=self.generator, dtype=torch.float64))

    def draw(self, residual: torch.Tensor) -> int:
        return int(torch.multinomial(residual / residual.sum(), 1, generator=self.generator))

    def accept(
        self, tree: DraftTree, logits: torch.Tensor, past_len: int, trials: dict[int, float] | None = None
    ) -> tuple[list[int], int]:
        """The accepted node indices (root first) and the token drawn after the last of them. The
        root is token `past_len` of the text (0-based), so the token after node n is token
        `past_len + 1 + depth(n)`. Each node tried, with the probability it had of being accepted
        once its parent was reached, goes into `trials`."""
        return self.walk(tree, lambda node: self.warp(logits[node].detach().cpu()), past_len + 1, trials)

    def walk(
        self,
        tree: DraftTree,
        distribution: Callable[[int], torch.Tensor],
        first_position: int,
        trials: dict[int, float] | None = None,
        step: RejectStep | None = None,
    ) -> tuple[list[int], int]:
        """The walk down `tree` by the sampler's rule; `distribution(node)` is the warped
        distribution after a node, `first_position` the position of the token after the root. The
        rejection rule takes `step` at each candidate (a teaching figure passes a broken one, to show
        what a lossy rule looks like: `hdlib.viz.sampling`)."""
        if self.rule == "rejection":
            return self._reject_walk(tree, distribution, trials, step or reject_step)
        return self._gumbel_walk(tree, distribution, first_position, trials)

    def _gumbel_walk(
        self,
        tree: DraftTree,
        distribution: Callable[[int], torch.Tensor],
        first_position: int,
        trials: dict[int, float] | None,
    ) -> tuple[list[int], int]:
        path = [0]
        while True:
            node = path[-1]
            probs = distribution(node)
            token = gumbel_token(probs, position_noise(self.seed, first_position + len(path) - 1, probs.shape[-1]))
            if trials is not None:
                trials.update((child, float(probs[tree.tokens[child]])) for child in tree.children(node))
            chosen = tree.child(node, token)
            if chosen is None:
                return path, token
            path.append(chosen)

    def _reject_walk(
        self,
        tree: DraftTree,
        distribution: Callable[[int], torch.Tensor],
        trials: dict[int, float] | None,
        step: RejectStep,
    ) -> tuple[list[int], int]:
        """(The rejection rule's random numbers are not tied to positions.)"""
        path = [0]
        while True:
            residual = distribution(path[-1])
            for child in tree.children(path[-1]):
                accept, rest = step(residual, tree.tokens[child])
                if trials is not None:
                    trials[child] = accept
                if self._uniform() < accept:
                    path.append(child)
                    break
                residual = rest
            else:
                return path, self.draw(residual)
