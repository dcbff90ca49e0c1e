"""Draft databases ("tiers") and the registry that builds them by name."""

from __future__ import annotations

from collections.abc import Sequence

from hdlib.errors import HDError
from hdlib.tiers.base import Draft, DraftTier, Tier
from hdlib.tiers.context import ContextSettings, ContextTier

DEFAULT_TIERS: tuple[Tier, ...] = (Tier.CONTEXT, Tier.MODEL, Tier.STATISTICS)  # temporal locality


def parse_tiers(spec: str | Sequence[str | Tier | DraftTier]) -> list[Tier | DraftTier]:
    """"context,model" or ["C", Tier.MODEL, my_tier] -> tiers and ready-made DraftTiers, in order."""
    items = [s for s in spec.split(",") if s.strip()] if isinstance(spec, str) else list(spec)
    parsed = [item if isinstance(item, DraftTier) else Tier.parse(item) for item in items]
    kinds = [p.tier if isinstance(p, DraftTier) else p for p in parsed]
    if len(set(kinds)) != len(kinds):
        raise HDError(f"each tier may appear once, got {[k.value for k in kinds]}")
    return parsed


def make_tier(tier: Tier | DraftTier, lm: object = None) -> DraftTier:
    """A ready database for `tier`; `lm` (a LoadedModel) is what offline tiers are built for."""
    if isinstance(tier, DraftTier):
        return tier
    if tier is Tier.CONTEXT:
        return ContextTier()  # one per request: it learns the request's text
    if lm is None:
        raise HDError(f"the {tier.value} tier needs the model it was built for")
    from hdlib.databases import load_tier  # imported here: hdlib.databases imports this package

    return load_tier(tier, lm)


__all__ = [
    "DEFAULT_TIERS",
    "ContextSettings",
    "ContextTier",
    "Draft",
    "DraftTier",
    "Tier",
    "make_tier",
    "parse_tiers",
]
