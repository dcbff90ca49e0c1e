"""vLLM served, under load: plain decoding and its speculative methods, hdlib's HD among them.

    python -m benchmarks.served_load --questions FILE [--per-task 2] [--max-new-tokens 256]
        [--methods vllm,vllm-ngram,vllm-suffix,vllm-hd] [--concurrency 1,4,16] [--requests 16]
        [--time-limit 600] [--out benchmarks/results/<machine>/served_load.json]

For each method it starts `vllm serve` (from .venv-vllm, on a free port of 127.0.0.1, the packaged
model in float32, greedy) with that method's speculative config (`hdlib.bench.serving.VLLM_METHODS`),
and at each concurrency sends `--requests` completions, at most `concurrency` in flight, streamed:
no request is sent after `--time-limit` seconds, and the level ends when those in flight have
answered. Then the server is stopped, it and only it. The prompts are Spec-Bench questions' first
turns, each sent once in a method's run (the first `--requests` at the first concurrency, the next
at the second, ...), the same to every method: a method that caches earlier answers, as
SuffixDecoding does, would otherwise draft a question's answer from its own earlier answer to it.

It reports per method and concurrency: output tokens per second (all answers' tokens over the
level's wall time), time per output token (a request's time after its first token over its other
tokens; p50 and p99), time to the first token (p50), MAT (output tokens over the engine's steps:
tokens minus the draft tokens it accepted, from the server's metrics), and the share of answers
identical to plain decoding's (`vllm`, the first method) at the same concurrency. Methods run one
after another in one run, each on the same machine and prompts. Greedy answers can differ from
plain's where a batch's numerics differ from one request's (another kernel for another batch shape,
a near-tie of the argmax), and a batch's rows differ between methods.
"""

from __future__ import annotations

import json
import re
import statistics
import tempfile
import threading
import time
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import load, spec_bench_parser, write_results
from benchmarks.markdown import code, f1, f2, pct, table
from hdlib.bench.serving import VLLM_METHODS, vllm_method, vllm_server

SERVER_ARGS = ["--dtype", "float32", "--max-model-len", "4096", "--max-num-seqs", "16"]
ACCEPTED = re.compile(r"^vllm:spec_decode_num_accepted_tokens_total(?:\{[^}]*\})? (\S+)$", re.M)


@dataclass(frozen=True)
class Answer:
    question: int  # the prompt's index in the run's list
    ids: list[int]
    first_s: float  # time to the first token
    wall_s: float  # the request's time, from sending to its last token

    @property
    def per_token_s(self) -> float | None:
        """Time per output token after the first (None for an answer of one token)."""
        return (self.wall_s - self.first_s) / (len(self.ids) - 1) if len(self.ids) > 1 else None


def complete(
    url: str, model: str, prompt: Sequence[int], max_tokens: int, stop: Sequence[int]
) -> tuple[list[int], float]:
    """One streamed greedy completion: its token ids and the time its first ones came."""
    body = {
        "model": model, "prompt": list(prompt), "max_tokens": max_tokens, "temperature": 0.0,
        "stop_token_ids": list(stop), "stream": True, "return_token_ids": True,
    }  # fmt: skip
    request = urllib.request.Request(
        f"{url}/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    start, first, ids = time.perf_counter(), None, []
    with urllib.request.urlopen(request, timeout=1800) as response:
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            new = json.loads(line[6:])["choices"][0].get("token_ids") or []
            if new and first is None:
                first = time.perf_counter() - start
            ids += new
    return ids, first if first is not None else time.perf_counter() - start


def accepted_tokens(url: str) -> int:
    """The draft tokens the server's engine has accepted so far (0 for plain decoding)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
        return int(sum(float(v) for v in ACCEPTED.findall(response.read().decode())))


def load_level(url: str, model: str, prompts: Sequence[Sequence[int]], concurrency: int, first: int,
               requests: int, max_tokens: int, stop: Sequence[int], time_limit_s: float,
               ) -> tuple[list[Answer], float]:  # fmt: skip
    """`requests` completions of the prompts from `first` on, at most `concurrency` in flight; none
    sent after `time_limit_s`."""
    lock, nxt, answers = threading.Lock(), [0], []
    start = time.perf_counter()

    def worker() -> None:
        while True:
            with lock:
                i = nxt[0]
                if i >= requests or time.perf_counter() - start > time_limit_s:
                    return
                nxt[0] += 1
            sent = time.perf_counter()
            ids, first_s = complete(url, model, prompts[first + i], max_tokens, stop)
            with lock:
                answers.append(Answer(first + i, ids, first_s, time.perf_counter() - sent))

    with ThreadPoolExecutor(concurrency) as pool:
        for future in [pool.submit(worker) for _ in range(concurrency)]:
            future.result()
    return answers, time.perf_counter() - start


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = spec_bench_parser(__doc__, "vllm,vllm-ngram,vllm-suffix,vllm-hd", "served_load.json")
    parser.set_defaults(max_new_tokens=256)
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--requests", type=int, default=16, help="completions sent at each concurrency")
    parser.add_argument("--time-limit", type=float, default=600.0, help="seconds after which a level sends no more")
    args = parser.parse_args()
    methods, levels = args.methods.split(","), [int(c) for c in args.concurrency.split(",")]
    if methods[0] != "vllm" or not all(map(vllm_method, methods)):
        parser.error(f"--methods: `vllm` first (the reference), then any of {', '.join(VLLM_METHODS)}, vllm-hd:ORDER")
    questions, lm = load(args)
    prompts = [list(lm.encode_prompt([{"role": "user", "content": q.turns[0]}])) for q in questions]
    if len(prompts) < args.requests * len(levels):
        parser.error(f"{args.requests} requests at each of {len(levels)} concurrencies need as many questions, "
                     f"each sent once: the questions give {len(prompts)} (raise --per-task)")  # fmt: skip
    warm_up = list(lm.encode_prompt([{"role": "user", "content": "Say hello."}]))
    tasks = [q.task for q in questions]
    stop = sorted(lm.eos_token_ids)
    reference: dict[int, list[int]] = {}
    results: dict[str, dict[str, Any]] = {}
    logs = tempfile.TemporaryDirectory()  # each server's log: its tail is said if it fails to start
    for method in methods:
        results[method] = {}
        with vllm_server(lm.source, method, Path(logs.name) / f"{method}.log", SERVER_ARGS) as url:
            complete(url, method, warm_up, 8, stop)  # the first request's one-off costs, on no question
            for level, c in enumerate(levels):
                before = accepted_tokens(url)
                answers, wall = load_level(url, method, prompts, c, level * args.requests, args.requests,
                                           args.max_new_tokens, stop, args.time_limit)  # fmt: skip
                accepted = accepted_tokens(url) - before
                if method == "vllm":
                    reference.update({a.question: a.ids for a in answers})
                tokens = sum(len(a.ids) for a in answers)
                per_token = [t for a in answers if (t := a.per_token_s) is not None]
                same = [a.ids == reference[a.question] for a in answers if method != "vllm" and a.question in reference]
                results[method][str(c)] = {
                    "requests": len(answers),
                    "tokens": tokens,
                    "wall_s": wall,
                    "tokens_per_s": tokens / wall,
                    "tpot_ms_p50": 1e3 * statistics.median(per_token),
                    "tpot_ms_p99": 1e3 * percentile(per_token, 0.99),
                    "ttft_ms_p50": 1e3 * statistics.median(a.first_s for a in answers),
                    "mat": tokens / max(tokens - accepted, 1),
                    "identical_frac": sum(same) / len(same) if same else None,
                    "tasks": sorted({tasks[a.question] for a in answers}),
                }
                r = results[method][str(c)]
                print(f"{method} at {c}: {r['tokens_per_s']:.1f} tok/s, TPOT p50 {r['tpot_ms_p50']:.0f} ms p99 "
                      f"{r['tpot_ms_p99']:.0f} ms, MAT {r['mat']:.2f}, {len(answers)} answers", flush=True)  # fmt: skip
    write_results(args.out, "served_load", server_args=SERVER_ARGS, questions=len(questions),
                  max_new_tokens=args.max_new_tokens, concurrency=levels, methods=results)


def tables(data: Mapping[str, Any]) -> list[str]:
    """benchmarks/served_load.py: vLLM served at several concurrencies, each speculative method beside plain."""
    rows = []
    for c in data["concurrency"]:
        plain = data["methods"]["vllm"][str(c)]["tokens_per_s"]
        for name, levels in data["methods"].items():
            r = levels[str(c)]
            same = "-" if r["identical_frac"] is None else pct(r["identical_frac"])
            rows.append([str(c), code(name), f1(r["tokens_per_s"]), f2(r["tokens_per_s"] / plain) + "x",
                         f1(r["tpot_ms_p50"]), f1(r["tpot_ms_p99"]), f1(r["ttft_ms_p50"]), f2(r["mat"]),
                         str(r["requests"]), same])  # fmt: skip
    return [
        f"Settings: {data['model']}, `vllm serve` {' '.join(data['server_args'])}, greedy, {data['questions']} "
        f"Spec-Bench questions' first turns, {data['max_new_tokens']} new tokens at most.",
        table(["concurrency", "method", "output tokens/s", "vs plain", "TPOT p50 ms", "TPOT p99 ms", "TTFT p50 ms",
               "MAT", "answers", "identical to plain"], rows),  # fmt: skip
    ]


if __name__ == "__main__":
    main()
