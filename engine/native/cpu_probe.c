/*
 * cpu_probe.c - machine figures the benchmark puts next to the backend's own: memory
 * bandwidth (STREAM-style copy and triad on the backend's kind of thread pool) and
 * OpenBLAS's sgemm throughput. Nothing here is used by inference.
 */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_internal.h"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    float *a, *b, *c;
    size_t n;
    int kind; /* 0 init, 1 copy c = a, 2 triad a = b + s c */
} stream_task;

static void stream_slice(void *arg, int thread, int nthreads) {
    const stream_task *t = arg;
    size_t lo = t->n * (size_t)thread / (size_t)nthreads;
    size_t hi = t->n * (size_t)(thread + 1) / (size_t)nthreads;
    float *restrict a = t->a, *restrict b = t->b, *restrict c = t->c;
    switch (t->kind) {
    case 0: /* first touch on the thread that will use the pages */
        for (size_t i = lo; i < hi; i++) {
            a[i] = 1.0f;
            b[i] = 2.0f;
            c[i] = 0.0f;
        }
        break;
    case 1:
        for (size_t i = lo; i < hi; i++)
            c[i] = a[i];
        break;
    case 2:
        for (size_t i = lo; i < hi; i++)
            a[i] = b[i] + 3.0f * c[i];
        break;
    }
}

int cpu_stream(size_t bytes_per_array, int threads, int reps, double *copy_gbs, double *triad_gbs,
               char *err, size_t errlen) {
    size_t n = bytes_per_array / sizeof(float);
    if (n == 0 || reps <= 0)
        return la_errorf(err, errlen, "stream: need a positive size and repetitions");
    cpu_pool pool;
    if (cpu_pool_init(&pool, threads, err, errlen) != 0)
        return -1;
    stream_task t = {malloc(n * sizeof(float)), malloc(n * sizeof(float)), malloc(n * sizeof(float)), n, 0};
    if (!t.a || !t.b || !t.c) {
        free(t.a);
        free(t.b);
        free(t.c);
        cpu_pool_destroy(&pool);
        return la_errorf(err, errlen, "stream: out of memory for 3 x %zu bytes", bytes_per_array);
    }
    cpu_pool_run(&pool, stream_slice, &t);
    double best_copy = 1e30, best_triad = 1e30;
    for (int r = 0; r < reps; r++) {
        t.kind = 1;
        double t0 = now_seconds();
        cpu_pool_run(&pool, stream_slice, &t);
        double t1 = now_seconds();
        t.kind = 2;
        cpu_pool_run(&pool, stream_slice, &t);
        double t2 = now_seconds();
        if (t1 - t0 < best_copy)
            best_copy = t1 - t0;
        if (t2 - t1 < best_triad)
            best_triad = t2 - t1;
    }
    /* STREAM's counting: copy moves 2 arrays, triad 3 (write-allocate traffic not counted). */
    *copy_gbs = 2.0 * (double)(n * sizeof(float)) / best_copy / 1e9;
    *triad_gbs = 3.0 * (double)(n * sizeof(float)) / best_triad / 1e9;
    free(t.a);
    free(t.b);
    free(t.c);
    cpu_pool_destroy(&pool);
    return 0;
}

int cpu_sgemm_gflops(int m, int n, int k, int reps, double *gflops, char *err, size_t errlen) {
    if (m <= 0 || n <= 0 || k <= 0 || reps <= 0)
        return la_errorf(err, errlen, "sgemm: need positive sizes and repetitions");
    float *a = malloc((size_t)m * k * sizeof(float));
    float *b = malloc((size_t)n * k * sizeof(float));
    float *c = malloc((size_t)m * n * sizeof(float));
    if (!a || !b || !c) {
        free(a);
        free(b);
        free(c);
        return la_errorf(err, errlen, "sgemm: out of memory for %dx%dx%d", m, n, k);
    }
    for (size_t i = 0; i < (size_t)m * k; i++)
        a[i] = (float)(i % 7) * 0.01f;
    for (size_t i = 0; i < (size_t)n * k; i++)
        b[i] = (float)(i % 5) * 0.01f;
    /* The same shape as a prefill projection: x [m, k] times W^T, W [n, k]. */
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) { /* the first run warms up */
        double t0 = now_seconds();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, a, k, b, k, 0.0f, c, n);
        double dt = now_seconds() - t0;
        if (r > 0 && dt < best)
            best = dt;
    }
    *gflops = 2.0 * m * n * (double)k / best / 1e9;
    free(a);
    free(b);
    free(c);
    return 0;
}

const char *cpu_kernel_isa(void) {
    cpu_kernels k;
    cpu_kernels_select(&k);
    return k.isa;
}

int cpu_matvec_gbps(const void *w, la_dtype dtype, int rows, int cols, int mats, const float *x,
                    float *y, int threads, int reps, double *gbps, char *err, size_t errlen) {
    if (!w || rows <= 0 || cols <= 0 || mats <= 0 || reps <= 0)
        return la_errorf(err, errlen, "matvec probe: need weights and positive sizes");
    cpu_pool pool;
    if (cpu_pool_init(&pool, threads, err, errlen) != 0)
        return -1;
    cpu_kernels k;
    cpu_kernels_select(&k);
    const size_t bytes = (size_t)rows * (size_t)cols * cpu_dtype_size(dtype);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now_seconds();
        /* mats distinct matrices back to back, as decode walks its layers */
        for (int m = 0; m < mats; m++) {
            cpu_matrix mat = {(const char *)w + (size_t)m * bytes, dtype, rows, cols};
            cpu_matvec mv = {&mat, NULL, x, y};
            cpu_matvec_run(&pool, &k, &mv, 1);
        }
        double dt = now_seconds() - t0;
        if (dt < best)
            best = dt;
    }
    *gbps = (double)bytes * mats / best / 1e9;
    cpu_pool_destroy(&pool);
    return 0;
}
