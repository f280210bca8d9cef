/* SPDX-License-Identifier: MIT */
/* picolm_sandbox_enter(): libpicolm's client sandbox. Finds the fds talking to the broker
 * needs (doorbell eventfds, picolm's SOCK_SEQPACKET session sockets) in /proc/self/fd, builds
 * policy's client filter around them (pl_policy_seccomp_client) and loads it for every
 * thread. Called by applications after picolm_connect(). */
#include "picolm_sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pl/pl_util.h"
#include "pl/policy_seccomp.h"

/* Is fd one of picolm's session sockets (AF_UNIX, SOCK_SEQPACKET)? */
static bool is_seqpacket_unix(int fd) {
    int v = 0;
    socklen_t len = sizeof(v);
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &len) < 0 || v != AF_UNIX)
        return false;
    len = sizeof(v);
    return getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &len) == 0 && v == SOCK_SEQPACKET;
}

/* Collect eventfds and AF_UNIX SOCK_SEQPACKET sockets. Returns the count, -E2BIG when there
 * are more than max, or -errno. */
static int collect_io_fds(int *fds, size_t max) {
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -errno;
    int self = dirfd(d);
    size_t n = 0;
    int r = 0;
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            if (errno != 0)
                r = -errno;
            break;
        }
        char *end;
        long fd = strtol(de->d_name, &end, 10);
        if (de->d_name[0] < '0' || de->d_name[0] > '9' || *end != '\0' || fd == self || fd < 0 ||
            fd > INT32_MAX)
            continue;
        char target[64];
        ssize_t len = readlinkat(self, de->d_name, target, sizeof(target) - 1);
        if (len < 0)
            continue; /* closed meanwhile (another thread): nothing to allow */
        target[len] = '\0';
        bool io = strcmp(target, "anon_inode:[eventfd]") == 0 ||
                  (strncmp(target, "socket:[", 8) == 0 && is_seqpacket_unix((int)fd));
        if (!io)
            continue;
        if (n == max) {
            r = -E2BIG;
            break;
        }
        fds[n++] = (int)fd;
    }
    (void)closedir(d);
    return r < 0 ? r : (int)n;
}

PL_EXPORT int picolm_sandbox_enter(unsigned flags, const int *extra_syscalls, size_t n_extra) {
    if ((flags & ~PICOLM_SANDBOX_KILL) || (n_extra > 0 && !extra_syscalls) ||
        n_extra > PL_POLICY_SECCOMP_MAX_EXTRA)
        return PICOLM_E_INVALID;
    int io[PL_POLICY_SECCOMP_MAX_IO_FDS];
    int n_io = collect_io_fds(io, PL_ARRAY_SIZE(io));
    if (n_io == -E2BIG)
        return PICOLM_E_UNSUPPORTED;
    if (n_io < 0) {
        errno = -n_io;
        return n_io == -ENOMEM ? PICOLM_E_NOMEM : PICOLM_E_SYSTEM;
    }
    unsigned pflags = (flags & PICOLM_SANDBOX_KILL) ? PL_POLICY_SECCOMP_CLIENT_KILL : 0;
    scmp_filter_ctx f = NULL;
    int r = pl_policy_seccomp_client(pflags, extra_syscalls, n_extra, io, (size_t)n_io, &f);
    if (r == -EINVAL)
        return PICOLM_E_INVALID;
    if (r == -ENOMEM)
        return PICOLM_E_NOMEM;
    if (r < 0) {
        errno = -r;
        return PICOLM_E_SYSTEM;
    }
    r = seccomp_load(f);
    seccomp_release(f);
    if (r < 0) {
        errno = -r;
        /* EINVAL/ENOSYS from the kernel: no seccomp filter support (CONFIG_SECCOMP_FILTER). */
        return (r == -EINVAL || r == -ENOSYS) ? PICOLM_E_UNSUPPORTED : PICOLM_E_SYSTEM;
    }
    return PICOLM_OK;
}
