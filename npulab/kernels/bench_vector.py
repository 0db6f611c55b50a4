"""Bench rows for the vector kernels: LayerNorm, Softmax and GELU at BERT-base shapes.

Each row has the fields of :mod:`npulab.kernels.bench` (``op``, ``shape``, ``dtype``, ``chip``,
``tiling``, ``cycles``, ``lower_bound_cycles``, ``utilization``), where the lower bound is the
GM-bandwidth bound of a memory-bound op: the bytes it must read and write once (input, output,
gamma and beta) over the chip's whole GM bandwidth. Also: ``vector_cycles`` and ``mte2_cycles``
(busy cycles of the busiest core's vector pipe and GM-read pipe), so a row shows whether the
vector unit or the copies bound the kernel, and ``meets_target`` (utilization >= 0.8).

Everything runs in timing mode on the simulator's cost model as it stands; nothing here tunes
the model. Why some rows miss the target (the vector passes a widened fp16 tile needs, the
polynomial erf, and the 200-cycle start-up of every GM copy) is in each row's ``bound_by``.
"""
from __future__ import annotations

import time

import numpy as np

from ..chips import get_chip
from ..sim.isa import Pipe
from .activation import activation_tiling, launch_activation
from .norm import launch_layer_norm, layer_norm_tiling
from .softmax import launch_softmax, softmax_tiling

BERT = (32, 128, 768)        # batch x sequence x hidden of BERT-base
TARGET = 0.8


def _row(op, shape, dt, chip, tiling, trace, nbytes, seconds, **extra) -> dict:
    lb = nbytes / chip.memory.gm_bytes_per_cycle
    busy = np.array([trace.busy_cycles(c) for c in range(min(chip.ai_cores, tiling.block_dim))])
    core = int(np.argmax(busy.sum(axis=1)))
    vec, mte2 = int(busy[core, Pipe.V]), int(busy[core, Pipe.MTE2])
    util = lb / trace.cycles if trace.cycles else 0.0
    return {"op": op, "shape": list(shape), "dtype": np.dtype(dt).name, "chip": chip.name,
            "tiling": tiling.to_dict(), "cycles": int(trace.cycles), "lower_bound_cycles": int(round(lb)),
            "utilization": util, "vector_cycles": vec, "mte2_cycles": mte2,
            "bound_by": "vector" if vec > mte2 else "gm copies", "meets_target": util >= TARGET,
            "sim_seconds": seconds, **extra}


def bench_vector(chip="910", shape=BERT, dtypes=(np.float16, np.float32)) -> list[dict]:
    """LayerNorm (with gamma and beta), Softmax (last axis) and GELU (erf, BERT's, and tanh) at
    ``shape`` for each dtype, in timing mode. Returns JSON-ready rows."""
    chip = get_chip(chip)
    rows_out = []
    cols = shape[-1]
    rows = int(np.prod(shape[:-1]))
    for dt in dtypes:
        dt = np.dtype(dt)
        x = np.zeros(shape, dt)
        io = 2 * x.nbytes
        g = np.zeros(cols, dt)
        t0 = time.perf_counter()
        t = layer_norm_tiling(rows, cols, dt, chip)
        _, tr = launch_layer_norm(x, g, g, t, 1e-5, chip, "timing")
        rows_out.append(_row("LayerNorm", shape, dt, chip, t, tr, io + 2 * g.nbytes, time.perf_counter() - t0))
        t0 = time.perf_counter()
        t = softmax_tiling(shape, dt, -1, chip)
        _, tr = launch_softmax(x, t, chip, "timing")
        rows_out.append(_row("SoftmaxV2", shape, dt, chip, t, tr, io, time.perf_counter() - t0))
        for approximate, act in (("none", "gelu_erf"), ("tanh", "gelu_tanh")):
            t0 = time.perf_counter()
            t = activation_tiling(x.size, dt, act, chip)
            _, tr = launch_activation(x, t, chip, "timing")
            rows_out.append(_row("Gelu", shape, dt, chip, t, tr, io, time.perf_counter() - t0,
                                 approximate=approximate))
    return rows_out


if __name__ == "__main__":     # pragma: no cover - a convenience for a quick look
    for r in bench_vector():
        print(f"{r['op']:10s} {r.get('approximate', ''):5s} {r['dtype']:8s} cycles {r['cycles']:7d} "
              f"bound {r['lower_bound_cycles']:6d} util {r['utilization']:.3f} vec {r['vector_cycles']:6d} "
              f"mte2 {r['mte2_cycles']:6d} {r['bound_by']}")
