# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Fractal pack/unpack in Cython: same signatures and results as ``npulab.formats.pack_numpy``,
``unpack_numpy``, ``pack_into_numpy`` and ``unpack_into_numpy`` (the readable specification;
the parity tests run one body on both). What it optimises: one pass over the elements with
typed memoryviews (any dtype is moved as unsigned integers of its width), no padded
temporary, no transposed copy; the source may be a strided view (a tile of a GM matrix).
"""
import os

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


# -- deferred moves: the cube path's numerics on a worker thread ---------------------------------
# In a functional launch the Python thread issues instructions, and the numerics behind the
# cube path's hot ones are plain loops on raw pointers: data_copy_nd2nz's pack, load_data's
# window, mmad's widening into its chain, FixPipe's fp16 drain, a buffer's zeroing when it goes
# back to the pool, and half of each mmad product (``product_into``). Inside
# ``deferred_moves()`` (``launch`` holds it for a functional run) these functions check their
# arguments, then queue the loop for one worker thread instead of running it, and Python goes
# on issuing meanwhile: the two host CPUs of a small machine both work.
#
# The rules that keep this invisible:
# * one thread at a time runs queued moves, in the order they were queued, so moves among
#   themselves need no further ordering (a window reads what the pack before it wrote);
# * anything else that touches the bytes first calls ``sync()``, which returns once every queued
#   move has run: ``Buffer.data``, ``GlobalTensor.data`` and ``writable()``, the mmad product,
#   and the end of the launch do. ``PENDING`` is non-empty while moves may be queued, and holds
#   a reference to every array a queued move touches;
# * ``sync()`` never waits for a worker the OS has not scheduled: the calling thread runs the
#   queued moves itself (only the move the worker is running is waited for).
# Without a worker (no pthreads, no numpy OpenBLAS to split the product with, NPULAB_WORKER=0,
# or ``set_worker(False)``) every move runs at once, as it did before.
cdef extern from *:
    """
    typedef struct npulab_task { int op; const char *s; const char *s2; char *d; Py_ssize_t a[14]; } npulab_task;
    #define NPULAB_RING 1024
    static npulab_task npulab_ring[NPULAB_RING];
    static size_t npulab_head = 0, npulab_tail = 0;    /* queued, done: head - tail pending */
    static void (*npulab_runner)(const npulab_task *) = 0;
    static int npulab_worker_ok = 0;                   /* a worker thread is running */
    #if defined(_WIN32) || !defined(__GNUC__)
    static int npulab_worker_start(void) { return -1; }   /* no worker: moves run at once */
    static void npulab_commit(void) {}
    static void npulab_drain(void) {}
    static void npulab_wait_taken(size_t idx) { (void)idx; }
    static size_t npulab_pending(void) { return 0; }
    #else
    #include <pthread.h>
    #if defined(__x86_64__) || defined(__i386__)
    #include <immintrin.h>
    #define npulab_pause() _mm_pause()
    #else
    #define npulab_pause() ((void)0)
    #endif
    /* Every field below is written under npulab_mu; head, tail and busy are also read without
       it (atomically). tail is the next move to run. A thread runs a move only while it holds
       the run token (busy): the worker, or a thread that syncs (it runs the queued moves itself
       rather than wait for a worker the OS may not have scheduled). So moves run one at a time,
       in the order they were queued, whoever runs them. */
    static pthread_mutex_t npulab_mu = PTHREAD_MUTEX_INITIALIZER;
    static pthread_cond_t npulab_cv_work = PTHREAD_COND_INITIALIZER;
    static pthread_cond_t npulab_cv_done = PTHREAD_COND_INITIALIZER;
    static int npulab_sleeping = 0, npulab_waiters = 0, npulab_draining = 0, npulab_busy = 0;
    #define NPULAB_POLLS 256           /* empty-queue polls (a few microseconds) before sleeping */

    /* with the lock held and the token taken: run the next move, give the token back */
    static void npulab_run_next(void) {
        const npulab_task *t = &npulab_ring[npulab_tail % NPULAB_RING];
        __atomic_store_n(&npulab_tail, npulab_tail + 1, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&npulab_mu);
        npulab_runner(t);
        pthread_mutex_lock(&npulab_mu);
        __atomic_store_n(&npulab_busy, 0, __ATOMIC_RELEASE);
        if (npulab_waiters) pthread_cond_broadcast(&npulab_cv_done);
    }
    /* with the lock held: wait for the token and take it */
    static void npulab_take_token(void) {
        while (npulab_busy) {
            npulab_waiters++;
            pthread_cond_wait(&npulab_cv_done, &npulab_mu);
            npulab_waiters--;
        }
        __atomic_store_n(&npulab_busy, 1, __ATOMIC_RELEASE);
    }

    static void *npulab_worker(void *arg) {
        (void)arg;
        pthread_mutex_lock(&npulab_mu);
        for (;;) {
            while (npulab_tail == npulab_head || npulab_draining || npulab_busy) {
                if (!npulab_draining && !npulab_busy) {   /* the next move is usually microseconds away */
                    size_t t = npulab_tail;
                    int i;
                    pthread_mutex_unlock(&npulab_mu);
                    for (i = 0; i < NPULAB_POLLS && __atomic_load_n(&npulab_head, __ATOMIC_ACQUIRE) == t; i++)
                        npulab_pause();
                    pthread_mutex_lock(&npulab_mu);
                    if (npulab_tail != npulab_head && !npulab_draining && !npulab_busy) break;
                }
                npulab_sleeping = 1;
                pthread_cond_wait(&npulab_cv_work, &npulab_mu);
                npulab_sleeping = 0;
            }
            __atomic_store_n(&npulab_busy, 1, __ATOMIC_RELEASE);
            npulab_run_next();
        }
        return NULL;
    }
    /* the queuing thread: a new move is in its slot */
    static void npulab_commit(void) {
        pthread_mutex_lock(&npulab_mu);
        __atomic_store_n(&npulab_head, npulab_head + 1, __ATOMIC_RELEASE);
        if (npulab_sleeping && !npulab_draining) pthread_cond_signal(&npulab_cv_work);
        pthread_mutex_unlock(&npulab_mu);
    }
    /* run the moves queued before index ``upto`` (all of them: upto = head) on this thread,
       the worker standing aside (it finishes the move it is running, if any) */
    static void npulab_run_upto(size_t upto) {
        pthread_mutex_lock(&npulab_mu);
        npulab_draining++;
        for (;;) {
            npulab_take_token();
            if ((ptrdiff_t)(upto - npulab_tail) <= 0) {
                __atomic_store_n(&npulab_busy, 0, __ATOMIC_RELEASE);
                if (npulab_waiters) pthread_cond_broadcast(&npulab_cv_done);
                break;
            }
            npulab_run_next();
        }
        npulab_draining--;
        if (!npulab_draining && npulab_sleeping && npulab_tail != npulab_head)
            pthread_cond_signal(&npulab_cv_work);     /* what is left (a product half) is the worker's */
        pthread_mutex_unlock(&npulab_mu);
    }
    /* every queued move has run when this returns; the worker then sleeps until the next one */
    static void npulab_drain(void) {
        npulab_run_upto(__atomic_load_n(&npulab_head, __ATOMIC_ACQUIRE));
    }
    /* the queuing thread waits until the worker has taken move ``idx`` (so every move before it
       has run), polling while the worker makes progress; if it makes none for a while (the OS
       has not scheduled it), this thread runs the moves before ``idx`` itself */
    #define NPULAB_STALL 8192          /* polls without progress (~0.2 ms) before taking over */
    static void npulab_wait_taken(size_t idx) {
        size_t last = __atomic_load_n(&npulab_tail, __ATOMIC_ACQUIRE);
        int still = 0;
        while (__atomic_load_n(&npulab_tail, __ATOMIC_ACQUIRE) <= idx) {
            size_t now = __atomic_load_n(&npulab_tail, __ATOMIC_ACQUIRE);
            if (now != last) { last = now; still = 0; }
            else if (++still > NPULAB_STALL) break;
            npulab_pause();
        }
        if (__atomic_load_n(&npulab_tail, __ATOMIC_ACQUIRE) <= idx)
            npulab_run_upto(idx);
    }
    /* moves queued or running */
    static size_t npulab_pending(void) {
        return __atomic_load_n(&npulab_head, __ATOMIC_ACQUIRE) - __atomic_load_n(&npulab_tail, __ATOMIC_ACQUIRE)
               + (size_t)__atomic_load_n(&npulab_busy, __ATOMIC_ACQUIRE);
    }
    /* fork: the child has no worker thread. Queue nothing across a fork: the parent drains and
       holds the lock; the child starts from an empty queue and a fresh lock */
    static void npulab_before_fork(void) { if (npulab_worker_ok) npulab_drain(); pthread_mutex_lock(&npulab_mu); }
    static void npulab_after_fork_parent(void) { pthread_mutex_unlock(&npulab_mu); }
    static void npulab_after_fork_child(void) {
        pthread_mutex_init(&npulab_mu, NULL);
        pthread_cond_init(&npulab_cv_work, NULL);
        pthread_cond_init(&npulab_cv_done, NULL);
        npulab_sleeping = npulab_waiters = npulab_draining = npulab_busy = 0;
        npulab_tail = npulab_head;
        npulab_worker_ok = 0;
    }
    static int npulab_worker_start(void) {
        static int registered = 0;
        pthread_t th;
        pthread_attr_t attr;
        int rc;
        if (!registered) {
            if (pthread_atfork(npulab_before_fork, npulab_after_fork_parent, npulab_after_fork_child))
                return -1;
            registered = 1;
        }
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        rc = pthread_create(&th, &attr, npulab_worker, NULL);
        pthread_attr_destroy(&attr);
        if (rc) return -1;
        npulab_worker_ok = 1;
        return 0;
    }
    #endif
    """
    ctypedef struct npulab_task:
        int op
        const char* s
        const char* s2
        char* d
        Py_ssize_t a[14]
    int NPULAB_RING
    npulab_task npulab_ring[1024]
    size_t npulab_head
    void (*npulab_runner)(const npulab_task*) noexcept nogil
    int npulab_worker_ok
    int npulab_worker_start() nogil
    void npulab_commit() nogil
    void npulab_drain() nogil
    void npulab_wait_taken(size_t idx) nogil
    size_t npulab_pending() nogil

# The mmad product (lang/cube.flush_l0c) in two halves of rows, one on the worker and one on the
# calling thread, each single-threaded: the numbers of a multithreaded BLAS call without its pool
# threads, which poll for work for a while after every call and would take the CPU the worker
# needs. Needs the cblas_sgemm of numpy's own OpenBLAS (found through threadpoolctl); without it
# the product is numpy's matmul (and the moves run at once: no worker).
cdef extern from *:
    """
    #if !defined(_WIN32) && defined(__GNUC__)
    #include <dlfcn.h>
    #define NPULAB_DL 1
    #else
    #define NPULAB_DL 0
    #endif
    typedef void (*npulab_sgemm64_fn)(int, int, int, long long, long long, long long, float, const float *,
                                      long long, const float *, long long, float, float *, long long);
    typedef void (*npulab_sgemm32_fn)(int, int, int, int, int, int, float, const float *, int,
                                      const float *, int, float, float *, int);
    typedef int (*npulab_get_fn)(void);
    typedef void (*npulab_set_fn)(int);
    static npulab_sgemm64_fn npulab_sgemm64 = 0;
    static npulab_sgemm32_fn npulab_sgemm32 = 0;
    static npulab_get_fn npulab_blas_get_threads = 0;
    static npulab_set_fn npulab_blas_set_threads = 0;
    /* numpy's OpenBLAS (already loaded): its cblas_sgemm and its thread count */
    static int npulab_blas_load(const char *path) {
    #if NPULAB_DL
        void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
        if (!h) return -1;
        npulab_sgemm64 = (npulab_sgemm64_fn)dlsym(h, "scipy_cblas_sgemm64_");
        if (npulab_sgemm64) {
            npulab_blas_get_threads = (npulab_get_fn)dlsym(h, "scipy_openblas_get_num_threads64_");
            npulab_blas_set_threads = (npulab_set_fn)dlsym(h, "scipy_openblas_set_num_threads64_");
        } else {
            npulab_sgemm32 = (npulab_sgemm32_fn)dlsym(h, "scipy_cblas_sgemm");
            npulab_blas_get_threads = (npulab_get_fn)dlsym(h, "scipy_openblas_get_num_threads");
            npulab_blas_set_threads = (npulab_set_fn)dlsym(h, "scipy_openblas_set_num_threads");
        }
        if (!npulab_blas_get_threads || !npulab_blas_set_threads || !(npulab_sgemm64 || npulab_sgemm32)) {
            npulab_sgemm64 = 0; npulab_sgemm32 = 0;
            return -1;
        }
        return 0;
    #else
        (void)path;
        return -1;
    #endif
    }
    /* C (m x n, row stride ldc) = A (m x k, row stride lda) B (k x n, row stride ldb): the
       row-major cblas_sgemm numpy's matmul calls (one thread while deferring: see below) */
    static void npulab_sgemm_1t(Py_ssize_t m, Py_ssize_t n, Py_ssize_t k, const float *a, Py_ssize_t lda,
                                const float *b, Py_ssize_t ldb, float *c, Py_ssize_t ldc) {
        if (npulab_sgemm64) npulab_sgemm64(101, 111, 111, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
        else npulab_sgemm32(101, 111, 111, (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b, (int)ldb, 0.0f, c, (int)ldc);
    }
    """
    int npulab_blas_load(const char* path)
    void npulab_sgemm_1t(Py_ssize_t m, Py_ssize_t n, Py_ssize_t k, const float* a, Py_ssize_t lda,
                         const float* b, Py_ssize_t ldb, float* c, Py_ssize_t ldc) nogil
    int npulab_blas_get_threads() nogil
    void npulab_blas_set_threads(int) nogil

cdef int _blas_state = 0                 # 0 not looked for yet, 1 found, -1 not available
cdef int _blas_threads = 1               # numpy's BLAS threads before deferred_moves()


cdef bint _enabled = os.environ.get("NPULAB_WORKER", "1") != "0"


def set_worker(bint enabled) -> bool:
    """Use the worker thread in later launches, or not (the ``NPULAB_WORKER`` environment
    variable sets the start value; 0 turns it off); returns the previous setting. Traces are
    the same either way; results agree to float32 rounding (the split product, see
    ``product_into``): tests/test_worker.py runs kernels both ways."""
    global _enabled
    sync()
    prev, _enabled = _enabled, enabled
    return prev


def _find_blas() -> bool:
    """Look once for numpy's OpenBLAS cblas_sgemm (see above)."""
    global _blas_state
    if _blas_state == 0:
        _blas_state = -1
        try:
            from threadpoolctl import threadpool_info
            libs = [i["filepath"] for i in threadpool_info()
                    if i.get("internal_api") == "openblas" and "numpy" in i.get("filepath", "")]
        except Exception:                   # pragma: no cover - threadpoolctl is a dependency
            libs = []
        for path in libs:
            if npulab_blas_load(os.fsencode(path)) == 0:
                _blas_state = 1
                break
    return _blas_state == 1


def product_into(a, b, cnp.ndarray out):
    """``out[...] = a @ b`` for float32 matrices (rows of a and b contiguous, out C-contiguous).
    Inside ``deferred_moves()``, with the worker and numpy's cblas_sgemm there, in two halves
    of rows: rows from the first multiple of 16 past the middle on the worker, the rest on this
    thread, each numpy's own row-major sgemm on one thread. Otherwise numpy's matmul. The two
    agree to float32 rounding; for some sizes BLAS picks another kernel for half the rows than
    for all of them, and the sums over k then round differently in the last bit."""
    cdef cnp.ndarray A = a, B = b
    if A.dtype != np.float32 or B.dtype != np.float32 or out.dtype != np.float32 or A.ndim != 2 \
            or B.ndim != 2 or out.ndim != 2 or A.shape[1] != B.shape[0] or out.shape[0] != A.shape[0] \
            or out.shape[1] != B.shape[1] or not cnp.PyArray_IS_C_CONTIGUOUS(out):
        raise ValueError("product_into: expected float32 (m, k) @ (k, n) into a C-contiguous (m, n)")
    cdef Py_ssize_t m = A.shape[0], n = B.shape[1], k = A.shape[1], h
    cdef Py_ssize_t lda = A.strides[0] // 4, ldb = B.strides[0] // 4, ldc = n
    cdef npulab_task* t
    cdef const float* ap
    cdef const float* bp
    cdef float* cp
    # (numpy's matmul calls gemv, not gemm, for a single column: leave those to it)
    if m < 32 or n < 2 or k < 1 or A.strides[1] != 4 or B.strides[1] != 4 or A.strides[0] % 4 \
            or B.strides[0] % 4 or lda < k or ldb < n or not _deferring or not _find_blas() \
            or not _worker_ready():
        sync()                           # queued moves may still be filling a and b
        np.matmul(A, B, out=out)
        return out
    ap, bp, cp = <const float*>cnp.PyArray_DATA(A), <const float*>cnp.PyArray_DATA(B), <float*>cnp.PyArray_DATA(out)
    h = (m // 2 + 15) // 16 * 16         # the worker's rows start on a fractal boundary
    # queued behind the moves that fill a and b: the worker, busy with them, goes straight on
    t = _task_slot()
    cdef size_t idx = npulab_head
    t.op, t.s, t.s2, t.d = _OP_SGEMM, <const char*>(ap + h * lda), <const char*>bp, <char*>(cp + h * ldc)
    t.a[0], t.a[1], t.a[2], t.a[3], t.a[4], t.a[5] = m - h, n, k, lda, ldb, ldc
    _commit(A, B)
    PENDING.append(out)
    with nogil:
        npulab_wait_taken(idx)           # a and b are complete once the worker takes its half
        npulab_sgemm_1t(h, n, k, ap, lda, bp, ldb, cp, ldc)
    sync()
    return out


cdef enum:
    _OP_PACK = 1
    _OP_WINDOW = 2
    _OP_UNPACK = 3
    _OP_SGEMM = 4
    _OP_DRAIN16 = 5
    _OP_ZERO = 6

cdef int _deferring = 0                  # deferred_moves() depth
cdef bint _worker_failed = False
#: the arrays the queued moves touch (kept alive until sync); non-empty while moves may be queued
PENDING = []


cdef void _run_task(const npulab_task* t) noexcept nogil:
    if t.op == _OP_PACK:
        _pack_nz_core(t.s, t.a[0], t.a[1], t.a[2], t.a[3], t.a[4], t.d)
    elif t.op == _OP_WINDOW:
        _nz_window_any(t.s, t.a[0], t.a[1], t.a[2], t.a[3], t.a[4], t.a[5], t.a[6], <bint>t.a[7], t.d,
                       t.a[8], t.a[9], <bint>t.a[10])
    elif t.op == _OP_UNPACK:
        _unpack_h2f(<const cnp.uint16_t*>t.s, <float*>t.d, t.a[0], t.a[1], t.a[2], t.a[3], t.a[4],
                    t.a[5], <bint>t.a[6], <bint>t.a[7])
    elif t.op == _OP_DRAIN16:
        _drain16(<const float*>t.s, <const float*>t.s2, <bint>t.a[4], t.d, t.a[3], t.a[0], t.a[1], t.a[2])
    elif t.op == _OP_ZERO:
        memset(t.d, 0, t.a[0])
    elif t.op == _OP_SGEMM:
        npulab_sgemm_1t(t.a[0], t.a[1], t.a[2], <const float*>t.s, t.a[3], <const float*>t.s2, t.a[4],
                        <float*>t.d, t.a[5])


npulab_runner = _run_task


cdef npulab_task* _task_slot() except NULL:
    """The next free slot of the queue (waiting for room when it is full)."""
    if npulab_pending() >= <size_t>NPULAB_RING:
        sync()
    return &npulab_ring[npulab_head % NPULAB_RING]


cdef bint _worker_ready():
    """Start the worker on first use; False when this platform cannot."""
    global _worker_failed
    if not npulab_worker_ok and not _worker_failed:
        if npulab_worker_start() != 0:
            _worker_failed = True
    return npulab_worker_ok


cdef int _commit(object src, object dst) except -1:
    """Hand the move in the next slot to the worker (run it here when there is no worker)."""
    PENDING.append(src)
    PENDING.append(dst)
    if _worker_ready():
        npulab_commit()
    else:                                # no threads here: the move runs now, as undeferred
        _run_task(&npulab_ring[npulab_head % NPULAB_RING])
    return 0


def queued() -> int:
    """How many moves were queued for the worker so far in this process (a count for tests)."""
    return npulab_head


def sync():
    """Wait until every queued move has run (a no-op when none is queued). The queue is checked
    again after each drain, which runs with the GIL released: another thread may queue moves
    meanwhile, and PENDING is cleared only once none is left (with the GIL held, no thread can
    queue between the last check and the clear)."""
    while npulab_worker_ok and npulab_pending():
        with nogil:
            npulab_drain()
    PENDING.clear()


class deferred_moves:
    """``with deferred_moves():`` queue the cube path's moves for the worker thread (see
    above); leaving the block (the outermost one, when nested) waits for them: ``sync()``."""

    def __enter__(self):
        global _deferring, _blas_threads
        # only with the split product (above), and with numpy's BLAS on one thread meanwhile
        # (the setting is process-wide in OpenBLAS): its pool threads would otherwise poll for
        # work after every product and take turns with the worker for the CPU
        self.on = _enabled and _find_blas()
        if self.on:
            if _deferring == 0:
                _blas_threads = npulab_blas_get_threads()
                npulab_blas_set_threads(1)
            _deferring += 1
        return self

    def __exit__(self, *exc):
        global _deferring
        if self.on:
            _deferring -= 1
            if _deferring == 0:
                sync()
                npulab_blas_set_threads(_blas_threads)
        return False


def deferring() -> bool:
    """True inside ``deferred_moves()``."""
    return _deferring > 0


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
    cdef const char* s = <char*>cnp.PyArray_DATA(buf) + offset
    cdef char* d = <char*>(<float*>cnp.PyArray_DATA(out) + row0 * width + col0)
    cdef npulab_task* t
    if not (rows and cols):
        pass
    elif _deferring:
        t = _task_slot()
        t.op, t.s, t.d = _OP_UNPACK, s, d
        t.a[0], t.a[1], t.a[2], t.a[3], t.a[4], t.a[5], t.a[6], t.a[7] = width, rows, cols, r1, fr, fc, \
            col_order, col_inner
        _commit(buf, out)
    else:
        _unpack_h2f(<const cnp.uint16_t*>s, <float*>d, width, rows, cols, r1, fr, fc, col_order, col_inner)
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
    if item not in (1, 2, 4, 8):
        raise ValueError(f"fractal formats move 1-, 2-, 4- or 8-byte elements, got {item}-byte ones")
    cdef const char* s = <const char*>cnp.PyArray_DATA(src_buf) + src_off
    cdef char* d = <char*>cnp.PyArray_DATA(dst_buf) + dst_off
    cdef npulab_task* t
    if _deferring:
        t = _task_slot()
        t.op, t.s, t.d = _OP_WINDOW, s, d
        t.a[0], t.a[1], t.a[2], t.a[3], t.a[4], t.a[5], t.a[6] = item, src_rows, c0, s_r0, s_c0, rows, cols
        t.a[7], t.a[8], t.a[9], t.a[10] = transpose, fr, fc, col_inner
        _commit(src_buf, dst_buf)
    else:
        _nz_window_any(s, item, src_rows, c0, s_r0, s_c0, rows, cols, transpose, d, fr, fc, col_inner)
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
    cdef Py_ssize_t stride = out.strides[0]
    cdef npulab_task* t
    if _deferring:
        t = _task_slot()
        t.op, t.s, t.s2, t.d = _OP_DRAIN16, <const char*>zp, <const char*>bp, op
        t.a[0], t.a[1], t.a[2], t.a[3], t.a[4] = m, n, m16, stride, relu
        _commit(z, out)
        if bias is not None:
            PENDING.append(b)
    else:
        _drain16(zp, bp, relu, op, stride, m, n, m16)
    return True


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


def zero_bytes(cnp.ndarray buf, Py_ssize_t n):
    """``buf[:n] = 0`` for a C-contiguous uint8 array (a buffer given back to the pool),
    queued for the worker while deferring."""
    if buf.dtype != np.uint8 or not cnp.PyArray_IS_C_CONTIGUOUS(buf) or n < 0 or n > buf.shape[0]:
        raise ValueError(f"zero_bytes: {n} bytes of a {buf.dtype} array of {buf.shape[0]}")
    cdef char* d = <char*>cnp.PyArray_DATA(buf)
    cdef npulab_task* t
    if n == 0:
        return
    if _deferring:
        t = _task_slot()
        t.op, t.s, t.s2, t.d = _OP_ZERO, NULL, NULL, d
        t.a[0] = n
        _commit(buf, None)
    else:
        memset(d, 0, n)


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
    cdef npulab_task* t
    if _deferring:
        t = _task_slot()
        t.op, t.s, t.d = _OP_PACK, s, d
        t.a[0], t.a[1], t.a[2], t.a[3] = rows, cols, stride * item, item
        t.a[4] = c0
        _commit(src, dst_buf)
    else:
        _pack_nz_core(s, rows, cols, stride * item, item, c0, d)
    return None


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

