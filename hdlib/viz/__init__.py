"""Figures and widgets for notebooks: pure functions from traces to plotly figures, and thin GUIs.

from hdlib import viz
viz.token_figure(gen)                  # the answer, each token coloured by its tier
viz.draft_tree_figure(gen.steps[3])    # the drafts of one step, the accepted path ringed
viz.StepThrough(lm)                    # the whole step-through GUI
"""

from hdlib.viz.cost import CostPoint, break_even, cost_figure, cost_points
from hdlib.viz.generation import (
    compare_figure,
    figure_tiers,
    tier_steps_figure,
    token_figure,
    token_labeller,
    token_layout,
)
from hdlib.viz.lookup import (
    TierDraft,
    drafter_tree,
    lookup_latency,
    lookup_latency_figure,
    tier_drafts,
    tier_drafts_table,
)
from hdlib.viz.mechanics import (
    attention_mask_figure,
    cache_compaction_figure,
    compaction,
    position_ids_figure,
    showcase_step,
    step_buffers,
)
from hdlib.viz.sampling import outcomes_figure, trials_figure
from hdlib.viz.tree import draft_tree_figure, tree_layout
from hdlib.viz.widgets import (
    FigureOutput,
    Settings,
    StepMechanics,
    StepThrough,
    prompt_choices,
)

__all__ = [
    "CostPoint",
    "FigureOutput",
    "Settings",
    "StepMechanics",
    "StepThrough",
    "TierDraft",
    "attention_mask_figure",
    "break_even",
    "cache_compaction_figure",
    "compaction",
    "compare_figure",
    "cost_figure",
    "cost_points",
    "draft_tree_figure",
    "drafter_tree",
    "figure_tiers",
    "lookup_latency",
    "lookup_latency_figure",
    "outcomes_figure",
    "position_ids_figure",
    "prompt_choices",
    "showcase_step",
    "step_buffers",
    "tier_drafts",
    "tier_drafts_table",
    "tier_steps_figure",
    "token_figure",
    "token_labeller",
    "token_layout",
    "tree_layout",
    "trials_figure",
]
