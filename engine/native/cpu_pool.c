/*
 * cpu_pool.c - a small pool of pthreads owned by one engine.
 *
 * The calling thread is thread 0 and does its share of every task, so a pool of one
 * thread starts no workers at all. A task is published with a new generation number;
 * each worker runs it once and the last one to finish tells the caller.
 *
 * Waiting. Between tasks a worker sleeps on a condition variable, and the caller sleeps
 * on another until the task's last worker is done: spinning would steal the core from
 * the Go runtime and from the caller's own serial work on small machines. But a decode
 * step is ~220 tasks of tens of microseconds to a millisecond each, and a condition
 * variable's wake-up costs tens of microseconds on a VM, so inside a burst
 * (cpu_pool_burst_begin/_end, one decode step) a waiter first watches the counters for
 * up to POOL_SPIN pauses and sleeps only if nothing came (on a pool with no more threads
 * than CPUs). Prefill and the vision tower, whose tasks take milliseconds, run outside
 * bursts and never spin.
 *
 * The handshake. generation, pending, sleepers and caller_asleep are read and written
 * with sequentially consistent atomics, so a spinning waiter needs no lock. A waiter
 * that goes to sleep first counts itself (sleepers, caller_asleep) under the mutex and
 * then looks at the counter once more; the side that changes the counter changes it
 * first and then looks at the count. Of two such store-then-load pairs at least one
 * sees the other's store, so either the waiter sees the new counter and does not sleep,
 * or the changer sees a sleeper and signals it under the mutex (which the sleeper holds
 * until it is inside pthread_cond_wait, so the signal cannot fall between the two).
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

/* POOL_SPIN pauses are some tens of microseconds on AMD's Zen cores and up to about 0.2 ms
 * on Intel's since Skylake (a PAUSE is ~140 cycles there): longer than the gap between two
 * tasks of a step, and spent only once a step ends. */
enum { POOL_SPIN = 4096 };

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_SEQ_CST)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_SEQ_CST)
#define ADD(x, v) __atomic_add_fetch(&(x), (v), __ATOMIC_SEQ_CST)

static inline void pause_once(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* cpus_allowed is the number of CPUs this process may run on (0 if unknown). */
static int cpus_allowed(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return 0;
    return CPU_COUNT(&set);
}

/* spinning says whether a waiter spins now: inside a burst, on a pool that has a CPU for
 * each of its threads. */
static int spinning(cpu_pool *p) {
    return p->may_spin && LOAD(p->burst) > 0;
}

/* next_task waits until the generation differs from seen (or the pool stops) and
 * returns the generation. */
static uint64_t next_task(cpu_pool *p, uint64_t seen) {
    if (spinning(p)) {
        for (int i = 0; i < POOL_SPIN; i++) {
            uint64_t g = LOAD(p->generation);
            if (g != seen || LOAD(p->stopping))
                return g;
            pause_once();
        }
    }
    pthread_mutex_lock(&p->mu);
    ADD(p->sleepers, 1);
    uint64_t g;
    while ((g = LOAD(p->generation)) == seen && !LOAD(p->stopping))
        pthread_cond_wait(&p->wake, &p->mu);
    ADD(p->sleepers, -1);
    pthread_mutex_unlock(&p->mu);
    return g;
}

static void *pool_worker_main(void *arg) {
    cpu_pool_worker *w = arg;
    cpu_pool *p = w->pool;
    uint64_t seen = 0;

    for (;;) {
        seen = next_task(p, seen);
        if (LOAD(p->stopping))
            break;
        /* fn and arg were written before the generation that announced them */
        p->fn(p->arg, w->index, p->nthreads);
        if (ADD(p->pending, -1) == 0 && LOAD(p->caller_asleep)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
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
    /* More threads than CPUs (an oversized LA_THREADS, a narrow cpuset): a spinning waiter
     * would hold the CPU the thread it waits for needs, so that pool always sleeps. A CPU
     * quota (cgroup cpu.max) is not seen here; docs/cpu-backend.md says so. */
    const int cpus = cpus_allowed();
    p->may_spin = cpus > 0 && nthreads <= cpus;

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

/* wait_done waits until every worker has finished the current task. */
static void wait_done(cpu_pool *p) {
    if (spinning(p)) {
        for (int i = 0; i < POOL_SPIN; i++) {
            if (LOAD(p->pending) == 0)
                return;
            pause_once();
        }
    }
    pthread_mutex_lock(&p->mu);
    STORE(p->caller_asleep, 1);
    while (LOAD(p->pending) > 0)
        pthread_cond_wait(&p->done, &p->mu);
    STORE(p->caller_asleep, 0);
    pthread_mutex_unlock(&p->mu);
}

void cpu_pool_run(cpu_pool *p, cpu_task_fn fn, void *arg) {
    if (p->nthreads <= 1 || p->started == 0) {
        fn(arg, 0, 1);
        return;
    }
    /* Every worker finished the last task (wait_done), so none reads fn or arg now. */
    p->fn = fn;
    p->arg = arg;
    STORE(p->pending, p->started);
    ADD(p->generation, 1);
    if (LOAD(p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }

    fn(arg, 0, p->nthreads);
    wait_done(p);
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

void cpu_pool_burst_begin(cpu_pool *p) {
    ADD(p->burst, 1);
}

void cpu_pool_burst_end(cpu_pool *p) {
    ADD(p->burst, -1);
}

void cpu_pool_destroy(cpu_pool *p) {
    if (p->nthreads == 0)
        return; /* never initialised */
    pthread_mutex_lock(&p->mu);
    STORE(p->stopping, 1);
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

/* ---- a probe for the tests ---------------------------------------------------------- */

typedef struct {
    int task;       /* the task's number, which every thread records */
    int *ran;       /* [nthreads]: the last task each thread ran */
    int *count;     /* [nthreads]: how many tasks each thread ran */
    int busy;       /* a little work, so threads overlap */
} probe_task;

static void probe_slice(void *arg, int thread, int nthreads) {
    probe_task *t = arg;
    (void)nthreads;
    for (int i = 0; i < 200 * (thread + 1); i++) /* only time passes; never read */
        __atomic_fetch_add(&t->busy, 1, __ATOMIC_RELAXED);
    t->ran[thread] = t->task;
    t->count[thread]++;
}

int cpu_pool_probe(int nthreads, int tasks, int burst_every) {
    cpu_pool p;
    char err[128];
    if (cpu_pool_init(&p, nthreads, err, sizeof err) != 0)
        return -1;
    int *ran = calloc((size_t)nthreads, sizeof *ran), *count = calloc((size_t)nthreads, sizeof *count);
    int wrong = 0;
    probe_task t = {0, ran, count, 0};
    for (int i = 1; i <= tasks; i++) {
        /* bursts of burst_every tasks, then as many outside one */
        int in_burst = burst_every > 0 && (i / burst_every) % 2 == 0;
        if (in_burst)
            cpu_pool_burst_begin(&p);
        t.task = i;
        cpu_pool_run(&p, probe_slice, &t);
        if (in_burst)
            cpu_pool_burst_end(&p);
        for (int th = 0; th < nthreads; th++) /* every thread ran this task before run returned */
            wrong += ran[th] != i;
    }
    for (int th = 0; th < nthreads; th++)
        wrong += count[th] != tasks;
    cpu_pool_destroy(&p);
    free(ran);
    free(count);
    return wrong;
}
