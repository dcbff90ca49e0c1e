"""hdlib.viz.cost: each step's drafts weighed with a forward-time profile, on a hand-made trace."""

from __future__ import annotations

import pytest
from support.hand_traces import hand_trace

from hdlib import viz
from hdlib.engine.forward_time import ForwardProfile


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
