"""Every model and draft the engine accepts is verified correctly, or refused with a clear `HDError`.

The tests of each fix were seen to fail on the engine before it (issue 11: out-of-vocabulary drafts,
a flash or flex backend, the cache keyword, a pass that loses the cache, the loop scan and drafts, a
missing model database); the others guard what must keep working (in-vocabulary drafts, the eager
backend, HD in a loop).
"""

from __future__ import annotations

import functools

import pytest
from oracle import OracleTier
from tiny import VOCAB, tiny_gemma3, tiny_llama

from hdlib.budget import FixedBudget
from hdlib.decoding import DecodeSettings, run
from hdlib.drafter import Drafter
from hdlib.errors import HDError
from hdlib.tiers import ContextTier, RecycledTier
from hdlib.tiers.base import Draft, DraftTier, Tier

MODELS = {"llama": tiny_llama, "gemma3": tiny_gemma3}
PROMPT = (5, 6, 7, 8, 9) * 3


@functools.cache
def model(name: str):
    return MODELS[name]()


def plain(m, max_new: int = 20) -> list[int]:
    return run(m, PROMPT, None, DecodeSettings(max_new_tokens=max_new)).tokens


def oracle(want: list[int]) -> Drafter:
    """Drafts the true continuation, corrupted now and then: accepted and rejected branches alike."""
    return Drafter([OracleTier(list(PROMPT) + want, VOCAB, seed=2)])


class FixedDrafts(DraftTier):
    """A user's own tier that drafts the same tokens whatever the context."""

    tier = Tier.STATISTICS

    def __init__(self, draft: Draft) -> None:
        self.draft = draft

    def lookup(self, context, budget):
        return [self.draft[:budget]]


# --- 1. draft tokens outside the vocabulary ------------------------------------------------------


@pytest.mark.parametrize("bad", [VOCAB, VOCAB + 1000, -1])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_draft_token_outside_the_vocabulary_is_refused_naming_its_tier(bad, temperature):
    drafter = Drafter([ContextTier(), FixedDrafts((7, bad, 8))])
    settings = DecodeSettings(max_new_tokens=10, temperature=temperature, seed=1)
    with pytest.raises(HDError, match=rf"statistics tier \(FixedDrafts\) drafted token id {bad}, outside"):
        run(model("llama"), PROMPT, drafter, settings, (), FixedBudget(8))


def test_drafts_inside_the_vocabulary_still_pass():
    want = plain(model("llama"))
    drafter = Drafter([FixedDrafts((0, VOCAB - 1, 3))])  # the first and last ids are fine
    assert run(model("llama"), PROMPT, drafter, DecodeSettings(max_new_tokens=20), (), FixedBudget(8)).tokens == want


# --- 2. attention backends -----------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["flash_attention_2", "flex_attention"])
def test_a_backend_that_ignores_the_tree_mask_is_refused(backend):
    m = tiny_llama()
    m.config._attn_implementation_internal = backend  # as loaded with attn_implementation=backend
    with pytest.raises(HDError, match=rf"{backend}.*does not honour the tree mask.*set_attn_implementation"):
        run(m, PROMPT, Drafter([ContextTier()]), DecodeSettings(max_new_tokens=5), (), FixedBudget(8))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_eager_backend_verifies_trees_exactly(name):
    m = MODELS[name]()
    want = plain(m, 30)
    m.set_attn_implementation("eager")
    assert m.config._attn_implementation == "eager"
    got = run(m, PROMPT, oracle(want), DecodeSettings(max_new_tokens=30), (), FixedBudget(12))
    assert got.tokens == want and got.mat > 1.5  # drafts were verified, and accepted


# --- 3. transformers versions: the cache keyword, and a pass that does not extend the cache -------


def release_keyword() -> str:
    """How the installed transformers release takes the cache: `cache` from 5.24 on."""
    import inspect

    from transformers import LlamaForCausalLM

    return "cache" if "cache" in inspect.signature(LlamaForCausalLM.forward).parameters else "past_key_values"


class OldLlama:
    """The tiny Llama as transformers 5.17-5.23 take it: the cache as `past_key_values` (a mixin)."""

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None, **kwargs):
        if "cache" in kwargs:
            raise AssertionError("a release before 5.24 does not know `cache`")
        cache = {release_keyword(): past_key_values}
        return super().forward(input_ids, attention_mask, position_ids, **cache, **kwargs)


class NewLlama:
    """... and as 5.24 on take it: `cache`."""

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, cache=None, **kwargs):
        if "past_key_values" in kwargs:
            raise AssertionError("`past_key_values` is deprecated from 5.24 on")
        return super().forward(input_ids, attention_mask, position_ids, **{release_keyword(): cache}, **kwargs)


class CachelessLlama:
    """A model that loses the cache it is given, as a release before 5.24 loses `cache=` in **kwargs."""

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, cache=None, **kwargs):
        return super().forward(input_ids, attention_mask, position_ids, **kwargs)


def retype(mixin: type, base):
    base.__class__ = type(mixin.__name__, (mixin, type(base)), {})
    return base


@pytest.mark.parametrize(("mixin", "keyword"), [(OldLlama, "past_key_values"), (NewLlama, "cache")])
def test_the_cache_goes_under_the_name_the_models_release_takes(mixin, keyword):
    from hdlib.verifier import cache_keyword

    m = retype(mixin, tiny_llama())
    assert cache_keyword(m) == keyword
    want = plain(tiny_llama(), 30)
    got = run(m, PROMPT, oracle(want), DecodeSettings(max_new_tokens=30), (), FixedBudget(12))
    assert got.tokens == want and got.mat > 1.5


def test_a_pass_that_does_not_extend_the_cache_is_an_error_not_wrong_text():
    m = retype(CachelessLlama, tiny_llama())
    with pytest.raises(HDError, match="KV cache holds 0 tokens after a pass over 14 new ones, expected 14"):
        run(m, PROMPT, Drafter([ContextTier()]), DecodeSettings(max_new_tokens=5), (), FixedBudget(8))


# --- 6. repetition loops in the context tier -----------------------------------------------------


class CountingList(list):
    """A key's occurrence list that counts the occurrences a lookup reads."""

    read = 0

    def __reversed__(self):
        for item in super().__reversed__():
            CountingList.read += 1
            yield item

    def __getitem__(self, index):
        got = super().__getitem__(index)
        CountingList.read += len(got) if isinstance(index, slice) else 1
        return got


def looping_tier(length: int) -> tuple[ContextTier, list[int]]:
    text = [11, 12, 13] * (length // 3) + [11]  # a small model stuck in a loop of period 3
    tier = ContextTier()
    tier.begin(text)
    matches = tier._index.suffix_matches
    tier._index.suffix_matches = lambda context: ((m, CountingList(v)) for m, v in matches(context))
    return tier, text


@pytest.mark.parametrize("budget", [16, 64])
def test_a_lookup_in_a_repetition_loop_reads_a_bounded_number_of_occurrences(budget):
    reads = []
    for length in (3_000, 30_000):
        tier, text = looping_tier(length)
        CountingList.read = 0
        tier.lookup(text, budget)
        reads.append(CountingList.read)
    assert reads[0] == reads[1] <= 3 * 2 * 32  # 3 key lengths, the SCAN most recent occurrences (read twice)


def test_a_loop_is_drafted_round_and_no_draft_is_a_prefix_of_another():
    tier, text = looping_tier(3_000)
    drafts = tier.lookup(text, 64)
    assert drafts[0] == (12, 13, 11) * 3 + (12,)  # the whole draft length, round the loop
    assert not any(a != b and b[: len(a)] == a for a in drafts for b in drafts)
    # A match far enough back: the text that followed it, cut at draft_len (10).
    text = [*range(1, 15), 1, 2]
    tier = ContextTier()
    tier.begin(text)
    assert tier.lookup(text, 16) == [tuple(range(3, 13))]
    # One nearer than draft_len overlaps its own continuation: it goes round.
    text = [1, 2, 3, 4, 5, 6, 7, 1, 2]
    tier.begin(text)
    assert tier.lookup(text, 16) == [(3, 4, 5, 6, 7, 1, 2, 3, 4, 5)]


def test_the_context_tier_in_a_loop_stays_lossless():
    """The model's own loop: HD drafts it round and the output is still plain greedy's."""
    m = model("llama")
    prompt = (20, 21, 22) * 10
    want = run(m, prompt, None, DecodeSettings(max_new_tokens=40)).tokens
    got = run(m, prompt, Drafter([ContextTier()]), DecodeSettings(max_new_tokens=40), (), FixedBudget(32))
    assert got.tokens == want


# --- 11. a model with no model database ----------------------------------------------------------


def test_a_missing_model_database_drafts_nothing_and_says_once_how_to_build_it(capsys, tmp_path, monkeypatch):
    from types import SimpleNamespace

    from hdlib.databases import load_tier

    monkeypatch.setenv("HDLIB_CACHE", str(tmp_path))  # no database built for anything here
    lm = SimpleNamespace(name="/some/folder", fingerprint="abc", databases={})
    tier = load_tier(Tier.MODEL, lm)
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and "no model database for '/some/folder'" in said
    assert "build the database with: hdlib build-db model --model /some/folder" in said
    assert load_tier(Tier.MODEL, lm) is tier and capsys.readouterr().err == ""  # opened once, said once
    # The model's recycled guesses are a tier of their own: with them, the answer is plain greedy's.
    want = plain(model("llama"), 40)
    drafter = Drafter([tier, RecycledTier()])
    got = run(model("llama"), PROMPT, drafter, DecodeSettings(max_new_tokens=40), (), FixedBudget(8))
    assert got.tokens == want
    assert all(s.tree.tiers[n] == Tier.RECYCLED for s in got.steps for n in range(1, len(s.tree)))
    assert any(s.n_accepted_drafts for s in got.steps)
