"""Recompute the intervals of committed results with today's estimators (hdlib.bench.intervals), from
the per-question records each file holds or has beside it; nothing is measured again.

    python -m scripts.reanalyse [FILE ...]      (default: every file it knows how to read, under benchmarks/results/)
    python -m scripts.reanalyse FILE --out OUT [--plan-reading | --without-records 59-74]

Only results written before results carried their provenance: a later one was computed by the
estimators of the commit it names, and is kept as it came out (a sealed run, read by its plan).
`hdlib bench` results with their raw records (NAME.raw.jsonl): each method's metrics and the paired
comparisons, from the records alone (`hdlib.bench.metrics`), only for files that carry intervals.
benchmarks/served_load.py's results: each method's summary and the comparisons, from the answers the
file holds (`benchmarks.served_load.summarize`, `compare`). Every value (a speedup, a MAT, a ratio)
must come out as the file has it, or the file is left alone and named: only the intervals change. A
file rewritten says so in its `analysis` field. tests/test_reanalyse.py checks that running it again
changes nothing.

With `--out`, one file (provenance or not) is read again into another, which says so in its
`analysis` field and keeps the run's command and provenance: a sealed run read by today's estimators
beside its plan's reading (`sealed_bench_reread.json`), or, with `--plan-reading`, a served run read
by the interval over questions its plan named (`cluster_bootstrap(floor=False)`: without the
t-interval floor; `sealed_served_plan.json`; each comparison lists the levels whose verdict the run's
own reading does not repeat, `unconfirmed`), or, with `--without-records`, a bench run read
without some of its records (numbered from 1 in its raw file, the settings line not counted), whose
values then change too: a check beside a run whose records were disturbed, never its verdict
(`sealed_bench_undisturbed.json`, benchmarks/plans/sealed_issue57_addendum.md).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS
from hdlib.bench.records import QuestionRuns

NOTE = (
    "intervals recomputed from the file's own records by scripts/reanalyse.py with hdlib.bench.intervals as of "
    "issue 57 (over questions: a BCa bootstrap of whole questions, each with its repeats, widened for few "
    "questions and never narrower than the t-interval over the questions, none under 6; over repeats: a "
    "t-interval, none under 5); every value as the run wrote it"
)


REREAD = (
    "the run's own records read again by scripts/reanalyse.py with hdlib.bench.intervals after issue 57's review "
    "(over questions: the BCa bootstrap never narrower than the t-interval over the questions): not the reading its "
    "plan named, which the run's own file gives; every value as the run wrote it"
)
WITHOUT = "a check, not the run's verdict: the run read without its raw records numbered "
PLAN_READING = (
    "the run's own records read by scripts/reanalyse.py with the interval over questions issue 57's sealed plan "
    "named (the BCa bootstrap of whole questions widened for few questions, without the later t-interval floor: "
    "cluster_bootstrap(floor=False)); every value as the run wrote it"
)


def bench(data: Mapping[str, Any], raw: Path, without: frozenset[int] = frozenset()) -> dict[str, Any]:
    """A bench file's metrics and comparisons from its raw records, less the records numbered `without`."""
    from hdlib.bench.metrics import aggregate, compare

    lines = [json.loads(line) for line in raw.read_text(encoding="utf-8").splitlines() if line.strip()]
    settings = lines[0]["settings"]
    kept = [r for number, r in enumerate(map(QuestionRuns.from_json, lines[1:]), 1) if number not in without]
    records = {(r.question_id, r.repeat): r for r in kept}
    repeats = int(settings.get("repeats", 1))
    answered = [records[(q, r)] for r in range(repeats) for q in settings["question_ids"] if (q, r) in records]
    names = list(data["methods"])
    methods = {n: m.to_json() for n, m in aggregate(answered, names).items()}
    pairs = [(c["a"], c["b"]) for c in data.get("comparisons", [])]
    out = dict(data) | {"methods": methods, "comparisons": [compare(answered, a, b).to_json() for a, b in pairs]}
    return out


def served(data: Mapping[str, Any], floor: bool = True) -> dict[str, Any]:
    from benchmarks.served_load import compare, summarize

    runs = data["runs"]
    summary = {m: {c: summarize(runs[m][c], runs["vllm"][c] if m != "vllm" else None) for c in runs[m]} for m in runs}
    pairs = [(c["a"], c["b"]) for c in data["comparisons"]]
    return dict(data) | {"summary": summary, "comparisons": compare(runs, pairs, data["concurrency"], floor)}


def values_kept(before: Any, after: Any, path: str = "") -> list[str]:
    """Where a value (not an interval's bound, not a per-unit list) differs between the two."""
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        keys = [k for k in before if k not in ("low", "high", "values", "over", "n")]
        return [d for k in keys if k in after for d in values_kept(before[k], after[k], f"{path}.{k}")]
    if isinstance(before, float) and isinstance(after, float):
        return [] if math.isclose(before, after, rel_tol=1e-9, abs_tol=1e-12) else [path]
    return []


def reanalysed(
    path: Path, again: bool = False, plan: bool = False, without: frozenset[int] = frozenset()
) -> dict[str, Any] | None:
    """The file at `path` with today's intervals, or None where it is not one this script reads;
    `again`: a file with its provenance too (read into another file, `--out`), `plan`: by the interval
    over questions issue 57's sealed plan named (served runs), `without`: less these raw records (a
    bench run's; its values change)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if "provenance" in data and not again:  # written by the estimators of its commit, which it names: kept
        return None
    raw = path.with_name(path.stem + ".raw.jsonl")
    if "methods" in data and raw.exists() and '"low"' in json.dumps(data["methods"]) and not plan:
        out = bench(data, raw, without)
        if without:
            return out | {"analysis": f"{WITHOUT}{', '.join(map(str, sorted(without)))}; {REREAD}"}
    elif "summary" in data and isinstance(data.get("runs"), Mapping) and "comparisons" in data:
        out = served(data, floor=not plan)
        if plan:  # the verdicts the run's own reading does not repeat, marked (benchmarks.served_load.unconfirmed)
            from benchmarks.served_load import unconfirmed

            marks = unconfirmed(out, data)
            out["comparisons"] = [c | {"unconfirmed": marks.get((c["a"], c["b"]), [])} for c in out["comparisons"]]
    else:
        return None
    changed = values_kept(data, out)
    if changed:
        raise SystemExit(f"{path}: values would change, not only intervals ({', '.join(changed[:5])}): left alone")
    return out | {"analysis": PLAN_READING if plan else REREAD if again else NOTE}


def records(spec: str) -> list[int]:
    """'59-74,80' -> [59, ..., 74, 80]."""
    found: list[int] = []
    for part in filter(None, spec.split(",")):
        first, _, last = part.partition("-")
        found += range(int(first), int(last or first) + 1)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--out", type=Path, help="read the one FILE again into OUT (a file with provenance too)")
    parser.add_argument("--plan-reading", action="store_true", help="with --out: the sealed plan's interval")
    parser.add_argument("--without-records", default="", metavar="A-B,C", help="with --out: less these raw records")
    args = parser.parse_args(argv)
    try:
        without = frozenset(records(args.without_records))
    except ValueError:
        parser.error(f"--without-records {args.without_records}: numbers and ranges, such as 59-74 or 3,5-7")
    if args.out is not None or args.plan_reading or without:
        if len(args.files) != 1 or args.out is None or (args.plan_reading and without):
            parser.error("--out reads one FILE into OUT, with --plan-reading or --without-records (not both)")
        out = reanalysed(args.files[0], again=True, plan=args.plan_reading, without=without)
        if out is None:
            parser.error(f"{args.files[0]}: not a file this script reads")
        args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
        return 0
    for path in args.files or sorted(RESULTS.rglob("*.json")):
        out = reanalysed(path)
        if out is not None:
            path.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
            print(f"rewrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
