"""Figures and widgets for notebooks: pure functions from traces to plotly figures, and thin GUIs.

from hdlib import viz
viz.token_figure(gen)                  # the answer, each token coloured by its tier
viz.draft_tree_figure(gen.steps[3])    # the drafts of one step, the accepted path ringed
viz.StepThrough(lm)                    # the whole step-through GUI
"""

from hdlib.viz.cards import CardGame, card_page
from hdlib.viz.contrasts import Contrast, contrast_table
from hdlib.viz.cost import CostPoint, break_even, cost_figure, cost_points
from hdlib.viz.figure_output import FigureOutput
from hdlib.viz.game import Game, Outcome, Round
from hdlib.viz.generation import (
    TierRate,
    compare_figure,
    figure_tiers,
    tier_rates,
    tier_stats_html,
    tier_stats_table,
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
    memory_hierarchy_figure,
    tier_drafts,
    tier_drafts_table,
)
from hdlib.viz.mechanics import (
    PrecisionRun,
    attention_mask_figure,
    cache_compaction_figure,
    chain_tree,
    compaction,
    position_ids_figure,
    precision_runs,
    showcase_step,
    step_buffers,
)
from hdlib.viz.paper_tasks import TaskRow, task_rows, task_speedup_figure, task_table
from hdlib.viz.paper_temperature import (
    TemperaturePoint,
    committed_temperature_points,
    temperature_figure,
    temperature_note,
    temperature_points,
)
from hdlib.viz.quiz import Quiz, exit_quiz, quiz_page, write_handouts
from hdlib.viz.sampling import (
    Coupling,
    candidates_output,
    chain_lengths,
    coupling,
    expected_tokens_per_step,
    next_token_probs,
    outcomes_figure,
    point_mass,
    residual,
    sampler_outcomes,
    textbook_figure,
    textbook_output,
    textbook_parts,
    trials_figure,
)
from hdlib.viz.step_mechanics import StepMechanics
from hdlib.viz.step_settings import BUDGET_CHOICES, Settings, budget_options, prompt_choices
from hdlib.viz.step_through import StepThrough
from hdlib.viz.tree import draft_tree_figure, tree_layout

__all__ = [
    "BUDGET_CHOICES",
    "CardGame",
    "Quiz",
    "card_page",
    "exit_quiz",
    "quiz_page",
    "write_handouts",
    "Contrast",
    "CostPoint",
    "Coupling",
    "FigureOutput",
    "PrecisionRun",
    "Game",
    "Outcome",
    "Round",
    "Settings",
    "StepMechanics",
    "StepThrough",
    "TaskRow",
    "TemperaturePoint",
    "TierDraft",
    "TierRate",
    "attention_mask_figure",
    "break_even",
    "budget_options",
    "cache_compaction_figure",
    "candidates_output",
    "chain_lengths",
    "chain_tree",
    "committed_temperature_points",
    "compaction",
    "compare_figure",
    "contrast_table",
    "cost_figure",
    "cost_points",
    "coupling",
    "draft_tree_figure",
    "drafter_tree",
    "expected_tokens_per_step",
    "next_token_probs",
    "figure_tiers",
    "lookup_latency",
    "lookup_latency_figure",
    "memory_hierarchy_figure",
    "outcomes_figure",
    "point_mass",
    "position_ids_figure",
    "precision_runs",
    "prompt_choices",
    "residual",
    "sampler_outcomes",
    "showcase_step",
    "step_buffers",
    "task_rows",
    "task_speedup_figure",
    "task_table",
    "temperature_figure",
    "temperature_note",
    "temperature_points",
    "textbook_figure",
    "textbook_output",
    "textbook_parts",
    "tier_drafts",
    "tier_drafts_table",
    "tier_rates",
    "tier_stats_html",
    "tier_stats_table",
    "tier_steps_figure",
    "token_figure",
    "token_labeller",
    "token_layout",
    "tree_layout",
    "trials_figure",
]
