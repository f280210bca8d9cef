/* SPDX-License-Identifier: MIT */
/* The protobuf-c bump allocator of libpicolm (pl_client_arena_*): allocations are 16-byte
 * aligned slices of one block; free is a no-op; reset rewinds. A cycle that outgrows the block
 * is served from extra blocks, and the next reset replaces the block by one that fits, so the
 * steady state of a stream performs no allocation at all. */
#include "arena.h"

#include <errno.h>
#include <stdalign.h>
#include <stdlib.h>

#include "pl/pl_util.h"

#define ARENA_ALIGN 16u

struct pl_client_arena_block {
    struct pl_client_arena_block *next;
    size_t bytes;
    alignas(16) uint8_t data[];
};

static void *arena_alloc(void *ud, size_t size) {
    struct pl_client_arena *a = ud;
    size_t want = PL_ALIGN_UP(size ? size : 1, (size_t)ARENA_ALIGN);
    if (want < size)
        return NULL; /* overflow of the rounding */
    size_t total;
    if (pl_add_overflow(a->used, a->overflow, &total) || pl_add_overflow(total, want, &total) ||
        total > a->limit)
        return NULL;
    if (a->cap - a->used >= want) {
        void *p = a->buf + a->used;
        a->used += want;
        return p;
    }
    struct pl_client_arena_block *b = malloc(sizeof(*b) + want);
    if (!b)
        return NULL;
    b->next = a->blocks;
    b->bytes = want;
    a->blocks = b;
    a->overflow += want;
    return b->data;
}

static void arena_free(void *ud, void *p) {
    /* Memory returns to the arena at the next reset. */
    (void)ud;
    (void)p;
}

int pl_client_arena_init(struct pl_client_arena *a, size_t initial_bytes, size_t limit_bytes) {
    if (initial_bytes > limit_bytes)
        return -EINVAL;
    initial_bytes = PL_ALIGN_UP(initial_bytes, (size_t)ARENA_ALIGN);
    uint8_t *buf = aligned_alloc(ARENA_ALIGN, initial_bytes ? initial_bytes : ARENA_ALIGN);
    if (!buf)
        return -ENOMEM;
    *a = (struct pl_client_arena){
        .pb = {.alloc = arena_alloc, .free = arena_free, .allocator_data = a},
        .buf = buf,
        .cap = initial_bytes,
        .limit = limit_bytes,
    };
    return 0;
}

static void free_blocks(struct pl_client_arena *a) {
    while (a->blocks) {
        struct pl_client_arena_block *b = a->blocks;
        a->blocks = b->next;
        free(b);
    }
    a->overflow = 0;
}

void pl_client_arena_reset(struct pl_client_arena *a) {
    if (a->blocks) {
        size_t need = a->used + a->overflow;
        size_t grown = need > a->limit / 2 ? a->limit : need * 2;
        grown = PL_ALIGN_UP(grown, (size_t)ARENA_ALIGN);
        free_blocks(a);
        uint8_t *buf = aligned_alloc(ARENA_ALIGN, grown);
        if (buf) {
            /* On failure the old block stays; the next large record overflows again. */
            free(a->buf);
            a->buf = buf;
            a->cap = grown;
        }
    }
    a->used = 0;
}

void pl_client_arena_done(struct pl_client_arena *a) {
    free_blocks(a);
    free(a->buf);
    a->buf = NULL;
    a->cap = a->used = 0;
}
