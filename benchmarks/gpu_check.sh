#!/usr/bin/env bash
# The device check in one command (docs/gpu.md), from any folder; `bash scripts/gpu_check.sh` runs this:
#   bash scripts/gpu_check.sh            on a machine with a CUDA GPU: $OUT/gpu_check.json and $OUT/gpu_check.log
#   bash scripts/gpu_check.sh --smoke    the same code on the CPU with a 2-layer model (about a minute)
# OUT defaults to /tmp/gpu_check; PYTHON to python3 (one with torch and transformers; a .venv's works too).
# Nothing is downloaded. Exit status: 0 all well, 1 a float32 answer parted beyond the near-tie bound,
# 3 a section failed (its "error" is in the JSON, its traceback in the log), 124 time out.
# The result is committed as benchmarks/results/gpu/<device>.json (h200.json), then `make benchmarks-doc`.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."  # the repository root: python -m finds hdlib and benchmarks/ here
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export TOKENIZERS_PARALLELISM=false HDLIB_CACHE=${HDLIB_CACHE:-/tmp/hdlib-gpu-check-cache}
{
  if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; fi
  timeout 510 "${PYTHON:-python3}" -m benchmarks.gpu_check --out "$OUT/gpu_check.json" "$@"
} 2>&1 | tee "$OUT/gpu_check.log"
exit "${PIPESTATUS[0]}"
