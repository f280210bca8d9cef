/* SPDX-License-Identifier: MIT */
/* Unit tests for daemon/spsc.c: argument checks, capacity rounding, FIFO order, the full and
 * empty edges, index wrap-around at 2^32, and a producer and a consumer thread passing a
 * million messages (each pointing at data written before the push) with nothing lost,
 * duplicated, reordered or seen half-written. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "spsc.h"

static uint32_t fill_count(struct pl_daemon_spsc *q) {
    uint32_t n = 0;
    struct pl_daemon_msg m = {.kind = 1};
    while (pl_daemon_spsc_push(q, &m) == 0)
        n++;
    return n;
}

static void test_init_args(void **state) {
    (void)state;
    struct pl_daemon_spsc q;
    assert_int_equal(pl_daemon_spsc_init(&q, 0), -EINVAL);
    assert_int_equal(pl_daemon_spsc_init(&q, (1u << 24) + 1), -EINVAL);
    assert_int_equal(pl_daemon_spsc_init(&q, 1), 0);
    assert_int_equal(fill_count(&q), 1);
    pl_daemon_spsc_done(&q);
    assert_null(q.slots);
    pl_daemon_spsc_done(&q); /* twice is harmless */
}

static void test_capacity_rounds_up(void **state) {
    (void)state;
    static const uint32_t asked[] = {2, 3, 5, 8, 9, 100, 1024, 1025};
    static const uint32_t got[] = {2, 4, 8, 8, 16, 128, 1024, 2048};
    for (size_t i = 0; i < sizeof(asked) / sizeof(asked[0]); i++) {
        struct pl_daemon_spsc q;
        assert_int_equal(pl_daemon_spsc_init(&q, asked[i]), 0);
        assert_true(pl_daemon_spsc_empty(&q));
        assert_int_equal(fill_count(&q), got[i]);
        assert_false(pl_daemon_spsc_empty(&q));
        pl_daemon_spsc_done(&q);
    }
}

static void test_fifo_full_empty(void **state) {
    (void)state;
    struct pl_daemon_spsc q;
    int data[8];
    assert_int_equal(pl_daemon_spsc_init(&q, 8), 0);
    struct pl_daemon_msg m;
    assert_false(pl_daemon_spsc_pop(&q, &m));
    for (uint32_t i = 0; i < 8; i++) {
        struct pl_daemon_msg in = {.kind = i + 1, .arg = 100 + i, .ptr = &data[i]};
        assert_int_equal(pl_daemon_spsc_push(&q, &in), 0);
    }
    struct pl_daemon_msg extra = {.kind = 99};
    assert_int_equal(pl_daemon_spsc_push(&q, &extra), -ENOSPC);
    /* A refused push changed nothing: the eight come out in order, then the late one. */
    for (uint32_t i = 0; i < 8; i++) {
        assert_true(pl_daemon_spsc_pop(&q, &m));
        assert_int_equal(m.kind, i + 1);
        assert_int_equal(m.arg, 100 + i);
        assert_ptr_equal(m.ptr, &data[i]);
        if (i == 0) { /* room for one again after a pop */
            struct pl_daemon_msg late = {.kind = 50};
            assert_int_equal(pl_daemon_spsc_push(&q, &late), 0);
            assert_int_equal(pl_daemon_spsc_push(&q, &extra), -ENOSPC);
        }
    }
    assert_true(pl_daemon_spsc_pop(&q, &m));
    assert_int_equal(m.kind, 50);
    assert_false(pl_daemon_spsc_pop(&q, &m));
    assert_true(pl_daemon_spsc_empty(&q));
    pl_daemon_spsc_done(&q);
}

/* The free-running indices wrap modulo 2^32 without losing the full/empty distinction. */
static void test_index_wrap(void **state) {
    (void)state;
    struct pl_daemon_spsc q;
    assert_int_equal(pl_daemon_spsc_init(&q, 4), 0);
    atomic_store(&q.head, UINT32_MAX - 5);
    atomic_store(&q.tail, UINT32_MAX - 5);
    assert_true(pl_daemon_spsc_empty(&q));
    uint32_t next_in = 0, next_out = 0;
    for (int round = 0; round < 6; round++) {
        struct pl_daemon_msg m = {.kind = 7};
        for (int k = 0; k < 4; k++) {
            m.arg = next_in++;
            assert_int_equal(pl_daemon_spsc_push(&q, &m), 0);
        }
        assert_int_equal(pl_daemon_spsc_push(&q, &m), -ENOSPC);
        for (int k = 0; k < 4; k++) {
            assert_true(pl_daemon_spsc_pop(&q, &m));
            assert_int_equal(m.arg, next_out++);
        }
        assert_false(pl_daemon_spsc_pop(&q, &m));
    }
    assert_true(atomic_load(&q.tail) < 100); /* it did wrap */
    pl_daemon_spsc_done(&q);
}

/* ---- Two threads ---- */

#define DEFAULT_THREAD_MSGS 1000000u

struct payload {
    uint64_t seq;
    uint64_t check; /* seq * a constant: a torn or stale read shows up as a mismatch */
};

struct xfer {
    struct pl_daemon_spsc q;
    uint32_t n;
    struct payload *items; /* [n]: the producer fills item i just before pushing it */
    uint64_t bad;
};

static uint32_t thread_msgs(void) {
    const char *e = getenv("PL_DAEMON_SPSC_MSGS");
    long v = e ? strtol(e, NULL, 10) : 0;
    return v > 0 ? (uint32_t)v : DEFAULT_THREAD_MSGS;
}

static void *producer(void *arg) {
    struct xfer *x = arg;
    for (uint32_t i = 0; i < x->n; i++) {
        x->items[i].seq = i;
        x->items[i].check = (uint64_t)i * 0x9e3779b97f4a7c15ull;
        struct pl_daemon_msg m = {.kind = 1, .arg = i, .ptr = &x->items[i]};
        while (pl_daemon_spsc_push(&x->q, &m) == -ENOSPC)
            sched_yield();
    }
    return NULL;
}

static void *consumer(void *arg) {
    struct xfer *x = arg;
    for (uint32_t want = 0; want < x->n;) {
        struct pl_daemon_msg m;
        if (!pl_daemon_spsc_pop(&x->q, &m)) {
            sched_yield();
            continue;
        }
        const struct payload *p = m.ptr;
        if (m.kind != 1 || m.arg != want || p != &x->items[want] || p->seq != want ||
            p->check != (uint64_t)want * 0x9e3779b97f4a7c15ull)
            x->bad++;
        want++;
    }
    return NULL;
}

static void test_two_threads(void **state) {
    (void)state;
    struct xfer x = {.n = thread_msgs()};
    x.items = calloc(x.n, sizeof(*x.items));
    assert_non_null(x.items);
    assert_int_equal(pl_daemon_spsc_init(&x.q, 64), 0);
    pthread_t a, b;
    assert_int_equal(pthread_create(&b, NULL, consumer, &x), 0);
    assert_int_equal(pthread_create(&a, NULL, producer, &x), 0);
    assert_int_equal(pthread_join(a, NULL), 0);
    assert_int_equal(pthread_join(b, NULL), 0);
    assert_int_equal(x.bad, 0);
    assert_true(pl_daemon_spsc_empty(&x.q));
    pl_daemon_spsc_done(&x.q);
    free(x.items);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_args),       cmocka_unit_test(test_capacity_rounds_up),
        cmocka_unit_test(test_fifo_full_empty), cmocka_unit_test(test_index_wrap),
        cmocka_unit_test(test_two_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
