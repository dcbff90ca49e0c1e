"""The decoding loop: propose, verify, accept, update, one typed `Step` per iteration.

A `Decoder` is one generation: iterating it yields the steps as they are decoded, so a notebook can
replay a generation step by step and a benchmark can stop it early; `Decoder.run` drains it into a
`Generation`, built once. `decode(...)` and `run(...)` are the same two with `Decoder`'s arguments;
`hdlib.generate` makes the tiers and the budget policy for a loaded model and a text prompt, and runs
one. Plain decoding is the same loop with no tiers: every tree is just the root, every step emits one
token.

Invariant between steps: `tokens` is the whole text so far, the KV cache holds all of it but the
newest token, and that newest token is the root of the next draft tree.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from transformers import PreTrainedModel

from hdlib.engine.budget import FIXED_BUDGET, BudgetPolicy, FixedBudget
from hdlib.engine.drafter import Drafter
from hdlib.engine.sampling import SAMPLING_RULES, Sampler, Warp, check_rule
from hdlib.engine.trace import Generation, PhaseClock, Step, cut_at_end, stop_reason
from hdlib.engine.tree import DraftTree
from hdlib.engine.verifier import Verifier
from hdlib.errors import HDError
from hdlib.models.loading import LoadedModel, context_length
from hdlib.tiers import BONUS, ModelGuesses, Successors
from hdlib.tiers.base import token_before_newest


@dataclass(frozen=True)
class DecodeSettings:
    max_new_tokens: int = 256  # the answer stops here at the latest
    temperature: float = 0.0  # 0 is greedy: the argmax, no randomness
    top_p: float = 1.0  # sampling only: nucleus mass kept (1 keeps all)
    top_k: int = 0  # sampling only: most likely tokens kept (0 keeps all)
    seed: int | None = None  # sampling only: None draws one (recorded in the Generation)
    # sampling only: "gumbel", the same answer as plain sampling for a seed; "rejection", recursive
    # rejection sampling, the same distribution (hdlib.engine.sampling)
    sampling_rule: str = SAMPLING_RULES[0]

    def __post_init__(self) -> None:
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise HDError(f"max_new_tokens must be a positive integer, got {self.max_new_tokens!r}")
        Warp(self.temperature, self.top_p, self.top_k)  # validates them
        if self.seed is not None and (not isinstance(self.seed, int) or self.seed < 0):
            raise HDError(f"seed must be a non-negative integer or None, got {self.seed!r}")
        check_rule(self.sampling_rule)

    @property
    def warp(self) -> Warp:
        return Warp(self.temperature, self.top_p, self.top_k)


def check_prompt(prompt_ids: Sequence[int], limit: int) -> None:
    if len(prompt_ids) == 0:
        raise HDError("the prompt is empty")
    if len(prompt_ids) >= limit:
        raise HDError(
            f"the prompt has {len(prompt_ids)} tokens but the model's context holds {limit}: shorten the prompt"
        )


class Decoder:
    """One generation of `model` after `prompt_ids`; iterate it for one `Step` per forward pass
    (until end-of-sequence, max_new_tokens or the context limit), or `run` it for the `Generation`.

    The prompt is checked here and prefilled before the first step. With no drafter (or a budget of
    0) this is plain decoding: greedy at temperature 0, else sampling. `budget` is the budget policy
    (a `FixedBudget`, the value-ranked tree `ValueBudget`). `sampler` (made from `settings` when
    None) draws the sampled tokens; its seed is kept in the result.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        prompt_ids: Sequence[int],
        drafter: Drafter | None = None,
        settings: DecodeSettings | None = None,
        eos_token_ids: Iterable[int] = (),
        budget: BudgetPolicy | None = None,
        sampler: Sampler | None = None,
    ) -> None:
        self.model = model
        self.prompt_ids = [int(t) for t in prompt_ids]
        self.settings = settings = settings or DecodeSettings()
        self.sampler = (
            sampler
            if sampler is not None or settings.warp.greedy
            else Sampler(settings.warp, settings.seed, settings.sampling_rule)
        )
        self.drafter = drafter or Drafter([])
        self.policy = budget or FixedBudget(0 if not self.drafter.tiers else FIXED_BUDGET)
        self.eos = frozenset(eos_token_ids)
        self.limit = context_length(model)
        check_prompt(self.prompt_ids, self.limit)
        self._started = False

    def __iter__(self) -> Iterator[Step]:
        if self._started:
            raise HDError("a Decoder decodes once: make a new one to decode again")
        self._started = True
        return self._steps()

    def run(self, lm: LoadedModel | None = None) -> Generation:
        """Decode to the end; the record holds the text and each token's piece when `lm` (whose
        tokenizer the ids are of) is given."""
        start = time.perf_counter()
        steps = list(self)
        wall = time.perf_counter() - start
        tokens = [t for s in steps for t in s.tokens]
        step_s = sum(s.times.total for s in steps)
        return Generation(
            prompt_ids=list(self.prompt_ids),
            steps=steps,
            stop_reason=stop_reason(tokens, self.eos, self.settings.max_new_tokens),
            wall_s=wall,
            prefill_s=max(wall - step_s, 0.0),
            text=lm.decode(tokens) if lm is not None else "",
            tier_order=self.drafter.order,
            pieces=lm.token_pieces(tokens) if lm is not None else [],
            temperature=self.settings.temperature,
            seed=self.sampler.seed if self.sampler else None,
            sampling_rule=self.sampler.rule if self.sampler else "",
        )

    def _steps(self) -> Iterator[Step]:
        settings, drafter, policy, eos, limit = self.settings, self.drafter, self.policy, self.eos, self.limit
        tokens = list(self.prompt_ids)
        verifier = Verifier(self.model, self.sampler)
        verifier.prefill(tokens[:-1])
        # One table of the model's guesses for the generation, filled once a pass, for the tiers and
        # the policy that read it.
        successors = max(drafter.successors_wanted, policy.successors_wanted)
        guesses = Successors(successors) if successors else None
        if guesses is not None:
            drafter.use_guesses(guesses)
            policy.use_guesses(guesses)
        drafter.begin(tokens)
        rider = drafter.rider
        generated = 0
        step: Step | None = None
        while generated < settings.max_new_tokens and len(tokens) < limit:
            clock = PhaseClock()
            if step is not None:
                policy.observe(step)  # the policy learns from the last step before it proposes again
                clock.lap("policy")
            # A draft deeper than this could not be used: the step also emits the bonus token, and the
            # answer may not pass max_new_tokens nor the text the model's context.
            max_depth = min(settings.max_new_tokens - generated, limit - len(tokens)) - 1
            past_len = len(tokens) - 1

            # Propose: the tiers draft a trie (the policy decides which are asked), the policy keeps
            # what is worth verifying.
            draft_tokens = policy.draft_budget(len(tokens))
            ride = rider is not None and policy.run_rider(rider)
            clock.lap("policy")
            tree, lookups = (
                drafter.draft(tokens, draft_tokens, max_depth, policy.per_tier, verifier.vocab_size, policy.ask)
                if draft_tokens > 0
                else (DraftTree(root=tokens[-1]), ())
            )
            clock.lap("draft")
            tree, estimates = policy.select(tree, tokens)
            # A tier's rows (its Lookahead window) ride along where the policy says they pay and fit.
            rows = rider.rows() if rider is not None and ride and rider.fits(past_len, len(tree), limit) else None
            clock.lap("policy")

            # Verify: one forward pass over the trie. Accept: the path the model agrees with.
            scored = verifier.verify(tree, past_len, rows)
            clock.lap("verify")
            verified = verifier.accept(tree, scored, past_len, successors)
            clock.lap("accept")
            path = verified.path

            # Update: the cache keeps the accepted path, the tiers learn the new tokens and the model's guesses.
            verifier.compact(past_len, path)
            emitted = cut_at_end([tree.tokens[n] for n in path[1:]] + [verified.bonus], eos)
            tiers = ([tree.tiers[n] for n in path[1:]] + [BONUS])[: len(emitted)]
            if verified.top is not None:
                said = ModelGuesses(tree.tokens, tree.previous_tokens(token_before_newest(tokens)), *verified.top)
                if guesses is not None:
                    guesses.observe(said)
                drafter.observe_model(said)
            tokens.extend(emitted)
            generated += len(emitted)
            drafter.update(emitted)
            if rows is not None:
                rider.advance(scored.rider_next)  # type: ignore[union-attr]  (rows come from the rider)
            clock.lap("update")
            step = Step(
                index=step.index + 1 if step is not None else 0,
                context_len=past_len + 1,
                budget=draft_tokens,
                tree=tree,
                accepted_nodes=tuple(path),
                tokens=tuple(emitted),
                tiers=tuple(tiers),  # type: ignore[arg-type]  (no drafted node is the root)
                times=clock.times(scored.tree_s),
                estimates=estimates,
                choices=tuple(verified.choices),
                choice_probs=tuple(verified.choice_probs),
                accept_probs=tuple(verified.accept_probs),
                window=len(rows) if rows is not None else 0,
                lookups=lookups,
            )
            yield step
            if emitted[-1] in eos:
                break
        if step is not None:
            policy.observe(step)
        policy.finish()


def decode(*args: Any, **kwargs: Any) -> Iterator[Step]:
    """The steps of `Decoder(*args, **kwargs)`, one per forward pass, as they are decoded."""
    return iter(Decoder(*args, **kwargs))


def run(*args: Any, **kwargs: Any) -> Generation:
    """`Decoder(*args, **kwargs).run()`: the whole `Generation` (tokens, steps, timings, the seed it
    sampled with); no text."""
    return Decoder(*args, **kwargs).run()
