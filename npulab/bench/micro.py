"""Microbenchmarks as AIBench ran them on the Ascend 910 (C1 in data/FACTS.md): the cube and the
vector unit, each a kernel in npulab's kernel language written the way AIBench's TIK sources
(github Tinkerver/AIBench, operator_generate/) write theirs.

* :func:`cube` (``matmul_workload_generate.py``): 30 blocks (``block_num=30``), each running 100
  iterations of: A and B GM -> L1 (``data_move``), the matmul from L1 (``tik.matmul``: L1 ->
  L0A / L0B, the cube into L0C) and the result out of L0C to GM (``fixpipe``; on the 910 the
  kernel language drains L0C through UB, as the chip does). The sizes are m, k, n = 16 x
  (1..10), each iteration reading and writing the same GM ranges. TIK gives each tensor one
  buffer (no ``thread_num``), so each hop is a single-buffered queue here: an iteration's copy
  into L1 waits for the one before to have been loaded out of it, and so on.
* :func:`vector` (``vector_workload_generate.py``, ``compute_scalar_generate.py``): 30 blocks,
  each issuing 100 vector instructions of mask 128 (a full 256-byte repeat of fp16) and
  ``repeats`` repeats over data already in UB, each reading the destination the one before
  wrote (the dependent chain of compute_scalar's ``vec_axpy`` into one ``dst_ub``): here
  ``mul(dst, src, dst)``, vector_workload's ``vec_mul``. FLOPs are counted as the TIK source
  computes them: mask x repeats per instruction, one per lane (a multiply).

Both sweep the sizes the generators sweep (a few of them) and report the best, with the sweep.
Times are the launch's (``Trace.cycles``: its start-up, ``launch_cycles``, included).
Nothing here tunes the model: the rows are what the cost model gives.
"""
from __future__ import annotations

import numpy as np

from ..chips import get_chip
from ..lang import (A1, A2, B1, B2, CO1, VECCALC, VECOUT, Queue, TBuf, TPipe, data_copy_l0c2ub, data_copy_nd2nz,
                    data_copy_nz2nd, fixpipe, launch, load_data, mmad, output_path)
from ..lang import vector as V

#: AIBench: ``for_range(0, 30, block_num=30)`` and ``for_range(0, 100)``
BLOCKS = 30
ITERATIONS = 100
#: the generator's m, k, n = 16 x (index digit + 1); these are the square ones it makes, 2..10
CUBE_SIZES = (32, 64, 96, 128, 160)
#: vec_mul's repeat counts (the generator's ``index``): a few from 1 to 255
VECTOR_REPEATS = (1, 8, 32, 64, 128, 255)
MASK = 128                      # fp16 lanes of one repeat


def _cube_kernel(a_gm, out_gm, m: int, k: int, n: int, iterations: int) -> None:
    """One block of matmul_workload: ``iterations`` x (A, B -> L1; L1 -> L0A / L0B; mmad; L0C out)."""
    pipe = TPipe()
    qa1, qb1, qa2, qb2, qc = Queue(A1, "a1"), Queue(B1, "b1"), Queue(A2, "a2"), Queue(B2, "b2"), Queue(CO1, "c")
    for q, nbytes in ((qa1, m * k * 2), (qb1, k * n * 2), (qa2, m * k * 2), (qb2, k * n * 2), (qc, m * n * 4)):
        pipe.init_buffer(q, 1, nbytes)
    via_ub = output_path() != "fixpipe"
    if via_ub:
        qo = Queue(VECOUT, "out")
        pipe.init_buffer(qo, 1, m * n * 4)
    from ..lang import get_block_idx
    b = get_block_idx()
    a_src = a_gm[b * 64 * 1024:]                 # input_a_gm[64*1024*i] and [+32*1024], as the source
    b_src = a_gm[b * 64 * 1024 + 32 * 1024:]
    dst = out_gm[b * 32 * 1024:]
    for _ in range(iterations):
        a1 = qa1.alloc_tensor(np.float16)
        data_copy_nd2nz(a1, a_src, m, k)
        qa1.enque(a1)
        b1 = qb1.alloc_tensor(np.float16)
        data_copy_nd2nz(b1, b_src, k, n)
        qb1.enque(b1)
        a1, b1 = qa1.deque(), qb1.deque()
        a2 = qa2.alloc_tensor(np.float16)
        load_data(a2, a1, m, k, src_rows=m)
        qa2.enque(a2)
        b2 = qb2.alloc_tensor(np.float16)
        load_data(b2, b1, k, n, src_rows=k)
        qb2.enque(b2)
        qa1.free_tensor(a1)
        qb1.free_tensor(b1)
        a2, b2 = qa2.deque(), qb2.deque()
        c = qc.alloc_tensor(np.float32)
        mmad(c, a2, b2, m, n, k)
        qa2.free_tensor(a2)
        qb2.free_tensor(b2)
        qc.enque(c)
        c = qc.deque()
        if via_ub:
            o = qo.alloc_tensor(np.float32)
            data_copy_l0c2ub(o, c, (m // 16) * (n // 16))
            qc.free_tensor(c)
            qo.enque(o)
            o = qo.deque()
            data_copy_nz2nd(dst, o, m, n)
            qo.free_tensor(o)
        else:
            fixpipe(dst, c, m, n)
            qc.free_tensor(c)


def _cube_row(chip, size: int) -> dict:
    a = np.zeros(BLOCKS * 64 * 1024, np.float16)
    out = np.zeros(BLOCKS * 32 * 1024, np.float32)
    tr = launch(_cube_kernel, BLOCKS, a, out, size, size, size, ITERATIONS, chip=chip, mode="timing").trace
    flops = 2 * size ** 3 * ITERATIONS * BLOCKS
    seconds = tr.cycles / (chip.clock_ghz * 1e9)
    tflops = flops / seconds / 1e12
    return {"size": size, "cycles": int(tr.cycles), "core_time": tr.core_time, "tflops": tflops,
            "utilization": tflops / chip.peak_fp16_tflops, **tr.pipe_ratios()}


def cube(chip="910") -> dict:
    """AIBench's cube microbenchmark on ``chip``: the best of the sizes it sweeps. Row: chip,
    tflops, peak (the chip's fp16 peak, every core), utilization (tflops / peak), what was run
    (``run``, ``size``, ``blocks``, ``iterations``), its pipe ratios, and ``sweep`` (every size)."""
    chip = get_chip(chip)
    rows = [_cube_row(chip, s) for s in CUBE_SIZES]
    best = max(rows, key=lambda r: r["tflops"])
    return {"chip": chip.name, "bench": "cube", "tflops": best["tflops"], "peak_tflops": chip.peak_fp16_tflops,
            "utilization": best["utilization"], "size": best["size"], "blocks": BLOCKS, "iterations": ITERATIONS,
            "cycles": best["cycles"], "launch_cycles": best["cycles"] - best["core_time"],
            "run": (f"{BLOCKS} blocks x {ITERATIONS} x (A, B GM -> L1, L1 -> L0A/L0B, mmad "
                    f"{best['size']}^3 fp16, L0C -> GM{' via UB' if chip.cube.output_path != 'fixpipe' else ''}), "
                    f"single-buffered as AIBench's TIK matmul_workload"),
            "pipe_ratios": {k: v for k, v in best.items() if k.endswith("_ratio")},
            "sweep": [{k: r[k] for k in ("size", "cycles", "tflops", "utilization")} for r in rows]}


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
    gflops = flops / (tr.cycles / (chip.clock_ghz * 1e9)) / 1e9
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
            "iterations": ITERATIONS, "cycles": best["cycles"], "launch_cycles": best["cycles"] - best["core_time"],
            "run": (f"{BLOCKS} blocks x {ITERATIONS} dependent vec_mul (mask {MASK}, {best['repeats']} repeats, "
                    f"fp16) over UB; FLOPs = mask x repeats per instruction"),
            "pipe_ratios": {k: v for k, v in best.items() if k.endswith("_ratio") and k != "bank_conflict_ratio"},
            "bank_conflict_ratio": best["bank_conflict_ratio"],
            "sweep": [{k: r[k] for k in ("repeats", "cycles", "gflops", "utilization")} for r in rows]}


__all__ = ["BLOCKS", "ITERATIONS", "CUBE_SIZES", "VECTOR_REPEATS", "MASK", "cube", "vector"]
