/* SPDX-License-Identifier: MIT */
/* A bump allocator for protobuf-c unpacking in libpicolm: every decoded record's memory comes
 * from one reusable block that is reset before the next record, so decoding a token chunk
 * allocates nothing once the block has grown to the largest record seen. Private to client/. */
#ifndef PL_CLIENT_ARENA_H
#define PL_CLIENT_ARENA_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

struct pl_client_arena_block;

struct pl_client_arena {
    ProtobufCAllocator pb;                /* hand &pb to protobuf-c unpack functions */
    uint8_t *buf;                         /* the main block (owned) */
    size_t cap;                           /* its bytes */
    size_t used;                          /* bytes handed out of buf since the last reset */
    size_t overflow;                      /* bytes handed out of overflow blocks */
    size_t limit;                         /* most bytes one cycle may hand out */
    struct pl_client_arena_block *blocks; /* overflow blocks of this cycle (owned) */
};

/* Set up an arena with an initial block of initial_bytes that will never hand out more than
 * limit_bytes between two resets (an allocation beyond returns NULL, which makes unpack
 * fail). Returns 0, -EINVAL (initial > limit) or -ENOMEM. */
int pl_client_arena_init(struct pl_client_arena *a, size_t initial_bytes, size_t limit_bytes);

/* Forget everything handed out. When overflow blocks were needed, they are freed and the main
 * block grows to hold that much next time (growth stops at the limit). */
void pl_client_arena_reset(struct pl_client_arena *a);

/* Free every block. Safe on a zeroed or already finished arena. */
void pl_client_arena_done(struct pl_client_arena *a);

#endif
