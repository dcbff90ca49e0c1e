"""Write docs/benchmarks.md from the results committed under benchmarks/results/.

    python scripts/benchmarks_doc.py [--out docs/benchmarks.md]      (or: make benchmarks-doc)

One section per benchmark: what it measures and why (the prose below), then one set of tables per
results file, made from the file's values alone, each with the command that made it and the machine
it ran on under it. The output depends on the committed files only (fixed order, fixed number
formats, no date of its own), so tests/test_benchmarks_doc.py can require the committed doc to be
exactly this script's output, and every results file to be in it. A results file that no section
claims, or that lies in another machine's folder than the one it records, is an error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hdlib.bench import Method
from hdlib.cpu import machine_label

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # benchmarks/ is no package
from common import RESULTS, machine_folder

ROOT = Path(__file__).resolve().parents[1]

DOC = ROOT / "docs" / "benchmarks.md"
GPU = "gpu"  # benchmarks/results/gpu/<device>.json: scripts/gpu_check.sh's results (docs/gpu.md)
COMPANIONS = {".raw.jsonl": "raw per-question records", ".html": "HTML report"}  # files beside a results JSON

# The commands of the files that do not record theirs, as the README of their day gave them.
KNOWN_COMMANDS = {
    "epyc-avx512/specbench.json": "hdlib bench --questions ../shared/specbench/question.jsonl --per-task 10 "
    "--max-new-tokens 256 --methods hf,hf-pld,hd,hd:C,hd:M,hd:S --out benchmarks/specbench.json "
    "--html benchmarks/specbench.html",
    "epyc-avx512/orders_at_16.json": "hdlib bench --questions ../shared/specbench/question.jsonl --per-task 2 "
    "--max-new-tokens 128 --methods hd:all-orders@16 --out benchmarks/orders_at_16.json",
    "xeon-amx/specbench.json": "hdlib bench --questions ../shared/specbench/question.jsonl --per-task 2 "
    "--max-new-tokens 128 --methods hf-pld,hd,hd:C --out benchmarks/specbench_xeon_b.json",
    "xeon-amx/specbench_bf16.json": "hdlib bench --questions ../shared/specbench/question.jsonl --per-task 2 "
    "--max-new-tokens 128 --methods hd,hd:C --dtype bfloat16 --out benchmarks/specbench_bf16.json",
    "xeon-amx/model_db_engines.json": "python benchmarks/model_db_engines.py",
}

# Where a file came from, when the file does not say it and it matters for reading it (from git).
NOTES = {
    "epyc-avx512/specbench.json": "Engine of commit 415245a: the value-ranked tree with the acceptance prior's fix, "
    "every linear layer prepacked.",
    "epyc-avx2/step_overhead.json": "`base` was a checkout of commit 16341d0, the engine before the lean step "
    "(as the README of commit 771bfcb says).",
    "xeon-amx/fixed_budget.json": "Engine of commit 3ae117b, before the acceptance prior's fix (415245a); "
    "this machine's only run of this benchmark.",
    "xeon-amx/sampling.json": "Engine of commit 3ae117b, before the acceptance prior's fix (415245a); "
    "this machine's only run of this benchmark.",
    "unrecorded/tiers.json": "Engine of 2026-11-30, before commit a7d18ce (the budget's probe back-off) and "
    "before the value-ranked tree.",
    "unrecorded/context_tier.json": "Engine of 2026-11-30, before the value-ranked tree (`hd auto` is the adaptive "
    "budget of then).",
    "unrecorded/sampling.json": "Engine of 2026-11-30, before the value-ranked tree and the Gumbel sampling rule.",
}

INTRO = """\
# Benchmarks

This file is generated: `make benchmarks-doc` (`scripts/benchmarks_doc.py`) writes it from the
results committed under `benchmarks/results/`, and `tests/test_benchmarks_doc.py` fails when the
committed file differs from what the script writes or when a results file is missing from it. Do
not edit it by hand: change the script's text or the results, and run the command again.

Every table is made from one results file, named above it; under it are the command that made the
file and the machine it ran on, as the file records them. The results lie in one folder per
machine, named by the processor family and its widest vector extension as the file records them
(`machine_folder` in `benchmarks/common.py`): `epyc-avx512`, `epyc-avx2`, `xeon-amx`; `unrecorded`
holds results whose file does not name the processor, `gpu` the device check's results
(`docs/gpu.md`). Superseded results (an earlier engine's run of the same benchmark on the same
machine) are removed; git keeps them.

The commands are as the files record them: their paths are those of their day, when the results lay
in `benchmarks/` itself. A benchmark script run without `--out` now writes to
`benchmarks/results/<this machine's folder>/`; after a new result, run `make benchmarks-doc` and
commit both.

The metrics are Spec-Bench's, as `hdlib bench` computes them: **speedup** is the mean per-question
throughput of a method over that of `ar`, plain decoding in hdlib's own loop; **MAT** is the mean
number of tokens per step, the model's own (bonus) token included (1.00 for `ar` and `hf`: for
transformers' methods every forward call is a step); **identical** is the share of questions whose
every turn is `ar`'s answer token for token.
"""


@dataclass(frozen=True)
class Section:
    title: str
    prose: str
    names: tuple[str, ...]  # results file names under a machine folder, in the order shown
    render: Callable[[dict[str, Any]], list[str]]  # a file's JSON -> its tables and lines
    folders: tuple[str, ...] | None = None  # only these machine folders (None: any but gpu)


# Number formats: one per kind of quantity, fixed ---------------------------------------------------


def number_format(spec: str, scale: float = 1.0, suffix: str = "") -> Callable[[float], str]:
    """A number as `format(v * scale, spec)` followed by `suffix`."""
    return lambda v: f"{format(v * scale, spec)}{suffix}"


x = number_format(".2f", suffix="x")  # a speedup
f1, f2, f3 = number_format(".1f"), number_format(".2f"), number_format(".3f")
pct = number_format(".0f", 100, " %")  # a share
count = number_format(",.0f")


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def code(text: str) -> str:
    return f"`{text}`"


# What every results file has: its machine, command and date ------------------------------------


def machine_of(data: Mapping[str, Any]) -> Any:
    """The machine a file records: its own, or its first run's (sampling.py writes one per run)."""
    if "machine" in data:
        return data["machine"]
    runs = data.get("runs")
    if isinstance(runs, list) and runs and isinstance(runs[0], Mapping):
        return runs[0].get("machine")
    return None


def machine_text(machine: Any) -> str:
    if isinstance(machine, Mapping) and machine.get("cpu"):
        flags = ", ".join(machine.get("vector_flags") or ()) or "none"
        threads = f"{machine.get('threads')} thread{'' if machine.get('threads') == 1 else 's'}"
        return f"{machine['cpu']}; vector flags {flags}; {threads}; torch {machine.get('torch')}"
    if isinstance(machine, Mapping) and machine:
        recorded = ", ".join(f"{k} {machine[k]}" for k in ("platform", "cpus") if k in machine)
        return f"{recorded} (the file names no processor)"
    if isinstance(machine, str) and machine:
        return f"{machine} (as recorded; the file names no processor)"
    return "not recorded in the file"


def provenance(rel: str, data: Mapping[str, Any], machine: Any = None) -> list[str]:
    """The lines under a file's tables: command, machine, date, what the file does not say."""
    command = data.get("command")
    if command:
        lines = [f"Command: {code(command)}."]
    elif rel in KNOWN_COMMANDS:
        lines = [f"Command (not recorded in the file; as the README of its day gives it): {code(KNOWN_COMMANDS[rel])}."]
    else:
        lines = ["Command: not recorded in the file."]
    lines.append(f"Machine: {machine_text(machine if machine is not None else machine_of(data))}.")
    dates = sorted({str(d) for d in [data.get("date"), *(r.get("date") for r in runs_of(data))] if d})
    if dates:
        lines.append(f"Date: {', '.join(dates)}.")
    if rel in NOTES:
        lines.append(NOTES[rel])
    return lines


def runs_of(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    runs = data.get("runs")
    return [r for r in runs if isinstance(r, Mapping) and "methods" in r] if isinstance(runs, list) else []


# hdlib bench results (BenchResults.to_json) ------------------------------------------------------

TIER_ORDER = ("context", "recycled", "model", "statistics")


def tier_shares(metrics: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in (metrics.get("tier_share") or {}).items()}


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
        f"{data.get('questions')} questions",
    ]
    shares = {name: tier_shares(m["overall"]) for name, m in methods.items()}
    seen = {t for s in shares.values() for t in s}
    tiers = [t for t in TIER_ORDER if t in seen] + sorted(seen - {*TIER_ORDER, "bonus"}) + ["bonus"] * ("bonus" in seen)
    rows = []  # draft ms: "-" where a method's records do not time it (transformers', vLLM's), not 0
    for name, m in methods.items():
        o = m["overall"]
        share = [pct(shares[name][t]) if t in shares[name] else "" for t in tiers]
        rows.append(
            [
                code(name),
                x(o["speedup"]),
                f2(o["mat"]),
                f1(o["tokens_per_s"]),
                f2(o["draft_ms"]) if Method.parse(name).times_phases else "-",
                pct(o["identical_frac"]),
                *share,
            ]  # fmt: skip
        )
    out = [
        "Settings: " + ", ".join(settings) + ".",
        table(
            ["method", "speedup", "MAT", "tokens/s", "draft ms/step", "identical", *(f"{t} share" for t in tiers)], rows
        ),
    ]
    tasks = list(next(iter(methods.values()))["tasks"])
    if tasks:
        for label, key, fmt in (("Speedup", "speedup", x), ("MAT", "mat", f2), ("Identical", "identical_frac", pct)):
            values = [[m["tasks"][t][key] for t in tasks] for m in methods.values()]
            if key == "identical_frac" and all(v == 1.0 for row in values for v in row):
                continue
            rows = [[code(name), *map(fmt, row)] for name, row in zip(methods, values)]
            out += [f"{label} by task:", table(["method", *tasks], rows)]
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
        [
            code(name) if i == 0 else "",
            tier,
            pct(o["tier_share"].get(tier, 0.0)),
            pct(t["alone"]),
            pct(t["shared"]),
            pct(t["asked"]),
            f2(t["lookup_ms"]),
        ]
        for name, m in data["methods"].items()
        for o in [m["overall"]]
        for i, (tier, t) in enumerate((o.get("tiers") or {}).items())
    ]
    if not rows:
        return []
    return [
        "Per tier, overall: the share of the emitted tokens credited to it (a token several tiers drafted goes "
        "to the first in order), drafted by it alone, and drafted by it and another tier (credited to it or "
        "not); the share of steps it was asked in; its drafting milliseconds per step:",
        table(["method", "tier", "credited", "alone", "shared", "asked", "ms/step"], rows),
    ]


def gate_replay_tables(data: Mapping[str, Any]) -> list[str]:
    """benchmarks/gate_replay.py: the gate on a fast device's profile, with and without it."""
    methods = data["methods"]
    tiers = data["tiers"]
    rows = [
        [
            code(name),
            f2(m["overall"]["mat"]),
            f1(m["overall"]["tokens_per_s"]),
            f2(m["overall"]["host_ms_per_step"]),
            pct(m["identical_frac"]),
            *(pct(m["overall"]["asked"][t]) for t in tiers),
            *(f2(m["overall"]["lookup_ms_per_step"][t]) for t in tiers),
        ]
        for name, m in methods.items()
    ]
    tasks = list(next(iter(methods.values()))["tasks"])
    by_task = [[code(name), *(f1(m["tasks"][t]["tokens_per_s"]) for t in tasks)] for name, m in methods.items()]
    edges = [0.0, *data["band_edges"]]
    bands = [f"{a:g}-{b:g}" for a, b in zip(edges, edges[1:])] + [f"{edges[-1]:g}+"]
    decided = [
        [d["tier"], bands[d["band"]], count(d["asked"]), count(d["skipped"]),
         pct(d["asked"] / (d["asked"] + d["skipped"]))]
        for d in data["gate_decisions"]
    ]  # fmt: skip
    return [
        f"Settings: {data['model']}, {data['questions']} questions, {data['max_new_tokens']} new tokens per turn, "
        f"a flat profile of {data['pass_ms']:g} ms a pass; the tiers {', '.join(tiers)}. With the gate "
        f"`hd` makes {x(data['gate_speedup'])} the tokens per second of `hd+ask-all` in that clock.",
        table(
            [
                "method",
                "MAT",
                "tokens/s",
                "host ms/step",
                "identical to ar",
                *(f"{t} asked" for t in tiers),
                *(f"{t} ms/step" for t in tiers),
            ],
            rows,
        ),  # fmt: skip
        "Tokens per second by task:",
        table(["method", *tasks], by_task),
        "Where the gate decided (`hd`): per tier after the first, the steps it was asked in and skipped in, by "
        "the expected accepted tokens of the tree drafted before it:",
        table(["tier", "tree so far", "asked", "skipped", "asked share"], decided),
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


# From the paper's HD to hdlib's, one change at a time: (method, what it adds to the row before).
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
    """The ablation from `hd-paper` to `hd`, where a file has its methods: each row's speedup and
    MAT and what it changed against the row before."""
    methods: Mapping[str, Any] = data["methods"]
    steps = [(name, what) for name, what in ABLATION if name in methods]
    if len(steps) < 2:
        return []
    rows, before = [], None
    for name, what in steps:
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
    """The methods by MAT, highest first, and the lead of the first over the second."""
    mats = sorted(((m["overall"]["mat"], n) for n, m in data["methods"].items() if n != "ar"), reverse=True)
    if len(mats) < 2:
        return []
    (best, name), (second, runner) = mats[:2]
    return [
        f"By MAT: {', '.join(f'{code(n)} {f2(v)}' for v, n in mats)}. Highest: {code(name)}, "
        f"{f2(best - second)} tokens per pass ({x(best / second)}) ahead of {code(runner)}."
    ]


def sampling_tables(data: Mapping[str, Any]) -> list[str]:
    """benchmarks/sampling.py: one bench result per temperature."""
    out = []
    for run in runs_of(data):
        out += [f"**Temperature {float(run['temperature']):g}**", *bench_tables(run)]
    return out


# The other scripts' results ------------------------------------------------------------------------


def cpu_forward_tables(data: Mapping[str, Any]) -> list[str]:
    ks = data["k"]
    rows = [
        [
            code(mode),
            *map(f1, ms),
            f1(data["plain_tokens_per_s"][mode]),
            "yes" if data["greedy_identical_to_none"][mode] else "no",
        ]
        for mode, ms in data["forward_ms"].items()
    ]
    ratio_rows = [[code(mode), *map(f2, r)] for mode, r in data["forward_ratio_to_none"].items()]
    by_one = [[code(mode), *(f2(v / ms[0]) for v in ms)] for mode, ms in data["forward_ms"].items()]
    return [
        "Forward pass over k new tokens after 256 cached ones, ms (median of the rounds), and plain decoding:",
        table(["prepack", *(f"k={k}" for k in ks), "plain decoding tokens/s", "greedy identical to none"], rows),
        "Forward(k) / forward(1), each way:",
        table(["prepack", *(f"k={k}" for k in ks)], by_one),
        "Forward(k) against the unpacked model's (`none`):",
        table(["prepack", *(f"k={k}" for k in ks)], ratio_rows),
    ]


def fixed_budget_tables(data: Mapping[str, Any]) -> list[str]:
    rows = []
    for name, m in data["methods"].items():
        parts = "; ".join(f"{p} {count(v['accepted'])} / {count(v['drafted'])}" for p, v in m["parts"].items())
        rows.append(
            [
                code(name),
                f2(m["mat"]),
                f1(m["verified_per_step"]),
                f3(m["mat_per_verified_node"]),
                x(m["speed_vs_ar"]),
                pct(m["identical_frac"]),
                parts,
            ]
        )
    header = ["tiers@budget", "MAT", "verified per step", "(MAT - 1) per verified node", "speed vs `ar`", "identical"]
    return [
        (
            f"Settings: budget {data['budget']}, {data['questions']} questions, "
            f"{data['max_new_tokens']} new tokens per turn."
        ),
        table([*header, "accepted / drafted, by part"], rows),
    ]


def sampling_rules_tables(data: Mapping[str, Any]) -> list[str]:
    n = data["questions"]
    rows = []
    for run in data["runs"]:
        for rule, s in run["summary"].items():
            rows.append(
                [
                    f"{float(run['temperature']):g}",
                    rule,
                    f1(s["ar_tokens_per_s"]),
                    f1(s["hd_tokens_per_s"]),
                    x(s["speedup"]),
                    f2(s["mat"]),
                    f2(s["hd_accept_ms_per_step"]),
                    f2(s["ar_accept_ms_per_step"]),
                    f"{round(s['identical_frac'] * n)} of {n}",
                ]
            )
    header = ["temperature", "rule", "`ar` tokens/s", "`hd` tokens/s", "speedup", "MAT"]
    header += ["`hd` acceptance ms/step", "`ar` acceptance ms/step", "`hd` = `ar`, token for token"]
    return [
        f"Settings: {data['model']}, {n} questions (first turns), {data['max_new_tokens']} new tokens.",
        table(header, rows),
    ]


def step_overhead_tables(data: Mapping[str, Any]) -> list[str]:
    results = data["results"]
    phases = list(next(iter(results.values()))["phases_ms_per_step"])
    rows = [
        [
            code(name),
            count(r["steps"]),
            count(r["tokens"]),
            f2(r["mat"]),
            f2(r["overhead_ms_per_step"]),
            f1(r["forward_ms_per_step"]),
            *(f2(r["phases_ms_per_step"][p]) for p in phases),
        ]
        for name, r in results.items()
    ]
    header = [
        "engine",
        "steps",
        "tokens",
        "MAT",
        "overhead ms/step",
        "forward calls ms/step",
        *(f"{p} ms" for p in phases),
    ]
    s = data["settings"]
    return [
        (
            f"Settings: budget {s['budget']}, {s['per_task']} questions per task, {s['max_new_tokens']} new tokens; "
            f"{data['what']}."
        ),
        table(header, rows),
        (
            f"Overhead this / base: {f2(data['overhead_ratio_this_over_base'])} (median by question "
            f"{f2(data['overhead_ratio_median_by_question'])}); identical answers: {data['identical_answers']} of "
            f"{data['questions']}."
        ),
    ]


def accept_phase_tables(data: Mapping[str, Any]) -> list[str]:
    rows = [[part, f3(ms)] for part, ms in data["ms"].items()]
    return [f"Logits of shape {data['shape'][0]} x {data['shape'][1]}; {data['what']}.", table(["part", "ms"], rows)]


def cache_speed_tables(data: Mapping[str, Any]) -> list[str]:
    passes = [
        [
            count(p["context"]),
            str(p["k"]),
            str(p["kept"]),
            f2(p["wall_ms"]["own"]),
            f2(p["wall_ms"]["dynamic"]),
            f3(p["wall_ratio"]),
            f3(p["cpu_ratio"]),
        ]
        for p in data["passes"]
    ]
    summary = [
        [case, f3(s["decode_ratio_median"]), f3(s["forward_ratio_median"]), f3(s["prefill_ratio_median"]), str(s["n"])]
        for case, s in data["summary"].items()
    ]
    header = ["cached tokens", "tree tokens", "kept", "own ms", "dynamic ms", "own / dynamic", "CPU time own / dynamic"]
    return [
        (
            f"Model: {data['model']}; {data['what']}. Every answer identical between the two caches: "
            f"{'yes' if data['all_identical'] else 'no'}."
        ),
        "One verification pass and its compaction:",
        table(header, passes),
        "Whole generations, medians of own / dynamic:",
        table(["case", "decoding", "forward passes", "prefill", "runs"], summary),
    ]


def engine_traps_tables(data: Mapping[str, Any]) -> list[str]:
    warp = []
    for r in data["sampling_warp"]:
        kept = (
            count(r["kept_tokens"])
            if "kept_tokens" in r
            else f"median {count(r['kept_tokens_median'])}, at most {count(r['kept_tokens_max'])}"
        )
        warp.append([count(r["vocab"]), r["logits"], f"{float(r['top_p']):g}", kept, f3(r["ms_per_node"])])
    loop = [
        [
            count(r["context_tokens"]),
            str(r["budget"]),
            str(r["drafts"]),
            str(r["drafts_prefix_of_another"]),
            str(r["drafted_tokens"]),
            f3(r["ms_per_lookup"]),
        ]
        for r in data["context_loop"]
    ]
    return [
        "The sampling warp per visited node:",
        table(["vocabulary", "logits", "top-p", "tokens kept", "ms per node"], warp),
        "The context tier's lookup in a loop of period 3:",
        table(["context tokens", "budget", "drafts", "prefixes of another", "drafted tokens", "ms per lookup"], loop),
    ]


def model_db_tables(data: Mapping[str, Any]) -> list[str]:
    rows = []
    for name, b in data["builds"].items():
        same = b.get("against_transformers")
        rows.append(
            [
                name,
                f3(b["answers_per_s"]),
                f1(b["answer_tokens_per_s"]),
                f2(data["answers_per_s_vs_transformers"][name]),
                count(b["peak_memory_mb"]),
                f1(b["generation_seconds"]),
                f1(b["wall_seconds"]),
                f"{same['answers_identical']} of {b['counts']['answers']} (n-gram overlap {f3(same['ngram_jaccard'])})"
                if same
                else "",
            ]
        )
    header = ["build", "answers/s", "answer tokens/s", "vs transformers", "peak memory MB", "answering s", "wall s"]
    builds = "; ".join(f"{name}: {code(b['command'])}" for name, b in data["builds"].items())
    return [table([*header, "answers identical to transformers'"], rows), f"The builds' own commands: {builds}."]


def context_tier_tables(data: Mapping[str, Any]) -> list[str]:
    overall = data["overall"]
    methods = list(overall)
    rows = [
        [code(m), x(v["speedup"]), f2(v["mat"]), pct(v["overhead_frac"]), pct(v["identical_frac"])]
        for m, v in overall.items()
    ]
    per_prompt = []
    for prompt, runs in data["prompts"].items():
        base = runs[methods[0]]["tokens_per_s"]
        per_prompt.append(
            [
                code(prompt),
                str(runs[methods[0]]["new_tokens"]),
                *(f"{x(runs[m]['tokens_per_s'] / base)} ({f2(runs[m]['mat'])})" for m in methods[1:]),
            ]
        )
    return [
        f"Model: {data['model']}.",
        table(["method", "speedup", "MAT", "engine overhead", "identical"], rows),
        "By prompt, tokens/s over plain decoding's (MAT):",
        table(["prompt", "new tokens", *(code(m) for m in methods[1:])], per_prompt),
    ]


def lookup_latency_tables(data: Mapping[str, Any]) -> list[str]:
    rows = [
        [tier, budget, f"{v['median_ms']:.4f}", f"{v['p99_ms']:.4f}"]
        for tier, budgets in data["tiers"].items()
        for budget, v in budgets.items()
    ]
    return [
        (
            f"{count(data['contexts'])} contexts; opening the model tier's database took {f2(data['model_open_s'])} s, "
            f"the statistics tier's {f2(data['statistics_open_s'])} s."
        ),
        table(["tier", "budget", "median ms", "p99 ms"], rows),
    ]


def statistics_tier_tables(data: Mapping[str, Any]) -> list[str]:
    db = data["database"]
    built = db["build_measured_in_child"]
    header = ["backend", "contexts", "budget", "median ms", "p99 ms", "CPU median ms", "accepted per lookup"]
    rows = [
        [
            backend,
            kind,
            budget,
            f3(v["median_ms"]),
            f3(v["p99_ms"]),
            f3(v["cpu_median_ms"]),
            f2(v["accepted_per_lookup"]),
            f2(v["drafted_nodes"]),
            pct(v["hit_rate"]),
        ]
        for backend, b in data["backends"].items()
        for kind in ("heldout", "model")
        for budget, v in b[kind].items()
    ]
    with_context = [
        [kind, budget, *(f2(v[k]) for k in ("context", "context+statistics"))]
        for kind, budgets in data["accepted_with_context_tier"].items()
        for budget, v in budgets.items()
    ]
    return [
        (
            f"Database: {count(db['counts']['tokens'])} tokens of {count(db['counts']['conversations'])} ShareGPT "
            f"conversations, {f1(db['file_mib'])} MiB, opened in {f2(db['load_seconds'])} s, "
            f"{count(db['resident_mib_when_open'])} MiB resident; built in {f1(built['seconds'])} s at "
            f"{count(built['peak_rss_mb'])} MB peak. Contexts: {data['cases']['heldout']} held-out ShareGPT windows "
            f"(`heldout`) and {data['cases']['model']} from the model's own answers (`model`); the goal was a median "
            f"of {data['goal']['median_ms']} ms and a p99 of {data['goal']['p99_ms']} ms."
        ),
        table([*header, "drafted nodes", "hit rate"], rows),
        "Accepted tokens per lookup, the context tier alone and with the statistics tier behind it:",
        table(["contexts", "budget", "context", "context + statistics"], with_context),
    ]


LOSSLESS_COLUMNS = ("greedy_identical", "sampled_identical", "near_ties", "divergences")


def gpu_tables(data: Mapping[str, Any]) -> list[str]:
    """scripts/gpu_check.sh's JSON (docs/gpu.md): the device, losslessness, tokens/s per method."""
    out = []
    lossless = data.get("lossless") or {}
    rows = [
        [key, *("" if v.get(k) is None else str(v[k]) for k in LOSSLESS_COLUMNS)]
        for key, v in sorted(lossless.items())
        if "/" in key and isinstance(v, Mapping)
    ]
    if rows:
        out += [
            f"Lossless on the device (float32 within the near-tie bound: {lossless.get('float32_ok')}):",
            table(["model/dtype", "greedy identical", "sampled identical", "near-ties", "divergences"], rows),
        ]
    throughput = data.get("throughput") or {}
    speedups = throughput.get("speedup_over_ar") or {}
    rows = [
        [
            code(name),
            f1(r["tokens_per_s"]),
            f2(r["mat"]) if "mat" in r else "",
            x(speedups[name]) if name in speedups else "",
            "" if name == "ar" else ("yes" if r.get("identical_to_ar") else "no"),
        ]
        for name, r in throughput.items()
        if isinstance(r, Mapping) and "tokens_per_s" in r
    ]
    if rows:
        out += [
            "Tokens per second on the 7B-shaped model with random weights:",
            table(["method", "tokens/s", "MAT", "speedup", "identical to `ar`"], rows),
        ]
    return out or ["(no section of the check finished)"]


def gpu_machine(data: Mapping[str, Any]) -> str:
    meta = data.get("meta") or {}
    keys = ("device", "capability", "gpu_memory_gb", "torch", "cuda", "transformers", "threads", "commit")
    return "; ".join(f"{k} {meta[k]}" for k in keys if meta.get(k) is not None) or "not recorded in the file"


# The sections, in the order of the doc ---------------------------------------------------------

SECTIONS = (
    Section(
        "Spec-Bench: every method side by side",
        """`hdlib bench` runs several methods over the same Spec-Bench questions in one process, interleaved
question by question after a warm-up, so that the drift of a shared machine hits them alike. `ar`
is the baseline; `hf` is transformers' greedy `generate`, the check that `ar` is a fair baseline
(`hdlib bench` warns when `ar` is more than 5 % slower); `hf-pld` is transformers' prompt lookup
decoding (10 tokens); `hd` drafts with the three tiers in the default order (context, model,
statistics) on the value-ranked tree's budget, and `hd:C`, `hd:M`, `hd:S` with one tier each. A
tier's share is its part of the emitted tokens; the bonus token is the model's own, one per step.""",
        ("specbench.json",),
        bench_tables,
    ),
    Section(
        "The field: ten questions per task",
        """Every drafting method of [peers.md](peers.md) with `ar`, `hf-pld`, `hd:C` and `hd`, side by side in
one run, each verified by hdlib's own engine so that only the drafting differs: `hd-paper` the paper's
HD as its authors ran it (their Lookahead window of 7 x 4 feeding their context store, 7 drafts of 4
tokens side by side, their defects kept), `+mend` and `+trie`; `recycling` Token Recycling (80 nodes),
`rest` REST (64), `suffix` SuffixDecoding (24), `lookahead` Lookahead decoding (a 7 x 4 window, 7
guesses of 4); `hd+window` hdlib's context tier fed by a window where it pays; `hd:CMS@28` and
`hd+no-recycling` the steps of the ablation below. vLLM's own speculative decoding ran as the
second pass of the same command in `.venv-vllm` (`-vllm.json`), with `ar` beside it there.""",
        ("field.json", "field-vllm.json"),
        lambda data: [*bench_tables(data), *ablation_table(data), *serving_lines(data)],
    ),
    Section(
        "`hd` and vLLM's SuffixDecoding on one machine",
        """The ten-per-task run above answered its first 33 questions (mt_bench, translation, summarization,
three of qa) on one machine, the other 27 and its whole vLLM pass on another. This run answers
those four tasks' 40 questions again on one machine, with both engines: `ar`, `hd` and hdlib's
`suffix` in hdlib's, then `vllm-suffix` in vLLM's as the second pass of the same command
(`-vllm.json`), each pass with its own `ar`. The other two tasks' 20 questions ran on that machine
in both passes of the run above.""",
        ("field_one_machine.json", "field_one_machine-vllm.json"),
        lambda data: [*bench_tables(data), *serving_lines(data)],
    ),
    Section(
        "The field side by side",
        """HD against the methods it is measured against, each verified by hdlib's own engine so that only
the drafting differs ([peers.md](peers.md)): `hd-paper` is the paper's HD as its authors ran it
(7 drafts of 4 tokens side by side, their defects kept), `+mend` mends the defects, `+trie` merges
shared prefixes; `recycling` is Token Recycling (its 80-node static tree), `rest` REST (64 tokens
from the statistics corpus), `suffix` SuffixDecoding (its authors' `arctic-inference`, 24 tokens).
One question per task and 128 tokens per turn: a first look, not yet the measurement of ten
questions per task.""",
        ("field_1_per_task.json",),
        bench_tables,
    ),
    Section(
        "The field at a fixed budget of 64: MAT",
        """The same methods where a GPU would run them: a fixed budget of 64 draft tokens per step (on a GPU a
pass over 65 tokens costs about what one over 1 does, so the tokens per pass decide the speed), and
each method at its own published size too (`recycling` 80, `rest` 64, `suffix` 24, `hd-paper` 28).
MAT is the number to read; the speed against `ar` is this CPU's, where a pass over 65 tokens costs
several over 1. One question per task, 128 tokens per turn: a first look.""",
        ("field_at_64_1_per_task.json",),
        bench_tables,
    ),
    Section(
        "The field at a fixed budget of 64, ten questions per task: MAT",
        """The ten-per-task questions above where a GPU would run them: every drafting method at a fixed budget
of 64 draft tokens per step (on a GPU a pass over 65 tokens costs about what one over 1 does, so the
tokens per pass decide the speed). Each method at its own published size is in the ten-per-task run
above (`recycling` 80, `rest` 64, `suffix` 24, `lookahead` and `hd-paper` 28, `hd` its value-ranked
tree). MAT is the number to read; the speed against `ar` is this CPU's, and in this run not even
that: it was stopped and resumed (on the same machine, which every question records) and at times
shared the machine with the test suite and other measurements.""",
        ("field_at_64.json",),
        lambda data: [*bench_tables(data), *mat_ranking(data)],
    ),
    Section(
        "The hierarchy: which tiers are asked",
        """`hd` asks its tiers in order (context, the model's recycled guesses, the model's phrases, the
statistics) and, before each tier after the first, asks it only where its accepted tokens in steps
like this one pay for its lookup time at the generation's rate (`hdlib.gate`, docs/architecture.md);
`hd+ask-all` asks every tier at every step, as the engine did before the gate; `hd:C` is the context
tier alone. On a CPU a token costs tens of milliseconds and a lookup a fraction of one, so the gate
asks nearly every tier nearly always. `gate_replay.json` (`benchmarks/gate_replay.py`) decodes the same
questions again with the policy seeing a fast device's flat forward-time profile,
each step's time counted as that profile's forward time plus the host time measured: there a lookup
is worth a larger share of a token, and the table says where the gate skips. `gate_vs_ask_all.json` is
`hd` and `hd+ask-all` alone on the same questions, on another machine (an Intel Xeon) that was less
busy (in `hierarchy.json` a question answered with the same tokens in the same steps by two methods
took 2.6 times as long for one of them: the machine was shared).""",
        ("hierarchy.json", "gate_vs_ask_all.json", "gate_replay.json"),
        lambda data: gate_replay_tables(data) if "gate_decisions" in data else bench_tables(data),
    ),
    Section(
        "The 15 tier orders at one fixed budget",
        """Every ordered non-empty subset of the paper's three databases (C context, M the model's phrases,
S statistics) at a fixed budget of 16 draft tokens per step, filled tier by tier in the order given:
a tier gets what the tiers before it left (`hdlib bench --methods hd:all-orders@16`). This is the
paper's order ablation; runs since the split add orders with the model's recycled guesses (R).
Notebook 04 loads the newest file, draws it and ranks its orders against the paper's.""",
        ("orders_at_16.json",),
        bench_tables,
    ),
    Section(
        "MAT at a fixed budget: the GPU regime on any machine",
        """`benchmarks/fixed_budget.py` runs `ar` and each tier set at a fixed budget of draft tokens per
step on the same Spec-Bench questions, every turn, the conversation so far being `ar`'s. On a GPU a
pass over 65 tokens costs about what one over 1 token does, so there the budget is large and the
MAT it reaches decides the speedup; the MAT can be measured on any machine, while the speed against
`ar` in these tables is the CPU's. `M-phrases` and `M-recycled` are the model tier's two parts
alone: the offline phrase database and the model's own recycled guesses (`model/recycled` among the
parts).""",
        ("fixed_budget.json",),
        fixed_budget_tables,
    ),
    Section(
        "The value-ranked tree against a fixed budget",
        """The same script with `--budget auto`, the value-ranked tree (the default budget: it verifies the
nodes whose expected tokens pay for their forward time on this machine), and `--budget topN`, the
tree's N best nodes at every step, as on hardware where a pass over N + 1 tokens costs one over 1:
the precision of its estimates apart from the cost model. (MAT - 1) per verified node is that
precision, accepted draft tokens per draft token verified; the fixed budget's rows of the same
machine are in the section above.""",
        ("fixed_budget_auto.json", "fixed_budget_top12.json", "fixed_budget_side_by_side.json"),
        fixed_budget_tables,
    ),
    Section(
        "The CPU forward pass",
        """The packaged model loaded three ways: no linear layer prepacked for oneDNN (`none`), the output
layer only (`head`), every linear layer (`all`, the default; each layer keeps PyTorch's default
kernel at the row counts where that was faster when both were timed at load, `hdlib/cpu.py`). For
each, the forward pass over k new tokens after 256 cached ones, medians over interleaved rounds, and
plain greedy decoding of the project's prompts, whose outputs are compared with the unpacked
model's. Forward(k) / forward(1) is what verifying a tree of k tokens costs on the machine, and so
how large a tree can pay there.""",
        ("cpu_forward.json",),
        cpu_forward_tables,
    ),
    Section(
        "The step overhead",
        """The engine's own time per step, outside the model's forward calls, for this checkout against
another engine (`--base`), each in a worker process of its own, question by question with the order
alternating, greedy, the three tiers at a fixed budget. By phase: drafting, building the tree's
tensors, acceptance (the model's choices and their probabilities from the logits), the cache and
the tiers' update, the budget policy.""",
        ("step_overhead.json",),
        step_overhead_tables,
    ),
    Section(
        "The acceptance phase",
        """What the greedy acceptance phase spends its time on at budget 64 (65 tree rows): `model_choices`
as the verifier calls it, the blocked top-8, the softmax over the vocabulary whose normalizer the
probabilities need, and other ways to that normalizer, timed side by side on random logits of
SmolLM2's shape. Every way to the normalizer computes an exponential of every logit.""",
        ("accept_phase.json",),
        accept_phase_tables,
    ),
    Section(
        "hdlib's KV cache against transformers' DynamicCache",
        """`Verifier(model, cache="own")`, the default, keeps keys and values in hdlib's `TreeCache`
(preallocated, one stack for all layers, a pass written in place, compaction in one gather and one
copy); `cache="dynamic"` uses transformers' `DynamicCache`, which concatenates every layer on every
pass. Both give the same logits bit for bit. Each pair is measured back to back with the order
alternating; below 1, hdlib's own cache is faster.""",
        ("cache_speed.json",),
        cache_speed_tables,
    ),
    Section(
        "The two sampling rules",
        """Plain sampling (`ar`) and `hd` (default tiers, value-ranked tree) under each rule, all four
interleaved question by question with the question's seed, on the first turns of Spec-Bench
questions; the speedup is against `ar` under the same rule, the acceptance phase per step as
`hdlib generate` prints it. Under the Gumbel rule (the default) HD's answer is plain sampling's
token for token; under recursive rejection only the distribution is the same, so each rule samples
other answers.""",
        ("sampling_rules.json",),
        sampling_rules_tables,
    ),
    Section(
        "Sampling: HD against plain sampling",
        """`ar` and `hd` (default tiers) sampling with the same seed per question on Spec-Bench questions,
by temperature (0 is greedy). A draft is accepted with the probability the model gives it, so the
hotter the model, the fewer drafts survive. These runs predate the Gumbel rule: they sampled by
recursive rejection, under which HD's answers follow plain sampling's distribution but are not its
answers token for token, hence identical shares of 0 % above temperature 0.""",
        ("sampling.json",),
        sampling_tables,
    ),
    Section(
        "Half precision",
        """The Spec-Bench comparison with the packaged model in bfloat16 (`--dtype bfloat16`), against plain
decoding in bfloat16. In half precision the tree pass and the one-token pass multiply matrices of
different shapes, which round differently, so where the model's two best tokens are nearly tied the
argmax can differ and HD's answer parts from plain decoding's: the identical share says how often.
In float32 every lossless method's share is 100 %.""",
        ("specbench_bf16.json",),
        bench_tables,
    ),
    Section(
        "Engine speed traps",
        """Two places where the engine's cost could grow with the input, timed alone. The sampling warp at
every node HD visits when sampling with top-p, on random logits of SmolLM2's and Gemma 3's
vocabulary sizes (spread: a nucleus of thousands of tokens; peaked: a few) and on the packaged
model's own; the nucleus is looked for among the most likely tokens first. The context tier's
lookup after a text that is a loop of period 3, 8k and 32k tokens long, where every occurrence of
the key is a match.""",
        ("engine_traps.json",),
        engine_traps_tables,
    ),
    Section(
        "Building the model database three ways",
        """The model tier's database built from the same first ShareGPT train prompts with the packaged
model three ways, one after another in one run: transformers in batches, vLLM's offline engine,
and `vllm serve` with concurrent requests. Per build: answers and answer tokens per second of the
answering, the peak memory of the whole process tree, and whether its answers and n-grams are the
transformers build's.""",
        ("model_db_engines.json",),
        model_db_tables,
    ),
    Section(
        "The tiers on Spec-Bench (an earlier engine)",
        """The context tier alone and with the model and statistics tiers behind it, against plain decoding,
greedy, all methods interleaved in one run. Each lower tier adds accepted tokens per step; whether
that pays depends on what verifying the extra drafts costs on the machine.""",
        ("tiers.json",),
        bench_tables,
    ),
    Section(
        "The context tier on the project's prompts (an earlier engine)",
        """Plain decoding and HD with the context tier alone at budgets 8, 16 and the adaptive budget of
then, side by side in one run, on the project's own prompts (`data/prompts/`, not Spec-Bench).
Copy-heavy prompts (a summary of notes) gain most; a translation has nothing to copy.""",
        ("context_tier.json",),
        context_tier_tables,
    ),
    Section(
        "Lookup latency of the three tiers",
        """Every tier's `lookup` timed at every position of the packaged model's own greedy answers (the
answers kept in `unrecorded/statistics_tier.json`), the contexts a tier meets at decode time, and
what opening the model and statistics databases costs.""",
        ("lookup_latency.json",),
        lookup_latency_tables,
    ),
    Section(
        "The statistics tier's database",
        """The statistics tier's suffix array over ShareGPT's train split: its size, build time and memory,
its lookup latency and accepted tokens per lookup on held-out ShareGPT windows and on the model's
own answers, against `draftretriever` (ADED's trigram table) on the same corpus.""",
        ("statistics_tier.json",),
        statistics_tier_tables,
    ),
    Section(
        "On a GPU: the device check",
        """`bash scripts/gpu_check.sh` (`docs/gpu.md`) measures hdlib on one CUDA GPU in a few minutes with
nothing downloaded: losslessness on the device for the tiny models in float32 and bfloat16, the
forward pass of a Llama-2-7B-shaped model with random weights, the step's phases, peak memory, and
tokens per second of `ar`, `hd:C` and transformers' methods. Its JSON is committed as
`benchmarks/results/gpu/<device>.json`.""",
        (),
        gpu_tables,
        folders=(GPU,),
    ),
)


# Putting it together ---------------------------------------------------------------------------


def results_files(results: Path) -> list[str]:
    """Every file under `results`, as a path relative to it, sorted."""
    return sorted(p.relative_to(results).as_posix() for p in results.rglob("*") if p.is_file())


def claimed(section: Section, rel: str) -> bool:
    folder, _, name = rel.partition("/")
    if section.folders is not None:
        return folder in section.folders and name.endswith(".json")
    return folder != GPU and name in section.names


def check_folder(rel: str, data: Mapping[str, Any]) -> None:
    """A file that records its machine must lie in that machine's folder."""
    folder = rel.partition("/")[0]
    machine = machine_of(data)
    if folder != GPU and machine_folder(machine) != folder:
        raise SystemExit(
            f"benchmarks/results/{rel} records the machine of folder {machine_folder(machine)!r}, not {folder!r}"
        )


def render(results: Path = RESULTS) -> str:
    files = results_files(results)
    companions = {f for f in files if any(f.endswith(s) for s in COMPANIONS)}
    unclaimed = [f for f in files if f not in companions and not any(claimed(s, f) for s in SECTIONS)]
    orphans = [f for f in companions if next(f[: -len(s)] + ".json" for s in COMPANIONS if f.endswith(s)) not in files]
    if unclaimed or orphans:
        raise SystemExit(
            "results no section of scripts/benchmarks_doc.py shows (add one, or remove the file): "
            + ", ".join(sorted(unclaimed + orphans))
        )
    parts = [INTRO.rstrip("\n"), "## Machines", machines_table(results, files)]
    for section in SECTIONS:
        parts += [f"## {section.title}", section.prose]
        mine = [f for f in files if claimed(section, f)]
        mine.sort(
            key=lambda f: (f.partition("/")[0], section.names.index(f.partition("/")[2]) if section.names else 0, f)
        )
        if not mine:
            parts.append("No result committed yet.")
        for rel in mine:
            data = json.loads((results / rel).read_text(encoding="utf-8"))
            check_folder(rel, data)
            parts.append(f"### `benchmarks/results/{rel}`")
            parts += section.render(data)
            if rel.startswith(f"{GPU}/"):
                parts.append(f"Command: {code('bash scripts/gpu_check.sh')}.\n\nDevice: {gpu_machine(data)}.")
            else:
                parts.append("\n\n".join(provenance(rel, data)))
            beside = [
                f"{label}: {code('benchmarks/results/' + rel[: -len('.json')] + suffix)}"
                for suffix, label in COMPANIONS.items()
                if rel[: -len(".json")] + suffix in companions
            ]
            if beside:
                parts.append("Beside it: " + "; ".join(beside) + ".")
    return "\n\n".join(parts) + "\n"


def machines_table(results: Path, files: Sequence[str]) -> str:
    rows: dict[tuple[str, ...], int] = {}
    for rel in files:
        folder = rel.partition("/")[0]
        if not rel.endswith(".json") or any(rel.endswith(s) for s in COMPANIONS) or folder == GPU:
            continue
        data = json.loads((results / rel).read_text(encoding="utf-8"))
        machines = [r.get("machine") for r in runs_of(data)] or [machine_of(data)]
        for m in {json.dumps(m, sort_keys=True): m for m in machines}.values():
            if isinstance(m, Mapping) and m.get("cpu"):
                key = (
                    folder,
                    str(m["cpu"]),
                    ", ".join(m.get("vector_flags") or ()),
                    str(m.get("threads")),
                    str(m.get("torch")),
                )
            else:
                key = (folder, "not recorded", "", "", "")
            rows[key] = rows.get(key, 0) + 1
    gpus = sum(1 for rel in files if rel.startswith(f"{GPU}/") and rel.endswith(".json"))
    if gpus:
        rows[(GPU, "see each file's device", "", "", "")] = gpus
    header = ["folder", "processor", "vector flags", "threads", "torch", "results files"]
    return table(header, [[code(k[0]), *k[1:], str(n)] for k, n in sorted(rows.items())])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DOC)
    args = parser.parse_args(argv)
    args.out.write_text(render(), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
