/*
 * cpu_avx512bf16.c - the fast path's prefill and vision products on CPUs without AMX:
 * VDPBF16PS (AVX512_BF16) on the very tiles cpu_amx.c packs (matmul=avx512bf16).
 *
 * Why. AMD's Zen 4 and Zen 5 and Intel's Cooper Lake have AVX512_BF16 but no AMX. Its dot
 * instruction VDPBF16PS multiplies 16 pairs of bf16 by 16 pairs of bf16 and adds each
 * lane's two products to a float32 sum: 32 multiply-adds per instruction, twice what a
 * float32 FMA does per vector. It wants the same inputs as AMX (activations rounded to
 * bf16 once per call, or split in two bf16 rows, weights as bf16) and keeps float32 sums,
 * so the fast path computes the same products whichever of the two a CPU has, with the
 * AMX path's accuracy.
 *
 * Layout. Everything but the multiply is cpu_amx.c's: the activations rounded into A tiles
 * (16 rows x 32 bf16, strip after strip), the weights packed one panel of 128 rows at a
 * time into B tiles, whose row kk holds for each of 16 weight rows the bf16 pair of
 * columns 2kk and 2kk+1: exactly the vector VDPBF16PS wants beside a broadcast pair of one
 * activation row. So one tile row of B times the same pair of 8 activation rows, broadcast
 * one at a time, updates 8 x 16 sums; three tiles (48 weight rows) side by side keep 24
 * accumulators in registers, the instruction's latency covered by their independence.
 *
 * Sum order. Each output's sum runs over the column pairs in order, from 0 (or from the
 * sums kept in the thread's scratch between column blocks) up: the same order whatever the
 * thread count or the rows beside it, as on AMX.
 */
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

#define BF16DP_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

int cpu_avx512bf16_available(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d))
        return 0;
    /* __builtin_cpu_supports also checks that the OS saves the AVX-512 state */
    return ((a >> 5) & 1) && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("f16c");
}

enum {
    DP_PAIRS = 16,  /* column pairs per tile chunk (32 bf16) */
    DP_ROWS = 8,    /* activation rows per register block */
    DP_TILES = 8,   /* B tiles (16 weight rows each) per panel */
    DP_STRIP = 16,  /* rows per A strip */
    DP_PANEL = 128, /* weight rows per panel, floats per row of sums */
};

/* broadcast_pair reads the two bf16 at p as one 32-bit lane repeated 16 times. */
BF16DP_TARGET static inline __m512bh broadcast_pair(const uint16_t *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return (__m512bh)_mm512_set1_epi32(v);
}

/* block computes, for the 8 activation rows whose tile rows start at a (row i at a + 32 i
 * in each chunk's tile) and the nt B tiles from tile t0 of the panel, the sums of chunks
 * kc0..kc1-1, added to acc (row i at acc + i DP_PANEL, tile t at column 16 t), or from zero
 * when first. nt is a constant at each call, so the loops unroll into registers. */
BF16DP_TARGET static inline __attribute__((always_inline)) void
block(const uint16_t *a, const uint16_t *panel, int t0, const int nt, int kc0, int kc1,
      float *acc, int first) {
    __m512 s[DP_ROWS][3];
#pragma GCC unroll 8
    for (int i = 0; i < DP_ROWS; i++)
#pragma GCC unroll 3
        for (int j = 0; j < nt; j++)
            s[i][j] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + i * DP_PANEL + (t0 + j) * 16);
    for (int kc = kc0; kc < kc1; kc++) {
        const uint16_t *ak = a + (size_t)kc * DP_STRIP * 2 * DP_PAIRS;
        const uint16_t *bk = panel + ((size_t)kc * DP_TILES + (size_t)t0) * DP_STRIP * 2 * DP_PAIRS;
        for (int kk = 0; kk < DP_PAIRS; kk++) {
            __m512bh b[3];
#pragma GCC unroll 3
            for (int j = 0; j < nt; j++)
                b[j] = (__m512bh)_mm512_load_si512(bk + (size_t)j * DP_STRIP * 2 * DP_PAIRS + kk * 2 * DP_PAIRS);
#pragma GCC unroll 8
            for (int i = 0; i < DP_ROWS; i++) {
                const __m512bh x = broadcast_pair(ak + i * 2 * DP_PAIRS + 2 * kk);
#pragma GCC unroll 3
                for (int j = 0; j < nt; j++)
                    s[i][j] = _mm512_dpbf16_ps(s[i][j], x, b[j]);
            }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < DP_ROWS; i++)
#pragma GCC unroll 3
        for (int j = 0; j < nt; j++)
            _mm512_storeu_ps(acc + i * DP_PANEL + (t0 + j) * 16, s[i][j]);
}

BF16DP_TARGET void cpu_avx512bf16_multiply(const uint16_t *a0, size_t strip_elems,
                                           const uint16_t *panel, int kc0, int kc1, float *acc,
                                           int rows, int first) {
    /* tiles 0-2, 3-5 and 6-7; for each, the row blocks that hold a row below rows, so the
     * group's B slice (48 x 256 bf16 at most) stays in L1 while the rows pass */
    for (int t0 = 0; t0 < DP_TILES; t0 += 3)
        for (int r = 0; r < 2 * DP_STRIP && r < rows; r += DP_ROWS) {
            const uint16_t *a = a0 + (size_t)(r / DP_STRIP) * strip_elems + (size_t)(r % DP_STRIP) * 2 * DP_PAIRS;
            float *c = acc + (size_t)r * DP_PANEL;
            if (t0 + 3 <= DP_TILES)
                block(a, panel, t0, 3, kc0, kc1, c, first);
            else
                block(a, panel, t0, 2, kc0, kc1, c, first);
        }
}

#else /* not x86-64 */

int cpu_avx512bf16_available(void) { return 0; }

void cpu_avx512bf16_multiply(const uint16_t *a0, size_t strip_elems, const uint16_t *panel,
                             int kc0, int kc1, float *acc, int rows, int first) {
    (void)a0, (void)strip_elems, (void)panel, (void)kc0, (void)kc1, (void)acc, (void)rows, (void)first;
    abort(); /* never called: cpu_avx512bf16_available said no */
}

#endif
