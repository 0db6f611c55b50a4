"""Matmul on the cube, as a catlass-style template: block scheduler -> block mmad -> epilogue.

What you learn here (lab 05 walks through it):

* the **block scheduler** (catlass ``GemmIdentityBlockSwizzle``) numbers the block tiles of C
  and hands them to the cores round-robin; its swizzle orders them so that cores running at
  the same time share A rows and B columns, which then come from L2 rather than HBM;
* the **block mmad** (catlass ``BlockMmad``) walks K: GM -> L1 in NZ (MTE2), L1 -> L0A/L0B in
  ZZ/ZN (MTE1), ``mmad`` accumulating in L0C (cube); every hop goes through a queue with
  ``buffer_num`` slots, so with 2 the next tile moves while this one computes (ping-pong);
* the **epilogue** (catlass ``BlockEpilogue``) drains L0C: through FixPipe on a chip that has one
  (NZ -> ND, + bias, ReLU, cast to the output dtype on the way), through UB on the 910 and 310
  (the tile moves L0C -> UB on the vector pipe, the vector unit adds the bias, casts and applies
  ReLU, MTE3 writes it NZ -> ND: :mod:`npulab.kernels.epilogue`); with two L0C slots it overlaps
  the next tile's mmads.

Host side in :mod:`npulab.kernels.matmul.tiling`; the public op is :func:`npulab.ops.matmul`.
Layers (catlass names): Device = :func:`launch_matmul`, Kernel = :func:`matmul_kernel`,
Block = :class:`BlockScheduler`, :class:`BlockMmad`, :class:`BlockEpilogue`, Tile = the
instructions of :mod:`npulab.lang.cube`.
"""
from __future__ import annotations

import numpy as np

from ... import lang
from ...arch import DEFAULT_CHIP, FRACTAL_ROWS, round_up
from ...errors import ShapeError
from ...lang import (A1, A2, B1, B2, CO1, PIPE_FIX, PIPE_MTE2, Queue, TBuf, TPipe, data_copy_nd2nz,
                     data_copy_pad, fixpipe, get_block_idx, get_block_num, load_data, mmad, output_path,
                     running_chip, set_flag, wait_flag)
from ..epilogue import UbEpilogue
from .tiling import (BIAS_SLOTS, MatmulTiling, can_implement, l0_tile_bytes, l1_tile_bytes, swizzle_coord,
                     ub_plan_of)


def tile_mmad(a2q: Queue, b2q: Queue, c, load_a, load_b, m: int, n: int, k: int, dtype, init: bool) -> None:
    """One L0 step (catlass's TileMmad): ``load_a(a2)`` fills an L0A slot and ``load_b(b2)`` an L0B
    slot (MTE1), each handed to the cube through its queue, then ``mmad`` accumulates the
    (m, k) x (k, n) product into ``c`` in L0C (into a fresh result when ``init``), and both
    slots go back to MTE1 for the next step."""
    a2 = a2q.alloc_tensor(dtype)
    load_a(a2)
    a2q.enque(a2)
    b2 = b2q.alloc_tensor(dtype)
    load_b(b2)
    b2q.enque(b2)
    a2, b2 = a2q.deque(), b2q.deque()
    mmad(c, a2, b2, m, n, k, init=init)
    a2q.free_tensor(a2)
    b2q.free_tensor(b2)


class BlockScheduler:
    """Which block tile loop ``i`` computes: (batch, m index, n index), catlass's
    ``GemmIdentityBlockSwizzle<offset, direction>`` (:func:`~npulab.kernels.matmul.tiling.swizzle_coord`)."""

    def __init__(self, t: MatmulTiling):
        self.t = t

    def core_loops(self) -> int:
        return self.t.core_loops

    def block_coord(self, loop_idx: int) -> tuple[int, int, int]:
        return swizzle_coord(self.t, loop_idx)

    def actual_shape(self, m_idx: int, n_idx: int) -> tuple[int, int]:
        p, s = self.t.problem, self.t.tiles
        return min(s.tile_m, p.m - m_idx * s.tile_m), min(s.tile_n, p.n - n_idx * s.tile_n)


class BlockMmad:
    """One block tile's K loop: L1 and L0 ping-pong, mmad accumulating in one L0C slot."""

    def __init__(self, pipe: TPipe, t: MatmulTiling):
        self.t = t
        p, s = t.problem, t.tiles
        self.dtype, self.acc = p.np_dtype, p.acc_dtype
        self.a1, self.b1 = Queue(A1, "a_l1"), Queue(B1, "b_l1")
        self.a2, self.b2 = Queue(A2, "a_l0a"), Queue(B2, "b_l0b")
        self.c = Queue(CO1, "c_l0c")
        a_l1, b_l1 = l1_tile_bytes(t)
        a_l0, b_l0, c_l0 = l0_tile_bytes(t)
        pipe.init_buffer(self.a1, s.l1_buffers, a_l1)
        pipe.init_buffer(self.b1, s.l1_buffers, b_l1)
        pipe.init_buffer(self.a2, s.l0_buffers, a_l0)
        pipe.init_buffer(self.b2, s.l0_buffers, b_l0)
        pipe.init_buffer(self.c, s.l0c_buffers, c_l0)

    def _copy_in(self, queue, x_gm, base, rows, cols, r0, c0, nr, nc, trans) -> None:
        """GM -> L1 (MTE2), ND -> NZ on the way: the (nr, nc) tile at (r0, c0) of op(X), a rows x
        cols matrix stored as it is (row-major) or, when ``trans``, as its transpose (cols x rows:
        then the copy takes the (nc, nr) tile of what is stored)."""
        x1 = queue.alloc_tensor(self.dtype)
        if trans:
            data_copy_nd2nz(x1, x_gm[base + c0 * rows + r0:], nc, nr, rows)
        else:
            data_copy_nd2nz(x1, x_gm[base + r0 * cols + c0:], nr, nc, cols)
        queue.enque(x1)

    def __call__(self, a_gm, b_gm, batch: int, m_idx: int, n_idx: int, m: int, n: int):
        """Compute one block tile into a fresh L0C slot; return it enqueued for the epilogue."""
        p, s = self.t.problem, self.t.tiles
        M, N, K = p.m, p.n, p.k
        m_off, n_off = m_idx * s.tile_m, n_idx * s.tile_n
        a_base, b_base = batch * M * K, batch * K * N
        c = self.c.alloc_tensor(self.acc)
        first = True
        for k_off in range(0, K, s.tile_k):
            kl = min(s.tile_k, K - k_off)
            self._copy_in(self.a1, a_gm, a_base, M, K, m_off, k_off, m, kl, p.trans_a)
            self._copy_in(self.b1, b_gm, b_base, K, N, k_off, n_off, kl, n, p.trans_b)
            a_rows = round_up(kl if p.trans_a else m, FRACTAL_ROWS)
            b_rows = round_up(n if p.trans_b else kl, FRACTAL_ROWS)
            a1, b1 = self.a1.deque(), self.b1.deque()
            # L1 -> L0A / L0B (MTE1), then the cube, TILE_K0 at a time
            for k0 in range(0, kl, s.tile_k0):
                kk = min(s.tile_k0, kl - k0)
                tile_mmad(self.a2, self.b2, c,
                          lambda a2: load_data(a2, a1, m, kk, src_rows=a_rows, col_off=k0, transpose=p.trans_a),
                          lambda b2: load_data(b2, b1, kk, n, src_rows=b_rows, row_off=k0, transpose=p.trans_b),
                          m, n, kk, self.dtype, first)
                first = False
            self.a1.free_tensor(a1)
            self.b1.free_tensor(b1)
        self.c.enque(c)


class BlockEpilogue:
    """Drain a block tile from L0C to C in GM through FixPipe, with bias and ReLU (a chip with
    FixPipe; on the 910 and 310 the tile goes through UB: :class:`npulab.kernels.epilogue.UbEpilogue`,
    which takes the same calls)."""

    def __init__(self, pipe: TPipe, t: MatmulTiling, queue: Queue):
        self.t, self.c = t, queue
        self.bias = None
        if t.problem.has_bias:                 # BIAS_SLOTS slots in L1, MTE2 -> FIX by flags
            self.bias = TBuf(A1, "bias_l1")
            self.slot = round_up(t.tiles.tile_n * 4, 32)
            pipe.init_buffer(self.bias, self.slot * BIAS_SLOTS)
            self.count = 0
            self.pending = [False] * BIAS_SLOTS

    def load(self, vectors: dict, key, n: int):
        """Start the bias copy of the next tile (MTE2; ``vectors["bias"]``: the GM bias at the
        tile's first column), before its K loop, so it overlaps."""
        if self.bias is None:
            return None
        s = self.count % BIAS_SLOTS
        self.count += 1
        if self.pending[s]:                    # FixPipe still reading this slot? wait for it
            wait_flag(PIPE_FIX, PIPE_MTE2, s)
        buf = self.bias.get(self.t.problem.acc_dtype)[s * self.slot // 4:]
        data_copy_pad(buf, vectors["bias"], n)
        set_flag(PIPE_MTE2, PIPE_FIX, s)
        return s, buf

    def __call__(self, c_gm, stride: int, m: int, n: int, bias_slot):
        c = self.c.deque()
        bias = None
        if bias_slot is not None:
            slot, bias = bias_slot
            wait_flag(PIPE_MTE2, PIPE_FIX, slot)
        fixpipe(c_gm, c, m, n, dst_stride=stride, bias=bias, relu=self.t.problem.relu)
        if bias_slot is not None:
            set_flag(PIPE_FIX, PIPE_MTE2, bias_slot[0])
            self.pending[bias_slot[0]] = True
        self.c.free_tensor(c)

    def finish(self):
        """Consume the FIX -> MTE2 flags no later bias copy waited on (clean flags at block end)."""
        if self.bias is None:
            return
        for s in range(BIAS_SLOTS):
            if self.pending[s]:
                wait_flag(PIPE_FIX, PIPE_MTE2, s)
                self.pending[s] = False


def block_epilogue(pipe: TPipe, t: MatmulTiling, queue: Queue):
    """The epilogue of the chip the kernel runs on: FixPipe where there is one, else the vector
    unit in UB (``[cube] output_path``; a real kernel is compiled for its chip)."""
    if output_path() == "fixpipe":
        return BlockEpilogue(pipe, t, queue)
    return UbEpilogue(pipe, ub_plan_of(t, running_chip()), queue)


def matmul_kernel(a_gm, b_gm, c_gm, bias_gm, t: MatmulTiling, sample_loops: int = 0) -> None:
    """The kernel entry (catlass ``BasicMatmul`` kernel): this block's share of the block tiles.

    a_gm: A as ND (batch, M, K), or (batch, K, M) when trans_a; b_gm: B as (batch, K, N) or
    (batch, N, K) when trans_b; c_gm: C (batch, M, N) of the output dtype; bias_gm: N values
    of the accumulator dtype, or None. ``sample_loops`` > 0: each block runs only its first
    that many block tiles (the benches' extrapolated rows).
    """
    pipe = TPipe()
    sched = BlockScheduler(t)
    block_mmad = BlockMmad(pipe, t)
    epilogue = block_epilogue(pipe, t, block_mmad.c)
    p, s = t.problem, t.tiles
    loops = range(get_block_idx(), sched.core_loops(), get_block_num())
    if sample_loops:
        loops = loops[:sample_loops]
    for i in loops:
        batch, m_idx, n_idx = sched.block_coord(i)
        m, n = sched.actual_shape(m_idx, n_idx)
        vectors = {"bias": bias_gm[n_idx * s.tile_n:]} if p.has_bias else {}
        handle = epilogue.load(vectors, n_idx, n)
        block_mmad(a_gm, b_gm, batch, m_idx, n_idx, m, n)
        epilogue(c_gm[batch * p.m * p.n + m_idx * s.tile_m * p.n + n_idx * s.tile_n:], p.n, m, n, handle)
    epilogue.finish()


def launch_matmul(a, b, t: MatmulTiling, bias=None, chip=DEFAULT_CHIP, mode: str = "functional",
                  check_races: bool | None = None, sample_loops: int = 0):
    """Device layer: check the tiling can run, lay the operands out in GM, launch.

    a, b: (batch, M, K) / (batch, K, N) arrays (or transposed per the problem), already in the
    problem's dtype; in timing mode they may be shape-only GM tensors
    (:meth:`npulab.lang.GlobalTensor.empty`, see :func:`simulate`). Returns (C, trace), C
    (batch, M, N) of the output dtype (None in timing mode)."""
    can_implement(t, chip)
    p = t.problem
    dt = p.np_dtype
    if a.dtype != dt or b.dtype != dt:
        raise ShapeError(f"launch_matmul: the tiling is for {dt}, got a {a.dtype} and b {b.dtype}")
    if (bias is not None) != p.has_bias:
        raise ShapeError("launch_matmul: pass bias exactly when the problem has has_bias=True")
    if mode == "functional":
        c = np.zeros(p.batch * p.m * p.n, dtype=p.out_dtype)
        args = [np.ascontiguousarray(a).reshape(-1), np.ascontiguousarray(b).reshape(-1), c,
                None if bias is None else np.ascontiguousarray(bias, dtype=p.acc_dtype).reshape(-1)]
    else:                                   # timing: shapes only, no GM contents
        GT = lang.GlobalTensor
        args = [GT.empty(a.size, dt, "arg0"), GT.empty(b.size, dt, "arg1"),
                GT.empty(p.batch * p.m * p.n, p.out_dtype, "arg2"),
                None if bias is None else GT.empty(p.n, p.acc_dtype, "arg3")]
    # C is launch_matmul's own: written in place; A, B and bias are only read
    res = lang.launch(matmul_kernel, t.tiles.block_dim, *args, t, sample_loops, chip=chip, mode=mode,
                      check_races=check_races, donate=(2,) if mode == "functional" else (),
                      outputs=(2,))
    out = res.outputs[2]
    return (out.reshape(p.batch, p.m, p.n) if out is not None else None), res.trace


def simulate(t: MatmulTiling, chip=DEFAULT_CHIP, sample_loops: int = 0):
    """Timing-only run of tiling ``t`` (no operand data is allocated); returns the Trace."""
    p = t.problem
    GT = lang.GlobalTensor
    a = GT.empty(p.batch * p.m * p.k, p.np_dtype)
    b = GT.empty(p.batch * p.k * p.n, p.np_dtype)
    bias = GT.empty(p.n, p.acc_dtype) if p.has_bias else None
    return launch_matmul(a, b, t, bias, chip=chip, mode="timing", sample_loops=sample_loops)[1]


__all__ = ["tile_mmad", "BlockScheduler", "BlockMmad", "BlockEpilogue", "block_epilogue", "matmul_kernel",
           "launch_matmul", "simulate"]
