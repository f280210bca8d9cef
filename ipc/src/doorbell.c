/* SPDX-License-Identifier: MIT */
/* Doorbells (pl_ipc_doorbell_*): eventfd wake-ups and the spin-then-sleep wait built on the
 * ring's NEED_WAKEUP protocol. A steady stream never reaches a syscall here: producers ring only
 * when the consumer announced it sleeps, and a consumer sleeps only after its spin budget. */
#include "pl/ipc_doorbell.h"

#include <errno.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "pl/ipc_ring.h"
#include "pl/pl_util.h"
#include "stats.h"

int pl_ipc_doorbell_open(int *ret_fd) {
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0)
        return -errno;
    *ret_fd = fd;
    return 0;
}

int pl_ipc_doorbell_open_blocking(int *ret_fd) {
    int fd = eventfd(0, EFD_CLOEXEC);
    if (fd < 0)
        return -errno;
    *ret_fd = fd;
    return 0;
}

int pl_ipc_doorbell_ring(int fd) {
    uint64_t one = 1;
    for (;;) {
        pl_ipc_stats_count(PL_IPC_STAT_WAKE);
        ssize_t n = write(fd, &one, sizeof(one));
        if (n == (ssize_t)sizeof(one))
            return 0;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return 0; /* counter saturated by the peer: a wake-up is pending anyway */
        return n < 0 ? -errno : -EIO;
    }
}

int pl_ipc_doorbell_drain(int fd) {
    uint64_t v;
    for (;;) {
        pl_ipc_stats_count(PL_IPC_STAT_OTHER);
        ssize_t n = read(fd, &v, sizeof(v));
        if (n == (ssize_t)sizeof(v))
            return 1;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return 0;
        return n < 0 ? -errno : -EIO;
    }
}

int pl_ipc_doorbell_read(int fd) {
    uint64_t v;
    pl_ipc_stats_count(PL_IPC_STAT_SLEEP);
    ssize_t n = read(fd, &v, sizeof(v));
    if (n == (ssize_t)sizeof(v))
        return 0;
    if (n < 0 && errno == EAGAIN)
        return -EAGAIN; /* a non-blocking doorbell that was not rung */
    return n < 0 ? -errno : -EIO;
}

int pl_ipc_doorbell_sleep(int fd, int timeout_ms) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    pl_ipc_stats_count(PL_IPC_STAT_SLEEP);
    int n = poll(&p, 1, timeout_ms);
    if (n < 0)
        return -errno;
    if (n == 0)
        return -ETIMEDOUT;
    if (p.revents & (POLLERR | POLLNVAL))
        return -EBADF;
    int rc = pl_ipc_doorbell_drain(fd);
    return rc < 0 ? rc : 0;
}

/* futex(2) has no glibc wrapper. The word lives in a shared mapping, so no FUTEX_PRIVATE_FLAG:
 * the kernel keys it by the memfd's page, which both processes map. */
static long sys_futex(_Atomic uint32_t *word, int op, uint32_t val, const struct timespec *ts) {
    return syscall(SYS_futex, (uint32_t *)word, op, val, ts, NULL, 0);
}

/* Returns the number of sleepers woken (0 or 1) or -errno. */
static int futex_wake(_Atomic uint32_t *word) {
    pl_ipc_stats_count(PL_IPC_STAT_WAKE);
    /* One waiter at most (one consumer or one producer per ring end): wake one. */
    long n = sys_futex(word, FUTEX_WAKE, 1, NULL);
    return n < 0 ? -errno : (int)n;
}

int pl_ipc_doorbell_futex_wake(const struct pl_ipc_futex *f) {
    int rc = futex_wake(f->word);
    return rc < 0 ? rc : 0;
}

/* Deliver the wake-up pl_ipc_ring_publish*() asked for (rc > 0). */
static int wake_peer(struct pl_ipc_ring *r, int rc, int peer_fd) {
    if (rc != PL_IPC_WAKE_FUTEX)
        return pl_ipc_doorbell_ring(peer_fd);
    rc = futex_wake(pl_ipc_ring_wake_futex(r).word);
    if (rc < 0)
        return rc;
    if (rc > 0)
        pl_ipc_ring_woke(r); /* it was asleep: this sleep needs no further wake-up */
    return 0;
}

int pl_ipc_doorbell_futex_sleep(const struct pl_ipc_futex *f, int timeout_ms) {
    struct timespec ts, *tsp = NULL;
    if (timeout_ms >= 0) {
        ts.tv_sec = timeout_ms / 1000;
        ts.tv_nsec = (long)(timeout_ms % 1000) * 1000000;
        tsp = &ts; /* FUTEX_WAIT takes a relative timeout */
    }
    pl_ipc_stats_count(PL_IPC_STAT_SLEEP);
    if (sys_futex(f->word, FUTEX_WAIT, f->val, tsp) == 0)
        return 0;
    if (errno == EAGAIN)
        return 0; /* the word moved before we slept: the ring changed, look at it */
    return errno == ETIMEDOUT ? -ETIMEDOUT : -errno;
}

int pl_ipc_doorbell_notify(struct pl_ipc_ring *r, int peer_fd) {
    int rc = pl_ipc_ring_publish(r);
    return rc <= 0 ? rc : wake_peer(r, rc, peer_fd);
}

int pl_ipc_doorbell_notify_futex(struct pl_ipc_ring *r) {
    int rc = pl_ipc_ring_publish(r);
    if (rc <= 0)
        return rc;
    /* A doorbell request was marked woken by publish (one wake per sleep either way). */
    int n = futex_wake(pl_ipc_ring_wake_futex(r).word);
    if (n < 0)
        return n;
    if (n > 0 && rc == PL_IPC_WAKE_FUTEX)
        pl_ipc_ring_woke(r);
    return 0;
}

int pl_ipc_doorbell_notify_batch(struct pl_ipc_ring *r, int peer_fd, uint32_t batch_bytes) {
    int rc = pl_ipc_ring_publish_batch(r, batch_bytes);
    return rc <= 0 ? rc : wake_peer(r, rc, peer_fd);
}

/* Publish, check, spin for spin_ns, then sleep (on wait_fd, or on a futex when wait_fd < 0)
 * until r is ready. */
static int wait_ready(struct pl_ipc_ring *r, uint32_t need, int wait_fd, int peer_fd,
                      uint64_t spin_ns, int timeout_ms) {
    /* Hand our own progress to the peer first: it may be asleep waiting for exactly that. */
    int rc = pl_ipc_doorbell_notify(r, peer_fd);
    if (rc < 0)
        return rc;
    rc = pl_ipc_ring_ready(r, need);
    if (rc != 0)
        return rc < 0 ? rc : 0;

    if (spin_ns) {
        uint64_t start = pl_now_ns();
        do {
            for (int i = 0; i < 32; i++) {
                rc = pl_ipc_ring_ready(r, need);
                if (rc != 0)
                    return rc < 0 ? rc : 0;
                pl_cpu_relax();
            }
        } while (pl_now_ns() - start < spin_ns);
    }

    for (;;) {
        if (wait_fd >= 0) {
            rc = pl_ipc_ring_sleep_prepare(r, need);
            if (rc != 0)
                return rc < 0 ? rc : 0;
            rc = pl_ipc_doorbell_sleep(wait_fd, timeout_ms);
        } else {
            struct pl_ipc_futex f;
            rc = pl_ipc_ring_sleep_prepare_futex(r, need, &f);
            if (rc != 0)
                return rc < 0 ? rc : 0;
            rc = pl_ipc_doorbell_futex_sleep(&f, timeout_ms);
        }
        pl_ipc_ring_sleep_finish(r);
        if (rc < 0)
            return rc;
        rc = pl_ipc_ring_ready(r, need);
        if (rc != 0)
            return rc < 0 ? rc : 0;
        /* Spurious or stale wake-up (a ring from an earlier cycle): sleep again. */
    }
}

int pl_ipc_doorbell_wait(struct pl_ipc_ring *r, uint32_t need, int wait_fd, int peer_fd,
                         uint64_t spin_ns, int timeout_ms) {
    if (wait_fd < 0)
        return -EBADF;
    return wait_ready(r, need, wait_fd, peer_fd, spin_ns, timeout_ms);
}

int pl_ipc_doorbell_wait_futex(struct pl_ipc_ring *r, uint32_t need, int peer_fd, uint64_t spin_ns,
                               int timeout_ms) {
    return wait_ready(r, need, -1, peer_fd, spin_ns, timeout_ms);
}
