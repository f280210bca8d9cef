/* SPDX-License-Identifier: MIT */
/* Tests of the forward pass's worker pool (engine/src/threadpool.c): every thread runs once
 * per run, barriers order plain writes between phases, no run is lost whether workers spin
 * (pausing or yielding) or sleep, bad arguments are refused. Run under TSan by the `threads` label.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "pl/pl_util.h"
#include "threadpool.h"

#define MAX_T 8

struct run_state {
    uint32_t seen_nth[MAX_T];
    uint32_t calls[MAX_T];
};

static void record(void *arg, uint32_t ith, uint32_t nth) {
    struct run_state *s = arg;
    s->seen_nth[ith] = nth;
    s->calls[ith]++;
}

static void test_threadpool_runs_every_thread_once(void **state) {
    (void)state;
    for (uint32_t n = 1; n <= 4; n++) {
        struct pl_threadpool *p = NULL;
        struct run_state s;
        memset(&s, 0, sizeof(s));
        assert_int_equal(pl_threadpool_new(n, PL_THREADPOOL_PIN_NONE, &p), 0);
        assert_int_equal(pl_threadpool_n_threads(p), n);
        for (int k = 0; k < 100; k++)
            pl_threadpool_run(p, record, &s);
        for (uint32_t i = 0; i < n; i++) {
            assert_int_equal(s.seen_nth[i], n);
            assert_int_equal(s.calls[i], 100);
        }
        for (uint32_t i = n; i < MAX_T; i++)
            assert_int_equal(s.calls[i], 0);
        pl_threadpool_free(p);
    }
}

/* Phase k: every thread writes slot[ith] = k (plain store), barrier, then every thread
 * checks that every slot holds k. A barrier that failed to order the writes would show up
 * as a wrong value here or as a data race under TSan. */
#define N_PHASES 200
struct phase_state {
    struct pl_threadpool *pool;
    uint32_t slot[MAX_T];
    uint32_t errors[MAX_T];
};

static void phases(void *arg, uint32_t ith, uint32_t nth) {
    struct phase_state *s = arg;
    for (uint32_t k = 1; k <= N_PHASES; k++) {
        s->slot[ith] = k;
        pl_threadpool_barrier(s->pool);
        for (uint32_t j = 0; j < nth; j++)
            if (s->slot[j] != k)
                s->errors[ith]++;
        /* Nobody may write phase k+1 before everyone read phase k. */
        pl_threadpool_barrier(s->pool);
    }
}

static void test_threadpool_barrier_orders_phases(void **state) {
    (void)state;
    for (uint32_t n = 1; n <= 4; n++) {
        struct phase_state s;
        memset(&s, 0, sizeof(s));
        enum pl_threadpool_pin pin = n == 2   ? PL_THREADPOOL_PIN_ALL
                                     : n == 3 ? PL_THREADPOOL_PIN_WORKERS
                                              : PL_THREADPOOL_PIN_NONE;
        assert_int_equal(pl_threadpool_new(n, pin, &s.pool), 0);
        for (int rep = 0; rep < 5; rep++)
            pl_threadpool_run(s.pool, phases, &s);
        for (uint32_t i = 0; i < n; i++)
            assert_int_equal(s.errors[i], 0);
        pl_threadpool_free(s.pool);
    }
}

/* Sum over a shared array split by thread: the result after run returns must be complete,
 * also when the workers went to sleep between runs (the pause makes them reach the futex). */
struct sum_state {
    uint64_t part[MAX_T];
    uint32_t n;
};

static void partial_sums(void *arg, uint32_t ith, uint32_t nth) {
    struct sum_state *s = arg;
    uint64_t acc = 0;
    for (uint32_t i = s->n * ith / nth; i < s->n * (ith + 1) / nth; i++)
        acc += i;
    s->part[ith] = acc;
}

static void busy_wait_ns(uint64_t ns) {
    uint64_t t0 = pl_now_ns();
    while (pl_now_ns() - t0 < ns) {
    }
}

/* Runs back to back and after gaps that leave the workers pausing, yielding (idle_yield) or
 * asleep in the kernel: every run must be seen and complete. */
static void no_lost_wakeups(bool idle_yield) {
    struct pl_threadpool *p = NULL;
    struct sum_state s;
    memset(&s, 0, sizeof(s));
    assert_int_equal(pl_threadpool_new(3, PL_THREADPOOL_PIN_NONE, &p), 0);
    pl_threadpool_set_idle_yield(p, idle_yield);
    for (uint32_t k = 0; k < 3000; k++) {
        s.n = 1000 + k;
        memset(s.part, 0, sizeof(s.part));
        pl_threadpool_run(p, partial_sums, &s);
        uint64_t total = s.part[0] + s.part[1] + s.part[2];
        assert_int_equal(total, (uint64_t)s.n * (s.n - 1) / 2);
        if (k % 500 == 0) {
            /* Long enough for the workers to stop spinning and sleep in the kernel; the
             * next run must wake them. Correctness does not depend on the duration. */
            struct timespec ts = {0, 3 * 1000 * 1000};
            nanosleep(&ts, NULL);
        } else if (k % 50 == 0) {
            busy_wait_ns(k % 100 == 0 ? 1000u : 40000u); /* pausing, then yielding workers */
        }
        if (k == 1500) /* the setting may change between runs */
            pl_threadpool_set_idle_yield(p, !idle_yield);
    }
    pl_threadpool_free(p);
}

static void test_threadpool_no_lost_wakeups(void **state) {
    (void)state;
    no_lost_wakeups(false);
}

static void test_threadpool_no_lost_wakeups_idle_yield(void **state) {
    (void)state;
    no_lost_wakeups(true);
}

static void test_threadpool_rejects_bad_arguments(void **state) {
    (void)state;
    struct pl_threadpool *p = (struct pl_threadpool *)&p;
    assert_int_equal(pl_threadpool_new(0, PL_THREADPOOL_PIN_NONE, &p), -EINVAL);
    assert_int_equal(pl_threadpool_new(PL_THREADPOOL_MAX_THREADS + 1, PL_THREADPOOL_PIN_NONE, &p),
                     -EINVAL);
    assert_ptr_equal(p, (struct pl_threadpool *)&p); /* untouched on failure */
    pl_threadpool_free(NULL);
}

static void test_threadpool_free_without_runs(void **state) {
    (void)state;
    struct pl_threadpool *p = NULL;
    assert_int_equal(pl_threadpool_new(4, PL_THREADPOOL_PIN_ALL, &p), 0);
    pl_threadpool_free(p);
}

/* PIN_ALL binds the caller (thread 0) to one CPU; PIN_WORKERS leaves its mask alone. Run in
 * a thread of its own so that the test's main thread keeps its mask. */
static void *pin_modes(void *arg) {
    int *ok = arg;
    cpu_set_t before, after;
    *ok = 0;
    if (sched_getaffinity(0, sizeof(before), &before) != 0)
        return NULL;
    struct pl_threadpool *p = NULL;
    if (pl_threadpool_new(2, PL_THREADPOOL_PIN_WORKERS, &p) != 0)
        return NULL;
    pl_threadpool_free(p);
    if (sched_getaffinity(0, sizeof(after), &after) != 0 || !CPU_EQUAL(&before, &after))
        return NULL;
    if (pl_threadpool_new(2, PL_THREADPOOL_PIN_ALL, &p) != 0)
        return NULL;
    pl_threadpool_free(p);
    if (sched_getaffinity(0, sizeof(after), &after) != 0)
        return NULL;
    *ok = CPU_COUNT(&before) > 1 ? (CPU_COUNT(&after) == 1 ? 1 : 0) : 1;
    return NULL;
}

static void test_threadpool_pin_modes(void **state) {
    (void)state;
    pthread_t t;
    int ok = 0;
    assert_int_equal(pthread_create(&t, NULL, pin_modes, &ok), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(ok, 1);
}

/* pl_threadpool_barrier_idle: a thread that waits runs idle between its looks at the barrier
 * until idle returns false, then waits as before; a thread whose idle never runs out still
 * leaves as soon as the last thread arrives (the run ends); the barrier orders the phases as
 * the plain one does. Thread 0 arrives early (the others spin for 2 ms first), so its idle
 * runs (when the OS lets it: the counts are bounds, not exact, on a loaded machine). */
struct idle_state {
    struct pl_threadpool *pool;
    uint32_t slot[MAX_T];
    uint32_t errors[MAX_T];
    uint32_t pieces[MAX_T];     /* idle calls that returned true */
    uint32_t calls[MAX_T];      /* all idle calls */
    uint32_t in_wait[MAX_T];    /* pieces in the current wait */
    bool done[MAX_T];           /* idle said done in the current wait */
    uint32_t after_done[MAX_T]; /* calls after that, in the same wait */
    uint32_t limit;             /* pieces before idle says it is done; 0: never done */
};

struct idle_arg {
    struct idle_state *s;
    uint32_t ith;
};

static bool idle_piece(void *arg) {
    struct idle_arg *a = arg;
    struct idle_state *s = a->s;
    s->calls[a->ith]++;
    if (s->done[a->ith])
        s->after_done[a->ith]++;
    if (s->limit && s->in_wait[a->ith] >= s->limit) {
        s->done[a->ith] = true;
        return false;
    }
    s->in_wait[a->ith]++;
    s->pieces[a->ith]++;
    return true;
}

static void idle_phases(void *arg, uint32_t ith, uint32_t nth) {
    struct idle_state *s = arg;
    struct idle_arg a = {s, ith};
    for (uint32_t k = 1; k <= 20; k++) {
        s->slot[ith] = k;
        if (ith != 0)
            busy_wait_ns(2000000);
        s->in_wait[ith] = 0;
        s->done[ith] = false;
        pl_threadpool_barrier_idle(s->pool, idle_piece, &a);
        for (uint32_t j = 0; j < nth; j++)
            if (s->slot[j] != k)
                s->errors[ith]++;
        pl_threadpool_barrier_idle(s->pool, NULL, NULL);
    }
}

static void test_threadpool_barrier_idle(void **state) {
    (void)state;
    for (uint32_t n = 1; n <= 3; n++)
        for (uint32_t limit = 0; limit <= 50; limit += 50) {
            struct idle_state s;
            memset(&s, 0, sizeof(s));
            s.limit = limit;
            assert_int_equal(pl_threadpool_new(n, PL_THREADPOOL_PIN_NONE, &s.pool), 0);
            pl_threadpool_run(s.pool, idle_phases, &s);
            for (uint32_t i = 0; i < n; i++)
                assert_int_equal(s.errors[i], 0);
            for (uint32_t i = 0; i < n; i++) {
                assert_int_equal(s.after_done[i], 0); /* never called again once done */
                assert_true(s.pieces[i] <= (limit ? 20 * limit : UINT32_MAX));
            }
            if (n == 1) /* nobody to wait for: idle never runs */
                assert_int_equal(s.calls[0], 0);
            else /* thread 0 waited about 2 ms at each of 20 barriers */
                assert_true(s.pieces[0] > 0);
            pl_threadpool_free(s.pool);
        }
}

/* ---- pl_split ---- */

/* The segments of n units under cuts are contiguous, cover [0, n), and i's is about
 * share i of n. */
static void check_ranges(const double *shares, const uint32_t *cuts, uint32_t nth, uint32_t n) {
    uint32_t prev_hi = 0;
    assert_int_equal(cuts[0], 0);
    assert_int_equal(cuts[nth], PL_SPLIT_ONE);
    for (uint32_t i = 0; i < nth; i++) {
        uint32_t lo, hi;
        pl_split_range(n, cuts, i, &lo, &hi);
        assert_int_equal(lo, prev_hi);
        assert_true(hi >= lo);
        const double want = shares[i] * n;
        assert_true((double)(hi - lo) >= want - 2.0 && (double)(hi - lo) <= want + 2.0);
        prev_hi = hi;
    }
    assert_int_equal(prev_hi, n);
}

static double share_sum(const double *s, uint32_t nth) {
    double t = 0.0;
    for (uint32_t i = 0; i < nth; i++)
        t += s[i];
    return t;
}

static void test_split_follows_work(void **state) {
    (void)state;
    enum { MAXT = 7 };
    double sh[MAXT];
    uint32_t cuts[MAXT + 1];
    struct pl_split_done done[MAXT];
    memset(done, 0, sizeof(done));

    /* equal at first, for any thread count, and for any n */
    for (uint32_t nth = 1; nth <= MAXT; nth++) {
        pl_split_reset(sh, cuts, nth);
        for (uint32_t n = 0; n < 200; n += 7)
            check_ranges(sh, cuts, nth, n);
        check_ranges(sh, cuts, nth, 65535);
    }

    /* two threads: no work leaves the shares alone; equal work keeps them equal */
    pl_split_reset(sh, cuts, 2);
    pl_split_update(sh, cuts, done, 2);
    assert_true(sh[0] == 0.5 && sh[1] == 0.5);
    done[0].work = done[1].work = 1000;
    pl_split_update(sh, cuts, done, 2);
    assert_true(sh[0] == 0.5 && sh[1] == 0.5);
    assert_int_equal(cuts[1], PL_SPLIT_ONE / 2);

    /* thread 1 did 60% (it stole): one step moves a quarter of the way */
    done[0].work = 400;
    done[1].work = 600;
    pl_split_update(sh, cuts, done, 2);
    assert_true(fabs(sh[0] - 0.475) < 1e-12 && fabs(sh[1] - 0.525) < 1e-12);
    check_ranges(sh, cuts, 2, 10000);
    /* ... and repeated, converges to the fraction */
    for (int k = 0; k < 200; k++)
        pl_split_update(sh, cuts, done, 2);
    assert_true(fabs(sh[0] - 0.4) < 1e-9);
    check_ranges(sh, cuts, 2, 12345);

    /* a thread that does nothing keeps a floor share (PL_SPLIT_MIN of an equal one) */
    done[0].work = 0;
    done[1].work = 5000;
    for (int k = 0; k < 200; k++)
        pl_split_update(sh, cuts, done, 2);
    assert_true(fabs(sh[0] - PL_SPLIT_MIN / 2) < 1e-9);
    assert_true(fabs(share_sum(sh, 2) - 1.0) < 1e-12);
    check_ranges(sh, cuts, 2, 777);

    /* several threads: shares stay within the bounds, sum to 1, cuts ordered */
    for (uint32_t nth = 3; nth <= MAXT; nth++) {
        pl_split_reset(sh, cuts, nth);
        for (int k = 0; k < 100; k++) {
            for (uint32_t i = 0; i < nth; i++)
                done[i].work =
                    (uint64_t)((i * 7919u + (uint32_t)k * 104729u) % 1000u) * (i == 0 ? 10u : 1u);
            pl_split_update(sh, cuts, done, nth);
            assert_true(fabs(share_sum(sh, nth) - 1.0) < 1e-9);
            for (uint32_t i = 0; i < nth; i++) {
                assert_true(sh[i] >= PL_SPLIT_MIN / nth * 0.999);
                assert_true(cuts[i] <= cuts[i + 1]);
            }
            check_ranges(sh, cuts, nth, 4096);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threadpool_runs_every_thread_once),
        cmocka_unit_test(test_threadpool_barrier_orders_phases),
        cmocka_unit_test(test_threadpool_barrier_idle),
        cmocka_unit_test(test_threadpool_no_lost_wakeups),
        cmocka_unit_test(test_threadpool_no_lost_wakeups_idle_yield),
        cmocka_unit_test(test_threadpool_rejects_bad_arguments),
        cmocka_unit_test(test_threadpool_free_without_runs),
        cmocka_unit_test(test_threadpool_pin_modes),
        cmocka_unit_test(test_split_follows_work),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
