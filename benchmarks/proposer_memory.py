"""What hdlib's vLLM proposer holds after a long run of requests: its states' bytes and the process's memory.

    python -m benchmarks.proposer_memory --questions question.jsonl [--requests 2000] [--in-flight 8]
        [--steps 64] [--emitted 3] [--out benchmarks/results/<machine>/proposer_memory.json]

hdlib's proposer (`HDProposer`, the tiers CMS, as `vllm-hd` runs) is called as vLLM's runner calls
it, by a stand-in runner that keeps `--in-flight` requests in its batch: each request a window of
Spec-Bench text (its turns, tokenized, joined and tiled) of 1k to 4k tokens, answered in `--steps`
steps of `--emitted` tokens, then finished (popped from the runner's requests, as vLLM pops a
finished or aborted one) and replaced by the next, until `--requests` have been served. Every 100
requests it records the states kept, their bytes and the process's resident memory (from
/proc/self/statm). No model runs: this is the proposer's memory alone, in a process of its own.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from benchmarks.common import QUESTIONS_HELP, results_path, write_results
from benchmarks.markdown import f1, table
from benchmarks.proposer_cost import text_stream
from hdlib.serving.proposer import HDProposer


def resident_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class Runner:
    """vLLM's model runner as the proposer reads it: an input batch and the requests alive."""

    def __init__(self, proposer: HDProposer, rows: int, width: int) -> None:
        self.drafter, self.requests = proposer, {}
        self.input_batch = SimpleNamespace(
            req_ids=[], token_ids_cpu=np.zeros((rows, width), np.int32), num_tokens_no_spec=np.zeros(rows, np.int32)
        )

    def propose_draft_token_ids(self, sampled: list[list[int]]) -> list[list[int]]:
        batch = self.input_batch
        return self.drafter.propose(sampled, batch.num_tokens_no_spec, batch.token_ids_cpu)


def run(stream: np.ndarray, proposer: HDProposer, requests: int, in_flight: int, steps: int, emitted: int):
    rng = np.random.default_rng(0)
    width = 4096 + steps * emitted + 1
    runner = Runner(proposer, in_flight, width)
    batch = runner.input_batch
    left = [0] * in_flight  # steps each row has still to go
    started, records = 0, []
    batch.req_ids = [""] * in_flight
    while started < requests or any(left):
        for r in range(in_flight):
            if left[r] == 0 and started < requests:  # the row's request finished: the next one comes in
                runner.requests.pop(batch.req_ids[r], None)
                start, length = int(rng.integers(0, len(stream) - width)), int(rng.integers(1024, 4097))
                batch.token_ids_cpu[r] = stream[start : start + width]
                batch.num_tokens_no_spec[r] = length
                batch.req_ids[r] = f"request-{started}"
                runner.requests[batch.req_ids[r]] = None
                left[r], started = steps, started + 1
                if started % 100 == 0:
                    drafter = proposer.drafter
                    records.append({"requests": started, "states": len(drafter), "state_bytes": drafter.nbytes,
                                    "resident_mib": resident_mib()})  # fmt: skip
        alive = [r for r in range(in_flight) if left[r]]
        if not alive:
            break
        for r in alive:
            batch.num_tokens_no_spec[r] += emitted
            left[r] -= 1
        sampled = [[1] * emitted if r in alive else [] for r in range(in_flight)]
        runner.propose_draft_token_ids(sampled)
    return records


def tables(data: Mapping[str, Any]) -> list[str]:
    """benchmarks/proposer_memory.py: hdlib's proposer's states and memory over a long run."""
    rows = [[f"{r['requests']:,}", str(r["states"]), f1(r["state_bytes"] / 2**20), f1(r["resident_mib"])]
            for r in data["records"] if r["requests"] % 500 == 0]  # fmt: skip
    return [
        f"Settings: {data['requests']:,} requests of 1k to 4k tokens of Spec-Bench text, {data['in_flight']} in "
        f"flight, {data['steps']} steps of {data['emitted']} tokens each; the bound on the states' bytes "
        f"{data['bound_mib']:.0f} MiB. Resident memory over the last half of the run: from "
        f"{data['resident_second_half'][0]:.1f} to {data['resident_second_half'][1]:.1f} MiB "
        f"({data['resident_growth_pct']:+.1f} %).",
        table(["requests served", "states kept", "their MiB", "process resident MiB"], rows),
    ]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=Path, required=True, help=QUESTIONS_HELP)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--in-flight", type=int, default=8)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--emitted", type=int, default=3)
    parser.add_argument("--out", type=Path, default=results_path("proposer_memory.json"))
    args = parser.parse_args(argv)
    from transformers import AutoTokenizer

    from hdlib.models.loading import DEFAULT_MODEL, load_text

    text = load_text(DEFAULT_MODEL)
    stream = np.resize(text_stream(args.questions, AutoTokenizer.from_pretrained(text.source)), 200_000)
    model = SimpleNamespace(tokenizer=text.source, model=text.source, get_vocab_size=lambda: len(text.tokenizer))
    proposer = HDProposer(SimpleNamespace(speculative_config=SimpleNamespace(num_speculative_tokens=16),
                                          model_config=model))  # fmt: skip
    records = run(stream, proposer, args.requests, args.in_flight, args.steps, args.emitted)
    half = [r["resident_mib"] for r in records if r["requests"] > args.requests // 2]
    data: dict[str, Any] = {
        "requests": args.requests, "in_flight": args.in_flight, "steps": args.steps, "emitted": args.emitted,
        "bound_mib": proposer.drafter.max_bytes / 2**20, "records": records,
        "resident_second_half": [min(half), max(half)], "resident_growth_pct": 100 * (half[-1] / half[0] - 1),
    }  # fmt: skip
    write_results(args.out, "proposer_memory", **data)
    print("\n\n".join(tables(data)))


if __name__ == "__main__":
    main()
