"""Run in .venv-vllm by tests/test_vllm.py: prompts sent together to vLLM's CPU engine, greedy, plain
(argv[3] "plain") or with hdlib's tiers as its proposer ("hd"), then SEQUENTIAL more, one at a time;
the answers, the accepted draft tokens and (with hd) the requests the proposer kept a state for
after the batch and after the sequential ones, written as JSON to argv[2]. argv[1]: the model
folder. One engine per process."""

import json
import os
import sys

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"  # collective_rpc with a function: the states held

import vllm  # noqa: E402

from hdlib.bench.serving import VLLM_METHODS  # noqa: E402

PROMPTS = [
    "Repeat this line five times: the cat sat on the mat.",
    "Count from 1 to 20.",
    "Write the alphabet twice, letters separated by spaces.",
    "Say 'hello world' three times.",
    "List the days of the week, then list them again.",
]
HD = VLLM_METHODS["vllm-hd"]
SEQUENTIAL = [f"Count from {n} to {n + 9}." for n in range(1, 5)]


def states(worker) -> int:
    """The requests hdlib's proposer keeps a state for, in this worker (run there by collective_rpc)."""
    return len(worker.model_runner.drafter.drafter)


def answers(folder: str, spec: dict | None) -> dict:
    llm = vllm.LLM(model=folder, dtype="float32", max_model_len=1024, enforce_eager=True, seed=0,
                   disable_log_stats=False, **({"speculative_config": spec} if spec else {}))  # fmt: skip
    params = vllm.SamplingParams(temperature=0.0, max_tokens=48)
    outs = llm.generate(PROMPTS, params, use_tqdm=False)  # all at once: the batch has every prompt in flight
    held = [llm.collective_rpc(states)[0]] if spec else []
    for prompt in SEQUENTIAL:  # one request at a time: each one's state is freed once it has left
        outs += llm.generate([prompt], vllm.SamplingParams(temperature=0.0, max_tokens=16), use_tqdm=False)
    held += [llm.collective_rpc(states)[0]] if spec else []
    accepted = 0
    for metric in llm.get_metrics():
        if metric.name == "vllm:spec_decode_num_accepted_tokens":
            accepted = int(getattr(metric, "value", 0))
    return {"answers": [list(o.outputs[0].token_ids) for o in outs], "accepted": accepted, "states": held}


if __name__ == "__main__":
    got = answers(sys.argv[1], HD if sys.argv[3] == "hd" else None)
    with open(sys.argv[2], "w") as f:
        json.dump(got, f)
