"""The machinery of one step drawn as heatmaps: tree attention mask, position ids, cache compaction.

Each figure is computed by the engine's own functions (`tree_buffers`, `tree_attention_mask`,
`compact_cache`) on the CPU, not re-implemented here, so the picture is what the model is given.
A step's cache holds `past_len = step.context_len - 1` tokens (all but the tree's root); the
figures show only its last `past_shown` entries, as the context every node may see.

A chain comes before a tree: `chain_tree` makes one (k new tokens after a cached prefix, as a
prefill or a single draft), whose mask is the plain causal lower triangle; a tree's mask generalises
it (each node sees its ancestors). `precision_runs` decodes one prompt by plain decoding and HD in
each of several dtypes and says where (if anywhere) the two part, with `hdlib.bench.divergence.explain`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace

import plotly.graph_objects as go
import torch

from hdlib.bench.divergence import Divergence, dtype_name, explain
from hdlib.decoding import generate
from hdlib.engine.trace import Generation, Step
from hdlib.engine.tree import DraftTree, TreeBuffers, tree_buffers
from hdlib.engine.verifier import compact_cache, tree_attention_mask
from hdlib.errors import HDError
from hdlib.models.loading import LoadedModel
from hdlib.tiers import BONUS, Tier
from hdlib.viz.generation import ROOT_COLOR, TokenLabel, bracket_label, hover_text, show, tier_name

HIDDEN, VISIBLE = "#F2F2F2", "#3B6FB6"


def _tree_and_past(step: Step | DraftTree, past_len: int | None) -> tuple[DraftTree, int]:
    if isinstance(step, Step):
        return step.tree, step.context_len - 1 if past_len is None else past_len
    return step, past_len or 0


def _node_labels(tree: DraftTree, label: TokenLabel) -> list[str]:
    """Tick labels: node number and token text, coloured by tier (plotly ticks take <span> colours)."""
    out = []
    for i, token in enumerate(tree.tokens):
        tier = tree.tiers[i]
        color = ROOT_COLOR if tier is None else tier.color
        out.append(f'<span style="color:{color}">{i} {show(label(token))}</span>')
    return out


def chain_tree(tokens: Sequence[int], tier: Tier = BONUS) -> DraftTree:
    """One chain as a tree: `tokens[0]` the root, each next token the only child of the one before.
    Fed after a cache of `past_len` tokens, it is what one pass over k new tokens sees."""
    if not tokens:
        raise HDError("a chain needs at least one token")
    tree = DraftTree(root=int(tokens[0]))
    tree.add([int(t) for t in tokens[1:]], tier, max_new=len(tokens), max_depth=len(tokens))
    return tree


def is_chain(tree: DraftTree) -> bool:
    return all(parent == node - 1 for node, parent in enumerate(tree.parents))


def showcase_step(gen: Generation) -> Step:
    """The step that shows most of the machinery: its tree branches and some of its drafts were
    accepted, some rejected; among those the most accepted drafts, then the most branches. Without
    such a step, the one with the most accepted drafts, then the most drafts."""
    if not gen.steps:
        raise HDError("the generation has no steps")

    def score(step: Step) -> tuple[bool, int, int, int]:
        accepted, branches = step.n_accepted_drafts, len(step.tree.leaves())
        telling = branches > 1 and 0 < accepted < step.tree.n_drafted
        return telling, accepted, branches, step.tree.n_drafted

    return max(gen.steps, key=score)


def step_buffers(step: Step | DraftTree, past_len: int | None = None) -> TreeBuffers:
    """The tree buffers the verifier built for this step (on the CPU)."""
    tree, past = _tree_and_past(step, past_len)
    return tree_buffers(tree, past, "cpu")


def attention_mask_figure(
    step: Step | DraftTree, past_len: int | None = None, past_shown: int = 4, label: TokenLabel | None = None
) -> go.Figure:
    """Rows: the tree's nodes (queries). Columns: the last `past_shown` cached tokens, then the nodes
    (keys). 1 where the node may attend, from `tree_attention_mask`: the whole cache and its own
    ancestors. z has shape (N, min(past_shown, past_len) + N)."""
    tree, past = _tree_and_past(step, past_len)
    label = label or bracket_label
    buffers = tree_buffers(tree, past, "cpu")
    visible = (tree_attention_mask(buffers, past, torch.float32)[0, 0] == 0).to(torch.int64)  # (N, past + N)
    shown = min(past_shown, past)
    z = visible[:, past - shown :].tolist()
    nodes = _node_labels(tree, label)
    columns = [f"past {p}" for p in range(past - shown, past)] + nodes
    hover = [
        [
            f"query: node {i} (position {int(buffers.position_ids[i])})<br>key: "
            + (f"cached token at position {past - shown + j}" if j < shown else f"node {j - shown}")
            + f"<br>{'visible' if z[i][j] else 'masked'}"
            for j in range(len(columns))
        ]
        for i in range(len(tree))
    ]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(range(len(columns))),
            y=list(range(len(tree))),
            zmin=0,
            zmax=1,
            colorscale=[[0, HIDDEN], [1, VISIBLE]],
            showscale=False,
            xgap=1,
            ygap=1,
            hovertext=hover,
            hoverinfo="text",
        )
    )
    fig.add_vline(x=shown - 0.5, line={"color": "#333333", "width": 2})
    kind = "causal mask of a chain" if is_chain(tree) else "tree attention mask"
    fig.update_layout(
        title=f"{kind}: {len(tree)} new tokens over {past} cached tokens (last {shown} shown)",
        xaxis={"title": "key", "tickvals": list(range(len(columns))), "ticktext": columns, "tickangle": -60},
        yaxis={
            "title": "query (tree node)",
            "tickvals": list(range(len(tree))),
            "ticktext": nodes,
            "autorange": "reversed",
        },
        height=max(300, 22 * len(tree) + 200),
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
        plot_bgcolor="white",
    )
    return fig


def position_ids_figure(
    step: Step | DraftTree, past_len: int | None = None, label: TokenLabel | None = None
) -> go.Figure:
    """Rows: depth in the tree and position id (`past_len + depth`) of every node: siblings share a
    position, as each would sit at that place in the text. z has shape (2, N)."""
    tree, past = _tree_and_past(step, past_len)
    buffers = tree_buffers(tree, past, "cpu")
    positions = buffers.position_ids.tolist()
    depths = [p - past for p in positions]
    nodes = _node_labels(tree, label or bracket_label)
    fig = go.Figure(
        go.Heatmap(
            z=[depths, depths],
            text=[[str(d) for d in depths], [str(p) for p in positions]],
            texttemplate="%{text}",
            x=list(range(len(tree))),
            y=["depth", "position id"],
            colorscale="Blues",
            showscale=False,
            xgap=1,
            ygap=1,
            customdata=[positions, positions],
            hovertemplate="node %{x}<br>position id %{customdata}<extra></extra>",
        )
    )
    fig.update_layout(
        title=f"position ids: {past} cached tokens + depth",
        xaxis={"title": "tree node", "tickvals": list(range(len(tree))), "ticktext": nodes, "tickangle": -60},
        height=260,
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
    )
    return fig


def compaction(past_len: int, n_nodes: int, keep: Sequence[int]) -> list[int]:
    """Which slot of the cache before compaction each slot after it holds, found by running
    `compact_cache` on a cache whose entries are their own slot numbers."""
    slots = torch.arange(past_len + n_nodes, dtype=torch.float32).view(1, 1, -1, 1)  # (B, H, T, D)
    layer = SimpleNamespace(keys=slots.clone(), values=slots.clone())
    compact_cache(SimpleNamespace(layers=[layer]), past_len, list(keep))  # type: ignore[arg-type]
    return [int(v) for v in layer.keys.view(-1).tolist()]


def cache_compaction_figure(step: Step, past_shown: int = 4, label: TokenLabel | None = None) -> go.Figure:
    """The KV cache after the forward pass (cached past, then every tree node) and after compaction
    (past, then only the accepted path, moved down). Cells: 1 kept, 0 dropped; after compaction the
    slots past the end are empty (None). z has shape (2, min(past_shown, past_len) + N)."""
    tree, past = step.tree, step.context_len - 1
    label = label or bracket_label
    shown = min(past_shown, past)
    n = len(tree)
    after = compaction(past, n, step.accepted_nodes)  # slot -> slot it came from
    kept = set(after[past:])
    width = shown + n
    before_row = [1] * shown + [int(past + i in kept) for i in range(n)]
    after_row: list[int | None] = [1] * (shown + len(after) - past) + [None] * (width - shown - (len(after) - past))

    def describe(slot: int) -> str:
        if slot < past:
            return f"cached token at position {slot}"
        node = slot - past
        tier = tier_name(tree.tiers[node])
        token = tree.tokens[node]
        return f"node {node}: token {token} {hover_text(label(token))} ({tier})"

    def text(slot: int) -> str:
        return "past" if slot < past else show(label(tree.tokens[slot - past]))

    before_slots = list(range(past - shown, past + n))
    after_slots = after[past - shown :]
    fig = go.Figure(
        go.Heatmap(
            z=[before_row, after_row],
            x=list(range(width)),
            y=["after the forward pass", "after compaction"],
            text=[[text(s) for s in before_slots], [text(s) for s in after_slots] + [""] * (width - len(after_slots))],
            texttemplate="%{text}",
            hovertext=[
                [f"slot {past - shown + j}: {describe(s)}" for j, s in enumerate(before_slots)],
                [f"slot {past - shown + j}: {describe(s)}" for j, s in enumerate(after_slots)]
                + ["empty"] * (width - len(after_slots)),
            ],
            hoverinfo="text",
            zmin=0,
            zmax=1,
            colorscale=[[0, "#E8B4B4"], [1, "#9ED3B8"]],
            showscale=False,
            xgap=2,
            ygap=6,
        )
    )
    fig.add_vline(x=shown - 0.5, line={"color": "#333333", "width": 2})
    fig.update_layout(
        title=(  # two lines: one would run past the figure's edge for a long accepted path
            f"cache compaction: {n} tree entries appended, {len(kept)} kept<br>"
            f"<sup>the accepted path {list(step.accepted_nodes)}; red: dropped</sup>"
        ),
        xaxis={
            "title": "cache slot",
            "tickvals": list(range(width)),
            "ticktext": [str(past - shown + j) for j in range(width)],
            "tickangle": -60,
        },
        yaxis={"autorange": "reversed"},
        height=280,
        margin={"l": 10, "r": 10, "t": 70, "b": 10},
    )
    fig.update_traces(textfont={"color": "#222222"})
    return fig


# Precision: lossless in exact arithmetic, observed in float32, near-ties in bfloat16 ---------


@dataclass(frozen=True)
class PrecisionRun:
    """One prompt decoded by plain decoding and by HD with the model in one dtype."""

    dtype: str
    plain: Generation
    hd: Generation
    divergence: Divergence | None  # where HD's answer parts from plain decoding's, weighed; None: equal

    @property
    def same(self) -> bool:
        return self.divergence is None

    def describe(self) -> str:
        head = f"{self.dtype:9} HD (MAT {self.hd.mat:.2f}) vs plain decoding, {len(self.plain.tokens)} tokens: "
        return head + ("identical, token for token" if self.same else f"part at {self.divergence.describe()}")


def precision_runs(
    lms: Sequence[LoadedModel], prompt: str | Sequence[int], max_new_tokens: int = 48, **hd_options
) -> list[PrecisionRun]:
    """Greedy plain decoding and HD (`hd_options`: tiers, budget, ...) on `prompt` with each model
    (the same weights loaded in several dtypes, `load_model(dtype=...)`), and where they part."""
    runs = []
    for lm in lms:
        plain = generate(lm, prompt, tiers=(), max_new_tokens=max_new_tokens)
        hd = generate(lm, prompt, max_new_tokens=max_new_tokens, **hd_options)
        parted = explain(lm.model, plain.prompt_ids, plain.tokens, hd.tokens)
        runs.append(PrecisionRun(dtype_name(lm.model.dtype), plain, hd, parted))
    return runs
