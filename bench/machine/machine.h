/*
 * machine.h - what the machine offers, measured without the engine: STREAM-style memory
 * bandwidth on plain pthreads and OpenBLAS's sgemm rate. See machine.go.
 */
#ifndef LA_BENCH_MACHINE_H
#define LA_BENCH_MACHINE_H

#include <stddef.h>

/* machine_stream runs STREAM's copy (c = a) and triad (a = b + 3 c) over three float
 * arrays of bytes_per_array bytes each, split across threads threads (the caller is one
 * of them), best of reps, and stores GB/s in STREAM's counting. It returns 0, or -1 with
 * a message in err. */
int machine_stream(size_t bytes_per_array, int threads, int reps, double *copy_gbs,
                   double *triad_gbs, char *err, size_t errlen);

/* machine_sgemm times cblas_sgemm on x [m, k] times W^T, W [n, k] (a prefill
 * projection's shape), best of reps after one warm-up, and stores GFLOP/s. It returns 0,
 * or -1 with a message in err. */
int machine_sgemm(int m, int n, int k, int reps, double *gflops, char *err, size_t errlen);

#endif /* LA_BENCH_MACHINE_H */
