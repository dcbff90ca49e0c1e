"""Plain greedy decoding on the tiny models (tests/support/tiny.py), one model of each kind built once: the
answers the engine's refusals and repairs are checked against (test_drafter, test_verifier,
test_tiers, test_registry)."""

from __future__ import annotations

import functools

from hdlib.engine.loop import DecodeSettings, run

from .tiny import tiny_gemma3, tiny_llama

MODELS = {"llama": tiny_llama, "gemma3": tiny_gemma3}
PROMPT = (5, 6, 7, 8, 9) * 3


@functools.cache
def model(name: str):
    return MODELS[name]()


def plain(m, max_new: int = 20) -> list[int]:
    return run(m, PROMPT, None, DecodeSettings(max_new_tokens=max_new)).tokens
