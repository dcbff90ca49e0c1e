"""Redraw the README's picture, docs/images/draft_tree.png: one step of HD on the packaged model.

    .venv/bin/python scripts/readme_figure.py [--out docs/images/draft_tree.png]

The default tiers answer a question over documents (the project's prompt "11", where every tier
drafts) at a fixed budget of 16; the step that shows most of the machinery (`viz.showcase_step`) is
drawn by `viz.draft_tree_figure` and photographed by headless Chromium (`/usr/bin/chromium`, as in
the browser test). Greedy decoding is deterministic, so the same model draws the same tree.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from pathlib import Path

import hdlib
from hdlib import viz

ROOT = Path(__file__).resolve().parents[1]
WIDTH, HEIGHT = 1000, 520


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs/images/draft_tree.png")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = parser.parse_args()
    lm = hdlib.load_model()
    prompts = viz.prompt_choices()
    prompt = prompts[next(label for label in prompts if label.startswith("11 "))]
    gen = hdlib.generate(lm, prompt, max_new_tokens=64, budget=16)
    step = viz.showcase_step(gen)
    fig = viz.draft_tree_figure(step, viz.token_labeller(lm), tiers=viz.figure_tiers(gen))
    fig.update_layout(
        width=WIDTH,
        height=HEIGHT,
        title=f"Step {step.index}: {step.tree.n_drafted} drafts, "
        f"{step.n_accepted_drafts} accepted, then the model's bonus token",
    )
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "figure.html"
        fig.write_html(page, include_plotlyjs=True, full_html=True, config={"displayModeBar": False})
        args.out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [args.chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--window-size={WIDTH},{HEIGHT}", f"--screenshot={args.out.resolve()}", page.as_uri()],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
    print(f"wrote {args.out} (step {step.index} of {len(gen.steps)})")


if __name__ == "__main__":
    main()
