"""What a proposer costs the host per engine step, at batch sizes and context lengths of a server.

    python -m benchmarks.proposer_cost --questions question.jsonl [--rows 1,16,64,256]
        [--contexts 1024,4096,16384] [--steps 30] [--repeats 3] [--emitted 3] [--step-ms 20]
        [--out benchmarks/results/<machine>/proposer_cost.json]

Run in vLLM's environment (`.venv-vllm`). Three proposers are called as vLLM's runner calls them,
on the same rows, step by step, without a model: vLLM's n-gram proposer (`vllm-ngram`'s settings:
keys of 4 down to 2 tokens, 8 drafts; numba, one thread), SuffixDecoding (`vllm-suffix`'s, through
vLLM's own proposer class and arctic-inference), and hdlib's (`vllm-hd`: the tiers CMS, chains of at
most 16, its states keyed by request id as in vLLM, its gate seeing an engine step of `--step-ms`
besides the time that passes: a GPU's step at these batch sizes is some 5 to 30 ms). Each row is a
window of real text: the tokenized turns of Spec-Bench's questions, joined and tiled; at each step every row grows by
`--emitted` tokens of that text, as if it had that many accepted. Each proposer runs its steps in a
block of its own, on its own copy of the rows (so that the processor's caches hold its data, as in
vLLM, where it is the only proposer), the blocks' order turning from repeat to repeat; a step's
ratio pairs the same step of the same repeat. The first call (every row a new request, its prompt
indexed) is timed apart from the steps. Also timed: hdlib's context index of one new request of 32k
tokens (`hdlib.serving.index.ContextIndex`), the median of 5 builds.

Each (rows, context) reports the median milliseconds per step of each proposer and hdlib's ratio to
the n-gram proposer's: the geometric mean over its steps and repeats of the paired per-step ratio,
with a 95 % bootstrap interval. No model runs, so no draft is verified: this is host time only.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from benchmarks.common import QUESTIONS_HELP, results_path, write_results
from benchmarks.markdown import f1, f2, table
from hdlib.bench.intervals import Estimate, geometric_mean
from hdlib.bench.serving import VLLM_METHODS
from hdlib.serving.chain import ChainDrafter
from hdlib.serving.gate import Gate
from hdlib.serving.index import ContextIndex
from hdlib.serving.proposer import offline_tiers

PROPOSERS = ("ngram", "suffix", "hd")


def text_stream(questions: Path, tokenizer: Any) -> np.ndarray:
    """Every turn of every question, tokenized and joined: the text the rows are windows of."""
    import json

    turns = [t for line in questions.read_text().splitlines() if line.strip() for t in json.loads(line)["turns"]]
    return np.array([i for t in turns for i in tokenizer.encode(t)], dtype=np.int32)


def config(rows: int, width: int) -> SimpleNamespace:
    ngram, suffix, hd = (VLLM_METHODS[f"vllm-{m}"] for m in PROPOSERS)
    spec = SimpleNamespace(
        prompt_lookup_min=ngram["prompt_lookup_min"], prompt_lookup_max=ngram["prompt_lookup_max"],
        suffix_decoding_max_tree_depth=suffix["suffix_decoding_max_tree_depth"], suffix_decoding_max_spec_factor=1.0,
        suffix_decoding_min_token_prob=0.1, suffix_decoding_max_cached_requests=10000,
        num_speculative_tokens=ngram["num_speculative_tokens"],
    )  # fmt: skip
    return SimpleNamespace(
        speculative_config=spec, model_config=SimpleNamespace(max_model_len=width),
        scheduler_config=SimpleNamespace(max_num_seqs=max(rows, 1)),
        parallel_config=SimpleNamespace(tensor_parallel_size=1), hd_max_len=hd["num_speculative_tokens"],
    )  # fmt: skip


class Rows:
    """vLLM's input batch as the proposers read it: `rows` requests, each a window of `stream`."""

    def __init__(self, stream: np.ndarray, rows: int, context: int, steps: int, emitted: int) -> None:
        width = context + (steps + 1) * emitted + 64
        self.token_ids_cpu = np.zeros((rows, width), dtype=np.int32)
        stride = max(1, (len(stream) - width) // max(rows, 1))
        for r in range(rows):
            start = (r * stride) % max(1, len(stream) - width)
            self.token_ids_cpu[r] = np.resize(stream[start:], width)
        self.num_tokens_no_spec = np.full(rows, context, dtype=np.int32)
        self.num_prompt_tokens = self.num_tokens_no_spec.copy()
        self.req_ids = [f"request-{r}" for r in range(rows)]
        self.req_id_to_index = {rid: r for r, rid in enumerate(self.req_ids)}
        self.emitted, self.width = emitted, width

    def sampled(self) -> list[list[int]]:
        n = self.num_tokens_no_spec
        return [self.token_ids_cpu[r, n[r] - self.emitted : n[r]].tolist() for r in range(len(n))]

    def advance(self) -> None:
        self.num_tokens_no_spec += self.emitted


class EngineClock:
    """The time the gate of hdlib's proposer reads: this machine's, plus `step_s` for every engine step
    (which the benchmark does not run), so that it sees the batch's rate of a real engine."""

    def __init__(self, step_s: float) -> None:
        self.step_s, self.steps = step_s, 0

    def __call__(self) -> float:
        return time.perf_counter() + self.steps * self.step_s


def proposers(cfg: SimpleNamespace, fingerprint: str, clock: EngineClock) -> dict[str, Any]:
    from vllm.v1.spec_decode.ngram_proposer import NgramProposer
    from vllm.v1.spec_decode.suffix_decoding import SuffixDecodingProposer

    suffix_cfg = SimpleNamespace(**vars(cfg))
    suffix_cfg.speculative_config = SimpleNamespace(**vars(cfg.speculative_config))
    suffix_cfg.speculative_config.num_speculative_tokens = VLLM_METHODS["vllm-suffix"]["num_speculative_tokens"]
    return {
        "ngram": NgramProposer(cfg),
        "suffix": SuffixDecodingProposer(suffix_cfg),
        "hd": ChainDrafter(offline_tiers(fingerprint, "CMS"), "CMS", cfg.hd_max_len, gate=Gate(clock)),
    }


def call(name: str, proposer: Any, batch: Rows, sampled: list[list[int]]) -> float:
    """Seconds one call of the proposer takes, made as vLLM's runner makes it."""
    start = time.perf_counter()
    if name == "ngram":
        proposer.propose(proposer.k, sampled, batch.num_tokens_no_spec, batch.token_ids_cpu)
    elif name == "suffix":
        proposer.propose(proposer.num_speculative_tokens, batch, sampled)
    else:
        proposer.propose(sampled, batch.num_tokens_no_spec, batch.token_ids_cpu, batch.req_ids, batch.req_id_to_index)
    return time.perf_counter() - start


def measure(
    stream: np.ndarray, fingerprint: str, rows: int, context: int, steps: int, repeats: int, emitted: int, step_s: float
) -> dict[str, Any]:
    first: dict[str, list[float]] = {p: [] for p in PROPOSERS}
    step: dict[str, list[float]] = {p: [] for p in PROPOSERS}
    for repeat in range(repeats):
        clock = EngineClock(step_s)
        width = Rows(stream, 1, context, steps, emitted).width
        made = proposers(config(rows, width), fingerprint, clock)
        turn = repeat % len(PROPOSERS)
        for name in PROPOSERS[turn:] + PROPOSERS[:turn]:  # a block each: its caches its own, as in vLLM
            batch = Rows(stream, rows, context, steps, emitted)
            first[name].append(call(name, made[name], batch, batch.sampled()))
            for _ in range(steps):
                batch.advance()
                clock.steps += name == "hd"
                step[name].append(call(name, made[name], batch, batch.sampled()))
    ratio = geometric_mean([h / g for h, g in zip(step["hd"], step["ngram"], strict=True)])
    return {
        "rows": rows,
        "context": context,
        "first_call_ms": {p: float(np.median(v)) * 1e3 for p, v in first.items()},
        "step_ms": {p: float(np.median(v)) * 1e3 for p, v in step.items()},
        "hd_over_ngram": ratio.to_json(),
    }


def index_32k(stream: np.ndarray) -> float:
    """Milliseconds to index a new request of 32,768 tokens: the median of 5."""
    tokens = np.resize(stream, 32_768)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        ContextIndex(tokens)
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e3


def tables(data: Mapping[str, Any]) -> list[str]:
    """benchmarks/proposer_cost.py: host milliseconds per step of vLLM's proposers and hdlib's."""
    rows = [
        [str(c["rows"]), f"{c['context']:,}", *(f2(c["step_ms"][p]) for p in PROPOSERS),
         Estimate.from_json(c["hd_over_ngram"]).describe(suffix="x"), *(f1(c["first_call_ms"][p]) for p in PROPOSERS)]
        for c in data["cells"]
    ]  # fmt: skip
    head = ["rows", "context", "n-gram ms/step", "suffix ms/step", "hd ms/step", "hd / n-gram [95 %]",
            "n-gram 1st call ms", "suffix 1st call ms", "hd 1st call ms"]  # fmt: skip
    return [
        f"Settings: no model (hdlib's gate sees an engine step of {data.get('step_ms', 0):g} ms); rows of "
        f"Spec-Bench text growing by {data['emitted']} tokens a step, "
        f"{data['steps']} steps after the first call, {data['repeats']} repeats, medians; the ratio is the "
        "geometric mean of the paired per-step ratios with its 95 % interval.",
        table(head, rows),
        f"A new request of 32,768 tokens indexed by hdlib's context index: {data['index_32k_ms']:.1f} ms "
        "(median of 5).",
    ]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=Path, required=True, help=QUESTIONS_HELP)
    parser.add_argument("--rows", default="1,16,64,256")
    parser.add_argument("--contexts", default="1024,4096,16384")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--emitted", type=int, default=3)
    parser.add_argument(
        "--step-ms", type=float, default=20.0, help="the engine's step the gate of hdlib's proposer sees (default 20)"
    )
    parser.add_argument("--out", type=Path, default=results_path("proposer_cost.json"))
    args = parser.parse_args(argv)
    from transformers import AutoTokenizer

    from hdlib.models.loading import DEFAULT_MODEL, load_text
    from hdlib.store import tokenizer_fingerprint

    text = load_text(DEFAULT_MODEL)
    tokenizer = AutoTokenizer.from_pretrained(text.source)
    stream, fingerprint = text_stream(args.questions, tokenizer), tokenizer_fingerprint(tokenizer)
    cells = []
    for context in (int(c) for c in args.contexts.split(",")):
        for rows in (int(r) for r in args.rows.split(",")):
            step_s = args.step_ms / 1e3
            cell = measure(stream, fingerprint, rows, context, args.steps, args.repeats, args.emitted, step_s)
            print(rows, context, cell["step_ms"], cell["hd_over_ngram"], flush=True)
            cells.append(cell)
    data: dict[str, Any] = {"cells": cells, "index_32k_ms": index_32k(stream), "steps": args.steps,
                            "repeats": args.repeats, "emitted": args.emitted, "step_ms": args.step_ms}  # fmt: skip
    write_results(args.out, "proposer_cost", **data)
    print("\n\n".join(tables(data)))


if __name__ == "__main__":
    main()
