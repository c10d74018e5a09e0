/*
 * cpu_amx.c - matrix products on AMX tiles in bf16: the prefill and vision GEMMs of the
 * fast path (weights_quant=q8 on a CPU with AMX).
 *
 * Why. Prefill and the vision tower are matrix-matrix products: every weight meets
 * hundreds of activation rows, so they are bound by arithmetic, not by memory. OpenBLAS's
 * float32 kernel does 32 multiply-adds per cycle per core with AVX-512; an AMX tile
 * instruction (TDPBF16PS) multiplies a 16x32 bf16 tile by a 32x16 one into 16x16 float32
 * sums, 8192 multiply-adds, at about one per 16 cycles: 512 per cycle, measured here at
 * 1.37 TFLOP/s on one core. The price is bf16 inputs: each activation is rounded to bf16
 * (8 significant bits) before the product, as PyTorch's bf16 autocast and the chip do; the
 * sums stay float32. That is why only the fast path uses it: the default bf16 path keeps
 * float32 arithmetic and its parity with the float32 reference.
 *
 * Layout. The product is y[n, N] = x[n, K] W[N, K]^T with K padded to a multiple of 32.
 *  - The activations are rounded once per call into A tiles (twice when split, below):
 *    16 rows x 32 bf16 (1 KB),
 *    stored strip after strip (16 rows), chunk after chunk (32 columns) within a strip,
 *    rows padded with zeros to a multiple of 32 and columns to the padded K.
 *  - The weights are packed, 32 rows (one panel) at a time, into B tiles: for 16 weight
 *    rows and 32 columns, row kk of the tile holds for each weight row c the pair of
 *    columns 2kk, 2kk+1 (the pair layout TDPBF16PS reads). A panel is the weights' own
 *    bf16 values, or the q8 int8 values times their scale rounded to bf16, or float32
 *    rounded to bf16; packing reads each weight once per call.
 *  - Each thread takes a contiguous share of the panels (and of blocks of activation
 *    rows too when there are fewer panels than threads); for each panel it packs the panel
 *    (128 x K x 2 bytes, 2.8 MB at K = 11008) and walks its activation strip pairs
 *    against it in blocks of 256 columns, so the slice in use stays in L1/L2: four
 *    accumulator tiles (2 strips x 32 weight rows) at a time, two A and two B tiles
 *    loaded per chunk of 32 columns.
 *
 * Split activations (option split_activations, on by default for the image's products).
 * Rounding an activation to bf16 keeps 8 of its 24 significant bits; what the rounding
 * lost, itself rounded to bf16, keeps 8 more. round_rows can write both, the remainders
 * as rows_pad further rows, and gemm_slice then adds their products to the same sums
 * right after the rounded rows', while the panel's block is still in L1: twice the
 * multiplies, the same packing, and each sum sees the activation to about 16 bits.
 *
 * The same tiles feed the AVX512_BF16 kernel (cpu_avx512bf16.c, matmul=avx512bf16) on CPUs
 * without AMX: only the multiply of a strip pair by a panel differs (gemm_slice), so the two
 * kernels round the same inputs and sum in float32 alike.
 *
 * The kernel needs the process's permission to use the AMX tile data state, which Linux
 * grants per process on request (arch_prctl ARCH_REQ_XCOMP_PERM); cpu_amx_available asks
 * for it once per engine open and says no when the CPU or kernel lacks it, and the engine
 * then keeps OpenBLAS.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_internal.h"

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define LA_AMX 1
/* Every function here runs only after cpu_amx_available said yes, which checks all of these. */
#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16,f16c")))
#endif

enum {
    AMX_K = 32,      /* bf16 columns per tile (64 bytes) */
    AMX_ROWS = 16,   /* rows per tile */
    AMX_TILE = 512,  /* bf16 elements per tile */
    AMX_HALVES = 4,  /* pairs of B tiles per panel */
    AMX_PANEL = 32 * AMX_HALVES, /* weight rows per panel */
    AMX_STRIPS = 2,  /* activation strips per accumulator block */
    AMX_KBLOCK = 8,  /* chunks of 32 columns per pass over the activations */
};

size_t cpu_amx_kpad(int cols) { return ((size_t)cols + AMX_K - 1) / AMX_K * AMX_K; }

static size_t rows_padded(int rows) {
    const size_t step = AMX_STRIPS * AMX_ROWS;
    return ((size_t)rows + step - 1) / step * step;
}

size_t cpu_amx_act_elems(int rows, int cols, int split) {
    return (split ? 2 : 1) * rows_padded(rows) * cpu_amx_kpad(cols);
}

size_t cpu_amx_thread_bytes(int rows, int cols) {
    /* the packed panel (bf16), then the panel's float32 sums for every activation row */
    const size_t panel = (size_t)AMX_PANEL * cpu_amx_kpad(cols) * sizeof(uint16_t);
    return (panel + 63) / 64 * 64 + rows_padded(rows) * AMX_PANEL * sizeof(float);
}

#ifdef LA_AMX

#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* The tile configuration TILELOADCONFIG reads: palette 1, then bytes per row and rows of
 * each of the 16 tile registers (only 0..7 exist in palette 1). */
typedef struct {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed)) amx_config;

int cpu_amx_available(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return 0;
    const int tile = (d >> 24) & 1, bf16 = (d >> 22) & 1;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d))
        return 0;
    const int avx512bf16 = (a >> 5) & 1;
    if (!tile || !bf16 || !avx512bf16 || !__builtin_cpu_supports("avx512f") ||
        !__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512vl") ||
        !__builtin_cpu_supports("f16c"))
        return 0;
    /* Permission is per process and stays once granted; asking again is harmless. */
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0)
        return 0;
    unsigned long perm = 0;
    if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &perm) != 0)
        return 0;
    return (perm >> XFEATURE_XTILEDATA) & 1;
}

/* ---- rounding to bf16 ---------------------------------------------------------------- */

/* round32 rounds 32 floats (lo then hi) to bf16, to nearest even, as one vector. */
AMX_TARGET static inline __m512i round32(__m512 lo, __m512 hi) {
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

/* load_chunk reads the 32 columns k0..k0+31 of a weight row of the given dtype and width
 * as bf16; columns past cols are zero. */
AMX_TARGET static inline __m512i load_chunk(const char *row, la_dtype dtype, int cols, int k0) {
    const int n = cols - k0 < AMX_K ? cols - k0 : AMX_K;
    const __mmask32 m32 = n == AMX_K ? 0xffffffffu : (1u << n) - 1;
    const __mmask16 lo16 = (__mmask16)(m32 & 0xffff), hi16 = (__mmask16)(m32 >> 16);
    switch ((int)dtype) {
    case LA_DTYPE_BF16:
        return _mm512_maskz_loadu_epi16(m32, (const uint16_t *)row + k0);
    case LA_DTYPE_F32: {
        const float *f = (const float *)row + k0;
        return round32(_mm512_maskz_loadu_ps(lo16, f), _mm512_maskz_loadu_ps(hi16, f + 16));
    }
    case LA_DTYPE_F16: {
        const uint16_t *h = (const uint16_t *)row + k0;
        return round32(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(lo16, h)),
                       _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(hi16, h + 16)));
    }
    default: { /* CPU_DTYPE_Q8: cols is a whole number of blocks, so n is 32 */
        const float d = ((const float *)row)[k0 / CPU_Q8_BLOCK];
        const int8_t *q = (const int8_t *)((const float *)row + cols / CPU_Q8_BLOCK) + k0;
        const __m512 scale = _mm512_set1_ps(d);
        const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q)));
        const __m512 hi =
            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + 16))));
        return round32(_mm512_mul_ps(lo, scale), _mm512_mul_ps(hi, scale));
    }
    }
}

/* transpose16 transposes 16 vectors of 16 32-bit lanes: afterwards r[j] lane c holds what
 * r[c] lane j held. Three rounds of shuffles: pairs of lanes, pairs of pairs, then whole
 * 128-bit quarters. */
AMX_TARGET static inline void transpose16(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    /* r[4g + j], quarter L: lane 4L + j of rows 4g..4g+3 */
    for (int g = 0; g < 16; g += 4) {
        r[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
        r[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
        r[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
        r[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
    }
    for (int j = 0; j < 4; j++) {
        const __m512i even_ab = _mm512_shuffle_i32x4(r[j], r[4 + j], 0x88);
        const __m512i odd_ab = _mm512_shuffle_i32x4(r[j], r[4 + j], 0xdd);
        const __m512i even_cd = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0x88);
        const __m512i odd_cd = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0xdd);
        t[j] = _mm512_shuffle_i32x4(even_ab, even_cd, 0x88);
        t[8 + j] = _mm512_shuffle_i32x4(even_ab, even_cd, 0xdd);
        t[4 + j] = _mm512_shuffle_i32x4(odd_ab, odd_cd, 0x88);
        t[12 + j] = _mm512_shuffle_i32x4(odd_ab, odd_cd, 0xdd);
    }
    for (int i = 0; i < 16; i++)
        r[i] = t[i];
}

/* pack_panel writes weight rows r0..r0+AMX_PANEL-1 (zeros past w->rows) as B tiles at dst:
 * chunk kc, tile t (16 weight rows) at dst + (kc * 2 AMX_HALVES + t) * AMX_TILE, where row
 * kk of a tile holds, for each of its 16 weight rows c, the bf16 pair of columns 2kk and
 * 2kk+1 (one 32-bit lane). Loading 16 rows' chunks and transposing them as 32-bit lanes
 * gives exactly those tile rows. */
AMX_TARGET static void pack_panel(const cpu_matrix *w, int r0, size_t kpad, uint16_t *dst) {
    const int nkc = (int)(kpad / AMX_K);
    const size_t stride = cpu_row_bytes(w->dtype, w->cols);
    for (int t = 0; t < 2 * AMX_HALVES; t++) {
        const char *rows[AMX_ROWS];
        for (int c = 0; c < AMX_ROWS; c++) {
            const int r = r0 + t * AMX_ROWS + c;
            rows[c] = r < w->rows ? (const char *)w->data + (size_t)r * stride : NULL;
        }
        for (int kc = 0; kc < nkc; kc++) {
            __m512i v[AMX_ROWS];
            for (int c = 0; c < AMX_ROWS; c++)
                v[c] = rows[c] ? load_chunk(rows[c], w->dtype, w->cols, kc * AMX_K)
                               : _mm512_setzero_si512();
            transpose16(v);
            uint16_t *tile = dst + ((size_t)kc * 2 * AMX_HALVES + (size_t)t) * AMX_TILE;
            for (int kk = 0; kk < AMX_ROWS; kk++)
                _mm512_store_si512(tile + kk * AMX_K, v[kk]);
        }
    }
}

/* ---- the activations --------------------------------------------------------------- */

typedef struct {
    const float *x;
    int n, cols;
    size_t kpad, rows_pad;
    int split; /* also write each row's remainder, rows_pad rows further on */
    uint16_t *dst;
} round_task;

/* residual16 is x minus x rounded to bf16 (to nearest even, as round32 rounds): what the
 * rounding lost, exact in float32. For normal x: round32 flushes a denormal to zero, where
 * this keeps its rounding, so the pair carries about 0 for it (activations that small
 * contribute nothing either way). */
AMX_TARGET static inline __m512 residual16(__m512 x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i up = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), odd);
    const __m512 hi = _mm512_castsi512_ps(_mm512_and_si512(up, _mm512_set1_epi32((int)0xffff0000u)));
    return _mm512_sub_ps(x, hi);
}

/* round_rows writes activation rows [lo, hi) (zeros past n) into their A tiles: row m
 * rounded to bf16 at row m and, when split, what that rounding lost, itself rounded to
 * bf16, at row rows_pad + m. The two together carry 16 significant bits of each
 * activation instead of 8. */
AMX_TARGET static void round_rows(void *arg, size_t lo, size_t hi) {
    const round_task *t = arg;
    const int nkc = (int)(t->kpad / AMX_K);
    const size_t strip_elems = (size_t)nkc * AMX_TILE;
    for (size_t m = lo; m < hi; m++) {
        uint16_t *strip = t->dst + (m / AMX_ROWS) * strip_elems + (m % AMX_ROWS) * AMX_K;
        uint16_t *rest = strip + (t->rows_pad / AMX_ROWS) * strip_elems;
        const float *row = t->x + m * (size_t)t->cols;
        for (int kc = 0; kc < nkc; kc++) {
            __m512i v = _mm512_setzero_si512(), r = v;
            if ((int)m < t->n) {
                const int k0 = kc * AMX_K, n = t->cols - k0 < AMX_K ? t->cols - k0 : AMX_K;
                const uint32_t m32 = n == AMX_K ? 0xffffffffu : (1u << n) - 1;
                const __m512 a = _mm512_maskz_loadu_ps((__mmask16)(m32 & 0xffff), row + k0);
                const __m512 b = _mm512_maskz_loadu_ps((__mmask16)(m32 >> 16), row + k0 + 16);
                v = round32(a, b);
                if (t->split)
                    r = round32(residual16(a), residual16(b));
            }
            _mm512_storeu_si512(strip + (size_t)kc * AMX_TILE, v);
            if (t->split)
                _mm512_storeu_si512(rest + (size_t)kc * AMX_TILE, r);
        }
    }
}

/* ---- the product ------------------------------------------------------------------- */

typedef struct {
    const cpu_matrix *w;
    const uint16_t *a; /* A tiles */
    int n;
    size_t kpad, rows_pad;
    int split; /* a holds each row's rounding remainder too, rows_pad rows on (round_rows) */
    void **scratch; /* one cpu_amx_thread_bytes buffer per thread */
    float *y;
    size_t ldy;
    cpu_matmul kind; /* CPU_MATMUL_AMX or CPU_MATMUL_AVX512BF16: what multiplies the tiles */
} gemm_task;

/* multiply_panel adds, for activation rows m0..m0+31 and the panel's tile pair h, the
 * products of chunks kc0..kc1-1 to the sums at acc (AMX_PANEL floats a row), starting from
 * zero when first. */
AMX_TARGET static inline void multiply_pair(const uint16_t *a0, const uint16_t *a1,
                                            const uint16_t *panel, int h, int kc0, int kc1,
                                            float *acc, int first) {
    const long ld = AMX_PANEL * sizeof(float);
    float *c00 = acc + h * 2 * AMX_ROWS, *c10 = c00 + AMX_ROWS * AMX_PANEL;
    if (first) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    } else {
        _tile_loadd(0, c00, ld);
        _tile_loadd(1, c00 + AMX_ROWS, ld);
        _tile_loadd(2, c10, ld);
        _tile_loadd(3, c10 + AMX_ROWS, ld);
    }
    for (int kc = kc0; kc < kc1; kc++) {
        const uint16_t *b = panel + ((size_t)kc * 2 * AMX_HALVES + 2 * (size_t)h) * AMX_TILE;
        _tile_loadd(4, a0 + (size_t)kc * AMX_TILE, 64);
        _tile_loadd(5, a1 + (size_t)kc * AMX_TILE, 64);
        _tile_loadd(6, b, 64);
        _tile_loadd(7, b + AMX_TILE, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, c00, ld);
    _tile_stored(1, c00 + AMX_ROWS, ld);
    _tile_stored(2, c10, ld);
    _tile_stored(3, c10 + AMX_ROWS, ld);
}

/* gemm_slice computes this thread's share of the work. The work is panels times blocks of
 * activation rows: one block per panel when there are panels enough for every thread,
 * more when there are not (a k or v projection has two panels), so that every thread has
 * some; a thread takes a contiguous run of (panel, block) items and packs a panel once
 * for the items of it that it holds. Each output element is one item's, summed in one
 * order, so the thread count never changes a result. For each item the columns are taken
 * in blocks of AMX_KBLOCK chunks so that the block's slice of the panel (AMX_PANEL x 256
 * bf16, 64 KB) and of one strip pair (16 KB) stay in L1/L2 while every strip pair and
 * every tile pair of the panel meet them; the float32 sums wait in the thread's scratch
 * between column blocks. */
AMX_TARGET static void gemm_slice(void *arg, int thread, int nthreads) {
    const gemm_task *g = arg;
    const int N = g->w->rows, npanels = (N + AMX_PANEL - 1) / AMX_PANEL;
    const int pairs = (int)(g->rows_pad / (AMX_STRIPS * AMX_ROWS)); /* strip pairs */
    int blocks = (2 * nthreads + npanels - 1) / npanels; /* row blocks per panel */
    blocks = blocks < 1 ? 1 : blocks > pairs ? pairs : blocks;
    const int64_t items = (int64_t)npanels * blocks;
    const int64_t i0 = items * thread / nthreads, i1 = items * (thread + 1) / nthreads;
    if (i0 >= i1)
        return;
    const int nkc = (int)(g->kpad / AMX_K);
    const size_t strip_elems = (size_t)nkc * AMX_TILE;
    uint16_t *panel = g->scratch[thread];
    const size_t panel_bytes = ((size_t)AMX_PANEL * g->kpad * sizeof(uint16_t) + 63) / 64 * 64;
    float *acc = (float *)((char *)panel + panel_bytes);

    const int amx = g->kind == CPU_MATMUL_AMX;
    if (amx) {
        amx_config cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.palette = 1;
        for (int t = 0; t < 8; t++) {
            cfg.rows[t] = AMX_ROWS;
            cfg.colsb[t] = 64;
        }
        _tile_loadconfig(&cfg);
    }
    int packed = -1;
    for (int64_t it = i0; it < i1; it++) {
        const int p = (int)(it / blocks), blk = (int)(it % blocks);
        const int c0 = p * AMX_PANEL;
        /* rows of this block: whole strip pairs, clipped to the n rows that exist */
        const int m_lo = (int)((int64_t)pairs * blk / blocks) * AMX_STRIPS * AMX_ROWS;
        int m_hi = (int)((int64_t)pairs * (blk + 1) / blocks) * AMX_STRIPS * AMX_ROWS;
        m_hi = m_hi < g->n ? m_hi : g->n;
        if (m_lo >= m_hi)
            continue;
        if (p != packed) {
            pack_panel(g->w, c0, g->kpad, panel);
            packed = p;
        }
        for (int kc0 = 0; kc0 < nkc; kc0 += AMX_KBLOCK) {
            const int kc1 = kc0 + AMX_KBLOCK < nkc ? kc0 + AMX_KBLOCK : nkc;
            for (size_t m0 = (size_t)m_lo; (int)m0 < m_hi; m0 += AMX_STRIPS * AMX_ROWS) {
                /* the rounded rows, then (split) their remainders added to the same sums
                 * while this block of the panel is still in L1 */
                for (int part = 0; part <= g->split; part++) {
                    const size_t m = m0 + (size_t)part * g->rows_pad;
                    const uint16_t *a0 = g->a + (m / AMX_ROWS) * strip_elems;
                    const int first = kc0 == 0 && part == 0;
                    if (!amx) {
                        cpu_avx512bf16_multiply(a0, strip_elems, panel, kc0, kc1,
                                                acc + m0 * AMX_PANEL, m_hi - (int)m0, first);
                        continue;
                    }
                    for (int h = 0; h < AMX_HALVES; h++)
                        multiply_pair(a0, a0 + strip_elems, panel, h, kc0, kc1,
                                      acc + m0 * AMX_PANEL, first);
                }
            }
        }
        const int cols = N - c0 < AMX_PANEL ? N - c0 : AMX_PANEL;
        for (int m = m_lo; m < m_hi; m++)
            memcpy(g->y + (size_t)m * g->ldy + (size_t)c0, acc + (size_t)m * AMX_PANEL,
                   (size_t)cols * sizeof(float));
    }
    if (amx)
        _tile_release(); /* the tile state is large; a released one is not saved on switches */
}

int cpu_bf16_matmul_available(cpu_matmul kind) {
    switch (kind) {
    case CPU_MATMUL_AMX:
        return cpu_amx_available();
    case CPU_MATMUL_AVX512BF16:
        return cpu_avx512bf16_available();
    default:
        return 0;
    }
}

void cpu_amx_gemm_wt(cpu_matmul kind, int split, cpu_pool *pool, uint16_t *act, void **scratch,
                     const float *x, int n, const cpu_matrix *w, float *y) {
    const size_t kpad = cpu_amx_kpad(w->cols);
    const size_t rows_pad = rows_padded(n);
    round_task r = {x, n, w->cols, kpad, rows_pad, split, act};
    cpu_pool_for(pool, rows_pad, round_rows, &r);
    gemm_task g = {w, act, n, kpad, rows_pad, split, scratch, y, (size_t)w->rows, kind};
    cpu_pool_run(pool, gemm_slice, &g);
}

/* gemm_here is cpu_amx_gemm_wt on the calling thread alone, into rows ldy floats apart. */
static void gemm_here(cpu_matmul kind, uint16_t *act, void *scratch, const float *x, int n,
                      const cpu_matrix *w, float *y, size_t ldy) {
    const size_t kpad = cpu_amx_kpad(w->cols);
    const size_t rows_pad = rows_padded(n);
    round_task r = {x, n, w->cols, kpad, rows_pad, 0, act};
    round_rows(&r, 0, rows_pad);
    void *one[1] = {scratch};
    gemm_task g = {w, act, n, kpad, rows_pad, 0, one, y, ldy, kind};
    gemm_slice(&g, 0, 1);
}

/* ---- attention --------------------------------------------------------------------- */

typedef struct {
    la_engine *e;
    const cpu_attn *a;
} attn_task;

/* attend_heads runs this thread's share of (head, block of query rows) items, a
 * contiguous run in head order, so a thread holds few heads and the heads of one key/value
 * group come together. For each group it meets, the group's keys are copied contiguous
 * ([n_k, hd]) and its values transposed ([hd, n_k]), so that both products are "x W^T"
 * products of the kind above; then per item: the rows times 1/sqrt(hd) copied contiguous,
 * scores = Q K^T on AMX, the softmax (masked past each row's position when causal: those
 * probabilities are zero), out = P V on AMX. Keys past a block's last position under a
 * causal mask take part as zeros, which keeps the value matrix one shape for every block. */
static void attend_heads(void *arg, int thread, int nthreads) {
    const attn_task *t = arg;
    const cpu_attn *a = t->a;
    cpu_amx_attn_buffers *b = &t->e->s.amx_attn[thread];
    const int hd = a->head_dim, group = a->heads / a->kv_heads, n_k = a->n_k;
    const float scale = 1.0f / sqrtf((float)hd);
    const int chunk = t->e->attn_chunk, qblocks = (a->n_q + chunk - 1) / chunk;
    const int64_t items = (int64_t)a->heads * qblocks;
    const int64_t i0 = items * thread / nthreads, i1 = items * (thread + 1) / nthreads;
    const cpu_matrix km = {b->k, LA_DTYPE_F32, n_k, hd};
    const cpu_matrix vm = {b->vt, LA_DTYPE_F32, hd, n_k};
    int copied = -1; /* the key/value group now in b->k and b->vt */
    for (int64_t it = i0; it < i1; it++) {
        const int h = (int)(it / qblocks), r0 = (int)(it % qblocks) * chunk;
        const int g = h / group;
        if (g != copied) {
            for (int j = 0; j < n_k; j++) {
                const float *kr = a->k + (size_t)j * a->ldkv + (size_t)g * hd;
                const float *vr = a->v + (size_t)j * a->ldkv + (size_t)g * hd;
                memcpy(b->k + (size_t)j * hd, kr, (size_t)hd * sizeof(float));
                for (int d = 0; d < hd; d++)
                    b->vt[(size_t)d * n_k + j] = vr[d];
            }
            copied = g;
        }
        const int rows = a->n_q - r0 < chunk ? a->n_q - r0 : chunk;
        for (int i = 0; i < rows; i++) {
            const float *qr = a->q + (size_t)(r0 + i) * a->ldq + (size_t)h * hd;
            for (int d = 0; d < hd; d++)
                b->q[(size_t)i * hd + d] = qr[d] * scale;
        }
        gemm_here(t->e->matmul, b->act, b->scratch, b->q, rows, &km, b->scores, (size_t)n_k);
        for (int i = 0; i < rows; i++) {
            float *row = b->scores + (size_t)i * n_k;
            int valid = n_k;
            if (a->causal && a->q_offset + r0 + i + 1 < valid)
                valid = a->q_offset + r0 + i + 1;
            t->e->kern.softmax(row, valid);
            memset(row + valid, 0, (size_t)(n_k - valid) * sizeof *row);
        }
        gemm_here(t->e->matmul, b->act, b->scratch, b->scores, rows, &vm, b->out, (size_t)hd);
        for (int i = 0; i < rows; i++)
            memcpy(a->out + (size_t)(r0 + i) * a->ldo + (size_t)h * hd, b->out + (size_t)i * hd,
                   (size_t)hd * sizeof(float));
    }
}

void cpu_amx_attention(la_engine *e, const cpu_attn *a) {
    attn_task t = {e, a};
    cpu_pool_run(&e->pool, attend_heads, &t);
}

#else /* no AMX on this architecture */

int cpu_amx_available(void) { return 0; }

int cpu_bf16_matmul_available(cpu_matmul kind) {
    (void)kind;
    return 0; /* the tile packing is x86-64 Linux code */
}

void cpu_amx_gemm_wt(cpu_matmul kind, int split, cpu_pool *pool, uint16_t *act, void **scratch,
                     const float *x, int n, const cpu_matrix *w, float *y) {
    (void)kind, (void)split, (void)pool, (void)act, (void)scratch, (void)x, (void)n, (void)w, (void)y;
    abort(); /* never called: cpu_amx_available said no */
}

void cpu_amx_attention(la_engine *e, const cpu_attn *a) {
    (void)e, (void)a;
    abort(); /* never called: cpu_amx_available said no */
}

#endif

/* ---- probe for tests --------------------------------------------------------------- */

int cpu_amx_gemm_probe(cpu_matmul kind, int split, la_dtype dtype, const void *w, int rows,
                       int cols, const float *x, int n, float *y, int threads, int reps,
                       double *best) {
    if (!cpu_bf16_matmul_available(kind))
        return -1;
    char err[LA_ERR_LEN];
    cpu_pool pool;
    if (cpu_pool_init(&pool, threads, err, sizeof err) != 0)
        return -2;
    const size_t tb = (cpu_amx_thread_bytes(n, cols) + 63) / 64 * 64;
    uint16_t *act = aligned_alloc(64, (cpu_amx_act_elems(n, cols, split) * sizeof(uint16_t) + 63) / 64 * 64);
    void **scratch = calloc((size_t)threads, sizeof *scratch);
    int ok = act && scratch;
    for (int i = 0; ok && i < threads; i++)
        ok = (scratch[i] = aligned_alloc(64, tb)) != NULL;
    *best = 0;
    for (int r = 0; ok && r < reps; r++) { /* the pool and buffers are made once, as in an engine */
        const cpu_matrix m = {w, dtype, rows, cols};
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        cpu_amx_gemm_wt(kind, split, &pool, act, scratch, x, n, &m, y);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        const double dt = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        if (r == 0 || dt < *best)
            *best = dt;
    }
    for (int i = 0; scratch && i < threads; i++)
        free(scratch[i]);
    free(scratch);
    free(act);
    cpu_pool_destroy(&pool);
    return ok ? 0 : -2;
}
