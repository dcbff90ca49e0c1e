"""The class plan of docs/notebooks.md, computed: what each slot of the lesson needs in minutes.

A slot's need is its reading (the words of its in-class markdown a teacher reads aloud, at
`WORDS_PER_MINUTE`; what is folded away in `<details>` is not read aloud), the measured run time of
its in-class code cells, and the minutes it gives its exercises. A notebook's in-class cells are
those before its `## After class` heading (all of them where it has none). The run times are
measured on warm caches (after `make class`) by running each notebook in a kernel, cell by cell, and
kept with the machine in `TIMINGS`; a cell whose source changed has no measured time until it is
measured again.

    python -m scripts.lesson_plan              # print the plan (markdown)
    python -m scripts.lesson_plan --measure    # run the notebooks, record each cell's seconds
    python -m scripts.lesson_plan --write      # write the plan into docs/notebooks.md

tests/test_lesson_plan.py checks that the committed plan is this one, that every in-class cell was
measured as it now reads, and that the plan fits its time.
"""

from __future__ import annotations

import argparse
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
WORDS_PER_MINUTE = 180  # reading aloud, slowly enough for a class to follow
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


PLAN = (
    Slot(5, "00_quickstart", "run the three cells; read the coloured answer, MAT and speedup", (), "00_quickstart"),
    Slot(
        15,
        "01_speculative_decoding",
        "draft and verify, side by side; one step up close; the cost model measured here",
        (("exercise 2: is HD lossless with one poor tier", 3),),
        "01_speculative_decoding",
    ),
    Slot(
        10,
        "02_three_databases",
        "what each tier drafts here; the merged trie; the tiers as a memory hierarchy",
        (("exercise 2: a budget of 4", 2),),
        "02_three_databases",
    ),
    Slot(10, "card game", "the printed card game (`make class`): play CMS, then SCM; count", (("the game", 8),)),
    Slot(
        17,
        "03_step_through",
        "step through at budget 4 against auto; the predict game on the teacher's steps",
        (("the predict game, five steps", 7), ("exercise 1: the order at each budget", 2)),
        "03_step_through",
    ),
    Slot(
        17,
        "04_order_ablation",
        "the order ablation against the paper's; the paper beside the kit",
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


def cell_key(cell: nbformat.NotebookNode) -> str:
    return hashlib.sha256(cell.source.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Need:
    words: int
    run_s: float
    exercise_min: float
    unmeasured: tuple[int, ...]  # in-class code cells with no time measured for their source

    @property
    def reading_min(self) -> float:
        return self.words / WORDS_PER_MINUTE

    @property
    def minutes(self) -> float:
        return self.reading_min + self.run_s / 60 + self.exercise_min


def cell_times(stem: str, timings: dict) -> list[tuple[int, float | None]]:
    """(index, seconds measured for the cell as it now reads, or None) of each in-class code cell."""
    measured = timings.get("notebooks", {}).get(stem, {})
    return [(i, measured.get(cell_key(c))) for i, c in enumerate(in_class_cells(stem)) if c.cell_type == "code"]


def need(slot: Slot, timings: dict) -> Need:
    exercise = sum(m for _, m in slot.exercises)
    if slot.notebook is None:
        return Need(0, 0.0, exercise, ())
    cells = in_class_cells(slot.notebook)
    words = sum(read_aloud(c.source) for c in cells if c.cell_type == "markdown")
    times = cell_times(slot.notebook, timings)
    return Need(words, sum(s or 0.0 for _, s in times), exercise, tuple(i for i, s in times if s is None))


def plan_markdown(timings: dict) -> str:
    rows = [
        "| minutes | slot | in class | reading | running | exercises | needs |",
        "|---|---|---|---|---|---|---|",
    ]
    start = 0
    total = 0.0
    for slot in PLAN:
        n = need(slot, timings)
        total += n.minutes
        reading = f"{n.words} words, {n.reading_min:.1f} min" if slot.notebook else "-"
        running = f"{n.run_s:.0f} s" if slot.notebook else "-"
        exercises = "; ".join(f"{what} ({m:g} min)" for what, m in slot.exercises) or "-"
        name = f"`{slot.what}`" if slot.notebook else slot.what
        rows.append(
            f"| {start}-{start + slot.minutes} | {name} | {slot.in_class} | {reading} | {running} | {exercises} "
            f"| {n.minutes:.1f} min |"
        )
        start += slot.minutes
    rows.append(f"| **{start}** | | | | | | **{total:.1f} min** |")
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
            f"{WORDS_PER_MINUTE} words a minute; running is the measured time of the in-class cells, "
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


def run_cells(stem: str, first: str = "") -> dict[str, float]:
    """The notebook run in a kernel, top to bottom (after the code `first`, if any): each code
    cell's seconds, keyed by its source (`cell_key`)."""
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4)
    if first:
        nb.cells.insert(0, nbformat.v4.new_code_cell(first))
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
        "bfloat16_s": {},
    }
    for slot in PLAN:
        if slot.notebook is not None:
            out["notebooks"][slot.notebook] = run_cells(slot.notebook)
            print(f"{slot.notebook}: {sum(out['notebooks'][slot.notebook].values()):.1f} s", file=sys.stderr)
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
