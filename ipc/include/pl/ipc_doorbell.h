/* SPDX-License-Identifier: MIT */
/* Doorbells: one eventfd per direction that a producer writes only when the consumer set its
 * NEED_WAKEUP flag (see pl_ipc_ring_publish / pl_ipc_ring_sleep_prepare). A doorbell carries
 * no data: it means "look at the ring", and waiters tolerate lost-looking and duplicate rings.
 * Used by libpicolm to wait for completions and by tests/benchmarks; the broker waits on its
 * doorbells through pl_ipc_uring_* instead of pl_ipc_doorbell_wait(). */
#ifndef PL_IPC_IPC_DOORBELL_H
#define PL_IPC_IPC_DOORBELL_H

#include <stdint.h>

struct pl_ipc_ring;

/* Create a doorbell: an eventfd with EFD_NONBLOCK | EFD_CLOEXEC (non-blocking so that a peer
 * that saturates the counter can never block the writer). Returns 0 and *ret_fd, or -errno. */
int pl_ipc_doorbell_open(int *ret_fd);

/* Ring the doorbell (eventfd write of 1). A saturated counter (-EAGAIN) already means "wake
 * up" and counts as success. Returns 0 or -errno. */
int pl_ipc_doorbell_ring(int fd);

/* Reset the doorbell without blocking. Returns 1 if it had been rung, 0 if not, or -errno. */
int pl_ipc_doorbell_drain(int fd);

/* Block until the doorbell rings or timeout_ms passes (-1: forever), then drain it.
 * Returns 0, -ETIMEDOUT, -EINTR or -errno. */
int pl_ipc_doorbell_sleep(int fd, int timeout_ms);

/* Publish r and ring peer_fd if the peer sleeps waiting for us. One call per batch of records
 * (producer) or of consumed records (consumer). Returns 0, -PL_ERR_PROTOCOL or -errno. */
int pl_ipc_doorbell_notify(struct pl_ipc_ring *r, int peer_fd);

/* Wait until r is ready (consumer: a record is available; producer: room for need payload
 * bytes). Publishes r first (ringing peer_fd if needed), spins for up to spin_ns, then sets
 * NEED_WAKEUP, re-checks and sleeps on wait_fd; repeats after spurious wake-ups.
 * timeout_ms bounds each sleep (-1: none). Returns 0 when ready, -ETIMEDOUT, -EINTR,
 * -EMSGSIZE, -PL_ERR_PROTOCOL or -errno. */
int pl_ipc_doorbell_wait(struct pl_ipc_ring *r, uint32_t need, int wait_fd, int peer_fd,
                         uint64_t spin_ns, int timeout_ms);

#endif
