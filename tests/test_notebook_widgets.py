"""A page reloaded while the kernel runs redraws every widget an output shows from the kernel's live
widgets. A widget closed in the kernel stays in the saved output and comes back as "Error displaying
widget: model not found" (jupyterlab-manager's renderer, once the manager is restored). tqdm closes a
notebook progress bar that finishes with leave=False: so hdlib's bars are left, as finished bars.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

TESTS = Path(__file__).resolve().parent
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def run_cells(*sources: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(TESTS)}}).execute()
    return nb


def test_a_finished_progress_bar_stays_a_live_widget():
    nb = run_cells(
        "from tiny import tiny_llama\nfrom hdlib.engine.forward_time import measure_forward\n"
        "measure_forward(tiny_llama(), context_len=8, max_k=3);",
        "import ipywidgets\nprint(' '.join(ipywidgets.Widget._active_widgets))",
    )
    shown = {o["data"][WIDGET_VIEW]["model_id"] for o in nb.cells[0].outputs if WIDGET_VIEW in o.get("data", {})}
    alive = set(nb.cells[1].outputs[0]["text"].split())
    assert shown, "measure_forward showed no progress bar in the notebook"
    assert shown <= alive, "a widget the output shows was closed in the kernel: a reloaded page cannot draw it"
