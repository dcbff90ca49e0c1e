#!/usr/bin/env bash
# The device check (docs/gpu.md): benchmarks/gpu_check.sh, beside the Python it runs (benchmarks/gpu_check.py).
exec bash "$(dirname "${BASH_SOURCE[0]}")/../benchmarks/gpu_check.sh" "$@"
