"""L1's one port: MTE1 reading L1 (into L0A / L0B) and MTE2 writing it (from GM) share it.

An MTE1 load moves ``mte1_bytes_per_cycle`` (L0A) or ``mte1_l0b_bytes_per_cycle`` (L0B) a cycle
alone on the port (S11: 512 and 256 on the A2); L1's port takes ``pipes.l1_port_bytes_per_cycle``
(chosen: 512, the widest path S11 lists out of L1). While MTE2 copies into L1 at ``r2`` bytes a
cycle, MTE1 gets what is left, ``port - r2`` (chosen: the GM side's write is not held back, its
bytes arrive from the bus at their own pace), so a load of rate ``r1 > port - r2`` that overlaps
those copies for a fraction ``f`` of its time takes

    base * (1 - f + f * r1 / (port - r2))

cycles. ``r2`` is the MTE2 copies' average rate into L1 (their bytes over their busy cycles,
GM shares and L2 included, as :mod:`npulab.sim.gm` settled them). As for the GM split, the
overlap depends on the schedule and the schedule on the durations: :func:`refine` runs after
each schedule of a core, beside :meth:`npulab.sim.gm.GmTraffic.refine`, until neither changes a
duration by more than 1%.
"""
from __future__ import annotations

import numpy as np

from .gm import _covered, _union, set_unless_settled
from .isa import Kind, Op

_LOADS = (int(Op.COPY_L1_TO_L0A), int(Op.COPY_L1_TO_L0B), int(Op.COPY_L1_TO_UB))


def refine(core, start) -> bool:
    """One pass for ``core`` given its instructions' starts in the last schedule: set the MTE1
    loads' durations for their overlap with MTE2's copies into L1; True if any changed (the core
    is then scheduled again)."""
    chip = core.device.chip
    port = float(chip.pipes.l1_port_bytes_per_cycle)
    state = getattr(core, "_l1port", None)
    if state is None:
        op, kind = np.asarray(core.op), np.asarray(core.kind)
        work = kind == int(Kind.WORK)
        loads = np.flatnonzero(work & np.isin(op, _LOADS))
        writes = np.flatnonzero(work & (op == int(Op.COPY_GM_TO_L1)))
        if not len(loads) or not len(writes):
            core._l1port = False
            return False
        base = np.asarray(core.dur, dtype=np.float64)[loads]
        rate = np.asarray(core.nbytes, dtype=np.float64)[loads] / np.maximum(base, 1.0)
        state = core._l1port = [loads, writes, base, rate, np.zeros(len(loads))]
    if state is False:
        return False
    loads, writes, base, rate, seen = state
    start = np.asarray(start, dtype=np.float64)
    dur = np.asarray(core.dur, dtype=np.float64)
    w0, w1 = start[writes], start[writes] + dur[writes]
    busy = float(np.sum(w1 - w0))
    r2 = float(np.sum(np.asarray(core.nbytes, dtype=np.float64)[writes])) / busy if busy > 0 else 0.0
    left = max(port - r2, 1.0)
    s0 = start[loads]
    f = _covered(_union(w0, w1), s0, s0 + dur[loads]) / np.maximum(dur[loads], 1e-9)
    f = np.maximum(f, seen)                   # overlap only grows from pass to pass (as gm's)
    state[4] = f
    slow = np.maximum(rate / left, 1.0)
    cycles = np.ceil(base * (1.0 - f + f * slow)).astype(np.int64)
    return set_unless_settled(core, loads, cycles, dur)


__all__ = ["refine"]
