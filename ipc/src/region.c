/* SPDX-License-Identifier: MIT */
/* Shared-memory region (pl_ipc_region_*): memfd creation, sealing and header publication on
 * the broker side; mapping and strict header validation on the client side. */
#include "pl/ipc_region.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pl/ipc_ring.h"
#include "pl/pl_err.h"
#include "pl/pl_util.h"

#define CTRL_AREA_OFFSET 4096u /* after the header page */

static bool is_pow2(uint64_t v) {
    return v != 0 && (v & (v - 1)) == 0;
}

static bool ring_size_ok(uint64_t v) {
    return is_pow2(v) && v >= PL_IPC_RING_MIN_BYTES && v <= PL_IPC_RING_MAX_BYTES;
}

int pl_ipc_region_create(struct pl_ipc_region *ret, uint32_t sq_bytes, uint32_t cq_bytes,
                         uint32_t max_record_bytes) {
    if (!ret || !ring_size_ok(sq_bytes) || !ring_size_ok(cq_bytes) || max_record_bytes < 16 ||
        max_record_bytes % PL_IPC_REC_ALIGN != 0 ||
        max_record_bytes > PL_MIN(sq_bytes, cq_bytes) / 2)
        return -EINVAL;

    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0)
        page = 4096;
    /* header page, control blocks, then each data area page-aligned: sq, cq */
    uint64_t sq_ctrl = CTRL_AREA_OFFSET;
    uint64_t cq_ctrl = sq_ctrl + sizeof(struct pl_ipc_ring_ctrl);
    uint64_t sq_data = PL_ALIGN_UP(cq_ctrl + sizeof(struct pl_ipc_ring_ctrl), (uint64_t)page);
    uint64_t cq_data = PL_ALIGN_UP(sq_data + sq_bytes, (uint64_t)page);
    uint64_t total = PL_ALIGN_UP(cq_data + cq_bytes, (uint64_t)page);

    int r;
    uint8_t *base = MAP_FAILED;
    int fd = memfd_create("picolm-session", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -errno;
    if (ftruncate(fd, (off_t)total) < 0) {
        r = -errno;
        goto fail;
    }
    /* Sealed before anyone else sees the fd: nobody can shrink it under the broker (SIGBUS)
     * or grow it, and the seals themselves cannot change. Writes stay allowed: both sides
     * write their rings. */
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
        r = -errno;
        goto fail;
    }
    base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (base == MAP_FAILED) {
        r = -errno;
        goto fail;
    }

    struct pl_ipc_ring_desc sq = {.ctrl_offset = sq_ctrl,
                                  .ctrl_bytes = sizeof(struct pl_ipc_ring_ctrl),
                                  .data_offset = sq_data,
                                  .data_bytes = sq_bytes,
                                  .max_record_bytes = max_record_bytes};
    struct pl_ipc_ring_desc cq = sq;
    cq.ctrl_offset = cq_ctrl;
    cq.data_offset = cq_data;
    cq.data_bytes = cq_bytes;

    /* The memfd starts zeroed: control blocks (indices 0, flags clear) and reserved fields
     * need no writes. The header goes in last, its abi_major with a release store. */
    struct pl_ipc_region_hdr *hdr = (struct pl_ipc_region_hdr *)(void *)base;
    hdr->magic = PL_IPC_REGION_MAGIC;
    hdr->abi_minor = PL_IPC_ABI_MINOR;
    hdr->header_bytes = sizeof(*hdr);
    hdr->features = PL_IPC_FEATURE_FUTEX_WAKE; /* ring.c honours PL_IPC_RING_WAKE_FUTEX */
    hdr->region_bytes = total;
    hdr->sq = sq;
    hdr->cq = cq;
    /* Release pairs with the acquire load in wait_version() on the attaching side. */
    atomic_store_explicit(&hdr->abi_major, PL_IPC_ABI_MAJOR, memory_order_release);

    *ret = (struct pl_ipc_region){.fd = fd,
                                  .base = base,
                                  .bytes = total,
                                  .abi_minor = PL_IPC_ABI_MINOR,
                                  .features = PL_IPC_FEATURE_FUTEX_WAKE,
                                  .sq = sq,
                                  .cq = cq};
    return 0;

fail:
    if (base != MAP_FAILED)
        (void)munmap(base, total);
    pl_close_fd(&fd);
    return r;
}

/* ---- Client side ---- */

static uint64_t now_ms(void) {
    struct timespec ts;
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int wait_version(struct pl_ipc_region_hdr *hdr, int timeout_ms, uint32_t *ret_major) {
    uint64_t start = now_ms();
    for (;;) {
        /* Acquire pairs with the creator's release store of abi_major: every other header
         * field is complete once we see it non-zero. */
        uint32_t major = atomic_load_explicit(&hdr->abi_major, memory_order_acquire);
        if (major) {
            *ret_major = major;
            return 0;
        }
        if (timeout_ms >= 0 && now_ms() - start >= (uint64_t)timeout_ms)
            return -ETIMEDOUT;
        (void)sched_yield();
    }
}

/* [off, off + len) lies inside [lo, total)? Overflow-safe. */
static bool in_bounds(uint64_t off, uint64_t len, uint64_t lo, uint64_t total) {
    uint64_t end;
    return off >= lo && !pl_add_overflow(off, len, &end) && end <= total;
}

static bool disjoint(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen) {
    return a + alen <= b || b + blen <= a; /* both ranges already checked in bounds */
}

static int check_desc(const struct pl_ipc_ring_desc *d, uint64_t header_bytes, uint64_t total,
                      bool strict) {
    if (!ring_size_ok(d->data_bytes) || d->ctrl_bytes < sizeof(struct pl_ipc_ring_ctrl) ||
        d->ctrl_offset % PL_IPC_CACHE_LINE != 0 || d->data_offset % PL_IPC_CACHE_LINE != 0 ||
        !in_bounds(d->ctrl_offset, d->ctrl_bytes, header_bytes, total) ||
        !in_bounds(d->data_offset, d->data_bytes, header_bytes, total) ||
        !disjoint(d->ctrl_offset, d->ctrl_bytes, d->data_offset, d->data_bytes) ||
        d->max_record_bytes < 16 || d->max_record_bytes % PL_IPC_REC_ALIGN != 0 ||
        d->max_record_bytes > d->data_bytes / 2 || (strict && d->reserved != 0))
        return -PL_ERR_PROTOCOL;
    return 0;
}

int pl_ipc_region_attach(struct pl_ipc_region *ret, int fd, int timeout_ms) {
    if (!ret || fd < 0)
        return -EINVAL;
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    /* Without F_SEAL_SHRINK the other side could truncate the file and make us take SIGBUS. */
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0)
        return errno == EINVAL ? -PL_ERR_PROTOCOL : -errno;
    if (!(seals & F_SEAL_SHRINK) || st.st_size < (off_t)sizeof(struct pl_ipc_region_hdr) ||
        (uint64_t)st.st_size > (uint64_t)SIZE_MAX)
        return -PL_ERR_PROTOCOL;
    size_t total = (size_t)st.st_size;
    uint8_t *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (base == MAP_FAILED)
        return -errno;

    int r;
    struct pl_ipc_region_hdr *shared = (struct pl_ipc_region_hdr *)(void *)base;
    uint32_t major;
    r = wait_version(shared, timeout_ms, &major);
    if (r < 0)
        goto fail;
    /* One copy of the header, validated and then used alone. */
    struct pl_ipc_region_hdr h;
    memcpy(&h, shared, sizeof(h));
    if (h.magic != PL_IPC_REGION_MAGIC) {
        r = -PL_ERR_PROTOCOL;
        goto fail;
    }
    if (major != PL_IPC_ABI_MAJOR) {
        r = -PL_ERR_VERSION;
        goto fail;
    }
    /* A higher minor may use reserved fields we do not know; ours must leave them zero. */
    bool strict = h.abi_minor <= PL_IPC_ABI_MINOR;
    bool reserved_zero = true;
    for (size_t i = 0; i < PL_ARRAY_SIZE(h.reserved); i++)
        reserved_zero &= h.reserved[i] == 0;
    if (h.header_bytes < sizeof(h) || h.header_bytes > total || h.region_bytes != total ||
        (strict && !reserved_zero) || check_desc(&h.sq, h.header_bytes, total, strict) < 0 ||
        check_desc(&h.cq, h.header_bytes, total, strict) < 0 ||
        !disjoint(h.sq.ctrl_offset, h.sq.ctrl_bytes, h.cq.ctrl_offset, h.cq.ctrl_bytes) ||
        !disjoint(h.sq.ctrl_offset, h.sq.ctrl_bytes, h.cq.data_offset, h.cq.data_bytes) ||
        !disjoint(h.sq.data_offset, h.sq.data_bytes, h.cq.ctrl_offset, h.cq.ctrl_bytes) ||
        !disjoint(h.sq.data_offset, h.sq.data_bytes, h.cq.data_offset, h.cq.data_bytes)) {
        r = -PL_ERR_PROTOCOL;
        goto fail;
    }

    *ret = (struct pl_ipc_region){.fd = fd,
                                  .base = base,
                                  .bytes = total,
                                  .abi_minor = h.abi_minor,
                                  .features = h.features,
                                  .sq = h.sq,
                                  .cq = h.cq};
    return 0;

fail:
    (void)munmap(base, total);
    return r;
}

int pl_ipc_region_rings(const struct pl_ipc_region *reg, enum pl_ipc_region_side side,
                        struct pl_ipc_ring *ret_sq, struct pl_ipc_ring *ret_cq) {
    if (!reg || !reg->base || !ret_sq || !ret_cq ||
        (side != PL_IPC_REGION_BROKER && side != PL_IPC_REGION_CLIENT))
        return -EINVAL;
    bool broker = side == PL_IPC_REGION_BROKER;
    struct pl_ipc_ring sq, cq;
    int r = pl_ipc_ring_init(
        &sq, (struct pl_ipc_ring_ctrl *)(void *)(reg->base + reg->sq.ctrl_offset),
        reg->base + reg->sq.data_offset, (uint32_t)reg->sq.data_bytes, reg->sq.max_record_bytes,
        broker ? PL_IPC_RING_CONSUMER : PL_IPC_RING_PRODUCER);
    if (r < 0)
        return r;
    r = pl_ipc_ring_init(&cq, (struct pl_ipc_ring_ctrl *)(void *)(reg->base + reg->cq.ctrl_offset),
                         reg->base + reg->cq.data_offset, (uint32_t)reg->cq.data_bytes,
                         reg->cq.max_record_bytes,
                         broker ? PL_IPC_RING_PRODUCER : PL_IPC_RING_CONSUMER);
    if (r < 0)
        return r;
    *ret_sq = sq;
    *ret_cq = cq;
    return 0;
}

void pl_ipc_region_done(struct pl_ipc_region *reg) {
    if (!reg)
        return;
    if (reg->base && reg->bytes)
        (void)munmap(reg->base, reg->bytes);
    reg->base = NULL;
    reg->bytes = 0;
    pl_close_fd(&reg->fd);
}
