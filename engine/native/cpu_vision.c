/*
 * cpu_vision.c - the MoonViT vision tower, the 2x2 patch merge and the mlp1 projector.
 *
 * patches [L, 3*p*p] -> patch embed (a GEMM) + position embedding (resized to the grid)
 * -> blocks of { x += wo(attn(rope(wqkv(LN0(x))))); x += fc1(gelu_tanh(fc0(LN1(x)))) }
 * -> final LN -> merge m x m neighbours -> LN -> linear -> gelu(erf) -> linear
 * -> one embedding per image token, kept for the next prefill.
 */
#include <math.h>
#include <string.h>

#include "cpu_internal.h"

/* MoonViT's 2D RoPE base; fixed in the model code, not in config.json. */
static const float vision_rope_theta = 10000.0f;

/* ---- position embedding ------------------------------------------------------------- */

/* Cubic convolution weights for offset t in [0,1) with torch's a = -0.75. */
static void cubic_weights(float t, float w[4]) {
    const float A = -0.75f;
    float x = t + 1.0f; /* distance to the left neighbour */
    w[0] = ((A * x - 5.0f * A) * x + 8.0f * A) * x - 4.0f * A;
    x = t;
    w[1] = ((A + 2.0f) * x - (A + 3.0f)) * x * x + 1.0f;
    x = 1.0f - t;
    w[2] = ((A + 2.0f) * x - (A + 3.0f)) * x * x + 1.0f;
    x = 2.0f - t;
    w[3] = ((A * x - 5.0f * A) * x + 8.0f * A) * x - 4.0f * A;
}

/* Source taps for output index i along an axis of in -> out samples, as torch computes
 * them with align_corners=False: src = (i + 0.5) * in/out - 0.5, not clamped below 0 for
 * cubic; the four taps floor(src)-1 .. floor(src)+2 are clamped to the border. */
static void cubic_taps(int i, int in, int out, int idx[4], float w[4]) {
    float scale = (float)in / (float)out;
    float src = scale * ((float)i + 0.5f) - 0.5f;
    float fl = floorf(src);
    int base = (int)fl;
    cubic_weights(src - fl, w);
    for (int k = 0; k < 4; k++) {
        int j = base - 1 + k;
        idx[k] = j < 0 ? 0 : (j > in - 1 ? in - 1 : j);
    }
}

void cpu_bicubic_resize(const float *in, int ih, int iw, int c, float *out, int oh, int ow) {
    for (int oy = 0; oy < oh; oy++) {
        int ys[4];
        float wy[4];
        cubic_taps(oy, ih, oh, ys, wy);
        for (int ox = 0; ox < ow; ox++) {
            int xs[4];
            float wx[4];
            cubic_taps(ox, iw, ow, xs, wx);
            float *dst = out + ((size_t)oy * ow + ox) * c;
            for (int ch = 0; ch < c; ch++) {
                /* Along x within each of the four rows, then along y (torch's order). */
                float col[4];
                for (int r = 0; r < 4; r++) {
                    const float *row = in + (size_t)ys[r] * iw * c;
                    col[r] = row[(size_t)xs[0] * c + ch] * wx[0] + row[(size_t)xs[1] * c + ch] * wx[1] +
                             row[(size_t)xs[2] * c + ch] * wx[2] + row[(size_t)xs[3] * c + ch] * wx[3];
                }
                dst[ch] = col[0] * wy[0] + col[1] * wy[1] + col[2] * wy[2] + col[3] * wy[3];
            }
        }
    }
}

/* pos_table returns the position embedding for a gh x gw grid: the stored table when the
 * grid matches it, else a resized copy, kept until a different grid comes. */
static const float *pos_table(la_engine *e, int gh, int gw) {
    const la_config *c = &e->cfg;
    if (gh == c->pos_emb_height && gw == c->pos_emb_width)
        return e->w.pos_emb;
    if (e->s.pos_cache_h != gh || e->s.pos_cache_w != gw) {
        cpu_bicubic_resize(e->w.pos_emb, c->pos_emb_height, c->pos_emb_width, c->vision_hidden,
                           e->s.pos_cache, gh, gw);
        e->s.pos_cache_h = gh;
        e->s.pos_cache_w = gw;
    }
    return e->s.pos_cache;
}

/* ---- 2D RoPE ------------------------------------------------------------------------ */

/* vision_rope_table fills cos/sin [L, hd/2] for the grid. Complex pair j of a head rotates
 * by col * f_{j/2} when j is even and row * f_{j/2} when odd, f_i = theta^(-4i/hd): the
 * elements (4i, 4i+1) follow the column, (4i+2, 4i+3) the row. */
static void vision_rope_table(la_engine *e, int gh, int gw) {
    const int hd = e->vision_head_dim, pairs = hd / 2;
    for (int p = 0; p < gh * gw; p++) {
        const float row = (float)(p / gw), col = (float)(p % gw);
        for (int j = 0; j < pairs; j++) {
            float freq = 1.0f / powf(vision_rope_theta, (float)(4 * (j / 2)) / (float)hd);
            float angle = (j % 2 == 0 ? col : row) * freq;
            e->s.vrope_cos[(size_t)p * pairs + j] = (float)cos((double)angle);
            e->s.vrope_sin[(size_t)p * pairs + j] = (float)sin((double)angle);
        }
    }
}

/* rope_adjacent rotates adjacent pairs (x[2j], x[2j+1]) of every head of L rows. */
static void rope_adjacent(float *x, int ld, int L, int heads, int hd, const float *cs,
                          const float *sn) {
    const int pairs = hd / 2;
    for (int p = 0; p < L; p++) {
        const float *c = cs + (size_t)p * pairs, *s = sn + (size_t)p * pairs;
        for (int h = 0; h < heads; h++) {
            float *v = x + (size_t)p * ld + (size_t)h * hd;
            for (int j = 0; j < pairs; j++) {
                float a = v[2 * j], b = v[2 * j + 1];
                v[2 * j] = a * c[j] - b * s[j];
                v[2 * j + 1] = a * s[j] + b * c[j];
            }
        }
    }
}

/* ---- blocks ------------------------------------------------------------------------- */

typedef struct {
    float *out;
    const float *x, *w, *b;
    int n;
    float eps;
} layernorm_task;

static void layernorm_range(void *arg, size_t lo, size_t hi) {
    const layernorm_task *t = arg;
    for (size_t i = lo; i < hi; i++)
        cpu_layernorm(t->out + i * t->n, t->x + i * t->n, t->w, t->b, t->n, t->eps);
}

/* layernorm_rows normalises rows of n floats, rows split across the pool. */
static void layernorm_rows(la_engine *e, float *out, const float *x, int rows, int n,
                           const float *w, const float *b, float eps) {
    layernorm_task t = {out, x, w, b, n, eps};
    cpu_pool_for(&e->pool, (size_t)rows, layernorm_range, &t);
}

typedef struct {
    void (*fn)(float *x, size_t n);
    float *x;
} gelu_task;

static void gelu_tanh_range(void *arg, size_t lo, size_t hi) {
    const gelu_task *t = arg;
    t->fn(t->x + lo, hi - lo);
}

static void gelu_erf_range(void *arg, size_t lo, size_t hi) {
    float *x = arg;
    for (size_t i = lo; i < hi; i++)
        x[i] = cpu_gelu_erf(x[i]);
}

static void add_rows(float *x, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++)
        x[i] += y[i];
}

/* vision_gemm is cpu_gemm_wt for the image's products, whose bf16 activations go in split
 * unless split_activations=none: the pixels and the features each patch carries pass
 * through every layer of the tower and the projector before the decoder sees them, and
 * rounding them once per product is where the fast path's answers moved most (measured:
 * docs/cpu-backend.md, Split activations). */
static void vision_gemm(la_engine *e, const float *x, int n, const cpu_matrix *w,
                        const float *bias, float *y) {
    cpu_gemm_wt(e, x, n, w, bias, y, e->split != CPU_SPLIT_NONE);
}

static void vision_block(la_engine *e, const cpu_vision_block *b, int L) {
    const la_config *c = &e->cfg;
    cpu_state *s = &e->s;
    const int C = c->vision_hidden, hd = e->vision_head_dim;
    float *tmp = s->merged; /* [L, C] scratch: the merge runs after the last block */

    /* attention */
    layernorm_rows(e, s->vxb, s->vx, L, C, b->norm0_w, b->norm0_b, c->vision_norm_eps);
    vision_gemm(e, s->vxb, L, &b->wqkv, b->wqkv_b, s->vqkv);
    rope_adjacent(s->vqkv, 3 * C, L, c->vision_heads, hd, s->vrope_cos, s->vrope_sin);
    rope_adjacent(s->vqkv + C, 3 * C, L, c->vision_heads, hd, s->vrope_cos, s->vrope_sin);
    cpu_attn a = {
        .q = s->vqkv, .ldq = 3 * C,
        .k = s->vqkv + C, .v = s->vqkv + 2 * C, .ldkv = 3 * C,
        .out = s->vxb, .ldo = C,
        .n_q = L, .n_k = L, .heads = c->vision_heads, .kv_heads = c->vision_heads, .head_dim = hd,
    };
    cpu_attention(e, &a);
    vision_gemm(e, s->vxb, L, &b->wo, b->wo_b, tmp);
    add_rows(s->vx, tmp, (size_t)L * C);

    /* MLP */
    layernorm_rows(e, s->vxb, s->vx, L, C, b->norm1_w, b->norm1_b, c->vision_norm_eps);
    vision_gemm(e, s->vxb, L, &b->fc0, b->fc0_b, s->vhb);
    gelu_task g = {e->kern.gelu_tanh, s->vhb};
    cpu_pool_for(&e->pool, (size_t)L * c->vision_intermediate, gelu_tanh_range, &g);
    vision_gemm(e, s->vhb, L, &b->fc1, b->fc1_b, tmp);
    add_rows(s->vx, tmp, (size_t)L * C);
}

/* merge_patches concatenates each m x m block of the [gh, gw, C] grid into one row, blocks
 * in raster order and patches inside a block in raster order ((0,0), (0,1), (1,0), (1,1)). */
static void merge_patches(const float *x, int gh, int gw, int C, int m, float *out) {
    const int bw = gw / m;
    for (int bi = 0; bi < gh / m; bi++)
        for (int bj = 0; bj < bw; bj++) {
            float *dst = out + ((size_t)bi * bw + bj) * (size_t)(m * m * C);
            for (int r = 0; r < m; r++)
                for (int cc = 0; cc < m; cc++) {
                    const float *src = x + ((size_t)(bi * m + r) * gw + (size_t)(bj * m + cc)) * C;
                    memcpy(dst + (size_t)(r * m + cc) * C, src, (size_t)C * sizeof *src);
                }
        }
}

int cpu_vision(la_engine *e, const float *patches, int gh, int gw, char *err, size_t errlen) {
    const la_config *c = &e->cfg;
    cpu_state *s = &e->s;
    const int m = c->merge_kernel, C = c->vision_hidden;

    if (!patches)
        return la_errorf(err, errlen, "vision: no patches");
    if (gh <= 0 || gw <= 0 || gh % m != 0 || gw % m != 0)
        return la_errorf(err, errlen, "vision: grid %dx%d must be positive multiples of the %d-patch merge",
                          gh, gw, m);
    if ((int64_t)gh * gw > s->max_patches)
        return la_errorf(err, errlen,
                          "vision: grid %dx%d gives %lld image tokens, more than max_seq_len %d",
                          gh, gw, (long long)gh * gw / (m * m), c->max_seq_len);
    const int L = gh * gw, T = L / (m * m);
    s->n_img = 0; /* a failure below can not leave stale embeddings behind */

    vision_gemm(e, patches, L, &e->w.patch, e->w.patch_b, s->vx);
    const float *pos = pos_table(e, gh, gw);
    add_rows(s->vx, pos, (size_t)L * C);
    vision_rope_table(e, gh, gw);

    for (int i = 0; i < c->vision_layers; i++)
        vision_block(e, &e->w.blocks[i], L);
    layernorm_rows(e, s->vx, s->vx, L, C, e->w.post_norm_w, e->w.post_norm_b, c->vision_norm_eps);

    /* merge and project; mlp1's LayerNorm uses the vision eps (1e-5 in the model code) */
    const int MC = m * m * C;
    merge_patches(s->vx, gh, gw, C, m, s->merged);
    layernorm_rows(e, s->merged, s->merged, T, MC, e->w.proj_norm_w, e->w.proj_norm_b, c->vision_norm_eps);
    vision_gemm(e, s->merged, T, &e->w.proj1, e->w.proj1_b, s->proj_hb);
    cpu_pool_for(&e->pool, (size_t)T * e->proj_mid, gelu_erf_range, s->proj_hb);
    vision_gemm(e, s->proj_hb, T, &e->w.proj2, e->w.proj2_b, s->img);
    s->n_img = T;
    return 0;
}
