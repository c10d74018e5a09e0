/*
 * cpu_vnni_probe.c - a measured prototype, not an engine path: int8 activations times the
 * q8 weights with AVX512_VNNI's VPDPBUSD, against what the engine runs, for prefill and for
 * decode (docs/cpu-backend.md, "VNNI, measured"). Only BenchmarkVNNI calls it.
 *
 * The arithmetic is ggml's q8_0 recipe: each activation row is rounded to int8 per block of
 * 32 with its own scale (absmax / 127); a block's dot product is an int32 sum of 32 int8 x
 * int8 products, scaled by the two blocks' scales into a float32 sum. VPDPBUSD multiplies
 * unsigned by signed bytes, four products per 32-bit lane, so the activations are offset
 * by 128 into unsigned bytes and 128 x (the block's weight sum) taken off again.
 *
 *  - decode: one activation row against every weight row (the batch-1 step), rows split
 *    across the pool like the engine's kernel; timed as GB/s of weights, the figure
 *    cpu_matvec_gbps gives for the engine's q8 kernel on the same matrices.
 *  - prefill: the inner loop alone, data in L1 (a register block of 4 activation rows x
 *    48 weight rows, 256 columns, run many times), against the AVX512_BF16 kernel's inner
 *    loop on the same block shape in L1: multiply-adds per second per core, the ceiling of
 *    a whole GEMM on either (packing, rounding and memory come on top of both).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_internal.h"

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

#define VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512bf16")))

int cpu_vnni_available(void) {
    return __builtin_cpu_supports("avx512vnni") && cpu_avx512bf16_available();
}

/* ---- decode ------------------------------------------------------------------------- */

typedef struct {
    const void *w;
    int rows, cols;
    const uint8_t *xq;   /* activations + 128, [cols] */
    const float *xs;     /* activation scales, [cols / 32] */
    float *y;
} vnni_mv_task;

/* vnni_rows: this thread's share of the weight rows, two blocks (64 columns) a vector. */
VNNI_TARGET static void vnni_rows(void *arg, int thread, int nthreads) {
    const vnni_mv_task *t = arg;
    const int nb = t->cols / CPU_Q8_BLOCK;
    const size_t stride = cpu_row_bytes(CPU_DTYPE_Q8, t->cols);
    const int r0 = (int)((int64_t)t->rows * thread / nthreads);
    const int r1 = (int)((int64_t)t->rows * (thread + 1) / nthreads);
    const __m512i ones = _mm512_set1_epi8(1);
    /* lanes 0-7 take block b's scale, lanes 8-15 block b+1's */
    const __m512i spread = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    for (int r = r0; r < r1; r++) {
        const float *d = (const float *)((const char *)t->w + (size_t)r * stride);
        const int8_t *q = (const int8_t *)(d + nb);
        __m512 acc = _mm512_setzero_ps();
        for (int b = 0; b + 1 < nb; b += 2) {
            const __m512i wq = _mm512_loadu_si512(q + (size_t)b * CPU_Q8_BLOCK);
            const __m512i xq = _mm512_loadu_si512(t->xq + (size_t)b * CPU_Q8_BLOCK);
            /* sum(x w) = sum((x + 128) w) - 128 sum(w) */
            __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), xq, wq);
            const __m512i wsum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, wq);
            dot = _mm512_sub_epi32(dot, _mm512_slli_epi32(wsum, 7));
            const __m512 s = _mm512_permutexvar_ps(
                spread, _mm512_castps128_ps512(_mm_mul_ps(
                            _mm_castpd_ps(_mm_load_sd((const double *)(d + b))),
                            _mm_castpd_ps(_mm_load_sd((const double *)(t->xs + b))))));
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), s, acc);
        }
        t->y[r] = _mm512_reduce_add_ps(acc);
    }
}

/* quantize_row rounds x[cols] to int8 blocks of 32 (+128, as unsigned) with scales. */
static void quantize_row(const float *x, int cols, uint8_t *xq, float *xs) {
    for (int b = 0; b < cols / CPU_Q8_BLOCK; b++) {
        float amax = 0;
        for (int i = 0; i < CPU_Q8_BLOCK; i++) {
            const float a = x[b * CPU_Q8_BLOCK + i] < 0 ? -x[b * CPU_Q8_BLOCK + i] : x[b * CPU_Q8_BLOCK + i];
            amax = a > amax ? a : amax;
        }
        const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
        xs[b] = d;
        for (int i = 0; i < CPU_Q8_BLOCK; i++) {
            float v = x[b * CPU_Q8_BLOCK + i] * id;
            int qv = (int)(v < 0 ? v - 0.5f : v + 0.5f);
            xq[b * CPU_Q8_BLOCK + i] = (uint8_t)(qv + 128);
        }
    }
}

int cpu_vnni_matvec_gbps(const void *w, int rows, int cols, int mats, const float *x, float *y,
                         int threads, int reps, double *gbps) {
    if (!cpu_vnni_available() || cols % (2 * CPU_Q8_BLOCK) != 0)
        return -1;
    char err[LA_ERR_LEN];
    cpu_pool pool;
    if (cpu_pool_init(&pool, threads, err, sizeof err) != 0)
        return -2;
    uint8_t *xq = malloc((size_t)cols);
    float *xs = malloc((size_t)cols / CPU_Q8_BLOCK * sizeof *xs);
    const size_t bytes = (size_t)rows * cpu_row_bytes(CPU_DTYPE_Q8, cols);
    double best = 1e30;
    for (int r = 0; xq && xs && r < reps; r++) {
        const double t0 = seconds();
        for (int m = 0; m < mats; m++) {
            quantize_row(x, cols, xq, xs); /* once per product, as a step would */
            vnni_mv_task t = {(const char *)w + (size_t)m * bytes, rows, cols, xq, xs, y};
            cpu_pool_run(&pool, vnni_rows, &t);
        }
        const double dt = seconds() - t0;
        best = dt < best ? dt : best;
    }
    const int ok = xq && xs;
    free(xq);
    free(xs);
    cpu_pool_destroy(&pool);
    *gbps = (double)bytes * mats / best / 1e9;
    return ok ? 0 : -2;
}

/* ---- prefill: the inner loops in L1 -------------------------------------------------- */

enum { PF_K = 256, PF_ROWS = 4, PF_VECS = 3, PF_BF16_ROWS = 8 };

/* vnni_block: 4 activation rows x 48 weight rows (3 vectors of 16) over PF_K columns. Weights
 * as packed for VPDPBUSD (each lane 4 consecutive columns of one weight row), a scale per
 * (weight row, block) and the weights' block sums (for the +128 offset); activations as
 * unsigned bytes with a scale per (row, block). Per block: 8 VPDPBUSD per accumulator into
 * int32, then offset, convert and scale into the float32 sums. */
VNNI_TARGET static void vnni_block(const uint8_t *a, const float *as, const int8_t *b,
                                   const float *bs, const int32_t *bsum, float *out) {
    __m512 acc[PF_ROWS][PF_VECS];
    for (int i = 0; i < PF_ROWS; i++)
        for (int j = 0; j < PF_VECS; j++)
            acc[i][j] = _mm512_setzero_ps();
    for (int blk = 0; blk < PF_K / CPU_Q8_BLOCK; blk++) {
        __m512i dot[PF_ROWS][PF_VECS];
        for (int i = 0; i < PF_ROWS; i++)
            for (int j = 0; j < PF_VECS; j++)
                dot[i][j] = _mm512_setzero_si512();
        for (int kk = 0; kk < CPU_Q8_BLOCK / 4; kk++) {
            __m512i bv[PF_VECS];
            for (int j = 0; j < PF_VECS; j++)
                bv[j] = _mm512_loadu_si512(b + ((size_t)(blk * 8 + kk) * PF_VECS + j) * 64);
            for (int i = 0; i < PF_ROWS; i++) {
                int32_t v;
                memcpy(&v, a + (size_t)i * PF_K + blk * CPU_Q8_BLOCK + kk * 4, 4);
                const __m512i av = _mm512_set1_epi32(v);
                for (int j = 0; j < PF_VECS; j++)
                    dot[i][j] = _mm512_dpbusd_epi32(dot[i][j], av, bv[j]);
            }
        }
        for (int j = 0; j < PF_VECS; j++) {
            const __m512i off = _mm512_slli_epi32(_mm512_loadu_si512(bsum + (blk * PF_VECS + j) * 16), 7);
            const __m512 ws = _mm512_loadu_ps(bs + (blk * PF_VECS + j) * 16);
            for (int i = 0; i < PF_ROWS; i++) {
                const __m512 s = _mm512_mul_ps(ws, _mm512_set1_ps(as[i * (PF_K / CPU_Q8_BLOCK) + blk]));
                acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(dot[i][j], off)), s, acc[i][j]);
            }
        }
    }
    for (int i = 0; i < PF_ROWS; i++)
        for (int j = 0; j < PF_VECS; j++)
            _mm512_storeu_ps(out + (i * PF_VECS + j) * 16, acc[i][j]);
}

/* bf16_block: the AVX512_BF16 kernel's register block (cpu_avx512bf16.c): 8 activation rows
 * x 48 weight rows over PF_K columns, pairs broadcast from the activations. */
VNNI_TARGET static void bf16_block(const uint16_t *a, const uint16_t *b, float *out) {
    __m512 acc[PF_BF16_ROWS][PF_VECS];
    for (int i = 0; i < PF_BF16_ROWS; i++)
        for (int j = 0; j < PF_VECS; j++)
            acc[i][j] = _mm512_setzero_ps();
    for (int kk = 0; kk < PF_K / 2; kk++) {
        __m512bh bv[PF_VECS];
        for (int j = 0; j < PF_VECS; j++)
            bv[j] = (__m512bh)_mm512_loadu_si512(b + ((size_t)kk * PF_VECS + j) * 32);
        for (int i = 0; i < PF_BF16_ROWS; i++) {
            int32_t v;
            memcpy(&v, a + (size_t)i * PF_K + 2 * kk, 4);
            const __m512bh av = (__m512bh)_mm512_set1_epi32(v);
            for (int j = 0; j < PF_VECS; j++)
                acc[i][j] = _mm512_dpbf16_ps(acc[i][j], av, bv[j]);
        }
    }
    for (int i = 0; i < PF_BF16_ROWS; i++)
        for (int j = 0; j < PF_VECS; j++)
            _mm512_storeu_ps(out + (i * PF_VECS + j) * 16, acc[i][j]);
}

int cpu_vnni_inner_gmacs(int reps, double *vnni, double *bf16) {
    if (!cpu_vnni_available())
        return -1;
    static uint8_t a8[PF_ROWS * PF_K];
    static float as[PF_ROWS * PF_K / CPU_Q8_BLOCK];
    static int8_t b8[PF_VECS * 16 * PF_K];
    static float bs[PF_VECS * 16 * PF_K / CPU_Q8_BLOCK];
    static int32_t bsum[PF_VECS * 16 * PF_K / CPU_Q8_BLOCK];
    static uint16_t a16[PF_BF16_ROWS * PF_K], b16[PF_VECS * 16 * PF_K];
    static float out[PF_BF16_ROWS * PF_VECS * 16];
    for (size_t i = 0; i < sizeof a8; i++)
        a8[i] = (uint8_t)(i * 7 + 3);
    for (size_t i = 0; i < sizeof b8; i++)
        b8[i] = (int8_t)(i * 5 - 60);
    for (size_t i = 0; i < sizeof as / sizeof *as; i++)
        as[i] = 0.01f;
    for (size_t i = 0; i < sizeof bs / sizeof *bs; i++)
        bs[i] = 0.02f, bsum[i] = (int32_t)i;
    for (size_t i = 0; i < sizeof a16 / sizeof *a16; i++)
        a16[i] = (uint16_t)(0x3c00 + i % 97);
    for (size_t i = 0; i < sizeof b16 / sizeof *b16; i++)
        b16[i] = (uint16_t)(0x3c00 + i % 89);
    const double vmacs = (double)PF_ROWS * PF_VECS * 16 * PF_K * reps;
    const double bmacs = (double)PF_BF16_ROWS * PF_VECS * 16 * PF_K * reps;
    double t0 = seconds();
    for (int r = 0; r < reps; r++) {
        vnni_block(a8, as, b8, bs, bsum, out);
        __asm__ volatile("" ::: "memory"); /* every repetition runs */
    }
    *vnni = vmacs / (seconds() - t0) / 1e9;
    t0 = seconds();
    for (int r = 0; r < reps; r++) {
        bf16_block(a16, b16, out);
        __asm__ volatile("" ::: "memory");
    }
    *bf16 = bmacs / (seconds() - t0) / 1e9;
    return 0;
}

#else

int cpu_vnni_available(void) { return 0; }
int cpu_vnni_matvec_gbps(const void *w, int rows, int cols, int mats, const float *x, float *y,
                         int threads, int reps, double *gbps) {
    (void)w, (void)rows, (void)cols, (void)mats, (void)x, (void)y, (void)threads, (void)reps, (void)gbps;
    return -1;
}
int cpu_vnni_inner_gmacs(int reps, double *vnni, double *bf16) {
    (void)reps, (void)vnni, (void)bf16;
    return -1;
}

#endif
