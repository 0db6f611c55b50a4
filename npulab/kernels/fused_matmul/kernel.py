"""Matmul + a vector epilogue as one mix kernel on a split chip (910B): catlass's MatmulEpilogue,
ops-nn's FusedMatMul with fusedOpType gelu_erf / gelu_tanh.

What you learn here:

* on a split chip the cube and the vector unit are different cores: the **AIC** computes each
  block tile (block scheduler and block mmad of :mod:`npulab.kernels.matmul`), FixPipe adds the
  bias and drains it, in fp16, to a slot of a **GM workspace**; the **two AIVs** of the AI core
  each read half of the tile's rows into UB, apply GELU, and write their rows of y;
* nothing orders the two sides but **cross-core flags**: the AIC sets AIC_DONE (mode 2, on
  FIX: it fires once the drain has completed) and each AIV waits on it (on MTE2, before it
  reads the slot); each AIV sets AIV_DONE once its last read of the slot has completed, and
  the AIC waits on it (on FIX: its next mmads go on meanwhile) before it drains into that slot
  again. Two slots (``WS_SLOTS``) are double buffering across cores: the cube fills one while
  the vector cores empty the other, and the epilogue of tile j runs under the mmads of j + 1;
* against the separate launches (``ops.matmul`` then ``ops.gelu``) it saves the second launch,
  the C tensor's round trip through HBM (the workspace is a few MB that L2 keeps) and the time
  the cube would wait for the vector unit, or the vector unit for the cube.

Host side in :mod:`.tiling`; the public op is :func:`npulab.ops.fused_matmul`.
"""
from __future__ import annotations

import numpy as np

from ... import lang
from ...arch import DEFAULT_CHIP
from ...errors import ShapeError
from ...lang import (PIPE_FIX, PIPE_MTE2, VECIN, VECOUT, Queue, TPipe, cross_core_set_flag, cross_core_wait_flag,
                     data_copy, data_copy_strided, get_block_idx, get_block_num, get_sub_block_idx,
                     get_sub_block_num, is_aic, is_aiv)
from ..activation import ActivationFormula
from ..matmul import BlockEpilogue, BlockMmad, BlockScheduler
from .tiling import WS_SLOTS, FusedMatmulTiling, can_implement

#: cross-core flag ids (catlass's MatmulEpilogue takes 0 forward and 1 back the same way)
AIC_DONE = 0            # AIC -> its AIVs: a block tile is in its workspace slot
AIV_DONE = 1            # both AIVs -> the AIC: they have read the slot, it may be filled again


def aic_part(a_gm, b_gm, bias_gm, ws_gm, t: FusedMatmulTiling) -> None:
    """The cube core: every block tile of this AI core, K loop into L0C, FixPipe (+ bias) into
    workspace slot j % WS_SLOTS once the AIVs are done with what was there."""
    mt = t.mm
    pipe = TPipe()
    sched = BlockScheduler(mt)
    block_mmad = BlockMmad(pipe, mt)
    epilogue = BlockEpilogue(pipe, mt, block_mmad.c)
    ws = ws_gm[get_block_idx() * WS_SLOTS * t.slot_elems:]
    loops = range(get_block_idx(), sched.core_loops(), get_block_num())
    for j, i in enumerate(loops):
        batch, m_idx, n_idx = sched.block_coord(i)
        m, n = sched.actual_shape(m_idx, n_idx)
        bias_slot = epilogue.load({"bias": bias_gm[n_idx * mt.tiles.tile_n:]} if mt.problem.has_bias else {},
                                  n_idx, n)
        block_mmad(a_gm, b_gm, batch, m_idx, n_idx, m, n)
        if j >= WS_SLOTS:                    # the slot's last tile is read by both AIVs
            cross_core_wait_flag(AIV_DONE, PIPE_FIX)
        epilogue(ws[(j % WS_SLOTS) * t.slot_elems:], t.ws_stride, m, n, bias_slot)
        cross_core_set_flag(2, PIPE_FIX, AIC_DONE)
    epilogue.finish()
    for _ in range(min(len(loops), WS_SLOTS)):   # the last reads: sets and waits match one to one
        cross_core_wait_flag(AIV_DONE, PIPE_FIX)


class BlockEpilogueAiv:
    """One AIV's half of each block tile: workspace -> UB (MTE2), the activation (V), UB -> y
    (MTE3), in chunks of ``chunk_rows`` rows through two double-buffered queues."""

    def __init__(self, t: FusedMatmulTiling):
        self.t = t
        self.elems = t.chunk_rows * t.ws_stride
        self.pipe = TPipe()
        self.c_in, self.y_out = Queue(VECIN, "c_in"), Queue(VECOUT, "y_out")
        self.pipe.init_buffer(self.c_in, t.buffer_num, self.elems * 2)
        self.pipe.init_buffer(self.y_out, t.buffer_num, self.elems * 2)
        self.formula = ActivationFormula(self.pipe, t.problem.activation, np.float16, self.elems)

    def __call__(self, slot_gm, y_gm, m_idx: int, n_idx: int, m: int, n: int) -> None:
        t, s, N = self.t, self.t.mm.tiles, self.t.problem.n
        r0 = get_sub_block_idx() * t.half
        rows = max(0, min(t.half, m - r0))
        cross_core_wait_flag(AIC_DONE, PIPE_MTE2)
        if rows == 0:                        # a short last tile: nothing for this AIV but the flag
            cross_core_set_flag(2, PIPE_MTE2, AIV_DONE)
            return
        for c0 in range(0, rows, t.chunk_rows):
            cr = min(t.chunk_rows, rows - c0)
            count = cr * t.ws_stride
            x = self.c_in.alloc_tensor(np.float16)
            data_copy(x, slot_gm[(r0 + c0) * t.ws_stride:], count)
            self.c_in.enque(x)
            if c0 + cr >= rows:              # the slot is read: the AIC may drain into it again
                cross_core_set_flag(2, PIPE_MTE2, AIV_DONE)
            x = self.c_in.deque()
            y = self.y_out.alloc_tensor(np.float16)
            self.formula(y, x, count)
            self.y_out.enque(y)
            self.c_in.free_tensor(x)
            y = self.y_out.deque()
            dst = y_gm[(m_idx * s.tile_m + r0 + c0) * N + n_idx * s.tile_n:]
            if n == t.ws_stride == N:
                data_copy(dst, y, count)
            else:                            # rows of n values into rows of N
                data_copy_strided(dst, y, cr, n, src_stride=t.ws_stride, dst_stride=N)
            self.y_out.free_tensor(y)


def aiv_part(ws_gm, y_gm, t: FusedMatmulTiling) -> None:
    """A vector core: its half of every block tile of its AI core, in the AIC's order."""
    core = get_block_idx() // get_sub_block_num()      # the AI core (catlass: GetBlockIdx / GetSubBlockNum)
    sched = BlockScheduler(t.mm)
    epilogue = BlockEpilogueAiv(t)
    ws = ws_gm[core * WS_SLOTS * t.slot_elems:]
    for j, i in enumerate(range(core, sched.core_loops(), get_block_num())):
        _, m_idx, n_idx = sched.block_coord(i)
        m, n = sched.actual_shape(m_idx, n_idx)
        epilogue(ws[(j % WS_SLOTS) * t.slot_elems:], y_gm, m_idx, n_idx, m, n)


def fused_matmul_kernel(a_gm, b_gm, bias_gm, y_gm, ws_gm, t: FusedMatmulTiling) -> None:
    """The kernel entry (KERNEL_TYPE_MIX_AIC_1_2): the same body on the AIC and its two AIVs."""
    if is_aic():
        aic_part(a_gm, b_gm, bias_gm, ws_gm, t)
    if is_aiv():
        aiv_part(ws_gm, y_gm, t)


def launch_fused_matmul(a, b, t: FusedMatmulTiling, bias=None, chip=DEFAULT_CHIP, mode: str = "functional",
                        check_races: bool | None = None):
    """Device layer: check the tiling can run, lay out the operands and the workspace in GM,
    launch as a mix kernel. a (M, K), b (K, N) float16, bias (N,) or None; in timing mode they
    may be shape-only GM tensors. Returns (y (M, N) float16 or None in timing mode, trace)."""
    can_implement(t, chip)
    p = t.problem
    if (bias is not None) != p.has_bias:
        raise ShapeError("launch_fused_matmul: pass bias exactly when the problem has has_bias=True")
    acc = t.mm.problem.acc_dtype
    if mode == "functional":
        if a.dtype != np.float16 or b.dtype != np.float16:
            raise ShapeError(f"launch_fused_matmul: a and b must be float16, got {a.dtype} and {b.dtype}")
        args = [np.ascontiguousarray(a).reshape(-1), np.ascontiguousarray(b).reshape(-1),
                None if bias is None else np.ascontiguousarray(bias, dtype=acc).reshape(-1),
                np.zeros(p.m * p.n, np.float16), np.zeros(t.workspace_elems, np.float16)]
    else:
        GT = lang.GlobalTensor
        args = [GT.empty(p.m * p.k, np.float16, "arg0"), GT.empty(p.k * p.n, np.float16, "arg1"),
                None if bias is None else GT.empty(p.n, acc, "arg2"),
                GT.empty(p.m * p.n, np.float16, "arg3"), GT.empty(t.workspace_elems, np.float16, "arg4")]
    res = lang.launch(fused_matmul_kernel, t.block_dim, *args, t, chip=chip, mode=mode, core_type="mix",
                      check_races=check_races, donate=(3, 4) if mode == "functional" else (), outputs=(3,))
    y = res.outputs[3]
    return (y.reshape(p.m, p.n) if y is not None else None), res.trace


__all__ = ["AIC_DONE", "AIV_DONE", "aic_part", "BlockEpilogueAiv", "aiv_part", "fused_matmul_kernel",
           "launch_fused_matmul"]
