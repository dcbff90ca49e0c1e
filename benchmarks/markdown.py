"""What every benchmark's tables share: one number format per kind of quantity, fixed, so that the
document changes only where a result does; a Markdown table; a code span."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence


def number_format(spec: str, scale: float = 1.0, suffix: str = "") -> Callable[[float], str]:
    """A number as `format(v * scale, spec)` followed by `suffix`."""
    return lambda v: f"{format(v * scale, spec)}{suffix}"


x = number_format(".2f", suffix="x")  # a speedup
f1, f2, f3 = number_format(".1f"), number_format(".2f"), number_format(".3f")
pct = number_format(".0f", 100, " %")  # a share
count = number_format(",.0f")


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def code(text: str) -> str:
    return f"`{text}`"
