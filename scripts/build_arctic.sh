#!/usr/bin/env bash
# SuffixDecoding's own engine, Snowflake's arctic-inference 0.3.0 (a source distribution), built into
# a virtual environment against its torch (about half a minute): .venv for hdlib's suffix tier
# (scripts/setup.sh), .venv-vllm for vLLM's suffix method (scripts/setup_vllm.sh). nanobind 2.9.2,
# and cmake and ninja from pip where the system has none. Where it does not build (a C++17 compiler
# is needed) it says so and exits 0: what needs it then says what is missing.
#
#   bash scripts/build_arctic.sh VENV TAG WHAT    e.g. .venv setup "the suffix tier"
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV=$1
TAG=$2
WHAT=$3
PY=$VENV/bin/python
ARCTIC_PKG=arctic-inference==0.3.0

say() { printf '[%s] %s\n' "$TAG" "$*"; }
pip_install() {
    { "$PY" -m pip install -q "$@" 2>&1 1>&3 | sed "/^WARNING: Location 'file:.*is ignored/d" >&2; } 3>&1
}

say "building $ARCTIC_PKG (SuffixDecoding's C++ suffix trees) for $WHAT"
tools="nanobind==2.9.2"
command -v cmake >/dev/null 2>&1 || tools="$tools cmake"
command -v ninja >/dev/null 2>&1 || tools="$tools ninja"
# shellcheck disable=SC2086  (one word per tool)
pip_install $tools
if ! CMAKE_ARGS="-DPython_EXECUTABLE=$PWD/$PY" PATH="$PWD/$VENV/bin:$PATH" \
    pip_install --no-build-isolation --no-deps "$ARCTIC_PKG"; then
    say "note: $ARCTIC_PKG did not build (a C++17 compiler is needed): $WHAT is off here"
fi
