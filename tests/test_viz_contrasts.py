"""The paper's HD beside hdlib's (hdlib.viz.contrasts): the table's claims, checked against the code."""

from __future__ import annotations

from hdlib.bench.paper_drafter import PAPER_MODEL, PAPER_STATISTICS, PaperSettings
from hdlib.databases.modeldb import DEFAULT_N, DEFAULT_TOP_K
from hdlib.tiers import DEFAULT_TIERS, PAPER_TIERS, ContextSettings, ModelSettings, StatisticsSettings, Tier
from hdlib.tiers.recycled import WIDTH
from hdlib.viz import contrasts


def test_the_contrast_table_has_a_row_for_each_way_the_two_differ():
    table = contrasts.contrast_table()
    aspects = [row[0] for row in table.rows]
    for aspect in ("drafts", "budget", "keys", "context store", "model database", "statistics",
                   "recycled guesses", "hierarchy", "the paper's way in hdlib"):  # fmt: skip
        assert aspect in aspects
    assert table.header == ("", "the paper's HD", "hdlib's HD", "in hdlib")
    assert all(len(row) == 4 and all(row) for row in table.rows)
    rows = {row[0]: row for row in table.rows}
    assert "7 drafts of 4" in rows["drafts"][1] and "trie" in rows["drafts"][2]
    assert "OASST1" in rows["model database"][1] and "ShareGPT" in rows["model database"][2]
    assert "UltraChat" in rows["statistics"][1] and "ShareGPT" in rows["statistics"][2]
    assert "hd-paper" in rows["the paper's way in hdlib"][1]


def test_the_paper_side_is_what_hd_paper_runs():
    s = PaperSettings()
    assert (s.max_drafts, s.draft_len, s.budget, s.per_key, s.trie, s.mend) == (7, 4, 28, 7, False, False)
    assert (PAPER_MODEL.max_key, PAPER_MODEL.min_key) == (1, 1)  # the newest token
    assert (PAPER_STATISTICS.max_key, PAPER_STATISTICS.min_key) == (2, 1)  # the newest two, else one
    assert PAPER_TIERS == (Tier.CONTEXT, Tier.MODEL, Tier.STATISTICS)


def test_the_hdlib_side_is_what_the_engine_does():
    c, m, s = ContextSettings(), ModelSettings(), StatisticsSettings()
    assert (c.max_key, c.min_key, c.per_key, c.draft_len, c.window) == (4, 2, 4, 10, None)
    assert (m.max_key, m.min_key, DEFAULT_N) == (None, 2, 5)  # None: n - 1 = 4 of a 5-gram
    assert (s.max_key, s.min_key) == (8, 1)
    assert DEFAULT_TIERS == (Tier.CONTEXT, Tier.RECYCLED, Tier.MODEL, Tier.STATISTICS)
    assert WIDTH == 8 and DEFAULT_TOP_K == 100_000
