"""The verifier (`hdlib.engine.verifier`) on every model the engine accepts: a tree verified exactly
with the eager backend, or refused with a clear `HDError` (a flash or flex backend that ignores the
tree mask, a pass that loses the cache); the cache handed over under the keyword the installed
transformers release takes. The refusals were seen to fail on the engine before their fixes (issue 11).
"""

from __future__ import annotations

import pytest
from support.greedy import MODELS, PROMPT, plain
from support.oracle import OracleTier
from support.tiny import VOCAB, tiny_llama

from hdlib.engine.budget import FixedBudget
from hdlib.engine.drafter import Drafter
from hdlib.engine.loop import DecodeSettings, run
from hdlib.errors import HDError
from hdlib.tiers import ContextTier


def oracle(want: list[int]) -> Drafter:
    """Drafts the true continuation, corrupted now and then: accepted and rejected branches alike."""
    return Drafter([OracleTier(list(PROMPT) + want, VOCAB, seed=2)])


# --- attention backends --------------------------------------------------------------------------


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


# --- transformers versions: the cache keyword, and a pass that does not extend the cache -----------


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
    from hdlib.engine.verifier import cache_keyword

    m = retype(mixin, tiny_llama())
    assert cache_keyword(m) == keyword
    want = plain(tiny_llama(), 30)
    got = run(m, PROMPT, oracle(want), DecodeSettings(max_new_tokens=30), (), FixedBudget(12))
    assert got.tokens == want and got.mat > 1.5


def test_a_pass_that_does_not_extend_the_cache_is_an_error_not_wrong_text():
    m = retype(CachelessLlama, tiny_llama())
    with pytest.raises(HDError, match="KV cache holds 0 tokens after a pass over 14 new ones, expected 14"):
        run(m, PROMPT, Drafter([ContextTier()]), DecodeSettings(max_new_tokens=5), (), FixedBudget(8))
