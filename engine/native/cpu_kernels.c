/*
 * cpu_kernels.c - element conversion, the vectorised dot products behind every decode
 * matrix-vector product, and the small dense helpers (norms, activations, softmax).
 *
 * Decode reads every weight once per token, so it is bound by memory bandwidth: the dot
 * kernels stream the checkpoint's own bf16/f16/f32 rows straight from the mapping and
 * widen them to float32 in registers (bf16 -> f32 is a 16-bit shift). They accumulate in
 * float32 with FMA. AVX512_BF16's dot instruction is deliberately not used: it would round
 * the activations to bf16 too, and the backend must match the float32 reference.
 *
 * The instruction set is chosen at run time (__builtin_cpu_supports) and each kernel
 * carries its own target attribute, so one binary built for x86-64-v2 runs everywhere and
 * still uses AVX-512 where it exists (cgo refuses -mfma in CFLAGS anyway).
 */
#include <math.h>
#include <string.h>

#include "cpu_internal.h"

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

/* ---- dot products: plain C ---------------------------------------------------------- */

static float dot_f32_generic(const void *row, const float *x, int n) {
    const float *w = row;
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += w[i] * x[i];
        s1 += w[i + 1] * x[i + 1];
        s2 += w[i + 2] * x[i + 2];
        s3 += w[i + 3] * x[i + 3];
    }
    for (; i < n; i++)
        s0 += w[i] * x[i];
    return (s0 + s1) + (s2 + s3);
}

static float dot_bf16_generic(const void *row, const float *x, int n) {
    const uint16_t *w = row;
    float s0 = 0, s1 = 0;
    int i = 0;
    for (; i + 2 <= n; i += 2) {
        s0 += cpu_bf16_to_f32(w[i]) * x[i];
        s1 += cpu_bf16_to_f32(w[i + 1]) * x[i + 1];
    }
    for (; i < n; i++)
        s0 += cpu_bf16_to_f32(w[i]) * x[i];
    return s0 + s1;
}

static float dot_f16_generic(const void *row, const float *x, int n) {
    const uint16_t *w = row;
    float s = 0;
    for (int i = 0; i < n; i++)
        s += cpu_f16_to_f32(w[i]) * x[i];
    return s;
}

#ifdef LA_X86
/* ---- dot products: AVX-512 ---------------------------------------------------------- */
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c,fma")))

AVX512 static inline __m512 bf16x16_to_f32(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

AVX512 static float dot_bf16_avx512(const void *row, const float *x, int n) {
    const uint16_t *w = row;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    __m512 a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_fmadd_ps(bf16x16_to_f32(_mm256_loadu_si256((const __m256i *)(w + i))),
                             _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(bf16x16_to_f32(_mm256_loadu_si256((const __m256i *)(w + i + 16))),
                             _mm512_loadu_ps(x + i + 16), a1);
        a2 = _mm512_fmadd_ps(bf16x16_to_f32(_mm256_loadu_si256((const __m256i *)(w + i + 32))),
                             _mm512_loadu_ps(x + i + 32), a2);
        a3 = _mm512_fmadd_ps(bf16x16_to_f32(_mm256_loadu_si256((const __m256i *)(w + i + 48))),
                             _mm512_loadu_ps(x + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16)
        a0 = _mm512_fmadd_ps(bf16x16_to_f32(_mm256_loadu_si256((const __m256i *)(w + i))),
                             _mm512_loadu_ps(x + i), a0);
    if (i < n) { /* masked tail: lanes past n load as zero */
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        a1 = _mm512_fmadd_ps(bf16x16_to_f32(_mm256_maskz_loadu_epi16(m, w + i)),
                             _mm512_maskz_loadu_ps(m, x + i), a1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

AVX512 static float dot_f16_avx512(const void *row, const float *x, int n) {
    const uint16_t *w = row;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + i))),
                             _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + i + 16))),
                             _mm512_loadu_ps(x + i + 16), a1);
    }
    for (; i + 16 <= n; i += 16)
        a0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + i))),
                             _mm512_loadu_ps(x + i), a0);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        a1 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, w + i)),
                             _mm512_maskz_loadu_ps(m, x + i), a1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

AVX512 static float dot_f32_avx512(const void *row, const float *x, int n) {
    const float *w = row;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 16), _mm512_loadu_ps(x + i + 16), a1);
    }
    for (; i + 16 <= n; i += 16)
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), a0);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w + i), _mm512_maskz_loadu_ps(m, x + i), a1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

/* ---- dot products: AVX2 + FMA + F16C ------------------------------------------------ */
#define AVX2 __attribute__((target("avx2,fma,f16c")))

AVX2 static inline float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

AVX2 static inline __m256 bf16x8_to_f32(const uint16_t *p) {
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

AVX2 static float dot_bf16_avx2(const void *row, const float *x, int n) {
    const uint16_t *w = row;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(bf16x8_to_f32(w + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(bf16x8_to_f32(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(bf16x8_to_f32(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(bf16x8_to_f32(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(bf16x8_to_f32(w + i), _mm256_loadu_ps(x + i), a0);
    float s = hsum256(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++)
        s += cpu_bf16_to_f32(w[i]) * x[i];
    return s;
}

AVX2 static float dot_f16_avx2(const void *row, const float *x, int n) {
    const uint16_t *w = row;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i))),
                             _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i + 8))),
                             _mm256_loadu_ps(x + i + 8), a1);
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i))),
                             _mm256_loadu_ps(x + i), a0);
    float s = hsum256(_mm256_add_ps(a0, a1));
    for (; i < n; i++)
        s += cpu_f16_to_f32(w[i]) * x[i];
    return s;
}

AVX2 static float dot_f32_avx2(const void *row, const float *x, int n) {
    const float *w = row;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
    float s = hsum256(_mm256_add_ps(a0, a1));
    for (; i < n; i++)
        s += w[i] * x[i];
    return s;
}
#endif /* LA_X86 */

void cpu_kernels_generic(cpu_kernels *k) {
    k->isa = "generic";
    k->dot[LA_DTYPE_F32] = dot_f32_generic;
    k->dot[LA_DTYPE_F16] = dot_f16_generic;
    k->dot[LA_DTYPE_BF16] = dot_bf16_generic;
}

void cpu_kernels_select(cpu_kernels *k) {
    cpu_kernels_generic(k);
#ifdef LA_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma")) {
        k->isa = "avx512";
        k->dot[LA_DTYPE_F32] = dot_f32_avx512;
        k->dot[LA_DTYPE_F16] = dot_f16_avx512;
        k->dot[LA_DTYPE_BF16] = dot_bf16_avx512;
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        k->isa = "avx2";
        k->dot[LA_DTYPE_F32] = dot_f32_avx2;
        k->dot[LA_DTYPE_F16] = dot_f16_avx2;
        k->dot[LA_DTYPE_BF16] = dot_bf16_avx2;
    }
#endif
}

float cpu_dot_probe(int generic, la_dtype t, const void *row, const float *x, int n,
                    const char **isa) {
    cpu_kernels k;
    if (generic)
        cpu_kernels_generic(&k);
    else
        cpu_kernels_select(&k);
    if (isa)
        *isa = k.isa;
    return k.dot[t](row, x, n);
}

/* ---- matrix-vector products on the pool --------------------------------------------- */

typedef struct {
    const cpu_kernels *k;
    const cpu_matvec *mv;
    int n;
} matvec_task;

static void matvec_slice(void *arg, int thread, int nthreads) {
    const matvec_task *t = arg;
    for (int j = 0; j < t->n; j++) {
        const cpu_matvec *mv = &t->mv[j];
        const cpu_matrix *w = mv->w;
        int r0 = (int)((int64_t)w->rows * thread / nthreads);
        int r1 = (int)((int64_t)w->rows * (thread + 1) / nthreads);
        size_t stride = (size_t)w->cols * cpu_dtype_size(w->dtype);
        cpu_dot_fn dot = t->k->dot[w->dtype];
        const char *base = w->data;
        for (int r = r0; r < r1; r++) {
            float y = dot(base + (size_t)r * stride, mv->x, w->cols);
            mv->y[r] = mv->bias ? y + mv->bias[r] : y;
        }
    }
}

void cpu_matvec_run(cpu_pool *pool, const cpu_kernels *k, const cpu_matvec *mv, int n) {
    matvec_task t = {k, mv, n};
    cpu_pool_run(pool, matvec_slice, &t);
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
