/* SPDX-License-Identifier: MIT */
/* Peer identity and liveness on Unix sockets (pl_ipc_peer_*), used by the handshake and by the
 * broker's session code. */
#include "pl/ipc_peer.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pl/pl_err.h"
#include "pl/pl_util.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77 /* Linux 6.5 */
#endif

int pl_ipc_peer_from_socket(int sock, struct pl_ipc_peer *ret) {
    if (sock < 0 || !ret)
        return -EINVAL;
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
        return -errno;
    if (len != sizeof(cred) || cred.pid <= 0)
        return -PL_ERR_GONE; /* e.g. a socketpair end whose peer has no credentials recorded */

    struct pl_ipc_peer p = PL_IPC_PEER_INIT;
    p.pid = cred.pid;
    p.uid = cred.uid;
    p.gid = cred.gid;

    /* Preferred: the kernel's pidfd of the very process that connected (no pid-reuse race). */
    int pidfd = -1;
    len = sizeof(pidfd);
    if (getsockopt(sock, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) == 0 && len == sizeof(pidfd) &&
        pidfd >= 0) {
        p.pidfd = pidfd;
        p.pidfd_exact = 1;
    } else {
        /* Older kernels: open one by pid; flagged as inexact. ESRCH (already exited) and
         * ENOSYS leave the peer without a pidfd, which is not an error here. */
        long fd = syscall(SYS_pidfd_open, (pid_t)cred.pid, 0);
        if (fd >= 0) {
            p.pidfd = (int)fd;
            p.pidfd_exact = 0;
        }
    }
    *ret = p;
    return 0;
}

void pl_ipc_peer_done(struct pl_ipc_peer *p) {
    if (!p)
        return;
    pl_close_fd(&p->pidfd);
    p->pidfd_exact = -1;
}

int pl_ipc_peer_hung_up(int sock) {
    struct pollfd pfd = {.fd = sock, .events = POLLRDHUP};
    int n;
    do {
        n = poll(&pfd, 1, 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    if (pfd.revents & POLLNVAL)
        return -EBADF;
    return (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR)) ? 1 : 0;
}
