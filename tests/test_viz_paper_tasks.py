"""The paper beside the kit per task (hdlib.viz.paper_tasks): the figure and table built from small
results, and what notebook 04 says of the committed runs it reads, the field run and the orders
run."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from support.bench_runs import MACHINE, metrics

from hdlib.bench import BenchResults, MethodResult
from hdlib.bench.paper_drafter import PaperSettings
from hdlib.bench.specbench import TASKS
from hdlib.tiers.window import WindowSettings
from hdlib.viz import paper_tasks

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
FIELD = RESULTS / "xeon-amx" / "field.json"  # the run notebook 04 sets beside the paper
NOTEBOOK_04 = ROOT / "notebooks" / "04_order_ablation.ipynb"


def small_results() -> BenchResults:
    """Two tasks of six: ar and hd."""
    ar = MethodResult(metrics(1.0, 1.0), {"mt_bench": metrics(1.0, 1.0), "qa": metrics(1.0, 1.0)})
    hd = MethodResult(metrics(1.8, 2.5), {"mt_bench": metrics(2.0, 2.8), "qa": metrics(1.5, 2.1)})
    return BenchResults("smollm2-135m", "cpu", "float32", MACHINE, 0.0, 64, 4, {"ar": ar, "hd": hd})


def test_task_rows_set_each_task_beside_the_papers_and_leave_a_missing_task_empty():
    rows = paper_tasks.task_rows(small_results())
    assert [r.task for r in rows] == [*TASKS, "overall"]
    by_task = {r.task: r for r in rows}
    assert by_task["mt_bench"].paper == 1.62 and by_task["mt_bench"].speedup == {"hd": 2.0}
    assert by_task["qa"].mat == {"hd": 2.1}
    assert by_task["rag"].paper == 1.51 and by_task["rag"].speedup == {"hd": None}  # not in the run
    assert by_task["overall"].paper == 1.52 and by_task["overall"].speedup == {"hd": 1.8}
    with pytest.raises(ValueError, match="no method hd-paper"):
        paper_tasks.task_rows(small_results(), ("hd-paper",))


def test_the_task_figure_has_the_papers_bars_and_the_runs_and_says_who_made_them():
    fig = paper_tasks.task_speedup_figure(small_results())
    papers, hd = fig.data
    assert list(papers.y) == [*paper_tasks.PAPER_TASK_SPEEDUP.values(), 1.52]
    assert "Vicuna-7B" in papers.name and "GPU" in papers.name
    assert list(hd.y) == [2.0, None, None, 1.5, None, None, 1.8] and "hd" in hd.name and "CPU" in hd.name
    title = fig.layout.title.text
    assert "Vicuna-7B" in title and "GPU" in title and "smollm2-135m" in title
    assert "AMD EPYC, avx2, 2 threads" in title and "float32" in title


def test_the_task_table_has_a_row_per_task_and_names_model_and_machine():
    table = paper_tasks.task_table(small_results())
    assert table.header[1] == "the paper's HD (Vicuna-7B, GPU)"
    assert table.rows[0] == ("mt_bench", "1.62x", "2.00x, 2.80")
    assert table.rows[1] == ("translation", "1.07x", "-, -")
    assert table.rows[-1] == ("overall", "1.52x", "1.80x, 2.50")
    assert "smollm2-135m" in table.title and "AMD EPYC" in table.title
    assert "<table>" in table._repr_html_() and "| mt_bench | 1.62x |" in str(table)


def test_a_run_answered_on_two_machines_names_both():
    r = small_results()
    two = BenchResults(**{**r.__dict__, "by_machine": [
        {"machine": MACHINE, "question_ids": [1, 2, 3], "methods": {}},
        {"machine": {**MACHINE, "vector_flags": ["avx512f"]}, "question_ids": [4], "methods": {}},
    ]})  # fmt: skip
    assert paper_tasks.machines_of(two) == (
        "2 machines: AMD EPYC, avx2, 2 threads (3 questions); AMD EPYC, avx512, 2 threads (1 questions)"
    )


def field() -> BenchResults:
    return BenchResults.from_json(json.loads(FIELD.read_text()))


def test_what_notebook_04_says_of_the_field_run_holds():
    """04: hd is above the paper's number on four tasks of six here (a CPU and a small model: not the
    same experiment); the paper's way (hd-paper) drafts nearly 3 tokens a step, yet is slower than
    plain decoding on the CPU; mended and merged into a trie it does a little better."""
    run = field()
    assert run.tasks == list(TASKS) and run.questions == 12 and run.max_new_tokens == 256
    rows = paper_tasks.task_rows(run, ("hd", "hd-paper", "hd-paper+mend+trie"))
    assert sum(r.speedup["hd"] > r.paper for r in rows[:-1]) == 4
    overall = rows[-1]
    assert overall.speedup["hd-paper"] < 1.0 < overall.speedup["hd"] and overall.mat["hd-paper"] > 2.5
    assert (round(overall.speedup["hd-paper"], 2), round(overall.mat["hd-paper"], 2)) == (0.85, 2.94)
    assert (round(overall.speedup["hd-paper+mend+trie"], 2), round(overall.mat["hd-paper+mend+trie"], 2)) == (
        0.89, 2.96
    )  # fmt: skip
    assert PaperSettings().budget + WindowSettings().size == 56  # the rows of each of hd-paper's passes
    assert not run.by_machine  # every question on one machine
    # ... and in the repeated run on the report half, its whole interval below plain decoding's speed
    repeated = BenchResults.from_json(json.loads((RESULTS / "xeon-amx" / "report_half.json").read_text()))
    e = repeated.methods["hd-paper"].overall.intervals["speedup"]
    assert (f"{e.value:.2f}", f"{e.low:.2f}", f"{e.high:.2f}", e.n) == ("0.82", "0.73", "0.91", 18) and e.high < 1
    text = " ".join(" ".join(c.source for c in nbformat.read(NOTEBOOK_04, as_version=4).cells).split())
    assert "0.82x [0.73, 0.91] of `ar`'s speed, the whole 95 % interval over its 18 questions below 1" in text


def test_the_task_figure_says_what_each_bar_rests_on():
    """04's per-task figure: each task's label gives its questions and answer tokens, from the raw file."""
    sizes = paper_tasks.task_sizes(FIELD.with_name("field.raw.jsonl"))
    assert sizes["translation"] == (2, 93) and sizes["overall"][0] == 12
    assert sum(q for t, (q, _) in sizes.items() if t != "overall") == 12
    fig = paper_tasks.task_speedup_figure(field(), ("hd",), sizes)
    assert "translation<br>2 q, 93 tokens" in fig.data[0].x and "overall<br>12 q, 2642 tokens" in fig.data[0].x
    assert sizes["mt_bench"] == (2, 1024)
    # translation, from the run: MAT 2.02, 43 % from the context tier, 36 of one 57-token answer's tokens
    hd = field().methods["hd"].tasks["translation"]
    assert (round(hd.mat, 2), round(100 * hd.tier_share["context"])) == (2.02, 43)
    runs = [json.loads(line) for line in FIELD.with_name("field.raw.jsonl").read_text().splitlines()[1:]]
    answers = [r["runs"]["hd"][0] for r in runs if r["task"] == "translation"]
    assert sorted((a["tokens"], a["tiers"].get("context", 0)) for a in answers)[-1] == (57, 36)


def test_what_notebook_04_says_of_the_tasks_holds():
    """04: translation is the paper's slowest task, summarization and math its fastest; hdlib's runs,
    ranked by `task_ranking` from their files, disagree (the field run's lowest task is summarization,
    the report half's qa), each with too few questions for an interval; the sealed set's intervals tell
    no two tasks apart; in the field run the context tier drafts most of rag's tokens. Answer 4 cites
    the field run's summarization and rag (1.40x, 2.28x; 43 % and 60 % from the context tier)."""
    hd = field().methods["hd"].tasks
    by_paper = sorted(paper_tasks.PAPER_TASK_SPEEDUP, key=paper_tasks.PAPER_TASK_SPEEDUP.get)
    assert by_paper[0] == "translation" and by_paper[-2:] == ["math_reasoning", "summarization"]
    report = BenchResults.from_json(json.loads((RESULTS / "xeon-amx" / "report_half.json").read_text()))
    sealed = BenchResults.from_json(json.loads((RESULTS / "epyc-avx512" / "sealed_bench.json").read_text()))
    lowest = {name: min(r.methods["hd"].tasks, key=lambda t: r.methods["hd"].tasks[t].speedup)
              for name, r in (("field", field()), ("report", report))}  # fmt: skip
    assert lowest == {"field": "summarization", "report": "qa"}  # the two runs disagree
    few = "too few for an interval; a ranking of these questions, not of the tasks"
    for run in (field(), report):
        assert few in paper_tasks.task_ranking(run)
    assert paper_tasks.task_ranking(field()).startswith("summarization 1.40x, ")
    assert "2 questions a task, 1 repeat" in paper_tasks.task_ranking(field())
    assert "3 questions a task, 3 repeats" in paper_tasks.task_ranking(report)
    said = paper_tasks.task_ranking(sealed)
    assert "9 questions a task, 5 repeats, 95 % intervals" in said and "no two tasks told apart" in said
    assert (round(hd["summarization"].speedup, 2), round(hd["rag"].speedup, 2)) == (1.40, 2.28)
    share = {t: round(100 * hd[t].tier_share["context"]) for t in hd}
    assert (share["summarization"], share["rag"]) == (43, 60) and max(share, key=share.get) == "rag"
    text = " ".join(" ".join(c.source for c in nbformat.read(NOTEBOOK_04, as_version=4).cells).split())
    assert "In this run the context tier (the prompt and the answer so far) drafts most of rag's tokens" in text
    assert "summarization is hdlib's slowest" not in text and "has hdlib's lowest speedup" not in text
    assert "hdlib's `hd` on summarization in the committed run (1.40x," in text and "against 2.28x on rag" in text


def test_a_task_ranking_says_what_its_intervals_tell_apart():
    """task_ranking on made-up tasks: intervals that do not overlap are told apart, lowest first."""
    from hdlib.bench.intervals import Estimate

    sealed = json.loads((RESULTS / "epyc-avx512" / "sealed_bench.json").read_text())
    tasks = sealed["methods"]["hd"]["tasks"]
    for t, (v, lo, hi) in zip(tasks, [(1.2, 1.1, 1.3), (2.0, 1.8, 2.2), (1.25, 1.15, 1.9), *[(1.5, 1.0, 2.5)] * 3]):
        tasks[t]["speedup"] = v
        tasks[t]["intervals"]["speedup"] = Estimate(v, lo, hi, 9, "questions").to_json()
    said = paper_tasks.task_ranking(BenchResults.from_json(sealed))
    first, second = list(tasks)[:2]
    assert said.startswith(f"{first} 1.20x [1.10, 1.30], ") and f"{second} above {first}" in said
    assert said.count(" above ") == 1


ORDERS = RESULTS / "xeon-amx" / "orders_at_16.json"  # the run notebook 04 opens with


def test_what_notebook_04_says_of_the_orders_holds():
    """04: ranked by MAT the committed run puts the paper's best order first; every context-first order
    has a higher speedup than every statistics-first one; statistics first, the context tier's share
    collapses; the model tier alone drafts rarely and falls furthest from speed to MAT; CRMS has the
    highest MAT and RCMS takes the context tier's share; exercise 3: how far leaving one order out moves
    the rank correlations (the run before the split records no command and is not cited)."""
    from hdlib.bench import PAPER_ORDERS, compare_orders

    data = json.loads(ORDERS.read_text())
    run = BenchResults.from_json(data)
    assert run.questions == 12 and run.max_new_tokens == 128 and "orders_at_16.json" in data["command"]
    assert all(m.overall.identical_frac == 1.0 for m in run.methods.values())
    by_speed, by_mat = compare_orders(run), compare_orders(run, metric="mat")
    assert by_mat.first == ("CMS", "CMS") and by_speed.last[1] == "S"
    assert by_speed.spearman > 0.8 and by_mat.spearman > 0.8
    overall = {name[3:].removesuffix("@16"): m.overall for name, m in run.methods.items() if name.startswith("hd:")}
    c_first = min(m.speedup for o, m in overall.items() if o[0] == "C")
    s_first = max(m.speedup for o, m in overall.items() if o[0] == "S")
    assert c_first > s_first
    share = lambda o: round(100 * overall[o].tier_share.get("context", 0.0))  # noqa: E731
    assert share("C") == 37 and overall["SCM"].tier_share["context"] < 0.01
    assert round(overall["M"].mat, 2) == 1.14
    rank_move = {o: by_mat.orders.index(o) - by_speed.orders.index(o) for o in by_speed.orders}
    assert max(rank_move, key=rank_move.get) == "M" and by_mat.orders[-1] == "M"
    # the recap: by MAT, CMS first, the model tier alone last, the statistics-first orders 6th to 8th of 9
    assert by_mat.orders[0] == "CMS" and sorted(by_mat.orders.index(o) + 1 for o in ("S", "SCM", "SMC")) == [6, 7, 8]
    assert len(by_mat.orders) == 9
    assert rank_move["C"] == 3
    assert max(overall, key=lambda o: overall[o].mat) == "CRMS"
    assert (share("CRMS"), share("RCMS")) == (31, 10)
    # exercise 3: each of the paper's nine orders left out in turn, through the call the notebook makes
    left_out = {
        metric: {o: compare_orders(run, {k: v for k, v in PAPER_ORDERS.items() if k != o}, metric=metric).spearman
                 for o in PAPER_ORDERS}
        for metric in ("speedup", "mat")
    }  # fmt: skip
    speed, mat = left_out["speedup"], left_out["mat"]
    assert (round(by_speed.spearman, 2), round(by_mat.spearman, 2)) == (0.90, 0.88)
    assert (min(speed, key=speed.get), round(min(speed.values()), 2)) == ("MCS", 0.86)
    assert (max(speed, key=speed.get), round(max(speed.values()), 2)) == ("C", 0.93)
    assert round(min(mat.values()), 2) == 0.83 and {o for o, v in mat.items() if round(v, 2) == 0.83} == {
        "CMS", "CSM", "MSC"}  # fmt: skip
    assert (max(mat, key=mat.get), round(max(mat.values()), 2)) == ("M", 0.97)
    moved = max(abs(v - c.spearman) for c, found in ((by_speed, speed), (by_mat, mat)) for v in found.values())
    assert round(moved, 2) == 0.09 and min(min(speed.values()), min(mat.values())) >= 0.825
    assert sorted(PAPER_ORDERS, key=lambda o: -PAPER_ORDERS[o]).index("M") == 5  # sixth in the paper
    text = " ".join(" ".join(c.source for c in nbformat.read(NOTEBOOK_04, as_version=4).cells).split())
    assert "by speedup it stays between 0.86 (without `MCS`) and 0.93 (without `C`)" in text
    assert "by MAT between 0.83 (without `CMS`, `CSM` or `MSC`) and 0.97 (without `M`" in text
    assert "epyc-avx512/orders_at_16" not in text  # the older run, replaced by xeon-amx/orders_at_16
