/*
 * cpu_text.c - the Qwen2 decoder's prefill of one prompt into a slot with GEMMs, and the
 * per-row pieces every step shares (embedding, RoPE, the KV cache's layout). The step
 * (cpu_step.c) is the decoder's one entry point: it runs a free slot's prompt through
 * cpu_prefill and every other row through its own layer loop.
 *
 * Layer: x += o(attn(rope(q(RMS(x))), rope(k(RMS(x))), v(RMS(x))))
 *        x += down(silu(gate(RMS(x))) * up(RMS(x)))
 * with rotate-half RoPE, grouped-query causal attention and q/k/v bias (no o bias).
 * Each slot's KV cache holds float32 keys (after RoPE) and values for every layer and
 * position.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

/* rope_half rotates (v[i], v[i + hd/2]) by the position's angle i, for each of heads. */
static void rope_half(float *v, int heads, int hd, const float *cs, const float *sn) {
    const int half = hd / 2;
    for (int h = 0; h < heads; h++) {
        float *x = v + (size_t)h * hd;
        for (int i = 0; i < half; i++) {
            float a = x[i], b = x[i + half];
            x[i] = a * cs[i] - b * sn[i];
            x[i + half] = b * cs[i] + a * sn[i];
        }
    }
}

/* cache_offset is where slot's rows of layer start in the key or value cache. */
static size_t cache_offset(const la_engine *e, int slot, int layer) {
    const size_t kvd = (size_t)e->cfg.kv_heads * e->cfg.head_dim;
    return ((size_t)slot * e->cfg.layers + (size_t)layer) * (size_t)e->cfg.max_seq_len * kvd;
}

static float *key_cache(la_engine *e, int slot, int layer) {
    return e->s.key_cache + cache_offset(e, slot, layer);
}

static float *value_cache(la_engine *e, int slot, int layer) {
    return e->s.value_cache + cache_offset(e, slot, layer);
}

/* embed_row writes token id's embedding (widened to float32) to out. */
static void embed_row(const la_engine *e, int32_t id, float *out) {
    const cpu_matrix *m = &e->w.embed;
    const size_t esize = cpu_dtype_size(m->dtype);
    cpu_to_f32(m->dtype, (const char *)m->data + (size_t)id * m->cols * esize, out, (size_t)m->cols);
}

typedef struct {
    cpu_swiglu_fn swiglu;
    float *gate;
    const float *up;
} swiglu_task;

/* swiglu_range computes gate = silu(gate) * up over a range, split across the pool. */
static void swiglu_range(void *arg, size_t lo, size_t hi) {
    const swiglu_task *t = arg;
    t->swiglu(t->gate + lo, t->up + lo, hi - lo);
}

/* ---- prefill ------------------------------------------------------------------------ */

static void prefill_layer(la_engine *e, int slot, int li, int n) {
    const la_config *c = &e->cfg;
    const cpu_text_layer *l = &e->w.layers[li];
    cpu_state *s = &e->s;
    const int D = c->hidden, hd = c->head_dim, half = hd / 2;
    const int qd = c->heads * hd, kvd = c->kv_heads * hd;
    float *kc = key_cache(e, slot, li), *vc = value_cache(e, slot, li);

    /* attention; k and v go straight into the slot's cache rows 0..n-1 */
    for (int i = 0; i < n; i++)
        cpu_rmsnorm(s->xb + (size_t)i * D, s->x + (size_t)i * D, l->attn_norm, D, c->rms_norm_eps);
    cpu_gemm_wt(e, s->xb, n, &l->q, l->q_b, s->q);
    cpu_gemm_wt(e, s->xb, n, &l->k, l->k_b, kc);
    cpu_gemm_wt(e, s->xb, n, &l->v, l->v_b, vc);
    for (int i = 0; i < n; i++) {
        const float *cs = s->rope_cos + (size_t)i * half, *sn = s->rope_sin + (size_t)i * half;
        rope_half(s->q + (size_t)i * qd, c->heads, hd, cs, sn);
        rope_half(kc + (size_t)i * kvd, c->kv_heads, hd, cs, sn);
    }
    cpu_attn a = {
        .q = s->q, .ldq = qd, .k = kc, .v = vc, .ldkv = kvd, .out = s->att, .ldo = qd,
        .n_q = n, .n_k = n, .heads = c->heads, .kv_heads = c->kv_heads, .head_dim = hd,
        .causal = 1, .q_offset = 0,
    };
    cpu_attention(e, &a);
    cpu_gemm_wt(e, s->att, n, &l->o, NULL, s->xb);
    for (size_t i = 0; i < (size_t)n * D; i++)
        s->x[i] += s->xb[i];

    /* MLP */
    for (int i = 0; i < n; i++)
        cpu_rmsnorm(s->xb + (size_t)i * D, s->x + (size_t)i * D, l->mlp_norm, D, c->rms_norm_eps);
    cpu_gemm_wt(e, s->xb, n, &l->gate, NULL, s->hb);
    cpu_gemm_wt(e, s->xb, n, &l->up, NULL, s->hb2);
    swiglu_task sw = {e->kern.swiglu, s->hb, s->hb2};
    cpu_pool_for(&e->pool, (size_t)n * c->intermediate, swiglu_range, &sw);
    cpu_gemm_wt(e, s->hb, n, &l->down, NULL, s->xb);
    for (size_t i = 0; i < (size_t)n * D; i++)
        s->x[i] += s->xb[i];
}

void cpu_prefill(la_engine *e, int slot, const int32_t *ids, int n, float *out) {
    const la_config *c = &e->cfg;
    cpu_state *s = &e->s;
    const int D = c->hidden;

    for (int i = 0, k = 0; i < n; i++) {
        float *row = s->x + (size_t)i * D;
        if (ids[i] == c->image_token_id && k < s->n_img)
            memcpy(row, s->img + (size_t)k++ * D, (size_t)D * sizeof *row);
        else
            embed_row(e, ids[i], row);
    }
    s->n_img = 0; /* consumed: the next prefill needs its own vision call */
    for (int li = 0; li < c->layers; li++)
        prefill_layer(e, slot, li, n);
    if (out)
        cpu_rmsnorm(out, s->x + (size_t)(n - 1) * D, e->w.final_norm, D, c->rms_norm_eps);
    s->slots[slot].live = 1;
    s->slots[slot].pos = n;
}

/* ---- shared with the step (cpu_step.c) ---------------------------------------------- */

/* The step's layer loop runs the same per-row arithmetic as the prefill; these give it the
 * very same functions. */
void cpu_embed_row(const la_engine *e, int32_t id, float *out) { embed_row(e, id, out); }

void cpu_rope_half(float *v, int heads, int hd, const float *cs, const float *sn) {
    rope_half(v, heads, hd, cs, sn);
}

float *cpu_key_cache(la_engine *e, int slot, int layer) { return key_cache(e, slot, layer); }

float *cpu_value_cache(la_engine *e, int slot, int layer) { return value_cache(e, slot, layer); }

/* cpu_swiglu_rows computes gate = silu(gate) * up over n elements on the pool. */
void cpu_swiglu_rows(la_engine *e, float *gate, const float *up, size_t n) {
    swiglu_task sw = {e->kern.swiglu, gate, up};
    cpu_pool_for(&e->pool, n, swiglu_range, &sw);
}
