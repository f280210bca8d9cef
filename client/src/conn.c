/* SPDX-License-Identifier: MIT */
/* libpicolm's connection to picolmd (pl_client_conn_*): connect + handshake + region attach,
 * zero-copy submission of protobuf-c messages, copying completion records out of shared
 * memory, and the doorbell wait. The broker is more trusted than a client, yet everything it
 * writes into the region is still validated by the ring code, and records are copied into
 * private memory before protobuf-c looks at them (its two-pass unpack must see stable bytes). */
#include "conn.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <protobuf-c/protobuf-c.h>

#include "pl/ipc_doorbell.h"
#include "pl/ipc_handshake.h"
#include "pl/pl_err.h"
#include "pl/pl_util.h"

/* How long connect() waits for the welcome, and for the region header to be published. */
#define HANDSHAKE_TIMEOUT_MS 5000
#define REGION_ATTACH_TIMEOUT_MS 1000
/* A foreign thread (picolm_cancel) that finds the submission ring full polls this often. */
#define SEND_POLL_MS 1
#define SEND_DEFAULT_BOUND_MS 5000
/* Futex sleeps (brokers with PL_IPC_FEATURE_FUTEX_WAKE) are bounded: a broker that died never
 * wakes us, so between sleeps we look at the socket for its hang-up (noticed within ~50 ms).
 * Waiting for submission room as well, we sleep on the completion ring's word only (one futex
 * at a time) and look at the submission ring at least every millisecond. */
#define FUTEX_SLEEP_MS 50
#define FUTEX_SLEEP_SQ_MS 1

static void set_err(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t err_len, const char *fmt, ...) {
    if (!err || !err_len)
        return;
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

/* ---- Setup and teardown ---- */

static int socket_connect(const char *path, int *ret_fd) {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof(sa.sun_path))
        return -EINVAL;
    memcpy(sa.sun_path, path, len + 1);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    for (;;) {
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
            break;
        if (errno == EINTR)
            continue;
        int r = -errno;
        pl_close_fd(&fd);
        return r;
    }
    *ret_fd = fd;
    return 0;
}

static int set_rcv_timeout(int fd, int ms) {
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
        return -errno;
    return 0;
}

int pl_client_conn_open(struct pl_client_conn *c, const char *path, char *err, size_t err_len) {
    struct pl_ipc_handshake_result hs = {
        .region_fd = -1, .broker_doorbell_fd = -1, .client_doorbell_fd = -1};
    int r;

    *c = (struct pl_client_conn){.sock = -1,
                                 .broker_fd = -1,
                                 .client_fd = -1,
                                 .region = PL_IPC_REGION_INIT,
                                 .timeout_ms = -1};

    r = socket_connect(path, &c->sock);
    if (r < 0) {
        set_err(err, err_len, "cannot connect to %s: %s", path, pl_strerror(r));
        goto fail;
    }
    /* A broker that accepts but never answers must not hang us forever. */
    r = set_rcv_timeout(c->sock, HANDSHAKE_TIMEOUT_MS);
    if (r < 0) {
        set_err(err, err_len, "setsockopt: %s", pl_strerror(r));
        goto fail;
    }
    r = pl_ipc_handshake_client(c->sock, &hs);
    if (r == -EAGAIN || r == -EWOULDBLOCK)
        r = -ETIMEDOUT;
    if (r < 0) {
        set_err(err, err_len, "handshake with %s failed: %s", path, pl_strerror(r));
        goto fail;
    }
    r = set_rcv_timeout(c->sock, 0);
    if (r < 0) {
        set_err(err, err_len, "setsockopt: %s", pl_strerror(r));
        goto fail;
    }
    r = pl_ipc_region_attach(&c->region, hs.region_fd, REGION_ATTACH_TIMEOUT_MS);
    if (r < 0) {
        set_err(err, err_len, "the broker's shared region is unusable: %s", pl_strerror(r));
        goto fail;
    }
    hs.region_fd = -1; /* the region owns it now */
    r = pl_ipc_region_rings(&c->region, PL_IPC_REGION_CLIENT, &c->sq, &c->cq);
    if (r < 0) {
        set_err(err, err_len, "the broker's rings are unusable: %s", pl_strerror(r));
        goto fail;
    }
    c->broker_fd = pl_steal_fd(&hs.broker_doorbell_fd);
    c->client_fd = pl_steal_fd(&hs.client_doorbell_fd);
    c->session_id = hs.session_id;

    c->rx_cap = pl_ipc_ring_max_payload(&c->cq);
    c->rx = malloc(c->rx_cap ? c->rx_cap : 1);
    if (!c->rx) {
        r = -ENOMEM;
        set_err(err, err_len, "out of memory");
        goto fail;
    }
    r = -pthread_mutex_init(&c->sq_lock, NULL);
    if (r < 0) {
        set_err(err, err_len, "pthread_mutex_init: %s", pl_strerror(r));
        goto fail;
    }
    c->lock_ready = true;
    return 0;

fail:
    pl_ipc_handshake_result_done(&hs);
    pl_client_conn_close(c);
    return r;
}

void pl_client_conn_close(struct pl_client_conn *c) {
    if (!c)
        return;
    pl_close_fd(&c->sock);
    pl_close_fd(&c->broker_fd);
    pl_close_fd(&c->client_fd);
    pl_ipc_region_done(&c->region);
    free(c->rx);
    c->rx = NULL;
    c->rx_cap = 0;
    if (c->lock_ready)
        (void)pthread_mutex_destroy(&c->sq_lock);
    c->lock_ready = false;
}

/* ---- Hang-up detection ---- */

/* The socket carries nothing after the handshake; it became readable or hung up. Returns
 * -PL_ERR_GONE when the broker is gone, 0 otherwise (a stray message is read and dropped,
 * closing any fd it carried, so that it cannot keep the socket readable forever).
 * c->gone is a flag any thread may read (picolm_cancel): relaxed, it carries no data (the
 * rings are synchronised by their own indices). */
static int check_socket(struct pl_client_conn *c, short revents) {
    if (revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL)) {
        atomic_store_explicit(&c->gone, true, memory_order_relaxed);
        return -PL_ERR_GONE;
    }
    if (!(revents & POLLIN))
        return 0;
    uint8_t buf[64];
    union {
        struct cmsghdr align;
        uint8_t bytes[CMSG_SPACE(sizeof(int) * 8)];
    } ctl;
    struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf)};
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = ctl.bytes,
                        .msg_controllen = sizeof(ctl.bytes)};
    ssize_t n = recvmsg(c->sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n == 0) {
        atomic_store_explicit(&c->gone, true, memory_order_relaxed);
        return -PL_ERR_GONE;
    }
    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR)
            return 0;
        atomic_store_explicit(&c->gone, true, memory_order_relaxed);
        return -PL_ERR_GONE;
    }
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < nfd; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
            pl_close_fd(&fd);
        }
    }
    return 0;
}

/* ---- Submissions ---- */

static int sq_ready_locked(struct pl_client_conn *c, uint32_t need) {
    (void)pthread_mutex_lock(&c->sq_lock);
    int r = pl_ipc_ring_ready(&c->sq, need);
    (void)pthread_mutex_unlock(&c->sq_lock);
    return r;
}

static int try_send(struct pl_client_conn *c, uint32_t type, const ProtobufCMessage *msg,
                    uint32_t len) {
    void *payload;
    (void)pthread_mutex_lock(&c->sq_lock);
    int r = pl_ipc_ring_reserve(&c->sq, len, &payload);
    if (r == 0) {
        size_t packed = protobuf_c_message_pack(msg, payload);
        r = packed == len ? pl_ipc_ring_commit(&c->sq, type, len) : -EIO;
        if (r == 0)
            r = pl_ipc_doorbell_notify(&c->sq, c->broker_fd);
    }
    (void)pthread_mutex_unlock(&c->sq_lock);
    return r;
}

int pl_client_conn_send(struct pl_client_conn *c, uint32_t type, const ProtobufCMessage *msg,
                        bool may_wait, uint32_t *ret_need) {
    if (atomic_load_explicit(&c->gone, memory_order_relaxed))
        return -PL_ERR_GONE;
    size_t size = protobuf_c_message_get_packed_size(msg);
    if (size > pl_ipc_ring_max_payload(&c->sq))
        return -EMSGSIZE;
    uint32_t len = (uint32_t)size;

    int r = try_send(c, type, msg, len);
    if (r != -EAGAIN)
        return r;
    if (may_wait) {
        if (ret_need)
            *ret_need = len;
        return -EAGAIN;
    }
    /* A foreign thread may not touch the completion ring or the doorbell: poll the socket
     * (for hang-ups) with a short timeout until the broker makes room. */
    int bound = c->timeout_ms >= 0 ? c->timeout_ms : SEND_DEFAULT_BOUND_MS;
    uint64_t deadline = pl_now_ns() + (uint64_t)bound * 1000000ull;
    for (;;) {
        struct pollfd p = {.fd = c->sock, .events = POLLRDHUP};
        int n = poll(&p, 1, SEND_POLL_MS);
        if (n > 0 && check_socket(c, p.revents) < 0)
            return -PL_ERR_GONE;
        r = try_send(c, type, msg, len);
        if (r != -EAGAIN)
            return r;
        if (pl_now_ns() >= deadline)
            return -ETIMEDOUT;
    }
}

/* ---- Completions ---- */

int pl_client_conn_read(struct pl_client_conn *c, uint32_t *ret_type, uint32_t *ret_len) {
    int r = pl_ipc_ring_read(&c->cq, c->rx, c->rx_cap, ret_type, ret_len);
    /* rx_cap is the ring's own maximum, so -EMSGSIZE means the ring is inconsistent. */
    return r == -EMSGSIZE ? -PL_ERR_PROTOCOL : r;
}

int pl_client_conn_release(struct pl_client_conn *c) {
    return pl_ipc_doorbell_notify(&c->cq, c->broker_fd);
}

/* 1 when a completion is available or (sq_need > 0) the submission ring has room. */
static int ready(struct pl_client_conn *c, uint32_t sq_need) {
    int r = pl_ipc_ring_ready(&c->cq, 0);
    if (r != 0 || !sq_need)
        return r;
    return sq_ready_locked(c, sq_need);
}

/* Sleep on futexes until ready(c, sq_need), the deadline (0: none) or the broker's hang-up:
 * one FUTEX_WAIT per sleep, and the broker wakes us with one FUTEX_WAKE. */
static int wait_futex(struct pl_client_conn *c, uint32_t sq_need, uint64_t deadline) {
    for (;;) {
        int slice = sq_need ? FUTEX_SLEEP_SQ_MS : FUTEX_SLEEP_MS;
        if (deadline) {
            uint64_t now = pl_now_ns();
            if (now >= deadline)
                return -ETIMEDOUT;
            uint64_t left = (deadline - now + 999999ull) / 1000000ull;
            if (left < (uint64_t)slice)
                slice = (int)left;
        }
        /* Announce that we sleep, then re-check (the fence inside pairs with the broker's
         * publish), so a record committed in between is never missed. */
        struct pl_ipc_futex f, fsq;
        int r = pl_ipc_ring_sleep_prepare_futex(&c->cq, 0, &f);
        if (r != 0)
            return r < 0 ? r : 0;
        if (sq_need) {
            (void)pthread_mutex_lock(&c->sq_lock);
            r = pl_ipc_ring_sleep_prepare_futex(&c->sq, sq_need, &fsq);
            (void)pthread_mutex_unlock(&c->sq_lock);
            if (r != 0) {
                pl_ipc_ring_sleep_finish(&c->cq);
                return r < 0 ? r : 0;
            }
        }
        int sr = pl_ipc_doorbell_futex_sleep(&f, slice);
        pl_ipc_ring_sleep_finish(&c->cq);
        if (sq_need) {
            (void)pthread_mutex_lock(&c->sq_lock);
            pl_ipc_ring_sleep_finish(&c->sq);
            (void)pthread_mutex_unlock(&c->sq_lock);
        }
        if (sr < 0 && sr != -ETIMEDOUT && sr != -EINTR)
            return sr;
        r = ready(c, sq_need);
        if (r != 0)
            return r < 0 ? r : 0;
        if (sr == 0)
            continue; /* woken for something already taken, or stale: sleep again */
        /* A whole slice without a wake-up: is the broker still there? */
        struct pollfd p = {.fd = c->sock, .events = POLLRDHUP};
        int n = poll(&p, 1, 0);
        if (n > 0 && check_socket(c, p.revents) < 0) {
            r = ready(c, sq_need); /* what it wrote before dying is still ours to read */
            if (r != 0)
                return r < 0 ? r : 0;
            return -PL_ERR_GONE;
        }
    }
}

/* Adaptive spinning. A spin pays when the broker answers within it (a round trip to a busy
 * broker); in a token stream the next record comes later than any spin, and on a small machine
 * the spinning core is one the broker's workers need, so every token then costs the spin. After
 * SPIN_MISS_LIMIT misses in a row we skip the spin and try it again once per SPIN_PROBE_EVERY
 * waits; a hit restores it.
 *
 * The spin pauses for SPIN_PAUSE_NS, then yields the CPU at each look. A wake-up across CPUs
 * costs 10-50 us on a virtual machine, more than a short request's whole overhead; a yielding
 * spinner is still runnable when the answer comes, so it sees the answer as soon as the CPU it
 * shares is free (the broker's threads yield between steps) without costing them the CPU
 * while they compute: a yield returns at once only when nothing else wants the CPU. */
#define SPIN_PAUSE_NS 2000u
#define SPIN_MISS_LIMIT 4u
#define SPIN_PROBE_EVERY 32u

static bool spin_worthwhile(struct pl_client_conn *c) {
    if (!c->spin_ns)
        return false;
    if (c->spin_misses < SPIN_MISS_LIMIT)
        return true;
    return ++c->spin_skips % SPIN_PROBE_EVERY == 0;
}

int pl_client_conn_wait(struct pl_client_conn *c, uint32_t sq_need) {
    /* Our consumed space first: the broker may sleep waiting for exactly that room. */
    int r = pl_client_conn_release(c);
    if (r < 0)
        return r;
    r = ready(c, sq_need);
    if (r != 0)
        return r < 0 ? r : 0;
    if (atomic_load_explicit(&c->gone, memory_order_relaxed))
        return -PL_ERR_GONE;

    uint64_t start = pl_now_ns();
    if (spin_worthwhile(c)) {
        uint64_t t = start;
        for (uint32_t i = 1;; i++) {
            r = ready(c, sq_need);
            if (r != 0) {
                c->spin_misses = 0;
                c->spin_skips = 0;
                return r < 0 ? r : 0;
            }
            if (t - start < SPIN_PAUSE_NS) {
                pl_cpu_relax();
                if (i % 16 != 0)
                    continue; /* the clock once per 16 pauses */
            } else {
                (void)sched_yield();
            }
            t = pl_now_ns();
            if (t - start >= c->spin_ns)
                break;
        }
        if (c->spin_misses < SPIN_MISS_LIMIT)
            c->spin_misses++;
    }

    uint64_t deadline = c->timeout_ms >= 0 ? start + (uint64_t)c->timeout_ms * 1000000ull : 0;
    if (c->region.features & PL_IPC_FEATURE_FUTEX_WAKE)
        return wait_futex(c, sq_need, c->timeout_ms >= 0 ? PL_MAX(deadline, 1) : 0);
    /* A broker without futex wake-ups: sleep on our doorbell and the socket at once. */
    for (;;) {
        int timeout = -1;
        if (c->timeout_ms >= 0) {
            uint64_t now = pl_now_ns();
            if (now >= deadline)
                return -ETIMEDOUT;
            timeout = (int)((deadline - now + 999999ull) / 1000000ull);
        }
        /* Announce that we sleep, then re-check (the fence inside pairs with the broker's
         * publish), so a record committed in between is never missed. */
        r = pl_ipc_ring_sleep_prepare(&c->cq, 0);
        if (r != 0)
            return r < 0 ? r : 0;
        if (sq_need) {
            (void)pthread_mutex_lock(&c->sq_lock);
            r = pl_ipc_ring_sleep_prepare(&c->sq, sq_need);
            (void)pthread_mutex_unlock(&c->sq_lock);
            if (r != 0) {
                pl_ipc_ring_sleep_finish(&c->cq);
                return r < 0 ? r : 0;
            }
        }
        struct pollfd p[2] = {
            {.fd = c->client_fd, .events = POLLIN},
            {.fd = c->sock, .events = POLLRDHUP},
        };
        int n = poll(p, 2, timeout);
        int saved = errno;
        pl_ipc_ring_sleep_finish(&c->cq);
        if (sq_need) {
            (void)pthread_mutex_lock(&c->sq_lock);
            pl_ipc_ring_sleep_finish(&c->sq);
            (void)pthread_mutex_unlock(&c->sq_lock);
        }
        if (n < 0) {
            if (saved == EINTR)
                continue;
            return -saved;
        }
        if (p[0].revents & POLLIN) {
            r = pl_ipc_doorbell_drain(c->client_fd);
            if (r < 0)
                return r;
        }
        int gone = p[1].revents ? check_socket(c, p[1].revents) : 0;
        r = ready(c, sq_need);
        if (r != 0)
            return r < 0 ? r : 0;
        if (gone < 0)
            return gone; /* nothing left to read from a dead broker */
        /* Spurious or stale wake-up, or the timeout: loop (the deadline check ends it). */
    }
}
