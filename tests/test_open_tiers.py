"""A tier written here, in under 15 lines, is as first-class as hdlib's own: it drafts, is shown in
its own colour in StepThrough, tier_drafts and the CLI summary, and is a letter in bench orders."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from tiny import save_tiny

import hdlib
from hdlib import viz
from hdlib.bench import Method
from hdlib.cli import main
from hdlib.databases import find_tier, known_tiers, make_tier, parse_tiers, register_tier, unregister_tier
from hdlib.drafter import Drafter
from hdlib.errors import HDError
from hdlib.presentation import ansi
from hdlib.tiers import BONUS, ContextTier, DraftRow, DraftTier, Tier

C = Tier.CONTEXT


class Echo(DraftTier):
    """Guesses that the text repeats itself: the last token again, and the last three tokens."""

    tier = Tier("echo", "X", "#999933")

    def lookup(self, context, budget):
        return [tuple(context[-1:]) * 4, tuple(context[-3:])]


ECHO = Echo.tier
PROMPT = "how are you"  # the tiny model answers it with a run of one token: echo drafts get accepted


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("tiny") / "m")


@pytest.fixture(scope="module")
def lm(folder):
    return hdlib.load_model(str(folder), device="cpu")


@pytest.fixture
def registered():
    register_tier(Echo)
    yield ECHO
    unregister_tier(ECHO)


def test_a_tier_of_ones_own_drafts_and_its_tokens_are_counted_under_its_name(lm):
    gen = hdlib.generate(lm, PROMPT, tiers=["C", Echo()], max_new_tokens=24, budget=8)
    plain = hdlib.generate(lm, PROMPT, tiers=(), max_new_tokens=24)
    assert gen.tokens == plain.tokens  # lossless with any tier
    assert gen.tier_order == [C, ECHO] and gen.tier_counts[ECHO] > 0
    assert gen.summary()["tiers"] == {
        "context": gen.tier_counts[C],
        "echo": gen.tier_counts[ECHO],
        "bonus": gen.tier_counts[BONUS],
    }
    assert f"color:{ECHO.color}" in gen._repr_html_()


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


def test_it_is_a_name_and_a_letter_once_registered(registered, lm):
    assert find_tier("x") == ECHO == find_tier("echo") and ECHO in known_tiers()
    assert parse_tiers("C,X") == [C, ECHO]
    assert isinstance(make_tier("echo", lm), Echo)
    assert Method.parse("hd:CX@8").tiers == (C, ECHO)
    unregister_tier(ECHO)
    with pytest.raises(
        HDError,
        match="unknown tier 'X': choose from context \\(C\\), recycled \\(R\\), model \\(M\\), statistics \\(S\\)",
    ):
        parse_tiers("C,X")


def test_it_shows_in_the_cli_summary_in_its_colour(registered, folder, capsys):
    argv = ["generate", "--prompt", PROMPT, "--model", str(folder), "--tiers", "C,X", "--budget", "8"]
    assert main([*argv, "--max-new-tokens", "24", "--color", "always"]) == 0
    out = capsys.readouterr().out
    (counts,) = [line for line in out.splitlines() if line.startswith("accepted tokens by tier:")]
    assert "context " in counts and "echo " in counts and "bonus " in counts and "echo 0" not in counts
    assert f"{ansi(ECHO.color)}echo" in out  # the legend, in the tier's colour
    assert "HD (context,echo)" in out and "output identical" in out


def test_it_is_a_letter_in_bench_orders(registered, folder, tmp_path, capsys):
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question_id": 1, "category": "qa", "turns": [PROMPT]}) + "\n")
    out, report = tmp_path / "r.json", tmp_path / "r.html"
    argv = ["bench", "--questions", str(questions), "--model", str(folder), "--methods", "hd:CX@8"]
    assert main([*argv, "--max-new-tokens", "24", "--out", str(out), "--html", str(report)]) == 0
    capsys.readouterr()
    results = json.loads(out.read_text())
    overall = results["methods"]["hd:CX@8"]["overall"]
    assert overall["identical_frac"] == 1.0 and overall["tier_share"]["echo"] > 0
    from hdlib.viz.bench import tier_share_figure

    bars = {t.name: t for t in tier_share_figure(results).data}
    assert bars["echo"].marker.color == ECHO.color


def test_clashing_or_malformed_tiers_are_refused():
    with pytest.raises(HDError, match="clashes with the known tier 'context'"):
        register_tier(Tier("copy", "C", "#000000"), lambda lm: Echo())
    with pytest.raises(HDError, match="no two share a name or a letter"):
        Drafter([Echo(), type("Twin", (Echo,), {"tier": Tier("twin", "X", "#111111")})()])
    with pytest.raises(HDError, match="each tier may appear once"):
        parse_tiers(["C", Echo(), "context"])
    for bad in [("Echo", "X", "#999933"), ("echo", "xy", "#999933"), ("echo", "X", "orange"), ("a,b", "X", "#999933")]:
        with pytest.raises(HDError):
            Tier(*bad)
    with pytest.raises(HDError, match="has no `tier`"):
        Drafter([type("Nameless", (DraftTier,), {"lookup": lambda self, c, b: []})()])


def test_installed_packages_declare_tiers_by_entry_point(tmp_path, monkeypatch):
    (tmp_path / "mytier.py").write_text(
        textwrap.dedent(
            """
            from hdlib import DraftTier, Tier

            class Mirror(DraftTier):
                tier = Tier("mirror", "Y", "#56B4E9")

                def lookup(self, context, budget):
                    return [tuple(reversed(context[-budget:]))]
            """
        )
    )
    info = tmp_path / "mytier-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mytier\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[hdlib.tiers]\nmirror = mytier:Mirror\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert find_tier("Y") == Tier("mirror", "Y", "#56B4E9")
        assert type(make_tier("mirror")).__name__ == "Mirror" and Method.parse("hd:YC").tiers[1] == C
    finally:
        sys.modules.pop("mytier", None)
