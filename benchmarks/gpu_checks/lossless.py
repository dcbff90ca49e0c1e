"""Lossless on the device: tiny Llama and Gemma 3 in float32 and bfloat16, random prompts, tier sets
with an oracle tier, fixed, adaptive and value-tree budgets; greedy, and sampled against plain
sampling with the same seed. Every answer that parts from plain decoding's is weighed at its first
differing token (`hdlib.bench.divergence`)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from benchmarks.gpu_checks.report import Plan
from hdlib.bench.divergence import NEAR_TIE, explain, locate
from hdlib.engine.budget import FixedBudget
from hdlib.engine.drafter import Drafter
from hdlib.engine.forward_time import flat_profile
from hdlib.engine.loop import DecodeSettings, run
from hdlib.engine.value import ValueBudget
from hdlib.models.loading import dtype_name
from hdlib.tiers import ContextTier, DraftTier, RecycledTier, Tier
from tests.support.oracle import OracleTier
from tests.support.tiny import VOCAB, tiny_gemma3, tiny_llama

TIER_SETS = ("C", "O", "CO", "OC", "R", "COR")


def drafter(letters: str, truth: Sequence[int], seed: int) -> Drafter:
    make: dict[str, Callable[[], DraftTier]] = {
        "C": ContextTier,
        "O": lambda: OracleTier(truth, VOCAB, seed, tier=Tier.STATISTICS),
        "R": RecycledTier,  # the model's own guesses recycled: the tier that learns from passes
    }
    return Drafter([make[c]() for c in letters])


def budget_policy(i: int, rng: random.Random) -> tuple[str, Any]:
    k = rng.randint(1, 24)
    return [
        (f"fixed {k}", FixedBudget(k)),
        ("value tree", ValueBudget(flat_profile())),
        (f"value tree {k}", ValueBudget(flat_profile(), candidates=k)),
    ][i % 3]


def random_prompt(rng: random.Random) -> list[int]:
    unit = [rng.randrange(3, VOCAB) for _ in range(rng.randint(1, 10))]
    return unit * rng.randint(1, 4) + [rng.randrange(3, VOCAB) for _ in range(rng.randint(0, 4))]


def lossless_one(model: torch.nn.Module, plan: Plan, rng: random.Random) -> dict[str, Any]:
    greedy_same = sampled_same = 0
    parted: list[dict[str, Any]] = []
    mats: list[float] = []
    for i in range(plan.cases + plan.sampled):
        greedy = i < plan.cases
        prompt, n = random_prompt(rng), rng.randint(4, 40)
        settings = (
            DecodeSettings(max_new_tokens=n)
            if greedy
            else DecodeSettings(max_new_tokens=n, temperature=0.8, top_p=0.9, top_k=20, seed=i)
        )
        want = run(model, prompt, None, settings).tokens
        letters = TIER_SETS[i % len(TIER_SETS)]
        name, policy = budget_policy(i, rng)
        got = run(model, prompt, drafter(letters, prompt + want, i), settings, (), policy)
        mats.append(got.mat)
        if got.tokens == want:
            greedy_same += greedy
            sampled_same += not greedy
            continue
        # Greedy: weighed against plain decoding's logits there; sampled: located only.
        d = explain(model, prompt, want, got.tokens) if greedy else locate(want, got.tokens, model.dtype)
        parted.append({"case": i, "sampled": not greedy, "tiers": letters, "budget": name, **d.to_json()})
    ties = sum(p["kind"] == NEAR_TIE for p in parted)
    return {
        "greedy_identical": f"{greedy_same}/{plan.cases}",
        "sampled_identical": f"{sampled_same}/{plan.sampled}",
        "parted": parted,
        "near_ties": ties,
        "divergences": len(parted) - ties,
        "mean_mat": round(float(np.mean(mats)), 3),
    }


def lossless(out: dict[str, Any], plan: Plan) -> None:
    rng = random.Random(0)
    for name, make in (("llama", tiny_llama), ("gemma3", tiny_gemma3)):
        for dtype in (torch.float32, torch.bfloat16):
            model = make().to(plan.device, dtype)
            key = f"{name}/{dtype_name(dtype)}"
            out[key] = lossless_one(model, plan, rng)
            print(f"  {key}: {({k: v for k, v in out[key].items() if k != 'parted'})}", flush=True)
    out["float32_ok"] = all(v["divergences"] == 0 for k, v in out.items() if k.endswith("/float32"))
