"""Bench methods by name (`hdlib.bench.methods`): `hd:ORDER`, a fixed budget `@N`, the constant switches
and the tiers a name may hold, a registered one included."""

from __future__ import annotations

import json

import pytest
from support.echo import ECHO, PROMPT

import hdlib.bench.run
from hdlib.bench import ALL_ORDERS, Method, parse_methods, run_benchmark
from hdlib.bench.specbench import Question
from hdlib.cli import main
from hdlib.errors import HDError
from hdlib.tiers import ContextSettings, ContextTier, Tier


def test_method_names():
    assert Method.parse("ar").tiers == ()
    assert Method.parse("hf").transformers and Method.parse("hf").prompt_lookup is None
    assert Method.parse("hf-pld").prompt_lookup == 10
    assert Method.parse("hd:SC").tiers == (Tier.STATISTICS, Tier.CONTEXT)
    names = [m.name for m in parse_methods(f"hd:C,{ALL_ORDERS},hf")]
    assert names[0] == "ar" and names[1] == "hd:C" and names[-1] == "hf"
    orders = [n for n in names if n.startswith("hd:")]
    assert len(orders) == 15 and len(set(orders)) == 15
    assert {len(n) - 3 for n in orders} == {1, 2, 3} and "hd:SMC" in orders and "hd:MS" in orders
    for bad, message in [
        ("pld", "unknown method"),
        ("hd:CX", "unknown tier 'X'"),
        ("hf:C", "unknown method"),
        ("hd:CC", "once"),
    ]:
        with pytest.raises(HDError, match=message):
            parse_methods(["hf", bad])
    for bad in ("hd:", "hd:X", "hd:CC", "pld"):
        with pytest.raises(HDError):
            Method.parse(bad)


def test_a_method_named_twice_is_an_aa_arm_of_its_own_and_ar_named_is_the_leading_one():
    methods = parse_methods("hd,suffix,hd:C@8,hd,hd:C@8,ar")
    assert [m.name for m in methods] == ["ar", "hd", "suffix", "hd:C@8", "hd#2", "hd:C@8#2"]
    arm = methods[4]
    assert arm.tiers == methods[1].tiers and arm.budget is None and methods[5].budget == 8
    assert [m.name for m in parse_methods("ar,ar,hd")] == ["ar", "ar#2", "hd"]  # plain decoding's A/A
    assert Method.parse("vllm-hd#2").serving and Method.parse("hd@16#2").budget == 16
    for bad in ("hd#1", "hd#0", "hd#x", "#2"):
        with pytest.raises(HDError, match="naming the method again"):
            Method.parse(bad)


def test_an_hd_method_may_end_in_a_fixed_budget():
    cms = Method.parse("hd:CMS@64")
    assert cms.name == "hd:CMS@64" and cms.budget == 64  # the name keeps @N: results are keyed by it
    assert cms.tiers == (Tier.CONTEXT, Tier.MODEL, Tier.STATISTICS)
    assert Method.parse("hd@16").tiers == Method.parse("hd").tiers and Method.parse("hd@16").budget == 16
    assert Method.parse("hd:C@0").budget == 0 and Method.parse("hd:C").budget is None
    assert Method.parse("ar").budget is None and Method.parse("hf-pld").budget is None

    methods = parse_methods(f"{ALL_ORDERS}@16")
    assert methods[0].name == "ar" and methods[0].budget is None
    orders = methods[1:]
    assert len(orders) == 15 and {m.budget for m in orders} == {16}
    assert orders[0].name == "hd:C@16" and orders[-1].name == "hd:SMC@16"
    assert [m.name.removesuffix("@16") for m in orders] == [m.name for m in parse_methods(ALL_ORDERS)[1:]]
    both = [m.name for m in parse_methods(["hd:C", "hd:C@8"])]
    assert both == ["ar", "hd:C", "hd:C@8"]  # the same order at another budget is another method

    for bad, message in [
        ("ar@8", "'ar@8': only the methods hdlib verifies take a fixed budget @N"),
        ("hf@8", "not hf$"),
        ("hf-pld@10", "not hf-pld$"),
        ("hd:C@", "'hd:C@': the budget after @ must be a non-negative integer"),
        ("hd:C@x", "'hd:C@x': the budget after @ must be"),
        ("hd:C@-1", "'hd:C@-1': the budget after @ must be"),
        ("hd:C@8@8", "'hd:C@8@8': the budget after @ must be"),
        ("hd:C@08", "non-negative integer"),
        ("hd@1.5", "non-negative integer"),
        (f"{ALL_ORDERS}@x", f"'{ALL_ORDERS}@x': the budget after @ must be"),
        ("hd:CX@8", "unknown tier 'X'"),
        ("pld@8", "unknown method 'pld@8'.*may end in @N"),
    ]:
        with pytest.raises(HDError, match=message):
            parse_methods(["hf", bad])


def test_a_constant_switch_sets_that_constant_and_reaches_the_engine(lm, monkeypatch):
    """`+candidates=N` and `+share-window=N` (for re-checking hdlib's chosen constants) set the
    value-ranked tree's candidates per tier and the context tier's share window, and nothing else."""
    assert Method.parse("hd").candidates is None and Method.parse("hd+candidates=2").candidates == 2
    wide = Method.parse("hd:CM+share-window=128")
    assert isinstance(wide.tiers[0], ContextTier) and wide.tiers[0].settings.share_window == 128
    assert wide.tiers[0].settings.window is None and wide.tiers[1:] == (Tier.MODEL,)
    both = Method.parse("hd+window+share-window=8").tiers[0]
    assert both.settings.window is not None and both.settings.share_window == 8
    for bad, message in [
        ("hd+candidates=0", "positive integer"),
        ("hd+candidates=2+candidates=3", "once"),
        ("hd+candidates=8@16", "fixed budget"),
        ("hd:MS+share-window=8", "has none"),
        ("suffix+candidates=8", "go after hd or hd:ORDER"),
        ("hd+width=3", "unknown switch"),
    ]:
        with pytest.raises(HDError, match=message):
            Method.parse(bad)

    drafted: dict[int | None, int] = {}  # candidates asked for -> the most draft tokens of one step
    real = hdlib.bench.run.generate

    def spy(*args, candidates=None, **kwargs):
        g = real(*args, candidates=candidates, **kwargs)
        drafted[candidates] = max([drafted.get(candidates, 0), *(s.tree.n_drafted for s in g.steps)])
        return g

    monkeypatch.setattr(hdlib.bench.run, "generate", spy)
    questions = [Question(1, "qa", ("hello how hello how hello how",))]
    r = run_benchmark(lm, questions, ["hd:C", "hd:C+candidates=1"], max_new_tokens=64)
    assert drafted[1] == 1 < drafted[None]  # one tier, one candidate: one draft token a step at most
    assert r.methods["hd:C+candidates=1"].overall.identical_frac == 1.0


def test_the_share_window_is_the_occurrences_a_context_share_is_counted_over():
    text = [1, 2, 3] * 3 + [1, 2, 4] + [1, 2]  # after "1 2": 3 three times, then 4
    shares = {}
    for window in (2, 32):
        tier = ContextTier(ContextSettings(min_key=2, max_key=2, share_window=window))
        tier.begin(text)
        shares[window] = {p.tokens[0]: p.confidence[0] for p in tier.propose(text, 64)}
    assert shares[2] == {4: 1.0, 3: 0.0}  # the last occurrence with a continuation alone
    assert shares[32] == {4: 0.25, 3: 0.75}
    with pytest.raises(HDError, match="share_window"):
        ContextSettings(share_window=1)


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
