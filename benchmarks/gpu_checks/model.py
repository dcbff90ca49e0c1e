"""The 7B-shaped model with random weights, built on the device: its forward passes timed per k and
context, per KV cache kind (and transformers' own one-token step), and its peak memory."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from benchmarks.gpu_checks.instruments import cache_kinds, gb, make_verifier, sync
from benchmarks.gpu_checks.report import Plan
from hdlib.engine.forward_time import time_pass
from hdlib.engine.tree import DraftTree
from hdlib.engine.verifier import Verifier, cache_keyword
from hdlib.tiers import Tier

MODEL_VOCAB = 32000  # Llama-2's


def build(out: dict[str, Any], plan: Plan) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=MODEL_VOCAB,
        hidden_size=plan.hidden,
        intermediate_size=plan.intermediate,
        num_hidden_layers=plan.layers,
        num_attention_heads=plan.heads,
        num_key_value_heads=plan.heads,
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        bos_token_id=1,
        eos_token_id=2,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    start = time.perf_counter()
    with torch.device(plan.device):
        model = LlamaForCausalLM(config)  # initialised on the device: seconds, not minutes
    model = model.to(torch.bfloat16).eval().requires_grad_(False)
    model.generation_config.eos_token_id = None  # every method writes as many tokens as asked
    sync()
    out.update(
        layers=plan.layers,
        hidden=plan.hidden,
        dtype="bfloat16",
        parameters_b=round(sum(p.numel() for p in model.parameters()) / 1e9, 3),
        build_s=round(time.perf_counter() - start, 1),
    )
    return model


def time_passes(verifier: Verifier, context: int, ks: Sequence[int], repeats: int) -> dict[int, float]:
    """Median ms of one pass over a k-token chain after `context` cached tokens, per k."""
    gen = torch.Generator().manual_seed(context)

    def one(k: int) -> float:
        return time_pass(verifier, torch.randint(3, MODEL_VOCAB, (k,), generator=gen).tolist(), context)

    one(ks[0]), one(ks[-1])  # warm-up: the first calls allocate
    return {k: round(1e3 * statistics.median(one(k) for _ in range(repeats)), 3) for k in ks}


def forward(out: dict[str, Any], plan: Plan, model: LlamaForCausalLM) -> None:
    for kind in cache_kinds():
        for context in plan.contexts:
            v = make_verifier(model, kind)
            v.prefill(torch.randint(3, MODEL_VOCAB, (context,)).tolist())
            ms = time_passes(v, context, plan.ks, plan.repeats)
            key = f"{kind or 'default'}/ctx{context}"
            k64 = 64 if 64 in ms else max(ms)
            out[key] = {"ms": ms, f"forward{k64}_over_forward1": round(ms[k64] / ms[1], 3)}
            print(f"  {key}: {ms}", flush=True)
            del v
    # transformers' own one-token step (no mask), the reference for hdlib's one-token pass; the
    # context grows by one token a step (`crop` changed its meaning between transformers releases)
    keyword = cache_keyword(model)
    for context in plan.contexts:
        cache = DynamicCache()
        ids = torch.randint(3, MODEL_VOCAB, (1, context), device=model.device)
        model(input_ids=ids, **{keyword: cache}, use_cache=True, logits_to_keep=1)
        times = []
        for _ in range(plan.repeats + 2):
            x = torch.randint(3, MODEL_VOCAB, (1, 1), device=model.device)
            sync()
            start = time.perf_counter()
            model(input_ids=x, **{keyword: cache}, use_cache=True)
            sync()
            times.append(time.perf_counter() - start)
        out[f"transformers_forward1_ms/ctx{context}"] = round(1e3 * statistics.median(times[2:]), 3)


def memory(out: dict[str, Any], plan: Plan, model: LlamaForCausalLM) -> None:
    cuda = torch.cuda.is_available()
    context = plan.memory_context
    tree = DraftTree(root=5)
    for branch in range(8):  # 8 branches of 8: 64 draft nodes
        tree.add([100 + branch, *torch.randint(3, MODEL_VOCAB, (7,)).tolist()], Tier.CONTEXT, 64, 64)
    weights = torch.cuda.memory_allocated() if cuda else 0
    out["tree_nodes"] = tree.n_drafted
    out["context"] = context
    for kind in cache_kinds():
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        v = make_verifier(model, kind)
        v.prefill(torch.randint(3, MODEL_VOCAB, (context,)).tolist())
        row: dict[str, Any] = {}
        if cuda:
            row["after_prefill_gb"] = gb(torch.cuda.memory_allocated())
            row["peak_prefill_gb"] = gb(torch.cuda.max_memory_allocated())
            torch.cuda.reset_peak_memory_stats()
        v.logits(tree, context)
        v.compact(context, [0, 1, 2])  # the first branch's two nodes accepted
        if cuda:
            sync()
            row["peak_tree_pass_gb"] = gb(torch.cuda.max_memory_allocated())
            row["after_step_gb"] = gb(torch.cuda.memory_allocated())
            row["reserved_gb"] = gb(torch.cuda.memory_reserved())
        out[kind or "default"] = row or "unavailable: no CUDA (peak memory is read from torch.cuda)"
        del v
    out["weights_gb"] = gb(weights) if cuda else None
