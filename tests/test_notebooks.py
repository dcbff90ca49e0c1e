"""Every notebook executes end to end in a real kernel, on the CPU, with the packaged model."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from hdlib.tiers import Tier
from scripts.lesson_plan import AS_ON_A_GPU

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
STRIP = ROOT / "scripts" / "strip_notebooks.py"
KERNEL = {"display_name": "Python 3", "language": "python", "name": "python3"}


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path):
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors


# The bfloat16 run asks whether a notebook assumes float32, not what its answers say (the float32 run,
# in the browser test or test_notebook_runs, and test_packaged's claims do): its answers are cut to
# SHORT tokens and its sampling demonstration to DRAWS draws, which spares CI some 2 minutes.
SHORT, DRAWS = 12, 500
LENGTHS = re.compile(r"""(max_new_tokens["']?\s*[=:]\s*)(\d+)""")


def shortened(source: str) -> str:
    """A cell's code with every answer at most SHORT tokens long and `N = 5000` draws cut to DRAWS."""
    source = LENGTHS.sub(lambda m: f"{m.group(1)}{min(int(m.group(2)), SHORT)}", source)
    return re.sub(r"^N = \d+", f"N = {DRAWS}", source, flags=re.M)


def test_the_bfloat16_run_cuts_every_answer_and_the_draws_short():
    assert (
        shortened("g = generate(lm, p, max_new_tokens=96, budget=16)")
        == "g = generate(lm, p, max_new_tokens=12, budget=16)"
    )
    assert shortened('x = {"max_new_tokens": 24}\nN = 5000  # draws') == 'x = {"max_new_tokens": 12}\nN = 500  # draws'
    assert shortened("f(max_new_tokens=4)") == "f(max_new_tokens=4)"
    cut = [p.stem for p in NOTEBOOKS for c in nbformat.read(p, as_version=4).cells if shortened(c.source) != c.source]
    assert {"01_speculative_decoding", "04_order_ablation", "06_lossless_sampling"} <= set(cut)


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_with_the_model_in_bfloat16(path):
    """No notebook assumes float32: each runs end to end with its model loaded in bfloat16, as
    `load_model()` loads it on a GPU, its answers cut short (`shortened`)."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.source = shortened(cell.source)
    nb.cells.insert(0, nbformat.v4.new_code_cell(AS_ON_A_GPU))
    nb.cells.append(nbformat.v4.new_code_cell("print(lm.model.dtype)"))
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, [(e["ename"], e["evalue"]) for e in errors]
    assert "torch.bfloat16" in "".join(o.get("text", "") for o in nb.cells[-1].outputs)


def test_there_are_notebooks():
    """notebooks/ holds the notebooks docs/notebooks.md's lesson table lists, no more and no fewer."""
    listed = re.findall(r"^\| `(\w+)` \|", (ROOT / "docs" / "notebooks.md").read_text(encoding="utf-8"), re.M)
    assert listed, "docs/notebooks.md lists no notebook"
    assert sorted(listed) == [p.stem for p in NOTEBOOKS], "notebooks/ and docs/notebooks.md's table disagree"


MAX_CELL_LINES = 15  # a cell a class reads at a glance; the logic belongs in hdlib


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebooks_are_thin(path):
    nb = nbformat.read(path, as_version=4)
    long = [(i, len(c.source.splitlines())) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    assert not [(i, n) for i, n in long if n > MAX_CELL_LINES], f"code cells over {MAX_CELL_LINES} lines"
    assert nb.cells[0].cell_type == "markdown" and nb.cells[-1].cell_type == "markdown"
    assert "Recap" in nb.cells[-1].source or "Recap" in "".join(c.source for c in nb.cells[-3:])


# A tensor moved by hand (`.cpu()`, `.to(...)`) or a model called on one made in the cell assumes a
# device; the library's functions take the model where it is (a GPU's, in bfloat16, or the CPU's).
BY_HAND = re.compile(r"\.(cpu|cuda|to)\(|\bmodel\(|torch\.tensor\(\[ids")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_notebook_moves_tensors_between_devices_by_hand(path):
    nb = nbformat.read(path, as_version=4)
    found = [(i, line) for i, c in enumerate(nb.cells) if c.cell_type == "code" for line in c.source.splitlines()
             if BY_HAND.search(line.split("#")[0])]  # fmt: skip
    assert not found, f"cells that assume a device: {found}"


def strip_notebooks(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(STRIP), *args], check=False, capture_output=True, text=True)


def test_committed_notebooks_are_stripped():
    """No outputs, execution counts or volatile metadata: `python scripts/strip_notebooks.py` cleans them."""
    done = strip_notebooks("--check")
    assert done.returncode == 0, done.stderr


def test_strip_removes_outputs_counts_and_volatile_metadata(tmp_path):
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": KERNEL, "widgets": {"state": {}}})
    cell = nbformat.v4.new_code_cell(
        "1 + 1",
        execution_count=3,
        metadata={"execution": {"iopub.status.idle": "2026-11-30T09:00:00Z"}, "tags": ["keep"]},
    )
    cell.outputs = [nbformat.v4.new_output("execute_result", {"text/plain": "2"}, execution_count=3)]
    nb.cells = [nbformat.v4.new_markdown_cell("# title"), cell]
    path = tmp_path / "dirty.ipynb"
    nbformat.write(nb, path)

    assert strip_notebooks("--check", str(path)).returncode == 1
    assert strip_notebooks(str(path)).returncode == 0
    assert strip_notebooks("--check", str(path)).returncode == 0
    clean = json.loads(path.read_text())
    code = clean["cells"][1]
    assert (code["outputs"], code["execution_count"], code["metadata"]) == ([], None, {"tags": ["keep"]})
    assert clean["metadata"] == {"kernelspec": KERNEL}
    assert nbformat.validate(nbformat.reads(path.read_text(), as_version=4)) is None


# ---------------------------------------------------------------- widgets in a live kernel
# A page reloaded while the kernel runs redraws every widget an output shows from the kernel's live
# widgets. A widget closed in the kernel stays in the saved output and comes back as "Error displaying
# widget: model not found" (jupyterlab-manager's renderer, once the manager is restored). tqdm closes a
# notebook progress bar that finishes with leave=False: so hdlib's bars are left, as finished bars.

TESTS = Path(__file__).resolve().parent
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def run_cells(*sources: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(TESTS)}}).execute()
    return nb


def test_a_generation_shows_in_a_notebook_as_its_answer_coloured_by_tier_with_its_summary():
    nb = run_cells(
        "from support.tiny import tiny_llama\nimport hdlib\n"
        "hdlib.run(tiny_llama(), [5, 6, 5, 6, 5], hdlib.Drafter([hdlib.ContextTier()]), hdlib.DecodeSettings(6))"
    )
    shown = nb.cells[0].outputs[0]["data"]["text/html"]
    assert f"color:{Tier.CONTEXT.color}" in shown and "new_tokens" in shown


def test_a_finished_progress_bar_stays_a_live_widget():
    nb = run_cells(
        "from support.tiny import tiny_llama\nfrom hdlib.engine.forward_time import measure_forward\n"
        "from hdlib.presentation import progress_bar\n"
        "measure_forward(tiny_llama(), context_len=8, max_k=3, progress=progress_bar('measuring forward time'));",
        "import ipywidgets\nprint(' '.join(ipywidgets.Widget._active_widgets))",
    )
    shown = {o["data"][WIDGET_VIEW]["model_id"] for o in nb.cells[0].outputs if WIDGET_VIEW in o.get("data", {})}
    alive = set(nb.cells[1].outputs[0]["text"].split())
    assert shown, "measure_forward showed no progress bar in the notebook"
    assert shown <= alive, "a widget the output shows was closed in the kernel: a reloaded page cannot draw it"
