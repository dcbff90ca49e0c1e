"""The paper beside the kit, per task: the speedup of a committed `hdlib bench` run beside the HD paper's.

The paper's numbers are HD on Vicuna-7B (Spec-Bench, greedy) on an A100-class GPU, where a forward
pass over tens of tokens costs about what one over a single token does; hdlib's are the packaged
SmolLM2-135M on 2 CPU cores, where it does not. Side by side they say which tasks gain most on each;
their sizes are not the same experiment's. Every view names who made each number in it:

- `task_rows`: each task's speedup and MAT beside the paper's, and the run's overall;
- `task_table`: the same as a `Table`; `task_speedup_figure`: as grouped bars, each task's questions
  and tokens (`task_sizes`) under it;
- `task_ranking`: a run's tasks from its method's lowest speedup to its highest, each with its
  interval where the run has one, and what the ranking rests on;
- `machines_of`, `run_label`: the model and machine(s) that made a run's numbers.

The same paper against temperature is `hdlib.viz.paper_temperature`; its method beside hdlib's,
`hdlib.viz.contrasts`.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import plotly.graph_objects as go

from hdlib.bench import BenchResults, Results
from hdlib.bench.specbench import TASKS
from hdlib.models.cpu import machine_label
from hdlib.viz.bench import METHOD_COLORS
from hdlib.viz.table import Table

# Cho et al., "Lossless Acceleration of Large Language Models with Hierarchical Drafting based on
# Temporal Locality in Speculative Decoding" (Findings of NAACL 2025), their plotting script's numbers.
PAPER = "the paper: HD on Vicuna-7B, A100-class GPU"
PAPER_TASK_SPEEDUP = {
    "mt_bench": 1.62,
    "translation": 1.07,
    "summarization": 1.76,
    "qa": 1.39,
    "math_reasoning": 1.74,
    "rag": 1.51,
}
PAPER_MEAN_SPEEDUP = 1.52  # the mean of the six tasks
PAPER_COLOR = "#777777"
OVERALL = "overall"


# Who made a number ----------------------------------------------------------------------------------


def machines_of(results: Results) -> str:
    """The machine(s) a run's answers came from: one label, or each machine's with its questions."""
    r = BenchResults.of(results)
    if not r.by_machine:
        return machine_label(r.machine)
    parts = [f"{machine_label(m['machine'])} ({len(m['question_ids'])} questions)" for m in r.by_machine]
    return f"{len(parts)} machines: " + "; ".join(parts)


def run_label(results: Results, method: str = "hd") -> str:
    """Who made a run's numbers: "hdlib: hd, smollm2-135m in float32 on AMD EPYC, avx512, 2 threads"."""
    r = BenchResults.of(results)
    return f"hdlib: {method}, {r.model} in {r.dtype} on {machines_of(r)}"


# Per task ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskRow:
    """One task (or `OVERALL`): the paper's speedup, and each hdlib method's speedup and MAT (None where
    the paper or the run has no such task)."""

    task: str
    paper: float | None
    speedup: dict[str, float | None]
    mat: dict[str, float | None]


def task_rows(results: Results, methods: Sequence[str] = ("hd",)) -> list[TaskRow]:
    """Spec-Bench's six tasks in order, then `OVERALL` (the paper's mean; the run's overall speedup)."""
    r = BenchResults.of(results)
    missing = [m for m in methods if m not in r.methods]
    if missing:
        raise ValueError(f"the run has no method {', '.join(missing)}; it has {', '.join(r.methods)}")

    def of(task: str, method: str) -> tuple[float | None, float | None]:
        m = r.methods[method]
        metrics = m.overall if task == OVERALL else m.tasks.get(task)
        return (None, None) if metrics is None else (metrics.speedup, metrics.mat)

    rows = []
    for task in (*TASKS, OVERALL):
        paper = PAPER_MEAN_SPEEDUP if task == OVERALL else PAPER_TASK_SPEEDUP.get(task)
        found = {m: of(task, m) for m in methods}
        rows.append(TaskRow(task, paper, {m: s for m, (s, _) in found.items()}, {m: a for m, (_, a) in found.items()}))
    return rows


def _x(value: float | None, suffix: str = "x") -> str:
    return "-" if value is None else f"{value:.2f}{suffix}"


def task_table(results: Results, methods: Sequence[str] = ("hd",)) -> Table:
    """The paper's speedup per task beside each method's speedup (and MAT) in the run."""
    r = BenchResults.of(results)
    header = ("task", "the paper's HD (Vicuna-7B, GPU)", *(f"hdlib {m} (CPU): speedup, MAT" for m in methods))
    rows = tuple(
        (row.task, _x(row.paper), *(f"{_x(row.speedup[m])}, {_x(row.mat[m], '')}" for m in methods))
        for row in task_rows(r, methods)
    )
    title = (
        f"Speedup over plain decoding per task. The paper: HD on Vicuna-7B, greedy, an A100-class GPU. "
        f"hdlib: {r.model} in {r.dtype} on {machines_of(r)}, {r.questions} questions, "
        f"{r.max_new_tokens} tokens per turn. '-': no such task in the run."
    )
    return Table(title, header, rows)


def task_ranking(results: Results, method: str = "hd") -> str:
    """A run's tasks from `method`'s lowest speedup to its highest, each with its 95 % interval over
    the task's questions where the run has one (`hdlib.bench.intervals`: none under 6 questions), and
    what the ranking rests on: "... summarization 1.40x, ..., rag 2.28x (2 questions a task, 1 repeat:
    too few for an interval; a ranking of these questions, not of the tasks)". Where the run has
    intervals, it says which tasks they tell apart (none, where every two intervals overlap)."""
    r = BenchResults.of(results)
    if method not in r.methods:
        raise ValueError(f"the run has no method {method}; it has {', '.join(r.methods)}")
    tasks = r.methods[method].tasks
    ranked = sorted(tasks, key=lambda t: tasks[t].speedup)
    estimates = {t: tasks[t].intervals.get("speedup") for t in ranked}
    said = ", ".join(
        f"{t} {e.describe(suffix='x') if e is not None and e.has_interval else _x(tasks[t].speedup)}"
        for t, e in estimates.items()
    )
    per_task = sorted({e.n for e in estimates.values() if e is not None}) or [r.questions // max(len(tasks), 1)]
    sizes = f"{'-'.join(map(str, per_task))} questions a task, {r.repeats} repeat{'s' * (r.repeats != 1)}"
    if not all(e is not None and e.has_interval for e in estimates.values()):
        return f"{said} ({sizes}: too few for an interval; a ranking of these questions, not of the tasks)"
    apart = [
        (a, b) for i, a in enumerate(ranked) for b in ranked[i + 1 :]
        if estimates[a].high < estimates[b].low  # type: ignore[union-attr,operator]
    ]  # fmt: skip
    told = "; ".join(f"{b} above {a}" for a, b in apart) if apart else "no two tasks told apart: every two overlap"
    return f"{said} ({sizes}, 95 % intervals over each task's questions: {told})"


def task_sizes(raw: str | Path, method: str = "ar") -> dict[str, tuple[int, int]]:
    """What each task's bars rest on, from a bench run's raw records (`NAME.raw.jsonl`): task ->
    (questions, tokens `method` answered), and the same for "overall"."""
    sizes: dict[str, tuple[int, int]] = {}
    for line in Path(raw).read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if "runs" not in record:
            continue
        tokens = sum(turn["tokens"] for turn in record["runs"][method])
        for key in (record["task"], OVERALL):
            questions, total = sizes.get(key, (0, 0))
            sizes[key] = (questions + 1, total + tokens)
    return sizes


def task_speedup_figure(
    results: Results, methods: Sequence[str] = ("hd",), sizes: Mapping[str, tuple[int, int]] | None = None
) -> go.Figure:
    """Grouped bars per task: the paper's HD (grey) beside each of the run's methods; the title says
    which model on which machine made which bars, and `sizes` (`task_sizes`), under each task, how
    many questions and answer tokens its bars rest on."""
    r = BenchResults.of(results)
    rows = task_rows(r, methods)
    sizes = sizes or {}
    x = [f"{row.task}<br>{sizes[row.task][0]} q, {sizes[row.task][1]} tokens" if row.task in sizes else row.task
         for row in rows]  # fmt: skip
    fig = go.Figure()
    fig.add_bar(
        name=PAPER,
        x=x,
        y=[row.paper for row in rows],
        marker_color=PAPER_COLOR,
        text=[_x(row.paper) for row in rows],
        textposition="outside",
        hovertemplate="the paper (Vicuna-7B, GPU)<br>%{x}: %{y:.2f}x<extra></extra>",
    )
    for i, method in enumerate(methods):
        fig.add_bar(
            name=f"hdlib: {method}, {r.model}, CPU",
            x=x,
            y=[row.speedup[method] for row in rows],
            customdata=[row.mat[method] for row in rows],
            marker_color=METHOD_COLORS[i % len(METHOD_COLORS)],
            text=[_x(row.speedup[method]) for row in rows],
            textposition="outside",
            hovertemplate=f"hdlib {method}<br>%{{x}}: %{{y:.2f}}x, MAT %{{customdata:.2f}}<extra></extra>",
        )
    fig.add_hline(
        y=1.0,
        line_dash="dash",
        line_color="#555555",
        annotation_text="plain decoding",
        annotation_position="bottom right",
    )
    fig.update_layout(
        barmode="group",
        title=(
            "Speedup per task: the paper's HD (Vicuna-7B, A100-class GPU) beside hdlib's"
            f"<br><sup>hdlib: {html.escape(r.model)} in {r.dtype} on {html.escape(machines_of(r))}, "
            f"{r.questions} questions, {r.max_new_tokens} tokens per turn</sup>"
        ),
        yaxis_title="speedup over plain decoding (x)",
        template="plotly_white",
        legend={"orientation": "h", "y": -0.15},
        height=480,
        margin={"t": 90},
    )
    return fig
