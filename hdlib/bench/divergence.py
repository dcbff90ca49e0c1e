"""Where two greedy answers part, and whether the model's choice there was a near-tie.

HD's greedy answer is plain decoding's token for token when both compute the same logits. They do
not quite: the tree pass and plain decoding's one-token pass multiply matrices of other shapes, and
the kernels sum in other orders. In float32 on a CPU the difference has never changed an argmax in
this project's tests; in bfloat16 it does wherever the model's two best tokens are closer than the
rounding, and the answers part from there. This module tells the two cases apart, after the fact:

- `first_divergence(a, b)`: the first position where two token lists differ;
- `next_logits(model, context)`: the baseline's logits at that position, recomputed as plain
  decoding computes them (the context but its last token prefilled, then a one-token pass over the
  last), in the model's own dtype and on its device;
- `logit_gap(logits, expected, got)`: the two best logits there, how far apart they are, and how far
  the other answer's token lies below the best;
- `classify(gap, dtype, magnitude)`: "near-tie" or "divergence".

The rule (`near_tie_bound`): a parting is a near-tie when the other answer's token lies at most

    bound = max(1e-4, 2 * eps(dtype) * |best logit|)

below the best logit of plain decoding there, where eps is the dtype's machine epsilon (2**-7 for
bfloat16, 2**-10 for float16, 2**-23 for float32): two to four units in the last place of the best
logit in that dtype, since rounding the two logits alone moves their gap by up to one. In float32 the
1e-4 floor is what counts (about 5e-6 is 2 eps at a logit of 20): room for kernels that sum in
another order, far below the gaps an argmax has in practice. When the other token is the runner-up,
the distance is the gap between the two best logits; when it ranks lower, the distance is larger than
that gap, and it is the distance that is classified. Beyond the bound the parting is a
"divergence": in float32 a bug, in half precision more than the last rounding explains.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from transformers import PreTrainedModel

from hdlib.engine.tree import DraftTree
from hdlib.engine.verifier import Verifier
from hdlib.models.loading import dtype_name

NEAR_TIE = "near-tie"
DIVERGENCE = "divergence"
ABSOLUTE_FLOOR = 1e-4  # logits apart by less than this are a tie in any dtype
EPS_FACTOR = 2.0  # the bound in units of eps(dtype) times the best logit's magnitude


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index where `a` and `b` differ; the shorter one's length when it is a prefix of the
    other; None when they are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def near_tie_bound(dtype: torch.dtype | str, magnitude: float) -> float:
    """The widest distance below the best logit (of size `magnitude`) that is a near-tie in `dtype`."""
    eps = torch.finfo(getattr(torch, dtype_name(dtype))).eps
    return max(ABSOLUTE_FLOOR, EPS_FACTOR * eps * abs(magnitude))


def classify(gap: float, dtype: torch.dtype | str, magnitude: float) -> str:
    """"near-tie" when `gap` (how far the other token lies below the best logit) is within
    `near_tie_bound(dtype, magnitude)`, else "divergence"."""
    return NEAR_TIE if gap <= near_tie_bound(dtype, magnitude) else DIVERGENCE


@dataclass(frozen=True)
class Gap:
    """The logits of one position, as far as a parting needs them."""

    best: float  # the largest logit
    second: float  # the runner-up's
    expected_logit: float  # the baseline's token's
    got_logit: float  # the other answer's token's
    got_rank: int  # 0: the other token is the best, 1: the runner-up, ...

    @property
    def gap(self) -> float:
        """The two best logits apart."""
        return self.best - self.second

    @property
    def distance(self) -> float:
        """How far the other answer's token lies below the best logit (the gap when it is the runner-up)."""
        return self.best - self.got_logit


def logit_gap(logits: torch.Tensor, expected: int, got: int) -> Gap:
    """`logits` (V,): the baseline chose `expected`, the other answer `got`. Read in float64 from the
    dtype the model computed in (every bfloat16 value is exact in float64)."""
    row = logits.detach().to("cpu", torch.float64)
    top = row.topk(2).values.tolist()
    rank = int((row > row[got]).sum())
    return Gap(top[0], top[1], float(row[expected]), float(row[got]), rank)


@torch.inference_mode()
def next_logits(model: PreTrainedModel, context: Sequence[int]) -> torch.Tensor:
    """(V,) the logits after `context` (prompt and answer so far) as plain decoding computes them:
    all but the last token prefilled, then a one-token pass; the model's dtype, on its device."""
    if not context:
        raise ValueError("next_logits needs at least one token of context")
    verifier = Verifier(model)
    verifier.prefill(list(context[:-1]))
    _, logits = verifier.logits(DraftTree(root=int(context[-1])), len(context) - 1)
    return logits[0]


@dataclass(frozen=True)
class Divergence:
    """Where an answer parts from the baseline's (plain decoding's), and the baseline's logits there."""

    position: int  # index in the answers of the first token that differs
    expected: int  # the baseline's token there; -1 when the baseline had ended
    got: int  # the other answer's token there; -1 when it had ended
    dtype: str  # what the model computed in
    gap: float | None = None  # the baseline's two best logits there, apart; None: not computed
    distance: float | None = None  # the best logit minus the other token's (the gap for the runner-up)
    got_rank: int | None = None  # the other token's rank in the baseline's logits (1: the runner-up)
    magnitude: float | None = None  # |best logit|
    bound: float | None = None  # `near_tie_bound(dtype, magnitude)`
    kind: str = DIVERGENCE  # NEAR_TIE only when `distance` <= `bound`

    @property
    def near_tie(self) -> bool:
        return self.kind == NEAR_TIE

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> Divergence:
        def number(key: str) -> float | None:
            return None if row.get(key) is None else float(row[key])

        rank = row.get("got_rank")
        return cls(
            int(row["position"]), int(row["expected"]), int(row["got"]), str(row["dtype"]),
            number("gap"), number("distance"), None if rank is None else int(rank),
            number("magnitude"), number("bound"), str(row.get("kind", DIVERGENCE)),
        )  # fmt: skip

    def describe(self) -> str:
        """"token 17: 523 vs 87, gap 0.0625, 2nd, bound 0.25 (bfloat16): near-tie"."""
        head = f"token {self.position}: {self.expected} vs {self.got}"
        if self.distance is None:
            return f"{head} (logits not compared): {self.kind}"
        rank = "best" if self.got_rank == 0 else "2nd" if self.got_rank == 1 else f"rank {self.got_rank}"
        below = "" if self.got_rank == 1 else f", {self.distance:.4g} below the best"
        return f"{head}, gap {self.gap:.4g} ({rank}{below}), bound {self.bound:.3g} ({self.dtype}): {self.kind}"


def explain(
    model: PreTrainedModel, prompt_ids: Sequence[int], baseline: Sequence[int], other: Sequence[int]
) -> Divergence | None:
    """Where `other` (an answer to `prompt_ids`) parts from `baseline` (plain greedy decoding's), and
    whether that is a near-tie (module docstring); None when they are equal. One forward pass over
    the prompt and the common prefix, in the model's dtype: untimed work, done after the answers."""
    found = locate(baseline, other, model.dtype)
    if found is None or found.expected < 0 or found.got < 0:
        return found  # equal, or one answer stopped: no two tokens to weigh
    at, dtype = found.position, found.dtype
    g = logit_gap(next_logits(model, [*prompt_ids, *baseline[:at]]), found.expected, found.got)
    magnitude = abs(g.best)
    bound = near_tie_bound(dtype, magnitude)
    kind = classify(g.distance, dtype, magnitude)
    return Divergence(at, found.expected, found.got, dtype, g.gap, g.distance, g.got_rank, magnitude, bound, kind)


def locate(baseline: Sequence[int], other: Sequence[int], dtype: torch.dtype | str) -> Divergence | None:
    """Where `other` parts from `baseline`, with no logits (a "divergence" until weighed by `explain`;
    what a sampled answer gets); None when they are equal."""
    at = first_divergence(baseline, other)
    if at is None:
        return None
    expected = int(baseline[at]) if at < len(baseline) else -1
    got = int(other[at]) if at < len(other) else -1
    return Divergence(at, expected, got, dtype_name(dtype))
