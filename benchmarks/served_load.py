"""vLLM served, under load, repeated: plain decoding and its speculative methods, hdlib's HD among them.

    python -m benchmarks.served_load --questions FILE [--split report] [--per-task 16] [--max-new-tokens 256]
        [--methods vllm,vllm-suffix,vllm-hd] [--concurrency 1,16] [--requests 16 | 8,16] [--repeats 3]
        [--preamble] [--together] [--same-questions] [--order-seed 0]
        [--out benchmarks/results/<machine>/served_load.json]

Repeat by repeat, each method (in an order shuffled from `--order-seed`, then turned by one place
each repeat, so that no method always runs first while the machine's speed drifts) gets a fresh
`vllm serve` (from .venv-vllm, on a free port of 127.0.0.1, the packaged model in float32) with its
speculative config (`hdlib.bench.serving.VLLM_METHODS`), and at each concurrency vLLM's own load
generator, `vllm bench serve` (`hdlib.bench.serving.bench_serve`), sends `--requests` completions
(one number for every concurrency, or one per concurrency), at most `concurrency` in flight, greedy,
and saves every answer; then the server is stopped, it and
only it. The prompts are Spec-Bench questions' first turns in the model's chat template, each sent
once per method in the whole run: repeat r at concurrency l gets its own `--requests` questions, the
same for every method. A method that caches earlier answers, as SuffixDecoding does, would
otherwise draft a question's answer from its own earlier answer to it, and a server's prefix cache
would serve a repeated prompt; a fresh server per repeat keeps one repeat from another. With
`--together`, each repeat starts every method's server first (one after another) and keeps them up
side by side, and at each concurrency sends the load to one server after another, the methods'
order turned by one place from one concurrency to the next: the runs compared at a concurrency are
then a minute or two apart rather than a whole server's run, which the machine's drift makes
matter (the servers not in use sit idle). With
`--preamble`, every prompt begins with the same `PREAMBLE` (188 tokens of instructions in the packaged
model's tokenizer, as a deployment's system prompt would be) ahead of its question.

Per method and concurrency, over the repeats: output tokens per second (a repeat's answers' tokens
over its wall time; the mean over repeats with its interval), TPOT (a request's time after its first
token over its other tokens; p50 and p99 over every request), TTFT p50, MAT (output tokens over the
engine's steps: tokens minus the draft tokens it accepted, as `vllm bench serve` reads them from the
server's metrics), and the share of answers identical to plain decoding's (`vllm`, the first method)
for the same question. The paired comparisons (`--compare`, default: `vllm-hd` against `vllm` and
against `vllm-suffix`) take each question's request tokens per second (its output tokens over its
latency) under both methods at the same concurrency: the geometric mean over questions of the
ratio, with a 95 % interval from a bootstrap over questions (`hdlib.bench.intervals`); and "by
repeat", the same ratio with its interval from a bootstrap over repeats, each repeat's questions
resampled together: the machine's speed in the minutes between one method's block of requests and
another's moves a whole block, which resampling questions does not hold, and the methods' order
turned from one repeat to the next makes it vary between repeats. And the servers' throughput
ratio: each repeat's output tokens per second under A over B's, the geometric mean over repeats with
an interval from a bootstrap over repeats (the paired ratios weigh every request alike, this every
token: a method that speeds most requests but not the longest shows it). With `--same-questions` every
repeat asks the same questions (its servers fresh, so that no cache carries one repeat's answers
into the next), so that a run can have the repeats that interval needs.
"""

from __future__ import annotations

import contextlib
import math
import random
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_tables import interval
from benchmarks.common import load, spec_bench_parser, write_results
from benchmarks.markdown import code, f1, f2, pct, table, x
from hdlib.bench.intervals import Estimate, geometric_mean, mean, ratio_of_sums, verdict
from hdlib.bench.records import digest
from hdlib.bench.serving import VLLM_METHODS, bench_serve, vllm_method, vllm_server

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


def answers_of(result: Mapping[str, Any], questions: Sequence[Any], repeat: int) -> list[dict[str, Any]]:
    """Each request of a `vllm bench serve` result (in the order sent) with its question."""
    rows = []
    for i, q in enumerate(questions):
        tokens, latency, first = result["output_lens"][i], result["latencies"][i], result["ttfts"][i]
        rows.append({
            "question_id": q.question_id, "task": q.task, "repeat": repeat, "tokens": int(tokens),
            "latency_s": float(latency), "ttft_s": float(first),
            "tpot_s": (latency - first) / (tokens - 1) if tokens > 1 else None,
            "digest": digest([ord(c) for c in result["generated_texts"][i]]), "error": result["errors"][i] or "",
        })  # fmt: skip
    return rows


def turn_order(methods: Sequence[str], seed: int, repeat: int) -> list[str]:
    """The methods' order at `repeat`: shuffled once from `seed`, then turned by one place a repeat, so
    that over as many repeats as methods each method runs in every place once."""
    order = list(methods)
    random.Random(f"served/{seed}").shuffle(order)
    return turned(order, repeat)


def turned(order: Sequence[str], places: int) -> list[str]:
    """`order` turned by `places` places: its first `places` (mod its length) moved to its end."""
    k = places % len(order)
    return [*order[k:], *order[:k]]


def summarize(levels: Mapping[str, Any], reference: Mapping[str, Any] | None) -> dict[str, Any]:
    """One method at one concurrency, over its repeats: see the module docstring."""
    answers = [a for r in levels["repeats"] for a in r["answers"]]
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
        "tokens_per_s": mean(per_repeat).to_json(),
        "tpot_ms_p50": 1e3 * float(np.percentile(tpot, 50)),
        "tpot_ms_p99": 1e3 * float(np.percentile(tpot, 99)),
        "ttft_ms_p50": 1e3 * float(np.percentile([a["ttft_s"] for a in answers], 50)),
        "mat": ratio_of_sums(tokens, steps).to_json(),
        "identical_frac": sum(same) / len(same) if same else None,
        "tasks": sorted({a["task"] for a in answers}),
    }


def rates(levels: Mapping[str, Any]) -> dict[tuple[int, int], float]:
    """Each request's tokens per second (its output tokens over its latency), by (question, repeat)."""
    return {(x["question_id"], x["repeat"]): x["tokens"] / x["latency_s"] for r in levels["repeats"]
            for x in r["answers"] if x["latency_s"] > 0 and x["tokens"] > 0}  # fmt: skip


def matched(ours: Mapping[Any, float], theirs: Mapping[Any, float]) -> dict[Any, float]:
    """ours over theirs, for each key both have."""
    return {k: ours[k] / theirs[k] for k in ours if k in theirs}


def ratios(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[tuple[int, int], float]:
    """A's request tokens per second over B's, for each (question, repeat) both answered."""
    return matched(rates(a), rates(b))


def paired(a: Mapping[str, Any], b: Mapping[str, Any]) -> Estimate:
    """A's request tokens per second over B's, question by question at one concurrency."""
    return geometric_mean(list(ratios(a, b).values()))


def paired_by_repeat(a: Mapping[str, Any], b: Mapping[str, Any]) -> Estimate:
    """The same ratio (the geometric mean over every question of every repeat), its interval from a
    bootstrap over repeats: each repeat's questions resampled together, so that the interval holds
    what moves a whole repeat's requests of one method against the other's (the machine's speed in
    the minutes between them; the methods' order is turned from one repeat to the next). n: repeats."""
    logs: dict[int, list[float]] = {}
    for (_, repeat), ratio in ratios(a, b).items():
        logs.setdefault(repeat, []).append(math.log(ratio))
    est = ratio_of_sums([sum(v) for v in logs.values()], [len(v) for v in logs.values()])
    return Estimate(math.exp(est.value), math.exp(est.low), math.exp(est.high), est.n)


def throughput_by_repeat(a: Mapping[str, Any], b: Mapping[str, Any]) -> Estimate:
    """The server's output tokens per second (a repeat's tokens over its wall time) under A over B's in
    the same repeat: the geometric mean over repeats, its interval from a bootstrap over repeats. It
    weighs every token alike, where the paired ratios weigh every request alike; n: repeats."""
    ours, theirs = ({r["repeat"]: r["tokens"] / r["duration_s"] for r in m["repeats"]} for m in (a, b))
    return geometric_mean(list(matched(ours, theirs).values()))


def compare(runs: Mapping[str, Any], pairs: Sequence[tuple[str, str]], levels: Sequence[int]) -> list[dict[str, Any]]:
    """For each pair (A, B) at each concurrency: the paired ratio by question and by repeat, and the
    servers' throughput ratio by repeat."""
    measures = {"levels": paired, "by_repeat": paired_by_repeat, "throughput": throughput_by_repeat}
    return [
        {"a": a, "b": b} | {k: {str(c): f(runs[a][str(c)], runs[b][str(c)]).to_json() for c in levels}
                            for k, f in measures.items()}
        for a, b in pairs
    ]  # fmt: skip


def question_slices(
    questions: Sequence[Any], levels: Sequence[int], counts: Sequence[int], repeats: int, same: bool = False
) -> dict[tuple[int, int], list[Any]]:
    """The questions repeat r asks at concurrency c, by (r, c): `counts[i]` at `levels[i]`, taken in turn
    across the tasks (each task's in the file's order), every repeat and level its own (with `same`,
    every repeat repeat 0's)."""
    by_task: dict[str, list[Any]] = {}
    for q in questions:
        by_task.setdefault(q.task, []).append(q)
    even = len(set(map(len, by_task.values()))) == 1
    interleaved = [q for row in zip(*by_task.values()) for q in row] if even else list(questions)
    starts = np.cumsum([0, *list(counts) * repeats])
    return {(r, c): interleaved[starts[(0 if same else r) * len(levels) + i] :][:n]
            for r in range(repeats) for i, (c, n) in enumerate(zip(levels, counts))}  # fmt: skip


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
        help="each repeat's servers up side by side, the methods run one after another at each concurrency",
    )
    parser.add_argument("--repeats", type=int, default=3, help="a fresh server and other questions for each")
    parser.add_argument(
        "--same-questions",
        action="store_true",
        help="every repeat asks the same questions (its servers fresh): repeats enough for the interval by repeat",
    )
    parser.add_argument("--order-seed", type=int, default=0, help="the methods' order in each repeat is shuffled")
    parser.add_argument("--compare", action="append", default=[], metavar="A,B", help="paired ratio A/B")
    args = parser.parse_args()
    methods, levels = args.methods.split(","), [int(c) for c in args.concurrency.split(",")]
    if methods[0] != "vllm" or not all(map(vllm_method, methods)):
        parser.error(f"--methods: `vllm` first (the reference), then any of {', '.join(VLLM_METHODS)}, vllm-hd:ORDER")
    pairs = [tuple(p.split(",")) for p in args.compare] or [p for p in DEFAULT_PAIRS if set(p) <= set(methods)]
    if any(len(p) != 2 or not set(p) <= set(methods) for p in pairs):
        parser.error(f"--compare A,B: two of the run's methods ({', '.join(methods)})")
    try:
        counts = [int(n) for n in args.requests.split(",")]
    except ValueError:
        counts = []
    counts = counts * len(levels) if len(counts) == 1 else counts
    if len(counts) != len(levels) or min(counts) < 1:
        parser.error(f"--requests {args.requests}: a whole number of at least 1, or one per concurrency")
    sent = dict(zip(levels, counts))
    questions, lm = load(args)
    needed = sum(counts) * (1 if args.same_questions else args.repeats)
    if len(questions) < needed:
        each = "the same in every repeat" if args.same_questions else "each sent once"
        parser.error(
            f"{args.requests} requests at the concurrencies {args.concurrency} in {args.repeats} repeats "
            f"need {needed} questions, {each}; there are {len(questions)}: raise --per-task"
        )
    slices = question_slices(questions, levels, counts, args.repeats, args.same_questions)
    runs: dict[str, dict[str, Any]] = {m: {str(c): {"repeats": []} for c in levels} for m in methods}
    orders: list[list[str]] = []

    def serve(r: int, method: str, url: str, c: int, folder: Path) -> None:
        asked = slices[(r, c)]
        prompts = [(PREAMBLE if args.preamble else "") + q.turns[0] for q in asked]
        result = bench_serve(url, method, lm.source, prompts, c, args.max_new_tokens, folder)
        runs[method][str(c)]["repeats"].append({
            "repeat": r, "duration_s": float(result["duration"]), "tokens": int(result["total_output_tokens"]),
            "accepted": int(result.get("spec_decode_accepted_tokens", 0)), "answers": answers_of(result, asked, r),
        })  # fmt: skip
        done = runs[method][str(c)]["repeats"][-1]
        print(f"repeat {r + 1}/{args.repeats} {method} at {c}: {done['tokens'] / done['duration_s']:.1f} tok/s",
              flush=True)  # fmt: skip

    with tempfile.TemporaryDirectory() as work:
        for r in range(args.repeats):
            order = turn_order(methods, args.order_seed, r)
            folders = {m: Path(work) / f"r{r}-{m}" for m in order}
            for folder in folders.values():
                folder.mkdir()
            if not args.together:
                orders.append(order)
                for method in order:
                    with vllm_server(lm.source, method, folders[method] / "server.log", SERVER_ARGS) as url:
                        for c in levels:
                            serve(r, method, url, c, folders[method])
                continue
            with contextlib.ExitStack() as servers:
                urls = {m: servers.enter_context(vllm_server(lm.source, m, folders[m] / "server.log", SERVER_ARGS))
                        for m in order}  # fmt: skip
                for i, c in enumerate(levels):
                    orders.append(turned(order, i))
                    for method in orders[-1]:
                        serve(r, method, urls[method], c, folders[method])
    summary = {
        m: {c: summarize(runs[m][c], runs["vllm"][c] if m != "vllm" else None) for c in runs[m]} for m in methods
    }
    comparisons = compare(runs, pairs, levels)
    write_results(
        args.out, "served_load", server_args=SERVER_ARGS, client="vllm bench serve", questions=needed,
        max_new_tokens=args.max_new_tokens, concurrency=levels, repeats=args.repeats, requests=sent,
        preamble=PREAMBLE if args.preamble else "", together=args.together, same_questions=args.same_questions,
        order_seed=args.order_seed, orders=orders, split=args.split or "", summary=summary,
        comparisons=comparisons, runs=runs,
    )  # fmt: skip


def tables(data: Mapping[str, Any]) -> list[str]:
    """benchmarks/served_load.py: vLLM served at several concurrencies, repeated, each speculative method
    beside plain, with the paired comparisons."""
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
    compared = []
    measured = [m for m in ("by_repeat", "throughput") if all(m in cmp for cmp in data["comparisons"])]
    for cmp in data["comparisons"]:
        for c, e in cmp["levels"].items():
            row = [f"{code(cmp['a'])} / {code(cmp['b'])}", str(c), interval(e, x), str(e["n"]),
                   verdict(Estimate.from_json(e))]  # fmt: skip
            for measure in measured:  # (older files lack the one or both)
                by = cmp[measure][c]
                row += [interval(by, x), str(by["n"]), verdict(Estimate.from_json(by))]
            compared.append(row)
    by_repeat = "by_repeat" in measured
    sent = data["requests"]  # (one number for every concurrency in the files of before per-level counts)
    requests = ", ".join(f"{sent[str(c)]} at {c}" for c in data["concurrency"]) if isinstance(sent, dict) else sent
    preamble = " after one shared preamble of instructions" if data.get("preamble") else ""
    asked = "in every repeat" if data.get("same_questions") else "once per method"
    half = f", the {data['split']} half" if data.get("split") else ""
    resampled = "; and by repeat: the same ratio's interval from a bootstrap over repeats" if by_repeat else ""
    if "throughput" in measured:
        resampled += (
            "; and the servers' throughput: each repeat's output tokens per second under A over B's, the geometric "
            "mean over repeats, bootstrap over repeats"
        )
    columns = ["concurrency", "method", "output tokens/s", "vs plain", "TPOT p50 ms", "TPOT p99 ms", "TTFT p50 ms",
               "MAT", "answers", "identical to plain"]  # fmt: skip
    paired_columns = ["A / B", "concurrency", "ratio", "questions", "verdict"]
    paired_columns += ["by repeat", "repeats", "verdict by repeat"] if by_repeat else []
    paired_columns += ["throughput", "repeats", "verdict on throughput"] if "throughput" in measured else []
    return [
        f"Settings: {data['model']}, `vllm serve` {' '.join(data['server_args'])}, load from `vllm bench serve`, "
        f"greedy, {data['repeats']} repeats (a fresh server each), {requests} requests per concurrency and "
        f"repeat, each a Spec-Bench question's first turn{preamble} sent {asked} ({data['questions']} questions"
        f"{half}), {data['max_new_tokens']} new tokens at most. Output tokens per second and MAT: the mean over "
        "repeats with its 95 % interval.",
        table(columns, rows),
        "Paired comparisons: the geometric mean over questions of a request's tokens per second (its output "
        "tokens over its latency) under A over the same question's under B at the same concurrency, with its 95 % "
        f'interval (bootstrap over questions{resampled}); "on par" where the interval holds 1:',
        table(paired_columns, compared),
    ]


if __name__ == "__main__":
    main()
