/* SPDX-License-Identifier: MIT */
/* Who is on the other end of a Unix socket (pl_ipc_peer_*): the kernel's SO_PEERCRED view,
 * plus a pidfd for the peer process where the kernel can give one, and hang-up detection.
 * Identity never comes from message contents. Deciding what an identity may do is policy's
 * job, not ipc's: these calls only report. */
#ifndef PL_IPC_IPC_PEER_H
#define PL_IPC_IPC_PEER_H

#include <stdint.h>

struct pl_ipc_peer {
    int32_t pid; /* as of connect() time (SO_PEERCRED) */
    uint32_t uid;
    uint32_t gid;
    int pidfd;       /* owned; -1 when the kernel offers none */
    int pidfd_exact; /* 1: from SO_PEERPIDFD (the connecting process itself); 0: pidfd_open(pid)
                        after the fact (pid reuse is possible in theory); -1 none */
};

#define PL_IPC_PEER_INIT                                                                           \
    { .pid = 0, .uid = 0, .gid = 0, .pidfd = -1, .pidfd_exact = -1 }

/* Fill *ret from the connected Unix socket sock. Returns 0, -ENOTCONN/-ENOTSOCK/-errno, or
 * -PL_ERR_GONE if the peer's credentials are unavailable. */
int pl_ipc_peer_from_socket(int sock, struct pl_ipc_peer *ret);

/* Close the pidfd. Accepts a peer initialised with PL_IPC_PEER_INIT. */
void pl_ipc_peer_done(struct pl_ipc_peer *p);

/* Has the peer hung up (closed, shut down its write side, or errored)? Never blocks.
 * Returns 1 (gone), 0 (still there) or -errno. Unread data on the socket does not count. */
int pl_ipc_peer_hung_up(int sock);

#endif
