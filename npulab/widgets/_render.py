"""Figures rendered to PNG bytes for an ``ipywidgets.Image``: no ipympl, no display backend.

A :class:`PngFigure` owns a matplotlib Figure that pyplot does not know about (so a notebook
never shows it twice). With ``animated`` artists it blits: the rest of the figure is drawn once
and kept as a background, and each frame redraws only the artists that move.
"""
from __future__ import annotations

import io

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

DPI = 80


def new_figure(width: float, height: float) -> Figure:
    """A Figure (inches) outside pyplot, with an Agg canvas."""
    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def png_bytes(rgba: np.ndarray) -> bytes:
    """Encode an (h, w, 4) uint8 image as PNG (fast compression: frames change every step)."""
    from PIL import Image
    out = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(rgba[..., :3])).save(out, format="png", compress_level=1)
    return out.getvalue()


class PngFigure:
    """fig: a Figure made by :func:`new_figure`. animated: artists that change between frames
    (drawn over a cached background); empty means every frame is a full draw."""

    def __init__(self, fig: Figure, animated=()):
        self.fig, self.animated = fig, list(animated)
        for a in self.animated:
            a.set_animated(True)
        self._background = None

    def invalidate(self) -> None:
        """Something outside the animated artists changed: the next frame redraws everything."""
        self._background = None

    def render(self) -> bytes:
        """Draw the current state and return it as PNG bytes."""
        canvas = self.fig.canvas
        if not self.animated:
            canvas.draw()
        else:
            if self._background is None:
                canvas.draw()                                   # animated artists are skipped
                self._background = canvas.copy_from_bbox(self.fig.bbox)
            else:
                canvas.restore_region(self._background)
            for a in self.animated:
                self.fig.draw_artist(a)
        return png_bytes(np.asarray(canvas.buffer_rgba()))
