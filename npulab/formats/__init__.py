"""Data formats of the cube unit: ND, the fractal formats NZ / ZZ / ZN, NC1HWC0 and FRACTAL_Z.

The cube multiplies 16 x 16 (fp16) tiles, so every byte it reads must sit in *fractals*: small
matrices of 16 rows x C0 columns, C0 = 32 bytes of elements (16 for fp16, 32 for int8, 8 for
fp32), each fractal 512 bytes (data/FACTS.md, Data formats). A format says two things: in which
order the fractals follow each other (capital letter) and how elements sit inside one fractal
(small letter). "Z" is row-major, "N" column-major:

=========  ====================  ===============  ==================  =====================
format     where                 fractal shape    fractal order       inside a fractal
=========  ====================  ===============  ==================  =====================
ND         GM (user tensors)     -                -                   plain row-major
NZ         L1, L0C, GM (NZ)      16 x C0          column-major (N)    row-major (z)
ZZ         L0A (left matrix)     16 x C0          row-major (Z)       row-major (z)
ZN         L0B (right matrix)    C0 x 16          row-major (Z)       column-major (n)
=========  ====================  ===============  ==================  =====================

As arrays: NZ of an (M, N) matrix has shape (N1, M1, 16, N0); ZZ of (M, K) has shape
(M1, K1, 16, K0); ZN of (K, N) has shape (K1, N1, 16, K0) (each stored row of a ZN fractal is one
column n holding K0 values of k). Dimensions are padded with zeros up to whole fractals. The
accumulator in L0C is NZ with 16 x 16 fractals of fp32/int32 (1024 bytes each): pass ``c0=16``.

Feature maps use NC1HWC0 (channels split into C1 groups of C0 = 32 bytes, C0 innermost) and
conv weights FRACTAL_Z: (C1*H*W, N1, N0, C0) with N0 = 16 output channels.

A format change done by a data-moving instruction (``data_copy_nd2nz``, ``load_data``,
``fixpipe``) costs what the move costs: the instructions move the padded bytes, nothing more.

This package, one concept a module, each module with a Cython twin of the same names and
signatures (the Python one is the specification; :mod:`npulab.twins` picks the side):

* here: the named formats above, built on ``pack`` / ``unpack``, and where each element of a
  matrix sits in NZ or of a feature map in NC1HWC0 (``nz_offsets``, ``nc1hwc0_offsets``);
* :mod:`~npulab.formats.layouts` (twin ``npulab._layouts``): ``pack`` / ``unpack`` and the
  cube path's moves, load_data's NZ window and data_copy_nd2nz's pack;
* :mod:`~npulab.formats.drains` (twin ``npulab._drains``): mmad's fp16 -> fp32 widening read
  and FixPipe's fp32 -> fp16 drain;
* :mod:`~npulab.formats.worker` (twin ``npulab._worker``): where the moves run: at once, or
  (the Cython twin, in a functional launch) on a worker thread.

The functions here run on the switch's side when called; a launch takes its moves once, from
:func:`moves` of its own side.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import _drains, _layouts, _worker, twins
from ..arch import FRACTAL_BYTES, FRACTAL_ROWS, c0_of, ceil_div
from ..errors import ShapeError
from . import drains, layouts, worker

L0C_C0 = FRACTAL_ROWS    # the accumulator's fractal is 16 x 16 elements of 4 bytes

#: format name -> (fractal rows are 16 (True) or C0 (False), fractal order col-major, inner col-major)
LAYOUTS = {
    "NZ": (True, True, False),
    "ZZ": (True, False, False),
    "ZN": (False, False, True),
}


class Moves(NamedTuple):
    """The byte moves of one side of the twins: three modules with the same names either way."""
    layouts: object          # pack, unpack, pack_into, unpack_into, nz_window_into, *_buffers
    drains: object           # unpack_f16_to_f32, unpack_f16_buffer, drain_nz_f32_to_f16
    worker: object           # deferred_moves, deferring, sync, product_into, zero_bytes


_MOVES = {"cython": Moves(_layouts, _drains, _worker), "python": Moves(layouts, drains, worker)}


def moves(side: str | None = None) -> Moves:
    """The moves of ``side`` ("cython" or "python"; default: the switch's, npulab.twins)."""
    return twins.pick(_MOVES["cython"], _MOVES["python"], side)


# Deferred moves (formats.worker): in a functional launch on the Cython side the cube path's
# byte moves may run on a worker thread. ``PENDING`` is non-empty while moves may be queued;
# ``sync()`` waits for them. Only the Cython worker ever queues a move, so these are its.
PENDING, sync = _worker.PENDING, _worker.sync


def fractal_shape(fmt: str, rows: int, cols: int, dtype, c0: int | None = None) -> tuple:
    """The 4-D array shape of an (rows, cols) matrix in ``fmt`` ("NZ", "ZZ" or "ZN")."""
    fr, fc, col_order, col_inner = _geometry(fmt, dtype, c0)
    r1, c1 = ceil_div(rows, fr), ceil_div(cols, fc)
    outer = (c1, r1) if col_order else (r1, c1)
    inner = (fc, fr) if col_inner else (fr, fc)
    return outer + inner


def _geometry(fmt: str, dtype, c0):
    if fmt not in LAYOUTS:
        raise ShapeError(f"format must be one of {', '.join(LAYOUTS)}, got {fmt!r}")
    rows16, col_order, col_inner = LAYOUTS[fmt]
    c0 = c0_of(dtype) if c0 is None else int(c0)
    fr, fc = (FRACTAL_ROWS, c0) if rows16 else (c0, FRACTAL_ROWS)
    return fr, fc, col_order, col_inner


def _check_2d(x, what):
    x = np.asarray(x)
    if x.ndim != 2:
        raise ShapeError(f"{what}: expected a 2-D (rows, cols) matrix, got shape {x.shape}")
    return x


# -- the two primitives every fractal format is made of (formats.layouts) ----------------------
def pack(x, fr: int, fc: int, col_order: bool, col_inner: bool) -> np.ndarray:
    """:func:`npulab.formats.layouts.pack` of the matrix ``x`` (any array-like), on the switch's side."""
    return moves().layouts.pack(_check_2d(x, "pack"), fr, fc, col_order, col_inner)


def unpack(z, rows: int, cols: int, col_order: bool, col_inner: bool) -> np.ndarray:
    """:func:`npulab.formats.layouts.unpack` of ``z`` (any array-like), on the switch's side."""
    return moves().layouts.unpack(np.asarray(z), rows, cols, col_order, col_inner)


def pack_into(x, out, fr: int, fc: int, col_order: bool, col_inner: bool) -> np.ndarray:
    """:func:`npulab.formats.layouts.pack_into`, on the switch's side."""
    return moves().layouts.pack_into(x, out, fr, fc, col_order, col_inner)


def unpack_into(z, out, fr: int, fc: int, col_order: bool, col_inner: bool) -> np.ndarray:
    """:func:`npulab.formats.layouts.unpack_into`, on the switch's side."""
    return moves().layouts.unpack_into(z, out, fr, fc, col_order, col_inner)


# -- the named formats ------------------------------------------------------------------------
def to_fractal(x, fmt: str, c0: int | None = None) -> np.ndarray:
    """ND (rows, cols) -> ``fmt`` ("NZ", "ZZ", "ZN") as a 4-D array (see the table above)."""
    x = _check_2d(x, f"to_fractal({fmt})")
    fr, fc, col_order, col_inner = _geometry(fmt, x.dtype, c0)
    return pack(x, fr, fc, col_order, col_inner)


def from_fractal(z, fmt: str, rows: int, cols: int) -> np.ndarray:
    """``fmt`` 4-D array -> ND (rows, cols), padding dropped."""
    if fmt not in LAYOUTS:
        raise ShapeError(f"format must be one of {', '.join(LAYOUTS)}, got {fmt!r}")
    _, col_order, col_inner = LAYOUTS[fmt]
    return unpack(z, rows, cols, col_order, col_inner)


def nd_to_nz(x, c0: int | None = None) -> np.ndarray:
    """(M, N) -> NZ (N1, M1, 16, N0): column-major order of 16 x N0 fractals, each row-major."""
    return to_fractal(x, "NZ", c0)


def nz_to_nd(z, m: int, n: int) -> np.ndarray:
    """NZ (N1, M1, 16, N0) -> (m, n)."""
    return from_fractal(z, "NZ", m, n)


def nd_to_zz(x, c0: int | None = None) -> np.ndarray:
    """The left matrix A (M, K) as L0A holds it: ZZ (M1, K1, 16, K0)."""
    return to_fractal(x, "ZZ", c0)


def zz_to_nd(z, m: int, k: int) -> np.ndarray:
    return from_fractal(z, "ZZ", m, k)


def nd_to_zn(x, c0: int | None = None) -> np.ndarray:
    """The right matrix B (K, N) as L0B holds it: ZN (K1, N1, 16, K0), K0 x 16 fractals in
    row-major order, each stored column by column."""
    return to_fractal(x, "ZN", c0)


def zn_to_nd(z, k: int, n: int) -> np.ndarray:
    return from_fractal(z, "ZN", k, n)


# -- feature maps and conv weights ------------------------------------------------------------
def nchw_to_nc1hwc0(x, c0: int | None = None) -> np.ndarray:
    """(N, C, H, W) -> (N, C1, H, W, C0), C0 = 32 bytes of elements (16 fp16, 32 int8), the
    channels padded with zeros to C1 * C0."""
    x = np.asarray(x)
    if x.ndim != 4:
        raise ShapeError(f"nchw_to_nc1hwc0: expected (N, C, H, W), got shape {x.shape}")
    c0 = c0_of(x.dtype) if c0 is None else int(c0)
    n, c, h, w = x.shape
    c1 = ceil_div(c, c0)
    pad = np.zeros((n, c1 * c0, h, w), dtype=x.dtype)
    pad[:, :c] = x
    return np.ascontiguousarray(pad.reshape(n, c1, c0, h, w).transpose(0, 1, 3, 4, 2))


def nc1hwc0_to_nchw(x, c: int) -> np.ndarray:
    """(N, C1, H, W, C0) -> (N, c, H, W)."""
    x = np.asarray(x)
    if x.ndim != 5:
        raise ShapeError(f"nc1hwc0_to_nchw: expected (N, C1, H, W, C0), got shape {x.shape}")
    n, c1, h, w, c0 = x.shape
    if c > c1 * c0:
        raise ShapeError(f"nc1hwc0_to_nchw: {c} channels asked, the array holds {c1 * c0}")
    return np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3).reshape(n, c1 * c0, h, w)[:, :c])


def nchw_to_fractal_z(w, c0: int | None = None) -> np.ndarray:
    """Conv weights (Cout, Cin, H, W) -> FRACTAL_Z (C1*H*W, N1, 16, C0):
    out[(c1*H + h)*W + x, n1, n0, j] = w[n1*16 + n0, c1*C0 + j, h, x] (0 past the edges)."""
    w = np.asarray(w)
    if w.ndim != 4:
        raise ShapeError(f"nchw_to_fractal_z: expected weights (Cout, Cin, H, W), got shape {w.shape}")
    c0 = c0_of(w.dtype) if c0 is None else int(c0)
    cout, cin, h, wd = w.shape
    c1, n1 = ceil_div(cin, c0), ceil_div(cout, FRACTAL_ROWS)
    pad = np.zeros((n1 * FRACTAL_ROWS, c1 * c0, h, wd), dtype=w.dtype)
    pad[:cout, :cin] = w
    t = pad.reshape(n1, FRACTAL_ROWS, c1, c0, h, wd).transpose(2, 4, 5, 0, 1, 3)
    return np.ascontiguousarray(t.reshape(c1 * h * wd, n1, FRACTAL_ROWS, c0))


def fractal_z_to_nchw(z, cout: int, cin: int, h: int, w: int) -> np.ndarray:
    """FRACTAL_Z (C1*H*W, N1, 16, C0) -> weights (cout, cin, h, w)."""
    z = np.asarray(z)
    if z.ndim != 4:
        raise ShapeError(f"fractal_z_to_nchw: expected (C1*H*W, N1, 16, C0), got shape {z.shape}")
    chw, n1, n0, c0 = z.shape
    if chw % (h * w):
        raise ShapeError(f"fractal_z_to_nchw: first axis {chw} is not a multiple of H*W = {h * w}")
    c1 = chw // (h * w)
    if cout > n1 * n0 or cin > c1 * c0:
        raise ShapeError(f"fractal_z_to_nchw: asked for ({cout}, {cin}) channels, the array holds "
                         f"({n1 * n0}, {c1 * c0})")
    t = z.reshape(c1, h, w, n1, n0, c0).transpose(3, 4, 0, 5, 1, 2).reshape(n1 * n0, c1 * c0, h, w)
    return np.ascontiguousarray(t[:cout, :cin])


# -- where each element sits -------------------------------------------------------------------
def nz_offsets(m: int, n: int) -> np.ndarray:
    """(m, n) int64 array: the offset of each element of an (m, n) fp16 matrix in NZ storage
    (16 x 16 fractals, stored column of fractals by column, each row by row, rows padded to 16)."""
    nz = nd_to_nz(np.arange(m * n).reshape(m, n), c0=16).reshape(-1)   # storage -> ND index (0: padding)
    pos = np.flatnonzero(nz)
    where = np.zeros(m * n, np.int64)                    # element 0 always sits at offset 0
    where[nz[pos]] = pos
    return where.reshape(m, n)


def nc1hwc0_offsets(c: int, h: int, w: int, dtype) -> np.ndarray:
    """(C1 x C0, h x w) array: the offset of every (channel, pixel) of a 1 x c x h x w map of
    ``dtype`` in NC1HWC0 storage, the channels padded to C1 x C0 included."""
    c0 = c0_of(dtype)
    c1 = ceil_div(c, c0)
    idx = np.arange(c1 * c0 * h * w).reshape(1, c1 * c0, h, w)
    z = nchw_to_nc1hwc0(idx[:, :c1 * c0].astype(np.int64), c0=c0).reshape(-1)   # element at each offset
    off = np.empty_like(z)
    off[z] = np.arange(z.size)
    return off.reshape(c1 * c0, h * w)


__all__ = ["FRACTAL_ROWS", "FRACTAL_BYTES", "L0C_C0", "LAYOUTS", "c0_of", "fractal_shape", "pack",
           "unpack", "pack_into", "unpack_into", "to_fractal", "from_fractal", "nd_to_nz", "nz_to_nd",
           "nd_to_zz", "zz_to_nd", "nd_to_zn", "zn_to_nd", "nchw_to_nc1hwc0", "nc1hwc0_to_nchw",
           "nchw_to_fractal_z", "fractal_z_to_nchw", "nz_offsets", "nc1hwc0_offsets", "Moves", "moves", "PENDING", "sync"]
