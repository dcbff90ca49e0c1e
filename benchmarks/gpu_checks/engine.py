"""hdlib's engine on the 7B-shaped model: the phases of a step, its overhead against the forward pass
and its host reads, for `ar` and an oracle tier that fills the budget; then tokens per second of
`ar`, `hd:C` and transformers' generate, and whether each answer is `ar`'s."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any

import numpy as np
import torch
from transformers import LlamaForCausalLM

from benchmarks.gpu_checks.instruments import per_step_counters, reads_per_step, sync
from benchmarks.gpu_checks.model import MODEL_VOCAB
from benchmarks.gpu_checks.report import Plan
from hdlib.bench.divergence import explain
from hdlib.engine.budget import FixedBudget
from hdlib.engine.drafter import Drafter
from hdlib.engine.forward_time import ForwardProfile, flat_profile
from hdlib.engine.loop import Decoder, DecodeSettings, run
from hdlib.engine.trace import Step
from hdlib.engine.value import ValueBudget
from hdlib.tiers import ContextTier, DraftTier, Tier


class FullOracle(DraftTier):
    """Fills the budget: plain decoding's continuation (corrupted now and then), then decoys, so a step
    at budget 64 verifies a tree of about 64 nodes whatever the weights."""

    tier = Tier.STATISTICS

    def __init__(self, truth: Sequence[int], vocab: int, seed: int = 0) -> None:
        self.truth, self.vocab, self.rng = list(truth), vocab, random.Random(seed)

    def propose(self, context: Sequence[int], budget: int) -> list[tuple[int, ...]]:
        true = self.truth[len(context) : len(context) + min(budget, 12)]
        if true and self.rng.random() < 0.3:
            true[self.rng.randrange(len(true))] = self.rng.randrange(self.vocab)
        drafts, left = ([tuple(true)] if true else []), budget - len(true)
        while left > 0:
            decoy = tuple(self.rng.randrange(self.vocab) for _ in range(min(left, 8)))
            drafts.append(decoy)
            left -= len(decoy)
        return drafts


def step_table(steps: Sequence[Step]) -> dict[str, Any]:
    n = len(steps)
    phases = {f.name: 1e3 * sum(getattr(s.times, f.name) for s in steps) / n for f in fields(steps[0].times)}
    overhead = sum(v for k, v in phases.items() if k != "forward")
    counters = [per_step_counters(s) for s in steps]
    return {
        "steps": n,
        "tokens": sum(len(s.tokens) for s in steps),
        "mat": round(sum(len(s.tokens) for s in steps) / n, 3),
        "nodes_per_step": round(sum(len(s.tree) for s in steps) / n, 1),
        "ms_per_step": {k: round(v, 3) for k, v in phases.items()},
        "overhead_ms_per_step": round(overhead, 3),
        "overhead_share_of_forward": round(overhead / phases["forward"], 4) if phases.get("forward") else None,
        "hdlib_counters_per_step": {k: round(sum(c[k] for c in counters) / n, 2) for k in counters[0]} or None,
    }


def engine_prompt(plan: Plan) -> list[int]:
    """A 40-token unit repeated over four fifths of the prompt (something for the context tier and
    prompt lookup to find), then random tokens."""
    gen = torch.Generator().manual_seed(1)
    unit = torch.randint(3, MODEL_VOCAB, (40,), generator=gen).tolist()
    body = (unit * plan.prompt_len)[: plan.prompt_len * 4 // 5]
    return body + torch.randint(3, MODEL_VOCAB, (plan.prompt_len - len(body),), generator=gen).tolist()


def step(out: dict[str, Any], plan: Plan, model: LlamaForCausalLM) -> None:
    prompt, settings = engine_prompt(plan), DecodeSettings(max_new_tokens=plan.new_tokens)
    run(model, prompt, None, DecodeSettings(max_new_tokens=4))  # warm-up
    ar = run(model, prompt, None, settings)
    truth = prompt + ar.tokens

    def decoder(budget: int) -> Decoder:  # budget 0: ar itself
        tiers = Drafter([FullOracle(truth, MODEL_VOCAB, seed=budget)]) if budget else None
        return Decoder(model, prompt, tiers, settings, (), FixedBudget(budget))

    for budget in (0, 16, 64):
        g = decoder(budget).run() if budget else ar
        row = step_table(g.steps)
        if budget:
            row["identical_to_ar"] = g.tokens == ar.tokens
            if g.tokens != ar.tokens:
                row["parted"] = explain(model, prompt, ar.tokens, g.tokens).to_json()
        row.update(reads_per_step(decoder(budget)))  # counted in a run of its own: counting slows the step
        name = f"oracle@{budget}" if budget else "ar"
        out[name] = row
        print(f"  {name}: {row}", flush=True)


def profile_from(forward_out: dict[str, Any], context: int) -> ForwardProfile | None:
    """The value tree's forward profile (k = 1..64) from the forward section's times, interpolated."""
    for key, row in forward_out.items():
        if key.endswith(f"/ctx{context}") and isinstance(row, dict) and "ms" in row:
            ks = sorted(int(k) for k in row["ms"])
            seconds = np.interp(np.arange(1, 65), ks, [row["ms"][k] / 1e3 for k in ks])
            return ForwardProfile(tuple(float(s) for s in seconds), context, "gpu_check")
    return None


def throughput(out: dict[str, Any], plan: Plan, model: LlamaForCausalLM, forward_out: dict[str, Any]) -> None:
    prompt, new = engine_prompt(plan), plan.new_tokens
    profile = profile_from(forward_out, plan.contexts[0])
    out["value_tree_profile"] = "measured (forward section)" if profile else "flat (forward section unavailable)"
    profile = profile or flat_profile()
    ids = torch.tensor([prompt], device=model.device)

    def hdlib_method(context_tier: bool, policy: Callable[[], Any]) -> Callable[[int], tuple[list[int], int]]:
        def go(n: int) -> tuple[list[int], int]:
            drafts = Drafter([ContextTier()]) if context_tier else None
            g = run(model, prompt, drafts, DecodeSettings(max_new_tokens=n), (), policy())
            return g.tokens, len(g.steps)

        return go

    def transformers_method(lookup: int | None) -> Callable[[int], tuple[list[int], int]]:
        def go(n: int) -> tuple[list[int], int]:
            extra = {"prompt_lookup_num_tokens": lookup} if lookup else {}
            seq = model.generate(
                ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                pad_token_id=0, **extra,
            )  # fmt: skip
            return seq[0, len(prompt) :].tolist(), 0

        return go

    methods = {
        "ar": hdlib_method(False, lambda: FixedBudget(0)),
        "hd:C": hdlib_method(True, lambda: ValueBudget(profile)),
        "hd:C@16": hdlib_method(True, lambda: FixedBudget(16)),
        "hf": transformers_method(None),
        "hf-pld": transformers_method(10),
    }
    answers: dict[str, list[int]] = {}
    for name, go in methods.items():
        go(4)  # warm-up
        sync()
        start = time.perf_counter()
        tokens, steps = go(new)
        sync()
        wall = time.perf_counter() - start
        answers[name] = tokens
        row: dict[str, Any] = {"tokens": len(tokens), "tokens_per_s": round(len(tokens) / wall, 2)}
        if steps:
            row["mat"] = round(len(tokens) / steps, 3)
        if name != "ar":
            row["identical_to_ar"] = tokens == answers["ar"]
            if tokens != answers["ar"]:
                row["parted"] = explain(model, prompt, answers["ar"], tokens).to_json()
        out[name] = row
        print(f"  {name}: {row}", flush=True)
    base = out["ar"]["tokens_per_s"]
    out["speedup_over_ar"] = {n: round(r["tokens_per_s"] / base, 3) for n, r in out.items() if n in methods}
