"""`generate()` (`hdlib.decoding`): with a tier of one's own beside hdlib's, its answer is plain
decoding's and the tokens that tier drafted are counted under its name and shown in its colour."""

from __future__ import annotations

import pytest
from echo import ECHO, PROMPT, Echo
from tiny import save_tiny

import hdlib
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
    assert f"color:{ECHO.color}" in gen._repr_html_()
