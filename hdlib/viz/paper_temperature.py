"""The paper beside the kit, against temperature: hdlib's speedup and MAT beside the HD paper's curve.

The paper's curve is HD on Vicuna-7B (Spec-Bench) on an A100-class GPU at ten temperatures; hdlib's
points are its `hd` against plain sampling, the packaged SmolLM2-135M on a CPU:

- `TemperaturePoint`: one temperature of one committed run;
- `temperature_points`: the points of one results file (`benchmarks/sampling.py`'s or
  `benchmarks/sampling_rules.py`'s); `kit_temperature_points`: today's engine's run;
  `committed_temperature_points`: every committed sampling run;
- `temperature_figure`: speedup and MAT against temperature, the paper's curve beside them;
  `temperature_note`: what the runs cover, said plainly, and the command that measures more.
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

from hdlib.bench import MethodResult
from hdlib.models.cpu import machine_label
from hdlib.viz.bench import METHOD_COLORS
from hdlib.viz.paper_tasks import PAPER, PAPER_COLOR

# The paper's sampling curve: tokens per second of plain decoding (AR) and HD at ten temperatures,
# Vicuna-7B on Spec-Bench, as the authors' plotting script holds them (scripts/visualize.py,
# draw_temperature); the speedup at each is their ratio, 1.47x at T = 0.1 falling to 1.34x at 1.0.
PAPER_TEMPERATURES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
PAPER_AR_TOKENS_PER_S = (55.02, 55.34, 55.45, 54.79, 55.29, 55.03, 55.48, 54.92, 55.23, 54.7)
PAPER_HD_TOKENS_PER_S = (80.91, 80.69, 79.42, 78.6, 79.07, 77.98, 77.86, 75.78, 75.07, 73.48)
PAPER_TEMPERATURE_SPEEDUP = {
    t: hd / ar for t, ar, hd in zip(PAPER_TEMPERATURES, PAPER_AR_TOKENS_PER_S, PAPER_HD_TOKENS_PER_S)
}
MORE_TEMPERATURES = (
    "python -m benchmarks.sampling --questions PATH --split report --per-task 2 --max-new-tokens 128 "
    "--temperatures 0.2,0.4,0.6,0.8,1.0"
)
KIT_SAMPLING = "xeon-amx/sampling.json"  # today's engine at five of the paper's temperatures (benchmarks/sampling.py)


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
            interval = (spread.low, spread.high) if spread and spread.has_interval else None
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
