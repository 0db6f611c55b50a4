"""Where each pipe's time went over a cycle range: working, stalled (on which flag or queue),
waiting for a copy in flight (the pipe is free, but a copy it started has not completed: start-up
latency nothing else hides), or idle (nothing was issued to it). The table beside the gantt.

Reasons are the stalled instruction's name with the slot index dropped, so every slot of a queue
adds up under one line: ``deque in_x`` (the vector unit waited for MTE2 to fill in_x),
``alloc_tensor out_z (wait free)`` (the vector unit waited for MTE3 to free a slot of out_z),
``wait_flag MTE2->V #0``.
"""
from __future__ import annotations

import re

import numpy as np

from ..sim.isa import NUM_PIPES
from ._style import TRACKS
from .gantt import GanttData, _check_range

IDLE = "idle (nothing issued)"
IN_FLIGHT = "copy in flight (latency)"


def _reason(name: str) -> str:
    return re.sub(r"\[\d+\]", "", name)


def _reason_codes(data: GanttData):
    """Per pipe: (integer reason code of each stall, list of reason strings), cached on data."""
    cached = getattr(data, "_reasons", None)
    if cached is None:
        cached = []
        for p in range(NUM_PIPES):
            names = [_reason(data.name(int(r))) for r in data.waits[p].rows]
            uniq, codes = np.unique(np.array(names, dtype=object), return_inverse=True) if names else ([], [])
            cached.append((np.asarray(codes, dtype=np.int64), list(uniq)))
        data._reasons = cached
    return cached


def _overlap(starts, ends, x0, x1) -> np.ndarray:
    return np.clip(np.minimum(ends, x1) - np.maximum(starts, x0), 0, None)


def pipe_time(trace, core: int = 0, start=None, end=None, *, data: GanttData | None = None) -> list[dict]:
    """One dict per pipe over cycles [start, end) of ``core``.

    trace: the Trace. core: which core. start, end: the cycle range (default the core's run).
    data: a prepared GanttData of that trace and core (reused by the widget).

    Each dict: ``pipe`` (track name), ``span`` (cycles in the range), ``busy`` (cycles the pipe
    was occupied by work), ``waits`` ({reason: cycles stalled}, largest first), ``in_flight``
    (cycles neither working nor stalled while a copy of the pipe was still in flight),
    ``idle`` (the rest: nothing was issued to the pipe, nothing in flight).
    busy + sum(waits) + in_flight + idle == span.
    """
    if data is None or data.core != core or data.trace is not trace:
        data = GanttData(trace, core)
    x0, x1 = _check_range(start, end, data.cycles)
    span = int(round(x1 - x0))
    reasons = _reason_codes(data)
    rows = []
    for p in range(NUM_PIPES):
        w = data.work[p]
        sl = w.window(x0, x1)
        busy = int(_overlap(w.starts[sl], w.ends[sl], x0, x1).sum())
        q = data.waits[p]
        sl = q.window(x0, x1)
        codes, names = reasons[p]
        waits = {}
        if sl.stop > sl.start:
            per = np.bincount(codes[sl], weights=_overlap(q.starts[sl], q.ends[sl], x0, x1),
                              minlength=len(names))
            waits = {names[i]: int(per[i]) for i in np.argsort(-per, kind="stable") if per[i] > 0}
        a0, a1 = data.active[p]                  # work, tails and stalls, disjoint and sorted
        lo = int(np.searchsorted(a1, x0, side="right"))
        hi = int(np.searchsorted(a0, x1, side="left"))
        active = int(_overlap(a0[lo:hi], a1[lo:hi], x0, x1).sum())
        in_flight = max(0, active - busy - sum(waits.values()))
        idle = max(0, span - busy - sum(waits.values()) - in_flight)
        rows.append({"pipe": TRACKS[p], "span": span, "busy": busy, "waits": waits,
                     "in_flight": in_flight, "idle": idle})
    return rows


def _pct(x: float) -> str:
    return f"{x:.0%}" if x >= 0.005 or x == 0 else "<1%"


def pipe_time_table(rows: list[dict], *, html: bool = False, max_reasons: int = 3) -> str:
    """The rows of :func:`pipe_time` as text (or an HTML table): pipe, busy %, and the biggest
    stall reasons and idle time with their shares. Pipes that did nothing are left out."""
    lines = []
    for r in rows:
        if r["busy"] == 0 and not r["waits"] and not r.get("in_flight"):
            continue
        span = max(1, r["span"])
        parts = [f"{name} {_pct(c / span)}" for name, c in list(r["waits"].items())[:max_reasons]]
        if r.get("in_flight"):
            parts.append(f"{IN_FLIGHT} {_pct(r['in_flight'] / span)}")
        if r["idle"]:
            parts.append(f"{IDLE} {_pct(r['idle'] / span)}")
        lines.append((r["pipe"], _pct(r["busy"] / span), "; ".join(parts) or "-"))
    if not html:
        w = max([4] + [len(a) for a, _, _ in lines])
        return "\n".join([f"{'pipe':<{w}}  busy  not working because"] +
                         [f"{a:<{w}}  {b:>4}  {c}" for a, b, c in lines])
    cells = "".join(f"<tr><td>{a}</td><td style='text-align:right'>{b}</td><td>{c}</td></tr>"
                    for a, b, c in lines)
    return ("<table style='font-size:12px'><tr><th>pipe</th><th>busy</th>"
            f"<th style='text-align:left'>not working because</th></tr>{cells}</table>")
