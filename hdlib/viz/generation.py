"""Figures of one generation: the answer coloured by tier, tiers per step, runs compared; the
colours, labels and hover texts every figure shares (the draft tree of a step: `hdlib.viz.tree`).

Every function is pure: a `Generation` or `Step` in, a plotly `Figure` out. Each figure has one
trace per tier of the generation (`figure_tiers`: its tiers in order, then the bonus token; empty
when a tier drafted nothing), each in the tier's own colour, so that figures of one generation look
alike from step to step.

Token text: `Generation.pieces` when the generation came from `hdlib.generate`; else `label(id)`
when a labeller is given (e.g. `token_labeller(lm)`); else the id in brackets.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from hdlib.engine.trace import Generation, TierStats
from hdlib.models.loading import LoadedModel
from hdlib.tiers.base import BONUS, Tier

TokenLabel = Callable[[int], str]
ROOT_COLOR = "#000000"
ACCEPTED_COLOR = "#E69F00"  # Okabe-Ito orange: the accepted path, apart from every tier colour
REJECTED_COLOR = "#D55E00"  # Okabe-Ito vermillion: a draft the model refused
RUN_COLORS = ("#000000", "#E69F00", "#56B4E9", "#D55E00", "#F0E442")
FONT = "Menlo, Consolas, 'DejaVu Sans Mono', monospace"


def bracket_label(token: int) -> str:
    return f"[{token}]"


def token_labeller(lm: LoadedModel) -> TokenLabel:
    """The text of one token id under `lm`'s tokenizer, special tokens included (cached)."""
    return lru_cache(maxsize=None)(lambda token: lm.decode([token], skip_special_tokens=False))


def tier_name(tier: Tier | None) -> str:
    return "root" if tier is None else tier.name


def figure_tiers(gen: Generation) -> list[Tier]:
    """The trace order of a generation's figures: its tiers in the order asked, then the bonus token."""
    drafted = (t for s in gen.steps for t in s.tiers if t != BONUS)  # (a hand-made record may lack tier_order)
    return list(dict.fromkeys([*gen.tier_order, *drafted, BONUS]))


def answer_pieces(gen: Generation, label: TokenLabel | None = None) -> list[str]:
    """The text of every new token: the generation's own pieces, else `label`, else `[id]`."""
    if len(gen.pieces) == len(gen.tokens):
        return list(gen.pieces)
    return [(label or bracket_label)(t) for t in gen.tokens]


def show(text: str, chars: int | None = None) -> str:
    """A piece as one visible label: line breaks and tabs drawn, outer spaces dropped, cut to `chars`
    characters with an ellipsis. Escaped for plotly's text, which reads tags (`<b>`) and only the
    entities of `&`, `<` and `>`: a quote stays a quote (html.escape's `&quot;` would be drawn as
    written)."""
    shown = text.replace("\n", "\u21b5").replace("\t", "\u21e5").strip()
    if chars is not None and len(shown) > chars:
        shown = shown[: max(chars - 1, 1)] + "\u2026"
    return html.escape(shown, quote=False) if shown else "\u2423" if text else "\u00b7"


# Answer tokens ---------------------------------------------------------------------------------


def token_layout(pieces: Sequence[str], width: int = 80) -> tuple[list[tuple[int, int]], int]:
    """(column, line) where each piece starts when the text is wrapped at `width` characters, and
    the number of lines. A piece that would cross the margin starts a new line; "\\n" breaks one."""
    places, col, line = [], 0, 0
    for piece in pieces:
        visible = len(piece.rstrip("\n"))
        if col > 0 and col + visible > width:
            col, line = 0, line + 1
        lead = len(piece) - len(piece.lstrip(" "))  # the label is drawn where its text starts
        places.append((col + min(lead, max(visible - 1, 0)), line))
        for char in piece:
            if char == "\n":
                col, line = 0, line + 1
            else:
                col += 1
    return places, line + 1


def token_figure(
    gen: Generation, step: int | None = None, label: TokenLabel | None = None, width: int = 80
) -> go.Figure:
    """The answer as wrapped text, each token coloured by the tier that drafted it (bonus tokens in
    the model's colour). With `step`, only the tokens of steps 0..step, those of `step` boxed.
    Hover: token id, text, tier, step. One trace per tier, in `figure_tiers` order."""
    pieces = answer_pieces(gen, label)
    places, _ = token_layout(pieces, width)  # of the whole answer: nothing moves as steps go by
    last = len(gen.steps) - 1 if step is None else min(step, len(gen.steps) - 1)
    tiers = figure_tiers(gen)
    by_tier: dict[Tier, list[tuple[int, int, str, int, int]]] = {t: [] for t in tiers}
    boxes = []
    i = 0
    for s in gen.steps[: last + 1]:
        for token, tier in zip(s.tokens, s.tiers):
            col, line = places[i]
            by_tier[tier].append((col, line, pieces[i], token, s.index))
            if step is not None and s.index == last:
                boxes.append((col, line, max(len(show(pieces[i])), 1)))
            i += 1
    fig = go.Figure()
    for tier in tiers:
        rows = by_tier[tier]
        fig.add_trace(
            go.Scatter(
                name=tier_name(tier),
                x=[r[0] for r in rows],
                y=[-r[1] for r in rows],
                mode="text",
                text=[show(r[2]) for r in rows],
                textposition="middle right",
                textfont={"color": tier.color, "family": FONT, "size": 13},
                customdata=[[r[3], tier.name, r[4]] for r in rows],
                hovertext=[_token_hover(r[3], r[2], tier, r[4]) for r in rows],
                hoverinfo="text",
            )
        )
    lines = max((places[k][1] for k in range(i)), default=0) + 1
    title = "answer" if step is None else f"answer after step {last}" if last >= 0 else "answer before its first step"
    fig.update_layout(
        title=f"{title}: {i} of {len(gen.tokens)} tokens",
        shapes=[
            {
                "type": "rect",
                "x0": c - 0.2,
                "x1": c + n + 0.2,
                "y0": -line - 0.45,
                "y1": -line + 0.45,
                "line": {"color": ACCEPTED_COLOR, "width": 1.5},
                "layer": "below",
            }
            for c, line, n in boxes
        ],
        xaxis={"visible": False, "range": [-1, width + 2]},
        # 22 px a line, as many lines as the tokens shown fill: a line keeps its place as steps add lines.
        yaxis={"visible": False, "range": [-lines + 0.5, 0.5]},
        height=22 * lines + 70,
        width=8 * width + 80,
        plot_bgcolor="white",
        legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 1, "xanchor": "right"},
        margin={"l": 10, "r": 10, "t": 60, "b": 10},
    )
    return fig


def _token_hover(token: int, piece: str, tier: Tier, step: int) -> str:
    return f"token {token} {hover_text(piece)}<br>tier: {tier_name(tier)}<br>step {step}"


def hover_text(piece: str) -> str:
    """A piece in hover text: its repr, escaped as `show` escapes."""
    return html.escape(repr(piece), quote=False)


# Per-tier rates -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TierRate:
    """What one tier drafted in a generation and what of it the model accepted. A node two tiers
    drafted counts for both (`drafted`, `accepted`); `stats.credited` counts it for the first only."""

    stats: TierStats  # the generation's own per-tier record: credited, alone, shared, asked, lookup_s
    drafted: int  # nodes of the verified trees it proposed, alone or with another tier
    accepted: int  # of those, the emitted drafts

    @property
    def tier(self) -> Tier:
        return self.stats.tier

    @property
    def rate(self) -> float:
        """The share of its drafted nodes the model accepted (0 when it drafted none)."""
        return self.accepted / self.drafted if self.drafted else 0.0


def tier_rates(gen: Generation) -> list[TierRate]:
    """Per tier of `gen`, in order: nodes drafted, nodes accepted, beside `Generation.tier_stats()`."""
    drafted: Counter[Tier] = Counter()
    accepted: Counter[Tier] = Counter()
    for s in gen.steps:
        for node in range(1, len(s.tree)):
            drafted.update(s.tree.proposing_tiers(node))
        for proposers in s.accepted_proposers():
            accepted.update(proposers)
    return [TierRate(r, drafted[r.tier], accepted[r.tier]) for r in gen.tier_stats()]


TIER_COLUMNS = ("tier", "asked", "drafted", "accepted", "rate", "credited")


def _tier_row(r: TierRate) -> tuple[str, ...]:
    return (r.tier.name, str(r.stats.asked), str(r.drafted), str(r.accepted), f"{r.rate:.0%}", str(r.stats.credited))


def tier_stats_table(gen: Generation) -> str:
    """The per-tier rates as a text table: steps asked, nodes drafted and accepted, the acceptance
    rate, and the emitted tokens credited to the tier (a token several tiers drafted: to the first)."""
    rows = [TIER_COLUMNS, *(_tier_row(r) for r in tier_rates(gen))]
    widths = [max(len(row[k]) for row in rows) for k in range(len(TIER_COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(w) if k == 0 else cell.rjust(w) for k, (cell, w) in enumerate(zip(row, widths)))
        for row in rows
    )


def tier_stats_html(gen: Generation) -> str:
    """`tier_stats_table` as an HTML table, each tier's name in its colour."""
    head = "".join(f'<th style="padding:0 8px">{c}</th>' for c in TIER_COLUMNS)
    body = "".join(
        f'<tr><td style="color:{r.tier.color};padding:0 8px">&#9632; {html.escape(r.tier.name)}</td>'
        + "".join(f'<td style="text-align:right;padding:0 8px">{c}</td>' for c in _tier_row(r)[1:])
        + "</tr>"
        for r in tier_rates(gen)
    )
    return f"<table><tr>{head}</tr>{body}</table>"


# Per-step counts and comparisons -----------------------------------------------------------------


def tier_steps_figure(gen: Generation, step: int | None = None, before: int | None = None) -> go.Figure:
    """Tokens emitted per step, stacked by tier (bonus tokens included), and the tokens drafted per
    step as a line. With `step`, a marker at that step; with `before`, only the steps before that
    one (the predict game: nothing of a step not yet revealed). Traces: one bar per tier in
    `figure_tiers` order, then "drafted"."""
    steps = gen.steps if before is None else gen.steps[: max(before, 0)]
    x = [s.index for s in steps]
    fig = go.Figure()
    for tier in figure_tiers(gen):
        counts = [sum(t == tier for t in s.tiers) for s in steps]
        fig.add_trace(
            go.Bar(
                name=tier_name(tier),
                x=x,
                y=counts,
                marker_color=tier.color,
                hovertemplate=f"step %{{x}}: %{{y}} {tier_name(tier)}<extra></extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            name="drafted",
            x=x,
            y=[s.tree.n_drafted for s in steps],
            mode="lines",
            line={"color": "#999999", "dash": "dot", "shape": "hv"},
            hovertemplate="step %{x}: %{y} drafted<extra></extra>",
        )
    )
    marker = [] if step is None else [step_marker(step)]
    mat = gen.mat if before is None else sum(len(s.tokens) for s in steps) / max(len(steps), 1)
    shown = f"{len(steps)} steps" if before is None else f"the {len(steps)} steps shown"
    fig.update_layout(
        barmode="stack",
        title=f"tokens per step: MAT {mat:.2f} over {shown}" if steps else "tokens per step: no step shown yet",
        xaxis_title="step",
        yaxis_title="tokens",
        shapes=marker,
        bargap=0.1,
        height=320,
        margin={"l": 50, "r": 10, "t": 50, "b": 40},
    )
    return fig


def step_marker(step: int) -> dict:
    """A band behind step `step` of a figure whose x axis is the step index."""
    return {
        "type": "rect",
        "xref": "x",
        "yref": "paper",
        "x0": step - 0.5,
        "x1": step + 0.5,
        "y0": 0,
        "y1": 1,
        "fillcolor": ACCEPTED_COLOR,
        "opacity": 0.25,
        "line": {"width": 0},
        "layer": "below",
    }


def compare_figure(runs: Mapping[str, Generation]) -> go.Figure:
    """Runs side by side (e.g. {"plain": plain, "HD": hd}): cumulative tokens over wall time (one
    marker per forward pass, starting after the prefill), and tokens emitted per step."""
    fig = make_subplots(
        rows=1, cols=2, subplot_titles=("tokens over time", "tokens per step (forward pass)"), horizontal_spacing=0.1
    )
    for k, (name, gen) in enumerate(runs.items()):
        color = RUN_COLORS[k % len(RUN_COLORS)]
        times, done, now, total = [0.0], [0], gen.prefill_s, 0
        times[0] = now
        for s in gen.steps:
            now += s.times.total
            total += len(s.tokens)
            times.append(now)
            done.append(total)
        legend = f"{name}: {len(gen.tokens)} tokens, {len(gen.steps)} steps, {gen.wall_s:.2f} s"
        fig.add_trace(
            go.Scatter(
                name=legend,
                legendgroup=name,
                x=times,
                y=done,
                mode="lines+markers",
                line={"color": color, "shape": "hv"},
                marker={"size": 4},
                hovertemplate=f"{name}: %{{y}} tokens at %{{x:.3f}} s<extra></extra>",
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                name=name,
                legendgroup=name,
                showlegend=False,
                x=[s.index for s in gen.steps],
                y=[len(s.tokens) for s in gen.steps],
                mode="lines+markers",
                line={"color": color},
                marker={"size": 4},
                hovertemplate=f"{name}, step %{{x}}: %{{y}} tokens<extra></extra>",
            ),
            row=1,
            col=2,
        )
    fig.update_xaxes(title_text="seconds", row=1, col=1)
    fig.update_yaxes(title_text="tokens so far", row=1, col=1)
    fig.update_xaxes(title_text="step", row=1, col=2)
    fig.update_yaxes(title_text="tokens emitted", rangemode="tozero", row=1, col=2)
    fig.update_layout(height=380, legend={"orientation": "h", "y": -0.25}, margin={"t": 50})
    return fig
