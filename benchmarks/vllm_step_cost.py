"""What a step of vLLM's engine costs with K draft tokens a row to verify, at several batch sizes.

    python -m benchmarks.vllm_step_cost [--rows 1,16,64] [--drafts 0,1,2,4,8,16] [--drafting N]
        [--tokens 48] [--rounds 2] [--out benchmarks/results/<machine>/vllm_step_cost.json]

Run in vLLM's environment (`.venv-vllm`, `make setup-vllm`). For each batch size it starts vLLM's
offline engine once (the packaged model in float32, greedy, as `hdlib bench` runs it) with a
proposer that drafts K copies of one token the model does not emit (`FixedDrafts`), so every draft
is refused and every step emits one token a row; K is set in the engine's worker between runs
(K = 0: the proposer drafts nothing, the speculative config on). With `--drafting N`, only the first N
rows of each step draft (the others none): whether a step's cost grows with its draft tokens or
once, with the first. It times `--tokens` tokens of each
of `rows` requests, all in flight together, after a prompt of about 240 tokens each, the best of
`--rounds`, and reports the milliseconds per step. `hdlib.serving.length` weighs each draft against
it: what one more draft token on one row adds to a step of that many rows (its `MEASURED` are this
machine's; `HDLIB_VLLM_STEP_COST` names another's results file).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.common import results_path, write_results
from benchmarks.markdown import code, table

PROMPT = "Write a long story about a dragon who learns to cook. " * 20


class FixedDrafts:
    """A vLLM `custom_class` proposer that drafts K copies of the vocabulary's last token every step."""

    def __init__(self, vllm_config: Any) -> None:
        self.drafts = 0
        self.drafting: int | None = None  # the rows that draft (None: every row)
        self.token = int(vllm_config.model_config.get_vocab_size()) - 1

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        pass

    def propose(self, sampled_token_ids: Sequence[Sequence[int]], *args: Any, **kwargs: Any) -> list[list[int]]:
        n = len(sampled_token_ids) if self.drafting is None else self.drafting
        return [[self.token] * self.drafts if len(s) and i < n else [] for i, s in enumerate(sampled_token_ids)]


def set_drafts(worker: Any, drafts: int, drafting: int | None = None) -> None:
    """Run in the engine's worker (collective_rpc): FixedDrafts drafts `drafts` a row from now on, in
    the first `drafting` rows (None: every row)."""
    worker.model_runner.drafter.drafts = drafts
    worker.model_runner.drafter.drafting = drafting


def step_ms(
    folder: str, rows: int, drafts: Sequence[int], tokens: int, rounds: int, drafting: int | None = None
) -> dict[str, float]:
    """Milliseconds a step with `rows` requests in flight, for each K of `drafts` (drafted by the
    first `drafting` rows; None: by every row)."""
    try:
        import vllm
    except ImportError:
        raise SystemExit("vLLM is not installed here: run it in .venv-vllm (`make setup-vllm`)") from None

    from hdlib.bench.serving import ENGINE_ARGS, shut_down

    os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"  # collective_rpc with a function: K, in the worker
    spec = {"method": "custom_class", "model": "benchmarks.vllm_step_cost.FixedDrafts",
            "num_speculative_tokens": max(max(drafts), 1)}  # fmt: skip
    llm = vllm.LLM(model=folder, dtype="float32", **ENGINE_ARGS, speculative_config=spec)
    prompts = [f"{i}. {PROMPT}" for i in range(rows)]
    params = vllm.SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
    costs = {}
    for k in drafts:
        llm.collective_rpc(set_drafts, args=(k, drafting))
        llm.generate(prompts, params, use_tqdm=False)  # warm up (and the prompts cached)
        best = float("inf")
        for _ in range(rounds):
            start = time.perf_counter()
            llm.generate(prompts, params, use_tqdm=False)
            best = min(best, time.perf_counter() - start)
        costs[str(k)] = 1e3 * best / tokens
        print(f"rows={rows} K={k}: {costs[str(k)]:.1f} ms a step", flush=True)
    shut_down(llm)
    return costs


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="1,16,64")
    parser.add_argument("--drafts", default="0,1,2,4,8,16")
    parser.add_argument("--drafting", type=int, default=None, help="only this many rows draft (default: all)")
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=str(results_path("vllm_step_cost.json")))
    args = parser.parse_args(argv)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    from hdlib.models.loading import DEFAULT_MODEL, load_text

    folder = load_text(DEFAULT_MODEL).source
    drafts = [int(d) for d in args.drafts.split(",")]
    costs = {r: step_ms(folder, int(r), drafts, args.tokens, args.rounds, args.drafting) for r in args.rows.split(",")}
    write_results(
        args.out, "vllm_step_cost", tokens=args.tokens, rounds=args.rounds, drafting=args.drafting, step_ms=costs
    )


def tables(data: Mapping[str, Any]) -> list[str]:
    """benchmarks/vllm_step_cost.py: vLLM's step with K refused draft tokens a row, by batch size (a
    file of one batch size, as the script wrote before it took --rows, reads as rows = 1)."""
    costs = data["step_ms"]
    if not isinstance(next(iter(costs.values())), Mapping):
        costs = {"1": costs}
    drafts = list(next(iter(costs.values())))
    cells = [[n, *(f"{ms:.1f} ({ms / by_k[drafts[0]]:.2f}x)" for ms in by_k.values())] for n, by_k in costs.items()]
    rounds = f"the best of {data['rounds']}" if "rounds" in data else "the best of 3, a fresh engine for each K"
    return [
        f"Settings: {data['model']}, vLLM's offline CPU engine, each row a request of {data['tokens']} tokens "
        f"after a prompt of about 240, all in flight together, {rounds}; K draft tokens a row a step, all "
        f"refused ({code('K = 0')}: none drafted)"
        + (f", drafted by {data['drafting']} row(s) of each step only" if data.get("drafting") else "")
        + f". Milliseconds a step, and against K = {drafts[0]}.",
        table(["rows", *(f"K = {k}" for k in drafts)], cells),
    ]


if __name__ == "__main__":
    main()
