"""The offline databases as a whole: where each tier's file is, opening one, describing one.

`load_tier(Tier.MODEL, lm)` gives the model tier for `lm` (the database shipped in data/db for the
packaged default model, else one built with `hdlib build-db model`; with neither, a model tier
that drafts only the model's own recycled guesses, and one line on stderr saying how to build the
database); `load_tier(Tier.STATISTICS,
lm)` gives the statistics tier, building its suffix array on first use. Both are cached on `lm`,
so a notebook or a benchmark opens each file once. `open_database(path)` opens any database file,
`describe(path)` says what it holds.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from hdlib.errors import HDError
from hdlib.store import read_db, read_meta
from hdlib.tiers.base import DraftTier, Tier

if TYPE_CHECKING:
    from hdlib.models import LoadedModel


def load_tier(tier: Tier, lm: LoadedModel) -> DraftTier:
    """The ready database tier `tier` for `lm` (opened once per loaded model)."""
    if tier not in lm.databases:
        if tier is Tier.MODEL:
            from hdlib.modeldb import default_model_db_path
            from hdlib.tiers.model import ModelTier

            path = default_model_db_path(lm)
            if not path.is_file():
                # The tier still learns from the model as it decodes: its recycled part needs no file.
                print(
                    f"hdlib: no model database for '{lm.name}' ({path}): the model tier drafts only the model's "
                    f"own recycled guesses; build the database with: hdlib build-db model --model {lm.name}",
                    file=sys.stderr,
                )
                lm.databases[tier] = ModelTier.recycling_only()
                return lm.databases[tier]
        elif tier is Tier.STATISTICS:
            from hdlib.tiers.statistics import ensure_statistics_db

            path = ensure_statistics_db(lm)
        else:
            raise HDError(f"the {tier.value} tier has no database file")
        lm.databases[tier] = open_database(path, lm)
    return lm.databases[tier]


def open_database(path: str | Path, lm: LoadedModel | None = None) -> DraftTier:
    """A model or statistics tier from its file; with `lm`, refused unless built for its tokenizer."""
    from hdlib.tiers.model import ModelTier
    from hdlib.tiers.statistics import StatisticsTier

    kind = read_meta(path).get("tier")
    fingerprint = lm.fingerprint if lm is not None else None
    if kind == Tier.MODEL.value:
        return ModelTier.from_file(path, fingerprint)  # type: ignore[arg-type]
    if kind == Tier.STATISTICS.value:
        return StatisticsTier.from_file(path, fingerprint)
    raise HDError(f"{path} holds a {kind!r} database, not a tier's")


def describe(path: str | Path, model: str | None = None, sample: int = 5) -> str:
    """What a database holds, how it was built, its sizes, and a sample of entries."""
    path = Path(path)
    meta, arrays = read_db(path)
    decode = _decoder(model)
    lines = [f"{path} ({path.stat().st_size / 1e6:.1f} MB)"]
    lines += [f"  {key}: {json.dumps(value)}" for key, value in sorted(meta.items())]
    lines.append("arrays:")
    lines += [f"  {name}: {a.dtype} {tuple(a.shape)} ({a.nbytes / 1e6:.1f} MB)" for name, a in arrays.items()]
    lines.append("sample:")
    if meta.get("tier") == Tier.MODEL.value and "ngrams" in arrays:
        ngrams, freq = arrays["ngrams"], arrays.get("doc_freq", np.zeros(len(arrays["ngrams"]), dtype=int))
        for i in np.argsort(-freq, kind="stable")[:sample]:
            lines.append(f"  {decode(ngrams[i].tolist())}  (in {int(freq[i])} answers)")
    elif meta.get("tier") == Tier.STATISTICS.value and "tokens" in arrays:
        tokens = arrays["tokens"]
        for start in np.linspace(0, max(len(tokens) - 12, 0), sample, dtype=np.int64):
            window = [int(t) for t in tokens[start : start + 12] if t >= 0]
            lines.append(f"  ...{decode(window)}...")
    return "\n".join(lines)


def _decoder(model: str | None):
    if model is None:
        return lambda ids: " ".join(map(str, ids))
    from transformers import AutoTokenizer

    from hdlib.models import PACKAGED, load_model

    tokenizer = load_model(model).tokenizer if model in PACKAGED else AutoTokenizer.from_pretrained(model)
    return lambda ids: repr(tokenizer.decode(ids))


def lookup_latency(
    tiers: Sequence[DraftTier], contexts: Sequence[Sequence[int]], budget: int = 8
) -> dict[Tier, list[float]]:
    """Seconds of one `lookup(context, budget)` per context, for each tier alone, as the drafter
    calls it. Each tier is begun with the context first (untimed): the context tier then holds
    exactly that text, as it would during decoding; static tiers ignore it."""
    seconds: dict[Tier, list[float]] = {}
    for tier in tiers:
        times = seconds.setdefault(tier.tier, [])
        for context in contexts:
            context = [int(t) for t in context]
            tier.begin(context)
            start = time.perf_counter()
            tier.lookup(context, budget)
            times.append(time.perf_counter() - start)
    return seconds
