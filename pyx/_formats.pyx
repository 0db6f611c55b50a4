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


# -- the cube's hot moves: L1 (NZ) -> L0A/L0B in one pass, and L0 -> fp32 for the mmad numerics --
# Each move has a core on raw pointers, an array-level function (the twin of the numpy
# specification in npulab.formats, which the parity tests compare) and a ``*_raw`` function
# that works inside a buffer's byte array at byte offsets: what load_data and mmad call once
# per instruction, so it skips building views (a few microseconds each) and checks only the
# integer bounds that keep it inside the arrays.
cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    /* a 16 x 16 block of 16-bit elements, transposed: d[j][i] = s[i][j]. On x86-64 (SSE2 is
       part of the base ISA) as four 8 x 8 transposes of three unpack rounds each (16-, 32-,
       then 64-bit interleaves); elsewhere element by element. */
    #if defined(__SSE2__)
    #include <emmintrin.h>
    static inline void npulab_tr8(uint16_t *d, const uint16_t *s) {
        /* the 8 x 8 block at s (row stride 16) into d (row stride 16), transposed */
        __m128i a0 = _mm_loadu_si128((const __m128i *)(s + 0 * 16));
        __m128i a1 = _mm_loadu_si128((const __m128i *)(s + 1 * 16));
        __m128i a2 = _mm_loadu_si128((const __m128i *)(s + 2 * 16));
        __m128i a3 = _mm_loadu_si128((const __m128i *)(s + 3 * 16));
        __m128i a4 = _mm_loadu_si128((const __m128i *)(s + 4 * 16));
        __m128i a5 = _mm_loadu_si128((const __m128i *)(s + 5 * 16));
        __m128i a6 = _mm_loadu_si128((const __m128i *)(s + 6 * 16));
        __m128i a7 = _mm_loadu_si128((const __m128i *)(s + 7 * 16));
        __m128i b0 = _mm_unpacklo_epi16(a0, a1), b1 = _mm_unpackhi_epi16(a0, a1);
        __m128i b2 = _mm_unpacklo_epi16(a2, a3), b3 = _mm_unpackhi_epi16(a2, a3);
        __m128i b4 = _mm_unpacklo_epi16(a4, a5), b5 = _mm_unpackhi_epi16(a4, a5);
        __m128i b6 = _mm_unpacklo_epi16(a6, a7), b7 = _mm_unpackhi_epi16(a6, a7);
        __m128i c0 = _mm_unpacklo_epi32(b0, b2), c1 = _mm_unpackhi_epi32(b0, b2);
        __m128i c2 = _mm_unpacklo_epi32(b1, b3), c3 = _mm_unpackhi_epi32(b1, b3);
        __m128i c4 = _mm_unpacklo_epi32(b4, b6), c5 = _mm_unpackhi_epi32(b4, b6);
        __m128i c6 = _mm_unpacklo_epi32(b5, b7), c7 = _mm_unpackhi_epi32(b5, b7);
        _mm_storeu_si128((__m128i *)(d + 0 * 16), _mm_unpacklo_epi64(c0, c4));
        _mm_storeu_si128((__m128i *)(d + 1 * 16), _mm_unpackhi_epi64(c0, c4));
        _mm_storeu_si128((__m128i *)(d + 2 * 16), _mm_unpacklo_epi64(c1, c5));
        _mm_storeu_si128((__m128i *)(d + 3 * 16), _mm_unpackhi_epi64(c1, c5));
        _mm_storeu_si128((__m128i *)(d + 4 * 16), _mm_unpacklo_epi64(c2, c6));
        _mm_storeu_si128((__m128i *)(d + 5 * 16), _mm_unpackhi_epi64(c2, c6));
        _mm_storeu_si128((__m128i *)(d + 6 * 16), _mm_unpacklo_epi64(c3, c7));
        _mm_storeu_si128((__m128i *)(d + 7 * 16), _mm_unpackhi_epi64(c3, c7));
    }
    static inline void npulab_tr16(uint16_t *d, const uint16_t *s) {
        npulab_tr8(d, s);                       /* block (0, 0) */
        npulab_tr8(d + 8 * 16, s + 8);          /* block (0, 1) -> (1, 0) */
        npulab_tr8(d + 8, s + 8 * 16);          /* block (1, 0) -> (0, 1) */
        npulab_tr8(d + 8 * 16 + 8, s + 8 * 16 + 8);
    }
    #else
    static inline void npulab_tr16(uint16_t *d, const uint16_t *s) {
        int i, j;
        for (j = 0; j < 16; j++)
            for (i = 0; i < 16; i++)
                d[j * 16 + i] = s[i * 16 + j];
    }
    #endif
    /* n contiguous halves to floats: the x86 F16C instruction (8 at a time) when this CPU has
       it, checked once at run time, else the exact table. Both are exact. */
    static int npulab_f16c = -1;
    #if defined(__x86_64__) && defined(__GNUC__)
    #include <immintrin.h>
    __attribute__((target("avx,f16c")))
    static void npulab_h2f_f16c(const uint16_t *s, float *d, Py_ssize_t n) {
        Py_ssize_t i = 0;
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
        for (; i < n; i++) {
            __m128i v = _mm_cvtsi32_si128(s[i]);
            d[i] = _mm_cvtss_f32(_mm_cvtph_ps(v));
        }
    }
    #endif
    /* FixPipe's drain of one fp32 run: + bias, ReLU, round to nearest even into fp16 */
    #if defined(__x86_64__) && defined(__GNUC__)
    __attribute__((target("avx,f16c")))
    static void npulab_f2h_f16c(const float *s, const float *bias, int relu, uint16_t *d, Py_ssize_t n) {
        Py_ssize_t i = 0;
        __m256 zero = _mm256_setzero_ps();
        for (; i + 8 <= n; i += 8) {
            __m256 v = _mm256_loadu_ps(s + i);
            if (bias) v = _mm256_add_ps(v, _mm256_loadu_ps(bias + i));
            if (relu) v = _mm256_max_ps(zero, v);   /* NaN stays NaN, as np.maximum */
            _mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
        }
        for (; i < n; i++) {
            float v = s[i] + (bias ? bias[i] : 0.0f);
            if (relu && !(v >= 0.0f)) v = (v != v) ? v : 0.0f;
            d[i] = (uint16_t)_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(v), _MM_FROUND_TO_NEAREST_INT), 0);
        }
    }
    #endif
    static inline int npulab_have_f16c(void) {
    #if defined(__x86_64__) && defined(__GNUC__)
        if (npulab_f16c < 0) {
            __builtin_cpu_init();
            npulab_f16c = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
        }
        return npulab_f16c;
    #else
        return 0;
    #endif
    }
    /* returns 0 when this CPU has no F16C: the caller then drains with numpy */
    static inline int npulab_f2h_run(const float *s, const float *bias, int relu, uint16_t *d, Py_ssize_t n) {
    #if defined(__x86_64__) && defined(__GNUC__)
        if (npulab_have_f16c()) { npulab_f2h_f16c(s, bias, relu, d, n); return 1; }
    #endif
        return 0;
    }
    /* one whole 16 x 16 fp16 fractal to floats: its 16 rows (or, when ``col_inner``, its 16
       columns: the fractal is stored column by column) to rows ``d``, ``d + stride``, ...
       F16C when this CPU has it, else the exact table. */
    #if defined(__x86_64__) && defined(__GNUC__)
    __attribute__((target("avx,f16c")))
    static void npulab_frac_h2f_f16c(const uint16_t *s, float *d, Py_ssize_t stride) {
        int r;
        for (r = 0; r < 16; r++) {
            _mm256_storeu_ps(d + r * stride, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + r * 16))));
            _mm256_storeu_ps(d + r * stride + 8,
                             _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + r * 16 + 8))));
        }
    }
    #endif
    static inline void npulab_frac_h2f(const uint16_t *z, float *d, Py_ssize_t stride, int col_inner,
                                       const float *lut) {
        uint16_t t[256];
        const uint16_t *s = z;
        int r, c;
        if (col_inner) {
            npulab_tr16(t, z);
            s = t;
        }
    #if defined(__x86_64__) && defined(__GNUC__)
        if (npulab_f16c < 0) {
            __builtin_cpu_init();
            npulab_f16c = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
        }
        if (npulab_f16c) { npulab_frac_h2f_f16c(s, d, stride); return; }
    #endif
        for (r = 0; r < 16; r++)
            for (c = 0; c < 16; c++)
                d[r * stride + c] = lut[s[r * 16 + c]];
    }
    static inline void npulab_h2f_run(const uint16_t *s, float *d, Py_ssize_t n, const float *lut) {
        Py_ssize_t i;
    #if defined(__x86_64__) && defined(__GNUC__)
        if (npulab_f16c < 0) {
            __builtin_cpu_init();
            npulab_f16c = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
        }
        if (npulab_f16c) { npulab_h2f_f16c(s, d, n); return; }
    #endif
        for (i = 0; i < n; i++) d[i] = lut[s[i]];
    }
    """
    void npulab_tr16(cnp.uint16_t *d, const cnp.uint16_t *s) nogil
    void npulab_h2f_run(const cnp.uint16_t *s, float *d, Py_ssize_t n, const float *lut) nogil
    void npulab_frac_h2f(const cnp.uint16_t *z, float *d, Py_ssize_t stride, int col_inner,
                         const float *lut) nogil
    int npulab_f2h_run(const float *s, const float *bias, int relu, cnp.uint16_t *d, Py_ssize_t n) nogil
    int npulab_have_f16c() nogil


# every half's float value, made by numpy once (exact by construction): a table read is faster
# than converting bits in a loop the compiler does not vectorise
_H2F = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
cdef const float[::1] _h2f_table = _H2F


cdef void _unpack_h2f(const cnp.uint16_t* z, float* out, Py_ssize_t out_stride, Py_ssize_t rows,
                      Py_ssize_t cols, Py_ssize_t r1, Py_ssize_t fr, Py_ssize_t fc,
                      bint col_order, bint col_inner) noexcept nogil:
    cdef Py_ssize_t c1 = (cols + fc - 1) // fc
    cdef Py_ssize_t R, r, C, c, row, base, n, nr, frac = fr * fc
    cdef const cnp.uint16_t* src
    cdef float* dst
    cdef const float* lut = &_h2f_table[0]
    cdef float tmp[1024]
    if frac <= 1024:
        # fractal by fractal: widen its fr*fc contiguous halves at once, then lay them out
        for R in range((rows + fr - 1) // fr):
            nr = rows - R * fr
            if nr > fr:
                nr = fr
            for C in range(c1):
                n = cols - C * fc
                if n > fc:
                    n = fc
                if fr == 16 and fc == 16 and nr == 16 and n == 16:
                    # a whole 16 x 16 fractal (every one of the matmul's): straight into out
                    npulab_frac_h2f(z + (C * r1 + R if col_order else R * c1 + C) * frac,
                                    out + R * 16 * out_stride + C * 16, out_stride, col_inner, lut)
                    continue
                npulab_h2f_run(z + (C * r1 + R if col_order else R * c1 + C) * frac, tmp, frac, lut)
                for r in range(nr):
                    dst = out + (R * fr + r) * out_stride + C * fc
                    if col_inner:
                        for c in range(n):
                            dst[c] = tmp[c * fr + r]
                    else:
                        memcpy(dst, tmp + r * fc, n * sizeof(float))
        return
    for row in range(rows):
        R = row // fr
        r = row - R * fr
        dst = out + row * out_stride
        for C in range(c1):
            base = (C * r1 + R if col_order else R * c1 + C) * frac
            n = cols - C * fc
            if n > fc:
                n = fc
            if col_inner:                  # the fractal is stored column by column (ZN)
                src = z + base + r
                for c in range(n):
                    dst[C * fc + c] = lut[src[c * fr]]
            else:
                npulab_h2f_run(z + base + r * fc, dst + C * fc, n, lut)


def unpack_f16_to_f32(z, out, Py_ssize_t fr, Py_ssize_t fc, bint col_order, bint col_inner=False):
    """Unpack float16 fractals (fractal order row-major, or column-major when ``col_order``,
    over a grid of ceil(rows/fr) fractal rows; each fractal row-major, or column-major when
    ``col_inner``) into the float32 (rows, cols) = out.shape matrix ``out`` (rows may be
    strided, elements contiguous), widening on the way: one pass, exact."""
    if out.ndim != 2 or out.dtype != np.float32 or (out.shape[1] > 1 and out.strides[1] != 4) \
            or out.strides[0] % 4 or out.strides[0] < 0:
        raise ValueError(f"unpack_f16_to_f32: out must be a 2-D float32 array with contiguous rows, "
                         f"got {out.dtype} of shape {out.shape}")
    if z.dtype != np.float16:
        raise ValueError(f"unpack_f16_to_f32: z must be float16, got {z.dtype}")
    rows, cols = out.shape
    r1, c1 = (rows + fr - 1) // fr, (cols + fc - 1) // fc
    if z.size < r1 * c1 * fr * fc:
        raise ValueError(f"unpack_f16_to_f32: z holds {z.size} elements; {rows} x {cols} in "
                         f"{fr} x {fc} fractals needs {r1 * c1 * fr * fc}")
    if rows == 0 or cols == 0:
        return out
    cdef cnp.ndarray zc = np.ascontiguousarray(z)
    cdef cnp.ndarray oc = out
    _unpack_h2f(<const cnp.uint16_t*>cnp.PyArray_DATA(zc), <float*>cnp.PyArray_DATA(oc),
                out.strides[0] // 4, rows, cols, r1, fr, fc, col_order, col_inner)
    return out


def unpack_f16_to_f32_raw(cnp.ndarray buf, Py_ssize_t offset, cnp.ndarray out, Py_ssize_t row0,
                          Py_ssize_t rows, Py_ssize_t col0, Py_ssize_t cols, Py_ssize_t fr,
                          Py_ssize_t fc, bint col_order, bint col_inner):
    """:func:`unpack_f16_to_f32` of the fractals at byte ``offset`` of the uint8 array ``buf``
    (an L0A/L0B buffer) into rows ``row0 .. row0 + rows``, columns ``col0 .. col0 + cols`` of
    the C-contiguous float32 matrix ``out``."""
    if buf.dtype != np.uint8 or not cnp.PyArray_IS_C_CONTIGUOUS(buf) or out.dtype != np.float32 \
            or out.ndim != 2 or not cnp.PyArray_IS_C_CONTIGUOUS(out):
        raise ValueError("unpack_f16_to_f32_raw: buf must be a C-contiguous uint8 array and out a "
                         "C-contiguous 2-D float32 array")
    cdef Py_ssize_t height = out.shape[0], width = out.shape[1]
    if fr < 1 or fc < 1:
        raise ValueError(f"unpack_f16_to_f32_raw: fractals of {fr} x {fc} elements")
    cdef Py_ssize_t r1 = (rows + fr - 1) // fr, c1 = (cols + fc - 1) // fc
    if row0 < 0 or rows < 0 or row0 + rows > height or col0 < 0 or cols < 0 or col0 + cols > width \
            or offset < 0 or offset % 2 or offset + r1 * c1 * fr * fc * 2 > buf.shape[0]:
        raise ValueError(f"unpack_f16_to_f32_raw: rows {row0}+{rows}, columns {col0}+{cols} of a "
                         f"{height} x {width} matrix from byte {offset} of a {buf.shape[0]}-byte "
                         f"buffer are out of range")
    if rows and cols:
        _unpack_h2f(<const cnp.uint16_t*>(<char*>cnp.PyArray_DATA(buf) + offset),
                    <float*>cnp.PyArray_DATA(out) + row0 * width + col0, width, rows, cols, r1, fr, fc,
                    col_order, col_inner)
    return out


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
    cdef Py_ssize_t r1 = (rows + fr - 1) // fr, c1 = (cols + fc - 1) // fc
    cdef Py_ssize_t s_rows = cols if transpose else rows, s_cols = rows if transpose else cols
    if rows < 1 or cols < 1 or fr < 1 or fc < 1 or c0 < 1:
        return f"nz_window_into: sizes must be positive, got {rows} x {cols}, fractal {fr} x {fc}, C0 {c0}"
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
    """Same as ``npulab.formats.nz_window_into_numpy``: the operand op (rows, cols) = the window
    of the NZ matrix S in ``src`` at (s_r0, s_c0), or its transpose, packed into ``dst`` as
    row-major-ordered fr x fc fractals (column-major inside each when ``col_inner``)."""
    if src.dtype != dst.dtype or not src.flags.c_contiguous or not dst.flags.c_contiguous:
        raise ValueError(f"nz_window_into: src and dst must be C-contiguous arrays of one dtype, got "
                         f"{src.dtype} and {dst.dtype}")
    cdef Py_ssize_t r1 = (rows + fr - 1) // fr, c1 = (cols + fc - 1) // fc
    if dst.size != r1 * c1 * fr * fc:
        raise ValueError(f"nz_window_into: dst holds {dst.size} elements; {rows} x {cols} in "
                         f"{fr} x {fc} fractals needs {r1 * c1 * fr * fc}")
    err = _window_error(src.size, dst.size, src_rows, c0, s_r0, s_c0, rows, cols, transpose, fr, fc)
    if err is not None:
        raise ValueError(err)
    cdef cnp.ndarray sa = src, da = dst
    if _nz_window_any(<const char*>cnp.PyArray_DATA(sa), src.dtype.itemsize, src_rows, c0, s_r0, s_c0,
                      rows, cols, transpose, <char*>cnp.PyArray_DATA(da), fr, fc, col_inner):
        raise ValueError(f"fractal formats move 1-, 2-, 4- or 8-byte elements, got {src.dtype}")
    return dst


def nz_window_raw(cnp.ndarray src_buf, Py_ssize_t src_off, Py_ssize_t src_len, Py_ssize_t item,
                  Py_ssize_t src_rows, Py_ssize_t c0, Py_ssize_t s_r0, Py_ssize_t s_c0, Py_ssize_t rows,
                  Py_ssize_t cols, bint transpose, cnp.ndarray dst_buf, Py_ssize_t dst_off,
                  Py_ssize_t dst_len, Py_ssize_t fr, Py_ssize_t fc, bint col_inner):
    """:func:`nz_window_into` inside two buffers' uint8 arrays: the NZ source is ``src_len``
    elements of ``item`` bytes from byte ``src_off`` of ``src_buf``, the destination ``dst_len``
    elements from byte ``dst_off`` of ``dst_buf``."""
    if src_buf.dtype != np.uint8 or dst_buf.dtype != np.uint8 or not cnp.PyArray_IS_C_CONTIGUOUS(src_buf) \
            or not cnp.PyArray_IS_C_CONTIGUOUS(dst_buf):
        raise ValueError("nz_window_raw: the buffers must be C-contiguous uint8 arrays")
    if src_off < 0 or dst_off < 0 or src_len < 0 or dst_len < 0 or \
            src_off + src_len * item > src_buf.shape[0] or dst_off + dst_len * item > dst_buf.shape[0]:
        raise ValueError(f"nz_window_raw: {src_len} or {dst_len} elements of {item} B at bytes "
                         f"{src_off} / {dst_off} do not fit their buffers")
    err = _window_error(src_len, dst_len, src_rows, c0, s_r0, s_c0, rows, cols, transpose, fr, fc)
    if err is not None:
        raise ValueError(err)
    if _nz_window_any(<const char*>cnp.PyArray_DATA(src_buf) + src_off, item, src_rows, c0, s_r0, s_c0,
                      rows, cols, transpose, <char*>cnp.PyArray_DATA(dst_buf) + dst_off, fr, fc,
                      col_inner):
        raise ValueError(f"fractal formats move 1-, 2-, 4- or 8-byte elements, got {item}-byte ones")
    return None


def drain_nz_f32_to_f16(cnp.ndarray z, Py_ssize_t m, Py_ssize_t n, out, bias, bint relu):
    """FixPipe's common drain in one pass: the (m, n) fp32 result held in L0C as NZ 16 x 16
    fractals (``z``, float32, ceil16(m) rows per fractal column) + ``bias`` (n float32 values
    or None), ReLU if asked, rounded to nearest even into the float16 (m, n) array ``out``
    (rows may be strided). Returns False, touching nothing, when this CPU lacks F16C (the
    caller then drains with numpy, which rounds the same way)."""
    if not npulab_have_f16c():
        return False
    if z.dtype != np.float32 or not cnp.PyArray_IS_C_CONTIGUOUS(z) or out.dtype != np.float16 \
            or out.ndim != 2 or out.shape[0] != m or out.shape[1] != n or \
            (n > 1 and out.strides[1] != 2) or out.strides[0] % 2 or out.strides[0] < 0:
        raise ValueError("drain_nz_f32_to_f16: expected float32 NZ fractals and a float16 (m, n) "
                         "array with contiguous rows")
    cdef Py_ssize_t m16 = (m + 15) // 16 * 16, n1 = (n + 15) // 16
    if z.size < m16 * n1 * 16:
        raise ValueError(f"drain_nz_f32_to_f16: z holds {z.size} values; an {m} x {n} result needs "
                         f"{m16 * n1 * 16}")
    cdef cnp.ndarray b
    cdef const float* bp = NULL
    if bias is not None:
        b = np.ascontiguousarray(bias, dtype=np.float32)
        if b.size < n:
            raise ValueError(f"drain_nz_f32_to_f16: bias holds {b.size} values, n = {n}")
        bp = <const float*>cnp.PyArray_DATA(b)
    cdef cnp.ndarray o = out
    cdef const float* zp = <const float*>cnp.PyArray_DATA(z)
    cdef char* op = <char*>cnp.PyArray_DATA(o)
    cdef Py_ssize_t stride = out.strides[0], i, J, w
    for i in range(m):
        for J in range(n1):
            w = n - J * 16
            if w > 16:
                w = 16
            npulab_f2h_run(zp + (J * m16 + i) * 16, bp + J * 16 if bp != NULL else NULL, relu,
                           <cnp.uint16_t*>(op + i * stride) + J * 16, w)
    return True


def pack_nz_raw(cnp.ndarray src, Py_ssize_t src_off, Py_ssize_t rows, Py_ssize_t cols,
                Py_ssize_t stride, cnp.ndarray dst_buf, Py_ssize_t dst_off, Py_ssize_t c0):
    """``data_copy_nd2nz``'s move: the (rows, cols) tile with a row stride of ``stride``
    elements, from element ``src_off`` of the 1-D C-contiguous array ``src`` (a GM tensor),
    as NZ (``pack_into(tile, out, 16, c0, True, False)``: ceil(cols/c0) fractal columns of
    ceil16(rows) rows of c0 elements, zero padding) into bytes ``dst_off ..`` of the uint8
    array ``dst_buf`` (L1). Optimised as ``_pack``'s NZ path, on raw pointers (no view)."""
    if src.ndim != 1 or not cnp.PyArray_IS_C_CONTIGUOUS(src) or dst_buf.dtype != np.uint8 \
            or not cnp.PyArray_IS_C_CONTIGUOUS(dst_buf):
        raise ValueError("pack_nz_raw: src must be a 1-D C-contiguous array and dst_buf a "
                         "C-contiguous uint8 array")
    cdef Py_ssize_t item = src.dtype.itemsize
    if rows < 1 or cols < 1 or stride < cols or c0 < 1 or c0 * item != 32:
        raise ValueError(f"pack_nz_raw: {rows} x {cols} (row stride {stride}) in fractal rows of "
                         f"{c0} x {item} B: need positive sizes, stride >= cols and 32-byte rows")
    cdef Py_ssize_t r16 = (rows + 15) // 16 * 16, c1 = (cols + c0 - 1) // c0
    if src_off < 0 or src_off + (rows - 1) * stride + cols > src.shape[0] or dst_off < 0 \
            or dst_off + c1 * r16 * 32 > dst_buf.shape[0]:
        raise ValueError(f"pack_nz_raw: the tile at element {src_off} of {src.shape[0]} or its "
                         f"{c1 * r16 * 32} B at byte {dst_off} of {dst_buf.shape[0]} are out of range")
    cdef const char* s = <const char*>cnp.PyArray_DATA(src) + src_off * item
    cdef char* d = <char*>cnp.PyArray_DATA(dst_buf) + dst_off
    cdef Py_ssize_t R, rend, row, C, nfull = cols // c0, row_bytes = stride * item
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
    return None
