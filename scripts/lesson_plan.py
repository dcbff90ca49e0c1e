"""The class plan of docs/notebooks.md, computed: what each slot of the lesson needs in minutes.

A slot's need is its reading (the words of its in-class markdown a teacher reads aloud, at
`WORDS_PER_MINUTE`; what is folded away in `<details>` is not read aloud), the minutes for what its
in-class cells show (`FIGURE_MINUTES` for each figure, table or widget a cell displays,
`PRINTED_MINUTES` for each cell that prints lines: `shows`), the measured run time of its in-class
code cells, the measured time of the generations its exercises make (`Slot.regenerations`, run
after its in-class cells in the same kernel), and the minutes it gives its exercises. A notebook's
in-class cells are those before its `## After class` heading (all of them where it has none). The
run times are measured on warm caches (after `make class`) by running each notebook in a kernel,
cell by cell, and kept with the machine in `TIMINGS`; a cell whose source changed, or an exercise
whose code did, has no measured time until it is measured again.

    python -m scripts.lesson_plan              # print the plan (markdown)
    python -m scripts.lesson_plan --measure    # run the notebooks, record each cell's seconds
    python -m scripts.lesson_plan --write      # write the plan into docs/notebooks.md

tests/test_lesson_plan.py checks that the committed plan is this one, that every in-class cell was
measured as it now reads, and that the plan fits its time.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
DOC = ROOT / "docs" / "notebooks.md"
TIMINGS = ROOT / "docs" / "lesson_timings.json"  # beside the plan it times
WORDS_PER_MINUTE = 150  # reading dense prose aloud, slowly enough for a class to follow
FIGURE_MINUTES = 1.0  # a figure, table or widget on the screen, explained
PRINTED_MINUTES = 0.5  # a few printed lines, read out
AFTER_CLASS = "## After class"
CLASS_MINUTES = 90
PLAN_MINUTES = 80  # the rest of the class is slack
BEGIN, END = "<!-- lesson plan: python -m scripts.lesson_plan --write -->", "<!-- end of the lesson plan -->"


@dataclass(frozen=True)
class Slot:
    minutes: int  # given to the slot in the plan
    what: str  # the slot's name in the table: a notebook's stem or a handout
    in_class: str  # what the class does
    exercises: tuple[tuple[str, float], ...] = ()  # (what, minutes) done in class
    notebook: str | None = None  # its in-class cells are read and run in the slot
    # (what, code): the generations an in-class exercise makes, timed after the in-class cells (`measure`)
    regenerations: tuple[tuple[str, str], ...] = ()
    before: str = ""  # what is done before class for the slot (cut the cards), said in the plan


# The generations an in-class exercise makes, as a student makes them (timed by `measure`)
LOSSLESS_ONE_TIER = """\
single = hdlib.generate(lm, prompt, tiers="statistics", max_new_tokens=96, budget=BUDGET)
single.tokens == plain.tokens
"""
SMALL_BUDGET = "viz.drafter_tree(tiers, context, budget=4)"

PLAN = (
    Slot(5, "00_quickstart", "run the three cells; read the coloured answer, MAT and speedup", (), "00_quickstart"),
    Slot(
        17,
        "01_speculative_decoding",
        "draft and verify, side by side; one step up close; the cost model measured here",
        (("exercise 2: is HD lossless with one poor tier", 3),),
        "01_speculative_decoding",
        (("exercise 2", LOSSLESS_ONE_TIER),),
    ),
    Slot(
        14,
        "02_three_databases",
        "what each tier drafts here; the merged trie; the tiers as a memory hierarchy",
        (("exercise 2: a budget of 4", 2),),
        "02_three_databases",
        (("exercise 2", SMALL_BUDGET),),
    ),
    Slot(
        10,
        "card game",
        "the printed card game (`make class`): play CMS, then SCM, noting each round's tokens and deck; compare",
        (("CMS", 4), ("SCM", 3), ("the page's question, from the tally", 3)),
        before="cut the cards, 24 a group",
    ),
    Slot(
        15,
        "03_step_through",
        "step through at budget 16; the predict game on the teacher's seed (exercise 1, the order at each "
        "budget, is homework: seven generations)",
        (("the predict game, five steps", 6),),
        "03_step_through",
    ),
    Slot(
        11,
        "04_order_ablation",
        "the order ablation against the paper's (the paper beside the kit is after class)",
        (("discussion: the orders by MAT and by speed (its exercise 1)", 3),),
        "04_order_ablation",
    ),
    Slot(
        5, "exit quiz", "the printed exit quiz (`make class`), answers checked by the engine", (("five questions", 4),)
    ),
)
LATER = ("05_tree_attention", "06_lossless_sampling")  # a second lesson, or homework


def in_class_cells(stem: str) -> list[nbformat.NotebookNode]:
    cells = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4).cells
    for i, cell in enumerate(cells):
        if cell.cell_type == "markdown" and cell.source.lstrip().startswith(AFTER_CLASS):
            return cells[:i]
    return cells


def read_aloud(markdown: str) -> int:
    """Words of `markdown` a teacher reads aloud: all but what is folded in `<details>`."""
    return len(re.sub(r"<details>.*?</details>", " ", markdown, flags=re.S).split())


def cell_key(cell: nbformat.NotebookNode | str) -> str:
    source = cell if isinstance(cell, str) else cell.source
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def shows(source: str) -> str | None:
    """What a code cell puts on the screen for the teacher to explain: "figure" where its last
    statement is an expression (Jupyter displays its value: a figure, a table, a widget), "printed"
    where it prints, else None."""
    body = ast.parse(source).body
    if body and isinstance(body[-1], ast.Expr) and not _is_print(body[-1].value):
        return "figure"
    return "printed" if any(_is_print(node) for node in ast.walk(ast.Module(body, []))) else None


def _is_print(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"


@dataclass(frozen=True)
class Need:
    words: int
    run_s: float
    exercise_min: float
    unmeasured: tuple[str, ...]  # in-class code cells ("cell 4") or exercises with no time for their source
    figures: int = 0  # in-class cells that display a figure, table or widget
    printed: int = 0  # in-class cells that print lines
    regeneration_s: float = 0.0  # the exercises' generations, measured

    @property
    def reading_min(self) -> float:
        return self.words / WORDS_PER_MINUTE

    @property
    def shown_min(self) -> float:
        return self.figures * FIGURE_MINUTES + self.printed * PRINTED_MINUTES

    @property
    def minutes(self) -> float:
        return self.reading_min + self.shown_min + (self.run_s + self.regeneration_s) / 60 + self.exercise_min


def cell_times(stem: str, timings: dict) -> list[tuple[int, float | None]]:
    """(index, seconds measured for the cell as it now reads, or None) of each in-class code cell."""
    measured = timings.get("notebooks", {}).get(stem, {})
    return [(i, measured.get(cell_key(c))) for i, c in enumerate(in_class_cells(stem)) if c.cell_type == "code"]


def regeneration_times(slot: Slot, timings: dict) -> list[tuple[str, float | None]]:
    """(what, seconds measured for its code as it now reads, or None) of each of the slot's regenerations."""
    measured = timings.get("regenerations", {}).get(slot.what, {})
    return [(what, measured.get(cell_key(code))) for what, code in slot.regenerations]


def need(slot: Slot, timings: dict) -> Need:
    exercise = sum(m for _, m in slot.exercises)
    if slot.notebook is None:
        return Need(0, 0.0, exercise, ())
    cells = in_class_cells(slot.notebook)
    words = sum(read_aloud(c.source) for c in cells if c.cell_type == "markdown")
    shown = [shows(c.source) for c in cells if c.cell_type == "code"]
    times = cell_times(slot.notebook, timings)
    again = regeneration_times(slot, timings)
    unmeasured = tuple(f"cell {i}" for i, s in times if s is None) + tuple(w for w, s in again if s is None)
    return Need(words, sum(s or 0.0 for _, s in times), exercise, unmeasured, shown.count("figure"),
                shown.count("printed"), sum(s or 0.0 for _, s in again))  # fmt: skip


def plan_markdown(timings: dict) -> str:
    rows = [
        "| minutes | slot | in class | reading | shown | running | exercises | needs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    start = 0
    total = 0.0
    for slot in PLAN:
        n = need(slot, timings)
        total += n.minutes
        reading = f"{n.words} words, {n.reading_min:.1f} min" if slot.notebook else "-"
        shown = f"{n.figures} figures or tables, {n.printed} printed: {n.shown_min:g} min" if slot.notebook else "-"
        running = f"{n.run_s:.0f} s" if slot.notebook else "-"
        if n.regeneration_s:
            running += f", and {n.regeneration_s:.0f} s of the exercises' generations"
        exercises = "; ".join(f"{what} ({m:g} min)" for what, m in slot.exercises) or "-"
        name = f"`{slot.what}`" if slot.notebook else slot.what
        in_class = slot.in_class + (f" (before class: {slot.before})" if slot.before else "")
        rows.append(
            f"| {start}-{start + slot.minutes} | {name} | {in_class} | {reading} | {shown} | {running} | {exercises} "
            f"| {n.minutes:.1f} min |"
        )
        start += slot.minutes
    rows.append(f"| **{start}** | | | | | | | **{total:.1f} min** |")
    cells = ["| notebook | each in-class code cell: its number (from 0) and seconds |", "|---|---|"]
    for slot in PLAN:
        if slot.notebook:
            times = ", ".join(
                f"{i}: {s:.1f} s" if s is not None else f"{i}: not measured"
                for i, s in cell_times(slot.notebook, timings)
            )
            cells.append(f"| {slot.notebook} | {times} |")
    machine = timings.get("machine", "not measured")
    return "\n".join(
        [
            BEGIN,
            "",
            *rows,
            "",
            f"Reading is the in-class markdown a teacher reads aloud, outside the folded parts, at "
            f"{WORDS_PER_MINUTE} words a minute; shown is {FIGURE_MINUTES:g} minute for each figure, table or "
            f"widget an in-class cell displays and {PRINTED_MINUTES:g} for each that prints lines; running is "
            f"the measured time of the in-class cells and of the generations the in-class exercises make, "
            f"after `make class`, on {machine} ({timings.get('date', '')}); a notebook's cells from its "
            f"`{AFTER_CLASS}` heading on are homework. The slots take {start} of the class's {CLASS_MINUTES} "
            f"minutes ({CLASS_MINUTES - start} of slack); what they need adds up to {total:.1f}, which leaves "
            f"each slot time for questions. Later, or as homework: " + ", ".join(f"`{s}`" for s in LATER) + ".",
            "",
            *cells,
            "",
            END,
        ]
    )


# What `load_model()` picks on a GPU, forced on the CPU: "auto" (and None) resolve to bfloat16, as on
# CUDA, for every model a notebook loads without naming its dtype (tests/test_notebooks.py runs it too).
AS_ON_A_GPU = """\
import torch
import hdlib.models.loading as _loading
_resolve = _loading.resolve_dtype
_loading.resolve_dtype = lambda dtype, device: torch.bfloat16 if dtype in (None, "auto") else _resolve(dtype, device)
"""
BFLOAT16_LIMIT_S = 180  # each notebook, top to bottom, with the model in bfloat16 on the CPU


def run_cells(stem: str, first: str = "", then: tuple[str, ...] = ()) -> dict[str, float]:
    """The notebook run in a kernel, top to bottom (after the code `first`, if any), then the code of
    `then` in the same kernel: each code cell's seconds, keyed by its source (`cell_key`)."""
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4)
    if first:
        nb.cells.insert(0, nbformat.v4.new_code_cell(first))
    nb.cells.extend(nbformat.v4.new_code_cell(code) for code in then)
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}})
    times: dict[str, float] = {}
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            if cell.cell_type == "code":
                start = time.perf_counter()
                client.execute_cell(cell, index)
                times[cell_key(cell)] = round(time.perf_counter() - start, 2)
    return times


def measure() -> dict:
    """The in-class notebooks' cells, timed as they run in class (warm caches, the default dtype),
    and every notebook's whole run with the model in bfloat16."""
    sys.path.insert(0, str(ROOT))
    from hdlib.models.cpu import describe_machine, machine_label

    out: dict = {
        "machine": machine_label(describe_machine()),
        "date": time.strftime("%Y-%m-%d"),
        "notebooks": {},
        "regenerations": {},
        "bfloat16_s": {},
    }
    for slot in PLAN:
        if slot.notebook is not None:
            codes = tuple(code for _, code in slot.regenerations)
            times = run_cells(slot.notebook, then=codes)
            again = {cell_key(code): times.pop(cell_key(code)) for code in codes}
            out["notebooks"][slot.notebook] = times
            if again:
                out["regenerations"][slot.what] = again
            took = f"{sum(times.values()):.1f} s, exercises {sum(again.values()):.1f} s"
            print(f"{slot.notebook}: {took}", file=sys.stderr)
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        out["bfloat16_s"][path.stem] = round(sum(run_cells(path.stem, AS_ON_A_GPU).values()), 1)
        print(f"{path.stem} in bfloat16: {out['bfloat16_s'][path.stem]} s", file=sys.stderr)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--measure", action="store_true", help=f"run the notebooks and write {TIMINGS.name}")
    parser.add_argument("--write", action="store_true", help="write the plan into docs/notebooks.md")
    args = parser.parse_args()
    if args.measure:
        TIMINGS.write_text(json.dumps(measure(), indent=1) + "\n", encoding="utf-8")
    timings = json.loads(TIMINGS.read_text(encoding="utf-8")) if TIMINGS.exists() else {}
    plan = plan_markdown(timings)
    if args.write:
        doc = DOC.read_text(encoding="utf-8")
        if BEGIN not in doc or END not in doc:
            raise SystemExit(f"{DOC} has no plan markers ({BEGIN} ... {END})")
        head, rest = doc.split(BEGIN, 1)
        DOC.write_text(head + plan + rest.split(END, 1)[1], encoding="utf-8")
    print(plan)
    return 0


if __name__ == "__main__":
    sys.exit(main())
