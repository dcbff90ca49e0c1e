"""Run in .venv-vllm by tests/test_vllm.py: vLLM's own `GPUModelRunner.propose_draft_token_ids` (the
CPU runner's too) calls hdlib's proposer, with a runner of two requests standing in for vLLM's: does
the proposer find the runner, read the rows' request ids and let a finished request's state go? The
answer is written as JSON to stdout."""

import inspect
import json
import os
from types import SimpleNamespace

import numpy as np

os.environ["HDLIB_VLLM_TIERS"] = "C"  # no database, no tokenizer: the proposer's binding alone
os.environ["HDLIB_VLLM_COST_SCALE"] = "0"  # every draft the context gives: the chains are the tokens', not the rule's

from vllm.v1.worker.gpu_model_runner import GPUModelRunner  # noqa: E402

from hdlib.serving.proposer import HDProposer  # noqa: E402


def step(runner, sampled):
    """The runner's own method, given what this stand-in holds, the rest None."""
    method = GPUModelRunner.propose_draft_token_ids
    given = {"scheduler_output": SimpleNamespace(total_num_scheduled_tokens=8, num_spec_tokens_to_schedule=4),
             "sampled_token_ids": sampled}  # fmt: skip
    names = list(inspect.signature(method).parameters)[1:]
    return method(runner, **{name: given.get(name) for name in names})


config = SimpleNamespace(
    speculative_config=SimpleNamespace(num_speculative_tokens=4),
    model_config=SimpleNamespace(get_vocab_size=lambda: 1000),
)
hd = HDProposer(config)
batch = SimpleNamespace(
    req_ids=["x", "y"],
    token_ids_cpu=np.array([[1, 2, 3, 1, 2, 0], [4, 5, 6, 4, 5, 0]], np.int32),
    num_tokens_no_spec=np.array([5, 5], np.int32),
)
runner = SimpleNamespace(speculative_config=SimpleNamespace(method="custom_class"), drafter=hd, input_batch=batch,
                         requests={"x": object(), "y": object()})  # fmt: skip
first = step(runner, [[2], [5]])
named = sorted(hd.drafter._states)
del runner.requests["x"]  # x finished
batch.req_ids, batch.token_ids_cpu[0], batch.num_tokens_no_spec[:1] = ["y"], batch.token_ids_cpu[1], 5
second = step(runner, [[5]])
print(json.dumps({"drafts": [first, second], "named": named, "left": sorted(hd.drafter._states),
                  "unbound": hd.unbound}))  # fmt: skip
