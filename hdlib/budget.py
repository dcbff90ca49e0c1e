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
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch
from tqdm.auto import tqdm

from hdlib.errors import HDError

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from hdlib.trace import Step

MAX_BUDGET = 64


class BudgetPolicy(Protocol):
    def budget(self, context_len: int) -> int: ...

    def observe(self, step: Step) -> None: ...


class FixedBudget:
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

    def forward_s(self, n_tokens: float) -> float:
        ks = np.arange(1, len(self.seconds) + 1)
        return float(np.interp(n_tokens, ks, self.seconds))


class AdaptiveBudget:
    """Chooses k each step from the measured forward times and this generation's acceptance."""

    def __init__(self, profile: ForwardProfile, max_budget: int = MAX_BUDGET, decay: float = 0.95) -> None:
        self.profile = profile
        self.max_budget = min(max_budget, len(profile.seconds) - 1)
        self.decay = decay  # recent steps count more: a copy phase and a free phase differ
        # Priors worth two steps: drafts are accepted now and then, and a budget, once given, is used.
        self.weight = np.full(self.max_budget, 2.0)
        self.accepted = np.full(self.max_budget, 0.2)
        self.existed = np.full(self.max_budget, 2.0)
        self.history: list[int] = []

    def expected_rate(self) -> np.ndarray:
        """Expected tokens per second for k = 0..max_budget."""
        a = np.concatenate([[0.0], np.cumsum(self.accepted / self.weight)])
        e = np.concatenate([[0.0], np.cumsum(self.existed / self.weight)])
        cost = np.interp(1 + e, np.arange(1, len(self.profile.seconds) + 1), self.profile.seconds)
        return (1 + a) / cost

    def budget(self, context_len: int) -> int:
        k = int(np.argmax(self.expected_rate()))
        self.history.append(k)
        return k

    def observe(self, step: Step) -> None:
        k = min(step.budget, self.max_budget)
        if k == 0:
            return
        accepted = np.zeros(k)
        existed = np.zeros(k)
        n = min(step.tree.n_drafted, k)
        existed[:n] = 1.0
        for node in step.accepted_nodes[1:]:
            if node <= k:
                accepted[node - 1] = 1.0
        for arr in (self.weight, self.accepted, self.existed):
            arr[:k] *= self.decay
        self.weight[:k] += 1.0
        self.accepted[:k] += accepted
        self.existed[:k] += existed


def _cache_root() -> Path:
    from hdlib.models import cache_dir

    return cache_dir()


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
    from hdlib.tree import DraftTree, tree_buffers
    from hdlib.verifier import AttentionLayout, compact_cache, new_cache, prefill, tree_logits

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
    # Forward time cannot fall as k grows; noise can make it look so. Keep the curve monotone.
    seconds = np.maximum.accumulate(seconds).tolist()
    return ForwardProfile(tuple(seconds), context_len, profile_key(model, context_len, max_k))


def load_or_measure(model: PreTrainedModel, context_len: int = 256, max_k: int = MAX_BUDGET) -> ForwardProfile:
    """The cached forward profile of this model on this device, measured on first use."""
    key = profile_key(model, context_len, max_k)
    path = _cache_root() / "forward" / f"{key}.json"
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
