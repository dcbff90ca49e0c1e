"""Where hdlib keeps things: the project's own data beside the package, and what it builds once.

The bottom layer (the standard library only), so that any module can find them without importing
the model loader or the database builders.
"""

from __future__ import annotations

import os
from pathlib import Path


def data_dir() -> Path:
    """The repository's data/ folder: the prompt sets and the databases shipped with hdlib."""
    return Path(__file__).resolve().parents[1] / "data"


def cache_dir() -> Path:
    """Where hdlib keeps what it builds once (converted models, stores): $HDLIB_CACHE or ~/.cache/hdlib."""
    return Path(os.environ.get("HDLIB_CACHE") or Path.home() / ".cache" / "hdlib").expanduser()


def built_db_path(kind: str, fingerprint: str) -> Path:
    """Where a database hdlib builds for a tokenizer (`kind`: "model" or "statistics") is cached."""
    return cache_dir() / "db" / f"{kind}-{fingerprint}.npz"
