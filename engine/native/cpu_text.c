/*
 * cpu_text.c - the Qwen2 decoder: prefill of one prompt into a slot with GEMMs, and the
 * decode step for several slots at once, planned once at open and replayed per step.
 *
 * Layer: x += o(attn(rope(q(RMS(x))), rope(k(RMS(x))), v(RMS(x))))
 *        x += down(silu(gate(RMS(x))) * up(RMS(x)))
 * with rotate-half RoPE, grouped-query causal attention and q/k/v bias (no o bias).
 * Each slot's KV cache holds float32 keys (after RoPE) and values for every layer and
 * position.
 *
 * A decode step for n sequences runs every matrix product once for all n rows (the
 * weights stream from memory once per step) and everything else row by row, each row at
 * its own position against its own slot's cache. No row's arithmetic depends on the other
 * rows, so a sequence gets the same bits alone or in any batch.
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

/* ---- picking the next token --------------------------------------------------------- */

/* The LM head writes one row of vocab logits per sequence; the greedy token is the
 * argmax (the lowest id on ties) and its probability softmax(row)[token] = 1 / sum_i
 * e^(row[i] - row[token]). Both run on the pool, each thread over its slice of the
 * vocabulary for every row, and the caller combines the slices in thread order. */
typedef struct {
    la_engine *e;
    int n;
    const int32_t *best; /* for the sums: each row's argmax */
} pick_task;

static void pick_slice_bounds(const la_engine *e, int thread, int nthreads, int *lo, int *hi) {
    const int64_t V = e->cfg.vocab;
    *lo = (int)(V * thread / nthreads);
    *hi = (int)(V * (thread + 1) / nthreads);
}

static void argmax_slice(void *arg, int thread, int nthreads) {
    const pick_task *t = arg;
    la_engine *e = t->e;
    const int mb = e->cfg.max_batch;
    int lo, hi;
    pick_slice_bounds(e, thread, nthreads, &lo, &hi);
    for (int r = 0; r < t->n; r++) {
        const float *row = e->s.logits + (size_t)r * e->cfg.vocab;
        int32_t best = lo < hi ? lo : -1;
        for (int i = lo + 1; i < hi; i++)
            if (row[i] > row[best]) /* strict: the lowest id wins a tie */
                best = i;
        e->plan.part_idx[thread * mb + r] = best;
        e->plan.part_max[thread * mb + r] = best >= 0 ? row[best] : 0;
    }
}

static void expsum_slice(void *arg, int thread, int nthreads) {
    const pick_task *t = arg;
    la_engine *e = t->e;
    int lo, hi;
    pick_slice_bounds(e, thread, nthreads, &lo, &hi);
    for (int r = 0; r < t->n; r++) {
        const float *row = e->s.logits + (size_t)r * e->cfg.vocab;
        e->plan.part_sum[thread * e->cfg.max_batch + r] =
            lo < hi ? e->kern.expsum(row + lo, hi - lo, row[t->best[r]]) : 0;
    }
}

/* pick_tokens writes the greedy token of logits rows 0..n-1 to next, and when prob is not
 * NULL its probability. The probability uses a vectorised e^x (within 2 float ulp) summed
 * in double: about 1e-6 relative, not bit-exact with any other softmax. */
static void pick_tokens(la_engine *e, int n, int32_t *next, float *prob) {
    cpu_decode_plan *p = &e->plan;
    const int T = e->pool.nthreads, mb = e->cfg.max_batch;
    pick_task t = {e, n, next};
    cpu_pool_run(&e->pool, argmax_slice, &t);
    for (int r = 0; r < n; r++) {
        int32_t best = -1;
        float bv = 0;
        for (int th = 0; th < T; th++) {
            int32_t i = p->part_idx[th * mb + r];
            if (i >= 0 && (best < 0 || p->part_max[th * mb + r] > bv)) {
                best = i;
                bv = p->part_max[th * mb + r];
            }
        }
        next[r] = best;
    }
    if (!prob)
        return;
    cpu_pool_run(&e->pool, expsum_slice, &t);
    for (int r = 0; r < n; r++) {
        double sum = 0;
        for (int th = 0; th < T; th++)
            sum += p->part_sum[th * mb + r];
        prob[r] = (float)(1.0 / sum);
    }
}

/* lm_head_pick computes the logits of the n normed hidden states in plan.xb into logits
 * rows 0..n-1 and picks each row's token. */
static void lm_head_pick(la_engine *e, int n, int32_t *next, float *prob) {
    cpu_matmat_run(&e->pool, &e->kern, &e->plan.lm_head, 1, n, e->plan.xpack);
    pick_tokens(e, n, next, prob);
    e->s.logit_rows = n;
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

int cpu_prefill(la_engine *e, int slot, const int32_t *ids, int n, int32_t *first, float *prob,
                char *err, size_t errlen) {
    const la_config *c = &e->cfg;
    cpu_state *s = &e->s;
    const int D = c->hidden;

    if (slot < 0 || slot >= c->max_batch)
        return la_errorf(err, errlen, "prefill: slot %d out of range 0..%d", slot, c->max_batch - 1);
    if (s->slots[slot].live)
        return la_errorf(err, errlen, "prefill: slot %d holds a live sequence; release it first", slot);
    if (!ids || n <= 0)
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
                          "prefill: prompt has %d image tokens (id %d) but %d embeddings are kept "
                          "(a vision call keeps its embeddings for the one prefill after it)",
                          n_img, c->image_token_id, s->n_img);

    s->logit_rows = 0;
    for (int i = 0, k = 0; i < n; i++) {
        float *row = s->x + (size_t)i * D;
        if (ids[i] == c->image_token_id)
            memcpy(row, s->img + (size_t)k++ * D, (size_t)D * sizeof *row);
        else
            embed_row(e, ids[i], row);
    }
    s->n_img = 0; /* consumed: the next prefill needs its own vision call */
    for (int li = 0; li < c->layers; li++)
        prefill_layer(e, slot, li, n);

    /* Only the last position's logits are needed for the first token: row 0. A caller
     * that wants no first token (hybrid decoding starts with a block) skips the LM head. */
    if (first) {
        cpu_rmsnorm(e->plan.xb, s->x + (size_t)(n - 1) * D, e->w.final_norm, D, c->rms_norm_eps);
        lm_head_pick(e, 1, first, prob);
    }
    s->slots[slot].live = 1;
    s->slots[slot].pos = n;
    return 0;
}

/* ---- decode ------------------------------------------------------------------------- */

int cpu_plan_decode(la_engine *e, char *err, size_t errlen) {
    const la_config *c = &e->cfg;
    cpu_decode_plan *p = &e->plan;
    const size_t B = (size_t)c->max_batch, D = (size_t)c->hidden, I = (size_t)c->intermediate;
    const size_t qd = (size_t)c->heads * c->head_dim, kvd = (size_t)c->kv_heads * c->head_dim;
    const size_t T = (size_t)e->pool.nthreads;

    p->layers = calloc((size_t)c->layers, sizeof *p->layers);
    p->x = calloc(B * D, sizeof(float));
    p->xb = calloc(B * D, sizeof(float));
    p->q = calloc(B * qd, sizeof(float));
    p->k = calloc(B * kvd, sizeof(float));
    p->v = calloc(B * kvd, sizeof(float));
    p->att = calloc(B * qd, sizeof(float));
    p->hb = calloc(B * I, sizeof(float));
    p->hb2 = calloc(B * I, sizeof(float));
    p->scores = calloc(B * (size_t)c->heads * (size_t)c->max_seq_len, sizeof(float));
    p->part_max = calloc(T * B, sizeof *p->part_max);
    p->part_idx = calloc(T * B, sizeof *p->part_idx);
    p->part_sum = calloc(T * B, sizeof *p->part_sum);
    size_t widest = D > I ? D : I;
    widest = widest > qd ? widest : qd;
    p->xpack = calloc(B * widest, sizeof(float));
    if (!p->xpack || !p->layers || !p->x || !p->xb || !p->q || !p->k || !p->v || !p->att || !p->hb || !p->hb2 ||
        !p->scores || !p->part_max || !p->part_idx || !p->part_sum)
        return la_errorf(err, errlen, "decode plan: out of memory for %zu sequences", B);

    for (int i = 0; i < c->layers; i++) {
        const cpu_text_layer *l = &e->w.layers[i];
        cpu_decode_layer *d = &p->layers[i];
        d->qkv[0] = (cpu_matmat){&l->q, l->q_b, p->xb, D, p->q, qd};
        d->qkv[1] = (cpu_matmat){&l->k, l->k_b, p->xb, D, p->k, kvd};
        d->qkv[2] = (cpu_matmat){&l->v, l->v_b, p->xb, D, p->v, kvd};
        d->o[0] = (cpu_matmat){&l->o, NULL, p->att, qd, p->xb, D};
        d->gate_up[0] = (cpu_matmat){&l->gate, NULL, p->xb, D, p->hb, I};
        d->gate_up[1] = (cpu_matmat){&l->up, NULL, p->xb, D, p->hb2, I};
        d->down[0] = (cpu_matmat){&l->down, NULL, p->hb, I, p->xb, D};
    }
    p->lm_head = (cpu_matmat){&e->w.lm_head, NULL, p->xb, D, e->s.logits, (size_t)c->vocab};
    return 0;
}

void cpu_free_plan(cpu_decode_plan *p) {
    float *bufs[] = {p->x, p->xb, p->q, p->k, p->v, p->att, p->hb, p->hb2, p->scores, p->part_max,
                     p->xpack};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    free(p->part_idx);
    free(p->part_sum);
    free(p->layers);
    memset(p, 0, sizeof *p);
}

/* One decode step's attention: row r (slot slots[r], at position pos of that slot) attends
 * to its slot's cache rows 0..pos. The unit of work is one row and one key/value head with
 * the group of query heads that share it, so each key row is read once for the group. */
typedef struct {
    la_engine *e;
    int layer, n;
    const int32_t *slots;
} attn_step;

static void attend_group(la_engine *e, int li, int r, int slot, int g) {
    const la_config *c = &e->cfg;
    cpu_decode_plan *p = &e->plan;
    const int hd = c->head_dim, group = c->heads / c->kv_heads;
    const size_t kvd = (size_t)c->kv_heads * hd, qd = (size_t)c->heads * hd, S = (size_t)c->max_seq_len;
    const int pos = e->s.slots[slot].pos;
    const float scale = 1.0f / sqrtf((float)hd);
    const float *kc = key_cache(e, slot, li) + (size_t)g * hd;
    const float *vc = value_cache(e, slot, li) + (size_t)g * hd;
    const float *q = p->q + (size_t)r * qd + (size_t)g * group * hd;
    float *sc = p->scores + ((size_t)r * c->heads + (size_t)g * group) * S;

    /* scores[h][t] = q_h . k_t for the group's heads h and keys t <= pos */
    e->kern.rows[LA_DTYPE_F32](kc, kvd, pos + 1, hd, q, (size_t)hd, group, sc, S);
    for (int h = 0; h < group; h++) {
        float *row = sc + (size_t)h * S;
        for (int t = 0; t <= pos; t++)
            row[t] *= scale;
        cpu_softmax(row, pos + 1);
        float *out = p->att + (size_t)r * qd + (size_t)(g * group + h) * hd;
        memset(out, 0, (size_t)hd * sizeof *out);
        for (int t = 0; t <= pos; t++)
            e->kern.axpy(out, row[t], vc + (size_t)t * kvd, hd);
    }
}

static void attention_slice(void *arg, int thread, int nthreads) {
    const attn_step *a = arg;
    const int kvh = a->e->cfg.kv_heads, units = a->n * kvh;
    for (int u = units * thread / nthreads; u < units * (thread + 1) / nthreads; u++)
        attend_group(a->e, a->layer, u / kvh, a->slots[u / kvh], u % kvh);
}

/* check_step validates a decode call before anything is written. */
static int check_step(const la_engine *e, int n, const int32_t *slots, const int32_t *tokens,
                      const int32_t *next, char *err, size_t errlen) {
    const la_config *c = &e->cfg;
    if (n < 1 || n > c->max_batch)
        return la_errorf(err, errlen, "decode: %d rows, want 1..%d (max_batch)", n, c->max_batch);
    if (!slots || !tokens || !next)
        return la_errorf(err, errlen, "decode: no slots, tokens or output array");
    for (int i = 0; i < n; i++) {
        const int slot = slots[i];
        if (slot < 0 || slot >= c->max_batch)
            return la_errorf(err, errlen, "decode: row %d: slot %d out of range 0..%d", i, slot,
                              c->max_batch - 1);
        for (int j = 0; j < i; j++)
            if (slots[j] == slot)
                return la_errorf(err, errlen, "decode: slot %d appears in rows %d and %d; each slot "
                                  "advances at most once per step", slot, j, i);
        if (!e->s.slots[slot].live)
            return la_errorf(err, errlen, "decode: row %d: slot %d has no prefill since open, "
                              "reset or its release", i, slot);
        if (e->s.slots[slot].pos >= c->max_seq_len)
            return la_errorf(err, errlen, "decode: row %d: slot %d: sequence is full at max_seq_len %d",
                              i, slot, c->max_seq_len);
        if (tokens[i] < 0 || tokens[i] >= c->vocab)
            return la_errorf(err, errlen, "decode: row %d: token id %d is outside the vocabulary 0..%d",
                              i, (int)tokens[i], c->vocab - 1);
    }
    return 0;
}

int cpu_decode(la_engine *e, int n, const int32_t *slots, const int32_t *tokens, int32_t *next,
               float *prob, char *err, size_t errlen) {
    const la_config *c = &e->cfg;
    cpu_decode_plan *p = &e->plan;
    cpu_state *s = &e->s;
    const int D = c->hidden, hd = c->head_dim, half = hd / 2;
    const size_t kvd = (size_t)c->kv_heads * hd, qd = (size_t)c->heads * hd;

    if (check_step(e, n, slots, tokens, next, err, errlen) != 0)
        return -1;
    s->logit_rows = 0;
    for (int r = 0; r < n; r++)
        embed_row(e, tokens[r], p->x + (size_t)r * D);
    for (int li = 0; li < c->layers; li++) {
        const cpu_text_layer *l = &e->w.layers[li];
        cpu_decode_layer *d = &p->layers[li];

        for (int r = 0; r < n; r++)
            cpu_rmsnorm(p->xb + (size_t)r * D, p->x + (size_t)r * D, l->attn_norm, D, c->rms_norm_eps);
        cpu_matmat_run(&e->pool, &e->kern, d->qkv, 3, n, e->plan.xpack);
        for (int r = 0; r < n; r++) {
            const int pos = s->slots[slots[r]].pos;
            const float *cs = s->rope_cos + (size_t)pos * half, *sn = s->rope_sin + (size_t)pos * half;
            float *k = p->k + (size_t)r * kvd, *v = p->v + (size_t)r * kvd;
            rope_half(p->q + (size_t)r * qd, c->heads, hd, cs, sn);
            rope_half(k, c->kv_heads, hd, cs, sn);
            memcpy(key_cache(e, slots[r], li) + (size_t)pos * kvd, k, kvd * sizeof(float));
            memcpy(value_cache(e, slots[r], li) + (size_t)pos * kvd, v, kvd * sizeof(float));
        }
        attn_step a = {e, li, n, slots};
        cpu_pool_run(&e->pool, attention_slice, &a);
        cpu_matmat_run(&e->pool, &e->kern, d->o, 1, n, e->plan.xpack);
        for (size_t i = 0; i < (size_t)n * D; i++)
            p->x[i] += p->xb[i];

        for (int r = 0; r < n; r++)
            cpu_rmsnorm(p->xb + (size_t)r * D, p->x + (size_t)r * D, l->mlp_norm, D, c->rms_norm_eps);
        cpu_matmat_run(&e->pool, &e->kern, d->gate_up, 2, n, e->plan.xpack);
        swiglu_task sw = {e->kern.swiglu, p->hb, p->hb2};
        cpu_pool_for(&e->pool, (size_t)n * c->intermediate, swiglu_range, &sw);
        cpu_matmat_run(&e->pool, &e->kern, d->down, 1, n, e->plan.xpack);
        for (size_t i = 0; i < (size_t)n * D; i++)
            p->x[i] += p->xb[i];
    }
    for (int r = 0; r < n; r++)
        cpu_rmsnorm(p->xb + (size_t)r * D, p->x + (size_t)r * D, e->w.final_norm, D, c->rms_norm_eps);
    lm_head_pick(e, n, next, prob);
    for (int r = 0; r < n; r++)
        s->slots[slots[r]].pos++;
    return 0;
}

/* ---- shared with the step (cpu_step.c) ---------------------------------------------- */

/* The step runs the same per-row arithmetic as prefill and decode; these give it the very
 * same functions, so a step row and a decode row can not drift apart. */
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
