"""What the greedy acceptance phase spends its time on, at budget 64 (65 tree rows), on the CPU.

    python -m benchmarks.accept_phase [--rows 65] [--vocab 49152] [--out benchmarks/results/<machine>/accept_phase.json]

`Verifier.accept` computes, for every row of the (rows, vocabulary) logits, the model's 8 most
likely next tokens (`top_tokens`) and their probabilities, which need the softmax's normalizer over
the whole vocabulary. This times the parts side by side, in rounds, on random logits of SmolLM2's
shape: `model_choices` whole, `top_tokens`, the softmax, and other ways to get the normalizer (the
log-sum-exp, one exp-and-sum pass into a buffer kept between calls); the median of the rounds is
kept, with the machine. It shows which part of the phase no rearrangement of torch calls removes:
every way to the normalizer computes an exponential of every logit.

Here, called over and over on the same logits, a softmax into a fresh tensor costs what one into a
kept buffer does; inside the decoding loop, after a forward pass, the fresh 12.8 MB tensor was new
pages every step (0.6 ms of the step on the 2-core EPYC), which is why the verifier keeps one
(`SoftmaxBuffer`): benchmarks/step_overhead.py measures the step as it runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import results_path, write_results
from benchmarks.markdown import f3, table
from hdlib.engine.choices import SoftmaxBuffer, model_choices, top_tokens
from hdlib.models.cpu import median_seconds

ROUNDS, CALLS = 5, 50  # timed rounds (their median is kept), calls per round


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=65)
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--out", type=Path, default=results_path("accept_phase.json"))
    args = parser.parse_args()
    logits = torch.randn(args.rows, args.vocab, generator=torch.Generator().manual_seed(0)) * 4
    values, _ = top_tokens(logits, 8)
    best = values[:, :1]
    buffer = torch.empty_like(logits)
    kept = SoftmaxBuffer().like(logits)
    parts = {
        "model_choices (top 8, their probabilities; softmax into a kept buffer, as the verifier calls it)": (
            lambda: model_choices(logits, 8, kept)
        ),
        "top_tokens (top 8, blocked)": lambda: top_tokens(logits, 8),
        "softmax": lambda: torch.softmax(logits, -1),
        "softmax into a kept buffer": lambda: torch.softmax(logits, -1, out=buffer),
        "logsumexp": lambda: torch.logsumexp(logits, -1),
        "exp(x - max) summed, into a kept buffer": lambda: torch.sub(logits, best, out=buffer).exp_().sum(-1),
        "amax (one read of the logits)": lambda: logits.amax(-1),
    }
    with torch.inference_mode():
        ms = {name: round(1e3 * median_seconds(call, ROUNDS, CALLS), 3) for name, call in parts.items()}
    for name, value in ms.items():
        print(f"{value:7.3f} ms  {name}")
    result = {
        "what": "the greedy acceptance phase's parts on (rows, vocab) float32 logits, "
        f"median ms of {ROUNDS} rounds of {CALLS}",
        "shape": [args.rows, args.vocab],
        "ms": ms,
    }
    write_results(args.out, "accept_phase", **result)


def tables(data: Mapping[str, Any]) -> list[str]:
    rows = [[part, f3(ms)] for part, ms in data["ms"].items()]
    return [f"Logits of shape {data['shape'][0]} x {data['shape'][1]}; {data['what']}.", table(["part", "ms"], rows)]


if __name__ == "__main__":
    main()
