"""hdlib: Hierarchy Drafting, lossless speculative decoding from tiers of n-gram databases.

    import hdlib
    lm = hdlib.load_model()                      # the packaged SmolLM2-135M-Instruct
    result = hdlib.generate(lm, "Summarize: ...")  # tiers context, model, statistics
    result.text, result.mat, result.tier_counts

    stats = hdlib.load_tier(hdlib.Tier.STATISTICS, lm)   # what would it draft here, and how often seen?
    stats.explain(lm.encode_prompt("Write a poem about the sea"), budget=16)

    class Echo(hdlib.DraftTier):                  # a tier of your own: a name, a letter, a colour
        tier = hdlib.Tier("echo", "X", "#332288")
        def propose(self, context, budget):
            return [tuple(context[-budget:])]
    hdlib.generate(lm, "Say it twice: ...", tiers=["context", Echo()])
    hdlib.register_tier(Echo)                     # now "X" in --tiers C,X and hd:CX too

`Decoder` is the step-by-step loop underneath (`decode` iterates it); `Step` and `Generation` are
its records.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hdlib.databases.registry import describe, load_tier, make_tier, open_database, parse_tiers, register_tier
    from hdlib.decoding import forward_profile, generate
    from hdlib.engine.budget import FixedBudget
    from hdlib.engine.drafter import Drafter
    from hdlib.engine.loop import Decoder, DecodeSettings, decode, run
    from hdlib.engine.prior import AcceptancePrior
    from hdlib.engine.sampling import Sampler, Warp
    from hdlib.engine.trace import Generation, Step, StepTimes, StopReason
    from hdlib.engine.tree import DraftTree, tree_buffers
    from hdlib.engine.value import ValueBudget
    from hdlib.errors import HDError
    from hdlib.models.loading import DEFAULT_MODEL, LoadedModel, get_device, load_model
    from hdlib.tiers import BONUS, ContextSettings, ContextTier, DraftRow, DraftTier, Tier

# Each name the package offers, and the module that holds it: imported when first asked for, so that
# importing a light part of hdlib (vLLM's workers import `hdlib.serving.proposer`) loads no model code.
_EXPORTS = {
    "describe": "hdlib.databases.registry",
    "load_tier": "hdlib.databases.registry",
    "make_tier": "hdlib.databases.registry",
    "open_database": "hdlib.databases.registry",
    "parse_tiers": "hdlib.databases.registry",
    "register_tier": "hdlib.databases.registry",
    "generate": "hdlib.decoding",
    "forward_profile": "hdlib.decoding",
    "FixedBudget": "hdlib.engine.budget",
    "Drafter": "hdlib.engine.drafter",
    "Decoder": "hdlib.engine.loop",
    "DecodeSettings": "hdlib.engine.loop",
    "decode": "hdlib.engine.loop",
    "run": "hdlib.engine.loop",
    "Sampler": "hdlib.engine.sampling",
    "Warp": "hdlib.engine.sampling",
    "Generation": "hdlib.engine.trace",
    "Step": "hdlib.engine.trace",
    "StepTimes": "hdlib.engine.trace",
    "StopReason": "hdlib.engine.trace",
    "DraftTree": "hdlib.engine.tree",
    "tree_buffers": "hdlib.engine.tree",
    "AcceptancePrior": "hdlib.engine.prior",
    "ValueBudget": "hdlib.engine.value",
    "HDError": "hdlib.errors",
    "DEFAULT_MODEL": "hdlib.models.loading",
    "LoadedModel": "hdlib.models.loading",
    "get_device": "hdlib.models.loading",
    "load_model": "hdlib.models.loading",
    "BONUS": "hdlib.tiers",
    "ContextSettings": "hdlib.tiers",
    "ContextTier": "hdlib.tiers",
    "DraftRow": "hdlib.tiers",
    "DraftTier": "hdlib.tiers",
    "Tier": "hdlib.tiers",
}


def __getattr__(name: str) -> Any:
    """`hdlib.generate` and the rest of `__all__`, or a subpackage (`hdlib.viz`), on first use."""
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif not name.startswith("_") and importlib.util.find_spec(f"hdlib.{name}") is not None:
        value = importlib.import_module(f"hdlib.{name}")
    else:
        raise AttributeError(f"module 'hdlib' has no attribute {name!r}")
    globals()[name] = value
    return value


def _show_in_notebooks() -> None:
    """In IPython (a notebook), show a `Generation` as its answer coloured by tier with its summary
    (`hdlib.presentation.generation_html`): registered by name, so nothing is imported until one is shown."""
    shell = sys.modules["IPython"].get_ipython() if "IPython" in sys.modules else None
    if shell is not None:
        html = shell.display_formatter.formatters["text/html"]

        def show(gen: Any) -> str:
            return importlib.import_module("hdlib.presentation").generation_html(gen)

        html.for_type_by_name("hdlib.engine.trace", "Generation", show)


_show_in_notebooks()


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


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
    "forward_profile",
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
