/*
 * la_backend.h - the C ABI between the Go engine and a native LocateAnything backend.
 *
 * A backend is a table of functions (la_backend_ops). The Go side (engine/native) fills an
 * la_config from the checkpoint's config.json and the memory-mapped safetensors, calls
 * open() once, and close() at the end.
 *
 * Sequences and slots: a backend holds max_batch sequence slots, each with its own KV cache
 * of max_seq_len positions. A request runs vision() (which keeps its image embeddings), then
 * step() on a free slot with its prompt pending (its prefill, which consumes them), then
 * step() calls that advance several slots in one forward, so the weights are read once for
 * all of them. release() frees a slot when its sequence ends or is cancelled; the other
 * slots are untouched. reset() releases every slot and forgets the image embeddings.
 *
 * step() (ABI 4) is the decoder's one entry point: for several slots in one forward, the
 * committed tokens a slot's cache lacks ("pending", kept in the cache) and then either the
 * next-token row of the last of them (AR decoding, or a prefill's first token) or a block
 * of rows whose keys and values are never kept (parallel box decoding,
 * docs/hybrid-decoding.md); it returns each output row's top-k ids and the probabilities of
 * a few watched ids, rather than whole logit rows.
 *
 * Batching never changes a sequence's tokens: a slot's greedy tokens (and logits, bit for
 * bit on the CPU backend) are the same whether it is decoded alone or with others, in any
 * row order and whatever the other slots hold.
 *
 * Rules every backend keeps:
 *  - Never abort, never exit, never print to stdout. Every fallible call returns 0 on success
 *    and non-zero on failure, with a NUL-terminated message written to err (at most errlen
 *    bytes, LA_ERR_LEN is enough).
 *  - Ownership: every pointer passed in (config, tensors, patches, ids) is owned by the
 *    caller and only valid during the call, except la_config.tensors[i].data, which stays
 *    mapped until close() returns. Pointers a backend returns (logits, embeddings) are owned
 *    by the backend and valid until its next call on the same engine.
 *  - One engine per chip; all calls on one engine come from one OS thread, one at a time.
 *    Two engines in one process share nothing (no global mutable state).
 *  - The ABI is versioned: a backend whose abi_version differs from LA_ABI_VERSION is
 *    refused by the caller.
 */
#ifndef LA_BACKEND_H
#define LA_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#define LA_ABI_VERSION 4
#define LA_ERR_LEN 512
#define LA_MAX_DIMS 4

typedef enum {
    LA_DTYPE_F32 = 0,
    LA_DTYPE_F16 = 1,
    LA_DTYPE_BF16 = 2,
} la_dtype;

/* One tensor of the checkpoint, as named in the safetensors file. */
typedef struct {
    const char *name;
    la_dtype dtype;
    int ndim;
    int64_t shape[LA_MAX_DIMS];
    const void *data; /* little-endian elements, row-major; mapped read-only */
    size_t nbytes;
} la_tensor;

/* Everything a backend needs, read by Go from config.json / preprocessor_config.json. */
typedef struct {
    /* MoonViT (config.json: vision_config) */
    int vision_hidden;       /* 1152 */
    int vision_layers;       /* 27 */
    int vision_heads;        /* 16 */
    int vision_intermediate; /* 4304 */
    int patch_size;          /* 14 */
    int merge_kernel;        /* 2 (2x2) */
    int pos_emb_height;      /* 64 */
    int pos_emb_width;       /* 64 */
    float vision_norm_eps;   /* 1e-5 */

    /* Qwen2 decoder (config.json: text_config) */
    int hidden;       /* 2048 */
    int layers;       /* 36 */
    int heads;        /* 16 */
    int kv_heads;     /* 2 */
    int head_dim;     /* 128 */
    int intermediate; /* 11008 */
    int vocab;        /* 152681 */
    float rope_theta; /* 1e6 */
    float rms_norm_eps;
    int image_token_id; /* <IMG_CONTEXT> */
    int block_causal;   /* text_config.causal_attn: a block's rows see the rows of their own
                           block causally (row i sees rows 0..i) instead of both ways, as
                           upstream's mask does then (docs/hybrid-decoding.md) */

    /* Run-time choices */
    int max_seq_len; /* KV cache length of each slot (LA_MAX_SEQ_LEN) */
    int max_batch;   /* sequence slots, decoded together (LA_MAX_BATCH), at least 1 */
    int threads;     /* 0 = backend's choice */

    /* The weights. A backend that loads files itself (ttnn) may use weights_dir and
     * ignore the table. */
    const char *weights_dir;
    const la_tensor *tensors;
    int n_tensors;

    /* Extra backend-specific options as "key=value\n" lines; may be NULL. */
    const char *options;
} la_config;

typedef struct la_engine la_engine; /* opaque, one per chip */

/* Limits of one step() call. */
#define LA_STEP_MAX_ROWS 16 /* n_block of one slot, and n_pending of a live slot */
#define LA_STEP_MAX_K 8     /* top-k ids per output row */
#define LA_STEP_MAX_WATCH 16

/* One slot's part of a step() call (ABI 4). A step is the one way through the decoder, in
 * the shape of llama.cpp's llama_batch grouped by slot: a slot's rows are its n_pending
 * kept rows (their keys and values enter the cache, causally, at the positions after what
 * the slot holds) and then its n_block block rows (never kept). Which rows give an output:
 *  - n_block > 0: every block row;
 *  - n_block == 0 and no_output == 0: the last pending row (its next-token row);
 *  - n_block == 0 and no_output != 0: none (the rows are only cached).
 * So a prefill is a step on a free slot with the whole prompt pending (one output, or none
 * when hybrid decoding starts with a block), an AR decode step is one pending row per
 * slot, and a parallel-box-decoding step is pending rows and a block. */
typedef struct {
    int32_t slot;      /* a live slot, or a free one (which then starts at position 0) */
    int32_t n_pending; /* committed tokens the slot's cache lacks, appended first (>= 0) */
    int32_t n_block;   /* 0: no block; > 0: a block of n_block rows after the pending ones */
    int32_t no_output; /* with n_block 0 only: 1 = cache the pending rows, output no row */
} la_step_slot;

typedef struct {
    int abi_version; /* LA_ABI_VERSION the backend was built against */
    const char *name; /* "cpu", "ttnn" */

    la_engine *(*open)(const la_config *cfg, char *err, size_t errlen);

    /* patches: [grid_h*grid_w, 3, patch, patch] float32, normalized. Keeps the
     * grid_h*grid_w/merge^2 image embeddings for the next prefill (whatever slot it uses);
     * a second vision call before that prefill replaces them. */
    int (*vision)(la_engine *e, const float *patches, int grid_h, int grid_w,
                  char *err, size_t errlen);

    /* One step for n distinct slots (1 <= n <= max_batch), one forward for all of them: the
     * one entry point of the decoder. tokens holds, slot after slot, its n_pending pending ids
     * and then its n_block block ids.
     *
     * A free slot holds L = 0 positions and needs n_pending >= 1: the step is its prefill and
     * the slot is live afterwards. Every pending id equal to image_token_id takes the next of
     * the image embeddings kept by vision(), in order, which the call consumes; at most one
     * slot of a call may hold image-context ids, and it must hold exactly as many as vision()
     * kept. Images come only with a prefill: image_token_id anywhere else (a live slot's
     * pending ids, any block row) fails the call, on every backend.
     *
     * For a slot that holds L positions, pending id j runs at position L + j, causally
     * (it sees the cache and the pending rows up to itself), and its key and value are
     * kept: the slot then holds L' = L + n_pending. Block row i runs at position L' - 1 + i
     * (row 0 repeats the last committed token at that token's position) and sees every
     * cached position except L' - 1, which row 0 stands in for, and the rows of its own
     * block: all of them, or rows 0..i when la_config.block_causal is set; the block's keys
     * and values are never kept.
     *
     * Output rows, slot after slot, as la_step_slot says: n_block for a slot with a block,
     * one (its last pending row) for a slot without, none with no_output. For output row r:
     * top_ids[r*k .. r*k+k) and top_p[...] are the k most probable ids by float32 softmax
     * over the vocabulary, most probable first, equal probabilities in ascending id order
     * (k = 1 is greedy decoding: with no watched ids the id is the row's argmax, the lowest
     * id among equal logits); watch_p[r*n_watch + j] is the probability of watch[j]
     * (watch_p may be NULL when n_watch is 0; top_ids and top_p may be NULL when the call
     * has no output row). Limits: n_block <= LA_STEP_MAX_ROWS; n_pending <= LA_STEP_MAX_ROWS
     * on a live slot and n_pending <= max_seq_len on a free one; 1 <= k <= LA_STEP_MAX_K,
     * 0 <= n_watch <= LA_STEP_MAX_WATCH, L' <= max_seq_len and L' - 1 + n_block <=
     * max_seq_len. A call that breaks a limit, names a slot twice, holds an id outside
     * the vocabulary or an image-context id outside a free slot's prompt fails before
     * anything is written. After the call logits(r) is output row r's logits. */
    int (*step)(la_engine *e, int n, const la_step_slot *slots, const int32_t *tokens, int k,
                int n_watch, const int32_t *watch, int32_t *top_ids, float *top_p, float *watch_p,
                char *err, size_t errlen);

    /* Frees slot: its cache is forgotten and the slot may take a new prefill. Releasing a
     * free slot is not an error. */
    int (*release)(la_engine *e, int slot, char *err, size_t errlen);

    /* Releases every slot and forgets the kept image embeddings. */
    int (*reset)(la_engine *e, char *err, size_t errlen);

    /* Inspection, for parity tests: the logits (vocab floats) of output row `row` of the last
     * step call, and the kept image embeddings (n_tokens x hidden; after vision, before the
     * prefill that consumes them). NULL when not available. */
    const float *(*logits)(la_engine *e, int row, int *n);
    const float *(*image_embeddings)(la_engine *e, int *n_tokens, int *dim);

    void (*close)(la_engine *e);
} la_backend_ops;

/* The CPU backend's table (engine/native, cpu_*.c). */
const la_backend_ops *la_cpu_backend(void);

/* The ttnn backend's table (engine/native, ttnn_*.c): a Python adapter module called
 * through an embedded CPython loaded at run time. */
const la_backend_ops *la_ttnn_backend(void);

#endif /* LA_BACKEND_H */
