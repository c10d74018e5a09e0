/*
 * cpu_step.c - the decoder's one entry point (la_backend.h, step): for several slots in one
 * call, a prefill of a free slot, AR decode rows and parallel box decoding's blocks
 * (docs/hybrid-decoding.md): one check, one layout of the rows, one layer loop
 * (cpu_text.c), one logit picker.
 *
 * Each slot brings its pending tokens (committed, not yet in its cache) and either nothing
 * more (the last pending token's next-token row is the output, or no row with no_output)
 * or a block of rows (every block row is an output). Its rows:
 *
 *   - a pending row at position L + j attends causally to its slot's cache rows 0..L+j;
 *     its key and value are written to the cache at L + j first, so it sees itself and
 *     the pending rows before it, exactly as if the tokens were decoded one by one;
 *   - block row i sits at position L' - 1 + i (L' = L + n_pending: row 0 repeats the last
 *     committed token at that token's position) and attends to the cache rows 0..L'-2 and
 *     to the rows of its own block: all of them, or rows 0..i when la_config.block_causal
 *     is set; the block's keys and values stay in the step's buffers and are never written
 *     to the cache, so the slot ends the step holding exactly its committed tokens.
 *
 * The rows go through the layer loop in runs (cpu_text.c says why two kinds): each free
 * slot's prompt first, as a prompt run of its own (its rows batched into GEMMs), which
 * makes the slot live; then the rows of every live slot together, as one live run (a
 * freshly prefilled slot's block included). The final norm and the LM head run only on
 * the output rows; each output row then gets a float32 softmax, its top-k ids and the
 * probabilities of the watched ids, which is all the acceptance rules read; greedy rows
 * (k = 1, nothing watched) take the argmax in one pass instead.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

/* ---- the plan ----------------------------------------------------------------------- */

int cpu_plan_step(la_engine *e, char *err, size_t errlen) {
    const la_config *c = &e->cfg;
    cpu_step_plan *p = &e->step;
    const size_t R = (size_t)c->max_batch * LA_STEP_MAX_ROWS;
    const size_t D = (size_t)c->hidden, I = (size_t)c->intermediate;
    const size_t qd = (size_t)c->heads * c->head_dim, kvd = (size_t)c->kv_heads * c->head_dim;
    const size_t T = (size_t)e->pool.nthreads;
    size_t widest = D > I ? D : I;
    widest = widest > qd ? widest : qd;

    p->max_rows = (int)R;
    p->rows = calloc(R, sizeof *p->rows);
    p->prompt_rows = calloc((size_t)c->max_seq_len, sizeof *p->prompt_rows);
    p->prompt_k = calloc((size_t)c->max_seq_len * kvd, sizeof(float));
    p->prompt_v = calloc((size_t)c->max_seq_len * kvd, sizeof(float));
    p->out_rows = calloc(R, sizeof *p->out_rows);
    p->x = calloc(R * D, sizeof(float));
    p->xb = calloc(R * D, sizeof(float));
    p->q = calloc(R * qd, sizeof(float));
    p->k = calloc(R * kvd, sizeof(float));
    p->v = calloc(R * kvd, sizeof(float));
    p->att = calloc(R * qd, sizeof(float));
    p->hb = calloc(R * I, sizeof(float));
    p->hb2 = calloc(R * I, sizeof(float));
    p->xpack = calloc(R * widest, sizeof(float));
    p->out = calloc(R * D, sizeof(float));
    p->scores = calloc(R * (size_t)c->heads * ((size_t)c->max_seq_len + LA_STEP_MAX_ROWS), sizeof(float));
    p->part_max = calloc(T * R, sizeof *p->part_max);
    p->part_sum = calloc(T * R, sizeof *p->part_sum);
    p->part_top = calloc(T * R * LA_STEP_MAX_K, sizeof *p->part_top);
    p->part_n = calloc(T * R, sizeof *p->part_n);
    p->part_idx = calloc(T * R, sizeof *p->part_idx);
    if (!p->rows || !p->prompt_rows || !p->prompt_k || !p->prompt_v || !p->out_rows || !p->x || !p->xb || !p->q || !p->k || !p->v ||
        !p->att || !p->hb || !p->hb2 || !p->xpack || !p->out || !p->scores || !p->part_max ||
        !p->part_sum || !p->part_top || !p->part_n || !p->part_idx)
        return la_errorf(err, errlen, "step plan: out of memory for %zu rows (max_batch %d x %d)", R,
                          c->max_batch, LA_STEP_MAX_ROWS);

    p->lm_head = (cpu_matmat){&e->w.lm_head, NULL, p->out, D, e->s.logits, (size_t)c->vocab};
    return 0;
}

void cpu_free_step_plan(cpu_step_plan *p) {
    float *bufs[] = {p->x, p->xb, p->q, p->k, p->v, p->att, p->hb, p->hb2, p->xpack, p->out,
                     p->scores, p->part_max, p->prompt_k, p->prompt_v};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    free(p->rows);
    free(p->prompt_rows);
    free(p->out_rows);
    free(p->part_sum);
    free(p->part_top);
    free(p->part_n);
    free(p->part_idx);
    memset(p, 0, sizeof *p);
}

/* ---- checking a call ---------------------------------------------------------------- */

/* check_call refuses a call that breaks a limit before anything is written: the caches,
 * the positions, the kept image embeddings and the logits stay as they were. */
static int check_call(const la_engine *e, int n, const la_step_slot *slots, const int32_t *tokens,
                      int k, int n_watch, const int32_t *watch, const int32_t *top_ids,
                      const float *top_p, const float *watch_p, char *err, size_t errlen) {
    const la_config *c = &e->cfg;
    if (n < 1 || n > c->max_batch)
        return la_errorf(err, errlen, "step: %d slots, want 1..%d (max_batch)", n, c->max_batch);
    if (k < 1 || k > LA_STEP_MAX_K)
        return la_errorf(err, errlen, "step: k %d, want 1..%d", k, LA_STEP_MAX_K);
    if (n_watch < 0 || n_watch > LA_STEP_MAX_WATCH)
        return la_errorf(err, errlen, "step: %d watched ids, want 0..%d", n_watch, LA_STEP_MAX_WATCH);
    if (!slots || !tokens || (n_watch > 0 && !watch))
        return la_errorf(err, errlen, "step: no slots, tokens or watched ids");
    for (int j = 0; j < n_watch; j++)
        if (watch[j] < 0 || watch[j] >= c->vocab)
            return la_errorf(err, errlen, "step: watched id %d (entry %d) is outside the vocabulary 0..%d",
                              (int)watch[j], j, c->vocab - 1);
    int t = 0;          /* tokens consumed so far */
    int n_out = 0;      /* output rows */
    int img_entry = -1; /* the free slot whose prompt holds image-context ids */
    for (int i = 0; i < n; i++) {
        const la_step_slot *s = &slots[i];
        const int slot = s->slot;
        if (slot < 0 || slot >= c->max_batch)
            return la_errorf(err, errlen, "step: entry %d: slot %d out of range 0..%d", i, slot,
                              c->max_batch - 1);
        for (int j = 0; j < i; j++)
            if (slots[j].slot == slot)
                return la_errorf(err, errlen, "step: slot %d appears in entries %d and %d; each slot "
                                  "takes part at most once per step", slot, j, i);
        const int live = e->s.slots[slot].live;
        if (s->n_pending < 0 || s->n_block < 0 || s->n_block > LA_STEP_MAX_ROWS ||
            (s->n_block == 0 && s->n_pending == 0))
            return la_errorf(err, errlen, "step: entry %d: slot %d: %d pending and %d block tokens; "
                              "want a block of 0..%d rows, and a pending token when there is none",
                              i, slot, (int)s->n_pending, (int)s->n_block, LA_STEP_MAX_ROWS);
        if (!live && s->n_pending == 0)
            return la_errorf(err, errlen, "step: entry %d: slot %d is free: its step is a prefill and "
                              "needs the prompt pending", i, slot);
        if (live && s->n_pending + s->n_block > LA_STEP_MAX_ROWS)
            return la_errorf(err, errlen, "step: entry %d: slot %d: %d pending and %d block tokens; "
                              "want 1..%d in all on a live slot", i, slot, (int)s->n_pending,
                              (int)s->n_block, LA_STEP_MAX_ROWS);
        if (!live && s->n_pending > c->max_seq_len)
            return la_errorf(err, errlen, "step: entry %d: slot %d: prefill: prompt of %d tokens is "
                              "longer than max_seq_len %d", i, slot, (int)s->n_pending, c->max_seq_len);
        /* L' = L + n_pending tokens kept; the block reaches position L' - 2 + n_block. */
        const int kept = e->s.slots[slot].pos + s->n_pending;
        if (kept > c->max_seq_len)
            return la_errorf(err, errlen, "step: entry %d: slot %d holds %d tokens; %d pending would "
                              "make %d, over max_seq_len %d", i, slot, e->s.slots[slot].pos,
                              (int)s->n_pending, kept, c->max_seq_len);
        if (s->n_block > 0 && kept - 1 + s->n_block > c->max_seq_len)
            return la_errorf(err, errlen, "step: entry %d: slot %d: a block of %d rows at positions "
                              "%d..%d runs past max_seq_len %d", i, slot, (int)s->n_block, kept - 1,
                              kept - 2 + s->n_block, c->max_seq_len);
        int n_img = 0;
        for (int j = 0; j < s->n_pending + s->n_block; j++, t++) {
            if (tokens[t] < 0 || tokens[t] >= c->vocab)
                return la_errorf(err, errlen, "step: entry %d: slot %d: %s token %d is id %d, outside "
                                  "the vocabulary 0..%d", i, slot, j < s->n_pending ? "pending" : "block",
                                  j < s->n_pending ? j : j - s->n_pending, (int)tokens[t], c->vocab - 1);
            const int pending = j < s->n_pending;
            if (tokens[t] == c->image_token_id && (live || !pending))
                return la_errorf(err, errlen, "step: entry %d: slot %d: %s token %d is the "
                                  "image-context id %d, which only a free slot's prompt may hold "
                                  "(images come with a prefill)", i, slot,
                                  pending ? "pending" : "block", pending ? j : j - s->n_pending,
                                  c->image_token_id);
            n_img += pending && tokens[t] == c->image_token_id;
        }
        if (n_img > 0 && img_entry >= 0)
            return la_errorf(err, errlen, "step: entries %d and %d both prefill a prompt with image "
                              "tokens; the image embeddings kept by vision serve one", img_entry, i);
        if (n_img > 0)
            img_entry = i;
        if (!live && n_img != e->s.n_img)
            return la_errorf(err, errlen,
                              "step: entry %d: slot %d: prefill: prompt has %d image tokens (id %d) but %d "
                              "embeddings are kept (a vision call keeps its embeddings for the one "
                              "prefill after it)", i, slot, n_img, c->image_token_id, e->s.n_img);
        n_out += s->n_block > 0 ? s->n_block : !s->no_output;
    }
    if (n_out > 0 && (!top_ids || !top_p || (n_watch > 0 && !watch_p)))
        return la_errorf(err, errlen, "step: %d output rows but no output array", n_out);
    return 0;
}

/* lay_out_rows fills the plan's rows of the live run, slot after slot (a live slot's
 * pending rows, then every slot's block rows: a free slot's block runs here, after its
 * prompt run), and the output rows: out_rows[o] is the live row of output row o, or -1 for
 * a prompt's next-token row, which its prompt run gives. It returns the number of live
 * rows and sets *n_out. */
static int lay_out_rows(la_engine *e, int n, const la_step_slot *slots, int *n_out) {
    cpu_step_plan *p = &e->step;
    int r = 0, o = 0;
    for (int i = 0; i < n; i++) {
        const la_step_slot *s = &slots[i];
        const int prefill = !e->s.slots[s->slot].live;
        const int L = prefill ? 0 : e->s.slots[s->slot].pos, kept = L + s->n_pending;
        if (!prefill)
            for (int j = 0; j < s->n_pending; j++, r++)
                p->rows[r] = (cpu_step_row){s->slot, L + j, L + j + 1, -1, 0};
        if (s->n_block == 0) {
            if (!s->no_output)
                p->out_rows[o++] = prefill ? -1 : r - 1; /* the last pending token's row */
            continue;
        }
        const int block0 = r;
        for (int j = 0; j < s->n_block; j++, r++) {
            /* Row 0 stands in for the last committed token (position L' - 1), so the block
             * sees the cache without that position. */
            p->rows[r] = (cpu_step_row){s->slot, kept - 1 + j, kept - 1, block0,
                                        e->cfg.block_causal ? j + 1 : s->n_block};
            p->out_rows[o++] = r;
        }
    }
    *n_out = o;
    return r;
}

/* ---- reading the output rows -------------------------------------------------------- */

/* Each output row's probabilities are p(id) = e^(l_id - m) / sum, m the row's largest
 * logit and sum = sum_i e^(l_i - m): each thread sums its slice of the vocabulary with
 * the vectorised e^x in double, and the slices are added in thread order (a greedy row's
 * probability, below, is the same sum). The most probable id's p is then 1 / sum. The
 * other ids' e^x is the C library's, in double: only a few ids per row need it. */
typedef struct {
    la_engine *e;
    int n_out, k;
} pick_task;

static void slice_bounds(const la_engine *e, int thread, int nthreads, int *lo, int *hi) {
    const int64_t V = e->cfg.vocab;
    *lo = (int)(V * thread / nthreads);
    *hi = (int)(V * (thread + 1) / nthreads);
}

static const float *logit_row(const la_engine *e, int o) {
    return e->s.logits + (size_t)o * e->cfg.vocab;
}

static void max_slice(void *arg, int thread, int nthreads) {
    const pick_task *t = arg;
    la_engine *e = t->e;
    const int R = e->step.max_rows;
    int lo, hi;
    slice_bounds(e, thread, nthreads, &lo, &hi);
    for (int o = 0; o < t->n_out; o++) {
        const float *row = logit_row(e, o);
        float m = lo < hi ? row[lo] : -INFINITY;
        for (int i = lo + 1; i < hi; i++)
            if (row[i] > m)
                m = row[i];
        e->step.part_max[thread * R + o] = m;
    }
}

static void sum_slice(void *arg, int thread, int nthreads) {
    const pick_task *t = arg;
    la_engine *e = t->e;
    const int R = e->step.max_rows;
    int lo, hi;
    slice_bounds(e, thread, nthreads, &lo, &hi);
    for (int o = 0; o < t->n_out; o++)
        e->step.part_sum[thread * R + o] =
            lo < hi ? e->kern.expsum(logit_row(e, o) + lo, hi - lo, e->step.part_max[o]) : 0;
}

static float prob_of(float logit, float m, double sum) {
    return (float)(exp((double)logit - (double)m) / sum);
}

/* before reports whether candidate a ranks above b: higher probability, then lower id. */
static int before(const cpu_step_top *a, const cpu_step_top *b) {
    return a->p > b->p || (a->p == b->p && a->id < b->id);
}

/* top_slice keeps, per output row, the k best ids of the thread's slice in rank order.
 * Ranking needs each id's float32 probability, but an id whose logit is more than 1e-6
 * below the lowest logit kept has a probability at least 1e-6 (relative) below every kept
 * one (p is e^l scaled: a ratio of e^-1e-6 before rounding, eight float ulps or more),
 * so it can not enter and its e^x is skipped. Ties in probability (equal logits, or
 * logits a rounding apart) are then ranked by id exactly. Below the smallest normal float
 * the rounding is absolute, so there nothing is skipped. */
static void top_slice(void *arg, int thread, int nthreads) {
    const pick_task *t = arg;
    la_engine *e = t->e;
    cpu_step_plan *p = &e->step;
    const int R = p->max_rows, k = t->k;
    int lo, hi;
    slice_bounds(e, thread, nthreads, &lo, &hi);
    for (int o = 0; o < t->n_out; o++) {
        const float *row = logit_row(e, o);
        const float m = p->part_max[o];
        const double sum = p->part_sum[o];
        cpu_step_top *top = p->part_top + ((size_t)thread * R + o) * LA_STEP_MAX_K;
        int n = 0;
        float floor_logit = -INFINITY; /* below it an id can not enter (when n == k) */
        for (int i = lo; i < hi; i++) {
            if (row[i] < floor_logit)
                continue;
            cpu_step_top c = {prob_of(row[i], m, sum), row[i], i};
            if (n == k && !before(&c, &top[k - 1]))
                continue;
            int j = n < k ? n++ : k - 1; /* insert c, dropping the last when full */
            for (; j > 0 && before(&c, &top[j - 1]); j--)
                top[j] = top[j - 1];
            top[j] = c;
            if (n == k && top[k - 1].p >= FLT_MIN) {
                float lowest = top[0].logit;
                for (int a = 1; a < k; a++)
                    lowest = top[a].logit < lowest ? top[a].logit : lowest;
                /* lowest - 1e-6, rounded down to a float so that the test stays safe */
                const double below = (double)lowest - 1e-6;
                floor_logit = (float)below;
                if ((double)floor_logit > below)
                    floor_logit = nextafterf(floor_logit, -INFINITY);
            }
        }
        p->part_n[thread * R + o] = n;
    }
}

/* A greedy row (k = 1, nothing watched) needs only its argmax (the lowest id on equal
 * logits) and that token's probability 1 / sum_i e^(l_i - l_max): one pass for the argmax
 * and one for the sum, each thread over its slice of the vocabulary, combined in thread
 * order. The ranking of the top-k pass would add a pass for nothing. */
static void argmax_slice(void *arg, int thread, int nthreads) {
    const pick_task *t = arg;
    la_engine *e = t->e;
    const int R = e->step.max_rows;
    int lo, hi;
    slice_bounds(e, thread, nthreads, &lo, &hi);
    for (int o = 0; o < t->n_out; o++) {
        const float *row = logit_row(e, o);
        int32_t best = lo < hi ? lo : -1;
        for (int i = lo + 1; i < hi; i++)
            if (row[i] > row[best]) /* strict: the lowest id wins a tie */
                best = i;
        e->step.part_idx[thread * R + o] = best;
        e->step.part_max[thread * R + o] = best >= 0 ? row[best] : -INFINITY;
    }
}

static void pick_greedy(la_engine *e, int n_out, int32_t *top_ids, float *top_p) {
    cpu_step_plan *p = &e->step;
    const int T = e->pool.nthreads, R = p->max_rows;
    pick_task t = {e, n_out, 1};

    cpu_pool_run(&e->pool, argmax_slice, &t);
    for (int o = 0; o < n_out; o++) {
        int32_t best = -1;
        float m = -INFINITY;
        for (int th = 0; th < T; th++) {
            const int32_t i = p->part_idx[th * R + o];
            if (i >= 0 && (best < 0 || p->part_max[th * R + o] > m)) {
                best = i;
                m = p->part_max[th * R + o];
            }
        }
        top_ids[o] = best;
        p->part_max[o] = m; /* thread 0's entry: the row's maximum, for sum_slice */
    }
    cpu_pool_run(&e->pool, sum_slice, &t);
    for (int o = 0; o < n_out; o++) {
        double sum = 0;
        for (int th = 0; th < T; th++)
            sum += p->part_sum[th * R + o];
        top_p[o] = (float)(1.0 / sum);
    }
}

/* pick writes the top-k ids and probabilities and the watched probabilities of the n_out
 * logits rows. */
static void pick(la_engine *e, int n_out, int k, int n_watch, const int32_t *watch, int32_t *top_ids,
                 float *top_p, float *watch_p) {
    cpu_step_plan *p = &e->step;
    const int T = e->pool.nthreads, R = p->max_rows;
    pick_task t = {e, n_out, k};

    cpu_pool_run(&e->pool, max_slice, &t);
    for (int o = 0; o < n_out; o++) {
        float m = p->part_max[o]; /* thread 0's; the row's maximum after this loop */
        for (int th = 1; th < T; th++)
            m = p->part_max[th * R + o] > m ? p->part_max[th * R + o] : m;
        p->part_max[o] = m;
    }
    cpu_pool_run(&e->pool, sum_slice, &t);
    for (int o = 0; o < n_out; o++) {
        double sum = 0;
        for (int th = 0; th < T; th++)
            sum += p->part_sum[th * R + o];
        p->part_sum[o] = sum;
    }
    cpu_pool_run(&e->pool, top_slice, &t);
    for (int o = 0; o < n_out; o++) {
        /* Merge the slices' lists: each is in rank order, and the rank is a total order. */
        cpu_step_top best[LA_STEP_MAX_K];
        int n = 0;
        for (int th = 0; th < T; th++) {
            const cpu_step_top *top = p->part_top + ((size_t)th * R + o) * LA_STEP_MAX_K;
            for (int a = 0; a < p->part_n[th * R + o]; a++) {
                if (n == k && !before(&top[a], &best[k - 1]))
                    break;
                int j = n < k ? n++ : k - 1;
                for (; j > 0 && before(&top[a], &best[j - 1]); j--)
                    best[j] = best[j - 1];
                best[j] = top[a];
            }
        }
        for (int a = 0; a < k; a++) { /* a vocabulary smaller than k leaves -1, 0 */
            top_ids[o * k + a] = a < n ? best[a].id : -1;
            top_p[o * k + a] = a < n ? best[a].p : 0;
        }
        const float *row = logit_row(e, o);
        for (int j = 0; j < n_watch; j++)
            watch_p[o * n_watch + j] = prob_of(row[watch[j]], p->part_max[o], p->part_sum[o]);
    }
}

/* ---- the op ------------------------------------------------------------------------- */

/* prompt_run is the run of a free slot's n-token prompt, on the prefill buffers. */
static cpu_rows prompt_run(la_engine *e, int slot, int n) {
    cpu_step_plan *p = &e->step;
    for (int j = 0; j < n; j++)
        p->prompt_rows[j] = (cpu_step_row){slot, j, j + 1, -1, 0};
    cpu_state *s = &e->s;
    return (cpu_rows){.prompt = 1, .n = n, .rows = p->prompt_rows, .x = s->x, .xb = s->xb,
                      .q = s->q, .k = p->prompt_k, .v = p->prompt_v, .att = s->att, .hb = s->hb,
                      .hb2 = s->hb2, .xpack = p->xpack /* a short prompt's products */};
}

/* live_run is the run of the step's n live rows (laid out by lay_out_rows). */
static cpu_rows live_run(la_engine *e, int n) {
    cpu_step_plan *p = &e->step;
    return (cpu_rows){.prompt = 0, .n = n, .rows = p->rows, .x = p->x, .xb = p->xb, .q = p->q,
                      .k = p->k, .v = p->v, .att = p->att, .hb = p->hb, .hb2 = p->hb2,
                      .scores = p->scores, .xpack = p->xpack};
}

int cpu_step(la_engine *e, int n, const la_step_slot *slots, const int32_t *tokens, int k,
             int n_watch, const int32_t *watch, int32_t *top_ids, float *top_p, float *watch_p,
             char *err, size_t errlen) {
    const la_config *c = &e->cfg;
    cpu_step_plan *p = &e->step;
    const int D = c->hidden;

    if (check_call(e, n, slots, tokens, k, n_watch, watch, top_ids, top_p, watch_p, err, errlen) != 0)
        return -1;
    e->s.logit_rows = 0;
    int n_out;
    const cpu_rows live = live_run(e, lay_out_rows(e, n, slots, &n_out));

    /* The prompt runs first (their slots are live afterwards, for their blocks in the live
     * run), and the live rows' embeddings; tokens[t] is entry i's first token. */
    for (int i = 0, t = 0, o = 0, r = 0; i < n; t += slots[i].n_pending + slots[i].n_block, i++) {
        const la_step_slot *s = &slots[i];
        cpu_slot *slot = &e->s.slots[s->slot];
        if (!slot->live) {
            const cpu_rows prompt = prompt_run(e, s->slot, s->n_pending);
            cpu_embed_rows(e, tokens + t, s->n_pending, 1, prompt.x);
            cpu_run_layers(e, &prompt);
            if (s->n_block == 0 && !s->no_output) /* the prompt's last row is the output */
                cpu_rmsnorm(p->out + (size_t)o * D, prompt.x + (size_t)(s->n_pending - 1) * D,
                            e->w.final_norm, D, c->rms_norm_eps);
            slot->live = 1;
        } else {
            cpu_embed_rows(e, tokens + t, s->n_pending, 0, live.x + (size_t)r * D);
            r += s->n_pending;
        }
        /* The rows' positions are laid out already; nothing below reads pos. */
        slot->pos += s->n_pending;
        cpu_embed_rows(e, tokens + t + s->n_pending, s->n_block, 0, live.x + (size_t)r * D);
        r += s->n_block;
        o += s->n_block > 0 ? s->n_block : !s->no_output;
    }
    /* A live run is a few rows: each of its ~220 pool tasks is short, so the pool's
     * waiters spin between them rather than sleep (a prompt run's tasks are long). */
    const int burst = live.n > 0;
    if (burst)
        cpu_pool_burst_begin(&e->pool);
    if (live.n > 0)
        cpu_run_layers(e, &live);
    for (int o = 0; o < n_out; o++)
        if (p->out_rows[o] >= 0)
            cpu_rmsnorm(p->out + (size_t)o * D, live.x + (size_t)p->out_rows[o] * D, e->w.final_norm,
                        D, c->rms_norm_eps);
    if (n_out > 0) {
        cpu_matmat_run(&e->pool, &e->kern, &p->lm_head, 1, n_out, p->xpack);
        if (k == 1 && n_watch == 0)
            pick_greedy(e, n_out, top_ids, top_p);
        else
            pick(e, n_out, k, n_watch, watch, top_ids, top_p, watch_p);
    }
    if (burst)
        cpu_pool_burst_end(&e->pool);
    e->s.logit_rows = n_out;
    return 0;
}
