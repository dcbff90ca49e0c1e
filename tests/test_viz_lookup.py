"""hdlib.viz.lookup: what each tier drafts for a context, with counts, and how long each tier's lookup
takes; a tier of one's own (tests/support/echo.py) among them."""

from __future__ import annotations

import numpy as np
from support.echo import ECHO, Echo

from hdlib import viz
from hdlib.engine.budget import FixedBudget
from hdlib.engine.drafter import Drafter
from hdlib.tiers import BONUS, ContextSettings, ContextTier, DraftRow, Tier
from hdlib.tiers.context import continuation
from hdlib.tiers.model import ModelTier
from hdlib.tiers.statistics import StatisticsSettings, StatisticsTier

C, R, M, S, T = Tier.CONTEXT, Tier.RECYCLED, Tier.MODEL, Tier.STATISTICS, BONUS


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
    same, _, _ = drafter.draft(context, max_depth=6, gate=FixedBudget(6).gate)
    assert (tree.tokens, tree.tiers) == (same.tokens, same.tiers)
    assert M in tree.tiers


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
        def propose(self, context, budget):
            calls.append((list(self._tokens), list(context), budget))
            return super().propose(context, budget)

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
