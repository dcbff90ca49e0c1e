"""A small table with a title: HTML in a notebook, Markdown as text; the paper beside the kit prints its
tables as one (`hdlib.viz.paper_tasks.task_table`, `hdlib.viz.contrasts.contrast_table`)."""

from __future__ import annotations

import html
from dataclasses import dataclass


@dataclass(frozen=True)
class Table:
    """A small table with a title: HTML in a notebook (`_repr_html_`), Markdown as text (`str`)."""

    title: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def _repr_html_(self) -> str:
        head = "".join(f"<th style='text-align:left'>{html.escape(h)}</th>" for h in self.header)
        body = "".join(
            "<tr>" + "".join(f"<td style='text-align:left'>{html.escape(c)}</td>" for c in row) + "</tr>"
            for row in self.rows
        )
        return f"<p><b>{html.escape(self.title)}</b></p><table><tr>{head}</tr>{body}</table>"

    def __str__(self) -> str:
        lines = [self.title, "", "| " + " | ".join(self.header) + " |", "|" + "---|" * len(self.header)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in self.rows])
