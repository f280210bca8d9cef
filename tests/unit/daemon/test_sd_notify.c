/* SPDX-License-Identifier: MIT */
/* Unit tests for daemon/sd_notify.c: the datagrams a fake service manager receives on a
 * path socket and on an abstract socket, the not-supervised no-op, and bad addresses. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "sd_notify.h"

/* A fake manager: a bound datagram socket and the $NOTIFY_SOCKET value naming it. */
struct manager {
    int fd;
    char env[sizeof(((struct sockaddr_un *)0)->sun_path) + 2];
    char dir[64];
};

static void manager_open(struct manager *m, bool abstract) {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    socklen_t len;
    m->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    assert_true(m->fd >= 0);
    m->dir[0] = '\0';
    if (abstract) {
        int n = snprintf(m->env, sizeof(m->env), "@pl-test-notify-%ld", (long)getpid());
        assert_true(n > 0);
        memcpy(sa.sun_path + 1, m->env + 1, (size_t)n - 1);
        len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)n);
    } else {
        (void)snprintf(m->dir, sizeof(m->dir), "/tmp/pl-notify-XXXXXX");
        assert_non_null(mkdtemp(m->dir));
        (void)snprintf(m->env, sizeof(m->env), "%s/notify", m->dir);
        strcpy(sa.sun_path, m->env);
        len = (socklen_t)sizeof(sa);
    }
    assert_int_equal(bind(m->fd, (struct sockaddr *)&sa, len), 0);
    assert_int_equal(setenv("NOTIFY_SOCKET", m->env, 1), 0);
}

static void manager_close(struct manager *m) {
    (void)close(m->fd);
    if (m->dir[0]) {
        (void)unlink(m->env);
        (void)rmdir(m->dir);
    }
    (void)unsetenv("NOTIFY_SOCKET");
    pl_daemon_sd_notify_done();
}

/* Receive one datagram as a string; "" when none is waiting. */
static void manager_recv(struct manager *m, char *buf, size_t cap) {
    ssize_t n = recv(m->fd, buf, cap - 1, 0);
    if (n < 0) {
        assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
        n = 0;
    }
    buf[n] = '\0';
}

static void test_unsupervised_is_a_noop(void **state) {
    (void)state;
    (void)unsetenv("NOTIFY_SOCKET");
    assert_int_equal(pl_daemon_sd_notify_init(), 0);
    assert_int_equal(pl_daemon_sd_notify("READY=1"), 0);
    assert_int_equal(setenv("NOTIFY_SOCKET", "", 1), 0);
    assert_int_equal(pl_daemon_sd_notify("READY=1"), 0);
    assert_int_equal(pl_daemon_sd_notify_init(), 0);
    (void)unsetenv("NOTIFY_SOCKET");
}

static void test_path_socket_receives_exact_state(void **state) {
    (void)state;
    struct manager m;
    char buf[256];
    manager_open(&m, false);
    assert_int_equal(pl_daemon_sd_notify("READY=1\nSTATUS=serving"), 1);
    manager_recv(&m, buf, sizeof(buf));
    assert_string_equal(buf, "READY=1\nSTATUS=serving");
    assert_int_equal(pl_daemon_sd_notifyf("STATUS=%u sessions", 3u), 1);
    manager_recv(&m, buf, sizeof(buf));
    assert_string_equal(buf, "STATUS=3 sessions");
    manager_close(&m);
}

static void test_abstract_socket_receives_state(void **state) {
    (void)state;
    struct manager m;
    char buf[256];
    manager_open(&m, true);
    assert_int_equal(pl_daemon_sd_notify("STOPPING=1"), 1);
    manager_recv(&m, buf, sizeof(buf));
    assert_string_equal(buf, "STOPPING=1");
    manager_close(&m);
}

/* After init the socket stays connected: the environment may change or vanish (as after a
 * privilege drop and a seccomp filter that forbids socket()) and sends still arrive. */
static void test_init_keeps_connection(void **state) {
    (void)state;
    struct manager m;
    char buf[256];
    manager_open(&m, false);
    assert_int_equal(pl_daemon_sd_notify_init(), 1);
    (void)unsetenv("NOTIFY_SOCKET");
    assert_int_equal(pl_daemon_sd_notify("READY=1"), 1);
    manager_recv(&m, buf, sizeof(buf));
    assert_string_equal(buf, "READY=1");
    pl_daemon_sd_notify_done();
    assert_int_equal(pl_daemon_sd_notify("READY=1"), 0); /* closed and unset: no-op */
    manager_close(&m);
}

static void test_bad_addresses_and_states_refused(void **state) {
    (void)state;
    char longpath[200];
    memset(longpath, 'a', sizeof(longpath) - 1);
    longpath[0] = '/';
    longpath[sizeof(longpath) - 1] = '\0';

    assert_int_equal(setenv("NOTIFY_SOCKET", "relative/path", 1), 0);
    assert_int_equal(pl_daemon_sd_notify("READY=1"), -EAFNOSUPPORT);
    assert_int_equal(setenv("NOTIFY_SOCKET", "vsock:2:1234", 1), 0);
    assert_int_equal(pl_daemon_sd_notify_init(), -EAFNOSUPPORT);
    assert_int_equal(setenv("NOTIFY_SOCKET", longpath, 1), 0);
    assert_int_equal(pl_daemon_sd_notify("READY=1"), -EINVAL);
    assert_int_equal(setenv("NOTIFY_SOCKET", "@", 1), 0);
    assert_int_equal(pl_daemon_sd_notify("READY=1"), -EINVAL);
    /* Nobody listens there. */
    assert_int_equal(setenv("NOTIFY_SOCKET", "/nonexistent-pl-dir/notify", 1), 0);
    assert_int_equal(pl_daemon_sd_notify("READY=1"), -ENOENT);
    assert_int_equal(pl_daemon_sd_notify(NULL), -EINVAL);
    assert_int_equal(pl_daemon_sd_notify(""), -EINVAL);
    (void)unsetenv("NOTIFY_SOCKET");
}

static void test_overlong_formatted_state_refused(void **state) {
    (void)state;
    struct manager m;
    char buf[64];
    char big[5000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    manager_open(&m, false);
    assert_int_equal(pl_daemon_sd_notifyf("STATUS=%s", big), -EMSGSIZE);
    manager_recv(&m, buf, sizeof(buf));
    assert_string_equal(buf, ""); /* nothing half-sent */
    manager_close(&m);
}

/* The manager went away after init: the error is reported, not swallowed. */
static void test_vanished_manager_reports_error(void **state) {
    (void)state;
    struct manager m;
    manager_open(&m, false);
    assert_int_equal(pl_daemon_sd_notify_init(), 1);
    manager_close(&m); /* closes the manager's socket and the notify socket */
    manager_open(&m, false);
    assert_int_equal(pl_daemon_sd_notify_init(), 1);
    (void)close(m.fd);
    m.fd = -1;
    assert_int_equal(pl_daemon_sd_notify("READY=1"), -ECONNREFUSED);
    (void)unlink(m.env);
    (void)rmdir(m.dir);
    (void)unsetenv("NOTIFY_SOCKET");
    pl_daemon_sd_notify_done();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unsupervised_is_a_noop),
        cmocka_unit_test(test_path_socket_receives_exact_state),
        cmocka_unit_test(test_abstract_socket_receives_state),
        cmocka_unit_test(test_init_keeps_connection),
        cmocka_unit_test(test_bad_addresses_and_states_refused),
        cmocka_unit_test(test_overlong_formatted_state_refused),
        cmocka_unit_test(test_vanished_manager_reports_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
