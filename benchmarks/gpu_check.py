"""The device check: hdlib on one CUDA GPU, in one command of a few minutes, written to one JSON file.

    bash scripts/gpu_check.sh                          # on a CUDA machine: $OUT/gpu_check.json (docs/gpu.md)
    python -m benchmarks.gpu_check --out PATH          # the same from the repository root (a CUDA GPU needed)
    python -m benchmarks.gpu_check --smoke --out PATH  # the same code on the CPU, a 2-layer model, about a minute

The shell script (benchmarks/gpu_check.sh, which scripts/gpu_check.sh runs) adds the GPU's name from
nvidia-smi, a time limit and the log. Nothing is downloaded: the tiny models of tests/tiny.py and a
Llama-2-7B-shaped model with random weights built on the device. Random weights make MAT
meaningless, so an oracle tier that knows plain decoding's answer (tests/oracle.py; the test helpers
import as `tests.tiny` and `tests.oracle` from the root) stands in for real drafts where the
engine's cost is measured.

The JSON holds one object per section, each with its seconds; a section that raised holds "error"
(the traceback is on stderr), a piece that this device or this hdlib lacks is "unavailable":

  meta        device, torch, CUDA and transformers versions, the checkout's commit, the plan
  lossless    tiny Llama and Gemma 3 on the device in float32 and bfloat16: random prompts, tier sets
              with an oracle tier, fixed, adaptive and value-tree budgets, greedy; and sampled HD
              against plain sampling with the same seed (the default Gumbel rule). Every answer that
              parts from plain decoding's is listed with its first differing position and plain
              decoding's two best logits there (`hdlib.bench.divergence`: near-tie or divergence);
              `float32_ok`: no float32 answer parts beyond the near-tie bound
  model       the 7B-shaped model: its shape, dtype, parameters, build seconds
  forward     ms of one pass over k = 1..128 tokens (a chain under hdlib's tree mask) after 256 and
              ~4k cached tokens, per KV cache kind hdlib offers; transformers' own one-token step
  step        per step: the engine's phases in ms (`StepTimes`' fields), its overhead against the
              forward pass, host reads (calls that read a tensor's value, counted by a
              TorchFunctionMode) and, on CUDA, synchronisations (torch's sync debug mode), for ar
              and an oracle tier at budgets 16 and 64
  memory      peak GPU memory: the weights, a ~4k-token prefill, then one pass over a 64-node tree
  throughput  tokens/s of ar, hd:C (the value tree and a fixed 16) and transformers' generate,
              greedy and with prompt lookup; whether each answer is ar's

Where hdlib's API moves, mend the few calls in `make_verifier`, `cache_kinds` and the sections.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.overrides import TorchFunctionMode
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

import hdlib.engine.verifier
from benchmarks.markdown import code, f1, f2, table, x
from hdlib.bench.divergence import NEAR_TIE, explain, locate
from hdlib.engine.budget import FixedBudget
from hdlib.engine.drafter import Drafter
from hdlib.engine.forward_time import ForwardProfile, flat_profile, time_pass
from hdlib.engine.loop import Decoder, DecodeSettings, run
from hdlib.engine.trace import Step
from hdlib.engine.tree import DraftTree
from hdlib.engine.value import ValueBudget
from hdlib.engine.verifier import Verifier, cache_keyword
from hdlib.tiers import ContextTier, DraftTier, RecycledTier, Tier
from tests.oracle import OracleTier
from tests.tiny import VOCAB, tiny_gemma3, tiny_llama

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Plan:
    """What one run measures, and how much of it."""

    device: str
    cases: int  # lossless: greedy cases per tiny model and dtype
    sampled: int  # lossless: sampled cases per tiny model and dtype
    layers: int  # the 7B-shaped model (Llama-2-7B: 32 layers, 4096 wide, 11008 in the MLP, 32 heads)
    hidden: int
    intermediate: int
    heads: int
    contexts: tuple[int, ...]  # cached tokens before the timed passes; the last + 128 fills 4096
    ks: tuple[int, ...]  # tokens per timed pass
    repeats: int  # timed passes per k (the median is kept)
    memory_context: int  # cached tokens before the 64-node tree pass (root and tree then fill 4096)
    prompt_len: int  # the step and throughput sections' prompt
    new_tokens: int
    deadline_s: float  # no section starts after this (the wrapper's limit is 520 s)


KS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 80, 96, 112, 128)
GPU = Plan("cuda", 40, 12, 32, 4096, 11008, 32, (256, 3968), KS, 5, 4031, 300, 96, 420.0)
SMOKE = Plan("cpu", 3, 2, 2, 128, 256, 4, (32, 96), (1, 2, 4, 8, 16), 2, 192, 60, 16, 300.0)
MODEL_VOCAB = 32000  # Llama-2's
READS = frozenset({"item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__"})


class Unavailable(Exception):
    """A piece this device or this hdlib does not have: recorded as "unavailable", not an error."""


# The pieces of hdlib that are moving: one place each ------------------------------------------


def cache_kinds() -> tuple[str | None, ...]:
    """The KV caches hdlib offers ("own", "dynamic"), or (None,): the one it has."""
    return tuple(getattr(hdlib.engine.verifier, "CACHE_KINDS", None) or (None,))


def make_verifier(model: torch.nn.Module, kind: str | None) -> Verifier:
    return Verifier(model) if kind is None else Verifier(model, cache=kind)


def per_step_counters(step: Step) -> dict[str, float]:
    """Any count hdlib itself keeps per step (host reads, synchronisations), found by its name."""
    found = {}
    for obj in (step, step.times):
        for f in fields(obj):
            value = getattr(obj, f.name)
            if any(w in f.name for w in ("sync", "read")) and isinstance(value, (int, float)):
                found[f.name] = value
    return found


# Small tools ----------------------------------------------------------------------------------


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def gb(n_bytes: float) -> float:
    return round(n_bytes / 2**30, 3)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class HostReads(TorchFunctionMode):
    """Counts the calls that read a tensor's values back to the host (what waits for a GPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        if getattr(func, "__name__", "") in READS:
            self.calls += 1
        return func(*args, **(kwargs or {}))


class CudaSyncs:
    """Counts the synchronisations CUDA reports in torch's sync debug mode ("warn": one warning each)."""

    def __enter__(self) -> CudaSyncs:
        self.count: int | None = None
        self._caught = warnings.catch_warnings(record=True)
        self._seen = self._caught.__enter__()
        warnings.simplefilter("always")
        if torch.cuda.is_available():
            self._previous = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode("warn")
        return self

    def __exit__(self, *exc: object) -> None:
        if torch.cuda.is_available():
            torch.cuda.set_sync_debug_mode(self._previous)
            self.count = sum("synchroniz" in str(w.message) for w in self._seen)
        self._caught.__exit__(*exc)


class FullOracle(DraftTier):
    """Fills the budget: plain decoding's continuation (corrupted now and then), then decoys, so a step
    at budget 64 verifies a tree of about 64 nodes whatever the weights."""

    tier = Tier.STATISTICS

    def __init__(self, truth: Sequence[int], vocab: int, seed: int = 0) -> None:
        self.truth, self.vocab, self.rng = list(truth), vocab, random.Random(seed)

    def lookup(self, context: Sequence[int], budget: int) -> list[tuple[int, ...]]:
        true = self.truth[len(context) : len(context) + min(budget, 12)]
        if true and self.rng.random() < 0.3:
            true[self.rng.randrange(len(true))] = self.rng.randrange(self.vocab)
        drafts, left = ([tuple(true)] if true else []), budget - len(true)
        while left > 0:
            decoy = tuple(self.rng.randrange(self.vocab) for _ in range(min(left, 8)))
            drafts.append(decoy)
            left -= len(decoy)
        return drafts


# The report -----------------------------------------------------------------------------------


class Report:
    """The JSON file, written again after every section, so a run cut short keeps what it measured."""

    def __init__(self, path: Path, plan: Plan) -> None:
        self.path, self.plan, self.start = path, plan, time.perf_counter()
        self.data: dict[str, Any] = {}

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        tmp.replace(self.path)

    def section(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Run `fn(out, *args)`, `out` being this section's dict; keep what it filled in if it fails."""
        out: dict[str, Any] = {}
        self.data[name] = out
        elapsed = time.perf_counter() - self.start
        if elapsed > self.plan.deadline_s:
            out["unavailable"] = f"skipped: {elapsed:.0f} s gone, past the plan's {self.plan.deadline_s:.0f} s"
            self.save()
            return None
        print(f"[{elapsed:6.1f} s] {name}", flush=True)
        start, result = time.perf_counter(), None
        try:
            result = fn(out, *args)
        except Unavailable as e:
            out["unavailable"] = str(e)
        except Exception as e:  # noqa: BLE001  (any failure is recorded; the next section still runs)
            out["error"] = f"{type(e).__name__}: {e}"
            traceback.print_exc()
        out["seconds"] = round(time.perf_counter() - start, 1)
        self.save()
        return result


def meta(out: dict[str, Any], plan: Plan, smoke: bool) -> None:
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=10)
            return done.stdout.strip() if done.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            return None

    import transformers

    cuda = torch.cuda.is_available()
    out.update(
        smoke=smoke,
        device=torch.cuda.get_device_name(0) if cuda else "cpu",
        capability=".".join(map(str, torch.cuda.get_device_capability(0))) if cuda else None,
        gpu_memory_gb=gb(torch.cuda.get_device_properties(0).total_memory) if cuda else None,
        bf16_supported=torch.cuda.is_bf16_supported() if cuda else None,
        torch=torch.__version__,
        cuda=torch.version.cuda,
        transformers=transformers.__version__,
        python=sys.version.split()[0],
        commit=git("rev-parse", "HEAD"),
        changed_files=len((git("status", "--porcelain") or "").splitlines()) if git("rev-parse", "HEAD") else None,
        cache_kinds=[k or "default" for k in cache_kinds()],
        threads=torch.get_num_threads(),
        plan=asdict(plan),
    )


# Lossless on the device -----------------------------------------------------------------------

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


# The 7B-shaped model ---------------------------------------------------------------------------


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


def reads_per_step(decoder: Decoder) -> dict[str, Any]:
    """Host reads (and CUDA synchronisations) per step, the first step (the prefill's) left out."""
    reads, syncs, steps = [], [], iter(decoder)
    while True:
        with HostReads() as counter, CudaSyncs() as cuda:
            try:
                next(steps)
            except StopIteration:
                break
        reads.append(counter.calls)
        syncs.append(cuda.count)
    reads, syncs = reads[1:] or reads, syncs[1:] or syncs
    cuda_counted = syncs and syncs[0] is not None
    return {
        "host_reads_per_step": {"mean": round(statistics.mean(reads), 2), "max": max(reads)},
        "cuda_syncs_per_step": (
            {"mean": round(statistics.mean(syncs), 2), "max": max(syncs)}
            if cuda_counted
            else "unavailable: no CUDA (torch's sync debug mode)"
        ),
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="the JSON file (default: $OUT/gpu_check.json, else ./gpu_check.json)")
    parser.add_argument(
        "--smoke", action="store_true", help="the CPU, a 2-layer model, short lengths (also HDLIB_GPU_SMOKE=1)"
    )
    args = parser.parse_args(argv)
    smoke = args.smoke or os.environ.get("HDLIB_GPU_SMOKE") == "1"
    plan = SMOKE if smoke else GPU
    if not smoke and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; --smoke runs the same code on the CPU", file=sys.stderr)
        return 2
    path = args.out or Path(os.environ.get("OUT") or ".") / "gpu_check.json"
    report = Report(path, plan)
    report.section("meta", meta, plan, smoke)
    report.section("lossless", lossless, plan)
    with torch.no_grad():
        model = report.section("model", build, plan)
    if model is None:
        for name in ("forward", "step", "memory", "throughput"):
            report.data[name] = {"unavailable": "the 7B-shaped model was not built (see model)"}
    else:
        with torch.inference_mode():  # the KV caches hdlib fills are inference tensors: touched only in this mode
            report.section("forward", forward, plan, model)
            report.section("step", step, plan, model)
            report.section("memory", memory, plan, model)
            report.section("throughput", throughput, plan, model, report.data["forward"])
    report.data["total_s"] = round(time.perf_counter() - report.start, 1)
    report.save()
    failed = [name for name, out in report.data.items() if isinstance(out, dict) and "error" in out]
    fp32_ok = report.data["lossless"].get("float32_ok")
    print(f"wrote {path} in {report.data['total_s']} s; float32 lossless: {fp32_ok}; failed: {failed or 'none'}")
    return 1 if fp32_ok is False else 3 if failed else 0


LOSSLESS_COLUMNS = ("greedy_identical", "sampled_identical", "near_ties", "divergences")


def tables(data: Mapping[str, Any]) -> list[str]:
    """The check's JSON (docs/gpu.md): losslessness, tokens/s per method."""
    out = []
    lossless = data.get("lossless") or {}
    rows = [
        [key, *("" if v.get(k) is None else str(v[k]) for k in LOSSLESS_COLUMNS)]
        for key, v in sorted(lossless.items())
        if "/" in key and isinstance(v, Mapping)
    ]
    if rows:
        out += [
            f"Lossless on the device (float32 within the near-tie bound: {lossless.get('float32_ok')}):",
            table(["model/dtype", "greedy identical", "sampled identical", "near-ties", "divergences"], rows),
        ]
    throughput = data.get("throughput") or {}
    speedups = throughput.get("speedup_over_ar") or {}
    rows = [
        [
            code(name),
            f1(r["tokens_per_s"]),
            f2(r["mat"]) if "mat" in r else "",
            x(speedups[name]) if name in speedups else "",
            "" if name == "ar" else ("yes" if r.get("identical_to_ar") else "no"),
        ]
        for name, r in throughput.items()
        if isinstance(r, Mapping) and "tokens_per_s" in r
    ]
    if rows:
        out += [
            "Tokens per second on the 7B-shaped model with random weights:",
            table(["method", "tokens/s", "MAT", "speedup", "identical to `ar`"], rows),
        ]
    return out or ["(no section of the check finished)"]


def device_text(data: Mapping[str, Any]) -> str:
    meta = data.get("meta") or {}
    keys = ("device", "capability", "gpu_memory_gb", "torch", "cuda", "transformers", "threads", "commit")
    return "; ".join(f"{k} {meta[k]}" for k in keys if meta.get(k) is not None) or "not recorded in the file"


if __name__ == "__main__":
    sys.exit(main())
