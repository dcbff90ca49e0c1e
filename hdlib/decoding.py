"""`generate`: answer a prompt with HD on a loaded model, above the engine.

It reads the prompt, makes the tiers by name (`hdlib.databases`: a database may be opened or built),
chooses the budget policy (a fixed budget, or the value-ranked tree on the model's measured forward
time) and runs the engine's loop (`hdlib.engine.loop.Decoder`) once.
"""

from __future__ import annotations

from collections.abc import Sequence

from hdlib.databases.registry import make_tier, parse_tiers
from hdlib.engine.budget import BudgetPolicy, FixedBudget
from hdlib.engine.drafter import Drafter
from hdlib.engine.forward_time import load_or_measure
from hdlib.engine.loop import Decoder, DecodeSettings, check_prompt
from hdlib.engine.sampling import SAMPLING_RULES
from hdlib.engine.trace import Generation
from hdlib.engine.value import AcceptancePrior, ValueBudget
from hdlib.errors import HDError
from hdlib.models.loading import LoadedModel, context_length
from hdlib.tiers import DEFAULT_TIERS, DraftTier, Tier


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
    sampling_rule: str = SAMPLING_RULES[0],
    prompt_format: str = "auto",
    drafter: Drafter | None = None,
    gate: bool = True,
) -> Generation:
    """Answer `prompt` with HD (or plain decoding when `tiers` is empty) and return the record.

    `prompt` is text, encoded in `prompt_format` (`LoadedModel.encode_prompt`: "auto" is the model's
    chat template, or FastChat's vicuna format when it has none; "raw", as `chat=False`, is the text
    as it is), or token ids. `tiers` are names, letters, `Tier`s or ready `DraftTier`s (a tier of
    your own), asked in that order; a ready `drafter` (e.g. `hdlib.bench.paper.paper_drafter(lm)`) is
    used instead of them.
    `budget` is the most draft tokens per step (the tiers fill it in order); None chooses it per
    step from the measured forward time, and asks a tier after the first only where asking it pays
    (`hdlib.engine.gate`; `gate=False` asks every tier at every step). `temperature` 0 is greedy decoding;
    above 0 HD samples from exactly the distribution plain sampling would (with `top_p` and `top_k`
    applied alike); `seed` makes a sampled answer reproducible (None draws one; it is kept in the
    result). With `sampling_rule` "gumbel" (the default) HD's answer for a seed is plain sampling's
    answer for that seed, token for token, with any tiers and budget; "rejection" (recursive
    rejection sampling) gives the same distribution but another answer, which changes with the tree.
    """
    settings = DecodeSettings(
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        seed=seed,
        sampling_rule=sampling_rule,
    )
    if isinstance(prompt, str):
        if not prompt.strip():
            raise HDError("the prompt is empty")
        prompt_ids = lm.encode_prompt(prompt, chat=chat, prompt_format=prompt_format)
    else:
        prompt_ids = list(prompt)
    # Before the tiers are opened (a database may be built) and the forward time measured: a prompt
    # too long, or a budget too large, is said at once.
    check_prompt(prompt_ids, context_length(lm.model))
    fixed = FixedBudget(budget) if budget is not None else None
    drafter = drafter or Drafter([make_tier(t, lm) for t in parse_tiers(tiers)])
    if not drafter.tiers:
        policy: BudgetPolicy = FixedBudget(0)
    elif fixed is None:
        profile = load_or_measure(lm.model)
        policy = ValueBudget(profile, AcceptancePrior.for_model(profile.key), gate=gate)
    else:
        policy = fixed
    return Decoder(lm.model, prompt_ids, drafter, settings, lm.eos_token_ids, policy).run(lm)
