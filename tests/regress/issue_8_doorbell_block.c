/* SPDX-License-Identifier: MIT */
/* Regression (issue 8, doorbell denial of service): the doorbells are eventfds shared between
 * the broker and a client, and O_NONBLOCK lives on the open file description both hold. A
 * client could clear it and then (a) saturate its own doorbell's counter, so that the broker's
 * next write(2) to it blocked the inference thread forever, or (b) drain the broker doorbell
 * right after ringing it, so that the event thread's draining read(2) blocked forever: every
 * other client stalled with it. Now the broker wakes clients only with FUTEX_WAKE and waits for
 * them only through io_uring. Here a hostile client does all of that (both eventfds blocking,
 * its counter saturated, eventfd wake-ups asked for with a fresh sleep number over and over,
 * the broker doorbell rung and drained, a flood of FUTEX_WAKEs on every shared word, streams
 * it never reads) while a well-behaved client streams. Pass: the good stream completes, the
 * broker answers admin status and serves a new client during the attack, and once the hostile
 * client is gone nothing of it stays (no session, no KV). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "daemon_harness.h"
#include "pl/ipc_abi.h"
#include "pl_test_client.h"

#define STREAM_TOKENS 64

static char model[4096];
static struct pl_test_daemon daemon_;
static pid_t hostile = -1;

static int teardown(void **state) {
    (void)state;
    if (hostile > 0) {
        (void)kill(hostile, SIGKILL);
        (void)waitpid(hostile, NULL, 0);
        hostile = -1;
    }
    /* A broker stuck in a syscall would not stop on SIGTERM (the pre-fix one did not). */
    if (daemon_.pid > 0)
        pl_test_daemon_kill(&daemon_);
    pl_test_daemon_done(&daemon_);
    return 0;
}

/* ---- The hostile client (a child process) ---- */

static void on_alarm(int sig) {
    (void)sig; /* only interrupts a blocking read (no SA_RESTART) */
}

static int clear_nonblock(int fd) {
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
}

static void futex_wake_all(_Atomic uint32_t *word) {
    (void)syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Connects, makes both eventfds blocking, saturates its own, submits streams it never reads,
 * tells the parent (one byte on ready_fd), then attacks until killed. */
static void hostile_main(const char *dir, int ready_fd) {
    struct pl_test_client c;
    if (pl_test_client_connect(dir, &c) < 0)
        _exit(2);
    uint64_t v;
    if (read(c.db_broker, &v, sizeof(v)) < 0 && errno != EAGAIN) /* still non-blocking */
        _exit(3);
    uint64_t max = 0xfffffffffffffffeull; /* the largest count an eventfd holds */
    if (write(c.db_client, &max, sizeof(max)) != (ssize_t)sizeof(max))
        _exit(3);
    if (clear_nonblock(c.db_broker) < 0 || clear_nonblock(c.db_client) < 0)
        _exit(4);
    for (uint64_t id = 1; id <= 4; id++)
        if (pl_test_client_generate(&c, id, NULL, 0, "Once upon a time", 200, true, true) < 0)
            _exit(5);

    struct sigaction sa = {.sa_handler = on_alarm};
    (void)sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {.it_interval = {0, 2000}, .it_value = {0, 2000}};
    (void)setitimer(ITIMER_REAL, &it, NULL);
    char one_byte = 1;
    if (write(ready_fd, &one_byte, 1) != 1)
        _exit(6);

    uint32_t seq = 0;
    for (;;) {
        /* (a) "ring my eventfd", with a sleep number the broker has not woken yet */
        if (++seq == 0)
            seq = 1;
        atomic_store(&c.cq.ctrl->cons_sleep_seq, seq);
        atomic_store(&c.cq.ctrl->cons_flags, PL_IPC_RING_NEED_WAKEUP);
        atomic_store(&c.sq.ctrl->prod_sleep_seq, seq);
        atomic_store(&c.sq.ctrl->prod_flags, PL_IPC_RING_NEED_WAKEUP);
        /* (b) ring the broker doorbell and take the count back before the broker reads it
         * (a blocking read: the timer interrupts it when the broker was faster) */
        uint64_t one = 1;
        if (write(c.db_broker, &one, sizeof(one)) == (ssize_t)sizeof(one) &&
            read(c.db_broker, &v, sizeof(v)) < 0 && errno != EINTR)
            _exit(7);
        /* a flood of wake-ups on every word the broker may wait on */
        for (int k = 0; k < 16; k++) {
            futex_wake_all(&c.sq.ctrl->prod);
            futex_wake_all(&c.cq.ctrl->cons);
            futex_wake_all(&c.sq.ctrl->cons);
            futex_wake_all(&c.cq.ctrl->prod);
        }
    }
}

/* ---- Checks with a deadline (a broker stuck in a syscall never answers) ---- */

/* Run admin status in a child; 0 if it answered within timeout_ms. */
static int status_within(const struct pl_test_daemon *d, int timeout_ms) {
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        uint32_t sessions = 0;
        _exit(pl_test_daemon_status(d, &sessions, NULL) == 0 ? 0 : 1);
    }
    uint64_t t0 = pl_test_now_ms();
    for (;;) {
        int st;
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid)
            return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EIO;
        if (pl_test_now_ms() - t0 > (uint64_t)timeout_ms) {
            (void)kill(pid, SIGKILL);
            (void)waitpid(pid, NULL, 0);
            return -ETIMEDOUT;
        }
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
}

static void test_hostile_eventfds_do_not_block_the_broker(void **state) {
    (void)state;
    struct pl_test_daemon *d = &daemon_;
    assert_int_equal(pl_test_daemon_start(d, model, NULL), 0);

    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    hostile = fork();
    assert_true(hostile >= 0);
    if (hostile == 0) {
        (void)close(pfd[0]);
        hostile_main(d->dir, pfd[1]);
    }
    (void)close(pfd[1]);
    char b;
    assert_int_equal(read(pfd[0], &b, 1), 1); /* the attack is under way */
    (void)close(pfd[0]);

    /* A well-behaved client streams to its end meanwhile. */
    struct pl_test_client good;
    assert_int_equal(pl_test_client_connect(d->dir, &good), 0);
    static struct pl_test_result r;
    assert_int_equal(
        pl_test_client_generate(&good, 7, NULL, 0, "Once upon a time", STREAM_TOKENS, true, true),
        0);
    assert_int_equal(pl_test_client_collect(&good, 7, &r, 20000, NULL, NULL), 0);
    assert_int_equal(r.n_ids, STREAM_TOKENS);
    assert_int_equal(r.error_code, 0);

    /* The event thread answers admin requests and handshakes, still during the attack. */
    assert_int_equal(status_within(d, 5000), 0);
    struct pl_test_client late;
    assert_int_equal(pl_test_client_connect(d->dir, &late), 0);
    assert_int_equal(pl_test_client_generate(&late, 8, NULL, 0, "Once", 4, true, true), 0);
    assert_int_equal(pl_test_client_collect(&late, 8, &r, 20000, NULL, NULL), 0);
    assert_int_equal(r.n_ids, 4);
    assert_int_equal(pl_test_daemon_alive(d), 1);

    /* The hostile client goes: its session and KV go with it. */
    (void)kill(hostile, SIGKILL);
    (void)waitpid(hostile, NULL, 0);
    hostile = -1;
    pl_test_client_close(&good);
    pl_test_client_close(&late);
    assert_int_equal(pl_test_daemon_wait_idle(d, 5000), 0);
    assert_int_equal(status_within(d, 5000), 0);
    assert_int_equal(pl_test_daemon_stop(d), 0);
}

int main(void) {
    if (pl_test_model_path("stories260K.gguf", model, sizeof(model)) < 0)
        return 77;
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_hostile_eventfds_do_not_block_the_broker, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
