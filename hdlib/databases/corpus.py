"""Token-id documents from a text corpus, tokenized as the context looks at decode time.

Sources: the train split of the packaged ShareGPT file (its held-out split is reserved for
evaluation prompts), a ShareGPT-style .json array, a .jsonl file (one document a line: a "text"
field or ShareGPT-style "conversations"), or a text file (one document a line). A conversation is
written through the tokenizer's chat template, so that the corpus holds what a decoding context
holds: the template's turn markers, the user's text and the assistant's answers; without a
template (or when it refuses the conversation) every turn is a document of its own. Tokenization
runs in batches on the Rust tokenizer; documents are kept as int32 arrays.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

try:  # chat templates are jinja2 templates; their raise_exception(...) raises this
    from jinja2 import TemplateError
except ImportError:  # no jinja2: transformers renders no template either
    TemplateError = ValueError  # type: ignore[misc,assignment]

from hdlib.databases.sharegpt import ShareGPTReader
from hdlib.errors import HDError
from hdlib.tiers.suffix_array import MAX_TOKEN

ROLES = {"human": "user", "user": "user", "system": "system"}  # every other ShareGPT speaker answers


class Corpus:
    """Documents of token ids from a source, and what was read."""

    def __init__(self, tokenizer: Any, progress: bool, batch: int = 256) -> None:
        self.tokenizer = tokenizer
        self.progress = progress
        self.batch = batch
        self.documents: list[np.ndarray] = []
        self.counts = {"documents": 0, "conversations": 0, "turns": 0, "characters": 0}
        self._pending: list[str] = []

    def read(self, source: str | Path, limit: int | None) -> dict[str, Any]:
        if str(source) == "sharegpt":
            meta = self._read_sharegpt(None, limit)
        else:
            path = Path(source)
            if not path.is_file():
                raise HDError(f"no corpus at {path}: pass 'sharegpt' or a .json, .jsonl or text file")
            if path.suffix == ".json":
                meta = self._read_sharegpt(path, limit)
            else:
                meta = self._read_lines(path, limit)
        self._flush()
        if not self.documents:
            raise HDError(f"the corpus {source} holds no text")
        return meta

    def _read_sharegpt(self, path: Path | None, limit: int | None) -> dict[str, Any]:
        reader = ShareGPTReader(path)
        bar = progress_bar(
            self.progress, total=reader.path.stat().st_size, desc="hdlib: reading ShareGPT", unit="B", unit_scale=True
        )
        heldout = 0
        for conversation in reader:
            bar.update(reader.report.end_offset - bar.n)
            if conversation.split != "train":
                heldout += 1
                continue
            if limit is not None and self.counts["conversations"] >= limit:
                break
            self._add_conversation(conversation.turns)
        bar.close()
        report = reader.report
        self.counts["heldout_skipped"] = heldout
        meta = {
            "kind": "sharegpt",
            "path": str(reader.path),
            "split": "train",
            "chat_template": bool(getattr(self.tokenizer, "chat_template", None)),
            "limit": limit,
            "sharegpt": {
                "recovered": report.conversations,
                "turns": report.turns,
                "truncated": report.truncated,
                "end_offset": report.end_offset,
                "file_bytes": report.bytes_read,
                "notes": report.notes,
            },
        }
        if self.progress:
            complete = "the whole file" if limit is None else f"the first {limit:,} train conversations"
            print(
                f"hdlib: ShareGPT: {report.conversations:,} complete conversations recovered "
                f"({heldout:,} held out, {self.counts['conversations']:,} used, from {complete})"
                + (f"; {report.notes[0]}" if report.truncated and report.notes else ""),
                file=sys.stderr,
            )
        return meta

    def _read_lines(self, path: Path, limit: int | None) -> dict[str, Any]:
        jsonl = path.suffix == ".jsonl"
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f):
                if limit is not None and number >= limit:
                    break
                if not line.strip():
                    continue
                if not jsonl:
                    self._add_text(line.rstrip("\n"))
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as error:
                    raise HDError(f"{path}:{number + 1} is not JSON ({error.msg})") from None
                if isinstance(row, dict) and isinstance(row.get("conversations"), list):
                    turns = [
                        (str(t.get("from", t.get("role", ""))), t.get("value", t.get("content")))
                        for t in row["conversations"]
                        if isinstance(t, dict)
                    ]
                    self._add_conversation(tuple((who, text) for who, text in turns if isinstance(text, str)))
                elif isinstance(row, dict) and isinstance(row.get("text"), str):
                    self._add_text(row["text"])
                else:
                    raise HDError(f"{path}:{number + 1} has neither a 'text' field nor 'conversations'")
        return {
            "kind": "jsonl" if jsonl else "text",
            "path": str(path.resolve()),
            "limit": limit,
            "chat_template": bool(getattr(self.tokenizer, "chat_template", None)),
        }

    def _add_conversation(self, turns: tuple[tuple[str, str], ...]) -> None:
        """One document written through the chat template; its turns one by one without a template
        (or when the template refuses the conversation, e.g. two user turns in a row)."""
        if not turns:
            self.counts["empty"] = self.counts.get("empty", 0) + 1
            return
        self.counts["conversations"] += 1
        self.counts["turns"] += len(turns)
        self.counts["characters"] += sum(len(text) for _, text in turns)
        if getattr(self.tokenizer, "chat_template", None):
            messages = [{"role": ROLES.get(who, "assistant"), "content": text} for who, text in turns]
            try:
                text = self.tokenizer.apply_chat_template(messages, tokenize=False)
            except (TemplateError, ValueError, TypeError):  # raise_exception(...) in a template
                self.counts["template_refused"] = self.counts.get("template_refused", 0) + 1
            else:
                self._queue(text)
                return
        for _, text in turns:
            self._queue(text)

    def _add_text(self, text: str) -> None:
        self.counts["characters"] += len(text)
        self._queue(text)

    def _queue(self, text: str) -> None:
        if text:
            self._pending.append(text)
            if len(self._pending) >= self.batch:
                self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        texts, self._pending = self._pending, []
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is not None:  # the Rust tokenizer, in parallel, without per-call checks and warnings
            ids = [e.ids for e in backend.encode_batch(texts, add_special_tokens=False)]
        else:
            ids = self.tokenizer(texts, add_special_tokens=False)["input_ids"]
        for row in ids:
            if row:
                arr = np.asarray(row, dtype=np.int64)
                if arr.max() >= MAX_TOKEN:
                    raise HDError(f"token id {int(arr.max())} is too large for the statistics index")
                self.documents.append(arr.astype(np.int32))
                self.counts["documents"] += 1


def progress_bar(enabled: bool, **options: Any) -> Any:
    from tqdm.auto import tqdm

    return tqdm(disable=not enabled, file=sys.stderr, **options)
