"""What each tier would draft after a context, with the counts behind each draft.

`tier_drafts` asks every tier alone with the whole budget (the drafter would give a lower tier only
what the higher ones left: `drafter_tree` shows that merged trie), through the one call every tier
answers, `DraftTier.explain`: counts mean what the tier ranks by (the context tier: how often key +
draft occur in the text itself; the model tier: in how many of the model's answers the n-gram
occurs; the statistics tier: how often the corpus continues the key so); a tier that counts
nothing gives its drafts with its score, if any. `lookup_latency_figure` draws what
`hdlib.databases.registry.lookup_latency` measured (each tier's `lookup` over many contexts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from hdlib.databases.registry import lookup_latency  # noqa: F401  (re-exported: the figure's input)
from hdlib.engine.drafter import Drafter
from hdlib.engine.tree import DraftTree
from hdlib.tiers.base import DraftTier, Tier
from hdlib.viz.generation import TokenLabel, bracket_label


@dataclass(frozen=True)
class TierDraft:
    tier: Tier
    rank: int  # 0: the tier's best draft
    tokens: tuple[int, ...]
    count: int | None  # see the module docstring; None when the tier gives none
    key_length: int | None  # tokens of the context's suffix the draft continues, when known
    score: float | None = None  # the tier's confidence in the draft's first token, when it has one


def tier_drafts(tiers: Sequence[DraftTier], context: Sequence[int], budget: int = 16) -> list[TierDraft]:
    """Every tier's drafts for what follows `context`, best first, each tier with the whole budget;
    the tiers are left as they were."""
    context = [int(t) for t in context]
    return [
        TierDraft(tier.tier, rank, tuple(row.tokens), row.count, row.key_length, row.score)
        for tier in tiers
        for rank, row in enumerate(tier.explain(context, budget))
    ]


def drafter_tree(tiers: Sequence[DraftTier], context: Sequence[int], budget: int = 16) -> DraftTree:
    """The trie the drafter would build after `context`: tiers in order, each with the budget left.
    Tiers are begun with `context` (a context tier forgets what it held)."""
    drafter = Drafter(list(tiers))
    drafter.begin(list(context))
    return drafter.draft(list(context), budget, max_depth=budget)[0]


def tier_drafts_table(rows: Sequence[TierDraft], label: TokenLabel | None = None) -> go.Figure:
    """The drafts as a table: tier (in its colour), rank, text, token ids, count, key length."""
    label = label or bracket_label
    fill = [r.tier.color for r in rows]
    columns = [
        [r.tier.name for r in rows],
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
                name=f"{tier.name}<br>median {median:,.1f} \u00b5s",
                x=us,
                marker_color=tier.color,
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
