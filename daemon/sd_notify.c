/* SPDX-License-Identifier: MIT */
/* The sd_notify(3) protocol, self-contained: one datagram of "KEY=VALUE\n..." text to the
 * AF_UNIX socket named by $NOTIFY_SOCKET. The kernel attaches our credentials, which is how
 * systemd knows the message comes from the main process (NotifyAccess=main). */
#include "sd_notify.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "pl/pl_util.h"

/* Longest formatted state pl_daemon_sd_notifyf() sends. */
#define NOTIFY_LINE_MAX 4096

/* The connected socket of pl_daemon_sd_notify_init(); -1 when none. */
static int notify_fd = -1;

/* Turn $NOTIFY_SOCKET into an address. Returns 1 with sa and ret_len filled, 0 when unset or
 * empty, -EAFNOSUPPORT or -EINVAL. */
static int notify_address(struct sockaddr_un *sa, socklen_t *ret_len) {
    const char *e = getenv("NOTIFY_SOCKET");
    if (!e || !e[0])
        return 0;
    size_t len = strlen(e);
    if (e[0] != '/' && e[0] != '@')
        return -EAFNOSUPPORT;
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    if (e[0] == '/') {
        /* A path: NUL-terminated inside sun_path. */
        if (len >= sizeof(sa->sun_path))
            return -EINVAL;
        memcpy(sa->sun_path, e, len);
        *ret_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + 1);
    } else {
        /* Abstract: a leading NUL byte instead of '@'; the name is exactly the rest, with no
         * terminator, and the address length says where it ends. */
        if (len < 2 || len > sizeof(sa->sun_path))
            return -EINVAL;
        sa->sun_path[0] = '\0';
        memcpy(sa->sun_path + 1, e + 1, len - 1);
        *ret_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
    }
    return 1;
}

/* A new datagram socket connected to $NOTIFY_SOCKET in *ret_fd. Returns 1, 0 or -errno. */
static int notify_connect(int *ret_fd) {
    struct sockaddr_un sa;
    socklen_t sa_len = 0;
    int r = notify_address(&sa, &sa_len);
    if (r <= 0)
        return r;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (const struct sockaddr *)&sa, sa_len) < 0) {
        r = -errno;
        pl_close_fd(&fd);
        return r;
    }
    *ret_fd = fd;
    return 1;
}

/* sendmsg(2) rather than send(2): the daemon's seccomp allowlist already has sendmsg (for
 * the welcome's SCM_RIGHTS), and send() is the sendto syscall underneath. */
static int send_state(int fd, const char *state, size_t len) {
    struct iovec iov = {.iov_base = (void *)(uintptr_t)state, .iov_len = len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    ssize_t n;
    do {
        n = sendmsg(fd, &mh, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    return (size_t)n == len ? 1 : -EMSGSIZE;
}

int pl_daemon_sd_notify_init(void) {
    int fd = -1;
    int r = notify_connect(&fd);
    if (r < 0)
        return r;
    pl_close_fd(&notify_fd);
    notify_fd = fd; /* -1 when not supervised */
    return r;
}

int pl_daemon_sd_notify(const char *state) {
    if (!state || !state[0])
        return -EINVAL;
    size_t len = strlen(state);
    if (notify_fd >= 0)
        return send_state(notify_fd, state, len);
    int fd = -1;
    int r = notify_connect(&fd);
    if (r <= 0)
        return r;
    r = send_state(fd, state, len);
    pl_close_fd(&fd);
    return r;
}

int pl_daemon_sd_notifyf(const char *fmt, ...) {
    char line[NOTIFY_LINE_MAX];
    if (!fmt)
        return -EINVAL;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0)
        return -EINVAL;
    if ((size_t)n >= sizeof(line))
        return -EMSGSIZE;
    return pl_daemon_sd_notify(line);
}

void pl_daemon_sd_notify_done(void) {
    pl_close_fd(&notify_fd);
}
