"""The device check (benchmarks/gpu_check.py) runs its smoke mode end to end through scripts/gpu_check.sh:
the same code as on a GPU, on the CPU with a 2-layer model, and every section of the JSON is there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hdlib.bench.provenance import missing_keys

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = {"meta", "lossless", "model", "forward", "step", "memory", "throughput"}


def test_the_smoke_run_writes_every_section(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts/gpu_check.sh"), "--smoke"], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert (tmp_path / "gpu_check.log").read_text().count("wrote ") == 1
    assert SECTIONS <= set(report) and report["total_s"] > 0
    for name in SECTIONS:
        assert "error" not in report[name] and "unavailable" not in report[name], (name, report[name])
        assert report[name]["seconds"] >= 0

    assert report["meta"]["smoke"] and report["meta"]["device"] == "cpu"
    assert missing_keys(report["provenance"]) == []  # as every results file
    lossless = report["lossless"]
    assert {"llama/float32", "llama/bfloat16", "gemma3/float32", "gemma3/bfloat16"} <= set(lossless)
    assert lossless["float32_ok"] is True and lossless["llama/float32"]["greedy_identical"] == "3/3"
    for row in (lossless[k] for k in lossless if "/" in k):
        assert set(row) >= {"greedy_identical", "sampled_identical", "parted", "near_ties", "divergences"}
        assert all({"position", "gap", "bound", "kind"} <= set(p) for p in row["parted"])

    assert report["model"]["layers"] == 2 and report["model"]["dtype"] == "bfloat16"
    timed = [row for key, row in report["forward"].items() if "/ctx" in key and isinstance(row, dict)]
    assert timed and all(set(row["ms"]) == {"1", "2", "4", "8", "16"} for row in timed)
    assert any(key.startswith("transformers_forward1_ms/") for key in report["forward"])

    step = report["step"]
    assert set(step) >= {"ar", "oracle@16", "oracle@64"}
    for row in (step[k] for k in ("ar", "oracle@16", "oracle@64")):
        assert row["ms_per_step"]["forward"] > 0 and row["overhead_share_of_forward"] > 0
        assert row["host_reads_per_step"]["max"] >= 1  # at least the accepted path is read
        assert row["cuda_syncs_per_step"].startswith("unavailable")  # no CUDA here
    assert step["oracle@64"]["nodes_per_step"] > step["oracle@16"]["nodes_per_step"] > 1
    assert all(isinstance(step[k]["identical_to_ar"], bool) for k in ("oracle@16", "oracle@64"))  # bf16: may part

    assert report["memory"]["tree_nodes"] == 64
    throughput = report["throughput"]
    assert {"ar", "hd:C", "hd:C@16", "hf", "hf-pld"} <= set(throughput)
    assert all(throughput[m]["tokens_per_s"] > 0 and throughput[m]["tokens"] == 16 for m in ("ar", "hd:C", "hf-pld"))
