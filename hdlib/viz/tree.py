"""The draft tree of one step: the tiers' drafts as a tree coloured by tier, the accepted path
ringed and drawn thick, each rejection crossed out with the token the model emitted in its place,
the bonus token. With `hide_outcome`, the same drafts with nothing of the verdict: for a guess."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from hdlib.engine.trace import Step
from hdlib.engine.tree import DraftTree
from hdlib.tiers.base import BONUS, Tier
from hdlib.viz.generation import (
    ACCEPTED_COLOR,
    FONT,
    REJECTED_COLOR,
    ROOT_COLOR,
    TokenLabel,
    bracket_label,
    hover_text,
    show,
    tier_name,
)

# The width a tree figure's plot area is drawn at in a notebook or a widget, and the width of one
# character of its labels (FONT at 11 px): how many characters a column of the tree has room for.
TREE_PLOT_PX, LABEL_CHAR_PX = 500, 6.7


def tree_layout(tree: DraftTree, bonus_after: int | None = None) -> list[tuple[float, float]]:
    """(x, y) of every node: x its depth, leaves one row apart in the drafter's order, a parent
    centred on its children. With `bonus_after`, one more leaf under that node after its children
    (the bonus token: a row of its own, so that its label covers no other), its (x, y) last."""
    n = len(tree)
    y = [0.0] * (n + 1)
    next_row = 0

    def place(node: int) -> float:
        nonlocal next_row
        kids = (tree.children(node) if node < n else []) + ([n] if node == bonus_after else [])
        if not kids:
            y[node] = float(next_row)
            next_row += 1
        else:
            rows = [place(k) for k in kids]
            y[node] = (rows[0] + rows[-1]) / 2
        return y[node]

    place(0)
    depths = tree.depths
    xy = [(float(depths[i]), -y[i]) for i in range(n)]
    return xy if bonus_after is None else [*xy, (float(depths[bonus_after] + 1), -y[n])]


def emitted_at(step: Step, parent: int) -> int | None:
    """The token the step put after `parent`, a node of its accepted path: the next accepted draft,
    or after the path's end the bonus token (the model's draw: at temperature > 0 not always its most
    likely token). None where an end token cut the step before that position."""
    path, depth = step.accepted_nodes, step.tree.depth(parent)
    if depth + 1 < len(path):
        return step.tree.tokens[path[depth + 1]]
    return step.tokens[depth] if depth < len(step.tokens) else None


def taken_instead(step: Step, node: int) -> int:
    """What the model emitted where it refused `node` (a tried node: its parent is on the accepted
    path); the model's most likely token there when the step emitted none."""
    parent = step.tree.parents[node]
    emitted = emitted_at(step, parent)
    assert step.choices is not None
    return step.choices[parent] if emitted is None else emitted


def draft_tree_figure(
    step: Step | DraftTree,
    label: TokenLabel | None = None,
    accepted: Sequence[int] | None = None,
    bonus: int | None = None,
    tiers: Sequence[Tier] | None = None,
    hide_outcome: bool = False,
) -> go.Figure:
    """The drafts of one step as a tree coloured by tier, the accepted path ringed and drawn thick,
    the model's bonus token after it. A bare `DraftTree` has no accepted path unless given.

    Traces, in order: edges, accepted edges, root, one per tier of `tiers` (default: the tree's, in
    the order they drafted; pass the generation's to keep the traces alike from step to step),
    rejected, bonus. Every node's customdata is [node, token id, tier]. A step's record says what
    the model made of every node: each node's hover says it (and its most likely next token), and
    each rejection (a node tried and refused) is crossed out with the token the model emitted in its
    place (`taken_instead`).
    With `hide_outcome`, a step's drafts are drawn as a bare tree: no path, cross, bonus or verdict,
    the title asks which path the model will accept."""
    record = step if isinstance(step, Step) else None
    if record is not None and hide_outcome:
        fig = draft_tree_figure(record.tree, label, tiers=tiers)
        fig.update_layout(title=f"step {record.index}: {record.tree.n_drafted} drafted; which will the model accept?")
        return fig
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
    xy = tree_layout(tree, accepted[-1] if accepted and bonus is not None else None)
    depth = max(tree.depths) + (1 if accepted and bonus is not None else 0)
    # Labels are cut to their column's width (the hover has them whole): no label runs over the next.
    chars = max(3, int(TREE_PLOT_PX / (depth + 1.2) / LABEL_CHAR_PX))

    path_edges = [(xy[tree.parents[i]], xy[i]) for i in range(1, len(tree)) if i in on_path]
    bonus_xy = None
    if accepted and bonus is not None:
        bonus_xy = xy[-1]  # the last child of the path's end, in a row of its own
        path_edges.append((xy[accepted[-1]], bonus_xy))
    fig = go.Figure()
    all_edges = [(xy[tree.parents[i]], xy[i]) for i in range(1, len(tree))]
    fig.add_trace(_edge_trace("drafts", all_edges, {"color": "#BBBBBB", "width": 1}))
    fig.add_trace(_edge_trace("accepted path", path_edges, {"color": ACCEPTED_COLOR, "width": 4}))
    drafted = list(dict.fromkeys(t for t in tree.tiers[1:] if t is not None))
    shown = [t for t in (drafted if tiers is None else [*tiers, *(t for t in drafted if t not in tiers)]) if t != BONUS]
    groups: list[tuple[Tier | None, list[int]]] = [(None, [0])]
    groups += [(tier, [i for i in range(1, len(tree)) if tree.tiers[i] == tier]) for tier in shown]
    for tier, nodes in groups:
        hovers = [_node_hover(tree, i, label, (i in on_path) if accepted is not None else None, record) for i in nodes]
        fig.add_trace(
            _tier_trace(tree, tier, nodes, xy, on_path, [show(label(tree.tokens[i]), chars) for i in nodes], hovers)
        )
    refused = record.rejected() if record is not None and record.choices is not None else []
    wanted = [taken_instead(record, i) for i in refused] if record is not None else []
    hovers = [_node_hover(tree, i, label, False, record) for i in refused]
    fig.add_trace(_rejected_trace(refused, wanted, xy, [f"\u2192 {show(label(w), chars - 2)}" for w in wanted], hovers))
    fig.add_trace(_bonus_trace(bonus, bonus_xy, show(label(bonus), chars) if bonus_xy else "", label))
    rows = 1 - round(min(y for _, y in xy))  # the leaves, the bonus token included
    row_px = 48 if refused else 34  # a rejection's "-> token" below its node: room above the next row's label
    fig.update_layout(
        title=title,
        xaxis={"title": "depth (tokens after the root)", "dtick": 1, "range": [-0.5, depth + 0.7], "zeroline": False},
        yaxis={"visible": False, "range": [-rows - 0.2, 0.8]},
        height=max(260, row_px * rows + 140),
        plot_bgcolor="white",
        margin={"l": 10, "r": 10, "t": 50, "b": 40},
    )
    return fig


# Predict, then reveal ---------------------------------------------------------------------------


Point = tuple[float, float]


def _edge_trace(name: str, pairs: Sequence[tuple[Point, Point]], style: dict) -> go.Scatter:
    """One line trace through every (parent, child) pair, broken between pairs."""
    xs: list[float | None] = []
    ys: list[float | None] = []
    for (x0, y0), (x1, y1) in pairs:
        xs += [x0, x1, None]
        ys += [y0, y1, None]
    return go.Scatter(name=name, x=xs, y=ys, mode="lines", line=style, hoverinfo="skip")


def _tier_trace(
    tree: DraftTree,
    tier: Tier | None,
    nodes: Sequence[int],
    xy: Sequence[Point],
    on_path: set[int],
    texts: Sequence[str],
    hovers: Sequence[str],
) -> go.Scatter:
    """The nodes one tier drafted (the root for `tier` None), in its colour, the accepted ones ringed."""
    return go.Scatter(
        name=tier_name(tier),
        x=[xy[i][0] for i in nodes],
        y=[xy[i][1] for i in nodes],
        mode="markers+text",
        marker={
            "color": ROOT_COLOR if tier is None else tier.color,
            "size": [16 if i in on_path else 11 for i in nodes],
            "line": {"color": ACCEPTED_COLOR, "width": [3 if i in on_path else 0 for i in nodes]},
        },
        text=list(texts),
        textposition="top center",
        textfont={"family": FONT, "size": 11},
        customdata=[[i, tree.tokens[i], tier_name(tier)] for i in nodes],
        hovertext=list(hovers),
        hoverinfo="text",
        showlegend=bool(nodes),
    )


def _rejected_trace(
    refused: Sequence[int], wanted: Sequence[int], xy: Sequence[Point], texts: Sequence[str], hovers: Sequence[str]
) -> go.Scatter:
    """A cross on every node tried and refused, the token the model emitted there written below it."""
    return go.Scatter(
        name="rejected",
        x=[xy[i][0] for i in refused],
        y=[xy[i][1] for i in refused],
        mode="markers+text",
        marker={"symbol": "x-thin", "size": 13, "line": {"color": REJECTED_COLOR, "width": 2}, "color": REJECTED_COLOR},
        text=list(texts),
        textposition="bottom center",
        textfont={"family": FONT, "size": 9, "color": REJECTED_COLOR},
        customdata=[[i, w, "rejected"] for i, w in zip(refused, wanted)],
        hovertext=list(hovers),
        hoverinfo="text",
        showlegend=bool(refused),
    )


def _bonus_trace(bonus: int | None, at: Point | None, text: str, label: TokenLabel) -> go.Scatter:
    """The model's own token after the accepted path, a diamond; empty when there is none."""
    return go.Scatter(
        name=tier_name(BONUS),
        x=[at[0]] if at else [],
        y=[at[1]] if at else [],
        mode="markers+text",
        marker={"color": BONUS.color, "size": 14, "symbol": "diamond"},
        text=[text] if at else [],
        textposition="top center",
        textfont={"family": FONT, "size": 11},
        customdata=[[-1, bonus, tier_name(BONUS)]] if at else [],
        hovertext=[f"token {bonus} {hover_text(label(bonus))}<br>bonus: the model's own token"] if at else [],
        hoverinfo="text",
        showlegend=at is not None,
    )


def _node_hover(tree: DraftTree, node: int, label: TokenLabel, on_path: bool | None, step: Step | None = None) -> str:
    """A node's token, tier (and the other tiers that drafted it), depth, and the verdict where one
    is known (`on_path` None: a bare tree, no verdict)."""
    token = tree.tokens[node]
    where = "the newest context token" if node == 0 else f"tier: {tier_name(tree.tiers[node])}"
    also = sorted(t.name for t in tree.proposing_tiers(node) if t != tree.tiers[node]) if node else []
    if also:
        where += f" (drafted too by {', '.join(also)})"
    state = "" if on_path is None or not node else "accepted" if on_path else "rejected"
    if step is not None and step.choices is not None and node:
        tried = step.accept_probs[node] if step.accept_probs is not None else None
        if tried is None:
            state = "not tried: the walk never reached its parent"
        elif not on_path:
            took = taken_instead(step, node)
            state = f"rejected: the model took {took} {hover_text(label(took))} after its parent"
        if tried is not None:
            state += f"<br>probability of acceptance: {tried:.2f}"
    lines = [f"node {node}: token {token} {hover_text(label(token))}", where, f"depth {tree.depth(node)}"]
    if state:
        lines.append(state)
    if step is not None and step.choices is not None:
        after, p = step.choices[node], step.choice_probs[node]  # type: ignore[index]
        lines.append(f"the model's most likely token after it: {after} {hover_text(label(after))} (p {p:.2f})")
    return "<br>".join(lines)
