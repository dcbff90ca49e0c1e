"""Figures of a benchmark's results, and the HTML report that holds them.

Every figure function is pure: the `BenchResults` of `hdlib.bench.run_benchmark` (or the JSON that
`hdlib bench --out` writes, as `json.load` reads it) in, a plotly `Figure` out. `write_html_report` puts them in one
self-contained HTML file, plotly.js inlined once, so it opens offline.
"""

from __future__ import annotations

import html
from pathlib import Path

import plotly.graph_objects as go

from hdlib.bench import BenchResults, MethodResult, Metrics, OrderComparison, Results, fairness_line, split_budget
from hdlib.bench.reports import comparisons_table, design_line, number, overall_rows, questions_of, tier_order
from hdlib.databases.registry import find_tier, known_tiers
from hdlib.store import write_text_atomic
from hdlib.tiers import BONUS, DEFAULT_TIERS, Tier

BASELINE = "ar"
# Okabe-Ito without the tier colours' greens/blues first, so methods stay apart from tiers.
METHOD_COLORS = ("#E69F00", "#56B4E9", "#D55E00", "#000000", "#F0E442", "#009E73", "#0072B2", "#CC79A7", "#999999")
UNKNOWN_TIER = "#999999"  # a tier the results name but this process does not know (not registered)


def _methods(results: Results) -> dict[str, MethodResult]:
    return BenchResults.of(results).methods


def tier_of(name: str) -> Tier | None:
    """The tier a results file names (the bonus token included), if this process knows it."""
    return BONUS if name == BONUS.name else find_tier(name)


def tier_color(name: str) -> str:
    tier = tier_of(name)
    return tier.color if tier is not None else UNKNOWN_TIER


def _layout(fig: go.Figure, title: str, yaxis: str) -> go.Figure:
    fig.update_layout(title=title, yaxis_title=yaxis, template="plotly_white", legend_title_text="method", height=420)
    return fig


def _error_bars(metrics: list[Metrics], key: str) -> dict[str, object] | None:
    """Each bar's 95 % interval as plotly's asymmetric error bars; None where the results have none."""
    found = [m.intervals.get(key) for m in metrics]
    if any(e is None for e in found):
        return None
    # a bar over too few questions for an interval gets none (plotly draws no whisker for a null)
    return {
        "type": "data",
        "symmetric": False,
        "array": [e.high - e.value if e.has_interval else None for e in found],  # type: ignore[union-attr, operator]
        "arrayminus": [e.value - e.low if e.has_interval else None for e in found],  # type: ignore[union-attr, operator]
        "thickness": 1.2,
        "width": 3,
    }


def speedup_figure(results: Results) -> go.Figure:
    """Speedup against `ar` per task (and overall), one group of bars per task, one bar per method,
    each with its 95 % interval over questions where the results have one (the questions in the
    task's label)."""
    r = BenchResults.of(results)
    x = [f"{t} ({n})" if (n := questions_of(r, t)) else t for t in r.tasks]
    x.append(f"overall ({n})" if (n := questions_of(r)) else "overall")
    fig = go.Figure()
    for i, (name, m) in enumerate((n, m) for n, m in r.methods.items() if n != BASELINE):
        shown = [*(m.tasks[t] for t in r.tasks), m.overall]
        color = METHOD_COLORS[i % len(METHOD_COLORS)]
        fig.add_bar(
            name=name, x=x, y=[s.speedup for s in shown], marker_color=color, error_y=_error_bars(shown, "speedup"),
            hovertemplate=f"{name}<br>%{{x}}: %{{y:.2f}}x<extra></extra>",
        )  # fmt: skip
    fig.add_hline(y=1.0, line_dash="dash", line_color="#555555", annotation_text="ar", annotation_position="top left")
    fig.update_layout(barmode="group")
    return _layout(fig, "Speedup against plain decoding (ar), per task", "speedup (x)")


def mat_figure(results: Results) -> go.Figure:
    """Mean accepted tokens per step (bonus included) of each method, overall."""
    methods = _methods(results)
    names = list(methods)
    mats = [methods[n].overall.mat for n in names]
    fig = go.Figure(
        go.Bar(
            x=names,
            y=mats,
            error_y=_error_bars([methods[n].overall for n in names], "mat"),
            text=[f"{v:.2f}" for v in mats],
            textposition="outside",
            marker_color="#0072B2",
            hovertemplate="%{x}: MAT %{y:.3f}<extra></extra>",
        )
    )
    fig.update_layout(showlegend=False)
    return _layout(fig, "Mean accepted tokens per step (MAT), overall", "tokens per step")


def tier_share_figure(results: Results) -> go.Figure:
    """Share of the emitted tokens by tier (the bonus token's too), stacked, per hdlib method; one
    bar per tier the results name, in its colour.

    Transformers' methods do not say where a token came from and are left out.
    """
    methods = {n: m for n, m in _methods(results).items() if m.overall.tier_share}
    names = list(methods)
    asked = {t for n in names for t in _asked(n)}  # a tier that never got a token accepted shows, empty
    fig = go.Figure()
    shown = asked | {t for m in methods.values() for t in m.overall.tier_share}
    for tier in tier_order(shown, known_tiers()):  # bottom to top, in the registry's order
        y = [methods[n].overall.tier_share.get(tier, 0.0) for n in names]
        fig.add_bar(
            name=tier,
            x=names,
            y=y,
            marker_color=tier_color(tier),
            hovertemplate=f"%{{x}}<br>{tier}: %{{y:.1%}}<extra></extra>",
        )
    fig = _layout(fig, "Where the emitted tokens came from, overall", "share of tokens")
    fig.update_layout(barmode="stack", legend_title_text="tier", yaxis_tickformat=".0%")
    return fig


def _asked(method: str) -> list[str]:
    """The names of the tiers an hd method asks, as far as this process knows their letters."""
    base = split_budget(method)[0]
    if base == "hd":
        return [t.name for t in DEFAULT_TIERS]
    found = (find_tier(letter) for letter in base[3:]) if base.startswith("hd:") else ()
    return [t.name for t in found if t is not None]


def order_of(name: str) -> str:
    """The tier letters of an `hd:ORDER` method, a fixed budget dropped: `hd:SC@16` -> "SC"."""
    return split_budget(name)[0][3:]


def order_methods(results: Results) -> list[str]:
    """The `hd:ORDER` methods of the results (`@N` or not), fastest first."""
    methods = _methods(results)
    named = [n for n in methods if n.startswith("hd:")]
    return sorted(named, key=lambda n: -methods[n].overall.speedup)


def order_ablation_figure(results: Results) -> go.Figure:
    """The tier orders (`hd:ORDER` methods) sorted by overall speedup, each bar in its first tier's colour."""
    methods = _methods(results)
    names = order_methods(results)[::-1]  # plotly draws horizontal bars bottom up: fastest on top
    colors = [tier_color(order_of(n)[0]) for n in names]
    fig = go.Figure(
        go.Bar(
            x=[methods[n].overall.speedup for n in names],
            y=names,
            orientation="h",
            marker_color=colors,
            text=[f"{methods[n].overall.speedup:.2f}x, MAT {methods[n].overall.mat:.2f}" for n in names],
            textposition="auto",
            hovertemplate="%{y}: %{x:.2f}x<extra></extra>",
        )
    )
    fig.add_vline(x=1.0, line_dash="dash", line_color="#555555")
    fig.update_layout(showlegend=False, height=max(300, 40 + 28 * len(names)))
    fig.update_layout(title="Tier order ablation: speedup by order (first tier's colour)", xaxis_title="speedup (x)")
    fig.update_layout(template="plotly_white")
    return fig


def order_comparison_figure(comparison: OrderComparison, reference: str = "paper") -> go.Figure:
    """Each order of a run against the reference (the paper's speedups), one dot in its first
    tier's colour, with the rank correlations in the title; a rising line of dots is agreement."""
    orders = comparison.orders
    fig = go.Figure(
        go.Scatter(
            x=[comparison.reference[o] for o in orders],
            y=[comparison.speedups[o] for o in orders],
            mode="markers+text",
            text=orders,
            textposition="top center",
            marker={"size": 12, "color": [tier_color(o[0]) for o in orders]},
            hovertemplate="%{text}: " + reference + " %{x:.2f}x, here %{y:.2f}<extra></extra>",
        )
    )
    fig.update_layout(
        title=(
            f"orders here against the {reference}: Spearman {comparison.spearman:.2f}, "
            f"Kendall {comparison.kendall:.2f} "
            f"({len(orders)} orders)"
        ),
        xaxis_title=f"{reference}'s speedup",
        yaxis_title=f"{'MAT' if comparison.metric == 'mat' else comparison.metric} here",
        template="plotly_white",
        height=420,
        showlegend=False,
    )
    return fig


def report_figures(results: Results) -> dict[str, go.Figure]:
    """Every figure of the report by name; the order ablation only when the results hold hd:ORDER methods."""
    figures = {
        "speedup": speedup_figure(results),
        "mat": mat_figure(results),
        "tier_share": tier_share_figure(results),
    }
    if order_methods(results):
        figures["order_ablation"] = order_ablation_figure(results)
    return figures


def _metrics_table(results: Results) -> str:
    head = ["method", "speedup", "MAT", "tokens/s", "draft ms/step", "overhead", "identical to ar", "tier share"]
    rows = []
    for row in overall_rows(results):
        cells = [
            row.method,
            number(row.speedup, suffix="x"),
            number(row.mat),
            number(row.tokens_per_s, ".1f"),
            "-" if row.draft_ms is None else f"{row.draft_ms:.2f}",
            "-" if row.overhead_frac is None else f"{100 * row.overhead_frac:.1f} %",
            f"{100 * row.identical_frac:.0f} %",
            row.shares,
        ]
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    header = "<tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"
    return f"<table>{header}{''.join(rows)}</table>"


def report_html(results: Results, title: str = "hdlib bench") -> str:
    """The whole report as one HTML page: settings, overall metrics, fairness line, the figures."""
    r = BenchResults.of(results)
    settings = (
        f"model {r.model} on {r.device}{_cpu(r)}, temperature {r.temperature:g}, "
        f"at most {r.max_new_tokens} new tokens, {r.questions} questions"
    )
    figures = []
    for i, fig in enumerate(report_figures(r).values()):
        figures.append(fig.to_html(full_html=False, include_plotlyjs=(i == 0)))  # plotly.js once, inline
    fairness = "<br>".join(html.escape(line) for line in fairness_line(r).splitlines())
    design = html.escape(design_line(r))
    compared = "<br>".join(html.escape(line) for line in comparisons_table(r).splitlines())
    style = (
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}td:first-child{text-align:left}"
    )
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1><p>{html.escape(settings)}</p>"
        f"<p>{design}</p>{_metrics_table(r)}<p>{compared}</p><p>{fairness}</p>{''.join(figures)}</body></html>"
    )


def write_html_report(results: Results, path: str | Path, title: str = "hdlib bench") -> Path:
    """Write `report_html` to `path` atomically; returns the path."""
    return write_text_atomic(path, report_html(results, title))


def _cpu(results: BenchResults) -> str:
    """The CPU as ' (name, N threads)' where the results record it (a run with no `machine` recorded gives '')."""
    machine = results.machine
    if not machine:
        return ""
    return f" ({machine.get('cpu', '?')}, {machine.get('threads', '?')} threads)"
