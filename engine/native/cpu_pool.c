/*
 * cpu_pool.c - a small pool of pthreads owned by one engine.
 *
 * The calling thread is thread 0 and does its share of every task, so a pool of one
 * thread starts no workers at all. Workers sleep on a condition variable between tasks
 * (spinning would steal the core from OpenBLAS and from the Go runtime on small machines).
 * A task is published under the mutex with a new generation number; each worker runs it
 * once and the last one to finish wakes the caller.
 */
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

static void *pool_worker_main(void *arg) {
    cpu_pool_worker *w = arg;
    cpu_pool *p = w->pool;
    uint64_t seen = 0;

    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stopping && p->generation == seen)
            pthread_cond_wait(&p->wake, &p->mu);
        if (p->stopping)
            break;
        seen = p->generation;
        cpu_task_fn fn = p->fn;
        void *fn_arg = p->arg;
        pthread_mutex_unlock(&p->mu);

        fn(fn_arg, w->index, p->nthreads);

        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int cpu_pool_init(cpu_pool *p, int nthreads, char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    if (nthreads < 1)
        nthreads = 1;
    p->nthreads = nthreads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    if (nthreads == 1)
        return 0;

    p->workers = calloc((size_t)nthreads - 1, sizeof *p->workers);
    if (!p->workers)
        return la_errorf(err, errlen, "thread pool: out of memory for %d workers", nthreads - 1);
    for (int i = 0; i < nthreads - 1; i++) {
        p->workers[i].pool = p;
        p->workers[i].index = i + 1;
        int rc = pthread_create(&p->workers[i].thread, NULL, pool_worker_main, &p->workers[i]);
        if (rc != 0) {
            cpu_pool_destroy(p);
            return la_errorf(err, errlen, "thread pool: starting worker %d of %d: error %d",
                              i + 1, nthreads - 1, rc);
        }
        p->started++;
    }
    return 0;
}

void cpu_pool_run(cpu_pool *p, cpu_task_fn fn, void *arg) {
    if (p->nthreads <= 1 || p->started == 0) {
        fn(arg, 0, 1);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->pending = p->started;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);

    fn(arg, 0, p->nthreads);

    pthread_mutex_lock(&p->mu);
    while (p->pending > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

typedef struct {
    cpu_range_fn fn;
    void *arg;
    size_t n;
} range_task;

static void range_slice(void *arg, int thread, int nthreads) {
    const range_task *t = arg;
    size_t lo = t->n * (size_t)thread / (size_t)nthreads;
    size_t hi = t->n * (size_t)(thread + 1) / (size_t)nthreads;
    if (lo < hi)
        t->fn(t->arg, lo, hi);
}

void cpu_pool_for(cpu_pool *p, size_t n, cpu_range_fn fn, void *arg) {
    range_task t = {fn, arg, n};
    cpu_pool_run(p, range_slice, &t);
}

void cpu_pool_destroy(cpu_pool *p) {
    if (p->nthreads == 0)
        return; /* never initialised */
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->started; i++)
        pthread_join(p->workers[i].thread, NULL);
    free(p->workers);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    memset(p, 0, sizeof *p);
}
