"""Numerically stable softmax over any axis (ops-nn's SoftmaxV2), on the vector unit.

softmax(x)_i = exp(x_i - max(x)) / sum_j exp(x_j - max(x)): subtracting the row maximum first
keeps every exp at or below 1, so nothing overflows (lab 07).

Two kernels, picked by the host tiling (the ``tiling key`` of ops-nn):

* **AR** (the reduced axis is the last one, rows are contiguous): a row kernel
  (:class:`~npulab.kernels.rows.RowKernel`): ``reduce_max_rows``, ``sub_per_row``, ``exp``,
  ``reduce_sum_rows``, ``reciprocal``, ``mul_per_row``.
* **RA** (the input is (outer, R, inner) and the reduced axis R is not last): a tile holds the
  R rows of one outer index over a chunk of ``tile_inner`` columns; the max and the sum over R
  are elementwise ``max`` / ``add`` of rows, broadcast back with ``sub_per_col`` /
  ``mul_per_col``.

fp16 in the AR kernel (see :class:`KernelSoftmaxAR`): by default the row max, x - max, exp and
the scaling by 1 / sum run on the fp16 tile and only the sum is widened to fp32 (``exp16``);
``exp16=False`` widens after x - max (``narrow``) and ``narrow=False`` widens first and runs
every step in fp32, as ops-nn's SoftmaxV2 does. The RA kernel widens fp16 tiles to fp32 (cast)
and rounds once at the end.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import lang
from ..arch import BLOCK_BYTES, DEFAULT_CHIP, F32, ceil_div, round_up
from ..chips import get_chip
from ..errors import ShapeError
from ..lang import VECCALC, TBuf
from ..lang import vector_rows as VR
from .rows import RowKernel, RowTiling, fold_halves, launch_rows, row_tiling
from .tiling_data import Tiling
from .vector_base import BUFFER_NUM, check_float, copy_elements, launch_vector, setup_item_kernel


# -- AR: softmax over the last axis --------------------------------------------------------
class KernelSoftmaxAR(RowKernel):
    """softmax over rows of a tile. fp16, three paths (softmax_ar_tiling's switches):

    * ``exp16`` (the default): the row max, x - max, e = exp(x - max) and y = e * (1 / sum) on
      the fp16 tile, half the repeats of each fp32 step (an exp costs four); each row's second
      half of e is added onto its first in fp16 (``add_rows``), and those sums are widened and
      summed in fp32; 1 / sum is taken in fp32 and rounded to fp16 once. CANN's TBE SoftmaxV2
      (opp op_impl/built-in/ai_core/tbe/impl/softmax_v2.py, softmax_v2_compute) computes exp
      in fp16 and then the sum and the division in fp32 where the vector exp has no fp32 form
      (Ascend310), and every step in fp16 where the op takes fp16 only (Hi3796CV300); here the
      sum stays fp32 and the scaling is fp16.
    * ``narrow`` without exp16: the row max and x - max in fp16, exp, the sum and the scaling
      in fp32 (TBE's SoftmaxV2 on the 910 takes x - max in fp16 and widens for the exp).
    * ``narrow=False``: ops-nn's SoftmaxV2 (and Ascend C's SoftMax<half>): widen, all in fp32.

    Error of exp16 against softmax in exact arithmetic (y in (0, 1], n values a row, u = 2**-11):
    the row max is exact; exp, the pair sums, 1 / sum and the product round to fp16 once each
    (u relative each: 4 u y); x - max rounds once, which moves exp(x - max) by |x - max| u
    relative: in y's own numerator at most 0.37 u (e**-t t <= 1/e), and through the sum at most
    about u ln(n) / 4 (the worst spread of the other values' weights). So |error| <= 4 u y +
    u (0.37 + ln(n) / 4), at most 1.95e-3 y + 1.5e-3 for rows up to 32,768 values: inside the
    fp16 tolerance 2e-3 + 2e-3 y for every input (tests check every finite fp16 value)."""
    WORK_ROWS = 0
    STATS = 2

    def __init__(self, x, y, t: RowTiling):
        super().__init__(x, y, t, "x")
        if self.wide and t.narrow:
            row16 = round_up(t.tile_rows * self.dtype.itemsize, BLOCK_BYTES)
            b = TBuf(VECCALC, "max16")
            self.pipe.init_buffer(b, (1 + t.exp16) * row16)
            st16 = b.get(self.dtype)
            self.mx16 = st16
            self.rcp16 = st16[row16 // self.dtype.itemsize:] if t.exp16 else None

    def _folds(self) -> bool:
        """exp16 folds each row's halves before widening when the halves start on 32-byte blocks."""
        return fold_halves(self.cols, self.dtype.itemsize)

    def work_sizes(self):
        if self.wide and self.t.exp16 and self._folds():
            return [self.t.tile_rows * (self.cols // 2) * 4]     # the folded exps, widened
        return super().work_sizes()

    def compute(self, n):
        if not (self.wide and self.t.narrow and self.t.exp16):
            return super().compute(n)
        # exp16: max, x - max, exp and the scaling in fp16; the exps widened for the sum only
        cols, count = self.cols, n * self.cols
        x = self.in_x.deque()
        y = self.out_y.alloc_tensor(self.dtype)
        e32 = self.work[-1]
        sm = self.stats[1]
        self.narrow_rows(x, n)
        lang.exp(x, x, count)                           # exp(x - max) in (0, 1], fp16
        if self._folds():
            # fold each row's second half onto its first in fp16 (pairs of values <= 1: one
            # rounding), into the output slot (free until the last step), so half as many
            # values are widened and summed
            half = cols // 2
            VR.add_rows(y, x, x[half:], n, half, dst_stride=half, src_stride=cols)
            lang.cast(e32, y, "none", n * half)
            lang.reduce_sum_rows(sm, e32, n, half)      # the sum in fp32
        else:
            lang.cast(e32, x, "none", count)
            lang.reduce_sum_rows(sm, e32, n, cols)
        lang.reciprocal(sm, sm, n)
        lang.cast(self.rcp16, sm, "rint", n)            # 1 / sum in [1 / cols, 1], fp16
        lang.mul_per_row(y, x, self.rcp16, n, cols)
        self.in_x.free_tensor(x)
        self.out_y.enque(y)

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


def softmax_ar_tiling(rows: int, cols: int, dtype, chip=DEFAULT_CHIP, buffer_num: int = BUFFER_NUM,
                      tile_rows: int | None = None, narrow: bool = True, exp16: bool = True) -> RowTiling:
    """``narrow`` (fp16 only): the row max and x - max in fp16 before widening (KernelSoftmaxAR);
    False widens first and runs every step in fp32, as ops-nn does. ``exp16`` (with narrow):
    exp and the scaling by 1 / sum in fp16 as well, only the sum in fp32."""
    wide = np.dtype(dtype) != F32
    # fp32 scratch: the widened tile, or with exp16's fold only its folded half
    fold = wide and exp16 and narrow and fold_halves(cols, np.dtype(dtype).itemsize)
    return row_tiling(rows, cols, dtype, chip, what="SoftmaxV2", work_rows=0.5 if fold else int(wide),
                      stats=2, buffer_num=buffer_num, tile_rows=tile_rows, narrow=narrow, exp16=exp16)


# -- RA: softmax over a middle axis --------------------------------------------------------
@dataclass(frozen=True)
class SoftmaxRATiling(Tiling):
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


def softmax_ra_tiling(outer: int, r: int, inner: int, dtype, chip=DEFAULT_CHIP, buffer_num: int = 2) -> SoftmaxRATiling:
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
    inner_al = round_up(inner, per_block)
    tile_inner = inner if inner_al <= fit else fit
    row_stride = round_up(tile_inner, per_block)
    items = outer * ceil_div(inner, tile_inner)
    ipb = ceil_div(items, chip.cores_for("aiv"))
    return SoftmaxRATiling(outer, r, inner, dt.name, tile_inner, row_stride, items, ipb, ceil_div(items, ipb), buffer_num)


class KernelSoftmaxRA:
    def __init__(self, x, y, t: SoftmaxRATiling):
        setup_item_kernel(self, x, y, t, t.r * t.row_stride)
        st = TBuf(VECCALC, "max_sum")
        self.pipe.init_buffer(st, 2 * t.row_stride * 4)
        s = st.get(F32)
        self.mx, self.sm = s, s[t.row_stride:]

    def process(self):
        t = self.t
        chunks = ceil_div(t.inner, t.tile_inner)
        for k in range(self.first, self.first + self.count):
            o, ci = divmod(k, chunks)
            c0 = ci * t.tile_inner
            w = min(t.tile_inner, t.inner - c0)
            base = o * t.r * t.inner + c0
            x = self.in_x.alloc_tensor(self.dtype)
            for r in range(t.r):                            # one DMA a row: rows sit inner apart in GM
                copy_elements(x[r * t.row_stride:], self.x_gm[base + r * t.inner:], w)
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
                copy_elements(self.y_gm[base + r * t.inner:], y[r * t.row_stride:], w)
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


def softmax_tiling(shape, dtype, dim: int, chip=DEFAULT_CHIP):
    """AR tiling when the softmax axis is last (or everything after it has size 1), RA otherwise."""
    outer, r, inner = split_axis(shape, dim)
    if min(outer, r, inner) == 0:
        raise ShapeError(f"softmax: empty input of shape {tuple(shape)}")
    if inner == 1:
        return softmax_ar_tiling(outer, r, dtype, chip)
    return softmax_ra_tiling(outer, r, inner, dtype, chip)


def launch_softmax(x: np.ndarray, t, chip=DEFAULT_CHIP, mode="functional"):
    """Run softmax with a tiling from :func:`softmax_tiling`. Returns (y, trace)."""
    if isinstance(t, RowTiling):
        return launch_rows(softmax_ar_kernel, x, [], t, chip, mode)
    return launch_vector(softmax_ra_kernel, [x], x.shape, x.dtype, t, chip=chip, mode=mode)
