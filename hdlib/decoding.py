"""`generate`: answer a prompt with HD on a loaded model, above the engine.

It reads the prompt, makes the tiers by name (`hdlib.databases`: a database may be opened or built),
chooses the budget policy (a fixed budget, or the value-ranked tree on the model's measured forward
time, or a profile the caller names: `forward_profile`, starting from the acceptance prior the caller
chose: `resolve_prior`) and runs the engine's loop (`hdlib.engine.loop.Decoder`) once.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from hdlib.databases.registry import make_tier, parse_tiers
from hdlib.engine.budget import BudgetPolicy, FixedBudget
from hdlib.engine.drafter import Drafter
from hdlib.engine.forward_time import ForwardProfile, load_or_measure, read_profile
from hdlib.engine.loop import Decoder, DecodeSettings, check_prompt
from hdlib.engine.prior import AcceptancePrior
from hdlib.engine.sampling import SAMPLING_RULES
from hdlib.engine.trace import Generation
from hdlib.engine.value import ValueBudget
from hdlib.errors import HDError
from hdlib.models.loading import LoadedModel, context_length
from hdlib.models.packaged import PACKAGED
from hdlib.paths import data_dir
from hdlib.presentation import progress_bar
from hdlib.tiers import DEFAULT_TIERS, DraftTier, Tier

# The acceptance priors a generation at the auto budget may start from, by name (a file's path too).
PRIOR_CHOICES = ("learned", "fresh", "packaged")
PriorChoice = AcceptancePrior | str | Path | None
# A forward profile file the auto budget weighs drafts against in place of this machine's: read where
# the profile is loaded, once per generation, so a notebook's kernel or the command line can be given one.
FORWARD_PROFILE_ENV = "HDLIB_FORWARD_PROFILE"
ProfileChoice = ForwardProfile | str | Path | None


def packaged_prior_path(model_name: str) -> Path | None:
    """The acceptance prior shipped for the packaged model `model_name` (data/priors/NAME.json,
    written by scripts/build_prior.py), or None where that model ships none (or is not packaged)."""
    path = data_dir() / "priors" / f"{model_name}.json"
    return path if model_name in PACKAGED and path.is_file() else None


def named_prior(choice: PriorChoice, model_name: str) -> AcceptancePrior | None:
    """The prior `choice` names for the model `model_name` (an `AcceptancePrior` is itself; a name or a
    file gives a read-only one), or None for the cache's learned prior, which only the forward
    profile's key can open.

    None chooses "packaged" where the model ships a prior, else "learned". Everything `resolve_prior`
    refuses is refused here, before a database is opened or the forward time measured.
    """
    if isinstance(choice, AcceptancePrior):
        return choice
    if choice is None:
        choice = "packaged" if packaged_prior_path(model_name) is not None else "learned"
    if choice == "learned":
        return None
    if choice == "fresh":
        return AcceptancePrior.fresh()
    if choice == "packaged":
        path = packaged_prior_path(model_name)
        if path is None:
            shipped = ", ".join(name for name in PACKAGED if packaged_prior_path(name) is not None) or "none"
            raise HDError(
                f"no packaged acceptance prior for model '{model_name}' (shipped for: {shipped}): "
                "choose the prior 'learned', 'fresh' or a file"
            )
        return AcceptancePrior.from_file(path, source="packaged")
    looks_like_a_file = isinstance(choice, str) and ("/" in choice or choice.endswith(".json"))
    if isinstance(choice, Path) or looks_like_a_file or Path(str(choice)).expanduser().is_file():
        return AcceptancePrior.from_file(Path(choice).expanduser())  # a missing file is said as such
    raise HDError(f"unknown acceptance prior {choice!r}: choose {', '.join(PRIOR_CHOICES)} or a JSON file's path")


def named_profile(choice: ProfileChoice) -> ForwardProfile | None:
    """The forward profile `choice` names: a `ForwardProfile` as it is; a file's path (str or Path), the
    profile in it (`hdlib.engine.forward_time.read_profile`: an HDError says what is wrong with a bad
    file); None, the file that HDLIB_FORWARD_PROFILE names where it is set, else None (this machine's)."""
    if isinstance(choice, ForwardProfile):
        return choice
    if choice is not None:
        return read_profile(Path(choice).expanduser())
    named = os.environ.get(FORWARD_PROFILE_ENV)
    return read_profile(Path(named).expanduser(), f"{FORWARD_PROFILE_ENV}: ") if named else None


def forward_profile(lm: LoadedModel, profile: ProfileChoice = None) -> ForwardProfile:
    """What the value-ranked tree weighs drafts against: the profile `profile` names (`named_profile`:
    a profile, a file, or by default the file HDLIB_FORWARD_PROFILE names), else the forward-time
    profile of `lm` on this device (`hdlib.engine.forward_time.load_or_measure`), cached, measured with
    a progress bar on first use."""
    named = named_profile(profile)
    return named if named is not None else measured_profile(lm)


def measured_profile(lm: LoadedModel) -> ForwardProfile:
    """The forward-time profile of `lm` on this device, cached, measured with a progress bar on first use."""
    return load_or_measure(lm.model, progress=progress_bar("measuring forward time"))


def resolve_prior(choice: PriorChoice, lm: LoadedModel, key: str | None = None) -> AcceptancePrior:
    """The acceptance prior `choice` names for the model `lm`: an `AcceptancePrior` as it is;
    "learned", the one this machine's cache keeps for the model and device (`key`, a forward
    profile's key; default the one `generate` uses, measured on first use), which learns from every
    generation; "fresh", none; "packaged", the one shipped with the packaged model (an HDError for a
    model that ships none); a file's path (str or Path), its rates. All but "learned" are read-only.
    None is "packaged" where the model ships a prior, else "learned"."""
    named = named_prior(choice, lm.name)
    if named is not None:
        return named
    return AcceptancePrior.for_model(key if key is not None else forward_profile(lm).key)


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
    prior: PriorChoice = None,
    candidates: int | None = None,
    profile: ProfileChoice = None,
) -> Generation:
    """Answer `prompt` with HD (or plain decoding when `tiers` is empty) and return the record.

    `prompt` is text, encoded in `prompt_format` (`LoadedModel.encode_prompt`: "auto" is the model's
    chat template, or FastChat's vicuna format when it has none; "raw", as `chat=False`, is the text
    as it is), or token ids. `tiers` are names, letters, `Tier`s or ready `DraftTier`s (a tier of
    your own), asked in that order; a ready `drafter` (e.g. `hdlib.bench.paper_drafter.paper_drafter(lm)`) is
    used instead of them.
    `budget` is the most draft tokens per step (the tiers fill it in order); None chooses it per
    step from the measured forward time, and asks a tier after the first only where asking it pays
    (`hdlib.engine.gate`; `gate=False` asks every tier at every step; `candidates`, the draft tokens
    each tier may propose before the ranking keeps the best, None for `hdlib.engine.value.CANDIDATES`),
    starting from the acceptance
    `prior` (`resolve_prior`: "packaged", "learned", "fresh", a file or an `AcceptancePrior`; None is
    "packaged" for the packaged model, else "learned", the cache's, which learns from every
    generation; all but "learned" are read-only, so a generation does not depend on what ran before
    it); the record names it (`prior_source`, `prior_digest`); and weighing drafts against the forward
    time of `profile` (`forward_profile`: None is this machine's, measured once and cached, or the
    file HDLIB_FORWARD_PROFILE names; a `ForwardProfile` or a file's path: another machine's timings,
    a test's). At a fixed budget, or without tiers, neither is used: `prior` and `profile` are
    accepted and ignored. `temperature` 0 is greedy decoding;
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
    names = parse_tiers(tiers) if drafter is None else []
    auto = fixed is None and bool(drafter.tiers if drafter is not None else names)
    chosen = named_prior(prior, lm.name) if auto else None  # a bad choice is said before the tiers open
    given = named_profile(profile) if auto else None  # a bad profile file too
    drafter = drafter or Drafter([make_tier(t, lm) for t in names])
    used: AcceptancePrior | None = None
    if not drafter.tiers:
        policy: BudgetPolicy = FixedBudget(0)
    elif fixed is None:
        weighed = given if given is not None else measured_profile(lm)
        used = chosen if chosen is not None else AcceptancePrior.for_model(weighed.key)
        policy = ValueBudget(weighed, used, candidates=candidates, gate=gate)
    else:
        policy = fixed
    digest = used.digest() if used is not None else ""  # before a learning prior merges this generation
    gen = Decoder(lm.model, prompt_ids, drafter, settings, lm.eos_token_ids, policy).run(lm)
    if used is None or not isinstance(policy, ValueBudget):
        return gen
    used.merge(policy.rates())  # a learning prior keeps what this generation learned; a read-only one ignores it
    return replace(gen, prior_source=used.source, prior_digest=digest)
