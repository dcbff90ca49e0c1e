"""The tier registry (`hdlib.databases.registry`): a tier of one's own is a name and a letter once
registered, and installed packages declare theirs by entry point; clashing or malformed tiers are
refused; a model with no model database drafts nothing and says once how to build it (issue 11)."""

from __future__ import annotations

import sys
import textwrap

import pytest
from support.echo import ECHO, Echo
from support.greedy import PROMPT, model, plain
from support.tiny import save_tiny

import hdlib
from hdlib.bench import Method
from hdlib.databases.registry import find_tier, known_tiers, make_tier, parse_tiers, register_tier, unregister_tier
from hdlib.engine.budget import FixedBudget
from hdlib.engine.drafter import Drafter
from hdlib.engine.loop import DecodeSettings, run
from hdlib.errors import HDError
from hdlib.tiers import DraftTier, RecycledTier, Tier

C = Tier.CONTEXT


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    return hdlib.load_model(str(save_tiny(tmp_path_factory.mktemp("tiny") / "m")), device="cpu")


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


def test_clashing_or_malformed_tiers_are_refused():
    with pytest.raises(HDError, match="clashes with the known tier 'context'"):
        register_tier(Tier("copy", "C", "#000000"), lambda lm: Echo())
    with pytest.raises(HDError, match="no two share a name or a letter"):
        Drafter([Echo(), type("Twin", (Echo,), {"tier": Tier("twin", "X", "#111111")})()])
    with pytest.raises(HDError, match="each tier may appear once"):
        parse_tiers(["C", Echo(), "context"])
    for bad in [("Echo", "X", "#332288"), ("echo", "xy", "#999933"), ("echo", "X", "orange"), ("a,b", "X", "#999933")]:
        with pytest.raises(HDError):
            Tier(*bad)
    with pytest.raises(HDError, match="has no `tier`"):
        Drafter([type("Nameless", (DraftTier,), {"propose": lambda self, c, b: []})()])


def test_installed_packages_declare_tiers_by_entry_point(tmp_path, monkeypatch):
    (tmp_path / "mytier.py").write_text(
        textwrap.dedent(
            """
            from hdlib import DraftTier, Tier

            class Mirror(DraftTier):
                tier = Tier("mirror", "Y", "#56B4E9")

                def propose(self, context, budget):
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


def test_a_missing_model_database_drafts_nothing_and_says_once_how_to_build_it(capsys, tmp_path, monkeypatch):
    from types import SimpleNamespace

    from hdlib.databases.registry import load_tier

    monkeypatch.setenv("HDLIB_CACHE", str(tmp_path))  # no database built for anything here
    lm = SimpleNamespace(name="/some/folder", fingerprint="abc", databases={})
    tier = load_tier(Tier.MODEL, lm)
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and "no model database for '/some/folder'" in said
    assert "build the database with: hdlib build-db model --model /some/folder" in said
    assert load_tier(Tier.MODEL, lm) is tier and capsys.readouterr().err == ""  # opened once, said once
    # The model's recycled guesses are a tier of their own: with them, the answer is plain greedy's.
    want = plain(model("llama"), 40)
    drafter = Drafter([tier, RecycledTier()])
    got = run(model("llama"), PROMPT, drafter, DecodeSettings(max_new_tokens=40), (), FixedBudget(8))
    assert got.tokens == want
    assert all(s.tree.tiers[n] == Tier.RECYCLED for s in got.steps for n in range(1, len(s.tree)))
    assert any(s.n_accepted_drafts for s in got.steps)
