"""hdlib.viz.generation: the answer's tokens by tier, the tokens per tier per step, runs over time and the
tiers' rates, on small hand-made traces."""

from __future__ import annotations

import pytest
from support.hand_traces import first_tree, hand_trace, times, trace_of

from hdlib import viz
from hdlib.engine.trace import Generation, Step
from hdlib.engine.tree import DraftTree
from hdlib.tiers import BONUS, Tier

C, R, M, S, T = Tier.CONTEXT, Tier.RECYCLED, Tier.MODEL, Tier.STATISTICS, BONUS


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


def test_token_figure_is_as_high_as_the_lines_shown():
    gen = hand_trace()  # "a b" on line 0; "\n" ends it; "c d e" on line 1
    first, full = viz.token_figure(gen, step=0), viz.token_figure(gen)
    assert first.layout.height == 22 * 1 + 70 and full.layout.height == 22 * 2 + 70
    for fig, lines in ((first, 1), (full, 2)):  # 22 px a line at any height, line 0 at the same place
        low, high = fig.layout.yaxis.range
        assert high - low == lines and high == 0.5


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
