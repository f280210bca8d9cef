/* SPDX-License-Identifier: MIT */
/* Lock-free SPSC message queue between picolmd's event and inference threads. */
#include "spsc.h"

#include <errno.h>
#include <stdlib.h>

int pl_daemon_spsc_init(struct pl_daemon_spsc *q, uint32_t min_cap) {
    uint32_t cap = 1;
    if (min_cap == 0 || min_cap > (1u << 24))
        return -EINVAL;
    while (cap < min_cap)
        cap <<= 1;
    q->slots = calloc(cap, sizeof(*q->slots));
    if (!q->slots)
        return -ENOMEM;
    q->mask = cap - 1;
    atomic_init(&q->head, 0);
    atomic_init(&q->tail, 0);
    return 0;
}

void pl_daemon_spsc_done(struct pl_daemon_spsc *q) {
    free(q->slots);
    q->slots = NULL;
}

int pl_daemon_spsc_push(struct pl_daemon_spsc *q, const struct pl_daemon_msg *m) {
    uint32_t tail = atomic_load_explicit(&q->tail, memory_order_relaxed);
    /* Acquire: pairs with the consumer's release store of head, so the slot it freed is no
     * longer being read when we overwrite it. */
    uint32_t head = atomic_load_explicit(&q->head, memory_order_acquire);
    if (tail - head > q->mask)
        return -ENOSPC;
    q->slots[tail & q->mask] = *m;
    /* Release: publishes the slot contents (and whatever the message points to) to the
     * consumer's acquire load of tail. */
    atomic_store_explicit(&q->tail, tail + 1, memory_order_release);
    return 0;
}

bool pl_daemon_spsc_pop(struct pl_daemon_spsc *q, struct pl_daemon_msg *ret) {
    uint32_t head = atomic_load_explicit(&q->head, memory_order_relaxed);
    /* Acquire: pairs with the producer's release store of tail in push. */
    uint32_t tail = atomic_load_explicit(&q->tail, memory_order_acquire);
    if (head == tail)
        return false;
    *ret = q->slots[head & q->mask];
    /* Release: pairs with the producer's acquire load of head: our read of the slot happens
     * before it may be reused. */
    atomic_store_explicit(&q->head, head + 1, memory_order_release);
    return true;
}

bool pl_daemon_spsc_empty(struct pl_daemon_spsc *q) {
    return atomic_load_explicit(&q->head, memory_order_acquire) ==
           atomic_load_explicit(&q->tail, memory_order_acquire);
}
