/*
 * ttnn_backend.c - the ttnn backend's ops table: the C ABI of la_backend.h implemented by
 * calling a Python adapter module through an embedded CPython.
 *
 * The adapter (engine/ttnn: la_ttnn_adapter drives TT-NN on a Blackhole chip,
 * la_ttnn_standin runs the same architecture in numpy) is a module with these functions,
 * the one-step protocol of ABI 4:
 *
 *   open(config: dict) -> handle
 *        the dimensions of la_config under their config.json names (block_causal: 1 when
 *        text_config.causal_attn is set), max_seq_len, max_batch, threads, weights_dir,
 *        llm_dir and options (the raw option lines)
 *   vision(handle, patches: bytes, grid_h: int, grid_w: int) -> None
 *        patches: float32 little-endian, [grid_h*grid_w, 3, patch, patch]; keeps the image
 *        embeddings for the next step that prefills a slot, whatever slot it is
 *   step(handle, slots: list[int], pending: list[list[int]], blocks: list[list[int]],
 *        no_output: list[bool], k: int, watch: list[int])
 *        -> list[(top_ids, top_probs, watch_probs)]
 *        the decoder's one entry point (la_backend.h's step): for distinct slots, pending[i]
 *        is appended to slots[i]'s cache causally and kept; a free slot starts at position 0
 *        (its prefill: image-context ids take the kept image embeddings, in order). Then its
 *        output rows: none (no_output[i], only without a block), the last pending row
 *        (blocks[i] empty) or blocks[i]'s rows at positions L'-1.., which see every cached
 *        position but L'-1 and their block (all of it, or causally when block_causal), and
 *        are never kept. One triple per output row, slot after slot: the k most probable
 *        ids (float32 softmax, most probable first, equal probabilities in ascending id
 *        order), their probabilities, and the probabilities of the watch ids
 *   release(handle, slot: int) -> None        frees the slot (a free one too)
 *   reset(handle) -> None                     frees every slot, forgets the image
 *   close(handle) -> None
 *   logits(handle, row: int) -> bytes | None  optional: output row of the last step,
 *                                             vocab float32
 *   image_embeddings(handle) -> (bytes, n, dim) | None   optional: the kept embeddings
 *
 * A prefill is a step on a free slot and an AR decode a step of one pending row per slot:
 * the adapter may run those through faster paths of its own (the chip's traced decode), but
 * the protocol has one call, and so does the ops table (its prefill and decode stay NULL).
 *
 * The bridge keeps the slot rules of la_backend.h itself (which slots are live and how
 * many positions each holds), so an adapter only ever sees steps that keep them: distinct
 * slots, a free one with its prompt pending, room left in every cache. It checks every
 * result before writing anything (as many rows as the step has output rows, ids inside the
 * vocabulary, probabilities finite and in [0, 1], each row's ranking), so a failed call
 * leaves the caller's outputs untouched. A Python exception becomes the
 * call's error string, never an abort.
 *
 * Every call takes the GIL (PyGILState_Ensure) and gives it back before returning, so the
 * Go side may call from its one locked OS thread and two engines may live in one process.
 *
 * Settings come only from la_config.options, "key=value" lines the Go worker builds from
 * its configuration; this file reads no environment variable and has no defaults of its
 * own. An absent key and an empty value both mean "not set". The bridge reads four keys:
 *
 *   python_lib  the libpython to load (LA_PYTHON_LIB); not set: the default names
 *   adapter     the adapter module to import (LA_TTNN_ADAPTER); required
 *   path        ':'-separated directories put first on sys.path (LA_TTNN_PATH); not set: none
 *   llm_dir     the extracted Qwen2 directory (LA_LLM_DIR), handed over as config["llm_dir"]
 *
 * The adapter gets the whole options text as config["options"] and reads its own keys
 * (canon_grid, precision, trace, ...) from there.
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "la_backend.h"
#include "la_errors.h"
#include "ttnn_python.h"

#define OPTION_LEN 4096

/* Where the Tenstorrent kernel driver puts a node per chip (/dev/tenstorrent/0, ...). */
#define DEVICE_DIR "/dev/tenstorrent"

/* The adapter's functions, looked up once at open. */
typedef struct {
    PyObject *vision, *step, *release, *reset, *close;
    PyObject *logits;           /* NULL when the adapter has none */
    PyObject *image_embeddings; /* NULL when the adapter has none */
} adapter_fns;

struct la_engine {
    const la_python *py;
    PyObject *module;
    PyObject *handle; /* what the adapter's open returned */
    adapter_fns fn;

    int vocab;
    int image_token_id;
    int patch_floats; /* 3 * patch * patch */
    int max_batch, max_seq_len;

    /* The slot rules, kept here so every adapter sees the same calls: live[s] when slot s
     * holds a sequence, used[s] the positions it holds (prompt and decoded tokens). */
    unsigned char *live;
    int *used;
    int rows; /* output rows of the last successful step; 0 after reset */

    /* A step's results, checked here before any is copied to the caller: room for
     * max_batch slots of LA_STEP_MAX_ROWS rows. */
    int32_t *top_ids;
    float *top_p, *watch_p;

    /* Copies of the adapter's inspection results, valid until the next call. */
    float *logits;
    float *emb;
    int emb_n, emb_dim;
};


/* ---- options ------------------------------------------------------------------------ */

/* option copies the value of key from the "key=value\n" lines into out, or "" when no line
 * has that key. It returns 0, or -1 when the value does not fit in outlen bytes. */
static int option(const char *lines, const char *key, char *out, size_t outlen) {
    size_t klen = strlen(key);
    out[0] = 0;
    for (const char *p = lines; p && *p;) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > klen && strncmp(p, key, klen) == 0 && p[klen] == '=') {
            size_t vlen = len - klen - 1;
            if (vlen >= outlen)
                return -1;
            memcpy(out, p + klen + 1, vlen);
            out[vlen] = 0;
            return 0;
        }
        p = end ? end + 1 : p + len;
    }
    return 0;
}

/* ---- building Python values (GIL held) ---------------------------------------------- */

/* call calls fn with n arguments and returns the new reference to the result, or NULL with
 * a Python exception pending. It consumes the argument references, also on failure; a NULL
 * argument is a conversion that failed (its exception is pending) and fails the call. */
static PyObject *call(const la_python *py, PyObject *fn, int n, PyObject **args) {
    int built = 1;
    for (int i = 0; i < n; i++)
        built = built && args[i] != NULL;
    PyObject *tuple = built ? py->PyTuple_New(n) : NULL;
    if (!tuple) {
        for (int i = 0; i < n; i++)
            if (args[i])
                py->Py_DecRef(args[i]);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        py->PyTuple_SetItem(tuple, i, args[i]); /* steals */
    PyObject *out = py->PyObject_CallObject(fn, tuple);
    py->Py_DecRef(tuple);
    return out;
}

static PyObject *handle_ref(la_engine *e) {
    e->py->Py_IncRef(e->handle);
    return e->handle;
}

static void set_int(const la_python *py, PyObject *d, const char *key, long v) {
    PyObject *o = py->PyLong_FromLong(v);
    if (o) {
        py->PyDict_SetItemString(d, key, o);
        py->Py_DecRef(o);
    }
}

static void set_float(const la_python *py, PyObject *d, const char *key, double v) {
    PyObject *o = py->PyFloat_FromDouble(v);
    if (o) {
        py->PyDict_SetItemString(d, key, o);
        py->Py_DecRef(o);
    }
}

static void set_str(const la_python *py, PyObject *d, const char *key, const char *v) {
    PyObject *o = py->PyUnicode_FromString(v ? v : "");
    if (o) {
        py->PyDict_SetItemString(d, key, o);
        py->Py_DecRef(o);
    }
}

/* int_list builds a Python list of v[0..n), or NULL with an exception pending. */
static PyObject *int_list(const la_python *py, const int32_t *v, int n) {
    PyObject *list = py->PyList_New(n);
    for (int i = 0; list && i < n; i++) {
        PyObject *o = py->PyLong_FromLong(v[i]);
        if (!o) {
            py->Py_DecRef(list);
            return NULL;
        }
        py->PyList_SetItem(list, i, o); /* steals */
    }
    return list;
}

/* config_dict is the adapter's view of la_config: the dimensions under the config.json
 * names a Python reader expects, the weights directory and the run-time options. */
static PyObject *config_dict(const la_python *py, const la_config *c, const char *llm_dir) {
    PyObject *d = py->PyDict_New();
    if (!d)
        return NULL;
    set_int(py, d, "vision_hidden", c->vision_hidden);
    set_int(py, d, "vision_layers", c->vision_layers);
    set_int(py, d, "vision_heads", c->vision_heads);
    set_int(py, d, "vision_intermediate", c->vision_intermediate);
    set_int(py, d, "patch_size", c->patch_size);
    set_int(py, d, "merge_kernel", c->merge_kernel);
    set_int(py, d, "pos_emb_height", c->pos_emb_height);
    set_int(py, d, "pos_emb_width", c->pos_emb_width);
    set_float(py, d, "vision_norm_eps", c->vision_norm_eps);
    set_int(py, d, "hidden", c->hidden);
    set_int(py, d, "layers", c->layers);
    set_int(py, d, "heads", c->heads);
    set_int(py, d, "kv_heads", c->kv_heads);
    set_int(py, d, "head_dim", c->head_dim);
    set_int(py, d, "intermediate", c->intermediate);
    set_int(py, d, "vocab", c->vocab);
    set_float(py, d, "rope_theta", c->rope_theta);
    set_float(py, d, "rms_norm_eps", c->rms_norm_eps);
    set_int(py, d, "image_token_id", c->image_token_id);
    set_int(py, d, "block_causal", c->block_causal);
    set_int(py, d, "max_seq_len", c->max_seq_len);
    set_int(py, d, "max_batch", c->max_batch);
    set_int(py, d, "threads", c->threads);
    set_str(py, d, "weights_dir", c->weights_dir);
    set_str(py, d, "llm_dir", llm_dir);
    set_str(py, d, "options", c->options);
    if (py->PyErr_Occurred()) {
        py->Py_DecRef(d);
        return NULL;
    }
    return d;
}

/* prepend_path puts the ':'-separated entries of path at the front of sys.path, in order. */
static int prepend_path(const la_python *py, const char *path, char *err, size_t errlen) {
    if (!*path)
        return 0;
    PyObject *sys = py->PyImport_ImportModule("sys");
    PyObject *list = sys ? py->PyObject_GetAttrString(sys, "path") : NULL;
    int rc = list ? 0 : -1;
    Py_ssize_t at = 0;
    for (const char *p = path; rc == 0 && *p;) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > 0) {
            char entry[OPTION_LEN];
            snprintf(entry, sizeof entry, "%.*s", (int)len, p);
            PyObject *s = py->PyUnicode_FromString(entry);
            rc = s ? py->PyList_Insert(list, at++, s) : -1;
            if (s)
                py->Py_DecRef(s);
        }
        p = end ? end + 1 : p + len;
    }
    if (rc != 0)
        ttnn_python_error(py, "extending sys.path with option path (LA_TTNN_PATH)", err, errlen);
    if (list)
        py->Py_DecRef(list);
    if (sys)
        py->Py_DecRef(sys);
    return rc;
}

/* lookup fetches module.name; required ones must exist and be callable. */
static int lookup(const la_python *py, PyObject *module, const char *adapter, const char *name,
                  int required, PyObject **out, char *err, size_t errlen) {
    *out = NULL;
    if (!py->PyObject_HasAttrString(module, name)) {
        if (!required)
            return 0;
        return la_errorf(err, errlen, "adapter module %s has no function %s() (the protocol "
                      "needs open, vision, step, release, reset, close)", adapter, name);
    }
    PyObject *f = py->PyObject_GetAttrString(module, name);
    if (!f) {
        char what[320];
        snprintf(what, sizeof what, "adapter %s.%s", adapter, name);
        return ttnn_python_error(py, what, err, errlen);
    }
    if (!py->PyCallable_Check(f)) {
        py->Py_DecRef(f);
        return la_errorf(err, errlen, "adapter %s.%s is not a function", adapter, name);
    }
    *out = f;
    return 0;
}

/* ---- results ------------------------------------------------------------------------ */

/* type_name writes the name of o's type into buf ("?" when that fails). It clears the
 * pending exception first: the failed check that led here leaves one, and the API calls
 * below would fail with it. */
static void type_name(const la_python *py, PyObject *o, char *buf, size_t len) {
    snprintf(buf, len, "?");
    py->PyErr_Clear();
    PyObject *cls = py->PyObject_GetAttrString(o, "__class__");
    PyObject *name = cls ? py->PyObject_GetAttrString(cls, "__name__") : NULL;
    const char *s = name ? py->PyUnicode_AsUTF8(name) : NULL;
    if (s)
        snprintf(buf, len, "%s", s);
    if (name)
        py->Py_DecRef(name);
    if (cls)
        py->Py_DecRef(cls);
    py->PyErr_Clear();
}

/* token_of converts an adapter's token to an id inside the vocabulary (row: which one, for
 * the message). */
static int token_of(la_engine *e, PyObject *o, const char *op, int row, int32_t *tok,
                    char *err, size_t errlen) {
    const la_python *py = e->py;
    long v = py->PyLong_AsLong(o);
    if (v == -1 && py->PyErr_Occurred()) {
        char what[96];
        snprintf(what, sizeof what, "%s: token of row %d", op, row);
        return ttnn_python_error(py, what, err, errlen);
    }
    if (v < 0 || v >= e->vocab)
        return la_errorf(err, errlen, "%s: adapter returned token %ld for row %d, outside the "
                         "vocabulary of %d", op, v, row, e->vocab);
    *tok = (int32_t)v;
    return 0;
}

/* prob_of converts an adapter's probability, which must be a finite number in [0, 1]. */
static int prob_of(const la_python *py, PyObject *o, const char *op, int row, float *p,
                   char *err, size_t errlen) {
    double v = py->PyFloat_AsDouble(o);
    if (v == -1.0 && py->PyErr_Occurred()) {
        char what[96];
        snprintf(what, sizeof what, "%s: probability of row %d", op, row);
        return ttnn_python_error(py, what, err, errlen);
    }
    if (!isfinite(v) || v < 0 || v > 1) /* NaN fails isfinite */
        return la_errorf(err, errlen, "%s: adapter returned probability %g for row %d, want a "
                         "number in [0, 1]", op, v, row);
    *p = (float)v;
    return 0;
}

/* row_list checks that o is a sequence of n items (what: of what, for the message). */
static int row_list(const la_python *py, PyObject *o, int n, const char *op, const char *what,
                    char *err, size_t errlen) {
    Py_ssize_t size = py->PySequence_Size(o);
    if (size == n)
        return 0;
    char got[64];
    type_name(py, o, got, sizeof got);
    if (size < 0)
        return la_errorf(err, errlen, "%s: adapter returned a %s of %s, want a list of %d",
                         op, got, what, n);
    return la_errorf(err, errlen, "%s: adapter returned %zd %s for %d rows", op, (ssize_t)size,
                     what, n);
}

/* ---- a step's results ---------------------------------------------------------------- */

/* The shape of one step: the caller's arguments, and where each output row's results go
 * in the engine's buffers. */
typedef struct {
    int n_rows; /* output rows, slot after slot */
    int k;
    int n_watch;
    const int32_t *watch;
} step_shape;

/* item_list fetches item i of o, which must be a sequence of n (row and what: whose and
 * what it is, for the message); a new reference, or NULL with err set. */
static PyObject *item_list(la_engine *e, PyObject *o, int i, int row, int n, const char *what,
                           char *err, size_t errlen) {
    const la_python *py = e->py;
    PyObject *item = py->PySequence_GetItem(o, i);
    if (!item) {
        ttnn_python_error(py, "adapter step", err, errlen);
        return NULL;
    }
    Py_ssize_t size = py->PySequence_Size(item);
    if (size == n)
        return item;
    char got[64];
    type_name(py, item, got, sizeof got);
    py->Py_DecRef(item);
    if (size < 0)
        la_errorf(err, errlen, "adapter step: %s of row %d is a %s, want a list of %d", what,
                  row, got, n);
    else
        la_errorf(err, errlen, "adapter step: %s of row %d has %zd items, want %d", what, row,
                  (ssize_t)size, n);
    return NULL;
}

/* numbers converts the n items of the sequence o: token ids (ids != NULL, each inside the
 * vocabulary) or probabilities (each finite and in [0, 1]). */
static int numbers(la_engine *e, PyObject *o, int row, int n, int32_t *ids, float *p, char *err,
                   size_t errlen) {
    const la_python *py = e->py;
    const char *op = "adapter step";
    int rc = 0;
    for (int j = 0; rc == 0 && j < n; j++) {
        PyObject *v = py->PySequence_GetItem(o, j);
        if (!v)
            return ttnn_python_error(py, op, err, errlen);
        rc = ids ? token_of(e, v, op, row, &ids[j], err, errlen)
                 : prob_of(py, v, op, row, &p[j], err, errlen);
        py->Py_DecRef(v);
    }
    return rc;
}

/* check_ranking holds one output row to the step's ranking rule: k distinct ids, most
 * probable first, equal probabilities in ascending id order; and a watched id agrees with
 * the ranking (the same probability where it is among the top k, and no more than the k-th
 * where it is not, or it would belong there). Both lists come from one probability vector
 * on the adapter's side, so the comparisons are exact. */
static int check_ranking(const step_shape *sh, int row, const int32_t *ids, const float *p,
                         const float *w, char *err, size_t errlen) {
    for (int j = 0; j < sh->k; j++) {
        for (int i = 0; i < j; i++)
            if (ids[i] == ids[j])
                return la_errorf(err, errlen, "adapter step: row %d names id %d twice in its "
                                 "top %d", row, ids[j], sh->k);
        if (j > 0 && (p[j] > p[j - 1] || (p[j] == p[j - 1] && ids[j] < ids[j - 1])))
            return la_errorf(err, errlen, "adapter step: row %d ranks id %d (%g) after id %d "
                             "(%g): want the most probable first, equal ones in ascending id "
                             "order", row, ids[j], p[j], ids[j - 1], p[j - 1]);
    }
    int32_t last_id = ids[sh->k - 1];
    float last_p = p[sh->k - 1];
    for (int j = 0; j < sh->n_watch; j++) {
        int32_t id = sh->watch[j];
        int at = -1;
        for (int i = 0; i < sh->k; i++)
            if (ids[i] == id)
                at = i;
        if (at >= 0 ? w[j] != p[at] : (w[j] > last_p || (w[j] == last_p && id < last_id)))
            return la_errorf(err, errlen, "adapter step: row %d gives watched id %d probability "
                             "%g, which disagrees with its top %d", row, id, w[j], sh->k);
    }
    return 0;
}

/* step_result checks step's rows into e->top_ids, e->top_p and e->watch_p and consumes
 * r: a sequence of n_rows (top_ids, top_probs, watch_probs) triples. */
static int step_result(la_engine *e, PyObject *r, const step_shape *sh, char *err,
                       size_t errlen) {
    const la_python *py = e->py;
    int rc = row_list(py, r, sh->n_rows, "adapter step", "rows", err, errlen);
    for (int i = 0; rc == 0 && i < sh->n_rows; i++) {
        int32_t *ids = e->top_ids + (size_t)i * sh->k;
        float *p = e->top_p + (size_t)i * sh->k;
        float *w = e->watch_p + (size_t)i * sh->n_watch;
        PyObject *triple = item_list(e, r, i, i, 3, "(top_ids, top_probs, watch_probs)", err, errlen);
        if (!triple) {
            rc = -1;
            break;
        }
        const struct {
            int n;
            const char *what;
            int32_t *ids;
            float *p;
        } parts[3] = {{sh->k, "top ids", ids, NULL},
                      {sh->k, "top probabilities", NULL, p},
                      {sh->n_watch, "watched probabilities", NULL, w}};
        for (int j = 0; rc == 0 && j < 3; j++) {
            PyObject *o = item_list(e, triple, j, i, parts[j].n, parts[j].what, err, errlen);
            rc = o ? numbers(e, o, i, parts[j].n, parts[j].ids, parts[j].p, err, errlen) : -1;
            if (o)
                py->Py_DecRef(o);
        }
        py->Py_DecRef(triple);
        if (rc == 0)
            rc = check_ranking(sh, i, ids, p, w, err, errlen);
    }
    py->Py_DecRef(r);
    return rc;
}

/* copy_floats copies a bytes object holding exactly n float32s into dst (owned, grown). */
static int copy_floats(const la_python *py, PyObject *b, size_t n, float **dst) {
    char *buf;
    Py_ssize_t len;
    if (py->PyBytes_AsStringAndSize(b, &buf, &len) != 0 || (size_t)len != n * sizeof(float)) {
        py->PyErr_Clear();
        return -1;
    }
    float *p = realloc(*dst, n * sizeof(float));
    if (!p)
        return -1;
    memcpy(p, buf, n * sizeof(float));
    *dst = p;
    return 0;
}

/* ---- the slot rules ------------------------------------------------------------------ */

static int check_slot(const la_engine *e, const char *op, int slot, char *err, size_t errlen) {
    if (slot < 0 || slot >= e->max_batch)
        return la_errorf(err, errlen, "%s: slot %d out of range 0..%d", op, slot, e->max_batch - 1);
    return 0;
}

/* check_step refuses a step the ABI does not allow, before the adapter sees it (la_backend.h
 * lists the limits), and counts its output rows. */
static int check_step(const la_engine *e, int n, const la_step_slot *slots,
                      const int32_t *tokens, int k, int n_watch, const int32_t *watch,
                      int *n_rows, char *err, size_t errlen) {
    if (n < 1 || n > e->max_batch)
        return la_errorf(err, errlen, "step: %d slots, want 1..%d (max_batch)", n, e->max_batch);
    if (k < 1 || k > LA_STEP_MAX_K || n_watch < 0 || n_watch > LA_STEP_MAX_WATCH ||
        (n_watch > 0 && !watch))
        return la_errorf(err, errlen, "step: k %d (1..%d) and %d watched ids (0..%d)", k,
                         LA_STEP_MAX_K, n_watch, LA_STEP_MAX_WATCH);
    for (int j = 0; j < n_watch; j++)
        if (watch[j] < 0 || watch[j] >= e->vocab)
            return la_errorf(err, errlen, "step: watched id %d outside the vocabulary of %d",
                             watch[j], e->vocab);
    int rows = 0, at = 0, image_slot = -1;
    for (int i = 0; i < n; i++) {
        const la_step_slot *sl = &slots[i];
        int s = sl->slot;
        if (check_slot(e, "step", s, err, errlen) != 0)
            return -1;
        for (int j = 0; j < i; j++)
            if (slots[j].slot == s)
                return la_errorf(err, errlen, "step: slot %d appears twice", s);
        int np = sl->n_pending, nb = sl->n_block, live = e->live[s];
        /* A live slot takes at most LA_STEP_MAX_ROWS pending ids, a free one a prompt. */
        int max_pending = live ? LA_STEP_MAX_ROWS : e->max_seq_len;
        if (np < 0 || nb < 0 || np > max_pending || nb > LA_STEP_MAX_ROWS)
            return la_errorf(err, errlen, "step: slot %d: %d pending ids (0..%d on a %s slot) "
                             "and a block of %d (0..%d)", s, np, max_pending,
                             live ? "live" : "free", nb, LA_STEP_MAX_ROWS);
        if (np + nb < 1 || (!live && np < 1))
            return la_errorf(err, errlen, "step: slot %d: %s", s, live ?
                             "no pending id and no block: nothing to run" :
                             "a free slot needs its prompt pending (a step on it is its prefill)");
        if (sl->no_output && nb > 0)
            return la_errorf(err, errlen, "step: slot %d: no_output with a block of %d (every "
                             "block row is an output)", s, nb);
        /* L' = what the slot holds once its pending tokens are in; the block's last row
         * runs at position L' - 2 + n_block. */
        int held = e->used[s] + np;
        if (held > e->max_seq_len || held - 1 + nb > e->max_seq_len)
            return la_errorf(err, errlen, "step: slot %d is full (%d positions, %d pending, a "
                             "block of %d, max_seq_len %d)", s, e->used[s], np, nb,
                             e->max_seq_len);
        for (int j = 0; j < np + nb; j++, at++) {
            if (tokens[at] < 0 || tokens[at] >= e->vocab)
                return la_errorf(err, errlen, "step: token %d of slot %d outside the vocabulary "
                                 "of %d", tokens[at], s, e->vocab);
            /* Images come with a prefill: the image-context id belongs in a free slot's
             * prompt, nowhere else. */
            if (tokens[at] == e->image_token_id && (live || j >= np))
                return la_errorf(err, errlen, "step: slot %d: %s token %d is the image-context "
                                 "id %d, which only a free slot's prompt may hold (images come "
                                 "with a prefill)", s, j < np ? "pending" : "block",
                                 j < np ? j : j - np, e->image_token_id);
            /* The kept image embeddings go to one prompt: two slots cannot share them. */
            if (j < np && tokens[at] == e->image_token_id) {
                if (image_slot >= 0 && image_slot != s)
                    return la_errorf(err, errlen, "step: slots %d and %d both hold image-context "
                                     "ids (at most one slot of a step may)", image_slot, s);
                image_slot = s;
            }
        }
        rows += nb > 0 ? nb : !sl->no_output;
    }
    *n_rows = rows;
    return 0;
}

/* ---- the ops ------------------------------------------------------------------------ */

static void release_engine(la_engine *e) {
    const la_python *py = e->py;
    PyObject *owned[] = {e->fn.vision, e->fn.step,
                         e->fn.release, e->fn.reset, e->fn.close,
                         e->fn.logits, e->fn.image_embeddings, e->handle,
                         e->module};
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++)
        if (owned[i])
            py->Py_DecRef(owned[i]);
    free(e->live);
    free(e->used);
    free(e->top_ids);
    free(e->top_p);
    free(e->watch_p);
    free(e->logits);
    free(e->emb);
    free(e);
}

/* device_nodes counts the chips' device nodes in DEVICE_DIR (0 when it is absent). */
static int device_nodes(void) {
    DIR *d = opendir(DEVICE_DIR);
    if (!d)
        return 0;
    int n = 0;
    for (struct dirent *ent; (ent = readdir(d)) != NULL;)
        if (ent->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

/* import_adapter imports the module and looks up its protocol functions. An adapter that
 * cannot be imported on a host without a chip is first of all a host without a chip
 * (LA_ENGINE=ttnn on a laptop), so the message says that before the Python error. */
static int import_adapter(la_engine *e, const char *adapter, char *err, size_t errlen) {
    const la_python *py = e->py;
    e->module = py->PyImport_ImportModule(adapter);
    if (!e->module) {
        char what[512]; /* the adapter option is under 256 bytes */
        snprintf(what, sizeof what, "%simporting adapter module %s (set LA_TTNN_PATH, option "
                 "path, to the directory holding it)", device_nodes() == 0 ?
                 "no Blackhole device found: no device node in " DEVICE_DIR "/, and " : "",
                 adapter);
        return ttnn_python_error(py, what, err, errlen);
    }
    struct {
        const char *name;
        int required;
        PyObject **out;
    } fns[] = {
        {"vision", 1, &e->fn.vision},   {"step", 1, &e->fn.step},
        {"release", 1, &e->fn.release}, {"reset", 1, &e->fn.reset},
        {"close", 1, &e->fn.close},     {"logits", 0, &e->fn.logits},
        {"image_embeddings", 0, &e->fn.image_embeddings},
    };
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
        if (lookup(py, e->module, adapter, fns[i].name, fns[i].required, fns[i].out, err,
                   errlen) != 0)
            return -1;
    return 0;
}

/* new_engine allocates an engine with its per-slot arrays, or NULL. */
static la_engine *new_engine(const la_python *py, const la_config *c) {
    la_engine *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->py = py;
    e->vocab = c->vocab;
    e->image_token_id = c->image_token_id;
    e->patch_floats = 3 * c->patch_size * c->patch_size;
    e->max_batch = c->max_batch;
    e->max_seq_len = c->max_seq_len;
    size_t n = (size_t)c->max_batch;
    e->live = calloc(n, sizeof *e->live);
    e->used = calloc(n, sizeof *e->used);
    size_t rows = n * LA_STEP_MAX_ROWS;
    e->top_ids = calloc(rows * LA_STEP_MAX_K, sizeof *e->top_ids);
    e->top_p = calloc(rows * LA_STEP_MAX_K, sizeof *e->top_p);
    e->watch_p = calloc(rows * LA_STEP_MAX_WATCH, sizeof *e->watch_p);
    if (!e->live || !e->used || !e->top_ids || !e->top_p || !e->watch_p) {
        free(e->live);
        free(e->used);
        free(e->top_ids);
        free(e->top_p);
        free(e->watch_p);
        free(e);
        return NULL;
    }
    return e;
}

static la_engine *ttnn_open(const la_config *c, char *err, size_t errlen) {
    char lib[OPTION_LEN], adapter[256], path[OPTION_LEN], llm_dir[OPTION_LEN];
    struct {
        const char *key;
        char *out;
        size_t len;
    } wanted[] = {
        {"python_lib", lib, sizeof lib},
        {"adapter", adapter, sizeof adapter},
        {"path", path, sizeof path},
        {"llm_dir", llm_dir, sizeof llm_dir},
    };
    for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; i++) {
        if (option(c->options, wanted[i].key, wanted[i].out, wanted[i].len) != 0) {
            la_errorf(err, errlen, "option %s: value longer than %zu bytes", wanted[i].key,
                      wanted[i].len - 1);
            return NULL;
        }
    }
    if (!adapter[0]) {
        la_errorf(err, errlen, "no adapter option: the worker passes LA_TTNN_ADAPTER as option "
                  "adapter");
        return NULL;
    }
    if (c->vocab <= 0 || c->patch_size <= 0 || c->max_batch < 1 || c->max_seq_len < 1) {
        la_errorf(err, errlen, "config: vocab %d, patch_size %d, max_batch %d and max_seq_len %d "
                  "must be positive", c->vocab, c->patch_size, c->max_batch, c->max_seq_len);
        return NULL;
    }

    const la_python *py = ttnn_python_start(lib[0] ? lib : NULL, err, errlen);
    if (!py)
        return NULL;
    la_engine *e = new_engine(py, c);
    if (!e) {
        la_errorf(err, errlen, "out of memory");
        return NULL;
    }

    PyGILState_STATE gil = py->PyGILState_Ensure();
    int rc = prepend_path(py, path, err, errlen);
    if (rc == 0)
        rc = import_adapter(e, adapter, err, errlen);
    if (rc == 0) {
        PyObject *open = py->PyObject_GetAttrString(e->module, "open");
        if (!open) {
            rc = la_errorf(err, errlen, "adapter module %s has no function open()", adapter);
            py->PyErr_Clear();
        } else {
            PyObject *args[1] = {config_dict(py, c, llm_dir)};
            e->handle = call(py, open, 1, args);
            py->Py_DecRef(open);
            if (!e->handle)
                rc = ttnn_python_error(py, "adapter open", err, errlen);
        }
    }
    if (rc != 0)
        release_engine(e);
    py->PyGILState_Release(gil);
    return rc == 0 ? e : NULL;
}

static int ttnn_vision(la_engine *e, const float *patches, int grid_h, int grid_w, char *err,
                       size_t errlen) {
    const la_python *py = e->py;
    size_t nbytes = (size_t)grid_h * (size_t)grid_w * (size_t)e->patch_floats * sizeof(float);
    PyGILState_STATE gil = py->PyGILState_Ensure();
    PyObject *args[4] = {
        handle_ref(e),
        py->PyBytes_FromStringAndSize((const char *)patches, (Py_ssize_t)nbytes),
        py->PyLong_FromLong(grid_h),
        py->PyLong_FromLong(grid_w),
    };
    PyObject *r = call(py, e->fn.vision, 4, args);
    int rc = r ? 0 : ttnn_python_error(py, "adapter vision", err, errlen);
    if (r)
        py->Py_DecRef(r);
    py->PyGILState_Release(gil);
    return rc;
}

/* step_args builds the adapter's view of a step: the slots, each slot's pending and block
 * ids as lists of their own, and its no_output flag. On failure the four are NULL, with an
 * exception pending. */
static void step_args(const la_python *py, int n, const la_step_slot *slots,
                      const int32_t *tokens, PyObject *lists[4]) {
    int ok = 1;
    for (int j = 0; j < 4; j++) {
        lists[j] = py->PyList_New(n);
        ok = ok && lists[j];
    }
    for (int i = 0, at = 0; ok && i < n; i++) {
        int np = slots[i].n_pending, nb = slots[i].n_block;
        PyObject *items[4] = {py->PyLong_FromLong(slots[i].slot), int_list(py, tokens + at, np),
                              int_list(py, tokens + at + np, nb),
                              py->PyBool_FromLong(slots[i].no_output != 0)};
        for (int j = 0; j < 4; j++) {
            if (items[j])
                py->PyList_SetItem(lists[j], i, items[j]); /* steals */
            ok = ok && items[j];
        }
        at += np + nb;
    }
    if (ok)
        return;
    for (int j = 0; j < 4; j++) {
        if (lists[j])
            py->Py_DecRef(lists[j]);
        lists[j] = NULL;
    }
}

/* run_step checks a step, calls the adapter's step and checks its rows into the engine's
 * buffers (e->top_ids, e->top_p, e->watch_p), updating the slot rules on success; the
 * caller copies the rows out. Nothing of a failed call is visible to the caller. */
static int run_step(la_engine *e, int n, const la_step_slot *slots, const int32_t *tokens, int k,
                    int n_watch, const int32_t *watch, int *n_rows, char *err, size_t errlen) {
    step_shape sh = {.k = k, .n_watch = n_watch, .watch = watch};
    if (check_step(e, n, slots, tokens, k, n_watch, watch, &sh.n_rows, err, errlen) != 0)
        return -1;
    const la_python *py = e->py;
    PyGILState_STATE gil = py->PyGILState_Ensure();
    PyObject *lists[4];
    step_args(py, n, slots, tokens, lists);
    PyObject *args[7] = {handle_ref(e), lists[0], lists[1], lists[2], lists[3],
                         py->PyLong_FromLong(k), int_list(py, watch, n_watch)};
    PyObject *r = call(py, e->fn.step, 7, args);
    int rc = r ? step_result(e, r, &sh, err, errlen)
               : ttnn_python_error(py, "adapter step", err, errlen);
    py->PyGILState_Release(gil);
    e->rows = rc == 0 ? sh.n_rows : 0;
    if (rc != 0)
        return rc;
    /* The pending tokens are in the caches now (a free slot's prompt makes it live); the
     * block rows never are. */
    for (int i = 0; i < n; i++) {
        e->live[slots[i].slot] = 1;
        e->used[slots[i].slot] += slots[i].n_pending;
    }
    *n_rows = sh.n_rows;
    return 0;
}

static int ttnn_step(la_engine *e, int n, const la_step_slot *slots, const int32_t *tokens, int k,
                     int n_watch, const int32_t *watch, int32_t *top_ids, float *top_p,
                     float *watch_p, char *err, size_t errlen) {
    int n_rows = 0;
    if (run_step(e, n, slots, tokens, k, n_watch, watch, &n_rows, err, errlen) != 0)
        return -1;
    /* Every row checked: only now does the caller see any of them. */
    if (n_rows > 0) {
        memcpy(top_ids, e->top_ids, (size_t)n_rows * k * sizeof *top_ids);
        memcpy(top_p, e->top_p, (size_t)n_rows * k * sizeof *top_p);
    }
    if (n_rows > 0 && n_watch > 0)
        memcpy(watch_p, e->watch_p, (size_t)n_rows * n_watch * sizeof *watch_p);
    return 0;
}

static int ttnn_release(la_engine *e, int slot, char *err, size_t errlen) {
    if (check_slot(e, "release", slot, err, errlen) != 0)
        return -1;
    const la_python *py = e->py;
    PyGILState_STATE gil = py->PyGILState_Ensure();
    PyObject *args[2] = {handle_ref(e), py->PyLong_FromLong(slot)};
    PyObject *r = call(py, e->fn.release, 2, args);
    int rc = r ? 0 : ttnn_python_error(py, "adapter release", err, errlen);
    if (r)
        py->Py_DecRef(r);
    py->PyGILState_Release(gil);
    /* A failed release keeps the slot as the adapter may still hold it; the caller sees the
     * error and a prompt there is refused rather than mixing two sequences. */
    if (rc == 0) {
        e->live[slot] = 0;
        e->used[slot] = 0;
    }
    return rc;
}

static int ttnn_reset(la_engine *e, char *err, size_t errlen) {
    const la_python *py = e->py;
    PyGILState_STATE gil = py->PyGILState_Ensure();
    PyObject *args[1] = {handle_ref(e)};
    PyObject *r = call(py, e->fn.reset, 1, args);
    int rc = r ? 0 : ttnn_python_error(py, "adapter reset", err, errlen);
    if (r)
        py->Py_DecRef(r);
    py->PyGILState_Release(gil);
    if (rc == 0) {
        memset(e->live, 0, (size_t)e->max_batch * sizeof *e->live);
        memset(e->used, 0, (size_t)e->max_batch * sizeof *e->used);
        e->rows = 0;
    }
    return rc;
}

/* ttnn_logits copies what the adapter's optional logits(handle, row) returns; NULL when
 * the adapter has none, row is not a row of the last step, the adapter answers None or
 * something else than vocab floats. */
static const float *ttnn_logits(la_engine *e, int row, int *n) {
    const la_python *py = e->py;
    *n = 0;
    if (!e->fn.logits || row < 0 || row >= e->rows)
        return NULL;
    PyGILState_STATE gil = py->PyGILState_Ensure();
    PyObject *args[2] = {handle_ref(e), py->PyLong_FromLong(row)};
    PyObject *r = call(py, e->fn.logits, 2, args);
    const float *out = NULL;
    if (r && r != py->none && copy_floats(py, r, (size_t)e->vocab, &e->logits) == 0) {
        out = e->logits;
        *n = e->vocab;
    }
    if (r)
        py->Py_DecRef(r);
    py->PyErr_Clear();
    py->PyGILState_Release(gil);
    return out;
}

/* ttnn_image_embeddings copies what the optional image_embeddings(handle) returns:
 * (bytes, n, dim), or None before vision. */
static const float *ttnn_image_embeddings(la_engine *e, int *n_tokens, int *dim) {
    const la_python *py = e->py;
    *n_tokens = *dim = 0;
    if (!e->fn.image_embeddings)
        return NULL;
    PyGILState_STATE gil = py->PyGILState_Ensure();
    PyObject *args[1] = {handle_ref(e)};
    PyObject *r = call(py, e->fn.image_embeddings, 1, args);
    const float *out = NULL;
    if (r && r != py->none && py->PyTuple_Size(r) == 3) {
        long nt = py->PyLong_AsLong(py->PyTuple_GetItem(r, 1));
        long d = py->PyLong_AsLong(py->PyTuple_GetItem(r, 2));
        /* Bound n*dim before multiplying; copy_floats then checks the byte count. */
        if (nt > 0 && d > 0 && nt <= (1L << 30) / d &&
            copy_floats(py, py->PyTuple_GetItem(r, 0), (size_t)(nt * d), &e->emb) == 0) {
            e->emb_n = (int)nt;
            e->emb_dim = (int)d;
            *n_tokens = e->emb_n;
            *dim = e->emb_dim;
            out = e->emb;
        }
    }
    if (r)
        py->Py_DecRef(r);
    py->PyErr_Clear();
    py->PyGILState_Release(gil);
    return out;
}

/* ttnn_close calls the adapter's close (its failure has nowhere to go but is harmless: the
 * handle's references are dropped either way) and frees the engine. The interpreter stays:
 * finalizing CPython with extension modules loaded is not safe, and a later engine reuses it. */
static void ttnn_close(la_engine *e) {
    if (!e)
        return;
    const la_python *py = e->py;
    PyGILState_STATE gil = py->PyGILState_Ensure();
    PyObject *args[1] = {handle_ref(e)};
    PyObject *r = call(py, e->fn.close, 1, args);
    if (r)
        py->Py_DecRef(r);
    py->PyErr_Clear();
    release_engine(e);
    py->PyGILState_Release(gil);
}

static const la_backend_ops ttnn_ops = {
    .abi_version = LA_ABI_VERSION,
    .name = "ttnn",
    .open = ttnn_open,
    .vision = ttnn_vision,
    .step = ttnn_step,
    .release = ttnn_release,
    .reset = ttnn_reset,
    .logits = ttnn_logits,
    .image_embeddings = ttnn_image_embeddings,
    .close = ttnn_close,
};

const la_backend_ops *la_ttnn_backend(void) { return &ttnn_ops; }
