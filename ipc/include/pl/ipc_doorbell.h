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
struct pl_ipc_futex;

/* Create a doorbell: an eventfd with EFD_NONBLOCK | EFD_CLOEXEC (non-blocking so that a peer
 * that saturates the counter can never block the writer). Returns 0 and *ret_fd, or -errno. */
int pl_ipc_doorbell_open(int *ret_fd);

/* Create a blocking doorbell (EFD_CLOEXEC only) for a sleeper that wants to wait and drain in
 * one syscall with pl_ipc_doorbell_read(). Whoever rings it must trust every other writer not
 * to saturate the counter, or its ring could block: the broker never rings a blocking doorbell
 * that a client can write (a client's wake-ups should use futexes instead). Returns 0 and
 * *ret_fd, or -errno. */
int pl_ipc_doorbell_open_blocking(int *ret_fd);

/* Ring the doorbell (eventfd write of 1). A saturated counter (-EAGAIN) already means "wake
 * up" and counts as success. Returns 0 or -errno. */
int pl_ipc_doorbell_ring(int fd);

/* Reset the doorbell without blocking. Returns 1 if it had been rung, 0 if not, or -errno. */
int pl_ipc_doorbell_drain(int fd);

/* Blocking read of a doorbell from pl_ipc_doorbell_open_blocking(): one syscall that waits
 * for the ring and drains it. Returns 0, -EINTR, -EAGAIN (a non-blocking doorbell that had
 * not been rung) or -errno. */
int pl_ipc_doorbell_read(int fd);

/* Block until the doorbell rings or timeout_ms passes (-1: forever), then drain it.
 * Returns 0, -ETIMEDOUT, -EINTR or -errno. */
int pl_ipc_doorbell_sleep(int fd, int timeout_ms);

/* Publish r and wake the peer if it sleeps waiting for us, the way it asked: ring peer_fd, or
 * FUTEX_WAKE our index word when it sleeps on a futex (then peer_fd is not used). At most one
 * syscall, and none for a peer already woken from the same sleep. One call per batch of
 * records (producer) or of consumed records (consumer). Returns 0, -PL_ERR_PROTOCOL or -errno. */
int pl_ipc_doorbell_notify(struct pl_ipc_ring *r, int peer_fd);

/* Like pl_ipc_doorbell_notify() with pl_ipc_ring_publish_batch(r, batch_bytes): for producers
 * that commit records in a loop, call it after each commit. Returns like notify. */
int pl_ipc_doorbell_notify_batch(struct pl_ipc_ring *r, int peer_fd, uint32_t batch_bytes);

/* Like pl_ipc_doorbell_notify(), but wake the peer only with FUTEX_WAKE on our index word,
 * whichever wake-up it asked for: no fd is touched, so nothing the peer does to a shared
 * eventfd (clearing O_NONBLOCK, saturating or draining the counter) can block the caller.
 * For a side that must never block on an untrusted peer (the broker); a peer that asked for a
 * doorbell ring instead is not woken by it. At most one syscall, none for a peer already woken
 * from the same sleep. Returns 0, -PL_ERR_PROTOCOL or -errno. */
int pl_ipc_doorbell_notify_futex(struct pl_ipc_ring *r);

/* FUTEX_WAKE one sleeper on f->word (f->val is not used). Returns 0 or -errno. */
int pl_ipc_doorbell_futex_wake(const struct pl_ipc_futex *f);

/* FUTEX_WAIT on f->word while it holds f->val, for up to timeout_ms (-1: forever). Returns 0
 * when woken or when the word had already moved (look at the ring either way), -ETIMEDOUT,
 * -EINTR or -errno. */
int pl_ipc_doorbell_futex_sleep(const struct pl_ipc_futex *f, int timeout_ms);

/* Wait until r is ready (consumer: a record is available; producer: room for need payload
 * bytes). Publishes r first (ringing peer_fd if needed), spins for up to spin_ns, then sets
 * NEED_WAKEUP, re-checks and sleeps on wait_fd; repeats after spurious wake-ups.
 * timeout_ms bounds each sleep (-1: none). Returns 0 when ready, -ETIMEDOUT, -EINTR,
 * -EMSGSIZE, -PL_ERR_PROTOCOL or -errno. */
int pl_ipc_doorbell_wait(struct pl_ipc_ring *r, uint32_t need, int wait_fd, int peer_fd,
                         uint64_t spin_ns, int timeout_ms);

/* pl_ipc_doorbell_wait() that sleeps in FUTEX_WAIT on the peer's index word (one syscall per
 * sleep, no doorbell to drain) instead of on an eventfd. The peer must honour
 * PL_IPC_RING_WAKE_FUTEX (pl/ipc_abi.h). peer_fd is still rung if the peer itself sleeps on
 * its doorbell. Returns like pl_ipc_doorbell_wait(). */
int pl_ipc_doorbell_wait_futex(struct pl_ipc_ring *r, uint32_t need, int peer_fd, uint64_t spin_ns,
                               int timeout_ms);

#endif
