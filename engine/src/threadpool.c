/* SPDX-License-Identifier: MIT */
/* Persistent worker pool for the forward pass: dispatch by a generation counter, phases
 * separated by a counting barrier; every wait spins briefly, then sleeps on a futex. Used by
 * forward.c (one pool per inference context). */
#include "threadpool.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "pl/pl_util.h"

/* How long a waiter spins before it sleeps in the kernel: long enough to cover the gap
 * between two phases of a forward step and between two steps of a generation (the caller
 * samples a token, a broker also writes it to its client: tens of microseconds), short
 * enough not to burn a core that another process could use while the pool is idle. A
 * sleep costs the waker a futex syscall and the sleeper a wake-up that is often longer than
 * the phase it waited for. Time-based: a pause lasts 10 to 150 cycles depending on the CPU.
 * The clock is read once per SPIN_CHECK pauses.
 *
 * In a pool set to yield when idle (pl_threadpool_set_idle_yield), a worker waiting for the
 * next run spins on pauses for DISPATCH_PAUSE_NS only, then yields the CPU at each look: in
 * a broker the threads that make the next run happen (its event thread and its clients,
 * themselves spinning with yields on a small machine) may be queued on this very CPU, and a
 * worker that only paused would keep them off it until its spin ran out, 200 us later. A
 * yield returns at once when nothing else wants the CPU, so the worker still sees the next
 * run within a microsecond or so; still, the syscalls cost a process that runs alone a
 * little decode speed, hence the setting. Barriers inside a run only pause. */
#define SPIN_NS 200000ull
#define DISPATCH_PAUSE_NS 2000ull
#define SPIN_CHECK 16

/* ---- Futex-backed waiting ---- */

/* A 32-bit word others wait on, with a count of the waiters asleep in the kernel so the
 * waker can skip the futex_wake syscall when everyone is still spinning. */
struct waitword {
    _Atomic uint32_t word;
    _Atomic uint32_t n_sleepers;
};

static void futex_wait(_Atomic uint32_t *addr, uint32_t val) {
    /* Returns at once (EAGAIN) when *addr != val; spurious returns are handled by the
     * caller's loop. */
    (void)syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *addr) {
    (void)syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Wait until w->word != val, yielding the CPU at each look after pause_ns of spinning
 * (SPIN_NS: never); while idle(arg) returns true, it runs instead of the pause at each look
 * (idle may be NULL). On return the caller has acquired the store that changed it. */
static void waitword_wait_ne(struct waitword *w, uint32_t val, uint64_t pause_ns,
                             pl_threadpool_idle_fn idle, void *arg) {
    uint64_t t0 = 0;
    bool yielding = false;
    for (uint32_t i = 1;; i++) {
        /* Acquire: pairs with the seq_cst (hence release) increment in waitword_bump(). */
        if (atomic_load_explicit(&w->word, memory_order_acquire) != val)
            return;
        if (idle && idle(arg))
            continue; /* no clock while there is work: a piece is far shorter than SPIN_NS */
        idle = NULL;
        if (!yielding)
            pl_cpu_relax();
        else
            (void)sched_yield();
        if (yielding || i % SPIN_CHECK == 0) {
            uint64_t t = pl_now_ns();
            if (!t0)
                t0 = t;
            else if (t - t0 >= SPIN_NS)
                break;
            else
                yielding = t - t0 >= pause_ns;
        }
    }
    /* Dekker-style handshake with waitword_bump(), both sides seq_cst: either the waker's
     * load of n_sleepers sees this increment and wakes us, or our load of word below sees
     * the waker's increment and we never sleep. FUTEX_WAIT itself re-checks the word in the
     * kernel, so a wake between our check and the syscall is not lost either. */
    atomic_fetch_add_explicit(&w->n_sleepers, 1, memory_order_seq_cst);
    while (atomic_load_explicit(&w->word, memory_order_seq_cst) == val)
        futex_wait(&w->word, val);
    atomic_fetch_sub_explicit(&w->n_sleepers, 1, memory_order_relaxed);
}

/* Advance the word and wake the sleepers if any. Release (via seq_cst): everything this
 * thread wrote before is visible to a waiter that observes the new value. */
static void waitword_bump(struct waitword *w) {
    atomic_fetch_add_explicit(&w->word, 1, memory_order_seq_cst);
    /* seq_cst: pairs with the n_sleepers increment in waitword_wait_ne(). */
    if (atomic_load_explicit(&w->n_sleepers, memory_order_seq_cst) > 0)
        futex_wake_all(&w->word);
}

/* ---- Pool ---- */

struct worker {
    struct pl_threadpool *pool;
    uint32_t ith;
};

struct pl_threadpool {
    uint32_t n_threads;
    uint32_t n_started;     /* workers successfully created (for cleanup) */
    pthread_t *threads;     /* [n_threads - 1] */
    struct worker *workers; /* [n_threads - 1] */

    /* Written by the caller of run before it bumps dispatch, read by workers after they
     * observe the bump (acquire): no atomics needed for these two. */
    pl_threadpool_fn fn;
    void *arg;
    bool stop;

    /* Dispatch: word = run generation. One cache line each so that spinning on one does not
     * bounce the other. */
    alignas(64) struct waitword dispatch;
    /* Barrier: word = phase, count = arrivals in the current phase. */
    alignas(64) struct waitword phase;
    alignas(64) _Atomic uint32_t arrived;
    /* How long an idle worker pauses before it yields (SPIN_NS: it never does); read by the
     * workers at each wait for a run. */
    _Atomic uint64_t dispatch_pause_ns;
};

void pl_threadpool_barrier(struct pl_threadpool *p) {
    pl_threadpool_barrier_idle(p, NULL, NULL);
}

void pl_threadpool_barrier_idle(struct pl_threadpool *p, pl_threadpool_idle_fn idle, void *arg) {
    uint32_t nth = p->n_threads;
    if (nth == 1)
        return;
    /* The phase cannot advance until this thread arrives, and this thread already observed
     * the previous advance (acquire in its last wait), so a relaxed load reads the current
     * phase. */
    uint32_t ph = atomic_load_explicit(&p->phase.word, memory_order_relaxed);
    /* acq_rel: each arrival releases this thread's writes; the RMWs form one release
     * sequence, so the last arriver acquires the writes of every earlier arriver. */
    uint32_t n = atomic_fetch_add_explicit(&p->arrived, 1, memory_order_acq_rel) + 1;
    if (n == nth) {
        /* No thread touches arrived again before it sees the phase advance below, which
         * orders this reset before their next fetch_add. */
        atomic_store_explicit(&p->arrived, 0, memory_order_relaxed);
        /* Release (seq_cst) in waitword_bump: pairs with the acquire in waitword_wait_ne of
         * the other threads and passes on everything the last arriver acquired. */
        waitword_bump(&p->phase);
        return;
    }
    waitword_wait_ne(&p->phase, ph, SPIN_NS, idle, arg);
}

static void *worker_main(void *argp) {
    struct worker *w = argp;
    struct pl_threadpool *p = w->pool;
    uint32_t seen = 0; /* the generation counter starts at 0 */

    for (;;) {
        waitword_wait_ne(&p->dispatch, seen,
                         atomic_load_explicit(&p->dispatch_pause_ns, memory_order_relaxed), NULL,
                         NULL);
        /* A new run can only start after this worker passed the previous run's final
         * barrier, so the generation moved by exactly one. */
        seen++;
        if (p->stop)
            break;
        p->fn(p->arg, w->ith, p->n_threads);
        pl_threadpool_barrier(p);
    }
    return NULL;
}

void pl_threadpool_run(struct pl_threadpool *p, pl_threadpool_fn fn, void *arg) {
    if (p->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    /* Safe to overwrite: every worker read fn/arg of the previous run before it arrived at
     * that run's final barrier, which we passed. */
    p->fn = fn;
    p->arg = arg;
    /* Release: publishes fn/arg; pairs with the acquire in the workers' dispatch wait. */
    waitword_bump(&p->dispatch);
    fn(arg, 0, p->n_threads);
    /* The final barrier: when it returns, every worker finished fn and its writes are
     * visible here (barrier ordering). */
    pl_threadpool_barrier(p);
}

void pl_threadpool_set_idle_yield(struct pl_threadpool *p, bool yield) {
    atomic_store_explicit(&p->dispatch_pause_ns, yield ? DISPATCH_PAUSE_NS : SPIN_NS,
                          memory_order_relaxed);
}

uint32_t pl_threadpool_n_threads(const struct pl_threadpool *p) {
    return p->n_threads;
}

static void pin_to(pthread_t t, const cpu_set_t *allowed, uint32_t i) {
    int n_cpus = CPU_COUNT(allowed);
    if (n_cpus <= 0)
        return;
    uint32_t want = i % (uint32_t)n_cpus;
    for (int cpu = 0, seen = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, allowed))
            continue;
        if ((uint32_t)seen++ == want) {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(cpu, &one);
            /* A hint only: a failure (e.g. a cgroup cpuset that changed) is ignored. */
            (void)pthread_setaffinity_np(t, sizeof(one), &one);
            return;
        }
    }
}

void pl_threadpool_free(struct pl_threadpool *p) {
    if (!p)
        return;
    if (p->n_started > 0) {
        p->stop = true;
        /* Release: publishes stop; pairs with the acquire in the workers' dispatch wait. */
        waitword_bump(&p->dispatch);
        for (uint32_t i = 0; i < p->n_started; i++)
            (void)pthread_join(p->threads[i], NULL);
    }
    free(p->threads);
    free(p->workers);
    free(p);
}

int pl_threadpool_new(uint32_t n_threads, enum pl_threadpool_pin pin_mode,
                      struct pl_threadpool **ret) {
    struct pl_threadpool *p = NULL;
    cpu_set_t allowed;
    sigset_t all, old;
    bool have_mask = false, pin = pin_mode != PL_THREADPOOL_PIN_NONE;
    int r;

    if (n_threads == 0 || n_threads > PL_THREADPOOL_MAX_THREADS || !ret)
        return -EINVAL;
    if (posix_memalign((void **)&p, 64, sizeof(*p)) != 0)
        return -ENOMEM;
    *p = (struct pl_threadpool){.n_threads = n_threads};
    atomic_init(&p->dispatch.word, 0);
    atomic_init(&p->dispatch.n_sleepers, 0);
    atomic_init(&p->phase.word, 0);
    atomic_init(&p->phase.n_sleepers, 0);
    atomic_init(&p->arrived, 0);
    atomic_init(&p->dispatch_pause_ns, SPIN_NS);

    if (n_threads > 1) {
        p->threads = calloc(n_threads - 1, sizeof(*p->threads));
        p->workers = calloc(n_threads - 1, sizeof(*p->workers));
        if (!p->threads || !p->workers) {
            r = -ENOMEM;
            goto fail;
        }
    }
    if (pin)
        pin = sched_getaffinity(0, sizeof(allowed), &allowed) == 0;

    /* Workers take no signals: the daemon handles them in its event loop (signalfd). The
     * mask is inherited at creation, so block everything around pthread_create. */
    sigfillset(&all);
    have_mask = pthread_sigmask(SIG_SETMASK, &all, &old) == 0;
    for (uint32_t i = 0; i + 1 < n_threads; i++) {
        p->workers[i] = (struct worker){.pool = p, .ith = i + 1};
        r = pthread_create(&p->threads[i], NULL, worker_main, &p->workers[i]);
        if (r != 0) {
            r = -r;
            goto fail;
        }
        p->n_started++;
        if (pin)
            pin_to(p->threads[i], &allowed, i + 1);
    }
    if (have_mask)
        (void)pthread_sigmask(SIG_SETMASK, &old, NULL);
    have_mask = false;
    if (pin && pin_mode == PL_THREADPOOL_PIN_ALL)
        pin_to(pthread_self(), &allowed, 0);

    *ret = p;
    return 0;

fail:
    if (have_mask)
        (void)pthread_sigmask(SIG_SETMASK, &old, NULL);
    pl_threadpool_free(p);
    return r;
}

/* ---- Shares that follow the threads' speeds ---- */

static void split_cuts(const double *shares, uint32_t *cuts, uint32_t nth) {
    double acc = 0.0;
    cuts[0] = 0;
    for (uint32_t i = 1; i < nth; i++) {
        acc += shares[i - 1];
        const double v = acc * PL_SPLIT_ONE + 0.5;
        const uint32_t c = v >= PL_SPLIT_ONE ? PL_SPLIT_ONE : v <= 0.0 ? 0 : (uint32_t)v;
        cuts[i] = c < cuts[i - 1] ? cuts[i - 1] : c;
    }
    cuts[nth] = PL_SPLIT_ONE;
}

void pl_split_reset(double *shares, uint32_t *cuts, uint32_t nth) {
    for (uint32_t i = 0; i < nth; i++)
        shares[i] = 1.0 / nth;
    split_cuts(shares, cuts, nth);
}

void pl_split_update(double *shares, uint32_t *cuts, const struct pl_split_done *done,
                     uint32_t nth) {
    uint64_t total = 0;
    for (uint32_t i = 0; i < nth; i++)
        total += done[i].work;
    if (total == 0)
        return;
    double sum = 0.0;
    for (uint32_t i = 0; i < nth; i++) {
        double s = shares[i] + PL_SPLIT_GAIN * ((double)done[i].work / (double)total - shares[i]);
        s = s < PL_SPLIT_MIN / nth ? PL_SPLIT_MIN / nth : s;
        s = s > PL_SPLIT_MAX / nth ? PL_SPLIT_MAX / nth : s;
        shares[i] = s;
        sum += s;
    }
    for (uint32_t i = 0; i < nth; i++)
        shares[i] /= sum;
    split_cuts(shares, cuts, nth);
}
