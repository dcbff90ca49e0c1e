"""The machinery of one step as a widget: `StepMechanics` shows a generation's draft tree, tree attention
mask, position ids and cache compaction (`hdlib.viz.tree`, `hdlib.viz.mechanics`), one step at a time on
a slider.
"""

from __future__ import annotations

import ipywidgets as widgets

from hdlib.engine.trace import Generation
from hdlib.errors import HDError
from hdlib.viz.figure_output import FigureOutput
from hdlib.viz.generation import TokenLabel
from hdlib.viz.mechanics import attention_mask_figure, cache_compaction_figure, position_ids_figure
from hdlib.viz.tree import draft_tree_figure


class StepMechanics:
    """The tree attention mask, position ids and cache compaction of one step of `gen`, with a
    step slider (starting at the step with the most drafts)."""

    def __init__(self, gen: Generation, label: TokenLabel | None = None, past_shown: int = 4) -> None:
        if not gen.steps:
            raise HDError("the generation has no steps")
        self.gen, self.label, self.past_shown = gen, label, past_shown
        biggest = max(range(len(gen.steps)), key=lambda i: gen.steps[i].tree.n_drafted)
        self.step = widgets.IntSlider(
            value=biggest, min=0, max=len(gen.steps) - 1, description="step", continuous_update=False
        )
        self.tree_fig, self.mask_fig, self.positions_fig, self.cache_fig = (FigureOutput() for _ in range(4))
        self.step.observe(lambda change: self.refresh(), names="value")
        figures = [self.tree_fig, self.mask_fig, self.positions_fig, self.cache_fig]
        self.widget = widgets.VBox([self.step, *(f.widget for f in figures)])
        self.refresh()

    def refresh(self) -> None:
        step = self.gen.steps[self.step.value]
        self.tree_fig.show(draft_tree_figure(step, self.label))
        self.mask_fig.show(attention_mask_figure(step, past_shown=self.past_shown, label=self.label))
        self.positions_fig.show(position_ids_figure(step, label=self.label))
        self.cache_fig.show(cache_compaction_figure(step, self.past_shown, self.label))

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)
