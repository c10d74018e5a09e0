/*
 * cpu_text.c - the Qwen2 decoder's layer loop, the one every row of a step runs through
 * (cpu_step.c checks the call, lays its rows out and reads the output rows).
 *
 * Layer: x += o(attn(rope(q(RMS(x))), rope(k(RMS(x))), v(RMS(x))))
 *        x += down(silu(gate(RMS(x))) * up(RMS(x)))
 * with rotate-half RoPE, grouped-query attention and q/k/v bias (no o bias). Each slot's
 * KV cache holds float32 keys (after RoPE) and values for every layer and position.
 *
 * The rows go through the loop in runs (cpu_rows), and a run is of one of two kinds, which
 * differ only in how two parts are computed:
 *
 *   - a prompt run is one free slot's prompt (its prefill): many rows of one slot, so each
 *     matrix product is one GEMM over all of them (cpu_gemm_wt) and attention is causal
 *     over the prompt, as GEMMs per head (cpu_attention);
 *   - a live run is the rows of every live slot of the step together: few rows, so each
 *     product is one batched matrix-vector pass (cpu_matmat_run: the weights stream from
 *     memory once for all the rows) and attention goes row by row (attend_row_group).
 *
 * Everything else (the norms, RoPE, keeping keys and values in the cache, the residual
 * adds, the SwiGLU) is the same code for both. In a live run no row's numbers depend on
 * the other rows (the batched products sum each row the same way whatever the batch), so
 * a slot gets the same bits alone or in any batch, in any order.
 *
 * Kept rows (a prompt's, a live slot's pending ones) write their key and value into their
 * slot's cache before anyone attends, so each sees itself and the kept rows before it;
 * block rows keep theirs in the run's buffers only, and the slot ends the step holding
 * exactly its committed tokens.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

/* ---- the KV cache, the embedding, RoPE ---------------------------------------------- */

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

void cpu_embed_rows(la_engine *e, const int32_t *ids, int n, int images, float *x) {
    const cpu_matrix *m = &e->w.embed;
    const size_t D = (size_t)e->cfg.hidden, esize = cpu_dtype_size(m->dtype);
    int k = 0; /* image embeddings used */
    for (int i = 0; i < n; i++) {
        float *row = x + (size_t)i * D;
        if (images && ids[i] == e->cfg.image_token_id && k < e->s.n_img)
            memcpy(row, e->s.img + (size_t)k++ * D, D * sizeof *row);
        else
            cpu_to_f32(m->dtype, (const char *)m->data + (size_t)ids[i] * m->cols * esize, row,
                       (size_t)m->cols);
    }
    if (images)
        e->s.n_img = 0; /* consumed: the next prefill needs its own vision call */
}

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

/* ---- the parts of a layer ----------------------------------------------------------- */

/* The seven matrix products of one layer over a run's buffers. */
typedef struct {
    cpu_matmat qkv[3];
    cpu_matmat o[1];
    cpu_matmat gate_up[2];
    cpu_matmat down[1];
} layer_products;

static layer_products products_of(const la_engine *e, const cpu_text_layer *l, const cpu_rows *run) {
    const size_t D = (size_t)e->cfg.hidden, I = (size_t)e->cfg.intermediate;
    const size_t qd = (size_t)e->cfg.heads * e->cfg.head_dim;
    const size_t kvd = (size_t)e->cfg.kv_heads * e->cfg.head_dim;
    layer_products p = {
        .qkv = {{&l->q, l->q_b, run->xb, D, run->q, qd},
                {&l->k, l->k_b, run->xb, D, run->k, kvd},
                {&l->v, l->v_b, run->xb, D, run->v, kvd}},
        .o = {{&l->o, NULL, run->att, qd, run->xb, D}},
        .gate_up = {{&l->gate, NULL, run->xb, D, run->hb, I}, {&l->up, NULL, run->xb, D, run->hb2, I}},
        .down = {{&l->down, NULL, run->hb, I, run->xb, D}},
    };
    return p;
}

/* short_prompt says whether a prompt run's products go through the batched
 * matrix-vector pass instead of GEMMs. The fast path's GEMMs (AMX or AVX512_BF16 tiles;
 * q8 weights under matmul=f32, which dequantizes every matrix for OpenBLAS) first convert
 * every weight of the model, whatever the prompt's length: about a second at 3B. For a
 * few rows the matrix-vector pass, which streams each weight once for all of them, costs
 * time in proportion to the rows instead. The exact path's own float32 kernels already
 * choose an unpacked kernel for short prompts themselves (f32_kernel=openblas, a
 * measurement option, widens every bf16 weight either way). */
static int short_prompt(const la_engine *e, const cpu_rows *run, const cpu_matmat *mm) {
    if (run->n > e->short_prompt_rows)
        return 0;
    return e->matmul != CPU_MATMUL_F32 || mm->w->dtype == CPU_DTYPE_Q8;
}

/* multiply runs count products of one input over the run's rows: GEMMs for a prompt run
 * (unless it is short), one batched matrix-vector pass for a live run. The buffers' rows
 * are dense, as the GEMM wants (ldx = the weights' columns, ldy = their rows). */
static void multiply(la_engine *e, const cpu_rows *run, const cpu_matmat *mm, int count) {
    if (run->prompt && !short_prompt(e, run, mm)) {
        for (int j = 0; j < count; j++)
            cpu_gemm_wt(e, mm[j].x, run->n, mm[j].w, mm[j].bias, mm[j].y,
                        e->split == CPU_SPLIT_ALL);
        return;
    }
    cpu_matmat_run(&e->pool, &e->kern, mm, count, run->n, run->xpack);
}

/* norm_rows writes RMSNorm(x) with weight w into xb, row by row. */
static void norm_rows(const la_engine *e, const cpu_rows *run, const float *w) {
    const int D = e->cfg.hidden;
    for (int r = 0; r < run->n; r++)
        cpu_rmsnorm(run->xb + (size_t)r * D, run->x + (size_t)r * D, w, D, e->cfg.rms_norm_eps);
}

/* add_rows adds the part's output xb to the residual stream x. */
static void add_rows(const la_engine *e, const cpu_rows *run) {
    const size_t n = (size_t)run->n * e->cfg.hidden;
    for (size_t i = 0; i < n; i++)
        run->x[i] += run->xb[i];
}

/* rope_rows rotates each row's query and key by its position's angles. */
static void rope_rows(const la_engine *e, const cpu_rows *run) {
    const la_config *c = &e->cfg;
    const int hd = c->head_dim, half = hd / 2;
    const size_t qd = (size_t)c->heads * hd, kvd = (size_t)c->kv_heads * hd;
    for (int r = 0; r < run->n; r++) {
        const float *cs = e->s.rope_cos + (size_t)run->rows[r].pos * half;
        const float *sn = e->s.rope_sin + (size_t)run->rows[r].pos * half;
        rope_half(run->q + (size_t)r * qd, c->heads, hd, cs, sn);
        rope_half(run->k + (size_t)r * kvd, c->kv_heads, hd, cs, sn);
    }
}

/* keep_rows writes each kept row's key and value into its slot's cache at its position;
 * block rows are left in the run's buffers. */
static void keep_rows(la_engine *e, const cpu_rows *run, int li) {
    const size_t kvd = (size_t)e->cfg.kv_heads * e->cfg.head_dim;
    for (int r = 0; r < run->n; r++) {
        const cpu_step_row *row = &run->rows[r];
        if (row->block0 >= 0)
            continue;
        memcpy(key_cache(e, row->slot, li) + (size_t)row->pos * kvd, run->k + (size_t)r * kvd,
               kvd * sizeof(float));
        memcpy(value_cache(e, row->slot, li) + (size_t)row->pos * kvd, run->v + (size_t)r * kvd,
               kvd * sizeof(float));
    }
}

/* A live run's attention: the unit of work is one row and one key/value head with its
 * group of query heads, so each key row is read once for the group. Scores go cache
 * columns first, then the row's block columns (the first n_block rows of its block: all
 * of them, or rows 0..i under block_causal); the softmax runs over both, and the output
 * sums the cache values and then the block values. A pending row has no block columns:
 * its numbers are those of decoding its tokens one step at a time, bit for bit. */
typedef struct {
    la_engine *e;
    const cpu_rows *run;
    int layer;
} attn_task;

static void attend_row_group(la_engine *e, const cpu_rows *run, int li, int r, int g) {
    const la_config *c = &e->cfg;
    const cpu_step_row *row = &run->rows[r];
    const int hd = c->head_dim, group = c->heads / c->kv_heads;
    const size_t kvd = (size_t)c->kv_heads * hd, qd = (size_t)c->heads * hd;
    const size_t ld = (size_t)c->max_seq_len + LA_STEP_MAX_ROWS;
    const int n_cache = row->n_cache, n_block = row->block0 >= 0 ? row->n_block : 0;
    const int n_keys = n_cache + n_block;
    const float scale = 1.0f / sqrtf((float)hd);
    const float *kc = key_cache(e, row->slot, li) + (size_t)g * hd;
    const float *vc = value_cache(e, row->slot, li) + (size_t)g * hd;
    const float *q = run->q + (size_t)r * qd + (size_t)g * group * hd;
    float *sc = run->scores + ((size_t)r * c->heads + (size_t)g * group) * ld;

    /* scores[h][t] = q_h . k_t: the cache rows, then the block's rows from the run's buffer */
    e->kern.rows[LA_DTYPE_F32](kc, kvd, n_cache, hd, q, (size_t)hd, group, sc, ld);
    const float *kb = NULL, *vb = NULL;
    if (n_block > 0) {
        kb = run->k + (size_t)row->block0 * kvd + (size_t)g * hd;
        vb = run->v + (size_t)row->block0 * kvd + (size_t)g * hd;
        e->kern.rows[LA_DTYPE_F32](kb, kvd, n_block, hd, q, (size_t)hd, group, sc + n_cache, ld);
    }
    for (int h = 0; h < group; h++) {
        float *s = sc + (size_t)h * ld;
        for (int t = 0; t < n_keys; t++)
            s[t] *= scale;
        cpu_softmax(s, n_keys);
        float *out = run->att + (size_t)r * qd + (size_t)(g * group + h) * hd;
        memset(out, 0, (size_t)hd * sizeof *out);
        for (int t = 0; t < n_cache; t++)
            e->kern.axpy(out, s[t], vc + (size_t)t * kvd, hd);
        for (int t = 0; t < n_block; t++)
            e->kern.axpy(out, s[n_cache + t], vb + (size_t)t * kvd, hd);
    }
}

static void attention_slice(void *arg, int thread, int nthreads) {
    const attn_task *a = arg;
    const int kvh = a->e->cfg.kv_heads, units = a->run->n * kvh;
    for (int u = units * thread / nthreads; u < units * (thread + 1) / nthreads; u++)
        attend_row_group(a->e, a->run, a->layer, u / kvh, u % kvh);
}

/* attend writes the attention output of every row to att: a prompt run's rows attend
 * causally to the prompt in the slot's cache (rows 0..n-1, kept above), a live run's row
 * by row. */
static void attend(la_engine *e, const cpu_rows *run, int li) {
    const la_config *c = &e->cfg;
    if (run->prompt) {
        const int slot = run->rows[0].slot;
        const int qd = c->heads * c->head_dim, kvd = c->kv_heads * c->head_dim;
        cpu_attn a = {
            .q = run->q, .ldq = qd, .k = key_cache(e, slot, li), .v = value_cache(e, slot, li),
            .ldkv = kvd, .out = run->att, .ldo = qd, .n_q = run->n, .n_k = run->n,
            .heads = c->heads, .kv_heads = c->kv_heads, .head_dim = c->head_dim,
            .causal = 1, .q_offset = 0,
        };
        cpu_attention(e, &a);
        return;
    }
    attn_task a = {e, run, li};
    cpu_pool_run(&e->pool, attention_slice, &a);
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

static void swiglu_rows(la_engine *e, const cpu_rows *run) {
    swiglu_task sw = {e->kern.swiglu, run->hb, run->hb2};
    cpu_pool_for(&e->pool, (size_t)run->n * e->cfg.intermediate, swiglu_range, &sw);
}

/* ---- the layer loop ----------------------------------------------------------------- */

static void decoder_layer(la_engine *e, const cpu_rows *run, int li) {
    const cpu_text_layer *l = &e->w.layers[li];
    const layer_products p = products_of(e, l, run);

    norm_rows(e, run, l->attn_norm);
    multiply(e, run, p.qkv, 3);
    rope_rows(e, run);
    keep_rows(e, run, li);
    attend(e, run, li);
    multiply(e, run, p.o, 1);
    add_rows(e, run);

    norm_rows(e, run, l->mlp_norm);
    multiply(e, run, p.gate_up, 2);
    swiglu_rows(e, run);
    multiply(e, run, p.down, 1);
    add_rows(e, run);
}

void cpu_run_layers(la_engine *e, const cpu_rows *run) {
    for (int li = 0; li < e->cfg.layers; li++)
        decoder_layer(e, run, li);
}
