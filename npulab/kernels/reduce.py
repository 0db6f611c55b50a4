"""ReduceSum, ReduceMean and ReduceMax over any axes, on the vector unit (ops-nn's reduce family).

What you learn here:

* the host turns any set of axes into at most two shapes of problem. Dims of size 1 go, and
  neighbouring dims that are both reduced (or both kept) merge: a reduction over H, W of NCHW
  is one over the last dim of an (N*C, H*W) view. What is left ends in either
  - a reduced run, ``AR``: rows of ``cols`` contiguous values, each row reduced to one value
    (WholeReduceSum / WholeReduceMax over a row, then over its partials:
    ``lang.reduce_sum_rows``), as the row kernels (kernels.rows) reduce a row; or
  - a kept run, ``RA``: ``r`` rows of ``inner`` values, reduced across the rows to one row (as
    Softmax's RA form finds its max and sum), here by folding the tile's rows in halves with
    one instruction a halving (``vector_rows.add_rows``: rows [0, h) += rows [m - h, m)).
  Every dim before those two is an *outer* loop: a kept one indexes the output, a reduced one
  is one more partial accumulated into the same output values;
* a work item is one output tile (tile rows of an AR problem, tile columns of an RA one);
  long rows and long reduced axes are cut into chunks whose partials accumulate in UB, so any
  size fits;
* sums accumulate in fp32 (an fp16 tile is widened with one Cast first, as ops-nn's ReduceSum
  does for half), max runs on the input dtype (it is exact); the mean is the sum times
  1 / (elements reduced), one Muls, before the one rounding to the output dtype.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import lang
from ..arch import BLOCK_BYTES, DEFAULT_CHIP, F32, ceil_div, round_up
from ..chips import get_chip
from ..errors import ShapeError
from ..lang import VECCALC, VECIN, VECOUT, Queue, TBuf, TPipe, get_block_idx
from ..lang import vector_rows as VR
from .tiling_data import Tiling
from .vector_base import check_float, copy_elements, launch_vector

REDUCE_OPS = ("sum", "mean", "max")
#: work items a core should get at least, so that every core has work and its copies overlap
#: the previous item's reduction: rows (AR) or columns (RA) are split that finely when the
#: tensor has few of them
MIN_ITEMS_PER_CORE = 2


def reduce_axes(shape, axes, what: str = "reduce") -> tuple:
    """The reduced axes of ``shape`` as sorted non-negative ints; empty ``axes`` = all."""
    nd = len(shape)
    if axes is None or len(tuple(axes)) == 0:
        return tuple(range(nd))
    out = []
    for a in tuple(axes):
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
            raise ShapeError(f"{what}: axes must be integers, got {tuple(axes)!r}")
        if not -nd <= a < nd:
            raise ShapeError(f"{what}: axis {a} is out of range for an input with {nd} dims "
                             f"(expected {-nd} .. {nd - 1})")
        out.append(int(a) % nd)
    if len(set(out)) != len(out):
        raise ShapeError(f"{what}: axes {tuple(axes)} name an axis twice")
    return tuple(sorted(out))


def reduce_shape(shape, axes, keep_dims: bool, what: str = "reduce") -> tuple:
    """The output shape: reduced axes dropped, or kept as 1 with ``keep_dims``."""
    red = reduce_axes(shape, axes, what)
    if keep_dims:
        return tuple(1 if i in red else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in red)


def merge_dims(shape, red) -> list:
    """[(size, reduced), ...]: size-1 dims dropped, neighbours of one kind merged."""
    dims: list[list] = []
    for i, d in enumerate(shape):
        if d == 1:
            continue
        r = i in red
        if dims and dims[-1][1] == r:
            dims[-1][0] *= d
        else:
            dims.append([d, r])
    return [tuple(d) for d in dims] or [(1, True)]


@dataclass(frozen=True)
class ReduceTiling(Tiling):
    op: str              # sum | mean | max
    dtype: str           # input and output dtype
    compute_dtype: str   # the accumulator's dtype (fp32 for sums, the input's for max)
    kind: str            # ar | ra
    dims: tuple          # merged dims (size, reduced)
    count: int           # elements reduced into one output value (the mean's divisor)
    rows: int            # AR: rows (the kept run before the reduced tail); RA: reduced rows
    cols: int            # AR: values a row; RA: the kept tail (columns)
    tile_rows: int
    tile_cols: int
    row_stride: int      # UB elements between rows of a tile
    work_items: int
    items_per_block: int
    block_dim: int
    buffer_num: int


def reduce_tiling(shape, dtype, axes, op: str, chip=DEFAULT_CHIP, buffer_num: int = 2) -> ReduceTiling:
    chip = get_chip(chip)
    if op not in REDUCE_OPS:
        raise ShapeError(f"reduce: op {op!r} is not one of {REDUCE_OPS}")
    what = "Reduce" + op.capitalize()
    dt = check_float(what, "input", dtype)
    if 0 in tuple(shape):
        raise ShapeError(f"{what}: empty input of shape {tuple(shape)}")
    red = reduce_axes(shape, axes, what)
    dims = merge_dims(shape, red)
    count = int(np.prod([d for i, d in enumerate(shape) if i in red], dtype=np.int64)) if red else 1
    cdt = dt if op == "max" else F32
    if dims[-1][1]:                                   # AR: rows of cols reduced values
        kind, cols = "ar", dims[-1][0]
        rows = dims[-2][0] if len(dims) > 1 else 1
    else:                                             # RA: r reduced rows of cols kept values
        kind, cols = "ra", dims[-1][0]
        rows = dims[-2][0] if len(dims) > 1 else 1
    outer = [d for d in dims[:-2]] if len(dims) > 2 else []
    outer_kept = int(np.prod([s for s, r in outer if not r], dtype=np.int64))
    per_block = BLOCK_BYTES // dt.itemsize
    wide = cdt != dt
    # a tile element: buffer_num input slots + its fp32 copy when widened
    per_elem = buffer_num * dt.itemsize + (cdt.itemsize if wide else 0)
    free = chip.buffers.ub - 32 * BLOCK_BYTES
    max_elems = free // 2 // per_elem // per_block * per_block       # half for acc, partials, out
    cores = chip.cores_for("aiv")
    if kind == "ar":
        tile_cols = cols if round_up(cols, per_block) <= max_elems else max_elems
        row_stride = cols if tile_cols == cols else round_up(tile_cols, per_block)
        fit = max(1, max_elems // row_stride)
        want = ceil_div(outer_kept * rows, cores * MIN_ITEMS_PER_CORE)
        tile_rows = max(1, min(rows, fit, want if outer_kept == 1 else rows))
        # the per-row partials and accumulators: keep them inside the other half
        tile_rows = min(tile_rows, max(1, max_elems // 4 // (ceil_div(tile_cols, 8) + 1)))
        items = outer_kept * ceil_div(rows, tile_rows)
    else:
        aligned = cols % per_block == 0
        tile_cols = cols if round_up(cols, per_block) <= max_elems // 2 else max_elems // 2
        split = ceil_div(cores * MIN_ITEMS_PER_CORE, outer_kept)     # column tiles wanted
        if split > 1:
            tile_cols = min(tile_cols, max(per_block, round_up(ceil_div(cols, split), per_block)))
        row_stride = cols if tile_cols == cols and aligned else round_up(tile_cols, per_block)
        tile_rows = max(1, min(rows, max_elems // row_stride))
        items = outer_kept * ceil_div(cols, tile_cols)
    ipb = ceil_div(items, cores)
    return ReduceTiling(op, dt.name, cdt.name, kind, tuple(dims), count, rows, cols, tile_rows, tile_cols,
                        row_stride, items, ipb, ceil_div(items, ipb), buffer_num)


def _strides(dims) -> list:
    st, acc = [], 1
    for s, _ in reversed(dims):
        st.append(acc)
        acc *= s
    return st[::-1]


class KernelReduce:
    """One block of a reduction: its work items, each accumulating partials into UB (``acc``;
    an AR item reduces each chunk into ``part`` first, an RA item folds the tile in place)."""

    def __init__(self, x, y, t: ReduceTiling):
        self.t, self.x_gm, self.y_gm = t, x, y
        self.dtype, self.cdt = np.dtype(t.dtype), np.dtype(t.compute_dtype)
        self.wide = self.cdt != self.dtype
        self.first = get_block_idx() * t.items_per_block
        self.count = max(0, min(t.items_per_block, t.work_items - self.first))
        tile = t.tile_rows * t.row_stride
        # per item: AR keeps one value a tile row, RA one row of tile_cols values
        out_len = t.tile_rows if t.kind == "ar" else t.tile_cols
        per_rep = 256 // self.cdt.itemsize
        parts = ceil_div(t.tile_cols, per_rep) if t.kind == "ar" else 1
        acc_len = round_up(out_len * parts, BLOCK_BYTES // self.cdt.itemsize)
        self.pipe = TPipe()
        self.in_x, self.out_y = Queue(VECIN, "in_x"), Queue(VECOUT, "out_y")
        self.pipe.init_buffer(self.in_x, t.buffer_num, tile * self.dtype.itemsize)
        self.pipe.init_buffer(self.out_y, t.buffer_num, round_up(out_len, 16) * self.dtype.itemsize)
        bufs = [("acc", acc_len)] + ([("part", acc_len)] if t.kind == "ar" else []) + \
            ([("x32", tile)] if self.wide else [])
        for name, n in bufs:
            b = TBuf(VECCALC, name)
            self.pipe.init_buffer(b, n * self.cdt.itemsize)
            setattr(self, name, b.get(self.cdt))
        dims = list(t.dims)
        self.outer = dims[:-2] if len(dims) > 2 else []
        self.in_st = _strides(dims)[:len(self.outer)]
        kept = [s for s, r in dims if not r]
        self.out_st = _strides([(s, False) for s in kept])
        self.kept_outer = [s for s, r in self.outer if not r]
        self.red_outer = [s for s, r in self.outer if r]
        self.red_count = int(np.prod(self.red_outer, dtype=np.int64))
        self.combine = lang.max if t.op == "max" else lang.add

    def _outer_offsets(self, o: int, q: int) -> tuple:
        """(input offset, output offset) of outer kept index o and outer reduced index q."""
        ko = np.unravel_index(o, self.kept_outer) if self.kept_outer else ()
        rq = np.unravel_index(q, self.red_outer) if self.red_outer else ()
        ki, ri, off_in = iter(ko), iter(rq), 0
        for (s, r), st in zip(self.outer, self.in_st):
            off_in += int(next(ri if r else ki)) * st
        off_out = sum(int(i) * st for i, st in zip(ko, self.out_st[:len(self.kept_outer)]))
        return off_in, off_out

    def _accumulate(self, src, n, started):
        """acc[:n] = src[:n] the first time, acc op= src after."""
        if started:
            self.combine(self.acc, self.acc, src, n)
        else:
            lang.adds(self.acc, src, 0.0, n)

    def _load(self, base, n, w, gm_stride):
        """n rows of w values, ``gm_stride`` apart in GM, into an input slot (rows row_stride apart):
        one copy when the rows are contiguous on both sides, one strided copy (a burst a row,
        DataCopyParams) when a row is whole 32-byte blocks, else a copy a row. Returns (the
        slot, the tile in the compute dtype)."""
        t = self.t
        x = self.in_x.alloc_tensor(self.dtype)
        if w == t.row_stride == gm_stride or n == 1:
            copy_elements(x, self.x_gm[base:], (n - 1) * t.row_stride + w if n > 1 else w)
        elif (w * self.dtype.itemsize) % BLOCK_BYTES == 0:
            lang.data_copy_strided(x, self.x_gm[base:], n, w, src_stride=gm_stride, dst_stride=t.row_stride)
        else:
            for r in range(n):
                copy_elements(x[r * t.row_stride:], self.x_gm[base + r * gm_stride:], w)
        self.in_x.enque(x)
        x = self.in_x.deque()
        if self.wide:
            lang.cast(self.x32, x, "none", (n - 1) * t.row_stride + w)
            return x, self.x32
        return x, x

    def process(self):
        for k in range(self.first, self.first + self.count):
            (self._item_ar if self.t.kind == "ar" else self._item_ra)(k)

    def _item_ar(self, k):
        t = self.t
        nr = ceil_div(t.rows, t.tile_rows)
        o, ri = divmod(k, nr)
        r0 = ri * t.tile_rows
        n = min(t.tile_rows, t.rows - r0)
        reduce_rows = lang.reduce_max_rows if t.op == "max" else lang.reduce_sum_rows
        started = False
        for q in range(self.red_count):
            off_in, off_out = self._outer_offsets(o, q)
            for c0 in range(0, t.cols, t.tile_cols):
                w = min(t.tile_cols, t.cols - c0)
                raw, x = self._load(off_in + r0 * t.cols + c0, n, w, t.cols)
                dst = self.part if started else self.acc
                reduce_rows(dst, x, n, w, t.row_stride)
                self.in_x.free_tensor(raw)
                if started:
                    self.combine(self.acc, self.acc, self.part, n)
                started = True
        self._store(off_out + r0, n)

    def _item_ra(self, k):
        t = self.t
        nc = ceil_div(t.cols, t.tile_cols)
        o, ci = divmod(k, nc)
        c0 = ci * t.tile_cols
        w = min(t.tile_cols, t.cols - c0)
        fold = VR.max_rows if t.op == "max" else VR.add_rows
        rs = t.row_stride
        started = False
        for q in range(self.red_count):
            off_in, off_out = self._outer_offsets(o, q)
            for r0 in range(0, t.rows, t.tile_rows):
                m = min(t.tile_rows, t.rows - r0)
                raw, x = self._load(off_in + r0 * t.cols + c0, m, w, t.cols)
                while m > 1:                          # rows [0, h) op= rows [m - h, m)
                    h = m // 2
                    fold(x, x, x[(m - h) * rs:], h, w, rs, rs)
                    m -= h
                self._accumulate(x, w, started)
                self.in_x.free_tensor(raw)
                started = True
        self._store(off_out + c0, w)

    def _store(self, base, n):
        t = self.t
        y = self.out_y.alloc_tensor(self.dtype)
        if t.op == "mean":
            lang.muls(self.acc, self.acc, 1.0 / t.count, n)
        if self.wide:
            lang.cast(y, self.acc, "rint", n)
        else:
            lang.adds(y, self.acc, 0.0, n)
        self.out_y.enque(y)
        y = self.out_y.deque()
        copy_elements(self.y_gm[base:], y, n)
        self.out_y.free_tensor(y)


def reduce_kernel(x, y, t: ReduceTiling) -> None:
    KernelReduce(x, y, t).process()


def launch_reduce(x: np.ndarray, t: ReduceTiling, out_shape, chip=DEFAULT_CHIP, mode="functional"):
    """Run a reduction with a tiling from :func:`reduce_tiling`; the output has ``out_shape``
    (:func:`reduce_shape`). Returns (y, trace)."""
    return launch_vector(reduce_kernel, [x], tuple(out_shape), t.dtype, t, chip=chip, mode=mode)


__all__ = ["REDUCE_OPS", "reduce_axes", "reduce_shape", "merge_dims", "ReduceTiling", "reduce_tiling",
           "launch_reduce"]
