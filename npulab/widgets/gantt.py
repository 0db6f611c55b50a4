"""The pipe gantt widget: the static gantt with a zoomable cycle range, and a table of where
each pipe's time went in that range (working, stalled on which flag or queue, idle).

A range step updates the gantt's collections in place (:class:`npulab.plot.gantt.GanttView`),
joining bars closer than a pixel, so the cost per step is bounded by the picture's width; the
title and the pipe names are drawn once and blitted.
"""
from __future__ import annotations

import ipywidgets as W

from ..plot.gantt import GanttData, GanttView
from ..plot.idle import pipe_time, pipe_time_table
from ._render import PngFigure, new_figure


class GanttWidget(W.VBox):
    """trace: the Trace of a launch. core: the core shown first (a dropdown switches).

    Children: a core dropdown, a cycle range slider and a reset button, the gantt, the
    time-per-pipe table of the range. ``show(start, end)`` sets the range from code.
    """

    def __init__(self, trace, core: int = 0):
        self.trace = trace
        core = trace.check_core(core, "gantt")
        ncores = len(trace.core_cycles)
        self.core_select = W.Dropdown(options=[(f"core {c}", c) for c in range(ncores)], value=core,
                                      description="core", layout=W.Layout(width="150px"))
        self.range = W.IntRangeSlider(min=0, max=1, value=(0, 1), description="cycles",
                                      layout=W.Layout(width="600px"))
        self.reset = W.Button(description="whole run", layout=W.Layout(width="100px"))
        self.image = W.Image(format="png")
        self.table = W.HTML()
        fig = new_figure(10, 3.2)
        self.fig = fig
        self._load(core)
        self.range.observe(lambda ch: self.show(*ch["new"]), names="value")
        self.reset.on_click(lambda _: setattr(self.range, "value", (0, self.range.max)))
        self.core_select.observe(lambda ch: self._load(ch["new"]), names="value")
        super().__init__([W.HBox([self.core_select, self.range, self.reset]), self.image, self.table])

    def _load(self, core: int) -> None:
        self.data = GanttData(self.trace, core)
        self.fig.clear()
        self.view = GanttView(self.fig.add_subplot(), self.data)
        self.fig.subplots_adjust(left=0.09, right=0.99, top=0.9, bottom=0.2)
        self.png = PngFigure(self.fig, self.view.animated)     # only bars and the x axis redraw
        end = max(1, self.data.cycles)
        with self.range.hold_trait_notifications():
            self.range.max = end
            self.range.value = (0, end)
        self.show(0, end)

    def show(self, start: int, end: int) -> None:
        """Draw cycles [start, end] and their time-per-pipe table."""
        end = max(end, start + 1)
        self.view.set_range(start, end)
        self.image.value = self.png.render()
        self.table.value = pipe_time_table(pipe_time(self.trace, self.data.core, start, end,
                                                     data=self.data), html=True)


def gantt(trace, core: int = 0) -> GanttWidget:
    """The pipe gantt widget of ``trace`` (see :class:`GanttWidget`)."""
    return GanttWidget(trace, core)
