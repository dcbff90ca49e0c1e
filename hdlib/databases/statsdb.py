"""The statistics database: a model's tokenizer over a corpus, its suffixes sorted, in one file.

Built once per tokenizer, on first use (`ensure_statistics_db`, which `hdlib.databases.registry.load_tier`
calls) or by `hdlib build-db statistics`, and cached as an `hdlib.store` file that
`hdlib.tiers.statistics.StatisticsTier.from_file` opens. The default corpus is the train split of
the packaged ShareGPT file, each conversation written through the model's chat template.
"""

from __future__ import annotations

import math
import resource
import sys
import time
from pathlib import Path

import numpy as np

from hdlib.databases.corpus import Corpus, progress_bar
from hdlib.errors import HDError
from hdlib.models.loading import LoadedModel
from hdlib.paths import built_db_path
from hdlib.store import read_meta, write_db
from hdlib.tiers.base import Tier
from hdlib.tiers.suffix_array import build_suffix_array, join_documents

DEFAULT_DEPTH = 16  # suffixes are sorted by this many tokens: the longest key plus its continuation


def default_statistics_path(lm: LoadedModel) -> Path:
    """Where the statistics database for `lm`'s tokenizer is cached."""
    return built_db_path("statistics", lm.fingerprint)


def ensure_statistics_db(lm: LoadedModel, progress: bool = True) -> Path:
    """The cached statistics database for `lm`'s tokenizer, built first when there is none usable."""
    path = default_statistics_path(lm)
    if path.is_file():
        try:
            meta = read_meta(path)
            if meta.get("tier") == Tier.STATISTICS.name and meta.get("tokenizer") == lm.fingerprint:
                return path
            reason = "it was built for something else"
        except HDError as error:
            reason = str(error)
        print(f"hdlib: rebuilding {path}: {reason}", file=sys.stderr)
    return build_statistics_db(lm, path, progress=progress)


def build_statistics_db(
    lm: LoadedModel,
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
    corpus = Corpus(lm.tokenizer, progress)
    source_meta = corpus.read(source, limit)
    tokens = join_documents(corpus.documents)
    corpus.documents = []  # the joined copy is all we need
    tokenized = time.perf_counter()
    bar = progress_bar(
        progress, total=max(1, math.ceil(math.log2(depth))), desc="hdlib: sorting suffixes", unit="round"
    )
    suffixes = build_suffix_array(tokens, depth, progress=lambda _: bar.update(1))
    bar.close()
    sorted_at = time.perf_counter()
    counts = {**corpus.counts, "tokens": int(np.count_nonzero(tokens >= 0)), "suffixes": len(suffixes)}
    meta = {
        "tier": Tier.STATISTICS.name,
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
