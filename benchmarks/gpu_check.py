"""The device check: hdlib on one CUDA GPU, in one command of a few minutes, written to one JSON file.

    bash scripts/gpu_check.sh                          # on a CUDA machine: $OUT/gpu_check.json (docs/gpu.md)
    python -m benchmarks.gpu_check --out PATH          # the same from the repository root (a CUDA GPU needed)
    python -m benchmarks.gpu_check --smoke --out PATH  # the same code on the CPU, a 2-layer model, about a minute

The shell script (benchmarks/gpu_check.sh, which scripts/gpu_check.sh runs) adds the GPU's name from
nvidia-smi, a time limit and the log. Nothing is downloaded: the tiny models of tests/support/tiny.py and a
Llama-2-7B-shaped model with random weights built on the device. Random weights make MAT
meaningless, so an oracle tier that knows plain decoding's answer (tests/support/oracle.py; the test helpers
import as `tests.support.tiny` and `tests.support.oracle` from the root) stands in for real drafts where the
engine's cost is measured.

The JSON holds one object per section, each with its seconds; a section that raised holds "error"
(the traceback is on stderr), a piece that this device or this hdlib lacks is "unavailable":

  meta        device, torch, CUDA and transformers versions, the checkout's commit, the plan
  provenance  what made the result, as in every results file (`hdlib.bench.provenance`)
  lossless    tiny Llama and Gemma 3 on the device in float32 and bfloat16: random prompts, tier sets
              with an oracle tier, fixed, adaptive and value-tree budgets, greedy; and sampled HD
              against plain sampling with the same seed (the default Gumbel rule). Every answer that
              parts from plain decoding's is listed with its first differing position and plain
              decoding's two best logits there (`hdlib.bench.divergence`: near-tie or divergence);
              `float32_ok`: no float32 answer parts beyond the near-tie bound
  model       the 7B-shaped model: its shape, dtype, parameters, build seconds
  forward     ms of one pass over k = 1..128 tokens (a chain under hdlib's tree mask) after 256 and
              ~4k cached tokens, per KV cache kind hdlib offers; transformers' own one-token step
  step        per step: the engine's phases in ms (`StepTimes`' fields), its overhead against the
              forward pass, host reads (calls that read a tensor's value, counted by a
              TorchFunctionMode) and, on CUDA, synchronisations (torch's sync debug mode), for ar
              and an oracle tier at budgets 16 and 64
  memory      peak GPU memory: the weights, a ~4k-token prefill, then one pass over a 64-node tree
  throughput  tokens/s of ar, hd:C (the value tree and a fixed 16) and transformers' generate,
              greedy and with prompt lookup; whether each answer is ar's

Here: the command line and the tables of docs/benchmarks.md; the sections are in benchmarks/gpu_checks/.
Where hdlib's API moves, mend the few calls in `make_verifier`, `cache_kinds` (gpu_checks/instruments.py)
and the sections.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks.gpu_checks.engine import step, throughput
from benchmarks.gpu_checks.lossless import lossless
from benchmarks.gpu_checks.model import build, forward, memory
from benchmarks.gpu_checks.report import GPU, SMOKE, Report, meta
from benchmarks.markdown import code, f1, f2, table, x
from hdlib.bench.provenance import provenance


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="the JSON file (default: $OUT/gpu_check.json, else ./gpu_check.json)")
    parser.add_argument(
        "--smoke", action="store_true", help="the CPU, a 2-layer model, short lengths (also HDLIB_GPU_SMOKE=1)"
    )
    args = parser.parse_args(argv)
    smoke = args.smoke or os.environ.get("HDLIB_GPU_SMOKE") == "1"
    plan = SMOKE if smoke else GPU
    if not smoke and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; --smoke runs the same code on the CPU", file=sys.stderr)
        return 2
    path = args.out or Path(os.environ.get("OUT") or ".") / "gpu_check.json"
    report = Report(path, plan)
    report.section("meta", meta, plan, smoke)
    report.data["provenance"] = dict(provenance())  # as every results file: commit, versions, host
    report.section("lossless", lossless, plan)
    with torch.no_grad():
        model = report.section("model", build, plan)
    if model is None:
        for name in ("forward", "step", "memory", "throughput"):
            report.data[name] = {"unavailable": "the 7B-shaped model was not built (see model)"}
    else:
        with torch.inference_mode():  # the KV caches hdlib fills are inference tensors: touched only in this mode
            report.section("forward", forward, plan, model)
            report.section("step", step, plan, model)
            report.section("memory", memory, plan, model)
            report.section("throughput", throughput, plan, model, report.data["forward"])
    report.data["total_s"] = round(time.perf_counter() - report.start, 1)
    report.save()
    failed = [name for name, out in report.data.items() if isinstance(out, dict) and "error" in out]
    fp32_ok = report.data["lossless"].get("float32_ok")
    print(f"wrote {path} in {report.data['total_s']} s; float32 lossless: {fp32_ok}; failed: {failed or 'none'}")
    return 1 if fp32_ok is False else 3 if failed else 0


LOSSLESS_COLUMNS = ("greedy_identical", "sampled_identical", "near_ties", "divergences")


def tables(data: Mapping[str, Any]) -> list[str]:
    """The check's JSON (docs/gpu.md): losslessness, tokens/s per method."""
    out = []
    lossless = data.get("lossless") or {}
    rows = [
        [key, *("" if v.get(k) is None else str(v[k]) for k in LOSSLESS_COLUMNS)]
        for key, v in sorted(lossless.items())
        if "/" in key and isinstance(v, Mapping)
    ]
    if rows:
        out += [
            f"Lossless on the device (float32 within the near-tie bound: {lossless.get('float32_ok')}):",
            table(["model/dtype", "greedy identical", "sampled identical", "near-ties", "divergences"], rows),
        ]
    throughput = data.get("throughput") or {}
    speedups = throughput.get("speedup_over_ar") or {}
    rows = [
        [
            code(name),
            f1(r["tokens_per_s"]),
            f2(r["mat"]) if "mat" in r else "",
            x(speedups[name]) if name in speedups else "",
            "" if name == "ar" else ("yes" if r.get("identical_to_ar") else "no"),
        ]
        for name, r in throughput.items()
        if isinstance(r, Mapping) and "tokens_per_s" in r
    ]
    if rows:
        out += [
            "Tokens per second on the 7B-shaped model with random weights:",
            table(["method", "tokens/s", "MAT", "speedup", "identical to `ar`"], rows),
        ]
    return out or ["(no section of the check finished)"]


def device_text(data: Mapping[str, Any]) -> str:
    meta = data.get("meta") or {}
    keys = ("device", "capability", "gpu_memory_gb", "torch", "cuda", "transformers", "threads", "commit")
    return "; ".join(f"{k} {meta[k]}" for k in keys if meta.get(k) is not None) or "not recorded in the file"


if __name__ == "__main__":
    sys.exit(main())
