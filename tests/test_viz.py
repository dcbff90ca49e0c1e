"""hdlib.viz: figures on small hand-made traces, and the widgets driven on a tiny model.

The widget tests click what a user clicks (checkboxes, order, temperature, seed, prompt, step) and
read back the figures the widgets show, comparing it with the generation the cache holds for the
new settings; test tiers (oracles that draft the true answer with mistakes) stand in for every
tier, so that every tier's tokens can appear.
"""

from __future__ import annotations

import dataclasses
import html
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from echo import ECHO, PROMPT, Echo
from oracle import OracleTier
from tiny import VOCAB, save_tiny

import hdlib
from hdlib import viz
from hdlib.engine.drafter import Drafter
from hdlib.engine.forward_time import ForwardProfile
from hdlib.engine.trace import Generation, Step, StepTimes
from hdlib.engine.tree import DraftTree, ancestor_matrix, tree_buffers
from hdlib.errors import HDError
from hdlib.tiers import BONUS, ContextSettings, ContextTier, DraftRow, Tier
from hdlib.tiers.context import continuation
from hdlib.tiers.model import ModelTier
from hdlib.tiers.statistics import StatisticsSettings, StatisticsTier
from hdlib.viz.sampling import accept_every_draft, node_trials, sampler_outcomes

C, R, M, S, T = Tier.CONTEXT, Tier.RECYCLED, Tier.MODEL, Tier.STATISTICS, BONUS


# Hand-made traces -----------------------------------------------------------------------------------


def times(total: float) -> StepTimes:
    return StepTimes(draft=0.0, tree=0.0, forward=total, accept=0.0, update=0.0)


def first_tree() -> DraftTree:
    tree = DraftTree(root=7)
    tree.add([1, 2, 3], C, 10, 10)  # nodes 1, 2, 3
    tree.add([1, 4], M, 10, 10)  # node 4 under node 1
    tree.add([5], S, 10, 10)  # node 5
    return tree


def hand_trace(pieces: bool = True) -> Generation:
    second = DraftTree(root=9)
    second.add([6, 8], M, 10, 10)
    steps = [
        Step(0, 6, 8, first_tree(), (0, 1, 2), (1, 2, 9), (C, C, T), times(0.2)),
        Step(1, 9, 8, second, (0, 1), (6, 3), (M, T), times(0.3)),
        Step(2, 11, 0, DraftTree(root=3), (0,), (4,), (T,), times(0.1)),
    ]
    return Generation(
        prompt_ids=[10, 11, 12, 13, 14, 7],
        steps=steps,
        stop_reason="max_new_tokens",
        wall_s=0.75,
        prefill_s=0.15,
        tier_order=[C, M],
        pieces=["a", " b", "\n", "c", " d", " e"] if pieces else [],
    )


def trace_of(fig, name: str):
    (found,) = [t for t in fig.data if t.name == name]
    return found


def colour_of_points(fig) -> list[str]:
    """The colour of every token drawn in a token figure, one entry per token."""
    return [t.textfont.color for t in fig.data for _ in t.x or ()]


def test_token_figure_colours_each_token_by_its_tier_with_ids_in_hover():
    gen = hand_trace()
    fig = viz.token_figure(gen)
    assert viz.figure_tiers(gen) == [C, M, T]  # the generation's tiers, then the bonus token
    assert [t.name for t in fig.data] == ["context", "model", "bonus"]
    shown = {}
    for tier, trace in zip(viz.figure_tiers(gen), fig.data):
        assert trace.textfont.color == tier.color
        for (token, tier_value, step), hover in zip(trace.customdata, trace.hovertext):
            assert tier_value == tier.name
            assert f"token {token} " in hover and f"step {step}" in hover
            shown.setdefault(tier, []).append(token)
    expected: dict[Tier, list[int]] = {}
    for s in gen.steps:
        for token, tier in zip(s.tokens, s.tiers):
            expected.setdefault(tier, []).append(token)
    assert shown == expected
    assert "statistics" not in [t.name for t in fig.data]  # not among the generation's tiers
    # "\n" breaks the line: "c" starts line 1 (y = -1) at column 0, " d" is drawn at column 2.
    model, target = trace_of(fig, "model"), trace_of(fig, "bonus")
    assert (model.x[0], model.y[0], model.text[0]) == (0, -1, "c")
    assert (target.x[1], target.y[1], target.text[1]) == (2, -1, "d")
    assert target.text[0] == "\u21b5"  # the line break itself, drawn


def test_token_figure_up_to_a_step_boxes_that_steps_tokens():
    gen = hand_trace()
    fig = viz.token_figure(gen, step=1)
    assert sum(len(t.x) for t in fig.data) == 5  # steps 0 and 1
    assert len(fig.layout.shapes) == 2  # the two tokens of step 1
    assert sorted(int(t[0]) for tr in fig.data for t in tr.customdata if t[2] == 1) == [3, 6]


def test_token_text_falls_back_to_a_labeller_then_to_ids():
    gen = hand_trace(pieces=False)
    drawn = {int(c[0]): text for tr in viz.token_figure(gen).data for c, text in zip(tr.customdata, tr.text)}
    assert drawn == {t: f"[{t}]" for t in gen.tokens}
    labelled = viz.token_figure(gen, label=lambda t: f"w{t}")
    assert sorted(t for tr in labelled.data for t in tr.text) == sorted(f"w{t}" for t in gen.tokens)


def test_token_layout_wraps_and_breaks_lines():
    places, lines = viz.token_layout(["ab", " cd", " ef", "\n", "g"], width=6)
    # "ab cd" fits; " ef" would pass column 6 and wraps; each label sits where its text starts.
    assert places == [(0, 0), (3, 0), (1, 1), (3, 1), (0, 2)]
    assert lines == 3


def test_tree_layout_puts_parents_between_children():
    tree = first_tree()
    xy = viz.tree_layout(tree)
    assert [x for x, _ in xy] == tree.depths
    leaves = [xy[i][1] for i in tree.leaves()]
    assert len(set(leaves)) == len(leaves)
    for node in range(len(tree)):
        kids = [xy[k][1] for k in tree.children(node)]
        if kids:
            assert min(kids) <= xy[node][1] <= max(kids)


def test_draft_tree_figure_tiers_accepted_path_and_bonus():
    step = hand_trace().steps[0]
    fig = viz.draft_tree_figure(step, label=lambda t: f"w{t}")
    assert [t.name for t in fig.data][:3] == ["drafts", "accepted path", "root"]
    tree = step.tree
    for tier in (C, M, S):
        trace = trace_of(fig, tier.name)
        nodes = [int(c[0]) for c in trace.customdata]
        assert nodes == [i for i in range(1, len(tree)) if tree.tiers[i] is tier]
        assert trace.marker.color == tier.color
        ringed = {n for n, w in zip(nodes, trace.marker.line.width) if w > 0}
        assert ringed == set(step.accepted_nodes) & set(nodes)
        for node, hover in zip(nodes, trace.hovertext):
            assert f"token {tree.tokens[node]} " in hover
    # The thick path runs root -> node 1 -> node 2 -> the bonus token, node 2's last child.
    xy = viz.tree_layout(tree, bonus_after=2)
    path = trace_of(fig, "accepted path")
    points = [(x, y) for x, y in zip(path.x, path.y) if x is not None]
    bonus = trace_of(fig, "bonus")
    assert (bonus.x[0], bonus.y[0]) == xy[-1]
    assert set(points) == {xy[0], xy[1], xy[2], xy[-1]}
    assert int(bonus.customdata[0][1]) == step.tokens[-1] == 9
    edges = trace_of(fig, "drafts")
    assert sum(x is None for x in edges.x) == len(tree) - 1


def test_draft_tree_figure_without_a_bonus_when_an_end_token_cut_the_step():
    step = hand_trace().steps[0]
    cut = Step(0, 6, 8, step.tree, (0, 1, 2), (1, 2), (C, C), times(0.1))  # ended at the end token 2
    fig = viz.draft_tree_figure(cut)
    assert len(trace_of(fig, "bonus").x) == 0
    bare = viz.draft_tree_figure(step.tree)  # a bare tree: no path at all
    assert len(trace_of(bare, "accepted path").x) == 0


def test_labels_escape_only_what_plotly_reads():
    assert viz.generation.show('"') == '"'  # html.escape's &quot; would be drawn as written
    assert viz.generation.show(" <b>bold & more") == "&lt;b&gt;bold &amp; more"  # no markup from a token
    step = Step(0, 6, 8, first_tree(), (0, 1), (1, 3), (C, T), times(0.1))
    fig = viz.draft_tree_figure(step, label={7: "say", 1: '"', 2: "'", 3: "<b>", 4: "&", 5: "x"}.get)
    texts = {text for trace in fig.data for text in trace.text or ()}
    assert {'"', "'", "&lt;b&gt;", "&amp;"} <= texts
    assert trace_of(fig, "bonus").hovertext[0].startswith("token 3 '&lt;b&gt;'")
    quote = Step(0, 1, 8, first_tree(), (0, 1), (1,), (C,), times(0.1))
    gen = Generation([7], [quote], "max_new_tokens", 0.1, 0.0, pieces=['"'])
    (hover,) = trace_of(viz.token_figure(gen), "context").hovertext
    assert hover.startswith("""token 1 '"'""")


def test_tree_labels_are_cut_to_their_column_and_whole_on_hover():
    """Seen in notebook 03: in a tree 11 deep, "environment" ran over its neighbour's label."""
    assert viz.generation.show("environment", 6) == "envir\u2026"
    assert viz.generation.show("<b>bold", 4) == "&lt;b&gt;\u2026"  # cut before escaping: no entity cut in half
    deep = DraftTree(root=0)
    deep.add(list(range(1, 12)), C, 11, 11)  # 11 deep
    deep.add([12, 13], S, 2, 2)
    words = {12: "environment", 13: "environmental"}
    fig = viz.draft_tree_figure(deep, lambda t: words.get(t, "ab"))
    texts = [t for trace in fig.data for t in trace.text or ()]
    room = int(viz.tree.TREE_PLOT_PX / 12.2 / viz.tree.LABEL_CHAR_PX)
    assert max(len(t) for t in texts) <= room < len("environment")
    hover = trace_of(fig, "statistics").hovertext
    assert "environment" in hover[0] and "environmental" in hover[1]


def test_the_bonus_token_has_a_row_of_its_own():
    """Labels sit above their nodes, so two nodes of one depth less than a row apart overlap."""
    step = hand_trace().steps[0]  # the bonus follows node 2, whose child node 3 drafted a wrong token
    fig = viz.draft_tree_figure(step, label=lambda t: f"w{t}")
    points = [(x, y) for trace in fig.data if trace.mode == "markers+text" for x, y in zip(trace.x, trace.y)]
    assert len(points) == len(step.tree) + 1
    for k, (x, y) in enumerate(points):
        assert all(abs(y - y2) >= 1 for x2, y2 in points[k + 1 :] if x2 == x)
    rows = 1 - min(y for _, y in points)
    assert fig.layout.yaxis.range[0] <= -(rows - 1) - 0.5


def test_rejections_below_their_nodes_get_room_above_the_next_row():
    """A rejection's "-> wanted" label sits below its node; at 34 px a row it covered the label above
    the node of the next row (seen in notebook 01)."""
    step = dataclasses.replace(
        hand_trace().steps[0],
        choices=(1, 2, 9, 0, 0, 0),
        choice_probs=(0.9,) * 6,
        accept_probs=(1.0, 1.0, 1.0, 0.0, 0.0, 0.0),  # nodes 3, 4 and 5 tried and refused
    )
    fig = viz.draft_tree_figure(step, label=lambda t: f"w{t}")
    assert len(trace_of(fig, "rejected").x) == 3
    low, high = fig.layout.yaxis.range
    plot_px = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    assert plot_px / (high - low) >= 46


def test_token_figure_is_as_high_as_the_lines_shown():
    gen = hand_trace()  # "a b" on line 0; "\n" ends it; "c d e" on line 1
    first, full = viz.token_figure(gen, step=0), viz.token_figure(gen)
    assert first.layout.height == 22 * 1 + 70 and full.layout.height == 22 * 2 + 70
    for fig, lines in ((first, 1), (full, 2)):  # 22 px a line at any height, line 0 at the same place
        low, high = fig.layout.yaxis.range
        assert high - low == lines and high == 0.5


def alike_steps() -> Generation:
    """Two steps whose figures have the same traces: the widgets update those in place."""
    a, b = DraftTree(root=7), DraftTree(root=9)
    a.add([1, 2, 3], C, 10, 10)
    a.add([1, 4], M, 10, 10)
    b.add([6, 8], C, 10, 10)
    b.add([5], M, 10, 10)
    steps = [
        Step(0, 6, 8, a, (0, 1, 2), (1, 2, 9), (C, C, T), times(0.2)),
        Step(1, 9, 8, b, (0, 1), (6, 3), (C, T), times(0.3)),
    ]
    return Generation([10, 11, 12, 13, 14, 7], steps, "max_new_tokens", 0.75, 0.15, tier_order=[C, M])


def test_a_figure_output_shows_one_whole_figure_in_plotly_s_own_mime_type():
    """Widgets show figures as an Output's one output, which JupyterLab's plotly renderer draws (a
    FigureWidget's views came back empty after a page reload); each figure replaces the one before."""
    gen = alike_steps()
    out = viz.FigureOutput()
    for fig in [viz.draft_tree_figure(gen.steps[0]), viz.token_figure(gen, 1), viz.draft_tree_figure(gen.steps[1])]:
        out.show(fig)
        (shown,) = out.widget.outputs
        drawn = shown["data"][viz.widgets.PLOTLY_MIME]
        assert out.figure is fig and shown["output_type"] == "display_data"
        assert (
            drawn["data"] == json.loads(fig.to_json())["data"]
            and drawn["layout"] == json.loads(fig.to_json())["layout"]
        )
        assert all("marker" not in t for t in drawn["data"] if t.get("mode") == "lines")  # nothing undefined
        assert shown["data"]["text/plain"].startswith("<plotly figure: ")


def test_tier_steps_figure_counts_tokens_per_tier_per_step():
    gen = hand_trace()
    fig = viz.tier_steps_figure(gen, step=2)
    for tier in viz.figure_tiers(gen):
        bars = trace_of(fig, viz.generation.tier_name(tier))
        assert list(bars.y) == [sum(t == tier for t in s.tiers) for s in gen.steps]
        assert bars.marker.color == tier.color
    assert list(trace_of(fig, "drafted").y) == [5, 2, 0]
    assert fig.layout.shapes[0].x0 == 1.5


def test_compare_figure_cumulative_tokens_over_time():
    hd = hand_trace()
    plain_steps = [Step(i, 6 + i, 0, DraftTree(root=t), (0,), (t,), (T,), times(0.1)) for i, t in enumerate(hd.tokens)]
    plain = Generation([10, 11, 12, 13, 14, 7], plain_steps, "max_new_tokens", 0.8, 0.2)
    fig = viz.compare_figure({"plain": plain, "HD": hd})
    over_time = [t for t in fig.data if t.showlegend is not False]
    assert [t.legendgroup for t in over_time] == ["plain", "HD"]
    for trace, gen in zip(over_time, (plain, hd)):
        assert trace.y[-1] == len(gen.tokens)
        assert trace.x[0] == pytest.approx(gen.prefill_s)
        assert trace.x[-1] == pytest.approx(gen.prefill_s + sum(s.times.total for s in gen.steps))
    per_step = [t for t in fig.data if t.showlegend is False]
    assert list(per_step[1].y) == [3, 2, 1]


# Mechanics ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("past_shown", [2, 4, 9])
def test_attention_mask_figure_is_the_cache_then_the_ancestors(past_shown):
    step = hand_trace().steps[0]  # context_len 6: 5 cached tokens
    z = np.array(viz.attention_mask_figure(step, past_shown=past_shown).data[0].z)
    tree, shown = step.tree, min(past_shown, 5)
    assert z.shape == (len(tree), shown + len(tree))
    assert (z[:, :shown] == 1).all()
    assert (z[:, shown:] == ancestor_matrix(tree.parents)).all()
    for i in range(len(tree)):  # brute force: a node sees itself and its ancestors only
        assert {j for j in range(len(tree)) if z[i, shown + j]} == set(tree.path_to(i))


def test_mechanics_take_a_bare_tree_with_its_past():
    tree = first_tree()
    mask = np.array(viz.attention_mask_figure(tree, past_len=1, past_shown=3).data[0].z)
    assert mask.shape == (len(tree), 1 + len(tree))
    positions = viz.position_ids_figure(tree, past_len=40).data[0]
    assert [int(p) for p in positions.text[1]] == tree_buffers(tree, 40, "cpu").position_ids.tolist()
    assert [int(d) for d in positions.text[0]] == tree.depths


def test_position_ids_figure_matches_tree_buffers():
    step = hand_trace().steps[0]
    heat = viz.position_ids_figure(step).data[0]
    want = tree_buffers(step.tree, step.context_len - 1, "cpu").position_ids.tolist()
    assert [int(p) for p in heat.text[1]] == want == [5, 6, 7, 8, 7, 6]
    assert np.array(heat.z).shape == (2, len(step.tree))


def test_compaction_is_what_compact_cache_does():
    assert viz.compaction(3, 6, [0, 1, 2]) == [0, 1, 2, 3, 4, 5]  # contiguous: nothing moves
    assert viz.compaction(3, 6, [0, 2, 5]) == [0, 1, 2, 3, 5, 8]
    assert viz.compaction(0, 4, [0, 3]) == [0, 3]


def test_cache_compaction_figure_rows():
    step = hand_trace().steps[1]  # 8 cached, tree of 3 nodes, path (0, 1)
    heat = viz.cache_compaction_figure(step, past_shown=2).data[0]
    before, after = heat.z
    assert list(before) == [1, 1, 1, 1, 0]  # two past slots, then nodes 0, 1 kept and node 2 dropped
    assert list(after) == [1, 1, 1, 1, None]
    assert "node 2: token 8" in heat.hovertext[0][4]
    assert "node 1: token 6" in heat.hovertext[1][3]


def test_showcase_step_branches_with_drafts_accepted_and_rejected():
    gen = hand_trace()
    assert viz.showcase_step(gen) is gen.steps[0]  # 3 branches, 2 of 5 drafts accepted
    chain, flat = gen.steps[1], Step(3, 13, 8, first_tree(), (0,), (5,), (T,), times(0.1))
    gen.steps = [flat, chain]  # the branching tree accepted nothing: the most accepted drafts wins
    assert viz.showcase_step(gen) is chain
    gen.steps = []
    with pytest.raises(HDError):
        viz.showcase_step(gen)


# What each tier drafts -------------------------------------------------------------------------------


def test_tier_drafts_with_counts_from_each_tier():
    context = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2]
    model = ModelTier(np.array([[3, 1, 2, 5], [1, 2, 6, 7]]), np.array([5, 3]))
    stats = StatisticsTier.from_documents([[1, 2, 9, 9], [1, 2, 9, 8], [4, 1, 2, 7]], StatisticsSettings(min_count=1))
    rows = viz.tier_drafts([ContextTier(), model, stats], context, budget=8)
    by_tier = {t: [r for r in rows if r.tier is t] for t in (C, M, S)}

    fresh = ContextTier()
    fresh.begin(context)
    assert [r.tokens for r in by_tier[C]] == fresh.lookup(context, 8)
    for r in by_tier[C]:  # counted by scanning: the key's occurrences the text goes on from with the draft
        m, n = r.key_length, len(context)
        ends = [i + m for i in range(n - m) if context[i : i + m] == context[-m:]]
        assert r.count == sum(continuation(context, end, len(r.tokens)) == r.tokens for end in ends) > 0
    assert [(r.tokens, r.count, r.key_length) for r in by_tier[M]] == [
        (row.tokens, row.count, row.key_length) for row in model.explain(context, 8)
    ]
    explained = stats.search(context, 8).drafts
    assert [(r.tokens, r.count, r.key_length) for r in by_tier[S]] == [
        (d.tokens, d.count, d.key_length) for d in explained
    ]
    assert [r.rank for r in by_tier[S]] == list(range(len(explained)))

    table = viz.tier_drafts_table(rows, label=lambda t: f"<{t}>").data[0]
    tiers_col, _, text_col, ids_col, count_col, _ = table.cells.values
    assert list(tiers_col) == [r.tier.name for r in rows]
    assert list(ids_col) == [" ".join(map(str, r.tokens)) for r in rows]
    assert text_col[0] == repr("".join(f"<{t}>" for t in rows[0].tokens))
    assert list(count_col) == [f"{r.count:,}" for r in rows]


def test_drafter_tree_is_the_drafters_trie():
    context = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2]
    model = ModelTier(np.array([[1, 2, 6, 7]]), np.array([3]))
    short = ContextSettings(draft_len=3)  # the context tier leaves budget for the model tier
    tree = viz.drafter_tree([ContextTier(short), model], context, budget=6)
    drafter = Drafter([ContextTier(short), model])
    drafter.begin(context)
    same, _ = drafter.draft(context, 6, 6)
    assert (tree.tokens, tree.tiers) == (same.tokens, same.tiers)
    assert M in tree.tiers


# A tier of one's own (tests/echo.py) ------------------------------------------------------------------


def test_it_shows_in_tier_drafts_with_its_colour_and_default_rows():
    context = [5, 6, 7, 5, 6]
    assert Echo().explain(context, 8) == [DraftRow((6, 6, 6, 6)), DraftRow((7, 5, 6))]  # defaults: its lookups
    rows = viz.tier_drafts([ContextTier(), Echo()], context, budget=8)
    echo = [r for r in rows if r.tier == ECHO]
    assert [r.tokens for r in echo] == [(6, 6, 6, 6), (7, 5, 6)] and echo[0].count is None
    table = viz.tier_drafts_table(rows).data[0]
    assert [c for c, name in zip(table.cells.font.color[0], table.cells.values[0]) if name == "echo"] == [
        ECHO.color
    ] * 2


def test_lookup_latency_times_each_tier_on_each_context_it_was_begun_with():
    calls = []

    class Recording(ContextTier):
        def lookup(self, context, budget):
            calls.append((list(self._tokens), list(context), budget))
            return super().lookup(context, budget)

    contexts = [[1, 2, 3, 1, 2], [4, 5, 4, 5, 4]]
    model = ModelTier(np.array([[1, 2, 6, 7]]), np.array([3]))
    seconds = viz.lookup_latency([Recording(), model], contexts, budget=4)
    assert list(seconds) == [C, M]
    assert all(len(t) == 2 and all(s >= 0 for s in t) for t in seconds.values())
    assert calls == [(c, c, 4) for c in contexts]  # the context tier held exactly that text

    fig = viz.lookup_latency_figure(seconds)
    assert [b.marker.color for b in fig.data] == [C.color, M.color]
    assert np.allclose(fig.data[1].x, np.array(seconds[M]) * 1e6)
    assert fig.data[0].name.startswith("context<br>median")


# Widgets on a tiny model ----------------------------------------------------------------------------

PROMPTS = {"first": "hello world how are you", "second": "you are hello"}
MAX_NEW = 20


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    return hdlib.load_model(str(save_tiny(tmp_path_factory.mktemp("tiny"))), device="cpu")


@pytest.fixture(scope="module")
def truths(lm):
    """Prompt text -> prompt ids + the plain greedy answer: what the oracle tiers draft from."""
    out = {}
    for text in [*PROMPTS.values(), "how are you"]:
        ids = lm.encode_prompt(text)
        out[text] = ids + hdlib.generate(lm, ids, tiers=(), max_new_tokens=MAX_NEW).tokens
    return out


class ShortOracle(OracleTier):
    """An oracle that drafts at most 3 tokens, so that the tiers after it get some budget too."""

    def lookup(self, context, budget):
        return super().lookup(context, min(budget, 3))


class CountingGenerate:
    """A generate function for StepThrough: oracle tiers in the order asked; it records its calls."""

    def __init__(self, lm, truths):
        self.lm, self.truths, self.calls = lm, truths, []

    def __call__(self, s: viz.Settings) -> Generation:
        self.calls.append(s)
        tiers = [ShortOracle(self.truths[s.prompt], VOCAB, seed=k, tier=t) for k, t in enumerate(s.tiers)]
        return hdlib.generate(
            self.lm, s.prompt, tiers=tiers, max_new_tokens=s.max_new_tokens, budget=s.budget,
            temperature=s.temperature, seed=s.seed,
        )  # fmt: skip


@pytest.fixture
def view(lm, truths):
    fn = CountingGenerate(lm, truths)
    v = viz.StepThrough(lm, PROMPTS, generate=fn, max_new_tokens=MAX_NEW, budget=8)
    v.calls = fn.calls
    return v


def shown_tokens(view) -> dict[str, list[int]]:
    """Trace name -> token ids drawn in the token figure."""
    return {t.name: [int(c[0]) for c in t.customdata or ()] for t in view.tokens_fig.figure.data}


def expected_tokens(gen: Generation, upto: int) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {viz.generation.tier_name(t): [] for t in viz.figure_tiers(gen)}
    for s in gen.steps[: upto + 1]:
        for token, tier in zip(s.tokens, s.tiers):
            out[viz.generation.tier_name(tier)].append(token)
    return out


def tree_nodes(view) -> dict[str, list[int]]:
    return {
        t.name: [int(c[0]) for c in t.customdata or ()] for t in view.tree_fig.figure.data if t.customdata is not None
    }


def last_step(view) -> None:
    view.step.value = view.step.max


def test_the_figures_show_the_generation_and_the_step(view):
    gen = view.generation
    assert len(view.calls) == 1 and view.calls[0] == view.settings
    assert view.calls[0].tiers == (C, R, M, S)
    assert len(gen.steps) > 3
    for k in range(len(gen.steps)):
        view.step.value = k
        assert shown_tokens(view) == expected_tokens(gen, k)
        tree = gen.steps[k].tree
        assert int(trace_of(view.tree_fig.figure, "root").customdata[0][1]) == tree.root
        for tier in (C, R, M, S):
            assert tree_nodes(view)[tier.name] == [i for i in range(1, len(tree)) if tree.tiers[i] is tier]
        assert view.steps_fig.figure.layout.shapes[0].x0 == k - 0.5
    view.play.value = 1  # the play button drives the slider
    assert view.step.value == 1
    assert len(view.calls) == 1  # stepping never generates
    # All three test tiers drafted accepted tokens: each appears in its own colour.
    last_step(view)
    colours = set(colour_of_points(view.tokens_fig.figure))
    assert {t.color for t in gen.tier_counts} == colours
    assert len(gen.tier_counts) >= 3


def test_only_the_context_tier_colours_nothing_as_model_or_statistics(view):
    view.tier_boxes[R].value = False
    view.tier_boxes[M].value = False
    view.tier_boxes[S].value = False
    assert view.calls[-1].tiers == (C,)
    gen = view.generation
    assert gen.tier_order == [C]
    last_step(view)
    colours = colour_of_points(view.tokens_fig.figure)
    assert len(colours) == len(gen.tokens)
    assert M.color not in colours and S.color not in colours and R.color not in colours
    assert C.color in colours  # the oracle context tier did get drafts accepted
    for k in range(len(gen.steps)):
        view.step.value = k
        nodes = tree_nodes(view)
        assert not {"recycled", "model", "statistics"} & set(nodes)  # tiers not asked have no trace at all
    bars = {t.name: list(t.y) for t in view.steps_fig.figure.data}
    assert not {"recycled", "model", "statistics"} & set(bars)
    assert sum(bars["context"]) == gen.tier_counts[C] > 0
    # No tier at all: plain decoding, every token the model's own, one per step.
    view.tier_boxes[C].value = False
    last_step(view)
    assert view.generation.mat == 1.0
    assert set(colour_of_points(view.tokens_fig.figure)) == {T.color}


def test_reordering_tiers_reaches_the_drafter_and_the_figures(view):
    view.order.value = (S, M, R, C)
    assert view.calls[-1].tiers == (S, M, R, C) and len(view.calls) == 2
    gen = view.generation
    assert gen.tier_order == [S, M, R, C]
    view.step.value = 0
    assert tree_nodes(view)["statistics"][:1] == [1]  # the first tier asked drafts the first node
    last_step(view)
    assert shown_tokens(view) == expected_tokens(gen, view.step.value)
    bars = {t.name: list(t.y) for t in view.steps_fig.figure.data}
    assert bars == {
        **{
            viz.generation.tier_name(t): [sum(x == t for x in s.tiers) for s in gen.steps]
            for t in viz.figure_tiers(gen)
        },
        "drafted": [s.tree.n_drafted for s in gen.steps],
    }
    # A disabled tier keeps its place in the order: re-enabling it gives back the same setting.
    view.tier_boxes[M].value = False
    assert view.calls[-1].tiers == (S, R, C)
    view.tier_boxes[M].value = True
    assert len(view.calls) == 3 and view.generation is gen


def test_temperature_and_seed_regenerate_once_per_setting(view):
    greedy = view.generation
    view.seed.value = 5  # greedy ignores the seed: nothing to generate
    assert len(view.calls) == 1
    view.temperature.value = 0.8
    assert len(view.calls) == 2 and view.calls[-1].temperature == 0.8 and view.calls[-1].seed == 5
    sampled = view.generation
    assert (sampled.temperature, sampled.seed) == (0.8, 5)
    last_step(view)
    assert shown_tokens(view) == expected_tokens(sampled, view.step.value)
    view.seed.value = 6
    assert len(view.calls) == 3 and view.generation.seed == 6
    other = view.generation
    view.seed.value = 5
    assert len(view.calls) == 3 and view.generation is sampled  # back to a cached setting
    view.temperature.value = 0.0
    assert len(view.calls) == 3 and view.generation is greedy
    assert other is not sampled
    assert [s.seed for s in view.cache.traces] == [None, 5, 6]


def test_prompt_from_the_list_or_typed_and_bad_prompts_said(view, truths):
    view.prompt_choice.value = PROMPTS["second"]
    assert view.prompt_text.value == PROMPTS["second"] == view.calls[-1].prompt
    assert view.generation.prompt_ids == truths[PROMPTS["second"]][: len(view.generation.prompt_ids)]
    view.prompt_text.value = "how are you"
    assert view.calls[-1].prompt == "how are you" and len(view.calls) == 3
    last_step(view)
    before = shown_tokens(view)
    assert before == expected_tokens(view.generation, view.step.value)
    view.prompt_text.value = "   "
    assert view.error and "empty" in html.unescape(view.status.value)
    assert shown_tokens(view) == before  # the last figures stay


def test_default_generate_uses_the_tier_factory_and_stays_lossless(lm, truths):
    prompt = PROMPTS["first"]
    made = []

    def factory(tier):
        made.append(tier)
        return OracleTier(truths[prompt], VOCAB, seed=3, tier=tier)

    view = viz.StepThrough(lm, [prompt], tier_factory=factory, tiers=["context", "statistics"], max_new_tokens=MAX_NEW)
    assert made == [C, S] and view.order.value == (C, S, R, M) and not view.tier_boxes[M].value
    gen = view.generation
    plain = truths[prompt][len(gen.prompt_ids) :]
    assert gen.tokens == plain[: len(gen.tokens)] and len(gen.tokens) == len(plain)
    assert gen.tier_order == [C, S]
    assert gen.pieces and len(gen.pieces) == len(gen.tokens)  # hdlib.generate gives each token's text


def test_a_tier_that_cannot_be_made_is_said_not_raised(lm):
    def factory(tier):
        raise HDError(f"no {tier.name} database here")

    view = viz.StepThrough(lm, ["how are you"], tier_factory=factory, tiers=["model"], max_new_tokens=4)
    assert view.generation is None and "no model database here" in view.status.value
    view.step.value = 0  # nothing to draw, nothing raised
    view.tier_boxes[M].value = False  # plain decoding needs no tier
    assert view.generation is not None and view.generation.mat == 1.0 and view.error is None
    last_step(view)
    assert colour_of_points(view.tokens_fig.figure) == [T.color] * len(view.generation.tokens)


def test_step_mechanics_follow_the_slider(lm, truths):
    prompt = PROMPTS["first"]
    tiers = [OracleTier(truths[prompt], VOCAB, seed=1, tier=t) for t in (C, M)]
    gen = hdlib.generate(lm, prompt, tiers=tiers, max_new_tokens=MAX_NEW, budget=8)
    mech = viz.StepMechanics(gen, past_shown=3)
    for k in (0, len(gen.steps) - 1):
        mech.step.value = k
        step = gen.steps[k]
        n = len(step.tree)
        assert np.array(mech.mask_fig.figure.data[0].z).shape == (n, 3 + n)
        before = list(mech.cache_fig.figure.data[0].z[0])
        assert sum(before[3:]) == len(step.accepted_nodes)
        assert [int(p) for p in mech.positions_fig.figure.data[0].text[1]] == [
            step.context_len - 1 + d for d in step.tree.depths
        ]


def test_descriptions_longer_than_the_default_width_get_room(view):
    """ipywidgets cuts a description past its default width (about 8 characters): "temperat\u2026"."""

    def walk(w):
        yield w
        for child in getattr(w, "children", ()):
            yield from walk(child)

    boxes = list(view.tier_boxes.values())  # a checkbox's description is beside it, never cut
    long = [w for w in walk(view.widget) if w not in boxes and len(getattr(w, "description", "")) > 8]
    assert view.temperature in long
    assert all(w.style.description_width == "initial" for w in long)


def test_prompt_choices_reads_the_project_prompt_set():
    choices = viz.prompt_choices()
    path = Path(hdlib.__file__).resolve().parents[1] / "data" / "prompts" / "prompts.jsonl"
    assert len(choices) == len(path.read_text().strip().splitlines())
    assert all(text.strip() for text in choices.values())


# The cost model and sampling at one node -----------------------------------------------------------


def test_cost_points_weigh_each_steps_drafts_with_the_profile():
    gen = hand_trace()  # steps drafting 5, 2 and 0 nodes; no engine time; 6 tokens in 3 steps
    linear = ForwardProfile(tuple(1.0 + 0.1 * k for k in range(64)), 0, "test")  # f(1 + k) = 1 + 0.1 k
    assert list(viz.break_even(linear, [0, 5, 10])) == pytest.approx([1.0, 1.5, 2.0])
    (point,) = viz.cost_points({"hd": gen}, linear)
    assert point.nodes == pytest.approx(7 / 3) and point.mat == 2.0
    assert point.break_even == pytest.approx((1.5 + 1.2 + 1.0) / 3)
    assert point.speedup_here == pytest.approx(2.0 / point.break_even)  # MAT x f(1) / mean f(1 + k)
    assert point.speedup_flat == pytest.approx(2.0)
    fig = viz.cost_figure(linear, [point])
    line = fig.data[0]
    assert list(line.y[:3]) == pytest.approx([1.0, 1.1, 1.2]) and (fig.data[2].x[0], fig.data[2].y[0]) == (
        point.nodes,
        2.0,
    )
    assert list(fig.data[3].y) == pytest.approx([point.speedup_here, point.speedup_flat])


def test_the_trials_and_outcome_figures_show_the_rule():
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    trials, final = node_trials(p, [1, 0])
    fig = viz.trials_figure(p, trials, final, label=lambda t: f"t{t}")
    assert len(fig.data) == 4  # the distribution, two trials, the final draw
    assert "accept with p = 0.30" in fig.layout.annotations[1].text
    assert list(fig.data[3].y) == pytest.approx([0.0, 0.0, 1.0])  # t0, t1 rejected: only t2 is left
    runs = {
        "HD": sampler_outcomes(p, [1, 0], 2000, seed=3, rule="rejection"),
        "broken": sampler_outcomes(p, [1, 0], 2000, rule=accept_every_draft),
    }
    out = viz.outcomes_figure(p, runs)
    assert [t.name.split(":")[0] for t in out.data] == ["exact", "HD", "broken"]
    assert out.data[2].marker.color == "#D55E00" and out.data[1].marker.color != "#D55E00"  # the broken rule fails


def test_the_tree_marks_each_rejection_with_the_token_emitted_there():
    step = hand_trace().steps[0]  # accepted 0 -> 1 -> 2, then the bonus token 9
    record = dataclasses.replace(
        step,
        choices=(3, 3, 3, 0, 0, 0),  # as when sampling: the most likely token is not the one drawn
        choice_probs=(0.9, 0.8, 0.7, 0.5, 0.5, 0.5),
        accept_probs=(1.0, 1.0, 1.0, 0.0, 0.0, 0.0),
    )
    assert record.rejected() == [3, 4, 5]  # tried (their parents were reached) and refused
    fig = viz.draft_tree_figure(record, label=lambda t: f"w{t}")
    crossed = trace_of(fig, "rejected")
    assert [int(c[0]) for c in crossed.customdata] == [3, 4, 5] and list(crossed.text) == [
        "\u2192 w9",  # under the path's end: the bonus token
        "\u2192 w2",  # under node 1: the accepted draft after it
        "\u2192 w1",
    ]
    hover = {int(c[0]): h for t in fig.data if t.customdata for c, h in zip(t.customdata, t.hovertext)}
    assert (
        "rejected: the model took 2 'w2' after its parent" in hover[4] and "probability of acceptance: 0.00" in hover[4]
    )
    assert "the model's most likely token after it: 3 'w3' (p 0.70)" in hover[2] and "rejected" not in hover[2]
    assert len(trace_of(viz.draft_tree_figure(step), "rejected").x) == 0  # a record without them marks nothing


# The budget control, the tiers' rates, predict mode ------------------------------------------------


def test_the_budget_control_regenerates_with_that_budget_once_per_setting(view):
    assert view.budget_choice.options == ("4", "8", "16", "64", "auto") and view.budget_choice.value == "8"
    assert view.calls[-1].budget == 8
    first = view.generation
    for choice, budget in [("4", 4), ("64", 64), ("auto", None)]:
        view.budget_choice.value = choice
        assert view.calls[-1].budget == budget and view.generation is not first
        steps = view.generation.steps
        if budget is None:  # the value-ranked tree: each step sized by its estimates
            assert all(s.estimates is not None for s in steps)
        else:
            assert all(s.estimates is None and s.tree.n_drafted <= budget for s in steps)
            assert max(s.budget for s in steps) == budget
    assert len(view.calls) == 4
    view.budget_choice.value = "8"  # back to a cached setting
    assert len(view.calls) == 4 and view.generation is first
    with pytest.raises(HDError, match="budget"):
        viz.Settings("hello", budget=0)


def test_tier_rates_count_every_tier_that_drafted_a_node():
    rates = {r.tier: r for r in viz.generation.tier_rates(hand_trace())}
    # Step 0: C drafts nodes 1-3, M nodes 1 (with C) and 4, S node 5; 1 and 2 accepted. Step 1: M 6, 8; 6 accepted.
    assert set(rates) == {C, M}  # the generation's tiers (S is not among them)
    assert (rates[C].drafted, rates[C].accepted, rates[C].stats.credited) == (3, 2, 2)
    assert (rates[M].drafted, rates[M].accepted, rates[M].stats.credited) == (4, 2, 1)
    assert rates[M].rate == 0.5
    lines = viz.generation.tier_stats_table(hand_trace()).splitlines()
    assert lines[0].split() == ["tier", "asked", "drafted", "accepted", "rate", "credited"]
    assert lines[1].split() == ["context", "0", "3", "2", "67%", "2"]
    assert lines[2].split() == ["model", "0", "4", "2", "50%", "1"]


def test_the_step_through_shows_each_tiers_rates(view):
    gen = view.generation
    for r in viz.generation.tier_rates(gen):
        proposers = [s.tree.proposers[i] for s in gen.steps for i in range(1, len(s.tree))]
        drafted = sum(any(t is r.tier for t, _ in p) for p in proposers)
        accepted = sum(
            r.tier in s.tree.proposing_tiers(node)
            for s in gen.steps
            for node, tier in zip(s.accepted_nodes[1:], s.tiers)
            if tier is not T
        )
        assert (r.drafted, r.accepted) == (drafted, accepted) and drafted > 0
        assert r.accepted >= r.stats.credited and f"{r.tier.name}</td>" in view.tier_table.value
    view.tier_boxes[M].value = False
    assert "model</td>" not in view.tier_table.value  # the table follows the generation


def test_it_shows_in_its_own_colour_in_step_through(lm):
    view = viz.StepThrough(lm, {"p": PROMPT}, tiers=["C", Echo()], max_new_tokens=24, budget=8)
    # The given tiers in order, ticked, then hdlib's others, unticked.
    offered = ["context", "echo", "recycled", "model", "statistics"]
    assert [box.description for box in view.tier_boxes.values()] == offered
    assert [t for t, box in view.tier_boxes.items() if box.value] == [C, ECHO]
    gen = view.generation
    assert gen.tier_order == [C, ECHO] and gen.tier_counts[ECHO] > 0
    view.step.value = view.step.max
    (echo_tokens,) = [t for t in view.tokens_fig.figure.data if t.name == "echo"]
    assert echo_tokens.textfont.color == ECHO.color and len(echo_tokens.x) == gen.tier_counts[ECHO]
    drafted = []
    for k in range(len(gen.steps)):
        view.step.value = k
        (echo_nodes,) = [t for t in view.tree_fig.figure.data if t.name == "echo"]
        assert echo_nodes.marker.color == ECHO.color
        drafted += list(echo_nodes.customdata or ())
    assert drafted  # it drafted, step after step
    assert "echo" in view.status.value and ECHO.color in view.status.value
    view.tier_boxes[ECHO].value = False
    assert view.generation.tier_order == [C] and "echo" not in [t.name for t in view.tokens_fig.figure.data]


def accepted_prefix(path: list[int], accepted: tuple[int, ...]) -> int:
    """Brute force: drafts of `path` (root first) that are accepted nodes."""
    return sum(node in accepted for node in path[1:])


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_round_scores_the_accepted_drafts_and_the_tier_that_drafted_most_of_them(lm, truths, temperature):
    prompt = PROMPTS["first"]
    tiers = [OracleTier(truths[prompt], VOCAB, seed=2, tier=t) for t in (C, M)]
    gen = hdlib.generate(lm, prompt, tiers=tiers, max_new_tokens=MAX_NEW, budget=16, temperature=temperature, seed=4)
    seen = set()
    for step in gen.steps:
        outcome = viz.Outcome.of(step)
        drafts = [t.name for t in step.tiers if t != BONUS]  # the emitted tokens but the bonus
        assert outcome.accepted == len(step.accepted_nodes) - 1 == len(drafts)
        if drafts:
            counts = {n: drafts.count(n) for n in drafts}
            assert counts[outcome.tier] == max(counts.values())
            assert outcome.tier == next(n for n in drafts if counts[n] == max(counts.values()))  # a tie: the first
        else:
            assert outcome.tier == viz.game.NONE
        seen.add(outcome.tier)
        other = next(t for t in viz.game.tier_options(gen) if t != outcome.tier)
        for accepted, tier, points in [(outcome.accepted, outcome.tier, 2), (outcome.accepted + 1, outcome.tier, 1),
                                       (outcome.accepted, other, 1), (outcome.accepted + 1, other, 0)]:  # fmt: skip
            assert viz.Round(step.index, accepted, tier, outcome).points == points
    assert (len(seen) > 1 or temperature > 0) and viz.game.tier_options(gen) == ["none", "context", "model"]
    guesses = [(s.index, s.index % 3, "context") for s in gen.steps]
    expected = sum((a == viz.Outcome.of(gen.steps[i]).accepted) + (t == viz.Outcome.of(gen.steps[i]).tier)
                   for i, a, t in guesses)  # fmt: skip
    assert viz.game.score(gen, guesses) == expected
    game = viz.Game([0, 1])
    game.play(gen.steps[0], 0, "none")
    with pytest.raises(HDError, match="one guess per step"):
        game.play(gen.steps[0], 1, "none")
    assert game.next_step == 1 and game.summary.startswith(f"score: {game.points} of 2 points after 1 step")


def drawn_verdict(fig) -> tuple[int, int, int]:
    """Points of the accepted path's edges, crosses and bonus token drawn in a tree figure."""
    return tuple(len(trace_of(fig, name).x or ()) for name in ("accepted path", "rejected", "bonus"))


def drawn_outcome(view, index: int) -> dict[str, int]:
    """What the widget draws of step `index`: its tokens, its bar, its tree's verdict, the tier table."""
    tokens = sum(int(c[2]) == index for t in view.tokens_fig.figure.data for c in t.customdata or ())
    bars = sum(x == index for t in view.steps_fig.figure.data if t.type == "bar" for x in t.x or ())
    return {"tokens": tokens, "bars": bars, "verdict": sum(drawn_verdict(view.tree_fig.figure)),
            "tier table": len(view.tier_table.value)}  # fmt: skip


def test_the_predict_game_hides_each_step_until_revealed_and_keeps_the_score(view):
    gen = view.generation
    k = max(range(1, len(gen.steps)), key=lambda i: len(gen.steps[i].accepted_nodes))
    assert all(drawn_outcome(view, view.step.value).values()) and view.predict_box.layout.display == "none"
    game = view.play_game([k, k - 1, 0])  # a teacher's sequence
    assert view.step.value == k and view.predict.value and view.predict_box.layout.display != "none"
    assert drawn_outcome(view, k) == {"tokens": 0, "bars": 0, "verdict": 0, "tier table": 0}
    assert all(drawn_outcome(view, later)["tokens"] == 0 for later in range(k, len(gen.steps)))  # nor later steps
    assert "MAT" not in view.status.value and "guess, then reveal" in view.score.value
    assert list(view.guess_tier.options) == viz.game.tier_options(gen)
    truth = viz.Outcome.of(gen.steps[k])
    view.guess_accepted.value, view.guess_tier.value = truth.accepted, truth.tier
    assert drawn_outcome(view, k)["verdict"] == 0  # a guess reveals nothing
    view.reveal.click()
    shown = drawn_outcome(view, k)
    assert shown["tokens"] == len(gen.steps[k].tokens) and shown["bars"] > 0 and shown["verdict"] > 0
    assert "2 of 2 points" in view.score.value and view.reveal.disabled and view.guess_accepted.disabled
    view.next_step.click()  # the sequence's next step: hidden again
    assert view.step.value == k - 1 and drawn_outcome(view, k - 1)["verdict"] == 0 and not view.reveal.disabled
    wrong = viz.Outcome.of(gen.steps[k - 1])
    view.guess_accepted.value = wrong.accepted + 1
    view.guess_tier.value = next(t for t in view.guess_tier.options if t != wrong.tier)
    view.reveal.click()
    assert "0 of 2 points" in view.score.value and "score: 2 of 4 points after 2 steps" in view.score.value
    guesses = [(r.step, r.accepted, r.tier) for r in game.rounds]
    assert game.points == viz.game.score(gen, guesses) == 2  # the engine's count, computed afresh
    view.step.value = k  # a played step comes back revealed, its round's message with it
    assert drawn_outcome(view, k)["verdict"] > 0 and "2 of 2 points" in view.score.value
    view.predict.value = False  # out of the game: everything drawn again
    assert all(drawn_outcome(view, k).values()) and "MAT" in view.status.value
    assert len(view.calls) == 1  # playing never generates
    with pytest.raises(HDError, match="must be among"):
        view.play_game([len(gen.steps)])


def test_the_tree_names_the_token_drawn_at_each_rejection_when_sampling(lm, truths):
    """At temperature > 0 the model's most likely token is not the one it drew: the label is the drawn one."""
    prompt = PROMPTS["first"]
    tiers = [OracleTier(truths[prompt], VOCAB, seed=5, tier=t) for t in (C, M)]
    gen = hdlib.generate(lm, prompt, tiers=tiers, max_new_tokens=48, budget=16, temperature=1.0, seed=3)
    checked = not_the_argmax = 0
    for step in gen.steps:
        fig = viz.draft_tree_figure(step, label=lambda t: f"w{t}")
        crossed = {int(c[0]): int(c[1]) for c in trace_of(fig, "rejected").customdata}
        assert set(crossed) == set(step.rejected())
        last = step.accepted_nodes[-1]
        if len(step.tokens) < len(step.accepted_nodes):
            continue  # an end token cut the step: no token was emitted after the path's end
        emitted = step.tokens[len(step.accepted_nodes) - 1]  # the bonus: the model's draw after the path
        for node in step.tree.children(last):
            assert crossed[node] == emitted
            checked += 1
            not_the_argmax += emitted != step.choices[last]
    assert checked > 10 and not_the_argmax > 0  # labels the argmax would have got wrong


def test_the_step_through_passes_its_prior_to_every_auto_budget_generation(lm, tmp_path, monkeypatch):
    import hdlib.decoding
    from hdlib.engine.forward_time import flat_profile
    from hdlib.engine.value import AcceptancePrior

    monkeypatch.setenv("HDLIB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(hdlib.decoding, "load_or_measure", lambda model, *args, **kwargs: flat_profile())
    view = viz.StepThrough(lm, {"p": PROMPT}, tiers=["C"], max_new_tokens=8, budget=None, prior="fresh")
    assert (view.generation.prior_source, view.generation.prior_digest) == ("fresh", AcceptancePrior.fresh().digest())
    view.budget_choice.value = "4"  # a fixed budget: no prior
    assert view.generation.prior_source == ""
    assert not (tmp_path / "cache" / "acceptance").exists()
