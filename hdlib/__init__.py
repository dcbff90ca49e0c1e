"""hdlib: Hierarchy Drafting, lossless speculative decoding from tiers of n-gram databases.

    import hdlib
    lm = hdlib.load_model()                      # the packaged SmolLM2-135M-Instruct
    result = hdlib.generate(lm, "Summarize: ...")  # tiers context, model, statistics
    result.text, result.mat, result.tier_counts

    stats = hdlib.load_tier(hdlib.Tier.STATISTICS, lm)   # what would it draft here, and how often seen?
    stats.explain(lm.encode_prompt("Write a poem about the sea"), budget=16)

    class Echo(hdlib.DraftTier):                  # a tier of your own: a name, a letter, a colour
        tier = hdlib.Tier("echo", "X", "#332288")
        def lookup(self, context, budget):
            return [tuple(context[-budget:])]
    hdlib.generate(lm, "Say it twice: ...", tiers=["context", Echo()])
    hdlib.register_tier(Echo)                     # now "X" in --tiers C,X and hd:CX too

`Decoder` is the step-by-step loop underneath (`decode` iterates it); `Step` and `Generation` are
its records.
"""

from hdlib.databases.registry import describe, load_tier, make_tier, open_database, parse_tiers, register_tier
from hdlib.decoding import generate
from hdlib.engine.budget import FixedBudget
from hdlib.engine.drafter import Drafter
from hdlib.engine.loop import Decoder, DecodeSettings, decode, run
from hdlib.engine.sampling import Sampler, Warp
from hdlib.engine.trace import Generation, Step, StepTimes, StopReason
from hdlib.engine.tree import DraftTree, tree_buffers
from hdlib.engine.value import AcceptancePrior, ValueBudget
from hdlib.errors import HDError
from hdlib.models.loading import DEFAULT_MODEL, LoadedModel, get_device, load_model
from hdlib.tiers import BONUS, ContextSettings, ContextTier, DraftRow, DraftTier, Tier

__version__ = "0.1.0"

__all__ = [
    "BONUS",
    "AcceptancePrior",
    "DEFAULT_MODEL",
    "ContextSettings",
    "ContextTier",
    "DecodeSettings",
    "Decoder",
    "DraftRow",
    "DraftTier",
    "DraftTree",
    "Drafter",
    "FixedBudget",
    "Generation",
    "HDError",
    "LoadedModel",
    "Sampler",
    "Step",
    "StepTimes",
    "StopReason",
    "Tier",
    "ValueBudget",
    "Warp",
    "decode",
    "describe",
    "generate",
    "get_device",
    "load_model",
    "load_tier",
    "make_tier",
    "open_database",
    "parse_tiers",
    "register_tier",
    "run",
    "tree_buffers",
]
