/*
 * cpu_internal.h - the CPU backend's own types, shared by its cpu_*.c files.
 *
 * The layout follows llama2.c's run.c: a config (la_config, read as given), a weights
 * struct whose matrices point into the caller's mapped tensors, a run state with every
 * activation buffer and every slot's KV cache allocated once at open, and one function per
 * layer part. Nothing here is global: an engine owns everything it uses, so two engines in one
 * process never share state.
 */
#ifndef LA_CPU_INTERNAL_H
#define LA_CPU_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "la_backend.h"
#include "la_errors.h"

/* ---- element conversion ------------------------------------------------------------- */

float cpu_bf16_to_f32(uint16_t h);
float cpu_f16_to_f32(uint16_t h);
size_t cpu_dtype_size(la_dtype t);
/* Converts n elements of type t at src to float32 at dst. */
void cpu_to_f32(la_dtype t, const void *src, float *dst, size_t n);

/* ---- int8 weights (cpu_quant.c) ---------------------------------------------------------
 *
 * A matrix may also hold the engine's own int8 format, made at open when the option
 * weights_quant=q8 is given: a dtype beyond the checkpoint's three, used only inside the
 * backend. Each row is cols/CPU_Q8_BLOCK float32 scales then cols int8 quants (cpu_quant.c
 * says why), so a row is cpu_row_bytes(CPU_DTYPE_Q8, cols) bytes. */
#define CPU_DTYPE_Q8 ((la_dtype)3)
enum { CPU_DTYPE_COUNT = 4, CPU_Q8_BLOCK = 32 };

/* A prompt of at most short_prompt_rows tokens (option; at most CPU_SHORT_PROMPT_ROWS)
 * runs its matrix products as a decode step does (cpu_text.c, short_prompt); the step
 * plan's packed-input buffer holds that many rows (LA_STEP_MAX_ROWS per slot). */
enum { CPU_SHORT_PROMPT_ROWS = 16 };
_Static_assert(CPU_SHORT_PROMPT_ROWS <= LA_STEP_MAX_ROWS, "the step plan's xpack holds a short prompt");

/* ---- thread pool -------------------------------------------------------------------- */

/* A task is called once per thread with the thread's index (0 = the caller) and the
 * number of threads; it splits its own work from those two numbers. */
typedef void (*cpu_task_fn)(void *arg, int thread, int nthreads);

struct cpu_pool;
typedef struct {
    struct cpu_pool *pool;
    int index;
    pthread_t thread;
} cpu_pool_worker;

typedef struct cpu_pool {
    int nthreads; /* including the calling thread */
    cpu_pool_worker *workers; /* nthreads - 1 of them */
    int started; /* workers running, for a partial init's cleanup */
    pthread_mutex_t mu;
    pthread_cond_t wake; /* workers wait here for a new generation */
    pthread_cond_t done; /* the caller waits here for pending == 0 */
    /* The counters below are read without the mutex (atomics, sequentially consistent):
     * a waiter that spins sees them change without a wake-up, and one that sleeps says so
     * first, so the other side knows to signal (see cpu_pool.c). */
    uint64_t generation;
    int pending;
    int stopping;
    int sleepers;       /* workers asleep on wake, or about to be */
    int caller_asleep;  /* the caller is asleep on done, or about to be */
    int burst;          /* > 0: waiters spin before they sleep (cpu_pool_burst_begin) */
    int may_spin;       /* no more threads than CPUs: bursts spin (set once, at init) */
    cpu_task_fn fn;
    void *arg;
} cpu_pool;

/* cpu_pool_init starts nthreads-1 workers (the caller is thread 0). */
int cpu_pool_init(cpu_pool *p, int nthreads, char *err, size_t errlen);
/* cpu_pool_run calls fn on every thread and returns when all have finished. */
void cpu_pool_run(cpu_pool *p, cpu_task_fn fn, void *arg);
/* cpu_pool_for splits [0, n) into one contiguous range per thread and calls fn on each. */
typedef void (*cpu_range_fn)(void *arg, size_t lo, size_t hi);
void cpu_pool_for(cpu_pool *p, size_t n, cpu_range_fn fn, void *arg);
/* cpu_pool_burst_begin and _end bracket a run of many short tasks (a decode step's ~220):
 * inside it a worker that finishes a task, and the caller waiting for one, spin a while
 * (cpu_pool.c, POOL_SPIN) before sleeping, so the next task starts without a wake-up, on a
 * pool with no more threads than CPUs. Outside it every waiter sleeps at once. Only the caller calls them; bursts may nest. */
void cpu_pool_burst_begin(cpu_pool *p);
void cpu_pool_burst_end(cpu_pool *p);
/* cpu_pool_destroy stops and joins the workers. Safe on a zeroed pool. */
void cpu_pool_destroy(cpu_pool *p);
/* cpu_pool_probe runs tasks tasks on a pool of nthreads, in and out of bursts of
 * burst_every (0: never in one), and returns how many times a thread missed a task or
 * cpu_pool_run returned before every thread had run it (-1: the pool did not start). */
int cpu_pool_probe(int nthreads, int tasks, int burst_every);

/* ---- int8 weights: conversion ------------------------------------------------------- */

/* cpu_row_bytes is the bytes of one row of cols elements of type t (q8 included). */
size_t cpu_row_bytes(la_dtype t, int cols);
/* cpu_q8_quantize_row / cpu_q8_dequantize_row convert one row of cols (a multiple of 32)
 * float32 elements to and from the q8 row format. */
void cpu_q8_quantize_row(const float *src, int cols, void *dst);
/* cpu_q8_quantize_row_plain is the plain C quantizer cpu_q8_quantize_row must equal byte
 * for byte (it takes AVX-512 where the CPU has it), for tests. */
void cpu_q8_quantize_row_plain(const float *src, int cols, void *dst);
void cpu_q8_dequantize_row(const void *row, int cols, float *dst);

/* ---- matrices and kernels ----------------------------------------------------------- */

/* A dense row-major matrix [rows, cols] (PyTorch Linear weights are [out, in]) in the
 * checkpoint's own dtype, pointing into mapped memory. */
typedef struct {
    const void *data;
    la_dtype dtype; /* or CPU_DTYPE_Q8 */
    int rows, cols;
} cpu_matrix;

/* How prefill and the vision tower multiply (option matmul): float32 (exact), or bf16
 * inputs with float32 sums on AMX tiles or with AVX512_BF16 (the fast path). */
typedef enum {
    CPU_MATMUL_F32 = 0,
    CPU_MATMUL_AMX = 1,
    CPU_MATMUL_AVX512BF16 = 2,
} cpu_matmul;

/* Which bf16 products carry each activation as two bf16: its rounding and what the
 * rounding lost (option split_activations; cpu_amx.c, round_rows), 16 significant bits
 * instead of 8 for twice the multiplies. The f32 products ignore it. */
typedef enum {
    CPU_SPLIT_NONE = 0,   /* every bf16 product rounds its activations once */
    CPU_SPLIT_VISION = 1, /* the vision tower, the patch embedding and the projector */
    CPU_SPLIT_ALL = 2,    /* those and the decoder's prefill */
} cpu_split;

/* cpu_q8_fits says whether m can be stored as q8 (its rows are whole blocks). */
int cpu_q8_fits(const cpu_matrix *m);
/* cpu_q8_quantize converts m (bf16/f16/f32) to q8 rows at dst (rows *
 * cpu_row_bytes(CPU_DTYPE_Q8, cols) bytes) on the pool; -1 when out of memory. */
int cpu_q8_quantize(cpu_pool *pool, const cpu_matrix *m, void *dst);
/* cpu_rows_to_f32 widens (or dequantizes) rows row0..row0+rows-1 of m to float32 at dst. */
void cpu_rows_to_f32(const cpu_matrix *m, int row0, int rows, float *dst);

/* A kernel "rows" computes y[c * ldy + r] = dot(weight row r, x + c * ldx) for r < rows
 * and c < nx: rows weight rows of n elements (of the matrix's dtype) ldw elements apart,
 * against nx float32 activation rows. Each weight row is loaded once and applied to all nx
 * activation rows, and each dot product is summed the same way whatever nx is (see
 * cpu_kernels.c), so batching never changes a result's bits. */
typedef void (*cpu_rows_fn)(const void *w, size_t ldw, int rows, int n, const float *x,
                            size_t ldx, int nx, float *y, size_t ldy);
/* y[i] += a * x[i] for i < n. */
typedef void (*cpu_axpy_fn)(float *y, float a, const float *x, int n);
/* The sum of e^(x[i] - m) over i < n, for m >= every x[i], accumulated in double. */
typedef double (*cpu_expsum_fn)(const float *x, int n, float m);
/* gate[i] = silu(gate[i]) * up[i] for i < n (the SwiGLU of the MLP). */
typedef void (*cpu_swiglu_fn)(float *gate, const float *up, size_t n);
/* Reorders nx activation rows of n floats, ldx apart, into the layout a rows kernel reads
 * (dst has the same row stride). */
typedef void (*cpu_pack_fn)(const float *x, size_t ldx, int n, int nx, float *dst);

/* The kernels picked once at open from the CPU's features. */
typedef struct {
    const char *isa; /* "avx512", "avx2" or "generic" */
    cpu_rows_fn rows[CPU_DTYPE_COUNT]; /* indexed by la_dtype or CPU_DTYPE_Q8 */
    cpu_pack_fn pack[CPU_DTYPE_COUNT]; /* NULL: rows[dtype] reads the activations as they are */
    cpu_axpy_fn axpy;
    cpu_expsum_fn expsum;
    cpu_swiglu_fn swiglu;
    /* x[i] = gelu_tanh(x[i]) for i < n (the vision MLP's activation) */
    void (*gelu_tanh)(float *x, size_t n);
    /* softmax of x[0..n-1] in place (prefill's and the vision tower's attention; decode
     * and the step keep cpu_softmax) */
    void (*softmax)(float *x, int n);
} cpu_kernels;

void cpu_kernels_select(cpu_kernels *k);
/* The int8-weight kernels (cpu_kernels_q8.c), rows functions for CPU_DTYPE_Q8; ldw must
 * equal n (whole rows). */
void cpu_q8_rows_plain(const void *w, size_t ldw, int rows, int n, const float *x, size_t ldx,
                       int nx, float *y, size_t ldy);
void cpu_q8_rows_avx512(const void *w, size_t ldw, int rows, int n, const float *x, size_t ldx,
                        int nx, float *y, size_t ldy);
void cpu_q8_rows_avx2(const void *w, size_t ldw, int rows, int n, const float *x, size_t ldx,
                      int nx, float *y, size_t ldy);
/* cpu_kernels_named fills k with the set called name: "auto" (cpu_kernels_select),
 * "avx512", "avx2" or "plain". It returns 0, -1 for an unknown name, or -2 when this CPU
 * lacks the instructions. */
int cpu_kernels_named(const char *name, cpu_kernels *k);
/* cpu_kernels_generic gives the plain C kernels (used by tests to cross-check). */
void cpu_kernels_generic(cpu_kernels *k);
/* Probes for tests, through one set of kernels (which: the selected ones, the plain C
 * ones, or the AVX2 ones that a CPU without AVX-512 gets; results are NaN and the name
 * "none" when this CPU can not run the set): cpu_dot_probe runs one dot product and names
 * the instruction set used; cpu_rows_probe runs y[c * rows + r] = w[r] . x[c] for rows
 * contiguous weight rows and nx contiguous activation rows of n elements;
 * cpu_expsum_probe runs the kernel behind token probabilities. */
enum { CPU_KERNELS_SELECTED = 0, CPU_KERNELS_PLAIN = 1, CPU_KERNELS_AVX2 = 2 };
float cpu_dot_probe(int which, la_dtype t, const void *row, const float *x, int n,
                    const char **isa);
void cpu_rows_probe(int which, la_dtype t, const void *w, int rows, int n, const float *x,
                    int nx, float *y);
double cpu_expsum_probe(int which, const float *x, int n, float m);
/* cpu_activation_probe runs a set's gelu_tanh (op 0) or softmax (op 1) on x in place; -1
 * when this CPU can not run the set. */
int cpu_activation_probe(int which, int op, float *x, int n);

/* One batched matrix-vector product ("matmat"), y[c] = W x[c] (+ b) for the activation
 * rows c < n of a decode step, x and y rows ldx and ldy floats apart. */
typedef struct {
    const cpu_matrix *w;
    const float *bias; /* may be NULL */
    const float *x;
    size_t ldx;
    float *y;
    size_t ldy;
} cpu_matmat;

/* Runs count independent products (up to 4) of one input x (mm[j].x all equal) for n
 * activation rows in one pool dispatch, each thread taking the same share of every
 * product's weight rows (one wake-up instead of several, and every weight row read once
 * for all n rows). xpack holds n rows of x, ldx apart, for kernels that read it packed. */
void cpu_matmat_run(cpu_pool *pool, const cpu_kernels *k, const cpu_matmat *mm, int count, int n,
                    float *xpack);

/* Dense helpers on float32 rows. */
void cpu_layernorm(float *out, const float *x, const float *w, const float *b, int n, float eps);
void cpu_rmsnorm(float *out, const float *x, const float *w, int n, float eps);
void cpu_softmax(float *x, int n);
float cpu_gelu_tanh(float x);
float cpu_gelu_erf(float x);
float cpu_silu(float x);
int32_t cpu_argmax(const float *x, int n);

/* ---- the exact path's float32 products ---------------------------------------------- */

/* The exact path's own float32 products (cpu_gemm_f32.c): y[i, j] = alpha * sum over k of
 * x[i, k] B[j, k] (b_kn = 0: B is [N, K], a Linear weight) or x[i, k] B[k, j] (b_kn = 1:
 * B is [K, N], attention's values), B in bf16/f16/f32 rows ldb elements apart, widened to
 * float32 while it is packed. The level picks the instructions (CPU_F32_OPENBLAS: the
 * engine keeps cblas_sgemm instead, see cpu_gemm_wt). */
enum { CPU_F32_OPENBLAS = -1, CPU_F32_PLAIN = 0, CPU_F32_AVX2 = 1, CPU_F32_AVX512 = 2 };
typedef struct {
    int n, N, K;
    float alpha;
    const float *x;
    size_t ldx;
    const void *b;
    la_dtype b_dtype;
    size_t ldb;
    int b_kn;
    float *y;
    size_t ldy;
} cpu_f32_product;
/* One engine's kernels: the level, the row count up to which a wt product reads the
 * weights unpacked (short prompts), and each pool thread's packing buffer. */
typedef struct {
    int level;
    int small_rows;
    int nthreads;
    float **pack;
} cpu_f32;
/* cpu_f32_kernel_level is the best level this CPU runs, cpu_f32_kernel_name its name;
 * cpu_f32_level_name names any level; cpu_f32_level_named reads an option value (auto,
 * openblas, plain, avx2, avx512): the level, -3 for an unknown name, -2 when this CPU lacks
 * the instructions. */
int cpu_f32_kernel_level(void);
const char *cpu_f32_kernel_name(void);
const char *cpu_f32_level_name(int level);
int cpu_f32_level_named(const char *name);
/* cpu_f32_init allocates g's buffers for a pool of nthreads (-1: out of memory; call
 * cpu_f32_free either way); cpu_f32_gemm runs one product on the pool. */
int cpu_f32_init(cpu_f32 *g, int level, int nthreads);
void cpu_f32_free(cpu_f32 *g);
void cpu_f32_gemm(const cpu_f32 *g, cpu_pool *pool, const cpu_f32_product *p);
/* cpu_f32_gemm_probe runs one product at level on its own pool of threads, reps times,
 * for tests and benchmarks (small_rows < 0 keeps the default), and sets best to the
 * shortest run in seconds; level CPU_F32_OPENBLAS runs cblas_sgemm on B widened to float32
 * beforehand (b_kn = 0 only, the widening not timed). 0, -1 for a level this CPU lacks,
 * -2 when out of memory. */
int cpu_f32_gemm_probe(int level, int small_rows, const cpu_f32_product *p, int threads, int reps,
                       double *best);

/* ---- the engine --------------------------------------------------------------------- */

typedef struct {
    const float *norm0_w, *norm0_b, *norm1_w, *norm1_b;
    cpu_matrix wqkv, wo, fc0, fc1;
    const float *wqkv_b, *wo_b, *fc0_b, *fc1_b;
} cpu_vision_block;

typedef struct {
    const float *attn_norm, *mlp_norm;
    cpu_matrix q, k, v, o, gate, up, down;
    const float *q_b, *k_b, *v_b;
} cpu_text_layer;

typedef struct {
    /* vision tower */
    cpu_matrix patch; /* [vision_hidden, 3*p*p] */
    const float *patch_b;
    const float *pos_emb; /* [pos_h, pos_w, vision_hidden], f32 copy */
    cpu_vision_block *blocks;
    const float *post_norm_w, *post_norm_b;
    /* projector mlp1 */
    const float *proj_norm_w, *proj_norm_b;
    cpu_matrix proj1, proj2;
    const float *proj1_b, *proj2_b;
    /* decoder */
    cpu_matrix embed; /* [vocab, hidden] */
    cpu_text_layer *layers;
    const float *final_norm;
    cpu_matrix lm_head; /* lm_head, or embed when tied */
} cpu_weights;

/* One sequence slot: its KV cache rows are written by steps (a prefill, pending rows);
 * attention only ever reads rows below pos, so a released slot's cache needs no clearing. */
typedef struct {
    int live; /* prefilled and not released since */
    int pos;  /* tokens in the cache: the next position to write */
} cpu_slot;

/* Activations and the KV caches, every buffer sized from max_seq_len and max_batch at
 * open. */
typedef struct {
    /* vision, for up to max_patches patches */
    int max_patches;
    float *vx;      /* [P, Cv] residual stream */
    float *vxb;     /* [P, Cv] normed input / attention output */
    float *vqkv;    /* [P, 3 Cv] */
    float *vhb;     /* [P, Iv] MLP hidden */
    float *merged;  /* [P / m^2, m^2 Cv] */
    float *proj_hb; /* [P / m^2, proj_mid] */
    float *scores;  /* [attn_chunk, max(P, max_seq_len)] */
    float *pos_cache; /* resized pos-emb for pos_cache_h x pos_cache_w */
    int pos_cache_h, pos_cache_w;
    float *vrope_cos, *vrope_sin; /* [P, head_dim/2] for the current grid */

    /* image embeddings [n_img, hidden] kept by vision for the next prefill */
    float *img;
    int n_img;

    /* a prompt run's buffers (cpu_text.c), for up to max_seq_len tokens of one prompt (any
     * slot); its rows, keys and values are in the step's plan */
    float *x;    /* [S, D] residual */
    float *xb;   /* [S, D] normed */
    float *q;    /* [S, H*hd] */
    float *att;  /* [S, H*hd] attention output */
    float *hb;   /* [S, I] gate */
    float *hb2;  /* [S, I] up */
    float *rope_cos, *rope_sin; /* [S, hd/2], positions 0..S-1 */

    /* KV caches [max_batch][layers][max_seq_len][kv_heads*hd], one block per slot */
    float *key_cache, *value_cache;
    cpu_slot *slots; /* [max_batch] */

    float *logits;   /* [max_batch * LA_STEP_MAX_ROWS][vocab]: output row i of the last
                        step */
    int logit_rows;  /* rows of it that call wrote (0 after release, reset or a failure) */

    /* bf16/f16 GEMM weights are widened here, one block of rows at a time, for cblas_sgemm */
    float *wscratch;
    size_t wscratch_len;

    /* matmul=amx (cpu_amx.c): the activations rounded to bf16 tiles, and each pool
     * thread's packed panel and sums */
    uint16_t *amx_act;
    void **amx_scratch;
    int amx_threads;
    struct cpu_amx_attn_buffers *amx_attn; /* [amx_threads]: attention, one head per thread */
} cpu_state;

/* One pool thread's buffers for attention on AMX (cpu_amx_attention): a head's keys
 * [keys, hd] and transposed values [hd, keys], a block of query rows, its scores and its
 * output, and the product's tiles. */
typedef struct cpu_amx_attn_buffers {
    float *q, *k, *vt, *scores, *out;
    uint16_t *act;
    void *scratch;
} cpu_amx_attn_buffers;

/* One row of a step (cpu_step.c): a pending token, kept in its slot's cache, or a block
 * row, whose key and value live only in the step's buffers. */
typedef struct {
    int slot;
    int pos;     /* position: RoPE angle, and the cache row a pending token's K/V go to */
    int n_cache; /* cache rows it attends to: 0..pos for a pending row, 0..L'-2 for a block row */
    int block0;  /* a block row: the step row of its block's row 0; -1 for a pending row */
    int n_block; /* a block row: rows in its block, all of which it attends to */
} cpu_step_row;

/* A run of rows through the decoder's layer loop (cpu_text.c), with its own buffers, rows
 * n floats wide each ([n, hidden] for x, and so on). A prompt run is one free slot's
 * prompt, at positions 0..n-1 (its products are GEMMs, its attention causal over the
 * prompt); a live run holds the rows of the step's live slots (batched matrix-vector
 * products, attention row by row over scores and xpack). */
typedef struct {
    int prompt;
    int n;
    const cpu_step_row *rows;
    float *x, *xb, *q, *k, *v, *att, *hb, *hb2;
    float *scores; /* live run: [n, heads, max_seq_len + LA_STEP_MAX_ROWS] */
    float *xpack;  /* a live run's or a short prompt's products' packed input */
} cpu_rows;

/* One candidate of a row's top-k: what the picker orders by (probability, then id). */
typedef struct {
    float p;
    float logit;
    int32_t id;
} cpu_step_top;

/* The step's plan, made at open: the batched products of every layer over buffers of
 * max_batch * LA_STEP_MAX_ROWS rows, and the picker's per-thread results. */
typedef struct {
    int max_rows;
    cpu_matmat lm_head;       /* from out into the logits rows */
    cpu_step_row *rows;       /* [max_rows] this call's live rows, slot after slot */
    int *out_rows;            /* [max_rows] the live row of each output row, -1: a prompt's */
    cpu_step_row *prompt_rows;    /* [max_seq_len] a prompt run's rows */
    float *prompt_k, *prompt_v;   /* [max_seq_len, kv_heads * head_dim] a prompt run's keys, values */
    float *x, *xb, *q, *k, *v, *att, *hb, *hb2, *xpack; /* the live run's buffers */
    float *out;     /* [max_rows, hidden] the output rows after the final norm */
    float *scores;  /* [max_rows, heads, max_seq_len + LA_STEP_MAX_ROWS] */
    float *part_max;        /* [threads][max_rows] */
    double *part_sum;       /* [threads][max_rows] */
    cpu_step_top *part_top; /* [threads][max_rows][LA_STEP_MAX_K] */
    int *part_n;            /* [threads][max_rows] candidates found in the slice */
    int32_t *part_idx;      /* [threads][max_rows] a greedy row's argmax in the slice */
} cpu_step_plan;

struct la_engine {
    la_config cfg; /* copied; tensors pointer is the caller's and stays mapped */
    int vision_head_dim;
    int proj_mid;     /* mlp1.1 output width */
    int attn_chunk;   /* query rows per attention score block */
    size_t widen_block_bytes; /* float32 bytes per widening block (cpu_gemm_wt) */
    int resident_weights;     /* option: copy decoder matrices into anonymous memory */
    int weights_q8;           /* option weights_quant=q8: that copy is int8 (cpu_quant.c) */
    cpu_matmul matmul;        /* option matmul: prefill and vision GEMMs (cpu_gemm_wt) */
    cpu_split split;          /* option split_activations: which bf16 products split */
    int short_prompt_rows;    /* option short_prompt_rows (cpu_text.c, short_prompt) */
    cpu_f32 f32;              /* option f32_kernel: the exact path's GEMMs (cpu_gemm_f32.c) */
    void *resident;           /* that copy (huge-page backed where the kernel allows) */
    cpu_weights w;
    cpu_state s;
    cpu_step_plan step;
    cpu_kernels kern;
    cpu_pool pool;
    /* float32 copies made at open (1-D tensors, pos-emb), freed at close */
    float **owned;
    int n_owned, cap_owned;
};

/* Vision tower + merge + projector (cpu_vision.c). */
int cpu_vision(la_engine *e, const float *patches, int grid_h, int grid_w, char *err,
               size_t errlen);
/* The decoder's layer loop (cpu_text.c). cpu_embed_rows writes the embeddings of ids[0..n)
 * to x (rows hidden floats apart); with images set (a free slot's prefill) the image-context
 * ids take the kept image embeddings in order, which it consumes. cpu_run_layers runs a
 * run's rows through every layer, keeping the kept rows' keys and values in their slots'
 * caches; x then holds the last layer's output. */
void cpu_embed_rows(la_engine *e, const int32_t *ids, int n, int images, float *x);
void cpu_run_layers(la_engine *e, const cpu_rows *run);
/* The decoder's one entry point (cpu_step.c): la_backend_ops.step, and its plan. */
int cpu_step(la_engine *e, int n, const la_step_slot *slots, const int32_t *tokens, int k,
             int n_watch, const int32_t *watch, int32_t *top_ids, float *top_p, float *watch_p,
             char *err, size_t errlen);
int cpu_plan_step(la_engine *e, char *err, size_t errlen);
void cpu_free_step_plan(cpu_step_plan *p);

/* cpu_gemm_wt computes y[n, w.rows] = x[n, w.cols] W^T (+ bias per column), widening a
 * bf16/f16 W into the engine's scratch first (cblas_sgemm wants float32). On bf16
 * products, split says whether the activations go in split (cpu_split). */
void cpu_gemm_wt(la_engine *e, const float *x, int n, const cpu_matrix *w, const float *bias,
                 float *y, int split);
/* Matrix products in bf16 with float32 sums (cpu_amx.c), the fast path's prefill and
 * vision GEMMs, on AMX tiles or, on the same packed tiles, with AVX512_BF16's VDPBF16PS
 * (cpu_avx512bf16.c). cpu_amx_available asks the kernel for the tile state and says whether
 * this CPU and kernel run AMX; cpu_avx512bf16_available whether the CPU has AVX512_BF16;
 * cpu_bf16_matmul_available(kind) whether this build and CPU run that kind's products.
 * cpu_amx_gemm_wt computes y[n, w.rows] = bf16(x) bf16(W)^T in float32 sums with the given
 * kind, or with split (option split_activations) (bf16(x) + bf16(x - bf16(x))) bf16(W)^T,
 * with act holding cpu_amx_act_elems(n, w.cols, split) bf16 and scratch one 64-byte-aligned
 * buffer of cpu_amx_thread_bytes(n, w.cols) per pool thread. cpu_avx512bf16_multiply is
 * the AVX512_BF16 kernel's inner step: rows (at most 32, the rest padding) of a strip pair
 * at a0 (the second strip strip_elems later) times chunks kc0..kc1-1 of a packed panel,
 * into acc (128 floats a row), from zero when first. */
int cpu_amx_available(void);
int cpu_avx512bf16_available(void);
/* cpu_matmul_fast is the fast path's best products on this CPU: amx, avx512bf16, else f32.
 * cpu_matmul_named reads an option value: 0 (is_auto set for "auto"), -1 for an unknown
 * name, -2 for products this CPU lacks. cpu_matmul_name is the option value of m. */
cpu_matmul cpu_matmul_fast(void);
int cpu_matmul_named(const char *name, cpu_matmul *m, int *is_auto);
const char *cpu_matmul_name(cpu_matmul m);
int cpu_bf16_matmul_available(cpu_matmul kind);
size_t cpu_amx_kpad(int cols);
size_t cpu_amx_act_elems(int rows, int cols, int split);
size_t cpu_amx_thread_bytes(int rows, int cols);
void cpu_amx_gemm_wt(cpu_matmul kind, int split, cpu_pool *pool, uint16_t *act, void **scratch,
                     const float *x, int n, const cpu_matrix *w, float *y);
void cpu_avx512bf16_multiply(const uint16_t *a0, size_t strip_elems, const uint16_t *panel,
                             int kc0, int kc1, float *acc, int rows, int first);
/* cpu_amx_gemm_probe runs cpu_amx_gemm_wt reps times on its own pool and buffers, for
 * tests and benchmarks, and sets best to the shortest run in seconds: 0, -1 where AMX is
 * unavailable, -2 when out of memory. cpu_sgemm_probe times what matmul=f32 runs for the
 * same product, cblas_sgemm on the weights widened to float32 beforehand (the widening
 * itself not timed): 0, or -2 when out of memory. */
int cpu_amx_gemm_probe(cpu_matmul kind, int split, la_dtype dtype, const void *w, int rows,
                       int cols, const float *x, int n, float *y, int threads, int reps,
                       double *best);
int cpu_sgemm_probe(la_dtype dtype, const void *w, int rows, int cols, const float *x, int n,
                    float *y, int reps, double *best);

/* The VNNI prototype (cpu_vnni_probe.c), measured by BenchmarkVNNI, not an engine path:
 * cpu_vnni_matvec_gbps is a batch-1 product of int8-rounded activations and q8 weights
 * with VPDPBUSD (GB/s of weights, best of reps), cpu_vnni_inner_gmacs the int8 and the
 * AVX512_BF16 GEMM inner loops in L1 (G multiply-adds/s on one core); -1 without VNNI. */
int cpu_vnni_available(void);
int cpu_vnni_matvec_gbps(const void *w, int rows, int cols, int mats, const float *x, float *y,
                         int threads, int reps, double *gbps);
int cpu_vnni_inner_gmacs(int reps, double *vnni, double *bf16);

/* Multi-head attention over float32 rows: out[i, h] = softmax(scale * q[i, h] . k[j, g]) v[j, g]
 * for query rows i < n_q and key rows j < n_k, where key/value head g = h / (heads /
 * kv_heads). Causal masks keys past q_offset + i (the query's own position). Runs through
 * cblas_sgemm in blocks of attn_chunk query rows. */
typedef struct {
    const float *q;
    int ldq;
    const float *k, *v;
    int ldkv;
    float *out;
    int ldo;
    int n_q, n_k, heads, kv_heads, head_dim;
    int causal, q_offset;
} cpu_attn;

void cpu_attention(la_engine *e, const cpu_attn *a);
/* cpu_amx_attention is cpu_attention with both products in bf16 with the engine's matmul
 * kind (AMX tiles or AVX512_BF16), heads split across the pool. */
void cpu_amx_attention(la_engine *e, const cpu_attn *a);

/* cpu_bicubic_resize resizes a [ih, iw, c] table to [oh, ow, c] like torch's
 * F.interpolate(mode="bicubic", align_corners=False) without antialiasing. */
void cpu_bicubic_resize(const float *in, int ih, int iw, int c, float *out, int oh, int ow);

/* The engine's figures for the benchmark (cpu_probe.c): the name of the kernels this CPU
 * gets. */
const char *cpu_kernel_isa(void);
/* cpu_matvec_gbps times the decode matrix-vector product over mats [rows, cols] matrices
 * stored back to back at w, on its own pool of threads, and returns the best weight GB/s. */
int cpu_matvec_gbps(const void *w, la_dtype dtype, int rows, int cols, int mats, const float *x,
                    float *y, int threads, int reps, double *gbps, char *err, size_t errlen);

#endif /* LA_CPU_INTERNAL_H */
