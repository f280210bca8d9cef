/* SPDX-License-Identifier: MIT */
/* A bounded bump allocator over a fixed buffer (pl_daemon_arena_*), exposed as a
 * ProtobufCAllocator so that unpacking one client record can never take more than the
 * arena's size, whatever the bytes say. Reset before each record; frees are no-ops. One per
 * session, used by dispatch.c on the event thread. */
#ifndef PL_DAEMON_ARENA_H
#define PL_DAEMON_ARENA_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

struct pl_daemon_arena {
    uint8_t *buf; /* owned */
    size_t cap;
    size_t used;
    size_t peak;           /* high-water mark, for stats */
    uint64_t n_refused;    /* allocations that did not fit */
    ProtobufCAllocator pb; /* allocator_data points back here */
};

/* Returns 0, -EINVAL, -ENOMEM. */
int pl_daemon_arena_init(struct pl_daemon_arena *a, size_t cap);
void pl_daemon_arena_done(struct pl_daemon_arena *a);
void pl_daemon_arena_reset(struct pl_daemon_arena *a);

#endif
