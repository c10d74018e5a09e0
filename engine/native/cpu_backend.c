/*
 * cpu_backend.c - the CPU backend's ops table: open (check the tensor table against the
 * config, plan the run), reset, inspection and close.
 *
 * Memory policy. The mapped checkpoint is never copied as a whole: at the real 3B size a
 * float32 copy would be 12 GB next to the 6 GB mapping. Decode reads the mapped bf16/f16/f32
 * rows directly. Prefill and the vision tower run their matrix products through OpenBLAS's
 * cblas_sgemm, which wants float32: a float32 weight is used in place, a bf16/f16 one is
 * widened into one scratch buffer (the size of the largest such matrix) right before its
 * product. Widening costs one pass over the weight per call, small next to the product
 * itself at prompt lengths in the hundreds. Only 1-D tensors (norms, biases) and the
 * position-embedding table are widened once, at open.
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cpu_internal.h"

/* Rows of attention queries per score block: bounds the score buffer to
 * attn_chunk x (longest key sequence) floats while keeping the GEMMs large. */
enum { LA_CPU_ATTN_CHUNK = 256 };

/* ---- tensor lookup ------------------------------------------------------------------ */

static const la_tensor *find_tensor(const la_config *c, const char *name) {
    for (int i = 0; i < c->n_tensors; i++)
        if (c->tensors[i].name && strcmp(c->tensors[i].name, name) == 0)
            return &c->tensors[i];
    return NULL;
}

static void format_shape(char *buf, size_t len, int ndim, const int64_t *shape) {
    size_t off = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (off < len)
        snprintf(buf + off, len - off, "]");
}

/* check_tensor finds name and checks its dtype, shape, size and alignment. */
static const la_tensor *check_tensor(const la_config *c, const char *name, int ndim,
                                     const int64_t *want, char *err, size_t errlen) {
    const la_tensor *t = find_tensor(c, name);
    char got[96], exp[96];
    if (!t) {
        la_errorf(err, errlen, "tensor %s: missing from the checkpoint", name);
        return NULL;
    }
    if (t->dtype != LA_DTYPE_F32 && t->dtype != LA_DTYPE_F16 && t->dtype != LA_DTYPE_BF16) {
        la_errorf(err, errlen, "tensor %s: unsupported dtype %d (want f32, f16 or bf16)", name,
                   (int)t->dtype);
        return NULL;
    }
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = t->shape[i] == want[i];
    if (!same) {
        format_shape(got, sizeof got, t->ndim < 0 || t->ndim > LA_MAX_DIMS ? 0 : t->ndim, t->shape);
        format_shape(exp, sizeof exp, ndim, want);
        la_errorf(err, errlen, "tensor %s: shape %s, config wants %s", name, got, exp);
        return NULL;
    }
    size_t count = 1;
    for (int i = 0; i < ndim; i++)
        count *= (size_t)want[i];
    size_t esize = cpu_dtype_size(t->dtype);
    if (t->nbytes != count * esize || !t->data) {
        la_errorf(err, errlen, "tensor %s: %zu bytes of data, shape and dtype need %zu", name,
                   t->nbytes, count * esize);
        return NULL;
    }
    if ((uintptr_t)t->data % esize != 0) {
        la_errorf(err, errlen, "tensor %s: data not aligned to its %zu-byte elements", name, esize);
        return NULL;
    }
    return t;
}

/* ---- weights ------------------------------------------------------------------------ */

static int keep_owned(la_engine *e, float *p) {
    if (e->n_owned == e->cap_owned) {
        int cap = e->cap_owned ? 2 * e->cap_owned : 64;
        float **n = realloc(e->owned, (size_t)cap * sizeof *n);
        if (!n)
            return -1;
        e->owned = n;
        e->cap_owned = cap;
    }
    e->owned[e->n_owned++] = p;
    return 0;
}

/* load_f32 widens a tensor of the given shape into a float32 copy the engine owns. */
static int load_f32(la_engine *e, const la_config *c, const char *name, int ndim,
                    const int64_t *shape, const float **out, char *err, size_t errlen) {
    const la_tensor *t = check_tensor(c, name, ndim, shape, err, errlen);
    if (!t)
        return -1;
    size_t n = t->nbytes / cpu_dtype_size(t->dtype);
    float *p = malloc(n * sizeof *p);
    if (!p || keep_owned(e, p) != 0) {
        free(p);
        return la_errorf(err, errlen, "tensor %s: out of memory for a float32 copy", name);
    }
    cpu_to_f32(t->dtype, t->data, p, n);
    *out = p;
    return 0;
}

static int load_vec(la_engine *e, const la_config *c, const char *name, int n, const float **out,
                    char *err, size_t errlen) {
    int64_t shape[1] = {n};
    return load_f32(e, c, name, 1, shape, out, err, errlen);
}

/* load_matrix points m at a [rows, cols] tensor (or a conv kernel [rows, a, b, c] read as
 * [rows, a*b*c]) in the mapping. */
static int load_matrix(const la_config *c, const char *name, int ndim, const int64_t *shape,
                       cpu_matrix *m, char *err, size_t errlen) {
    const la_tensor *t = check_tensor(c, name, ndim, shape, err, errlen);
    if (!t)
        return -1;
    int64_t cols = 1;
    for (int i = 1; i < ndim; i++)
        cols *= shape[i];
    m->data = t->data;
    m->dtype = t->dtype;
    m->rows = (int)shape[0];
    m->cols = (int)cols;
    return 0;
}

static int load_linear(const la_config *c, const char *name, int out, int in, cpu_matrix *m,
                       char *err, size_t errlen) {
    int64_t shape[2] = {out, in};
    return load_matrix(c, name, 2, shape, m, err, errlen);
}

#define TRY(x)                                                                                 \
    do {                                                                                       \
        if ((x) != 0)                                                                          \
            return -1;                                                                         \
    } while (0)

static int load_vision(la_engine *e, const la_config *c, char *err, size_t errlen) {
    cpu_weights *w = &e->w;
    const int C = c->vision_hidden, Iv = c->vision_intermediate, p = c->patch_size;
    char name[160];

    int64_t patch_shape[4] = {C, 3, p, p};
    TRY(load_matrix(c, "vision_model.patch_embed.proj.weight", 4, patch_shape, &w->patch, err, errlen));
    TRY(load_vec(e, c, "vision_model.patch_embed.proj.bias", C, &w->patch_b, err, errlen));
    int64_t pos_shape[3] = {c->pos_emb_height, c->pos_emb_width, C};
    TRY(load_f32(e, c, "vision_model.patch_embed.pos_emb.weight", 3, pos_shape, &w->pos_emb, err, errlen));

    w->blocks = calloc((size_t)c->vision_layers, sizeof *w->blocks);
    if (!w->blocks)
        return la_errorf(err, errlen, "out of memory for %d vision blocks", c->vision_layers);
    for (int i = 0; i < c->vision_layers; i++) {
        cpu_vision_block *b = &w->blocks[i];
#define VNAME(suffix) (snprintf(name, sizeof name, "vision_model.encoder.blocks.%d.%s", i, suffix), name)
        TRY(load_vec(e, c, VNAME("norm0.weight"), C, &b->norm0_w, err, errlen));
        TRY(load_vec(e, c, VNAME("norm0.bias"), C, &b->norm0_b, err, errlen));
        TRY(load_vec(e, c, VNAME("norm1.weight"), C, &b->norm1_w, err, errlen));
        TRY(load_vec(e, c, VNAME("norm1.bias"), C, &b->norm1_b, err, errlen));
        TRY(load_linear(c, VNAME("wqkv.weight"), 3 * C, C, &b->wqkv, err, errlen));
        TRY(load_vec(e, c, VNAME("wqkv.bias"), 3 * C, &b->wqkv_b, err, errlen));
        TRY(load_linear(c, VNAME("wo.weight"), C, C, &b->wo, err, errlen));
        TRY(load_vec(e, c, VNAME("wo.bias"), C, &b->wo_b, err, errlen));
        TRY(load_linear(c, VNAME("mlp.fc0.weight"), Iv, C, &b->fc0, err, errlen));
        TRY(load_vec(e, c, VNAME("mlp.fc0.bias"), Iv, &b->fc0_b, err, errlen));
        TRY(load_linear(c, VNAME("mlp.fc1.weight"), C, Iv, &b->fc1, err, errlen));
        TRY(load_vec(e, c, VNAME("mlp.fc1.bias"), C, &b->fc1_b, err, errlen));
#undef VNAME
    }
    TRY(load_vec(e, c, "vision_model.encoder.final_layernorm.weight", C, &w->post_norm_w, err, errlen));
    TRY(load_vec(e, c, "vision_model.encoder.final_layernorm.bias", C, &w->post_norm_b, err, errlen));

    /* Projector mlp1: LayerNorm(m^2 C) -> Linear(m^2 C, mid) -> GELU -> Linear(mid, hidden).
     * The middle width is not in the config; read it from mlp1.1's shape. */
    const int merged = c->merge_kernel * c->merge_kernel * C;
    TRY(load_vec(e, c, "mlp1.0.weight", merged, &w->proj_norm_w, err, errlen));
    TRY(load_vec(e, c, "mlp1.0.bias", merged, &w->proj_norm_b, err, errlen));
    const la_tensor *p1 = find_tensor(c, "mlp1.1.weight");
    if (!p1 || p1->ndim != 2 || p1->shape[0] <= 0 || p1->shape[0] > (1 << 20))
        return la_errorf(err, errlen, "tensor mlp1.1.weight: missing or not a [mid, %d] matrix", merged);
    e->proj_mid = (int)p1->shape[0];
    TRY(load_linear(c, "mlp1.1.weight", e->proj_mid, merged, &w->proj1, err, errlen));
    TRY(load_vec(e, c, "mlp1.1.bias", e->proj_mid, &w->proj1_b, err, errlen));
    TRY(load_linear(c, "mlp1.3.weight", c->hidden, e->proj_mid, &w->proj2, err, errlen));
    TRY(load_vec(e, c, "mlp1.3.bias", c->hidden, &w->proj2_b, err, errlen));
    return 0;
}

static int load_text(la_engine *e, const la_config *c, char *err, size_t errlen) {
    cpu_weights *w = &e->w;
    const int D = c->hidden, inter = c->intermediate, qd = c->heads * c->head_dim;
    const int kvd = c->kv_heads * c->head_dim;
    char name[160];

    TRY(load_linear(c, "language_model.model.embed_tokens.weight", c->vocab, D, &w->embed, err, errlen));
    w->layers = calloc((size_t)c->layers, sizeof *w->layers);
    if (!w->layers)
        return la_errorf(err, errlen, "out of memory for %d decoder layers", c->layers);
    for (int i = 0; i < c->layers; i++) {
        cpu_text_layer *l = &w->layers[i];
#define TNAME(suffix) (snprintf(name, sizeof name, "language_model.model.layers.%d.%s", i, suffix), name)
        TRY(load_vec(e, c, TNAME("input_layernorm.weight"), D, &l->attn_norm, err, errlen));
        TRY(load_vec(e, c, TNAME("post_attention_layernorm.weight"), D, &l->mlp_norm, err, errlen));
        TRY(load_linear(c, TNAME("self_attn.q_proj.weight"), qd, D, &l->q, err, errlen));
        TRY(load_vec(e, c, TNAME("self_attn.q_proj.bias"), qd, &l->q_b, err, errlen));
        TRY(load_linear(c, TNAME("self_attn.k_proj.weight"), kvd, D, &l->k, err, errlen));
        TRY(load_vec(e, c, TNAME("self_attn.k_proj.bias"), kvd, &l->k_b, err, errlen));
        TRY(load_linear(c, TNAME("self_attn.v_proj.weight"), kvd, D, &l->v, err, errlen));
        TRY(load_vec(e, c, TNAME("self_attn.v_proj.bias"), kvd, &l->v_b, err, errlen));
        TRY(load_linear(c, TNAME("self_attn.o_proj.weight"), D, qd, &l->o, err, errlen));
        TRY(load_linear(c, TNAME("mlp.gate_proj.weight"), inter, D, &l->gate, err, errlen));
        TRY(load_linear(c, TNAME("mlp.up_proj.weight"), inter, D, &l->up, err, errlen));
        TRY(load_linear(c, TNAME("mlp.down_proj.weight"), D, inter, &l->down, err, errlen));
#undef TNAME
    }
    TRY(load_vec(e, c, "language_model.model.norm.weight", D, &w->final_norm, err, errlen));
    /* The real checkpoint carries a head although its config says tied; use it when present. */
    if (find_tensor(c, "language_model.lm_head.weight"))
        TRY(load_linear(c, "language_model.lm_head.weight", c->vocab, D, &w->lm_head, err, errlen));
    else
        w->lm_head = w->embed;
    return 0;
}

/* ---- run state ---------------------------------------------------------------------- */

static int widen_block_rows(const la_engine *e, const cpu_matrix *w);

/* widen_block_elems is what one widening block of m holds. */
static size_t widen_block_elems(const la_engine *e, const cpu_matrix *m) {
    return (size_t)widen_block_rows(e, m) * (size_t)m->cols;
}

/* gemm_scratch_elems is the largest widening block of a bf16/f16 matrix that goes
 * through cblas_sgemm. */
static size_t gemm_scratch_elems(const la_engine *e) {
    const cpu_matrix *ms[16];
    size_t max = 0;
    int n = 0;
    ms[n++] = &e->w.patch;
    ms[n++] = &e->w.proj1;
    ms[n++] = &e->w.proj2;
    const int blas = e->f32.level == CPU_F32_OPENBLAS; /* else only q8 matrices widen here */
    for (int j = 0; j < n; j++)
        if (blas && ms[j]->dtype != LA_DTYPE_F32 && widen_block_elems(e, ms[j]) > max)
            max = widen_block_elems(e, ms[j]);
    for (int i = 0; i < e->cfg.vision_layers; i++) {
        const cpu_vision_block *b = &e->w.blocks[i];
        const cpu_matrix *v[4] = {&b->wqkv, &b->wo, &b->fc0, &b->fc1};
        for (int j = 0; j < 4; j++)
            if (blas && v[j]->dtype != LA_DTYPE_F32 && widen_block_elems(e, v[j]) > max)
                max = widen_block_elems(e, v[j]);
    }
    for (int i = 0; i < e->cfg.layers; i++) {
        const cpu_text_layer *l = &e->w.layers[i];
        const cpu_matrix *t[7] = {&l->q, &l->k, &l->v, &l->o, &l->gate, &l->up, &l->down};
        for (int j = 0; j < 7; j++) /* a float32 matrix made q8 at open is widened too */
            if (((blas && t[j]->dtype != LA_DTYPE_F32) || (e->weights_q8 && cpu_q8_fits(t[j]))) &&
                widen_block_elems(e, t[j]) > max)
                max = widen_block_elems(e, t[j]);
    }
    return max;
}

static float *alloc_floats(size_t n) { return n ? calloc(n, sizeof(float)) : NULL; }

static int alloc_state(la_engine *e, char *err, size_t errlen) {
    const la_config *c = &e->cfg;
    cpu_state *s = &e->s;
    const size_t S = (size_t)c->max_seq_len, D = (size_t)c->hidden;
    const size_t m2 = (size_t)c->merge_kernel * (size_t)c->merge_kernel;
    const size_t P = S * m2; /* an image can not have more tokens than the prompt */
    const size_t Cv = (size_t)c->vision_hidden, hdv = (size_t)e->vision_head_dim;
    const size_t qd = (size_t)c->heads * (size_t)c->head_dim;
    const size_t kvd = (size_t)c->kv_heads * (size_t)c->head_dim;
    const size_t keys = P > S ? P : S;
    const size_t B = (size_t)c->max_batch;

    s->max_patches = (int)P;
    s->vx = alloc_floats(P * Cv);
    s->vxb = alloc_floats(P * Cv);
    s->vqkv = alloc_floats(P * 3 * Cv);
    s->vhb = alloc_floats(P * (size_t)c->vision_intermediate);
    s->merged = alloc_floats(P * Cv);
    s->proj_hb = alloc_floats(S * (size_t)e->proj_mid);
    s->scores = alloc_floats((size_t)e->attn_chunk * keys);
    s->pos_cache = alloc_floats(P * Cv);
    s->vrope_cos = alloc_floats(P * hdv / 2);
    s->vrope_sin = alloc_floats(P * hdv / 2);
    s->img = alloc_floats(S * D);
    s->x = alloc_floats(S * D);
    s->xb = alloc_floats(S * D);
    s->q = alloc_floats(S * qd);
    s->att = alloc_floats(S * qd);
    s->hb = alloc_floats(S * (size_t)c->intermediate);
    s->hb2 = alloc_floats(S * (size_t)c->intermediate);
    s->rope_cos = alloc_floats(S * (size_t)c->head_dim / 2);
    s->rope_sin = alloc_floats(S * (size_t)c->head_dim / 2);
    /* Every slot's cache is allocated at open; calloc of this size maps zero pages that are
     * only committed when a sequence reaches them. */
    s->key_cache = alloc_floats(B * (size_t)c->layers * S * kvd);
    s->value_cache = alloc_floats(B * (size_t)c->layers * S * kvd);
    s->slots = calloc(B, sizeof *s->slots);
    /* A step writes up to LA_STEP_MAX_ROWS output rows per slot; calloc maps the rows no
     * call has written yet as untouched zero pages, so decode alone never commits them. */
    s->logits = alloc_floats(B * LA_STEP_MAX_ROWS * (size_t)c->vocab);
    s->wscratch_len = e->matmul != CPU_MATMUL_F32 ? 0 : gemm_scratch_elems(e);
    s->wscratch = s->wscratch_len ? alloc_floats(s->wscratch_len) : NULL;

    if (!s->vx || !s->vxb || !s->vqkv || !s->vhb || !s->merged || !s->proj_hb || !s->scores ||
        !s->pos_cache || !s->vrope_cos || !s->vrope_sin || !s->img || !s->x || !s->xb || !s->q ||
        !s->att || !s->hb || !s->hb2 || !s->rope_cos || !s->rope_sin || !s->key_cache ||
        !s->value_cache || !s->slots || !s->logits || (s->wscratch_len && !s->wscratch))
        return la_errorf(err, errlen,
                          "out of memory for the run state (max_seq_len %d, max_batch %d: KV caches "
                          "of %zu MB per slot, vision buffers for %zu patches)",
                          c->max_seq_len, c->max_batch, 2 * (size_t)c->layers * S * kvd * 4 >> 20, P);

    /* Rotate-half RoPE for positions 0..S-1, computed as HF's Qwen2 does in float32:
     * inv_freq_i = 1 / theta^(2i/hd), angle = pos * inv_freq_i. */
    const int half = c->head_dim / 2;
    for (int i = 0; i < half; i++) {
        float inv_freq = 1.0f / powf(c->rope_theta, (float)(2 * i) / (float)c->head_dim);
        for (size_t pos = 0; pos < S; pos++) {
            float angle = (float)pos * inv_freq;
            s->rope_cos[pos * half + i] = (float)cos((double)angle);
            s->rope_sin[pos * half + i] = (float)sin((double)angle);
        }
    }
    s->pos_cache_h = s->pos_cache_w = 0;
    return 0;
}

/* alloc_amx sizes the AMX buffers (matmul=amx) for the widest product at its most rows:
 * the vision tower's at every patch of the longest image, the projector's and the
 * decoder's at every position; twice the A tiles for the products split_activations
 * splits. Allocations this large are fresh mappings whose pages are
 * committed only when a request reaches them. */
static int alloc_amx(la_engine *e, char *err, size_t errlen) {
    const la_config *c = &e->cfg;
    cpu_state *s = &e->s;
    typedef struct {
        const cpu_matrix *m;
        int n;     /* its most activation rows */
        int split; /* whether its activations go in split (twice the A tiles) */
    } product;
    product ps[8];
    size_t act = 0, scratch = 0;
    const int P = s->max_patches, S = c->max_seq_len;
    const int split_vision = e->split != CPU_SPLIT_NONE, split_text = e->split == CPU_SPLIT_ALL;
    for (int i = 0; i < c->vision_layers + c->layers + 1; i++) {
        int k = 0;
        if (i == c->vision_layers + c->layers) {
            ps[k++] = (product){&e->w.patch, P, split_vision};
            ps[k++] = (product){&e->w.proj1, S, split_vision};
            ps[k++] = (product){&e->w.proj2, S, split_vision};
        } else if (i < c->vision_layers) {
            const cpu_vision_block *b = &e->w.blocks[i];
            const cpu_matrix *v[4] = {&b->wqkv, &b->wo, &b->fc0, &b->fc1};
            for (int j = 0; j < 4; j++)
                ps[k++] = (product){v[j], P, split_vision};
        } else {
            const cpu_text_layer *l = &e->w.layers[i - c->vision_layers];
            const cpu_matrix *t[7] = {&l->q, &l->k, &l->v, &l->o, &l->gate, &l->up, &l->down};
            for (int j = 0; j < 7; j++)
                ps[k++] = (product){t[j], S, split_text};
        }
        for (int j = 0; j < k; j++) {
            const size_t a = cpu_amx_act_elems(ps[j].n, ps[j].m->cols, ps[j].split);
            const size_t t = cpu_amx_thread_bytes(ps[j].n, ps[j].m->cols);
            act = a > act ? a : act;
            scratch = t > scratch ? t : scratch;
        }
    }
    scratch = (scratch + 63) / 64 * 64;
    /* attention: one head at a time per thread, blocks of attn_chunk query rows against
     * up to every key (a patch of the longest image, or a position) */
    const size_t chunk = (size_t)e->attn_chunk, keys = (size_t)(P > S ? P : S);
    const int hd = e->vision_head_dim > c->head_dim ? e->vision_head_dim : c->head_dim;
    /* attention's own products round their activations once (cpu_amx.c, attend_heads) */
    size_t attn_act = cpu_amx_act_elems((int)chunk, (int)keys, 0);
    size_t attn_scratch = cpu_amx_thread_bytes((int)chunk, (int)keys);
    if (cpu_amx_act_elems((int)chunk, hd, 0) > attn_act)
        attn_act = cpu_amx_act_elems((int)chunk, hd, 0);
    if (cpu_amx_thread_bytes((int)chunk, hd) > attn_scratch)
        attn_scratch = cpu_amx_thread_bytes((int)chunk, hd);
    attn_act = (attn_act * sizeof(uint16_t) + 63) / 64 * 64;
    attn_scratch = (attn_scratch + 63) / 64 * 64;

    s->amx_act = aligned_alloc(64, (act * sizeof(uint16_t) + 63) / 64 * 64);
    s->amx_scratch = calloc((size_t)e->pool.nthreads, sizeof *s->amx_scratch);
    s->amx_attn = calloc((size_t)e->pool.nthreads, sizeof *s->amx_attn);
    s->amx_threads = s->amx_scratch && s->amx_attn ? e->pool.nthreads : 0;
    int ok = s->amx_act && s->amx_scratch && s->amx_attn;
    for (int i = 0; ok && i < s->amx_threads; i++) {
        cpu_amx_attn_buffers *b = &s->amx_attn[i];
        b->q = alloc_floats(chunk * (size_t)hd);
        b->k = alloc_floats(keys * (size_t)hd);
        b->vt = alloc_floats(keys * (size_t)hd);
        b->scores = alloc_floats(chunk * keys);
        b->out = alloc_floats(chunk * (size_t)hd);
        b->act = aligned_alloc(64, attn_act);
        b->scratch = aligned_alloc(64, attn_scratch);
        ok = (s->amx_scratch[i] = aligned_alloc(64, scratch)) != NULL && b->q && b->k && b->vt &&
             b->scores && b->out && b->act && b->scratch;
    }
    if (!ok)
        return la_errorf(err, errlen, "matmul=amx: out of memory for %zu MB of tiles",
                          (act * sizeof(uint16_t) + scratch * (size_t)e->pool.nthreads) >> 20);
    return 0;
}

static void free_state(cpu_state *s) {
    float *bufs[] = {s->vx, s->vxb, s->vqkv, s->vhb, s->merged, s->proj_hb, s->scores,
                     s->pos_cache, s->vrope_cos, s->vrope_sin, s->img, s->x, s->xb, s->q,
                     s->att, s->hb, s->hb2, s->rope_cos, s->rope_sin, s->key_cache,
                     s->value_cache, s->logits, s->wscratch};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    free(s->slots);
    free(s->amx_act);
    for (int i = 0; i < s->amx_threads; i++) {
        cpu_amx_attn_buffers *b = &s->amx_attn[i];
        void *p[] = {s->amx_scratch[i], b->q, b->k, b->vt, b->scores, b->out, b->act, b->scratch};
        for (size_t j = 0; j < sizeof p / sizeof p[0]; j++)
            free(p[j]);
    }
    free(s->amx_scratch);
    free(s->amx_attn);
    memset(s, 0, sizeof *s);
}

/* ---- GEMM with widened weights ------------------------------------------------------ */

/* A bf16/f16 weight is widened and multiplied one block of rows at a time, each block at
 * most this many bytes of float32, so the widened block is still in cache when the GEMM
 * reads it and the scratch stays small whatever the model size. */
enum { LA_CPU_WIDEN_BLOCK_BYTES = 4 << 20 }; /* default; option widen_block_bytes */

typedef struct {
    const cpu_matrix *w;
    int row0, rows;
    float *dst;
} widen_task;

static void widen_slice(void *arg, int thread, int nthreads) {
    const widen_task *t = arg;
    if (t->w->dtype == CPU_DTYPE_Q8) { /* int8 rows dequantize whole, a share of rows each */
        const int a = t->rows * thread / nthreads, b = t->rows * (thread + 1) / nthreads;
        cpu_rows_to_f32(t->w, t->row0 + a, b - a, t->dst + (size_t)a * (size_t)t->w->cols);
        return;
    }
    const size_t cols = (size_t)t->w->cols, esize = cpu_dtype_size(t->w->dtype);
    size_t n = (size_t)t->rows * cols;
    size_t a = n * (size_t)thread / (size_t)nthreads, b = n * (size_t)(thread + 1) / (size_t)nthreads;
    const char *src = (const char *)t->w->data + (size_t)t->row0 * cols * esize;
    cpu_to_f32(t->w->dtype, src + a * esize, t->dst + a, b - a);
}

/* widen_block_rows is how many rows of w fit one widening block (at least one). */
static int widen_block_rows(const la_engine *e, const cpu_matrix *w) {
    size_t rows = e->widen_block_bytes / ((size_t)w->cols * sizeof(float));
    if (rows < 1)
        rows = 1;
    return rows > (size_t)w->rows ? w->rows : (int)rows;
}

void cpu_gemm_wt(la_engine *e, const float *x, int n, const cpu_matrix *w, const float *bias,
                 float *y, int split) {
    if (e->matmul != CPU_MATMUL_F32) { /* bf16 products: AMX or AVX512_BF16 */
        cpu_amx_gemm_wt(e->matmul, split, &e->pool, e->s.amx_act, e->s.amx_scratch, x, n, w, y);
    } else if (e->f32.level != CPU_F32_OPENBLAS && w->dtype != CPU_DTYPE_Q8) {
        cpu_f32_product p = {n, w->rows, w->cols, 1.0f, x, (size_t)w->cols, w->data, w->dtype,
                             (size_t)w->cols, 0, y, (size_t)w->rows};
        cpu_f32_gemm(&e->f32, &e->pool, &p);
    } else if (w->dtype == LA_DTYPE_F32) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, w->rows, w->cols, 1.0f, x,
                    w->cols, w->data, w->cols, 0.0f, y, w->rows);
    } else {
        const int block = widen_block_rows(e, w);
        for (int r0 = 0; r0 < w->rows; r0 += block) {
            int rows = w->rows - r0 < block ? w->rows - r0 : block;
            widen_task t = {w, r0, rows, e->s.wscratch};
            cpu_pool_run(&e->pool, widen_slice, &t);
            /* y[:, r0:r0+rows] = x W[r0:r0+rows]^T */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, rows, w->cols, 1.0f, x,
                        w->cols, e->s.wscratch, w->cols, 0.0f, y + r0, w->rows);
        }
    }
    if (bias)
        for (int i = 0; i < n; i++) {
            float *row = y + (size_t)i * (size_t)w->rows;
            for (int j = 0; j < w->rows; j++)
                row[j] += bias[j];
        }
}

/* ---- choosing the products ------------------------------------------------------------ */

static const char *const matmul_names[] = {
    [CPU_MATMUL_F32] = "f32", [CPU_MATMUL_AMX] = "amx", [CPU_MATMUL_AVX512BF16] = "avx512bf16"};

const char *cpu_matmul_name(cpu_matmul m) { return matmul_names[m]; }

cpu_matmul cpu_matmul_fast(void) {
    if (cpu_bf16_matmul_available(CPU_MATMUL_AMX))
        return CPU_MATMUL_AMX;
    if (cpu_bf16_matmul_available(CPU_MATMUL_AVX512BF16))
        return CPU_MATMUL_AVX512BF16;
    return CPU_MATMUL_F32;
}

int cpu_matmul_named(const char *name, cpu_matmul *m, int *is_auto) {
    *is_auto = strcmp(name, "auto") == 0;
    if (*is_auto)
        return 0;
    for (int i = 0; i < (int)(sizeof matmul_names / sizeof matmul_names[0]); i++)
        if (strcmp(name, matmul_names[i]) == 0) {
            *m = (cpu_matmul)i;
            return i == CPU_MATMUL_F32 || cpu_bf16_matmul_available(*m) ? 0 : -2;
        }
    return -1;
}

/* split_named reads an option value of split_activations: 0, or -1 for an unknown name. */
static int split_named(const char *name, cpu_split *split) {
    static const char *const names[] = {
        [CPU_SPLIT_NONE] = "none", [CPU_SPLIT_VISION] = "vision", [CPU_SPLIT_ALL] = "all"};
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
        if (strcmp(name, names[i]) == 0) {
            *split = (cpu_split)i;
            return 0;
        }
    return -1;
}

/* ---- ops ---------------------------------------------------------------------------- */

static int check_config(const la_config *c, char *err, size_t errlen) {
    struct {
        const char *name;
        int value;
    } positive[] = {
        {"vision_hidden", c->vision_hidden}, {"vision_layers", c->vision_layers},
        {"vision_heads", c->vision_heads}, {"vision_intermediate", c->vision_intermediate},
        {"patch_size", c->patch_size}, {"merge_kernel", c->merge_kernel},
        {"pos_emb_height", c->pos_emb_height}, {"pos_emb_width", c->pos_emb_width},
        {"hidden", c->hidden}, {"layers", c->layers}, {"heads", c->heads},
        {"kv_heads", c->kv_heads}, {"head_dim", c->head_dim},
        {"intermediate", c->intermediate}, {"vocab", c->vocab}, {"max_seq_len", c->max_seq_len},
        {"max_batch", c->max_batch},
    };
    for (size_t i = 0; i < sizeof positive / sizeof positive[0]; i++)
        if (positive[i].value <= 0)
            return la_errorf(err, errlen, "config: %s is %d, must be positive", positive[i].name,
                              positive[i].value);
    if (c->vision_hidden % c->vision_heads != 0 || (c->vision_hidden / c->vision_heads) % 4 != 0)
        return la_errorf(err, errlen,
                          "config: vision head dim %d/%d must be a whole multiple of 4 (2D RoPE)",
                          c->vision_hidden, c->vision_heads);
    if (c->head_dim % 2 != 0)
        return la_errorf(err, errlen, "config: head_dim %d must be even (RoPE)", c->head_dim);
    if (c->heads % c->kv_heads != 0)
        return la_errorf(err, errlen, "config: heads %d not a multiple of kv_heads %d", c->heads,
                          c->kv_heads);
    if (c->image_token_id < 0 || c->image_token_id >= c->vocab)
        return la_errorf(err, errlen, "config: image_token_id %d outside the vocabulary of %d",
                          c->image_token_id, c->vocab);
    if (!(c->vision_norm_eps > 0) || !(c->rms_norm_eps > 0) || !(c->rope_theta > 0))
        return la_errorf(err, errlen, "config: norm eps and rope_theta must be positive");
    if (c->max_seq_len > (1 << 20))
        return la_errorf(err, errlen, "config: max_seq_len %d is unreasonably large", c->max_seq_len);
    if (c->max_batch > 1024)
        return la_errorf(err, errlen, "config: max_batch %d is unreasonably large", c->max_batch);
    if (c->threads < 0)
        return la_errorf(err, errlen, "config: threads %d is negative", c->threads);
    if (!c->tensors || c->n_tensors <= 0)
        return la_errorf(err, errlen, "config: no tensors given");
    return 0;
}

/* parse_options reads the backend's "key=value" lines. Known keys:
 *   widen_block_bytes  float32 bytes per widening block of a bf16/f16 GEMM weight
 *   resident_weights   1 (default): copy the decoder's matrices out of the file mapping
 *                      (make_resident); 0: decode reads the mapping directly
 *   kernels            auto (default: the best this CPU runs), avx512, avx2 or plain: the
 *                      decode kernels, for tests and measurements of each set
 *   weights_quant      bf16 (default: the checkpoint's own weights, the exact path) or q8:
 *                      the resident copy of the decoder matrices and the LM head is made
 *                      in the int8 format of cpu_quant.c (implies resident_weights)
 *   matmul             f32 (default: prefill and vision GEMMs in float32), amx: in bf16 on
 *                      AMX tiles with float32 sums (cpu_amx.c), avx512bf16: the same
 *                      products with VDPBF16PS (cpu_avx512bf16.c), each an error where the
 *                      CPU lacks it; or auto: f32 on the exact path, the best of amx,
 *                      avx512bf16 and f32 this CPU runs with weights_quant=q8
 *   f32_kernel         auto (default: the best this CPU runs), avx512, avx2, plain or
 *                      openblas: the kernels of matmul=f32's products (cpu_gemm_f32.c), or
 *                      cblas_sgemm on widened weights; q8 weights always take the latter
 *   f32_small_rows     products of up to this many rows read bf16/f16/f32 weights unpacked
 *   short_prompt_rows  0..16 (default 16): a prompt of up to this many tokens runs its
 *                      products as a decode step does where the GEMM would first convert
 *                      every weight (cpu_text.c, short_prompt); 0: always the GEMM
 *   split_activations  none, vision or all: which bf16 products carry each activation
 *                      as two bf16 (cpu_split): no product's, the vision tower's, patch
 *                      embedding's and projector's, or those and prefill's; none when
 *                      unnamed here (native.Open names its default, vision)
 * An unknown key is an error, so a typo does not pass silently. */
static int parse_options(la_engine *e, const char *opts, char *err, size_t errlen) {
    e->widen_block_bytes = LA_CPU_WIDEN_BLOCK_BYTES;
    e->resident_weights = 1;
    e->f32.level = cpu_f32_kernel_level();
    e->f32.small_rows = -1;
    e->short_prompt_rows = CPU_SHORT_PROMPT_ROWS;
    e->split = CPU_SPLIT_NONE; /* the Go side names its default (native.Splits) */
    int matmul_auto = 0;
    while (opts && *opts) {
        const char *end = strchr(opts, '\n');
        size_t len = end ? (size_t)(end - opts) : strlen(opts);
        char line[128];
        if (len >= sizeof line)
            return la_errorf(err, errlen, "options: line too long");
        memcpy(line, opts, len);
        line[len] = 0;
        opts += len + (end ? 1 : 0);
        if (len == 0)
            continue;
        char *eq = strchr(line, '=');
        if (!eq)
            return la_errorf(err, errlen, "options: %s: want key=value", line);
        *eq = 0;
        char *rest;
        long long v = strtoll(eq + 1, &rest, 10);
        if (strcmp(line, "widen_block_bytes") == 0) {
            if (*rest != 0 || v < (long long)sizeof(float) || v > (1LL << 34))
                return la_errorf(err, errlen, "options: widen_block_bytes=%s: want a byte count", eq + 1);
            e->widen_block_bytes = (size_t)v;
        } else if (strcmp(line, "kernels") == 0) {
            int rc = cpu_kernels_named(eq + 1, &e->kern);
            if (rc == -1)
                return la_errorf(err, errlen, "options: kernels=%s: want auto, avx512, avx2 or plain", eq + 1);
            if (rc != 0)
                return la_errorf(err, errlen, "options: kernels=%s: this CPU lacks the instructions", eq + 1);
        } else if (strcmp(line, "weights_quant") == 0) {
            if (strcmp(eq + 1, "bf16") != 0 && strcmp(eq + 1, "q8") != 0)
                return la_errorf(err, errlen, "options: weights_quant=%s: want bf16 or q8", eq + 1);
            e->weights_q8 = strcmp(eq + 1, "q8") == 0;
        } else if (strcmp(line, "matmul") == 0) {
            const int rc = cpu_matmul_named(eq + 1, &e->matmul, &matmul_auto);
            if (rc == -1)
                return la_errorf(err, errlen, "options: matmul=%s: want auto, f32, amx or avx512bf16", eq + 1);
            if (rc != 0)
                return la_errorf(err, errlen, "options: matmul=%s: %s", eq + 1,
                                  e->matmul == CPU_MATMUL_AMX
                                      ? "this CPU or kernel lacks AMX (bf16 tiles and AVX512-BF16)"
                                      : "this CPU lacks AVX512-BF16");
        } else if (strcmp(line, "f32_kernel") == 0) {
            int level = cpu_f32_level_named(eq + 1);
            if (level < CPU_F32_OPENBLAS)
                return la_errorf(err, errlen, "options: f32_kernel=%s: %s", eq + 1,
                                 level == -3 ? "want auto, avx512, avx2, plain or openblas"
                                             : "this CPU lacks the instructions");
            e->f32.level = level;
        } else if (strcmp(line, "f32_small_rows") == 0) {
            if (*rest != 0 || v < 0 || v > 1 << 20)
                return la_errorf(err, errlen, "options: f32_small_rows=%s: want a row count", eq + 1);
            e->f32.small_rows = (int)v;
        } else if (strcmp(line, "short_prompt_rows") == 0) {
            if (*rest != 0 || v < 0 || v > CPU_SHORT_PROMPT_ROWS)
                return la_errorf(err, errlen, "options: short_prompt_rows=%s: want 0 to %d", eq + 1,
                                 CPU_SHORT_PROMPT_ROWS);
            e->short_prompt_rows = (int)v;
        } else if (strcmp(line, "split_activations") == 0) {
            const int rc = split_named(eq + 1, &e->split);
            if (rc != 0)
                return la_errorf(err, errlen, "options: split_activations=%s: want none, vision or all", eq + 1);
        } else if (strcmp(line, "resident_weights") == 0) {
            if (*rest != 0 || (v != 0 && v != 1))
                return la_errorf(err, errlen, "options: resident_weights=%s: want 0 or 1", eq + 1);
            e->resident_weights = (int)v;
        } else {
            return la_errorf(err, errlen, "options: unknown key %s", line);
        }
    }
    if (matmul_auto) /* known only now: weights_quant may come after matmul */
        e->matmul = e->weights_q8 ? cpu_matmul_fast() : CPU_MATMUL_F32;
    return 0;
}

/* file_mapped says whether [p, p+n) lies inside one read-only file mapping of this
 * process (from /proc/self/maps): only there can pages be dropped without losing data. A
 * caller may hand open tensors in anonymous memory (tests do), where dropping would zero
 * them. */
static int file_mapped(const void *p, size_t n) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return 0;
    char line[512];
    int ok = 0;
    while (!ok && fgets(line, sizeof line, f)) {
        unsigned long lo, hi, inode;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s %*s %*s %lu", &lo, &hi, perms, &inode) == 4)
            ok = (uintptr_t)p >= lo && (uintptr_t)p + n <= hi && inode != 0 && perms[1] == '-';
    }
    fclose(f);
    return ok;
}

/* drop_mapped tells the kernel this process no longer needs the whole pages of a mapped
 * file range: they leave its resident set and, being clean file pages, are read back from
 * the file should anything touch them again. Advice only; a failure changes nothing. */
static void drop_mapped(const void *p, size_t n) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t lo = ((uintptr_t)p + page - 1) & ~(page - 1);
    const uintptr_t hi = ((uintptr_t)p + n) & ~(page - 1);
    if (hi > lo && file_mapped(p, n))
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

/* make_resident copies every decoder matrix and the LM head (the tied embeddings when the
 * checkpoint has no head) into one anonymous, huge-page-advised allocation and points the
 * weights at it. Decode streams
 * these bytes once per token, and page-cache pages of a file mapping can stream at well
 * under half the speed of freshly allocated anonymous memory (3x here, measured in
 * docs/cpu-backend.md: scattered 4 KB pages versus contiguous, huge-page-backed ones).
 * The RAM cost is small in practice: the mapped pages this replaces are clean page cache
 * that the kernel reclaims once nothing touches them.
 *
 * With weights_quant=q8 the copy is int8 (cpu_quant.c), quantized here on the pool, and
 * the LM head always gets its own copy (a tied embedding table stays in the mapping for
 * its row lookups). Each source matrix's mapped pages are then dropped from the process
 * (drop_mapped): nothing reads them again, and they would otherwise count twice in its
 * resident size next to the int8 copy. */
static int make_resident(la_engine *e, char *err, size_t errlen) {
    const la_config *c = &e->cfg;
    cpu_matrix *ms[8];
    size_t total = 0;
    const int has_head = e->w.lm_head.data != e->w.embed.data;
    for (int pass = 0; pass < 2; pass++) {
        char *dst = e->resident;
        for (int i = 0; i <= c->layers; i++) {
            int n = 0;
            if (i < c->layers) {
                cpu_text_layer *l = &e->w.layers[i];
                cpu_matrix *lm[7] = {&l->q, &l->k, &l->v, &l->o, &l->gate, &l->up, &l->down};
                for (; n < 7; n++)
                    ms[n] = lm[n];
            } else {
                /* The head streams whole every token; the embedding table gives one row per
                 * token, so it stays in the mapping unless it is the (tied) head. */
                ms[n++] = has_head || e->weights_q8 ? &e->w.lm_head : &e->w.embed;
            }
            for (int j = 0; j < n; j++) {
                const int q8 = e->weights_q8 && cpu_q8_fits(ms[j]);
                const size_t src_bytes = (size_t)ms[j]->rows * cpu_row_bytes(ms[j]->dtype, ms[j]->cols);
                size_t bytes = (size_t)ms[j]->rows * cpu_row_bytes(q8 ? CPU_DTYPE_Q8 : ms[j]->dtype, ms[j]->cols);
                bytes = (bytes + 63) & ~(size_t)63; /* keep every matrix cache-line aligned */
                if (pass == 0) {
                    total += bytes;
                } else if (q8) {
                    if (cpu_q8_quantize(&e->pool, ms[j], dst) != 0)
                        return la_errorf(err, errlen, "weights_quant=q8: out of memory");
                    drop_mapped(ms[j]->data, src_bytes);
                    ms[j]->data = dst;
                    ms[j]->dtype = CPU_DTYPE_Q8;
                    dst += bytes;
                } else {
                    memcpy(dst, ms[j]->data, src_bytes);
                    ms[j]->data = dst;
                    dst += bytes;
                }
            }
        }
        if (pass == 0) {
            const size_t huge = (size_t)2 << 20;
            total = (total + huge - 1) & ~(huge - 1);
            e->resident = aligned_alloc(huge, total);
            if (!e->resident)
                return la_errorf(err, errlen, "resident_weights: out of memory for %zu MB", total >> 20);
            madvise(e->resident, total, MADV_HUGEPAGE); /* advice only; 4 KB pages also work */
        }
    }
    if (!has_head && !e->weights_q8)
        e->w.lm_head = e->w.embed;
    return 0;
}

static void cpu_close(la_engine *e);

/* init_f32 allocates the exact path's packing buffers, one per pool thread, keeping the
 * level and short-prompt row count that parse_options read. */
static int init_f32(la_engine *e, int threads, char *err, size_t errlen) {
    const int level = e->f32.level, small_rows = e->f32.small_rows;
    if (cpu_f32_init(&e->f32, level, threads) != 0)
        return la_errorf(err, errlen, "open: out of memory for the GEMM packing buffers");
    if (small_rows >= 0)
        e->f32.small_rows = small_rows;
    return 0;
}

static la_engine *cpu_open(const la_config *cfg, char *err, size_t errlen) {
    if (!cfg) {
        la_errorf(err, errlen, "open: no config");
        return NULL;
    }
    if (check_config(cfg, err, errlen) != 0)
        return NULL;
    la_engine *e = calloc(1, sizeof *e);
    if (!e) {
        la_errorf(err, errlen, "open: out of memory");
        return NULL;
    }
    e->cfg = *cfg;
    e->vision_head_dim = cfg->vision_hidden / cfg->vision_heads;
    e->attn_chunk = LA_CPU_ATTN_CHUNK;
    cpu_kernels_select(&e->kern);

    int threads = cfg->threads;
    if (threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int)n : 1;
    }
    if (parse_options(e, cfg->options, err, errlen) != 0 || load_vision(e, cfg, err, errlen) != 0 ||
        load_text(e, cfg, err, errlen) != 0 ||
        alloc_state(e, err, errlen) != 0 || cpu_pool_init(&e->pool, threads, err, errlen) != 0 ||
        init_f32(e, threads, err, errlen) != 0 ||
        (e->matmul != CPU_MATMUL_F32 && alloc_amx(e, err, errlen) != 0) ||
        ((e->resident_weights || e->weights_q8) && make_resident(e, err, errlen) != 0) ||
        cpu_plan_step(e, err, errlen) != 0) {
        cpu_close(e);
        return NULL;
    }
    e->cfg.threads = threads;
    /* The caller's table, names and strings are only valid during open. */
    e->cfg.tensors = NULL;
    e->cfg.n_tensors = 0;
    e->cfg.weights_dir = NULL;
    e->cfg.options = NULL;
    return e;
}

static int cpu_vision_op(la_engine *e, const float *patches, int grid_h, int grid_w, char *err,
                         size_t errlen) {
    if (!e)
        return la_errorf(err, errlen, "vision: engine is closed");
    return cpu_vision(e, patches, grid_h, grid_w, err, errlen);
}

static int cpu_step_op(la_engine *e, int n, const la_step_slot *slots, const int32_t *tokens, int k,
                       int n_watch, const int32_t *watch, int32_t *top_ids, float *top_p,
                       float *watch_p, char *err, size_t errlen) {
    if (!e)
        return la_errorf(err, errlen, "step: engine is closed");
    return cpu_step(e, n, slots, tokens, k, n_watch, watch, top_ids, top_p, watch_p, err, errlen);
}

static int cpu_release(la_engine *e, int slot, char *err, size_t errlen) {
    if (!e)
        return la_errorf(err, errlen, "release: engine is closed");
    if (slot < 0 || slot >= e->cfg.max_batch)
        return la_errorf(err, errlen, "release: slot %d out of range 0..%d", slot, e->cfg.max_batch - 1);
    /* The cache needs no clearing: attention only ever reads a slot's rows below pos. */
    e->s.slots[slot].live = 0;
    e->s.slots[slot].pos = 0;
    e->s.logit_rows = 0;
    return 0;
}

static int cpu_reset(la_engine *e, char *err, size_t errlen) {
    if (!e)
        return la_errorf(err, errlen, "reset: engine is closed");
    for (int i = 0; i < e->cfg.max_batch; i++)
        e->s.slots[i] = (cpu_slot){0, 0};
    e->s.n_img = 0;
    e->s.logit_rows = 0;
    return 0;
}

static const float *cpu_logits(la_engine *e, int row, int *n) {
    if (!e || row < 0 || row >= e->s.logit_rows) {
        if (n)
            *n = 0;
        return NULL;
    }
    if (n)
        *n = e->cfg.vocab;
    return e->s.logits + (size_t)row * e->cfg.vocab;
}

static const float *cpu_image_embeddings(la_engine *e, int *n_tokens, int *dim) {
    if (!e || e->s.n_img == 0) {
        if (n_tokens)
            *n_tokens = 0;
        if (dim)
            *dim = 0;
        return NULL;
    }
    if (n_tokens)
        *n_tokens = e->s.n_img;
    if (dim)
        *dim = e->cfg.hidden;
    return e->s.img;
}

static void cpu_close(la_engine *e) {
    if (!e)
        return;
    cpu_pool_destroy(&e->pool);
    cpu_f32_free(&e->f32);
    free_state(&e->s);
    cpu_free_step_plan(&e->step);
    free(e->w.blocks);
    free(e->w.layers);
    free(e->resident);
    for (int i = 0; i < e->n_owned; i++)
        free(e->owned[i]);
    free(e->owned);
    free(e);
}

static const la_backend_ops cpu_ops = {
    .abi_version = LA_ABI_VERSION,
    .name = "cpu",
    .open = cpu_open,
    .vision = cpu_vision_op,
    .step = cpu_step_op,
    .release = cpu_release,
    .reset = cpu_reset,
    .logits = cpu_logits,
    .image_embeddings = cpu_image_embeddings,
    .close = cpu_close,
};

const la_backend_ops *la_cpu_backend(void) { return &cpu_ops; }
