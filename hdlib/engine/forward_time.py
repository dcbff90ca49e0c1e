"""The forward-time profile of a model on this device: seconds of one pass over k = 1..64 new tokens.

What the budget policies (`hdlib.engine.budget`, `hdlib.engine.value`) weigh drafts against. Measured once per
model, dtype, device (the GPU's or the CPU's name), torch and CUDA versions, thread count and
prepacked layers (`profile_key`), through the `Verifier` the decoding loop uses, and cached on disk.
Every k up to 16 is timed, then every fourth k, the k between interpolated (`measured_ks`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch
from transformers import PreTrainedModel

from hdlib.engine.budget import MAX_BUDGET
from hdlib.engine.tree import DraftTree
from hdlib.engine.verifier import Verifier
from hdlib.errors import HDError
from hdlib.models.cpu import CALIBRATED_ROWS, describe_machine
from hdlib.paths import cache_dir
from hdlib.store import write_text_atomic
from hdlib.tiers.base import Tier

Progress = Callable[[Sequence[int]], Iterable[int]]  # wraps the k measured: a progress bar, say


def device_name(device: torch.device) -> str:
    """The processor behind `device`: the GPU's name on CUDA (an A100 profile must not serve an
    H100), else the CPU's model name."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return _cpu_name()


@functools.cache
def _cpu_name() -> str:  # read once: /proc/cpuinfo does not change under a running process
    return str(describe_machine()["cpu"])


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


def flat_profile(seconds: Sequence[float] | None = None) -> ForwardProfile:
    """A profile for tests and GPUs-in-theory: forward time independent of k."""
    return ForwardProfile(tuple(seconds or [1.0] * MAX_BUDGET), 0, "flat")


def profile_key(model: PreTrainedModel, context_len: int, max_k: int) -> str:
    """Identifies what forward time depends on: the model's architecture and size, its dtype, the
    device and its name, the torch and CUDA versions, the threads, the prepacked layers."""
    config = model.config.to_json_string(use_diff=False)
    # prepacked layers (hdlib.models.cpu) run at other speeds
    layers = sorted({type(m).__name__ for m in model.modules()})
    parts = [config, str(model.dtype), str(model.device), device_name(model.device)]
    parts += [f"torch {torch.__version__}", f"cuda {torch.version.cuda or 'none'}"]
    parts += [str(torch.get_num_threads()), str(context_len), str(max_k), *layers]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


@torch.inference_mode()
def time_pass(verifier: Verifier, tokens: list[int], past_len: int) -> float:
    """Seconds of one forward pass over `tokens` as a chain after `past_len` cached tokens, the device
    waited for; the cache is then cut back to `past_len`."""
    tree = DraftTree(root=tokens[0])
    tree.add(tokens[1:], tier=Tier.CONTEXT, max_new=len(tokens), max_depth=len(tokens))  # any tier will do
    verifier.sync()
    start = time.perf_counter()
    verifier.logits(tree, past_len)
    verifier.sync()
    elapsed = time.perf_counter() - start
    verifier.compact(past_len, [])
    return elapsed


DENSE_UP_TO = CALIBRATED_ROWS  # the prepacked layers choose their kernel per row count up to here: every k is measured
STRIDE = 4  # beyond it, every fourth k; forward time grows smoothly there and is interpolated


def measured_ks(max_k: int) -> list[int]:
    """The k that `measure_forward` times: every k up to 16, then every fourth, and `max_k`: 28 of
    64 (Gemma 3 270M's profile then took 15 s on a 2-core EPYC)."""
    return sorted({*range(1, min(max_k, DENSE_UP_TO) + 1), *range(DENSE_UP_TO + STRIDE, max_k + 1, STRIDE), max_k})


def measure_forward(
    model: PreTrainedModel,
    context_len: int = 256,
    max_k: int = MAX_BUDGET,
    repeats: int = 3,
    progress: Progress | None = None,
    ks: Sequence[int] | None = None,
) -> ForwardProfile:
    """Time one forward pass of k tokens (a chain) after `context_len` cached tokens, for each k in
    `ks` (default `measured_ks(max_k)`; it must hold 1 and `max_k`); the k between are interpolated.
    `progress` wraps the k as they are measured (`hdlib.presentation.progress_bar` shows a bar)."""
    if max_k < 1 or context_len < 1:
        raise HDError("measure_forward needs max_k >= 1 and context_len >= 1")
    ks = measured_ks(max_k) if ks is None else sorted(set(ks))
    if not ks or ks[0] != 1 or ks[-1] != max_k:
        raise HDError(f"measure_forward times k from 1 to max_k = {max_k}: ks must hold both, got {ks}")
    verifier = Verifier(model)
    gen = torch.Generator().manual_seed(0)
    vocab = verifier.vocab_size
    verifier.prefill(torch.randint(0, vocab, (context_len,), generator=gen).tolist())

    def one(k: int) -> float:
        return time_pass(verifier, torch.randint(0, vocab, (k,), generator=gen).tolist(), context_len)

    one(1), one(max_k)  # warm-up: first calls allocate
    measured = []
    for k in progress(ks) if progress is not None else ks:
        measured.append(statistics.median(one(k) for _ in range(repeats)))
    seconds = np.interp(np.arange(1, max_k + 1), ks, measured)
    # Forward time cannot fall as k grows; a noise spike can make it look so. Cap each k by every
    # larger k (a spike is dropped, not spread to every k above it).
    seconds = np.minimum.accumulate(seconds[::-1])[::-1].tolist()
    return ForwardProfile(tuple(seconds), context_len, profile_key(model, context_len, max_k))


def load_or_measure(
    model: PreTrainedModel, context_len: int = 256, max_k: int = MAX_BUDGET, progress: Progress | None = None
) -> ForwardProfile:
    """The cached forward profile of this model on this device, measured on first use (`progress`:
    as `measure_forward`'s)."""
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
    profile = measure_forward(model, context_len, max_k, progress=progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(asdict(profile)))
    return profile
