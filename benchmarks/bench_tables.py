"""The tables of `hdlib bench`'s results (`BenchResults.to_json`: files with a "methods" key), which
no benchmark script owns: overall metrics and tier shares per method, speedup and MAT per task, the
tiers' records, each machine's numbers where a run was resumed on another, and where the methods
make them meaningful the ablation from the paper's HD to hdlib's, vLLM's rates against its own plain
decoding and the ranking by MAT. The overall and per-tier tables' rows are the printed report's
(`hdlib.bench.reports.overall_rows`, `tier_rows`), in Markdown."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from benchmarks.markdown import code, f1, f2, pct, table, x
from hdlib.bench.arms import twins
from hdlib.bench.intervals import MARGIN, Comparison, Estimate, aa_margin
from hdlib.bench.reports import overall_rows, tier_order, tier_rows
from hdlib.models.cpu import machine_label


def tables(data: Mapping[str, Any]) -> list[str]:
    """A bench results file's tables, and the lines that apply to its methods."""
    return [
        *bench_tables(data), *comparison_table(data), *ablation_table(data), *serving_lines(data), *mat_ranking(data)
    ]


def spread(metrics: Mapping[str, Any], key: str, fmt: Callable[[float], str]) -> str:
    """A metric with its 95 % interval where the file has one: '1.85x [1.62x, 2.10x]'."""
    e = (metrics.get("intervals") or {}).get(key)
    return fmt(metrics[key]) if e is None else interval(e, fmt)


def interval(e: Mapping[str, Any], fmt: Callable[[float], str]) -> str:
    """An estimate of `hdlib.bench.intervals` as written: '1.85x [1.62x, 2.10x]', or with too few
    questions or repeats for one '1.85x (3 questions: no interval)', with none at all '-' (no question
    asked in every repeat, for an interval over both)."""
    if e["n"] == 0:
        return "-"
    if e.get("low") is None or e.get("high") is None:
        over = e.get("over", "questions")
        return f"{fmt(e['value'])} ({e['n']} {over if e['n'] != 1 else over.removesuffix('s')}: no interval)"
    return f"{fmt(e['value'])} [{fmt(e['low'])}, {fmt(e['high'])}]"


def estimate(value: Estimate | float, fmt: Callable[[float], str]) -> str:
    """A number, with its 95 % interval where it has one: '1.85x [1.62x, 2.10x]' (too few for one: what
    `interval` writes)."""
    return interval(value.to_json(), fmt) if isinstance(value, Estimate) else fmt(value)


def questions_in(metrics: Mapping[str, Any]) -> int | None:
    e = (metrics.get("intervals") or {}).get("speedup")
    return int(e["n"]) if e is not None else None


def comparison_table(data: Mapping[str, Any]) -> list[str]:
    """The run's paired comparisons: A/B overall (over questions, and over repeats where the run has
    several) and per task, each with its interval, and what the intervals allow one to say
    (`hdlib.bench.intervals.verdict`; the margin for "on par" from the run's own A/A arms, where
    wider than ±5 %: a yardstick of another run would move this run's words whenever it changed)."""
    found = [Comparison.from_json(c) for c in data.get("comparisons") or []]
    if not found:
        return []
    tasks = list(found[0].tasks)
    within = aa_margin(found)
    repeats = any(c.by_repeat is not None for c in found)
    rows = [
        [f"{code(c.a)} / {code(c.b)}", estimate(c.overall, x), str(c.overall.n),
         *([estimate(c.by_repeat, x) if c.by_repeat is not None else "-"] if repeats else []),
         c.verdict(MARGIN if twins([c.a, c.b]) else within),
         *(f"{estimate(c.tasks[t], x)} ({c.tasks[t].n})" if t in c.tasks else "-" for t in tasks)]
        for c in found
    ]  # fmt: skip
    return [
        "Paired comparisons: the geometric mean over questions of one method's tokens per second over the "
        "other's on the same question (each question's repeats pooled), with its 95 % interval from a bootstrap "
        "over questions" + (", and over repeats (each repeat's geometric mean, a t-interval over repeats, from five "
                            "on)" if repeats else "") + "; faster or slower where every interval excludes 1, on par "
        f"where every one lies within ±{100 * within:.0f} % (an A/A pair's own: ±{100 * MARGIN:.0f} %), else not "
        "told apart:",
        table(["A / B", "over questions", "questions", *(["over repeats"] if repeats else []), "verdict", *tasks],
              rows),
    ]  # fmt: skip


def bench_tables(data: Mapping[str, Any]) -> list[str]:
    """Overall metrics and tier shares per method, speedup and MAT per task (and identical per task
    where some method is not identical everywhere)."""
    methods: Mapping[str, Any] = data["methods"]
    settings = [
        f"{data.get('model')} on {data.get('device')}",
        *([f"dtype {data['dtype']}"] if data.get("dtype") else []),
        f"temperature {float(data.get('temperature', 0)):g}",
        *([f"sampling rule {data['sampling_rule']}"] if data.get("sampling_rule") else []),
        f"{data.get('max_new_tokens')} new tokens per turn",
        f"{data.get('questions')} questions" + (f" (the {data['split']} half)" if data.get("split") else ""),
        *([f"{data['repeats']} repeats of every method on every question"] if data.get("repeats", 1) > 1 else []),
        *(
            [f"the methods' order shuffled per question and repeat (seed {data['order_seed']})"]
            if data.get("order_seed") is not None
            else []
        ),
        *(
            [f"acceptance prior {data['prior']['source']} (digest {code(data['prior']['digest'])}), read-only"]
            if data.get("prior")
            else []
        ),
    ]
    overall = overall_rows(data)
    tiers = tier_order(t for row in overall for t in row.tier_share)
    rows = [
        [code(row.method), estimate(row.speedup, x), estimate(row.mat, f2), estimate(row.tokens_per_s, f1),
         "-" if row.draft_ms is None else f2(row.draft_ms), pct(row.identical_frac),
         *(pct(row.tier_share[t]) if t in row.tier_share else "" for t in tiers)]
        for row in overall
    ]  # fmt: skip
    out = [
        "Settings: " + ", ".join(settings) + ".",
        table(
            ["method", "speedup", "MAT", "tokens/s", "draft ms/step", "identical", *(f"{t} share" for t in tiers)], rows
        ),
    ]
    first = next(iter(methods.values()))
    tasks = list(first["tasks"])
    if tasks:
        heads = [f"{t} ({n})" if (n := questions_in(first["tasks"][t])) else t for t in tasks]
        for label, key, fmt in (("Speedup", "speedup", x), ("MAT", "mat", f2), ("Identical", "identical_frac", pct)):
            values = [[m["tasks"][t][key] for t in tasks] for m in methods.values()]
            if key == "identical_frac" and all(v == 1.0 for row in values for v in row):
                continue
            rows = [
                [code(name), *(spread(m["tasks"][t], key, fmt) if key != "identical_frac" else fmt(m["tasks"][t][key])
                               for t in tasks)]
                for name, m in methods.items()
            ]  # fmt: skip
            out += [f"{label} by task:", table(["method", *heads], rows)]
    return [*split_note(data), *out, *tier_tables(data), *machine_tables(data)]


def split_note(data: Mapping[str, Any]) -> list[str]:
    """A run made before the model's recycled guesses were a tier of their own says so: its `model`
    is the model tier with the recycled guesses in it (run before the per-tier records existed)."""
    overall = [m["overall"] for m in data["methods"].values()]
    if any("tiers" in o for o in overall) or not any("model" in (o.get("tier_share") or {}) for o in overall):
        return []
    return [
        "Made before the split: the `model` tier of this run held the model's recycled guesses as well as its "
        "phrases; they are the `recycled` tier (R) since, and `model` is the phrases alone."
    ]


def tier_tables(data: Mapping[str, Any]) -> list[str]:
    """Per hdlib method and tier, overall: what it was credited with, what it drafted alone and with
    another tier, how often it was asked and its drafting time (runs that record them)."""
    rows = [
        [code(row.method) if row.first else "", row.tier, pct(row.credited), pct(row.work.alone),
         pct(row.work.shared), pct(row.work.asked), f2(row.work.lookup_ms)]
        for row in tier_rows(data)
    ]  # fmt: skip
    if not rows:
        return []
    return [
        "Per tier, overall: the share of the emitted tokens credited to it (a token several tiers drafted goes "
        "to the first in order), drafted by it alone, and drafted by it and another tier (credited to it or "
        "not); the share of steps it was asked in; its drafting milliseconds per step:",
        table(["method", "tier", "credited", "alone", "shared", "asked", "ms/step"], rows),
    ]


def id_ranges(ids: Iterable[int]) -> str:
    """[81, 82, 83, 90] -> "81-83, 90"."""
    runs: list[list[int]] = []
    for i in sorted(ids):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def machine_tables(data: Mapping[str, Any]) -> list[str]:
    """Each machine's own speedup and MAT, where a run's questions were answered on several (resumed
    on another machine: `split_by_machine` in hdlib/bench/records.py)."""
    split = data.get("by_machine") or []
    if not split:
        return []
    head = [f"{machine_label(part['machine'])}: {len(part['question_ids'])} questions" for part in split]
    rows = [
        [code(name), *(f"{x(p['methods'][name]['speedup'])} / {f2(p['methods'][name]['mat'])}" for p in split)]
        for name in split[0]["methods"]
    ]
    spans = "; ".join(f"{machine_label(p['machine'])}: questions {id_ranges(p['question_ids'])}" for p in split)
    return [
        "This run was resumed on another machine: within each question the methods ran side by side on one "
        f"machine, and the overall numbers above mix the machines' ({spans}). Each machine's own speedup / MAT:",
        table(["method", *head], rows),
    ]


ABLATION = (
    ("hd-paper", "the authors' drafting: their window, 7 drafts of 4 side by side, their defects"),
    ("hd-paper+mend", "de-duplication across tiers (and their two other defects mended)"),
    ("hd-paper+mend+trie", "shared prefixes merged into one trie"),
    ("hd:CMS@28", "hdlib's tiers at the same budget (longer keys, longer drafts, no window)"),
    ("hd+no-recycling", "the value-ranked tree instead of the fixed budget"),
    ("hd", "the model's recycled guesses in the model tier"),
    ("hd+window", "a Lookahead window feeding the context tier, where it pays"),
)


def ablation_table(data: Mapping[str, Any]) -> list[str]:
    """The ablation from `hd-paper` to `hd`, where a file has every one of its methods: each row's speedup and
    MAT and what it changed against the row before."""
    methods: Mapping[str, Any] = data["methods"]
    if any(name not in methods for name, _ in ABLATION):
        return []
    rows, before = [], None
    for name, what in ABLATION:
        o = methods[name]["overall"]
        change = (
            "" if before is None else f"{o['speedup'] / before['speedup']:.2f}x, MAT {o['mat'] - before['mat']:+.2f}"
        )
        rows.append([code(name), what, x(o["speedup"]), f2(o["mat"]), change])
        before = o
    return [
        "From the paper's HD to hdlib's, one change at a time (speed against `ar`; the last column against the "
        "row above):",
        table(["method", "adds", "speedup", "MAT", "against the row above"], rows),
    ]


def serving_lines(data: Mapping[str, Any]) -> list[str]:
    """vLLM's speculative methods against vLLM's own plain decoding, where the file has them."""
    methods: Mapping[str, Any] = data["methods"]
    plain = methods.get("vllm", {}).get("overall", {}).get("tokens_per_s")
    if not plain:
        return []
    speculative = {n: m["overall"]["tokens_per_s"] for n, m in methods.items() if n.startswith("vllm-")}
    rates = [f"{code(n)} {x(rate / plain)}" for n, rate in speculative.items()]
    return [f"Against vLLM's own plain decoding ({f1(plain)} tokens/s): {', '.join(rates) or 'none ran'}."]


def mat_ranking(data: Mapping[str, Any]) -> list[str]:
    """The methods by MAT, highest first, and the lead of the first over the second, where different
    drafting methods ran at a fixed budget (as on a GPU, where the tokens per pass decide the speed;
    not a run of one tier set's orders, which notebook 04 ranks)."""
    mats = sorted(((m["overall"]["mat"], n) for n, m in data["methods"].items() if n != "ar"), reverse=True)
    fixed = all("@" in n for _, n in mats)
    if len(mats) < 2 or not fixed or all(n.startswith("hd:") for _, n in mats):
        return []
    (best, name), (second, runner) = mats[:2]
    return [
        f"By MAT: {', '.join(f'{code(n)} {f2(v)}' for v, n in mats)}. Highest: {code(name)}, "
        f"{f2(best - second)} tokens per pass ({x(best / second)}) ahead of {code(runner)}."
    ]


def runs_of(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The bench results a file holds as runs (benchmarks/sampling.py writes one per temperature)."""
    runs = data.get("runs")
    return [r for r in runs if isinstance(r, Mapping) and "methods" in r] if isinstance(runs, list) else []
