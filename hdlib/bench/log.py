"""The raw results file of a benchmark run: written as it goes, so that `--resume` can continue it.

JSON lines. The first holds the run's settings, `{"settings": {...}}`: model, device, temperature,
max_new_tokens, the repeats and the seed of the methods' order, the acceptance prior's digest, the
methods (expanded, `ar` first), the question ids in order and a digest of the questions' text. Each
further line is one answered question in one repeat (`hdlib.bench.QuestionRuns.to_json`: each
method's per-turn counts, seconds, tokens per tier and a digest of the output tokens). A line is
written whole, flushed and synced before the next question starts, so an interrupted run loses at
most the question it was on; a last line cut short by a crash is dropped on resume.

A run resumes only with the same settings (else HDError says which differ); the final metrics are
computed from these records alone, so a resumed run and an uninterrupted one aggregate alike. Another
harness keeps records of its own kind the same way (`ResultsLog(record=...)`: benchmarks/served_load.py
keeps one line per block of requests served).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from hdlib.bench.records import QuestionRuns
from hdlib.bench.specbench import Question
from hdlib.errors import HDError
from hdlib.store import write_text_atomic


def run_settings(
    model: str,
    device: str,
    temperature: float,
    max_new_tokens: int,
    methods: Sequence[str],
    questions: Sequence[Question],
    dtype: str = "float32",
    sampling_rule: str = "gumbel",
    prompt_format: str = "auto",
    repeats: int = 1,
    order_seed: int = 0,
    prior: str = "",
) -> dict[str, object]:
    """What must not change between an interrupted run and its resumption (`prior`: the digest of
    the acceptance prior's snapshot; "" where no method uses one)."""
    text = json.dumps([[q.question_id, q.category, list(q.turns)] for q in questions], ensure_ascii=False)
    return {
        "model": model,
        "device": device,
        **({"dtype": dtype} if dtype != "float32" else {}),  # (absent in float32: older logs still resume)
        "temperature": float(temperature),
        **({"sampling_rule": sampling_rule} if temperature > 0 else {}),
        **({"prompt_format": prompt_format} if prompt_format != "auto" else {}),  # (as dtype: older logs resume)
        "max_new_tokens": int(max_new_tokens),
        **({"repeats": int(repeats)} if repeats != 1 else {}),  # (as dtype: older logs resume)
        "order_seed": int(order_seed),
        **({"prior": prior} if prior else {}),
        "methods": list(methods),
        "question_ids": [q.question_id for q in questions],
        "questions_digest": hashlib.sha256(text.encode()).hexdigest()[:16],
    }


def raw_path(out: str | Path) -> Path:
    """The raw results file that goes with the results file `out`: results.json -> results.raw.jsonl."""
    out = Path(out)
    return out.with_name(f"{out.stem}.raw.jsonl")


class Record(Protocol):
    """A line of a raw results file: written by `to_json`, read back by the class's `from_json`."""

    def to_json(self) -> dict[str, Any]: ...


class ResultsLog:
    """The raw results file at `path` for a run with `settings`; `done` holds what it answered already
    (`record`'s, by default an answered question).

    Without `resume`, a file that already holds answered questions is refused (it would be lost);
    with it, a missing file starts a new run.
    """

    def __init__(self, path: str | Path, settings: dict[str, object], resume: bool, record: Any = QuestionRuns) -> None:
        self.path = Path(path)
        self.settings = settings
        self.done: list[Any] = []
        self._keep_lines: list[str] | None = None  # rewrite the file with these first (a cut line dropped)
        if not self.path.exists():
            return
        lines, cut = self._read_lines()
        if len(lines) <= 1:  # no question answered yet: nothing to keep
            self._keep_lines = [json.dumps({"settings": settings})]
            return
        if not resume:
            raise HDError(
                f"{self.path} holds the results of an earlier run: pass --resume to continue it, "
                "or delete it (or choose another --out) to start over"
            )
        self._check_settings(lines[0])
        for number, line in enumerate(lines[1:], 2):
            try:
                self.done.append(record.from_json(json.loads(line)))
            except (ValueError, KeyError, TypeError) as e:
                raise HDError(
                    f"{self.path}, line {number}: not a record of this run ({e}): the file is damaged"
                ) from None
        if cut:
            self._keep_lines = lines

    def _read_lines(self) -> tuple[list[str], bool]:
        """The complete lines, and whether an incomplete last line (a write cut short) was dropped."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise HDError(f"cannot read {self.path}: {e}") from None
        lines = text.split("\n")
        tail = lines.pop()  # "" when the file ends with a newline
        if tail:
            try:
                json.loads(tail)
                lines.append(tail)
            except ValueError:
                return [line for line in lines if line], True
        return [line for line in lines if line], False

    def _check_settings(self, header: str) -> None:
        try:
            earlier = json.loads(header)["settings"]
        except (ValueError, KeyError, TypeError):
            raise HDError(f"{self.path} does not start with a run's settings: it is not a raw results file") from None
        differ = [k for k in sorted({*earlier, *self.settings}) if earlier.get(k) != self.settings.get(k)]
        if differ:
            shown = "; ".join(
                f"{k}: {_short(earlier.get(k))} there, {_short(self.settings.get(k))} now" for k in differ
            )
            raise HDError(
                f"cannot resume {self.path}: it was run with other settings ({shown}); "
                "resume with the same ones, or choose another --out"
            )

    def append(self, answered: Record) -> None:
        """Add one record (an answered question), durably, before the run goes on."""
        if self._keep_lines is not None or not self.path.exists():
            lines = self._keep_lines or [json.dumps({"settings": self.settings})]
            write_text_atomic(self.path, "".join(f"{line}\n" for line in lines))
            self._keep_lines = None
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(answered.to_json()) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.done.append(answered)


def _short(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."
