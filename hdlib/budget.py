"""How many draft tokens a step should verify: the hardware and the text decide.

A step costs forward(1 + k) for k draft tokens. On a GPU that is nearly flat up to k ~ 64; on a CPU
it grows at once (SmolLM2-135M, 2 cores: 55 ms at k = 1, 89 ms at 16, 185 ms at 64). So the budget is
chosen, every step, to maximise expected tokens per second:

    tokens/s(k) = (1 + sum_{i<=k} a_i) / forward(1 + sum_{i<=k} e_i)

where a_i is how often the i-th draft node (in the drafter's priority order) was accepted and e_i how
often it existed at all, both measured over the recent steps of this generation. forward(.) is
measured once per model and device for 1..64 tokens and cached on disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch
from tqdm.auto import tqdm

from hdlib.errors import HDError
from hdlib.models import cache_dir
from hdlib.tiers.base import Tier
from hdlib.tree import DraftTree, tree_buffers
from hdlib.verifier import AttentionLayout, compact_cache, new_cache, prefill, tree_logits

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from hdlib.trace import Step

MAX_BUDGET = 64


class BudgetPolicy(Protocol):
    def budget(self, context_len: int) -> int:
        """The most draft tokens the drafter may propose this step."""
        ...

    def trim(self, tree: DraftTree) -> int:
        """The budget the step verifies: the first so many drafted nodes, in the drafter's order."""
        ...

    def observe(self, step: Step) -> None: ...


class FixedBudget:
    def __init__(self, k: int) -> None:
        if not isinstance(k, int) or k < 0:
            raise HDError(f"the draft budget must be a non-negative integer, got {k!r}")
        self.k = k

    def budget(self, context_len: int) -> int:
        return self.k

    def trim(self, tree: DraftTree) -> int:
        return tree.n_drafted

    def observe(self, step: Step) -> None:
        pass


@dataclass(frozen=True)
class ForwardProfile:
    """Median seconds of one forward pass over k = 1..len(seconds) new tokens."""

    seconds: tuple[float, ...]
    context_len: int
    key: str

    def forward_s(self, n_tokens: float | np.ndarray) -> np.ndarray:
        """Seconds for a forward pass over `n_tokens` (interpolated; NaN stays NaN)."""
        return np.interp(n_tokens, np.arange(1, len(self.seconds) + 1), self.seconds)


class _Acceptance:
    """What budgets of 0..max_budget gave over the recent steps whose trees one tier led."""

    def __init__(self, size: int, probe_every: int) -> None:
        self.weight = np.zeros(size)  # decayed count of steps that saw budget k
        self.gain = np.zeros(size)  # ... and the tokens they would have emitted with budget k
        self.nodes = np.zeros(size)  # ... and the draft nodes they would have verified
        self.wait = probe_every  # steps between probes, now
        self.since_probe = 0
        self.probed = False  # the previous choice was a probe

    def best(self, profile: ForwardProfile) -> tuple[int, int]:
        """(the budget with the highest expected tokens per second, the largest budget seen)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            gain = np.where(self.weight > 0, self.gain / self.weight, np.nan)
            nodes = np.where(self.weight > 0, self.nodes / self.weight, np.nan)
        gain[0], nodes[0] = 1.0, 0.0  # no drafts: one token per step, always
        rate = gain / profile.forward_s(1 + nodes)
        return int(np.nanargmax(rate)), int(np.flatnonzero(~np.isnan(rate))[-1])

    def observe(self, step: Step, max_budget: int, decay: float) -> None:
        big_k = min(step.budget, max_budget)
        ks = np.arange(big_k + 1)
        path = np.asarray(step.accepted_nodes[1:])
        gain = 1 + np.searchsorted(path, ks, side="right")
        nodes = np.minimum(ks, step.tree.n_drafted)
        for total, value in ((self.gain, gain), (self.nodes, nodes), (self.weight, 1.0)):
            total[: big_k + 1] = decay * total[: big_k + 1] + value


class AdaptiveBudget:
    """Chooses k each step from the measured forward times and this generation's acceptance.

    The estimates are over the steps that found drafts: a step without drafts costs forward(1)
    whatever the budget. A step verified with budget K also tells what any smaller budget k would have
    given: the accepted path cut to the nodes numbered <= k (parents precede children, so the cut is a
    prefix of the path), at the cost of min(k, drafted) nodes. So every step updates the estimates of
    all k <= K at once; now and then a larger budget is tried to learn what lies above.

    Kept apart per leading tier (the tier of the tree's first draft node): a tree the context tier
    leads is a copy in progress and often right, one the statistics tier leads (the context had
    nothing) is a guess from the corpus. Drafting is cheap and verifying is not, so the drafter
    drafts up to `budget()`, and `trim(tree)` keeps what the leading tier's record says pays.

    Probes back off: while drafting does not pay for a leading tier (its best budget is 0), each
    probe that fails doubles the wait before its next, up to `max_probe_every` steps, so free text (a
    translation, sampling at temperature 1) pays for few probes; as soon as drafting pays again, the
    wait is back to `probe_every`.
    """

    def __init__(
        self,
        profile: ForwardProfile,
        max_budget: int = MAX_BUDGET,
        decay: float = 0.9,
        start: int = 8,
        probe_every: int = 8,
        max_probe_every: int = 64,
        by_tier: bool = True,
    ) -> None:
        self.profile = profile
        self.max_budget = min(max_budget, len(profile.seconds) - 1)
        self.decay = decay  # recent steps count more: a copying phase and a free phase differ
        self.start = min(start, self.max_budget)  # the budget before anything is known
        self.probe_every = probe_every
        self.max_probe_every = max(max_probe_every, probe_every)
        self.by_tier = by_tier  # False: one record for every tree, whichever tier leads it
        self._records: dict[Tier | None, _Acceptance] = {}
        self.history: list[int] = []  # the budget each step verified

    def _record(self, tree: DraftTree) -> _Acceptance:
        lead = tree.tiers[1] if self.by_tier and tree.n_drafted else None
        if lead not in self._records:
            self._records[lead] = _Acceptance(self.max_budget + 1, self.probe_every)
        return self._records[lead]

    @property
    def weight(self) -> np.ndarray:
        """Decayed count of the steps each budget was seen with, all leading tiers together."""
        return sum((r.weight for r in self._records.values()), np.zeros(self.max_budget + 1))

    def budget(self, context_len: int) -> int:
        """Enough for any leading tier's choice this step, a probe included."""
        wanted = [self.start]
        for record in self._records.values():
            best, _ = record.best(self.profile)
            wanted.append(2 * best)
        return min(self.max_budget, max(wanted))

    def trim(self, tree: DraftTree) -> int:
        if tree.n_drafted == 0:
            self.history.append(0)
            return 0
        record = self._record(tree)
        best, known = record.best(self.profile)
        if known == 0:
            k = self.start
        else:
            k = best
            if k > 0:
                record.wait = self.probe_every
            elif record.probed:  # a probe was just verified and drafting still does not pay
                record.wait = min(2 * record.wait, self.max_probe_every)
            record.since_probe += 1
            record.probed = record.since_probe >= record.wait
            if record.probed:
                # Try twice the best budget, to learn whether more would pay; or, when drafting does
                # not pay, the start budget again: the text may have turned repetitive.
                k = min(self.max_budget, max(2 * k, self.start)) if k > 0 else self.start
                record.since_probe = 0
        self.history.append(k)
        return k  # may exceed what was drafted: the step then tells what a larger budget gives

    def observe(self, step: Step) -> None:
        if step.tree.n_drafted == 0:
            return  # every budget would have cost one forward(1) and given one token: no evidence
        self._record(step.tree).observe(step, self.max_budget, self.decay)


def profile_key(model: PreTrainedModel, context_len: int, max_k: int) -> str:
    """Identifies model architecture and size, dtype, device and threads: what forward time depends on."""
    config = model.config.to_json_string(use_diff=False)
    parts = [config, str(model.dtype), str(model.device), str(torch.get_num_threads()), str(context_len), str(max_k)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


@torch.inference_mode()
def measure_forward(
    model: PreTrainedModel, context_len: int = 256, max_k: int = MAX_BUDGET, repeats: int = 3, progress: bool = True
) -> ForwardProfile:
    """Time one forward pass of k = 1..max_k tokens (a chain) after `context_len` cached tokens."""
    if max_k < 1 or context_len < 1:
        raise HDError("measure_forward needs max_k >= 1 and context_len >= 1")
    layout = AttentionLayout.of(model)
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    cache = new_cache()
    prefill(model, torch.randint(0, vocab, (context_len,), generator=gen).tolist(), cache)
    device = model.device

    def one(k: int) -> float:
        chain = torch.randint(0, vocab, (k,), generator=gen).tolist()
        tree = DraftTree(root=chain[0])
        tree.add(chain[1:], tier=None, max_new=k, max_depth=k)  # type: ignore[arg-type]
        buffers = tree_buffers(tree, context_len, device)
        start = time.perf_counter()
        tree_logits(model, layout, buffers, cache, context_len)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        elapsed = time.perf_counter() - start
        compact_cache(cache, context_len, [])
        return elapsed

    one(1), one(max_k)  # warm-up: first calls allocate
    seconds = []
    for k in tqdm(range(1, max_k + 1), desc="measuring forward time", disable=not progress, leave=False):
        seconds.append(statistics.median(one(k) for _ in range(repeats)))
    # Forward time cannot fall as k grows; a noise spike can make it look so. Cap each k by every
    # larger k (a spike is dropped, not spread to every k above it).
    seconds = np.minimum.accumulate(seconds[::-1])[::-1].tolist()
    return ForwardProfile(tuple(seconds), context_len, profile_key(model, context_len, max_k))


def load_or_measure(model: PreTrainedModel, context_len: int = 256, max_k: int = MAX_BUDGET) -> ForwardProfile:
    """The cached forward profile of this model on this device, measured on first use."""
    key = profile_key(model, context_len, max_k)
    path = cache_dir() / "forward" / f"{key}.json"
    if path.exists():
        try:
            data = json.loads(path.read_text())
            profile = ForwardProfile(tuple(data["seconds"]), int(data["context_len"]), str(data["key"]))
            if profile.key == key and len(profile.seconds) == max_k:
                return profile
        except (ValueError, KeyError, TypeError):
            pass  # a damaged cache file is measured again
    profile = measure_forward(model, context_len, max_k)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(asdict(profile)))
    os.replace(tmp, path)
    return profile


def flat_profile(seconds: Sequence[float] | None = None) -> ForwardProfile:
    """A profile for tests and GPUs-in-theory: forward time independent of k."""
    return ForwardProfile(tuple(seconds or [1.0] * MAX_BUDGET), 0, "flat")
