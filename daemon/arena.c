/* SPDX-License-Identifier: MIT */
/* Bounded per-session allocator for protobuf-c unpacking. */
#include "arena.h"

#include <errno.h>
#include <stdlib.h>

#include "pl/pl_util.h"

static void *arena_alloc(void *data, size_t size) {
    struct pl_daemon_arena *a = data;
    size_t need = PL_ALIGN_UP(size, (size_t)16), end;
    if (size == 0)
        need = 16;
    if (pl_add_overflow(a->used, need, &end) || end > a->cap) {
        a->n_refused++;
        return NULL; /* protobuf-c turns this into a failed unpack */
    }
    void *p = a->buf + a->used;
    a->used = end;
    if (end > a->peak)
        a->peak = end;
    return p;
}

static void arena_free(void *data, void *p) {
    (void)data;
    (void)p; /* everything goes at the next reset */
}

int pl_daemon_arena_init(struct pl_daemon_arena *a, size_t cap) {
    if (cap == 0)
        return -EINVAL;
    a->buf = aligned_alloc(16, PL_ALIGN_UP(cap, (size_t)16));
    if (!a->buf)
        return -ENOMEM;
    a->cap = PL_ALIGN_UP(cap, (size_t)16);
    a->used = a->peak = 0;
    a->n_refused = 0;
    a->pb.alloc = arena_alloc;
    a->pb.free = arena_free;
    a->pb.allocator_data = a;
    return 0;
}

void pl_daemon_arena_done(struct pl_daemon_arena *a) {
    free(a->buf);
    a->buf = NULL;
    a->cap = a->used = 0;
}

void pl_daemon_arena_reset(struct pl_daemon_arena *a) {
    a->used = 0;
}
