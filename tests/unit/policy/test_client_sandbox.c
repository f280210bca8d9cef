/* SPDX-License-Identifier: MIT */
/* Unit tests for client/src/sandbox.c (picolm_sandbox_enter), built here on top of pl_policy
 * until libpicolm links it: in forked children, a sandboxed process keeps its doorbells (both
 * eventfds), its session socket (recvmsg, poll) and stdout, while open(), socket(), execve()
 * and an unrelated socket fail with EPERM, or kill with PICOLM_SANDBOX_KILL; extras work; bad
 * arguments are refused before anything is confined. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "child.h"
#include "picolm_sandbox.h"

/* A connection's fds as libpicolm holds them: two doorbells and a seqpacket socket (whose
 * peer plays the broker), plus a stream socket that is not picolm's. */
struct fake_conn {
    int broker_bell, client_bell, sock, broker_sock, other_sock[2];
};

static int fake_connect(struct fake_conn *c) {
    int sp[2];
    c->broker_bell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    c->client_bell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (c->broker_bell < 0 || c->client_bell < 0 ||
        socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) != 0 ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, c->other_sock) != 0)
        return -1;
    c->sock = sp[0];
    c->broker_sock = sp[1];
    return 0;
}

static int sandboxed_eperm_child(void) {
    struct fake_conn c;
    if (fake_connect(&c) != 0)
        return 2;
    if (picolm_sandbox_enter(PICOLM_SANDBOX_ERRNO, NULL, 0) != PICOLM_OK)
        return 3;
    errno = 0;
    if (prctl(PR_GET_SECCOMP, 0, 0, 0, 0) >= 0 || errno != EPERM)
        return 4; /* prctl itself is outside the list */
    uint64_t one = 1, v;
    /* doorbells: ring the broker's, drain ours */
    if (write(c.broker_bell, &one, 8) != 8 || write(c.client_bell, &one, 8) != 8 ||
        read(c.client_bell, &v, 8) != 8)
        return 10;
    /* the session socket: the broker hangs up, the client sees it */
    if (close(c.broker_sock) != 0)
        return 11;
    struct pollfd p = {.fd = c.sock, .events = POLLRDHUP};
    if (poll(&p, 1, 1000) != 1)
        return 12;
    char buf[8];
    struct iovec iov = {buf, sizeof(buf)};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (recvmsg(c.sock, &mh, MSG_DONTWAIT) != 0)
        return 13; /* 0: end of file, the call itself was allowed */
    /* not picolm's socket: refused */
    errno = 0;
    if (recvmsg(c.other_sock[0], &mh, MSG_DONTWAIT) >= 0 || errno != EPERM)
        return 14;
    errno = 0;
    if (open("/etc/passwd", O_RDONLY | O_CLOEXEC) >= 0 || errno != EPERM)
        return 15;
    errno = 0;
    if (socket(AF_UNIX, SOCK_SEQPACKET, 0) >= 0 || errno != EPERM)
        return 16;
    char *argv[] = {"/bin/true", NULL};
    char *envp[] = {NULL};
    errno = 0;
    if (execve("/bin/true", argv, envp) == 0 || errno != EPERM)
        return 17;
    if (printf("sandboxed: stdout still works\n") < 0 || fflush(stdout) != 0)
        return 18;
    return 0;
}

static int sandboxed_kill_child(void) {
    struct fake_conn c;
    if (fake_connect(&c) != 0)
        return 2;
    if (picolm_sandbox_enter(PICOLM_SANDBOX_KILL, NULL, 0) != PICOLM_OK)
        return 3;
    uint64_t one = 1;
    if (write(c.broker_bell, &one, 8) != 8)
        return 10;
    (void)open("/etc/passwd", O_RDONLY | O_CLOEXEC);
    return 11;
}

static int sandboxed_extra_child(void) {
    struct fake_conn c;
    if (fake_connect(&c) != 0)
        return 2;
    int extra[] = {SYS_getppid};
    if (picolm_sandbox_enter(PICOLM_SANDBOX_KILL, extra, 1) != PICOLM_OK)
        return 3;
    return syscall(SYS_getppid) > 0 ? 0 : 10;
}

static int bad_arguments_child(void) {
    int bad[] = {-5};
    if (picolm_sandbox_enter(0x80, NULL, 0) != PICOLM_E_INVALID)
        return 10;
    if (picolm_sandbox_enter(0, NULL, 2) != PICOLM_E_INVALID)
        return 11;
    if (picolm_sandbox_enter(0, bad, 1) != PICOLM_E_INVALID)
        return 12;
    if (picolm_sandbox_enter(0, bad, 100000) != PICOLM_E_INVALID)
        return 13;
    /* nothing was confined */
    if (prctl(PR_GET_SECCOMP, 0, 0, 0, 0) != 0)
        return 14;
    int fd = open("/etc/passwd", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 15;
    close(fd);
    return 0;
}

static void test_sandbox_eperm(void **state) {
    (void)state;
    assert_child_ok(sandboxed_eperm_child);
}

static void test_sandbox_kill(void **state) {
    (void)state;
    assert_child_sigsys(sandboxed_kill_child);
    assert_child_ok(sandboxed_extra_child);
}

static void test_sandbox_bad_arguments(void **state) {
    (void)state;
    assert_child_ok(bad_arguments_child);
}

int main(void) {
    if (prctl(PR_GET_SECCOMP, 0, 0, 0, 0) < 0) {
        fprintf(stderr, "seccomp not available: skipping\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sandbox_eperm),
        cmocka_unit_test(test_sandbox_kill),
        cmocka_unit_test(test_sandbox_bad_arguments),
    };
    return cmocka_run_group_tests_name("client_sandbox", tests, NULL, NULL);
}
