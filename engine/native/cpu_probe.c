/*
 * cpu_probe.c - the engine's own figures for `worker bench`: the name of the decode
 * kernels this CPU gets, and their speed alone on the engine's thread pool. The machine's
 * figures (memory bandwidth, OpenBLAS sgemm) are measured in bench/machine. Nothing here
 * is used by inference. The product probes beside them (cpu_sgemm_probe here,
 * cpu_amx_gemm_probe in cpu_amx.c) are for tests and benchmarks.
 */
#include <cblas.h>
#include <stdlib.h>
#include <time.h>

#include "cpu_internal.h"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
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
    float *xpack = malloc((size_t)cols * sizeof *xpack);
    if (!xpack)
        return la_errorf(err, errlen, "matvec probe: out of memory");
    cpu_pool pool;
    if (cpu_pool_init(&pool, threads, err, errlen) != 0) {
        free(xpack);
        return -1;
    }
    cpu_kernels k;
    cpu_kernels_select(&k);
    const size_t bytes = (size_t)rows * cpu_row_bytes(dtype, cols);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now_seconds();
        /* mats distinct matrices back to back, as decode walks its layers */
        for (int m = 0; m < mats; m++) {
            cpu_matrix mat = {(const char *)w + (size_t)m * bytes, dtype, rows, cols};
            cpu_matmat mm = {&mat, NULL, x, (size_t)cols, y, (size_t)rows};
            cpu_matmat_run(&pool, &k, &mm, 1, 1, xpack);
        }
        double dt = now_seconds() - t0;
        if (dt < best)
            best = dt;
    }
    *gbps = (double)bytes * mats / best / 1e9;
    cpu_pool_destroy(&pool);
    free(xpack);
    return 0;
}

int cpu_sgemm_probe(la_dtype dtype, const void *w, int rows, int cols, const float *x, int n,
                    float *y, int reps, double *best) {
    float *wf = malloc((size_t)rows * (size_t)cols * sizeof *wf);
    if (!wf)
        return -2;
    const cpu_matrix m = {w, dtype, rows, cols};
    cpu_rows_to_f32(&m, 0, rows, wf);
    *best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now_seconds();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, rows, cols, 1.0f, x, cols, wf, cols,
                    0.0f, y, rows);
        double dt = now_seconds() - t0;
        if (r == 0 || dt < *best)
            *best = dt;
    }
    free(wf);
    return 0;
}
