"""Microbenchmarks as AIBench ran them on the Ascend 910 (C1 in data/FACTS.md): the cube and the
vector unit, each a kernel in npulab's kernel language written the way AIBench's TIK sources
(github Tinkerver/AIBench, operator_generate/) write theirs.

* :func:`cube` (the cube-unit test, ``矩阵matmul相关测试generate``): operands already in L1,
  100 iterations of two ``tik.matmul`` from L1 (L1 -> L0A / L0B, the cube into L0C; the first
  initialising C, the second accumulating), m, k, n = 16 x (1..10). No GM traffic: it measures
  the cube and what feeds it from L1. TIK gives each tensor one buffer (no ``thread_num``), so
  a matmul's loads wait for the mmad before to release L0A / L0B. (AIBench's
  ``matmul_workload`` test, which also copies A and B from GM and C back every iteration on 30
  blocks, measures the data paths, the paper's "transfer mode" finding, not the cube.)
* :func:`vector` (``vector_workload_generate.py``, ``compute_scalar_generate.py``): 30 blocks,
  each issuing 100 vector instructions of mask 128 (a full 256-byte repeat of fp16) and
  ``repeats`` repeats over data already in UB, each reading the destination the one before
  wrote (the dependent chain of compute_scalar's ``vec_axpy`` into one ``dst_ub``): here
  ``mul(dst, src, dst)``, vector_workload's ``vec_mul``. FLOPs are counted as the TIK source
  computes them: mask x repeats per instruction, one per lane (a multiply).

Both sweep the sizes the generators sweep (a few of them) and report the best, with the sweep.
Times are the cores' (``Trace.core_time``, msprof's aicore_time: AIBench read its figures off
the profiler), without the launch's start-up before the cores begin.
Nothing here tunes the model: the rows are what the cost model gives.
"""
from __future__ import annotations

import numpy as np

from ..chips import get_chip
from ..lang import (A1, A2, B1, B2, CO1, VECCALC, Queue, TBuf, TPipe,
                    launch, load_data, mmad)
from ..lang import vector as V

#: AIBench: ``for_range(0, 30, block_num=30)`` and ``for_range(0, 100)``
BLOCKS = 30
ITERATIONS = 100
#: the generator's m, k, n = 16 x (index digit + 1); these are the square ones it makes, 2..10
CUBE_SIZES = (32, 64, 96, 128, 160)
#: vec_mul's repeat counts (the generator's ``index``): a few from 1 to 255
VECTOR_REPEATS = (1, 8, 32, 64, 128, 255)
MASK = 128                      # fp16 lanes of one repeat


def _cube_kernel(m: int, k: int, n: int, iterations: int) -> None:
    """AIBench's cube test: A (m x k) and B (k x n) already in L1 (the TIK source declares them
    in ``scope_cbuf`` and never copies into them), C in L0C; ``iterations`` x two ``tik.matmul``
    from L1, the first initialising C, the second accumulating into it. Each matmul loads its
    operands from L1 into L0A / L0B (MTE1) and runs the mmad; TIK gives each tensor one buffer, so
    a matmul's loads wait until the mmad before has read L0A / L0B (one buffer each here)."""
    pipe = TPipe()
    a1, b1, c = TBuf(A1, "a1"), TBuf(B1, "b1"), TBuf(CO1, "c")
    qa2, qb2 = Queue(A2, "a2"), Queue(B2, "b2")
    for buf, nbytes in ((a1, m * k * 2), (b1, k * n * 2), (c, m * n * 4)):
        pipe.init_buffer(buf, nbytes)
    pipe.init_buffer(qa2, 1, m * k * 2)
    pipe.init_buffer(qb2, 1, k * n * 2)
    a, b, ct = a1.get(np.float16), b1.get(np.float16), c.get(np.float32)
    for _ in range(iterations):
        for init in (True, False):
            a2 = qa2.alloc_tensor(np.float16)
            load_data(a2, a, m, k, src_rows=m)
            qa2.enque(a2)
            b2 = qb2.alloc_tensor(np.float16)
            load_data(b2, b, k, n, src_rows=k)
            qb2.enque(b2)
            a2, b2 = qa2.deque(), qb2.deque()
            mmad(ct, a2, b2, m, n, k, init=init)
            qa2.free_tensor(a2)
            qb2.free_tensor(b2)


def _cube_row(chip, size: int) -> dict:
    tr = launch(_cube_kernel, 1, size, size, size, ITERATIONS, chip=chip, mode="timing").trace
    flops = 2 * 2 * size ** 3 * ITERATIONS                  # two matmuls an iteration, one core
    tflops = flops / (tr.core_time / (chip.clock_ghz * 1e9)) / 1e12 * chip.ai_cores
    return {"size": size, "cycles": int(tr.cycles), "core_time": tr.core_time, "tflops": tflops,
            "utilization": tflops / chip.peak_fp16_tflops, **tr.pipe_ratios()}


def cube(chip="910") -> dict:
    """AIBench's cube microbenchmark on ``chip``: the best of the sizes it sweeps. Row: chip,
    tflops (one core's rate x the chip's AI cores, as every core runs the same), peak (the chip's
    fp16 peak), utilization (tflops / peak), what was run (``run``, ``size``, ``iterations``), its
    pipe ratios, and ``sweep`` (every size)."""
    chip = get_chip(chip)
    rows = [_cube_row(chip, s) for s in CUBE_SIZES]
    best = max(rows, key=lambda r: r["tflops"])
    return {"chip": chip.name, "bench": "cube", "tflops": best["tflops"], "peak_tflops": chip.peak_fp16_tflops,
            "utilization": best["utilization"], "size": best["size"], "blocks": 1, "iterations": ITERATIONS,
            "cycles": best["cycles"], "core_time": best["core_time"],
            "run": (f"{ITERATIONS} x 2 matmuls from L1 ({best['size']}^3 fp16: L1 -> L0A / L0B, mmad into "
                    f"one L0C tile, the second accumulating), single-buffered as AIBench's TIK source"),
            "pipe_ratios": {k: v for k, v in best.items() if k.endswith("_ratio")},
            "sweep": [{k: r[k] for k in ("size", "core_time", "tflops", "utilization")} for r in rows]}


def _vector_kernel(g, repeats: int, iterations: int) -> None:
    """One block: ``iterations`` dependent vec_mul of mask 128 and ``repeats`` repeats over UB data
    (dst = src * dst; src 256 B past dst's bank groups, so their blocks never meet in one)."""
    pipe = TPipe()
    buf = TBuf(VECCALC, "ub")
    n = MASK * repeats
    span = -(-n * 2 // 512) * 512 + 256          # src starts 256 B past a multiple of 512 from dst
    pipe.init_buffer(buf, span + n * 2)
    t = buf.get(np.float16)
    dst, src = t[:n], t[span // 2:span // 2 + n]
    for _ in range(iterations):
        V.mul(dst, src, dst, n)


def _vector_row(chip, repeats: int) -> dict:
    cores = chip.cores_for("aiv")
    tr = launch(_vector_kernel, BLOCKS, np.zeros(16, np.float16), repeats, ITERATIONS, chip=chip,
                core_type="aiv", mode="timing").trace
    flops = MASK * repeats * ITERATIONS * BLOCKS
    gflops = flops / (tr.core_time / (chip.clock_ghz * 1e9)) / 1e9
    peak = cores * MASK * chip.clock_ghz            # one fp16 operation a lane a cycle, every vector core
    return {"repeats": repeats, "cycles": int(tr.cycles), "core_time": tr.core_time, "gflops": gflops,
            "utilization": gflops / peak,
            "bank_conflict_ratio": tr.bank_conflict_ratio, **tr.pipe_ratios()}


def vector(chip="910") -> dict:
    """AIBench's vector microbenchmark on ``chip``: the best of the repeat counts it sweeps. Row:
    chip, gflops, peak (every vector core doing one fp16 operation in each of its 128 lanes a
    cycle; half the vendor's multiply-add peak ``peak_vector_tflops_fp16``), utilization, what
    was run, its pipe ratios and ``sweep``."""
    chip = get_chip(chip)
    rows = [_vector_row(chip, r) for r in VECTOR_REPEATS]
    best = max(rows, key=lambda r: r["gflops"])
    peak = chip.cores_for("aiv") * MASK * chip.clock_ghz
    return {"chip": chip.name, "bench": "vector", "gflops": best["gflops"], "peak_gflops": peak,
            "utilization": best["utilization"], "repeats": best["repeats"], "blocks": BLOCKS,
            "iterations": ITERATIONS, "cycles": best["cycles"], "core_time": best["core_time"],
            "run": (f"{BLOCKS} blocks x {ITERATIONS} dependent vec_mul (mask {MASK}, {best['repeats']} repeats, "
                    f"fp16) over UB; FLOPs = mask x repeats per instruction"),
            "pipe_ratios": {k: v for k, v in best.items() if k.endswith("_ratio") and k != "bank_conflict_ratio"},
            "bank_conflict_ratio": best["bank_conflict_ratio"],
            "sweep": [{k: r[k] for k in ("repeats", "cycles", "gflops", "utilization")} for r in rows]}


__all__ = ["BLOCKS", "ITERATIONS", "CUBE_SIZES", "VECTOR_REPEATS", "MASK", "cube", "vector"]
