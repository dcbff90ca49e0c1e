"""What each tier would draft after a context, with the counts behind each draft.

`tier_drafts` asks every tier alone with the whole budget (the drafter would give a lower tier only
what the higher ones left: `drafter_tree` shows that merged trie), through the one call every tier
answers, `DraftTier.explain`: counts mean what the tier ranks by (the context tier: how often key +
draft occur in the text itself; the model tier: in how many of the model's answers the n-gram
occurs; the statistics tier: how often the corpus continues the key so); a tier that counts
nothing gives its drafts with its score, if any. `lookup_latency_figure` draws what
`hdlib.databases.registry.lookup_latency` measured (each tier's `lookup` over many contexts), and
`memory_hierarchy_figure` the same times as the paper's picture: the tiers as the levels of a memory
hierarchy, small and fast near the text, large and slow below, each with the paper's lookup time
beside the one measured here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from hdlib.databases.registry import lookup_latency  # noqa: F401  (re-exported: the figure's input)
from hdlib.engine.drafter import Drafter, ask_all
from hdlib.engine.tree import DraftTree
from hdlib.tiers.base import DraftTier, Tier
from hdlib.viz.generation import TokenLabel, bracket_label

# The paper's draft latency of each database alone on its machine (A100 server, Vicuna-7B), in ms:
# its authors' plotting script (zomss/Hierarchy_Drafting, scripts/visualize.py, draw_order2).
PAPER_LOOKUP_MS = {Tier.CONTEXT: 0.02, Tier.MODEL: 0.03, Tier.STATISTICS: 12.51}
HOLDS = {  # what each level holds, as the hierarchy figure says it
    Tier.CONTEXT: "the text so far",
    Tier.RECYCLED: "the model's recent guesses",
    Tier.MODEL: "phrases of the model's answers",
    Tier.STATISTICS: "phrases of a large corpus",
}


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
    return drafter.draft(list(context), max_depth=budget, gate=ask_all(budget))[0]


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


def _time(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:,.1f} \u00b5s"


def memory_hierarchy_figure(seconds: Mapping[Tier, Sequence[float]], machine: str = "this machine") -> go.Figure:
    """The tiers as a memory hierarchy, in the order asked: the first at the top, narrowest (least
    text, fastest), each level wider below it; on each, what it holds, the paper's lookup time
    (`PAPER_LOOKUP_MS`, "not in the paper" for hdlib's own tiers) and the median measured here."""
    fig = go.Figure()
    levels = list(seconds)
    n = len(levels)
    for i, tier in enumerate(levels):
        top, bottom = 0.25 + 0.75 * i / n, 0.25 + 0.75 * (i + 1) / n  # half-widths: a pyramid
        y0, y1 = n - i - 1, n - i - 0.08
        fig.add_trace(
            go.Scatter(
                x=[-bottom, bottom, top, -top, -bottom],
                y=[y0, y0, y1, y1, y0],
                fill="toself",
                fillcolor=tier.color,
                line={"color": tier.color},
                mode="lines",
                hoverinfo="skip",
                showlegend=False,
            )
        )
        paper = PAPER_LOOKUP_MS.get(tier)
        said = f"paper {paper:g} ms" if paper is not None else "not in the paper"
        here = _time(float(np.median(seconds[tier]))) if len(seconds[tier]) else "not measured"
        holds = HOLDS.get(tier, "a tier of its own")
        fig.add_annotation(
            x=0,
            y=(y0 + y1) / 2,
            text=f"<b>{tier.letter} {tier.name}</b>: {holds}<br>{said} \u00b7 here {here}",
            showarrow=False,
            font={"color": "white", "size": 13},
        )
    fig.add_annotation(
        x=1.08, y=n - 0.5, text="asked first<br>closest to the text", showarrow=False, xanchor="left", font={"size": 11}
    )
    fig.add_annotation(
        x=1.08, y=0.5, text="asked last<br>largest, slowest", showarrow=False, xanchor="left", font={"size": 11}
    )
    fig.update_layout(
        title=f"the tiers as a memory hierarchy: one lookup, the paper's (A100 server) and {machine}'s (median)",
        xaxis={"visible": False, "range": [-1.05, 1.45]},
        yaxis={"visible": False, "range": [-0.1, n]},
        height=110 + 80 * n,
        margin={"t": 50, "l": 10, "r": 10, "b": 10},
        template="plotly_white",
    )
    return fig
