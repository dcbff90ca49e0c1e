"""What each tier would draft after a context, with the counts behind each draft.

`tier_drafts` asks every tier alone with the whole budget (the drafter would give a lower tier only
what the higher ones left: `drafter_tree` shows that merged trie). Counts mean what the tier ranks
by: the context tier, how often key + draft occur in the text itself; the model tier, in how many
of the model's answers the n-gram occurs (`ModelTier.explain`); the statistics tier, how often the
corpus continues the key so (`StatisticsTier.explain`). Other tiers get their drafts, uncounted.
`lookup_latency_figure` draws what `hdlib.databases.lookup_latency` measured (each tier's `lookup` over many contexts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from hdlib.databases import lookup_latency  # noqa: F401  (re-exported: the figure's input)
from hdlib.drafter import Drafter
from hdlib.tiers.base import DraftTier, Tier
from hdlib.tiers.context import ContextTier
from hdlib.tiers.model import ModelTier
from hdlib.tiers.statistics import StatisticsTier
from hdlib.trace import TIER_COLORS
from hdlib.tree import DraftTree
from hdlib.viz.trace import TokenLabel, bracket_label


@dataclass(frozen=True)
class TierDraft:
    tier: Tier
    rank: int  # 0: the tier's best draft
    tokens: tuple[int, ...]
    count: int | None  # see the module docstring; None when the tier gives none
    key_length: int | None  # tokens of the context's suffix the draft continues, when known


def tier_drafts(tiers: Sequence[DraftTier], context: Sequence[int], budget: int = 16) -> list[TierDraft]:
    """Every tier's drafts for what follows `context`, best first, each tier with the whole budget.
    A context tier is not touched: a fresh one with its settings reads `context`."""
    context = [int(t) for t in context]
    rows: list[TierDraft] = []
    for tier in tiers:
        found: list[tuple[tuple[int, ...], int | None, int | None]]
        if isinstance(tier, ContextTier):
            fresh = ContextTier(tier.settings)
            fresh.begin(context)
            found = [
                (d, *_context_count(context, d, tier.settings.min_key, tier.settings.max_key))
                for d in fresh.lookup(context, budget)
            ]
        elif isinstance(tier, ModelTier):
            found = [(tuple(d), count, None) for d, count in tier.explain(context, budget)]
        elif isinstance(tier, StatisticsTier):
            found = [(tuple(d.tokens), d.count, d.key_length) for d in tier.explain(context, budget).drafts]
        else:
            found = [(tuple(d), None, None) for d in tier.lookup(context, budget)]
        rows += [TierDraft(tier.tier, rank, d, c, k) for rank, (d, c, k) in enumerate(found)]
    return rows


def _context_count(context: list[int], draft: tuple[int, ...], min_key: int, max_key: int) -> tuple[int, int]:
    """(occurrences of key + draft in the text, key length) for the longest suffix key they follow."""
    for m in range(min(max_key, len(context)), min_key - 1, -1):
        needle = context[len(context) - m :] + list(draft)
        count = sum(context[i : i + len(needle)] == needle for i in range(len(context) - len(needle) + 1))
        if count:
            return count, m
    return 0, 0


def drafter_tree(tiers: Sequence[DraftTier], context: Sequence[int], budget: int = 16) -> DraftTree:
    """The trie the drafter would build after `context`: tiers in order, each with the budget left.
    Tiers are begun with `context` (a context tier forgets what it held)."""
    drafter = Drafter(list(tiers))
    drafter.begin(list(context))
    return drafter.draft(list(context), budget, max_depth=budget)


def tier_drafts_table(rows: Sequence[TierDraft], label: TokenLabel | None = None) -> go.Figure:
    """The drafts as a table: tier (in its colour), rank, text, token ids, count, key length."""
    label = label or bracket_label
    fill = [TIER_COLORS[r.tier] for r in rows]
    columns = [
        [r.tier.value for r in rows],
        [r.rank for r in rows],
        [repr("".join(label(t) for t in r.tokens)) for r in rows],
        [" ".join(map(str, r.tokens)) for r in rows],
        ["" if r.count is None else f"{r.count:,}" for r in rows],
        ["" if r.key_length is None else r.key_length for r in rows],
    ]
    header = ["tier", "rank", "draft", "token ids", "count", "key length"]
    fig = go.Figure(
        go.Table(
            columnwidth=[70, 40, 260, 160, 60, 60],
            header={"values": header, "fill_color": "#EEEEEE", "align": "left"},
            cells={
                "values": columns,
                "align": "left",
                "fill_color": [["white"] * len(rows)] * len(header),
                "font": {"color": [fill] + [["#222222"] * len(rows)] * (len(header) - 1)},
            },
        )
    )
    fig.update_layout(
        title=f"what each tier drafts: {len(rows)} drafts", height=min(800, 28 * len(rows) + 120), margin={"t": 40}
    )
    return fig


def lookup_latency_figure(seconds: dict[Tier, Sequence[float]]) -> go.Figure:
    """One box per tier of its lookup times in microseconds (log axis), the median in the label."""
    fig = go.Figure()
    for tier, times in seconds.items():
        us = np.asarray(times, dtype=float) * 1e6
        median = float(np.median(us)) if len(us) else float("nan")
        fig.add_trace(
            go.Box(
                name=f"{tier.value}<br>median {median:,.1f} \u00b5s",
                x=us,
                marker_color=TIER_COLORS[tier],
                boxpoints=False,
                hoverinfo="x",
            )
        )
    n = max((len(t) for t in seconds.values()), default=0)
    fig.update_layout(
        title=f"one lookup per tier: {n} contexts each",
        xaxis={"title": "microseconds (log scale)", "type": "log"},
        showlegend=False,
        height=120 + 70 * len(seconds),
        margin={"t": 50},
        template="plotly_white",
    )
    return fig
