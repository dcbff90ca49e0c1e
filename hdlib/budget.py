"""How many draft tokens a step should verify: the hardware and the text decide.

A step costs forward(1 + k) for k draft tokens. On a GPU that is nearly flat up to k ~ 64; on a CPU
it grows at once (SmolLM2-135M, 2 cores: 55 ms at k = 1, 89 ms at 16, 185 ms at 64). So the budget is
chosen, every step, to maximise expected tokens per second:

    tokens/s(k) = (1 + sum_{i<=k} a_i) / forward(1 + sum_{i<=k} e_i)

where a_i is how often the i-th draft node (in the drafter's priority order) was accepted and e_i how
often it existed at all, both measured over the recent steps of this generation (`AdaptiveBudget`).
forward(.) is measured once per model and device for 1..64 tokens and cached on disk (`hdlib.profile`);
the policies here only read it, so they need neither torch nor a model.

`generate`'s default (budget None) is no longer `AdaptiveBudget` but the value-ranked tree
(`hdlib.value.ValueTree`), which decides node by node rather than by a count; the policies here
(`FixedBudget`, `AdaptiveBudget`) verify every node the drafter drafted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from hdlib.errors import HDError
from hdlib.tiers.base import ModelGuesses
from hdlib.trace import Step
from hdlib.tree import DraftTree

MAX_BUDGET = 64


class BudgetPolicy(Protocol):
    per_tier: bool  # the budget is each tier's (candidates), not the tiers' together

    def budget(self, context_len: int) -> int: ...

    def select(self, tree: DraftTree, context: Sequence[int] = ()) -> tuple[DraftTree, tuple[float, ...] | None]:
        """The part of the drafted tree to verify (`context`: the text so far, the tree's root last),
        and each kept node's estimated acceptance (or None)."""
        ...

    def observe(self, step: Step) -> None: ...

    successors_wanted: int  # the model's most likely next tokens per verified node, for observe_model

    def observe_model(self, guesses: ModelGuesses) -> None: ...

    def finish(self) -> None:
        """The generation is over."""
        ...


class _VerifyAll:
    """Budget policies that verify the whole drafted tree and keep nothing across generations."""

    per_tier = False
    successors_wanted = 0

    def observe_model(self, guesses: ModelGuesses) -> None:
        pass

    def select(self, tree: DraftTree, context: Sequence[int] = ()) -> tuple[DraftTree, tuple[float, ...] | None]:
        return tree, None

    def finish(self) -> None:
        pass


class FixedBudget(_VerifyAll):
    def __init__(self, k: int) -> None:
        if not isinstance(k, int) or k < 0:
            raise HDError(f"the draft budget must be a non-negative integer, got {k!r}")
        self.k = k

    def budget(self, context_len: int) -> int:
        return self.k

    def observe(self, step: Step) -> None:
        pass


@dataclass(frozen=True)
class ForwardProfile:
    """Median seconds of one forward pass over k = 1..len(seconds) new tokens."""

    seconds: tuple[float, ...]
    context_len: int
    key: str

    def forward_s(self, n_tokens: float | np.ndarray) -> np.ndarray:
        """Seconds for a forward pass over `n_tokens`: interpolated between the measured counts,
        beyond the last one extended along the line through the middle and the last (NaN stays NaN)."""
        k, seconds = np.arange(1, len(self.seconds) + 1), np.asarray(self.seconds)
        n = np.asarray(n_tokens, dtype=float)
        mid = len(k) // 2
        slope = (seconds[-1] - seconds[mid]) / (k[-1] - k[mid]) if len(k) > 1 else 0.0
        return np.where(n > k[-1], seconds[-1] + slope * (n - k[-1]), np.interp(n, k, seconds))


class AdaptiveBudget(_VerifyAll):
    """Chooses k each step from the measured forward times and this generation's acceptance.

    The estimates are over the steps that found drafts: a step without drafts costs forward(1)
    whatever the budget. A step verified with budget K also tells what any smaller budget k would have given: the
    accepted path cut to the nodes numbered <= k (parents precede children, so the cut is a prefix
    of the path), at the cost of min(k, drafted) nodes. So every step updates the estimates of all
    k <= K at once; now and then a larger budget is tried to learn what lies above.

    Probes back off: while drafting does not pay (the best budget is 0), each probe that fails
    doubles the wait before the next, up to `max_probe_every` steps, so free text (a translation,
    sampling at temperature 1) pays for few probes; as soon as drafting pays again, the wait is
    back to `probe_every`.
    """

    def __init__(
        self,
        profile: ForwardProfile,
        max_budget: int = MAX_BUDGET,
        decay: float = 0.9,
        start: int = 8,
        probe_every: int = 8,
        max_probe_every: int = 64,
    ) -> None:
        self.profile = profile
        self.max_budget = min(max_budget, len(profile.seconds) - 1)
        self.decay = decay  # recent steps count more: a copying phase and a free phase differ
        self.start = min(start, self.max_budget)  # the budget before anything is known
        self.probe_every = probe_every
        self.max_probe_every = max(max_probe_every, probe_every)
        self._wait = probe_every  # steps between probes, now
        self._since_probe = 0
        self._probed = False  # the previous step was a probe
        size = self.max_budget + 1
        self.weight = np.zeros(size)  # decayed count of steps that saw budget k
        self.gain = np.zeros(size)  # ... and the tokens they would have emitted with budget k
        self.nodes = np.zeros(size)  # ... and the draft nodes they would have verified
        self.history: list[int] = []

    def expected_rate(self) -> np.ndarray:
        """Expected tokens per second for k = 0..max_budget; NaN where nothing is known yet."""
        with np.errstate(invalid="ignore", divide="ignore"):
            gain = np.where(self.weight > 0, self.gain / self.weight, np.nan)
            nodes = np.where(self.weight > 0, self.nodes / self.weight, np.nan)
        gain[0], nodes[0] = 1.0, 0.0  # no drafts: one token per step, always
        return gain / self.profile.forward_s(1 + nodes)

    def budget(self, context_len: int) -> int:
        rate = self.expected_rate()
        known = int(np.flatnonzero(~np.isnan(rate))[-1])
        if known == 0:
            k = self.start
        else:
            k = int(np.nanargmax(rate))
            if k > 0:
                self._wait = self.probe_every
            elif self._probed:  # a probe was just verified and drafting still does not pay
                self._wait = min(2 * self._wait, self.max_probe_every)
            self._since_probe += 1
            self._probed = self._since_probe >= self._wait
            if self._probed:
                # Try twice the best budget, to learn whether more would pay; or, when drafting does not pay, the
                # start budget again: the text may have turned repetitive.
                k = min(self.max_budget, max(2 * k, self.start)) if k > 0 else self.start
                self._since_probe = 0
        self.history.append(k)
        return k

    def observe(self, step: Step) -> None:
        if step.tree.n_drafted == 0:
            return  # every budget would have cost one forward(1) and given one token: no evidence
        big_k = min(step.budget, self.max_budget)
        ks = np.arange(big_k + 1)
        path = np.asarray(step.accepted_nodes[1:])
        gain = 1 + np.searchsorted(path, ks, side="right")
        nodes = np.minimum(ks, step.tree.n_drafted)
        for total, value in ((self.gain, gain), (self.nodes, nodes), (self.weight, 1.0)):
            total[: big_k + 1] = self.decay * total[: big_k + 1] + value


def flat_profile(seconds: Sequence[float] | None = None) -> ForwardProfile:
    """A profile for tests and GPUs-in-theory: forward time independent of k."""
    return ForwardProfile(tuple(seconds or [1.0] * MAX_BUDGET), 0, "flat")
