"""A step's record as a tier or a rider reads it, made by hand: what a test hands `update`."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace

from hdlib.tiers.guesses import ModelGuesses


def appended(
    tokens: Sequence[int] = (), guesses: ModelGuesses | None = None, window: int = 0, window_next: Sequence[int] = ()
) -> SimpleNamespace:
    """A step that appended `tokens` to the context, in which the model said `guesses` (and a rider of
    `window` rows rode, the model's next tokens after its top ones `window_next`)."""
    return SimpleNamespace(
        tokens=tuple(int(t) for t in tokens), guesses=guesses, window=window, window_next=tuple(window_next)
    )
