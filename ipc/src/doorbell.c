/* SPDX-License-Identifier: MIT */
/* Doorbells (pl_ipc_doorbell_*): eventfd wake-ups and the spin-then-sleep wait built on the
 * ring's NEED_WAKEUP protocol. A steady stream never reaches a syscall here: producers ring only
 * when the consumer announced it sleeps, and a consumer sleeps only after its spin budget. */
#include "pl/ipc_doorbell.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "pl/ipc_ring.h"

int pl_ipc_doorbell_open(int *ret_fd) {
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0)
        return -errno;
    *ret_fd = fd;
    return 0;
}

int pl_ipc_doorbell_ring(int fd) {
    uint64_t one = 1;
    for (;;) {
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

int pl_ipc_doorbell_sleep(int fd, int timeout_ms) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
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

int pl_ipc_doorbell_notify(struct pl_ipc_ring *r, int peer_fd) {
    int rc = pl_ipc_ring_publish(r);
    if (rc <= 0)
        return rc;
    return pl_ipc_doorbell_ring(peer_fd);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    (void)clock_gettime(CLOCK_MONOTONIC, &ts); /* vDSO: no syscall */
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

int pl_ipc_doorbell_wait(struct pl_ipc_ring *r, uint32_t need, int wait_fd, int peer_fd,
                         uint64_t spin_ns, int timeout_ms) {
    /* Hand our own progress to the peer first: it may be asleep waiting for exactly that. */
    int rc = pl_ipc_doorbell_notify(r, peer_fd);
    if (rc < 0)
        return rc;
    rc = pl_ipc_ring_ready(r, need);
    if (rc != 0)
        return rc < 0 ? rc : 0;

    if (spin_ns) {
        uint64_t start = now_ns();
        do {
            for (int i = 0; i < 32; i++) {
                rc = pl_ipc_ring_ready(r, need);
                if (rc != 0)
                    return rc < 0 ? rc : 0;
                cpu_relax();
            }
        } while (now_ns() - start < spin_ns);
    }

    for (;;) {
        rc = pl_ipc_ring_sleep_prepare(r, need);
        if (rc != 0)
            return rc < 0 ? rc : 0;
        rc = pl_ipc_doorbell_sleep(wait_fd, timeout_ms);
        pl_ipc_ring_sleep_finish(r);
        if (rc < 0)
            return rc;
        rc = pl_ipc_ring_ready(r, need);
        if (rc != 0)
            return rc < 0 ? rc : 0;
        /* Spurious or stale wake-up (a ring from an earlier cycle): sleep again. */
    }
}
