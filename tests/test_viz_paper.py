"""The paper beside the kit (hdlib.viz.paper): the paper's numbers, the figures and tables built from
small results, the claims of its table checked against the code, the committed runs that notebook 04
reads, and the precision cell of notebook 05 (slow: the packaged model in float32 and bfloat16)."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from hdlib.bench import BenchResults, MethodResult, Metrics
from hdlib.bench.paper import PAPER_MODEL, PAPER_STATISTICS, PaperSettings
from hdlib.bench.specbench import TASKS
from hdlib.databases.modeldb import DEFAULT_N, DEFAULT_TOP_K
from hdlib.tiers import DEFAULT_TIERS, PAPER_TIERS, ContextSettings, ModelSettings, StatisticsSettings, Tier
from hdlib.tiers.recycling import WIDTH
from hdlib.tiers.window import WindowSettings
from hdlib.viz import paper

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
NOTEBOOK_04 = ROOT / "notebooks" / "04_order_ablation.ipynb"
FIELD = RESULTS / "xeon-amx" / "field.json"  # the run notebook 04 sets beside the paper
MACHINE = {"cpu": "AMD EPYC", "vector_flags": ["avx", "avx2"], "threads": 2, "torch": "2.13.0+cpu"}


def metrics(speedup: float, mat: float) -> Metrics:
    return Metrics(speedup, mat, 20.0 * speedup, 0.1, 0.01, 1.0, {})


def small_results() -> BenchResults:
    """Two tasks of six: ar and hd."""
    ar = MethodResult(metrics(1.0, 1.0), {"mt_bench": metrics(1.0, 1.0), "qa": metrics(1.0, 1.0)})
    hd = MethodResult(metrics(1.8, 2.5), {"mt_bench": metrics(2.0, 2.8), "qa": metrics(1.5, 2.1)})
    return BenchResults("smollm2-135m", "cpu", "float32", MACHINE, 0.0, 64, 4, {"ar": ar, "hd": hd})


# The paper's numbers ----------------------------------------------------------------------------------


def test_the_papers_numbers_are_its_six_tasks_under_spec_bench_names_and_its_ten_temperatures():
    assert list(paper.PAPER_TASK_SPEEDUP) == list(TASKS)
    assert paper.PAPER_TASK_SPEEDUP == {
        "mt_bench": 1.62, "translation": 1.07, "summarization": 1.76, "qa": 1.39, "math_reasoning": 1.74, "rag": 1.51
    }  # fmt: skip
    assert sum(paper.PAPER_TASK_SPEEDUP.values()) / 6 == pytest.approx(paper.PAPER_MEAN_SPEEDUP, abs=0.006)  # 1.515
    assert paper.PAPER_MEAN_SPEEDUP == 1.52
    curve = paper.PAPER_TEMPERATURE_SPEEDUP
    assert list(curve) == [round(0.1 * i, 1) for i in range(1, 11)]
    assert (round(curve[0.1], 2), round(curve[1.0], 2)) == (1.47, 1.34)  # the ends HD_NOTES.md gives
    speed = list(curve.values())
    assert speed[0] == max(speed) and speed[-1] == min(speed)  # it falls, not quite monotonically
    assert 80 < paper.PAPER_HD_TOKENS_PER_S[0] and paper.PAPER_HD_TOKENS_PER_S[-1] < 74
    assert all(54 < t < 56 for t in paper.PAPER_AR_TOKENS_PER_S)
    note = paper.temperature_note([])
    assert "ten temperatures" in note and "81 to 73 tokens/s" in note and "1.47x falling to 1.34x" in note


# Per task ---------------------------------------------------------------------------------------------


def test_task_rows_set_each_task_beside_the_papers_and_leave_a_missing_task_empty():
    rows = paper.task_rows(small_results())
    assert [r.task for r in rows] == [*TASKS, "overall"]
    by_task = {r.task: r for r in rows}
    assert by_task["mt_bench"].paper == 1.62 and by_task["mt_bench"].speedup == {"hd": 2.0}
    assert by_task["qa"].mat == {"hd": 2.1}
    assert by_task["rag"].paper == 1.51 and by_task["rag"].speedup == {"hd": None}  # not in the run
    assert by_task["overall"].paper == 1.52 and by_task["overall"].speedup == {"hd": 1.8}
    with pytest.raises(ValueError, match="no method hd-paper"):
        paper.task_rows(small_results(), ("hd-paper",))


def test_the_task_figure_has_the_papers_bars_and_the_runs_and_says_who_made_them():
    fig = paper.task_speedup_figure(small_results())
    papers, hd = fig.data
    assert list(papers.y) == [*paper.PAPER_TASK_SPEEDUP.values(), 1.52]
    assert "Vicuna-7B" in papers.name and "GPU" in papers.name
    assert list(hd.y) == [2.0, None, None, 1.5, None, None, 1.8] and "hd" in hd.name and "CPU" in hd.name
    title = fig.layout.title.text
    assert "Vicuna-7B" in title and "GPU" in title and "smollm2-135m" in title
    assert "AMD EPYC, avx2, 2 threads" in title and "float32" in title


def test_the_task_table_has_a_row_per_task_and_names_model_and_machine():
    table = paper.task_table(small_results())
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
    assert paper.machines_of(two) == (
        "2 machines: AMD EPYC, avx2, 2 threads (3 questions); AMD EPYC, avx512, 2 threads (1 questions)"
    )


# Against temperature ----------------------------------------------------------------------------------


def sampling_run(temperature: float, speedup: float, mat: float) -> dict:
    """One run of benchmarks/sampling.py as it writes it."""
    hd = MethodResult(metrics(speedup, mat), {"qa": metrics(speedup, mat)}).to_json()
    ar = MethodResult(metrics(1.0, 1.0), {"qa": metrics(1.0, 1.0)}).to_json()
    return {"model": "smollm2-135m", "device": "cpu", "machine": MACHINE, "temperature": temperature,
            "max_new_tokens": 64, "questions": 2, "methods": {"ar": ar, "hd": hd}, "date": "2026-12-01"}  # fmt: skip


def test_temperature_points_read_both_sampling_scripts_files():
    one = paper.temperature_points({"command": "x", "runs": [sampling_run(1.0, 1.2, 1.4)]}, "m/sampling.json")
    assert [(p.temperature, p.speedup, p.mat, p.rule, p.source) for p in one] == [
        (1.0, 1.2, 1.4, "", "m/sampling.json")
    ]
    assert one[0].machine == "AMD EPYC, avx2, 2 threads" and "rule not recorded" in one[0].run
    summary = {"speedup": 1.7, "mat": 1.9, "identical_frac": 1.0}
    summaries = {"gumbel": summary, "rejection": {**summary, "mat": 1.8}}
    rules = {"date": "2026-12-02", "machine": MACHINE, "questions": 12,
             "runs": [{"temperature": 0.5, "summary": summaries}]}  # fmt: skip
    two = paper.temperature_points(rules, "m/sampling_rules.json")
    assert [(p.rule, p.mat) for p in two] == [("gumbel", 1.9), ("rejection", 1.8)] and two[0].questions == 12


def test_the_temperature_figure_shows_the_papers_whole_curve_apart_from_hdlibs_runs():
    runs = [sampling_run(0.0, 1.3, 1.7), sampling_run(1.0, 1.1, 1.2)]
    points = paper.temperature_points({"runs": runs}, "m/sampling.json")
    fig = paper.temperature_figure(points)
    ours = [t for t in fig.data if t.name.startswith("hdlib")]
    assert len(ours) == 2  # one run, speedup and MAT panels
    assert list(ours[0].x) == [0.0, 1.0] and list(ours[0].y) == [1.3, 1.1] and list(ours[1].y) == [1.7, 1.2]
    (papers,) = [t for t in fig.data if t.name.startswith("the paper")]
    assert list(papers.x) == list(paper.PAPER_TEMPERATURES) and "ten temperatures" in papers.name
    ratios = [h / a for a, h in zip(paper.PAPER_AR_TOKENS_PER_S, paper.PAPER_HD_TOKENS_PER_S)]
    assert [round(y, 2) for y in papers.y] == [round(r, 2) for r in ratios]
    assert (round(papers.y[0], 2), round(papers.y[-1], 2)) == (1.47, 1.34)
    assert [t for t in papers.text if t] == ["1.47x", "1.34x"]  # the ends labelled, every point drawn
    assert "Vicuna-7B" in fig.layout.title.text and "SmolLM2-135M" in fig.layout.title.text


def test_the_note_says_honestly_what_one_temperature_covers_and_how_to_measure_more():
    points = paper.temperature_points({"runs": [sampling_run(1.0, 1.2, 1.4)]}, "m/sampling.json")
    note = paper.temperature_note(points)
    assert "temperature(s) 1;" in note and "0 of them at more than one temperature" in note
    assert "python -m benchmarks.sampling" in note and "--temperatures 0.2,0.4,0.6,0.8,1.0" in note
    assert paper.temperature_note([]).startswith("no committed sampling run")


# The method: the table's claims, checked against the code -----------------------------------------------


def test_the_contrast_table_has_a_row_for_each_way_the_two_differ():
    table = paper.contrast_table()
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


# The committed runs notebook 04 reads --------------------------------------------------------------------


def test_every_committed_sampling_file_gives_points():
    points = paper.committed_temperature_points(RESULTS)
    sources = {p.source for p in points}
    assert {"epyc-avx2/sampling_rules.json", "epyc-avx512/sampling.json"} <= sources
    assert all(p.speedup > 0 and p.mat >= 1 for p in points)
    assert any(len({q.temperature for q in points if q.run == p.run}) > 1 for p in points)


def field() -> BenchResults:
    return BenchResults.from_json(json.loads(FIELD.read_text()))


def test_what_notebook_04_says_of_the_field_run_holds():
    """04: hd is above the paper's number on four tasks of six here (a CPU and a small model: not the
    same experiment); the paper's way (hd-paper) drafts nearly 3 tokens a step, yet is slower than
    plain decoding on the CPU; mended and merged into a trie it does a little better."""
    run = field()
    assert run.tasks == list(TASKS) and run.questions == 12 and run.max_new_tokens == 256
    rows = paper.task_rows(run, ("hd", "hd-paper", "hd-paper+mend+trie"))
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
    assert (f"{e.value:.2f}", f"{e.low:.2f}", f"{e.high:.2f}") == ("0.82", "0.74", "0.90") and e.high < 1


def test_the_task_figure_says_what_each_bar_rests_on():
    """04's per-task figure: each task's label gives its questions and answer tokens, from the raw file."""
    sizes = paper.task_sizes(FIELD.with_name("field.raw.jsonl"))
    assert sizes["translation"] == (2, 93) and sizes["overall"][0] == 12
    assert sum(q for t, (q, _) in sizes.items() if t != "overall") == 12
    fig = paper.task_speedup_figure(field(), ("hd",), sizes)
    assert "translation<br>2 q, 93 tokens" in fig.data[0].x and "overall<br>12 q, 2642 tokens" in fig.data[0].x
    assert sizes["mt_bench"] == (2, 1024)
    # translation, from the run: MAT 2.02, 43 % from the context tier, 36 of one 57-token answer's tokens
    hd = field().methods["hd"].tasks["translation"]
    assert (round(hd.mat, 2), round(100 * hd.tier_share["context"])) == (2.02, 43)
    runs = [json.loads(line) for line in FIELD.with_name("field.raw.jsonl").read_text().splitlines()[1:]]
    answers = [r["runs"]["hd"][0] for r in runs if r["task"] == "translation"]
    assert sorted((a["tokens"], a["tiers"].get("context", 0)) for a in answers)[-1] == (57, 36)


def test_what_notebook_04_says_of_the_tasks_holds():
    """04: translation is the paper's slowest task, summarization and math its fastest; summarization
    is hdlib's slowest (43 % of its tokens from the context tier) and rag its fastest (60 %), and
    prompt lookup's fastest."""
    hd = field().methods["hd"].tasks
    by_paper = sorted(paper.PAPER_TASK_SPEEDUP, key=paper.PAPER_TASK_SPEEDUP.get)
    assert by_paper[0] == "translation" and by_paper[-2:] == ["math_reasoning", "summarization"]
    by_speed = sorted(hd, key=lambda t: -hd[t].speedup)
    assert by_speed[0] == "rag" and by_speed[1] == "mt_bench" and by_speed[-1] == "summarization"
    assert (round(hd["summarization"].speedup, 2), round(hd["rag"].speedup, 2)) == (1.40, 2.28)
    share = {t: round(100 * hd[t].tier_share["context"]) for t in ("summarization", "rag")}
    assert share == {"summarization": 43, "rag": 60}
    pld = field().methods["hf-pld"].tasks
    assert max(pld, key=lambda t: pld[t].speedup) == "rag"


def test_what_notebook_04_says_of_temperature_holds():
    """04: today's engine at five temperatures; the speedup falls from its first to its last point,
    where its interval holds 1; MAT falls likewise; a steeper fall than the paper's; every answer
    plain sampling's. And the older runs: those that do not record their rule did not write plain
    sampling's answers; the two rules' MAT at T = 0.5 (exercise 5)."""
    text = " ".join(" ".join(c.source for c in nbformat.read(NOTEBOOK_04, as_version=4).cells).split())
    kit = paper.kit_temperature_points(RESULTS)
    assert [p.temperature for p in kit] == [0.2, 0.4, 0.6, 0.8, 1.0]
    assert {p.rule for p in kit} == {"gumbel"} and {p.questions for p in kit} == {12}
    first, last = kit[0], kit[-1]
    said = (
        f"the speedup falls from {first.speedup:.2f}x at 0.2 to {last.speedup:.2f}x at 1.0, where its interval "
        f"holds 1 (on par with plain sampling), and MAT from {first.mat:.2f} to {last.mat:.2f}: a steeper fall"
    )
    assert said in text
    assert last.speedup_interval[0] <= 1 <= last.speedup_interval[1] and first.speedup_interval[0] > 1
    assert first.speedup / last.speedup > paper.PAPER_TEMPERATURE_SPEEDUP[0.1] / paper.PAPER_TEMPERATURE_SPEEDUP[1.0]
    assert all(p.identical == 1.0 for p in kit)
    points = paper.committed_temperature_points(RESULTS)
    assert all(p.identical == 0.0 for p in points if not p.rule and p.temperature > 0)
    rules = [p for p in points if p.source == "epyc-avx2/sampling_rules.json" and p.temperature == 0.5]
    at_half = {p.rule: round(p.mat, 2) for p in rules}
    assert at_half == {"gumbel": 1.93, "rejection": 1.83}


ORDERS = RESULTS / "xeon-amx" / "orders_at_16.json"  # the run notebook 04 opens with


def test_what_notebook_04_says_of_the_orders_holds():
    """04: ranked by MAT the committed run puts the paper's best order first; every context-first order
    beats every statistics-first one; statistics first, the context tier's share collapses; the model
    tier alone drafts rarely and falls furthest from speed to MAT; CRMS is the best order by MAT and
    RCMS takes the context tier's share; the run before the split ranked as well, with MCS second."""
    from hdlib.bench import compare_orders

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
    before = BenchResults.from_json(json.loads((RESULTS / "epyc-avx512" / "orders_at_16.json").read_text()))
    b_speed, b_mat = compare_orders(before), compare_orders(before, metric="mat")
    assert (round(b_speed.spearman, 2), round(b_mat.spearman, 2)) == (0.90, 0.86)
    assert b_speed.orders[1] == b_mat.orders[1] == "MCS" and b_mat.orders.index("M") == 4
