"""The memory-plan view: each tensor a rectangle, lifetime along x and its address range along
y, from any list of (name, start, end, offset, size). Overlapping rectangles are a bug in a plan
(two live tensors on the same bytes); the highest top edge is the memory the plan needs.

Used for the buffer log of a launch (``trace.allocations``) and for a graph's memory plan
(:meth:`npulab.graph.memory.MemoryPlan.tensors`, steps along x).
"""
from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_rgb

from ..errors import ArgumentError
from ..sim.memory import fmt_bytes
from ._style import owner_base, owner_colors, rect_verts


@dataclass(frozen=True)
class PlanTensor:
    """One tensor of a plan: live over [start, end) at bytes [offset, offset + size)."""
    name: str
    start: float
    end: float
    offset: int
    size: int


def plan_tensors(tensors) -> list[PlanTensor]:
    """Normalise a plan: each item a (name, start, end, offset, size) tuple, a dict with those
    keys, or an object with those attributes (``owner`` is accepted for ``name``, so
    ``trace.allocations`` works as it is). Raises ValueError naming the bad item."""
    out = []
    for i, t in enumerate(tensors):
        if isinstance(t, PlanTensor):
            out.append(t)
            continue
        if isinstance(t, dict):
            get = t.get
        elif isinstance(t, (tuple, list)):
            if len(t) != 5:
                raise ArgumentError(f"memory plan item {i}: expected (name, start, end, offset, size), "
                                 f"got {len(t)} values {t!r}")
            get = dict(zip(("name", "start", "end", "offset", "size"), t)).get
        else:
            get = lambda k, default=None, t=t: getattr(t, k, default)
        name = get("name") if get("name") is not None else get("owner")
        vals = [get(k) for k in ("start", "end", "offset", "size")]
        if name is None or any(v is None for v in vals):
            raise ArgumentError(f"memory plan item {i}: needs name, start, end, offset and size; got {t!r}")
        start, end, offset, size = vals
        if not all(isinstance(v, (Real, np.number)) for v in vals):
            raise ArgumentError(f"memory plan item {i} ({name}): start, end, offset, size must be numbers, "
                             f"got {vals!r}")
        if end < start:
            raise ArgumentError(f"memory plan item {i} ({name}): ends at {end} before it starts at {start}")
        if size <= 0 or offset < 0 or not isinstance(offset, (Integral, np.integer)) \
                or not isinstance(size, (Integral, np.integer)):
            raise ArgumentError(f"memory plan item {i} ({name}): offset must be an integer >= 0 and size "
                             f"an integer > 0, got offset={offset!r}, size={size!r}")
        out.append(PlanTensor(str(name), start, end, int(offset), int(size)))
    return out


def overlaps(plan: list[PlanTensor]) -> list[tuple[str, str]]:
    """Pairs of tensors live at the same time on common bytes (a broken plan)."""
    found = []
    for i, a in enumerate(plan):
        for b in plan[i + 1:]:
            if a.start < b.end and b.start < a.end and a.offset < b.offset + b.size \
                    and b.offset < a.offset + a.size:
                found.append((a.name, b.name))
    return found


def memory_plan(tensors, *, capacity: int | None = None, ax=None, highlight=None,
                labels: bool = True, time_unit: str = "cycle", title: str | None = None):
    """Draw a memory plan and return the Axes.

    tensors: the plan (see :func:`plan_tensors`). capacity: bytes of the memory, drawn as a
    dashed line (optional). ax: an Axes to draw into (default a new figure). highlight: names
    to emphasise (the others fade). labels: write names on rectangles large enough. time_unit:
    the x-axis label. title: default states the tensor count and the high-water mark.

    The rectangles are one PolyCollection labelled "tensors", in the order given.
    """
    import matplotlib.pyplot as plt

    plan = plan_tensors(tensors)
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 4), layout="constrained")
    colors = owner_colors(t.name for t in plan)
    hi = set([highlight] if isinstance(highlight, str) else highlight or [])
    s = np.array([t.start for t in plan], float)
    e = np.array([t.end for t in plan], float)
    lo = np.array([t.offset for t in plan], float)
    top = lo + np.array([t.size for t in plan], float)
    fc = [colors[owner_base(t.name)] for t in plan]
    alpha = [1.0 if not hi or t.name in hi else 0.25 for t in plan]
    rgba = [(*to_rgb(c), a) for c, a in zip(fc, alpha)]
    coll = PolyCollection(rect_verts(s, e, lo, top), closed=True, facecolors=rgba if plan else "none",
                          edgecolors=["black" if t.name in hi else "white" for t in plan] or "none",
                          linewidths=[1.5 if t.name in hi else 0.6 for t in plan] or 0)
    coll.set_label("tensors")
    ax.add_collection(coll)
    x0 = float(s.min()) if plan else 0.0
    x1 = float(e.max()) if plan else 1.0
    high = int(top.max()) if plan else 0
    ymax = max(high, capacity or 0, 1)
    if labels and plan:
        for t, a, b, c, d in zip(plan, s, e, lo, top):
            if (b - a) >= 0.04 * max(1e-9, x1 - x0) and (d - c) >= 0.04 * ymax:
                ax.text((a + b) / 2, (c + d) / 2, t.name, ha="center", va="center", fontsize=7, clip_on=True)
    if capacity:
        ax.axhline(capacity, color="#b00", ls="--", lw=1)
        ax.text(x1, capacity, f" capacity {fmt_bytes(capacity)}", color="#b00", va="bottom", ha="right",
                fontsize=8)
    ax.axhline(high, color="black", ls=":", lw=1)
    ax.set_xlim(x0, x1 if x1 > x0 else x0 + 1)
    ax.set_ylim(0, ymax * 1.08)
    ax.set_xlabel(time_unit)
    ax.set_ylabel("address (bytes)")
    ax.set_title(title if title is not None else
                 f"memory plan: {len(plan)} tensors, high-water mark {fmt_bytes(high)}", fontsize=10)
    ax.grid(alpha=0.3)
    return ax
