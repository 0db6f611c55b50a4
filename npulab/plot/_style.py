"""Shared look of the npulab views: a colour per pipe, a colour per buffer owner, the colours of
the layout pictures, a new Axes when none is given, rectangle vertices in bulk (one PolyCollection instead of a patch per bar, so 100k bars draw quickly)."""
from __future__ import annotations

import re
import zlib

import numpy as np

from ..sim.isa import NUM_PIPES, TRACK_NAMES, Pipe

#: msprof track names, in row order (top to bottom).
TRACKS = [TRACK_NAMES[Pipe(p)] for p in range(NUM_PIPES)]

#: One colour per pipe (index = Pipe value).
PIPE_COLORS = ["#7f7f7f",   # SCALAR
               "#9467bd",   # MTE1
               "#1f77b4",   # MTE2
               "#2ca02c",   # MTE3
               "#d62728",   # CUBE
               "#ff7f0e",   # VECTOR
               "#8c564b"]   # FIXP

#: The buffers of one AI core, in the order the views stack them.
BUFFERS = ("L1", "L0A", "L0B", "L0C", "UB")

#: The layout pictures (:mod:`.formats`): blocks of storage (NZ fractals, C0 channel blocks) on
#: a pale map, the input channels of an img2col matrix on a qualitative one, block borders in
#: black, where the zero padding starts in red.
BLOCK_CMAP = "Pastel1"
CHANNEL_CMAP = "Set2"
BORDER_COLOR = "black"
PAD_COLOR = "red"

_OWNER_PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
                  "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac", "#86bcb6", "#d37295"]


def new_axes(ax, figsize):
    """``ax``, or the Axes of a new figure of ``figsize`` (constrained layout) when it is None."""
    if ax is None:
        import matplotlib.pyplot as plt
        _, ax = plt.subplots(figsize=figsize, layout="constrained")
    return ax


def owner_base(owner: str) -> str:
    """'in_x[1]' -> 'in_x': the queue a slot belongs to (slots share a colour)."""
    return re.sub(r"\[\d+\]$", "", owner)


def owner_color(owner: str) -> str:
    """A stable colour for a queue or tensor name (same name, same colour, every run)."""
    return _OWNER_PALETTE[zlib.crc32(owner_base(owner).encode()) % len(_OWNER_PALETTE)]


def owner_colors(owners) -> dict:
    """{queue name: colour}, palette colours in order of first appearance (distinct for the
    first dozen queues; ``owner_color`` beyond that)."""
    out: dict[str, str] = {}
    for o in owners:
        base = owner_base(o)
        if base not in out:
            out[base] = _OWNER_PALETTE[len(out)] if len(out) < len(_OWNER_PALETTE) else owner_color(base)
    return out


def rect_verts(x0, x1, y0, y1) -> np.ndarray:
    """Vertices (n, 4, 2) of n axis-aligned rectangles [x0, x1] x [y0, y1] (arrays or scalars
    broadcast to a common length n)."""
    x0, x1, y0, y1 = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in (x0, x1, y0, y1)))
    v = np.empty((x0.size, 4, 2))
    v[:, 0, 0] = x0; v[:, 0, 1] = y0
    v[:, 1, 0] = x0; v[:, 1, 1] = y1
    v[:, 2, 0] = x1; v[:, 2, 1] = y1
    v[:, 3, 0] = x1; v[:, 3, 1] = y0
    return v


def merge_intervals(starts: np.ndarray, ends: np.ndarray, min_gap: float):
    """Join sorted intervals separated by less than ``min_gap`` (e.g. one pixel): what the
    eye sees at this zoom, with far fewer rectangles. Returns (starts, ends)."""
    if len(starts) < 2:
        return starts, ends
    ends_run = np.maximum.accumulate(ends)
    breaks = np.flatnonzero(starts[1:] - ends_run[:-1] >= min_gap) + 1
    first = np.concatenate(([0], breaks))
    last = np.concatenate((breaks - 1, [len(starts) - 1]))
    return starts[first], ends_run[last]
