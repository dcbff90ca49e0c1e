"""Draft databases ("tiers"): the interface, hdlib's three, and the order HD asks them in.

Making a tier by name (and the registry of names and letters) is `hdlib.databases`' job: the
offline tiers need their database files.
"""

from hdlib.tiers.base import BONUS, Draft, DraftRow, DraftTier, ModelGuesses, Proposal, Tier
from hdlib.tiers.context import ContextSettings, ContextTier
from hdlib.tiers.model import ModelSettings, ModelTier
from hdlib.tiers.statistics import StatisticsSettings, StatisticsTier

DEFAULT_TIERS: tuple[Tier, ...] = (Tier.CONTEXT, Tier.MODEL, Tier.STATISTICS)  # temporal locality

__all__ = [
    "BONUS",
    "DEFAULT_TIERS",
    "ContextSettings",
    "ContextTier",
    "Draft",
    "DraftRow",
    "DraftTier",
    "ModelGuesses",
    "ModelSettings",
    "ModelTier",
    "Proposal",
    "StatisticsSettings",
    "StatisticsTier",
    "Tier",
]
