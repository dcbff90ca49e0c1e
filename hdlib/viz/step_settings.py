"""What the step-through's generations depend on, without widgets: tests drive it without a browser.

`Settings` is everything a generation depends on, the key of `TraceCache`, which makes each generation
once and keeps it; `prompt_choices` and `budget_options` are the choices the controls offer, and
`summary_html` is the line the step-through shows under them (`hdlib.viz.step_through` wires the
widgets to these).
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hdlib import presentation
from hdlib.bench.specbench import load_questions
from hdlib.engine.budget import FIXED_BUDGET
from hdlib.engine.trace import Generation
from hdlib.errors import HDError
from hdlib.paths import data_dir
from hdlib.tiers import DEFAULT_TIERS, DraftTier, Tier


@dataclass(frozen=True)
class Settings:
    """Everything a generation of the step-through depends on: the key of its cache."""

    prompt: str
    tiers: tuple[Tier, ...] = DEFAULT_TIERS  # the enabled tiers, in the order they are asked
    temperature: float = 0.0
    seed: int | None = None  # sampling only
    max_new_tokens: int = 64
    budget: int | None = FIXED_BUDGET  # draft tokens per step; None: the value-ranked tree sizes each step

    def __post_init__(self) -> None:
        if not self.prompt.strip():
            raise HDError("the prompt is empty: choose one or type one")
        if self.budget is not None and self.budget < 1:
            raise HDError(f"the budget is {self.budget}: a positive number of draft tokens, or None (auto)")
        object.__setattr__(self, "tiers", tuple(self.tiers))
        if self.temperature == 0:  # greedy ignores the seed: one cache entry for every seed
            object.__setattr__(self, "seed", None)


GenerateFn = Callable[[Settings], Generation]
TierFactory = Callable[[Tier], DraftTier]


class TraceCache:
    """Generations by settings, each made once by `generate`; `calls` counts the ones made."""

    def __init__(self, generate: GenerateFn) -> None:
        self.generate = generate
        self.traces: dict[Settings, Generation] = {}
        self.calls = 0
        self.last_s = 0.0  # seconds the last new generation took

    def __contains__(self, settings: Settings) -> bool:
        return settings in self.traces

    def get(self, settings: Settings) -> Generation:
        if settings not in self.traces:
            self.calls += 1
            start = time.perf_counter()
            self.traces[settings] = self.generate(settings)
            self.last_s = time.perf_counter() - start
        return self.traces[settings]


def prompt_choices(path: str | Path | None = None) -> dict[str, str]:
    """Label -> prompt text for the project's prompt set (default data/prompts/prompts.jsonl)."""
    if path is None:
        path = data_dir() / "prompts" / "prompts.jsonl"
    choices = {}
    for q in load_questions(path):
        text = q.turns[0]
        short = text if len(text) <= 50 else text[:49] + "\u2026"
        choices[f"{q.question_id} {q.category}: {short}"] = text
    return choices


def summary_html(gen: Generation, note: str = "") -> str:
    """One line: tokens, steps, MAT, tokens per tier in their colours, why it stopped."""
    sampled = f", temperature {gen.temperature}, seed {gen.seed}" if gen.temperature > 0 else ""
    return (
        f"<b>{presentation.headline(len(gen.tokens), len(gen.steps), gen.mat)}</b>{sampled}; "
        f"{html.escape(gen.stop_message)}<br>{presentation.legend_html(gen.legend(), counts=True)}"
        f"{'<br>' + note if note else ''}"
    )


BUDGET_CHOICES = (4, 16, 64)  # tight, the notebooks' fixed budget, ample; and "auto" (None)
AUTO = "auto"


def budget_options(budget: int | None) -> list[str]:
    """The budget control's choices: BUDGET_CHOICES (with `budget` among them), then "auto"."""
    sizes = sorted({*BUDGET_CHOICES, *([budget] if budget is not None else [])})
    return [*map(str, sizes), AUTO]
