/* SPDX-License-Identifier: MIT */
/* io_uring wrapper for the broker's event loop (pl_ipc_uring_*), built on liburing. It hides
 * the kernel-version differences: multishot poll and multishot accept are probed once at
 * creation and silently degrade to one-shot registrations (the caller re-arms whenever an
 * event comes without PL_IPC_URING_EV_MORE). */
#include "pl/ipc_uring.h"

#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pl/ipc_ring.h"
#include "pl/pl_err.h"
#include "pl/pl_util.h"
#include "stats.h"

/* IORING_OP_FUTEX_WAIT (Linux 6.7) and the futex2 flags it takes, by their uapi values: the
 * liburing headers we build against may predate them. Opcode numbers are kernel ABI. */
#define OP_FUTEX_WAIT 51
#define FUTEX2_SIZE_U32_FLAG 0x02u    /* a 32-bit futex word; shared (not PRIVATE) */
#define FUTEX_MATCH_ANY 0xffffffffull /* FUTEX_BITSET_MATCH_ANY */

struct pl_ipc_uring {
    struct io_uring ring;
    bool multishot_poll;
    bool multishot_accept;
    bool futex_wait;
};

static struct io_uring_sqe *get_sqe(struct pl_ipc_uring *u) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (sqe)
        return sqe;
    /* Queue full: hand what is queued to the kernel and try once more. */
    if (io_uring_submit(&u->ring) < 0)
        return NULL;
    return io_uring_get_sqe(&u->ring);
}

/* Multishot poll arrived in 5.13 with no opcode of its own, so ask the kernel directly: arm a
 * multishot poll on a ready eventfd and see whether the completion says it stays armed. */
static bool probe_multishot_poll(struct pl_ipc_uring *u) {
    bool ok = false;
    int efd = eventfd(1, EFD_NONBLOCK | EFD_CLOEXEC);
    if (efd < 0)
        return false;
    struct io_uring_sqe *sqe = get_sqe(u);
    if (!sqe)
        goto out;
    io_uring_prep_poll_multishot(sqe, efd, POLLIN);
    io_uring_sqe_set_data64(sqe, PL_IPC_URING_TAG_INTERNAL);
    if (io_uring_submit(&u->ring) < 0)
        goto out;
    struct io_uring_cqe *cqe;
    if (io_uring_wait_cqe(&u->ring, &cqe) < 0)
        goto out;
    ok = cqe->res > 0 && (cqe->flags & IORING_CQE_F_MORE);
    io_uring_cqe_seen(&u->ring, cqe);
    if (ok) {
        /* Disarm it and reap everything it still produces, up to its final completion. */
        sqe = get_sqe(u);
        if (!sqe) {
            ok = false;
            goto out;
        }
        io_uring_prep_poll_remove(sqe, PL_IPC_URING_TAG_INTERNAL);
        io_uring_sqe_set_data64(sqe, PL_IPC_URING_TAG_INTERNAL - 1);
        (void)io_uring_submit(&u->ring);
        bool poll_done = false, remove_done = false;
        while (!poll_done || !remove_done) {
            if (io_uring_wait_cqe(&u->ring, &cqe) < 0) {
                ok = false;
                break;
            }
            if (cqe->user_data == PL_IPC_URING_TAG_INTERNAL - 1)
                remove_done = true;
            else if (!(cqe->flags & IORING_CQE_F_MORE))
                poll_done = true;
            io_uring_cqe_seen(&u->ring, cqe);
        }
    }
out:
    (void)close(efd);
    return ok;
}

int pl_ipc_uring_new(unsigned entries, struct pl_ipc_uring **ret) {
    if (!ret || entries == 0 || entries > 32768)
        return -EINVAL;
    struct pl_ipc_uring *u = calloc(1, sizeof(*u));
    if (!u)
        return -ENOMEM;
    struct io_uring_params p = {.flags = IORING_SETUP_CLAMP | IORING_SETUP_CQSIZE,
                                .cq_entries = entries * 2};
    int r = io_uring_queue_init_params(entries, &u->ring, &p);
    if (r < 0) {
        free(u);
        /* ENOSYS: no io_uring in this kernel; EPERM: disabled by sysctl, seccomp or LSM. */
        return (r == -ENOSYS || r == -EPERM) ? -PL_ERR_UNSUPPORTED : r;
    }
    u->multishot_poll = probe_multishot_poll(u);
    /* Multishot accept (5.19) has no feature bit either; IORING_OP_SOCKET arrived in the same
     * release, so its presence in the opcode probe stands for it. */
    struct io_uring_probe *probe = io_uring_get_probe_ring(&u->ring);
    if (probe) {
        u->multishot_accept = io_uring_opcode_supported(probe, IORING_OP_SOCKET);
        u->futex_wait = io_uring_opcode_supported(probe, OP_FUTEX_WAIT);
        io_uring_free_probe(probe);
    }
    *ret = u;
    return 0;
}

void pl_ipc_uring_free(struct pl_ipc_uring *u) {
    if (!u)
        return;
    io_uring_queue_exit(&u->ring);
    free(u);
}

bool pl_ipc_uring_has_multishot_poll(const struct pl_ipc_uring *u) {
    return u->multishot_poll;
}

bool pl_ipc_uring_has_multishot_accept(const struct pl_ipc_uring *u) {
    return u->multishot_accept;
}

bool pl_ipc_uring_has_futex_wait(const struct pl_ipc_uring *u) {
    return u->futex_wait;
}

int pl_ipc_uring_poll(struct pl_ipc_uring *u, int fd, uint32_t poll_mask, uint64_t tag,
                      unsigned flags) {
    if (!u || fd < 0 || tag >= PL_IPC_URING_TAG_INTERNAL - 1 || (flags & ~PL_IPC_URING_MULTISHOT))
        return -EINVAL;
    struct io_uring_sqe *sqe = get_sqe(u);
    if (!sqe)
        return -EBUSY;
    if ((flags & PL_IPC_URING_MULTISHOT) && u->multishot_poll)
        io_uring_prep_poll_multishot(sqe, fd, poll_mask);
    else
        io_uring_prep_poll_add(sqe, fd, poll_mask);
    io_uring_sqe_set_data64(sqe, tag);
    return 0;
}

int pl_ipc_uring_read(struct pl_ipc_uring *u, int fd, void *buf, uint32_t len, uint64_t tag) {
    if (!u || fd < 0 || !buf || tag >= PL_IPC_URING_TAG_INTERNAL - 1)
        return -EINVAL;
    struct io_uring_sqe *sqe = get_sqe(u);
    if (!sqe)
        return -EBUSY;
    /* Offset -1: use (and not require) the file position, as for a pipe or an eventfd. */
    io_uring_prep_read(sqe, fd, buf, len, (uint64_t)-1);
    io_uring_sqe_set_data64(sqe, tag);
    return 0;
}

int pl_ipc_uring_futex_wait(struct pl_ipc_uring *u, const struct pl_ipc_futex *f, uint64_t tag) {
    if (!u || !f || !f->word || tag >= PL_IPC_URING_TAG_INTERNAL - 1)
        return -EINVAL;
    if (!u->futex_wait)
        return -PL_ERR_UNSUPPORTED;
    struct io_uring_sqe *sqe = get_sqe(u);
    if (!sqe)
        return -EBUSY;
    /* fd = futex2 flags, addr = word, off (addr2) = expected value, addr3 = bitset mask. */
    io_uring_prep_rw(OP_FUTEX_WAIT, sqe, (int)FUTEX2_SIZE_U32_FLAG, (const void *)f->word, 0,
                     f->val);
    sqe->addr3 = FUTEX_MATCH_ANY;
    io_uring_sqe_set_data64(sqe, tag);
    return 0;
}

int pl_ipc_uring_accept(struct pl_ipc_uring *u, int fd, uint64_t tag, unsigned flags) {
    if (!u || fd < 0 || tag >= PL_IPC_URING_TAG_INTERNAL - 1 || (flags & ~PL_IPC_URING_MULTISHOT))
        return -EINVAL;
    struct io_uring_sqe *sqe = get_sqe(u);
    if (!sqe)
        return -EBUSY;
    if ((flags & PL_IPC_URING_MULTISHOT) && u->multishot_accept)
        io_uring_prep_multishot_accept(sqe, fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    else
        io_uring_prep_accept(sqe, fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    io_uring_sqe_set_data64(sqe, tag);
    return 0;
}

int pl_ipc_uring_cancel(struct pl_ipc_uring *u, uint64_t tag) {
    if (!u || tag >= PL_IPC_URING_TAG_INTERNAL - 1)
        return -EINVAL;
    struct io_uring_sqe *sqe = get_sqe(u);
    if (!sqe)
        return -EBUSY;
    /* ASYNC_CANCEL_ALL (5.19) takes every request with this tag; older kernels cancel one per
     * request, which is what callers that register one request per tag need anyway. */
    io_uring_prep_cancel64(sqe, tag, IORING_ASYNC_CANCEL_ALL);
    io_uring_sqe_set_data64(sqe, PL_IPC_URING_TAG_INTERNAL);
    return 0;
}

int pl_ipc_uring_spin(struct pl_ipc_uring *u, uint64_t spin_ns) {
    if (!u)
        return -EINVAL;
    if (io_uring_sq_ready(&u->ring) > 0) {
        pl_ipc_stats_count(PL_IPC_STAT_OTHER);
        int r = io_uring_submit(&u->ring);
        if (r < 0 && r != -EBUSY && r != -EAGAIN)
            return r;
    }
    uint64_t t0 = pl_now_ns();
    for (;;) {
        if (io_uring_cq_ready(&u->ring) > 0)
            return 1;
        if (pl_now_ns() - t0 >= spin_ns)
            return 0;
        (void)sched_yield();
    }
}

int pl_ipc_uring_wait(struct pl_ipc_uring *u, struct pl_ipc_uring_event *evs, unsigned max,
                      int timeout_ms) {
    if (!u || !evs || max == 0)
        return -EINVAL;
    unsigned n = 0;
    for (;;) {
        struct io_uring_cqe *cqe;
        int r;
        if (timeout_ms == 0 || n > 0) {
            /* liburing enters the kernel here only when something is queued. */
            if (io_uring_sq_ready(&u->ring) > 0)
                pl_ipc_stats_count(PL_IPC_STAT_OTHER);
            r = io_uring_submit(&u->ring);
        } else if (timeout_ms < 0) {
            /* One io_uring_enter submits what is queued (e.g. the next futex wait or doorbell
             * read) and waits; liburing skips it only when a completion is already there. */
            if (io_uring_sq_ready(&u->ring) > 0 || io_uring_cq_ready(&u->ring) == 0)
                pl_ipc_stats_count(PL_IPC_STAT_SLEEP);
            r = io_uring_submit_and_wait(&u->ring, 1);
        } else {
            if (io_uring_sq_ready(&u->ring) > 0 || io_uring_cq_ready(&u->ring) == 0)
                pl_ipc_stats_count(PL_IPC_STAT_SLEEP);
            struct __kernel_timespec ts = {.tv_sec = timeout_ms / 1000,
                                           .tv_nsec = (long long)(timeout_ms % 1000) * 1000000};
            r = io_uring_submit_and_wait_timeout(&u->ring, &cqe, 1, &ts, NULL);
            if (r == -ETIME)
                r = 0;
        }
        if (r < 0 && r != -EBUSY && r != -EAGAIN)
            return r;

        unsigned head, seen = 0;
        io_uring_for_each_cqe(&u->ring, head, cqe) {
            if (n == max)
                break;
            seen++;
            if (cqe->user_data >= PL_IPC_URING_TAG_INTERNAL - 1)
                continue; /* our own cancel/probe completions */
            evs[n++] = (struct pl_ipc_uring_event){
                .tag = cqe->user_data,
                .res = cqe->res,
                .flags = (cqe->flags & IORING_CQE_F_MORE) ? PL_IPC_URING_EV_MORE : 0};
        }
        io_uring_cq_advance(&u->ring, seen);
        /* Asked to block but only internal completions arrived: block again. A finite
         * timeout may return 0 early in that case, which callers treat as a timeout. */
        if (n > 0 || timeout_ms >= 0)
            return (int)n;
    }
}
