"""The decoding loop: propose, select, score, accept, keep, learn, and yield one typed `Step` per iteration.

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

from hdlib.engine.budget import FIXED_BUDGET, BudgetPolicy, FixedBudget, Selection
from hdlib.engine.drafter import Drafter
from hdlib.engine.sampling import SAMPLING_RULES, Sampler, Warp, check_rule
from hdlib.engine.trace import Generation, PhaseClock, Step, TierLookup, cut_at_end, stop_reason
from hdlib.engine.verifier import Acceptance, Scored, Verifier
from hdlib.errors import HDError
from hdlib.models.loading import LoadedModel, context_length
from hdlib.tiers import BONUS, ModelGuesses
from hdlib.tiers.base import token_before_newest
from hdlib.tiers.guesses import GUESSES


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
    0) this is plain decoding: greedy at temperature 0, else sampling. `policy` is the budget policy
    (a `FixedBudget`, the value-ranked tree `ValueBudget`; None: a fixed budget of FIXED_BUDGET draft
    tokens). `sampler` (made from `settings` when None) draws the sampled tokens; its seed is kept in
    the result.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        prompt_ids: Sequence[int],
        drafter: Drafter | None = None,
        settings: DecodeSettings | None = None,
        eos_token_ids: Iterable[int] = (),
        policy: BudgetPolicy | None = None,
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
        self.policy = policy or FixedBudget(0 if not self.drafter.tiers else FIXED_BUDGET)
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
        drafter, policy, rider, eos, limit = self.drafter, self.policy, self.drafter.rider, self.eos, self.limit
        tokens = list(self.prompt_ids)
        verifier = Verifier(self.model, self.sampler)
        verifier.prefill(tokens[:-1])
        drafter.begin(tokens)
        learners = [*drafter.tiers, *([rider] if rider is not None else []), policy]
        guesses = GUESSES if drafter.tiers else 0  # plain decoding reads none
        index, learned_s = 0, 0.0
        while (max_depth := self._max_depth(tokens)) >= 0:
            clock, past_len = PhaseClock(learned_s), len(tokens) - 1
            # Propose: the tiers the policy's gate asks draft one trie.
            tree, lookups, budget = drafter.draft(tokens, max_depth, policy.gate, verifier.vocab_size)
            clock.lap("draft")
            # Select: the part worth verifying, and the rider's rows where they pay and fit.
            chosen = policy.select(tree, tokens, rider)
            fits = chosen.ride and rider is not None and rider.fits(past_len, len(chosen.tree), limit)
            rows = rider.rows() if fits else None  # type: ignore[union-attr]  (fits only with a rider)
            clock.lap("policy")
            # Score: one forward pass over the trie. Accept: the path the model agrees with.
            scored = verifier.score(chosen.tree, past_len, rows)
            clock.lap("verify")
            verdict = verifier.accept(chosen.tree, scored, past_len, guesses)
            clock.lap("accept")
            # Keep: the cache keeps the accepted path, the text its tokens and the model's own.
            verifier.compact(past_len, verdict.path)
            clock.lap("update")
            step = self._record(index, tokens, budget, chosen, lookups, scored, verdict, len(rows or ()), clock)
            tokens.extend(step.tokens)
            # Learn: the tiers, the rider and the policy, each from the one record of the step.
            start = time.perf_counter()
            for learner in learners:
                learner.update(step)
            learned_s = time.perf_counter() - start
            yield step
            index += 1
            if step.tokens[-1] in eos:
                break

    def _max_depth(self, tokens: Sequence[int]) -> int:
        """The deepest draft the next step could use (-1: no step is left): the step also emits the
        model's own token, and the answer may not pass max_new_tokens nor the text the model's context."""
        generated = len(tokens) - len(self.prompt_ids)
        return min(self.settings.max_new_tokens - generated, self.limit - len(tokens)) - 1

    def _record(
        self,
        index: int,
        context: Sequence[int],
        budget: int,
        chosen: Selection,
        lookups: tuple[TierLookup, ...],
        scored: Scored,
        verdict: Acceptance,
        window: int,
        clock: PhaseClock,
    ) -> Step:
        """The step's record: what it emitted (up to an end-of-sequence token) and from which tier,
        and what the model said of every node."""
        tree, path = chosen.tree, verdict.path
        emitted = cut_at_end([tree.tokens[n] for n in path[1:]] + [verdict.bonus], self.eos)
        said = None
        if verdict.top is not None:
            said = ModelGuesses(tree.tokens, tree.previous_tokens(token_before_newest(context)), *verdict.top)
        rider = self.drafter.rider
        return Step(
            index=index,
            context_len=len(context),
            budget=budget,
            tree=tree,
            accepted_nodes=tuple(path),
            tokens=tuple(emitted),
            tiers=tuple(([tree.tiers[n] for n in path[1:]] + [BONUS])[: len(emitted)]),  # type: ignore[arg-type]
            times=clock.times(scored.tree_s),
            estimates=chosen.estimates,
            choices=tuple(verdict.choices),
            choice_probs=tuple(verdict.choice_probs),
            accept_probs=tuple(verdict.accept_probs),
            window=window,
            lookups=lookups,
            guesses=said,
            kinds=chosen.kinds,
            window_source=rider.source if rider is not None else "",
            window_next=scored.rider_next if window else (),
        )


def decode(*args: Any, **kwargs: Any) -> Iterator[Step]:
    """The steps of `Decoder(*args, **kwargs)`, one per forward pass, as they are decoded."""
    return iter(Decoder(*args, **kwargs))


def run(*args: Any, **kwargs: Any) -> Generation:
    """`Decoder(*args, **kwargs).run()`: the whole `Generation` (tokens, steps, timings, the seed it
    sampled with); no text."""
    return Decoder(*args, **kwargs).run()
