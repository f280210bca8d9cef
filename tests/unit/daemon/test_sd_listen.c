/* SPDX-License-Identifier: MIT */
/* Unit tests for daemon/sd_listen.c: the environment checks of socket activation and the
 * matching of inherited sockets by type and bound path. The "inherited" sockets are made by
 * the test itself and moved to fds 3, 4, ... as systemd would pass them. */
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

#include "sd_listen.h"

static char dir[64];

static void set_listen_env(const char *pid, const char *fds) {
    if (pid)
        assert_int_equal(setenv("LISTEN_PID", pid, 1), 0);
    else
        (void)unsetenv("LISTEN_PID");
    if (fds)
        assert_int_equal(setenv("LISTEN_FDS", fds, 1), 0);
    else
        (void)unsetenv("LISTEN_FDS");
}

static void set_own_pid(const char *fds) {
    char pid[32];
    (void)snprintf(pid, sizeof(pid), "%ld", (long)getpid());
    set_listen_env(pid, fds);
}

/* A socket of type bound to dir/name, listening if listen_too, placed at fd target
 * (without FD_CLOEXEC, as an exec'd process receives it). */
static void make_socket_at(int target, int type, const char *name, bool listen_too) {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, type, 0);
    assert_true(fd >= 0);
    (void)snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", dir, name);
    (void)unlink(sa.sun_path);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    if (listen_too)
        assert_int_equal(listen(fd, 4), 0);
    if (fd != target) {
        assert_int_equal(dup2(fd, target), target);
        (void)close(fd);
    }
}

static void path_of(const char *name, char *buf, size_t cap) {
    (void)snprintf(buf, cap, "%s/%s", dir, name);
}

static int setup(void **state) {
    (void)state;
    (void)snprintf(dir, sizeof(dir), "/tmp/pl-listen-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    /* Keep fds 3..6 for the test's "inherited" sockets. */
    for (int fd = 3; fd <= 6; fd++)
        (void)close(fd);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    const char *names[] = {"client.sock", "admin.sock", "dgram.sock", "idle.sock"};
    char p[128];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        path_of(names[i], p, sizeof(p));
        (void)unlink(p);
    }
    (void)rmdir(dir);
    return 0;
}

static void test_not_activated_without_environment(void **state) {
    (void)state;
    set_listen_env(NULL, NULL);
    assert_int_equal(pl_daemon_sd_listen_fds(), 0);
    set_listen_env(NULL, "2");
    assert_int_equal(pl_daemon_sd_listen_fds(), 0);
    assert_null(getenv("LISTEN_FDS"));
}

/* Variables inherited from a parent (another pid) are not ours: ignored and removed. */
static void test_other_pid_ignored_and_cleared(void **state) {
    (void)state;
    char pid[32];
    (void)snprintf(pid, sizeof(pid), "%ld", (long)getpid() + 1);
    set_listen_env(pid, "2");
    assert_int_equal(setenv("LISTEN_FDNAMES", "a:b", 1), 0);
    assert_int_equal(pl_daemon_sd_listen_fds(), 0);
    assert_null(getenv("LISTEN_PID"));
    assert_null(getenv("LISTEN_FDS"));
    assert_null(getenv("LISTEN_FDNAMES"));
}

static void test_malformed_environment_refused(void **state) {
    (void)state;
    set_listen_env("12x", "1");
    assert_int_equal(pl_daemon_sd_listen_fds(), -EINVAL);
    set_own_pid("-1");
    assert_int_equal(pl_daemon_sd_listen_fds(), -EINVAL);
    set_own_pid(" 1");
    assert_int_equal(pl_daemon_sd_listen_fds(), -EINVAL);
    set_own_pid("99999999999999999999");
    assert_int_equal(pl_daemon_sd_listen_fds(), -EINVAL);
    set_own_pid("17"); /* above PL_DAEMON_SD_LISTEN_FDS_MAX */
    assert_int_equal(pl_daemon_sd_listen_fds(), -EINVAL);
    set_own_pid("");
    assert_int_equal(pl_daemon_sd_listen_fds(), -EINVAL);
    assert_null(getenv("LISTEN_PID"));
}

static void test_announced_fd_must_be_open(void **state) {
    (void)state;
    make_socket_at(3, SOCK_SEQPACKET, "client.sock", true);
    (void)close(4);
    set_own_pid("2");
    assert_int_equal(pl_daemon_sd_listen_fds(), -EBADF);
    (void)close(3);
}

static void test_sockets_taken_and_found_by_path(void **state) {
    (void)state;
    char client[128], admin[128], dgram[128], idle[128];
    path_of("client.sock", client, sizeof(client));
    path_of("admin.sock", admin, sizeof(admin));
    path_of("dgram.sock", dgram, sizeof(dgram));
    path_of("idle.sock", idle, sizeof(idle));
    /* Order as a unit lists them: admin first, so the lookup cannot rely on position. */
    make_socket_at(3, SOCK_SEQPACKET, "admin.sock", true);
    make_socket_at(4, SOCK_SEQPACKET, "client.sock", true);
    make_socket_at(5, SOCK_DGRAM, "dgram.sock", false);
    make_socket_at(6, SOCK_SEQPACKET, "idle.sock", false); /* bound, not listening */
    set_own_pid("4");
    assert_int_equal(pl_daemon_sd_listen_fds(), 4);
    for (int fd = 3; fd <= 6; fd++)
        assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    assert_null(getenv("LISTEN_PID"));

    assert_int_equal(pl_daemon_sd_listen_find(4, SOCK_SEQPACKET, client), 4);
    assert_int_equal(pl_daemon_sd_listen_find(4, SOCK_SEQPACKET, admin), 3);
    assert_int_equal(pl_daemon_sd_listen_find(4, SOCK_STREAM, client), -ENOENT);
    assert_int_equal(pl_daemon_sd_listen_find(4, SOCK_DGRAM, dgram), -ENOENT);
    assert_int_equal(pl_daemon_sd_listen_find(4, SOCK_SEQPACKET, idle), -ENOENT);
    /* A prefix of a bound path is not that path. */
    char prefix[128];
    (void)snprintf(prefix, sizeof(prefix), "%s/client", dir);
    assert_int_equal(pl_daemon_sd_listen_find(4, SOCK_SEQPACKET, prefix), -ENOENT);
    /* Only the announced fds are looked at. */
    assert_int_equal(pl_daemon_sd_listen_find(1, SOCK_SEQPACKET, client), -ENOENT);
    assert_int_equal(pl_daemon_sd_listen_find(0, SOCK_SEQPACKET, admin), -ENOENT);

    assert_int_equal(pl_daemon_sd_listen_find(-1, SOCK_SEQPACKET, client), -EINVAL);
    assert_int_equal(pl_daemon_sd_listen_find(4, SOCK_SEQPACKET, NULL), -EINVAL);
    assert_int_equal(pl_daemon_sd_listen_find(4, SOCK_SEQPACKET, "relative.sock"), -EINVAL);
    for (int fd = 3; fd <= 6; fd++)
        (void)close(fd);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_not_activated_without_environment),
        cmocka_unit_test(test_other_pid_ignored_and_cleared),
        cmocka_unit_test(test_malformed_environment_refused),
        cmocka_unit_test(test_announced_fd_must_be_open),
        cmocka_unit_test(test_sockets_taken_and_found_by_path),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
