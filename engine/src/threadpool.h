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

/* ---- Shares that follow the threads' speeds ----
 *
 * Work cut into one contiguous segment per thread (each thread takes its own, then steals
 * from the others'), with the cuts moved after each run toward what each thread actually
 * computed: a thread that stole grows its share, the one stolen from shrinks it. The cores
 * of a VM often differ in speed for minutes at a time (one vCPU ran vector arithmetic 25-33%
 * slower than the other on the Zen 5 VM), and with equal segments the faster thread steals
 * a few chunks of every product, each a cold start of another weight stream. Each share moves
 * PL_SPLIT_GAIN of the way to the thread's fraction of the run's work, and stays within
 * [PL_SPLIT_MIN, PL_SPLIT_MAX] times an equal share. */
#define PL_SPLIT_ONE 65536u /* cuts: 16-bit fixed point of the whole */
#define PL_SPLIT_GAIN 0.25
#define PL_SPLIT_MIN 0.6
#define PL_SPLIT_MAX 1.4

/* A thread's work in one run (any unit, the same for all threads), one cache line each. */
struct pl_split_done {
    uint64_t work;
    uint8_t pad[56];
};

/* Equal shares[nth] and their cuts[nth + 1]. */
void pl_split_reset(double *shares, uint32_t *cuts, uint32_t nth);

/* After a run in which thread i did done[i].work: the shares and cuts move toward those
 * fractions (no work at all: unchanged). */
void pl_split_update(double *shares, uint32_t *cuts, const struct pl_split_done *done,
                     uint32_t nth);

/* Thread i's segment [*ret_lo, *ret_hi) of n units under cuts: the segments of i = 0 .. nth - 1
 * are contiguous and cover [0, n). */
static inline void pl_split_range(uint32_t n, const uint32_t *cuts, uint32_t i, uint32_t *ret_lo,
                                  uint32_t *ret_hi) {
    *ret_lo = (uint32_t)((uint64_t)n * cuts[i] / PL_SPLIT_ONE);
    *ret_hi = (uint32_t)((uint64_t)n * cuts[i + 1] / PL_SPLIT_ONE);
}

#endif
