/* SPDX-License-Identifier: MIT */
/* One libpicolm connection to picolmd (pl_client_conn_*): the SOCK_SEQPACKET socket, the
 * shared region with its two rings, the two doorbells, and the waiting policy (spin, then
 * sleep on a futex or the doorbell while watching the socket for the broker's death). It
 * moves records; libpicolm.c gives them meaning. Private to client/. */
#ifndef PL_CLIENT_CONN_H
#define PL_CLIENT_CONN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pl/ipc_region.h"
#include "pl/ipc_ring.h"

struct ProtobufCMessage;

struct pl_client_conn {
    int sock;                    /* SOCK_SEQPACKET to the broker (owned) */
    int broker_fd;               /* broker doorbell: we ring it (owned) */
    int client_fd;               /* our doorbell: we sleep on it (owned) */
    struct pl_ipc_region region; /* the mapped memfd (owned) */
    struct pl_ipc_ring sq;       /* producer end, guarded by sq_lock */
    struct pl_ipc_ring cq;       /* consumer end, owner thread only */
    pthread_mutex_t sq_lock;     /* submissions may come from any thread (picolm_cancel) */
    bool lock_ready;
    _Atomic bool gone; /* the broker hung up (sticky; any thread may see it) */
    uint64_t session_id;
    uint64_t spin_ns;
    uint32_t spin_misses; /* waits in a row whose spin ended without a completion */
    uint32_t spin_skips;  /* waits that skipped the spin since it last missed */
    int timeout_ms;       /* -1: no bound */
    uint8_t *rx;          /* private copy of the record being decoded */
    uint32_t rx_cap;
};

/* Connect to the broker at path, handshake, attach the region and rings. c is caller-owned
 * storage. On failure c is left closed (pl_client_conn_close() is still safe) and err gets a
 * message. Returns 0; -EINVAL (path empty or too long); -ENOENT, -ECONNREFUSED, -ENOTSOCK,
 * -EACCES... from connect; -ETIMEDOUT (no welcome within the handshake timeout);
 * -PL_ERR_GONE, -PL_ERR_VERSION, -PL_ERR_DENIED, -PL_ERR_EXHAUSTED, -ECONNABORTED,
 * -PL_ERR_PROTOCOL from the handshake and region checks; -ENOMEM or -errno. */
int pl_client_conn_open(struct pl_client_conn *c, const char *path, char *err, size_t err_len);

/* Release everything. Safe on a zeroed, failed or already closed conn. */
void pl_client_conn_close(struct pl_client_conn *c);

/* Encode msg as one record of type into the submission ring (packed in place: zero copy) and
 * ring the broker if it sleeps. When the ring is full: if may_wait, returns -EAGAIN so that
 * the owner thread can drain completions and call pl_client_conn_wait(c, size); otherwise it
 * polls for room (up to the timeout, or 5 s when there is none). *ret_need (may be NULL)
 * receives the payload size on -EAGAIN. Returns 0, -EAGAIN, -EMSGSIZE (too large for one
 * record), -PL_ERR_GONE, -PL_ERR_PROTOCOL, -ETIMEDOUT or -errno. Thread-safe. */
int pl_client_conn_send(struct pl_client_conn *c, uint32_t type, const struct ProtobufCMessage *msg,
                        bool may_wait, uint32_t *ret_need);

/* Owner thread: copy the next completion record into c->rx. Returns 1 with *ret_type and
 * *ret_len set, 0 when the ring is empty, -PL_ERR_PROTOCOL on a broken ring. */
int pl_client_conn_read(struct pl_client_conn *c, uint32_t *ret_type, uint32_t *ret_len);

/* Owner thread: hand the space of the records read so far back to the broker (ringing it if
 * it waits for room). Returns 0, -PL_ERR_PROTOCOL or -errno. */
int pl_client_conn_release(struct pl_client_conn *c);

/* Owner thread: wait until a completion record is available or, when sq_need > 0, the
 * submission ring has room for a record of sq_need payload bytes. Spins up to spin_ns (see
 * picolm_set_spin), then sleeps in FUTEX_WAIT on the completion ring (one syscall per sleep;
 * bounded sleeps between which the socket is checked, so a dead broker is noticed within ~50
 * ms), or with a broker without futex wake-ups, in poll() on the doorbell and the socket at
 * once.
 * Returns 0 (ready); -PL_ERR_GONE (the broker hung up and the completion ring is empty);
 * -ETIMEDOUT (timeout_ms passed); -PL_ERR_PROTOCOL; -errno. */
int pl_client_conn_wait(struct pl_client_conn *c, uint32_t sq_need);

#endif
