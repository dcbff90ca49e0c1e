"""hdlib.viz.tree: a step's draft tree, its accepted path, bonus token and rejections, on hand-made traces
and on a tiny model sampling."""

from __future__ import annotations

import dataclasses

from support.hand_traces import first_tree, hand_trace, times, trace_of
from support.oracle import OracleTier
from support.tiny import VOCAB
from support.tiny_prompts import PROMPTS

import hdlib
from hdlib import viz
from hdlib.engine.trace import Step
from hdlib.engine.tree import DraftTree
from hdlib.tiers import BONUS, Tier

C, R, M, S, T = Tier.CONTEXT, Tier.RECYCLED, Tier.MODEL, Tier.STATISTICS, BONUS


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
