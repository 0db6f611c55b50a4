# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""FixPipe's drain and mmad's widening read in Cython: fp16 fractals widened into a float32
matrix, and the fp32 NZ result drained into fp16 (+ bias, ReLU, round to nearest even). Same
names, signatures, results and errors as ``npulab.formats.drains`` (the readable specification;
a launch uses the one its side of npulab.twins names, and tests/formats/test_drains.py runs one
body on both).

What it optimises: the x86 F16C instructions when this CPU has them (checked once at run
time), else an exact table for the widening; whole 16 x 16 fractals straight into the matrix.
``unpack_f16_buffer`` (mmad) works inside a buffer's byte array at a byte offset. The loops of
``unpack_f16_buffer`` and ``drain_nz_f32_to_f16`` are tasks for npulab._worker (``submit``):
inside a functional launch they may run on the worker thread.
"""
import numpy as np
cimport numpy as cnp
from libc.string cimport memcpy

from npulab._layouts cimport npulab_tr16
from npulab._worker cimport npulab_task, submit
from npulab.errors import ShapeError

cnp.import_array()


cdef extern from *:
    """
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
    void npulab_h2f_run(const cnp.uint16_t *s, float *d, Py_ssize_t n, const float *lut) nogil
    void npulab_frac_h2f(const cnp.uint16_t *z, float *d, Py_ssize_t stride, int col_inner,
                         const float *lut) nogil
    int npulab_f2h_run(const float *s, const float *bias, int relu, cnp.uint16_t *d, Py_ssize_t n) nogil
    int npulab_have_f16c() nogil


# every half's float value, made by numpy once (exact by construction): a table read is faster
# than converting bits in a loop the compiler does not vectorise
_H2F = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
cdef const float[::1] _h2f_table = _H2F


# -- mmad's read: fp16 fractals widened into float32 ------------------------------------------
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
        raise ShapeError(f"unpack_f16_to_f32: out must be a 2-D float32 array with contiguous rows, "
                         f"got {out.dtype} of shape {out.shape}")
    if z.dtype != np.float16:
        raise ShapeError(f"unpack_f16_to_f32: z must be float16, got {z.dtype}")
    rows, cols = out.shape
    r1, c1 = (rows + fr - 1) // fr, (cols + fc - 1) // fc
    if z.size < r1 * c1 * fr * fc:
        raise ShapeError(f"unpack_f16_to_f32: z holds {z.size} elements; {rows} x {cols} in "
                         f"{fr} x {fc} fractals needs {r1 * c1 * fr * fc}")
    if rows == 0 or cols == 0:
        return out
    cdef cnp.ndarray zc = np.ascontiguousarray(z)
    cdef cnp.ndarray oc = out
    _unpack_h2f(<const cnp.uint16_t*>cnp.PyArray_DATA(zc), <float*>cnp.PyArray_DATA(oc),
                out.strides[0] // 4, rows, cols, r1, fr, fc, col_order, col_inner)
    return out


def unpack_f16_buffer(cnp.ndarray buf, Py_ssize_t offset, cnp.ndarray out, Py_ssize_t row0,
                          Py_ssize_t rows, Py_ssize_t col0, Py_ssize_t cols, Py_ssize_t fr,
                          Py_ssize_t fc, bint col_order, bint col_inner):
    """:func:`unpack_f16_to_f32` of the fractals at byte ``offset`` of the uint8 array ``buf``
    (an L0A/L0B buffer) into rows ``row0 .. row0 + rows``, columns ``col0 .. col0 + cols`` of
    the C-contiguous float32 matrix ``out``."""
    if buf.dtype != np.uint8 or not cnp.PyArray_IS_C_CONTIGUOUS(buf) or out.dtype != np.float32 \
            or out.ndim != 2 or not cnp.PyArray_IS_C_CONTIGUOUS(out):
        raise ShapeError("unpack_f16_buffer: buf must be a C-contiguous uint8 array and out a "
                         "C-contiguous 2-D float32 array")
    cdef Py_ssize_t height = out.shape[0], width = out.shape[1]
    if fr < 1 or fc < 1:
        raise ShapeError(f"unpack_f16_buffer: fractals of {fr} x {fc} elements")
    cdef Py_ssize_t r1 = (rows + fr - 1) // fr, c1 = (cols + fc - 1) // fc
    if row0 < 0 or rows < 0 or row0 + rows > height or col0 < 0 or cols < 0 or col0 + cols > width \
            or offset < 0 or offset % 2 or offset + r1 * c1 * fr * fc * 2 > buf.shape[0]:
        raise ShapeError(f"unpack_f16_buffer: rows {row0}+{rows}, columns {col0}+{cols} of a "
                         f"{height} x {width} matrix from byte {offset} of a {buf.shape[0]}-byte "
                         f"buffer are out of range")
    cdef npulab_task t
    if rows and cols:
        t.run = _run_unpack
        t.s = <char*>cnp.PyArray_DATA(buf) + offset
        t.d = <char*>(<float*>cnp.PyArray_DATA(out) + row0 * width + col0)
        t.a[0], t.a[1], t.a[2], t.a[3], t.a[4], t.a[5], t.a[6], t.a[7] = width, rows, cols, r1, fr, fc, \
            col_order, col_inner
        submit(&t, (buf, out))
    return out


cdef void _run_unpack(const npulab_task* t) noexcept nogil:
    _unpack_h2f(<const cnp.uint16_t*>t.s, <float*>t.d, t.a[0], t.a[1], t.a[2], t.a[3], t.a[4], t.a[5],
                <bint>t.a[6], <bint>t.a[7])



# -- FixPipe's drain: fp32 NZ -> fp16 ND ----------------------------------------------------------
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
        raise ShapeError("drain_nz_f32_to_f16: expected float32 NZ fractals and a float16 (m, n) "
                         "array with contiguous rows")
    cdef Py_ssize_t m16 = (m + 15) // 16 * 16, n1 = (n + 15) // 16
    if z.size < m16 * n1 * 16:
        raise ShapeError(f"drain_nz_f32_to_f16: z holds {z.size} values; an {m} x {n} result needs "
                         f"{m16 * n1 * 16}")
    cdef cnp.ndarray b
    cdef const float* bp = NULL
    if bias is not None:
        b = np.ascontiguousarray(bias, dtype=np.float32)
        if b.size < n:
            raise ShapeError(f"drain_nz_f32_to_f16: bias holds {b.size} values, n = {n}")
        bp = <const float*>cnp.PyArray_DATA(b)
    cdef cnp.ndarray o = out
    cdef const float* zp = <const float*>cnp.PyArray_DATA(z)
    cdef char* op = <char*>cnp.PyArray_DATA(o)
    cdef Py_ssize_t stride = out.strides[0]
    cdef npulab_task t
    t.run, t.s, t.s2, t.d = _run_drain16, <const char*>zp, <const char*>bp, op
    t.a[0], t.a[1], t.a[2], t.a[3], t.a[4] = m, n, m16, stride, relu
    submit(&t, (z, out, None if bias is None else b))
    return True


cdef void _run_drain16(const npulab_task* t) noexcept nogil:
    _drain16(<const float*>t.s, <const float*>t.s2, <bint>t.a[4], t.d, t.a[3], t.a[0], t.a[1], t.a[2])


cdef void _drain16(const float* zp, const float* bp, bint relu, char* op, Py_ssize_t stride,
                   Py_ssize_t m, Py_ssize_t n, Py_ssize_t m16) noexcept nogil:
    cdef Py_ssize_t i, J, w, n1 = (n + 15) // 16
    for i in range(m):
        for J in range(n1):
            w = n - J * 16
            if w > 16:
                w = 16
            npulab_f2h_run(zp + (J * m16 + i) * 16, bp + J * 16 if bp != NULL else NULL, relu,
                           <cnp.uint16_t*>(op + i * stride) + J * 16, w)

