"""Bench rows for the vector kernels: LayerNorm, Softmax and GELU at BERT-base shapes.

Each row has the fields of :mod:`npulab.bench.matmul` (``op``, ``shape``, ``dtype``, ``chip``,
``tiling``, ``cycles``, ``lower_bound_cycles``, ``utilization``), where the lower bound is the
GM-bandwidth bound of a memory-bound op: the bytes it must read and write once (input, output,
gamma and beta) over the chip's whole GM bandwidth. Also: ``vector_cycles`` and ``mte2_cycles``
(busy cycles of the busiest core's vector pipe and GM-read pipe), so a row shows whether the
vector unit or the copies bound the kernel, ``meets_target`` (utilization >= 0.8), and
``core_type`` / ``cores_used``: the kernels are vector-only (``core_type="aiv"``), so on the
split 910b they run on its 48 AIV cores, on the coupled 910 on its 32 AI cores.

The GELU rows: ``approximate="none"`` is the exact-erf form (relu(x) - |x| (1 - Phi(|x|)), the
normal tail as exp of a fitted polynomial, within the fp32 tolerance of x Phi(x)), and
``approximate="tanh"`` is GELU as
CANN computes it: ops-nn's Gelu kernel evaluates x / (1 + exp(-sqrt(8/pi) (x + 0.044715 x^3))),
which is the tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) rewritten with
exp; the kernel's ``gelu_tanh`` is that formula. ``compute_dtype`` says which dtype the
arithmetic ran in: fp16 GELU (both forms) runs in fp16, as Ascend C's ``Gelu<half>`` does for
the tanh form (ops-nn's GeluV2 widens fp16 for the erf form); fp16 LayerNorm widens to fp32;
fp16 Softmax runs the row max, x - max, exp and the scaling in fp16 and only the sum in fp32
("float16, sum float32"; with ``exp16=False`` exp and the rest are fp32, "float16/float32";
ops-nn widens first, "float32"), see softmax.KernelSoftmaxAR.

Everything runs in timing mode on the simulator's cost model as it stands; nothing here tunes
the model. ``vector_cycles`` is the vector pipe's occupancy (its repeats; a start-up is latency,
lang.vector). Rows that miss the target are vector-bound: the passes a tile needs (for widened
fp16 two casts plus the fp32 arithmetic) exceed what the GM bandwidth of a core leaves;
``vector_cycles`` against ``lower_bound_cycles`` shows it. fp16 LayerNorm on the 910 is such a
row: its two-pass fp32 statistics, normalisation, affine step and two casts are about 7.25
fp32 passes (the squares summed in quarters of a row), whose repeats alone take about 1.15
times the GM bound; on top come a start-up for each of a tile's 18 dependent steps (shared by
the tiles in flight, KernelLayerNorm), the first tile's copy in and the last one's copy out.
"""
from __future__ import annotations

import time

import numpy as np

from ..chips import get_chip
from ..kernels.activation import activation_tiling, launch_activation
from ..kernels.norm import launch_layer_norm, layer_norm_tiling
from ..kernels.softmax import launch_softmax, softmax_tiling
from ..sim.isa import Pipe

BERT = (32, 128, 768)        # batch x sequence x hidden of BERT-base
TARGET = 0.8


def _row(op, shape, dt, chip, tiling, trace, nbytes, seconds, **extra) -> dict:
    lb = nbytes / chip.memory.gm_bytes_per_cycle
    busy = np.array([trace.busy_cycles(c) for c in range(len(trace.core_cycles))])
    core = int(np.argmax(busy.sum(axis=1)))
    vec, mte2 = int(busy[core, Pipe.V]), int(busy[core, Pipe.MTE2])
    util = lb / trace.cycles if trace.cycles else 0.0
    return {"op": op, "shape": list(shape), "dtype": np.dtype(dt).name, "chip": chip.name,
            "tiling": tiling.to_dict(), "cycles": int(trace.cycles), "lower_bound_cycles": int(round(lb)),
            "utilization": util, "vector_cycles": vec, "mte2_cycles": mte2,
            "bound_by": "vector" if vec > mte2 else "gm copies", "target": TARGET,
            "meets_target": util >= TARGET,
            "core_type": trace.core_type, "cores_used": int(len(trace.core_cycles)),
            "sim_seconds": seconds, **extra}


def softmax_compute_dtype(t) -> str:
    """What the AR softmax tiling ``t`` computes in (see softmax.KernelSoftmaxAR)."""
    if t.dtype == "float32" or not t.narrow:
        return "float32"
    return "float16, sum float32" if t.exp16 else "float16/float32"


GELU_FORMS = (("none", "gelu_erf", "x * Phi(x) (exact form): relu(x) - |x| exp(E(|x|)), E fitted to "
                                   "log(1 - Phi), within the fp32 tolerance"),
              ("tanh", "gelu_tanh", "x / (1 + exp(-sqrt(8/pi) * (x + 0.044715 x^3))) (CANN's Gelu)"))


def bench_vector(chip=("910", "910b"), shape=BERT, dtypes=(np.float16, np.float32)) -> list[dict]:
    """LayerNorm (with gamma and beta), Softmax (last axis) and GELU (erf, BERT's, and the tanh
    form CANN computes) at ``shape`` for each dtype, in timing mode, on ``chip`` (a chip, or a
    sequence of chips: by default the coupled 910 and the split 910b). Returns JSON-ready rows."""
    if isinstance(chip, (list, tuple)):
        return [r for c in chip for r in bench_vector(c, shape, dtypes)]
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
        rows_out.append(_row("LayerNorm", shape, dt, chip, t, tr, io + 2 * g.nbytes, time.perf_counter() - t0,
                             compute_dtype="float32"))
        t0 = time.perf_counter()
        t = softmax_tiling(shape, dt, -1, chip)
        _, tr = launch_softmax(x, t, chip, "timing")
        rows_out.append(_row("SoftmaxV2", shape, dt, chip, t, tr, io, time.perf_counter() - t0,
                             compute_dtype=softmax_compute_dtype(t)))
        for approximate, act, formula in GELU_FORMS:
            t0 = time.perf_counter()
            t = activation_tiling(x.size, dt, act, chip)
            _, tr = launch_activation(x, t, chip, "timing")
            rows_out.append(_row("Gelu", shape, dt, chip, t, tr, io, time.perf_counter() - t0,
                                 approximate=approximate, formula=formula, compute_dtype=t.compute_dtype))
    return rows_out


if __name__ == "__main__":     # pragma: no cover - a convenience for a quick look
    for r in bench_vector():
        print(f"{r['chip']:5s} {r['core_type']} x{r['cores_used']:<3d} {r['op']:10s} "
              f"{r.get('approximate', ''):5s} {r['dtype']:8s} cycles {r['cycles']:7d} "
              f"bound {r['lower_bound_cycles']:6d} util {r['utilization']:.3f} "
              f"vec {r['vector_cycles']:6d} mte2 {r['mte2_cycles']:6d} {r['bound_by']}")
