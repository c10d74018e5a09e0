/*
 * cpu_attention.c - multi-head attention for many query rows at once (the vision tower,
 * bidirectional, and decoder prefill, causal), as two GEMMs per head and block of rows:
 * scores = scale * Q K^T, softmax per row, out = scores V. The products run on the exact
 * path's own kernels (cpu_gemm_f32.c), or on cblas_sgemm under f32_kernel=openblas.
 */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "cpu_internal.h"

typedef struct {
    void (*softmax)(float *x, int n);
    float *scores;
    int ld; /* row stride of scores */
    int r0, rows, n_k;
    int causal, q_offset;
} softmax_task;

/* softmax_rows normalises a block of score rows, split across the pool. With a causal mask
 * query row r (position q_offset + r) sees keys 0..q_offset+r; the rest become 0. */
static void softmax_rows(void *arg, int thread, int nthreads) {
    const softmax_task *t = arg;
    int a = t->rows * thread / nthreads, b = t->rows * (thread + 1) / nthreads;
    for (int i = a; i < b; i++) {
        float *row = t->scores + (size_t)i * (size_t)t->ld;
        int valid = t->n_k;
        if (t->causal) {
            int seen = t->q_offset + t->r0 + i + 1;
            if (seen < valid)
                valid = seen;
        }
        t->softmax(row, valid);
        memset(row + valid, 0, (size_t)(t->n_k - valid) * sizeof *row);
    }
}

/* scores_qk computes scores[rows, n_k] = scale * q[rows, hd] k[n_k, hd]^T. */
static void scores_qk(la_engine *e, int rows, int n_k, int hd, float scale, const float *q, int ldq,
                      const float *k, int ldk, float *scores) {
    if (e->f32.level == CPU_F32_OPENBLAS) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n_k, hd, scale, q, ldq, k, ldk,
                    0.0f, scores, n_k);
        return;
    }
    cpu_f32_product p = {rows, n_k, hd, scale, q, (size_t)ldq, k, LA_DTYPE_F32, (size_t)ldk, 0,
                         scores, (size_t)n_k};
    cpu_f32_gemm(&e->f32, &e->pool, &p);
}

/* scores_v computes out[rows, hd] = scores[rows, n_k] v[n_k, hd]. */
static void scores_v(la_engine *e, int rows, int hd, int n_k, const float *scores, const float *v,
                     int ldv, float *out, int ldo) {
    if (e->f32.level == CPU_F32_OPENBLAS) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, n_k, 1.0f, scores, n_k, v,
                    ldv, 0.0f, out, ldo);
        return;
    }
    cpu_f32_product p = {rows, hd, n_k, 1.0f, scores, (size_t)n_k, v, LA_DTYPE_F32, (size_t)ldv, 1,
                         out, (size_t)ldo};
    cpu_f32_gemm(&e->f32, &e->pool, &p);
}

void cpu_attention(la_engine *e, const cpu_attn *a) {
    if (e->matmul != CPU_MATMUL_F32) { /* bf16 products, AMX or AVX512_BF16 */
        cpu_amx_attention(e, a);
        return;
    }
    const int hd = a->head_dim, group = a->heads / a->kv_heads;
    const float scale = 1.0f / sqrtf((float)hd);
    float *scores = e->s.scores;

    for (int h = 0; h < a->heads; h++) {
        const int g = h / group;
        const float *q = a->q + (size_t)h * hd;
        const float *k = a->k + (size_t)g * hd;
        const float *v = a->v + (size_t)g * hd;
        float *out = a->out + (size_t)h * hd;
        for (int r0 = 0; r0 < a->n_q; r0 += e->attn_chunk) {
            int rows = a->n_q - r0 < e->attn_chunk ? a->n_q - r0 : e->attn_chunk;
            /* Under a causal mask no row of this block sees past its last row's position. */
            int n_k = a->n_k;
            if (a->causal && a->q_offset + r0 + rows < n_k)
                n_k = a->q_offset + r0 + rows;
            scores_qk(e, rows, n_k, hd, scale, q + (size_t)r0 * a->ldq, a->ldq, k, a->ldkv, scores);
            softmax_task st = {e->kern.softmax, scores, n_k, r0, rows, n_k, a->causal, a->q_offset};
            cpu_pool_run(&e->pool, softmax_rows, &st);
            scores_v(e, rows, hd, n_k, scores, v, a->ldkv, out + (size_t)r0 * a->ldo, a->ldo);
        }
    }
}
