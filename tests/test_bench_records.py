"""What a benchmark keeps (`hdlib.bench.records`): the results' schema, Spec-Bench's metrics from the
raw records, and results files read back as written, the committed ones included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.bench_inputs import METHODS, TOP_KEYS, synthetic

from hdlib.bench import BenchResults, QuestionRuns, Tally, Turn
from hdlib.errors import HDError

METRIC_KEYS = {
    "speedup", "mat", "tokens_per_s", "draft_ms", "overhead_frac", "identical_frac", "tier_share", "intervals",
}  # fmt: skip


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
            for name, e in metrics["intervals"].items():  # at most 4 questions: too few for an interval
                assert metrics[name] == e["value"] and e["low"] is e["high"] is None and 1 <= e["n"] == len(e["values"])
            for tier in metrics.get("tiers", {}).values():  # hdlib's methods: what each tier drafted, and when
                assert set(tier) == {"alone", "shared", "asked", "lookup_ms"}
                assert all(isinstance(v, float) and v >= 0 for v in tier.values())
    assert set(results["methods"]["hd:C"]["overall"]["tiers"]) == {"context"}
    assert results["methods"]["hd:C"]["overall"]["tiers"]["context"]["asked"] > 0.9  # every step with room
    assert "tiers" not in results["methods"]["hf"]["overall"]
    assert [(c["a"], c["b"]) for c in results["comparisons"]] == [("hd:C", "hf-pld")]  # hd against the best peer
    assert results["comparisons"][0]["overall"]["n"] == 4 and set(results["prior"]) == {"source", "digest"}
    json.dumps(results, allow_nan=False)


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
    assert not m.intervals["speedup"].has_interval and m.intervals["speedup"].values == pytest.approx((2.0, 1.0))
    # A second repeat of question 2, twice as slow and not `ar`'s: pooled with the first (60 tokens
    # in 3 s), and the question is no longer identical.
    fast.add(2, [turn(30, 10, 2.0, tiers={"bonus": 30})], [turn(30, 30, 1.0)])
    base.add(2, [turn(30, 30, 1.0)], [turn(30, 30, 1.0)])
    m = fast.metrics(base)
    assert m.speedup == pytest.approx((2.0 * (20 / 30)) ** 0.5) and m.identical_frac == 0.5
    assert m.intervals["speedup"].n == 2  # questions, not answers


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
