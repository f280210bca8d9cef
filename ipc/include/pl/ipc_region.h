/* SPDX-License-Identifier: MIT */
/* The per-client shared-memory region: a sealed memfd holding the header and the two rings
 * (layout in pl/ipc_abi.h). The broker creates it (pl_ipc_region_create) and passes the fd in
 * the handshake; the client maps and validates it (pl_ipc_region_attach). Both then attach
 * their ring ends with pl_ipc_region_rings(). The layout used by either side is a private,
 * validated copy: nobody re-reads the shared header after setup. */
#ifndef PL_IPC_IPC_REGION_H
#define PL_IPC_IPC_REGION_H

#include <stddef.h>
#include <stdint.h>

#include "pl/ipc_abi.h"

struct pl_ipc_ring;

/* Caller-owned storage; fields are read-only for callers. */
struct pl_ipc_region {
    int fd;                     /* the memfd (owned), -1 when not set up */
    uint8_t *base;              /* mapping of the whole region (owned) */
    size_t bytes;               /* mapping length */
    uint32_t abi_minor;         /* creator's minor */
    uint32_t features;          /* creator's features (unknown bits ignored) */
    struct pl_ipc_ring_desc sq; /* validated private copies of the ring descriptors */
    struct pl_ipc_ring_desc cq;
};

#define PL_IPC_REGION_INIT                                                                         \
    { .fd = -1 }

enum pl_ipc_region_side {
    PL_IPC_REGION_BROKER = 0, /* consumes sq, produces cq */
    PL_IPC_REGION_CLIENT = 1, /* produces sq, consumes cq */
};

/* Broker: create a region with rings of sq_bytes and cq_bytes (powers of two in
 * [PL_IPC_RING_MIN_BYTES, PL_IPC_RING_MAX_BYTES]) and records of at most max_record_bytes
 * (multiple of 8, >= 16, <= half the smaller ring). The memfd is MFD_CLOEXEC and sealed with
 * F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL. The header is written last, abi_major with a
 * release store. Returns 0 with *ret set up, -EINVAL on bad sizes, or -errno. */
int pl_ipc_region_create(struct pl_ipc_region *ret, uint32_t sq_bytes, uint32_t cq_bytes,
                         uint32_t max_record_bytes);

/* Client: map the region behind fd and validate its header: waits up to timeout_ms for a
 * non-zero abi_major, refuses another major (-PL_ERR_VERSION), accepts a higher minor, checks
 * that the memfd is sealed against shrinking and that every offset and size lies inside the
 * region without overlap. On success takes ownership of fd; on failure fd stays the caller's.
 * Returns 0, -PL_ERR_VERSION, -PL_ERR_PROTOCOL (bad header or seals), -ETIMEDOUT or -errno. */
int pl_ipc_region_attach(struct pl_ipc_region *ret, int fd, int timeout_ms);

/* Attach this side's ends of both rings (broker: sq consumer + cq producer; client: sq
 * producer + cq consumer). The broker must do this before handing the fd out. Returns what
 * pl_ipc_ring_init() returns. */
int pl_ipc_region_rings(const struct pl_ipc_region *reg, enum pl_ipc_region_side side,
                        struct pl_ipc_ring *ret_sq, struct pl_ipc_ring *ret_cq);

/* Unmap and close. Accepts a region initialised with PL_IPC_REGION_INIT or already done. */
void pl_ipc_region_done(struct pl_ipc_region *reg);

#endif
