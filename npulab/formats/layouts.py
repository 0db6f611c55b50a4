"""Fractal layouts, in plain numpy: the specification of ``npulab._layouts``.

Every fractal format (NZ, ZZ, ZN: see :mod:`npulab.formats`) is an instance of two primitives:
``pack`` cuts a (rows, cols) matrix into fr x fc fractals, orders them row- or column-major
(``col_order``) and stores each row- or column-major (``col_inner``), zero padding;
``unpack`` is its inverse. The cube path's two hot moves are built from them:
``nz_window_into`` (load_data: a window of an NZ matrix into ZZ or ZN fractals) and
``pack_nz_buffers`` (data_copy_nd2nz: an ND tile of GM into NZ fractals in L1), the ``*_buffers``
forms working inside a buffer's byte array at byte offsets.

The Cython twin has the same names, signatures, results and errors (tests/formats/
test_layouts.py runs one body on both); :mod:`npulab.twins` says which one a launch uses. Every
function checks its arguments as the twin does and raises the same ShapeError.
"""
from __future__ import annotations

import numpy as np

from ..arch import FRACTAL_ROWS, ceil_div
from ..errors import ShapeError

_WORDS = (1, 2, 4, 8)            # element sizes the moves take (moved as unsigned integers)


def _check_words(dtype) -> None:
    if np.dtype(dtype).itemsize not in _WORDS:
        raise ShapeError(f"fractal formats move 1-, 2-, 4- or 8-byte elements, got {np.dtype(dtype)}")


def _outer(rows, cols, fr, fc, col_order, col_inner) -> tuple:
    """The 4-D shape of (rows, cols) in fr x fc fractals."""
    r1, c1 = ceil_div(rows, fr), ceil_div(cols, fc)
    return ((c1, r1) if col_order else (r1, c1)) + ((fc, fr) if col_inner else (fr, fc))


# -- pack and unpack: every fractal format is an instance of these ---------------------------------
def pack(x: np.ndarray, fr: int, fc: int, col_order: bool, col_inner: bool) -> np.ndarray:
    """Cut ``x`` (rows, cols) into fr x fc fractals (zero padding), order them row- or
    column-major, store each row- or column-major; return the 4-D array.

    As loops: out[f_outer, f_inner, i, j] where (R, C) = fractal (row, col) index and (r, c) the
    position inside it::

        for R, C, r, c: out[(C, R) if col_order else (R, C)][(c, r) if col_inner else (r, c)]
                        = x[R * fr + r, C * fc + c]   (0 past the edge)
    """
    if x.ndim != 2:
        raise ShapeError(f"pack: x must be 2-D, got shape {x.shape}")
    out = np.empty(_outer(x.shape[0], x.shape[1], fr, fc, col_order, col_inner), dtype=x.dtype)
    return pack_into(x, out, fr, fc, col_order, col_inner)


def pack_into(x: np.ndarray, out: np.ndarray, fr: int, fc: int, col_order: bool,
              col_inner: bool) -> np.ndarray:
    """Write :func:`pack` of ``x`` into ``out`` (C-contiguous, same dtype, exactly the padded
    fractals' size, any shape: e.g. a buffer's flat view); return ``out``."""
    if x.ndim != 2:
        raise ShapeError(f"pack_into: x must be 2-D, got shape {x.shape}")
    if out.dtype != x.dtype or not out.flags.c_contiguous:
        raise ShapeError(f"pack_into: out must be C-contiguous {x.dtype}, got {out.dtype}")
    rows, cols = x.shape
    shape = _outer(rows, cols, fr, fc, col_order, col_inner)
    need = shape[0] * shape[1] * shape[2] * shape[3]
    if out.size != need:
        raise ShapeError(f"pack_into: out holds {out.size} elements, the fractals of {x.shape} need {need}")
    _check_words(x.dtype)
    r1, c1 = ceil_div(rows, fr), ceil_div(cols, fc)
    pad = np.zeros((r1 * fr, c1 * fc), dtype=x.dtype)
    pad[:rows, :cols] = x
    t = pad.reshape(r1, fr, c1, fc)                       # (R, r, C, c)
    axes = ((2, 0) if col_order else (0, 2)) + ((3, 1) if col_inner else (1, 3))
    out.reshape(-1)[:] = t.transpose(axes).reshape(-1)
    return out


def unpack(z: np.ndarray, rows: int, cols: int, col_order: bool, col_inner: bool) -> np.ndarray:
    """The inverse of :func:`pack`: the (rows, cols) matrix held in the 4-D array ``z`` (its
    padding dropped; ``z`` may hold more fractals than the matrix needs)."""
    if z.ndim != 4:
        raise ShapeError(f"a fractal array is 4-D, got shape {z.shape}")
    a, b, c, d = z.shape
    r1, c1 = (b, a) if col_order else (a, b)
    fr, fc = (d, c) if col_inner else (c, d)
    if r1 * fr < rows or c1 * fc < cols:
        raise ShapeError(f"a fractal array of shape {z.shape} holds at most {r1 * fr} x {c1 * fc}, "
                         f"asked for {rows} x {cols}")
    _check_words(z.dtype)
    # bring the axes back to (R, r, C, c)
    pos = {"R": 1 if col_order else 0, "C": 0 if col_order else 1,
           "r": 3 if col_inner else 2, "c": 2 if col_inner else 3}
    t = z.transpose(pos["R"], pos["r"], pos["C"], pos["c"]).reshape(r1 * fr, c1 * fc)
    return np.ascontiguousarray(t[:rows, :cols])


def unpack_into(z: np.ndarray, out: np.ndarray, fr: int, fc: int, col_order: bool,
                col_inner: bool) -> np.ndarray:
    """Write the out.shape = (rows, cols) matrix held in the fractal array ``z`` (any shape
    holding at least ceil(rows/fr) x ceil(cols/fc) fractals of fr x fc) into the 2-D ``out``
    (may be strided); return ``out``."""
    if out.ndim != 2:
        raise ShapeError(f"unpack_into: out must be 2-D, got shape {out.shape}")
    rows, cols = out.shape
    r1, c1 = ceil_div(rows, fr), ceil_div(cols, fc)
    if z.size < r1 * c1 * fr * fc or z.dtype != out.dtype:
        raise ShapeError(f"unpack_into: z ({z.size} x {z.dtype}) does not hold {rows} x {cols} "
                         f"of {out.dtype} in {fr} x {fc} fractals")
    shape = _outer(rows, cols, fr, fc, col_order, col_inner)
    out[...] = unpack(np.ascontiguousarray(z).reshape(-1)[: r1 * c1 * fr * fc].reshape(shape), rows, cols,
                      col_order, col_inner)
    return out


# -- load_data's move: a window of an NZ matrix into ZZ or ZN fractals --------------------------
def _window_error(src_elems, dst_elems, src_rows, c0, s_r0, s_c0, rows, cols, transpose, fr, fc):
    """None when the move stays inside both arrays, else the message saying why not."""
    s_rows, s_cols = (cols, rows) if transpose else (rows, cols)
    if rows < 1 or cols < 1 or fr < 1 or fc < 1 or c0 < 1:
        return f"nz_window_into: sizes must be positive, got {rows} x {cols}, fractal {fr} x {fc}, C0 {c0}"
    need = ceil_div(rows, fr) * ceil_div(cols, fc) * fr * fc
    if dst_elems < need:
        return (f"nz_window_into: dst holds {dst_elems} elements; {rows} x {cols} in "
                f"{fr} x {fc} fractals needs {need}")
    if s_r0 < 0 or s_c0 < 0 or s_r0 + s_rows > src_rows or src_rows % FRACTAL_ROWS or \
            ceil_div(s_c0 + s_cols, c0) * src_rows * c0 > src_elems:
        return (f"nz_window_into: the window ({s_r0}+{s_rows}, {s_c0}+{s_cols}) is outside "
                f"the NZ source ({src_rows} rows, {src_elems} elements)")
    return None


def _window(src, src_rows, c0, s_r0, s_c0, rows, cols, transpose, dst, fr, fc, col_inner) -> None:
    """The move itself (arguments checked): cut the window out of the NZ matrix, transpose it if
    asked, pack it into the first fractals of the flat ``dst``."""
    s_rows, s_cols = (cols, rows) if transpose else (rows, cols)
    c1a, c1b = s_c0 // c0, ceil_div(s_c0 + s_cols, c0)       # the NZ column blocks it touches
    nz = src.reshape(-1)[c1a * src_rows * c0: c1b * src_rows * c0].reshape(c1b - c1a, src_rows, c0)
    window = nz[:, s_r0:s_r0 + s_rows, :].transpose(1, 0, 2).reshape(s_rows, (c1b - c1a) * c0)
    window = window[:, s_c0 - c1a * c0: s_c0 - c1a * c0 + s_cols]
    need = ceil_div(rows, fr) * ceil_div(cols, fc) * fr * fc
    pack_into(window.T if transpose else window, dst.reshape(-1)[:need], fr, fc, False, col_inner)


def nz_window_into(src: np.ndarray, src_rows: int, c0: int, s_r0: int, s_c0: int, rows: int,
                   cols: int, transpose: bool, dst: np.ndarray, fr: int, fc: int,
                   col_inner: bool) -> np.ndarray:
    """What ``load_data`` does to the bytes: take the window of the matrix S held in NZ in
    ``src`` (``src_rows`` padded rows, C0 = ``c0``), rows s_r0.., columns s_c0.., as the operand
    op = window (rows, cols), or window transposed when ``transpose``; write op into ``dst``
    (C-contiguous, exactly the padded fractals' size) as fr x fc fractals in row-major order,
    each row-major (ZZ, L0A) or column-major when ``col_inner`` (ZN, L0B), zero padding."""
    if src.dtype != dst.dtype or not src.flags.c_contiguous or not dst.flags.c_contiguous:
        raise ShapeError(f"nz_window_into: src and dst must be C-contiguous arrays of one dtype, got "
                         f"{src.dtype} and {dst.dtype}")
    err = _window_error(src.size, dst.size, src_rows, c0, s_r0, s_c0, rows, cols, transpose, fr, fc)
    if err is not None:
        raise ShapeError(err)
    need = ceil_div(rows, fr) * ceil_div(cols, fc) * fr * fc
    if dst.size != need:
        raise ShapeError(f"nz_window_into: dst holds {dst.size} elements; {rows} x {cols} in "
                         f"{fr} x {fc} fractals needs {need}")
    _check_words(src.dtype)
    _window(src, src_rows, c0, s_r0, s_c0, rows, cols, transpose, dst, fr, fc, col_inner)
    return dst


def nz_window_buffers(src_buf: np.ndarray, src_off: int, src_len: int, item: int, src_rows: int,
                      c0: int, s_r0: int, s_c0: int, rows: int, cols: int, transpose: bool,
                      dst_buf: np.ndarray, dst_off: int, dst_len: int, fr: int, fc: int,
                      col_inner: bool) -> None:
    """:func:`nz_window_into` between two buffers' byte arrays (``load_data``'s move): the NZ
    source is ``src_len`` elements of ``item`` bytes from byte ``src_off`` of the uint8 array
    ``src_buf``, the destination ``dst_len`` elements from byte ``dst_off`` of ``dst_buf``."""
    if src_buf.dtype != np.uint8 or dst_buf.dtype != np.uint8 or not src_buf.flags.c_contiguous \
            or not dst_buf.flags.c_contiguous:
        raise ShapeError("nz_window_buffers: the buffers must be C-contiguous uint8 arrays")
    if src_off < 0 or dst_off < 0 or src_len < 0 or dst_len < 0 or \
            src_off + src_len * item > src_buf.shape[0] or dst_off + dst_len * item > dst_buf.shape[0]:
        raise ShapeError(f"nz_window_buffers: {src_len} or {dst_len} elements of {item} B at bytes "
                         f"{src_off} / {dst_off} do not fit their buffers")
    err = _window_error(src_len, dst_len, src_rows, c0, s_r0, s_c0, rows, cols, transpose, fr, fc)
    if err is not None:
        raise ShapeError(err)
    if item not in _WORDS:
        raise ShapeError(f"fractal formats move 1-, 2-, 4- or 8-byte elements, got {item}-byte ones")
    word = np.dtype(f"u{item}")
    _window(src_buf[src_off:src_off + src_len * item].view(word), src_rows, c0, s_r0, s_c0, rows, cols,
            transpose, dst_buf[dst_off:dst_off + dst_len * item].view(word), fr, fc, col_inner)


# -- data_copy_nd2nz's move: an ND tile of GM into NZ fractals -------------------------------------
def pack_nz_buffers(src: np.ndarray, src_off: int, rows: int, cols: int, stride: int,
                    dst_buf: np.ndarray, dst_off: int, c0: int) -> None:
    """``data_copy_nd2nz``'s move: the (rows, cols) tile with a row stride of ``stride``
    elements, from element ``src_off`` of the 1-D C-contiguous array ``src`` (a GM tensor),
    as NZ (``pack_into(tile, out, 16, c0, True, False)``: ceil(cols/c0) fractal columns of
    ceil16(rows) rows of c0 elements, zero padding) into bytes ``dst_off ..`` of the uint8
    array ``dst_buf`` (L1)."""
    if src.ndim != 1 or not src.flags.c_contiguous or dst_buf.dtype != np.uint8 \
            or not dst_buf.flags.c_contiguous:
        raise ShapeError("pack_nz_buffers: src must be a 1-D C-contiguous array and dst_buf a "
                         "C-contiguous uint8 array")
    item = src.dtype.itemsize
    if rows < 1 or cols < 1 or stride < cols or c0 < 1 or c0 * item != 32:
        raise ShapeError(f"pack_nz_buffers: {rows} x {cols} (row stride {stride}) in fractal rows of "
                         f"{c0} x {item} B: need positive sizes, stride >= cols and 32-byte rows")
    nbytes = ceil_div(rows, FRACTAL_ROWS) * FRACTAL_ROWS * ceil_div(cols, c0) * 32
    if src_off < 0 or src_off + (rows - 1) * stride + cols > src.shape[0] or dst_off < 0 \
            or dst_off + nbytes > dst_buf.shape[0]:
        raise ShapeError(f"pack_nz_buffers: the tile at element {src_off} of {src.shape[0]} or its "
                         f"{nbytes} B at byte {dst_off} of {dst_buf.shape[0]} are out of range")
    tile = np.lib.stride_tricks.as_strided(src[src_off:], shape=(rows, cols), strides=(stride * item, item))
    pack_into(tile, dst_buf[dst_off:dst_off + nbytes].view(src.dtype), FRACTAL_ROWS, c0, True, False)


__all__ = ["pack", "pack_into", "unpack", "unpack_into", "nz_window_into", "nz_window_buffers",
           "pack_nz_buffers"]
