"""Write docs/benchmarks.md from the results committed under benchmarks/results/.

    python -m scripts.benchmarks_doc [--out docs/benchmarks.md]      (from the repository root; or: make benchmarks-doc)

The prose is `benchmarks/doc_template.md`: a section per benchmark, whose `{{ results: NAME ... }}`
line becomes the tables of every results file of that name, in any machine's folder (a name with a
`/`, such as `gpu/*.json`, is a pattern over paths under benchmarks/results/). The tables of a file
are its owner's: the benchmark script the file is named after (`fixed_budget_auto.json` is
`benchmarks/fixed_budget.py`'s), through its `tables(data) -> list[str]`; `hdlib bench`'s results,
which no script owns, are `benchmarks/bench_tables.py`'s. Under each file's tables: the command that
made it, the machine it ran on and its date, as the file records them, and what made it (its
`provenance`: commit, versions, digests, host; `hdlib.bench.provenance`). `{{ machines }}` is the
table of machines; `{{ kept: PATH ... }}` lists results that are not shown but that something still
reads; `{{ unreported: PATH ... }}` lists the files that record no command, every one of them and
no other: none of their numbers is shown, since nothing says how to make them again.

Every results file carries a complete provenance but those written before results carried it,
`LEGACY`, a list that only shrinks: `incomplete_provenance` names any other that lacks it, and
tests/test_provenance.py fails on it.

The output depends on the committed files only (fixed order, fixed number formats, no date of its
own), so tests/test_benchmarks_doc.py can require the committed doc to be exactly this script's
output, and every results file to be in it. A results file that the template does not name, or that
lies in another machine's folder than the one it records, is an error.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from fnmatch import fnmatch
from importlib import import_module
from pathlib import Path
from typing import Any

from benchmarks import bench_tables
from benchmarks.bench_tables import runs_of
from benchmarks.common import RESULTS, ROOT, machine_folder
from benchmarks.markdown import code, table
from hdlib.bench.provenance import PACKAGES, missing_keys

DOC = ROOT / "docs" / "benchmarks.md"
TEMPLATE = ROOT / "benchmarks" / "doc_template.md"
PLACEHOLDER = re.compile(r"^\{\{ (machines|results|kept|unreported)(?:: (.*?))? \}\}$", re.M)
GPU = "gpu"  # benchmarks/results/gpu/<device>.json: scripts/gpu_check.sh's results (docs/gpu.md)
COMPANIONS = {".raw.jsonl": "raw per-question records", ".html": "HTML report"}  # files beside a results JSON
NOT_REPORTED = (  # a section whose every file records no command
    "Not reported: the one results file of this benchmark records no command, so what made its numbers "
    "cannot be said (it is listed under \"Not reported: no command recorded\" at the end)."
)

# A run's own copy of Spec-Bench's question file is shown as the file's path in Spec-Bench's repository.
SPEC_BENCH_COPY = re.compile(r"(?<=--questions )\S*specbench/question\.jsonl")
SPEC_BENCH = "data/spec_bench/question.jsonl"

# The commands of the files that do not record theirs, as the README of their day gave them: said in
# the list of files not reported, never as what made their numbers.
KNOWN_COMMANDS = {
    "epyc-avx512/orders_at_16.json": f"hdlib bench --questions {SPEC_BENCH} --per-task 2 "
    "--max-new-tokens 128 --methods hd:all-orders@16 --out benchmarks/orders_at_16.json",
    "xeon-amx/specbench_bf16.json": f"hdlib bench --questions {SPEC_BENCH} --per-task 2 "
    "--max-new-tokens 128 --methods hd,hd:C --dtype bfloat16 --out benchmarks/specbench_bf16.json",
    "xeon-amx/model_db_engines.json": "python benchmarks/model_db_engines.py",
}

# The results committed before files recorded what made them (`provenance`). Only these may lack it;
# the list only shrinks (a file rerun today carries it).
LEGACY = frozenset(
    f"{folder}/{name}.json"
    for folder, names in {
        "epyc-avx2": ("accept_phase", "cache_speed", "hierarchy", "sampling_rules"),
        "epyc-avx512": ("cpu_forward", "fixed_budget", "fixed_budget_auto", "orders_at_16", "sampling"),
        "unrecorded": ("lookup_latency", "sampling", "statistics_tier", "tiers"),
        "xeon-amx": (
            "constants", "cpu_forward", "engine_traps", "field", "field_at_64", "fixed_budget_auto",
            "fixed_budget_side_by_side", "fixed_budget_top12", "gate_replay", "gate_vs_ask_all", "model_db_engines",
            "orders_at_16", "proposer_cost", "proposer_cost_length", "proposer_cost_sources", "proposer_memory",
            "proposer_replay", "proposer_replay_dev_r1", "proposer_replay_dev_r16", "proposer_replay_dev_r64",
            "proposer_replay_dev_r8", "proposer_replay_report", "report_half-vllm", "report_half", "sampling",
            "served_load", "served_load_dev_clock", "served_load_dev_cost", "served_load_report",
            "served_load_report_clock", "served_load_report_derived", "served_load_report_preamble",
            "served_load_report_repeats", "served_load_report_repeats_preamble", "specbench_bf16",
            "step_overhead_contracts_auto", "step_overhead_contracts_fixed16", "step_overhead_contracts_same",
            "vllm_hd-vllm", "vllm_hd", "vllm_step_cost", "vllm_step_cost_one_row", "vllm_step_cost_rerun",
        ),
    }.items()
    for name in names
)  # fmt: skip


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


def provenance(rel: str, data: Mapping[str, Any]) -> list[str]:
    """The lines under a file's tables: command, machine, date, what made it, what the file does not say."""
    if rel.startswith(f"{GPU}/"):
        device = f"Device: {owner(rel, data).device_text(data)}."
        return [f"Command: {code('bash scripts/gpu_check.sh')}.", device, made_line(rel, data)]
    command = data.get("command")  # every file shown has one (`commandless`: those without are not shown)
    lines = [f"Command: {code(SPEC_BENCH_COPY.sub(SPEC_BENCH, command))}." if command else "Command: not recorded."]
    lines.append(f"Machine: {machine_text(machine_of(data))}.")
    dates = sorted({str(d) for d in [data.get("date"), *(r.get("date") for r in runs_of(data))] if d})
    if dates:
        lines.append(f"Date: {', '.join(dates)}.")
    return [*lines, made_line(rel, data), *intervals_line(data)]


def intervals_line(data: Mapping[str, Any]) -> list[str]:
    """How the file's intervals were computed, where it has some: recomputed with today's estimators
    (scripts/reanalyse.py, its `analysis` field), or as its run computed them, before them."""
    if data.get("analysis"):
        return [f"Analysis: {data['analysis']}."]
    if '"low"' not in json.dumps(data) or '"over":' in json.dumps(data):
        return []
    return [
        "Intervals: as the run computed them, a percentile bootstrap before the estimators of issue 57 "
        "(hdlib.bench.intervals), not recomputed: the file lacks the per-question records; for 6 to 18 questions "
        "such an interval is some 10 % too narrow, and over repeats it is no t-interval."
    ]


def made_line(rel: str, data: Mapping[str, Any]) -> str:
    """What made the file, as its `provenance` records it (hdlib.bench.provenance), and where its
    command wrote it when that is not where it is committed."""
    made = data.get("provenance")
    if isinstance(made, Mapping):
        commit = made.get("commit")
        clean = {True: "clean", False: "tracked files modified"}.get(made.get("clean"), "state unknown")
        parts = [f"commit {code(str(commit)[:12])} ({clean})" if commit else "no commit (not a checkout, or no git)"]
        parts.append(versions_text(made.get("versions")))
        if made.get("serving_versions"):
            parts.append(f"served from vLLM's environment with {versions_text(made['serving_versions'])}")
        digests = [f"{what} {code(made[key])}" for key, what in DIGESTS.items() if made.get(key)]
        parts.append(", ".join(digests) if digests else "no forward profile or kernel choices read")
        parts.append(f"host {made.get('host')} ({made.get('cpu') or 'processor not named'})")
        text = "Provenance: " + "; ".join(parts)
    elif rel in LEGACY:
        text = "Provenance: not recorded (written before results carried it)"
    else:
        text = "Provenance: not recorded"
    written = written_to(data.get("command"))
    if written is not None and written != f"benchmarks/results/{rel}":
        text += f"; written to {code(written)}, committed as {code(f'benchmarks/results/{rel}')}"
    return text + "."


DIGESTS = {"forward_profile": "forward profile", "kernel_choices": "kernel choices"}


def versions_text(versions: Any) -> str:
    """hdlib 0.1.0, torch 2.13.0+cpu, ... (not installed: numba); in PACKAGES' order."""
    if not isinstance(versions, Mapping):
        return "versions not recorded"
    names = [*PACKAGES, *(n for n in versions if n not in PACKAGES)]
    found = [f"{n} {versions[n]}" for n in names if versions.get(n)]
    absent = [n for n in names if n in versions and not versions[n]]
    return ", ".join(found) + (f" (not installed: {', '.join(absent)})" if absent else "")


def written_to(command: Any) -> str | None:
    """The path a recorded command's `--out` wrote, relative to the repository where it lies in it."""
    if not isinstance(command, str):
        return None
    try:
        words = shlex.split(command)
    except ValueError:  # most commands were recorded joined by spaces, not quoted
        words = command.split()
    outs = [b for a, b in zip(words, words[1:]) if a == "--out"] + [w[6:] for w in words if w.startswith("--out=")]
    if not outs:
        return None
    path = Path(outs[-1])
    return (path.relative_to(ROOT) if path.is_absolute() and path.is_relative_to(ROOT) else path).as_posix()


def incomplete_provenance(results: Path = RESULTS) -> dict[str, list[str]]:
    """Each results file (a JSON under `results`, the companions aside) not in LEGACY whose provenance
    lacks a key, with the keys it lacks: {} when every new result says what made it."""
    found = {}
    for rel in results_files(results):
        if rel.endswith(".json") and rel not in LEGACY:
            data = json.loads((results / rel).read_text(encoding="utf-8"))
            missing = missing_keys(data.get("provenance") if isinstance(data, Mapping) else None)
            if missing:
                found[rel] = missing
    return found


# Whose tables: the script a file is named after, else hdlib bench's --------------------------


def owner(rel: str, data: Mapping[str, Any]) -> Any:
    """The module whose `tables` renders the file at `rel` (a path under benchmarks/results/)."""
    folder, _, name = rel.partition("/")
    stem = "gpu_check" if folder == GPU else name.removesuffix(".json")
    scripts = sorted((p.stem for p in (ROOT / "benchmarks").glob("*.py")), key=len, reverse=True)
    for script in (s for s in scripts if stem == s or stem.startswith(f"{s}_")):
        module = import_module(f"benchmarks.{script}")
        if hasattr(module, "tables"):
            return module
    if "methods" in data:
        return bench_tables
    if "summary" in data and "runs" in data:  # a served run named otherwise (sealed_served.json)
        return import_module("benchmarks.served_load")
    raise SystemExit(f"benchmarks/results/{rel}: no benchmark script owns it (one named after it, with `tables`)")


def check_folder(rel: str, data: Mapping[str, Any]) -> None:
    """A file that records its machine must lie in that machine's folder."""
    folder = rel.partition("/")[0]
    machine = machine_of(data)
    if folder != GPU and machine_folder(machine) != folder:
        raise SystemExit(
            f"benchmarks/results/{rel} records the machine of folder {machine_folder(machine)!r}, not {folder!r}"
        )


def shown(results: Path, rel: str, companions: set[str]) -> str:
    """A file's heading, tables, provenance, and the files beside it."""
    data = json.loads((results / rel).read_text(encoding="utf-8"))
    check_folder(rel, data)
    parts = [f"### `benchmarks/results/{rel}`", *owner(rel, data).tables(data), "\n\n".join(provenance(rel, data))]
    beside = beside_it(rel, companions)
    if beside:
        parts.append("Beside it: " + "; ".join(beside) + ".")
    return "\n\n".join(parts)


def beside_it(rel: str, companions: set[str]) -> list[str]:
    """The files beside a results file (its raw records, its HTML report), each with what it is."""
    stem = rel.removesuffix(".json")
    return [f"{what}: {code(f'benchmarks/results/{stem}{s}')}" for s, what in COMPANIONS.items()
            if stem + s in companions]  # fmt: skip


def commandless(results: Path, files: Sequence[str]) -> list[str]:
    """The results files that record no command (the device check's aside, whose command is fixed): what
    made their numbers cannot be said, so none is shown."""
    found = []
    for rel in files:
        if rel.endswith(".json") and not rel.startswith(f"{GPU}/") and not any(rel.endswith(s) for s in COMPANIONS):
            data = json.loads((results / rel).read_text(encoding="utf-8"))
            if not (isinstance(data, Mapping) and data.get("command")):
                found.append(rel)
    return found


def unreported_list(rels: Sequence[str], companions: set[str]) -> str:
    """Each command-less file, as "not reported", with the command the README of its day gave where known."""
    lines = []
    for rel in rels:
        known = KNOWN_COMMANDS.get(rel)
        said = f"; the command as the README of its day gave it: {code(known)}" if known else ""
        beside = beside_it(rel, companions)
        also = f" (beside it: {'; '.join(beside)})" if beside else ""
        lines.append(f"- `benchmarks/results/{rel}`{also}: not reported: no command recorded{said}.")
    return "\n".join(lines) or "None."


# Putting it together ---------------------------------------------------------------------------


def results_files(results: Path) -> list[str]:
    """Every file under `results`, as a path relative to it, sorted."""
    return sorted(p.relative_to(results).as_posix() for p in results.rglob("*") if p.is_file())


def matching(patterns: Sequence[str], files: Sequence[str]) -> list[str]:
    """The files a placeholder names, by folder, then in the order of its patterns."""

    def rank(rel: str) -> int | None:
        folder, _, name = rel.partition("/")
        hits = (i for i, p in enumerate(patterns) if (fnmatch(rel, p) if "/" in p else folder != GPU and name == p))
        return next(hits, None)

    return sorted((f for f in files if rank(f) is not None), key=lambda f: (f.partition("/")[0], rank(f), f))


def render(results: Path = RESULTS, template: Path = TEMPLATE) -> str:
    files = results_files(results)
    companions = {f for f in files if any(f.endswith(s) for s in COMPANIONS)}
    text = template.read_text(encoding="utf-8")
    named = {f for m in PLACEHOLDER.finditer(text) for f in matching((m.group(2) or "").split(), files)}
    unclaimed = [f for f in files if f not in companions and f not in named]
    orphans = [f for f in companions if next(f[: -len(s)] + ".json" for s in COMPANIONS if f.endswith(s)) not in files]
    if unclaimed or orphans:
        raise SystemExit(
            "results that benchmarks/doc_template.md does not name (add them to a section, or remove the file): "
            + ", ".join(sorted(unclaimed + orphans))
        )
    unreported = commandless(results, files)
    listed = {f for m in PLACEHOLDER.finditer(text) if m.group(1) == "unreported"
              for f in matching((m.group(2) or "").split(), files)}  # fmt: skip
    if set(unreported) != listed:
        raise SystemExit(
            "benchmarks/doc_template.md's {{ unreported: ... }} must list exactly the results that record no command: "
            + ", ".join(f"{f} ({'no command' if f in unreported else 'has a command'})"
                        for f in sorted(set(unreported) ^ listed))  # fmt: skip
        )

    def fill(match: re.Match[str]) -> str:
        kind, mine = match.group(1), matching((match.group(2) or "").split(), files)
        if kind == "machines":
            return machines_table(results, files)
        if kind == "kept":
            return "\n".join(f"- `benchmarks/results/{rel}`" for rel in mine)
        if kind == "unreported":
            return unreported_list(unreported, companions)
        reported = [rel for rel in mine if rel not in unreported]
        if mine and not reported:
            return NOT_REPORTED
        return "\n\n".join(shown(results, rel, companions) for rel in reported) or "No result committed yet."

    return PLACEHOLDER.sub(fill, text)


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
                flags = ", ".join(m.get("vector_flags") or ())
                key = (folder, str(m["cpu"]), flags, str(m.get("threads")), str(m.get("torch")))
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
