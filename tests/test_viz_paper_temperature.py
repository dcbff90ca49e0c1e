"""The paper beside the kit against temperature (hdlib.viz.paper_temperature): the paper's numbers, the
figure and note built from small results, and the committed sampling runs that notebook 04 reads."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from support.bench_runs import MACHINE, metrics

from hdlib.bench import MethodResult
from hdlib.bench.intervals import Estimate, verdict
from hdlib.bench.specbench import TASKS
from hdlib.viz import paper_tasks, paper_temperature

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
NOTEBOOK_04 = ROOT / "notebooks" / "04_order_ablation.ipynb"


def test_the_papers_numbers_are_its_six_tasks_under_spec_bench_names_and_its_ten_temperatures():
    assert list(paper_tasks.PAPER_TASK_SPEEDUP) == list(TASKS)
    assert paper_tasks.PAPER_TASK_SPEEDUP == {
        "mt_bench": 1.62, "translation": 1.07, "summarization": 1.76, "qa": 1.39, "math_reasoning": 1.74, "rag": 1.51
    }  # fmt: skip
    assert sum(paper_tasks.PAPER_TASK_SPEEDUP.values()) / 6 == pytest.approx(
        paper_tasks.PAPER_MEAN_SPEEDUP, abs=0.006
    )  # 1.515
    assert paper_tasks.PAPER_MEAN_SPEEDUP == 1.52
    curve = paper_temperature.PAPER_TEMPERATURE_SPEEDUP
    assert list(curve) == [round(0.1 * i, 1) for i in range(1, 11)]
    assert (round(curve[0.1], 2), round(curve[1.0], 2)) == (1.47, 1.34)  # the ends HD_NOTES.md gives
    speed = list(curve.values())
    assert speed[0] == max(speed) and speed[-1] == min(speed)  # it falls, not quite monotonically
    assert 80 < paper_temperature.PAPER_HD_TOKENS_PER_S[0] and paper_temperature.PAPER_HD_TOKENS_PER_S[-1] < 74
    assert all(54 < t < 56 for t in paper_temperature.PAPER_AR_TOKENS_PER_S)
    note = paper_temperature.temperature_note([])
    assert "ten temperatures" in note and "81 to 73 tokens/s" in note and "1.47x falling to 1.34x" in note


def sampling_run(temperature: float, speedup: float, mat: float) -> dict:
    """One run of benchmarks/sampling.py as it writes it."""
    hd = MethodResult(metrics(speedup, mat), {"qa": metrics(speedup, mat)}).to_json()
    ar = MethodResult(metrics(1.0, 1.0), {"qa": metrics(1.0, 1.0)}).to_json()
    return {"model": "smollm2-135m", "device": "cpu", "machine": MACHINE, "temperature": temperature,
            "max_new_tokens": 64, "questions": 2, "methods": {"ar": ar, "hd": hd}, "date": "2026-12-01"}  # fmt: skip


def test_temperature_points_read_both_sampling_scripts_files():
    one = paper_temperature.temperature_points(
        {"command": "x", "runs": [sampling_run(1.0, 1.2, 1.4)]}, "m/sampling.json"
    )
    assert [(p.temperature, p.speedup, p.mat, p.rule, p.source) for p in one] == [
        (1.0, 1.2, 1.4, "", "m/sampling.json")
    ]
    assert one[0].machine == "AMD EPYC, avx2, 2 threads" and "rule not recorded" in one[0].run
    summary = {"speedup": 1.7, "mat": 1.9, "identical_frac": 1.0}
    summaries = {"gumbel": summary, "rejection": {**summary, "mat": 1.8}}
    rules = {"date": "2026-12-02", "machine": MACHINE, "questions": 12,
             "runs": [{"temperature": 0.5, "summary": summaries}]}  # fmt: skip
    two = paper_temperature.temperature_points(rules, "m/sampling_rules.json")
    assert [(p.rule, p.mat) for p in two] == [("gumbel", 1.9), ("rejection", 1.8)] and two[0].questions == 12


def test_the_temperature_figure_shows_the_papers_whole_curve_apart_from_hdlibs_runs():
    runs = [sampling_run(0.0, 1.3, 1.7), sampling_run(1.0, 1.1, 1.2)]
    points = paper_temperature.temperature_points({"runs": runs}, "m/sampling.json")
    fig = paper_temperature.temperature_figure(points)
    ours = [t for t in fig.data if t.name.startswith("hdlib")]
    assert len(ours) == 2  # one run, speedup and MAT panels
    assert list(ours[0].x) == [0.0, 1.0] and list(ours[0].y) == [1.3, 1.1] and list(ours[1].y) == [1.7, 1.2]
    (papers,) = [t for t in fig.data if t.name.startswith("the paper")]
    assert list(papers.x) == list(paper_temperature.PAPER_TEMPERATURES) and "ten temperatures" in papers.name
    ratios = [h / a for a, h in zip(paper_temperature.PAPER_AR_TOKENS_PER_S, paper_temperature.PAPER_HD_TOKENS_PER_S)]
    assert [round(y, 2) for y in papers.y] == [round(r, 2) for r in ratios]
    assert (round(papers.y[0], 2), round(papers.y[-1], 2)) == (1.47, 1.34)
    assert [t for t in papers.text if t] == ["1.47x", "1.34x"]  # the ends labelled, every point drawn
    assert "Vicuna-7B" in fig.layout.title.text and "SmolLM2-135M" in fig.layout.title.text


def test_the_note_says_honestly_what_one_temperature_covers_and_how_to_measure_more():
    points = paper_temperature.temperature_points({"runs": [sampling_run(1.0, 1.2, 1.4)]}, "m/sampling.json")
    note = paper_temperature.temperature_note(points)
    assert "temperature(s) 1;" in note and "0 of them at more than one temperature" in note
    assert "python -m benchmarks.sampling" in note and "--temperatures 0.2,0.4,0.6,0.8,1.0" in note
    assert paper_temperature.temperature_note([]).startswith("no committed sampling run")


def test_every_committed_sampling_file_gives_points():
    points = paper_temperature.committed_temperature_points(RESULTS)
    sources = {p.source for p in points}
    assert {"epyc-avx2/sampling_rules.json", "epyc-avx512/sampling.json"} <= sources
    assert all(p.speedup > 0 and p.mat >= 1 for p in points)
    assert any(len({q.temperature for q in points if q.run == p.run}) > 1 for p in points)


def test_what_notebook_04_says_of_temperature_holds():
    """04: today's engine at five temperatures; the speedup falls from its first to its last point,
    where it is not told apart from plain sampling; MAT falls likewise; a steeper fall than the paper's; every answer
    plain sampling's. And the older runs: those that do not record their rule did not write plain
    sampling's answers; the two rules' MAT at T = 0.5 (exercise 5)."""
    text = " ".join(" ".join(c.source for c in nbformat.read(NOTEBOOK_04, as_version=4).cells).split())
    kit = paper_temperature.kit_temperature_points(RESULTS)
    assert [p.temperature for p in kit] == [0.2, 0.4, 0.6, 0.8, 1.0]
    assert {p.rule for p in kit} == {"gumbel"} and {p.questions for p in kit} == {12}
    first, last = kit[0], kit[-1]
    low, high = last.speedup_interval
    said = (
        f"the speedup falls from {first.speedup:.2f}x at 0.2 to {last.speedup:.2f}x at 1.0, where it is not told "
        f"apart from plain sampling (its interval, [{low:.2f}, {high:.2f}], holds 1 but reaches beyond ±5 %), and "
        f"MAT from {first.mat:.2f} to {last.mat:.2f}: a steeper fall"
    )
    assert said in text
    assert verdict(Estimate(last.speedup, low, high, last.questions)) == "not told apart"
    assert verdict(Estimate(first.speedup, *first.speedup_interval, first.questions)) == "faster"
    assert (
        first.speedup / last.speedup
        > paper_temperature.PAPER_TEMPERATURE_SPEEDUP[0.1] / paper_temperature.PAPER_TEMPERATURE_SPEEDUP[1.0]
    )
    assert all(p.identical == 1.0 for p in kit)
    points = paper_temperature.committed_temperature_points(RESULTS)
    assert all(p.identical == 0.0 for p in points if not p.rule and p.temperature > 0)
    rules = [p for p in points if p.source == "epyc-avx2/sampling_rules.json" and p.temperature == 0.5]
    at_half = {p.rule: round(p.mat, 2) for p in rules}
    assert at_half == {"gumbel": 1.93, "rejection": 1.83}
