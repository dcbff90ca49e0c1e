"""Figures of one generation: the answer coloured by tier, the draft tree of a step, tiers per step.

Every function is pure: a `Generation` or `Step` in, a plotly `Figure` out. Each figure has one
trace per tier of the generation (`figure_tiers`: its tiers in order, then the bonus token; empty
when a tier drafted nothing), each in the tier's own colour, so a widget can copy a new figure of
the same generation into its `FigureWidget` trace by trace (`sync_figure`) instead of rebuilding it.

Token text: `Generation.pieces` when the generation came from `hdlib.generate`; else `label(id)`
when a labeller is given (e.g. `token_labeller(lm)`); else the id in brackets.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from hdlib.models import LoadedModel
from hdlib.tiers.base import BONUS, Tier
from hdlib.trace import Generation, Step
from hdlib.tree import DraftTree

TokenLabel = Callable[[int], str]
ROOT_COLOR = "#000000"
ACCEPTED_COLOR = "#E69F00"  # Okabe-Ito orange: the accepted path, apart from every tier colour
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


def show(text: str) -> str:
    """A piece as one visible label: line breaks and tabs drawn, outer spaces dropped."""
    shown = text.replace("\n", "\u21b5").replace("\t", "\u21e5").strip()
    return html.escape(shown) if shown else "\u2423" if text else "\u00b7"


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
    places, n_lines = token_layout(pieces, width)  # of the whole answer: nothing moves as steps go by
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
    title = f"answer after step {last}" if step is not None else "answer"
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
        yaxis={"visible": False, "range": [-n_lines + 0.3, 0.7]},
        height=max(160, 22 * n_lines + 110),
        width=8 * width + 80,
        plot_bgcolor="white",
        legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 1, "xanchor": "right"},
        margin={"l": 10, "r": 10, "t": 60, "b": 10},
    )
    return fig


def _token_hover(token: int, piece: str, tier: Tier, step: int) -> str:
    return f"token {token} {html.escape(repr(piece))}<br>tier: {tier_name(tier)}<br>step {step}"


# The draft tree of one step ----------------------------------------------------------------------


def tree_layout(tree: DraftTree) -> list[tuple[float, float]]:
    """(x, y) of every node: x its depth, leaves one row apart in the drafter's order, a parent
    centred on its children."""
    y = [0.0] * len(tree)
    next_row = 0

    def place(node: int) -> float:
        nonlocal next_row
        kids = tree.children(node)
        if not kids:
            y[node] = float(next_row)
            next_row += 1
        else:
            rows = [place(k) for k in kids]
            y[node] = (rows[0] + rows[-1]) / 2
        return y[node]

    place(0)
    return [(float(tree.depths[i]), -y[i]) for i in range(len(tree))]


def draft_tree_figure(
    step: Step | DraftTree,
    label: TokenLabel | None = None,
    accepted: Sequence[int] | None = None,
    bonus: int | None = None,
    tiers: Sequence[Tier] | None = None,
) -> go.Figure:
    """The drafts of one step as a tree coloured by tier, the accepted path ringed and drawn thick,
    the model's bonus token after it. A bare `DraftTree` has no accepted path unless given.

    Traces, in order: edges, accepted edges, root, one per tier of `tiers` (default: the tree's, in
    the order they drafted; pass the generation's to keep the traces alike from step to step),
    bonus. Every node's customdata is [node, token id, tier]."""
    if isinstance(step, Step):
        tree, title = step.tree, f"step {step.index}: {step.tree.n_drafted} drafted, {len(step.tokens)} emitted"
        accepted = step.accepted_nodes if accepted is None else accepted
        # The last emitted token is the bonus, unless an end token cut the step short.
        if bonus is None and step.tiers and step.tiers[-1] == BONUS:
            bonus = step.tokens[-1]
    else:
        tree, title = step, f"draft tree: {step.n_drafted} draft tokens"
    label = label or bracket_label
    on_path = set(accepted or ())
    xy = tree_layout(tree)

    def edges(pairs: list[tuple[tuple[float, float], tuple[float, float]]]) -> tuple[list, list]:
        xs, ys = [], []
        for (x0, y0), (x1, y1) in pairs:
            xs += [x0, x1, None]
            ys += [y0, y1, None]
        return xs, ys

    all_edges = [(xy[tree.parents[i]], xy[i]) for i in range(1, len(tree))]
    path_edges = [(xy[tree.parents[i]], xy[i]) for i in range(1, len(tree)) if i in on_path]
    bonus_xy = None
    if accepted and bonus is not None:
        end = xy[accepted[-1]]
        bonus_xy = (end[0] + 1, end[1] - 0.45)  # between rows, so it never covers a drafted node
        path_edges.append((end, bonus_xy))
    fig = go.Figure()
    for name, pairs, style in (
        ("drafts", all_edges, {"color": "#BBBBBB", "width": 1}),
        ("accepted path", path_edges, {"color": ACCEPTED_COLOR, "width": 4}),
    ):
        xs, ys = edges(pairs)
        fig.add_trace(go.Scatter(name=name, x=xs, y=ys, mode="lines", line=style, hoverinfo="skip"))

    drafted = list(dict.fromkeys(t for t in tree.tiers[1:] if t is not None))
    shown = [t for t in (drafted if tiers is None else [*tiers, *(t for t in drafted if t not in tiers)]) if t != BONUS]
    groups: list[tuple[Tier | None, list[int]]] = [(None, [0])]
    groups += [(tier, [i for i in range(1, len(tree)) if tree.tiers[i] == tier]) for tier in shown]
    for tier, nodes in groups:
        color = ROOT_COLOR if tier is None else tier.color
        fig.add_trace(
            go.Scatter(
                name=tier_name(tier),
                x=[xy[i][0] for i in nodes],
                y=[xy[i][1] for i in nodes],
                mode="markers+text",
                marker={
                    "color": color,
                    "size": [16 if i in on_path else 11 for i in nodes],
                    "line": {"color": ACCEPTED_COLOR, "width": [3 if i in on_path else 0 for i in nodes]},
                },
                text=[show(label(tree.tokens[i])) for i in nodes],
                textposition="top center",
                textfont={"family": FONT, "size": 11},
                customdata=[[i, tree.tokens[i], tier_name(tier)] for i in nodes],
                hovertext=[_node_hover(tree, i, label, i in on_path) for i in nodes],
                hoverinfo="text",
                showlegend=bool(nodes),
            )
        )
    fig.add_trace(
        go.Scatter(
            name=tier_name(BONUS),
            x=[bonus_xy[0]] if bonus_xy else [],
            y=[bonus_xy[1]] if bonus_xy else [],
            mode="markers+text",
            marker={"color": BONUS.color, "size": 14, "symbol": "diamond"},
            text=[show(label(bonus))] if bonus_xy else [],
            textposition="bottom center",
            textfont={"family": FONT, "size": 11},
            customdata=[[-1, bonus, tier_name(BONUS)]] if bonus_xy else [],
            hovertext=[f"token {bonus} {html.escape(repr(label(bonus)))}<br>bonus: the model's own token"] if bonus_xy else [],
            hoverinfo="text",
            showlegend=bonus_xy is not None,
        )
    )
    depth = max(tree.depths) + (1 if bonus_xy else 0)
    rows = max(1, len(tree.leaves()))
    fig.update_layout(
        title=title,
        xaxis={"title": "depth (tokens after the root)", "dtick": 1, "range": [-0.5, depth + 0.7], "zeroline": False},
        yaxis={"visible": False, "range": [-rows - 0.2, 0.8]},
        height=max(260, 34 * rows + 140),
        plot_bgcolor="white",
        margin={"l": 10, "r": 10, "t": 50, "b": 40},
    )
    return fig


def _node_hover(tree: DraftTree, node: int, label: TokenLabel, on_path: bool) -> str:
    token = tree.tokens[node]
    where = "the newest context token" if node == 0 else f"tier: {tier_name(tree.tiers[node])}"
    state = "accepted" if on_path and node else ("rejected" if node else "")
    return (
        f"node {node}: token {token} {html.escape(repr(label(token)))}<br>{where}"
        f"<br>depth {tree.depths[node]}{'<br>' + state if state else ''}"
    )


# Per-step counts and comparisons -----------------------------------------------------------------


def tier_steps_figure(gen: Generation, step: int | None = None) -> go.Figure:
    """Tokens emitted per step, stacked by tier (bonus tokens included), and the tokens drafted per
    step as a line. With `step`, a marker at that step. Traces: one bar per tier in `figure_tiers`
    order, then "drafted"."""
    x = [s.index for s in gen.steps]
    fig = go.Figure()
    for tier in figure_tiers(gen):
        counts = [sum(t == tier for t in s.tiers) for s in gen.steps]
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
            y=[s.tree.n_drafted for s in gen.steps],
            mode="lines",
            line={"color": "#999999", "dash": "dot", "shape": "hv"},
            hovertemplate="step %{x}: %{y} drafted<extra></extra>",
        )
    )
    marker = [] if step is None else [step_marker(step)]
    fig.update_layout(
        barmode="stack",
        title=f"tokens per step: MAT {gen.mat:.2f} over {len(gen.steps)} steps",
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


def sync_figure(widget: go.FigureWidget, fig: go.Figure) -> None:
    """Copy `fig` into `widget` in one update: traces in place when they line up, else replaced."""
    if [type(t) for t in widget.data] != [type(t) for t in fig.data]:
        widget.data = ()
        widget.add_traces(list(fig.data))
        widget.layout = fig.layout
        return
    with widget.batch_update():
        for mine, new in zip(widget.data, fig.data):
            mine.update(new.to_plotly_json(), overwrite=True)
        widget.layout.update(fig.layout.to_plotly_json(), overwrite=True)
