/*
 * cpu_quant.c - the int8 weight format (LA_WEIGHTS_QUANT=q8) and its conversion.
 *
 * Format. A q8 matrix [rows, cols] (cols a whole multiple of 32) stores each row as
 *
 *     scales: cols/32 float32    then    quants: cols int8
 *
 * where block b of the row covers elements 32b..32b+31 and element i is worth
 * quants[i] * scales[i / 32]. A block is quantized symmetrically: its scale is
 * max|w| / 127 and each weight is rounded to the nearest integer multiple of it (ties away
 * from zero), so the largest weight of a block is exact and every other one is within half a
 * scale. This is ggml's q8_0 block with a float32 instead of an f16 scale, and the scales
 * of a row kept together ahead of its quants: a row is 9/8 bytes per weight, the kernels read
 * the quants as whole 64-byte vectors, and a row is one contiguous run that the prefetcher
 * and the tile walk of the decode kernels can treat like any other row.
 *
 * Why int8 at all: decode reads every decoder weight once per step, so at small batches its
 * speed is the memory bandwidth divided by the bytes per weight; 1.125 bytes instead of
 * bf16's 2 makes a step about 1.8x shorter, and the resident copy about half the size.
 *
 * The conversion runs at open from the checkpoint's bf16/f16/f32 rows, on the engine's thread
 * pool, straight into the resident allocation (make_resident): no second copy exists.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

size_t cpu_row_bytes(la_dtype t, int cols) {
    if (t == CPU_DTYPE_Q8)
        return (size_t)cols / CPU_Q8_BLOCK * sizeof(float) + (size_t)cols;
    return (size_t)cols * cpu_dtype_size(t);
}

int cpu_q8_fits(const cpu_matrix *m) {
    return m->cols > 0 && m->cols % CPU_Q8_BLOCK == 0;
}

/* quantize_row_plain quantizes one float32 row of cols elements into dst (the row format
 * above). */
static void quantize_row_plain(const float *src, int cols, void *dst) {
    const int nb = cols / CPU_Q8_BLOCK;
    float *scales = dst;
    int8_t *q = (int8_t *)(scales + nb);
    for (int b = 0; b < nb; b++) {
        const float *x = src + (size_t)b * CPU_Q8_BLOCK;
        /* Plain comparisons and a truncation in double rather than fmaxf and lroundf: the
         * same results (NaN weights aside) without a libm call per weight. */
        float amax = 0; /* NaN weights are skipped: a comparison with NaN is false */
        for (int i = 0; i < CPU_Q8_BLOCK; i++) {
            const float a = fabsf(x[i]);
            amax = a > amax ? a : amax;
        }
        const float d = amax / 127.0f;
        /* A subnormal scale has no finite inverse: such a block (every weight below about
         * 1.5e-36) quantizes to zeros. */
        const float inv = d >= FLT_MIN ? 1.0f / d : 0.0f;
        scales[b] = d;
        for (int i = 0; i < CPU_Q8_BLOCK; i++) {
            /* round half away from zero, as lroundf: |v| + 0.5 is exact in double; a NaN
             * (a NaN weight, or an infinite one times the zero inverse) quantizes to 0 */
            const float v = x[i] * inv;
            const double r = v != v ? 0 : v < 0 ? -trunc(0.5 - (double)v) : trunc((double)v + 0.5);
            /* v is at most 127 in magnitude up to rounding; clamp the rounding away */
            q[(size_t)b * CPU_Q8_BLOCK + i] = (int8_t)(r > 127 ? 127 : r < -127 ? -127 : r);
        }
    }
}

#if defined(__x86_64__)
#include <immintrin.h>
#define Q8_AVX512 __attribute__((target("avx512f")))

/* round_away16 is 16 floats rounded to the nearest integer, ties away from zero, clamped to
 * [-127, 127], as int32: the same steps as quantize_row_plain (|v| + 0.5 in double, exact,
 * truncated, the sign put back). */
Q8_AVX512 static inline __m512i round_away16(__m512 v) {
    const __m512d half = _mm512_set1_pd(0.5);
    __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
    __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    const __mmask8 number_lo = _mm512_cmp_pd_mask(lo, lo, _CMP_ORD_Q);
    const __mmask8 number_hi = _mm512_cmp_pd_mask(hi, hi, _CMP_ORD_Q);
    const __m512d sign_lo = _mm512_castsi512_pd(_mm512_and_si512(_mm512_castpd_si512(lo), _mm512_set1_epi64((long long)0x8000000000000000ULL)));
    const __m512d sign_hi = _mm512_castsi512_pd(_mm512_and_si512(_mm512_castpd_si512(hi), _mm512_set1_epi64((long long)0x8000000000000000ULL)));
    lo = _mm512_roundscale_pd(_mm512_add_pd(_mm512_abs_pd(lo), half), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    hi = _mm512_roundscale_pd(_mm512_add_pd(_mm512_abs_pd(hi), half), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    lo = _mm512_castsi512_pd(_mm512_or_si512(_mm512_castpd_si512(lo), _mm512_castpd_si512(sign_lo)));
    hi = _mm512_castsi512_pd(_mm512_or_si512(_mm512_castpd_si512(hi), _mm512_castpd_si512(sign_hi)));
    const __m512d lim = _mm512_set1_pd(127.0), nlim = _mm512_set1_pd(-127.0);
    lo = _mm512_max_pd(_mm512_min_pd(lo, lim), nlim);
    hi = _mm512_max_pd(_mm512_min_pd(hi, lim), nlim);
    /* a NaN lane is 0, as in the plain quantizer (the clamp made it 127) */
    lo = _mm512_maskz_mov_pd(number_lo, lo);
    hi = _mm512_maskz_mov_pd(number_hi, hi);
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvttpd_epi32(lo)), _mm512_cvttpd_epi32(hi), 1);
}

/* quantize_row_avx512 is quantize_row_plain 16 lanes at a time, with the same bytes: the
 * block's maximum is exact in any order (NaN weights left out of it), and every other
 * step is one IEEE operation either way. The scalar loops made quantizing at open take about 15 s at 3B here. */
Q8_AVX512 static void quantize_row_avx512(const float *src, int cols, void *dst) {
    const int nb = cols / CPU_Q8_BLOCK;
    float *scales = dst;
    int8_t *q = (int8_t *)(scales + nb);
    for (int b = 0; b < nb; b++) {
        const float *x = src + (size_t)b * CPU_Q8_BLOCK;
        const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
        /* NaN weights count as 0 in the maximum, as the plain loop skips them */
        const __m512 a0 = _mm512_abs_ps(x0), a1 = _mm512_abs_ps(x1);
        const __m512 n0 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a0, a0, _CMP_ORD_Q), a0);
        const __m512 n1 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a1, a1, _CMP_ORD_Q), a1);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(n0, n1));
        const float d = amax / 127.0f;
        const float inv = d >= FLT_MIN ? 1.0f / d : 0.0f;
        scales[b] = d;
        const __m512 iv = _mm512_set1_ps(inv);
        int8_t *qb = q + (size_t)b * CPU_Q8_BLOCK;
        _mm_storeu_si128((__m128i *)qb, _mm512_cvtepi32_epi8(round_away16(_mm512_mul_ps(x0, iv))));
        _mm_storeu_si128((__m128i *)(qb + 16), _mm512_cvtepi32_epi8(round_away16(_mm512_mul_ps(x1, iv))));
    }
}
#endif

void cpu_q8_quantize_row(const float *src, int cols, void *dst) {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f")) {
        quantize_row_avx512(src, cols, dst);
        return;
    }
#endif
    quantize_row_plain(src, cols, dst);
}

void cpu_q8_quantize_row_plain(const float *src, int cols, void *dst) {
    quantize_row_plain(src, cols, dst);
}

void cpu_q8_dequantize_row(const void *row, int cols, float *dst) {
    const int nb = cols / CPU_Q8_BLOCK;
    const float *scales = row;
    const int8_t *q = (const int8_t *)(scales + nb);
    /* block by block, so the compiler vectorises the inner loop (prefill dequantizes every
     * weight once per call) */
    for (int b = 0; b < nb; b++) {
        const float d = scales[b];
        const int8_t *qb = q + (size_t)b * CPU_Q8_BLOCK;
        float *out = dst + (size_t)b * CPU_Q8_BLOCK;
        for (int i = 0; i < CPU_Q8_BLOCK; i++)
            out[i] = (float)qb[i] * d;
    }
}

void cpu_rows_to_f32(const cpu_matrix *m, int row0, int rows, float *dst) {
    const size_t stride = cpu_row_bytes(m->dtype, m->cols);
    const char *src = (const char *)m->data + (size_t)row0 * stride;
    if (m->dtype != CPU_DTYPE_Q8) {
        cpu_to_f32(m->dtype, src, dst, (size_t)rows * (size_t)m->cols);
        return;
    }
    for (int r = 0; r < rows; r++)
        cpu_q8_dequantize_row(src + (size_t)r * stride, m->cols, dst + (size_t)r * m->cols);
}

typedef struct {
    const cpu_matrix *src;
    void *dst;
    int failed; /* a thread could not get its row buffer */
} quantize_task;

static void quantize_slice(void *arg, int thread, int nthreads) {
    quantize_task *t = arg;
    const cpu_matrix *m = t->src;
    const int r0 = (int)((int64_t)m->rows * thread / nthreads);
    const int r1 = (int)((int64_t)m->rows * (thread + 1) / nthreads);
    const size_t in_stride = cpu_row_bytes(m->dtype, m->cols);
    const size_t out_stride = cpu_row_bytes(CPU_DTYPE_Q8, m->cols);
    float *row = malloc((size_t)m->cols * sizeof *row);
    if (!row) {
        __atomic_store_n(&t->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int r = r0; r < r1; r++) {
        cpu_to_f32(m->dtype, (const char *)m->data + (size_t)r * in_stride, row, (size_t)m->cols);
        cpu_q8_quantize_row(row, m->cols, (char *)t->dst + (size_t)r * out_stride);
    }
    free(row);
}

int cpu_q8_quantize(cpu_pool *pool, const cpu_matrix *src, void *dst) {
    quantize_task t = {src, dst, 0};
    cpu_pool_run(pool, quantize_slice, &t);
    return t.failed ? -1 : 0;
}
