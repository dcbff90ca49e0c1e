"""Plain decoding against HD with the context tier, side by side in one run, on the packaged model.

    python -m benchmarks.context_tier [--max-new-tokens 128] [--out benchmarks/results/<machine>/context_tier.json]

Prompts: the project's own set (data/prompts/prompts.jsonl, six kinds) and the summarisation demo
(data/prompts/summarize.txt). Methods run interleaved, prompt by prompt, after a warm-up, so that
the drift of a shared machine hits all of them alike. Throughput per prompt = new tokens / wall
time; speedup = mean throughput of the method / mean throughput of plain decoding (Spec-Bench's
definition); MAT = new tokens / steps. Every HD output is checked against plain decoding.
"""

from __future__ import annotations

import argparse
import json
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import results_path, write_results
from benchmarks.markdown import code, f2, pct, table, x
from hdlib import forward_profile, generate, load_model

ROOT = Path(__file__).resolve().parents[1]
METHODS = {"plain": ((), 0), "hd k=8": ("context", 8), "hd k=16": ("context", 16), "hd auto": ("context", None)}


def prompts() -> list[tuple[str, str]]:
    rows = [json.loads(line) for line in (ROOT / "data/prompts/prompts.jsonl").read_text().splitlines()]
    return [("summarize.txt", (ROOT / "data/prompts/summarize.txt").read_text())] + [
        (f"{r['category']}#{r['question_id']}", r["turns"][0]) for r in rows
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--out", type=Path, default=results_path("context_tier.json"))
    args = parser.parse_args()

    lm = load_model("smollm2-135m")
    generate(lm, "Hello", "context", max_new_tokens=8, budget=None)  # warm-up, and the forward profile
    per_prompt: dict[str, dict[str, dict[str, float]]] = {}
    for name, prompt in prompts():
        runs = {
            m: generate(lm, prompt, tiers, max_new_tokens=args.max_new_tokens, budget=b)
            for m, (tiers, b) in METHODS.items()
        }
        per_prompt[name] = {
            m: {
                "tokens_per_s": r.tokens_per_s,
                "mat": r.mat,
                "new_tokens": len(r.tokens),
                "overhead_frac": r.overhead_frac,
                "identical": r.tokens == runs["plain"].tokens,
            }
            for m, r in runs.items()
        }
        print(
            name,
            " ".join(f"{m}: {v['tokens_per_s']:.1f} tok/s MAT {v['mat']:.2f}" for m, v in per_prompt[name].items()),
            flush=True,
        )

    base = sum(p["plain"]["tokens_per_s"] for p in per_prompt.values())
    overall = {
        m: {
            "speedup": sum(p[m]["tokens_per_s"] for p in per_prompt.values()) / base,
            "mat": sum(p[m]["mat"] for p in per_prompt.values()) / len(per_prompt),
            "overhead_frac": sum(p[m]["overhead_frac"] for p in per_prompt.values()) / len(per_prompt),
            "identical_frac": sum(p[m]["identical"] for p in per_prompt.values()) / len(per_prompt),
        }
        for m in METHODS
    }
    print(f"\n{'method':10} {'speedup':>8} {'MAT':>6} {'overhead':>9} {'identical':>10}")
    for m, v in overall.items():
        print(
            f"{m:10} {v['speedup']:8.2f} {v['mat']:6.2f} {100 * v['overhead_frac']:8.2f}% "
            f"{100 * v['identical_frac']:9.0f}%"
        )
    machine = f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, {lm.device}"
    write_results(
        args.out, "context_tier", lm=lm, profile=forward_profile(lm),
        command=f"python -m benchmarks.context_tier --max-new-tokens {args.max_new_tokens}", machine=machine,
        model=lm.name, overall=overall, prompts=per_prompt,
    )  # fmt: skip


def tables(data: Mapping[str, Any]) -> list[str]:
    overall = data["overall"]
    methods = list(overall)
    rows = [
        [code(m), x(v["speedup"]), f2(v["mat"]), pct(v["overhead_frac"]), pct(v["identical_frac"])]
        for m, v in overall.items()
    ]
    per_prompt = []
    for prompt, runs in data["prompts"].items():
        base = runs[methods[0]]["tokens_per_s"]
        per_prompt.append(
            [
                code(prompt),
                str(runs[methods[0]]["new_tokens"]),
                *(f"{x(runs[m]['tokens_per_s'] / base)} ({f2(runs[m]['mat'])})" for m in methods[1:]),
            ]
        )
    return [
        f"Model: {data['model']}.",
        table(["method", "speedup", "MAT", "engine overhead", "identical"], rows),
        "By prompt, tokens/s over plain decoding's (MAT):",
        table(["prompt", "new tokens", *(code(m) for m in methods[1:])], per_prompt),
    ]


if __name__ == "__main__":
    main()
