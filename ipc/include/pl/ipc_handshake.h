/* SPDX-License-Identifier: MIT */
/* The connection handshake on a SOCK_SEQPACKET Unix socket (pl_ipc_handshake_*):
 *   client -> broker  struct pl_ipc_hello (no fds)
 *   broker            reads SO_PEERCRED (+ pidfd), hands it to its caller for a policy verdict
 *   broker -> client  struct pl_ipc_welcome; when OK, SCM_RIGHTS with the region memfd, the
 *                     broker doorbell and the client doorbell (pl/ipc_abi.h has the order)
 * After that the socket carries nothing; it only tells each side when the other hangs up.
 * Every message is checked strictly: exact sizes, no truncation (MSG_TRUNC/MSG_CTRUNC), the
 * right fd count, and any fd the peer sends unasked is closed. */
#ifndef PL_IPC_IPC_HANDSHAKE_H
#define PL_IPC_IPC_HANDSHAKE_H

#include <stdint.h>

#include "pl/ipc_abi.h"

struct pl_ipc_peer;

/* ---- Broker side ---- */

/* Receive the client's hello on sock (blocking or not, as the socket is) and identify the
 * peer. *ret_peer gets the kernel's view of the caller (owned by the caller: release it with
 * pl_ipc_peer_done()). Fds sent along are closed and make the hello invalid.
 * Returns 0; -EAGAIN (non-blocking socket, nothing yet); -PL_ERR_GONE (peer closed before
 * sending); -PL_ERR_PROTOCOL (bad size, truncation, fds, magic, flags or reserved fields);
 * -PL_ERR_VERSION (another major: answer with pl_ipc_handshake_send_reject(...VERSION));
 * or -errno. On error *ret_hello and *ret_peer are untouched. */
int pl_ipc_handshake_recv_hello(int sock, struct pl_ipc_hello *ret_hello,
                                struct pl_ipc_peer *ret_peer);

/* Send the welcome with the three fds (borrowed: the caller keeps and later closes its
 * copies). Returns 0, -PL_ERR_GONE if the peer is gone, -EAGAIN if the socket buffer is full,
 * or -errno. */
int pl_ipc_handshake_send_welcome(int sock, uint64_t session_id, uint64_t region_bytes,
                                  int region_fd, int broker_doorbell_fd, int client_doorbell_fd);

/* Send a refusal (status is not PL_IPC_WELCOME_OK) without fds. Returns like send_welcome,
 * or -EINVAL for status OK or unknown. */
int pl_ipc_handshake_send_reject(int sock, enum pl_ipc_welcome_status status);

/* ---- Client side ---- */

struct pl_ipc_handshake_result {
    uint64_t session_id;
    uint64_t region_bytes;
    uint32_t abi_minor;     /* the broker's */
    int region_fd;          /* owned by the caller: pass to pl_ipc_region_attach() */
    int broker_doorbell_fd; /* owned: ring it to wake the broker */
    int client_doorbell_fd; /* owned: sleep on it */
};

/* Send the hello. Returns 0, -PL_ERR_GONE or -errno. */
int pl_ipc_handshake_send_hello(int sock);

/* Receive the welcome (blocking or not, as the socket is). On success *ret holds three new
 * O_CLOEXEC fds. Returns 0; -EAGAIN; -PL_ERR_GONE (broker closed); -PL_ERR_VERSION,
 * -PL_ERR_DENIED, -PL_ERR_EXHAUSTED, -PL_ERR_QUOTA or -ECONNABORTED (refused with that status);
 * -PL_ERR_PROTOCOL (malformed: size, truncation, fd count) or -errno. */
int pl_ipc_handshake_recv_welcome(int sock, struct pl_ipc_handshake_result *ret);

/* send_hello + recv_welcome on a blocking socket. */
int pl_ipc_handshake_client(int sock, struct pl_ipc_handshake_result *ret);

/* Close the fds in r and reset them to -1. */
void pl_ipc_handshake_result_done(struct pl_ipc_handshake_result *r);

#endif
