"""Whether SuffixDecoding's engine (arctic-inference, built by scripts/setup.sh) is here for the tests."""

from __future__ import annotations

import importlib.util
import os

import pytest


def needs_arctic_inference() -> None:
    """Skip where arctic-inference is not installed (it needs a C++17 compiler); in CI fail instead:
    the set-up there builds it, so its absence is a broken set-up, not a machine without a compiler."""
    if importlib.util.find_spec("arctic_inference") is None:
        if os.environ.get("CI"):
            pytest.fail("arctic-inference is not installed: scripts/setup.sh builds it")
        pytest.skip("arctic-inference is not installed (scripts/setup.sh builds it; a C++17 compiler is needed)")
