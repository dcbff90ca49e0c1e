"""The CPU forward pass with and without oneDNN-prepacked linear layers (hdlib.models.cpu), side by side.

The packaged model is loaded three times (prepack none, head, all). In rounds, each copy's forward
time at k = 1 to 32 new tokens (KS) after 256 cached ones is measured (hdlib.engine.forward_time.measure_forward), and
plain greedy decoding of the project's prompts (64 new tokens) is timed; the medians over the rounds
are kept. Greedy outputs are compared with the unpacked model's.

    python -m benchmarks.cpu_forward [--rounds 3] [--out benchmarks/results/<machine>/cpu_forward.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks.common import results_path, write_results
from benchmarks.markdown import code, f1, f2, table
from hdlib.decoding import generate
from hdlib.engine.forward_time import measure_forward
from hdlib.models.cpu import PREPACK_CHOICES, describe_machine
from hdlib.models.loading import load_model

ROOT = Path(__file__).resolve().parents[1]
KS = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--out", type=Path, default=results_path("cpu_forward.json"))
    args = parser.parse_args()
    models = {mode: load_model(prepack=mode) for mode in PREPACK_CHOICES}
    prompts = [p.read_text() for p in sorted((ROOT / "data/prompts").glob("*.txt"))][:4]
    forward: dict[str, list[list[float]]] = {m: [] for m in models}
    plain: dict[str, list[float]] = {m: [] for m in models}
    outputs: dict[str, list[list[int]]] = {}
    for r in range(args.rounds):
        for mode, lm in models.items():
            profile = measure_forward(lm.model, 256, max(KS), repeats=3, ks=KS)
            forward[mode].append([1e3 * profile.seconds[k - 1] for k in KS])
            start, tokens, answers = time.perf_counter(), 0, []
            for prompt in prompts:
                g = generate(lm, prompt, tiers=(), max_new_tokens=args.max_new_tokens)
                tokens += len(g.tokens)
                answers.append(g.tokens)
            plain[mode].append(tokens / (time.perf_counter() - start))
            outputs[mode] = answers
            print(
                f"round {r + 1} {mode:5}: forward(1/4/8/16) = "
                + " / ".join(f"{forward[mode][-1][KS.index(k)]:.1f}" for k in (1, 4, 8, 16))
                + f" ms, plain decoding {plain[mode][-1]:.1f} tokens/s",
                flush=True,
            )
    result = {
        "machine": describe_machine(),
        "command": "python -m benchmarks.cpu_forward "
        + f"--rounds {args.rounds} --max-new-tokens {args.max_new_tokens}",
        "date": time.strftime("%Y-%m-%d"),
        "k": list(KS),
        "forward_ms": {m: [round(statistics.median(col), 2) for col in zip(*rows)] for m, rows in forward.items()},
        "plain_tokens_per_s": {m: round(statistics.median(v), 2) for m, v in plain.items()},
        "greedy_identical_to_none": {m: outputs[m] == outputs["none"] for m in models},
    }
    base = result["forward_ms"]["none"]
    result["forward_ratio_to_none"] = {
        m: [round(a / b, 3) for a, b in zip(v, base)] for m, v in result["forward_ms"].items()
    }
    write_results(args.out, "cpu_forward", lm=models["all"], **result)  # the kernel choices "all" and "head" read
    print(
        json.dumps({k: result[k] for k in ("forward_ms", "plain_tokens_per_s", "greedy_identical_to_none")}, indent=1)
    )


def tables(data: Mapping[str, Any]) -> list[str]:
    ks = data["k"]
    rows = [
        [
            code(mode),
            *map(f1, ms),
            f1(data["plain_tokens_per_s"][mode]),
            "yes" if data["greedy_identical_to_none"][mode] else "no",
        ]
        for mode, ms in data["forward_ms"].items()
    ]
    ratio_rows = [[code(mode), *map(f2, r)] for mode, r in data["forward_ratio_to_none"].items()]
    by_one = [[code(mode), *(f2(v / ms[0]) for v in ms)] for mode, ms in data["forward_ms"].items()]
    return [
        "Forward pass over k new tokens after 256 cached ones, ms (median of the rounds), and plain decoding:",
        table(["prepack", *(f"k={k}" for k in ks), "plain decoding tokens/s", "greedy identical to none"], rows),
        "Forward(k) / forward(1), each way:",
        table(["prepack", *(f"k={k}" for k in ks)], by_one),
        "Forward(k) against the unpacked model's (`none`):",
        table(["prepack", *(f"k={k}" for k in ks)], ratio_rows),
    ]


if __name__ == "__main__":
    main()
