/* SPDX-License-Identifier: MIT */
/* Unit tests for ipc/src/region.c: memfd creation, seals, header publication, and the client's
 * validation of every header field (version, magic, offsets, sizes, overlap, reserved). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "pl/ipc_abi.h"
#include "pl/ipc_region.h"
#include "pl/ipc_ring.h"
#include "pl/pl_err.h"

static void test_region_create_then_attach_shares_rings(void **state) {
    (void)state;
    struct pl_ipc_region b = PL_IPC_REGION_INIT, c = PL_IPC_REGION_INIT;
    assert_int_equal(pl_ipc_region_create(&b, 1u << 16, 1u << 14, 4096), 0);
    struct pl_ipc_region_hdr *h = (struct pl_ipc_region_hdr *)(void *)b.base;
    assert_int_equal(h->magic, PL_IPC_REGION_MAGIC);
    assert_int_equal(atomic_load(&h->abi_major), PL_IPC_ABI_MAJOR);
    assert_int_equal(h->region_bytes, b.bytes);
    assert_int_equal(h->sq.data_bytes, 1u << 16);
    assert_int_equal(h->cq.data_bytes, 1u << 14);

    int fd = dup(b.fd);
    assert_int_equal(pl_ipc_region_attach(&c, fd, 100), 0);
    assert_int_equal(c.fd, fd);
    assert_int_equal(c.bytes, b.bytes);
    assert_memory_equal(&c.sq, &b.sq, sizeof(c.sq));
    assert_memory_equal(&c.cq, &b.cq, sizeof(c.cq));

    struct pl_ipc_ring bsq, bcq, csq, ccq;
    assert_int_equal(pl_ipc_region_rings(&b, PL_IPC_REGION_BROKER, &bsq, &bcq), 0);
    assert_int_equal(pl_ipc_region_rings(&c, PL_IPC_REGION_CLIENT, &csq, &ccq), 0);
    assert_int_equal(pl_ipc_ring_push(&csq, 1, "request", 7), 0);
    (void)pl_ipc_ring_publish(&csq);
    assert_int_equal(pl_ipc_ring_push(&bcq, 2, "reply", 5), 0);
    (void)pl_ipc_ring_publish(&bcq);
    char buf[16];
    uint32_t ty, ln;
    assert_int_equal(pl_ipc_ring_read(&bsq, buf, sizeof(buf), &ty, &ln), 1);
    assert_int_equal(ln, 7);
    assert_memory_equal(buf, "request", 7);
    assert_int_equal(pl_ipc_ring_read(&ccq, buf, sizeof(buf), &ty, &ln), 1);
    assert_int_equal(ty, 2);
    assert_memory_equal(buf, "reply", 5);
    pl_ipc_region_done(&c);
    pl_ipc_region_done(&c); /* idempotent */
    pl_ipc_region_done(&b);
    struct pl_ipc_region never = PL_IPC_REGION_INIT;
    pl_ipc_region_done(&never);
}

static void test_region_is_sealed(void **state) {
    (void)state;
    struct pl_ipc_region b = PL_IPC_REGION_INIT;
    assert_int_equal(pl_ipc_region_create(&b, 4096, 4096, 1024), 0);
    int seals = fcntl(b.fd, F_GET_SEALS);
    assert_true(seals & F_SEAL_SHRINK);
    assert_true(seals & F_SEAL_GROW);
    assert_true(seals & F_SEAL_SEAL);
    assert_false(seals & F_SEAL_WRITE);
    assert_int_equal(ftruncate(b.fd, 4096), -1);
    assert_int_equal(errno, EPERM);
    assert_int_equal(ftruncate(b.fd, (off_t)b.bytes * 2), -1);
    assert_int_equal(fcntl(b.fd, F_ADD_SEALS, F_SEAL_WRITE), -1);
    assert_true(fcntl(b.fd, F_GETFD) & FD_CLOEXEC);
    pl_ipc_region_done(&b);
}

static void test_region_create_rejects_bad_sizes(void **state) {
    (void)state;
    struct pl_ipc_region b = PL_IPC_REGION_INIT;
    assert_int_equal(pl_ipc_region_create(&b, 3000, 4096, 1024), -EINVAL);
    assert_int_equal(pl_ipc_region_create(&b, 4096, 128, 64), -EINVAL);
    assert_int_equal(pl_ipc_region_create(&b, 4096, 4096, 4096), -EINVAL);
    assert_int_equal(pl_ipc_region_create(&b, 4096, 4096, 1020), -EINVAL);
    assert_int_equal(pl_ipc_region_create(&b, 1u << 31, 4096, 1024), -EINVAL);
    assert_int_equal(b.fd, -1); /* untouched on failure */
}

/* Make a valid region, let edit() spoil its header, and return what attach says. */
static int attach_after(void (*edit)(struct pl_ipc_region_hdr *h)) {
    struct pl_ipc_region b = PL_IPC_REGION_INIT, c = PL_IPC_REGION_INIT;
    assert_int_equal(pl_ipc_region_create(&b, 4096, 4096, 1024), 0);
    edit((struct pl_ipc_region_hdr *)(void *)b.base);
    int fd = dup(b.fd);
    int rc = pl_ipc_region_attach(&c, fd, 20);
    if (rc == 0)
        pl_ipc_region_done(&c);
    else
        close(fd);
    pl_ipc_region_done(&b);
    return rc;
}

static void e_major(struct pl_ipc_region_hdr *h) {
    atomic_store(&h->abi_major, 2);
}
static void e_zero_major(struct pl_ipc_region_hdr *h) {
    atomic_store(&h->abi_major, 0);
}
static void e_magic(struct pl_ipc_region_hdr *h) {
    h->magic ^= 1;
}
static void e_minor_up(struct pl_ipc_region_hdr *h) {
    h->abi_minor = 7;
    h->reserved[3] = 9;
    h->features = 0x80;
}
static void e_reserved(struct pl_ipc_region_hdr *h) {
    h->reserved[17] = 1;
}
static void e_desc_reserved(struct pl_ipc_region_hdr *h) {
    h->cq.reserved = 1;
}
static void e_hdr_bytes_small(struct pl_ipc_region_hdr *h) {
    h->header_bytes = 8;
}
static void e_hdr_bytes_big(struct pl_ipc_region_hdr *h) {
    h->header_bytes = 1u << 30;
}
static void e_region_bytes(struct pl_ipc_region_hdr *h) {
    h->region_bytes += 4096;
}
static void e_data_oob(struct pl_ipc_region_hdr *h) {
    h->cq.data_offset = h->region_bytes - 2048;
}
static void e_data_wrap(struct pl_ipc_region_hdr *h) {
    h->sq.data_offset = UINT64_MAX - 1023 - 63;
}
static void e_data_pow2(struct pl_ipc_region_hdr *h) {
    h->sq.data_bytes = 3072;
}
static void e_data_tiny(struct pl_ipc_region_hdr *h) {
    h->sq.data_bytes = 128;
}
static void e_overlap(struct pl_ipc_region_hdr *h) {
    h->cq.data_offset = h->sq.data_offset + 1024;
}
static void e_ctrl_in_hdr(struct pl_ipc_region_hdr *h) {
    h->sq.ctrl_offset = 64;
}
static void e_ctrl_unaligned(struct pl_ipc_region_hdr *h) {
    h->sq.ctrl_offset += 8;
}
static void e_ctrl_on_data(struct pl_ipc_region_hdr *h) {
    h->cq.ctrl_offset = h->sq.data_offset;
}
static void e_max_rec(struct pl_ipc_region_hdr *h) {
    h->sq.max_record_bytes = 4096;
}
static void e_max_rec_odd(struct pl_ipc_region_hdr *h) {
    h->cq.max_record_bytes = 1001;
}

static void test_region_attach_validates_header(void **state) {
    (void)state;
    assert_int_equal(attach_after(e_major), -PL_ERR_VERSION);
    assert_int_equal(attach_after(e_zero_major), -ETIMEDOUT);
    assert_int_equal(attach_after(e_magic), -PL_ERR_PROTOCOL);
    assert_int_equal(attach_after(e_minor_up), 0); /* higher minor, unknown bits: accepted */
    assert_int_equal(attach_after(e_reserved), -PL_ERR_PROTOCOL);
    assert_int_equal(attach_after(e_desc_reserved), -PL_ERR_PROTOCOL);
    assert_int_equal(attach_after(e_hdr_bytes_small), -PL_ERR_PROTOCOL);
    assert_int_equal(attach_after(e_hdr_bytes_big), -PL_ERR_PROTOCOL);
    assert_int_equal(attach_after(e_region_bytes), -PL_ERR_PROTOCOL);
    assert_int_equal(attach_after(e_data_oob), -PL_ERR_PROTOCOL);
    assert_int_equal(attach_after(e_data_wrap), -PL_ERR_PROTOCOL);
    assert_int_equal(attach_after(e_data_pow2), -PL_ERR_PROTOCOL);
    assert_int_equal(attach_after(e_data_tiny), -PL_ERR_PROTOCOL);
    assert_int_equal(attach_after(e_overlap), -PL_ERR_PROTOCOL);
    assert_int_equal(attach_after(e_ctrl_in_hdr), -PL_ERR_PROTOCOL);
    assert_int_equal(attach_after(e_ctrl_unaligned), -PL_ERR_PROTOCOL);
    assert_int_equal(attach_after(e_ctrl_on_data), -PL_ERR_PROTOCOL);
    assert_int_equal(attach_after(e_max_rec), -PL_ERR_PROTOCOL);
    assert_int_equal(attach_after(e_max_rec_odd), -PL_ERR_PROTOCOL);
}

static void test_region_attach_refuses_unsealed_or_short_files(void **state) {
    (void)state;
    struct pl_ipc_region c = PL_IPC_REGION_INIT;
    /* a correct header in an unsealed memfd: the peer could shrink it under us */
    struct pl_ipc_region b = PL_IPC_REGION_INIT;
    assert_int_equal(pl_ipc_region_create(&b, 4096, 4096, 1024), 0);
    int fd = memfd_create("unsealed", MFD_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)b.bytes), 0);
    assert_int_equal(pwrite(fd, b.base, 4096, 0), 4096);
    assert_int_equal(pl_ipc_region_attach(&c, fd, 20), -PL_ERR_PROTOCOL);
    close(fd);
    /* sealed, but shorter than a header */
    fd = memfd_create("short", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    assert_int_equal(ftruncate(fd, 100), 0);
    assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
    assert_int_equal(pl_ipc_region_attach(&c, fd, 20), -PL_ERR_PROTOCOL);
    close(fd);
    /* not a memfd at all */
    int p[2];
    assert_int_equal(pipe(p), 0);
    assert_true(pl_ipc_region_attach(&c, p[0], 20) < 0);
    close(p[0]);
    close(p[1]);
    assert_int_equal(pl_ipc_region_attach(&c, -1, 20), -EINVAL);
    assert_int_equal(c.fd, -1);
    pl_ipc_region_done(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_region_create_then_attach_shares_rings),
        cmocka_unit_test(test_region_is_sealed),
        cmocka_unit_test(test_region_create_rejects_bad_sizes),
        cmocka_unit_test(test_region_attach_validates_header),
        cmocka_unit_test(test_region_attach_refuses_unsealed_or_short_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
