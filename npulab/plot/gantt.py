"""The pipe gantt of one core: a row per pipe, a bar per instruction that did work, stalls on a
flag or a queue drawn hatched and labelled, set_flag events as ticks; x in cycles.

A copy occupies its pipe only while it moves its bytes (the solid bar, ``start..busy_end``);
it then stays in flight for its start-up latency while the pipe moves the next copy. That
in-flight tail (``busy_end..end``) is a thin pale strip under the row, the tails of one pipe
joined where they overlap, so bars on one row never overlap.

``GanttData`` sorts one core's instructions per pipe once; ``gantt`` draws any cycle range of it.
Drawing is bounded by the pixels, not the trace: when a pipe has more than ``max_bars`` bars in
view, bars closer than one pixel are joined (what the eye would see anyway), so a zoom step on a
100,000-instruction trace stays cheap.
"""
from __future__ import annotations

import numpy as np
from matplotlib.collections import PolyCollection

from ..errors import ArgumentError
from ..sim.isa import NUM_PIPES, Kind
from ._style import PIPE_COLORS, TRACKS, merge_intervals, rect_verts

BAR_HEIGHT = 0.7          # of a row
WAIT_HEIGHT = 0.45
TAIL_HEIGHT = 0.12        # the in-flight strip, just under the bars
HATCH_LIMIT = 200         # above this many stalls in view, pale fill instead of hatching
MAX_LABELS = 16           # wait labels drawn at most (the widest ones in view)


class _Lane:
    """One pipe's intervals of one kind, sorted by start: starts, ends and trace row indices."""

    def __init__(self, starts, ends, rows):
        order = np.argsort(starts, kind="stable")
        self.starts, self.ends, self.rows = starts[order], ends[order], rows[order]
        self.end_max = np.maximum.accumulate(self.ends) if len(self.ends) else self.ends

    def window(self, x0: float, x1: float) -> slice:
        """The slice of intervals overlapping [x0, x1]."""
        lo = int(np.searchsorted(self.end_max, x0, side="left"))
        hi = int(np.searchsorted(self.starts, x1, side="right"))
        return slice(lo, max(lo, hi))


class GanttData:
    """One core's instructions per pipe, ready to draw.

    trace: a :class:`npulab.sim.trace.Trace`. core: which core (0 .. cores used - 1).

    ``work[p]``: WORK instructions of pipe p that occupied it (``start..busy_end``; zero-cost
    markers such as ``alloc_tensor`` without a stall have no extent and are left out).
    ``tails[p]``: their in-flight tails (``busy_end..end``, copies only). ``waits[p]``: WAIT and
    full-barrier instructions of pipe p that stalled (end > start). ``sets[p]``: cycles at which
    pipe p's set_flag instructions fired. ``active[p]``: the union of work, tails and stalls
    of pipe p as sorted disjoint (starts, ends), for :func:`npulab.plot.idle.pipe_time`.
    """

    def __init__(self, trace, core: int = 0):
        core = trace.check_core(core, "gantt")
        ncores = len(trace.core_cycles)
        self.trace, self.core = trace, core
        rows = np.flatnonzero(trace.core == core)
        pipe, kind = trace.pipe[rows], trace.kind[rows]
        start, end, busy_end = trace.start[rows], trace.end[rows], trace.busy_end[rows]
        self.work, self.tails, self.waits, self.sets, self.active = [], [], [], [], []
        for p in range(NUM_PIPES):
            on = pipe == p
            w = on & (kind == Kind.WORK) & (busy_end > start)
            t = on & (kind == Kind.WORK) & (end > busy_end)
            s = on & ((kind == Kind.WAIT) | (kind == Kind.CROSS_WAIT) | (kind == Kind.BARRIER_ALL)) & (end > start)
            self.work.append(_Lane(start[w], busy_end[w], rows[w]))
            self.tails.append(_Lane(busy_end[t], end[t], rows[t]))
            self.waits.append(_Lane(start[s], end[s], rows[s]))
            self.sets.append(np.sort(end[on & ((kind == Kind.SET) | (kind == Kind.CROSS_SET))]))
            a0 = np.concatenate((start[w], busy_end[t], start[s]))
            a1 = np.concatenate((busy_end[w], end[t], end[s]))
            order = np.argsort(a0, kind="stable")
            self.active.append(merge_intervals(a0[order], a1[order], 0))
        self.cycles = int(trace.core_cycles[core]) if ncores else 0

    def name(self, row: int) -> str:
        return self.trace.name[row]


def _check_range(start, end, cycles):
    x0 = 0 if start is None else start
    x1 = (cycles if cycles > 0 else 1) if end is None else end
    if not x1 > x0:
        raise ArgumentError(f"gantt: the cycle range needs start < end, got start={start}, end={end}")
    return float(x0), float(x1)


class GanttView:
    """A gantt drawn once into ``ax`` whose cycle range can move (``set_range``) by updating
    its collections in place: what the zoom slider of the widget calls.

    ax: the matplotlib Axes. data: a :class:`GanttData`. max_bars: per pipe and kind, above this
    many bars in view, bars closer than a pixel are joined. labels: name the stalls that are
    wide enough to hold a label.
    """

    def __init__(self, ax, data: GanttData, max_bars: int = 500, labels: bool = True):
        self.ax, self.data, self.max_bars, self.labels = ax, data, max_bars, labels
        self.colls, self.set_marks = {}, []
        for p in range(NUM_PIPES):
            for kind in ("work", "tail", "wait"):
                coll = PolyCollection(np.zeros((0, 4, 2)), closed=True)
                coll.set_label(f"{TRACKS[p]} {kind}")
                ax.add_collection(coll)
                self.colls[p, kind] = coll
            (line,) = ax.plot([], [], linestyle="none", marker="v", markersize=3, color=PIPE_COLORS[p],
                              label=f"{TRACKS[p]} set_flag")
            self.set_marks.append(line)
        self.texts = [ax.text(0, 0, "", ha="center", va="center", fontsize=6, clip_on=True, visible=False,
                              bbox=dict(boxstyle="square,pad=0.1", fc="white", ec="none", alpha=0.8))
                      for _ in range(MAX_LABELS if labels else 0)]
        ax.set_ylim(-0.6, NUM_PIPES - 0.4)
        ax.set_yticks(range(NUM_PIPES), TRACKS[::-1])
        ax.set_xlabel("cycle")
        ax.set_title(f"{data.trace.chip.name}: pipes of core {data.core} "
                     f"(solid = work, thin = copy in flight, hatched = waiting on a flag or queue, "
                     f"v = set_flag)", fontsize=9)
        ax.grid(axis="x", alpha=0.3)
        self.shown = {}          # (pipe, kind) -> (starts, ends) drawn, after any joining
        #: what set_range changes (the rest can be blitted): bars, set ticks, labels, the x axis
        self.animated = [ax.xaxis] + list(self.colls.values()) + self.set_marks + self.texts

    def set_range(self, start=None, end=None) -> None:
        """Show cycles [start, end] (default the core's whole run)."""
        data, ax = self.data, self.ax
        x0, x1 = _check_range(start, end, data.cycles)
        width_px = max(100.0, ax.get_window_extent().width)
        min_gap = (x1 - x0) / width_px
        label_rows = []
        for p in range(NUM_PIPES):
            y = NUM_PIPES - 1 - p                       # SCALAR on top
            for lane, kind in ((data.work[p], "work"), (data.tails[p], "tail"), (data.waits[p], "wait")):
                sl = lane.window(x0, x1)
                s, e = lane.starts[sl], lane.ends[sl]
                if kind == "tail":                      # tails overlap: draw their union
                    s, e = merge_intervals(s, e, min_gap if len(s) > self.max_bars else 0)
                elif len(s) > self.max_bars:
                    s, e = merge_intervals(s, e, min_gap)
                self.shown[p, kind] = (s, e)
                h = BAR_HEIGHT if kind == "work" else WAIT_HEIGHT
                few = len(s) <= HATCH_LIMIT             # outlining / hatching thousands is slow
                coll = self.colls[p, kind]
                if kind == "tail":
                    bottom = y - BAR_HEIGHT / 2
                    coll.set_verts(rect_verts(s, e, bottom - TAIL_HEIGHT, bottom))
                    coll.set_facecolor(PIPE_COLORS[p])
                    coll.set_edgecolor("none")
                    coll.set_alpha(0.4)
                    continue
                coll.set_verts(rect_verts(s, e, y - h / 2, y + h / 2))
                if kind == "work":
                    coll.set_facecolor(PIPE_COLORS[p])
                    coll.set_edgecolor("white" if few else "none")
                    coll.set_linewidth(0.5 if few else 0)
                else:
                    coll.set_facecolor("white" if few else PIPE_COLORS[p])
                    coll.set_edgecolor(PIPE_COLORS[p] if few else "none")
                    coll.set_hatch("////" if few else None)
                    coll.set_linewidth(0.6 if few else 0)
                    coll.set_alpha(0.9 if few else 0.3)
                    if self.texts and sl.stop > sl.start:
                        ww = lane.ends[sl] - lane.starts[sl]
                        wide = np.flatnonzero(ww >= 0.06 * (x1 - x0))
                        if len(wide):
                            wide = wide[np.argsort(-ww[wide], kind="stable")[:MAX_LABELS]]
                            label_rows += [(y, lane.starts[sl][i], lane.ends[sl][i], lane.rows[sl][i])
                                           for i in wide]
            sets = data.sets[p]
            ts = sets[np.searchsorted(sets, x0, "left"): np.searchsorted(sets, x1, "right")]
            if len(ts) > self.max_bars:
                ts = np.unique(np.round((ts - x0) / min_gap)) * min_gap + x0
            self.set_marks[p].set_data(ts, np.full(len(ts), y + BAR_HEIGHT / 2 + 0.08))
        label_rows.sort(key=lambda r: -(r[2] - r[1]))
        for k, txt in enumerate(self.texts):
            if k < len(label_rows):
                y, s, e, row = label_rows[k]
                txt.set_position(((max(s, x0) + min(e, x1)) / 2, y))
                txt.set_text(data.name(int(row)).replace(" (wait free)", " (free)"))
                txt.set_visible(True)
            else:
                txt.set_visible(False)
        ax.set_xlim(x0, x1)


def gantt(trace, core: int = 0, *, start=None, end=None, ax=None, data: GanttData | None = None,
          max_bars: int = 500, labels: bool = True):
    """Draw the pipe gantt of ``core`` and return the matplotlib Axes.

    trace: the Trace of a launch. core: which core's pipes. start, end: the cycle range shown
    (default the whole run of that core). ax: an Axes to draw into (default a new figure).
    data: a prepared :class:`GanttData` of the same trace and core (saves the sort when
    redrawing). max_bars: per pipe and kind, above this many bars in view, bars closer than a
    pixel are joined. labels: write the flag or queue name on wide enough stalls.

    Rows top to bottom: SCALAR, MTE1, MTE2, MTE3, CUBE, VECTOR, FIXP (msprof's track names).
    Solid bars: work occupying the pipe. A thin pale strip under a row: a copy of that pipe in
    flight (its start-up latency, after its bytes moved; the pipe is free meanwhile).
    Hatched (or, when many, pale) bars: the pipe stalled on a flag or queue
    (the label says which). Small triangles at the top of a row: a set_flag of that pipe fired.
    """
    import matplotlib.pyplot as plt

    if data is None or data.core != core or data.trace is not trace:
        data = GanttData(trace, core)
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 3.2), layout="constrained")
    GanttView(ax, data, max_bars=max_bars, labels=labels).set_range(start, end)
    return ax
