"""Run in .venv-vllm by tests/test_vllm.py: workloads that look like a server's, on vLLM's CPU engine
(`AsyncLLM`, the engine behind `vllm serve`), greedy, plain ("plain") or with hdlib's tiers as its
proposer ("hd"), each kind of argv[3] ("plain,hd": one engine after the other, in one process, so that
vLLM is imported once); what came back, by kind, is written as JSON to argv[2]. argv[1]: the model
folder. Each engine's KV cache is `BLOCKS` blocks, small enough that the batch sharing a system
prompt forces preemption. In order:

- `batch`: five repetitive prompts in flight together;
- `shared`: 32 questions in flight together, each after one system prompt of some 170 tokens, then
  `own`: the same 32 with a system prompt of their own (the request's number ahead of the same text, so
  that no request begins as another does); each phase's accepted draft tokens and tokens (its MAT);
- `cancelled`: eight streamed requests, each dropped by its client after a few tokens, then one short
  request (the engine's next step, where the proposer lets the dropped requests' states go);
- `siblings`: one prompt with n=4, sampled (four answers, each a request of its own);
- `sequential`: `SEQUENTIAL` short requests, one at a time.

The plain engine runs the phases whose answers are compared. With hd, the proposer's states are
counted (through `collective_rpc`) after each phase, and the engine's log is read by the test for the
warning that request ids could not be had.
"""

import asyncio
import json
import os
import sys
import time
import uuid

os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"  # collective_rpc with a function: the states held

from transformers import AutoTokenizer  # noqa: E402
from vllm import SamplingParams  # noqa: E402
from vllm.engine.arg_utils import AsyncEngineArgs  # noqa: E402
from vllm.sampling_params import RequestOutputKind  # noqa: E402
from vllm.v1.engine.async_llm import AsyncLLM  # noqa: E402
from vllm.v1.metrics.reader import get_metrics_snapshot  # noqa: E402

from hdlib.bench.serving import VLLM_METHODS  # noqa: E402

BLOCKS = 16  # KV cache blocks of the CPU engine's 128 tokens: 2,048 tokens, for 32 requests of ~280
BATCH = [
    "Repeat this line five times: the cat sat on the mat.",
    "Count from 1 to 20.",
    "Write the alphabet twice, letters separated by spaces.",
    "Say 'hello world' three times.",
    "List the days of the week, then list them again.",
]
SYSTEM = (
    "You are a helpful assistant. Read each request with care and do exactly what it asks, no more and no "
    "less. When you are asked to count, count one number at a time and do not skip any. When you are asked "
    "to repeat something, repeat it word for word, as many times as asked, each time on its own line. When "
    "you are asked to list things, list them in their usual order, one to a line. When you are asked a "
    "question, answer it in one or two short sentences of plain words. Do not add greetings, notes, "
    "apologies or questions of your own. Do not explain what you are doing unless you are asked to. If a "
    "request is unclear, do what it most likely means. Be accurate: if you do not know, say so. Use no "
    "markup, no lists with symbols and no headings. Keep to the language the request is written in."
)
QUESTIONS = [
    *(f"Count from {n} to {n + 12}." for n in (1, 5, 20, 33, 41, 60, 75, 90)),
    *(f"Repeat this line three times: {p}." for p in (
        "the sun is warm", "books are friends", "open at nine", "closed on Sunday",
        "red, green, blue", "one, two, three", "quiet please", "return on time")),
    *(f"List the {x}, then list them again." for x in (
        "days of the week", "months of the year", "colours of the rainbow", "four seasons",
        "planets of the solar system", "vowels", "first ten letters of the alphabet", "numbers from one to ten")),
    "What is the capital of France?", "Name three fruits.", "What is two plus two?", "Say hello in French.",
    "What colour is the sky?", "How many legs does a spider have?", "What is water made of?",
    "Write the word 'cat' five times.",
]  # fmt: skip
SEQUENTIAL = 24


def states(worker) -> int:
    """The requests hdlib's proposer keeps a state for, in this worker (run there by collective_rpc)."""
    return len(worker.model_runner.drafter.drafter)


def counters() -> dict[str, float]:
    wanted = {
        "vllm:spec_decode_num_accepted_tokens": "accepted",
        "vllm:spec_decode_num_drafts": "drafts",
        "vllm:num_preemptions": "preemptions",
        "vllm:generation_tokens": "tokens",
    }
    got = dict.fromkeys(wanted.values(), 0.0)
    for metric in get_metrics_snapshot():
        if metric.name in wanted:
            got[wanted[metric.name]] += float(getattr(metric, "value", 0))
    return got


async def answer(engine: AsyncLLM, prompt: str, params: SamplingParams) -> list[list[int]]:
    final = None
    async for out in engine.generate(prompt, params, request_id=str(uuid.uuid4())):
        final = out
    return [list(o.token_ids) for o in final.outputs]


async def together(engine: AsyncLLM, prompts: list[str], max_tokens: int) -> tuple[list[list[int]], dict]:
    """Every prompt in flight at once: their answers, and the counters' growth meanwhile."""
    before = counters()
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    outs = await asyncio.gather(*(answer(engine, p, params) for p in prompts))
    after = counters()
    return [o[0] for o in outs], {k: after[k] - before[k] for k in after}


async def dropped(engine: AsyncLLM, prompt: str, after: int) -> int:
    """Stream `prompt` and stop reading after `after` outputs, as a client that hangs up."""
    seen = 0
    stream = engine.generate(prompt, SamplingParams(temperature=0.0, max_tokens=200), request_id=str(uuid.uuid4()))
    async for _ in stream:
        seen += 1
        if seen >= after:
            break
    await stream.aclose()  # the engine aborts the request (AsyncLLM.generate's GeneratorExit)
    return seen


async def run(folder: str, hd: bool) -> dict:
    began = time.perf_counter()
    spec = {"speculative_config": VLLM_METHODS["vllm-hd"]} if hd else {}
    args = AsyncEngineArgs(model=folder, dtype="float32", max_model_len=1024, enforce_eager=True, seed=0,
                           num_gpu_blocks_override=BLOCKS, disable_log_stats=False, **spec)  # fmt: skip
    engine = AsyncLLM.from_engine_args(args)
    tokenizer = AutoTokenizer.from_pretrained(folder)

    def chat(question: str, system: str | None) -> str:
        turns = [{"role": "system", "content": system}] if system else []
        turns.append({"role": "user", "content": question})
        return tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)

    got: dict = {"states": {}, "seconds": {}}

    async def done(phase: str) -> None:
        """The proposer's states after `phase` (with hd), and the seconds since the engine was asked for."""
        got["states"][phase] = (await engine.collective_rpc(states))[0] if hd else None
        got["seconds"][phase] = round(time.perf_counter() - began, 1)

    try:
        await done("start")
        got["batch"], _ = await together(engine, BATCH, 48)
        await done("batch")
        got["shared"], got["shared_counts"] = await together(engine, [chat(q, SYSTEM) for q in QUESTIONS], 64)
        own = [chat(q, f"Request {i} of {len(QUESTIONS)}. {SYSTEM}") for i, q in enumerate(QUESTIONS, 1)]
        got["own"], got["own_counts"] = await together(engine, own, 64)
        got["system_tokens"] = len(tokenizer(SYSTEM).input_ids)
        await done("shared")
        if hd:  # (the plain engine answers what is compared, and these have nothing to compare)
            got["cancelled"] = await asyncio.gather(*(dropped(engine, f"Count from {n} to 300.", 4) for n in range(8)))
            await done("cancelled")
        got["after_cancel"] = await answer(engine, "Count from 1 to 5.", SamplingParams(temperature=0.0, max_tokens=8))
        await done("after_cancel")
        if hd:
            kind = RequestOutputKind.FINAL_ONLY
            got["siblings"] = await answer(
                engine, BATCH[0], SamplingParams(n=4, temperature=0.8, seed=0, max_tokens=32, output_kind=kind)
            )
            await done("siblings")
        short = SamplingParams(temperature=0.0, max_tokens=8)
        got["sequential"] = [(await answer(engine, f"Count from {n} to {n + 9}.", short))[0] for n in range(SEQUENTIAL)]
        await done("sequential")
        got["totals"] = counters()
    finally:
        engine.shutdown()
    return got


if __name__ == "__main__":
    results = {kind: asyncio.run(run(sys.argv[1], kind == "hd")) for kind in sys.argv[3].split(",")}
    with open(sys.argv[2], "w") as f:
        json.dump(results, f)
