"""Buffer occupancy of one core: who holds which bytes of L1, L0A, L0B, L0C and UB at a cycle,
and how full each buffer is over the whole run.

``OccupancyData`` turns ``trace.allocations`` (live over [start, end)) into a step function per
buffer once (sorted event times and the bytes live after each), so the occupancy at any cycle is
one binary search and the live allocations one vectorised comparison. ``OccupancyFigure`` draws
it and moves the time with ``set_time`` without redrawing the curves; ``occupancy`` is the
one-call static picture.
"""
from __future__ import annotations

import numpy as np
from matplotlib.collections import PolyCollection

from ..errors import ArgumentError
from ..sim.memory import fmt_bytes
from ._style import BUFFERS, owner_base, owner_colors, rect_verts

MAX_STRIP_LABELS = 24     # owner labels drawn per buffer strip at most


class BufferSteps:
    """One buffer's allocations (arrays) and its occupancy step function."""

    def __init__(self, name: str, capacity: int, allocs, palette: dict):
        self.name, self.capacity = name, int(capacity)
        self.owners = [a.owner for a in allocs]
        self.start = np.array([a.start for a in allocs], dtype=np.int64)
        self.end = np.array([a.end for a in allocs], dtype=np.int64)
        self.offset = np.array([a.offset for a in allocs], dtype=np.int64)
        self.size = np.array([a.size for a in allocs], dtype=np.int64)
        self.colors = [palette[owner_base(o)] for o in self.owners]
        # step function: +size at start, -size at end; the value after all events at time t
        times = np.concatenate((self.start, self.end))
        delta = np.concatenate((self.size, -self.size))
        order = np.argsort(times, kind="stable")
        times, level = times[order], np.cumsum(delta[order])
        if len(times):
            last = np.flatnonzero(np.diff(times, append=times[-1] + 1))   # last event of each time
            self.times, self.bytes = times[last], level[last]
        else:
            self.times, self.bytes = np.zeros(0, np.int64), np.zeros(0, np.int64)
        if len(self.bytes) and self.bytes.max() > 0:
            i = int(np.argmax(self.bytes))
            self.peak, self.peak_time = int(self.bytes[i]), int(self.times[i])
        else:
            self.peak, self.peak_time = 0, 0

    def at(self, t) -> np.ndarray | int:
        """Bytes live at cycle(s) ``t`` (scalar or array)."""
        i = np.searchsorted(self.times, t, side="right") - 1
        out = np.where(i >= 0, self.bytes[np.maximum(i, 0)] if len(self.bytes) else 0, 0)
        return int(out) if np.ndim(out) == 0 else out

    def live(self, t) -> np.ndarray:
        """Indices of the allocations live at cycle ``t`` (start <= t < end)."""
        return np.flatnonzero((self.start <= t) & (t < self.end))


class OccupancyData:
    """The occupancy step functions of every buffer of one core.

    trace: a :class:`npulab.sim.trace.Trace`. core: which core (0 .. cores used - 1).
    """

    def __init__(self, trace, core: int = 0):
        core = trace.check_core(core, "occupancy")
        ncores = len(trace.core_cycles)
        self.trace, self.core = trace, core
        self.cycles = int(trace.core_cycles[core]) if ncores else 0
        mine = [a for a in trace.allocations if a.core == core]
        palette = owner_colors(a.owner for a in sorted(mine, key=lambda a: a.start))
        self.buffers = {b: BufferSteps(b, trace.capacities[b], [a for a in mine if a.buffer == b], palette)
                        for b in BUFFERS}

    def at(self, buffer: str, t) -> int:
        """Bytes of ``buffer`` live at cycle ``t`` (what the view shows; equals trace.occupancy)."""
        if buffer not in self.buffers:
            raise ArgumentError(f"occupancy: unknown buffer {buffer!r}; expected one of {BUFFERS}")
        return self.buffers[buffer].at(t)

    def peaks(self) -> dict:
        """{buffer: (peak bytes, cycle of the peak, capacity)}."""
        return {b: (s.peak, s.peak_time, s.capacity) for b, s in self.buffers.items()}


def figure_height(n_buffers: int) -> float:
    """Inches of figure that keep strips and curves readable for ``n_buffers`` strips."""
    return 1.2 + 0.6 * max(1, n_buffers) + 2.0


def used_buffers(data: "OccupancyData", buffers=None) -> list[str]:
    """The buffer names a view shows: all five (None), only those ever allocated ("used"),
    or the given ones (checked)."""
    if buffers is None:
        return list(BUFFERS)
    if isinstance(buffers, str) and buffers == "used":
        return [b for b in BUFFERS if data.buffers[b].peak > 0] or ["UB"]
    names = [buffers] if isinstance(buffers, str) else list(buffers)
    for b in names:
        if b not in data.buffers:
            raise ArgumentError(f"occupancy: unknown buffer {b!r}; expected some of {BUFFERS} or 'used'")
    return names


class OccupancyFigure:
    """The occupancy picture, with a time that can move.

    data: an :class:`OccupancyData`. fig: a matplotlib Figure to draw into (default a new one).
    buffers: which buffers to show (default all five; ``"used"`` = only those ever allocated).

    Top: a strip per buffer, x = address 0 .. capacity, a rectangle per live allocation coloured
    by its queue and labelled with its owner. Bottom: each buffer's occupancy in % of its
    capacity over the run, a vertical line at the current time, each buffer's peak in the legend.
    ``animated`` lists the artists ``set_time`` changes (for blitting).
    """

    def __init__(self, data: OccupancyData, fig=None, buffers=None):
        import matplotlib.pyplot as plt

        self.data = data
        names = used_buffers(data, buffers)
        self.names = names
        if fig is None:
            fig = plt.figure(figsize=(9, figure_height(len(names))))
        self.fig = fig
        height = fig.get_figheight()                  # margins in inches, whatever the size
        gs = fig.add_gridspec(len(names) + 1, 1, height_ratios=[0.55] * len(names) + [2.2],
                              left=0.08, right=0.74, top=1 - 0.4 / height, bottom=0.55 / height,
                              hspace=0.45)
        self.strips, self.colls, self.labels, self.fill_text = {}, {}, {}, {}
        for k, b in enumerate(names):
            s = data.buffers[b]
            ax = fig.add_subplot(gs[k])
            ax.set_xlim(0, max(1, s.capacity))
            ax.set_ylim(0, 1)
            ax.set_yticks([])
            ax.set_ylabel(b, rotation=0, ha="right", va="center", fontsize=9)
            ax.tick_params(axis="x", labelsize=7, pad=1)
            ticks = np.linspace(0, s.capacity, 5)
            ax.set_xticks(ticks, [fmt_bytes(int(v)) for v in ticks])
            ax.set_facecolor("#f4f4f4")
            coll = PolyCollection(np.zeros((0, 4, 2)), closed=True, edgecolors="white", linewidths=0.5)
            ax.add_collection(coll)
            self.colls[b] = coll
            self.labels[b] = [ax.text(0, 0.5, "", ha="center", va="center", fontsize=6, clip_on=True,
                                      visible=False) for _ in range(MAX_STRIP_LABELS)]
            self.fill_text[b] = ax.text(1.01, 0.5, "", transform=ax.transAxes, ha="left", va="center",
                                        fontsize=8)
            self.strips[b] = ax
        ax = fig.add_subplot(gs[len(names)])
        end = max(1, data.cycles)
        for b in names:
            s = data.buffers[b]
            x = np.concatenate(([0], s.times, [end]))
            y = np.concatenate(([0], s.bytes, [s.bytes[-1] if len(s.bytes) else 0]))
            ax.step(x, 100.0 * y / max(1, s.capacity), where="post", lw=1.2,
                    label=f"{b} peak {100.0 * s.peak / max(1, s.capacity):.0f}% "
                          f"({fmt_bytes(s.peak)})\nat cycle {s.peak_time:,}" if s.peak else f"{b} unused")
        ax.set_xlim(0, end)
        ax.set_ylim(0, 105)
        ax.set_ylabel("% of capacity")
        ax.set_xlabel("cycle")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        ax.grid(alpha=0.3)
        self.curve_ax = ax
        self.vline = ax.axvline(0, color="black", lw=1)
        self.title = fig.suptitle("", fontsize=10, x=0.45)
        self.animated = ([self.vline, self.title] + list(self.colls.values()) +
                         list(self.fill_text.values()) + [t for ts in self.labels.values() for t in ts])
        self.t = None
        self.set_time(0)

    def set_time(self, t) -> None:
        """Show the buffers as they are at cycle ``t``."""
        t = int(t)
        self.t = t
        for b in self.names:
            s = self.data.buffers[b]
            idx = s.live(t)
            lo, hi = s.offset[idx], s.offset[idx] + s.size[idx]
            coll = self.colls[b]
            coll.set_verts(rect_verts(lo, hi, 0.08, 0.92))
            coll.set_facecolors([s.colors[i] for i in idx] if len(idx) else "none")
            wide = np.flatnonzero(s.size[idx] >= 0.07 * s.capacity)[:MAX_STRIP_LABELS]
            for k, txt in enumerate(self.labels[b]):
                if k < len(wide):
                    i = idx[wide[k]]
                    txt.set_position(((lo[wide[k]] + hi[wide[k]]) / 2, 0.5))
                    txt.set_text(s.owners[i])
                    txt.set_visible(True)
                else:
                    txt.set_visible(False)
            used = int(s.size[idx].sum())
            self.fill_text[b].set_text(f"{fmt_bytes(used)} / {fmt_bytes(s.capacity)} "
                                       f"({100.0 * used / max(1, s.capacity):.0f}%)")
        self.vline.set_xdata([t, t])
        tr = self.data.trace
        self.title.set_text(f"{tr.chip.name}: buffers of core {self.data.core} at cycle {t:,} "
                            f"of {self.data.cycles:,}")


def occupancy(trace, core: int = 0, t: int | None = None, *, fig=None, buffers=None):
    """Draw the buffer occupancy of ``core`` at cycle ``t`` and return the Figure.

    trace: the Trace of a launch. core: which core. t: the cycle shown in the address strips
    (default: when the fullest buffer peaks). fig: a Figure to draw into. buffers: which buffers
    (default all five; ``"used"`` for only those the kernel allocated).
    """
    data = OccupancyData(trace, core)
    view = OccupancyFigure(data, fig=fig, buffers=buffers)
    if t is None:
        fullest = max(data.buffers.values(), key=lambda s: s.peak / max(1, s.capacity))
        t = fullest.peak_time
    view.set_time(t)
    return view.fig
