"""Database files: arrays and JSON metadata in one uncompressed .npz, written atomically.

Opening a database never runs code: numpy reads it with `allow_pickle=False`, and the metadata is
a JSON document stored as bytes. Every file says what it is (format version, tier), what it was
built for (the model and a fingerprint of its tokenizer's vocabulary), from what (source, n,
counts) and when, so that a database built for another tokenizer is refused instead of drafting
nonsense. The zip container checks a CRC of every array on read: a truncated or corrupt file is
refused, never used.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from hdlib.errors import HDError

FORMAT = "hdlib-db"
FORMAT_VERSION = 1
_META = "__meta__"


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """16 hex characters naming a vocabulary (a tokenizer's `get_vocab()`), so that stores of token
    ids are reused only with it."""
    items = sorted(tokenizer.get_vocab().items())
    return hashlib.sha256(json.dumps(items, ensure_ascii=False).encode("utf-8")).hexdigest()[:16]


def _temporary(path: Path) -> Path:
    """Where a file is written before it is renamed to `path`: same folder, hidden, this process's."""
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


def write_atomic(path: str | Path, write: Callable[[BinaryIO], None]) -> Path:
    """Run `write` into a temporary file beside `path`, then rename it to `path`: a reader sees the
    old file or the new one, never half of it, and a `write` that raises leaves nothing behind."""
    path = Path(path)
    tmp = _temporary(path)
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_text_atomic(path: str | Path, text: str) -> Path:
    """`text` (UTF-8) written to `path` atomically (`write_atomic`)."""
    return write_atomic(path, lambda f: f.write(text.encode("utf-8")))


def write_folder_atomic(target: Path, write: Callable[[Path], None]) -> None:
    """`write_atomic` for a folder: run `write` into a fresh folder beside `target`, then rename that
    folder into place.

    Readers only ever open `target`, so an interrupted write leaves nothing they would use; when
    another process finished first, its folder is as good as ours and ours is dropped.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    try:
        write(partial)
        os.replace(partial, target)
    except OSError:
        if not target.is_dir():
            raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def write_db(path: str | Path, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> Path:
    """Write `arrays` and `meta` (JSON-able) to `path`, atomically (`write_atomic`)."""
    path = Path(path)
    if _META in arrays:
        raise ValueError(f"array name {_META!r} is reserved")
    full = {"format": FORMAT, "version": FORMAT_VERSION, "written": time.strftime("%Y-%m-%dT%H:%M:%S"), **meta}
    encoded = np.frombuffer(json.dumps(full, sort_keys=True).encode("utf-8"), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(path, lambda f: np.savez(f, **{_META: encoded}, **arrays))


def read_meta(path: str | Path) -> dict[str, Any]:
    """The metadata alone (cheap: the arrays are not read)."""
    return _open(Path(path), arrays=False)[0]


def read_db(
    path: str | Path, tier: str | None = None, fingerprint: str | None = None
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Metadata and arrays of a database; refused unless whole, of this format, tier and tokenizer."""
    path = Path(path)
    meta, arrays = _open(path, arrays=True)
    if tier is not None and meta.get("tier") != tier:
        raise HDError(f"{path} holds a {meta.get('tier')} database, not a {tier} database")
    if fingerprint is not None and meta.get("tokenizer") != fingerprint:
        raise HDError(
            f"{path} was built for another tokenizer (model {meta.get('model')!r}, vocabulary "
            f"{meta.get('tokenizer')}; this model's is {fingerprint}): rebuild it with `hdlib build-db`"
        )
    return meta, arrays


def _open(path: Path, arrays: bool) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    if not path.is_file():
        raise HDError(f"no database at {path}")
    try:
        with np.load(path, allow_pickle=False) as npz:
            meta = json.loads(bytes(npz[_META]).decode("utf-8"))
            if not isinstance(meta, dict) or meta.get("format") != FORMAT:
                raise HDError(f"{path} is not an hdlib database")
            if meta.get("version") != FORMAT_VERSION:
                raise HDError(
                    f"{path} has database format version {meta.get('version')}, this hdlib reads "
                    f"{FORMAT_VERSION}: rebuild it with `hdlib build-db`"
                )
            data = {name: npz[name] for name in npz.files if name != _META} if arrays else {}
    except HDError:
        raise
    except (zipfile.BadZipFile, OSError, ValueError, KeyError, EOFError, UnicodeDecodeError) as error:
        # ValueError also covers numpy refusing a pickled array: such a file is not ours.
        raise HDError(f"{path} is truncated or corrupt ({type(error).__name__}: {error}): rebuild it") from None
    return meta, data
