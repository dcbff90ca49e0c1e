"""The forward-time profile of a model on this device: seconds of one pass over k = 1..64 new tokens.

What the budget policies (`hdlib.engine.budget`, `hdlib.engine.value`) weigh drafts against. Measured once per
model, dtype, device (the GPU's or the CPU's name), torch and CUDA versions, thread count and
prepacked layers (`profile_key`), through the `Verifier` the decoding loop uses, and cached on disk.
Every k up to 16 is timed, then every fourth k, the k between interpolated (`measured_ks`).

A profile measured on a busy machine moves the auto budget, and every MAT at auto, for as long as it
is kept: so each k is timed `REPEATS` times, in rounds over all k (a busy spell slows every k alike
instead of bending the profile where it fell); a k whose passes spread too far (`NOISY`), or whose
median exceeds a larger k's by more than noise (`FALL`), is timed again, at most `RETRIES` times.
A fall that outlasts its retimes while the passes agree is the machine's own (kernels change with k:
on a quiet 2-core EPYC a k took up to 27 % longer than a larger one, time after time) and is capped,
as every fall is. A profile whose passes stay noisy is "busy": `load_or_measure` uses it in this
process only, says so on stderr, and keeps nothing, so the next process measures again. A test, or a replay of another
machine's timings, reads a profile from a file instead (`read_profile`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

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
PassTimer = Callable[[int], float]  # seconds of one forward pass over k new tokens (`pass_timer`; a test's fake)

QUIET, BUSY = "quiet", "busy"  # a profile's verdict; "" where it was not measured here (an older file, a test's)


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
    """Median seconds of one forward pass over k = 1..len(seconds) new tokens, and how surely.

    `ks`: the k timed (the others interpolated); `spread`: each one's interquartile range over its
    median; `fall`: the largest share by which a timed k's median exceeded a larger k's (removed from
    `seconds`, which never fall as k grows); `verdict`: QUIET (kept in the cache), BUSY (a spread
    stayed above `NOISY`: used by the process that measured it only), or "" where it
    was not measured by `measure_forward` (a cache file of an older hdlib, a test's profile).
    """

    seconds: tuple[float, ...]
    context_len: int
    key: str
    ks: tuple[int, ...] = ()
    spread: tuple[float, ...] = ()
    fall: float = 0.0
    verdict: str = ""

    def forward_s(self, n_tokens: float | np.ndarray) -> np.ndarray:
        """Seconds for a forward pass over `n_tokens`: interpolated between the measured counts,
        beyond the last one extended along the line through the middle and the last (NaN stays NaN)."""
        k, seconds = np.arange(1, len(self.seconds) + 1), np.asarray(self.seconds)
        n = np.asarray(n_tokens, dtype=float)
        mid = len(k) // 2
        slope = (seconds[-1] - seconds[mid]) / (k[-1] - k[mid]) if len(k) > 1 else 0.0
        return np.where(n > k[-1], seconds[-1] + slope * (n - k[-1]), np.interp(n, k, seconds))

    def digest(self) -> str:
        """16 hex digits naming this profile (its key and its seconds): a result records it, since the
        auto budget's trees depend on the profile, which lives in this machine's cache, not the checkout."""
        return hashlib.sha256(json.dumps([self.key, list(self.seconds)]).encode()).hexdigest()[:16]


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


REPEATS = 5  # passes per k: their median stands while two of the five are slowed
# A k whose passes' IQR exceeds this share of their median is timed again: quiet runs of the packaged
# model on a 2-core EPYC spread up to 0.4 at a few k, runs beside one busy process over 1 at most k.
NOISY = 0.25
# A k slower than a larger k by more than this share is timed again: where forward time is flat
# (k = 1..9 on that EPYC), quiet runs' medians of five fell by up to 14 % as k grew.
FALL = 0.15
RETRIES = 2  # rounds of timing the unsure k again, before a spread is called busy: bounded, as each costs time


def pass_timer(model: PreTrainedModel, context_len: int, max_k: int) -> PassTimer:
    """Times one forward pass of `model` over k random tokens (a chain) after `context_len` cached
    ones, through the `Verifier` the decoding loop uses; warmed up at 1 and `max_k` (first calls
    allocate)."""
    verifier = Verifier(model)
    gen = torch.Generator().manual_seed(0)
    vocab = verifier.vocab_size
    verifier.prefill(torch.randint(0, vocab, (context_len,), generator=gen).tolist())

    def one(k: int) -> float:
        return time_pass(verifier, torch.randint(0, vocab, (k,), generator=gen).tolist(), context_len)

    one(1), one(max_k)
    return one


def spread(passes: Sequence[float]) -> float:
    """The interquartile range of `passes` over their median. Not (max - min) / median: one pass slowed
    by an interrupt moves neither the median nor the IQR, and should not send a k back to be timed;
    the middle passes disagreeing is what makes the median unsure."""
    q1, median, q3 = np.percentile(passes, [25, 50, 75])
    return float((q3 - q1) / median) if median > 0 else math.inf


def falls(medians: Sequence[float]) -> np.ndarray:
    """For each k (in order), the share by which its median exceeds the smallest median of a k at or
    above it: what the cap that keeps forward time from falling as k grows takes away (0: none)."""
    m = np.asarray(medians, dtype=float)
    return 1.0 - np.minimum.accumulate(m[::-1])[::-1] / m


def time_rounds(timer: PassTimer, ks: Sequence[int], repeats: int, progress: Progress | None) -> dict[int, list[float]]:
    """`repeats` passes of every k in `ks`, timed in rounds (each k once per round)."""
    order = [k for _ in range(repeats) for k in ks]
    passes: dict[int, list[float]] = {k: [] for k in ks}
    for k in progress(order) if progress is not None else order:
        passes[k].append(timer(k))
    return passes


def unsure(passes: Mapping[int, Sequence[float]]) -> list[int]:
    """The k to time again: those whose passes spread above NOISY, and where a k's median exceeds a
    larger k's by more than FALL, both (either may be the one a busy spell moved)."""
    ks = sorted(passes)
    medians = [statistics.median(passes[k]) for k in ks]
    again = {k for k in ks if spread(passes[k]) > NOISY}
    for i in np.flatnonzero(falls(medians) > FALL):
        again |= {ks[i], ks[i + int(np.argmin(medians[i:]))]}
    return sorted(again)


def measure_forward(
    model: PreTrainedModel,
    context_len: int = 256,
    max_k: int = MAX_BUDGET,
    repeats: int = REPEATS,
    progress: Progress | None = None,
    ks: Sequence[int] | None = None,
    timer: PassTimer | None = None,
) -> ForwardProfile:
    """Time one forward pass of k tokens (a chain) after `context_len` cached tokens, `repeats` times
    for each k in `ks` (default `measured_ks(max_k)`; it must hold 1 and `max_k`), in rounds; time the
    unsure k again (`unsure`), up to RETRIES times, each time with fresh passes in place of theirs
    (a busy spell is over, or it is not); then each k's median, the k between interpolated, each k
    capped by every larger k (a spike is dropped, not spread to every k above it). The verdict is BUSY
    where a k's spread stayed above NOISY (a fall whose passes agree is the machine's own, and capped).
    `timer` times one pass (default
    `pass_timer(model, ...)`: a test passes a fake); `progress` wraps the k as they are timed
    (`hdlib.presentation.progress_bar` shows a bar)."""
    if max_k < 1 or context_len < 1 or repeats < 1:
        raise HDError("measure_forward needs max_k >= 1, context_len >= 1 and repeats >= 1")
    ks = measured_ks(max_k) if ks is None else sorted(set(ks))
    if not ks or ks[0] != 1 or ks[-1] != max_k:
        raise HDError(f"measure_forward times k from 1 to max_k = {max_k}: ks must hold both, got {ks}")
    timer = timer if timer is not None else pass_timer(model, context_len, max_k)
    passes = time_rounds(timer, ks, repeats, progress)
    for _ in range(RETRIES):
        again = unsure(passes)
        if not again:
            break
        passes.update(time_rounds(timer, again, repeats, progress))
    medians = [statistics.median(passes[k]) for k in ks]
    spreads = tuple(spread(passes[k]) for k in ks)
    fall = float(falls(medians).max())
    seconds = np.interp(np.arange(1, max_k + 1), ks, medians)
    seconds = np.minimum.accumulate(seconds[::-1])[::-1]  # forward time cannot fall as k grows
    verdict = QUIET if max(spreads) <= NOISY else BUSY
    key = profile_key(model, context_len, max_k)
    return ForwardProfile(tuple(seconds.tolist()), context_len, key, tuple(ks), spreads, fall, verdict)


# Profiles measured BUSY, by key: used by this process only (the next one measures again), never written.
_unkept: dict[str, ForwardProfile] = {}


def load_or_measure(
    model: PreTrainedModel,
    context_len: int = 256,
    max_k: int = MAX_BUDGET,
    progress: Progress | None = None,
    timer: PassTimer | None = None,
) -> ForwardProfile:
    """The cached forward profile of this model on this device, measured on first use (`progress`,
    `timer`: as `measure_forward`'s). Only a QUIET profile is kept; a BUSY one serves this process,
    with a warning on stderr."""
    key = profile_key(model, context_len, max_k)
    if key in _unkept:
        return _unkept[key]
    path = cache_dir() / "forward" / f"{key}.json"
    if path.exists():
        try:
            profile = profile_from_json(json.loads(path.read_text()))
            if profile.key == key and len(profile.seconds) == max_k:
                return profile
        except (ValueError, KeyError, TypeError, AttributeError):
            pass  # a damaged cache file is measured again
    profile = measure_forward(model, context_len, max_k, progress=progress, timer=timer)
    if profile.verdict == QUIET:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(asdict(profile)))
    else:
        _unkept[key] = profile
        print(busy_warning(profile, path.parent), file=sys.stderr)
    return profile


def busy_warning(profile: ForwardProfile, folder: Path) -> str:
    """What a BUSY profile's warning says: what was seen, that it is not kept, how to measure again."""
    noisy = [k for k, s in zip(profile.ks, profile.spread) if s > NOISY]
    return (
        f"hdlib: the forward-time profile was measured on a busy machine: after {RETRIES} more tries the passes "
        f"at k = {', '.join(map(str, noisy))} still spread by up to {max(profile.spread):.0%} of their median. It "
        f"is used by this process only and not kept in {folder}, so the next process measures it again; to keep "
        "one, measure it while nothing else runs (`hdlib warmup`)."
    )


def profile_from_json(data: Mapping) -> ForwardProfile:
    """A profile from its JSON form (`asdict`); a file without the measurement's record (an older
    hdlib's, a hand-made one) has no verdict, and a context length and key of 0 and "" unless given."""
    return ForwardProfile(
        tuple(float(s) for s in data["seconds"]),
        int(data.get("context_len", 0)),
        str(data.get("key", "")),
        tuple(int(k) for k in data.get("ks", ())),
        tuple(float(s) for s in data.get("spread", ())),
        float(data.get("fall", 0.0)),
        str(data.get("verdict", "")),
    )


def read_profile(path: str | Path, named_by: str = "") -> ForwardProfile:
    """The profile in the JSON file at `path` (as the cache keeps them: "seconds", a list of the
    seconds of one pass over k = 1, 2, ... new tokens; "key", "context_len" and the measurement's
    record optional, other fields, such as a provenance, ignored), for a test or a replay of another
    machine's timings. An HDError says what is wrong with a bad file (`named_by`: where the path came
    from, said first)."""
    where = f"{named_by}forward profile {path}"
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise HDError(f"{where}: no such file") from None
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise HDError(f"{where}: not a JSON file ({error})") from None
    if not isinstance(data, dict) or not isinstance(data.get("seconds"), list) or not data["seconds"]:
        raise HDError(f'{where}: no "seconds", the list of seconds of one pass over k = 1, 2, ... new tokens')
    if not all(isinstance(s, (int, float)) and not isinstance(s, bool) and 0 < s < math.inf for s in data["seconds"]):
        raise HDError(f'{where}: "seconds" must be positive finite numbers')
    try:
        profile = profile_from_json(data)
    except (ValueError, TypeError) as error:
        raise HDError(f"{where}: {error}") from None
    return profile if profile.key else replace(profile, key=Path(path).stem)
