"""The report of a benchmark (`hdlib.bench.reports`): the fairness and identity lines, vLLM against its
plain decoding, the printed report and the HTML one with its figures (`hdlib.viz.bench`)."""

from __future__ import annotations

import json
import re

import pytest
from support.bench_inputs import METHODS, TOP_KEYS, bench_argv, synthetic, write_questions

from hdlib.bench import BenchResults, QuestionRuns, Turn, fairness_line, identical_line
from hdlib.bench.log import raw_path
from hdlib.cli import main
from hdlib.tiers import BONUS, Tier


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
    # four questions are too few for an interval: no whisker (see test_a_bar_has_a_whisker_where_its_...)
    assert len(bars.error_y.array) == len(bars.error_y.arrayminus) == 4 and set(bars.error_y.array) == {None}
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


def test_a_bar_has_a_whisker_where_its_estimate_has_an_interval():
    from hdlib.viz.bench import speedup_figure

    spread = {"value": 1.5, "low": 1.2, "high": 1.9, "n": 12, "over": "questions"}
    few = {"value": 1.4, "low": None, "high": None, "n": 3, "over": "questions", "values": [1.2, 1.4, 1.6]}
    data = synthetic({"ar": {"speedup": 1.0}, "hd": {"speedup": 1.5, "intervals": {"speedup": spread}}})
    data["methods"]["hd"]["tasks"]["qa"] |= {"speedup": 1.4, "intervals": {"speedup": few}}
    bars = speedup_figure(data).data[0]
    assert list(bars.error_y.array) == [None, pytest.approx(0.4)]  # qa (3 questions), then overall (12)
    assert list(bars.error_y.arrayminus) == [None, pytest.approx(0.3)]


def test_cli_writes_json_and_an_offline_html_report(capsys, folder, tmp_path):
    questions = write_questions(tmp_path / "q.jsonl")
    out, report = tmp_path / "r.json", tmp_path / "r.html"
    assert main(bench_argv(folder, questions, out, "--html", str(report))) == 0
    printed = capsys.readouterr().out
    assert "ar vs hf: ar is" in printed and "hd:C" in printed and "identical_frac" in printed
    unindented = [line for line in printed.splitlines() if line[:1].strip()]
    cells = [re.sub(r" (\[[^\]]*\]|\([^)]*\))", "", line).split() for line in unindented]  # intervals left out
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


def test_the_report_sets_vllms_methods_against_its_plain_decoding():
    from hdlib.bench.metrics import aggregate
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
