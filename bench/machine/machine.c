/*
 * machine.c - the machine's own figures for `worker bench`: memory bandwidth
 * (STREAM-style copy and triad on plain pthreads) and OpenBLAS's sgemm throughput.
 * Nothing here touches the engine.
 */
#include "machine.h"

#include <cblas.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int errorf(char *err, size_t errlen, const char *format, ...) {
    va_list ap;
    va_start(ap, format);
    vsnprintf(err, errlen, format, ap);
    va_end(ap);
    return -1;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One STREAM run shared by its threads. Thread 0 (the caller) reads the clock; the
 * barrier around each kernel makes a kernel's time that of its slowest thread. The
 * workers wait at a gate until every one of them has started, so a failed start can
 * send the others home before any of them reaches the barrier. */
typedef struct {
    float *a, *b, *c;
    size_t n;
    int nthreads, reps;
    pthread_mutex_t mu;
    pthread_cond_t opened;
    int open, abort; /* the gate, under mu */
    pthread_barrier_t barrier;
    double best_copy, best_triad; /* seconds, written by thread 0 */
} stream_run;

typedef struct {
    stream_run *run;
    int index;
    pthread_t thread;
} stream_thread;

/* stream_slice runs one thread's part: first touch of its slice (so the pages are
 * local to the thread that uses them), then copy and triad reps times in step with the
 * other threads. */
static void stream_slice(const stream_thread *self) {
    stream_run *r = self->run;
    size_t lo = r->n * (size_t)self->index / (size_t)r->nthreads;
    size_t hi = r->n * (size_t)(self->index + 1) / (size_t)r->nthreads;
    float *restrict a = r->a, *restrict b = r->b, *restrict c = r->c;
    for (size_t i = lo; i < hi; i++) {
        a[i] = 1.0f;
        b[i] = 2.0f;
        c[i] = 0.0f;
    }
    for (int rep = 0; rep < r->reps; rep++) {
        pthread_barrier_wait(&r->barrier);
        double t0 = now_seconds();
        for (size_t i = lo; i < hi; i++)
            c[i] = a[i];
        pthread_barrier_wait(&r->barrier);
        double t1 = now_seconds();
        for (size_t i = lo; i < hi; i++)
            a[i] = b[i] + 3.0f * c[i];
        pthread_barrier_wait(&r->barrier);
        double t2 = now_seconds();
        if (self->index == 0) {
            if (t1 - t0 < r->best_copy)
                r->best_copy = t1 - t0;
            if (t2 - t1 < r->best_triad)
                r->best_triad = t2 - t1;
        }
    }
}

/* stream_worker is a started thread: it waits at the gate, then runs its slice unless
 * the run was called off. */
static void *stream_worker(void *arg) {
    const stream_thread *self = arg;
    stream_run *r = self->run;
    pthread_mutex_lock(&r->mu);
    while (!r->open)
        pthread_cond_wait(&r->opened, &r->mu);
    int abort = r->abort;
    pthread_mutex_unlock(&r->mu);
    if (!abort)
        stream_slice(self);
    return NULL;
}

/* open_gate lets the waiting workers go, to run (abort 0) or to return (abort 1). */
static void open_gate(stream_run *r, int abort) {
    pthread_mutex_lock(&r->mu);
    r->open = 1;
    r->abort = abort;
    pthread_cond_broadcast(&r->opened);
    pthread_mutex_unlock(&r->mu);
}

/* stream_threads starts threads 1..nthreads-1, runs thread 0 on the caller and joins the
 * rest. If a thread fails to start, none runs and the error names it. */
static int stream_threads(stream_run *r, char *err, size_t errlen) {
    stream_thread *t = calloc((size_t)r->nthreads, sizeof *t);
    if (!t)
        return errorf(err, errlen, "stream: out of memory for %d threads", r->nthreads);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->opened, NULL);
    pthread_barrier_init(&r->barrier, NULL, (unsigned)r->nthreads);
    int started = 1, rc = 0;
    for (int i = 0; i < r->nthreads; i++) {
        t[i].run = r;
        t[i].index = i;
    }
    for (; started < r->nthreads; started++)
        if ((rc = pthread_create(&t[started].thread, NULL, stream_worker, &t[started])) != 0)
            break;
    open_gate(r, rc != 0);
    if (rc == 0)
        stream_slice(&t[0]);
    for (int i = 1; i < started; i++)
        pthread_join(t[i].thread, NULL);
    pthread_barrier_destroy(&r->barrier);
    pthread_cond_destroy(&r->opened);
    pthread_mutex_destroy(&r->mu);
    free(t);
    if (rc != 0)
        return errorf(err, errlen, "stream: starting thread %d of %d: error %d", started + 1,
                      r->nthreads, rc);
    return 0;
}

int machine_stream(size_t bytes_per_array, int threads, int reps, double *copy_gbs,
                   double *triad_gbs, char *err, size_t errlen) {
    size_t n = bytes_per_array / sizeof(float);
    if (n == 0 || threads < 1 || reps < 1)
        return errorf(err, errlen, "stream: need a positive size, threads and repetitions");
    stream_run r = {.n = n, .nthreads = threads, .reps = reps,
                    .best_copy = 1e30, .best_triad = 1e30};
    r.a = malloc(n * sizeof(float));
    r.b = malloc(n * sizeof(float));
    r.c = malloc(n * sizeof(float));
    int rc = -1;
    if (!r.a || !r.b || !r.c)
        errorf(err, errlen, "stream: out of memory for 3 x %zu bytes", bytes_per_array);
    else
        rc = stream_threads(&r, err, errlen);
    free(r.a);
    free(r.b);
    free(r.c);
    if (rc != 0)
        return -1;
    /* STREAM's counting: copy moves 2 arrays, triad 3 (write-allocate traffic not counted). */
    *copy_gbs = 2.0 * (double)(n * sizeof(float)) / r.best_copy / 1e9;
    *triad_gbs = 3.0 * (double)(n * sizeof(float)) / r.best_triad / 1e9;
    return 0;
}

int machine_sgemm(int m, int n, int k, int reps, double *gflops, char *err, size_t errlen) {
    if (m <= 0 || n <= 0 || k <= 0 || reps <= 0)
        return errorf(err, errlen, "sgemm: need positive sizes and repetitions");
    float *a = malloc((size_t)m * k * sizeof(float));
    float *b = malloc((size_t)n * k * sizeof(float));
    float *c = malloc((size_t)m * n * sizeof(float));
    if (!a || !b || !c) {
        free(a);
        free(b);
        free(c);
        return errorf(err, errlen, "sgemm: out of memory for %dx%dx%d", m, n, k);
    }
    for (size_t i = 0; i < (size_t)m * k; i++)
        a[i] = (float)(i % 7) * 0.01f;
    for (size_t i = 0; i < (size_t)n * k; i++)
        b[i] = (float)(i % 5) * 0.01f;
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
