/* SPDX-License-Identifier: MIT */
/* A persistent pool of worker threads for the forward pass (engine-private). Created once
 * per inference context: n_threads - 1 workers plus the calling thread. pl_threadpool_run()
 * runs one function on every thread and returns when all have finished; inside that
 * function pl_threadpool_barrier() separates phases. Waiting spins briefly, then sleeps on
 * a futex, so steady-state calls make no syscall, allocation or thread creation. */
#ifndef PL_ENGINE_THREADPOOL_H
#define PL_ENGINE_THREADPOOL_H

#include <stdbool.h>
#include <stdint.h>

struct pl_threadpool;

/* Work function: ith in [0, nth) names the calling thread (0 is the caller of run). */
typedef void (*pl_threadpool_fn)(void *arg, uint32_t ith, uint32_t nth);

#define PL_THREADPOOL_MAX_THREADS 512u

enum pl_threadpool_pin {
    PL_THREADPOOL_PIN_NONE = 0,
    PL_THREADPOOL_PIN_ALL = 1,     /* thread i (the caller is 0) on the i-th allowed CPU */
    PL_THREADPOOL_PIN_WORKERS = 2, /* only workers 1.. so; the caller stays free to move */
};

/* Start n_threads - 1 workers (n_threads in [1, PL_THREADPOOL_MAX_THREADS]), pinned as pin
 * says to the CPUs of the calling thread's affinity mask (failures to pin are ignored:
 * pinning is a performance hint). Returns 0, -EINVAL, -ENOMEM, or -errno of pthread_create. */
int pl_threadpool_new(uint32_t n_threads, enum pl_threadpool_pin pin, struct pl_threadpool **ret);

/* Stop and join the workers, free the pool; NULL is fine. Not while a run is in progress. */
void pl_threadpool_free(struct pl_threadpool *p);

uint32_t pl_threadpool_n_threads(const struct pl_threadpool *p);

/* yield: idle workers (waiting for the next run) pause for 2 us, then yield the CPU at each
 * look until they sleep, instead of pausing all along: for a process whose other threads
 * spin with yields on the same CPUs (picolmd's event thread, its clients), which pausing
 * workers would keep off those CPUs. Off by default. Any time, from any thread. */
void pl_threadpool_set_idle_yield(struct pl_threadpool *p, bool yield);

/* Run fn(arg, ith, nth) on all nth threads (the caller is ith 0) and return when every
 * call has returned; all writes made by any thread inside fn are visible to the caller
 * afterwards. Not reentrant: one run at a time per pool, from one thread at a time. */
void pl_threadpool_run(struct pl_threadpool *p, pl_threadpool_fn fn, void *arg);

/* Inside fn only: wait until all nth threads have reached the barrier. Writes before the
 * barrier on any thread are visible to every thread after it. Every thread must call it
 * the same number of times in one run. */
void pl_threadpool_barrier(struct pl_threadpool *p);

/* Work for a thread waiting at a barrier: one short piece per call (well under a
 * microsecond: the wait looks at the barrier between pieces), true while more is left. */
typedef bool (*pl_threadpool_idle_fn)(void *arg);

/* pl_threadpool_barrier(), and while this thread waits for the others, idle(arg) until it
 * returns false (NULL: none). The last thread to arrive leaves at once: idle may not run at
 * all, or stop at any piece. */
void pl_threadpool_barrier_idle(struct pl_threadpool *p, pl_threadpool_idle_fn idle, void *arg);

#endif
