"""What the docs' tests read: the committed results, the docs as one line of words, a number as the
docs print it, and the verdicts `hdlib.bench.intervals` allows (tests/test_docs_serving.py,
tests/test_benchmarks_doc.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from itertools import takewhile
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.served_load import margins
from hdlib.bench.intervals import Estimate, cluster_bootstrap, verdict
from hdlib.bench.records import QuestionRuns

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
XEON = RESULTS / "xeon-amx"


def words(path: Path) -> str:
    """A page's text with its line breaks and runs of spaces made single spaces."""
    return " ".join(path.read_text(encoding="utf-8").split())


def result(name: str) -> dict[str, Any]:
    """A committed results file of the Xeon, by its stem."""
    return json.loads((XEON / f"{name}.json").read_text(encoding="utf-8"))


def say(e: Mapping[str, Any]) -> str:
    """An estimate as the docs write a ratio: '1.04x [1.00, 1.07]', or with too few questions or repeats
    for an interval '1.43x (4 questions: 1.11, 2.50, 1.15, 1.31; too few for an interval)'."""
    return Estimate.from_json(e).describe(suffix="x")


def cell(e: Mapping[str, Any], fmt: str) -> str:
    """An estimate as docs/serving.md's tables print it: '13.4 [12.8, 14.0]', or with fewer than five
    repeats each repeat's value in parentheses, '12.5 (13.1, 12.5, 11.9)'."""
    est = Estimate.from_json(e)
    if est.has_interval:
        return f"{est.value:{fmt}} [{est.low:{fmt}}, {est.high:{fmt}}]"
    return f"{est.value:{fmt}} ({', '.join(f'{v:{fmt}}' for v in est.values)})"


def table_rows(text: str, first: str) -> dict[str, list[str]]:
    """The rows of the markdown table whose header begins with `first`, by their first cell."""
    lines = takewhile(lambda line: line.startswith("|"), text[text.index(f"| {first} |") :].splitlines()[2:])
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    return {row[0]: row[1:] for row in rows}


def served_table_is(text: str, start: int, served: Mapping[str, Any]) -> str:
    """The served run's table that follows `start` in docs/serving.md is `served`'s, every answer was
    plain decoding's, and every paired comparison by question is said in the prose after the table,
    which is returned as one line of words."""
    start = text.index("| concurrency | method |", start)
    lines = takewhile(lambda line: line.startswith("|"), text[start:].splitlines()[2:])
    printed = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    expected = [
        [str(c), f"`{m}`" + (" (plain)" if m == "vllm" else ""), cell(r["tokens_per_s"], ".1f"), cell(r["mat"], ".2f")]
        for c in served["concurrency"]
        for m, levels in served["summary"].items()
        for r in [levels[str(c)]]
    ]
    assert printed == expected
    assert all(r["identical_frac"] in (None, 1.0) for levels in served["summary"].values() for r in levels.values())
    end = text.find("\n### ", start)
    prose = " ".join(text[start : end if end > 0 else len(text)].split())
    for cmp in served["comparisons"]:
        for c, e in cmp["levels"].items():
            assert f"{say(e)} at concurrency {c}" in prose, (cmp["a"], cmp["b"], c)
    return prose


def cited(text: str) -> dict[str, tuple[str, ...]]:
    """`name` V.VVx [L, H] (MAT M [L, H]) as a sentence of the docs cites a method."""
    number = r"(\d+\.\d\d)"
    found = re.findall(rf"`([^`]+)` {number}x \[{number}, {number}\] \(MAT {number} \[{number}, {number}\]\)", text)
    return {name: tuple(rest) for name, *rest in found}


def comparison(run: Mapping[str, Any], a: str, b: str) -> Mapping[str, Any]:
    return {(x["a"], x["b"]): x for x in run["comparisons"]}[a, b]


def verdicts(run: Mapping[str, Any], a: str, b: str) -> list[str]:
    """The verdict of a served run's paired ratio a/b at each concurrency: its intervals by question and
    by repeat read together, within the run's margin (`benchmarks.served_load.margins`)."""
    cmp, within = comparison(run, a, b), margins(run)
    return [
        verdict(Estimate.from_json(cmp["levels"][c]), Estimate.from_json(cmp["by_repeat"][c]), within=within[c])
        for c in map(str, run["concurrency"])
    ]


def by_question_alone(run: Mapping[str, Any], a: str, b: str) -> list[str]:
    """What the interval by question of a served run's ratio a/b would say alone at each concurrency: not
    the run's verdict where it has no interval over repeats (`verdicts`), but what docs/serving.md
    quotes "by question alone" beside it."""
    cmp, within = comparison(run, a, b), margins(run)
    return [verdict(Estimate.from_json(cmp["levels"][c]), within=within[c]) for c in map(str, run["concurrency"])]


def throughput_verdicts(run: Mapping[str, Any], a: str, b: str) -> list[str]:
    """The verdict of the servers' throughput ratio a/b at each concurrency, which stands apart."""
    cmp, within = comparison(run, a, b), margins(run)
    return [verdict(Estimate.from_json(cmp["throughput"][c]), within=within[c]) for c in map(str, run["concurrency"])]


def target_levels(run: Mapping[str, Any]) -> list[int]:
    """The concurrencies where the run shows issue 45's target: `vllm-hd` behind neither plain decoding
    nor SuffixDecoding, each verdict "faster" or "on par"."""
    held = ("faster", "on par")
    pairs = zip(verdicts(run, "vllm-hd", "vllm"), verdicts(run, "vllm-hd", "vllm-suffix"))
    return [c for c, (plain, suffix) in zip(run["concurrency"], pairs) if plain in held and suffix in held]


def paired_mat_ratio(raw: Path, a: str, b: str) -> Estimate:
    """A's MAT over B's in a bench run's raw records, paired by question: the ratio of the two MATs (each
    all tokens over all steps of every repeat), its interval from issue 57's bootstrap over questions,
    each question's tokens and steps under both methods resampled together."""
    lines = [json.loads(line) for line in raw.read_text(encoding="utf-8").splitlines() if line.strip()]
    ids = lines[0]["settings"]["question_ids"]
    sums = {m: {q: np.zeros(2) for q in ids} for m in (a, b)}
    for record in map(QuestionRuns.from_json, lines[1:]):
        for m in (a, b):
            sums[m][record.question_id] += [sum(t.tokens for t in record.runs[m]), sum(t.steps for t in record.runs[m])]
    (a_tokens, a_steps), (b_tokens, b_steps) = (np.array([sums[m][q] for q in ids]).T for m in (a, b))

    def ratio(at, ast, bt, bst, axis=None):  # noqa: ANN001, ANN202
        return (at.sum(axis) / ast.sum(axis)) / (bt.sum(axis) / bst.sum(axis))

    columns = (a_tokens, a_steps, b_tokens, b_steps)
    own = (a_tokens / a_steps) / (b_tokens / b_steps)
    return cluster_bootstrap(columns, ratio, float(ratio(*columns)), own.tolist())


EPYC = RESULTS / "epyc-avx512"


def section(text: str, heading: str) -> str:
    """The part of a page's words from `heading` to the next heading of its level or above."""
    start = text.index(heading)
    level = heading.split(" ", 1)[0]
    ends = [m.start() for m in re.finditer(r"(?<= )#{1,%d} " % len(level), text[start + len(heading) :])]
    return text[start : start + len(heading) + min(ends)] if ends else text[start:]


def sealed_bench_sentences() -> list[str]:
    """What docs/peers.md says of issue 57's sealed bench (benchmarks/plans/sealed_issue57.md, part 1),
    each sentence computed from the files: each method's speed and MAT; `hd` against SuffixDecoding
    and the A/A pair as the plan reads them (the run's own intervals, both together, the margin from
    the A/A pair's reach); the same read again after the review (`sealed_bench_reread.json`) and,
    as a check, without the disturbed records (`sealed_bench_undisturbed.json`); per task."""
    from hdlib.bench.intervals import MARGIN, Comparison, aa_margin

    def load(name: str) -> dict[str, Any]:
        return json.loads((EPYC / f"{name}.json").read_text(encoding="utf-8"))

    run, again, check = load("sealed_bench"), load("sealed_bench_reread"), load("sealed_bench_undisturbed")
    out = []
    for name in ("hd", "hd#2", "suffix"):
        e = run["methods"][name]["overall"]["intervals"]
        out.append(f"`{name}` {Estimate.from_json(e['speedup']).describe(suffix='x')} "
                   f"(MAT {Estimate.from_json(e['mat']).describe()})")  # fmt: skip
    pairs = {(c["a"], c["b"]): Comparison.from_json(c) for c in run["comparisons"]}
    hd, aa = pairs["hd", "suffix"], pairs["hd#2", "hd"]
    within = aa_margin(pairs.values())
    said = hd.verdict(within)
    out.append(f"`hd` against SuffixDecoding, question by question: {hd.overall.describe(suffix='x')} over "
               f"{hd.overall.n} questions; repeat by repeat: {hd.by_repeat.describe(suffix='x')} over "
               f"{hd.by_repeat.n} repeats: {said}")  # type: ignore[union-attr]  # fmt: skip
    out.append(f"the margin for on par: ±{100 * within:.0f} %")
    out.append(f"`hd#2` against `hd`, the same method twice: {aa.overall.describe(suffix='x')} by question, "
               f"{aa.by_repeat.describe(suffix='x')} by repeat: {aa.verdict(MARGIN)}")  # type: ignore[union-attr]  # fmt: skip
    seconds = {}
    for label, data in (("read again after the review", again), ("without the 16 disturbed question-repeats", check)):
        found = {(c["a"], c["b"]): Comparison.from_json(c) for c in data["comparisons"]}
        other = found["hd", "suffix"]
        seconds[label] = other.verdict(aa_margin(found.values()))
        out.append(f"{label}: {other.overall.describe(suffix='x')} by question, "
                   f"{other.by_repeat.describe(suffix='x')} by repeat: {seconds[label]}")  # type: ignore[union-attr]  # fmt: skip
    found = {(c["a"], c["b"]): Comparison.from_json(c) for c in check["comparisons"]}
    quiet = found["hd#2", "hd"]
    out.append(f"without them the yardstick is {quiet.overall.describe(suffix='x')} by question, "
               f"{quiet.by_repeat.describe(suffix='x')} by repeat: {quiet.verdict(MARGIN)}, and would set "
               f"the margin at ±{100 * aa_margin(found.values()):.0f} %")  # type: ignore[union-attr]  # fmt: skip
    for label, data in (("", run), ("without them, per task: ", check)):
        tasks = next(c for c in data["comparisons"] if (c["a"], c["b"]) == ("hd", "suffix"))["tasks"]
        out.append(label + "; ".join(f"{t} {Estimate.from_json(e).describe(suffix='x')}" for t, e in tasks.items()))
    crossed_ = bench_crossed(EPYC / "sealed_bench.raw.jsonl", "hd", "suffix")
    across = verdict(crossed_, within=within)
    out.append(f"over questions and repeats crossed: {crossed_.describe(suffix='x')}: {across}")
    if said in ("faster", "slower") and (seconds["read again after the review"] != said or across != said):
        out.append(f"{said}, unconfirmed")
    return out


def bench_crossed(raw: Path, a: str, b: str) -> Estimate:
    """A bench run's A/B over questions and repeats crossed (`hdlib.bench.intervals.crossed`) of each
    question-repeat's throughput ratio (`hdlib.bench.metrics.question_repeat_ratios`), from its raw records."""
    from hdlib.bench.intervals import crossed
    from hdlib.bench.metrics import question_repeat_ratios
    from hdlib.bench.records import QuestionRuns

    lines = raw.read_text(encoding="utf-8").splitlines()[1:]  # after the settings line
    return crossed(question_repeat_ratios([QuestionRuns.from_json(json.loads(line)) for line in lines], a, b))


SEALED_PAIRS = (("vllm-hd", "vllm"), ("vllm-hd", "vllm-suffix"), ("vllm-suffix", "vllm"))


def sealed_served_sentences() -> list[str]:
    """What docs/serving.md says of issue 57's sealed served run (benchmarks/plans/sealed_issue57.md,
    part 2), each sentence computed from the files: the verdict of each pair at each concurrency as the
    plan reads it (`sealed_served_plan.json`: its intervals over questions and over repeats together,
    the margin the larger of 5 % and the A/A pair's reach there), marked "unconfirmed" where a "faster"
    or "slower" is not repeated by the second reading (the addendum's rule; `sealed_served.json`: the
    interval over questions never narrower than the t-interval, read with the interval over repeats,
    and the crossed interval, each with its own margin); the A/A pair at 5 %; today's reading and the
    crossed interval beside it; the servers' throughput ratio, its own verdict; the share of answers
    identical to plain vLLM's; the levels where the run shows issue 45's target, and those of them
    that rest on a verdict marked unconfirmed."""
    from benchmarks.served_load import crossed_of, unconfirmed

    def load(name: str) -> dict[str, Any]:
        return json.loads((EPYC / f"{name}.json").read_text(encoding="utf-8"))

    def named(levels: list[str]) -> str:
        return " and ".join([", ".join(levels[:-1]), levels[-1]] if len(levels) > 1 else levels)

    plan, run = load("sealed_served_plan"), load("sealed_served")
    levels = [str(c) for c in plan["concurrency"]]
    within, crossed_within = margins(plan), margins(run, "crossed")
    out = ["the margin for on par at concurrency " + ", ".join(f"{c}: ±{100 * within[c]:.0f} %" for c in levels)]
    marks = unconfirmed(plan, run)
    assert {(c["a"], c["b"]): c["unconfirmed"] for c in plan["comparisons"] if c["unconfirmed"]} == marks
    for a, b in SEALED_PAIRS:
        cmp, floored = comparison(plan, a, b), comparison(run, a, b)
        said, again = verdicts(plan, a, b), verdicts(run, a, b)
        crossed = [crossed_of(run, a, b, c) for c in levels]
        across = [verdict(e, within=crossed_within[c]) for c, e in zip(levels, crossed)]
        for c, s in zip(levels, said):
            mark = ", unconfirmed" if c in marks.get((a, b), []) else ""
            out.append(f"`{a}` against `{b}`: {say(cmp['levels'][c])} at concurrency {c} by question, "
                       f"{say(cmp['by_repeat'][c])} by repeat: {s}{mark}")  # fmt: skip
        out.append(f"`{a}` against `{b}` read today, by question at " + "; ".join(
            f"{c}: {say(floored['levels'][c])}, {t}" for c, t in zip(levels, again)))  # fmt: skip
        out.append(f"`{a}` against `{b}` over questions and repeats crossed at " + "; ".join(
            f"{c}: {e.describe(suffix='x')}, {v}" for c, e, v in zip(levels, crossed, across)))  # fmt: skip
        thr = throughput_verdicts(plan, a, b)
        out.append(f"the servers' throughput, `{a}` against `{b}`, at " + "; ".join(
            f"{c}: {say(cmp['throughput'][c])}, {v}" for c, v in zip(levels, thr)))  # fmt: skip
    aa = comparison(plan, "vllm-hd#2", "vllm-hd")
    for c in levels:
        q, r = Estimate.from_json(aa["levels"][c]), Estimate.from_json(aa["by_repeat"][c])
        out.append(f"`vllm-hd#2` against `vllm-hd`: {q.describe(suffix='x')} at concurrency {c} by question, "
                   f"{r.describe(suffix='x')} by repeat: "
                   f"{verdict(q, r)}")  # fmt: skip
    shares = {m: [r["identical_frac"] for r in plan["summary"][m].values()] for m in plan["summary"] if m != "vllm"}
    if all(v == 1.0 for vs in shares.values() for v in vs):
        out.append("every answer of every method was plain vLLM's for the same question and repeat")
    else:
        out.append("answers identical to plain vLLM's, at each concurrency: " + "; ".join(
            f"`{m}` " + ", ".join(f"{100 * v:.1f} %" for v in vs) for m, vs in shares.items()))  # fmt: skip
    held = [str(c) for c in target_levels(plan)]
    shaky = [c for c in held if any(c in marks.get(pair, []) for pair in SEALED_PAIRS[:2])]
    firm = [c for c in held if c not in shaky]
    out.append("issue 45's target at " + (f"concurrency {named(firm)}" if firm else "no concurrency")
               + (f"; at {named(shaky)} only by a verdict marked unconfirmed" if shaky else ""))  # fmt: skip
    return out


def sealed_served_first_repeat() -> list[str]:
    """What docs/serving.md says of the sealed served run's first repeat, the one its first start served
    (a check a reviewer asked for, never the run's verdict): the methods whose slowest repeat it was at
    each concurrency, with their output tokens per second then; and the plan's reading without it (the
    margins, each pair and level where a verdict by question and repeat, crossed or by throughput
    differs from the run's, and the A/A pair at 5 %)."""
    from benchmarks.served_load import compare, crossed_of

    plan = json.loads((EPYC / "sealed_served_plan.json").read_text(encoding="utf-8"))
    levels = [str(c) for c in plan["concurrency"]]

    def speeds(method: str, c: str) -> list[float]:
        repeats = sorted(plan["runs"][method][c]["repeats"], key=lambda r: r["repeat"])
        return [r["tokens"] / r["duration_s"] for r in repeats]

    slowest = []
    for c in levels:
        first = [f"`{m}` {speeds(m, c)[0]:.1f}" for m in plan["summary"] if min(speeds(m, c)) == speeds(m, c)[0]]
        slowest.append(f"{c}: " + (", ".join(first) or "none"))
    out = ["the methods whose slowest repeat was the first, with its output tokens per second, at "
           + "; ".join(slowest)]  # fmt: skip
    runs = {m: {c: dict(level) | {"repeats": [r for r in level["repeats"] if r["repeat"] != 0]}
                for c, level in by_level.items()} for m, by_level in plan["runs"].items()}  # fmt: skip
    pairs = [(cmp["a"], cmp["b"]) for cmp in plan["comparisons"]]
    without = dict(plan) | {"runs": runs, "comparisons": compare(runs, pairs, plan["concurrency"], floor=False)}
    within = margins(without)
    out.append("without repeat 1 the margin for on par at concurrency "
               + ", ".join(f"{c}: ±{100 * within[c]:.0f} %" for c in levels))  # fmt: skip

    def read(data: Mapping[str, Any], a: str, b: str) -> list[tuple[str, str, str]]:
        crossed_within = margins(data, "crossed")
        across = [verdict(crossed_of(data, a, b, c), within=crossed_within[c]) for c in levels]
        return list(zip(verdicts(data, a, b), across, throughput_verdicts(data, a, b)))

    for a, b in SEALED_PAIRS:
        for c, now, then in zip(levels, read(without, a, b), read(plan, a, b)):
            if now != then:
                out.append(f"`{a}` against `{b}` at {c}: {now[0]} by question and by repeat, {now[1]} crossed, "
                           f"{now[2]} by throughput (all 8 repeats: {then[0]}, {then[1]}, {then[2]})")  # fmt: skip
    aa = comparison(without, "vllm-hd#2", "vllm-hd")
    out.append("`vllm-hd#2` against `vllm-hd` without repeat 1, at " + "; ".join(
        f"{c}: {verdict(Estimate.from_json(aa['levels'][c]), Estimate.from_json(aa['by_repeat'][c]))}"
        for c in levels))  # fmt: skip
    return out
