"""What one run of the device check measures (`Plan`), the JSON file it writes section by section
(`Report`), and its first section: the device, the versions and the checkout (`meta`)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from benchmarks.gpu_checks.instruments import cache_kinds, gb

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Plan:
    """What one run measures, and how much of it."""

    device: str
    cases: int  # lossless: greedy cases per tiny model and dtype
    sampled: int  # lossless: sampled cases per tiny model and dtype
    layers: int  # the 7B-shaped model (Llama-2-7B: 32 layers, 4096 wide, 11008 in the MLP, 32 heads)
    hidden: int
    intermediate: int
    heads: int
    contexts: tuple[int, ...]  # cached tokens before the timed passes; the last + 128 fills 4096
    ks: tuple[int, ...]  # tokens per timed pass
    repeats: int  # timed passes per k (the median is kept)
    memory_context: int  # cached tokens before the 64-node tree pass (root and tree then fill 4096)
    prompt_len: int  # the step and throughput sections' prompt
    new_tokens: int
    deadline_s: float  # no section starts after this (the wrapper's limit is 520 s)


KS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 80, 96, 112, 128)
GPU = Plan("cuda", 40, 12, 32, 4096, 11008, 32, (256, 3968), KS, 5, 4031, 300, 96, 420.0)
SMOKE = Plan("cpu", 3, 2, 2, 128, 256, 4, (32, 96), (1, 2, 4, 8, 16), 2, 192, 60, 16, 300.0)


class Unavailable(Exception):
    """A piece this device or this hdlib does not have: recorded as "unavailable", not an error."""


class Report:
    """The JSON file, written again after every section, so a run cut short keeps what it measured."""

    def __init__(self, path: Path, plan: Plan) -> None:
        self.path, self.plan, self.start = path, plan, time.perf_counter()
        self.data: dict[str, Any] = {}

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        tmp.replace(self.path)

    def section(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Run `fn(out, *args)`, `out` being this section's dict; keep what it filled in if it fails."""
        out: dict[str, Any] = {}
        self.data[name] = out
        elapsed = time.perf_counter() - self.start
        if elapsed > self.plan.deadline_s:
            out["unavailable"] = f"skipped: {elapsed:.0f} s gone, past the plan's {self.plan.deadline_s:.0f} s"
            self.save()
            return None
        print(f"[{elapsed:6.1f} s] {name}", flush=True)
        start, result = time.perf_counter(), None
        try:
            result = fn(out, *args)
        except Unavailable as e:
            out["unavailable"] = str(e)
        except Exception as e:  # noqa: BLE001  (any failure is recorded; the next section still runs)
            out["error"] = f"{type(e).__name__}: {e}"
            traceback.print_exc()
        out["seconds"] = round(time.perf_counter() - start, 1)
        self.save()
        return result


def meta(out: dict[str, Any], plan: Plan, smoke: bool) -> None:
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=10)
            return done.stdout.strip() if done.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            return None

    import transformers

    cuda = torch.cuda.is_available()
    out.update(
        smoke=smoke,
        device=torch.cuda.get_device_name(0) if cuda else "cpu",
        capability=".".join(map(str, torch.cuda.get_device_capability(0))) if cuda else None,
        gpu_memory_gb=gb(torch.cuda.get_device_properties(0).total_memory) if cuda else None,
        bf16_supported=torch.cuda.is_bf16_supported() if cuda else None,
        torch=torch.__version__,
        cuda=torch.version.cuda,
        transformers=transformers.__version__,
        python=sys.version.split()[0],
        commit=git("rev-parse", "HEAD"),
        changed_files=len((git("status", "--porcelain") or "").splitlines()) if git("rev-parse", "HEAD") else None,
        cache_kinds=[k or "default" for k in cache_kinds()],
        threads=torch.get_num_threads(),
        plan=asdict(plan),
    )
