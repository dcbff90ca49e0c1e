"""vLLM served, under load, repeated: plain decoding and its speculative methods, hdlib's HD among them.

    python -m benchmarks.served_load --questions FILE [--split sealed] [--per-task 16] [--max-new-tokens 256]
        [--methods vllm,vllm-suffix,vllm-hd] [--concurrency 1,16] [--requests 16 | 8,16] [--repeats 6]
        [--fresh-per-level] [--filler-split dev] [--preamble] [--together] [--same-questions] [--order-seed 0]
        [--out benchmarks/results/<machine>/served_load.json] [--resume]

Repeat by repeat, each method gets a `vllm serve` of its own (from .venv-vllm, on a free port of
127.0.0.1, the packaged model in float32) with its speculative config
(`hdlib.bench.serving.VLLM_METHODS`); a method named twice is two arms with servers of their own
(`vllm,vllm-hd,vllm-hd`: an A/A run of `vllm-hd`, the harness's own spread, `hdlib.bench.arms`). At
each concurrency vLLM's own load generator, `vllm bench serve` (`hdlib.bench.serving.bench_serve`),
sends `--requests` completions (one number for every concurrency, or one per concurrency), at most
`concurrency` in flight, greedy, and saves every answer; each level starts with one untimed warm-up
request, and with `--fresh-per-level` on servers started for that level alone, so that nothing a
server learned at one level (SuffixDecoding's tree of earlier answers, a proposer's clock) reaches
the next. Then the server is stopped, it and only it. With `--together`, the servers of a repeat (or
of a level) are started first, one after another, and kept up side by side, and the load goes to one
after another: the runs compared are then a minute or two apart rather than a whole server's run,
which the machine's drift makes matter (the servers not in use sit idle).

The methods' order is balanced over the repeats: repeat r runs them in row r of a Williams design
(`williams`: a Latin square, two for an odd number of methods, in which every method runs in every
place equally often and after every other equally often), its letters given to the methods in an
order shuffled from `--order-seed`; balance needs the repeats to be a multiple of the design's rows
(6 for 3 methods), and the results say whether they were.

The prompts are Spec-Bench questions' first turns in the model's chat template. Each is sent once
per method per server: repeat r at concurrency l gets its own `--requests` questions (with
`--fresh-per-level`, every level of a repeat starts from the repeat's first question); with
`--same-questions` every repeat asks repeat 0's (its servers fresh, so no cache carries one
repeat's answers into the next), which the intervals over questions need (a question's repeats are
its cluster). Where a level sends more requests than the split has questions, `--filler-split`
names where the rest come from: they load the server like the others and count in its throughput,
but no per-question measure reads them. With `--preamble`, every prompt begins with the same
`PREAMBLE` (188 tokens of instructions in the packaged model's tokenizer, as a deployment's system
prompt would be) ahead of its question.

Per method and concurrency: output tokens per second (a repeat's answers' tokens over its wall
time, the mean over repeats) and MAT (output tokens over the engine's steps, tokens minus the draft
tokens it accepted, as `vllm bench serve` reads them from the server's metrics, summed over the
repeats), each with its t-interval over repeats (at least five; fewer: the repeats, no interval); TPOT (a request's time
after its first token over its other tokens; p50 and p99 over every request), TTFT p50, and the
share of answers identical to plain decoding's (`vllm`, the first method) for the same question.
The paired comparisons (`--compare`, default: `vllm-hd` against `vllm` and against `vllm-suffix`,
and every A/A arm against its method) take each question's request tokens per second (its output
tokens over its latency) under both methods at the same concurrency, three ways
(`hdlib.bench.intervals`): by question (each question's ratio over its repeats, then the geometric
mean over questions with its interval from a bootstrap over questions, each with all its repeats);
by repeat (each repeat's geometric mean over its questions, with a t-interval over repeats: what
moves a whole repeat's requests of one method against the other's); and the servers' throughput
(each repeat's output tokens per second under A over B's, a t-interval over repeats: it weighs every
token alike, where the paired ratios weigh every request alike). The verdict of a pair reads its
by-question and by-repeat intervals together (`hdlib.bench.intervals.verdict`), with the margin
for "on par" from the run's own A/A arm where it has one.

A run is kept as it goes, block by block (a repeat's servers and what they served: every level of
the repeat, or one with `--fresh-per-level`), in a raw file beside `--out` (NAME.raw.jsonl,
`hdlib.bench.log.ResultsLog`), each block with the provenance of the start that served it and the
time that start began (`started`, UTC), so that two starts on one checkout and host stay apart. An
interrupted run (Ctrl-C, a machine's session ending) loses at most the block it was on: the same
command with `--resume` serves only the blocks not yet kept, and refuses settings that differ. A
resumed run's file names every start and the blocks each served (`starts`); a run begun from a clean
checkout is continued only from a clean checkout of the same commit, so that one code serves it all.
"""

from __future__ import annotations

import json
import random
import shlex
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_tables import estimate, interval
from benchmarks.common import load, questions_of, spec_bench_parser, write_results
from benchmarks.markdown import code, f1, f2, pct, table, x
from hdlib.bench.arms import method_of, twins, with_arms
from hdlib.bench.intervals import (
    MARGIN,
    Estimate,
    by_question,
    by_repeat,
    crossed,
    geometric_mean,
    margin,
    ratio_over_repeats,
    t_over_repeats,
    verdict,
)
from hdlib.bench.log import ResultsLog, raw_path
from hdlib.bench.provenance import provenance
from hdlib.bench.records import digest
from hdlib.bench.serving import VLLM_METHODS, bench_serve, vllm_method, vllm_servers, warm_up
from hdlib.errors import HDError

SERVER_ARGS = ["--dtype", "float32", "--max-model-len", "4096", "--max-num-seqs", "64"]
PREAMBLE = (
    "You are a careful assistant answering one request of many. Read the request with care and do exactly what "
    "it asks, no more and no less. Answer in plain sentences, in the language the request is written in. When "
    "the request asks for a list, give one item to a line, in a sensible order. When it asks for a translation, "
    "give the translation alone. When it asks for a summary, keep to what the text says and leave out your own "
    "opinions. When it asks a question of fact, answer it first and then give the reason in a sentence or two. "
    "When it asks for arithmetic or reasoning, show the steps that matter, one to a line, and end with the "
    "answer. Do not add greetings, apologies or questions of your own. If you do not know, say so. If the "
    "request is unclear, do what it most likely means. Keep the answer as short as the request allows.\n\n"
)
DEFAULT_PAIRS = (("vllm-hd", "vllm"), ("vllm-hd", "vllm-suffix"))
MEASURES = ("levels", "by_repeat", "throughput")  # a comparison's three ratios (module docstring)


@dataclass(frozen=True)
class Block:
    """What one set of servers served, a line of the raw file (module docstring): repeat `repeat`'s
    servers for the concurrencies `levels`, the methods in `order`, each method's record at each level
    (`runs[method][level]`: its duration, tokens, accepted tokens and answers), and the provenance of
    the start that served it (`made`)."""

    repeat: int
    levels: list[int]
    order: list[str]
    runs: dict[str, dict[str, Any]]
    made: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> Block:
        return cls(int(row["repeat"]), [int(c) for c in row["levels"]], list(row["order"]), dict(row["runs"]),
                   dict(row["made"]))  # fmt: skip


def gathered(blocks: Sequence[Block], methods: Sequence[str], levels: Sequence[int]) -> dict[str, dict[str, Any]]:
    """The blocks' records as the results file holds them: per method and level, the repeats in order."""
    runs: dict[str, dict[str, Any]] = {m: {str(c): {"repeats": []} for c in levels} for m in methods}
    for block in sorted(blocks, key=lambda b: (b.repeat, b.levels)):
        for m, at in block.runs.items():
            for c, record in at.items():
                runs[m][c]["repeats"].append(record)
    return runs


def starts(blocks: Sequence[Block]) -> list[dict[str, Any]]:
    """Each start that served blocks of the run, in order, with the blocks it served ([repeat, levels])."""
    found: dict[str, dict[str, Any]] = {}
    for block in blocks:
        key = json.dumps(block.made, sort_keys=True)
        found.setdefault(key, {"provenance": block.made, "blocks": []})["blocks"].append([block.repeat, block.levels])
    return list(found.values())


def answers_of(result: Mapping[str, Any], questions: Sequence[Any], repeat: int, fillers: int = 0) -> list[dict]:
    """Each request of a `vllm bench serve` result (in the order sent) with its question; the last
    `fillers` are marked as load only."""
    rows = []
    for i, q in enumerate(questions):
        tokens, latency, first = result["output_lens"][i], result["latencies"][i], result["ttfts"][i]
        rows.append({
            "question_id": q.question_id, "task": q.task, "repeat": repeat, "tokens": int(tokens),
            "latency_s": float(latency), "ttft_s": float(first),
            "tpot_s": (latency - first) / (tokens - 1) if tokens > 1 else None,
            "digest": digest([ord(c) for c in result["generated_texts"][i]]), "error": result["errors"][i] or "",
        } | ({"filler": True} if i >= len(questions) - fillers else {}))  # fmt: skip
    return rows


def williams(n: int) -> list[list[int]]:
    """A Williams design for n treatments: rows of 0..n-1 in which each treatment takes every place
    equally often and follows every other equally often (n rows for an even n, 2n for an odd one)."""
    first, low, high = [0], 1, n - 1
    while len(first) < n:
        first.append(low)
        low += 1
        if len(first) < n:
            first.append(high)
            high -= 1
    rows = [[(t + i) % n for t in first] for i in range(n)]
    return rows if n % 2 == 0 else rows + [row[::-1] for row in rows]


def orders(methods: Sequence[str], seed: int) -> list[list[str]]:
    """The methods' order in each row of their Williams design, the design's letters given to the
    methods in an order shuffled from `seed`."""
    labels = list(methods)
    random.Random(f"served/{seed}").shuffle(labels)
    return [[labels[t] for t in row] for row in williams(len(labels))]


def served(answers: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The answers per-question measures read: not the fillers."""
    return [a for a in answers if not a.get("filler")]


def summarize(levels: Mapping[str, Any], reference: Mapping[str, Any] | None) -> dict[str, Any]:
    """One method at one concurrency, over its repeats: see the module docstring."""
    answers = served([a for r in levels["repeats"] for a in r["answers"]])
    per_repeat = [r["tokens"] / r["duration_s"] for r in levels["repeats"]]
    tokens = [r["tokens"] for r in levels["repeats"]]
    steps = [max(r["tokens"] - r["accepted"], 1) for r in levels["repeats"]]
    tpot = [a["tpot_s"] for a in answers if a["tpot_s"] is not None]
    plain = {(a["question_id"], a["repeat"]): a["digest"] for r in reference["repeats"] for a in r["answers"]} if (
        reference is not None) else {}  # fmt: skip
    keys = [(a["question_id"], a["repeat"]) for a in answers]
    same = [a["digest"] == plain[k] for a, k in zip(answers, keys) if k in plain]
    return {
        "requests": len(answers),
        "failed": sum(bool(a["error"]) for a in answers),
        "tokens_per_s": t_over_repeats(per_repeat, log=False).to_json(),
        "tpot_ms_p50": 1e3 * float(np.percentile(tpot, 50)),
        "tpot_ms_p99": 1e3 * float(np.percentile(tpot, 99)),
        "ttft_ms_p50": 1e3 * float(np.percentile([a["ttft_s"] for a in answers], 50)),
        "mat": ratio_over_repeats(tokens, steps).to_json(),
        "identical_frac": sum(same) / len(same) if same else None,
        "tasks": sorted({a["task"] for a in answers}),
    }


def rates(levels: Mapping[str, Any]) -> dict[tuple[int, int], float]:
    """Each request's tokens per second (its output tokens over its latency), by (question, repeat)."""
    return {(x["question_id"], x["repeat"]): x["tokens"] / x["latency_s"] for r in levels["repeats"]
            for x in served(r["answers"]) if x["latency_s"] > 0 and x["tokens"] > 0}  # fmt: skip


def matched(ours: Mapping[Any, float], theirs: Mapping[Any, float]) -> dict[Any, float]:
    """ours over theirs, for each key both have."""
    return {k: ours[k] / theirs[k] for k in ours if k in theirs}


def ratios(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[tuple[int, int], float]:
    """A's request tokens per second over B's, for each (question, repeat) both answered."""
    return matched(rates(a), rates(b))


def paired(a: Mapping[str, Any], b: Mapping[str, Any], floor: bool = True) -> Estimate:
    """A's request tokens per second over B's at one concurrency, by question: each question's
    geometric mean over its repeats, then over the questions, with its interval over questions
    (`floor`: `hdlib.bench.intervals.cluster_bootstrap`'s)."""
    return geometric_mean(list(by_question(ratios(a, b)).values()), floor=floor)


def paired_by_repeat(a: Mapping[str, Any], b: Mapping[str, Any]) -> Estimate:
    """The same ratio by repeat: each repeat's geometric mean over its questions, then over the
    repeats, with its t-interval over repeats (at least five)."""
    return t_over_repeats(list(by_repeat(ratios(a, b)).values()))


def throughput_by_repeat(a: Mapping[str, Any], b: Mapping[str, Any]) -> Estimate:
    """The server's output tokens per second (a repeat's tokens over its wall time) under A over B's in
    the same repeat: the geometric mean over repeats with its t-interval over repeats. It weighs
    every token alike, where the paired ratios weigh every request alike; n: repeats."""
    ours, theirs = ({r["repeat"]: r["tokens"] / r["duration_s"] for r in m["repeats"]} for m in (a, b))
    return t_over_repeats(list(matched(ours, theirs).values()))


def compare(
    runs: Mapping[str, Any], pairs: Sequence[tuple[str, str]], levels: Sequence[int], floor: bool = True
) -> list[dict[str, Any]]:
    """For each pair (A, B) at each concurrency: the paired ratio by question and by repeat, and the
    servers' throughput ratio by repeat (`floor`: `paired`'s)."""
    measures = {
        "levels": lambda a, b: paired(a, b, floor),
        "by_repeat": paired_by_repeat,
        "throughput": throughput_by_repeat,
    }
    return [
        {"a": a, "b": b} | {k: {str(c): f(runs[a][str(c)], runs[b][str(c)]).to_json() for c in levels}
                            for k, f in measures.items()}
        for a, b in pairs
    ]  # fmt: skip


def crossed_of(data: Mapping[str, Any], a: str, b: str, c: str) -> Estimate:
    """A's request tokens per second over B's at concurrency `c`, over questions and repeats crossed
    (`hdlib.bench.intervals.crossed`), from the answers the results hold."""
    return crossed(ratios(data["runs"][a][c], data["runs"][b][c]))


def unconfirmed(plan: Mapping[str, Any], run: Mapping[str, Any]) -> dict[tuple[str, str], list[str]]:
    """The levels, by pair, where a "faster" or "slower" of a plan's reading (`plan`) is not repeated by
    the second reading of the same run (`run`, as the harness wrote it): its interval over questions
    (never narrower than the t-interval) read with the interval over repeats, or the crossed interval,
    each with its own margin; issue 57's sealed addendum reports such a verdict marked unconfirmed."""
    within, again, across = margins(plan), margins(run), margins(run, "crossed")
    found: dict[tuple[str, str], list[str]] = {}
    for cmp, other in zip(plan["comparisons"], run["comparisons"]):
        a, b = cmp["a"], cmp["b"]
        aa = (a, b) in twins([a, b])  # an A/A pair is held to MARGIN, as `tables` reads it
        for c in cmp["levels"]:
            said = pair_verdict(cmp, c, within[c])
            second = {pair_verdict(other, c, again[c]),
                      verdict(crossed_of(run, a, b, c), within=MARGIN if aa else across[c])}  # fmt: skip
            if said in ("faster", "slower") and second != {said}:
                found.setdefault((a, b), []).append(c)
    return found


def pair_verdict(cmp: Mapping[str, Any], c: str, within: float) -> str:
    """A comparison's verdict at concurrency `c`: its intervals by question and by repeat read together,
    within `within`, or `MARGIN` for an A/A pair (one method against itself, held to the fixed margin)."""
    aa = (cmp["a"], cmp["b"]) in twins([cmp["a"], cmp["b"]])
    pair = [Estimate.from_json(cmp[m][c]) for m in ("levels", "by_repeat") if m in cmp]
    return verdict(*pair, within=MARGIN if aa else within)


def margins(data: Mapping[str, Any], reading: str = "pair") -> dict[str, float]:
    """The margin for "on par" at each concurrency: `MARGIN`, or the widest spread of the run's own
    A/A pairs there where wider (`hdlib.bench.intervals.margin`): of their intervals by question and
    by repeat for the verdict read on those two (`reading` "pair"), of their crossed interval for the
    verdict read on it ("crossed")."""
    found = {str(c): MARGIN for c in data["concurrency"]}
    for cmp in data["comparisons"]:
        if (cmp["a"], cmp["b"]) in twins([cmp["a"], cmp["b"]]):
            for c in found:
                if reading == "crossed":
                    spread = [margin(crossed_of(data, cmp["a"], cmp["b"], c))]
                else:
                    pair = [cmp[m][c] for m in ("levels", "by_repeat") if c in cmp.get(m, {})]
                    spread = [margin(Estimate.from_json(e)) for e in pair]
                found[c] = max([found[c], *spread])
    return found


def question_slices(
    questions: Sequence[Any], levels: Sequence[int], counts: Sequence[int], repeats: int, same: bool = False,
    fresh: bool = False,
) -> dict[tuple[int, int], list[Any]]:  # fmt: skip
    """The questions repeat r asks at concurrency c, by (r, c): `counts[i]` at `levels[i]`, taken in turn
    across the tasks (each task's in the file's order), every repeat and level its own (with `same`,
    every repeat repeat 0's; with `fresh`, servers fresh for each level, every level of a repeat from
    the repeat's first question). A slice may come out shorter than its count: `fill` tops it up."""
    by_task: dict[str, list[Any]] = {}
    for q in questions:
        by_task.setdefault(q.task, []).append(q)
    even = len(set(map(len, by_task.values()))) == 1
    interleaved = [q for row in zip(*by_task.values()) for q in row] if even else list(questions)
    if fresh:
        step = max(counts)
        return {(r, c): interleaved[(0 if same else r) * step :][:n]
                for r in range(repeats) for c, n in zip(levels, counts)}  # fmt: skip
    starts = np.cumsum([0, *list(counts) * repeats])
    return {(r, c): interleaved[starts[(0 if same else r) * len(levels) + i] :][:n]
            for r in range(repeats) for i, (c, n) in enumerate(zip(levels, counts))}  # fmt: skip


def needed(levels: Sequence[int], counts: Sequence[int], repeats: int, same: bool, fresh: bool) -> int:
    """The questions `question_slices` takes."""
    per_repeat = max(counts) if fresh else sum(counts)
    return per_repeat * (1 if same else repeats)


def main() -> None:
    parser = spec_bench_parser(__doc__, "vllm,vllm-suffix,vllm-hd", "served_load.json")
    parser.set_defaults(max_new_tokens=256, per_task=16)
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument(
        "--requests", default="16", help="completions sent at each concurrency (or N,M,..: at each in turn), per repeat"
    )
    parser.add_argument("--preamble", action="store_true", help="every prompt after one shared PREAMBLE")
    parser.add_argument(
        "--together",
        action="store_true",
        help="each repeat's (or level's) servers up side by side, the methods run one after another",
    )
    parser.add_argument(
        "--fresh-per-level", action="store_true", help="every concurrency on servers started for it alone"
    )
    parser.add_argument(
        "--filler-split",
        choices=("dev", "report", "sealed"),
        default=None,
        help="where a level sends more requests than there are questions, the rest from this split, as load only",
    )
    parser.add_argument("--repeats", type=int, default=6, help="a fresh server for each (6: 3 methods balanced)")
    parser.add_argument(
        "--same-questions",
        action="store_true",
        help="every repeat asks the same questions (its servers fresh): a question's repeats are its cluster",
    )
    parser.add_argument("--order-seed", type=int, default=0, help="which method takes which row of the design")
    parser.add_argument("--compare", action="append", default=[], metavar="A,B", help="paired ratio A/B")
    parser.add_argument("--resume", action="store_true", help="continue an interrupted run from its raw file")
    args = parser.parse_args()
    methods, levels = with_arms(args.methods.split(",")), [int(c) for c in args.concurrency.split(",")]
    if methods[0] != "vllm" or not all(map(vllm_method, methods)):
        parser.error(f"--methods: `vllm` first (the reference), then any of {', '.join(VLLM_METHODS)}, vllm-hd:ORDER")
    pairs = [tuple(p.split(",")) for p in args.compare] or [
        *(p for p in DEFAULT_PAIRS if set(p) <= set(methods)),
        *twins(methods),
    ]
    if any(len(p) != 2 or p[0] == p[1] or not set(p) <= set(methods) for p in pairs):
        parser.error(f"--compare A,B: two different methods of the run ({', '.join(methods)})")
    try:
        counts = [int(n) for n in args.requests.split(",")]
    except ValueError:
        counts = []
    counts = counts * len(levels) if len(counts) == 1 else counts
    if len(counts) != len(levels) or min(counts) < 1:
        parser.error(f"--requests {args.requests}: a whole number of at least 1, or one per concurrency")
    # at the start: the checkout that ran, whatever is edited during the run, and when this start began
    made = provenance(serving=True) | {"started": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    design = orders(methods, args.order_seed)
    balanced = args.repeats % len(design) == 0
    if not balanced:
        print(f"served_load: {args.repeats} repeats do not balance the methods' order: that takes a multiple of "
              f"{len(design)}", file=sys.stderr)  # fmt: skip
    questions, lm = load(args)
    want = needed(levels, counts, args.repeats, args.same_questions, args.fresh_per_level)
    slices = question_slices(questions, levels, counts, args.repeats, args.same_questions, args.fresh_per_level)
    short = max(n - len(slices[r, c]) for (r, c), n in zip(slices, counts * args.repeats))
    fillers: list[Any] = []
    if short > 0:
        if args.filler_split is None:
            each = "the same in every repeat" if args.same_questions else "each sent once"
            parser.error(
                f"{args.requests} requests at the concurrencies {args.concurrency} in {args.repeats} repeats "
                f"need {want} questions, {each}; there are {len(questions)}: raise --per-task, or --filler-split"
            )
        fillers = questions_of(args, args.filler_split)[:short]
        if len(fillers) < short:
            parser.error(f"--filler-split {args.filler_split}: {short} questions needed, {len(fillers)} there")
    settings = {
        "methods": methods, "concurrency": levels, "requests": counts, "repeats": args.repeats,
        "max_new_tokens": args.max_new_tokens, "preamble": args.preamble, "together": args.together,
        "fresh_per_level": args.fresh_per_level, "same_questions": args.same_questions,
        "order_seed": args.order_seed, "split": args.split or "", "server_args": SERVER_ARGS,
        "question_ids": [q.question_id for q in questions], "fillers": [q.question_id for q in fillers],
    }  # fmt: skip
    try:
        log = ResultsLog(raw_path(args.out), settings, resume=args.resume, record=Block)
    except HDError as e:
        parser.error(str(e))
    began = log.done[0].made if log.done else {}
    if began.get("commit") and (made.get("commit") != began["commit"] or made.get("clean") is not True):
        here = f"{made.get('commit') or 'not a checkout'}{'' if made.get('clean') else ', with changes'}"
        parser.error(f"--resume: {log.path} was served from a clean checkout of {began['commit']}, this is {here}: "
                     "continue it from that one, so that one code serves the whole run")  # fmt: skip
    kept = {(b.repeat, tuple(b.levels)) for b in log.done}

    def serve(r: int, method: str, url: str, c: int, folder: Path) -> dict[str, Any]:
        asked = slices[(r, c)]
        topped = [*asked, *fillers[: dict(zip(levels, counts))[c] - len(asked)]]
        prompts = [(PREAMBLE if args.preamble else "") + q.turns[0] for q in topped]
        warm_up(url, method)
        result = bench_serve(url, method_of(method), lm.source, prompts, c, args.max_new_tokens, folder)
        done = {
            "repeat": r, "duration_s": float(result["duration"]), "tokens": int(result["total_output_tokens"]),
            "accepted": int(result.get("spec_decode_accepted_tokens", 0)),
            "answers": answers_of(result, topped, r, len(topped) - len(asked)),
        }  # fmt: skip
        print(f"repeat {r + 1}/{args.repeats} {method} at {c}: {done['tokens'] / done['duration_s']:.1f} tok/s",
              flush=True)  # fmt: skip
        return done

    def servers(order: Sequence[str], folders: Mapping[str, Path], tag: str) -> Any:
        """The methods' servers, started together (their start-ups overlap)."""
        return vllm_servers(lm.source, order, {m: folders[m] / f"server{tag}.log" for m in order}, SERVER_ARGS)

    # the levels one set of servers serves: each its own with --fresh-per-level, else all of a repeat's
    groups = [[c] for c in levels] if args.fresh_per_level else [levels]
    try:
        with tempfile.TemporaryDirectory() as work:
            for r in range(args.repeats):
                order = design[r % len(design)]
                folders = {m: Path(work) / f"r{r}-{m}" for m in order}
                for folder in folders.values():
                    folder.mkdir()
                for group in groups:
                    if (r, tuple(group)) in kept:
                        continue
                    tag = f"-c{group[0]}" if args.fresh_per_level else ""
                    served_: dict[str, dict[str, Any]] = {m: {} for m in order}
                    if args.together:
                        with servers(order, folders, tag) as urls:
                            for c in group:
                                for method in order:
                                    served_[method][str(c)] = serve(r, method, urls[method], c, folders[method])
                    else:
                        for method in order:
                            with servers([method], folders, tag) as urls:
                                for c in group:
                                    served_[method][str(c)] = serve(r, method, urls[method], c, folders[method])
                    log.append(Block(r, group, list(order), served_, dict(made)))
    except KeyboardInterrupt:
        again = shlex.join(
            ["python", "-m", "benchmarks.served_load", *sys.argv[1:], *([] if args.resume else ["--resume"])]
        )
        print(f"served_load: interrupted: {len(log.done)} blocks kept in {log.path}; continue with: {again}",
              file=sys.stderr)  # fmt: skip
        raise SystemExit(130) from None
    runs = gathered(log.done, methods, levels)
    ran = [next(b.order for b in log.done if b.repeat == r) for r in range(args.repeats)]
    began = starts(log.done)
    summary = {
        m: {c: summarize(runs[m][c], runs["vllm"][c] if m != "vllm" else None) for c in runs[m]} for m in methods
    }
    write_results(
        args.out, "served_load", provenance=began[0]["provenance"], server_args=SERVER_ARGS,
        client="vllm bench serve", questions=want,
        max_new_tokens=args.max_new_tokens, concurrency=levels, repeats=args.repeats,
        requests=dict(zip(map(str, levels), counts)), preamble=PREAMBLE if args.preamble else "",
        together=args.together, fresh_per_level=args.fresh_per_level, same_questions=args.same_questions,
        order_seed=args.order_seed, design=design, balanced=balanced, orders=ran, split=args.split or "",
        fillers=[q.question_id for q in fillers], summary=summary, comparisons=compare(runs, pairs, levels),
        runs=runs, **({"starts": began} if len(began) > 1 else {}),
    )  # fmt: skip


def tables(data: Mapping[str, Any]) -> list[str]:
    """benchmarks/served_load.py: vLLM served at several concurrencies, repeated, each speculative method
    beside plain, with the paired comparisons and their verdicts."""
    rows = []
    for c in data["concurrency"]:
        plain = data["summary"]["vllm"][str(c)]["tokens_per_s"]["value"]
        for name, levels in data["summary"].items():
            r = levels[str(c)]
            same = "-" if r["identical_frac"] is None else pct(r["identical_frac"])
            ratio = f2(r["tokens_per_s"]["value"] / plain) + "x"
            rows.append([str(c), code(name), interval(r["tokens_per_s"], f1), ratio, f1(r["tpot_ms_p50"]),
                         f1(r["tpot_ms_p99"]), f1(r["ttft_ms_p50"]), interval(r["mat"], f2), str(r["requests"]),
                         same])  # fmt: skip
    within, within_crossed = margins(data), margins(data, "crossed")
    compared = []
    for cmp in data["comparisons"]:
        aa = (cmp["a"], cmp["b"]) in twins([cmp["a"], cmp["b"]])  # an A/A pair is held to MARGIN, not to itself
        for c, e in cmp["levels"].items():
            row = [f"{code(cmp['a'])} / {code(cmp['b'])}", str(c), interval(e, x), str(e["n"])]
            if "by_repeat" in cmp:
                row += [interval(cmp["by_repeat"][c], x), str(cmp["by_repeat"][c]["n"])]
            mark = ", unconfirmed" if c in cmp.get("unconfirmed", ()) else ""  # a plan's reading (`unconfirmed`)
            row.append(pair_verdict(cmp, c, within[c]) + mark)
            both = crossed_of(data, cmp["a"], cmp["b"], c)
            row += [estimate(both, x), verdict(both, within=MARGIN if aa else within_crossed[c])]
            if "throughput" in cmp:
                by = cmp["throughput"][c]
                row += [interval(by, x), verdict(Estimate.from_json(by), within=MARGIN if aa else within[c])]
            compared.append(row)
    measured = [m for m in MEASURES if all(m in cmp for cmp in data["comparisons"])]
    sent = data["requests"]  # (one number for every concurrency in the files of before per-level counts)
    requests = ", ".join(f"{sent[str(c)]} at {c}" for c in data["concurrency"]) if isinstance(sent, dict) else sent
    preamble = " after one shared preamble of instructions" if data.get("preamble") else ""
    asked = "in every repeat" if data.get("same_questions") else "once per method"
    half = f", the {data['split']} split" if data.get("split") else ""
    fresh = ", each concurrency on servers of its own" if data.get("fresh_per_level") else ""
    filled = (f"; {len(data['fillers'])} questions of another split as load only where a level needed more"
              if data.get("fillers") else "")  # fmt: skip
    columns = ["concurrency", "method", "output tokens/s", "vs plain", "TPOT p50 ms", "TPOT p99 ms", "TTFT p50 ms",
               "MAT", "answers", "identical to plain"]  # fmt: skip
    paired_columns = ["A / B", "concurrency", "by question", "questions"]
    paired_columns += ["by repeat", "repeats"] if "by_repeat" in measured else []
    paired_columns += ["verdict", "questions x repeats", "verdict on both"]
    paired_columns += ["throughput", "verdict on throughput"] if "throughput" in measured else []
    margin_text = ", ".join(f"±{100 * m:.0f} % at {c}" for c, m in within.items())
    crossed_text = ", ".join(f"±{100 * m:.0f} % at {c}" for c, m in within_crossed.items())
    return [
        f"Settings: {data['model']}, `vllm serve` {' '.join(data['server_args'])}, load from `vllm bench serve`, "
        f"greedy, {data['repeats']} {'repeat' if data['repeats'] == 1 else 'repeats'} (a fresh server each{fresh}), "
        f"{requests} requests per concurrency and repeat, each a Spec-Bench question's first turn{preamble} sent "
        f"{asked} ({data['questions'] - len(data.get('fillers', []))} questions{half}{filled}), "
        f"{data['max_new_tokens']} new tokens at most. Output "
        "tokens per second and MAT: the mean "
        "over repeats, with its t-interval over repeats where there are at least five; \"vs plain\" is the ratio of "
        "the two means, with no interval (the paired table's throughput ratio is the one to read, with its own).",
        table(columns, rows),
        "Paired comparisons of a request's tokens per second (its output tokens over its latency) under A and under "
        "B on the same question at the same concurrency: by question (each question's ratio over its repeats, the "
        "geometric mean over questions, its 95 % interval from a bootstrap over questions, each with its repeats), "
        "by repeat (each repeat's geometric mean over its questions, a t-interval over repeats, at least five), over "
        "questions and repeats crossed (a t-interval from their two-way analysis of variance, where every question "
        "was asked in each of at least five repeats), and the servers' throughput (each repeat's output tokens per "
        "second under A over B's, a t-interval over repeats). The first verdict reads the by-question and by-repeat "
        "intervals together: faster or slower where both exclude 1 on that side, on par where both lie within the "
        f"margin ({margin_text}), else not told apart, as it is wherever either has no interval; the second reads "
        f"the crossed interval alone (margin {crossed_text}), the third the throughput's (an A/A pair's own are held "
        f"to ±{100 * MARGIN:.0f} %):",
        table(paired_columns, compared),
    ]


if __name__ == "__main__":
    main()
