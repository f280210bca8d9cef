/* SPDX-License-Identifier: MIT */
/* Unit tests for ipc/src/uring.c: multishot poll on a doorbell, eventfd read, accept on a
 * listening SOCK_SEQPACKET socket, hang-up detection, cancel, timeouts, argument checks, and
 * the futex wait a sleeping broker uses (skipped before Linux 6.7), and the spin that looks for
 * completions without sleeping.
 * Exits 77 (skip) when the kernel has no usable io_uring. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "pl/ipc_doorbell.h"
#include "pl/ipc_region.h"
#include "pl/ipc_ring.h"
#include "pl/ipc_uring.h"
#include "pl/pl_err.h"

static int setup(void **state) {
    struct pl_ipc_uring *u;
    int r = pl_ipc_uring_new(64, &u);
    if (r < 0)
        return -1;
    *state = u;
    return 0;
}

static int teardown(void **state) {
    pl_ipc_uring_free(*state);
    return 0;
}

/* Wait for exactly one event (fails the test on timeout). */
static struct pl_ipc_uring_event one(struct pl_ipc_uring *u) {
    struct pl_ipc_uring_event ev;
    int n = pl_ipc_uring_wait(u, &ev, 1, 5000);
    assert_int_equal(n, 1);
    return ev;
}

static void test_uring_multishot_poll_on_doorbell(void **state) {
    struct pl_ipc_uring *u = *state;
    int fd;
    assert_int_equal(pl_ipc_doorbell_open(&fd), 0);
    assert_int_equal(pl_ipc_uring_poll(u, fd, POLLIN, 11, PL_IPC_URING_MULTISHOT), 0);
    struct pl_ipc_uring_event ev;
    assert_int_equal(pl_ipc_uring_wait(u, &ev, 1, 0), 0); /* nothing yet */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(pl_ipc_doorbell_ring(fd), 0);
        ev = one(u);
        assert_int_equal(ev.tag, 11);
        assert_true(ev.res & POLLIN);
        assert_int_equal(pl_ipc_doorbell_drain(fd), 1);
        if (!(ev.flags & PL_IPC_URING_EV_MORE)) /* one-shot fallback: re-arm */
            assert_int_equal(pl_ipc_uring_poll(u, fd, POLLIN, 11, PL_IPC_URING_MULTISHOT), 0);
    }
    if (pl_ipc_uring_has_multishot_poll(u))
        assert_true(ev.flags & PL_IPC_URING_EV_MORE);
    /* cancel: the registration reports its end */
    assert_int_equal(pl_ipc_uring_cancel(u, 11), 0);
    ev = one(u);
    assert_int_equal(ev.tag, 11);
    assert_int_equal(ev.res, -ECANCELED);
    assert_false(ev.flags & PL_IPC_URING_EV_MORE);
    assert_int_equal(pl_ipc_doorbell_ring(fd), 0);
    assert_int_equal(pl_ipc_uring_wait(u, &ev, 1, 0), 0);
    close(fd);
}

static void test_uring_read_drains_eventfd(void **state) {
    struct pl_ipc_uring *u = *state;
    int fd;
    assert_int_equal(pl_ipc_doorbell_open(&fd), 0);
    uint64_t v = 0;
    assert_int_equal(pl_ipc_uring_read(u, fd, &v, sizeof(v), 5), 0);
    assert_int_equal(pl_ipc_doorbell_ring(fd), 0);
    assert_int_equal(pl_ipc_doorbell_ring(fd), 0);
    struct pl_ipc_uring_event ev = one(u);
    assert_int_equal(ev.tag, 5);
    assert_int_equal(ev.res, 8);
    assert_int_equal(v, 2);
    assert_int_equal(pl_ipc_doorbell_drain(fd), 0); /* the read drained it */
    close(fd);
}

static void test_uring_accepts_and_detects_hangup(void **state) {
    struct pl_ipc_uring *u = *state;
    int lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    assert_true(lfd >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    /* abstract name, unique per process */
    int len = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "picolm-test-uring-%d", getpid());
    socklen_t sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len);
    assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sl), 0);
    assert_int_equal(listen(lfd, 8), 0);
    assert_int_equal(pl_ipc_uring_accept(u, lfd, 1, PL_IPC_URING_MULTISHOT), 0);

    int cfd[2];
    for (int i = 0; i < 2; i++) {
        cfd[i] = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        assert_int_equal(connect(cfd[i], (struct sockaddr *)&sa, sl), 0);
    }
    int sfd[2];
    for (int i = 0; i < 2; i++) {
        struct pl_ipc_uring_event ev = one(u);
        assert_int_equal(ev.tag, 1);
        assert_true(ev.res >= 0);
        sfd[i] = ev.res;
        assert_true(fcntl(sfd[i], F_GETFD) & FD_CLOEXEC);
        assert_true(fcntl(sfd[i], F_GETFL) & O_NONBLOCK);
        if (!(ev.flags & PL_IPC_URING_EV_MORE))
            assert_int_equal(pl_ipc_uring_accept(u, lfd, 1, PL_IPC_URING_MULTISHOT), 0);
    }
    /* hang-up watch on both sessions; only the one whose client leaves fires */
    assert_int_equal(pl_ipc_uring_poll(u, sfd[0], POLLRDHUP, 100, 0), 0);
    assert_int_equal(pl_ipc_uring_poll(u, sfd[1], POLLRDHUP, 101, 0), 0);
    struct pl_ipc_uring_event ev;
    assert_int_equal(pl_ipc_uring_wait(u, &ev, 1, 0), 0);
    close(cfd[1]);
    ev = one(u);
    assert_int_equal(ev.tag, 101);
    assert_true(ev.res & (POLLRDHUP | POLLHUP));
    assert_int_equal(pl_ipc_uring_wait(u, &ev, 1, 10), 0);

    assert_int_equal(pl_ipc_uring_cancel(u, 100), 0);
    assert_int_equal(pl_ipc_uring_cancel(u, 1), 0);
    struct pl_ipc_uring_event evs[4];
    int got = 0;
    while (got < 2) {
        int n = pl_ipc_uring_wait(u, evs + got, 4 - (unsigned)got, 5000);
        assert_true(n > 0);
        got += n;
    }
    for (int i = 0; i < 2; i++)
        assert_int_equal(evs[i].res, -ECANCELED);
    for (int i = 0; i < 2; i++)
        close(sfd[i]);
    close(cfd[0]);
    close(lfd);
}

static void test_uring_rejects_bad_arguments(void **state) {
    struct pl_ipc_uring *u = *state;
    uint64_t v;
    assert_int_equal(pl_ipc_uring_poll(u, -1, POLLIN, 1, 0), -EINVAL);
    assert_int_equal(pl_ipc_uring_poll(u, 0, POLLIN, PL_IPC_URING_TAG_INTERNAL, 0), -EINVAL);
    assert_int_equal(pl_ipc_uring_poll(u, 0, POLLIN, 1, 0x80), -EINVAL);
    assert_int_equal(pl_ipc_uring_read(u, 0, NULL, 8, 1), -EINVAL);
    assert_int_equal(pl_ipc_uring_read(u, -1, &v, 8, 1), -EINVAL);
    assert_int_equal(pl_ipc_uring_accept(u, -1, 1, 0), -EINVAL);
    assert_int_equal(pl_ipc_uring_cancel(u, PL_IPC_URING_TAG_INTERNAL), -EINVAL);
    struct pl_ipc_uring_event ev;
    assert_int_equal(pl_ipc_uring_wait(u, &ev, 0, 0), -EINVAL);
    struct pl_ipc_uring *x;
    assert_int_equal(pl_ipc_uring_new(0, &x), -EINVAL);
    pl_ipc_uring_free(NULL);
}

static void test_uring_many_doorbells_one_wait(void **state) {
    struct pl_ipc_uring *u = *state;
    enum { N = 40 };
    int fds[N];
    for (int i = 0; i < N; i++) {
        assert_int_equal(pl_ipc_doorbell_open(&fds[i]), 0);
        assert_int_equal(pl_ipc_uring_poll(u, fds[i], POLLIN, 1000 + (uint64_t)i, 0), 0);
    }
    for (int i = 0; i < N; i += 3)
        assert_int_equal(pl_ipc_doorbell_ring(fds[i]), 0);
    int seen[N] = {0};
    int total = 0;
    struct pl_ipc_uring_event evs[8];
    while (total < (N + 2) / 3) {
        int n = pl_ipc_uring_wait(u, evs, 8, 5000);
        assert_true(n > 0);
        for (int k = 0; k < n; k++) {
            int i = (int)(evs[k].tag - 1000);
            assert_true(i >= 0 && i < N && i % 3 == 0);
            seen[i]++;
        }
        total += n;
    }
    for (int i = 0; i < N; i++) {
        assert_int_equal(seen[i], i % 3 == 0);
        if (i % 3)
            assert_int_equal(pl_ipc_uring_cancel(u, 1000 + (uint64_t)i), 0);
    }
    total = 0;
    while (total < N - (N + 2) / 3) {
        int n = pl_ipc_uring_wait(u, evs, 8, 5000);
        assert_true(n > 0);
        total += n;
    }
    for (int i = 0; i < N; i++)
        close(fds[i]);
}

/* The broker's futex sleep: prepare on the submission ring, wait through io_uring, and the
 * client's notify wakes it with one FUTEX_WAKE; a word that moved before the wait completes
 * the wait at once. */
static void test_uring_futex_wait_woken_by_notify(void **state) {
    struct pl_ipc_uring *u = *state;
    struct pl_ipc_futex f = {0};
    if (!pl_ipc_uring_has_futex_wait(u)) {
        assert_int_equal(pl_ipc_uring_futex_wait(u, &(struct pl_ipc_futex){.word = (void *)&f}, 1),
                         -PL_ERR_UNSUPPORTED);
        skip();
    }
    struct pl_ipc_region reg = PL_IPC_REGION_INIT;
    assert_int_equal(pl_ipc_region_create(&reg, 4096, 4096, 256), 0);
    struct pl_ipc_ring bsq, bcq, csq, ccq;
    assert_int_equal(pl_ipc_region_rings(&reg, PL_IPC_REGION_BROKER, &bsq, &bcq), 0);
    assert_int_equal(pl_ipc_region_rings(&reg, PL_IPC_REGION_CLIENT, &csq, &ccq), 0);

    assert_int_equal(pl_ipc_ring_sleep_prepare_futex(&bsq, 0, &f), 0);
    assert_int_equal(pl_ipc_uring_futex_wait(u, &f, 11), 0);
    struct pl_ipc_uring_event ev;
    assert_int_equal(pl_ipc_uring_wait(u, &ev, 1, 20), 0); /* armed, asleep: nothing yet */
    assert_int_equal(pl_ipc_ring_push(&csq, 1, "x", 1), 0);
    assert_int_equal(pl_ipc_doorbell_notify(&csq, -1), 0);
    ev = one(u);
    assert_int_equal(ev.tag, 11);
    assert_int_equal(ev.res, 0);
    pl_ipc_ring_sleep_finish(&bsq);

    /* a wait queued with a stale value completes with -EAGAIN */
    f.val ^= 8;
    assert_int_equal(pl_ipc_uring_futex_wait(u, &f, 12), 0);
    ev = one(u);
    assert_int_equal(ev.tag, 12);
    assert_int_equal(ev.res, -EAGAIN);
    assert_int_equal(pl_ipc_uring_futex_wait(u, NULL, 1), -EINVAL);
    pl_ipc_region_done(&reg);
}

/* pl_ipc_uring_spin: it submits what is queued, and what another thread then completes (a
 * futex wait its FUTEX_WAKE ends, else an eventfd read its write satisfies) shows up while
 * this thread spins, without a blocking io_uring_enter. A spin that left the wait unsubmitted
 * would run to its 5 s limit and return 0. */
struct later_wake {
    struct pl_ipc_ring *ring; /* futex path: the client's submission ring, else NULL */
    int fd;                   /* eventfd path */
};

static void *wake_later(void *arg) {
    struct later_wake *w = arg;
    (void)usleep(20000);
    if (w->ring) {
        assert_int_equal(pl_ipc_ring_push(w->ring, 1, "x", 1), 0);
        assert_int_equal(pl_ipc_doorbell_notify(w->ring, -1), 0);
    } else {
        assert_int_equal(pl_ipc_doorbell_ring(w->fd), 0);
    }
    return NULL;
}

static void spin_until_woken(struct pl_ipc_uring *u, struct later_wake *w, uint64_t tag,
                             int32_t want_res) {
    /* Nothing yet: the spin submits the queued wait and gives up after 2 ms. */
    assert_int_equal(pl_ipc_uring_spin(u, 2000000u), 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, wake_later, w), 0);
    int r = pl_ipc_uring_spin(u, 5000000000ull);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(r, 1);
    struct pl_ipc_uring_event ev;
    assert_int_equal(pl_ipc_uring_wait(u, &ev, 1, 0), 1);
    assert_int_equal(ev.tag, tag);
    assert_int_equal(ev.res, want_res);
}

static void test_uring_spin_sees_other_threads_completions(void **state) {
    struct pl_ipc_uring *u = *state;
    assert_int_equal(pl_ipc_uring_spin(NULL, 1), -EINVAL);
    assert_int_equal(pl_ipc_uring_spin(u, 0), 0); /* nothing queued, nothing ready */

    struct later_wake w = {.ring = NULL};
    assert_int_equal(pl_ipc_doorbell_open(&w.fd), 0);
    uint64_t v = 0;
    assert_int_equal(pl_ipc_uring_read(u, w.fd, &v, sizeof(v), 21), 0);
    spin_until_woken(u, &w, 21, 8);
    assert_int_equal(v, 1);
    close(w.fd);

    if (!pl_ipc_uring_has_futex_wait(u))
        return;
    struct pl_ipc_region reg = PL_IPC_REGION_INIT;
    assert_int_equal(pl_ipc_region_create(&reg, 4096, 4096, 256), 0);
    struct pl_ipc_ring bsq, bcq, csq, ccq;
    assert_int_equal(pl_ipc_region_rings(&reg, PL_IPC_REGION_BROKER, &bsq, &bcq), 0);
    assert_int_equal(pl_ipc_region_rings(&reg, PL_IPC_REGION_CLIENT, &csq, &ccq), 0);
    struct pl_ipc_futex f = {0};
    assert_int_equal(pl_ipc_ring_sleep_prepare_futex(&bsq, 0, &f), 0);
    assert_int_equal(pl_ipc_uring_futex_wait(u, &f, 22), 0);
    w.ring = &csq;
    spin_until_woken(u, &w, 22, 0);
    pl_ipc_ring_sleep_finish(&bsq);
    pl_ipc_region_done(&reg);
}

int main(void) {
    struct pl_ipc_uring *probe;
    int r = pl_ipc_uring_new(8, &probe);
    if (r == -PL_ERR_UNSUPPORTED) {
        fprintf(stderr, "io_uring unavailable: %s, skipping\n", pl_strerror(r));
        return 77;
    }
    if (r == 0)
        pl_ipc_uring_free(probe);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_uring_multishot_poll_on_doorbell, setup, teardown),
        cmocka_unit_test_setup_teardown(test_uring_read_drains_eventfd, setup, teardown),
        cmocka_unit_test_setup_teardown(test_uring_accepts_and_detects_hangup, setup, teardown),
        cmocka_unit_test_setup_teardown(test_uring_rejects_bad_arguments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_uring_many_doorbells_one_wait, setup, teardown),
        cmocka_unit_test_setup_teardown(test_uring_futex_wait_woken_by_notify, setup, teardown),
        cmocka_unit_test_setup_teardown(test_uring_spin_sees_other_threads_completions, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
