"""The printed report of a benchmark: how the run was made, tables by task (each number with its 95 %
interval over questions, where the results have one), every overall metric, the paired comparisons,
whether `ar` is a fair baseline and whether every method's output is `ar`'s.

The overall and the per-tier tables' rows (`overall_rows`, `tier_rows`) are the HTML report's
(`hdlib.viz.bench`) and docs/benchmarks.md's (benchmarks/bench_tables.py) too, each format its own
formatter; they are read from the results' JSON, as the docs read the committed files."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hdlib import presentation
from hdlib.bench.arms import twins
from hdlib.bench.intervals import MARGIN, Estimate, aa_margin
from hdlib.bench.methods import Method
from hdlib.bench.records import WITH_INTERVALS, BenchResults, Metrics, Results, TierMetrics
from hdlib.models.cpu import machine_label
from hdlib.tiers import BONUS, DEFAULT_TIERS, Tier

FAIRNESS_LIMIT = 0.05  # `ar` may be at most this much slower than `hf` to count as a fair baseline


def number(value: Estimate | float, fmt: str = ".2f", suffix: str = "") -> str:
    """A number, with its 95 % interval where it has one: '1.85x [1.62, 2.10]' (`suffix` "x")."""
    return value.describe(fmt, suffix) if isinstance(value, Estimate) else f"{value:{fmt}}{suffix}"


def cell(m: Metrics, metric: str, fmt: str = ".2f", suffix: str = "") -> str:
    """A metric's value, with its 95 % interval where the results have one: '1.85x [1.62, 2.10]'."""
    return number(m.intervals.get(metric, getattr(m, metric)), fmt, suffix)


def tier_order(names: Iterable[str], known: Iterable[Tier] = DEFAULT_TIERS) -> list[str]:
    """Tier names: the `known` tiers' in their order (by default hdlib's, in the order `hd` asks them),
    the others sorted after them, the bonus token last."""
    names = set(names)
    order = [t.name for t in known if t.name in names]
    return order + sorted(names - {*order, BONUS.name}) + ([BONUS.name] if BONUS.name in names else [])


@dataclass(frozen=True)
class OverallRow:
    """One method's overall numbers."""

    method: str
    speedup: Estimate | float  # an Estimate where the results hold its 95 % interval
    mat: Estimate | float
    tokens_per_s: Estimate | float
    draft_ms: float | None  # None: not measured (transformers' and vLLM's methods do not time it apart), not 0
    overhead_frac: float | None  # likewise
    identical_frac: float
    tier_share: dict[str, float]  # {} for a method that does not say where its tokens came from

    @property
    def shares(self) -> str:
        """'context 40 %, bonus 60 %', or '-'."""
        return ", ".join(f"{t} {100 * s:.0f} %" for t, s in self.tier_share.items()) or "-"


@dataclass(frozen=True)
class TierRow:
    """One tier of an hdlib method, overall: the share of the emitted tokens credited to it, and its work."""

    method: str
    first: bool  # the method's first tier: the row that names the method
    tier: str
    credited: float
    work: TierMetrics


def _methods_json(results: Results) -> Mapping[str, Any]:
    """Each method's metrics as the results' JSON holds them (`BenchResults.to_json`)."""
    return (results.to_json() if isinstance(results, BenchResults) else results)["methods"]


def _overall_row(name: str, o: Mapping[str, Any]) -> OverallRow:
    """A method's row from its overall metrics' JSON (a file without `overhead_frac` or `tier_share`: not
    measured, none)."""
    spread = o.get("intervals") or {}
    speedup, mat, rate = (Estimate.from_json(spread[k]) if k in spread else float(o[k]) for k in WITH_INTERVALS)
    timed = Method.parse(name).times_phases
    return OverallRow(
        name, speedup, mat, rate,
        draft_ms=float(o["draft_ms"]) if timed else None,
        overhead_frac=float(o["overhead_frac"]) if timed and "overhead_frac" in o else None,
        identical_frac=float(o["identical_frac"]),
        tier_share={str(t): float(s) for t, s in (o.get("tier_share") or {}).items()},
    )  # fmt: skip


def overall_rows(results: Results) -> list[OverallRow]:
    """One row per method: every overall metric."""
    return [_overall_row(name, m["overall"]) for name, m in _methods_json(results).items()]


def tier_rows(results: Results) -> list[TierRow]:
    """Per hdlib method and tier, overall ([] where no method recorded its tiers)."""
    return [
        TierRow(name, i == 0, tier, float(o["tier_share"].get(tier, 0.0)), TierMetrics.from_json(work))
        for name, m in _methods_json(results).items()
        for o in [m["overall"]]
        for i, (tier, work) in enumerate((o.get("tiers") or {}).items())
    ]


def questions_of(r: BenchResults, task: str | None = None) -> int | None:
    """How many questions stand behind a task's numbers (None: results from before intervals)."""
    first = next(iter(r.methods.values()))
    est = (first.overall if task is None else first.tasks[task]).intervals.get("speedup")
    return est.n if est is not None else None


def table(results: Results, metric: str = "speedup") -> str:
    """Methods as rows, tasks (then overall) as columns; with intervals, each column says its questions."""
    r = BenchResults.of(results)
    width = max(12, *(len(n) + 2 for n in r.methods))
    spread = any(m.overall.intervals for m in r.methods.values())
    col = 22 if spread else 14
    heads = [
        f"{t[:13]} ({n})" if (n := questions_of(r, None if t == "overall" else t)) is not None else t[:13]
        for t in [*r.tasks, "overall"]
    ]
    # Each cell after a space of its own: a long interval widens its column instead of running into the last
    head = f"{metric:{width}}" + "".join(f" {h:>{col - 1}}" for h in heads)
    fmt = ".1f" if metric == "tokens_per_s" else ".2f"
    rows = [
        f"{name:{width}}" + "".join(f" {cell(x, metric, fmt):>{col - 1}}" for x in [*m.tasks.values(), m.overall])
        for name, m in r.methods.items()
    ]
    return "\n".join([head, *rows])


def comparisons_table(results: Results) -> str:
    """Each paired comparison of the run, overall and per task: A/B with its intervals and questions,
    and the verdict (`hdlib.bench.intervals.verdict`, with the margin of the run's own A/A arms where
    it has them); "" where the run made none."""
    r = BenchResults.of(results)
    if not r.comparisons:
        return ""
    within = aa_margin(r.comparisons)
    source = "this run's A/A arms" if within > MARGIN else f"±{100 * MARGIN:.0f} %"
    lines = [
        "paired comparisons (geometric mean of the per-question ratio of tokens per second, 95 % interval over "
        "questions, and over repeats with five or more; faster or slower where every interval excludes 1, on par "
        f"where every one lies within ±{100 * within:.0f} % ({source}), else not told apart):"
    ]
    for c in r.comparisons:
        lines.append(f"  {c.sentence(MARGIN if twins([c.a, c.b]) else within)}")  # an A/A pair: held to MARGIN
        lines += [f"    {task} ({e.n} q): {e.describe(suffix='x')}" for task, e in c.tasks.items()]
    return "\n".join(lines)


def design_line(results: Results) -> str:
    """How the run was made: repeats, the methods' order, the split, the acceptance prior."""
    r = BenchResults.of(results)
    parts = [f"{r.repeats} repeat{'s' if r.repeats != 1 else ''} of every method on every question"]
    if r.order_seed is not None:
        parts.append(f"methods in an order shuffled per question and repeat (seed {r.order_seed})")
    if r.split:
        parts.append(f"the {r.split} half of the questions")
    if r.prior:
        parts.append(f"acceptance prior {r.prior.get('source')} (digest {r.prior.get('digest')}), read-only")
    return "run: " + "; ".join(parts)


def overall_table(results: Results) -> str:
    """One row per method with every overall metric."""
    rows = overall_rows(results)
    width = max(12, *(len(row.method) + 2 for row in rows))
    spread = any(isinstance(row.speedup, Estimate) for row in rows)
    w = (21, 19, 20) if spread else (8, 7, 9)  # speedup, MAT, tok/s: with their intervals, wider
    columns = f"{'speedup':>{w[0]}}{'MAT':>{w[1]}}{'tok/s':>{w[2]}}{'draft ms':>10}{'overhead':>10}{'identical':>11}"
    head = f"{'overall':{width}}{columns}  tier share"
    lines = []
    for row in rows:
        draft = f"{'-':>10}" if row.draft_ms is None else f"{row.draft_ms:10.2f}"
        overhead = f"{'-':>10}" if row.overhead_frac is None else f"{100 * row.overhead_frac:9.1f}%"
        speed, mat, rate = number(row.speedup, suffix="x"), number(row.mat), number(row.tokens_per_s, ".1f")
        lines.append(
            f"{row.method:{width}} {speed:>{w[0] - 1}} {mat:>{w[1] - 1}} {rate:>{w[2] - 1}}{draft}"
            f"{overhead}{100 * row.identical_frac:10.0f}%  {row.shares}"
        )
    return "\n".join([head, *lines])


def tiers_table(results: Results) -> str:
    """Per hdlib method and tier, overall: the share of the emitted tokens credited to the tier, drafted
    by it alone and by it with another tier, the share of steps it was asked in, and its drafting
    milliseconds per step; "" where no method recorded its tiers."""
    rows = tier_rows(results)
    if not rows:
        return ""
    width = max(16, *(len(row.method) + 3 for row in rows))
    head = f"{'tiers, overall':{width}}{'tier':12}{'share':>7}{'alone':>7}{'shared':>8}{'asked':>7}{'ms/step':>9}"
    lines = [
        f"{row.method + ':' if row.first else '':{width}}{row.tier:12}{100 * row.credited:6.0f}%{100 * w.alone:6.0f}%"
        f"{100 * w.shared:7.0f}%{100 * w.asked:6.0f}%{w.lookup_ms:9.2f}"
        for row in rows
        for w in [row.work]
    ]
    return "\n".join([head, *lines])


def fairness_line(results: Results) -> str:
    """Is `ar` a fair baseline? Its overall throughput against transformers' `generate` (`hf`)."""
    methods = BenchResults.of(results).methods
    if "hf" not in methods:
        return "ar vs hf: not measured (add hf to --methods to check that ar is a fair baseline)"
    hf_over_ar = methods["hf"].overall.speedup
    relative = 1 / hf_over_ar - 1 if hf_over_ar > 0 else 0.0  # ar's throughput relative to hf's
    line = f"ar vs hf: ar is {100 * abs(relative):.1f} % {'faster' if relative >= 0 else 'slower'} than hf overall"
    if relative < -FAIRNESS_LIMIT:
        line += (
            f"\nWARNING: ar is more than {100 * FAIRNESS_LIMIT:.0f} % slower than transformers' generate, "
            "so speedups against ar overstate the methods: compare with hf too"
        )
    return line


def identical_line(results: Results) -> str:
    """Is every method's output `ar`'s? Greedy, or sampling by the Gumbel rule, an hd method's should
    be. Where one parts, the results say where and whether the model's choice there was a near-tie
    (`hdlib.bench.divergence`: the other token within max(1e-4, 2 eps(dtype) |best logit|) of `ar`'s best
    logit there): in float32 a parting beyond that bound is a bug; in half precision the tree pass
    and the one-token pass round differently, and near-ties flip. Transformers' methods sample with
    random numbers of their own, and the rejection rule spends its own as the tree says: the same
    distribution, not the same answer."""
    r = BenchResults.of(results)
    if r.temperature != 0 and r.sampling_rule != "gumbel":
        return (
            "identical to ar: not expected when sampling by the rejection rule (other random draws, the same "
            "distribution)"
        )
    differ = {n: m.overall.identical_frac for n, m in r.methods.items() if m.overall.identical_frac < 1}
    if not differ:
        return "identical to ar: every method on 100 % of questions"
    listed = ", ".join(f"{n} {100 * f:.0f} %" for n, f in differ.items())
    if not any(n.startswith("hd") for n in differ):
        own = "transformers' own sampling" if r.temperature != 0 else "the engines' own decoding: transformers', vLLM's"
        return f"identical to ar: {listed} of questions ({own}; every hd method 100 %)"
    if not r.divergences:  # results from before the report
        if r.dtype != "float32":
            note = presentation.rounding_note(r.dtype)
            return f"identical to ar: {listed} of questions; {note} (README: Half precision)"
        return (
            f"WARNING: not identical to ar in float32: {listed} of questions, and the results say not where they part: "
            "a bug unless each is a near-tie, please report it"
        )
    ties = sum(d.divergence.near_tie for d in r.divergences)
    beyond = len(r.divergences) - ties
    where = f"{len(r.divergences)} answer(s) part from ar's, {ties} at a near-tie, {beyond} beyond the near-tie bound"
    if beyond and r.dtype == "float32":
        return f"WARNING: not identical to ar in float32: {listed} of questions; {where}: a bug, please report it"
    if beyond:
        return f"identical to ar: {listed} of questions; {where} (more than the last rounding of {r.dtype} explains)"
    return f"identical to ar: {listed} of questions; {where}: {presentation.rounding_note(r.dtype)}"


def divergence_table(results: Results) -> str:
    """One line per hd answer that parts from `ar`'s: where, `ar`'s two best logits there, the bound."""
    r = BenchResults.of(results)
    if not r.divergences:
        return ""
    head = "where answers part from ar's (first differing token; gap: ar's two best logits there, recomputed):"
    rows = [f"  q{d.question_id} {d.method} turn {d.turn}: {d.divergence.describe()}" for d in r.divergences]
    return "\n".join([head, *rows])


def serving_line(results: Results) -> str:
    """vLLM's speculative methods against vLLM's own plain decoding (`vllm`), where it ran; "" else."""
    methods = BenchResults.of(results).methods
    plain = methods.get("vllm")
    if plain is None or plain.overall.tokens_per_s <= 0:
        return ""
    others = [n for n in methods if n.startswith("vllm-")]
    rates = ", ".join(f"{n} {methods[n].overall.tokens_per_s / plain.overall.tokens_per_s:.2f}x" for n in others)
    line = f"vllm (plain) {plain.overall.tokens_per_s:.1f} tok/s, {plain.overall.speedup:.2f}x ar"
    return f"vLLM against its own plain decoding: {rates or 'no speculative method ran'} ({line})"


def machines_table(results: Results) -> str:
    """Each method's speedup and MAT on each machine, where the run's questions were answered on
    several (a run resumed elsewhere); "" where one machine answered all."""
    split = BenchResults.of(results).by_machine
    if not split:
        return ""
    head = [f"{machine_label(part['machine'])} ({len(part['question_ids'])} q)" for part in split]
    rows = [
        [name, *(f"{part['methods'][name]['speedup']:.2f}x / {part['methods'][name]['mat']:.2f}" for part in split)]
        for name in split[0]["methods"]
    ]
    width = max(len(r[0]) for r in rows)
    lines = [" | ".join([f"{'speedup / MAT':{width}}", *head])]
    lines += [" | ".join([f"{r[0]:{width}}", *(f"{c:>{len(h)}}" for c, h in zip(r[1:], head))]) for r in rows]
    return "This run's questions were answered on several machines; each machine's own ratios:\n" + "\n".join(lines)


def summary(results: Results) -> str:
    """The printed report: speedup, MAT and identical share per task, every overall metric, fairness
    (and vLLM's methods against its plain decoding, where they ran)."""
    parts = [table(results, metric) for metric in ("speedup", "mat", "tokens_per_s", "identical_frac")]
    report = [identical_line(results), divergence_table(results), serving_line(results), machines_table(results)]
    tiers = [tiers_table(results)]
    head = [design_line(results), *parts, overall_table(results), comparisons_table(results)]
    return "\n\n".join([*filter(None, head + tiers + report), fairness_line(results)])
