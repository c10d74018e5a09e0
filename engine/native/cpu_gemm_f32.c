/*
 * cpu_gemm_f32.c - the exact path's own float32 matrix products: prefill, the vision tower
 * and attention, y[n, N] = alpha * x[n, K] B^T, where B is N rows of K weights ([N, K], a
 * Linear weight, "wt") or K rows of N ([K, N], the values of attention, "kn").
 *
 * Why our own. OpenBLAS picks its kernels from its own CPU detection, and an OpenBLAS that
 * predates a CPU (or an environment that pins OPENBLAS_CORETYPE) runs AVX2 kernels on an
 * AVX-512 machine. It also wants float32 weights, so a bf16/f16 checkpoint had to be
 * widened into a scratch buffer before every product. Here the instruction set is chosen
 * at run time from cpuid (each kernel carries its own target attribute, so the package
 * still builds for x86-64-v2 and runs on any x86-64), and the widening happens while the
 * weights are packed, which the product needs anyway.
 *
 * Arithmetic. Every output is a float32 sum of float32 products, summed in the order of
 * k (one accumulator per output, fused multiply-adds on AVX2/AVX-512, multiply then add
 * in plain C), then times alpha. The K blocks below only pause that sum in y; they never
 * reorder it. So the result does not depend on the thread count, the blocking or n. The
 * order differs from OpenBLAS's, which the float32 parity tolerance allows.
 *
 * Layout (the GotoBLAS scheme with the roles of the two operands swapped, since the
 * weights are the big operand here):
 *  - B is packed NR columns (one panel) at a time, KC values of k per block: panel[k][j],
 *    NR floats per k, zero beyond N. Packing reads B in its own dtype and widens on the
 *    way (bf16 -> f32 is a 16-bit shift, f16 through F16C). A thread packs a group of
 *    panels (KC x NC floats, 384 KB, in L2) and runs every row of x against it.
 *  - x is read in place: a micro-kernel takes MR rows of x and one panel and keeps MR x NR
 *    sums in registers; each step of k broadcasts one x value per row and loads NR panel
 *    values once for all MR rows. AVX-512: 12 x 32 (24 of the 32 zmm registers hold sums);
 *    AVX2: 6 x 16 (12 of 16 ymm); plain C: 4 x 16.
 *  - Threads take a share of the panels, or, when there are too few panels to go round
 *    (attention's values, hd columns), a share of the rows of x.
 *
 * Short prompts. Packing costs one pass over the weights per call: fine when hundreds of
 * rows use each panel, but an 8-token prompt would pack all 3B weights for 8 rows. Up to
 * small_rows rows (option f32_small_rows), a wt product skips packing: a dot-product
 * kernel reads each weight row in its own dtype, widens it in registers and applies it to
 * every row of x, so the cost follows the prompt, not the model. Its sums run in lanes
 * (each output a float32 sum of float32 products in another order).
 */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_internal.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define LA_X86 1
#define F32_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,f16c,fma")))
#define F32_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#endif

#define ALWAYS_INLINE inline __attribute__((always_inline))

enum {
    KC = 384,          /* values of k per packed block */
    NC = 256,          /* columns per packed group: KC x NC floats = 384 KB */
    MR_AVX512 = 12,
    NR_AVX512 = 32,
    MR_AVX2 = 6,
    NR_AVX2 = 16,
    MR_PLAIN = 4,
    NR_PLAIN = 16,
    NR_MAX = 32,
    F32_SMALL_ROWS = 32, /* default of f32_small_rows (docs/cpu-backend.md measures it) */
    F32_ALONE_MACS = 1 << 16, /* products this small run on the calling thread alone */
};

/* ---- levels ------------------------------------------------------------------------- */

static int cpu_has_avx512(void) {
#ifdef LA_X86
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
    return 0;
#endif
}

static int cpu_has_avx2(void) {
#ifdef LA_X86
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
#else
    return 0;
#endif
}

int cpu_f32_kernel_level(void) {
    if (cpu_has_avx512())
        return CPU_F32_AVX512;
    if (cpu_has_avx2())
        return CPU_F32_AVX2;
    return CPU_F32_PLAIN;
}

const char *cpu_f32_level_name(int level) {
    switch (level) {
    case CPU_F32_OPENBLAS:
        return "openblas";
    case CPU_F32_PLAIN:
        return "plain";
    case CPU_F32_AVX2:
        return "avx2";
    case CPU_F32_AVX512:
        return "avx512";
    }
    return "none";
}

const char *cpu_f32_kernel_name(void) { return cpu_f32_level_name(cpu_f32_kernel_level()); }

int cpu_f32_level_named(const char *name) {
    if (strcmp(name, "auto") == 0)
        return cpu_f32_kernel_level();
    if (strcmp(name, "openblas") == 0)
        return CPU_F32_OPENBLAS;
    if (strcmp(name, "plain") == 0)
        return CPU_F32_PLAIN;
    if (strcmp(name, "avx2") == 0)
        return cpu_has_avx2() ? CPU_F32_AVX2 : -2;
    if (strcmp(name, "avx512") == 0)
        return cpu_has_avx512() ? CPU_F32_AVX512 : -2;
    return -3;
}

static int level_nr(int level) {
    return level == CPU_F32_AVX512 ? NR_AVX512 : level == CPU_F32_AVX2 ? NR_AVX2 : NR_PLAIN;
}

static int level_mr(int level) {
    return level == CPU_F32_AVX512 ? MR_AVX512 : level == CPU_F32_AVX2 ? MR_AVX2 : MR_PLAIN;
}

/* ---- buffers ------------------------------------------------------------------------ */

static size_t pack_floats(void) { return (size_t)KC * NC + KC; /* the block, then one row */ }

int cpu_f32_init(cpu_f32 *g, int level, int nthreads) {
    memset(g, 0, sizeof *g);
    g->level = level;
    g->small_rows = F32_SMALL_ROWS;
    g->nthreads = nthreads;
    if (level == CPU_F32_OPENBLAS)
        return 0;
    g->pack = calloc((size_t)nthreads, sizeof *g->pack);
    if (!g->pack)
        return -1;
    for (int i = 0; i < nthreads; i++) {
        g->pack[i] = aligned_alloc(64, pack_floats() * sizeof(float));
        if (!g->pack[i])
            return -1;
    }
    return 0;
}

void cpu_f32_free(cpu_f32 *g) {
    if (g->pack)
        for (int i = 0; i < g->nthreads; i++)
            free(g->pack[i]);
    free(g->pack);
    memset(g, 0, sizeof *g);
}

/* ---- widening ----------------------------------------------------------------------- */

/* widen_plain converts n elements of dtype t to float32 (cpu_to_f32, vectorised by the
 * compiler for bf16). */
static void widen_plain(la_dtype t, const void *src, float *dst, int n) {
    cpu_to_f32(t, src, dst, (size_t)n);
}

#ifdef LA_X86
F32_AVX512_TARGET static void widen_avx512(la_dtype t, const void *src, float *dst, int n) {
    int i = 0;
    switch (t) {
    case LA_DTYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof *dst);
        return;
    case LA_DTYPE_BF16:
        for (; i + 16 <= n; i += 16) {
            __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)src + i));
            _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
        }
        break;
    case LA_DTYPE_F16:
        for (; i + 16 <= n; i += 16) {
            __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)src + i));
            _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
        }
        break;
    }
    if (i < n)
        cpu_to_f32(t, (const char *)src + (size_t)i * cpu_dtype_size(t), dst + i, (size_t)(n - i));
}

F32_AVX2_TARGET static void widen_avx2(la_dtype t, const void *src, float *dst, int n) {
    int i = 0;
    switch (t) {
    case LA_DTYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof *dst);
        return;
    case LA_DTYPE_BF16:
        for (; i + 8 <= n; i += 8) {
            __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)src + i));
            _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
        }
        break;
    case LA_DTYPE_F16:
        for (; i + 8 <= n; i += 8) {
            __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)src + i));
            _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
        }
        break;
    }
    if (i < n)
        cpu_to_f32(t, (const char *)src + (size_t)i * cpu_dtype_size(t), dst + i, (size_t)(n - i));
}
#endif

static void widen(int level, la_dtype t, const void *src, float *dst, int n) {
#ifdef LA_X86
    if (level == CPU_F32_AVX512) {
        widen_avx512(t, src, dst, n);
        return;
    }
    if (level == CPU_F32_AVX2) {
        widen_avx2(t, src, dst, n);
        return;
    }
#endif
    widen_plain(t, src, dst, n);
}

/* ---- packing ------------------------------------------------------------------------ */

#ifdef LA_X86
/* A wt panel is B transposed: row j of B (contiguous in k) becomes column j of the panel.
 * The vector packers load 16 (8) rows of B widened, transpose the square in registers and
 * store it as 16 (8) panel rows, so packing costs a few shuffles per element instead of a
 * store per element. */

/* load16 widens B row elements [k, k+16) (masked to m) of one row, zero where masked. */
F32_AVX512_TARGET static ALWAYS_INLINE __m512 load16(la_dtype t, const char *row, int k, __mmask16 m) {
    switch (t) {
    case LA_DTYPE_BF16: {
        __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)row + k);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    case LA_DTYPE_F16:
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + k));
    default:
        return _mm512_maskz_loadu_ps(m, (const float *)row + k);
    }
}

/* transpose16 turns r[i] = row i into r[c] = column c of a 16 x 16 square. In each 128-bit
 * lane L, unpack and shuffle_ps gather column 4L+p of 4 rows; shuffle_f32x4 then collects
 * the four lanes of a column. */
F32_AVX512_TARGET static ALWAYS_INLINE void transpose16(__m512 r[16]) {
    __m512 t[16], u[16];
    for (int g = 0; g < 4; g++) {
        t[4 * g + 0] = _mm512_unpacklo_ps(r[4 * g], r[4 * g + 1]);
        t[4 * g + 1] = _mm512_unpackhi_ps(r[4 * g], r[4 * g + 1]);
        t[4 * g + 2] = _mm512_unpacklo_ps(r[4 * g + 2], r[4 * g + 3]);
        t[4 * g + 3] = _mm512_unpackhi_ps(r[4 * g + 2], r[4 * g + 3]);
        u[4 * g + 0] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
        u[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xee);
        u[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
        u[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xee);
    }
    /* u[4g+p], lane L: column 4L+p of rows 4g..4g+3 */
    for (int p = 0; p < 4; p++) {
        const __m512 v = _mm512_shuffle_f32x4(u[p], u[4 + p], 0x88);
        const __m512 w = _mm512_shuffle_f32x4(u[8 + p], u[12 + p], 0x88);
        const __m512 v2 = _mm512_shuffle_f32x4(u[p], u[4 + p], 0xdd);
        const __m512 w2 = _mm512_shuffle_f32x4(u[8 + p], u[12 + p], 0xdd);
        r[p] = _mm512_shuffle_f32x4(v, w, 0x88);
        r[8 + p] = _mm512_shuffle_f32x4(v, w, 0xdd);
        r[4 + p] = _mm512_shuffle_f32x4(v2, w2, 0x88);
        r[12 + p] = _mm512_shuffle_f32x4(v2, w2, 0xdd);
    }
}

F32_AVX512_TARGET static void pack_wt_avx512(la_dtype t, const char *b, size_t ldb, int nr, int k0,
                                             int kc, float *dst) {
    const size_t es = cpu_dtype_size(t);
    for (int h = 0; h < NR_AVX512; h += 16) {
        for (int k = 0; k < kc; k += 16) {
            const __mmask16 m = kc - k >= 16 ? 0xffff : (__mmask16)((1u << (kc - k)) - 1);
            __m512 r[16];
            for (int i = 0; i < 16; i++)
                r[i] = h + i < nr ? load16(t, b + ((size_t)(h + i) * ldb + (size_t)k0) * es, k, m)
                                  : _mm512_setzero_ps();
            transpose16(r);
            const int kn = kc - k < 16 ? kc - k : 16;
            for (int c = 0; c < kn; c++)
                _mm512_store_ps(dst + (size_t)(k + c) * NR_AVX512 + h, r[c]);
        }
    }
}

F32_AVX2_TARGET static ALWAYS_INLINE __m256 load8(la_dtype t, const char *row, int k, int n) {
    if (n < 8) { /* the end of the block: through a zeroed buffer */
        float tmp[8] = {0};
        cpu_to_f32(t, row + (size_t)k * cpu_dtype_size(t), tmp, (size_t)n);
        return _mm256_loadu_ps(tmp);
    }
    switch (t) {
    case LA_DTYPE_BF16: {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + k));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    case LA_DTYPE_F16:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + k)));
    default:
        return _mm256_loadu_ps((const float *)row + k);
    }
}

/* transpose8 is transpose16's 8 x 8 form: permute2f128 collects a column's two lanes. */
F32_AVX2_TARGET static ALWAYS_INLINE void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int g = 0; g < 2; g++) {
        t[4 * g + 0] = _mm256_unpacklo_ps(r[4 * g], r[4 * g + 1]);
        t[4 * g + 1] = _mm256_unpackhi_ps(r[4 * g], r[4 * g + 1]);
        t[4 * g + 2] = _mm256_unpacklo_ps(r[4 * g + 2], r[4 * g + 3]);
        t[4 * g + 3] = _mm256_unpackhi_ps(r[4 * g + 2], r[4 * g + 3]);
        u[4 * g + 0] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
        u[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0xee);
        u[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
        u[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xee);
    }
    for (int p = 0; p < 4; p++) {
        r[p] = _mm256_permute2f128_ps(u[p], u[4 + p], 0x20);
        r[4 + p] = _mm256_permute2f128_ps(u[p], u[4 + p], 0x31);
    }
}

F32_AVX2_TARGET static void pack_wt_avx2(la_dtype t, const char *b, size_t ldb, int nr, int k0,
                                         int kc, float *dst) {
    const size_t es = cpu_dtype_size(t);
    for (int h = 0; h < NR_AVX2; h += 8) {
        for (int k = 0; k < kc; k += 8) {
            const int kn = kc - k < 8 ? kc - k : 8;
            __m256 r[8];
            for (int i = 0; i < 8; i++)
                r[i] = h + i < nr ? load8(t, b + ((size_t)(h + i) * ldb + (size_t)k0) * es, k, kn)
                                  : _mm256_setzero_ps();
            transpose8(r);
            for (int c = 0; c < kn; c++)
                _mm256_store_ps(dst + (size_t)(k + c) * NR_AVX2 + h, r[c]);
        }
    }
}
#endif

/* pack_panel writes panel columns j0..j0+nr-1 (nr <= NR, the rest zero) for k0..k0+kc-1
 * at dst, NR floats per k. A wt B row j is contiguous in k, so it is widened into row
 * (kc floats) and then spread down the panel's column; a kn B row k is contiguous in j
 * and widens straight into place. */
static void pack_panel(const cpu_f32_product *p, int level, int NR, int j0, int nr, int k0,
                       int kc, float *dst, float *row) {
    const size_t es = cpu_dtype_size(p->b_dtype);
    const char *b = p->b;
    if (p->b_kn) {
        for (int k = 0; k < kc; k++) {
            float *d = dst + (size_t)k * NR;
            widen(level, p->b_dtype, b + ((size_t)(k0 + k) * p->ldb + (size_t)j0) * es, d, nr);
            for (int j = nr; j < NR; j++)
                d[j] = 0;
        }
        return;
    }
#ifdef LA_X86
    if (level == CPU_F32_AVX512) {
        pack_wt_avx512(p->b_dtype, b + (size_t)j0 * p->ldb * es, p->ldb, nr, k0, kc, dst);
        return;
    }
    if (level == CPU_F32_AVX2) {
        pack_wt_avx2(p->b_dtype, b + (size_t)j0 * p->ldb * es, p->ldb, nr, k0, kc, dst);
        return;
    }
#endif
    for (int j = 0; j < NR; j++) {
        if (j >= nr) {
            for (int k = 0; k < kc; k++)
                dst[(size_t)k * NR + j] = 0;
            continue;
        }
        widen(level, p->b_dtype, b + ((size_t)(j0 + j) * p->ldb + (size_t)k0) * es, row, kc);
        for (int k = 0; k < kc; k++)
            dst[(size_t)k * NR + j] = row[k];
    }
}

/* ---- micro-kernels ------------------------------------------------------------------
 *
 * A micro-kernel computes the MR x NR block of y at rows x[0..mr), columns of one panel
 * (nr valid), over kc values of k: it starts from zero (first block) or from y (later
 * blocks), adds x[i][k] * panel[k][j] in k order, and stores, times alpha when last. The
 * row count is a constant after inlining, so the sums live in registers. */

static ALWAYS_INLINE void tile_plain(int M, const float *x, size_t ldx, const float *panel, int kc,
                                     float *y, size_t ldy, int nr, int first, int last,
                                     float alpha) {
    float acc[MR_PLAIN][NR_PLAIN];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < NR_PLAIN; j++)
            acc[i][j] = first || j >= nr ? 0.0f : y[(size_t)i * ldy + (size_t)j];
    for (int k = 0; k < kc; k++) {
        const float *b = panel + (size_t)k * NR_PLAIN;
        for (int i = 0; i < M; i++) {
            const float a = x[(size_t)i * ldx + (size_t)k];
            for (int j = 0; j < NR_PLAIN; j++)
                acc[i][j] += a * b[j];
        }
    }
    for (int i = 0; i < M; i++)
        for (int j = 0; j < nr; j++)
            y[(size_t)i * ldy + (size_t)j] = last ? alpha * acc[i][j] : acc[i][j];
}

static void kernel_plain(int mr, const float *x, size_t ldx, const float *panel, int kc, float *y,
                         size_t ldy, int nr, int first, int last, float alpha) {
    switch (mr) {
    case 4: tile_plain(4, x, ldx, panel, kc, y, ldy, nr, first, last, alpha); break;
    case 3: tile_plain(3, x, ldx, panel, kc, y, ldy, nr, first, last, alpha); break;
    case 2: tile_plain(2, x, ldx, panel, kc, y, ldy, nr, first, last, alpha); break;
    default: tile_plain(1, x, ldx, panel, kc, y, ldy, nr, first, last, alpha); break;
    }
}

#ifdef LA_X86
F32_AVX512_TARGET static ALWAYS_INLINE void tile_avx512(int M, const float *x, size_t ldx,
                                                        const float *panel, int kc, float *y,
                                                        size_t ldy, int nr, int first, int last,
                                                        float alpha) {
    __m512 acc[MR_AVX512][2];
    const __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
    const __mmask16 m1 = nr >= 32 ? 0xffff : nr <= 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1);
    for (int i = 0; i < M; i++) {
        if (first) {
            acc[i][0] = _mm512_setzero_ps();
            acc[i][1] = _mm512_setzero_ps();
        } else {
            acc[i][0] = _mm512_maskz_loadu_ps(m0, y + (size_t)i * ldy);
            acc[i][1] = _mm512_maskz_loadu_ps(m1, y + (size_t)i * ldy + 16);
        }
    }
    for (int k = 0; k < kc; k++) {
        const __m512 b0 = _mm512_load_ps(panel + (size_t)k * NR_AVX512);
        const __m512 b1 = _mm512_load_ps(panel + (size_t)k * NR_AVX512 + 16);
        for (int i = 0; i < M; i++) {
            const __m512 a = _mm512_set1_ps(x[(size_t)i * ldx + (size_t)k]);
            acc[i][0] = _mm512_fmadd_ps(a, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(a, b1, acc[i][1]);
        }
    }
    const __m512 s = _mm512_set1_ps(alpha);
    for (int i = 0; i < M; i++) {
        __m512 r0 = last ? _mm512_mul_ps(s, acc[i][0]) : acc[i][0];
        __m512 r1 = last ? _mm512_mul_ps(s, acc[i][1]) : acc[i][1];
        _mm512_mask_storeu_ps(y + (size_t)i * ldy, m0, r0);
        _mm512_mask_storeu_ps(y + (size_t)i * ldy + 16, m1, r1);
    }
}

F32_AVX512_TARGET static void kernel_avx512(int mr, const float *x, size_t ldx, const float *panel,
                                            int kc, float *y, size_t ldy, int nr, int first,
                                            int last, float alpha) {
#define T(M) tile_avx512(M, x, ldx, panel, kc, y, ldy, nr, first, last, alpha)
    switch (mr) {
    case 12: T(12); break;
    case 11: T(11); break;
    case 10: T(10); break;
    case 9: T(9); break;
    case 8: T(8); break;
    case 7: T(7); break;
    case 6: T(6); break;
    case 5: T(5); break;
    case 4: T(4); break;
    case 3: T(3); break;
    case 2: T(2); break;
    default: T(1); break;
    }
#undef T
}

F32_AVX2_TARGET static ALWAYS_INLINE void tile_avx2(int M, const float *x, size_t ldx,
                                                    const float *panel, int kc, float *y,
                                                    size_t ldy, int nr, int first, int last,
                                                    float alpha) {
    __m256 acc[MR_AVX2][2];
    float tmp[NR_AVX2];
    for (int i = 0; i < M; i++) {
        if (first) {
            acc[i][0] = _mm256_setzero_ps();
            acc[i][1] = _mm256_setzero_ps();
        } else if (nr == NR_AVX2) {
            acc[i][0] = _mm256_loadu_ps(y + (size_t)i * ldy);
            acc[i][1] = _mm256_loadu_ps(y + (size_t)i * ldy + 8);
        } else {
            memset(tmp, 0, sizeof tmp);
            memcpy(tmp, y + (size_t)i * ldy, (size_t)nr * sizeof(float));
            acc[i][0] = _mm256_loadu_ps(tmp);
            acc[i][1] = _mm256_loadu_ps(tmp + 8);
        }
    }
    for (int k = 0; k < kc; k++) {
        const __m256 b0 = _mm256_load_ps(panel + (size_t)k * NR_AVX2);
        const __m256 b1 = _mm256_load_ps(panel + (size_t)k * NR_AVX2 + 8);
        for (int i = 0; i < M; i++) {
            const __m256 a = _mm256_broadcast_ss(x + (size_t)i * ldx + (size_t)k);
            acc[i][0] = _mm256_fmadd_ps(a, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(a, b1, acc[i][1]);
        }
    }
    const __m256 s = _mm256_set1_ps(alpha);
    for (int i = 0; i < M; i++) {
        __m256 r0 = last ? _mm256_mul_ps(s, acc[i][0]) : acc[i][0];
        __m256 r1 = last ? _mm256_mul_ps(s, acc[i][1]) : acc[i][1];
        if (nr == NR_AVX2) {
            _mm256_storeu_ps(y + (size_t)i * ldy, r0);
            _mm256_storeu_ps(y + (size_t)i * ldy + 8, r1);
        } else {
            _mm256_storeu_ps(tmp, r0);
            _mm256_storeu_ps(tmp + 8, r1);
            memcpy(y + (size_t)i * ldy, tmp, (size_t)nr * sizeof(float));
        }
    }
}

F32_AVX2_TARGET static void kernel_avx2(int mr, const float *x, size_t ldx, const float *panel,
                                        int kc, float *y, size_t ldy, int nr, int first, int last,
                                        float alpha) {
#define T(M) tile_avx2(M, x, ldx, panel, kc, y, ldy, nr, first, last, alpha)
    switch (mr) {
    case 6: T(6); break;
    case 5: T(5); break;
    case 4: T(4); break;
    case 3: T(3); break;
    case 2: T(2); break;
    default: T(1); break;
    }
#undef T
}
#endif

typedef void (*kernel_fn)(int mr, const float *x, size_t ldx, const float *panel, int kc, float *y,
                          size_t ldy, int nr, int first, int last, float alpha);

static kernel_fn level_kernel(int level) {
#ifdef LA_X86
    if (level == CPU_F32_AVX512)
        return kernel_avx512;
    if (level == CPU_F32_AVX2)
        return kernel_avx2;
#endif
    return kernel_plain;
}

/* ---- the packed product ------------------------------------------------------------- */

typedef struct {
    const cpu_f32 *g;
    const cpu_f32_product *p;
    int split_rows; /* threads share rows of x (else panels) */
} gemm_task;

/* gemm_block runs rows [r0, r1) of x against panels [p0, p1) with thread buffer pack. */
static void gemm_block(const cpu_f32 *g, const cpu_f32_product *p, int r0, int r1, int p0, int p1,
                       float *pack) {
    const int NR = level_nr(g->level), MR = level_mr(g->level);
    const kernel_fn kern = level_kernel(g->level);
    const int group = NC / NR; /* panels per packed group */
    float *row = pack + (size_t)KC * NC;
    for (int k0 = 0; k0 < p->K; k0 += KC) {
        const int kc = p->K - k0 < KC ? p->K - k0 : KC;
        const int first = k0 == 0, last = k0 + kc == p->K;
        for (int q0 = p0; q0 < p1; q0 += group) {
            const int q1 = q0 + group < p1 ? q0 + group : p1;
            for (int q = q0; q < q1; q++) {
                const int j0 = q * NR, nr = p->N - j0 < NR ? p->N - j0 : NR;
                pack_panel(p, g->level, NR, j0, nr, k0, kc, pack + (size_t)(q - q0) * KC * NR, row);
            }
            for (int i = r0; i < r1; i += MR) {
                const int mr = r1 - i < MR ? r1 - i : MR;
                const float *x = p->x + (size_t)i * p->ldx + (size_t)k0;
                for (int q = q0; q < q1; q++) {
                    const int j0 = q * NR, nr = p->N - j0 < NR ? p->N - j0 : NR;
                    kern(mr, x, p->ldx, pack + (size_t)(q - q0) * KC * NR, kc,
                         p->y + (size_t)i * p->ldy + (size_t)j0, p->ldy, nr, first, last, p->alpha);
                }
            }
        }
    }
}

static void gemm_slice(void *arg, int thread, int nthreads) {
    const gemm_task *t = arg;
    const cpu_f32_product *p = t->p;
    const int NR = level_nr(t->g->level), MR = level_mr(t->g->level);
    const int panels = (p->N + NR - 1) / NR;
    if (t->split_rows) {
        const int blocks = (p->n + MR - 1) / MR;
        const int a = blocks * thread / nthreads * MR, b = blocks * (thread + 1) / nthreads * MR;
        if (a < p->n)
            gemm_block(t->g, p, a, b < p->n ? b : p->n, 0, panels, t->g->pack[thread]);
    } else {
        const int a = panels * thread / nthreads, b = panels * (thread + 1) / nthreads;
        if (a < b)
            gemm_block(t->g, p, 0, p->n, a, b, t->g->pack[thread]);
    }
}

/* ---- the unpacked product for short prompts ------------------------------------------
 *
 * Tiles of R weight rows x C rows of x: R x C vector sums, each weight vector widened once
 * in registers and used C times. The lanes are added up at the end, then the remainder of
 * K (fewer than a vector) element by element. */

static void small_plain(const cpu_f32_product *p, int j0, int j1) {
    const size_t es = cpu_dtype_size(p->b_dtype);
    for (int j = j0; j < j1; j++) {
        const char *b = (const char *)p->b + (size_t)j * p->ldb * es;
        for (int i = 0; i < p->n; i++) {
            const float *x = p->x + (size_t)i * p->ldx;
            float s = 0;
            switch (p->b_dtype) {
            case LA_DTYPE_F32:
                for (int k = 0; k < p->K; k++)
                    s += x[k] * ((const float *)b)[k];
                break;
            case LA_DTYPE_BF16:
                for (int k = 0; k < p->K; k++)
                    s += x[k] * cpu_bf16_to_f32(((const uint16_t *)b)[k]);
                break;
            case LA_DTYPE_F16:
                for (int k = 0; k < p->K; k++)
                    s += x[k] * cpu_f16_to_f32(((const uint16_t *)b)[k]);
                break;
            }
            p->y[(size_t)i * p->ldy + (size_t)j] = p->alpha * s;
        }
    }
}

#ifdef LA_X86
F32_AVX512_TARGET static ALWAYS_INLINE __m512 load_w16(la_dtype t, const void *b, int k) {
    switch (t) {
    case LA_DTYPE_BF16: {
        __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)b + k));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    case LA_DTYPE_F16:
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)b + k)));
    default:
        return _mm512_loadu_ps((const float *)b + k);
    }
}

F32_AVX512_TARGET static ALWAYS_INLINE __m512 load_w16_tail(la_dtype t, const void *b, int k,
                                                            __mmask16 m) {
    switch (t) {
    case LA_DTYPE_BF16: {
        __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)b + k);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    case LA_DTYPE_F16:
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)b + k));
    default:
        return _mm512_maskz_loadu_ps(m, (const float *)b + k);
    }
}

F32_AVX512_TARGET static ALWAYS_INLINE void small_tile_avx512(int R, int C, la_dtype t,
                                                              const cpu_f32_product *p, int j,
                                                              int i) {
    const size_t es = cpu_dtype_size(t);
    const void *b[4];
    __m512 acc[4][4];
    for (int r = 0; r < R; r++) {
        b[r] = (const char *)p->b + (size_t)(j + r) * p->ldb * es;
        for (int c = 0; c < C; c++)
            acc[r][c] = _mm512_setzero_ps();
    }
    const float *x = p->x + (size_t)i * p->ldx;
    int k = 0;
    for (; k + 16 <= p->K; k += 16) {
        __m512 xv[4];
        for (int c = 0; c < C; c++)
            xv[c] = _mm512_loadu_ps(x + (size_t)c * p->ldx + (size_t)k);
        for (int r = 0; r < R; r++) {
            const __m512 w = load_w16(t, b[r], k);
            for (int c = 0; c < C; c++)
                acc[r][c] = _mm512_fmadd_ps(w, xv[c], acc[r][c]);
        }
    }
    if (k < p->K) {
        const __mmask16 m = (__mmask16)((1u << (p->K - k)) - 1);
        __m512 xv[4];
        for (int c = 0; c < C; c++)
            xv[c] = _mm512_maskz_loadu_ps(m, x + (size_t)c * p->ldx + (size_t)k);
        for (int r = 0; r < R; r++) {
            const __m512 w = load_w16_tail(t, b[r], k, m);
            for (int c = 0; c < C; c++)
                acc[r][c] = _mm512_fmadd_ps(w, xv[c], acc[r][c]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            p->y[(size_t)(i + c) * p->ldy + (size_t)(j + r)] = p->alpha * _mm512_reduce_add_ps(acc[r][c]);
}

F32_AVX512_TARGET static void small_avx512(const cpu_f32_product *p, int j0, int j1) {
    const la_dtype t = p->b_dtype;
    for (int j = j0; j < j1;) {
        const int R = j1 - j >= 4 ? 4 : 1;
        for (int i = 0; i < p->n; i += 4) {
            const int C = p->n - i < 4 ? p->n - i : 4;
#define T(RR, CC)                                                                                  \
    case RR * 8 + CC:                                                                              \
        if (t == LA_DTYPE_BF16)                                                                    \
            small_tile_avx512(RR, CC, LA_DTYPE_BF16, p, j, i);                                     \
        else if (t == LA_DTYPE_F16)                                                                \
            small_tile_avx512(RR, CC, LA_DTYPE_F16, p, j, i);                                      \
        else                                                                                       \
            small_tile_avx512(RR, CC, LA_DTYPE_F32, p, j, i);                                      \
        break;
            switch (R * 8 + C) {
                T(4, 4) T(4, 3) T(4, 2) T(4, 1) T(1, 4) T(1, 3) T(1, 2) T(1, 1)
            }
#undef T
        }
        j += R;
    }
}

F32_AVX2_TARGET static ALWAYS_INLINE __m256 load_w8(la_dtype t, const void *b, int k) {
    switch (t) {
    case LA_DTYPE_BF16: {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)b + k));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    case LA_DTYPE_F16:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)b + k)));
    default:
        return _mm256_loadu_ps((const float *)b + k);
    }
}

F32_AVX2_TARGET static ALWAYS_INLINE float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

F32_AVX2_TARGET static ALWAYS_INLINE void small_tile_avx2(int R, int C, la_dtype t,
                                                          const cpu_f32_product *p, int j, int i) {
    const size_t es = cpu_dtype_size(t);
    const void *b[4];
    __m256 acc[4][3];
    for (int r = 0; r < R; r++) {
        b[r] = (const char *)p->b + (size_t)(j + r) * p->ldb * es;
        for (int c = 0; c < C; c++)
            acc[r][c] = _mm256_setzero_ps();
    }
    const float *x = p->x + (size_t)i * p->ldx;
    int k = 0;
    for (; k + 8 <= p->K; k += 8) {
        for (int r = 0; r < R; r++) {
            const __m256 w = load_w8(t, b[r], k);
            for (int c = 0; c < C; c++)
                acc[r][c] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + (size_t)c * p->ldx + (size_t)k), acc[r][c]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            float s = hsum8(acc[r][c]);
            const float *xc = x + (size_t)c * p->ldx;
            for (int kk = k; kk < p->K; kk++) {
                float w = t == LA_DTYPE_BF16  ? cpu_bf16_to_f32(((const uint16_t *)b[r])[kk])
                          : t == LA_DTYPE_F16 ? cpu_f16_to_f32(((const uint16_t *)b[r])[kk])
                                              : ((const float *)b[r])[kk];
                s += xc[kk] * w;
            }
            p->y[(size_t)(i + c) * p->ldy + (size_t)(j + r)] = p->alpha * s;
        }
}

F32_AVX2_TARGET static void small_avx2(const cpu_f32_product *p, int j0, int j1) {
    const la_dtype t = p->b_dtype;
    for (int j = j0; j < j1;) {
        const int R = j1 - j >= 4 ? 4 : 1;
        for (int i = 0; i < p->n; i += 3) {
            const int C = p->n - i < 3 ? p->n - i : 3;
#define T(RR, CC)                                                                                  \
    case RR * 8 + CC:                                                                              \
        if (t == LA_DTYPE_BF16)                                                                    \
            small_tile_avx2(RR, CC, LA_DTYPE_BF16, p, j, i);                                       \
        else if (t == LA_DTYPE_F16)                                                                \
            small_tile_avx2(RR, CC, LA_DTYPE_F16, p, j, i);                                        \
        else                                                                                       \
            small_tile_avx2(RR, CC, LA_DTYPE_F32, p, j, i);                                        \
        break;
            switch (R * 8 + C) {
                T(4, 3) T(4, 2) T(4, 1) T(1, 3) T(1, 2) T(1, 1)
            }
#undef T
        }
        j += R;
    }
}
#endif

typedef struct {
    int level;
    const cpu_f32_product *p;
} small_task;

static void small_slice(void *arg, int thread, int nthreads) {
    const small_task *t = arg;
    /* whole tiles of 4 weight rows per thread, so the split never changes a tile */
    const int tiles = (t->p->N + 3) / 4;
    int a = tiles * thread / nthreads * 4, b = tiles * (thread + 1) / nthreads * 4;
    if (b > t->p->N)
        b = t->p->N;
    if (a >= b)
        return;
#ifdef LA_X86
    if (t->level == CPU_F32_AVX512) {
        small_avx512(t->p, a, b);
        return;
    }
    if (t->level == CPU_F32_AVX2) {
        small_avx2(t->p, a, b);
        return;
    }
#endif
    small_plain(t->p, a, b);
}

/* ---- entry -------------------------------------------------------------------------- */

void cpu_f32_gemm(const cpu_f32 *g, cpu_pool *pool, const cpu_f32_product *p) {
    if (p->n <= 0 || p->N <= 0)
        return;
    if (p->K <= 0) {
        for (int i = 0; i < p->n; i++)
            memset(p->y + (size_t)i * p->ldy, 0, (size_t)p->N * sizeof(float));
        return;
    }
    /* Waking the pool costs more than a product of a few microseconds (attention of short
     * prompts, small models); those run here, as one thread's share of the whole. */
    const int alone = (double)p->n * (double)p->N * (double)p->K < (double)F32_ALONE_MACS;
    if (!p->b_kn && p->n <= g->small_rows) {
        small_task t = {g->level, p};
        if (alone)
            small_slice(&t, 0, 1);
        else
            cpu_pool_run(pool, small_slice, &t);
        return;
    }
    const int NR = level_nr(g->level), MR = level_mr(g->level);
    const int panels = (p->N + NR - 1) / NR, blocks = (p->n + MR - 1) / MR;
    /* Panels go round when every thread gets a few; otherwise rows do (each thread then
     * packs all of B, which is small in exactly that case). */
    gemm_task t = {g, p, panels < 2 * pool->nthreads && blocks > panels};
    if (alone)
        gemm_slice(&t, 0, 1);
    else
        cpu_pool_run(pool, gemm_slice, &t);
}

/* ---- probe -------------------------------------------------------------------------- */

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cpu_f32_gemm_probe(int level, int small_rows, const cpu_f32_product *p, int threads, int reps,
                       double *best) {
    char err[128];
    if (level > cpu_f32_kernel_level())
        return -1;
    *best = 0;
    if (level == CPU_F32_OPENBLAS) {
        if (p->b_kn)
            return -1;
        float *wf = malloc((size_t)p->N * (size_t)p->K * sizeof *wf);
        if (!wf)
            return -2;
        const size_t es = cpu_dtype_size(p->b_dtype);
        for (int j = 0; j < p->N; j++)
            cpu_to_f32(p->b_dtype, (const char *)p->b + (size_t)j * p->ldb * es,
                       wf + (size_t)j * (size_t)p->K, (size_t)p->K);
        for (int r = 0; r < reps; r++) {
            double t0 = now_seconds();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, p->n, p->N, p->K, p->alpha, p->x,
                        (int)p->ldx, wf, p->K, 0.0f, p->y, (int)p->ldy);
            double t = now_seconds() - t0;
            if (r == 0 || t < *best)
                *best = t;
        }
        free(wf);
        return 0;
    }
    cpu_pool pool;
    memset(&pool, 0, sizeof pool);
    cpu_f32 g;
    int rc = cpu_f32_init(&g, level, threads);
    if (rc == 0 && small_rows >= 0)
        g.small_rows = small_rows;
    if (rc != 0 || cpu_pool_init(&pool, threads, err, sizeof err) != 0) {
        cpu_f32_free(&g);
        cpu_pool_destroy(&pool);
        return -2;
    }
    for (int r = 0; r < reps; r++) {
        double t0 = now_seconds();
        cpu_f32_gemm(&g, &pool, p);
        double t = now_seconds() - t0;
        if (r == 0 || t < *best)
            *best = t;
    }
    cpu_pool_destroy(&pool);
    cpu_f32_free(&g);
    return 0;
}
