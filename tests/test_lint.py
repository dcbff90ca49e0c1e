"""The code is ruff-clean: lines within 120 characters, imports sorted, no unused names (the rules are
in pyproject.toml; `make lint` runs the same check)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def ruff() -> list[str]:
    found = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if found is None:
        pytest.skip("ruff is not installed (it is in the dev extra: pip install -e '.[dev]')")
    return [found]


def test_the_code_is_ruff_clean():
    result = subprocess.run(
        [*ruff(), "check", "--output-format", "concise", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_check_sees_a_long_line(tmp_path):
    """The negative control: the same configuration refuses a line of 121 characters."""
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (tmp_path / "long.py").write_text("x = " + repr("a" * 115) + "\n")
    result = subprocess.run(
        [*ruff(), "check", "--output-format", "concise", "."], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 1 and "E501" in result.stdout
