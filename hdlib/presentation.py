"""How records are shown, written once for the CLI, a notebook's view of a `Generation` and the widgets.

A tier's colour is its own (`Tier.color`); here it becomes an HTML style or a terminal's 24-bit
colour. A legend is a list of (tier, count) entries, the generation's tiers in order and then the
bonus token (`Generation.legend`); it is written as HTML or as text. Functions take plain values,
so that the records below them and the views above them can share them.
"""

from __future__ import annotations

import functools
import html
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol, TypeVar

from tqdm.auto import tqdm

from hdlib.tiers.base import Tier

Legend = Sequence[tuple[Tier, int]]  # (tier, tokens), the bonus token last
T = TypeVar("T")


def progress_bar(desc: str) -> Callable[[Iterable[T]], Iterable[T]]:
    """A progress bar over an iterable (tqdm's: a widget in a notebook, text in a terminal).

    The bar is left when done: in a notebook tqdm closes a bar with leave=False, its output stays in
    the saved notebook, and a page reloaded with the kernel running says "model not found" there."""
    return functools.partial(tqdm, desc=desc)


class TierRow(Protocol):
    """What a tier did in a generation (`hdlib.engine.trace.TierStats`)."""

    tier: Tier
    credited: int
    alone: int
    shared: int
    asked: int
    lookup_s: float


def ansi(color: str) -> str:
    """The terminal escape that writes in `color` ("#RRGGBB"; 24-bit colour)."""
    r, g, b = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return f"\x1b[38;2;{r};{g};{b}m"


ANSI_RESET = "\x1b[0m"


def tokens_ansi(pieces: Sequence[str], tiers: Sequence[Tier]) -> str:
    """The answer for a terminal, each token in its tier's colour."""
    return "".join(f"{ansi(t.color)}{p}{ANSI_RESET}" for p, t in zip(pieces, tiers, strict=True))


def tokens_html(pieces: Sequence[str], tiers: Sequence[Tier]) -> str:
    """The answer as HTML spans, each token in its tier's colour with the tier's name on hover."""
    return "".join(
        f'<span style="color:{t.color}" title="{html.escape(t.name)}">{html.escape(p)}</span>'
        for p, t in zip(pieces, tiers, strict=True)
    )


def counts_text(legend: Legend) -> str:
    """"context 12, model 3, bonus 40"."""
    return ", ".join(f"{tier.name} {count}" for tier, count in legend)


def legend_ansi(legend: Legend) -> str:
    return " ".join(f"{ansi(tier.color)}{tier.name}{ANSI_RESET}" for tier, _ in legend)


def legend_html(legend: Legend, counts: bool = False) -> str:
    """A coloured square and the name of each tier, with its token count when `counts`."""
    return " ".join(
        f'<span style="color:{tier.color}">&#9632; {html.escape(tier.name)}{f" {count}" if counts else ""}</span>'
        for tier, count in legend
    )


def table_html(rows: Mapping[str, object]) -> str:
    return "<table>" + "".join(
        f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>" for k, v in rows.items()
    ) + "</table>"


def headline(tokens: int, steps: int, mat: float) -> str:
    return f"{tokens} tokens in {steps} steps, MAT {mat:.2f}"


def rounding_note(dtype: str) -> str:
    """Why, in half precision, HD's greedy output may differ from plain decoding's."""
    return f"in {dtype} the tree pass rounds otherwise than the one-token pass, so near-ties of the argmax can flip"


def tiers_text(rows: Sequence[TierRow], steps: int) -> list[str]:
    """Two lines under a generation: each tier's accepted tokens drafted alone and shared with another
    tier; and the steps it was asked in with its drafting time per step asked."""
    drafted = ", ".join(f"{r.tier.name} {r.alone} alone, {r.shared} shared" for r in rows)
    asked = ", ".join(
        f"{r.tier.name} {r.asked}" + (f" ({1e3 * r.lookup_s / r.asked:.2f} ms each)" if r.asked else "") for r in rows
    )
    return [f"accepted tokens drafted by one tier or several: {drafted}", f"asked in {steps} steps: {asked}"]


class Shown(Protocol):
    """What a notebook shows of a generation (`hdlib.engine.trace.Generation`)."""

    tokens: list[int]
    pieces: list[str]
    token_tiers: list[Tier]

    def legend(self) -> Legend: ...

    def summary(self) -> Mapping[str, object]: ...


def generation_html(gen: Shown) -> str:
    """The answer with each token coloured by the tier it came from, and the summary below: how a
    notebook shows a `Generation` (`hdlib` registers it with IPython)."""
    pieces = gen.pieces or [f"[{t}]" for t in gen.tokens]
    return (
        '<div style="white-space:pre-wrap;font-family:monospace">'
        f"{tokens_html(pieces, gen.token_tiers)}</div>"
        f"<div>{legend_html(gen.legend())}</div>{table_html(gen.summary())}"
    )
