"""LayerNorm on the vector unit (ops-nn ``norm/layer_norm_v4``, simplified): a row kernel
(:mod:`npulab.kernels.rows`).

What you learn here (lab 07):

* reductions along a row use the 2-D vector forms (``reduce_sum_rows``: WholeReduceSum over
  each repeat, then over the partials), and per-row statistics are broadcast back with
  ``sub_per_row`` / ``mul_per_row`` (Brcb, then a block stride of one row: one instruction
  sweeps 8 rows, a repeat taking one block of each; lang.vector), per-column ones (gamma,
  beta: one row reused by every row) with the ``*_per_col`` forms, block stride 0;
* the variance comes from the centred values, their squares summed as they are made: each
  row's two halves squared and added in one pass (``mul_rows``, ``mul_add_dst_rows``: Mul,
  then MulAddDst), so half as many values are left to reduce; 1 / sqrt(var + eps) is one
  ``Rsqrt``; y * gamma + beta is one ``FusedMulAdd`` (per column, or over the tile when gamma
  and beta are copied into every row of a tile, ``param_tile``);
* fp16 LayerNorm keeps two or more tiles in the vector unit at once and runs their steps
  round-robin (``in_flight``, RowKernel.process_interleaved): one barrier then orders a step of
  every tile in flight, and the start-ups they wait for are shared.
"""
from __future__ import annotations

import numpy as np

from ... import lang
from ...arch import BLOCK_BYTES, DEFAULT_CHIP, F32, round_up
from ...errors import ShapeError
from ...lang import VECCALC, TBuf
from ...lang import vector as V
from ...lang import vector_rows as VR
from ..rows import RowKernel, RowTiling, fold_halves, launch_rows, row_tiling
from ..vector_base import BUFFER_NUM, check_float

MAX_IN_FLIGHT = 4           # fp16 LayerNorm tiles interleaved at most (layer_norm_tiling)


class KernelLayerNorm(RowKernel):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta over each row (biased variance), in
    fp32: mean, x - mean, the variance of the centred values (two-pass, as ops-nn and Ascend C's
    LayerNorm compute it), then (x - mean) * rstd and the affine step.

    With ``t.param_rows`` = 2, gamma and beta are copied into every row of a whole fp32 tile
    once a block, so the affine step y * gamma + beta is one FusedMulAdd over the tile (a few
    long instructions); with 0 they stay one row reused by every row
    (``fused_mul_add_per_col``: block stride 0, one instruction a group of 8 rows)."""
    WORK_ROWS = 1
    STATS = 2

    def folds(self) -> bool:
        """The squares of a row's two halves are summed as they are made when the halves start
        on 32-byte blocks (fp32: cols a multiple of 16)."""
        return fold_halves(self.cols)

    def work_sizes(self):
        if self.folds():
            # the squares are n x cols/2 fp32: for fp16 in the freed fp16 slot, beside the
            # widened copy (one a tile in flight); for fp32 half a tile
            tile = self.t.tile_rows * self.cols
            return [tile * 4] * self.t.in_flight if self.wide else [tile * 2]
        return super().work_sizes()

    #: the interleaved form (``tile_steps``) sums the squares of a row's FOLD parts as it makes
    #: them (one Mul, then FOLD - 1 MulAddDst) when the parts start on 32-byte blocks, else of
    #: its halves: a MulAddDst costs what a Mul does, and each one more leaves fewer values to
    #: reduce (a quarter of a row instead of a half); 4 is the best for BERT rows (npulab bench kernels --family vector)
    FOLD = 4

    def fold_parts(self) -> int:
        return self.FOLD if self.cols % (8 * self.FOLD) == 0 else 2

    @property
    def STEPS(self) -> int:                       # noqa: N802 - RowKernel's name
        """Dependent vector steps of one tile in ``tile_steps`` (for the interleaving's stagger)."""
        return 14 + self.fold_parts()

    def __init__(self, x, gamma, beta, y, t: RowTiling, eps: float):
        if t.in_flight > 1:
            if not (np.dtype(t.dtype) != F32 and fold_halves(t.cols)):
                raise ShapeError(f"LayerNorm: in_flight={t.in_flight} needs an fp16 input whose rows fold in "
                                 f"halves (cols a multiple of 16), got {t.dtype} cols={t.cols}")
            if t.buffer_num <= t.in_flight:
                raise ShapeError(f"LayerNorm: in_flight={t.in_flight} tiles each hold an in slot until "
                                 f"their variance is summed; buffer_num={t.buffer_num} must be larger")
            self.STATS = 2 * t.in_flight
        super().__init__(x, y, t, "x")
        self.eps = eps
        self.gamma, self.beta = self.load_params([gamma, beta], "gamma_beta")
        if t.in_flight > 1:
            # var + eps = sum * (1 / cols) + eps as one FusedMulAdd: 1 / cols in a vector of
            # one value a row, eps in one repeat (fused_mul_add_const); the same two roundings
            # as Muls then Adds
            buf = TBuf(VECCALC, "scale_eps")
            self.pipe.init_buffer(buf, (self.stat_len + 64) * 4)
            c = buf.get(F32)
            self.inv_cols, self.eps_rep = c, c[self.stat_len:]
            lang.duplicate(self.inv_cols, 1.0 / t.cols, self.stat_len)
            lang.duplicate(self.eps_rep, eps, 64)
        self.tiled = [None, None]
        present = [k for k, p in enumerate((self.gamma, self.beta)) if p is not None]
        if t.param_rows and present:
            if t.param_rows < len(present):
                raise ShapeError(f"LayerNorm: param_rows={t.param_rows} fp32 rows a tile row, and gamma "
                                 f"and beta need {len(present)}; use layer_norm_tiling")
            if t.cols * 4 % BLOCK_BYTES:
                raise ShapeError(f"LayerNorm: param_rows needs rows that start on 32-byte blocks "
                                 f"(cols a multiple of 8), got cols={t.cols}")
            buf = TBuf(VECCALC, "gamma_beta_tile")
            span = t.tile_rows * t.cols
            self.pipe.init_buffer(buf, len(present) * span * 4)
            tiles = buf.get(F32)
            for j, k in enumerate(present):
                self.tiled[k] = tiles[j * span:]
                self.broadcast_rows(self.tiled[k], (self.gamma, self.beta)[k], t.tile_rows)

    def compute_rows(self, x32, out32, n):
        cols = self.cols
        mean, rstd = self.stats
        lang.reduce_sum_rows(mean, x32, n, cols)
        lang.muls(mean, mean, 1.0 / cols, n)
        lang.sub_per_row(x32, x32, mean, n, cols)               # x - mean (in place)
        half = cols // 2
        if self.folds():
            # the variance from the centred values: the squares of each row's two halves
            # summed as they are made (Mul, then MulAddDst), half as many values to reduce
            sq = self.spare if self.wide else self.work[0]
            VR.mul_rows(sq, x32, x32, n, half, dst_stride=half, src_stride=cols)
            VR.mul_add_dst_rows(sq, x32[half:], x32[half:], n, half, dst_stride=half, src_stride=cols)
            lang.reduce_sum_rows(rstd, sq, n, half)
        else:
            sq = self.work[0]
            lang.mul(sq, x32, x32, n * cols)
            lang.reduce_sum_rows(rstd, sq, n, cols)
        lang.muls(rstd, rstd, 1.0 / cols, n)                    # biased variance, as torch
        lang.adds(rstd, rstd, self.eps, n)
        V.rsqrt(rstd, rstd, n)                                  # 1 / sqrt(var + eps): Rsqrt
        g, b = self.tiled
        count = n * cols
        if g is not None and b is not None:
            # y = (x - mean) * rstd, then y * gamma + beta as one FusedMulAdd over the tile
            lang.mul_per_row(out32, x32, rstd, n, cols)
            V.fused_mul_add(out32, g, b, count)
        elif g is not None:
            lang.mul_per_row(x32, x32, rstd, n, cols)
            lang.mul(out32, x32, g, count)
        elif b is not None:
            lang.mul_per_row(x32, x32, rstd, n, cols)
            lang.add(out32, x32, b, count)
        # the per-column forms: gamma and beta one row reused by every row (repeat stride 0);
        # FusedMulAdd does y * gamma + beta in one pass, a pass fewer than a Mul and an Add
        elif self.gamma is not None and self.beta is not None:
            lang.mul_per_row(out32, x32, rstd, n, cols)
            VR.fused_mul_add_per_col(out32, self.gamma, self.beta, n, cols)
        elif self.gamma is not None:
            lang.mul_per_row(x32, x32, rstd, n, cols)
            lang.mul_per_col(out32, x32, self.gamma, n, cols)
        elif self.beta is not None:
            lang.mul_per_row(x32, x32, rstd, n, cols)
            lang.add_per_col(out32, x32, self.beta, n, cols)
        else:
            lang.mul_per_row(out32, x32, rstd, n, cols)

    def tile_steps(self, n: int, k: int):
        """compute_rows for an fp16 tile of n rows whose halves fold, one dependent vector step
        per ``next`` (RowKernel.process_interleaved), with buffer set k: the same
        instructions and numerics, but var + eps in one FusedMulAdd and the affine step per
        column (no gamma / beta tiles: every tile in flight would need its own UB)."""
        cols, count = self.cols, n * self.cols
        mean, rstd = self.stats[2 * k], self.stats[2 * k + 1]
        x32 = self.work[k]
        x = self.in_x.deque()
        lang.cast(x32, x, "none", count)
        yield
        yield from lang.reduce_sum_rows.steps(mean, x32, n, cols)
        lang.muls(mean, mean, 1.0 / cols, n)
        yield
        yield from lang.sub_per_row.steps(x32, x32, mean, n, cols)      # x - mean (in place)
        sq = x.reinterpret_cast(F32)                 # the fp16 slot, widened, holds the squares
        parts = self.fold_parts()
        w = cols // parts
        VR.mul_rows(sq, x32, x32, n, w, dst_stride=w, src_stride=cols)
        yield
        for j in range(1, parts):
            VR.mul_add_dst_rows(sq, x32[j * w:], x32[j * w:], n, w, dst_stride=w, src_stride=cols)
            yield
        yield from lang.reduce_sum_rows.steps(rstd, sq, n, w)
        self.in_x.free_tensor(x)
        V.fused_mul_add_const(rstd, self.inv_cols, self.eps_rep, n)    # var + eps
        yield
        V.rsqrt(rstd, rstd, n)
        yield
        yield from lang.mul_per_row.steps(x32, x32, rstd, n, cols)      # (x - mean) / std
        if self.gamma is not None or self.beta is not None:
            if self.gamma is not None and self.beta is not None:
                VR.fused_mul_add_per_col(x32, self.gamma, self.beta, n, cols)
            elif self.gamma is not None:
                lang.mul_per_col(x32, x32, self.gamma, n, cols)
            else:
                lang.add_per_col(x32, x32, self.beta, n, cols)
            yield
        y = self.out_y.alloc_tensor(self.dtype)
        lang.cast(y, x32, "rint", count)
        self.out_y.enque(y)


def layer_norm_kernel(x, gamma, beta, y, t: RowTiling, eps: float) -> None:
    KernelLayerNorm(x, gamma, beta, y, t, eps).process()


def layer_norm_tiling(rows: int, cols: int, dtype, chip=DEFAULT_CHIP, buffer_num: int = BUFFER_NUM,
                      tile_rows: int | None = None, param_tile: bool | None = None,
                      in_flight: int | None = None, ramp: int | None = None) -> RowTiling:
    """LayerNorm: fp32 scratch for the squares of x - mean (half a row when a row's halves fold,
    KernelLayerNorm), plus the fp32 copy of an fp16 tile (whose freed fp16 slot then holds the
    squares); gamma and beta kept for the block as one fp32 row each, and with ``param_tile``
    (when fp32 rows start on 32-byte blocks: cols a multiple of 8) broadcast to a whole fp32
    tile each (two more fp32 rows a tile row), so the affine step is one FusedMulAdd over the
    tile instead of one a group of 8 rows. None (the default): the tile when it costs no tile
    rows (the UB is not what limits them), else the rows.

    ``in_flight``: fp16 tiles whose dependent vector steps interleave
    (RowKernel.process_interleaved), each with its own fp32 tile; gamma and beta then stay
    one row. None (the default): for fp16 rows that fold in halves, unless ``param_tile`` is
    True, the most tiles up to MAX_IN_FLIGHT that fit the UB at the tile rows the kernel
    would use with one (so the interleaving never costs tile rows), else 1."""
    wide = np.dtype(dtype) != F32
    fixed = 2 * round_up(cols * np.dtype(dtype).itemsize, BLOCK_BYTES) + (2 * cols * 4 if wide else 0)
    if wide:
        work = 1 if fold_halves(cols) else 2
    else:
        work = 0.5 if fold_halves(cols) else 1
    aligned = cols * 4 % BLOCK_BYTES == 0

    def make(params: bool) -> RowTiling:
        return row_tiling(rows, cols, dtype, chip, what="LayerNorm", work_rows=work,
                          fixed_bytes=fixed, stats=2, buffer_num=buffer_num, tile_rows=tile_rows,
                          param_rows=2 if params and aligned else 0, ramp=ramp)
    if in_flight is None:
        in_flight = 1
        if wide and fold_halves(cols) and param_tile is not True:
            want = make(False).tile_rows if tile_rows is None else tile_rows
            for d in range(MAX_IN_FLIGHT, 1, -1):
                try:
                    return layer_norm_tiling(rows, cols, dtype, chip, buffer_num, want, False, d, ramp)
                except ShapeError:
                    pass
    if in_flight > 1:
        # every tile in flight has its fp32 tile and its two statistics; 1 / cols is one more
        # value a row and eps one repeat (KernelLayerNorm)
        return row_tiling(rows, cols, dtype, chip, what="LayerNorm", work_rows=work * in_flight,
                          fixed_bytes=fixed + 64 * 4 + BLOCK_BYTES, stats=2 * in_flight + 1,
                          buffer_num=max(buffer_num, in_flight + 1), tile_rows=tile_rows, ramp=ramp,
                          in_flight=in_flight)
    if param_tile is None:
        rows_only = make(False)
        if not aligned:
            return rows_only
        try:
            tiled = make(True)
        except ShapeError:
            return rows_only
        return tiled if tiled.tile_rows == rows_only.tile_rows else rows_only
    return make(bool(param_tile))


def check_layer_norm(x_shape, x_dtype, normalized_shape, w_spec=None, b_spec=None) -> int:
    """Validate LayerNorm inputs; returns cols = prod(normalized_shape)."""
    dt = check_float("layer_norm", "input", x_dtype)
    ns = tuple(int(d) for d in normalized_shape)
    if not ns or tuple(x_shape[len(x_shape) - len(ns):]) != ns or len(ns) > len(x_shape):
        raise ShapeError(f"layer_norm: normalized_shape {ns} must be the last dimensions of the "
                         f"input, whose shape is {tuple(x_shape)}")
    for name, spec in (("weight", w_spec), ("bias", b_spec)):
        if spec is not None:
            if tuple(spec[0]) != ns:
                raise ShapeError(f"layer_norm: {name} has shape {tuple(spec[0])}; expected normalized_shape {ns}")
            if np.dtype(spec[1]) != dt:
                raise ShapeError(f"layer_norm: {name} is {np.dtype(spec[1])} and the input {dt}; they must match")
    return int(np.prod(ns))


def launch_layer_norm(x, gamma, beta, t: RowTiling, eps: float, chip=DEFAULT_CHIP, mode="functional"):
    """Run LayerNorm with a tiling the host made; x is (..., cols). Returns (y, trace)."""
    return launch_rows(layer_norm_kernel, x, [gamma, beta], t, chip, mode, float(eps))


__all__ = ["KernelLayerNorm", "layer_norm_kernel", "layer_norm_tiling", "check_layer_norm", "launch_layer_norm",
           "MAX_IN_FLIGHT"]
