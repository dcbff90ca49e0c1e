"""A plotly figure among widgets: `FigureOutput`, an ipywidgets `Output` whose one output is the figure,
drawn by JupyterLab's own plotly renderer and replaced whole when it changes (why not a `FigureWidget`:
the class's docstring). The step-through and the step mechanics show each of their figures in one.
"""

from __future__ import annotations

import json

import ipywidgets as widgets
import plotly.graph_objects as go
import plotly.io as pio

PLOTLY_MIME = "application/vnd.plotly.v1+json"  # what JupyterLab's plotly renderer draws


class FigureOutput:
    """A plotly figure among widgets: `show(fig)` replaces it whole, `figure` is the one on show.

    Not a `FigureWidget`. Since plotly 6 that is an anywidget carrying plotly's 5 MB bundle, loaded
    anew for every figure; after a page reload anywidget gives each figure 2 s to load it, and on a
    slow machine the widgets came back empty ("[anywidget] Failed to initialize model", "widget model
    not found"). Here the figure is an Output widget's one output, of plotly's own mime type: the
    renderer JupyterLab already has draws it, a reloaded page draws it again from the widget's state,
    and an update is one message with nothing left of the figure before it. (That renderer keeps a
    PNG of each plot it drew: a second view of the widget shows the picture until the mouse comes
    over it, then the plot.)"""

    def __init__(self) -> None:
        self.widget = widgets.Output()
        self.figure = go.Figure()

    def show(self, fig: go.Figure) -> None:
        self.figure = fig
        bundle = {PLOTLY_MIME: {**json.loads(pio.to_json(fig, validate=False)), "config": {"displaylogo": False}}}
        bundle["text/plain"] = f"<plotly figure: {fig.layout.title.text or 'untitled'}>"
        self.widget.outputs = ({"output_type": "display_data", "data": bundle, "metadata": {}},)

    def clear(self) -> None:
        """Nothing on show (a game holds the figure back): the widget empty, `figure` an empty one."""
        self.figure = go.Figure()
        self.widget.outputs = ()
