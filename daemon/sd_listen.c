/* SPDX-License-Identifier: MIT */
/* The sd_listen_fds(3) protocol, self-contained. The environment is checked strictly: a
 * LISTEN_PID that is not ours means the variables were inherited from a parent and are not
 * meant for us, so they are ignored (and removed). */
#include "sd_listen.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

/* Strict decimal: digits only, no sign, no blanks, no overflow past max. */
static bool parse_dec(const char *s, uint64_t max, uint64_t *ret) {
    uint64_t v = 0;
    if (!s || !*s)
        return false;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return false;
        uint64_t d = (uint64_t)(*s - '0');
        if (v > (max - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *ret = v;
    return true;
}

static void unset_all(void) {
    (void)unsetenv("LISTEN_PID");
    (void)unsetenv("LISTEN_FDS");
    (void)unsetenv("LISTEN_FDNAMES");
}

int pl_daemon_sd_listen_fds(void) {
    const char *pid_s = getenv("LISTEN_PID");
    const char *fds_s = getenv("LISTEN_FDS");
    uint64_t pid = 0, n = 0;
    int r;

    if (!pid_s || !fds_s) {
        r = 0;
        goto out;
    }
    if (!parse_dec(pid_s, INT32_MAX, &pid)) {
        r = -EINVAL;
        goto out;
    }
    if ((pid_t)pid != getpid()) {
        r = 0;
        goto out;
    }
    if (!parse_dec(fds_s, PL_DAEMON_SD_LISTEN_FDS_MAX, &n)) {
        r = -EINVAL;
        goto out;
    }
    for (int fd = PL_DAEMON_SD_LISTEN_FDS_START; fd < PL_DAEMON_SD_LISTEN_FDS_START + (int)n;
         fd++) {
        int flags = fcntl(fd, F_GETFD);
        if (flags < 0) {
            r = -EBADF;
            goto out;
        }
        if (!(flags & FD_CLOEXEC) && fcntl(fd, F_SETFD, flags | FD_CLOEXEC) < 0) {
            r = -errno;
            goto out;
        }
    }
    r = (int)n;
out:
    unset_all();
    return r;
}

/* Is fd a listening AF_UNIX socket of sock_type bound to path? */
static bool fd_matches(int fd, int sock_type, const char *path, size_t path_len) {
    int type = 0, listening = 0;
    socklen_t len = sizeof(type);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != sock_type)
        return false;
    len = sizeof(listening);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) < 0 || !listening)
        return false;
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    len = sizeof(sa);
    if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0 || sa.sun_family != AF_UNIX)
        return false;
    size_t off = offsetof(struct sockaddr_un, sun_path);
    if (len <= off)
        return false;
    /* The kernel reports a path address with its terminating NUL (when there was room). */
    size_t got = strnlen(sa.sun_path, (size_t)len - off);
    return got == path_len && memcmp(sa.sun_path, path, path_len) == 0;
}

int pl_daemon_sd_listen_find(int n, int sock_type, const char *path) {
    if (n < 0 || n > PL_DAEMON_SD_LISTEN_FDS_MAX || !path || path[0] != '/')
        return -EINVAL;
    size_t path_len = strlen(path);
    if (path_len >= sizeof(((struct sockaddr_un *)0)->sun_path))
        return -EINVAL;
    for (int fd = PL_DAEMON_SD_LISTEN_FDS_START; fd < PL_DAEMON_SD_LISTEN_FDS_START + n; fd++)
        if (fd_matches(fd, sock_type, path, path_len))
            return fd;
    return -ENOENT;
}
