"""The cost model, measured: what a step's drafts cost on this machine, and what they must earn.

A step that verifies k draft tokens costs one forward pass over 1 + k tokens, f(1 + k); plain
decoding emits one token per f(1). So a step pays when it emits more than f(1 + k) / f(1) tokens:
that ratio is the break-even MAT of budget k. With the engine's own time t per step,

    speedup(k) = MAT(k) * f(1) / (f(1 + k) + t)

and where the forward time is flat in k (a GPU with a large model), speedup(k) = MAT(k) at best.
`cost_points` reads a generation's own (drafted nodes, MAT); `cost_figure` draws both against the
profile of this machine (`hdlib.engine.forward_time.load_or_measure`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from hdlib.engine.forward_time import ForwardProfile
from hdlib.engine.trace import Generation
from hdlib.viz.generation import RUN_COLORS


@dataclass(frozen=True)
class CostPoint:
    """A generation's place in the cost model."""

    name: str
    nodes: float  # draft tokens verified per step, on average
    mat: float  # tokens emitted per step
    break_even: float  # the MAT at which its mean step would cost what plain decoding does
    speedup_here: float  # MAT x f(1) / mean step time, with this machine's profile and its engine time
    speedup_flat: float  # the same, were the forward time flat in k: MAT x f(1) / (f(1) + engine time)


def break_even(profile: ForwardProfile, k: float | np.ndarray) -> np.ndarray:
    """Tokens a step verifying k drafts must emit to be as fast as plain decoding: f(1 + k) / f(1)."""
    return profile.forward_s(1 + np.asarray(k, dtype=float)) / profile.seconds[0]


def cost_points(runs: Mapping[str, Generation], profile: ForwardProfile) -> list[CostPoint]:
    """Each run's drafted nodes per step (a Lookahead window's tokens counted with them: they cost the
    same in the pass) and MAT, and the speedups the profile predicts for them."""
    points = []
    f1 = profile.seconds[0]
    for name, gen in runs.items():
        if not gen.steps:
            continue
        nodes = np.array([s.tree.n_drafted + s.window for s in gen.steps], dtype=float)
        engine = float(np.mean([s.times.overhead for s in gen.steps]))
        here = float(np.mean(profile.forward_s(1 + nodes))) + engine
        points.append(
            CostPoint(
                name,
                float(nodes.mean()),
                gen.mat,
                float(np.mean(break_even(profile, nodes))),
                gen.mat * f1 / here,
                gen.mat * f1 / (f1 + engine),
            )
        )
    return points


def cost_figure(profile: ForwardProfile, points: Sequence[CostPoint] = (), max_k: int | None = None) -> go.Figure:
    """Left: f(1 + k) / f(1), the break-even MAT of each budget, with the runs' (nodes, MAT) above or
    below it. Right: each run's speedup with this machine's forward time and where it is flat."""
    ks = np.arange(0, (max_k or len(profile.seconds) - 1) + 1)
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.6, 0.4],
        subplot_titles=("break-even MAT: f(1 + k) / f(1)", "speedup of the same drafts"),
        horizontal_spacing=0.12,
    )
    fig.add_trace(
        go.Scatter(
            name="break-even (this machine)",
            x=ks,
            y=break_even(profile, ks),
            mode="lines",
            line={"color": "#555555"},
            hovertemplate="k = %{x}: a step must emit %{y:.2f} tokens<extra></extra>",
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            name="break-even (flat forward time)",
            x=ks,
            y=np.ones_like(ks, dtype=float),
            mode="lines",
            line={"color": "#999999", "dash": "dot"},
            hoverinfo="skip",
        ),
        row=1,
        col=1,
    )
    for i, p in enumerate(points):
        point, bars = _run_traces(p, RUN_COLORS[(i + 1) % len(RUN_COLORS)])
        fig.add_trace(point, row=1, col=1)
        fig.add_trace(bars, row=1, col=2)
    fig.add_hline(y=1.0, line_dash="dash", line_color="#555555", row=1, col=2)
    fig.update_xaxes(title_text="draft tokens verified per step (k)", row=1, col=1)
    fig.update_yaxes(title_text="tokens per step", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="speedup over plain decoding", rangemode="tozero", row=1, col=2)
    fig.update_layout(
        title=f"the cost model on this machine: f(1) = {1e3 * profile.seconds[0]:.1f} ms, "
        f"f(17) = {1e3 * float(profile.forward_s(17)):.1f} ms",
        barmode="group",
        height=430,
        template="plotly_white",
        legend={"orientation": "h", "y": -0.2},
        margin={"t": 80},
    )
    return fig


def _run_traces(p: CostPoint, color: str) -> tuple[go.Scatter, go.Bar]:
    """One run: its (nodes, MAT) point beside the break-even line, and its speedup here and where flat."""
    point = go.Scatter(
        name=p.name,
        legendgroup=p.name,
        x=[p.nodes],
        y=[p.mat],
        mode="markers+text",
        text=[p.name],
        textposition="top center",
        marker={"color": color, "size": 11},
        hovertemplate=(
            f"{p.name}: {p.nodes:.1f} nodes per step, MAT {p.mat:.2f} (break-even {p.break_even:.2f})<extra></extra>"
        ),
    )
    bars = go.Bar(
        name=p.name,
        legendgroup=p.name,
        showlegend=False,
        x=["this machine", "flat forward time"],
        y=[p.speedup_here, p.speedup_flat],
        marker_color=color,
        text=[f"{p.speedup_here:.2f}x", f"{p.speedup_flat:.2f}x"],
        textposition="outside",
        hovertemplate=f"{p.name}, %{{x}}: %{{y:.2f}}x<extra></extra>",
    )
    return point, bars
