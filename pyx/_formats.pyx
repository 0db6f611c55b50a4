# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Fractal pack/unpack in Cython: same signatures and results as ``npulab.formats.pack_numpy``,
``unpack_numpy``, ``pack_into_numpy`` and ``unpack_into_numpy`` (the readable specification;
the parity tests run one body on both). What it optimises: one pass over the elements with
typed memoryviews (any dtype is moved as unsigned integers of its width), no padded
temporary, no transposed copy; the source may be a strided view (a tile of a GM matrix).
"""
import numpy as np
cimport numpy as cnp
from libc.string cimport memcpy, memset

cnp.import_array()

ctypedef fused word:
    cnp.uint8_t
    cnp.uint16_t
    cnp.uint32_t
    cnp.uint64_t

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


cdef void _pack(const word[:, :] x, word[::1] out, Py_ssize_t rows, Py_ssize_t cols,
                Py_ssize_t fr, Py_ssize_t fc, bint col_order, bint col_inner) noexcept nogil:
    cdef Py_ssize_t r1 = (rows + fr - 1) // fr, c1 = (cols + fc - 1) // fc
    cdef Py_ssize_t R, r, C, c, row, col, base, f, n
    cdef Py_ssize_t frac = fr * fc
    memset(&out[0], 0, r1 * c1 * frac * sizeof(word))
    for row in range(rows):
        R = row // fr
        r = row - R * fr
        for C in range(c1):
            f = C * r1 + R if col_order else R * c1 + C
            base = f * frac
            col = C * fc
            n = cols - col
            if n > fc:
                n = fc
            if not col_inner:
                if x.strides[1] == sizeof(word):
                    memcpy(&out[base + r * fc], &x[row, col], n * sizeof(word))
                else:
                    for c in range(n):
                        out[base + r * fc + c] = x[row, col + c]
            else:
                for c in range(n):
                    out[base + c * fr + r] = x[row, col + c]


cdef void _unpack(const word[::1] z, word[:, :] out, Py_ssize_t rows, Py_ssize_t cols,
                  Py_ssize_t r1, Py_ssize_t c1, Py_ssize_t fr, Py_ssize_t fc,
                  bint col_order, bint col_inner) noexcept nogil:
    cdef Py_ssize_t R, r, C, c, row, col, base, f, n
    cdef Py_ssize_t frac = fr * fc
    for row in range(rows):
        R = row // fr
        r = row - R * fr
        for C in range(c1):
            f = C * r1 + R if col_order else R * c1 + C
            base = f * frac
            col = C * fc
            n = cols - col
            if n > fc:
                n = fc
            if n <= 0:
                break
            if not col_inner:
                if out.strides[1] == sizeof(word):
                    memcpy(&out[row, col], &z[base + r * fc], n * sizeof(word))
                else:
                    for c in range(n):
                        out[row, col + c] = z[base + r * fc + c]
            else:
                for c in range(n):
                    out[row, col + c] = z[base + c * fr + r]


def _as_words(a):
    item = a.dtype.itemsize
    if item not in _UINT:
        raise ValueError(f"fractal formats move 1-, 2-, 4- or 8-byte elements, got {a.dtype}")
    return a.view(_UINT[item])


def _outer(rows, cols, fr, fc, col_order, col_inner):
    r1, c1 = -(-rows // fr), -(-cols // fc)
    return ((c1, r1) if col_order else (r1, c1)) + ((fc, fr) if col_inner else (fr, fc))


def pack_into(x, out, Py_ssize_t fr, Py_ssize_t fc, bint col_order, bint col_inner):
    """Write the fractal array of ``x`` (rows, cols) into ``out`` (a C-contiguous array of the
    same dtype holding exactly the padded fractals: any shape, e.g. a buffer's flat view)."""
    if x.ndim != 2:
        raise ValueError(f"pack_into: x must be 2-D, got shape {x.shape}")
    if out.dtype != x.dtype or not out.flags.c_contiguous:
        raise ValueError(f"pack_into: out must be C-contiguous {x.dtype}, got {out.dtype}")
    rows, cols = x.shape
    shape = _outer(rows, cols, fr, fc, col_order, col_inner)
    if out.size != shape[0] * shape[1] * shape[2] * shape[3]:
        raise ValueError(f"pack_into: out holds {out.size} elements, the fractals of {x.shape} "
                         f"need {shape[0] * shape[1] * shape[2] * shape[3]}")
    if x.strides[1] != x.dtype.itemsize and x.shape[1] > 1:
        x = np.ascontiguousarray(x)
    xv = _as_words(x)
    ov = _as_words(out.reshape(-1))
    if xv.dtype == np.uint16:
        _pack[cnp.uint16_t](xv, ov, rows, cols, fr, fc, col_order, col_inner)
    elif xv.dtype == np.uint8:
        _pack[cnp.uint8_t](xv, ov, rows, cols, fr, fc, col_order, col_inner)
    elif xv.dtype == np.uint32:
        _pack[cnp.uint32_t](xv, ov, rows, cols, fr, fc, col_order, col_inner)
    else:
        _pack[cnp.uint64_t](xv, ov, rows, cols, fr, fc, col_order, col_inner)
    return out


def pack(x, Py_ssize_t fr, Py_ssize_t fc, bint col_order, bint col_inner):
    """Same as ``npulab.formats.pack_numpy``: the 4-D fractal array of ``x``."""
    if x.ndim != 2:
        raise ValueError(f"pack: x must be 2-D, got shape {x.shape}")
    out = np.empty(_outer(x.shape[0], x.shape[1], fr, fc, col_order, col_inner), dtype=x.dtype)
    return pack_into(x, out, fr, fc, col_order, col_inner)


def unpack_into(z, out, Py_ssize_t fr, Py_ssize_t fc, bint col_order, bint col_inner):
    """Write the (rows, cols) = out.shape matrix held in the fractal array ``z`` (C-contiguous,
    any shape holding (r1, c1) fractals of fr x fc with r1 = ceil(rows/fr), c1 = ceil(cols/fc))
    into the 2-D array ``out`` (may be strided)."""
    if out.ndim != 2:
        raise ValueError(f"unpack_into: out must be 2-D, got shape {out.shape}")
    rows, cols = out.shape
    r1, c1 = -(-rows // fr), -(-cols // fc)
    if z.size < r1 * c1 * fr * fc or z.dtype != out.dtype:
        raise ValueError(f"unpack_into: z ({z.size} x {z.dtype}) does not hold {rows} x {cols} "
                         f"of {out.dtype} in {fr} x {fc} fractals")
    zv = _as_words(np.ascontiguousarray(z).reshape(-1))
    ov = _as_words(out)
    if zv.dtype == np.uint16:
        _unpack[cnp.uint16_t](zv, ov, rows, cols, r1, c1, fr, fc, col_order, col_inner)
    elif zv.dtype == np.uint8:
        _unpack[cnp.uint8_t](zv, ov, rows, cols, r1, c1, fr, fc, col_order, col_inner)
    elif zv.dtype == np.uint32:
        _unpack[cnp.uint32_t](zv, ov, rows, cols, r1, c1, fr, fc, col_order, col_inner)
    else:
        _unpack[cnp.uint64_t](zv, ov, rows, cols, r1, c1, fr, fc, col_order, col_inner)
    return out


def unpack(z, Py_ssize_t rows, Py_ssize_t cols, bint col_order, bint col_inner):
    """Same as ``npulab.formats.unpack_numpy``: the (rows, cols) matrix in the 4-D array ``z``."""
    if z.ndim != 4:
        raise ValueError(f"a fractal array is 4-D, got shape {z.shape}")
    a, b, c, d = z.shape
    r1, c1 = (b, a) if col_order else (a, b)
    fr, fc = (d, c) if col_inner else (c, d)
    if r1 * fr < rows or c1 * fc < cols:
        raise ValueError(f"a fractal array of shape {z.shape} holds at most {r1 * fr} x {c1 * fc}, "
                         f"asked for {rows} x {cols}")
    if r1 != -(-rows // fr) or c1 != -(-cols // fc):
        # more fractals than the matrix needs: go through the padded matrix
        full = unpack(z, r1 * fr, c1 * fc, col_order, col_inner)
        return np.ascontiguousarray(full[:rows, :cols])
    out = np.empty((rows, cols), dtype=z.dtype)
    return unpack_into(z, out, fr, fc, col_order, col_inner)
