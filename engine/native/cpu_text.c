/*
 * cpu_text.c - the Qwen2 decoder: prefill over the whole prompt with GEMMs, and the decode
 * step, planned once at open and replayed per token.
 *
 * Layer: x += o(attn(rope(q(RMS(x))), rope(k(RMS(x))), v(RMS(x))))
 *        x += down(silu(gate(RMS(x))) * up(RMS(x)))
 * with rotate-half RoPE, grouped-query causal attention and q/k/v bias (no o bias).
 * The KV cache holds float32 keys (after RoPE) and values for every layer and position.
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

static float *key_cache_layer(la_engine *e, int layer) {
    const size_t kvd = (size_t)e->cfg.kv_heads * e->cfg.head_dim;
    return e->s.key_cache + (size_t)layer * e->cfg.max_seq_len * kvd;
}

static float *value_cache_layer(la_engine *e, int layer) {
    const size_t kvd = (size_t)e->cfg.kv_heads * e->cfg.head_dim;
    return e->s.value_cache + (size_t)layer * e->cfg.max_seq_len * kvd;
}

/* embed_row writes token id's embedding (widened to float32) to out. */
static void embed_row(const la_engine *e, int32_t id, float *out) {
    const cpu_matrix *m = &e->w.embed;
    const size_t esize = cpu_dtype_size(m->dtype);
    cpu_to_f32(m->dtype, (const char *)m->data + (size_t)id * m->cols * esize, out, (size_t)m->cols);
}

/* lm_head_argmax computes the logits of the normed hidden state in plan.xb and returns
 * the greedy token. */
static int32_t lm_head_argmax(la_engine *e) {
    cpu_matvec_run(&e->pool, &e->kern, &e->plan.lm_head, 1);
    e->s.has_logits = 1;
    return cpu_argmax(e->s.logits, e->cfg.vocab);
}

/* ---- prefill ------------------------------------------------------------------------ */

typedef struct {
    float *gate;
    const float *up;
} swiglu_task;

/* swiglu_range computes gate = silu(gate) * up over a range, split across the pool. */
static void swiglu_range(void *arg, size_t lo, size_t hi) {
    const swiglu_task *t = arg;
    for (size_t i = lo; i < hi; i++)
        t->gate[i] = cpu_silu(t->gate[i]) * t->up[i];
}

static void prefill_layer(la_engine *e, int li, int n) {
    const la_config *c = &e->cfg;
    const cpu_text_layer *l = &e->w.layers[li];
    cpu_state *s = &e->s;
    const int D = c->hidden, hd = c->head_dim, half = hd / 2;
    const int qd = c->heads * hd, kvd = c->kv_heads * hd;
    float *kc = key_cache_layer(e, li), *vc = value_cache_layer(e, li);

    /* attention; k and v go straight into the cache rows 0..n-1 */
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
    swiglu_task sw = {s->hb, s->hb2};
    cpu_pool_for(&e->pool, (size_t)n * c->intermediate, swiglu_range, &sw);
    cpu_gemm_wt(e, s->hb, n, &l->down, NULL, s->xb);
    for (size_t i = 0; i < (size_t)n * D; i++)
        s->x[i] += s->xb[i];
}

int cpu_prefill(la_engine *e, const int32_t *ids, int n, int32_t *first, char *err, size_t errlen) {
    const la_config *c = &e->cfg;
    cpu_state *s = &e->s;
    const int D = c->hidden;

    if (!ids || !first || n <= 0)
        return la_errorf(err, errlen, "prefill: empty prompt");
    if (n > c->max_seq_len)
        return la_errorf(err, errlen, "prefill: prompt of %d tokens is longer than max_seq_len %d",
                          n, c->max_seq_len);
    int n_img = 0;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= c->vocab)
            return la_errorf(err, errlen,
                              "prefill: token id %d at position %d is outside the vocabulary 0..%d",
                              (int)ids[i], i, c->vocab - 1);
        n_img += ids[i] == c->image_token_id;
    }
    if (n_img != s->n_img)
        return la_errorf(err, errlen,
                          "prefill: prompt has %d image tokens (id %d) but the last vision call kept %d embeddings",
                          n_img, c->image_token_id, s->n_img);

    /* A new prompt starts from position 0 whatever ran before. */
    s->pos = 0;
    s->has_logits = 0;
    for (int i = 0, k = 0; i < n; i++) {
        float *row = s->x + (size_t)i * D;
        if (ids[i] == c->image_token_id)
            memcpy(row, s->img + (size_t)k++ * D, (size_t)D * sizeof *row);
        else
            embed_row(e, ids[i], row);
    }
    for (int li = 0; li < c->layers; li++)
        prefill_layer(e, li, n);

    /* Only the last position's logits are needed for the first token. */
    cpu_rmsnorm(e->plan.xb, s->x + (size_t)(n - 1) * D, e->w.final_norm, D, c->rms_norm_eps);
    *first = lm_head_argmax(e);
    s->pos = n;
    return 0;
}

/* ---- decode ------------------------------------------------------------------------- */

int cpu_plan_decode(la_engine *e, char *err, size_t errlen) {
    const la_config *c = &e->cfg;
    cpu_decode_plan *p = &e->plan;
    const size_t qd = (size_t)c->heads * c->head_dim, kvd = (size_t)c->kv_heads * c->head_dim;

    p->layers = calloc((size_t)c->layers, sizeof *p->layers);
    p->x = calloc((size_t)c->hidden, sizeof(float));
    p->xb = calloc((size_t)c->hidden, sizeof(float));
    p->q = calloc(qd, sizeof(float));
    p->k = calloc(kvd, sizeof(float));
    p->v = calloc(kvd, sizeof(float));
    p->att = calloc(qd, sizeof(float));
    p->hb = calloc((size_t)c->intermediate, sizeof(float));
    p->hb2 = calloc((size_t)c->intermediate, sizeof(float));
    p->scores = calloc((size_t)c->heads * c->max_seq_len, sizeof(float));
    if (!p->layers || !p->x || !p->xb || !p->q || !p->k || !p->v || !p->att || !p->hb || !p->hb2 ||
        !p->scores)
        return la_errorf(err, errlen, "decode plan: out of memory");

    for (int i = 0; i < c->layers; i++) {
        const cpu_text_layer *l = &e->w.layers[i];
        cpu_decode_layer *d = &p->layers[i];
        d->qkv[0] = (cpu_matvec){&l->q, l->q_b, p->xb, p->q};
        d->qkv[1] = (cpu_matvec){&l->k, l->k_b, p->xb, p->k};
        d->qkv[2] = (cpu_matvec){&l->v, l->v_b, p->xb, p->v};
        d->o[0] = (cpu_matvec){&l->o, NULL, p->att, p->xb};
        d->gate_up[0] = (cpu_matvec){&l->gate, NULL, p->xb, p->hb};
        d->gate_up[1] = (cpu_matvec){&l->up, NULL, p->xb, p->hb2};
        d->down[0] = (cpu_matvec){&l->down, NULL, p->hb, p->xb};
    }
    p->lm_head = (cpu_matvec){&e->w.lm_head, NULL, p->xb, e->s.logits};
    return 0;
}

/* decode_attention attends the single query at position pos to cache rows 0..pos. */
static void decode_attention(la_engine *e, int li, int pos) {
    const la_config *c = &e->cfg;
    cpu_decode_plan *p = &e->plan;
    const int hd = c->head_dim, group = c->heads / c->kv_heads, kvd = c->kv_heads * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    const float *kc = key_cache_layer(e, li), *vc = value_cache_layer(e, li);

    for (int h = 0; h < c->heads; h++) {
        const float *q = p->q + (size_t)h * hd;
        const int g = h / group;
        float *sc = p->scores + (size_t)h * c->max_seq_len;
        for (int t = 0; t <= pos; t++) {
            const float *k = kc + (size_t)t * kvd + (size_t)g * hd;
            float dot = 0;
            for (int i = 0; i < hd; i++)
                dot += q[i] * k[i];
            sc[t] = dot * scale;
        }
        cpu_softmax(sc, pos + 1);
        float *out = p->att + (size_t)h * hd;
        memset(out, 0, (size_t)hd * sizeof *out);
        for (int t = 0; t <= pos; t++) {
            const float *v = vc + (size_t)t * kvd + (size_t)g * hd;
            for (int i = 0; i < hd; i++)
                out[i] += sc[t] * v[i];
        }
    }
}

int cpu_decode(la_engine *e, int32_t token, int32_t *next, char *err, size_t errlen) {
    const la_config *c = &e->cfg;
    cpu_decode_plan *p = &e->plan;
    cpu_state *s = &e->s;
    const int D = c->hidden, hd = c->head_dim, half = hd / 2;
    const size_t kvd = (size_t)c->kv_heads * hd;
    const int pos = s->pos;

    if (!next)
        return la_errorf(err, errlen, "decode: no output pointer");
    if (pos == 0)
        return la_errorf(err, errlen, "decode: no prefill since open or reset");
    if (pos >= c->max_seq_len)
        return la_errorf(err, errlen, "decode: sequence is full at max_seq_len %d", c->max_seq_len);
    if (token < 0 || token >= c->vocab)
        return la_errorf(err, errlen, "decode: token id %d is outside the vocabulary 0..%d",
                          (int)token, c->vocab - 1);

    embed_row(e, token, p->x);
    const float *cs = s->rope_cos + (size_t)pos * half, *sn = s->rope_sin + (size_t)pos * half;
    for (int li = 0; li < c->layers; li++) {
        const cpu_text_layer *l = &e->w.layers[li];
        cpu_decode_layer *d = &p->layers[li];

        cpu_rmsnorm(p->xb, p->x, l->attn_norm, D, c->rms_norm_eps);
        cpu_matvec_run(&e->pool, &e->kern, d->qkv, 3);
        rope_half(p->q, c->heads, hd, cs, sn);
        rope_half(p->k, c->kv_heads, hd, cs, sn);
        memcpy(key_cache_layer(e, li) + (size_t)pos * kvd, p->k, kvd * sizeof(float));
        memcpy(value_cache_layer(e, li) + (size_t)pos * kvd, p->v, kvd * sizeof(float));
        decode_attention(e, li, pos);
        cpu_matvec_run(&e->pool, &e->kern, d->o, 1);
        for (int i = 0; i < D; i++)
            p->x[i] += p->xb[i];

        cpu_rmsnorm(p->xb, p->x, l->mlp_norm, D, c->rms_norm_eps);
        cpu_matvec_run(&e->pool, &e->kern, d->gate_up, 2);
        for (int i = 0; i < c->intermediate; i++)
            p->hb[i] = cpu_silu(p->hb[i]) * p->hb2[i];
        cpu_matvec_run(&e->pool, &e->kern, d->down, 1);
        for (int i = 0; i < D; i++)
            p->x[i] += p->xb[i];
    }
    cpu_rmsnorm(p->xb, p->x, e->w.final_norm, D, c->rms_norm_eps);
    *next = lm_head_argmax(e);
    s->pos = pos + 1;
    return 0;
}
