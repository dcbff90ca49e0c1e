"""Write docs/benchmarks.md from the results committed under benchmarks/results/.

    python -m scripts.benchmarks_doc [--out docs/benchmarks.md]      (from the repository root; or: make benchmarks-doc)

The prose is `benchmarks/doc_template.md`: a section per benchmark, whose `{{ results: NAME ... }}`
line becomes the tables of every results file of that name, in any machine's folder (a name with a
`/`, such as `gpu/*.json`, is a pattern over paths under benchmarks/results/). The tables of a file
are its owner's: the benchmark script the file is named after (`fixed_budget_auto.json` is
`benchmarks/fixed_budget.py`'s), through its `tables(data) -> list[str]`; `hdlib bench`'s results,
which no script owns, are `benchmarks/bench_tables.py`'s. Under each file's tables: the command that
made it, the machine it ran on and its date, as the file records them. `{{ machines }}` is the table
of machines; `{{ kept: PATH ... }}` lists results that are not shown but that something still reads.

The output depends on the committed files only (fixed order, fixed number formats, no date of its
own), so tests/test_benchmarks_doc.py can require the committed doc to be exactly this script's
output, and every results file to be in it. A results file that the template does not name, or that
lies in another machine's folder than the one it records, is an error.
"""

from __future__ import annotations

import argparse
import json
import re
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

DOC = ROOT / "docs" / "benchmarks.md"
TEMPLATE = ROOT / "benchmarks" / "doc_template.md"
PLACEHOLDER = re.compile(r"^\{\{ (machines|results|kept)(?:: (.*?))? \}\}$", re.M)
GPU = "gpu"  # benchmarks/results/gpu/<device>.json: scripts/gpu_check.sh's results (docs/gpu.md)
COMPANIONS = {".raw.jsonl": "raw per-question records", ".html": "HTML report"}  # files beside a results JSON

# A run's own copy of Spec-Bench's question file is shown as the file's path in Spec-Bench's repository.
SPEC_BENCH_COPY = re.compile(r"(?<=--questions )\S*specbench/question\.jsonl")
SPEC_BENCH = "data/spec_bench/question.jsonl"

# The commands of the files that do not record theirs, as the README of their day gave them.
KNOWN_COMMANDS = {
    "epyc-avx512/orders_at_16.json": f"hdlib bench --questions {SPEC_BENCH} --per-task 2 "
    "--max-new-tokens 128 --methods hd:all-orders@16 --out benchmarks/orders_at_16.json",
    "xeon-amx/specbench_bf16.json": f"hdlib bench --questions {SPEC_BENCH} --per-task 2 "
    "--max-new-tokens 128 --methods hd,hd:C --dtype bfloat16 --out benchmarks/specbench_bf16.json",
    "xeon-amx/model_db_engines.json": "python benchmarks/model_db_engines.py",
}



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
    """The lines under a file's tables: command, machine, date, what the file does not say."""
    if rel.startswith(f"{GPU}/"):
        return [f"Command: {code('bash scripts/gpu_check.sh')}.", f"Device: {owner(rel, data).device_text(data)}."]
    command = data.get("command")
    if command:
        lines = [f"Command: {code(SPEC_BENCH_COPY.sub(SPEC_BENCH, command))}."]
    elif rel in KNOWN_COMMANDS:
        lines = [f"Command (not recorded in the file; as the README of its day gives it): {code(KNOWN_COMMANDS[rel])}."]
    else:
        lines = ["Command: not recorded in the file."]
    lines.append(f"Machine: {machine_text(machine_of(data))}.")
    dates = sorted({str(d) for d in [data.get("date"), *(r.get("date") for r in runs_of(data))] if d})
    if dates:
        lines.append(f"Date: {', '.join(dates)}.")
    return lines


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
    stem = rel.removesuffix(".json")
    beside = [
        f"{label}: {code(f'benchmarks/results/{stem}{s}')}" for s, label in COMPANIONS.items() if stem + s in companions
    ]
    if beside:
        parts.append("Beside it: " + "; ".join(beside) + ".")
    return "\n\n".join(parts)


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

    def fill(match: re.Match[str]) -> str:
        kind, mine = match.group(1), matching((match.group(2) or "").split(), files)
        if kind == "machines":
            return machines_table(results, files)
        if kind == "kept":
            return "\n".join(f"- `benchmarks/results/{rel}`" for rel in mine)
        return "\n\n".join(shown(results, rel, companions) for rel in mine) or "No result committed yet."

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
