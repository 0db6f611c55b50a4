"""FixPipe's drain and mmad's widening read, in plain numpy: the specification of
``npulab._drains``.

* ``unpack_f16_to_f32`` / ``unpack_f16_buffer``: float16 fractals unpacked into a float32
  matrix, widened exactly (what ``mmad`` reads out of L0A / L0B into its chain);
* ``drain_nz_f32_to_f16``: FixPipe's usual epilogue, the fp32 NZ result in L0C + bias, ReLU,
  rounded to nearest even into a float16 ND matrix.

The Cython twin has the same names, signatures, results and errors (tests/formats/
test_drains.py runs one body on both); :mod:`npulab.twins` says which one a launch uses.
"""
from __future__ import annotations

import numpy as np

from ..arch import FRACTAL_ROWS, ceil_div
from ..errors import ShapeError
from .layouts import unpack_into


def unpack_f16_to_f32(z: np.ndarray, out: np.ndarray, fr: int, fc: int, col_order: bool,
                      col_inner: bool = False) -> np.ndarray:
    """Unpack float16 fractals (fractal order row-major, or column-major when ``col_order``;
    each fractal row-major, or column-major when ``col_inner``) into the float32 (rows, cols) =
    out.shape matrix ``out`` (rows may be strided, elements contiguous), widening exactly:
    :func:`~npulab.formats.layouts.unpack_into` followed by a cast. Returns ``out``."""
    if out.ndim != 2 or out.dtype != np.float32 or (out.shape[1] > 1 and out.strides[1] != 4) \
            or out.strides[0] % 4 or out.strides[0] < 0:
        raise ShapeError(f"unpack_f16_to_f32: out must be a 2-D float32 array with contiguous rows, "
                         f"got {out.dtype} of shape {out.shape}")
    if z.dtype != np.float16:
        raise ShapeError(f"unpack_f16_to_f32: z must be float16, got {z.dtype}")
    rows, cols = out.shape
    need = ceil_div(rows, fr) * ceil_div(cols, fc) * fr * fc
    if z.size < need:
        raise ShapeError(f"unpack_f16_to_f32: z holds {z.size} elements; {rows} x {cols} in "
                         f"{fr} x {fc} fractals needs {need}")
    if rows == 0 or cols == 0:
        return out
    narrow = np.empty((rows, cols), dtype=np.float16)
    unpack_into(z, narrow, fr, fc, col_order, col_inner)
    out[...] = narrow
    return out


def unpack_f16_buffer(buf: np.ndarray, offset: int, out: np.ndarray, row0: int, rows: int, col0: int,
                      cols: int, fr: int, fc: int, col_order: bool, col_inner: bool) -> np.ndarray:
    """:func:`unpack_f16_to_f32` of the float16 fractals from byte ``offset`` of the uint8 array
    ``buf`` (an L0A / L0B buffer) into rows ``row0 .. row0 + rows`` and columns ``col0 .. col0 +
    cols`` of the C-contiguous float32 matrix ``out`` (what ``mmad`` reads into its chain)."""
    if buf.dtype != np.uint8 or not buf.flags.c_contiguous or out.dtype != np.float32 \
            or out.ndim != 2 or not out.flags.c_contiguous:
        raise ShapeError("unpack_f16_buffer: buf must be a C-contiguous uint8 array and out a "
                         "C-contiguous 2-D float32 array")
    height, width = out.shape
    if fr < 1 or fc < 1:
        raise ShapeError(f"unpack_f16_buffer: fractals of {fr} x {fc} elements")
    n = ceil_div(rows, fr) * ceil_div(cols, fc) * fr * fc
    if row0 < 0 or rows < 0 or row0 + rows > height or col0 < 0 or cols < 0 or col0 + cols > width \
            or offset < 0 or offset % 2 or offset + n * 2 > buf.shape[0]:
        raise ShapeError(f"unpack_f16_buffer: rows {row0}+{rows}, columns {col0}+{cols} of a "
                         f"{height} x {width} matrix from byte {offset} of a {buf.shape[0]}-byte "
                         f"buffer are out of range")
    if rows and cols:
        unpack_f16_to_f32(buf[offset:offset + 2 * n].view(np.float16), out[row0:row0 + rows, col0:col0 + cols],
                          fr, fc, col_order, col_inner)
    return out


def drain_nz_f32_to_f16(z: np.ndarray, m: int, n: int, out: np.ndarray, bias, relu: bool) -> bool:
    """FixPipe's common drain in one pass: the (m, n) fp32 result held in L0C as NZ 16 x 16
    fractals (``z``, float32, ceil16(m) rows per fractal column) + ``bias`` (n float32 values
    or None), ReLU if asked (0 where the value is below 0: -0.0 and NaN stay, as the F16C
    instructions of the twin leave them), rounded to nearest even into the float16 (m, n) array
    ``out`` (rows may be strided). Returns True: it drained. (The Cython twin returns False,
    touching nothing, on a CPU without F16C; the caller then drains step by step.)"""
    if z.dtype != np.float32 or not z.flags.c_contiguous or out.dtype != np.float16 \
            or out.ndim != 2 or out.shape[0] != m or out.shape[1] != n or \
            (n > 1 and out.strides[1] != 2) or out.strides[0] % 2 or out.strides[0] < 0:
        raise ShapeError("drain_nz_f32_to_f16: expected float32 NZ fractals and a float16 (m, n) "
                         "array with contiguous rows")
    need = ceil_div(m, FRACTAL_ROWS) * FRACTAL_ROWS * ceil_div(n, FRACTAL_ROWS) * FRACTAL_ROWS
    if z.size < need:
        raise ShapeError(f"drain_nz_f32_to_f16: z holds {z.size} values; an {m} x {n} result needs {need}")
    if bias is not None:
        bias = np.ascontiguousarray(bias, dtype=np.float32)
        if bias.size < n:
            raise ShapeError(f"drain_nz_f32_to_f16: bias holds {bias.size} values, n = {n}")
    res = np.empty((m, n), dtype=np.float32)
    unpack_into(z.reshape(-1)[:need], res, FRACTAL_ROWS, FRACTAL_ROWS, True, False)
    if bias is not None:
        res += bias[:n]
    if relu:
        res[res < 0] = 0
    with np.errstate(over="ignore"):             # large values overflow to inf, as on the chip
        out[...] = res.astype(np.float16)
    return True


__all__ = ["unpack_f16_to_f32", "unpack_f16_buffer", "drain_nz_f32_to_f16"]
