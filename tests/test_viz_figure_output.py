"""hdlib.viz.figure_output: a figure among widgets, shown as an Output's one output."""

from __future__ import annotations

import json

from support.hand_traces import times

from hdlib import viz
from hdlib.engine.trace import Generation, Step
from hdlib.engine.tree import DraftTree
from hdlib.tiers import BONUS, Tier

C, R, M, S, T = Tier.CONTEXT, Tier.RECYCLED, Tier.MODEL, Tier.STATISTICS, BONUS


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
        drawn = shown["data"][viz.figure_output.PLOTLY_MIME]
        assert out.figure is fig and shown["output_type"] == "display_data"
        assert (
            drawn["data"] == json.loads(fig.to_json())["data"]
            and drawn["layout"] == json.loads(fig.to_json())["layout"]
        )
        assert all("marker" not in t for t in drawn["data"] if t.get("mode") == "lines")  # nothing undefined
        assert shown["data"]["text/plain"].startswith("<plotly figure: ")
