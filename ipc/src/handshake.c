/* SPDX-License-Identifier: MIT */
/* The SOCK_SEQPACKET handshake (pl_ipc_handshake_*): hello, peer identity, welcome with fds.
 * The broker side treats every received byte and fd as hostile; the client side is just as
 * strict so that a confused broker gives a clear error instead of a half-set-up session. */
#include "pl/ipc_handshake.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pl/ipc_peer.h"
#include "pl/pl_err.h"
#include "pl/pl_util.h"

/* Room for more fds than any valid message carries, so we see (and close) extras. */
#define MAX_RX_FDS 16
#define RX_BUF_BYTES 256 /* a newer minor may append fields; more than this is malformed */

union cmsg_buf {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * MAX_RX_FDS)];
};

struct rx {
    uint8_t data[RX_BUF_BYTES];
    size_t len;
    int fds[MAX_RX_FDS];
    int n_fds;
    int n_rights_msgs;
    bool ctrunc;
};

static void rx_close_fds(struct rx *m) {
    for (int i = 0; i < m->n_fds; i++)
        pl_close_fd(&m->fds[i]);
    m->n_fds = 0;
}

/* One recvmsg. Collects every SCM_RIGHTS fd (MSG_CMSG_CLOEXEC, so none can leak into a child
 * even briefly). Returns 0 with *m filled (caller closes m->fds), -EAGAIN, -PL_ERR_GONE on
 * EOF, -PL_ERR_PROTOCOL on a truncated message, or -errno. */
static int rx_one(int sock, struct rx *m) {
    union cmsg_buf cb;
    struct iovec iov = {.iov_base = m->data, .iov_len = sizeof(m->data)};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cb.buf, .msg_controllen = sizeof(cb.buf)};
    ssize_t n;
    do {
        n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return (errno == ECONNRESET || errno == EPIPE) ? -PL_ERR_GONE : -errno;

    m->len = (size_t)n;
    m->n_fds = 0;
    m->n_rights_msgs = 0;
    m->ctrunc = (mh.msg_flags & MSG_CTRUNC) != 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        m->n_rights_msgs++;
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(fd));
            if (m->n_fds < MAX_RX_FDS)
                m->fds[m->n_fds++] = fd;
            else
                (void)close(fd); /* cannot happen with our buffer size; be safe anyway */
        }
    }
    if (n == 0 && m->n_fds == 0)
        return -PL_ERR_GONE;
    if ((mh.msg_flags & MSG_TRUNC) || m->ctrunc) {
        rx_close_fds(m);
        return -PL_ERR_PROTOCOL;
    }
    return 0;
}

static int tx(int sock, const void *buf, size_t len, const int *fds, int n_fds) {
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int) * PL_IPC_WELCOME_N_FDS)];
    } cb;
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (n_fds > 0) {
        memset(&cb, 0, sizeof(cb));
        mh.msg_control = cb.buf;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n_fds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n_fds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)n_fds);
    }
    ssize_t n;
    do {
        n = sendmsg(sock, &mh, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN) ? -PL_ERR_GONE : -errno;
    return (size_t)n == len ? 0 : -EIO; /* SEQPACKET sends whole records or fails */
}

static bool all_zero(const uint32_t *v, size_t n) {
    uint32_t acc = 0;
    for (size_t i = 0; i < n; i++)
        acc |= v[i];
    return acc == 0;
}

/* ---- Broker side ---- */

int pl_ipc_handshake_recv_hello(int sock, struct pl_ipc_hello *ret_hello,
                                struct pl_ipc_peer *ret_peer) {
    if (sock < 0 || !ret_hello || !ret_peer)
        return -EINVAL;
    struct rx m;
    int r = rx_one(sock, &m);
    if (r < 0)
        return r;
    if (m.n_fds > 0 || m.n_rights_msgs > 0) {
        rx_close_fds(&m); /* the hello carries no fds: whatever came is not ours to keep */
        return -PL_ERR_PROTOCOL;
    }
    struct pl_ipc_hello h; /* untrusted, copied out of the receive buffer */
    if (m.len < sizeof(h))
        return -PL_ERR_PROTOCOL;
    memcpy(&h, m.data, sizeof(h));
    if (h.magic != PL_IPC_HELLO_MAGIC)
        return -PL_ERR_PROTOCOL;
    if (h.abi_major != PL_IPC_ABI_MAJOR)
        return -PL_ERR_VERSION;
    /* Our own minor (or older) must send exactly this struct with reserved fields zero; a
     * newer minor may append fields and use reserved ones. No flags are defined in any minor
     * of this major, so unknown flag bits are refused. */
    bool newer = h.abi_minor > PL_IPC_ABI_MINOR;
    if (h.flags != 0 ||
        (!newer && (m.len != sizeof(h) || !all_zero(h.reserved, PL_ARRAY_SIZE(h.reserved)))))
        return -PL_ERR_PROTOCOL;

    struct pl_ipc_peer p;
    r = pl_ipc_peer_from_socket(sock, &p);
    if (r < 0)
        return r;
    *ret_hello = h;
    *ret_peer = p;
    return 0;
}

int pl_ipc_handshake_send_welcome(int sock, uint64_t session_id, uint64_t region_bytes,
                                  int region_fd, int broker_doorbell_fd, int client_doorbell_fd) {
    if (sock < 0 || region_fd < 0 || broker_doorbell_fd < 0 || client_doorbell_fd < 0)
        return -EINVAL;
    struct pl_ipc_welcome w = {.magic = PL_IPC_WELCOME_MAGIC,
                               .abi_major = PL_IPC_ABI_MAJOR,
                               .abi_minor = PL_IPC_ABI_MINOR,
                               .status = PL_IPC_WELCOME_OK,
                               .n_fds = PL_IPC_WELCOME_N_FDS,
                               .session_id = session_id,
                               .region_bytes = region_bytes};
    int fds[PL_IPC_WELCOME_N_FDS] = {region_fd, broker_doorbell_fd, client_doorbell_fd};
    return tx(sock, &w, sizeof(w), fds, PL_IPC_WELCOME_N_FDS);
}

int pl_ipc_handshake_send_reject(int sock, enum pl_ipc_welcome_status status) {
    switch (status) {
    case PL_IPC_WELCOME_VERSION:
    case PL_IPC_WELCOME_DENIED:
    case PL_IPC_WELCOME_BUSY:
    case PL_IPC_WELCOME_ERROR:
    case PL_IPC_WELCOME_QUOTA:
        break;
    case PL_IPC_WELCOME_OK:
    default:
        return -EINVAL;
    }
    if (sock < 0)
        return -EINVAL;
    struct pl_ipc_welcome w = {.magic = PL_IPC_WELCOME_MAGIC,
                               .abi_major = PL_IPC_ABI_MAJOR,
                               .abi_minor = PL_IPC_ABI_MINOR,
                               .status = (uint32_t)status};
    return tx(sock, &w, sizeof(w), NULL, 0);
}

/* ---- Client side ---- */

int pl_ipc_handshake_send_hello(int sock) {
    if (sock < 0)
        return -EINVAL;
    struct pl_ipc_hello h = {
        .magic = PL_IPC_HELLO_MAGIC, .abi_major = PL_IPC_ABI_MAJOR, .abi_minor = PL_IPC_ABI_MINOR};
    return tx(sock, &h, sizeof(h), NULL, 0);
}

int pl_ipc_handshake_recv_welcome(int sock, struct pl_ipc_handshake_result *ret) {
    if (sock < 0 || !ret)
        return -EINVAL;
    struct rx m;
    int r = rx_one(sock, &m);
    if (r < 0)
        return r;
    struct pl_ipc_welcome w;
    if (m.len < sizeof(w)) {
        r = -PL_ERR_PROTOCOL;
        goto fail;
    }
    memcpy(&w, m.data, sizeof(w));
    if (w.magic != PL_IPC_WELCOME_MAGIC) {
        r = -PL_ERR_PROTOCOL;
        goto fail;
    }
    if (w.abi_major != PL_IPC_ABI_MAJOR) {
        r = -PL_ERR_VERSION;
        goto fail;
    }
    bool newer = w.abi_minor > PL_IPC_ABI_MINOR;
    if (!newer && (m.len != sizeof(w) || !all_zero(w.reserved, PL_ARRAY_SIZE(w.reserved)))) {
        r = -PL_ERR_PROTOCOL;
        goto fail;
    }
    switch (w.status) {
    case PL_IPC_WELCOME_OK:
        break;
    case PL_IPC_WELCOME_VERSION:
        r = m.n_fds ? -PL_ERR_PROTOCOL : -PL_ERR_VERSION;
        goto fail;
    case PL_IPC_WELCOME_DENIED:
        r = m.n_fds ? -PL_ERR_PROTOCOL : -PL_ERR_DENIED;
        goto fail;
    case PL_IPC_WELCOME_BUSY:
        r = m.n_fds ? -PL_ERR_PROTOCOL : -PL_ERR_EXHAUSTED;
        goto fail;
    case PL_IPC_WELCOME_ERROR:
        r = m.n_fds ? -PL_ERR_PROTOCOL : -ECONNABORTED;
        goto fail;
    case PL_IPC_WELCOME_QUOTA:
        r = m.n_fds ? -PL_ERR_PROTOCOL : -PL_ERR_QUOTA;
        goto fail;
    default:
        r = -PL_ERR_PROTOCOL;
        goto fail;
    }
    if (w.n_fds != PL_IPC_WELCOME_N_FDS || m.n_fds != PL_IPC_WELCOME_N_FDS ||
        m.n_rights_msgs != 1) {
        r = -PL_ERR_PROTOCOL;
        goto fail;
    }
    *ret = (struct pl_ipc_handshake_result){.session_id = w.session_id,
                                            .region_bytes = w.region_bytes,
                                            .abi_minor = w.abi_minor,
                                            .region_fd = m.fds[0],
                                            .broker_doorbell_fd = m.fds[1],
                                            .client_doorbell_fd = m.fds[2]};
    return 0;

fail:
    rx_close_fds(&m);
    return r;
}

int pl_ipc_handshake_client(int sock, struct pl_ipc_handshake_result *ret) {
    int r = pl_ipc_handshake_send_hello(sock);
    if (r < 0)
        return r;
    return pl_ipc_handshake_recv_welcome(sock, ret);
}

void pl_ipc_handshake_result_done(struct pl_ipc_handshake_result *r) {
    if (!r)
        return;
    pl_close_fd(&r->region_fd);
    pl_close_fd(&r->broker_doorbell_fd);
    pl_close_fd(&r->client_doorbell_fd);
}
