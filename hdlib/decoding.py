"""The decoding loop: propose, verify, accept, update, one typed `Step` per iteration.

`decode` is a generator, so a notebook can replay a generation step by step and a benchmark can
stop it early; `generate` drains it into a `Generation`. Plain decoding is the same loop with no
tiers: every tree is just the root, every step emits one token.

Invariant between steps: `tokens` is the whole text so far, the KV cache holds all of it but the
newest token, and that newest token is the root of the next draft tree.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING

import torch
from transformers import PreTrainedModel

from hdlib.budget import BudgetPolicy, FixedBudget, load_or_measure
from hdlib.drafter import Drafter
from hdlib.errors import HDError
from hdlib.sampling import Sampler, Warp
from hdlib.tiers import DEFAULT_TIERS, DraftTier, Tier, make_tier, parse_tiers
from hdlib.tiers.base import ModelGuesses
from hdlib.paths import cache_dir
from hdlib.trace import Generation, Step, StepTimes, StopReason
from hdlib.tree import DraftTree, tree_buffers
from hdlib.value import AcceptancePrior, ValueTree
from hdlib.verifier import (
    AttentionLayout,
    compact_cache,
    greedy_accept,
    new_cache,
    prefill,
    tree_logits,
    vocabulary_size,
)

if TYPE_CHECKING:
    from hdlib.models import LoadedModel


@dataclass(frozen=True)
class DecodeSettings:
    max_new_tokens: int = 256  # the answer stops here at the latest
    temperature: float = 0.0  # 0 is greedy: the argmax, no randomness
    top_p: float = 1.0  # sampling only: nucleus mass kept (1 keeps all)
    top_k: int = 0  # sampling only: most likely tokens kept (0 keeps all)
    seed: int | None = None  # sampling only: None draws one (recorded in the Generation)

    def __post_init__(self) -> None:
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise HDError(f"max_new_tokens must be a positive integer, got {self.max_new_tokens!r}")
        Warp(self.temperature, self.top_p, self.top_k)  # validates them
        if self.seed is not None and (not isinstance(self.seed, int) or self.seed < 0):
            raise HDError(f"seed must be a non-negative integer or None, got {self.seed!r}")

    @property
    def warp(self) -> Warp:
        return Warp(self.temperature, self.top_p, self.top_k)


def context_length(model: PreTrainedModel) -> int:
    return int(model.config.max_position_embeddings)


def check_prompt(prompt_ids: Sequence[int], limit: int) -> None:
    if len(prompt_ids) == 0:
        raise HDError("the prompt is empty")
    if len(prompt_ids) >= limit:
        raise HDError(
            f"the prompt has {len(prompt_ids)} tokens but the model's context holds {limit}: shorten the prompt"
        )


def top_guesses(logits: torch.Tensor, k: int) -> tuple[list[list[int]], list[list[float]]]:
    """The `k` most likely tokens after each row of (N, V) `logits`, with their probabilities."""
    best = logits.topk(k, dim=-1)
    probs = (best.values - logits.logsumexp(dim=-1, keepdim=True)).exp()
    return best.indices.tolist(), probs.tolist()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _Verifier:
    """The model side of a step: forward over the tree, acceptance (greedy or sampled), cache compaction."""

    def __init__(self, model: PreTrainedModel, sampler: Sampler | None = None) -> None:
        self.model = model
        self.vocab_size = vocabulary_size(model)
        self.device = model.device
        self.layout = AttentionLayout.of(model)
        self.cache = new_cache()
        self.sampler = sampler

    @torch.inference_mode()
    def prefill(self, tokens: list[int]) -> None:
        prefill(self.model, tokens, self.cache)

    @torch.inference_mode()
    def step(
        self, tree: DraftTree, past_len: int, successors: int = 0
    ) -> tuple[list[int], int, list[float], tuple[list[list[int]], list[list[float]]] | None]:
        """Accepted node path, the model's own last token, the seconds of [tree, forward, accept,
        compact], and (when `successors` > 0) the model's that many most likely tokens after each
        node with their probabilities."""
        marks = [time.perf_counter()]
        buffers = tree_buffers(tree, past_len, self.device)
        marks.append(time.perf_counter())
        logits = tree_logits(self.model, self.layout, buffers, self.cache, past_len)
        if self.sampler is None:
            predictions = logits.argmax(dim=-1)
            _sync(self.device)
            marks.append(time.perf_counter())
            path, bonus = greedy_accept(buffers.input_ids, buffers.retrieve_indices, predictions)
        else:
            _sync(self.device)
            marks.append(time.perf_counter())
            path, bonus = self.sampler.accept(tree, logits)
        top = top_guesses(logits, successors) if successors else None  # engine time: counted with acceptance
        marks.append(time.perf_counter())
        compact_cache(self.cache, past_len, path)
        marks.append(time.perf_counter())
        return path, bonus, [b - a for a, b in pairwise(marks)], top


def decode(
    model: PreTrainedModel,
    prompt_ids: Sequence[int],
    drafter: Drafter | None = None,
    settings: DecodeSettings | None = None,
    eos_token_ids: Iterable[int] = (),
    budget: BudgetPolicy | None = None,
    sampler: Sampler | None = None,
) -> Iterator[Step]:
    """Yield one `Step` per forward pass until end-of-sequence, max_new_tokens or the context limit.

    The prompt is prefilled before the first step. With no drafter (or a budget of 0) this is plain
    decoding: greedy at temperature 0, else sampling. `sampler` (made from `settings` when None)
    draws the sampled tokens; pass one to know its seed.
    """
    settings = settings or DecodeSettings()
    if sampler is None and not settings.warp.greedy:
        sampler = Sampler(settings.warp, settings.seed)
    drafter = drafter or Drafter([])
    budget = budget or FixedBudget(0 if not drafter.tiers else 8)
    eos = frozenset(eos_token_ids)
    limit = context_length(model)
    tokens = list(prompt_ids)
    check_prompt(tokens, limit)

    verifier = _Verifier(model, sampler)
    verifier.prefill(tokens[:-1])
    drafter.begin(tokens)
    successors = max(drafter.successors_wanted, budget.successors_wanted)
    generated = 0
    index = 0
    while generated < settings.max_new_tokens and len(tokens) < limit:
        # A draft deeper than this could not be used: the step also emits the bonus token, and the
        # answer may not pass max_new_tokens nor the text the model's context.
        max_depth = min(settings.max_new_tokens - generated, limit - len(tokens)) - 1
        k = budget.budget(len(tokens))
        start = time.perf_counter()
        tree = (
            drafter.draft(tokens, k, max_depth, budget.per_tier, verifier.vocab_size)
            if k > 0
            else DraftTree(root=tokens[-1])
        )
        tree, estimates = budget.select(tree, tokens)
        draft_s = time.perf_counter() - start

        past_len = len(tokens) - 1
        path, bonus, (tree_s, forward_s, accept_s, compact_s), top = verifier.step(tree, past_len, successors)

        start = time.perf_counter()
        if top is not None:
            previous = [tokens[-2] if len(tokens) > 1 else -1, *(tree.tokens[p] for p in tree.parents[1:])]
            guesses = ModelGuesses(tree.tokens, previous, *top)
            drafter.observe_model(guesses)
            budget.observe_model(guesses)
        emitted = [tree.tokens[n] for n in path[1:]] + [bonus]
        tiers = [tree.tiers[n] for n in path[1:]] + [Tier.TARGET]
        for i, token in enumerate(emitted):
            if token in eos:
                del emitted[i + 1 :], tiers[i + 1 :]
                break
        tokens.extend(emitted)
        generated += len(emitted)
        drafter.update(emitted)
        update_s = time.perf_counter() - start + compact_s

        step = Step(
            index=index,
            context_len=past_len + 1,
            budget=k,
            tree=tree,
            accepted_nodes=tuple(path),
            tokens=tuple(emitted),
            tiers=tuple(tiers),
            times=StepTimes(draft_s, tree_s, forward_s, accept_s, update_s),
            estimates=estimates,
        )
        budget.observe(step)
        index += 1
        yield step
        if emitted[-1] in eos:
            break
    budget.finish()


def stop_reason(tokens: Sequence[int], eos: frozenset[int], max_new_tokens: int) -> StopReason:
    if tokens and tokens[-1] in eos:
        return StopReason.EOS
    return StopReason.MAX_NEW_TOKENS if len(tokens) >= max_new_tokens else StopReason.CONTEXT_LENGTH


def run(
    model: PreTrainedModel,
    prompt_ids: Sequence[int],
    drafter: Drafter | None = None,
    settings: DecodeSettings | None = None,
    eos_token_ids: Iterable[int] = (),
    budget: BudgetPolicy | None = None,
) -> Generation:
    """Drain `decode` into a `Generation` (tokens, steps, timings, the seed it sampled with); no text."""
    settings = settings or DecodeSettings()
    sampler = None if settings.warp.greedy else Sampler(settings.warp, settings.seed)
    eos = frozenset(eos_token_ids)
    start = time.perf_counter()
    steps = list(decode(model, prompt_ids, drafter, settings, eos, budget, sampler))
    wall = time.perf_counter() - start
    tokens = [t for s in steps for t in s.tokens]
    step_s = sum(s.times.total for s in steps)
    return Generation(
        prompt_ids=list(prompt_ids),
        tokens=tokens,
        steps=steps,
        stop_reason=stop_reason(tokens, eos, settings.max_new_tokens),
        wall_s=wall,
        prefill_s=max(wall - step_s, 0.0),
        tier_order=drafter.order if drafter else [],
        temperature=settings.temperature,
        seed=sampler.seed if sampler else None,
    )


def generate(
    lm: LoadedModel,
    prompt: str | Sequence[int],
    tiers: str | Sequence[str | Tier | DraftTier] = DEFAULT_TIERS,
    max_new_tokens: int = 256,
    budget: int | None = None,
    chat: bool = True,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
    seed: int | None = None,
) -> Generation:
    """Answer `prompt` with HD (or plain decoding when `tiers` is empty) and return the record.

    `prompt` is text (wrapped in the model's chat template when `chat`) or token ids. `budget` is the
    most draft tokens per step; None chooses it per step from the measured forward time.
    `temperature` 0 is greedy decoding; above 0 HD samples from exactly the distribution plain
    sampling would (with `top_p` and `top_k` applied alike); `seed` makes a sampled answer
    reproducible on the same machine and device (None draws one; it is kept in the result).
    """
    settings = DecodeSettings(
        max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, top_k=top_k, seed=seed
    )
    if isinstance(prompt, str):
        if not prompt.strip():
            raise HDError("the prompt is empty")
        prompt_ids = lm.encode_prompt(prompt, chat=chat)
    else:
        prompt_ids = list(prompt)
    check_prompt(prompt_ids, lm.context_length)
    drafter = Drafter([make_tier(t, lm) for t in parse_tiers(tiers)])
    if not drafter.tiers:
        policy: BudgetPolicy = FixedBudget(0)
    elif budget is None:
        profile = load_or_measure(lm.model)
        policy = ValueTree(profile, AcceptancePrior.for_model(cache_dir() / "acceptance", profile.key))
    else:
        policy = FixedBudget(budget)
    result = run(lm.model, prompt_ids, drafter, settings, lm.eos_token_ids, policy)
    result.text = lm.decode(result.tokens)
    result.pieces = lm.token_pieces(result.tokens)
    return result
