# What other Cython modules share of npulab._layouts: the 16 x 16 transpose of 16-bit elements
# (a ZN fractal is a ZZ one transposed), which load_data's window (here) and mmad's widening of
# ZN fractals (npulab._drains) both do. Inline C: each module that cimports it compiles its own.
cimport numpy as cnp

cdef extern from *:
    """
    #ifndef NPULAB_TR16_DEFINED
    #define NPULAB_TR16_DEFINED
    #include <stdint.h>
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
    #endif
    """
    void npulab_tr16(cnp.uint16_t *d, const cnp.uint16_t *s) nogil
