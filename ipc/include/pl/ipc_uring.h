/* SPDX-License-Identifier: MIT */
/* A small io_uring event loop core for the broker (pl_ipc_uring_*): one ring that waits on
 * every client doorbell, the listening sockets, hang-ups and anything else pollable. Each
 * registration carries a caller tag (any value but PL_IPC_URING_TAG_INTERNAL) that comes back
 * with its completions. The daemon's event loop owns one, single-threaded. */
#ifndef PL_IPC_IPC_URING_H
#define PL_IPC_IPC_URING_H

#include <stdbool.h>
#include <stdint.h>

struct pl_ipc_uring;
struct pl_ipc_futex;

/* Tag value reserved for the wrapper's own requests; never returned. */
#define PL_IPC_URING_TAG_INTERNAL UINT64_MAX

/* Registration flag: keep the registration armed after each event where the kernel can
 * (multishot poll / accept); otherwise, or on older kernels, it fires once. */
#define PL_IPC_URING_MULTISHOT 1u

/* Event flag: the registration is still armed. When clear, re-register to keep listening. */
#define PL_IPC_URING_EV_MORE 1u

struct pl_ipc_uring_event {
    uint64_t tag;   /* the registration's tag */
    int32_t res;    /* poll: revents mask; read: bytes; accept: new fd (caller owns it);
                       cancel victims: -ECANCELED; failures: -errno */
    uint32_t flags; /* PL_IPC_URING_EV_* */
};

/* Create a ring with room for at least entries submissions (completion queue twice that).
 * Returns 0 and *ret; -PL_ERR_UNSUPPORTED when the kernel has no io_uring or forbids it
 * (ENOSYS, EPERM, io_uring_disabled); -EINVAL; -ENOMEM; or -errno. */
int pl_ipc_uring_new(unsigned entries, struct pl_ipc_uring **ret);

/* Cancel nothing, close the ring. Accepts NULL. Fds registered stay the caller's. */
void pl_ipc_uring_free(struct pl_ipc_uring *u);

/* Whether multishot poll / multishot accept are available (probed at creation). */
bool pl_ipc_uring_has_multishot_poll(const struct pl_ipc_uring *u);
bool pl_ipc_uring_has_multishot_accept(const struct pl_ipc_uring *u);

/* Wait for poll_mask (POLLIN, POLLRDHUP, ...) on fd. POLLHUP/POLLERR always report. Typical
 * uses: a doorbell eventfd (POLLIN; then pl_ipc_doorbell_drain), a handshake socket
 * (POLLIN), hang-up detection on an established session socket (POLLRDHUP).
 * Returns 0 (queued; submitted at the next wait), -EINVAL, or -EBUSY if the queue is full
 * and could not be flushed. */
int pl_ipc_uring_poll(struct pl_ipc_uring *u, int fd, uint32_t poll_mask, uint64_t tag,
                      unsigned flags);

/* One read of len bytes into buf (borrowed until its completion arrives), e.g. an eventfd
 * read that drains the doorbell in the same operation. Returns like pl_ipc_uring_poll(). */
int pl_ipc_uring_read(struct pl_ipc_uring *u, int fd, void *buf, uint32_t len, uint64_t tag);

/* Whether io_uring futex waits are available (IORING_OP_FUTEX_WAIT, Linux 6.7; probed at
 * creation). Without them, wait on the ring's eventfd doorbell with pl_ipc_uring_read(). */
bool pl_ipc_uring_has_futex_wait(const struct pl_ipc_uring *u);

/* One FUTEX_WAIT on f->word while it holds f->val (from pl_ipc_ring_sleep_prepare_futex()),
 * folded into the next pl_ipc_uring_wait(): its event comes with res 0 when woken, -EAGAIN
 * when the word had already moved (both mean "look at the ring"), -ECANCELED when cancelled.
 * One-shot: queue another for the next sleep. The word must stay mapped until the event
 * arrives (cancel the tag before unmapping). Returns like pl_ipc_uring_poll(), or
 * -PL_ERR_UNSUPPORTED on kernels without io_uring futex waits. */
int pl_ipc_uring_futex_wait(struct pl_ipc_uring *u, const struct pl_ipc_futex *f, uint64_t tag);

/* Accept connections on listening socket fd; each event's res is a new fd opened with
 * SOCK_NONBLOCK | SOCK_CLOEXEC. Returns like pl_ipc_uring_poll(). */
int pl_ipc_uring_accept(struct pl_ipc_uring *u, int fd, uint64_t tag, unsigned flags);

/* Cancel every registration with this tag; each reports one last event with -ECANCELED
 * (or its normal completion if it raced). Returns 0 or like pl_ipc_uring_poll(). */
int pl_ipc_uring_cancel(struct pl_ipc_uring *u, uint64_t tag);

/* Submit what is queued, then look for a completion without sleeping for up to spin_ns,
 * yielding the CPU at each look (so that the threads this one waits for can run on its CPU;
 * completions that need the kernel's work in this thread, such as a futex wait's, still
 * arrive: the kernel interrupts the spinning thread for them). A thread that expects an event
 * within microseconds saves the wake-up, which costs 10-50 us across CPUs on a virtual
 * machine. Returns 1 when a completion is ready (collect it with pl_ipc_uring_wait()), 0 when
 * none came, or -errno from the submission. */
int pl_ipc_uring_spin(struct pl_ipc_uring *u, uint64_t spin_ns);

/* Submit what is queued and collect up to max events, waiting up to timeout_ms for the first
 * (-1: forever, 0: do not wait). Returns the number of events (0 on timeout), -EINTR, or
 * -errno. */
int pl_ipc_uring_wait(struct pl_ipc_uring *u, struct pl_ipc_uring_event *evs, unsigned max,
                      int timeout_ms);

#endif
