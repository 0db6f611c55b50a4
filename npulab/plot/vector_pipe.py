"""The vector pipe of a run, read off its trace: the instructions one tile of a row kernel issued
(:func:`vector_program`), and where the pipe's cycles went, its waits grouped by what they wait
for (:func:`vector_time`, built on the gantt table's :func:`~npulab.plot.idle.pipe_time`).
Lab 07 prints both for RMSNorm and LayerNorm.
"""
from __future__ import annotations

import numpy as np

from ..sim.isa import Kind, Op, Pipe
from .idle import pipe_time


def vector_program(trace, core: int = 0, tile: int = 0) -> list[tuple[str, int]]:
    """(name, cycles) of the vector instructions one tile of a row kernel issued on ``core``. A
    tile's Compute stage begins when it takes an output slot (the ``alloc_tensor out_...`` mark
    on the vector pipe) and runs until the next tile's does; the marks themselves (no cycles)
    are left out."""
    sel = np.flatnonzero((trace.core == core) & (trace.pipe == int(Pipe.V)) & (trace.kind == 0))
    order = sel[np.argsort(trace.start[sel], kind="stable")]
    starts = [k for k, i in enumerate(order) if trace.name[i].startswith("alloc_tensor out_")]
    if tile >= len(starts):
        return []
    stop = starts[tile + 1] if tile + 1 < len(starts) else len(order)
    return [(trace.name[i], int(trace.end[i] - trace.start[i])) for i in order[starts[tile] + 1: stop]
            if trace.end[i] > trace.start[i]]


def vector_time(trace, core: int = 0) -> dict:
    """Where the vector pipe of ``core`` spent the kernel's cycles: the gantt table's breakdown
    (:func:`npulab.plot.idle.pipe_time`) with its waits grouped by what they wait for:
    ``busy`` (its repeats), ``barriers`` (automatic PIPE_V barriers: a step waiting for the
    result of the one before), ``copy_in`` (deque: a tile or a parameter not yet copied in;
    ``first_tile``: the cycle the first tile of x arrived), ``copy_out`` (a slot not yet copied
    out and freed, and the end of the block waiting for the last copies out), ``block_start``
    (the core starting its blocks, the chip's ``launch.block_start_cycles`` each: nothing is
    issued meanwhile), ``other`` (the rest). The parts add up to ``cycles``, the core's run."""
    row = next(r for r in pipe_time(trace, core) if r["pipe"] == "VECTOR")
    parts = {"barriers": 0, "copy_in": 0, "copy_out": 0}
    for reason, took in row["waits"].items():
        if reason.startswith("pipe_barrier"):
            parts["barriers"] += took
        elif reason.startswith("deque"):
            parts["copy_in"] += took
        elif reason.startswith(("release", "alloc_tensor")):
            parts["copy_out"] += took
    on = np.flatnonzero((trace.core == core) & (trace.pipe == int(Pipe.V)) & (trace.kind == int(Kind.WAIT))
                        & (trace.end > trace.start))
    first = next((int(trace.end[i]) for i in on if trace.name[i].startswith("deque in_x")), 0)
    starts = np.flatnonzero((trace.core == core) & (trace.op == int(Op.SCALAR)))
    parts["block_start"] = int(sum(int(trace.end[i] - trace.start[i]) for i in starts
                                   if trace.name[i].startswith("block ") and trace.name[i].endswith(" start")))
    return {"cycles": row["span"], "busy": row["busy"], **parts, "first_tile": first,
            "other": row["span"] - row["busy"] - sum(parts.values())}


__all__ = ["vector_program", "vector_time"]
