/* SPDX-License-Identifier: MIT */
/* Unit tests for ipc/src/handshake.c and ipc/src/peer.c: the happy path end to end (hello,
 * SO_PEERCRED identity, welcome with three fds, region attach), a wrong version, wrong magic,
 * bad sizes, a peer that closes early, a welcome without fds or with the wrong count, unasked
 * fds being closed, refusals, and hang-up detection. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "pl/ipc_abi.h"
#include "pl/ipc_doorbell.h"
#include "pl/ipc_handshake.h"
#include "pl/ipc_peer.h"
#include "pl/ipc_region.h"
#include "pl/ipc_ring.h"
#include "pl/pl_err.h"

static int open_fds(void) {
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

static void pair(int sv[2]) {
    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
}

static void send_raw(int sock, const void *buf, size_t len, const int *fds, int n_fds) {
    char cb[CMSG_SPACE(sizeof(int) * 8)];
    memset(cb, 0, sizeof(cb));
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (n_fds) {
        mh.msg_control = cb;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n_fds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n_fds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)n_fds);
    }
    assert_int_equal(sendmsg(sock, &mh, 0), (ssize_t)len);
}

static struct pl_ipc_hello good_hello(void) {
    return (struct pl_ipc_hello){
        .magic = PL_IPC_HELLO_MAGIC, .abi_major = PL_IPC_ABI_MAJOR, .abi_minor = PL_IPC_ABI_MINOR};
}

static void test_handshake_full_session_setup(void **state) {
    (void)state;
    int sv[2];
    pair(sv);
    assert_int_equal(pl_ipc_handshake_send_hello(sv[0]), 0);

    struct pl_ipc_hello h;
    struct pl_ipc_peer peer = PL_IPC_PEER_INIT;
    assert_int_equal(pl_ipc_handshake_recv_hello(sv[1], &h, &peer), 0);
    assert_int_equal(h.abi_major, PL_IPC_ABI_MAJOR);
    assert_int_equal(peer.pid, getpid());
    assert_int_equal(peer.uid, getuid());
    assert_int_equal(peer.gid, getgid());
    if (peer.pidfd >= 0)
        assert_true(fcntl(peer.pidfd, F_GETFD) & FD_CLOEXEC);

    struct pl_ipc_region reg = PL_IPC_REGION_INIT;
    assert_int_equal(pl_ipc_region_create(&reg, 4096, 4096, 1024), 0);
    struct pl_ipc_ring bsq, bcq;
    assert_int_equal(pl_ipc_region_rings(&reg, PL_IPC_REGION_BROKER, &bsq, &bcq), 0);
    int bfd, cfd;
    assert_int_equal(pl_ipc_doorbell_open(&bfd), 0);
    assert_int_equal(pl_ipc_doorbell_open(&cfd), 0);
    assert_int_equal(pl_ipc_handshake_send_welcome(sv[1], 77, reg.bytes, reg.fd, bfd, cfd), 0);

    struct pl_ipc_handshake_result res;
    assert_int_equal(pl_ipc_handshake_recv_welcome(sv[0], &res), 0);
    assert_int_equal(res.session_id, 77);
    assert_int_equal(res.region_bytes, reg.bytes);
    assert_true(fcntl(res.region_fd, F_GETFD) & FD_CLOEXEC);

    /* the received fds are the real things: attach and talk through them */
    struct pl_ipc_region creg = PL_IPC_REGION_INIT;
    assert_int_equal(pl_ipc_region_attach(&creg, res.region_fd, 100), 0);
    res.region_fd = -1;
    struct pl_ipc_ring csq, ccq;
    assert_int_equal(pl_ipc_region_rings(&creg, PL_IPC_REGION_CLIENT, &csq, &ccq), 0);
    assert_int_equal(pl_ipc_ring_sleep_prepare(&bsq, 0), 0);
    assert_int_equal(pl_ipc_ring_push(&csq, 1, "hi", 2), 0);
    assert_int_equal(pl_ipc_doorbell_notify(&csq, res.broker_doorbell_fd), 0);
    assert_int_equal(pl_ipc_doorbell_drain(bfd), 1); /* the broker's own fd saw the ring */
    pl_ipc_ring_sleep_finish(&bsq);
    char b[8];
    uint32_t ty, ln;
    assert_int_equal(pl_ipc_ring_read(&bsq, b, sizeof(b), &ty, &ln), 1);
    assert_int_equal(pl_ipc_doorbell_ring(cfd), 0);
    assert_int_equal(pl_ipc_doorbell_drain(res.client_doorbell_fd), 1);

    /* after the handshake the socket only reports hang-ups */
    assert_int_equal(pl_ipc_peer_hung_up(sv[1]), 0);
    close(sv[0]);
    assert_int_equal(pl_ipc_peer_hung_up(sv[1]), 1);

    pl_ipc_handshake_result_done(&res);
    pl_ipc_region_done(&creg);
    pl_ipc_region_done(&reg);
    pl_ipc_peer_done(&peer);
    close(bfd);
    close(cfd);
    close(sv[1]);
}

static void test_handshake_wrong_version_is_refused_both_ways(void **state) {
    (void)state;
    int sv[2];
    pair(sv);
    struct pl_ipc_hello h = good_hello();
    h.abi_major = PL_IPC_ABI_MAJOR + 1;
    send_raw(sv[0], &h, sizeof(h), NULL, 0);
    struct pl_ipc_hello got;
    struct pl_ipc_peer peer = PL_IPC_PEER_INIT;
    assert_int_equal(pl_ipc_handshake_recv_hello(sv[1], &got, &peer), -PL_ERR_VERSION);
    assert_int_equal(peer.pidfd, -1); /* untouched */
    assert_int_equal(pl_ipc_handshake_send_reject(sv[1], PL_IPC_WELCOME_VERSION), 0);
    struct pl_ipc_handshake_result res;
    assert_int_equal(pl_ipc_handshake_recv_welcome(sv[0], &res), -PL_ERR_VERSION);

    /* a welcome from a broker of another major */
    struct pl_ipc_welcome w = {.magic = PL_IPC_WELCOME_MAGIC, .abi_major = 9};
    send_raw(sv[1], &w, sizeof(w), NULL, 0);
    assert_int_equal(pl_ipc_handshake_recv_welcome(sv[0], &res), -PL_ERR_VERSION);
    close(sv[0]);
    close(sv[1]);
}

static void test_handshake_rejects_malformed_hello(void **state) {
    (void)state;
    struct pl_ipc_hello base = good_hello();
    uint8_t big[300];
    memset(big, 0, sizeof(big));
    memcpy(big, &base, sizeof(base));
    struct {
        const void *buf;
        size_t len;
    } msgs[6];
    struct pl_ipc_hello magic = base, flags = base, reserved = base;
    magic.magic ^= 0xff;
    flags.flags = 1;
    reserved.reserved[2] = 5;
    msgs[0].buf = &base, msgs[0].len = sizeof(base) - 1; /* short */
    msgs[1].buf = big, msgs[1].len = sizeof(big);        /* truncated */
    msgs[2].buf = &magic, msgs[2].len = sizeof(magic);
    msgs[3].buf = &flags, msgs[3].len = sizeof(flags);
    msgs[4].buf = &reserved, msgs[4].len = sizeof(reserved);
    msgs[5].buf = big, msgs[5].len = sizeof(base) + 8; /* longer, same minor */
    for (size_t i = 0; i < sizeof(msgs) / sizeof(msgs[0]); i++) {
        int sv[2];
        pair(sv);
        send_raw(sv[0], msgs[i].buf, msgs[i].len, NULL, 0);
        struct pl_ipc_hello got;
        struct pl_ipc_peer peer = PL_IPC_PEER_INIT;
        assert_int_equal(pl_ipc_handshake_recv_hello(sv[1], &got, &peer), -PL_ERR_PROTOCOL);
        close(sv[0]);
        close(sv[1]);
    }
    /* a newer minor may append bytes and use reserved fields */
    int sv[2];
    pair(sv);
    struct pl_ipc_hello newer = base;
    newer.abi_minor = PL_IPC_ABI_MINOR + 1;
    newer.reserved[0] = 3;
    memcpy(big, &newer, sizeof(newer));
    send_raw(sv[0], big, sizeof(newer) + 16, NULL, 0);
    struct pl_ipc_hello got;
    struct pl_ipc_peer peer = PL_IPC_PEER_INIT;
    assert_int_equal(pl_ipc_handshake_recv_hello(sv[1], &got, &peer), 0);
    pl_ipc_peer_done(&peer);
    close(sv[0]);
    close(sv[1]);
}

static void test_handshake_peer_that_closes_early(void **state) {
    (void)state;
    int sv[2];
    pair(sv);
    close(sv[0]);
    struct pl_ipc_hello got;
    struct pl_ipc_peer peer = PL_IPC_PEER_INIT;
    assert_int_equal(pl_ipc_handshake_recv_hello(sv[1], &got, &peer), -PL_ERR_GONE);
    assert_int_equal(pl_ipc_peer_hung_up(sv[1]), 1);
    assert_int_equal(pl_ipc_handshake_send_reject(sv[1], PL_IPC_WELCOME_DENIED), -PL_ERR_GONE);
    close(sv[1]);

    /* broker side closes before the welcome */
    pair(sv);
    assert_int_equal(pl_ipc_handshake_send_hello(sv[0]), 0);
    close(sv[1]);
    struct pl_ipc_handshake_result res;
    assert_int_equal(pl_ipc_handshake_recv_welcome(sv[0], &res), -PL_ERR_GONE);
    close(sv[0]);

    /* non-blocking socket, nothing sent yet */
    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK, 0, sv), 0);
    assert_int_equal(pl_ipc_handshake_recv_hello(sv[1], &got, &peer), -EAGAIN);
    assert_int_equal(pl_ipc_handshake_recv_welcome(sv[0], &res), -EAGAIN);
    close(sv[0]);
    close(sv[1]);
}

static void test_handshake_closes_unasked_fds(void **state) {
    (void)state;
    int sv[2];
    pair(sv);
    int before = open_fds();
    int extra[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(pl_ipc_doorbell_open(&extra[i]), 0);
    struct pl_ipc_hello h = good_hello();
    send_raw(sv[0], &h, sizeof(h), extra, 3);
    for (int i = 0; i < 3; i++)
        close(extra[i]);
    struct pl_ipc_hello got;
    struct pl_ipc_peer peer = PL_IPC_PEER_INIT;
    assert_int_equal(pl_ipc_handshake_recv_hello(sv[1], &got, &peer), -PL_ERR_PROTOCOL);
    assert_int_equal(open_fds(), before); /* the received copies are closed too */
    close(sv[0]);
    close(sv[1]);
}

static void test_handshake_welcome_with_wrong_fds(void **state) {
    (void)state;
    struct pl_ipc_welcome w = {.magic = PL_IPC_WELCOME_MAGIC,
                               .abi_major = PL_IPC_ABI_MAJOR,
                               .abi_minor = PL_IPC_ABI_MINOR,
                               .status = PL_IPC_WELCOME_OK,
                               .n_fds = PL_IPC_WELCOME_N_FDS};
    int fds[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pl_ipc_doorbell_open(&fds[i]), 0);
    const int counts[] = {0, 2, 4};
    for (size_t k = 0; k < 3; k++) {
        int sv[2];
        pair(sv);
        int before = open_fds();
        send_raw(sv[1], &w, sizeof(w), fds, counts[k]);
        struct pl_ipc_handshake_result res;
        assert_int_equal(pl_ipc_handshake_recv_welcome(sv[0], &res), -PL_ERR_PROTOCOL);
        assert_int_equal(open_fds(), before);
        close(sv[0]);
        close(sv[1]);
    }
    /* a refusal that carries fds anyway */
    int sv[2];
    pair(sv);
    w.status = PL_IPC_WELCOME_DENIED;
    w.n_fds = 0;
    int before = open_fds();
    send_raw(sv[1], &w, sizeof(w), fds, 1);
    struct pl_ipc_handshake_result res;
    assert_int_equal(pl_ipc_handshake_recv_welcome(sv[0], &res), -PL_ERR_PROTOCOL);
    assert_int_equal(open_fds(), before);
    /* refusals map to distinct errors */
    const struct {
        enum pl_ipc_welcome_status st;
        int err;
    } map[] = {{PL_IPC_WELCOME_DENIED, -PL_ERR_DENIED},
               {PL_IPC_WELCOME_BUSY, -PL_ERR_EXHAUSTED},
               {PL_IPC_WELCOME_ERROR, -ECONNABORTED}};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(pl_ipc_handshake_send_reject(sv[1], map[i].st), 0);
        assert_int_equal(pl_ipc_handshake_recv_welcome(sv[0], &res), map[i].err);
    }
    assert_int_equal(pl_ipc_handshake_send_reject(sv[1], PL_IPC_WELCOME_OK), -EINVAL);
    w.status = 77; /* unknown status */
    send_raw(sv[1], &w, sizeof(w), NULL, 0);
    assert_int_equal(pl_ipc_handshake_recv_welcome(sv[0], &res), -PL_ERR_PROTOCOL);
    close(sv[0]);
    close(sv[1]);
    for (int i = 0; i < 4; i++)
        close(fds[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handshake_full_session_setup),
        cmocka_unit_test(test_handshake_wrong_version_is_refused_both_ways),
        cmocka_unit_test(test_handshake_rejects_malformed_hello),
        cmocka_unit_test(test_handshake_peer_that_closes_early),
        cmocka_unit_test(test_handshake_closes_unasked_fds),
        cmocka_unit_test(test_handshake_welcome_with_wrong_fds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
