"""Numerically stable softmax over any axis (ops-nn's SoftmaxV2), on the vector unit.

softmax(x)_i = exp(x_i - max(x)) / sum_j exp(x_j - max(x)): subtracting the row maximum first
keeps every exp at or below 1, so nothing overflows (lab 07).

Two kernels, picked by the host tiling (the ``tiling key`` of ops-nn):

* **AR** (the reduced axis is the last one, rows are contiguous): a row kernel
  (:class:`~npulab.kernels.norm.RowKernel`): ``reduce_max_rows``, ``sub_per_row``, ``exp``,
  ``reduce_sum_rows``, ``reciprocal``, ``mul_per_row``.
* **RA** (the input is (outer, R, inner) and the reduced axis R is not last): a tile holds the
  R rows of one outer index over a chunk of ``tile_inner`` columns; the max and the sum over R
  are elementwise ``max`` / ``add`` of rows, broadcast back with ``sub_per_col`` /
  ``mul_per_col``.

fp16 tiles are widened to fp32 (cast) and rounded once at the end; the AR kernel first takes
the row max and x - max on the fp16 tile (``narrow``, the default: half the repeats of those
two steps; ops-nn widens first, ``narrow=False``), see :class:`KernelSoftmaxAR`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .. import lang
from ..chips import get_chip
from ..errors import ShapeError
from ..lang import VECCALC, TBuf
from .norm import (BUFFER_NUM, BLOCK_BYTES, F32, RowKernel, RowTiling, _round_up, _run_rows, check_float, copy,
                   row_tiling, setup_item_kernel)


# -- AR: softmax over the last axis --------------------------------------------------------
class KernelSoftmaxAR(RowKernel):
    """softmax over rows of a tile. fp16 with ``t.narrow`` (the default of softmax_ar_tiling):
    the row max and x - max run on the fp16 tile before it is widened, half the repeats of the
    fp32 form; exp, the sum and the scaling run in fp32. ops-nn's SoftmaxV2 (and Ascend C's
    SoftMax<half>) widen first and do all of it in fp32. The row max is exact in fp16; x - max
    rounds to fp16 once (relative error 2**-11 of x - max), which moves exp(x - max) by at most
    |x - max| * 2**-11 relative: at most 0.37 * 2**-11 ~ 1.8e-4 of the result's scale, inside
    the fp16 tolerance. ``narrow=False`` is the widened path."""
    WORK_ROWS = 0
    STATS = 2

    def __init__(self, x, y, t: RowTiling):
        super().__init__(x, y, t, "x")
        if self.wide and t.narrow:
            b = TBuf(VECCALC, "max16")
            self.pipe.init_buffer(b, _round_up(t.tile_rows * self.dtype.itemsize, BLOCK_BYTES))
            self.mx16 = b.get(self.dtype)

    def narrow_rows(self, x, n):
        if self.t.narrow:
            lang.reduce_max_rows(self.mx16, x, n, self.cols)
            lang.sub_per_row(x, x, self.mx16, n, self.cols)  # x - max <= 0, in fp16

    def compute_rows(self, x32, out32, n):
        cols = self.cols
        mx, sm = self.stats
        if not (self.wide and self.t.narrow):
            lang.reduce_max_rows(mx, x32, n, cols)
            lang.sub_per_row(x32, x32, mx, n, cols)        # x - max <= 0: exp cannot overflow
        lang.exp(x32, x32, n * cols)
        lang.reduce_sum_rows(sm, x32, n, cols)
        lang.reciprocal(sm, sm, n)
        lang.mul_per_row(out32, x32, sm, n, cols)


def softmax_ar_kernel(x, y, t: RowTiling) -> None:
    KernelSoftmaxAR(x, y, t).process()


def softmax_ar_tiling(rows: int, cols: int, dtype, chip="910", buffer_num: int = BUFFER_NUM,
                      tile_rows: int | None = None, narrow: bool = True) -> RowTiling:
    """``narrow`` (fp16 only): the row max and x - max in fp16 before widening (KernelSoftmaxAR);
    False widens first and runs every step in fp32, as ops-nn does."""
    wide = np.dtype(dtype) != F32
    return row_tiling(rows, cols, dtype, chip, what="SoftmaxV2", work_rows=int(wide), stats=2,
                      buffer_num=buffer_num, tile_rows=tile_rows, narrow=narrow)


# -- RA: softmax over a middle axis --------------------------------------------------------
@dataclass(frozen=True)
class SoftmaxRATiling:
    outer: int          # product of the dims before the softmax axis
    r: int              # the softmax axis
    inner: int          # product of the dims after it (> 1)
    dtype: str
    tile_inner: int     # columns a tile (a multiple of a 32-byte block, or all of inner)
    row_stride: int     # UB elements between the R rows of a tile
    work_items: int     # outer x ceil(inner / tile_inner)
    items_per_block: int
    block_dim: int
    buffer_num: int

    def to_dict(self) -> dict:
        return asdict(self)


def softmax_ra_tiling(outer: int, r: int, inner: int, dtype, chip="910", buffer_num: int = 2) -> SoftmaxRATiling:
    chip = get_chip(chip)
    dt = check_float("SoftmaxV2", "input", dtype)
    per_block = BLOCK_BYTES // dt.itemsize
    wide = dt != F32
    # a column of the tile: R elements in and out (buffer_num each), R fp32 if widened, + max and sum
    per_col = r * (2 * buffer_num * dt.itemsize + (4 if wide else 0)) + 8
    free = chip.buffers.ub - 16 * BLOCK_BYTES
    fit = free // per_col // per_block * per_block
    if fit < per_block:
        raise ShapeError(f"SoftmaxV2: the softmax axis has {r} elements; a tile of {r} rows x "
                         f"{per_block} columns needs {per_col * per_block:,} B of UB and chip "
                         f"'{chip.name}' has {chip.buffers.ub:,} B. Use a shorter softmax axis.")
    inner_al = _round_up(inner, per_block)
    tile_inner = inner if inner_al <= fit else fit
    row_stride = _round_up(tile_inner, per_block)
    items = outer * -(-inner // tile_inner)
    ipb = -(-items // chip.cores_for("aiv"))
    return SoftmaxRATiling(outer, r, inner, dt.name, tile_inner, row_stride, items, ipb, -(-items // ipb), buffer_num)


class KernelSoftmaxRA:
    def __init__(self, x, y, t: SoftmaxRATiling):
        setup_item_kernel(self, x, y, t, t.r * t.row_stride)
        st = TBuf(VECCALC, "max_sum")
        self.pipe.init_buffer(st, 2 * t.row_stride * 4)
        s = st.get(F32)
        self.mx, self.sm = s, s[t.row_stride:]

    def process(self):
        t = self.t
        chunks = -(-t.inner // t.tile_inner)
        for k in range(self.first, self.first + self.count):
            o, ci = divmod(k, chunks)
            c0 = ci * t.tile_inner
            w = min(t.tile_inner, t.inner - c0)
            base = o * t.r * t.inner + c0
            x = self.in_x.alloc_tensor(self.dtype)
            for r in range(t.r):                            # one DMA a row: rows sit inner apart in GM
                copy(x[r * t.row_stride:], self.x_gm[base + r * t.inner:], w)
            self.in_x.enque(x)
            x = self.in_x.deque()
            y = self.out_y.alloc_tensor(self.dtype)
            span = (t.r - 1) * t.row_stride + w
            if self.wide:
                src = dst = self.x32
                lang.cast(src, x, "none", span)
            else:
                src, dst = x, y
            rs = t.row_stride
            lang.adds(self.mx, src, 0.0, w)
            for r in range(1, t.r):
                lang.max(self.mx, self.mx, src[r * rs:], w)
            lang.sub_per_col(src, src, self.mx, t.r, w, rs)
            lang.exp(src, src, span)
            lang.adds(self.sm, src, 0.0, w)
            for r in range(1, t.r):
                lang.add(self.sm, self.sm, src[r * rs:], w)
            lang.reciprocal(self.sm, self.sm, w)
            lang.mul_per_col(dst, src, self.sm, t.r, w, rs)
            if self.wide:
                lang.cast(y, self.x32, "rint", span)
            self.in_x.free_tensor(x)
            self.out_y.enque(y)
            y = self.out_y.deque()
            for r in range(t.r):
                copy(self.y_gm[base + r * t.inner:], y[r * t.row_stride:], w)
            self.out_y.free_tensor(y)


def softmax_ra_kernel(x, y, t: SoftmaxRATiling) -> None:
    KernelSoftmaxRA(x, y, t).process()


def split_axis(shape, dim: int) -> tuple[int, int, int]:
    """(outer, R, inner) of ``shape`` around axis ``dim`` (negative counts from the end)."""
    nd = len(shape)
    if nd == 0:
        raise ShapeError("softmax: the input must have at least one dimension")
    if not -nd <= dim < nd:
        raise ShapeError(f"softmax: dim={dim} is out of range for an input with {nd} dims "
                         f"(expected {-nd} .. {nd - 1})")
    dim %= nd
    return int(np.prod(shape[:dim], dtype=np.int64)), int(shape[dim]), int(np.prod(shape[dim + 1:], dtype=np.int64))


def softmax_tiling(shape, dtype, dim: int, chip="910"):
    """AR tiling when the softmax axis is last (or everything after it has size 1), RA otherwise."""
    outer, r, inner = split_axis(shape, dim)
    if min(outer, r, inner) == 0:
        raise ShapeError(f"softmax: empty input of shape {tuple(shape)}")
    if inner == 1:
        return softmax_ar_tiling(outer, r, dtype, chip)
    return softmax_ra_tiling(outer, r, inner, dtype, chip)


def launch_softmax(x: np.ndarray, t, chip="910", mode="functional"):
    """Run softmax with a tiling from :func:`softmax_tiling`. Returns (y, trace)."""
    if isinstance(t, RowTiling):
        return _run_rows(softmax_ar_kernel, x, [], t, chip, mode)
    y = np.zeros_like(x)
    outs, trace = lang.launch(softmax_ra_kernel, t.block_dim, np.ascontiguousarray(x).reshape(-1),
                              y.reshape(-1), t, chip=chip, mode=mode, core_type="aiv")
    return (outs[1].reshape(x.shape) if outs[1] is not None else None), trace
