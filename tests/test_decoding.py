"""`generate()` (`hdlib.decoding`): with a tier of one's own beside hdlib's, its answer is plain
decoding's and the tokens that tier drafted are counted under its name and shown in its colour; the
auto budget starts from the acceptance prior the caller chose, and only the learned one changes; it
weighs drafts against the forward profile the caller gives, or a file the environment names."""

from __future__ import annotations

import json

import pytest
from support.echo import ECHO, PROMPT, Echo
from support.tiny import save_tiny

import hdlib
import hdlib.decoding
from hdlib.decoding import (
    FORWARD_PROFILE_ENV,
    PRIOR_CHOICES,
    forward_profile,
    named_prior,
    packaged_prior_path,
    resolve_prior,
)
from hdlib.engine.forward_time import ForwardProfile, flat_profile
from hdlib.engine.prior import AcceptancePrior
from hdlib.errors import HDError
from hdlib.presentation import generation_html
from hdlib.tiers import BONUS, Tier

C = Tier.CONTEXT


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("tiny") / "m")


@pytest.fixture(scope="module")
def lm(folder):
    return hdlib.load_model(str(folder), device="cpu")


def test_a_tier_of_ones_own_drafts_and_its_tokens_are_counted_under_its_name(lm):
    gen = hdlib.generate(lm, PROMPT, tiers=["C", Echo()], max_new_tokens=24, budget=8)
    plain = hdlib.generate(lm, PROMPT, tiers=(), max_new_tokens=24)
    assert gen.tokens == plain.tokens  # lossless with any tier
    assert gen.tier_order == [C, ECHO] and gen.tier_counts[ECHO] > 0
    assert gen.summary()["tiers"] == {
        "context": gen.tier_counts[C],
        "echo": gen.tier_counts[ECHO],
        "bonus": gen.tier_counts[BONUS],
    }
    assert f"color:{ECHO.color}" in generation_html(gen)


# Forward time that grows gently with the tokens of a pass: the auto budget's first step drafts only
# the nodes its prior expects to pay, so what it verifies shows which prior it started from.
GENTLE = ForwardProfile(tuple(0.05 * (1 + 0.02 * k) for k in range(64)), 256, "gentle")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty hdlib cache, and the gentle profile instead of a measured one (no timing noise)."""
    monkeypatch.setenv("HDLIB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(hdlib.decoding, "load_or_measure", lambda model, *args, **kwargs: GENTLE)
    return tmp_path / "cache"


def auto(lm, prior) -> hdlib.Generation:
    return hdlib.generate(lm, PROMPT, tiers=["C", Echo()], max_new_tokens=24, prior=prior)


def acceptance_files(cache) -> list[str]:
    return sorted(p.name for p in (cache / "acceptance").glob("*")) if (cache / "acceptance").exists() else []


def test_a_fresh_prior_starts_every_generation_alike_and_writes_nothing_while_the_learned_one_learns(lm, cache):
    fresh = [auto(lm, "fresh") for _ in range(2)]
    assert fresh[0].steps[0].tree.n_drafted == fresh[1].steps[0].tree.n_drafted > 0
    assert acceptance_files(cache) == []
    assert {(g.prior_source, g.prior_digest) for g in fresh} == {("fresh", AcceptancePrior.fresh().digest())}

    learned = [auto(lm, None), auto(lm, "learned")]  # None: the tiny model ships no prior, so the learned one
    (name,) = acceptance_files(cache)
    assert name == AcceptancePrior.for_model(GENTLE.key).path.name
    assert [g.prior_source for g in learned] == ["learned", "learned"]
    assert learned[0].prior_digest == AcceptancePrior.fresh().digest() != learned[1].prior_digest
    # The control: what the first generation learned changes the second one's first step ...
    assert learned[1].steps[0].tree.n_drafted != learned[0].steps[0].tree.n_drafted
    # ... and a fresh prior does not see it.
    assert auto(lm, "fresh").steps[0].tree.n_drafted == fresh[0].steps[0].tree.n_drafted
    assert auto(lm, AcceptancePrior.fresh()).steps[0].tree.n_drafted == fresh[0].steps[0].tree.n_drafted


def test_a_prior_from_a_file_is_used_read_only_and_named_in_the_record(lm, cache, tmp_path):
    auto(lm, "learned")
    learned = AcceptancePrior.for_model(GENTLE.key)
    path = learned.save(tmp_path / "mine.json")
    for choice in (path, str(path)):
        g = auto(lm, choice)
        assert (g.prior_source, g.prior_digest) == (str(path), learned.digest())
        assert g.summary()["prior"] == f"{path} ({learned.digest()})"
    assert AcceptancePrior.from_file(path).digest() == learned.digest()  # the file was not written


def test_a_bad_prior_choice_is_an_error_listing_the_choices_and_a_fixed_budget_ignores_it(lm, cache):
    with pytest.raises(HDError, match="unknown acceptance prior 'fersh': choose learned, fresh, packaged or a JSON"):
        auto(lm, "fersh")
    with pytest.raises(HDError, match="acceptance prior missing.json: no such file"):
        auto(lm, "missing.json")
    with pytest.raises(HDError, match=f"no packaged acceptance prior for model '{lm.name}'"):
        auto(lm, "packaged")
    g = hdlib.generate(lm, PROMPT, tiers=["C"], max_new_tokens=8, budget=4, prior="fersh")
    assert (g.prior_source, g.prior_digest) == ("", "") and "prior" not in g.summary()
    assert acceptance_files(cache) == []


STEEP = ForwardProfile(tuple(0.05 * (1 + 0.5 * k) for k in range(64)), 256, "steep")  # a token costs half a pass


def test_the_auto_budget_weighs_drafts_against_the_profile_given_or_the_file_the_environment_names(
    lm, tmp_path, monkeypatch
):
    """`generate(profile=...)`: a profile or a file; HDLIB_FORWARD_PROFILE, read where the profile is
    loaded (a notebook's kernel, the command line); nothing is measured. The first step has no rate yet,
    so what it verifies depends on the profile alone: more on a flat one than on a steep one."""

    def refuse(*args, **kwargs):
        raise AssertionError("this machine's profile was measured")

    monkeypatch.setattr(hdlib.decoding, "load_or_measure", refuse)
    monkeypatch.setenv("HDLIB_CACHE", str(tmp_path / "cache"))

    def verified(**kwargs) -> int:
        g = hdlib.generate(lm, PROMPT, tiers=["C", Echo()], max_new_tokens=4, prior="fresh", **kwargs)
        return g.steps[0].tree.n_drafted

    steep = verified(profile=STEEP)
    assert verified(profile=flat_profile()) > steep
    path = tmp_path / "steep.json"
    path.write_text(json.dumps({"seconds": list(STEEP.seconds), "provenance": {"cpu": "a test's"}}))
    assert verified(profile=path) == verified(profile=str(path)) == steep
    monkeypatch.setenv(FORWARD_PROFILE_ENV, str(path))
    assert verified() == steep and forward_profile(lm).seconds == STEEP.seconds
    assert verified(profile=flat_profile()) > steep  # the argument before the environment
    path.write_text("{")
    with pytest.raises(HDError, match=f"HDLIB_FORWARD_PROFILE: forward profile {path}: not a JSON file"):
        verified()
    with pytest.raises(HDError, match=f"forward profile {tmp_path / 'none.json'}: no such file"):
        verified(profile=tmp_path / "none.json")
    hdlib.generate(lm, PROMPT, tiers=["C"], max_new_tokens=4, budget=4)  # a fixed budget reads no profile


def test_the_packaged_model_ships_a_prior_that_is_its_default_read_only():
    path = packaged_prior_path(hdlib.DEFAULT_MODEL)
    assert path is not None and path.name == f"{hdlib.DEFAULT_MODEL}.json"
    rates = json.loads(path.read_text())
    assert len(rates) > 10 and all(0 <= rate <= 1 and 0 < weight <= 200 for rate, weight in rates.values())
    prior = named_prior(None, hdlib.DEFAULT_MODEL)
    assert prior is not None and (prior.source, prior.learns) == ("packaged", False)
    packaged = named_prior("packaged", hdlib.DEFAULT_MODEL)
    assert packaged is not None and prior.digest() == packaged.digest() == AcceptancePrior.from_file(path).digest()
    assert named_prior(None, "gemma3-270m") is None  # packaged, but ships none: the learned prior
    with pytest.raises(HDError, match="no packaged acceptance prior for model 'gemma3-270m'"):
        named_prior("packaged", "gemma3-270m")
    assert PRIOR_CHOICES == ("learned", "fresh", "packaged")


def test_resolve_prior_opens_the_learned_prior_of_the_profiles_key(lm, cache):
    learned = resolve_prior("learned", lm, key="some device")
    assert learned.learns and learned.path == AcceptancePrior.for_model("some device").path
    assert resolve_prior(None, lm).path == AcceptancePrior.for_model(GENTLE.key).path  # measured: here, patched
    assert resolve_prior("fresh", lm).source == "fresh"
