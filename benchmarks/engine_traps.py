"""Two speed traps of the engine, timed alone: the sampling warp per visited node, and the context
tier's lookup when the text repeats itself.

    python -m benchmarks.engine_traps [--out benchmarks/results/<machine>/engine_traps.json] [--threads 1]

Sampling: `Warp(temperature=1, top_p)` on one row of logits, as the sampler calls it at every node it
visits, for SmolLM2's 49,152-token and Gemma 3's 262,144-token vocabularies; the logits are drawn
at random, spread (normal, scale 2: a nucleus of thousands of tokens at top_p 0.9) or peaked (scale
6: a few tokens), and the packaged model's own logits at the 64 positions of a sampled answer (the
medians over those rows). Context tier: `lookup` with a budget of 16 (the value-ranked tree's candidates) and
64 (a fixed budget) after a text that is a loop of period 3 (a small model stuck repeating itself),
8k and 32k tokens long, and how many of its drafts are prefixes of another (tokens the trie merges:
budget spent for nothing). Medians of repeated calls.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import results_path, write_results
from benchmarks.markdown import count, f3, table
from hdlib.engine.sampling import Warp
from hdlib.models.cpu import describe_machine, median_seconds
from hdlib.tiers import ContextTier

ROOT = Path(__file__).resolve().parents[1]


def sampling_times(repeats: int) -> list[dict[str, object]]:
    rows = []
    generator = torch.Generator().manual_seed(0)
    for vocab in (49_152, 262_144):
        for spread, scale in (("spread", 2.0), ("peaked", 6.0)):
            logits = torch.randn(vocab, generator=generator) * scale
            for top_p in (1.0, 0.9):
                warp = Warp(temperature=1.0, top_p=top_p)
                probs = warp(logits)
                rows.append({
                    "vocab": vocab, "logits": spread, "top_p": top_p,
                    "kept_tokens": int((probs > 0).sum()),
                    "ms_per_node": round(1e3 * median_seconds(lambda w=warp, x=logits: w(x), repeats), 3),
                })
                print(rows[-1], file=sys.stderr, flush=True)
    return rows


def model_logits() -> torch.Tensor:
    """(64, 49,152) logits of the packaged model after each token of an answer it sampled."""
    from hdlib.decoding import generate
    from hdlib.models.loading import load_model

    lm = load_model()
    prompt = lm.encode_prompt("Write a short story about a lighthouse keeper who finds a message in a bottle.")
    answer = generate(lm, prompt, (), max_new_tokens=64, temperature=1.0, seed=0).tokens
    with torch.inference_mode():
        logits = lm.model(torch.tensor([prompt + answer])).logits[0, len(prompt) - 1 : -1]
    return logits.float()


def model_sampling_times(repeats: int) -> list[dict[str, object]]:
    rows = []
    logits = model_logits()
    for top_p in (1.0, 0.95, 0.9):
        warp = Warp(temperature=1.0, top_p=top_p)
        kept = [int((warp(row) > 0).sum()) for row in logits]
        times = [1e3 * median_seconds(lambda w=warp, x=row: w(x), max(3, repeats // 5)) for row in logits]
        rows.append({
            "vocab": logits.shape[-1], "logits": "packaged model, 64 positions of a sampled answer", "top_p": top_p,
            "kept_tokens_median": int(statistics.median(kept)), "kept_tokens_max": max(kept),
            "ms_per_node": round(statistics.median(times), 3),
        })
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def context_times(repeats: int) -> list[dict[str, object]]:
    rows = []
    for length, budget in ((8_192, 16), (8_192, 64), (32_768, 16), (32_768, 64)):
        text = [11, 12, 13] * (length // 3) + [11]
        tier = ContextTier()
        tier.begin(text)
        drafts = tier.lookup(text, budget)
        prefixes = sum(
            any(other != d and other[: len(d)] == d for other in drafts) for d in drafts
        )
        rows.append({
            "context_tokens": len(text), "budget": budget, "drafts": len(drafts), "drafts_prefix_of_another": prefixes,
            "drafted_tokens": sum(map(len, drafts)), "longest_draft": max(map(len, drafts), default=0),
            "ms_per_lookup": round(1e3 * median_seconds(lambda t=tier, x=text, b=budget: t.lookup(x, b), repeats), 3),
        })
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=results_path("engine_traps.json"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results = {
        "command": " ".join(["python -m benchmarks.engine_traps", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d"),
        "machine": describe_machine(),
        "sampling_warp": sampling_times(args.repeats) + model_sampling_times(args.repeats),
        "context_loop": context_times(args.repeats),
    }
    write_results(args.out, "engine_traps", **results)


def tables(data: Mapping[str, Any]) -> list[str]:
    warp = []
    for r in data["sampling_warp"]:
        kept = (
            count(r["kept_tokens"])
            if "kept_tokens" in r
            else f"median {count(r['kept_tokens_median'])}, at most {count(r['kept_tokens_max'])}"
        )
        warp.append([count(r["vocab"]), r["logits"], f"{float(r['top_p']):g}", kept, f3(r["ms_per_node"])])
    loop = [
        [
            count(r["context_tokens"]),
            str(r["budget"]),
            str(r["drafts"]),
            str(r["drafts_prefix_of_another"]),
            str(r["drafted_tokens"]),
            f3(r["ms_per_lookup"]),
        ]
        for r in data["context_loop"]
    ]
    return [
        "The sampling warp per visited node:",
        table(["vocabulary", "logits", "top-p", "tokens kept", "ms per node"], warp),
        "The context tier's lookup in a loop of period 3:",
        table(["context tokens", "budget", "drafts", "prefixes of another", "drafted tokens", "ms per lookup"], loop),
    ]


if __name__ == "__main__":
    main()
