"""What a step of vLLM's engine costs with K draft tokens to verify: the price a proposer's chain pays.

    python -m benchmarks.vllm_step_cost [--drafts 0,1,2,4,8,16] [--tokens 200] [--rounds 3]
        [--out benchmarks/results/<machine>/vllm_step_cost.json]

Run in vLLM's environment (`.venv-vllm`, `make setup-vllm`). For each K it starts vLLM's offline
engine (the packaged model in float32, greedy, as `hdlib bench` runs it) with a proposer that
drafts K copies of one token the model does not emit (`FixedDrafts`; K = 0: no speculative config
at all), so every draft is refused and every step emits one token. It times `--tokens` tokens of
one request after a prompt of about 240 tokens, the best of `--rounds`, and reports the
milliseconds per step. `hdlib.serving.chain.FREE_TOKENS` is read from it: the draft tokens a
step verifies for about the price of one.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.common import results_path, write_results
from benchmarks.markdown import code, f1, f2, table

DRAFTS_ENV = "HDLIB_STEP_COST_DRAFTS"  # K, for the engine's process, which makes FixedDrafts itself
PROMPT = "Write a long story about a dragon who learns to cook. " * 20


class FixedDrafts:
    """A vLLM `custom_class` proposer that drafts K copies of the vocabulary's last token every step."""

    def __init__(self, vllm_config: Any) -> None:
        self.drafts = int(os.environ[DRAFTS_ENV])
        self.token = int(vllm_config.model_config.get_vocab_size()) - 1

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        pass

    def propose(self, sampled_token_ids: Sequence[Sequence[int]], *args: Any, **kwargs: Any) -> list[list[int]]:
        return [[self.token] * self.drafts if len(s) else [] for s in sampled_token_ids]


def step_ms(folder: str, drafts: int, tokens: int, rounds: int) -> float:
    try:
        import vllm
    except ImportError:
        raise SystemExit("vLLM is not installed here: run it in .venv-vllm (`make setup-vllm`)") from None

    from hdlib.bench.serving import ENGINE_ARGS, shut_down

    os.environ[DRAFTS_ENV] = str(drafts)
    proposer = "benchmarks.vllm_step_cost.FixedDrafts"
    spec = {"method": "custom_class", "model": proposer, "num_speculative_tokens": drafts}

    llm = vllm.LLM(model=folder, dtype="float32", **ENGINE_ARGS, **({"speculative_config": spec} if drafts else {}))
    params = vllm.SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
    llm.generate([PROMPT], params, use_tqdm=False)  # warm up
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        llm.generate([PROMPT], params, use_tqdm=False)
        best = min(best, time.perf_counter() - start)
    shut_down(llm)
    return 1e3 * best / tokens


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--drafts", default="0,1,2,4,8,16")
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(results_path("vllm_step_cost.json")))
    args = parser.parse_args(argv)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    from hdlib.models.loading import DEFAULT_MODEL, load_text

    folder = load_text(DEFAULT_MODEL).source
    costs = {}
    for k in (int(d) for d in args.drafts.split(",")):
        costs[str(k)] = step_ms(folder, k, args.tokens, args.rounds)
        print(f"K={k}: {costs[str(k)]:.1f} ms a step", flush=True)
    write_results(args.out, "vllm_step_cost", tokens=args.tokens, step_ms=costs)


def tables(data: Mapping[str, Any]) -> list[str]:
    """benchmarks/vllm_step_cost.py: vLLM's step with K refused draft tokens."""
    costs = data["step_ms"]
    base = costs.get("1") or next(iter(costs.values()))
    rows = [[str(k), f1(ms), f2(ms / base) + "x"] for k, ms in costs.items()]
    return [
        f"Settings: {data['model']}, vLLM's offline CPU engine, one request, {data['tokens']} tokens after a "
        f"prompt of about 240; K draft tokens a step, all refused ({code('K = 0')}: no speculative config).",
        table(["K", "ms a step", "vs K = 1"], rows),
    ]


if __name__ == "__main__":
    main()
