"""How the device check measures: the pieces of hdlib that are moving, one place each; the GPU
waited for and its memory in GB; the calls that read a tensor back to the host, and the CUDA
synchronisations, counted per step."""

from __future__ import annotations

import statistics
import warnings
from dataclasses import fields
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

import hdlib.engine.verifier
from hdlib.engine.loop import Decoder
from hdlib.engine.trace import Step
from hdlib.engine.verifier import Verifier

READS = frozenset({"item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__"})


# The pieces of hdlib that are moving: one place each ------------------------------------------


def cache_kinds() -> tuple[str | None, ...]:
    """The KV caches hdlib offers ("own", "dynamic"), or (None,): the one it has."""
    return tuple(getattr(hdlib.engine.verifier, "CACHE_KINDS", None) or (None,))


def make_verifier(model: torch.nn.Module, kind: str | None) -> Verifier:
    return Verifier(model) if kind is None else Verifier(model, cache=kind)


def per_step_counters(step: Step) -> dict[str, float]:
    """Any count hdlib itself keeps per step (host reads, synchronisations), found by its name."""
    found = {}
    for obj in (step, step.times):
        for f in fields(obj):
            value = getattr(obj, f.name)
            if any(w in f.name for w in ("sync", "read")) and isinstance(value, (int, float)):
                found[f.name] = value
    return found


# Small tools ----------------------------------------------------------------------------------


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def gb(n_bytes: float) -> float:
    return round(n_bytes / 2**30, 3)


class HostReads(TorchFunctionMode):
    """Counts the calls that read a tensor's values back to the host (what waits for a GPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        if getattr(func, "__name__", "") in READS:
            self.calls += 1
        return func(*args, **(kwargs or {}))


class CudaSyncs:
    """Counts the synchronisations CUDA reports in torch's sync debug mode ("warn": one warning each)."""

    def __enter__(self) -> CudaSyncs:
        self.count: int | None = None
        self._caught = warnings.catch_warnings(record=True)
        self._seen = self._caught.__enter__()
        warnings.simplefilter("always")
        if torch.cuda.is_available():
            self._previous = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode("warn")
        return self

    def __exit__(self, *exc: object) -> None:
        if torch.cuda.is_available():
            torch.cuda.set_sync_debug_mode(self._previous)
            self.count = sum("synchroniz" in str(w.message) for w in self._seen)
        self._caught.__exit__(*exc)


def reads_per_step(decoder: Decoder) -> dict[str, Any]:
    """Host reads (and CUDA synchronisations) per step, the first step (the prefill's) left out."""
    reads, syncs, steps = [], [], iter(decoder)
    while True:
        with HostReads() as counter, CudaSyncs() as cuda:
            try:
                next(steps)
            except StopIteration:
                break
        reads.append(counter.calls)
        syncs.append(cuda.count)
    reads, syncs = reads[1:] or reads, syncs[1:] or syncs
    cuda_counted = syncs and syncs[0] is not None
    return {
        "host_reads_per_step": {"mean": round(statistics.mean(reads), 2), "max": max(reads)},
        "cuda_syncs_per_step": (
            {"mean": round(statistics.mean(syncs), 2), "max": max(syncs)}
            if cuda_counted
            else "unavailable: no CUDA (torch's sync debug mode)"
        ),
    }
