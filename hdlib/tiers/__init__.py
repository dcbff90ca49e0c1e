"""Draft databases ("tiers"): the interface, hdlib's four, and the order HD asks them in.

Making a tier by name (and the registry of names and letters) is `hdlib.databases.registry`' job: the
offline tiers need their database files.
"""

from hdlib.tiers.base import BONUS, Draft, DraftRow, DraftTier, Proposal, Tier
from hdlib.tiers.context import ContextSettings, ContextTier
from hdlib.tiers.guesses import ModelGuesses, Successors
from hdlib.tiers.model import ModelSettings, ModelTier
from hdlib.tiers.recycled import RecycledTier
from hdlib.tiers.statistics import StatisticsSettings, StatisticsTier

# What `hd` asks, in this order: temporal locality, the model's recent guesses beside the text's own
# n-grams (docs/architecture.md, "The tiers", says how the order was chosen).
DEFAULT_TIERS: tuple[Tier, ...] = (Tier.CONTEXT, Tier.RECYCLED, Tier.MODEL, Tier.STATISTICS)
# The paper's three databases: what its order ablation permutes (`hd:all-orders`).
PAPER_TIERS: tuple[Tier, ...] = (Tier.CONTEXT, Tier.MODEL, Tier.STATISTICS)

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
    "PAPER_TIERS",
    "Proposal",
    "RecycledTier",
    "StatisticsSettings",
    "StatisticsTier",
    "Successors",
    "Tier",
]
