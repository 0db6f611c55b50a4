"""Elementwise binary ops with numpy/torch broadcasting, on the vector unit: Add, Mul, Sub,
RealDiv, Maximum, Minimum.

What you learn here:

* the host collapses the broadcast: dims of size 1 in the output go, and neighbouring dims
  where each operand is broadcast (or not) in the same way merge. What is left is a list of
  output dims, each marking x and y as *full* or *broadcast* there;
* the kernel works on the last two of those dims as a (rows, cols) block, tiled over rows and
  columns; every earlier dim is an *outer* loop whose GM offsets use stride 0 for a broadcast
  operand (the same bytes are read again: L2 serves the repeats);
* inside a block each operand is full, one row reused for every row (``*_per_col``: repeat
  stride 0) or one value a row (``*_per_row``: Brcb); both ops commute, so the host orders the
  operands so that x is the fuller one. Only four block kinds remain:
  ``same`` (both full), ``col`` (y is one row), ``row`` (y is one value a row, also a scalar)
  and ``outer`` (x is one row, y one value a row);
* sub and div do not commute: when the host swapped their operands, the kernel first spreads
  the broadcast operand over the tile (a zero fill and one per-row or per-column Add, exact),
  then runs the op with the operands in their own order: two vector passes more, no rounding
  more.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import lang
from ..arch import BLOCK_BYTES, DEFAULT_CHIP, ceil_div, round_up
from ..chips import get_chip
from ..errors import ShapeError
from ..lang import VECIN, VECOUT, Queue, TPipe, get_block_idx
from .tiling_data import Tiling
from .vector_base import check_float, copy_elements, launch_vector

#: the kernel's ops: (whole tile, per-column operand, per-row operand) vector instructions
OPS = {"add": (lang.add, lang.add_per_col, lang.add_per_row),
       "mul": (lang.mul, lang.mul_per_col, lang.mul_per_row),
       "sub": (lang.sub, lang.sub_per_col, lang.sub_per_row),
       "div": (lang.div, lang.div_per_col, lang.div_per_row),
       "max": (lang.max, lang.max_per_col, lang.max_per_row),
       "min": (lang.min, lang.min_per_col, lang.min_per_row)}
COMMUTE = ("add", "mul", "max", "min")


def broadcast_shape(x_shape, y_shape, what: str = "broadcast") -> tuple:
    """The output shape of x op y (numpy/torch broadcasting); ``what`` names the op in the error."""
    try:
        return tuple(np.broadcast_shapes(tuple(x_shape), tuple(y_shape)))
    except ValueError:
        raise ShapeError(f"{what}: x has shape {tuple(x_shape)} and y has {tuple(y_shape)}, which do "
                         f"not broadcast (each dim, aligned from the right, must be equal or 1)") from None


def check_broadcast(op: str, x_shape, x_dtype, y_shape, y_dtype) -> tuple:
    """Validate the operands of ``op`` (a key of OPS); returns the output shape."""
    if op not in OPS:
        raise ShapeError(f"broadcast: op {op!r} is not one of {tuple(OPS)}")
    dt = check_float(op, "x", x_dtype)
    if np.dtype(y_dtype) != dt:
        raise ShapeError(f"{op}: x is {dt} and y is {np.dtype(y_dtype)}; both must be float16 or both float32")
    return broadcast_shape(x_shape, y_shape, op)


def collapse(x_shape, y_shape, what: str = "broadcast"):
    """(out_shape, dims, swapped): dims = [(size, x_full, y_full), ...] of the merged output dims
    (x the fuller operand after the swap)."""
    out = broadcast_shape(x_shape, y_shape, what)
    nd = len(out)
    xs = (1,) * (nd - len(x_shape)) + tuple(x_shape)
    ys = (1,) * (nd - len(y_shape)) + tuple(y_shape)
    dims: list[list] = []
    for o, a, b in zip(out, xs, ys):
        if o == 1:
            continue
        f = (a == o, b == o)
        if dims and (dims[-1][1], dims[-1][2]) == f:
            dims[-1][0] *= o
        else:
            dims.append([o, *f])
    if not dims:
        dims = [[1, True, True]]
    # make x the fuller operand in the last two dims (the kernel undoes it for sub and div)
    inner = dims[-2:]
    swapped = sum(d[2] for d in inner) > sum(d[1] for d in inner) or \
        (sum(d[2] for d in inner) == sum(d[1] for d in inner) and not inner[-1][1])
    if swapped:
        dims = [[s, b, a] for s, a, b in dims]
    return tuple(out), [tuple(d) for d in dims], swapped


@dataclass(frozen=True)
class BroadcastTiling(Tiling):
    op: str
    dtype: str
    out_shape: tuple
    dims: tuple            # merged output dims (size, x_full, y_full)
    swapped: bool          # x and y exchanged by the host (so x is the fuller)
    kind: str              # same | col | row | outer
    rows: int
    cols: int
    tile_rows: int
    tile_cols: int
    row_stride: int        # UB elements between rows of a tile
    work_items: int
    items_per_block: int
    block_dim: int
    buffer_num: int


def broadcast_tiling(op: str, x_shape, x_dtype, y_shape, y_dtype, chip=DEFAULT_CHIP, buffer_num: int = 2,
                     min_tiles: int = 4) -> BroadcastTiling:
    chip = get_chip(chip)
    what = op
    check_broadcast(what, x_shape, x_dtype, y_shape, y_dtype)
    dt = np.dtype(x_dtype)
    out, dims, swapped = collapse(x_shape, y_shape, what)
    if 0 in out:
        raise ShapeError(f"{what}: empty output of shape {out}")
    cols, xc, yc = dims[-1]
    rows, xr, yr = dims[-2] if len(dims) > 1 else (1, True, False if not yc else True)
    if len(dims) == 1:
        kind = "same" if yc else "row"
    elif yc:
        kind = "col"                 # y full along cols, broadcast along rows
    elif xr:
        kind = "row"
    else:
        kind = "outer"
    if kind == "same" and len(dims) == 1:
        rows, cols = 1, cols
    per_block = BLOCK_BYTES // dt.itemsize
    free = chip.buffers.ub - 32 * BLOCK_BYTES
    per_elem = 3 * buffer_num * dt.itemsize
    max_elems = free // per_elem // per_block * per_block
    if kind == "same" and len(dims) == 1:          # plain elementwise: split the run of elements
        total = cols
        tile = min(max_elems, round_up(ceil_div(total, chip.cores_for("aiv") * min_tiles), per_block))
        items = ceil_div(total, tile)
        ipb = ceil_div(items, chip.cores_for("aiv"))
        return BroadcastTiling(op, dt.name, out, tuple(dims), swapped, kind, 1, total, 1, tile, tile,
                               items, ipb, ceil_div(items, ipb), buffer_num)
    tile_cols = cols if round_up(cols, per_block) <= max_elems // 2 else max_elems // 2
    row_stride = cols if tile_cols == cols else round_up(tile_cols, per_block)
    outer = int(np.prod([d[0] for d in dims[:-2]])) if len(dims) > 2 else 1
    fit_rows = max(1, (max_elems - 2 * row_stride) // (row_stride + 1))
    want = ceil_div(outer * rows, chip.cores_for("aiv") * min_tiles)
    tile_rows = max(1, min(rows, fit_rows, want if outer == 1 else rows))
    if tile_rows * row_stride + 2 * row_stride > max_elems:
        tile_rows = max(1, (max_elems - 2 * row_stride) // row_stride)
    items = outer * ceil_div(rows, tile_rows) * ceil_div(cols, tile_cols)
    ipb = ceil_div(items, chip.cores_for("aiv"))
    return BroadcastTiling(op, dt.name, out, tuple(dims), swapped, kind, rows, cols, tile_rows,
                           tile_cols, row_stride, items, ipb, ceil_div(items, ipb), buffer_num)


def _strides(dims, which):
    """Element strides of operand ``which`` (1 = x, 2 = y) over the merged dims (0 = broadcast)."""
    st, acc = [], 1
    for d in reversed(dims):
        full = d[which]
        st.append(acc if full else 0)
        acc *= d[0] if full else 1
    return st[::-1]


class KernelBroadcast:
    def __init__(self, x, y, z, t: BroadcastTiling):
        self.t, self.x_gm, self.y_gm, self.z_gm = t, x, y, z
        self.dtype = np.dtype(t.dtype)
        self.first = get_block_idx() * t.items_per_block
        self.count = max(0, min(t.items_per_block, t.work_items - self.first))
        self.pipe = TPipe()
        tile = t.tile_rows * t.row_stride
        self.in_x, self.in_y, self.out_z = Queue(VECIN, "in_x"), Queue(VECIN, "in_y"), Queue(VECOUT, "out_z")
        ysize = {"same": tile, "col": t.row_stride, "row": round_up(t.tile_rows, 16),
                 "outer": round_up(t.tile_rows, 16)}[t.kind]
        xsize = t.row_stride if t.kind == "outer" else tile
        self.pipe.init_buffer(self.in_x, t.buffer_num, xsize * self.dtype.itemsize)
        self.pipe.init_buffer(self.in_y, t.buffer_num, ysize * self.dtype.itemsize)
        self.pipe.init_buffer(self.out_z, t.buffer_num, tile * self.dtype.itemsize)
        self.xs, self.ys = _strides(t.dims, 1), _strides(t.dims, 2)
        self.zs = _strides([(d[0], True, True) for d in t.dims], 1)

    def _item(self, k):
        t = self.t
        nr, nc = ceil_div(t.rows, t.tile_rows), ceil_div(t.cols, t.tile_cols)
        o, rest = divmod(k, nr * nc)
        ri, ci = divmod(rest, nc)
        r0, c0 = ri * t.tile_rows, ci * t.tile_cols
        outer_dims = [d[0] for d in t.dims[:-2]]
        idx = np.unravel_index(o, outer_dims) if outer_dims else ()
        return idx, r0, min(t.tile_rows, t.rows - r0), c0, min(t.tile_cols, t.cols - c0)

    def _base(self, strides, idx, r0, c0):
        off = sum(int(i) * s for i, s in zip(idx, strides[:-2]))
        if len(strides) >= 2:
            off += r0 * strides[-2]
        return off + c0 * strides[-1]

    def _load(self, dst, gm, base, n, w, stride_gm):
        t = self.t
        if w == t.cols and t.row_stride == t.cols:
            copy_elements(dst, gm[base:], n * w)
        else:
            for r in range(n):
                copy_elements(dst[r * t.row_stride:], gm[base + r * stride_gm:], w)

    def process(self):
        t = self.t
        fn = OPS[t.op]
        for k in range(self.first, self.first + self.count):
            if t.kind == "same" and len(t.dims) == 1:
                c0 = k * t.tile_cols
                w = min(t.tile_cols, t.cols - c0)
                idx, r0, n = (), 0, 1
                xb = yb = zb = c0
            else:
                idx, r0, n, c0, w = self._item(k)
                xb, yb, zb = (self._base(s, idx, r0, c0) for s in (self.xs, self.ys, self.zs))
            x = self.in_x.alloc_tensor(self.dtype)
            y = self.in_y.alloc_tensor(self.dtype)
            if t.kind == "outer":
                copy_elements(x, self.x_gm[xb:], w)
            else:
                self._load(x, self.x_gm, xb, n, w, t.cols)
            if t.kind == "same":
                self._load(y, self.y_gm, yb, n, w, t.cols)
            elif t.kind == "col":
                copy_elements(y, self.y_gm[yb:], w)
            else:
                copy_elements(y, self.y_gm[yb:], n)                         # one value a row, contiguous
            self.in_x.enque(x)
            self.in_y.enque(y)
            x, y = self.in_x.deque(), self.in_y.deque()
            z = self.out_z.alloc_tensor(self.dtype)
            self.compute(fn, z, x, y, n, w)
            self.in_x.free_tensor(x)
            self.in_y.free_tensor(y)
            self.out_z.enque(z)
            z = self.out_z.deque()
            self._store(z, zb, n, w)
            self.out_z.free_tensor(z)

    def compute(self, fn, z, x, y, n, w):
        """z = x op y over a tile of n rows of w elements (rows ``row_stride`` apart)."""
        t = self.t
        rs = t.row_stride
        span = (n - 1) * rs + w
        if t.swapped and t.op not in COMMUTE:
            # z = y op x with y broadcast: spread y over z (0 + y, exact), then z = z op x
            lang.duplicate(z, 0.0, span)
            spread = lang.add_per_col if t.kind == "col" else lang.add_per_row
            spread(z, z, y, n, w, rs)
            if t.kind == "outer":                                  # z = y (a value a row) op x (one row)
                fn[1](z, z, x, n, w, rs)
            else:
                fn[0](z, z, x, span)
        elif t.kind == "same":
            fn[0](z, x, y, span)
        elif t.kind == "col":
            fn[1](z, x, y, n, w, rs)
        elif t.kind == "row":
            fn[2](z, x, y, n, w, rs)
        else:                                                      # z = x (one row) op y (a value a row)
            lang.duplicate(z, 0.0, span)
            lang.add_per_col(z, z, x, n, w, rs)
            fn[2](z, z, y, n, w, rs)

    def _store(self, z, base, n, w):
        t = self.t
        if w == t.cols and t.row_stride == t.cols:
            copy_elements(self.z_gm[base:], z, n * w)
        else:
            for r in range(n):
                copy_elements(self.z_gm[base + r * t.cols:], z[r * t.row_stride:], w)


def broadcast_kernel(x, y, z, t: BroadcastTiling) -> None:
    KernelBroadcast(x, y, z, t).process()


def launch_broadcast(x: np.ndarray, y: np.ndarray, t: BroadcastTiling, chip=DEFAULT_CHIP, mode="functional"):
    """z = x op y with broadcasting, using a tiling from :func:`broadcast_tiling`. Returns (z, trace)."""
    if t.swapped:
        x, y = y, x
    return launch_vector(broadcast_kernel, [x, y], t.out_shape, t.dtype, t, chip=chip, mode=mode)
