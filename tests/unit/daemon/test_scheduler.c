/* SPDX-License-Identifier: MIT */
/* Threaded unit tests for daemon/scheduler.c's hand-over between the event thread and the
 * inference thread, on the real scheduler (stories260K from $PICOLM_TEST_DATA; exit 77
 * without it): command round trips that race the inference thread going to sleep never
 * lose a wake-up, notices arrive in order with one notify-eventfd ring per batch, kicks on
 * an idle scheduler are harmless, and stop joins a thread that is asleep or has messages
 * pending. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "pl/engine_model.h"
#include "pl/ipc_doorbell.h"
#include "scheduler.h"
#include "session.h"

#define N_SESSIONS 8

static struct pl_model *g_model;

static char g_path[4096];

static int setup(void **state) {
    (void)state;
    char err[256] = "";
    const char *path = g_path;
    struct pl_model_opts mo = {.n_threads = 1};
    if (pl_model_load(path, &mo, &g_model, err, sizeof(err)) < 0) {
        fprintf(stderr, "cannot load %s: %s\n", path, err);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    pl_model_free(g_model);
    return 0;
}

static struct pl_daemon_sched *start(void) {
    struct pl_daemon_sched_opts o = {.n_seq = 2,
                                     .n_ctx = 64,
                                     .n_batch = 64,
                                     .kv_tokens = 128,
                                     .prefill_chunk = 32,
                                     .queue_max = 4,
                                     .queue_timeout_ms = 1000,
                                     .max_held = 16,
                                     .max_sessions = N_SESSIONS};
    struct pl_daemon_sched *s = NULL;
    char err[256] = "";
    int r = pl_daemon_sched_start(g_model, &o, &s, err, sizeof(err));
    if (r < 0)
        fprintf(stderr, "scheduler start: %s\n", err);
    assert_int_equal(r, 0);
    return s;
}

/* Wait up to timeout_ms for the next notice: spin a little first (so that the next command
 * is sent while the inference thread is between its notice and its sleep), then poll the
 * notify eventfd the way the event loop does. Returns true with *ret set. */
static bool next_notice(struct pl_daemon_sched *s, struct pl_daemon_msg *ret, int timeout_ms) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int spin = 0; spin < 20000; spin++)
        if (pl_daemon_sched_notice(s, ret))
            return true; /* caught while the inference thread heads for its sleep */
    for (;;) {
        if (pl_daemon_sched_notice(s, ret))
            return true;
        clock_gettime(CLOCK_MONOTONIC, &t);
        long left =
            timeout_ms - ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
        if (left <= 0)
            return false;
        struct pollfd p = {.fd = pl_daemon_sched_notify_fd(s), .events = POLLIN};
        (void)poll(&p, 1, (int)left);
        (void)pl_ipc_doorbell_drain(p.fd);
    }
}

static int time_scale(void) {
    const char *e = getenv("PICOLM_TEST_TIME_SCALE");
    int v = e ? atoi(e) : 1;
    return v > 0 ? v : 1;
}

static uint32_t cycles(void) {
    const char *e = getenv("PL_DAEMON_SCHED_CYCLES");
    long v = e ? strtol(e, NULL, 10) : 0;
    return v > 0 ? (uint32_t)v : 20000u;
}

/* Each CLOSE is sent while the inference thread is on its way to sleep (it just posted the
 * previous notice and found nothing to do): the send/sleep Dekker pair is exercised every
 * cycle. A lost wake-up leaves the message unseen and the notice never comes. */
static void test_close_round_trips(void **state) {
    (void)state;
    struct pl_daemon_sched *s = start();
    struct pl_daemon_session *ss = calloc(N_SESSIONS, sizeof(*ss));
    assert_non_null(ss);
    uint32_t n = cycles(), lost = 0;
    int wait_ms = 2000 * time_scale();
    for (uint32_t i = 0; i < n && lost == 0; i++) {
        struct pl_daemon_session *x = &ss[i % N_SESSIONS];
        atomic_store(&x->dead, true);
        assert_int_equal(pl_daemon_sched_send(s, PL_DAEMON_CMD_CLOSE, x), 0);
        struct pl_daemon_msg m;
        if (!next_notice(s, &m, wait_ms)) {
            lost++;
            break;
        }
        assert_int_equal(m.kind, PL_DAEMON_NOTICE_SESSION_RELEASED);
        assert_ptr_equal(m.ptr, x);
        if (i % 3 == 0)
            pl_daemon_sched_kick(s); /* a kick with nothing to do: one idle step */
    }
    assert_int_equal(lost, 0);
    pl_daemon_sched_stop(s);
    free(ss);
}

/* A burst of CLOSEs: released in order, every one of them. */
static void test_close_burst_in_order(void **state) {
    (void)state;
    struct pl_daemon_sched *s = start();
    struct pl_daemon_session *ss = calloc(N_SESSIONS, sizeof(*ss));
    assert_non_null(ss);
    for (int round = 0; round < 200; round++) {
        for (uint32_t i = 0; i < N_SESSIONS; i++) {
            atomic_store(&ss[i].dead, true);
            assert_int_equal(pl_daemon_sched_send(s, PL_DAEMON_CMD_CLOSE, &ss[i]), 0);
        }
        for (uint32_t i = 0; i < N_SESSIONS; i++) {
            struct pl_daemon_msg m;
            assert_true(next_notice(s, &m, 2000 * time_scale()));
            assert_int_equal(m.kind, PL_DAEMON_NOTICE_SESSION_RELEASED);
            assert_ptr_equal(m.ptr, &ss[i]);
        }
    }
    struct pl_daemon_msg m;
    assert_false(pl_daemon_sched_notice(s, &m));
    pl_daemon_sched_stop(s);
    free(ss);
}

/* Kicks from another thread while round trips run; then stop with messages still queued. */
struct kicker {
    struct pl_daemon_sched *s;
    _Atomic bool stop;
    _Atomic uint64_t n;
};

static void *kick_main(void *arg) {
    struct kicker *k = arg;
    while (!atomic_load(&k->stop)) {
        pl_daemon_sched_kick(k->s);
        atomic_fetch_add(&k->n, 1);
    }
    return NULL;
}

static void test_kicks_and_stop_with_pending(void **state) {
    (void)state;
    struct pl_daemon_sched *s = start();
    struct pl_daemon_session *ss = calloc(N_SESSIONS, sizeof(*ss));
    assert_non_null(ss);
    struct kicker k = {.s = s};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, kick_main, &k), 0);
    /* The round trips must race real kicks: wait for the kicker to be running (a loaded or
     * sanitized run could otherwise finish the loop before it is first scheduled). */
    while (atomic_load(&k.n) == 0)
        sched_yield();
    for (uint32_t i = 0; i < 2000; i++) {
        struct pl_daemon_session *x = &ss[i % N_SESSIONS];
        atomic_store(&x->dead, true);
        assert_int_equal(pl_daemon_sched_send(s, PL_DAEMON_CMD_CLOSE, x), 0);
        struct pl_daemon_msg m;
        assert_true(next_notice(s, &m, 2000 * time_scale()));
        assert_ptr_equal(m.ptr, x);
    }
    atomic_store(&k.stop, true);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_true(atomic_load(&k.n) > 0);
    /* Stop races the thread's handling of these: it must join either way. */
    for (uint32_t i = 0; i < N_SESSIONS; i++)
        assert_int_equal(pl_daemon_sched_send(s, PL_DAEMON_CMD_CLOSE, &ss[i]), 0);
    pl_daemon_sched_stop(s);
    free(ss);
}

int main(void) {
    const char *dir = getenv("PICOLM_TEST_DATA");
    if (!dir ||
        snprintf(g_path, sizeof(g_path), "%s/models/stories260K.gguf", dir) >=
            (int)sizeof(g_path) ||
        access(g_path, R_OK) != 0) {
        fprintf(stderr, "stories260K.gguf not found under $PICOLM_TEST_DATA: skipping\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_close_round_trips),
        cmocka_unit_test(test_close_burst_in_order),
        cmocka_unit_test(test_kicks_and_stop_with_pending),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
