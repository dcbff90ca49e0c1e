"""The tiers by name: the registry that makes them, and the offline databases behind two of them.

`parse_tiers("C,model")` reads tiers from names or letters; `make_tier(tier, lm)` makes a ready
one for a loaded model. The registry knows hdlib's four tiers (and the field's drafters), the tiers a program registers
(`register_tier`) and those that installed packages declare under the entry-point group
`hdlib.tiers` (each a `DraftTier` subclass made with no arguments), so a new tier is a letter in
`hdlib generate --tiers C,X` and `hdlib bench --methods hd:CX` like the others.

`load_tier(Tier.MODEL, lm)` gives the model tier for `lm` (the database shipped in data/db for the
packaged default model, else one built with `hdlib build-db model`; with neither, a model tier that
drafts nothing, and one line on stderr saying how to build the database);
`load_tier(Tier.STATISTICS, lm)` gives the statistics tier, building its suffix array on first use.
Both are cached on `lm`, so a notebook or a benchmark opens each file once.
`open_database(path)` opens any database file, `describe(path)` says what it holds.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
from transformers import PreTrainedTokenizerBase

from hdlib.databases.modeldb import default_model_db_path
from hdlib.databases.statsdb import ensure_statistics_db
from hdlib.engine.budget import FIXED_BUDGET
from hdlib.errors import HDError
from hdlib.models.loading import LoadedModel, load_text
from hdlib.store import read_db, read_meta
from hdlib.tiers import ContextTier, DraftTier, ModelTier, RecycledTier, StatisticsTier, Tier
from hdlib.tiers.other_methods import (
    LOOKAHEAD,
    RECYCLING,
    REST,
    SUFFIX,
    LookaheadTier,
    RestTier,
    SuffixDecodingTier,
    TokenRecyclingTier,
)

T = TypeVar("T")
ENTRY_POINTS = "hdlib.tiers"  # the entry-point group of tiers that other packages provide

TierMaker = Callable[[LoadedModel | None], DraftTier]


@dataclass(frozen=True)
class Registered:
    tier: Tier
    make: TierMaker  # a ready tier for a loaded model (None where the tier needs none)


_registered: dict[str, Registered] = {}  # by name: what `register_tier` added in this process


def register_tier(tier: type[DraftTier] | Tier, make: TierMaker | None = None) -> Tier:
    """Make a tier known by its name and letter: a `DraftTier` subclass (made with no arguments),
    or a `Tier` with the function that makes it for a loaded model. Returns its `Tier`."""
    if isinstance(tier, type) and issubclass(tier, DraftTier):
        cls = tier
        tier, make = cls.tier, make or (lambda lm: cls())
    if not isinstance(tier, Tier) or make is None:
        raise HDError("register_tier takes a DraftTier subclass, or a Tier and the function that makes it")
    for other in known_tiers():
        if other != tier and (other.name == tier.name or other.letter == tier.letter):
            raise HDError(
                f"tier {tier.name!r} ({tier.letter}) clashes with the known tier {other.name!r} ({other.letter})"
            )
    _registered[tier.name] = Registered(tier, make)
    return tier


def unregister_tier(tier: Tier | str) -> None:
    """Forget a tier `register_tier` added (hdlib's own cannot be removed)."""
    _registered.pop(tier.name if isinstance(tier, Tier) else tier, None)


def _need_model(tier: Tier, lm: LoadedModel | None) -> LoadedModel:
    if lm is None:
        raise HDError(f"the {tier.name} tier needs the model it was built for")
    return lm


def _built_in() -> list[Registered]:
    return [
        Registered(Tier.CONTEXT, lambda lm: ContextTier()),  # one per request: it learns the request's text
        Registered(Tier.RECYCLED, lambda lm: RecycledTier()),  # reads the generation's table of the model's guesses
        Registered(Tier.MODEL, lambda lm: load_tier(Tier.MODEL, _need_model(Tier.MODEL, lm))),
        Registered(Tier.STATISTICS, lambda lm: load_tier(Tier.STATISTICS, _need_model(Tier.STATISTICS, lm))),
        # The field's drafters (hdlib.tiers.other_methods): a new recycling table and new suffix trees each
        # time (a bench run keeps one of each per method across its questions); REST over the
        # statistics tier's corpus, once per model; a new Lookahead window each time.
        Registered(RECYCLING, lambda lm: TokenRecyclingTier()),
        Registered(REST, lambda lm: load_tier(REST, _need_model(REST, lm))),
        Registered(SUFFIX, lambda lm: SuffixDecodingTier()),
        Registered(LOOKAHEAD, lambda lm: LookaheadTier()),
    ]


def _from_entry_points() -> list[Registered]:
    return _entry_points_on(tuple(sys.path))


@functools.lru_cache(maxsize=4)
def _entry_points_on(path: tuple[str, ...]) -> list[Registered]:
    """The entry points' tiers, read once per import path (reading them takes some 20 ms, and every
    tier name a generation parses asks)."""
    found = []
    for point in importlib.metadata.entry_points(group=ENTRY_POINTS):
        cls = point.load()
        if not (isinstance(cls, type) and issubclass(cls, DraftTier) and isinstance(getattr(cls, "tier", None), Tier)):
            raise HDError(
                f"entry point {point.name!r} of {ENTRY_POINTS!r} ({point.value}) is not a DraftTier with a tier"
            )
        found.append(Registered(cls.tier, lambda lm, cls=cls: cls()))
    return found


def registry() -> list[Registered]:
    """Every known tier: hdlib's, then those registered in this process, then the entry points'."""
    entries: dict[str, Registered] = {}
    for entry in [*_built_in(), *_registered.values(), *_from_entry_points()]:
        entries.setdefault(entry.tier.name, entry)
    return list(entries.values())


def known_tiers() -> list[Tier]:
    return [entry.tier for entry in registry()]


def find_tier(name: str) -> Tier | None:
    """The known tier with this name or letter (either case), if any."""
    key = name.strip().lower()
    return next((t for t in known_tiers() if key in (t.name, t.letter.lower())), None)


def parse_tiers(spec: str | Sequence[str | Tier | DraftTier]) -> list[Tier | DraftTier]:
    """ "context,model" or ["C", Tier.MODEL, my_tier] -> known tiers and ready-made DraftTiers, in order."""
    items = [s for s in spec.split(",") if s.strip()] if isinstance(spec, str) else list(spec)
    parsed: list[Tier | DraftTier] = []
    for item in items:
        if isinstance(item, DraftTier):
            parsed.append(item)
            continue
        tier = item if isinstance(item, Tier) and item in known_tiers() else find_tier(str(item))
        if tier is None:
            known = ", ".join(f"{t.name} ({t.letter})" for t in known_tiers())
            raise HDError(f"unknown tier {str(item)!r}: choose from {known}")
        parsed.append(tier)
    names = [(p.tier if isinstance(p, DraftTier) else p).name for p in parsed]
    if len(set(names)) != len(names):
        raise HDError(f"each tier may appear once, got {names}")
    return parsed


def make_tier(tier: str | Tier | DraftTier, lm: LoadedModel | None = None) -> DraftTier:
    """A ready tier: a DraftTier as it is, a known tier made for `lm` (the model offline tiers are built for)."""
    if isinstance(tier, DraftTier):
        return tier
    [known] = parse_tiers([tier])
    assert isinstance(known, Tier)
    entry = next(e for e in registry() if e.tier == known)
    return entry.make(lm)


# The offline databases -------------------------------------------------------------------------


def load_tier(tier: Tier, lm: LoadedModel) -> DraftTier:
    """The ready database tier `tier` for `lm` (opened once per loaded model)."""
    if tier not in lm.databases:
        if tier == Tier.MODEL:
            path = default_model_db_path(lm)
            if not path.is_file():
                print(
                    f"hdlib: no model database for '{lm.name}' ({path}): the model tier drafts nothing; build "
                    f"the database with: hdlib build-db model --model {lm.name}",
                    file=sys.stderr,
                )
                lm.databases[tier] = ModelTier.empty(f"no database for {lm.name}")
                return lm.databases[tier]
        elif tier == Tier.STATISTICS:
            path = ensure_statistics_db(lm)
        elif tier == REST:  # no file of its own: the statistics tier's corpus, searched as REST does
            lm.databases[tier] = RestTier.over(load_tier(Tier.STATISTICS, lm))  # type: ignore[arg-type]
            return lm.databases[tier]
        else:
            raise HDError(f"the {tier.name} tier has no database file")
        lm.databases[tier] = open_database(path, lm)
    return lm.databases[tier]


def opened(lm: LoadedModel, key: str, make: Callable[[], T]) -> T:
    """What `make` opens for `lm` (a database with settings of its own), opened once per loaded model
    and kept beside its tiers under `key`."""
    if key not in lm.databases:
        lm.databases[key] = make()  # type: ignore[assignment]
    return lm.databases[key]  # type: ignore[return-value]


def open_database(path: str | Path, lm: LoadedModel | None = None) -> DraftTier:
    """A model or statistics tier from its file; with `lm`, refused unless built for its tokenizer."""
    kind = read_meta(path).get("tier")
    fingerprint = lm.fingerprint if lm is not None else None
    if kind == Tier.MODEL.name:
        return ModelTier.from_file(path, fingerprint)
    if kind == Tier.STATISTICS.name:
        return StatisticsTier.from_file(path, fingerprint)
    raise HDError(f"{path} holds a {kind!r} database, not a tier's")


def describe(
    path: str | Path, model: str | LoadedModel | PreTrainedTokenizerBase | None = None, sample: int = 5
) -> str:
    """What a database holds, how it was built, its sizes, and a sample of entries: token ids, or
    text when `model` (a loaded model, a tokenizer, or a model's name or folder) says how to decode."""
    path = Path(path)
    meta, arrays = read_db(path)
    decode = _decoder(model)
    lines = [f"{path} ({path.stat().st_size / 1e6:.1f} MB)"]
    lines += [f"  {key}: {json.dumps(value)}" for key, value in sorted(meta.items())]
    lines.append("arrays:")
    lines += [f"  {name}: {a.dtype} {tuple(a.shape)} ({a.nbytes / 1e6:.1f} MB)" for name, a in arrays.items()]
    lines.append("sample:")
    if meta.get("tier") == Tier.MODEL.name and "ngrams" in arrays:
        ngrams, freq = arrays["ngrams"], arrays.get("doc_freq", np.zeros(len(arrays["ngrams"]), dtype=int))
        for i in np.argsort(-freq, kind="stable")[:sample]:
            lines.append(f"  {decode(ngrams[i].tolist())}  (in {int(freq[i])} answers)")
    elif meta.get("tier") == Tier.STATISTICS.name and "tokens" in arrays:
        tokens = arrays["tokens"]
        for start in np.linspace(0, max(len(tokens) - 12, 0), sample, dtype=np.int64):
            window = [int(t) for t in tokens[start : start + 12] if t >= 0]
            lines.append(f"  ...{decode(window)}...")
    return "\n".join(lines)


def _decoder(model: str | LoadedModel | PreTrainedTokenizerBase | None):
    if model is None:
        return lambda ids: " ".join(map(str, ids))
    if isinstance(model, LoadedModel):
        tokenizer = model.tokenizer
    elif isinstance(model, PreTrainedTokenizerBase):
        tokenizer = model
    else:  # a name or a folder: only its tokenizer is loaded
        tokenizer = load_text(model).tokenizer
    return lambda ids: repr(tokenizer.decode(ids))


def lookup_latency(
    tiers: Sequence[DraftTier], contexts: Sequence[Sequence[int]], budget: int = FIXED_BUDGET
) -> dict[Tier, list[float]]:
    """Seconds of one `propose(context, budget)` per context, for each tier alone, as the drafter
    calls it. Each tier is begun with the context first (untimed): the context tier then holds
    exactly that text, as it would during decoding; static tiers ignore it."""
    seconds: dict[Tier, list[float]] = {}
    for tier in tiers:
        times = seconds.setdefault(tier.tier, [])
        for context in contexts:
            context = [int(t) for t in context]
            tier.begin(context)
            start = time.perf_counter()
            tier.propose(context, budget)
            times.append(time.perf_counter() - start)
    return seconds
