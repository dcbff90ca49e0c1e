"""Run in .venv-vllm by tests/test_vllm.py: prompts sent together to vLLM's CPU engine, greedy, plain
(argv[3] "plain") or with hdlib's tiers as its proposer ("hd"); the answers and the accepted draft
tokens written as JSON to argv[2]. argv[1]: the model folder. One engine per process."""

import json
import os
import sys

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

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


def answers(folder: str, spec: dict | None) -> tuple[list[list[int]], int]:
    llm = vllm.LLM(model=folder, dtype="float32", max_model_len=1024, enforce_eager=True, seed=0,
                   disable_log_stats=False, **({"speculative_config": spec} if spec else {}))  # fmt: skip
    params = vllm.SamplingParams(temperature=0.0, max_tokens=48)
    outs = llm.generate(PROMPTS, params, use_tqdm=False)  # all at once: the batch has every prompt in flight
    accepted = 0
    for metric in llm.get_metrics():
        if metric.name == "vllm:spec_decode_num_accepted_tokens":
            accepted = int(getattr(metric, "value", 0))
    return [list(o.outputs[0].token_ids) for o in outs], accepted


if __name__ == "__main__":
    ids, accepted = answers(sys.argv[1], HD if sys.argv[3] == "hd" else None)
    with open(sys.argv[2], "w") as f:
        json.dump({"answers": ids, "accepted": accepted}, f)
