"""A cheaper forward pass on the CPU: linear layers whose weights are prepacked for oneDNN.

A verification pass over k tokens multiplies a (k, d) activation by every weight matrix. For a few
rows PyTorch's default CPU matmul changes kernels with k, and its cost jumps (on an AVX-512 Xeon, the
SmolLM2 output layer, 49,152 x 576, costs the same for 1 to 3 rows and twice that for 4 to 8). oneDNN
with the weight reordered once into its blocked layout (what `torch.compile`'s CPU freezing does)
keeps the cost nearly flat in k. Which kernel wins depends on the processor and on k: on one
processor prepacking every layer makes each pass markedly cheaper, on another it changes nothing
beyond noise (`benchmarks/cpu_forward.py` measures it on this machine). So each prepacked layer
keeps both weights and runs, for each row count up to 16, the kernel that was faster when both were
timed on this machine: once per layer shape, as layers of one shape run the same kernels (SmolLM2's
211 layers have 6 shapes). The choices are kept in the cache (`kernels/`, one file per processor,
vector extensions, thread count, torch version and dtype), so a model loads without timing again
(timing took some 4 s on a 2-core EPYC) and every load of it runs the same kernels; delete the file
to time them again. `load_model` prepacks every linear layer
by default on the CPU in float32 (`prepack="all"`); "head" does the output layer only, "none" none.
The numbers are in benchmarks/results/*/cpu_forward.json (docs/benchmarks.md); `benchmarks/cpu_forward.py`
measures a machine.

The prepacked layer computes the same product with another summation order: greedy output can
differ from the unpacked model's only at a near-tie of the argmax, as between any two kernels. HD
and plain decoding run the same layers, so the output stays identical between them.
"""

from __future__ import annotations

import hashlib
import json
import platform
import statistics
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hdlib.errors import HDError
from hdlib.paths import cache_dir
from hdlib.store import write_text_atomic

PREPACK_CHOICES = ("none", "head", "all")
DEFAULT_PREPACK = "all"  # each layer still runs the default kernel at the row counts where that is faster


CALIBRATED_ROWS = 16  # row counts timed both ways; more rows always take the prepacked kernel


class PrepackedLinear(nn.Module):
    """`nn.Linear` for inference with a second copy of its weight reordered once for oneDNN.

    Each row count (tokens in the pass) up to `CALIBRATED_ROWS` takes the kernel that was faster
    when both were timed on this machine; the default one stays where it wins (often one row).
    """

    def __init__(self, linear: nn.Linear, calibrate: bool = True) -> None:
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias
        with torch.no_grad():
            self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), None)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.packed_rows = [True] * (CALIBRATED_ROWS + 1)  # index: rows; whether the packed kernel runs
        if calibrate:
            self.calibrate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        rows = x.numel() // shape[-1]
        if rows <= CALIBRATED_ROWS and not self.packed_rows[rows]:
            return nn.functional.linear(x, self.weight, self.bias)
        out = torch.ops.mkldnn._linear_pointwise(x.reshape(rows, shape[-1]), self.packed, self.bias, "none", [], "")
        return out.reshape(*shape[:-1], self.out_features)

    @torch.inference_mode()
    def calibrate(self, repeats: int = 5) -> None:
        """Time both kernels for 1..CALIBRATED_ROWS rows; keep the faster one for each."""
        for rows in range(1, CALIBRATED_ROWS + 1):
            x = torch.randn(rows, self.in_features, dtype=self.weight.dtype)
            self.packed_rows[rows] = True
            packed = median_seconds(lambda x=x: self(x), repeats)
            self.packed_rows[rows] = False
            default = median_seconds(lambda x=x: self(x), repeats)
            self.packed_rows[rows] = packed < default


def median_seconds(call: Callable[[], object], repeats: int, calls: int = 1) -> float:
    """Seconds per call of `call`: the median of `repeats` timings of `calls` calls each, after one
    call to warm up (the first call may allocate)."""
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


def can_prepack(model: nn.Module) -> bool:
    """oneDNN prepacking applies to float32 models on the CPU of a torch built with oneDNN."""
    param = next(model.parameters())
    return param.device.type == "cpu" and param.dtype == torch.float32 and torch.backends.mkldnn.is_available()


def prepack(model: nn.Module, which: str = DEFAULT_PREPACK) -> str:
    """Replace the output layer ("head") or every linear layer ("all") by its prepacked twin; return
    what was done ("none" where the model is not a float32 model on the CPU)."""
    if which not in PREPACK_CHOICES:
        raise HDError(f"prepack must be one of {', '.join(PREPACK_CHOICES)}, got {which!r}")
    if which == "none" or not can_prepack(model):
        return "none"
    head = model.get_output_embeddings()
    if not isinstance(head, nn.Linear):
        return "none"
    # Layers of one shape run the same kernels: each shape is timed once (SmolLM2: 211 layers, 6 shapes),
    # and its choice kept for the next load on this machine.
    path = kernel_choices_path(head.weight.dtype)
    chosen = _read_choices(path)
    timed = False

    def twin(linear: nn.Linear) -> PrepackedLinear:
        nonlocal timed
        layer = PrepackedLinear(linear, calibrate=False)
        shape = f"{linear.in_features}x{linear.out_features}{'+bias' if linear.bias is not None else ''}"
        if shape not in chosen:
            layer.calibrate()
            chosen[shape], timed = layer.packed_rows, True
        layer.packed_rows = list(chosen[shape])
        return layer

    if which == "all":
        for module in list(model.modules()):
            for name, child in list(module.named_children()):
                if isinstance(child, nn.Linear) and child is not head:
                    setattr(module, name, twin(child))
    model.set_output_embeddings(twin(head))
    if timed:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, json.dumps({"machine": describe_machine(), "packed_rows": chosen}))
        except OSError:
            pass  # a read-only cache: the choices are timed again at the next load
    return which


def kernel_choices_path(dtype: torch.dtype) -> Path:
    """Where this machine's kernel choices are kept: the processor, its vector extensions, the
    threads and torch's version decide which kernel is faster."""
    machine = describe_machine()
    key = json.dumps([machine["cpu"], machine["vector_flags"], machine["threads"], machine["torch"], str(dtype)])
    return cache_dir() / "kernels" / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def _read_choices(path: Path) -> dict[str, list[bool]]:
    """The kept choices, {"in x out[+bias]": packed or not for 0..CALIBRATED_ROWS rows}; {} where there
    are none or the file is damaged (then they are timed again)."""
    try:
        rows = json.loads(path.read_text())["packed_rows"]
        if all(len(v) == CALIBRATED_ROWS + 1 and all(isinstance(b, bool) for b in v) for v in rows.values()):
            return dict(rows)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return {}


def widest_vector(flags: Iterable[str]) -> str | None:
    """The widest vector extension among a processor's flags: "amx", "avx512", "avx2", "avx" or None."""
    flags = set(flags)
    if any(flag.startswith("amx") for flag in flags):
        return "amx"
    return next((w for w in ("avx512", "avx2", "avx") if w in flags or f"{w}f" in flags), None)


def machine_label(machine: Mapping[str, Any] | None) -> str:
    """`describe_machine()`'s record in a few words: "AMD EPYC, avx512, 2 threads"."""
    if not machine or not machine.get("cpu"):
        return "machine not recorded"
    widest, threads = widest_vector(machine.get("vector_flags") or ()), machine.get("threads")
    return ", ".join([str(machine["cpu"]), *([widest] if widest else []), *([f"{threads} threads"] if threads else [])])


def describe_machine() -> dict[str, object]:
    """What a CPU benchmark result depends on: the processor, its vector extensions, the threads."""
    name, flags = "", set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and not name:
                    name = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(value.split())
    except OSError:  # not Linux
        name = platform.processor() or platform.machine()
    vector = sorted(f for f in flags if f.startswith(("avx", "amx")))
    return {"cpu": name, "vector_flags": vector, "threads": torch.get_num_threads(), "torch": torch.__version__}
