# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Fractal layouts in Cython: pack/unpack and the cube path's two hot moves, with the same names,
signatures, results and errors as ``npulab.formats.layouts`` (the readable specification; a
launch uses the one its side of npulab.twins names, and tests/formats/test_layouts.py runs one
body on both).

What it optimises: one pass over the elements with typed memoryviews (any dtype is moved as
unsigned integers of its width), no padded temporary, no transposed copy; the source may be a
strided view (a tile of a GM matrix). ``nz_window_buffers`` (load_data) and ``pack_nz_buffers``
(data_copy_nd2nz) work inside a buffer's byte array at byte offsets, on raw pointers: they
skip building views (a few microseconds each) and check only the integer bounds that keep
them inside the arrays. Their loops are tasks for npulab._worker (``submit``): inside a
functional launch they may run on the worker thread.
"""
import numpy as np
cimport numpy as cnp
from libc.string cimport memcpy, memset

from npulab._layouts cimport npulab_tr16
from npulab._worker cimport npulab_task, submit
from npulab.errors import ShapeError

cnp.import_array()

ctypedef fused word:
    cnp.uint8_t
    cnp.uint16_t
    cnp.uint32_t
    cnp.uint64_t

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


# -- pack and unpack: every fractal format is an instance of these ---------------------------------
cdef void _pack(const word[:, :] x, word[::1] out, Py_ssize_t rows, Py_ssize_t cols,
                Py_ssize_t fr, Py_ssize_t fc, bint col_order, bint col_inner) noexcept nogil:
    cdef Py_ssize_t r1 = (rows + fr - 1) // fr, c1 = (cols + fc - 1) // fc
    cdef Py_ssize_t R, r, C, c, row, col, base, f, n, nfull, rend
    cdef Py_ssize_t frac = fr * fc
    if rows % fr or cols % fc:                    # padding to fill with zeros
        memset(&out[0], 0, r1 * c1 * frac * sizeof(word))
    if col_order and not col_inner and x.strides[1] == sizeof(word):
        # NZ (what data_copy_nd2nz writes). Fractal rows of 32 bytes (every dtype's C0): 16
        # rows at a time, column block by column block, so each fractal is written whole
        # while its 16 source rows stay in cache; one fixed-size 32-byte copy per row
        if fc * <Py_ssize_t>sizeof(word) == 32:
            nfull = cols // fc
            R = 0
            while R < rows:
                rend = R + fr
                if rend > rows:
                    rend = rows
                for C in range(nfull):
                    col = C * fc
                    base = C * r1 * frac
                    for row in range(R, rend):
                        memcpy(&out[base + row * fc], &x[row, col], 32)
                R = rend
            if nfull == c1:
                return
            C = nfull
            col = C * fc
            base = C * r1 * frac
            for row in range(rows):
                memcpy(&out[base + row * fc], &x[row, col], (cols - col) * sizeof(word))
            return
        # other fractal widths: column block by column block, so the writes run straight
        # through out (fractal column C holds rows 0.. in order)
        for C in range(c1):
            col = C * fc
            n = cols - col
            if n > fc:
                n = fc
            base = C * r1 * frac
            for row in range(rows):
                memcpy(&out[base + row * fc], &x[row, col], n * sizeof(word))
        return
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
        raise ShapeError(f"fractal formats move 1-, 2-, 4- or 8-byte elements, got {a.dtype}")
    return a.view(_UINT[item])


def _outer(rows, cols, fr, fc, col_order, col_inner):
    r1, c1 = -(-rows // fr), -(-cols // fc)
    return ((c1, r1) if col_order else (r1, c1)) + ((fc, fr) if col_inner else (fr, fc))


def pack_into(x, out, Py_ssize_t fr, Py_ssize_t fc, bint col_order, bint col_inner):
    """Write the fractal array of ``x`` (rows, cols) into ``out`` (a C-contiguous array of the
    same dtype holding exactly the padded fractals: any shape, e.g. a buffer's flat view)."""
    if x.ndim != 2:
        raise ShapeError(f"pack_into: x must be 2-D, got shape {x.shape}")
    if out.dtype != x.dtype or not out.flags.c_contiguous:
        raise ShapeError(f"pack_into: out must be C-contiguous {x.dtype}, got {out.dtype}")
    rows, cols = x.shape
    shape = _outer(rows, cols, fr, fc, col_order, col_inner)
    if out.size != shape[0] * shape[1] * shape[2] * shape[3]:
        raise ShapeError(f"pack_into: out holds {out.size} elements, the fractals of {x.shape} "
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
    """The 4-D fractal array of ``x`` (rows, cols) in fr x fc fractals (see the twin)."""
    if x.ndim != 2:
        raise ShapeError(f"pack: x must be 2-D, got shape {x.shape}")
    out = np.empty(_outer(x.shape[0], x.shape[1], fr, fc, col_order, col_inner), dtype=x.dtype)
    return pack_into(x, out, fr, fc, col_order, col_inner)


def unpack_into(z, out, Py_ssize_t fr, Py_ssize_t fc, bint col_order, bint col_inner):
    """Write the (rows, cols) = out.shape matrix held in the fractal array ``z`` (C-contiguous,
    any shape holding (r1, c1) fractals of fr x fc with r1 = ceil(rows/fr), c1 = ceil(cols/fc))
    into the 2-D array ``out`` (may be strided)."""
    if out.ndim != 2:
        raise ShapeError(f"unpack_into: out must be 2-D, got shape {out.shape}")
    rows, cols = out.shape
    r1, c1 = -(-rows // fr), -(-cols // fc)
    if z.size < r1 * c1 * fr * fc or z.dtype != out.dtype:
        raise ShapeError(f"unpack_into: z ({z.size} x {z.dtype}) does not hold {rows} x {cols} "
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
    """The (rows, cols) matrix in the 4-D fractal array ``z`` (see the twin)."""
    if z.ndim != 4:
        raise ShapeError(f"a fractal array is 4-D, got shape {z.shape}")
    a, b, c, d = z.shape
    r1, c1 = (b, a) if col_order else (a, b)
    fr, fc = (d, c) if col_inner else (c, d)
    if r1 * fr < rows or c1 * fc < cols:
        raise ShapeError(f"a fractal array of shape {z.shape} holds at most {r1 * fr} x {c1 * fc}, "
                         f"asked for {rows} x {cols}")
    if r1 != -(-rows // fr) or c1 != -(-cols // fc):
        # more fractals than the matrix needs: go through the padded matrix
        full = unpack(z, r1 * fr, c1 * fc, col_order, col_inner)
        return np.ascontiguousarray(full[:rows, :cols])
    out = np.empty((rows, cols), dtype=z.dtype)
    return unpack_into(z, out, fr, fc, col_order, col_inner)



# -- load_data's move: a window of an NZ matrix into ZZ or ZN fractals --------------------------
cdef void _nz_window(const word* src, Py_ssize_t src_rows, Py_ssize_t c0, Py_ssize_t s_r0,
                     Py_ssize_t s_c0, Py_ssize_t rows, Py_ssize_t cols, bint transpose,
                     word* dst, Py_ssize_t fr, Py_ssize_t fc, bint col_inner) noexcept nogil:
    cdef Py_ssize_t r1 = (rows + fr - 1) // fr, c1 = (cols + fc - 1) // fc
    cdef Py_ssize_t frac = fr * fc
    cdef Py_ssize_t i, j, R, r, C, c, q, e, e2, d, sr, sc, n
    memset(dst, 0, r1 * c1 * frac * sizeof(word))
    for i in range(rows):
        R = i // fr
        r = i - R * fr
        if not transpose:
            # op row i = S row s_r0 + i: columns s_c0 .. come in runs of c0 (one NZ fractal row)
            sr = s_r0 + i
            j = 0
            while j < cols:
                sc = s_c0 + j
                q = sc // c0
                e = sc - q * c0
                n = c0 - e
                if n > cols - j:
                    n = cols - j
                C = j // fc
                c = j - C * fc
                if n > fc - c:
                    n = fc - c
                d = (R * c1 + C) * frac
                if not col_inner:
                    memcpy(dst + d + r * fc + c, src + (q * src_rows + sr) * c0 + e, n * sizeof(word))
                else:
                    for e2 in range(n):
                        dst[d + (c + e2) * fr + r] = src[(q * src_rows + sr) * c0 + e + e2]
                j += n
        else:
            # op row i = S column s_c0 + i: one element per S row, c0 apart
            sc = s_c0 + i
            q = sc // c0
            e = sc - q * c0
            for j in range(cols):
                C = j // fc
                c = j - C * fc
                d = (R * c1 + C) * frac + (c * fr + r if col_inner else r * fc + c)
                dst[d] = src[(q * src_rows + s_r0 + j) * c0 + e]


cdef void _nz_window_whole(const char* src, Py_ssize_t src_rows, Py_ssize_t row_bytes,
                           Py_ssize_t s_r0, Py_ssize_t q0, Py_ssize_t r1, Py_ssize_t c1,
                           char* dst, bint transpose16) noexcept nogil:
    """The aligned case of _nz_window, fractal by fractal: op fractal (R, C) is the 16 rows
    s_r0 + 16 R .. of NZ column block q0 + C, which lie contiguous in L1 (512 bytes): one copy
    (ZZ), or one 16 x 16 transpose (ZN of 16-bit elements)."""
    cdef Py_ssize_t R, C, frac = 16 * row_bytes
    cdef const char* s
    cdef char* d
    for R in range(r1):
        for C in range(c1):
            s = src + ((q0 + C) * src_rows + s_r0 + R * 16) * row_bytes
            d = dst + (R * c1 + C) * frac
            if transpose16:
                npulab_tr16(<cnp.uint16_t*>d, <const cnp.uint16_t*>s)
            else:
                memcpy(d, s, frac)


cdef int _nz_window_any(const char* src, Py_ssize_t item, Py_ssize_t src_rows, Py_ssize_t c0,
                        Py_ssize_t s_r0, Py_ssize_t s_c0, Py_ssize_t rows, Py_ssize_t cols,
                        bint transpose, char* dst, Py_ssize_t fr, Py_ssize_t fc,
                        bint col_inner) noexcept nogil:
    if not transpose and s_c0 % c0 == 0 and rows % fr == 0 and cols % fc == 0 and (
            (fr == 16 and fc == c0 and not col_inner) or
            (fr == 16 and fc == 16 and c0 == 16 and col_inner and item == 2)):
        _nz_window_whole(src, src_rows, c0 * item, s_r0, s_c0 // c0, rows // fr, cols // fc, dst,
                         col_inner)
    elif item == 2:
        _nz_window[cnp.uint16_t](<const cnp.uint16_t*>src, src_rows, c0, s_r0, s_c0, rows, cols,
                                 transpose, <cnp.uint16_t*>dst, fr, fc, col_inner)
    elif item == 1:
        _nz_window[cnp.uint8_t](<const cnp.uint8_t*>src, src_rows, c0, s_r0, s_c0, rows, cols,
                                transpose, <cnp.uint8_t*>dst, fr, fc, col_inner)
    elif item == 4:
        _nz_window[cnp.uint32_t](<const cnp.uint32_t*>src, src_rows, c0, s_r0, s_c0, rows, cols,
                                 transpose, <cnp.uint32_t*>dst, fr, fc, col_inner)
    elif item == 8:
        _nz_window[cnp.uint64_t](<const cnp.uint64_t*>src, src_rows, c0, s_r0, s_c0, rows, cols,
                                 transpose, <cnp.uint64_t*>dst, fr, fc, col_inner)
    else:
        return -1
    return 0


cdef str _window_error(Py_ssize_t src_elems, Py_ssize_t dst_elems, Py_ssize_t src_rows, Py_ssize_t c0,
                       Py_ssize_t s_r0, Py_ssize_t s_c0, Py_ssize_t rows, Py_ssize_t cols,
                       bint transpose, Py_ssize_t fr, Py_ssize_t fc):
    """None when the move stays inside both arrays, else the message saying why not."""
    cdef Py_ssize_t r1, c1
    cdef Py_ssize_t s_rows = cols if transpose else rows, s_cols = rows if transpose else cols
    if rows < 1 or cols < 1 or fr < 1 or fc < 1 or c0 < 1:
        return f"nz_window_into: sizes must be positive, got {rows} x {cols}, fractal {fr} x {fc}, C0 {c0}"
    r1, c1 = (rows + fr - 1) // fr, (cols + fc - 1) // fc
    if dst_elems < r1 * c1 * fr * fc:
        return (f"nz_window_into: dst holds {dst_elems} elements; {rows} x {cols} in "
                f"{fr} x {fc} fractals needs {r1 * c1 * fr * fc}")
    if s_r0 < 0 or s_c0 < 0 or s_r0 + s_rows > src_rows or src_rows % 16 or \
            (s_c0 + s_cols + c0 - 1) // c0 * src_rows * c0 > src_elems:
        return (f"nz_window_into: the window ({s_r0}+{s_rows}, {s_c0}+{s_cols}) is outside "
                f"the NZ source ({src_rows} rows, {src_elems} elements)")
    return None


def nz_window_into(src, Py_ssize_t src_rows, Py_ssize_t c0, Py_ssize_t s_r0, Py_ssize_t s_c0,
                   Py_ssize_t rows, Py_ssize_t cols, bint transpose, dst, Py_ssize_t fr, Py_ssize_t fc,
                   bint col_inner):
    """The operand op (rows, cols) = the window
    of the NZ matrix S in ``src`` at (s_r0, s_c0), or its transpose, packed into ``dst`` as
    row-major-ordered fr x fc fractals (column-major inside each when ``col_inner``)."""
    if src.dtype != dst.dtype or not src.flags.c_contiguous or not dst.flags.c_contiguous:
        raise ShapeError(f"nz_window_into: src and dst must be C-contiguous arrays of one dtype, got "
                         f"{src.dtype} and {dst.dtype}")
    err = _window_error(src.size, dst.size, src_rows, c0, s_r0, s_c0, rows, cols, transpose, fr, fc)
    if err is not None:
        raise ShapeError(err)
    cdef Py_ssize_t r1 = (rows + fr - 1) // fr, c1 = (cols + fc - 1) // fc
    if dst.size != r1 * c1 * fr * fc:
        raise ShapeError(f"nz_window_into: dst holds {dst.size} elements; {rows} x {cols} in "
                         f"{fr} x {fc} fractals needs {r1 * c1 * fr * fc}")
    cdef cnp.ndarray sa = src, da = dst
    if _nz_window_any(<const char*>cnp.PyArray_DATA(sa), src.dtype.itemsize, src_rows, c0, s_r0, s_c0,
                      rows, cols, transpose, <char*>cnp.PyArray_DATA(da), fr, fc, col_inner):
        raise ShapeError(f"fractal formats move 1-, 2-, 4- or 8-byte elements, got {src.dtype}")
    return dst


def nz_window_buffers(cnp.ndarray src_buf, Py_ssize_t src_off, Py_ssize_t src_len, Py_ssize_t item,
                  Py_ssize_t src_rows, Py_ssize_t c0, Py_ssize_t s_r0, Py_ssize_t s_c0, Py_ssize_t rows,
                  Py_ssize_t cols, bint transpose, cnp.ndarray dst_buf, Py_ssize_t dst_off,
                  Py_ssize_t dst_len, Py_ssize_t fr, Py_ssize_t fc, bint col_inner):
    """:func:`nz_window_into` inside two buffers' uint8 arrays: the NZ source is ``src_len``
    elements of ``item`` bytes from byte ``src_off`` of ``src_buf``, the destination ``dst_len``
    elements from byte ``dst_off`` of ``dst_buf``."""
    if src_buf.dtype != np.uint8 or dst_buf.dtype != np.uint8 or not cnp.PyArray_IS_C_CONTIGUOUS(src_buf) \
            or not cnp.PyArray_IS_C_CONTIGUOUS(dst_buf):
        raise ShapeError("nz_window_buffers: the buffers must be C-contiguous uint8 arrays")
    if src_off < 0 or dst_off < 0 or src_len < 0 or dst_len < 0 or \
            src_off + src_len * item > src_buf.shape[0] or dst_off + dst_len * item > dst_buf.shape[0]:
        raise ShapeError(f"nz_window_buffers: {src_len} or {dst_len} elements of {item} B at bytes "
                         f"{src_off} / {dst_off} do not fit their buffers")
    err = _window_error(src_len, dst_len, src_rows, c0, s_r0, s_c0, rows, cols, transpose, fr, fc)
    if err is not None:
        raise ShapeError(err)
    if item not in (1, 2, 4, 8):
        raise ShapeError(f"fractal formats move 1-, 2-, 4- or 8-byte elements, got {item}-byte ones")
    cdef npulab_task t
    t.run = _run_window
    t.s = <const char*>cnp.PyArray_DATA(src_buf) + src_off
    t.d = <char*>cnp.PyArray_DATA(dst_buf) + dst_off
    t.a[0], t.a[1], t.a[2], t.a[3], t.a[4], t.a[5], t.a[6] = item, src_rows, c0, s_r0, s_c0, rows, cols
    t.a[7], t.a[8], t.a[9], t.a[10] = transpose, fr, fc, col_inner
    submit(&t, (src_buf, dst_buf))
    return None


cdef void _run_window(const npulab_task* t) noexcept nogil:
    _nz_window_any(t.s, t.a[0], t.a[1], t.a[2], t.a[3], t.a[4], t.a[5], t.a[6], <bint>t.a[7], t.d,
                   t.a[8], t.a[9], <bint>t.a[10])



# -- data_copy_nd2nz's move: an ND tile of GM into NZ fractals -------------------------------------
def pack_nz_buffers(cnp.ndarray src, Py_ssize_t src_off, Py_ssize_t rows, Py_ssize_t cols,
                Py_ssize_t stride, cnp.ndarray dst_buf, Py_ssize_t dst_off, Py_ssize_t c0):
    """``data_copy_nd2nz``'s move: the (rows, cols) tile with a row stride of ``stride``
    elements, from element ``src_off`` of the 1-D C-contiguous array ``src`` (a GM tensor),
    as NZ (``pack_into(tile, out, 16, c0, True, False)``: ceil(cols/c0) fractal columns of
    ceil16(rows) rows of c0 elements, zero padding) into bytes ``dst_off ..`` of the uint8
    array ``dst_buf`` (L1). Optimised as ``_pack``'s NZ path, on raw pointers (no view)."""
    if src.ndim != 1 or not cnp.PyArray_IS_C_CONTIGUOUS(src) or dst_buf.dtype != np.uint8 \
            or not cnp.PyArray_IS_C_CONTIGUOUS(dst_buf):
        raise ShapeError("pack_nz_buffers: src must be a 1-D C-contiguous array and dst_buf a "
                         "C-contiguous uint8 array")
    cdef Py_ssize_t item = src.dtype.itemsize
    if rows < 1 or cols < 1 or stride < cols or c0 < 1 or c0 * item != 32:
        raise ShapeError(f"pack_nz_buffers: {rows} x {cols} (row stride {stride}) in fractal rows of "
                         f"{c0} x {item} B: need positive sizes, stride >= cols and 32-byte rows")
    cdef Py_ssize_t r16 = (rows + 15) // 16 * 16, c1 = (cols + c0 - 1) // c0
    if src_off < 0 or src_off + (rows - 1) * stride + cols > src.shape[0] or dst_off < 0 \
            or dst_off + c1 * r16 * 32 > dst_buf.shape[0]:
        raise ShapeError(f"pack_nz_buffers: the tile at element {src_off} of {src.shape[0]} or its "
                         f"{c1 * r16 * 32} B at byte {dst_off} of {dst_buf.shape[0]} are out of range")
    cdef npulab_task t
    t.run = _run_pack_nz
    t.s = <const char*>cnp.PyArray_DATA(src) + src_off * item
    t.d = <char*>cnp.PyArray_DATA(dst_buf) + dst_off
    t.a[0], t.a[1], t.a[2], t.a[3], t.a[4] = rows, cols, stride * item, item, c0
    submit(&t, (src, dst_buf))
    return None


cdef void _run_pack_nz(const npulab_task* t) noexcept nogil:
    _pack_nz_core(t.s, t.a[0], t.a[1], t.a[2], t.a[3], t.a[4], t.d)


cdef void _pack_nz_core(const char* s, Py_ssize_t rows, Py_ssize_t cols, Py_ssize_t row_bytes,
                        Py_ssize_t item, Py_ssize_t c0, char* d) noexcept nogil:
    cdef Py_ssize_t r16 = (rows + 15) // 16 * 16, c1 = (cols + c0 - 1) // c0
    cdef Py_ssize_t R, rend, row, C, nfull = cols // c0
    if rows % 16 or cols % c0:
        memset(d, 0, c1 * r16 * 32)
    R = 0
    while R < rows:                    # 16 rows at a time, fractal by fractal (see _pack)
        rend = R + 16
        if rend > rows:
            rend = rows
        for C in range(nfull):
            for row in range(R, rend):
                memcpy(d + (C * r16 + row) * 32, s + row * row_bytes + C * 32, 32)
        R = rend
    if nfull < c1:
        for row in range(rows):
            memcpy(d + (nfull * r16 + row) * 32, s + row * row_bytes + nfull * 32,
                   (cols - nfull * c0) * item)

