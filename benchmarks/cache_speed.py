"""hdlib's own KV cache (`TreeCache`) against transformers' `DynamicCache`, side by side.

The packaged model, in two parts; the results are ratios own / dynamic (below 1: the own cache is
faster), medians, each pair measured back to back with the order alternating, so that both meet the
same machine state (other work on the machine moves absolute times, much less the ratios).

- passes: one verification pass (the forward pass over a tree of k tokens and the compaction of a
  path off the first branch) after 256 and after 2,000 cached tokens, k = 1, 16, 64, repeated, the
  cache cut back after each; where `DynamicCache`'s concatenation of every layer shows most.
- generations: plain decoding and greedy HD with the default tiers at fixed budgets 16 and 64, on
  short prompts of the project's prompt set and on a long one (this project's source to explain,
  about 2,000 tokens); ratios of the decoding time (the steps, prefill apart), of the forward passes
  alone, and of the prefill. Both caches must give the same tokens.

    flock /tmp/heavy.lock .venv/bin/python -m benchmarks.cache_speed
        [--out benchmarks/results/<machine>/cache_speed.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import results_path, write_results
from benchmarks.markdown import count, f2, f3, table
from hdlib.decoding import generate
from hdlib.engine import loop
from hdlib.engine.tree import DraftTree, tree_buffers
from hdlib.engine.verifier import (
    CACHE_KINDS,
    AttentionLayout,
    Verifier,
    compact_cache,
    layer_count,
    new_cache,
    prefill,
    tree_logits,
)
from hdlib.models.cpu import describe_machine
from hdlib.models.loading import LoadedModel, load_model
from hdlib.tiers import Tier

ROOT = Path(__file__).resolve().parents[1]
METHODS = {"plain": ((), None), "hd16": (None, 16), "hd64": (None, 64)}  # tiers (None: the default), budget
LONG_TOKENS = 2000
PASS_CONTEXTS = (256, LONG_TOKENS)
PASS_SIZES = (1, 16, 64)


@contextmanager
def cache_kind(kind: str) -> Iterator[None]:
    """The decoding loop's verifiers keep their keys and values in the cache `kind`."""
    original = loop.Verifier
    loop.Verifier = functools.partial(Verifier, cache=kind)  # type: ignore[misc]
    try:
        yield
    finally:
        loop.Verifier = original  # type: ignore[misc]


def prompts(lm: LoadedModel, short: int) -> dict[str, list[int]]:
    """`short` prompts of the project's prompt set, and the long one: the source cut to about
    `LONG_TOKENS` tokens (chat template included)."""
    rows = [json.loads(line) for line in (ROOT / "data/prompts/prompts.jsonl").read_text().splitlines()]
    chosen = {f"short{i + 1}": lm.encode_prompt(rows[i]["turns"][0]) for i in range(short)}
    source = "".join(p.read_text() for p in sorted((ROOT / "hdlib").glob("*.py")))
    ask = "Explain what this Python code does, function by function:\n\n"
    whole = lm.encode_prompt(ask + source)
    chars = len(source) * LONG_TOKENS // len(whole)
    chosen["long"] = lm.encode_prompt(ask + source[:chars])
    return chosen


def bushy_tree(root: int, k: int, gen: torch.Generator) -> tuple[DraftTree, list[int]]:
    """A tree of `k` tokens (root included), drafts of 4 side by side, and the path to keep: the
    deepest node of the last draft, so that compaction moves entries (a path off the first branch)."""
    tree = DraftTree(root=root)
    while len(tree) < k:
        draft = torch.randint(100, 40000, (min(4, k - len(tree)),), generator=gen).tolist()
        tree.add(draft, Tier.CONTEXT, k - len(tree), 64)
    return tree, tree.path_to(len(tree) - 1)


def time_passes(lm: LoadedModel, repeats: int) -> list[dict]:
    """Milliseconds of one pass and its compaction, per context, tree size and cache (medians)."""
    model, layout, gen = lm.model, AttentionLayout.of(lm.model), torch.Generator().manual_seed(0)
    rows = []
    for context in PASS_CONTEXTS:
        tokens = torch.randint(100, 40000, (context,), generator=gen).tolist()
        caches = {kind: new_cache(kind, lm.context_length, layer_count(lm.model)) for kind in CACHE_KINDS}
        with torch.inference_mode():
            for cache in caches.values():
                prefill(model, tokens, cache)
            for k in PASS_SIZES:
                tree, keep = bushy_tree(tokens[-1], k, gen)
                buffers = tree_buffers(tree, context, model.device)
                wall: dict[str, list[float]] = {kind: [] for kind in CACHE_KINDS}
                cpu: dict[str, list[float]] = {kind: [] for kind in CACHE_KINDS}  # the process's CPU time
                for r in range(repeats + 1):  # the first round warms up and is not kept
                    for kind in CACHE_KINDS if r % 2 == 0 else CACHE_KINDS[::-1]:
                        cache = caches[kind]
                        start, start_cpu = time.perf_counter(), time.process_time()
                        tree_logits(model, layout, buffers, cache, context)
                        compact_cache(cache, context, keep)
                        if r:
                            wall[kind].append(time.perf_counter() - start)
                            cpu[kind].append(time.process_time() - start_cpu)
                        cache.crop(-len(keep))
                row = {"context": context, "k": k, "kept": len(keep)}
                for name, seconds in (("wall", wall), ("cpu", cpu)):
                    row[f"{name}_ms"] = {kind: round(1e3 * statistics.median(v), 2) for kind, v in seconds.items()}
                    ratios = [a / b for a, b in zip(seconds["own"], seconds["dynamic"])]
                    row[f"{name}_ratio"] = round(statistics.median(ratios), 4)
                rows.append(row)
                ms = row["wall_ms"]
                print(f"pass after {context:4} tokens, k = {k:2}: own {ms['own']:6.1f} ms, dynamic "
                      f"{ms['dynamic']:6.1f} ms, ratio {row['wall_ratio']:.3f} (CPU time {row['cpu_ratio']:.3f})",
                      flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20, help="passes timed per context, tree size and cache")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--short", type=int, default=2, help="short prompts from data/prompts/prompts.jsonl")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--out", type=Path, default=results_path("cache_speed.json"))
    args = parser.parse_args()
    began = time.perf_counter()
    lm = load_model()
    passes = time_passes(lm, args.repeats)
    texts = prompts(lm, args.short)
    generate(lm, texts["short1"], max_new_tokens=8, budget=16)  # opens the tiers' databases, warms the kernels
    rows = []
    for r in range(args.rounds):
        for name, ids in texts.items():
            for method, (tiers, budget) in METHODS.items():
                order = CACHE_KINDS if (r + len(rows)) % 2 == 0 else CACHE_KINDS[::-1]
                got = {}
                for kind in order:
                    with cache_kind(kind):
                        kwargs = {} if tiers is None else {"tiers": tiers}
                        got[kind] = generate(lm, ids, max_new_tokens=args.max_new_tokens, budget=budget, **kwargs)
                own, dyn = got["own"], got["dynamic"]
                step = {k: sum(s.times.total for s in g.steps) for k, g in got.items()}
                forward = {k: sum(s.times.forward for s in g.steps) for k, g in got.items()}
                row = {
                    "round": r + 1,
                    "prompt": name,
                    "prompt_tokens": len(ids),
                    "method": method,
                    "first": order[0],
                    "tokens": len(own.tokens),
                    "steps": len(own.steps),
                    "identical": own.tokens == dyn.tokens,
                    "decode_s": {k: round(v, 4) for k, v in step.items()},
                    "forward_s": {k: round(v, 4) for k, v in forward.items()},
                    "prefill_s": {k: round(g.prefill_s, 4) for k, g in got.items()},
                    "decode_ratio": round(step["own"] / step["dynamic"], 4),
                    "forward_ratio": round(forward["own"] / forward["dynamic"], 4),
                    "prefill_ratio": round(own.prefill_s / dyn.prefill_s, 4),
                }
                rows.append(row)
                print(
                    f"round {r + 1} {name:7} ({len(ids):4} tokens) {method:5}: decoding own {step['own']:.2f} s, "
                    f"dynamic {step['dynamic']:.2f} s, ratio {row['decode_ratio']:.3f} "
                    f"(forward {row['forward_ratio']:.3f}), identical {row['identical']}",
                    flush=True,
                )

    def summary(selected: list[dict]) -> dict[str, float]:
        return {
            f"{what}_ratio_median": round(statistics.median(r[f"{what}_ratio"] for r in selected), 4)
            for what in ("decode", "forward", "prefill")
        } | {"n": len(selected)}

    def context(row: dict) -> str:
        return "long" if row["prompt"] == "long" else "short"

    groups = {
        f"{c}/{method}": [r for r in rows if r["method"] == method and context(r) == c]
        for c in ("short", "long")
        for method in METHODS
    }
    result = {
        "what": (
            "ratios own (hdlib.engine.cache.TreeCache) / dynamic (transformers DynamicCache); below 1: own is faster"
        ),
        "machine": describe_machine(),
        "model": "smollm2-135m (hdlib.load_model())",
        "command": "flock /tmp/heavy.lock .venv/bin/python -m benchmarks.cache_speed "
        + f"--repeats {args.repeats} --rounds {args.rounds} --short {args.short} "
        + f"--max-new-tokens {args.max_new_tokens}",
        "date": time.strftime("%Y-%m-%d"),
        "all_identical": all(r["identical"] for r in rows),
        "passes": passes,
        "summary": {"all": summary(rows)} | {k: summary(v) for k, v in groups.items()},
        "runs": rows,
        "wall_s": round(time.perf_counter() - began, 1),
    }
    write_results(args.out, "cache_speed", lm=lm, **result)
    print(json.dumps({k: result[k] for k in ("machine", "all_identical", "passes", "summary", "wall_s")}, indent=1))


def tables(data: Mapping[str, Any]) -> list[str]:
    passes = [
        [
            count(p["context"]),
            str(p["k"]),
            str(p["kept"]),
            f2(p["wall_ms"]["own"]),
            f2(p["wall_ms"]["dynamic"]),
            f3(p["wall_ratio"]),
            f3(p["cpu_ratio"]),
        ]
        for p in data["passes"]
    ]
    summary = [
        [case, f3(s["decode_ratio_median"]), f3(s["forward_ratio_median"]), f3(s["prefill_ratio_median"]), str(s["n"])]
        for case, s in data["summary"].items()
    ]
    header = ["cached tokens", "tree tokens", "kept", "own ms", "dynamic ms", "own / dynamic", "CPU time own / dynamic"]
    return [
        (
            f"Model: {data['model']}; {data['what']}. Every answer identical between the two caches: "
            f"{'yes' if data['all_identical'] else 'no'}."
        ),
        "One verification pass and its compaction:",
        table(header, passes),
        "Whole generations, medians of own / dynamic:",
        table(["case", "decoding", "forward passes", "prefill", "runs"], summary),
    ]


if __name__ == "__main__":
    main()
