/*
 * cpu_kernels_q8.c - batched matrix-vector products on int8 weights (the q8 format of
 * cpu_quant.c) against float32 activations: the decode step's kernels when
 * LA_WEIGHTS_QUANT=q8.
 *
 * They follow cpu_kernels.c: tiles of R weight rows x C sequences, each weight vector
 * loaded and widened once per tile and applied to every sequence of the step, so a batch
 * reads each weight row from memory once. One dot product has one recipe whatever the
 * tile: per block of 32, the int8 weights are widened to float32 in registers and
 * multiplied by the block's scale (giving exactly the dequantized weight q * d, the same
 * float cpu_q8_dequantize_row writes for prefill), then fused-multiply-added into a float32
 * vector accumulator against the activations, block after block in order. Batching never
 * changes a result's bits.
 *
 * The activations stay float32 here. ggml's q8_0 path instead rounds each activation row
 * to int8 blocks too and multiplies int8 by int8 (AVX-512 VNNI's vpdpbusd), which makes
 * the arithmetic four times denser but adds a second rounding of every activation. Decode
 * at the batch sizes we serve is bound by reading the weights, not by arithmetic: widening
 * 32 int8 weights costs four vector operations, shared by every sequence of the tile, and
 * the kernel streams at the memory's speed (figures in docs/cpu-backend.md), so the int8
 * activations would buy no time here and cost accuracy.
 */
#include <string.h>

#include "cpu_internal.h"
#include "cpu_tiles.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define LA_X86 1
#endif

#define ALWAYS_INLINE inline __attribute__((always_inline))

enum {
    Q8_R = 4,       /* weight rows per tile (single rows at the end of a range) */
    Q8_C_LIMIT = 4, /* sequences per tile, at most */
    Q8_C_AVX2 = 2,  /* AVX2 has 16 registers: 8 accumulators, 4 weights, 1 activation */
    Q8_PREFETCH_TILES = 4,
};

/* q8_row views row r of a q8 matrix whose rows hold ldw elements: its scales and quants. */
static ALWAYS_INLINE const float *q8_scales(const void *w, size_t ldw, int r) {
    return (const float *)((const char *)w + (size_t)r * cpu_row_bytes(CPU_DTYPE_Q8, (int)ldw));
}

static ALWAYS_INLINE const int8_t *q8_quants(const void *w, size_t ldw, int r) {
    return (const int8_t *)(q8_scales(w, ldw, r) + ldw / CPU_Q8_BLOCK);
}

/* ---- plain C ---------------------------------------------------------------------- */

/* The tiles take TILE_WALK's signature (cpu_tiles.h); t is always CPU_DTYPE_Q8 here. */

/* tile_q8_plain: s = 0; s += (q[i] * d[i / 32]) * x[i] for i in order. */
static ALWAYS_INLINE void tile_q8_plain(la_dtype t, const void *w, size_t ldw, int n, const float *x, size_t ldx,
                                        float *y, size_t ldy, const int R, const int C) {
    float acc[Q8_R][Q8_C_LIMIT];
    const float *d[Q8_R];
    const int8_t *q[Q8_R];
    for (int r = 0; r < R; r++) {
        d[r] = q8_scales(w, ldw, r);
        q[r] = q8_quants(w, ldw, r);
        for (int c = 0; c < C; c++)
            acc[r][c] = 0;
    }
    for (int i = 0; i < n; i++) {
        float wv[Q8_R];
        for (int r = 0; r < R; r++)
            wv[r] = (float)q[r][i] * d[r][i / CPU_Q8_BLOCK];
        for (int c = 0; c < C; c++) {
            const float xv = x[(size_t)c * ldx + (size_t)i];
            for (int r = 0; r < R; r++)
                acc[r][c] += wv[r] * xv;
        }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            y[(size_t)c * ldy + (size_t)r] = acc[r][c];
}

/* Every kernel here reads whole rows: ldw (the row length the stride is computed from)
 * equals n, as cpu_matmat_run passes it. */
void cpu_q8_rows_plain(const void *w, size_t ldw, int rows, int n, const float *x, size_t ldx,
                       int nx, float *y, size_t ldy) {
    TILE_WALK(tile_q8_plain, Q8_R, Q8_C_LIMIT, CPU_DTYPE_Q8, w, ldw, rows, n, x, ldx, nx, y, ldy);
}

#ifdef LA_X86
/* ---- AVX-512 ---------------------------------------------------------------------- */
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))

/* tile_q8_avx512: per block of 32, two vectors of 16 widened weights times the block's
 * scale, then two FMAs per sequence; the lanes are summed at the end of the row. Each
 * block also prefetches into L2 the same bytes Q8_PREFETCH_TILES tiles ahead (see
 * tile_avx512 in cpu_kernels.c for why). */
AVX512 static ALWAYS_INLINE void tile_q8_avx512(la_dtype t, const void *w, size_t ldw, int n, const float *x,
                                                size_t ldx, float *y, size_t ldy, const int R,
                                                const int C) {
    const size_t stride = cpu_row_bytes(CPU_DTYPE_Q8, (int)ldw);
    const int nb = n / CPU_Q8_BLOCK;
    const char *ahead = (const char *)w + (size_t)(Q8_PREFETCH_TILES * R) * stride;
    const float *d[Q8_R];
    const int8_t *q[Q8_R];
    __m512 acc[Q8_R][Q8_C_LIMIT];
    for (int r = 0; r < R; r++) {
        d[r] = q8_scales(w, ldw, r);
        q[r] = q8_quants(w, ldw, r);
        for (int c = 0; c < C; c++)
            acc[r][c] = _mm512_setzero_ps();
    }
    for (int b = 0; b < nb; b++) {
        const size_t i = (size_t)b * CPU_Q8_BLOCK;
        if (b % 2 == 0)
            for (int r = 0; r < R; r++)
                _mm_prefetch(ahead + (size_t)r * stride + (size_t)nb * sizeof(float) + i, _MM_HINT_T1);
        if (b % 16 == 0)
            for (int r = 0; r < R; r++)
                _mm_prefetch(ahead + (size_t)r * stride + (size_t)b * sizeof(float), _MM_HINT_T1);
        __m512 x0[Q8_C_LIMIT], x1[Q8_C_LIMIT];
        for (int c = 0; c < C; c++) {
            x0[c] = _mm512_loadu_ps(x + (size_t)c * ldx + i);
            x1[c] = _mm512_loadu_ps(x + (size_t)c * ldx + i + 16);
        }
        for (int r = 0; r < R; r++) {
            /* two 16-byte loads, each widened straight from memory (no lane extract) */
            const __m512 s = _mm512_set1_ps(d[r][b]);
            const __m512 w0 = _mm512_mul_ps(
                _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q[r] + i)))), s);
            const __m512 w1 = _mm512_mul_ps(
                _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q[r] + i + 16)))), s);
            for (int c = 0; c < C; c++) {
                acc[r][c] = _mm512_fmadd_ps(w0, x0[c], acc[r][c]);
                acc[r][c] = _mm512_fmadd_ps(w1, x1[c], acc[r][c]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            y[(size_t)c * ldy + (size_t)r] = _mm512_reduce_add_ps(acc[r][c]);
}

AVX512 void cpu_q8_rows_avx512(const void *w, size_t ldw, int rows, int n, const float *x,
                               size_t ldx, int nx, float *y, size_t ldy) {
    TILE_WALK(tile_q8_avx512, Q8_R, Q8_C_LIMIT, CPU_DTYPE_Q8, w, ldw, rows, n, x, ldx, nx, y, ldy);
}

/* ---- AVX2 + FMA ------------------------------------------------------------------- */
#define AVX2 __attribute__((target("avx2,fma")))

AVX2 static ALWAYS_INLINE float q8_hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* tile_q8_avx2: per 8 weights, widen and scale, then one FMA per sequence into an 8-lane
 * accumulator; lanes summed at the end of the row (n is a whole number of blocks, so there
 * is no tail). */
AVX2 static ALWAYS_INLINE void tile_q8_avx2(la_dtype t, const void *w, size_t ldw, int n, const float *x,
                                            size_t ldx, float *y, size_t ldy, const int R,
                                            const int C) {
    const float *d[Q8_R];
    const int8_t *q[Q8_R];
    __m256 acc[Q8_R][Q8_C_LIMIT];
    for (int r = 0; r < R; r++) {
        d[r] = q8_scales(w, ldw, r);
        q[r] = q8_quants(w, ldw, r);
        for (int c = 0; c < C; c++)
            acc[r][c] = _mm256_setzero_ps();
    }
    for (int i = 0; i < n; i += 8) {
        __m256 wv[Q8_R];
        for (int r = 0; r < R; r++) {
            const __m128i v = _mm_loadl_epi64((const __m128i *)(q[r] + i));
            wv[r] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)),
                                  _mm256_set1_ps(d[r][i / CPU_Q8_BLOCK]));
        }
        for (int c = 0; c < C; c++) {
            const __m256 xv = _mm256_loadu_ps(x + (size_t)c * ldx + (size_t)i);
            for (int r = 0; r < R; r++)
                acc[r][c] = _mm256_fmadd_ps(wv[r], xv, acc[r][c]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            y[(size_t)c * ldy + (size_t)r] = q8_hsum256(acc[r][c]);
}

AVX2 void cpu_q8_rows_avx2(const void *w, size_t ldw, int rows, int n, const float *x, size_t ldx,
                           int nx, float *y, size_t ldy) {
    TILE_WALK(tile_q8_avx2, Q8_R, Q8_C_AVX2, CPU_DTYPE_Q8, w, ldw, rows, n, x, ldx, nx, y, ldy);
}
#endif /* LA_X86 */
