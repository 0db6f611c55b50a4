"""The buffer occupancy widget: address strips of L1, L0A, L0B, L0C and UB at the cycle the
slider (or the play button) picks, above each buffer's occupancy over the whole run.

A slider step only moves the time: the live allocations come from the precomputed step
functions of :class:`npulab.plot.occupancy.OccupancyData`, and only the strips, the time line and
the labels are redrawn over a cached background (blitting), then sent as a PNG.
"""
from __future__ import annotations

import ipywidgets as W

from ..plot.occupancy import OccupancyData, OccupancyFigure, figure_height, used_buffers
from ..sim.memory import fmt_bytes
from ._render import PngFigure, new_figure

PLAY_FRAMES = 120          # the play button crosses the run in about this many steps


def peaks_html(data: OccupancyData) -> str:
    """One line per buffer the kernel used: its peak, as bytes and % of capacity, and when."""
    parts = [f"<b>{b}</b> peak {fmt_bytes(p)} of {fmt_bytes(c)} ({100.0 * p / max(1, c):.0f}%) "
             f"at cycle {t:,}" for b, (p, t, c) in data.peaks().items() if p > 0]
    return "<br>".join(parts) or "no buffer was allocated on this core"


class OccupancyWidget(W.VBox):
    """trace: the Trace of a launch. core: the core shown first (a dropdown switches cores when
    the launch used several). buffers: which buffers (default all five; ``"used"`` = only those
    the kernel allocated).

    Children: a core dropdown, a play button and a cycle slider, the picture, the peaks.
    ``show(t)`` moves the time from code (what the slider calls).
    """

    def __init__(self, trace, core: int = 0, *, buffers=None):
        self.trace, self.buffers = trace, buffers
        core = trace.check_core(core, "occupancy")
        ncores = len(trace.core_cycles)
        self.core_select = W.Dropdown(options=[(f"core {c}", c) for c in range(ncores)], value=core,
                                      description="core", layout=W.Layout(width="150px"))
        self.slider = W.IntSlider(min=0, max=1, value=0, description="cycle",
                                  layout=W.Layout(width="600px"))
        self.play = W.Play(min=0, max=1, interval=120, description="play")
        W.jslink((self.play, "value"), (self.slider, "value"))
        self.image = W.Image(format="png")
        self.peaks = W.HTML()
        self._load(core)
        self.slider.observe(lambda ch: self.show(ch["new"]), names="value")
        self.core_select.observe(lambda ch: self._load(ch["new"]), names="value")
        super().__init__([W.HBox([self.core_select, self.play, self.slider]), self.image, self.peaks])

    def _load(self, core: int) -> None:
        self.data = OccupancyData(self.trace, core)
        fig = new_figure(9, figure_height(len(used_buffers(self.data, self.buffers))))
        self.view = OccupancyFigure(self.data, fig=fig, buffers=self.buffers)
        self.png = PngFigure(fig, self.view.animated)
        end = max(1, self.data.cycles)
        self.play.max = self.slider.max = end
        self.play.step = max(1, end // PLAY_FRAMES)
        self.peaks.value = peaks_html(self.data)
        self.show(min(self.slider.value, end))

    def show(self, t: int) -> None:
        """Draw the buffers at cycle ``t``."""
        self.view.set_time(t)
        self.image.value = self.png.render()


def occupancy(trace, core: int = 0, *, buffers=None) -> OccupancyWidget:
    """The buffer occupancy widget of ``trace`` (see :class:`OccupancyWidget`)."""
    return OccupancyWidget(trace, core, buffers=buffers)
