"""The Spec-Bench harness: methods, metrics from raw records, resume, the report, `hdlib bench`.

Integration tests run on a tiny random model (tests/tiny.py) with methods that need no database:
ar, hf, hf-pld and hd:C (also with a fixed budget, hd:C@N). Everything else (figures, fairness, the
raw file) is checked on plain data.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest
from arctic import needs_arctic_inference
from echo import ECHO, PROMPT
from tiny import save_tiny

import hdlib
import hdlib.bench.run
import hdlib.models.cpu
import hdlib.models.loading
from hdlib.bench import (
    ALL_ORDERS,
    BenchResults,
    Method,
    QuestionRuns,
    Tally,
    Turn,
    compare_orders,
    fairness_line,
    identical_line,
    kendall,
    parse_methods,
    run_benchmark,
    spearman,
)
from hdlib.bench.log import ResultsLog, raw_path, run_settings
from hdlib.bench.specbench import Question, load_questions, per_task, split
from hdlib.cli import main
from hdlib.errors import HDError
from hdlib.tiers import BONUS, ContextSettings, ContextTier, Tier
from hdlib.tiers.peers import SuffixDecodingTier, TokenRecyclingTier

METHODS = ["hf", "hf-pld", "hd:C"]
METRIC_KEYS = {
    "speedup", "mat", "tokens_per_s", "draft_ms", "overhead_frac", "identical_frac", "tier_share", "intervals",
}  # fmt: skip
TOP_KEYS = {
    "machine", "model", "device", "dtype", "temperature", "prompt_format", "max_new_tokens", "questions", "methods",
    "order_seed", "prior", "comparisons",
}  # fmt: skip
ROWS = [
    {"question_id": 11, "category": "writing", "turns": ["hello world how are you", "how are you world"]},
    {"question_id": 12, "category": "rag", "turns": ["you are hello hello world world"]},
    {"question_id": 13, "category": "translation", "turns": ["world world how how are"]},
    {"question_id": 14, "category": "rag", "turns": ["hello how hello how hello how"]},
]


def write_questions(path, rows=ROWS):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("tiny") / "m")


@pytest.fixture(scope="module")
def lm(folder):
    return hdlib.models.loading.load_model(str(folder))


@pytest.fixture(scope="module")
def results(lm, tmp_path_factory):
    questions = load_questions(write_questions(tmp_path_factory.mktemp("q") / "q.jsonl"))
    return run_benchmark(lm, per_task(questions, None), METHODS, max_new_tokens=12)


@pytest.fixture
def no_model_load(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the input was checked")

    monkeypatch.setattr(hdlib.models.loading, "load_model", refuse)


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


def test_hds_proposer_in_vllm_takes_its_tier_order_in_its_name():
    from hdlib.bench.serving import TIERS_ENV, vllm_method

    assert Method.parse("vllm-hd:sc").serving and Method.parse("vllm-hd").serving
    assert vllm_method("vllm-hd:sc") == ("vllm-hd", {TIERS_ENV: "SC"})  # the engine starts with it
    assert vllm_method("vllm-suffix") == ("vllm-suffix", {}) and vllm_method("hd:SC") is None
    for bad, message in [("vllm-hd:CR", "C, M, S"), ("vllm-hd:CC", "each once"), ("vllm-hd:CS@8", "fixed budget")]:
        with pytest.raises(HDError, match=message):
            Method.parse(bad)


def test_hds_proposer_in_vllm_takes_its_drafts_cost_and_clock_in_its_name():
    from hdlib.bench.serving import vllm_method
    from hdlib.serving.proposer import CLOCK_ENV, COST_SCALE_ENV, TIERS_ENV

    assert vllm_method("vllm-hd+cost=0.5") == ("vllm-hd", {COST_SCALE_ENV: "0.5"})
    assert vllm_method("vllm-hd:SC+cost=2") == ("vllm-hd", {TIERS_ENV: "SC", COST_SCALE_ENV: "2.0"})
    assert vllm_method("vllm-hd+clock=0") == ("vllm-hd", {CLOCK_ENV: "0"})
    assert vllm_method("vllm-hd:CS+clock=1+cost=1.5") == (
        "vllm-hd", {TIERS_ENV: "CS", CLOCK_ENV: "1", COST_SCALE_ENV: "1.5"}
    )  # fmt: skip
    assert Method.parse("vllm-hd+cost=0").serving and Method.parse("vllm-hd+clock=0").serving
    assert vllm_method("hd+cost=1") is None
    for bad, message in [("vllm-hd+cost=-1", "at least 0"), ("vllm-hd+cost=x", "at least 0"),
                         ("vllm-hd+clock=2", "0 or 1"), ("vllm-hd+speed=1", "0 or 1"),
                         ("vllm-suffix+cost=1", "only vllm-hd"), ("vllm+clock=0", "only vllm-hd")]:  # fmt: skip
        with pytest.raises(HDError, match=message):
            vllm_method(bad)


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
    both = [m.name for m in parse_methods(["hd:C", "hd:C@8", "hd:C@8"])]
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


def test_a_fixed_budget_reaches_generate(lm, monkeypatch):
    steps: dict[int | None, list[tuple[int, int]]] = {}  # budget asked for -> (budget, drafted) of each step
    real = hdlib.bench.run.generate

    def spy(*args, budget=None, **kwargs):
        g = real(*args, budget=budget, **kwargs)
        steps.setdefault(budget, []).extend((s.budget, s.tree.n_drafted) for s in g.steps)
        return g

    monkeypatch.setattr(hdlib.bench.run, "generate", spy)
    questions = [Question(1, "qa", ("hello how hello how hello how",))]
    r = run_benchmark(lm, questions, ["hd:C@0", "hd:C@8"], max_new_tokens=64)
    assert set(steps) == {None, 0, 8}  # None: ar, whose empty drafter never drafts
    assert {k for k, _ in steps[0]} == {0} and sum(n for _, n in steps[0]) == 0
    assert {k for k, _ in steps[8]} == {8} and sum(n for _, n in steps[8]) > 0  # the model repeats itself
    methods = r.methods
    assert methods["hd:C@0"].overall.mat == 1.0 and methods["hd:C@0"].overall.tier_share == {"bonus": 1.0}
    assert methods["hd:C@8"].overall.identical_frac == 1.0 and methods["hd:C@8"].overall.mat >= 1.0


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


OWN = (TokenRecyclingTier, SuffixDecodingTier)


def test_the_fields_drafters_run_as_methods_each_with_a_table_of_its_own(lm, monkeypatch):
    """`recycling` alone and in an HD order, and `suffix`, verified by hdlib's engine: identical to
    `ar`, and no method drafts from the table another method filled answering the same question."""
    tables: dict[int | None, set[int]] = {}  # by budget (each method's differs): its recycling or suffix tables
    real = hdlib.bench.run.generate

    def spy(lm, prompt_ids, tiers, **kwargs):
        g = real(lm, prompt_ids, tiers, **kwargs)
        tables.setdefault(kwargs["budget"], set()).update(id(t) for t in tiers if isinstance(t, OWN))
        return g

    needs_arctic_inference()
    monkeypatch.setattr(hdlib.bench.run, "generate", spy)
    questions = [Question(1, "qa", ("hello how hello how hello how",)), Question(2, "qa", ("how are you",))]
    r = run_benchmark(lm, questions, ["recycling", "recycling@8", "hd:CT@16", "suffix"], max_new_tokens=48)
    for name in ("recycling", "recycling@8", "hd:CT@16", "suffix"):
        assert r.methods[name].overall.identical_frac == 1.0
    assert r.methods["recycling"].overall.tier_share.get("recycling", 0) > 0  # the model repeats itself
    assert {k: len(ids) for k, ids in tables.items()} == {None: 0, 80: 1, 8: 1, 16: 1, 24: 1}  # ar: none
    assert len(set.union(*tables.values())) == 4  # one table per method, kept across its questions


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


def test_bad_lines_are_reported_with_their_number_and_skipped(tmp_path):
    rows = [
        ROWS[0],
        "{not json",
        json.dumps({"question_id": "12", "category": "qa", "turns": ["x"]}),
        json.dumps({"question_id": 11, "category": "qa", "turns": ["again"]}),
        json.dumps({"question_id": 15, "category": "qa", "turns": "not a list"}),
        json.dumps({"question_id": 16, "category": "qa", "turns": ["  "]}),
        ROWS[1],
    ]
    path = write_questions(tmp_path / "q.jsonl", rows)
    reported: list[str] = []
    questions = load_questions(path, on_bad_line=reported.append)
    assert [q.question_id for q in questions] == [11, 12]
    assert [m.split(", line ")[1].split(":")[0] for m in reported] == ["2", "3", "4", "5", "6"]
    assert "repeats line 1" in reported[2] and "empty turn" in reported[4]
    with pytest.raises(HDError, match="line 2"):
        load_questions(path)  # without a reporter the first bad line stops the reading
    with pytest.raises(HDError, match="no valid question"):
        load_questions(write_questions(tmp_path / "bad.jsonl", rows[1:3]), on_bad_line=reported.append)


def test_results_have_the_specified_schema(results):
    assert BenchResults.from_json(json.loads(json.dumps(results.to_json()))) == results  # typed, and back
    results = results.to_json()
    assert set(results) == TOP_KEYS
    assert results["questions"] == 4 and results["temperature"] == 0.0 and results["max_new_tokens"] == 12
    assert list(results["methods"]) == ["ar", *METHODS]
    for per in results["methods"].values():
        assert set(per) == {"overall", "tasks"}
        assert list(per["tasks"]) == ["mt_bench", "translation", "rag"]  # Spec-Bench's task order
        for metrics in [per["overall"], *per["tasks"].values()]:
            assert set(metrics) == METRIC_KEYS | ({"tiers"} if "tiers" in metrics else set())
            assert all(isinstance(metrics[k], float) for k in METRIC_KEYS - {"tier_share", "intervals"})
            assert set(metrics["intervals"]) == {"speedup", "mat", "tokens_per_s"}
            for name, e in metrics["intervals"].items():
                assert e["low"] <= metrics[name] == e["value"] <= e["high"] and e["n"] >= 1
            for tier in metrics.get("tiers", {}).values():  # hdlib's methods: what each tier drafted, and when
                assert set(tier) == {"alone", "shared", "asked", "lookup_ms"}
                assert all(isinstance(v, float) and v >= 0 for v in tier.values())
    assert set(results["methods"]["hd:C"]["overall"]["tiers"]) == {"context"}
    assert results["methods"]["hd:C"]["overall"]["tiers"]["context"]["asked"] > 0.9  # every step with room
    assert "tiers" not in results["methods"]["hf"]["overall"]
    assert [(c["a"], c["b"]) for c in results["comparisons"]] == [("hd:C", "hf-pld")]  # hd against the best peer
    assert results["comparisons"][0]["overall"]["n"] == 4 and set(results["prior"]) == {"source", "digest"}
    json.dumps(results, allow_nan=False)


def test_lossless_methods_reproduce_ar_and_plain_methods_take_one_token_per_step(results):
    methods = results.to_json()["methods"]
    for name in ["ar", *METHODS]:
        assert methods[name]["overall"]["identical_frac"] == 1.0, name
    assert methods["ar"]["overall"]["speedup"] == 1.0
    assert methods["ar"]["overall"]["mat"] == 1.0 and methods["hf"]["overall"]["mat"] == 1.0
    assert methods["hf-pld"]["overall"]["mat"] >= 1.0 and methods["hd:C"]["overall"]["mat"] >= 1.0
    assert methods["ar"]["overall"]["tier_share"] == {"bonus": 1.0}
    assert methods["hf"]["overall"]["tier_share"] == {} and methods["hf"]["overall"]["draft_ms"] == 0.0
    assert sum(methods["hd:C"]["overall"]["tier_share"].values()) == pytest.approx(1.0)
    assert 0.0 < methods["hf"]["overall"]["overhead_frac"] < 1.0


def test_metrics_follow_spec_bench_with_a_paired_speedup_and_repeats_pooled():
    def turn(tokens, steps, wall, digest="a", tiers=None):
        return Turn(tokens, steps, wall, 0.001, 0.5 * wall, wall, tiers or {"bonus": tokens}, digest)

    base, fast = Tally(), Tally()
    base.add(1, [turn(10, 10, 1.0)], [turn(10, 10, 1.0)])  # 10 tokens/s
    base.add(2, [turn(30, 30, 1.0)], [turn(30, 30, 1.0)])  # 30 tokens/s
    fast.add(1, [turn(10, 4, 0.5, tiers={"context": 6, "bonus": 4})], [turn(10, 10, 1.0)])  # 20 tokens/s
    fast.add(2, [turn(30, 10, 1.0, digest="b", tiers={"bonus": 30})], [turn(30, 30, 1.0)])  # 30 tokens/s, different
    m = fast.metrics(base)
    assert m.speedup == pytest.approx((2.0 * 1.0) ** 0.5)  # the geometric mean of the paired ratios 2 and 1
    assert m.tokens_per_s == pytest.approx(25.0)  # the mean of per-question throughputs
    assert m.mat == pytest.approx(40 / 14)  # over all steps
    assert m.identical_frac == 0.5
    assert m.tier_share == pytest.approx({"context": 6 / 40, "bonus": 34 / 40})
    assert m.draft_ms == pytest.approx(1e3 * 0.002 / 14) and m.overhead_frac == pytest.approx(0.5)
    assert {k: e.n for k, e in m.intervals.items()} == {"speedup": 2, "mat": 2, "tokens_per_s": 2}
    assert m.intervals["speedup"].low <= m.speedup <= m.intervals["speedup"].high
    # A second repeat of question 2, twice as slow and not `ar`'s: pooled with the first (60 tokens
    # in 3 s), and the question is no longer identical.
    fast.add(2, [turn(30, 10, 2.0, tiers={"bonus": 30})], [turn(30, 30, 1.0)])
    base.add(2, [turn(30, 30, 1.0)], [turn(30, 30, 1.0)])
    m = fast.metrics(base)
    assert m.speedup == pytest.approx((2.0 * (20 / 30)) ** 0.5) and m.identical_frac == 0.5
    assert m.intervals["speedup"].n == 2  # questions, not answers


def test_sampled_runs_are_seeded(lm):
    questions = [Question(1, "qa", ("hello world how",))]
    seen: list[dict[str, list[str]]] = []

    def keep(question, answered):
        seen.append({name: [t.digest for t in turns] for name, turns in answered.runs.items()})

    for _ in range(2):
        r = run_benchmark(lm, questions, ["hf", "hd:C"], max_new_tokens=8, on_question=keep, temperature=1.5)
        assert r.temperature == 1.5 and r.methods["hf"].overall.mat == 1.0
    assert seen[0] == seen[1]  # the same seeds give the same samples, method by method


def metrics(**given: object) -> dict:
    neutral = {"speedup": 1.0, "mat": 1.0, "tokens_per_s": 1.0, "draft_ms": 0.0, "overhead_frac": 0.0}
    return {**neutral, "identical_frac": 1.0, "tier_share": {}, **given}


def synthetic(overall: dict[str, dict], **top: object) -> dict:
    """The JSON of a results file whose methods have these overall metrics (the rest neutral)."""
    head = {"model": "m", "device": "cpu", "dtype": "float32", "machine": {}, "temperature": 0.0, "max_new_tokens": 8}
    head |= {"questions": 1, **top}
    return head | {"methods": {n: {"overall": metrics(**m), "tasks": {"qa": metrics(**m)}} for n, m in overall.items()}}


def test_a_results_file_reads_back_as_written():
    written = synthetic({"ar": {"tier_share": {"bonus": 1.0}}, "hd": {"tier_share": {"context": 0.5, "bonus": 0.5}}})
    written["date"] = "2026-11-30"  # what a script added
    read = BenchResults.from_json(written)
    assert read.extra == {"date": "2026-11-30"}
    assert read.methods["hd"].overall.tier_share == {"context": 0.5, "bonus": 0.5}
    assert read.to_json() == written


def test_a_results_file_of_another_format_is_refused_by_name():
    old = synthetic({"ar": {}})
    del old["dtype"], old["machine"]
    with pytest.raises(HDError, match="no dtype, machine"):
        BenchResults.from_json(old)


def committed_bench_results() -> list[Path]:
    """The committed results files that `hdlib bench` (or a script through `run_benchmark`) wrote."""
    files = sorted((Path(__file__).parent.parent / "benchmarks" / "results").glob("*/*.json"))
    return [f for f in files if {"model", "device", "methods"} <= set(json.loads(f.read_text()))]


@pytest.mark.parametrize("path", committed_bench_results(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_committed_bench_results_file_reads_back_as_it_is(path):
    data = json.loads(path.read_text())
    assert BenchResults.from_json(data).to_json() == data
    raw = path.with_suffix(".raw.jsonl")
    if raw.exists():
        rows = [json.loads(line) for line in raw.read_text().splitlines()[1:]]  # after the run's header line
        assert [QuestionRuns.from_json(row).to_json() for row in rows] == rows


def test_fairness_line():
    def results(hf_speedup):
        return synthetic({"ar": {"speedup": 1.0}, "hf": {"speedup": hf_speedup}})

    assert fairness_line(results(0.8)) == "ar vs hf: ar is 25.0 % faster than hf overall"
    assert "slower" in fairness_line(results(1.02)) and "WARNING" not in fairness_line(results(1.02))
    assert "WARNING" in fairness_line(results(1.10))
    assert "not measured" in fairness_line(synthetic({"ar": {"speedup": 1.0}}))


def test_identical_line_tells_a_bug_from_half_precision():
    def results(hd: float, hf: float = 1.0, dtype: str | None = None, temperature: float = 0.0) -> dict:
        shares = {"ar": 1.0, "hf": hf, "hd": hd}
        out = synthetic({n: {"identical_frac": f} for n, f in shares.items()}, temperature=temperature)
        return out | ({"dtype": dtype} if dtype else {})

    assert identical_line(results(1.0)) == "identical to ar: every method on 100 % of questions"
    assert identical_line(results(0.75)).startswith("WARNING: not identical to ar in float32: hd 75 %")
    said = identical_line(results(0.75, dtype="bfloat16"))
    assert "WARNING" not in said and "hd 75 %" in said and "near-ties" in said
    assert "WARNING" not in identical_line(results(1.0, hf=0.9))  # transformers' own, not hd's
    assert "not expected when sampling" in identical_line(results(0.0, temperature=1.0))


def test_figures(results):
    from hdlib.viz.bench import order_ablation_figure, order_methods, order_of, report_figures

    figures = report_figures(results)
    assert set(figures) == {"speedup", "mat", "tier_share", "order_ablation"}  # hd:C is an order
    speedup = figures["speedup"]
    assert [t.name for t in speedup.data] == METHODS  # ar is the dashed line at 1
    # each task with its number of questions, each bar with its 95 % interval
    assert list(speedup.data[0].x) == ["mt_bench (1)", "translation (1)", "rag (2)", "overall (4)"]
    bars = speedup.data[0]
    assert len(bars.error_y.array) == len(bars.error_y.arrayminus) == 4 and min(bars.error_y.array) >= 0
    shares = {t.name: t for t in figures["tier_share"].data}
    assert shares["context"].marker.color == Tier.CONTEXT.color
    assert list(shares["bonus"].x) == ["ar", "hd:C"]  # transformers' methods have no tiers
    assert list(shares) == ["context", "bonus"] and shares["bonus"].marker.color == BONUS.color

    orders = synthetic(
        {
            n: {"speedup": s, "mat": 1.5}
            for n, s in [("ar", 1.0), ("hd:M", 1.2), ("hd:CM", 1.6), ("hf", 1.0), ("hd:SC", 1.4)]
        }
    )
    assert order_methods(orders) == ["hd:CM", "hd:SC", "hd:M"]
    bars = order_ablation_figure(orders).data[0]
    assert list(bars.y) == ["hd:M", "hd:SC", "hd:CM"]  # drawn bottom up: the fastest on top
    assert bars.marker.color[0] == Tier.MODEL.color and bars.marker.color[1] == Tier.STATISTICS.color

    speedups = [("ar", 1.0), ("hd:SC@16", 1.1), ("hd:M@16", 1.3)]
    fixed = synthetic({n: {"speedup": s, "mat": 3.0} for n, s in speedups})
    assert order_methods(fixed) == ["hd:M@16", "hd:SC@16"] and order_of("hd:SC@16") == "SC" == order_of("hd:SC")
    bars = order_ablation_figure(fixed).data[0]
    assert list(bars.y) == ["hd:SC@16", "hd:M@16"]  # labelled by the full name, coloured by the first tier
    assert list(bars.marker.color) == [Tier.STATISTICS.color, Tier.MODEL.color]


def bench_argv(folder, questions, out, *extra):
    return ["bench", "--questions", str(questions), "--model", str(folder), "--methods", ",".join(METHODS),
            "--max-new-tokens", "8", "--out", str(out), *extra]  # fmt: skip


def structure(results):
    """The results without the measured numbers: keys, tasks, settings, identity (not how and when
    the command was given)."""
    return {
        "top": {k: v for k, v in results.items() if k not in ("methods", "command", "date", "comparisons")},
        "pairs": [(c["a"], c["b"]) for c in results.get("comparisons", [])],
        "methods": {
            name: {
                "metrics": sorted(m["overall"]),
                "tasks": list(m["tasks"]),
                "identical": m["overall"]["identical_frac"],
            }
            for name, m in results["methods"].items()
        },
    }


def test_cli_writes_json_and_an_offline_html_report(capsys, folder, tmp_path):
    questions = write_questions(tmp_path / "q.jsonl")
    out, report = tmp_path / "r.json", tmp_path / "r.html"
    assert main(bench_argv(folder, questions, out, "--html", str(report))) == 0
    printed = capsys.readouterr().out
    assert "ar vs hf: ar is" in printed and "hd:C" in printed and "identical_frac" in printed
    unindented = [line for line in printed.splitlines() if line[:1].strip()]
    cells = [re.sub(r" \[[^\]]*\]", "", line).split() for line in unindented]  # intervals left out
    rows = {c[0]: c for c in cells}  # each method's last row: the overall table's
    assert rows["hf"][4:6] == ["-", "-"]  # transformers' generate times no drafting apart: not shown as 0
    assert rows["hd:C"][4] != "-" and float(rows["hd:C"][4]) > 0
    results = json.loads(out.read_text())
    assert set(results) == TOP_KEYS | {"command", "date"} and results["questions"] == 4
    assert results["model"] == str(folder) and results["command"].startswith(f"hdlib bench --questions {questions}")
    assert list(results["methods"]) == ["ar", *METHODS]
    page = report.read_text()
    assert "Speedup against plain decoding" in page and "Mean accepted tokens" in page
    assert "Where the emitted tokens came from" in page and "Tier order ablation" in page
    assert page.count("<td>-</td><td>-</td>") == 2  # hf and hf-pld: draft ms and overhead not measured
    assert page.count("plotly.js v") == 1 and "<script src=" not in page  # inlined once: works offline
    assert 1e6 < len(page) < 10e6
    raw = raw_path(out).read_text().splitlines()
    assert len(raw) == 5 and "settings" in json.loads(raw[0])


def test_cli_tasks_keeps_only_their_questions(capsys, folder, tmp_path):
    questions = write_questions(tmp_path / "q.jsonl")
    out = tmp_path / "r.json"
    assert main(bench_argv(folder, questions, out, "--tasks", "rag, translation,rag")) == 0
    results = json.loads(out.read_text())
    assert results["questions"] == 3 and set(results["methods"]["ar"]["tasks"]) == {"translation", "rag"}
    raw = [json.loads(line) for line in raw_path(out).read_text().splitlines()[1:]]
    assert [r["question_id"] for r in raw] == [13, 12, 14]  # Spec-Bench's task order, then file order


def test_an_interrupted_run_resumes_where_it_stopped(capsys, folder, tmp_path, monkeypatch):
    questions = write_questions(tmp_path / "q.jsonl")
    whole, part = tmp_path / "whole.json", tmp_path / "part.json"
    assert main(bench_argv(folder, questions, whole)) == 0

    append = ResultsLog.append

    def interrupt_after_first(self, answered):
        append(self, answered)
        raise KeyboardInterrupt

    monkeypatch.setattr(ResultsLog, "append", interrupt_after_first)
    capsys.readouterr()
    assert main(bench_argv(folder, questions, part)) == 130
    err = capsys.readouterr().err
    assert "1 of 4 questions done" in err and err.rstrip().endswith(f"--out {part} --resume")
    assert not part.exists()
    first = raw_path(part).read_text().splitlines()
    assert len(first) == 2

    monkeypatch.setattr(ResultsLog, "append", append)
    assert main(bench_argv(folder, questions, part)) == 2  # no silent overwrite of a started run
    assert "pass --resume" in capsys.readouterr().err
    assert main(bench_argv(folder, questions, part, "--resume")) == 0
    lines = raw_path(part).read_text().splitlines()
    assert lines[:2] == first  # the answered question was kept, not answered again
    assert sorted(json.loads(line)["question_id"] for line in lines[1:]) == [11, 12, 13, 14]
    assert structure(json.loads(part.read_text())) == structure(json.loads(whole.read_text()))


def test_a_run_resumed_on_another_machine_says_so_and_gives_each_machines_ratios(capsys, folder, tmp_path, monkeypatch):
    questions = write_questions(tmp_path / "q.jsonl")
    out = tmp_path / "moved.json"
    append = ResultsLog.append

    def interrupt_after_first(self, answered):
        append(self, answered)
        raise KeyboardInterrupt

    monkeypatch.setattr(ResultsLog, "append", interrupt_after_first)
    assert main(bench_argv(folder, questions, out)) == 130
    monkeypatch.setattr(ResultsLog, "append", append)
    here = hdlib.models.cpu.describe_machine()
    elsewhere = {"cpu": "Elsewhere CPU", "vector_flags": ["avx", "avx2"], "threads": 2, "torch": "x"}
    monkeypatch.setattr(hdlib.models.cpu, "describe_machine", lambda: elsewhere)
    monkeypatch.setattr(hdlib.bench.run, "describe_machine", lambda: elsewhere)
    capsys.readouterr()
    assert main(bench_argv(folder, questions, out, "--resume")) == 0
    said = capsys.readouterr()
    assert "answered on another machine than this one (Elsewhere CPU, avx2, 2 threads)" in said.err
    rows = [json.loads(line) for line in raw_path(out).read_text().splitlines()[1:]]
    assert [r["machine"] for r in rows] == [here, elsewhere, elsewhere, elsewhere]  # each question's own
    data = json.loads(out.read_text())
    assert data["machine"] == elsewhere
    split = data["by_machine"]
    assert [p["machine"] for p in split] == [here, elsewhere]
    ids = [r["question_id"] for r in rows]
    assert [sorted(p["question_ids"]) for p in split] == [ids[:1], sorted(ids[1:])]
    assert all(list(p["methods"]) == list(data["methods"]) for p in split)
    assert split[0]["methods"]["ar"] == {"speedup": 1.0, "mat": 1.0}
    assert "answered on several machines" in said.out and "Elsewhere CPU, avx2, 2 threads (3 q)" in said.out
    assert BenchResults.from_json(data).by_machine == split  # read back as written
    monkeypatch.setattr(hdlib.bench.run, "describe_machine", lambda: here)
    again = tmp_path / "again.json"
    assert main(bench_argv(folder, questions, again)) == 0  # one machine: no split, no warning
    assert "by_machine" not in json.loads(again.read_text()) and "another machine" not in capsys.readouterr().err


def test_a_kill_stops_a_run_as_ctrl_c_does(capsys, folder, tmp_path, monkeypatch):
    questions = write_questions(tmp_path / "q.jsonl")
    out = tmp_path / "killed.json"
    append, before = ResultsLog.append, signal.getsignal(signal.SIGTERM)

    def kill_after_first(self, answered):
        append(self, answered)
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(ResultsLog, "append", kill_after_first)
    assert main(bench_argv(folder, questions, out)) == 130
    assert "1 of 4 questions done" in capsys.readouterr().err and not out.exists()
    assert len(raw_path(out).read_text().splitlines()) == 2  # the answered question kept
    assert signal.getsignal(signal.SIGTERM) == before  # the handler is the run's only


def test_a_killed_bench_passes_the_kill_on_to_its_vllm_pass(tmp_path, monkeypatch):
    from hdlib.bench import serving

    mark = tmp_path / "mark"
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!/bin/sh\ntrap 'echo stopped > {mark}; exit 130' TERM\necho started > {mark}\n"
                      "while true; do sleep 0.05; done\n")  # fmt: skip
    python.chmod(0o755)
    monkeypatch.setattr(serving, "VLLM_VENV", python.parent.parent)

    def kill_once_started():
        while not mark.exists():
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=kill_once_started, daemon=True).start()
    with pytest.raises(serving.Terminated), serving.stop_on_terminate():
        serving.second_pass(["bench", "--methods", "vllm", "--out", "r.json"], ["vllm"], tmp_path / "r.json")
    assert mark.read_text() == "stopped\n"  # the vLLM pass was told, and has ended


def test_resume_refuses_other_settings_and_drops_a_cut_line(tmp_path):
    questions = [Question(1, "qa", ("a",)), Question(2, "qa", ("b",))]
    settings = run_settings("m", "cpu", 0.0, 8, ["ar", "hf"], questions)
    turn = Turn(3, 3, 0.1, 0.0, 0.01, 0.1, {"bonus": 3}, "abc")
    path = tmp_path / "r.raw.jsonl"
    log = ResultsLog(path, settings, resume=False)
    log.append(QuestionRuns(1, "qa", {"ar": [turn], "hf": [turn]}))
    with path.open("a") as f:
        f.write('{"question_id": 2, "task": "qa", "ru')  # a write cut short
    resumed = ResultsLog(path, settings, resume=True)
    assert [a.question_id for a in resumed.done] == [1] and resumed.done[0].runs["hf"] == [turn]
    resumed.append(QuestionRuns(2, "qa", {"ar": [turn], "hf": [turn]}))
    assert [a.question_id for a in ResultsLog(path, settings, resume=True).done] == [1, 2]

    other = run_settings("m", "cpu", 0.0, 16, ["ar", "hf"], questions)
    with pytest.raises(HDError, match="other settings.*max_new_tokens: 8 there, 16 now"):
        ResultsLog(path, other, resume=True)
    changed = run_settings("m", "cpu", 0.0, 8, ["ar", "hf"], [Question(1, "qa", ("a!",)), questions[1]])
    with pytest.raises(HDError, match="questions_digest"):
        ResultsLog(path, changed, resume=True)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--methods", "hf,pld"], "unknown method 'pld'"),
        (["--methods", "hd:CQ"], "unknown tier 'Q'"),
        (["--methods", "hf@8"], "only the methods hdlib verifies take a fixed budget @N"),
        (["--methods", "hd:C@x"], "the budget after @ must be a non-negative integer"),
        (["--per-task", "0"], "must be at least 1"),
        (["--tasks", "rag,poetry"], "unknown task(s) ['poetry']: choose from mt_bench, translation"),
        (["--tasks", "qa"], "holds no question of the task(s) qa"),
        (["--max-new-tokens", "0"], "must be at least 1"),
        (["--temperature", "-1"], "temperature must be a finite number >= 0"),
        (["--out", "/no/such/folder/r.json"], "does not exist"),
        (["--repeats", "0"], "must be at least 1"),
        (["--split", "half"], "invalid choice: 'half'"),
        (["--compare", "hf"], "two different method names, A,B, are needed"),
        (["--compare", "hf,suffix"], "--compare hf,suffix: two methods of the same pass are needed"),
        (["--methods", "hd,vllm-hd", "--compare", "hd,vllm-hd"], "two methods of the same pass"),
    ],
)
def test_cli_refuses_bad_arguments_before_loading_the_model(capsys, tmp_path, no_model_load, extra, message):
    questions = write_questions(tmp_path / "q.jsonl")
    argv = ["bench", "--questions", str(questions), "--out", str(tmp_path / "r.json"), *extra]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip().splitlines()[-1].startswith("hdlib: error: ") and message in err, err


def test_cli_refuses_bad_questions_before_loading_the_model(capsys, tmp_path, no_model_load):
    cases = [
        (tmp_path / "missing.jsonl", "cannot read questions file"),
        (write_questions(tmp_path / "bad.jsonl", ["{not json", "[1, 2]"]), "holds no valid question"),
        (
            write_questions(tmp_path / "task.jsonl", [{"question_id": 1, "category": "poetry", "turns": ["x"]}]),
            "unknown task",
        ),
    ]
    errors = []
    for path, message in cases:
        assert main(["bench", "--questions", str(path), "--out", str(tmp_path / "r.json")]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.strip().splitlines()[-1].startswith("hdlib: error: ") and message in err, err
        errors.append(err.splitlines())
    assert [line.split(", line ")[1][0] for line in errors[1][:2]] == ["1", "2"]  # each skipped line reported


def test_rank_correlations_by_hand():
    assert spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)  # 1 - 6 * 2 / (4 * 15)
    assert kendall([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)  # 5 concordant pairs, 1 discordant
    assert spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(1.5 / 3**0.5)  # ties share the mean rank
    assert kendall([1, 1, 2], [1, 2, 3]) == pytest.approx(2 / 6**0.5)  # tau-b: a tie in one list counted
    assert spearman([3, 2, 1], [1, 2, 3]) == pytest.approx(-1.0) == kendall([3, 2, 1], [1, 2, 3])


def test_orders_are_ranked_against_the_paper_on_the_orders_both_hold():
    speedups = {"ar": 1.0, "hd:S@16": 1.5, "hd:C@16": 1.4, "hd:CMS@16": 1.3, "hd:MC@16": 2.0, "hf": 1.0}
    got = compare_orders(synthetic({n: {"speedup": s} for n, s in speedups.items()}))
    assert got.orders == ["S", "C", "CMS"]  # MC: not in the paper's ablation; fastest first
    assert got.reference == {"S": 1.06, "C": 1.63, "CMS": 1.72}
    assert got.spearman == pytest.approx(-1.0) and got.kendall == pytest.approx(-1.0)
    assert got.first == ("S", "CMS") and got.last == ("CMS", "S")
    with pytest.raises(HDError, match="at least 2"):
        compare_orders(synthetic({"ar": {}, "hd:C": {}}))


def test_the_vllm_methods_by_name_and_their_second_pass():
    from hdlib.bench.serving import second_pass_path, strip_options

    methods = {m.name: m for m in parse_methods("vllm,vllm-ngram,vllm-suffix")}
    assert all(methods[n].serving and not methods[n].drafts for n in ("vllm", "vllm-ngram", "vllm-suffix"))
    with pytest.raises(HDError, match="only the methods hdlib verifies"):
        parse_methods("vllm-ngram@8")
    argv = ["bench", "--methods", "hd,vllm", "--out=r.json", "--per-task", "2", "--html", "r.html", "--resume"]
    assert strip_options(argv, {"--methods", "--out", "--html"}) == ["bench", "--per-task", "2", "--resume"]
    assert second_pass_path("results/field.json") == Path("results/field-vllm.json")


def test_the_report_sets_vllms_methods_against_its_plain_decoding():
    from hdlib.bench.records import aggregate
    from hdlib.bench.reports import serving_line

    def turn(tokens: int, wall: float, steps: int) -> Turn:
        return Turn.of_serving(list(range(tokens)), wall, steps, "", [1])

    runs = {"ar": [turn(10, 1.0, 10)], "vllm": [turn(10, 0.5, 10)], "vllm-ngram": [turn(10, 0.25, 5)]}
    record = QuestionRuns(1, "qa", runs)
    results = aggregate([record], ["ar", "vllm", "vllm-ngram"])
    assert results["vllm-ngram"].overall.mat == 2.0 and results["vllm-ngram"].overall.speedup == 4.0
    line = serving_line(BenchResults("m", "cpu", "float32", {}, 0.0, 10, 1, results))
    assert "vllm-ngram 2.00x" in line and "vllm (plain) 20.0 tok/s, 2.00x ar" in line
    assert serving_line(BenchResults("m", "cpu", "float32", {}, 0.0, 10, 1, {"ar": results["ar"]})) == ""


def test_repeats_run_every_method_on_every_question_in_a_recorded_shuffled_order(lm):
    questions = load_questions(write_questions(Path(lm.source).parent / "rq.jsonl"))[:3]
    seen = []
    r = run_benchmark(lm, questions, ["hf", "hd:C"], 6, lambda q, a: seen.append(a), repeats=2, order_seed=7)
    assert [a.key for a in seen] == [(q.question_id, rep) for rep in (0, 1) for q in questions]  # repeat by repeat
    for a in seen:
        assert sorted(a.order) == ["ar", "hd:C", "hf"] and list(a.runs) == ["ar", "hf", "hd:C"]
        assert a.order == hdlib.bench.run.method_order(["ar", "hf", "hd:C"], 7, a.question_id, a.repeat)
        assert QuestionRuns.from_json(json.loads(json.dumps(a.to_json()))) == a
    assert len({tuple(a.order) for a in seen}) > 1  # shuffled, not one fixed order
    assert r.repeats == 2 and r.order_seed == 7 and r.methods["hd:C"].overall.identical_frac == 1.0
    assert r.methods["hd:C"].overall.intervals["speedup"].n == 3  # repeats pooled within a question
    orders = [hdlib.bench.run.method_order(["a", "b", "c", "d"], 0, q, 0) for q in range(40)]
    assert {o[0] for o in orders} == {"a", "b", "c", "d"}  # every method is sometimes first


def test_reversing_the_methods_leaves_each_hd_methods_first_budget_and_prior_unchanged(lm, tmp_path, monkeypatch):
    monkeypatch.setenv("HDLIB_CACHE", str(tmp_path / "cache"))
    hdlib.generate(lm, "hello world how are you", "C", max_new_tokens=24, prior="learned")  # a prior with history
    learned = sorted((tmp_path / "cache" / "acceptance").glob("*.json"))
    assert len(learned) == 1
    before = learned[0].read_text()
    questions = load_questions(write_questions(tmp_path / "q.jsonl"))
    names = ["hd:C", "hf-pld", "hd:C+window", "hf"]
    firsts, priors = [], []
    for order in (names, names[::-1]):
        answered = []
        r = run_benchmark(lm, questions, order, 10, lambda q, a: answered.append(a), prior="learned")
        firsts.append({(a.question_id, n, i): t.first_budget for a in answered for n in ("hd:C", "hd:C+window")
                       for i, t in enumerate(a.runs[n])})  # fmt: skip
        priors.append(r.prior)
    assert firsts[0] == firsts[1] and all(v is not None for v in firsts[0].values())
    assert priors[0] == priors[1] and priors[0]["source"] == "learned"
    assert learned[0].read_text() == before  # the run read the prior, and never wrote it


def test_the_split_gives_each_category_first_half_to_dev_and_the_rest_to_report():
    rows = [Question(i, cat, ("x",)) for cat, n in (("writing", 10), ("coding", 10), ("qa", 80), ("rag", 5)) for i in
            range(1000 * len(cat), 1000 * len(cat) + n)]  # fmt: skip
    dev, report = split(rows, "dev"), split(rows, "report")
    assert len(dev) == 5 + 5 + 40 + 2 and len(report) == 5 + 5 + 40 + 3
    assert {q.question_id for q in dev}.isdisjoint({q.question_id for q in report})
    assert sorted(dev + report, key=rows.index) == rows
    by_cat = {c: [q for q in rows if q.category == c] for c in ("writing", "qa", "rag")}
    assert [q for q in dev if q.category == "qa"] == by_cat["qa"][:40]  # the first half, in file order
    assert [q for q in report if q.category == "rag"] == by_cat["rag"][2:]
    assert per_task(report, 3)[:3] == by_cat["writing"][5:8]  # --split report --per-task 3: the report half's first
    with pytest.raises(HDError, match="unknown split 'test'"):
        split(rows, "test")


def test_cli_repeats_split_and_compare_reach_the_results(capsys, folder, tmp_path):
    rows = [{"question_id": i, "category": "qa", "turns": [f"hello world how {i}"]} for i in range(1, 7)]
    questions = write_questions(tmp_path / "q.jsonl", rows)
    out = tmp_path / "r.json"
    argv = bench_argv(folder, questions, out, "--split", "report", "--repeats", "2", "--compare", "hf,hf-pld")
    assert main(argv) == 0
    printed = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["questions"] == 3 and data["split"] == "report" and data["repeats"] == 2
    raw = [json.loads(line) for line in raw_path(out).read_text().splitlines()[1:]]
    assert [(r["question_id"], r.get("repeat", 0)) for r in raw] == [(q, rep) for rep in (0, 1) for q in (4, 5, 6)]
    assert [(c["a"], c["b"]) for c in data["comparisons"]] == [("hf", "hf-pld"), ("hd:C", "hf-pld")]
    assert "run: 2 repeats of every method on every question" in printed and "the report half" in printed
    assert "hf against hf-pld: " in printed and "over 3 questions" in printed and "qa (3)" in printed
