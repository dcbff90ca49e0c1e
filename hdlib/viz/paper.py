"""The paper beside the kit: the HD paper's numbers and method beside hdlib's runs and engine.

Three views, each naming who made every number in it:

- per task: the speedup of a committed `hdlib bench` run beside the paper's (`task_rows`,
  `task_table`, `task_speedup_figure`);
- against temperature: hdlib's speedup and MAT beside the paper's curve of ten temperatures, today's
  engine's run (`kit_temperature_points`) or every committed sampling run (`temperature_points`,
  `committed_temperature_points`), drawn by `temperature_figure` and summed up by `temperature_note`;
- the method: the paper's HD (its authors' code) and hdlib's, point by point, with where hdlib does
  each (`CONTRASTS`, `contrast_table`).

The paper's numbers are HD on Vicuna-7B (Spec-Bench, greedy) on an A100-class GPU, where a forward
pass over tens of tokens costs about what one over a single token does; hdlib's are the packaged
SmolLM2-135M on 2 CPU cores, where it does not. Side by side they say which tasks gain most on each;
their sizes are not the same experiment's.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from hdlib.bench import BenchResults, MethodResult, Results
from hdlib.bench.specbench import TASKS
from hdlib.models.cpu import machine_label
from hdlib.viz.bench import METHOD_COLORS

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
# The paper's sampling curve: tokens per second of plain decoding (AR) and HD at ten temperatures,
# Vicuna-7B on Spec-Bench, as the authors' plotting script holds them (scripts/visualize.py,
# draw_temperature); the speedup at each is their ratio, 1.47x at T = 0.1 falling to 1.34x at 1.0.
PAPER_TEMPERATURES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
PAPER_AR_TOKENS_PER_S = (55.02, 55.34, 55.45, 54.79, 55.29, 55.03, 55.48, 54.92, 55.23, 54.7)
PAPER_HD_TOKENS_PER_S = (80.91, 80.69, 79.42, 78.6, 79.07, 77.98, 77.86, 75.78, 75.07, 73.48)
PAPER_TEMPERATURE_SPEEDUP = {
    t: hd / ar for t, ar, hd in zip(PAPER_TEMPERATURES, PAPER_AR_TOKENS_PER_S, PAPER_HD_TOKENS_PER_S)
}
PAPER_COLOR = "#777777"
OVERALL = "overall"
MORE_TEMPERATURES = (
    "python -m benchmarks.sampling --questions PATH --split report --per-task 2 --max-new-tokens 128 "
    "--temperatures 0.2,0.4,0.6,0.8,1.0"
)
KIT_SAMPLING = "xeon-amx/sampling.json"  # today's engine at five of the paper's temperatures (benchmarks/sampling.py)


@dataclass(frozen=True)
class Table:
    """A small table with a title: HTML in a notebook (`_repr_html_`), Markdown as text (`str`)."""

    title: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def _repr_html_(self) -> str:
        head = "".join(f"<th style='text-align:left'>{html.escape(h)}</th>" for h in self.header)
        body = "".join(
            "<tr>" + "".join(f"<td style='text-align:left'>{html.escape(c)}</td>" for c in row) + "</tr>"
            for row in self.rows
        )
        return f"<p><b>{html.escape(self.title)}</b></p><table><tr>{head}</tr>{body}</table>"

    def __str__(self) -> str:
        lines = [self.title, "", "| " + " | ".join(self.header) + " |", "|" + "---|" * len(self.header)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in self.rows])


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


# Against temperature ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TemperaturePoint:
    """`hd` against plain sampling at one temperature, in one committed run."""

    temperature: float
    speedup: float
    mat: float
    identical: float  # share of questions answered as plain sampling answered them, token for token
    source: str  # the results file, e.g. "epyc-avx2/sampling_rules.json"
    machine: str  # `hdlib.models.cpu.machine_label`
    rule: str  # the sampling rule ("gumbel", "rejection"); "" where the file does not say
    date: str
    questions: int
    speedup_interval: tuple[float, float] | None = None  # 95 % over questions, where the run gives one

    @property
    def run(self) -> str:
        """The run the point belongs to: its file and rule, its date and machine."""
        rule = f", {self.rule}" if self.rule else ", rule not recorded"
        return f"{self.source}{rule} ({self.date}, {self.machine})"


def temperature_points(data: Mapping[str, Any], source: str = "") -> list[TemperaturePoint]:
    """The points of one results file: `benchmarks/sampling.py`'s (one bench run per temperature,
    method `hd` against `ar`) or `benchmarks/sampling_rules.py`'s (each rule's summary per temperature)."""
    points = []
    for run in data.get("runs", []):
        temperature = float(run["temperature"])
        if "methods" in run and "hd" in run["methods"]:  # sampling.py
            hd = MethodResult.from_json(run["methods"]["hd"]).overall
            machine = machine_label(run.get("machine") or data.get("machine"))
            date = str(run.get("date", data.get("date", "?")))
            rule = str(run.get("sampling_rule", ""))
            spread = hd.intervals.get("speedup")
            interval = (spread.low, spread.high) if spread else None
            points.append(
                TemperaturePoint(
                    temperature,
                    hd.speedup,
                    hd.mat,
                    hd.identical_frac,
                    source,
                    machine,
                    rule,
                    date,
                    run["questions"],
                    interval,
                )
            )
        for rule, s in run.get("summary", {}).items():  # sampling_rules.py
            points.append(
                TemperaturePoint(
                    temperature,
                    float(s["speedup"]),
                    float(s["mat"]),
                    float(s["identical_frac"]),
                    source,
                    machine_label(data.get("machine")),
                    str(rule),
                    str(data.get("date", "?")),
                    int(data.get("questions", 0)),
                )
            )
    return points


SAMPLING_FILES = ("sampling.json", "sampling_rules.json")


def committed_temperature_points(folder: str | Path) -> list[TemperaturePoint]:
    """Every point of the sampling results under `folder` (`benchmarks/results`: one folder per machine)."""
    folder = Path(folder)
    points = []
    for path in sorted(p for name in SAMPLING_FILES for p in folder.glob(f"*/{name}")):
        points += temperature_points(json.loads(path.read_text()), str(path.relative_to(folder)))
    return sorted(points, key=lambda p: (p.source, p.rule, p.temperature))


def kit_temperature_points(folder: str | Path, file: str = KIT_SAMPLING) -> list[TemperaturePoint]:
    """The points of today's engine (`KIT_SAMPLING` under `folder`, `benchmarks/results`)."""
    return sorted(temperature_points(json.loads((Path(folder) / file).read_text()), file), key=lambda p: p.temperature)


def _by_run(points: Iterable[TemperaturePoint]) -> dict[str, list[TemperaturePoint]]:
    runs: dict[str, list[TemperaturePoint]] = {}
    for p in points:
        runs.setdefault(p.run, []).append(p)
    return runs


def temperature_figure(points: Sequence[TemperaturePoint]) -> go.Figure:
    """Speedup (left) and MAT (right) against temperature: one line per run of hdlib's `hd` (SmolLM2-135M
    on a CPU), the speedup with its 95 % interval over questions where the run gives one, and on the
    left the paper's curve of ten temperatures (HD, Vicuna-7B, GPU), dashed: the paper gives no MAT
    against temperature."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("speedup over plain sampling", "MAT (tokens per step)"))
    for i, (run, pts) in enumerate(_by_run(points).items()):
        pts = sorted(pts, key=lambda p: p.temperature)
        color = METHOD_COLORS[i % len(METHOD_COLORS)]
        t = [p.temperature for p in pts]
        bars = None
        if all(p.speedup_interval for p in pts):
            bars = {
                "type": "data",
                "symmetric": False,
                "array": [p.speedup_interval[1] - p.speedup for p in pts],
                "arrayminus": [p.speedup - p.speedup_interval[0] for p in pts],
            }
        for col, y in ((1, [p.speedup for p in pts]), (2, [p.mat for p in pts])):
            fig.add_scatter(
                x=t,
                y=y,
                error_y=bars if col == 1 else None,
                mode="lines+markers",
                name=f"hdlib hd: {run}",
                legendgroup=run,
                showlegend=col == 1,
                marker={"color": color, "size": 9},
                line={"color": color},
                hovertemplate=f"{html.escape(run)}<br>T=%{{x:g}}: %{{y:.2f}}<extra></extra>",
                row=1,
                col=col,
            )
    temps = sorted(PAPER_TEMPERATURE_SPEEDUP)
    fig.add_scatter(
        x=temps,
        y=[PAPER_TEMPERATURE_SPEEDUP[t] for t in temps],
        mode="lines+markers+text",
        name=f"{PAPER} (its ten temperatures)",
        text=[f"{PAPER_TEMPERATURE_SPEEDUP[t]:.2f}x" if t in (temps[0], temps[-1]) else "" for t in temps],
        textposition="top center",
        marker={"color": PAPER_COLOR, "size": 11, "symbol": "diamond"},
        line={"color": PAPER_COLOR, "dash": "dash"},
        hovertemplate="the paper (Vicuna-7B, GPU)<br>T=%{x:g}: %{y:.2f}x<extra></extra>",
        row=1,
        col=1,
    )
    fig.add_hline(y=1.0, line_dash="dot", line_color="#555555", row=1, col=1)
    fig.add_annotation(
        text="the paper gives no MAT<br>against temperature",
        xref="x2 domain",
        yref="y2 domain",
        x=0.98,
        y=0.98,
        showarrow=False,
        font={"color": PAPER_COLOR},
    )
    fig.update_xaxes(title_text="temperature", range=[-0.05, 1.1])
    fig.update_layout(
        title=(
            "Against temperature: hdlib's hd beside the paper's trend"
            "<br><sup>hdlib: SmolLM2-135M on a CPU, one line per committed run; the paper: HD, Vicuna-7B, GPU</sup>"
        ),
        template="plotly_white",
        legend={"orientation": "h", "y": -0.25},
        height=600,
        margin={"t": 110},
    )
    return fig


def temperature_note(points: Sequence[TemperaturePoint]) -> str:
    """What the committed runs cover, said plainly, and the command that measures more."""
    runs = _by_run(points)
    covered = sorted({p.temperature for p in points})
    many = [run for run, pts in runs.items() if len({p.temperature for p in pts}) > 1]
    head = (
        f"{len(runs)} committed run(s) of hdlib's hd at temperature(s) {', '.join(f'{t:g}' for t in covered)}; "
        f"{len(many)} of them at more than one temperature"
        if points
        else "no committed sampling run"
    )
    return (
        f"{head}. The paper's curve has ten temperatures, 0.1 to 1.0: HD "
        f"{PAPER_HD_TOKENS_PER_S[0]:.0f} to {PAPER_HD_TOKENS_PER_S[-1]:.0f} tokens/s against plain decoding's "
        f"{min(PAPER_AR_TOKENS_PER_S):.1f} to {max(PAPER_AR_TOKENS_PER_S):.1f}, "
        f"{PAPER_TEMPERATURE_SPEEDUP[0.1]:.2f}x falling to {PAPER_TEMPERATURE_SPEEDUP[1.0]:.2f}x. "
        f"To measure a trend on this machine: {MORE_TEMPERATURES}"
    )


# The method -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Contrast:
    """One way the paper's HD (as its authors' code runs it) and hdlib's differ."""

    aspect: str
    paper: str
    hdlib: str
    where: str  # where hdlib does it


CONTRASTS: tuple[Contrast, ...] = (
    Contrast(
        "drafts",
        "at most 7 drafts of 4 tokens, laid side by side as separate chains (each sees only its own "
        "earlier tokens); the longest accepted chain is kept",
        "every tier's drafts merged into one trie rooted at the newest token (a shared prefix is verified "
        "once); the longest accepted path is kept",
        "hdlib.engine.tree.DraftTree, hdlib.engine.drafter",
    ),
    Contrast(
        "budget",
        "fixed: 7 drafts x 4 = 28 draft tokens a step",
        "auto (the default): the value-ranked tree verifies the nodes most likely to be accepted, as many "
        "as pay under the forward time measured on this machine, chosen each step; a fixed budget when "
        "asked (budget=16, @16)",
        "hdlib.engine.value.ValueBudget",
    ),
    Contrast(
        "keys",
        "the newest token (context store, model database); the newest 2 tokens, else 1 (statistics)",
        "the longest suffix of the text found: 4 down to 2 tokens (context; model, in its 5-grams), "
        "8 down to 1 (statistics)",
        "ContextSettings, ModelSettings, StatisticsSettings",
    ),
    Contrast(
        "context store",
        "the request's 5-grams (the one ending at the newest token left out) and the n-grams a Lookahead "
        "window (7 columns of 4 levels, 28 tokens in every pass) harvests; at most 7 per key, least "
        "recently seen dropped",
        "the request's own n-grams, prompt and answer so far, each new one at once; the 4 most recent "
        "continuations per key, up to 10 tokens; a Lookahead window only with +window (every pass at a "
        "fixed budget; with the auto budget only where it pays)",
        "hdlib.tiers.context, hdlib.tiers.window",
    ),
    Contrast(
        "model database",
        "the top 100,000 5-grams by document frequency of the target model's answers to English OASST1 "
        "prompts (their script stops after 11 prompts)",
        "the top 5-grams by document frequency of the model's own greedy answers to ShareGPT prompts "
        "(the shipped one: 640 answers, 53,626 5-grams)",
        "hdlib.databases.modeldb, data/db/",
    ),
    Contrast(
        "statistics",
        "REST's datastore: a suffix array over UltraChat (about 12 GB)",
        "hdlib's numpy suffix array over ShareGPT's train split, chat-templated (27.4 M tokens)",
        "hdlib.databases.statsdb, hdlib.tiers.suffix",
    ),
    Contrast(
        "recycled guesses",
        "none",
        "a fourth tier, R, asked after the context: the model's 8 most likely next tokens after each token "
        "and token pair from its recent passes (Token Recycling's idea), learned during the answer",
        "hdlib.tiers.recycling",
    ),
    Contrast(
        "order",
        "context, model, statistics (C, M, S)",
        "context, recycled, model, statistics (C, R, M, S); any permutation by name: hd:SCM",
        "hdlib.tiers.DEFAULT_TIERS",
    ),
    Contrast(
        "hierarchy",
        "no gate: a lower tier is asked only while the 7 drafts are not found",
        "at a fixed budget the same (a tier is asked only while the budget is not full); with the auto "
        "budget a gate asks a tier after the first only where its gain in steps like this one pays for "
        "its lookup time",
        "hdlib.engine.gate.TierGate",
    ),
    Contrast(
        "duplicates",
        "drafts not de-duplicated across tiers; after a part-full context store the model database "
        "gives its least frequent entries",
        "a node once in the trie, with every tier that drafted it; each tier's continuations most "
        "frequent (or most recent) first",
        "hdlib.engine.tree, hdlib.tiers.ngram.DraftSet",
    ),
    Contrast(
        "sampling (T > 0)",
        "the drafts tried in order, each token accepted with probability p(x), else removed and the rest "
        "renormalised (the standard lossless rule for deterministic drafts); their first steps verify "
        "against a token sampled beforehand, a bias",
        "the Gumbel rule by default (for a seed, HD's answer is plain sampling's, token for token); "
        "recursive rejection sampling on request (the same distribution)",
        "hdlib.engine.sampling",
    ),
    Contrast(
        "the paper's way in hdlib",
        "bench method hd-paper: their context store, keys, window, 7 chains of 4 and defects, with "
        "hdlib's databases, on hdlib's verifier; +mend mends the defects, +trie merges shared prefixes",
        "bench methods hd (all of the above), hd:CMS@28 (hdlib's tiers at the paper's budget), "
        "hd+no-recycling, hd+window",
        "hdlib.bench.paper, docs/peers.md",
    ),
)


def contrast_table(contrasts: Sequence[Contrast] = CONTRASTS) -> Table:
    """The paper's HD vs hdlib's HD, one row per aspect."""
    rows = tuple((c.aspect, c.paper, c.hdlib, c.where) for c in contrasts)
    return Table(
        "The paper's HD (its authors' code) vs hdlib's HD",
        ("", "the paper's HD", "hdlib's HD", "in hdlib"),
        rows,
    )
