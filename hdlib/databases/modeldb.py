"""Building the model tier's database: the n-grams the target model writes in the most answers.

A data job, not the HD engine: the model answers a set of prompts greedily in its prompt format (its
chat template, or FastChat's vicuna format when it has none: `ModelText.encode_prompt`), batched,
left-padded, with transformers' `generate`; the n-grams of its answers are counted by document
frequency (an n-gram counts once per answer); the top K are kept.

Answers are written in shards of `shard_size` prompts, each a database file written atomically into
a work folder named by what decides the answers (the model's weights, the generation settings); a
shard's file is named by its prompts. Run the same build again after a kill and it skips the
finished shards: a kill loses at most the shard in progress, and the result is the one an
uninterrupted build gives. A build over more of the same prompts (a larger `limit`) reuses them too.

Default prompts: the first human turns of ShareGPT's *train* split (see `hdlib.databases.sharegpt`: the
held-out split is reserved for evaluation and never used here), in file order.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from hdlib.databases import sharegpt
from hdlib.databases.answerers import Answerer, TransformersAnswerer
from hdlib.errors import HDError
from hdlib.models.loading import DEFAULT_MODEL, LoadedModel, ModelText
from hdlib.paths import built_db_path, cache_dir, data_dir
from hdlib.store import read_db, write_db
from hdlib.tiers.base import Tier

DEFAULT_N = 5
DEFAULT_TOP_K = 100_000
SHARD_TIER = "model-shard"
# Bump when what a shard holds, or how its answers are made, changes: old work folders are then unused.
_SHARD_FORMAT = 1
# The databases shipped in data/db, by packaged model name.
SHIPPED = {DEFAULT_MODEL: "smollm2-135m.model.npz"}


def default_model_db_path(lm: ModelText) -> Path:
    """Where the model database for `lm` lives: shipped in data/db for a packaged model, else in the cache."""
    if lm.name in SHIPPED:
        return data_dir() / "db" / SHIPPED[lm.name]
    return built_db_path("model", lm.fingerprint)


# --- prompts -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PromptSet:
    prompts: list[str]
    source: str  # what they are, for the database's metadata
    split: str | None  # the ShareGPT split they come from; None for a file or a list


def load_prompts(prompts: None | str | Path | Sequence[str] = None, limit: int | None = None) -> PromptSet:
    """The prompts to answer: ShareGPT's train split (None), a JSONL or text file, or a list of strings."""
    if limit is not None and limit < 1:
        raise HDError(f"limit must be a positive number of prompts, got {limit}")
    if prompts is None:
        texts = sharegpt.prompts("train", limit=limit)
        source = f"ShareGPT V3 ({sharegpt.DISTRIBUTION}), first human turns, train split, file order"
        return PromptSet(texts, source + (f", first {limit}" if limit else ""), "train")
    if isinstance(prompts, (str, Path)):
        path = Path(prompts)
        texts = read_prompt_file(path)[:limit]
        return PromptSet(texts, f"prompt file {path.name}" + (f", first {limit}" if limit else ""), None)
    texts = [str(p) for p in prompts][:limit]
    return PromptSet(texts, f"{len(texts)} prompts given as a list", None)


_JSON_FIELDS = ("prompt", "text", "instruction", "question", "input", "content")


def read_prompt_file(path: str | Path) -> list[str]:
    """Prompts from a file: JSONL (one per line: a string, an object with a `prompt`/`text`/... field,
    `turns`, or ShareGPT-style `conversations`: the first turn), or plain text, one prompt per line."""
    path = Path(path)
    if not path.is_file():
        raise HDError(f"no prompt file at {path}")
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if path.suffix not in (".jsonl", ".json"):
        return [line.strip() for line in lines]
    out = []
    for number, line in enumerate(lines, 1):
        try:
            item = json.loads(line)
        except json.JSONDecodeError as error:
            raise HDError(f"{path}:{number} is not a JSON line ({error.msg})") from None
        text = _prompt_of(item)
        if text is None:
            raise HDError(
                f"{path}:{number} holds no prompt: give a string or a field {', '.join(_JSON_FIELDS)} or turns"
            )
        if text.strip():
            out.append(text)
    return out


def _prompt_of(item: Any) -> str | None:
    if isinstance(item, str):
        return item
    if not isinstance(item, dict):
        return None
    for name in _JSON_FIELDS:
        if isinstance(item.get(name), str):
            return item[name]
    turns = item.get("turns") or item.get("conversations")
    if isinstance(turns, list) and turns:
        first = turns[0]
        return first if isinstance(first, str) else first.get("value") if isinstance(first, dict) else None
    return None


# --- counting ----------------------------------------------------------------------------------


def count_ngrams(answers: Sequence[Sequence[int]], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every distinct n-gram of `answers` (K, n) and its document frequency (K,), ranked.

    An n-gram counts once per answer it occurs in. Rank: most answers first, ties by token ids in
    order (smallest first), so equal inputs give equal arrays.
    """
    if n < 2:
        raise HDError(f"n-grams need n >= 2, got {n}")
    rows = [
        np.column_stack([np.full(len(a) - n + 1, doc), np.lib.stride_tricks.sliding_window_view(a, n)])
        for doc, a in enumerate(np.asarray(a, dtype=np.int64) for a in answers)
        if len(a) >= n
    ]
    if not rows:
        return np.zeros((0, n), np.int32), np.zeros(0, np.int32)
    per_doc = np.unique(np.concatenate(rows), axis=0)[:, 1:]  # (doc, n-gram) pairs, each once
    ngrams, doc_freq = np.unique(per_doc, axis=0, return_counts=True)
    order = np.lexsort([ngrams[:, j] for j in range(n - 1, -1, -1)] + [-doc_freq])
    return ngrams[order].astype(np.int32), doc_freq[order].astype(np.int32)


# --- generation --------------------------------------------------------------------------------


def encode_truncated(lm: LoadedModel, prompt: str, max_tokens: int) -> tuple[list[int], bool]:
    """The ids of `prompt` in its prompt format, its text cut so that they fit in `max_tokens`; whether it was cut."""
    ids = lm.encode_prompt(prompt)
    if len(ids) <= max_tokens:
        return ids, False
    text_ids = lm.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    keep = len(text_ids) - (len(ids) - max_tokens)
    while keep > 0:  # re-tokenising the cut text may merge differently at the cut: shrink until it fits
        ids = lm.encode_prompt(lm.tokenizer.decode(text_ids[:keep]))
        if len(ids) <= max_tokens:
            return ids, True
        keep -= max(1, len(ids) - max_tokens)
    raise HDError(f"the prompt format alone takes more than {max_tokens} tokens: raise max_prompt_tokens")


# --- the build ---------------------------------------------------------------------------------


def build_model_db(
    lm: ModelText,
    out: str | Path | None = None,
    prompts: None | str | Path | Sequence[str] = None,
    limit: int | None = None,
    n: int = DEFAULT_N,
    top_k: int = DEFAULT_TOP_K,
    max_new_tokens: int = 256,
    batch_size: int = 8,
    shard_size: int = 64,
    work_dir: str | Path | None = None,
    progress: bool = True,
    max_prompt_tokens: int = 512,
    command: str | None = None,
    answerer: Answerer | None = None,
) -> Path:
    """Answer the prompts with `lm`, count the n-grams of the answers, write the top K; the file's path.

    `answerer`: who writes the answers (`hdlib.databases.answerers`): by default transformers on `lm` (a
    `LoadedModel`), in batches of `batch_size`; else vLLM's engine or a server, for which `lm` may be
    the model's `ModelText` alone (`load_text`: tokenizer and configs, no weights).

    `out`: default `default_model_db_path(lm)`. `prompts`: None for ShareGPT's train split, a JSONL
    or text file, or a list of strings; `limit` keeps the first so many. `work_dir` holds the answer
    shards (default: under the cache, named by the model and settings); a second run with the same
    arguments resumes there, and one with a larger `limit` reuses what they share. `command`: how
    this build was asked for, for the metadata.
    """
    start = time.perf_counter()
    _check_sizes(lm, n, top_k, max_new_tokens, batch_size, shard_size, max_prompt_tokens)
    out = Path(out) if out is not None else default_model_db_path(lm)
    prompt_set = load_prompts(prompts, limit)
    if not prompt_set.prompts:
        raise HDError(f"no prompts to answer in {prompt_set.source}")
    if answerer is None:
        if not isinstance(lm, LoadedModel):
            raise HDError("without an answerer, the model database is answered by transformers: pass a LoadedModel")
        answerer = TransformersAnswerer(lm, batch_size)
    encoded = [encode_truncated(lm, p, max_prompt_tokens) for p in prompt_set.prompts]
    engine = answerer.identity()
    key = _shard_key(lm, engine, max_new_tokens, max_prompt_tokens, shard_size)
    work = Path(work_dir) if work_dir is not None else cache_dir() / "model-db-work" / key
    answers, generation_s, threads = _answer_in_shards(
        lm, answerer, encoded, prompt_set.prompts, work, key, shard_size, max_new_tokens, progress
    )
    all_ngrams, all_counts = count_ngrams(answers, n)
    kept_ngrams, kept_counts = all_ngrams[:top_k], all_counts[:top_k]
    meta = {
        "tier": Tier.MODEL.name,
        "model": lm.name,
        "tokenizer": lm.fingerprint,
        "n": n,
        "top_k": top_k,
        "source": prompt_set.source,
        "split": prompt_set.split,
        "counts": _counts(encoded, answers, max_new_tokens, all_counts, kept_counts),
        "build": {
            "generation_seconds": round(generation_s, 1),  # all runs together, resumed shards included
            "seconds": round(time.perf_counter() - start, 1),  # this run
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": command or _call_text(lm, prompts, limit, n, top_k, max_new_tokens, batch_size),
            "max_new_tokens": max_new_tokens,
            "max_prompt_tokens": max_prompt_tokens,
            "shard_size": shard_size,
            "engine": {"name": answerer.name, **engine},  # who answered, and what its answers depend on
            **answerer.provenance(),
            "cpu_threads": sorted(threads),  # of the generation, every shard's run
            "torch": torch.__version__,
            "hdlib": importlib.metadata.version("hdlib"),
            "work_key": key,
        },
    }
    return write_db(out, meta, {"ngrams": kept_ngrams, "doc_freq": kept_counts})


def _counts(
    encoded: Sequence[tuple[list[int], bool]],
    answers: Sequence[Sequence[int]],
    max_new_tokens: int,
    all_counts: np.ndarray,
    kept_counts: np.ndarray,
) -> dict[str, int]:
    """What the database was counted from, and what it kept, for its metadata."""
    return {
        "prompts": len(encoded),
        "prompts_truncated": sum(cut for _, cut in encoded),
        "prompt_tokens": sum(len(ids) for ids, _ in encoded),
        "answers": len(answers),
        "answers_ended": sum(len(a) < max_new_tokens for a in answers),  # stopped at an end token
        "answer_tokens": sum(map(len, answers)),
        "distinct_ngrams": len(all_counts),
        "distinct_ngrams_in_2_or_more_answers": int(np.sum(all_counts >= 2)),
        "kept": len(kept_counts),
        "min_kept_doc_freq": int(kept_counts[-1]) if len(kept_counts) else 0,
    }


def _check_sizes(
    lm: ModelText, n: int, top_k: int, max_new_tokens: int, batch_size: int, shard_size: int, max_prompt_tokens: int
) -> None:
    """Every size a positive integer, n-grams of at least 2, a prompt and its answer within the context."""
    sizes = {
        "n": n,
        "top_k": top_k,
        "max_new_tokens": max_new_tokens,
        "batch_size": batch_size,
        "shard_size": shard_size,
        "max_prompt_tokens": max_prompt_tokens,
    }
    for name, value in sizes.items():
        if not isinstance(value, int) or value < 1:
            raise HDError(f"{name} must be a positive integer, got {value!r}")
    if n < 2:
        raise HDError(f"n-grams need n >= 2, got {n}")
    if max_prompt_tokens + max_new_tokens > lm.context_length:
        raise HDError(
            f"max_prompt_tokens + max_new_tokens = {max_prompt_tokens + max_new_tokens} exceeds the model's "
            f"context of {lm.context_length} tokens: lower one of them"
        )


def _shard_key(lm: ModelText, engine: dict, max_new_tokens: int, max_prompt_tokens: int, shard_size: int) -> str:
    """What the answer shards depend on, hashed: shards of another key are never reused."""
    settings = {
        "format": _SHARD_FORMAT,
        "tokenizer": lm.fingerprint,
        "max_new_tokens": max_new_tokens,
        "max_prompt_tokens": max_prompt_tokens,
        "shard_size": shard_size,
        **engine,
    }
    prompt_format = lm.resolve_prompt_format()
    if prompt_format != "chat-template":  # (absent for a chat template: shards written before stay valid)
        settings["prompt_format"] = prompt_format
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def _answer_in_shards(
    lm: ModelText,
    answerer: Answerer,
    encoded: Sequence[tuple[list[int], bool]],
    prompts: Sequence[str],
    work: Path,
    key: str,
    shard_size: int,
    max_new_tokens: int,
    progress: bool,
) -> tuple[list[list[int]], float, set[int]]:
    """Every prompt's answer, shard by shard, each shard written as it is done and read back where an
    earlier run wrote it; with the seconds of answering (resumed shards included) and the torch CPU
    threads of the runs that answered.

    Shards are runs of the prompt list, each named by its prompts: a build over more (or fewer) of
    the same prompts reuses every shard it shares with an earlier one."""
    shards = [list(range(i, min(i + shard_size, len(encoded)))) for i in range(0, len(encoded), shard_size)]
    paths = [_shard_path(work, i, key, [prompts[j] for j in shard]) for i, shard in enumerate(shards)]
    done = [_read_shard(path, key, lm.fingerprint, len(shard)) for path, shard in zip(paths, shards, strict=True)]
    answers: list[list[int]] = []
    generation_s = 0.0
    threads: set[int] = set()
    bar = tqdm(
        total=len(encoded),
        initial=sum(len(shard) for shard, got in zip(shards, done, strict=True) if got is not None),
        unit="prompt",
        desc="model db: answering",
        disable=not progress,
        dynamic_ncols=True,
    )
    with bar:
        for shard, path, got in zip(shards, paths, done, strict=True):
            if got is None:
                shard_start = time.perf_counter()
                new = answerer.answer([encoded[j][0] for j in shard], max_new_tokens, bar.update)
                got = (new, time.perf_counter() - shard_start, torch.get_num_threads())
                _write_shard(path, key, lm.fingerprint, *got)
            answers += got[0]
            generation_s += got[1]
            threads.add(got[2])
    return answers, generation_s, threads


def _shard_path(work: Path, index: int, key: str, prompts: list[str]) -> Path:
    named = hashlib.sha256(json.dumps([key, prompts]).encode("utf-8")).hexdigest()[:12]
    return work / f"shard-{index:05d}-{named}.npz"


def _write_shard(
    path: Path, key: str, fingerprint: str, answers: list[list[int]], seconds: float, threads: int
) -> None:
    lengths = np.array([len(a) for a in answers], dtype=np.int64)
    arrays = {
        "offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),  # (A + 1,)
        "tokens": np.array([t for a in answers for t in a], dtype=np.int32),  # (sum of lengths,)
    }
    meta = {"tier": SHARD_TIER, "tokenizer": fingerprint, "key": key, "seconds": seconds, "cpu_threads": threads}
    write_db(path, meta, arrays)


def _read_shard(path: Path, key: str, fingerprint: str, size: int) -> tuple[list[list[int]], float, int] | None:
    """A finished shard's answers (in prompt order), seconds and threads; None: (re)generate it."""
    if not path.is_file():
        return None
    try:
        meta, arrays = read_db(path, tier=SHARD_TIER, fingerprint=fingerprint)
    except HDError:
        return None  # unreadable: made again (writes are atomic, so only a damaged disk gets here)
    offsets, tokens = arrays.get("offsets"), arrays.get("tokens")
    if meta.get("key") != key or offsets is None or tokens is None or len(offsets) != size + 1:
        return None
    if offsets[0] != 0 or offsets[-1] != len(tokens) or np.any(np.diff(offsets) < 0):
        return None
    flat = tokens.tolist()
    answers = [flat[a:b] for a, b in pairwise(offsets.tolist())]
    return answers, float(meta.get("seconds", 0.0)), int(meta.get("cpu_threads", 0))


def _call_text(lm: ModelText, prompts: object, limit: object, *settings: int) -> str:
    names = ("n", "top_k", "max_new_tokens", "batch_size")
    source = "ShareGPT train" if prompts is None else str(prompts) if isinstance(prompts, (str, Path)) else "a list"
    listed = ", ".join(f"{k}={v}" for k, v in zip(names, settings, strict=True))
    return f"build_model_db(load_model({lm.name!r}), prompts={source!r}, limit={limit}, {listed})"
