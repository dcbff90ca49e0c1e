"""Lossless sampling, seen at one node: the rule's trials, and thousands of draws against the truth.

`trials_figure` draws what `hdlib.sampling.node_trials` computes: the model's distribution at a
node, then, for each drafted child in turn, the residual it is tried against and its acceptance
probability. `outcomes_figure` puts the tokens drawn by the rule (`sample_outcomes`) beside plain
sampling's and the exact distribution, with the chi-square p-value; the same for a broken rule
shows what a lossy rule looks like. No model is needed: the distribution is given.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from hdlib.sampling import Trial, chi_square_p_value
from hdlib.viz.generation import ACCEPTED_COLOR, REJECTED_COLOR, RUN_COLORS, TokenLabel, bracket_label


def trials_figure(
    probs: torch.Tensor, trials: Sequence[Trial], final: torch.Tensor, label: TokenLabel | None = None, top: int = 10
) -> go.Figure:
    """One panel per stage: the model's distribution, the residual each candidate is tried against
    (the candidate's bar in orange, with its acceptance probability), the final draw's residual."""
    label = label or bracket_label
    base = probs.to(torch.float64) / probs.sum()
    shown = base.topk(min(top, base.numel())).indices.tolist()
    shown += [t.token for t in trials if t.token not in shown]
    names = [label(t) for t in shown]
    stages = [("the model's distribution", base, None)]
    stages += [(f"try {label(t.token)!r}: accept with p = {t.accept:.2f}", t.residual, t.token) for t in trials]
    stages.append(("all rejected: draw from what is left", final, None))
    fig = make_subplots(rows=len(stages), cols=1, shared_xaxes=True, subplot_titles=[s[0] for s in stages])
    for row, (_, dist, tried) in enumerate(stages, start=1):
        colors = [ACCEPTED_COLOR if t == tried else "#0072B2" for t in shown]
        fig.add_trace(
            go.Bar(
                x=names,
                y=[float(dist[t]) for t in shown],
                marker_color=colors,
                showlegend=False,
                hovertemplate="%{x}: %{y:.3f}<extra></extra>",
            ),
            row=row,
            col=1,
        )
        fig.update_yaxes(range=[0, 1], row=row, col=1)
    fig.update_layout(height=150 * len(stages) + 60, template="plotly_white", margin={"t": 50})
    return fig


def outcomes_figure(
    exact: torch.Tensor,
    runs: Mapping[str, Counter[int]],
    label: TokenLabel | None = None,
    top: int = 12,
) -> go.Figure:
    """Each run's share of draws per token (e.g. plain sampling, HD's rule, a broken rule) beside
    the exact distribution; each run's chi-square p-value against it in the legend."""
    label = label or bracket_label
    p = exact.to(torch.float64) / exact.sum()
    drawn = {t for counts in runs.values() for t in counts}
    shown = sorted(set(p.topk(min(top, p.numel())).indices.tolist()) | drawn, key=lambda t: -float(p[t]))[:top]
    names = [label(t) for t in shown]
    expected = {t: float(p[t]) for t in range(p.numel()) if p[t] > 0}
    fig = go.Figure(
        go.Scatter(
            name="exact",
            x=names,
            y=[float(p[t]) for t in shown],
            mode="markers",
            marker={"symbol": "line-ew-open", "size": 28, "color": "#000000", "line": {"width": 3}},
        )
    )
    for i, (name, counts) in enumerate(runs.items()):
        n = sum(counts.values())
        p_value = chi_square_p_value(counts, expected)
        fig.add_bar(
            name=f"{name}: {n:,} draws, chi-square p = {p_value:.3g}",
            x=names,
            y=[counts.get(t, 0) / n for t in shown],
            marker_color=REJECTED_COLOR if p_value < 1e-3 else RUN_COLORS[(i + 1) % len(RUN_COLORS)],
        )
    fig.update_layout(
        title="the token one node emits: draws against the exact distribution",
        barmode="group",
        yaxis_title="share of draws",
        template="plotly_white",
        height=420,
        legend={"orientation": "h", "y": -0.2},
    )
    return fig
