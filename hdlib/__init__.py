"""hdlib: Hierarchy Drafting, lossless speculative decoding from tiers of n-gram databases.

    import hdlib
    lm = hdlib.load_model()                      # the packaged SmolLM2-135M-Instruct
    result = hdlib.generate(lm, "Summarize: ...", tiers="context")
    result.text, result.mat, result.tier_counts

`decode` is the step-by-step generator underneath; `Step` and `Generation` are its records.
"""

from hdlib.budget import AdaptiveBudget, FixedBudget
from hdlib.decoding import DecodeSettings, decode, generate, run
from hdlib.drafter import Drafter
from hdlib.errors import HDError
from hdlib.models import DEFAULT_MODEL, LoadedModel, get_device, load_model
from hdlib.tiers import ContextSettings, ContextTier, DraftTier, Tier
from hdlib.trace import Generation, Step, StepTimes
from hdlib.tree import DraftTree, tree_buffers

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MODEL",
    "AdaptiveBudget",
    "ContextSettings",
    "ContextTier",
    "DecodeSettings",
    "DraftTier",
    "DraftTree",
    "Drafter",
    "FixedBudget",
    "Generation",
    "HDError",
    "LoadedModel",
    "Step",
    "StepTimes",
    "Tier",
    "decode",
    "generate",
    "get_device",
    "load_model",
    "run",
    "tree_buffers",
]
