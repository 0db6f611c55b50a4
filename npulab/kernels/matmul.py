"""Matmul on the cube, as a catlass-style template: block scheduler -> block mmad -> epilogue.

What you learn here (lab 05 walks through it):

* the **block scheduler** (catlass ``GemmIdentityBlockSwizzle``) numbers the block tiles of C
  and hands them to the cores round-robin; its swizzle orders them so that cores running at
  the same time share A rows and B columns, which then come from L2 rather than HBM;
* the **block mmad** (catlass ``BlockMmad``) walks K: GM -> L1 in NZ (MTE2), L1 -> L0A/L0B in
  ZZ/ZN (MTE1), ``mmad`` accumulating in L0C (cube); every hop goes through a queue with
  ``buffer_num`` slots, so with 2 the next tile moves while this one computes (ping-pong);
* the **epilogue** (catlass ``BlockEpilogue``) drains L0C through FixPipe: NZ -> ND, + bias,
  ReLU, cast to the output dtype; with two L0C slots it overlaps the next tile's mmads.

Host side in :mod:`npulab.kernels.matmul_tiling`; the public op is :func:`npulab.ops.matmul`.
Layers (catlass names): Device = :func:`run_matmul`, Kernel = :func:`matmul_kernel`,
Block = :class:`BlockScheduler`, :class:`BlockMmad`, :class:`BlockEpilogue`, Tile = the
instructions of :mod:`npulab.lang.cube`.
"""
from __future__ import annotations

import numpy as np

from .. import formats as F
from .. import lang
from ..errors import ShapeError
from ..lang import (A1, A2, B1, B2, CO1, PIPE_FIX, PIPE_MTE2, TPipe, Queue, TBuf, data_copy_nd2nz,
                    data_copy_pad, fixpipe, get_block_idx, get_block_num, load_data, mmad,
                    set_flag, wait_flag)
from .matmul_tiling import BIAS_SLOTS, MatmulTiling, can_implement, swizzle_coord
from ..arch import DEFAULT_CHIP, round_up


class BlockScheduler:
    """Which block tile loop ``i`` computes: (batch, m index, n index), catlass's
    ``GemmIdentityBlockSwizzle<offset, direction>``. Direction 0 ("Zn") walks down a band of
    ``offset`` tile rows before moving right (and back left in the next band); direction 1
    ("Nz") the same with rows and columns exchanged."""

    def __init__(self, t: MatmulTiling):
        self.t = t
        self.m_loops, self.n_loops = t.m_loops, t.n_loops
        self.per_batch = self.m_loops * self.n_loops

    def core_loops(self) -> int:
        return self.t.batch * self.per_batch

    def block_coord(self, loop_idx: int) -> tuple[int, int, int]:
        return swizzle_coord(self.t, loop_idx)

    def actual_shape(self, m_idx: int, n_idx: int) -> tuple[int, int]:
        t = self.t
        return min(t.tile_m, t.m - m_idx * t.tile_m), min(t.tile_n, t.n - n_idx * t.tile_n)


class BlockMmad:
    """One block tile's K loop: L1 and L0 ping-pong, mmad accumulating in one L0C slot."""

    def __init__(self, pipe: TPipe, t: MatmulTiling):
        self.t = t
        dt = t.np_dtype
        self.dtype, self.acc = dt, t.acc_dtype
        c0 = F.c0_of(dt)
        item = dt.itemsize
        nz = lambda r, c: round_up(r, 16) * round_up(c, c0) * item       # noqa: E731
        a_l1 = nz(t.tile_k, t.tile_m) if t.trans_a else nz(t.tile_m, t.tile_k)
        b_l1 = nz(t.tile_n, t.tile_k) if t.trans_b else nz(t.tile_k, t.tile_n)
        self.a1, self.b1 = Queue(A1, "a_l1"), Queue(B1, "b_l1")
        self.a2, self.b2 = Queue(A2, "a_l0a"), Queue(B2, "b_l0b")
        self.c = Queue(CO1, "c_l0c")
        pipe.init_buffer(self.a1, t.l1_buffers, a_l1)
        pipe.init_buffer(self.b1, t.l1_buffers, b_l1)
        pipe.init_buffer(self.a2, t.l0_buffers, round_up(t.tile_m, 16) * round_up(t.tile_k0, c0) * item)
        pipe.init_buffer(self.b2, t.l0_buffers, round_up(t.tile_k0, c0) * round_up(t.tile_n, 16) * item)
        pipe.init_buffer(self.c, t.l0c_buffers, round_up(t.tile_m, 16) * round_up(t.tile_n, 16) * 4)

    def __call__(self, a_gm, b_gm, batch: int, m_idx: int, n_idx: int, m: int, n: int):
        """Compute one block tile into a fresh L0C slot; return it enqueued for the epilogue."""
        t = self.t
        M, N, K = t.m, t.n, t.k
        m_off, n_off = m_idx * t.tile_m, n_idx * t.tile_n
        a_base, b_base = batch * M * K, batch * K * N
        c = self.c.alloc_tensor(self.acc)
        first = True
        for k_off in range(0, K, t.tile_k):
            kl = min(t.tile_k, K - k_off)
            # GM -> L1 (MTE2), ND -> NZ on the way
            a1 = self.a1.alloc_tensor(self.dtype)
            if t.trans_a:                          # A stored (K, M): copy the (kl, m) tile
                data_copy_nd2nz(a1, a_gm[a_base + k_off * M + m_off:], kl, m, M)
            else:
                data_copy_nd2nz(a1, a_gm[a_base + m_off * K + k_off:], m, kl, K)
            self.a1.enque(a1)
            b1 = self.b1.alloc_tensor(self.dtype)
            if t.trans_b:                          # B stored (N, K): copy the (n, kl) tile
                data_copy_nd2nz(b1, b_gm[b_base + n_off * K + k_off:], n, kl, K)
            else:
                data_copy_nd2nz(b1, b_gm[b_base + k_off * N + n_off:], kl, n, N)
            self.b1.enque(b1)
            a_rows = round_up(kl if t.trans_a else m, 16)
            b_rows = round_up(n if t.trans_b else kl, 16)
            a1, b1 = self.a1.deque(), self.b1.deque()
            # L1 -> L0A / L0B (MTE1), then the cube, TILE_K0 at a time
            for k0 in range(0, kl, t.tile_k0):
                kk = min(t.tile_k0, kl - k0)
                a2 = self.a2.alloc_tensor(self.dtype)
                load_data(a2, a1, m, kk, src_rows=a_rows, col_off=k0, transpose=t.trans_a)
                self.a2.enque(a2)
                b2 = self.b2.alloc_tensor(self.dtype)
                load_data(b2, b1, kk, n, src_rows=b_rows, row_off=k0, transpose=t.trans_b)
                self.b2.enque(b2)
                a2, b2 = self.a2.deque(), self.b2.deque()
                mmad(c, a2, b2, m, n, kk, init=first)
                first = False
                self.a2.free_tensor(a2)
                self.b2.free_tensor(b2)
            self.a1.free_tensor(a1)
            self.b1.free_tensor(b1)
        self.c.enque(c)


class BlockEpilogue:
    """Drain a block tile from L0C to C in GM through FixPipe, with bias and ReLU."""

    def __init__(self, pipe: TPipe, t: MatmulTiling, queue: Queue):
        self.t, self.c = t, queue
        self.bias = None
        if t.has_bias:                         # BIAS_SLOTS slots in L1, MTE2 -> FIX by flags
            self.bias = TBuf(A1, "bias_l1")
            self.slot = round_up(t.tile_n * 4, 32)
            pipe.init_buffer(self.bias, self.slot * BIAS_SLOTS)
            self.count = 0
            self.pending = [False] * BIAS_SLOTS

    def load_bias(self, bias_gm, batch: int, n_idx: int, n: int):
        """Start the bias copy of the next tile (MTE2), before its K loop, so it overlaps."""
        if self.bias is None:
            return None
        s = self.count % BIAS_SLOTS
        self.count += 1
        if self.pending[s]:                    # FixPipe still reading this slot? wait for it
            wait_flag(PIPE_FIX, PIPE_MTE2, s)
        buf = self.bias.get(self.t.acc_dtype)[s * self.slot // 4:]
        data_copy_pad(buf, bias_gm[n_idx * self.t.tile_n:], n)
        set_flag(PIPE_MTE2, PIPE_FIX, s)
        return s, buf

    def __call__(self, c_gm, batch: int, m_idx: int, n_idx: int, m: int, n: int, bias_slot):
        t = self.t
        c = self.c.deque()
        bias = None
        if bias_slot is not None:
            s, bias = bias_slot
            wait_flag(PIPE_MTE2, PIPE_FIX, s)
        off = batch * t.m * t.n + m_idx * t.tile_m * t.n + n_idx * t.tile_n
        fixpipe(c_gm[off:], c, m, n, dst_stride=t.n, bias=bias, relu=t.relu)
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


def matmul_kernel(a_gm, b_gm, c_gm, bias_gm, t: MatmulTiling) -> None:
    """The kernel entry (catlass ``BasicMatmul`` kernel): this block's share of the block tiles.

    a_gm: A as ND (batch, M, K), or (batch, K, M) when trans_a; b_gm: B as (batch, K, N) or
    (batch, N, K) when trans_b; c_gm: C (batch, M, N) of the output dtype; bias_gm: N values
    of the accumulator dtype, or None.
    """
    pipe = TPipe()
    sched = BlockScheduler(t)
    block_mmad = BlockMmad(pipe, t)
    epilogue = BlockEpilogue(pipe, t, block_mmad.c)
    loops = range(get_block_idx(), sched.core_loops(), get_block_num())
    if t.sample_loops:
        loops = loops[: t.sample_loops]
    for i in loops:
        batch, m_idx, n_idx = sched.block_coord(i)
        m, n = sched.actual_shape(m_idx, n_idx)
        bias_slot = epilogue.load_bias(bias_gm, batch, n_idx, n)
        block_mmad(a_gm, b_gm, batch, m_idx, n_idx, m, n)
        epilogue(c_gm, batch, m_idx, n_idx, m, n, bias_slot)
    epilogue.finish()


def run_matmul(a: np.ndarray, b: np.ndarray, t: MatmulTiling, bias: np.ndarray | None = None,
               chip=DEFAULT_CHIP, mode: str = "functional", check_races: bool | None = None):
    """Device layer: check the tiling can run, lay the operands out in GM, launch.

    a, b: (batch, M, K) / (batch, K, N) arrays (or transposed per the tiling), already in the
    tiling's dtype; in timing mode only their sizes and dtypes matter (see :func:`simulate`). Returns (C, trace),
    C (batch, M, N) of the output dtype (None in timing mode)."""
    can_implement(t, chip)
    dt = t.np_dtype
    if a.dtype != dt or b.dtype != dt:
        raise ShapeError(f"run_matmul: the tiling is for {dt}, got a {a.dtype} and b {b.dtype}")
    if (bias is not None) != t.has_bias:
        raise ShapeError("run_matmul: pass bias exactly when the tiling has has_bias=True")
    if mode == "functional":
        c = np.zeros(t.batch * t.m * t.n, dtype=t.out_dtype)
        args = [np.ascontiguousarray(a).reshape(-1), np.ascontiguousarray(b).reshape(-1), c,
                None if bias is None else np.ascontiguousarray(bias, dtype=t.acc_dtype).reshape(-1)]
    else:                                   # timing: shapes only, no GM contents
        GT = lang.GlobalTensor
        args = [GT.empty(a.size, dt, "arg0"), GT.empty(b.size, dt, "arg1"),
                GT.empty(t.batch * t.m * t.n, t.out_dtype, "arg2"),
                None if bias is None else GT.empty(t.n, t.acc_dtype, "arg3")]
    # C is run_matmul's own: written in place; A, B and bias are only read
    res = lang.launch(matmul_kernel, t.block_dim, *args, t, chip=chip, mode=mode,
                      check_races=check_races, donate=(2,) if mode == "functional" else (),
                      outputs=(2,))
    out = res.outputs[2]
    return (out.reshape(t.batch, t.m, t.n) if out is not None else None), res.trace


class _Shape:
    """Stands in for an operand in timing-only runs: a size and a dtype, no bytes."""

    def __init__(self, size: int, dtype):
        self.size, self.dtype = int(size), np.dtype(dtype)


def simulate(t: MatmulTiling, chip=DEFAULT_CHIP):
    """Timing-only run of tiling ``t`` (no operand data is allocated); returns the Trace."""
    a = _Shape(t.batch * t.m * t.k, t.np_dtype)
    b = _Shape(t.batch * t.k * t.n, t.np_dtype)
    bias = _Shape(t.n, t.acc_dtype) if t.has_bias else None
    return run_matmul(a, b, t, bias, chip=chip, mode="timing")[1]
