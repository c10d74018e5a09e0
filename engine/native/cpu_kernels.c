/*
 * cpu_kernels.c - element conversion, the vectorised batched matrix-vector products behind
 * every decode step, the token-probability sum, and the small dense helpers (norms,
 * activations, softmax).
 *
 * Decode reads every weight once per step, so at small batches it is bound by memory
 * bandwidth: the kernels stream the checkpoint's own bf16/f16/f32 rows (from the resident
 * copy or the mapping) and widen them to float32 in registers (bf16 -> f32 is a 16-bit
 * shift), then apply each widened vector to every sequence of the step. They accumulate
 * in float32 with FMA. AVX512_BF16's dot instruction is deliberately not used: it would
 * round the activations to bf16 too, and the backend must match the float32 reference.
 *
 * The instruction set is chosen at run time (__builtin_cpu_supports) and each kernel
 * carries its own target attribute, so one binary built for x86-64-v2 runs everywhere and
 * still uses AVX-512 where it exists (cgo refuses -mfma in CFLAGS anyway).
 */
#include <math.h>
#include <string.h>

#include "cpu_internal.h"
#include "cpu_tiles.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define LA_X86 1
#endif

/* ---- element conversion ------------------------------------------------------------- */

float cpu_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

float cpu_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    uint32_t bits;
    if (exp == 0x1f) { /* inf / nan */
        bits = sign | 0x7f800000u | (mant << 13);
    } else if (exp != 0) { /* normal */
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    } else if (mant == 0) { /* zero */
        bits = sign;
    } else { /* subnormal: renormalise */
        int e = -1;
        do {
            e++;
            mant <<= 1;
        } while ((mant & 0x400) == 0);
        bits = sign | ((uint32_t)(112 - e) << 23) | ((mant & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

size_t cpu_dtype_size(la_dtype t) {
    switch (t) {
    case LA_DTYPE_F32:
        return 4;
    case LA_DTYPE_F16:
    case LA_DTYPE_BF16:
        return 2;
    }
    return 0;
}

void cpu_to_f32(la_dtype t, const void *src, float *dst, size_t n) {
    switch (t) {
    case LA_DTYPE_F32:
        memcpy(dst, src, n * sizeof(float));
        break;
    case LA_DTYPE_BF16: {
        /* The same bits as cpu_bf16_to_f32, written as an integer shift so the compiler
         * vectorises it: widening runs over every GEMM weight on every prefill. */
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++) {
            uint32_t bits = (uint32_t)s[i] << 16;
            memcpy(&dst[i], &bits, sizeof bits);
        }
        break;
    }
    case LA_DTYPE_F16: {
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++)
            dst[i] = cpu_f16_to_f32(s[i]);
        break;
    }
    }
}

/* ---- batched matrix-vector products ------------------------------------------------
 *
 * Every decode product is y[c] = W x[c] for the c < nx sequences of one step: nx = 1 for a
 * sequence decoded alone, up to max_batch in a batch. Decode is bound by reading W, so a
 * batch should read each weight row from memory once and apply it to every sequence.
 *
 * Batching must never change a sequence's numbers. So each (weight row, sequence) dot
 * product has one fixed recipe, whatever else is computed next to it: a single float32
 * vector accumulator fed fused multiply-adds along the row in a fixed order (one per
 * vector width of elements; bf16 on AVX-512 in blocks of 32, see tile_avx512), the last
 * partial vector masked (AVX-512) or added element by element after the lanes are summed
 * (AVX2, plain C). The kernels compute tiles of R weight rows x C sequences
 * (R x C accumulators live in registers): a weight vector is loaded and widened once per
 * tile and used C times, an activation vector loaded once and used R times. The tile
 * shape only decides which independent dot products run side by side, never how any one
 * of them is summed, so a batch of one and a batch of sixteen give the same bits for the
 * same sequence. The batch-1 product is simply the nx = 1 case.
 *
 * A tile's R weight rows (R x cols elements, 16 KB for 4 rows of 2048 bf16) stay in L1/L2
 * while the kernel walks the groups of C sequences, so DRAM sees each weight row once. */

/* Tile shapes: R weight rows (single rows only at the end of a range) x up to C sequences.
 * AVX-512: 16 accumulators + 8 activations (bf16 pairs, below) + 2 widened weights of
 * the 32 zmm registers. AVX2: 8 accumulators + 4 weights + 1 activation of the 16 ymm
 * registers. */
enum {
    TILE_R_LIMIT = 4, /* the most rows of any tile, for the accumulator arrays */
    TILE_C_LIMIT = 4, /* the most sequences per tile that TILE_WALK instantiates */
    TILE_R_AVX512 = 4,
    TILE_C_AVX512 = 4,
    TILE_R_AVX2 = 4,
    TILE_C_AVX2 = 2,
    TILE_R_PLAIN = 4,
    TILE_C_PLAIN = 4,
};

/* ---- plain C ---------------------------------------------------------------------- */

#define ALWAYS_INLINE inline __attribute__((always_inline))

static ALWAYS_INLINE float load1_plain(const void *w, la_dtype t, size_t i) {
    switch (t) {
    case LA_DTYPE_BF16:
        return cpu_bf16_to_f32(((const uint16_t *)w)[i]);
    case LA_DTYPE_F16:
        return cpu_f16_to_f32(((const uint16_t *)w)[i]);
    default:
        return ((const float *)w)[i];
    }
}

/* tile_plain: s = 0; s += w[i] * x[i] for i in order (a multiply then an add: the
 * package is built without FMA contraction). R and C are constants after inlining. */
static ALWAYS_INLINE void tile_plain(la_dtype t, const void *w, size_t ldw, int n, const float *x,
                                     size_t ldx, float *y, size_t ldy, const int R, const int C) {
    float acc[TILE_R_LIMIT][TILE_C_LIMIT];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            acc[r][c] = 0;
    for (int i = 0; i < n; i++) {
        float wv[TILE_R_LIMIT];
        for (int r = 0; r < R; r++)
            wv[r] = load1_plain(w, t, (size_t)r * ldw + (size_t)i);
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

_Static_assert(TILE_C_LIMIT == 4 && TILE_C_AVX512 <= TILE_C_LIMIT && TILE_C_AVX2 <= TILE_C_LIMIT &&
                   TILE_C_PLAIN <= TILE_C_LIMIT,
               "TILE_WALK instantiates tiles of 1 to 4 sequences");
_Static_assert(TILE_R_AVX512 <= TILE_R_LIMIT && TILE_R_AVX2 <= TILE_R_LIMIT &&
                   TILE_R_PLAIN <= TILE_R_LIMIT && TILE_R_AVX2 > 1 && TILE_R_AVX512 > 1 &&
                   TILE_R_PLAIN > 1,
               "tiles have more than one row (TILE_WALK's cases R * 16 + C and 16 + C must differ)");

#define ROWS_FN(NAME, TILE, RMAX, CMAX, DTYPE, ATTR)                                           \
    ATTR static void NAME(const void *w, size_t ldw, int rows, int n, const float *x,          \
                          size_t ldx, int nx, float *y, size_t ldy) {                          \
        TILE_WALK(TILE, RMAX, CMAX, DTYPE, w, ldw, rows, n, x, ldx, nx, y, ldy);               \
    }

ROWS_FN(rows_f32_plain, tile_plain, TILE_R_PLAIN, TILE_C_PLAIN, LA_DTYPE_F32, )
ROWS_FN(rows_f16_plain, tile_plain, TILE_R_PLAIN, TILE_C_PLAIN, LA_DTYPE_F16, )
ROWS_FN(rows_bf16_plain, tile_plain, TILE_R_PLAIN, TILE_C_PLAIN, LA_DTYPE_BF16, )

static void axpy_plain(float *y, float a, const float *x, int n) {
    for (int i = 0; i < n; i++)
        y[i] += a * x[i];
}

static void swiglu_plain(float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i++)
        gate[i] = cpu_silu(gate[i]) * up[i];
}

static void gelu_tanh_plain(float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        x[i] = cpu_gelu_tanh(x[i]);
}

static double expsum_plain(const float *x, int n, float m) {
    double s = 0;
    for (int i = 0; i < n; i++)
        s += exp((double)(x[i] - m));
    return s;
}

#ifdef LA_X86
/* ---- AVX-512 ---------------------------------------------------------------------- */
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,f16c,fma")))

enum { PREFETCH_TILES = 4 };

AVX512 static ALWAYS_INLINE __m512 bf16x16_to_f32(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* load16_avx512 widens 16 weights at element i to float32. */
AVX512 static ALWAYS_INLINE __m512 load16_avx512(la_dtype t, const void *w, size_t i) {
    switch (t) {
    case LA_DTYPE_BF16:
        return bf16x16_to_f32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i)));
    case LA_DTYPE_F16:
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i)));
    default:
        return _mm512_loadu_ps((const float *)w + i);
    }
}

/* load16_masked_avx512 is load16_avx512 for the last partial vector: lanes outside m
 * read nothing and hold zero. */
AVX512 static ALWAYS_INLINE __m512 load16_masked_avx512(la_dtype t, const void *w, size_t i,
                                                        __mmask16 m) {
    switch (t) {
    case LA_DTYPE_BF16:
        return bf16x16_to_f32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)w + i));
    case LA_DTYPE_F16:
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)w + i));
    default:
        return _mm512_maskz_loadu_ps(m, (const float *)w + i);
    }
}

/* bf16 pairs. At many sequences the kernel is bound by the two vector ports that do both
 * the FMAs and the widening (a zero-extension and a shift per 16 weights), so bf16 rows
 * are widened two elements at a time: 32 bf16 are 16 dwords, and a shift left by 16 gives
 * the even elements as float32 while clearing the low halves gives the odd ones, one
 * operation per 16 weights. The activations must then come even elements first:
 * pack_pairs_avx512 reorders every whole block of 32 of them (the remaining n % 32 keep
 * their order), once per product, for all rows of the step. */
AVX512 static void pack_pairs_avx512(const float *x, size_t ldx, int n, int nx, float *dst) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (int c = 0; c < nx; c++) {
        const float *s = x + (size_t)c * ldx;
        float *d = dst + (size_t)c * ldx;
        int i = 0;
        for (; i + 32 <= n; i += 32) {
            const __m512 lo = _mm512_loadu_ps(s + i), hi = _mm512_loadu_ps(s + i + 16);
            _mm512_storeu_ps(d + i, _mm512_permutex2var_ps(lo, even, hi));
            _mm512_storeu_ps(d + i + 16, _mm512_permutex2var_ps(lo, odd, hi));
        }
        for (; i < n; i++)
            d[i] = s[i];
    }
}

/* tile_avx512 also prefetches into L2 the rows PREFETCH_TILES tiles ahead, one cache line
 * of each per line it reads: the hardware prefetcher starts each 4 KB page (one 2048-wide
 * bf16 row) over, and at many sequences, when the kernel computes far longer per line
 * than DRAM takes to deliver it, the reads must still be in flight well before they are
 * needed. Four tiles (64 KB of 2048-wide bf16 rows) ahead into L2 measured about 10%
 * faster at 8 sequences than the next tile into L1. A prefetch never faults, so the last
 * tiles may point it past the matrix.
 *
 * The recipe of one dot product: bf16 rows take every whole block of 32 as two FMAs (even
 * elements, then odd ones, against activations packed by pack_pairs_avx512); then every
 * dtype takes whole vectors of 16 in order and a masked last vector. */
AVX512 static ALWAYS_INLINE void tile_avx512(la_dtype t, const void *w, size_t ldw, int n,
                                             const float *x, size_t ldx, float *y, size_t ldy,
                                             const int R, const int C) {
    const size_t es = cpu_dtype_size(t);
    const char *ahead = (const char *)w + (size_t)(PREFETCH_TILES * R) * ldw * es;
    __m512 acc[TILE_R_LIMIT][TILE_C_LIMIT];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            acc[r][c] = _mm512_setzero_ps();
    int i = 0;
    if (t == LA_DTYPE_BF16) {
        const __m512i high = _mm512_set1_epi32((int)0xffff0000u);
        for (; i + 32 <= n; i += 32) {
            for (int r = 0; r < R; r++)
                _mm_prefetch(ahead + ((size_t)r * ldw + (size_t)i) * es, _MM_HINT_T1);
            __m512 xe[TILE_C_LIMIT], xo[TILE_C_LIMIT];
            for (int c = 0; c < C; c++) {
                xe[c] = _mm512_loadu_ps(x + (size_t)c * ldx + (size_t)i);
                xo[c] = _mm512_loadu_ps(x + (size_t)c * ldx + (size_t)i + 16);
            }
            for (int r = 0; r < R; r++) {
                const __m512i v = _mm512_loadu_si512((const uint16_t *)w + (size_t)r * ldw + (size_t)i);
                const __m512 we = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
                const __m512 wo = _mm512_castsi512_ps(_mm512_and_si512(v, high));
                for (int c = 0; c < C; c++) {
                    acc[r][c] = _mm512_fmadd_ps(we, xe[c], acc[r][c]);
                    acc[r][c] = _mm512_fmadd_ps(wo, xo[c], acc[r][c]);
                }
            }
        }
    }
    for (; i + 16 <= n; i += 16) {
        __m512 wv[TILE_R_LIMIT];
        if (((size_t)i * es) % 64 == 0)
            for (int r = 0; r < R; r++)
                _mm_prefetch(ahead + ((size_t)r * ldw + (size_t)i) * es, _MM_HINT_T1);
        for (int r = 0; r < R; r++)
            wv[r] = load16_avx512(t, w, (size_t)r * ldw + (size_t)i);
        for (int c = 0; c < C; c++) {
            const __m512 xv = _mm512_loadu_ps(x + (size_t)c * ldx + (size_t)i);
            for (int r = 0; r < R; r++)
                acc[r][c] = _mm512_fmadd_ps(wv[r], xv, acc[r][c]);
        }
    }
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m512 wv[TILE_R_LIMIT];
        for (int r = 0; r < R; r++)
            wv[r] = load16_masked_avx512(t, w, (size_t)r * ldw + (size_t)i, m);
        for (int c = 0; c < C; c++) {
            const __m512 xv = _mm512_maskz_loadu_ps(m, x + (size_t)c * ldx + (size_t)i);
            for (int r = 0; r < R; r++)
                acc[r][c] = _mm512_fmadd_ps(wv[r], xv, acc[r][c]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            y[(size_t)c * ldy + (size_t)r] = _mm512_reduce_add_ps(acc[r][c]);
}

ROWS_FN(rows_f32_avx512, tile_avx512, TILE_R_AVX512, TILE_C_AVX512, LA_DTYPE_F32, AVX512)
ROWS_FN(rows_f16_avx512, tile_avx512, TILE_R_AVX512, TILE_C_AVX512, LA_DTYPE_F16, AVX512)
ROWS_FN(rows_bf16_avx512, tile_avx512, TILE_R_AVX512, TILE_C_AVX512, LA_DTYPE_BF16, AVX512)

AVX512 static void axpy_avx512(float *y, float a, const float *x, int n) {
    const __m512 av = _mm512_set1_ps(a);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(av, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i),
                                                        _mm512_maskz_loadu_ps(m, y + i)));
    }
}

/* exp16_avx512 is e^x (Cephes' expf: x = k ln2 + r, |r| <= ln2/2, a degree-7 polynomial
 * for e^r, then scaled by 2^k; within 2 ulp). Inputs below -87 give e^-87, which is as
 * good as zero next to the largest term of a softmax sum (1) or next to 1 in a SiLU;
 * inputs above 88.7 give infinity. */
AVX512 static ALWAYS_INLINE __m512 exp16_avx512(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, k);
}

/* swiglu_avx512 is gate = silu(gate) * up = gate / (1 + e^-gate) * up, with exp16_avx512
 * (a few float ulp from cpu_silu's expf). */
AVX512 static void swiglu_avx512(float *gate, const float *up, size_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 g = _mm512_loadu_ps(gate + i);
        const __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, exp16_avx512(_mm512_sub_ps(_mm512_setzero_ps(), g))));
        _mm512_storeu_ps(gate + i, _mm512_mul_ps(s, _mm512_loadu_ps(up + i)));
    }
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
        const __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, exp16_avx512(_mm512_sub_ps(_mm512_setzero_ps(), g))));
        _mm512_mask_storeu_ps(gate + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, up + i)));
    }
}

/* gelu_tanh_avx512 is GELU's tanh form, 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x +
 * 0.044715 x^3), written as x / (1 + e^(-2u)) (the same value, since 1 + tanh(u) = 2 / (1 +
 * e^(-2u))) so that it takes exp16_avx512 and one division, and loses nothing to the
 * cancellation in 1 + tanh(u) for large negative u. Within a few float ulp of
 * cpu_gelu_tanh's tanhf; glibc's scalar tanhf made this the vision tower's third-largest
 * cost. */
AVX512 static void gelu_tanh_avx512(float *x, size_t n) {
    const __m512 one = _mm512_set1_ps(1.0f), c3 = _mm512_set1_ps(0.044715f);
    const __m512 m2k = _mm512_set1_ps(-2.0f * 0.7978845608028654f);
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        const __m512 inner = _mm512_fmadd_ps(_mm512_mul_ps(c3, v), _mm512_mul_ps(v, v), v);
        const __m512 e = exp16_avx512(_mm512_mul_ps(m2k, inner));
        _mm512_mask_storeu_ps(x + i, m, _mm512_div_ps(v, _mm512_add_ps(one, e)));
    }
}

/* softmax_avx512 is cpu_softmax over 16 lanes: the maximum, e^(x - max) with exp16_avx512
 * summed in 16 float lanes, then the scaling; within a few float ulp of cpu_softmax (the
 * sum is taken in another order). */
AVX512 static void softmax_avx512(float *x, int n) {
    __m512 mx = _mm512_set1_ps(x[0]);
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        mx = _mm512_mask_max_ps(mx, m, mx, _mm512_maskz_loadu_ps(m, x + i));
    }
    const __m512 mv = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    __m512 sum = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        const __m512 e = _mm512_maskz_mov_ps(m, exp16_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), mv)));
        _mm512_mask_storeu_ps(x + i, m, e);
        sum = _mm512_add_ps(sum, e);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv));
    }
}

/* expsum_avx512 sums e^(x[i] - m) in double (each 16 floats widened to two 8-double
 * halves), so the sum of 150k terms loses nothing to float rounding. */
AVX512 static double expsum_avx512(const float *x, int n, float m) {
    const __m512 mv = _mm512_set1_ps(m);
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 e = exp16_avx512(_mm512_sub_ps(_mm512_loadu_ps(x + i), mv));
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
    }
    if (i < n) {
        const __mmask16 mk = (__mmask16)((1u << (n - i)) - 1);
        /* masked-off lanes are e^(m - m) = 1 before the mask zeroes them */
        const __m512 e = _mm512_maskz_mov_ps(mk, exp16_avx512(_mm512_sub_ps(
                                                     _mm512_mask_loadu_ps(mv, mk, x + i), mv)));
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
}

/* ---- AVX2 + FMA + F16C ------------------------------------------------------------ */
#define AVX2 __attribute__((target("avx2,fma,f16c")))

AVX2 static ALWAYS_INLINE float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* load8_avx2 widens 8 weights at element i to float32. */
AVX2 static ALWAYS_INLINE __m256 load8_avx2(la_dtype t, const void *w, size_t i) {
    switch (t) {
    case LA_DTYPE_BF16: {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + i));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    case LA_DTYPE_F16:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i)));
    default:
        return _mm256_loadu_ps((const float *)w + i);
    }
}

/* tile_avx2: one 8-lane accumulator per dot product; the last n % 8 elements are added
 * one by one after the lanes are summed. */
AVX2 static ALWAYS_INLINE void tile_avx2(la_dtype t, const void *w, size_t ldw, int n,
                                         const float *x, size_t ldx, float *y, size_t ldy,
                                         const int R, const int C) {
    __m256 acc[TILE_R_LIMIT][TILE_C_LIMIT];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            acc[r][c] = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 wv[TILE_R_LIMIT];
        for (int r = 0; r < R; r++)
            wv[r] = load8_avx2(t, w, (size_t)r * ldw + (size_t)i);
        for (int c = 0; c < C; c++) {
            const __m256 xv = _mm256_loadu_ps(x + (size_t)c * ldx + (size_t)i);
            for (int r = 0; r < R; r++)
                acc[r][c] = _mm256_fmadd_ps(wv[r], xv, acc[r][c]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            float s = hsum256(acc[r][c]);
            for (int j = i; j < n; j++)
                s += load1_plain(w, t, (size_t)r * ldw + (size_t)j) * x[(size_t)c * ldx + (size_t)j];
            y[(size_t)c * ldy + (size_t)r] = s;
        }
}

ROWS_FN(rows_f32_avx2, tile_avx2, TILE_R_AVX2, TILE_C_AVX2, LA_DTYPE_F32, AVX2)
ROWS_FN(rows_f16_avx2, tile_avx2, TILE_R_AVX2, TILE_C_AVX2, LA_DTYPE_F16, AVX2)
ROWS_FN(rows_bf16_avx2, tile_avx2, TILE_R_AVX2, TILE_C_AVX2, LA_DTYPE_BF16, AVX2)

AVX2 static void axpy_avx2(float *y, float a, const float *x, int n) {
    const __m256 av = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++)
        y[i] += a * x[i];
}

/* exp8_avx2 is exp16_avx512 on 8 lanes, scaling by 2^k through the exponent bits (k is
 * at least -126 for x >= -87, a normal number). */
AVX2 static ALWAYS_INLINE __m256 exp8_avx2(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

AVX2 static double expsum_avx2(const float *x, int n, float m) {
    const __m256 mv = _mm256_set1_ps(m);
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 e = exp8_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    __m256d s = _mm256_add_pd(s0, s1);
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    double total = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
    for (; i < n; i++)
        total += exp((double)(x[i] - m));
    return total;
}
#endif /* LA_X86 */

void cpu_kernels_generic(cpu_kernels *k) {
    memset(k, 0, sizeof *k);
    k->isa = "generic";
    k->rows[LA_DTYPE_F32] = rows_f32_plain;
    k->rows[LA_DTYPE_F16] = rows_f16_plain;
    k->rows[LA_DTYPE_BF16] = rows_bf16_plain;
    k->rows[CPU_DTYPE_Q8] = cpu_q8_rows_plain;
    k->axpy = axpy_plain;
    k->expsum = expsum_plain;
    k->swiglu = swiglu_plain;
    k->gelu_tanh = gelu_tanh_plain;
    k->softmax = cpu_softmax;
}

/* kernels_avx512 and kernels_avx2 switch k to their instruction set when the CPU has it,
 * and report whether it did. */
static int kernels_avx512(cpu_kernels *k) {
#ifdef LA_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
        k->isa = "avx512";
        k->rows[LA_DTYPE_F32] = rows_f32_avx512;
        k->rows[LA_DTYPE_F16] = rows_f16_avx512;
        k->rows[LA_DTYPE_BF16] = rows_bf16_avx512;
        k->rows[CPU_DTYPE_Q8] = cpu_q8_rows_avx512;
        k->pack[LA_DTYPE_BF16] = pack_pairs_avx512;
        k->axpy = axpy_avx512;
        k->expsum = expsum_avx512;
        k->swiglu = swiglu_avx512;
        k->gelu_tanh = gelu_tanh_avx512;
        k->softmax = softmax_avx512;
        return 1;
    }
#endif
    (void)k;
    return 0;
}

static int kernels_avx2(cpu_kernels *k) {
#ifdef LA_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c")) {
        k->isa = "avx2";
        k->rows[LA_DTYPE_F32] = rows_f32_avx2;
        k->rows[LA_DTYPE_F16] = rows_f16_avx2;
        k->rows[LA_DTYPE_BF16] = rows_bf16_avx2;
        k->rows[CPU_DTYPE_Q8] = cpu_q8_rows_avx2;
        k->axpy = axpy_avx2;
        k->expsum = expsum_avx2;
        return 1;
    }
#endif
    (void)k;
    return 0;
}

void cpu_kernels_select(cpu_kernels *k) {
    cpu_kernels_generic(k);
    if (!kernels_avx512(k))
        kernels_avx2(k);
}

int cpu_kernels_named(const char *name, cpu_kernels *k) {
    cpu_kernels_generic(k);
    if (strcmp(name, "auto") == 0) {
        cpu_kernels_select(k);
        return 0;
    }
    if (strcmp(name, "plain") == 0)
        return 0;
    if (strcmp(name, "avx512") == 0)
        return kernels_avx512(k) ? 0 : -2;
    if (strcmp(name, "avx2") == 0)
        return kernels_avx2(k) ? 0 : -2;
    return -1;
}

/* probe_kernels fills k with one set for the probes: CPU_KERNELS_SELECTED (what open
 * picks), CPU_KERNELS_PLAIN, or CPU_KERNELS_AVX2 (what a CPU without AVX-512 picks; 0
 * when this one lacks AVX2 too). */
static int probe_kernels(int which, cpu_kernels *k) {
    cpu_kernels_generic(k);
    switch (which) {
    case CPU_KERNELS_SELECTED:
        cpu_kernels_select(k);
        return 1;
    case CPU_KERNELS_PLAIN:
        return 1;
    case CPU_KERNELS_AVX2:
        return kernels_avx2(k);
    }
    return 0;
}

/* probe_matmat runs one product on the calling thread, packing x as the kernel wants. */
static int probe_matmat(const cpu_kernels *k, const cpu_matmat *mm, int n) {
    cpu_pool pool;
    char err[LA_ERR_LEN];
    float *xpack = malloc(((size_t)n * mm->ldx + 1) * sizeof *xpack);
    if (!xpack || cpu_pool_init(&pool, 1, err, sizeof err) != 0) {
        free(xpack);
        return -1;
    }
    cpu_matmat_run(&pool, k, mm, 1, n, xpack);
    cpu_pool_destroy(&pool);
    free(xpack);
    return 0;
}

float cpu_dot_probe(int which, la_dtype t, const void *row, const float *x, int n,
                    const char **isa) {
    cpu_kernels k;
    const int ok = probe_kernels(which, &k);
    if (isa)
        *isa = ok ? k.isa : "none";
    if (!ok)
        return NAN;
    float y;
    cpu_matrix m = {row, t, 1, n};
    cpu_matmat mm = {&m, NULL, x, (size_t)n, &y, 1};
    return probe_matmat(&k, &mm, 1) == 0 ? y : NAN;
}

void cpu_rows_probe(int which, la_dtype t, const void *w, int rows, int n, const float *x,
                    int nx, float *y) {
    cpu_kernels k;
    cpu_matrix m = {w, t, rows, n};
    cpu_matmat mm = {&m, NULL, x, (size_t)n, y, (size_t)rows};
    if (!probe_kernels(which, &k) || probe_matmat(&k, &mm, nx) != 0)
        for (int i = 0; i < rows * nx; i++)
            y[i] = NAN;
}

double cpu_expsum_probe(int which, const float *x, int n, float m) {
    cpu_kernels k;
    return probe_kernels(which, &k) ? k.expsum(x, n, m) : NAN;
}

int cpu_activation_probe(int which, int op, float *x, int n) {
    cpu_kernels k;
    if (!probe_kernels(which, &k))
        return -1;
    if (op == 0)
        k.gelu_tanh(x, (size_t)n);
    else
        k.softmax(x, n);
    return 0;
}

/* ---- batched matrix-vector products on the pool ------------------------------------- */

typedef struct {
    const cpu_kernels *k;
    const cpu_matmat *mm;
    int count, n;
    const float *xpack; /* the shared input, packed for the kernels that want it */
} matmat_task;

/* matmat_slice gives each thread the same share of every product's weight rows, for all
 * n sequences: the weights are read once per step whatever the batch. */
static void matmat_slice(void *arg, int thread, int nthreads) {
    const matmat_task *t = arg;
    for (int j = 0; j < t->count; j++) {
        const cpu_matmat *mm = &t->mm[j];
        const cpu_matrix *w = mm->w;
        const int r0 = (int)((int64_t)w->rows * thread / nthreads);
        const int r1 = (int)((int64_t)w->rows * (thread + 1) / nthreads);
        if (r0 == r1)
            continue;
        const size_t stride = cpu_row_bytes(w->dtype, w->cols);
        const float *x = t->k->pack[w->dtype] ? t->xpack : mm->x;
        t->k->rows[w->dtype]((const char *)w->data + (size_t)r0 * stride, (size_t)w->cols, r1 - r0,
                             w->cols, x, mm->ldx, t->n, mm->y + r0, mm->ldy);
        if (mm->bias)
            for (int c = 0; c < t->n; c++) {
                float *y = mm->y + (size_t)c * mm->ldy;
                for (int r = r0; r < r1; r++)
                    y[r] += mm->bias[r];
            }
    }
}

void cpu_matmat_run(cpu_pool *pool, const cpu_kernels *k, const cpu_matmat *mm, int count, int n,
                    float *xpack) {
    matmat_task t = {k, mm, count, n, NULL};
    for (int j = 0; j < count; j++)
        if (k->pack[mm[j].w->dtype]) {
            k->pack[mm[j].w->dtype](mm[0].x, mm[0].ldx, mm[0].w->cols, n, xpack);
            t.xpack = xpack;
            break;
        }
    cpu_pool_run(pool, matmat_slice, &t);
}

/* ---- dense helpers ------------------------------------------------------------------ */

void cpu_layernorm(float *out, const float *x, const float *w, const float *b, int n, float eps) {
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += x[i];
    float mean = (float)(sum / n);
    double var = 0;
    for (int i = 0; i < n; i++) {
        double d = x[i] - mean;
        var += d * d;
    }
    float inv = (float)(1.0 / sqrt(var / n + eps));
    for (int i = 0; i < n; i++)
        out[i] = (x[i] - mean) * inv * w[i] + b[i];
}

void cpu_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    float inv = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++)
        out[i] = w[i] * (x[i] * inv);
}

void cpu_softmax(float *x, int n) {
    float max = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] > max)
            max = x[i];
    float sum = 0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    float inv = 1.0f / sum;
    for (int i = 0; i < n; i++)
        x[i] *= inv;
}

float cpu_gelu_tanh(float x) {
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

float cpu_gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f)); }

float cpu_silu(float x) { return x / (1.0f + expf(-x)); }

int32_t cpu_argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) /* strict: the lowest id wins a tie */
            best = i;
    return best;
}
