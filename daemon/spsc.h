/* SPDX-License-Identifier: MIT */
/* An in-process single-producer/single-consumer queue of small messages between the event
 * thread and the inference thread (pl_daemon_spsc_*). Capacity is fixed at creation and
 * sized by the caller so that it can never overflow (one slot per object that may be in
 * flight); push still reports a full queue rather than overwrite. No locks, no syscalls:
 * waking the consumer is the caller's job. */
#ifndef PL_DAEMON_SPSC_H
#define PL_DAEMON_SPSC_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct pl_daemon_msg {
    uint32_t kind; /* owner-defined */
    uint32_t arg;
    void *ptr;
};

struct pl_daemon_spsc {
    alignas(64) _Atomic uint32_t head; /* next slot to read; written by the consumer */
    alignas(64) _Atomic uint32_t tail; /* next slot to write; written by the producer */
    alignas(64) uint32_t mask;
    struct pl_daemon_msg *slots;
};

/* Capacity: at least min_cap, rounded up to a power of two. Returns 0, -EINVAL, -ENOMEM. */
int pl_daemon_spsc_init(struct pl_daemon_spsc *q, uint32_t min_cap);
void pl_daemon_spsc_done(struct pl_daemon_spsc *q);
/* Producer. Returns 0 or -ENOSPC. */
int pl_daemon_spsc_push(struct pl_daemon_spsc *q, const struct pl_daemon_msg *m);
/* Consumer. Returns true and *ret when a message was there. */
bool pl_daemon_spsc_pop(struct pl_daemon_spsc *q, struct pl_daemon_msg *ret);
/* Either side: is anything queued (a hint: may change right after). */
bool pl_daemon_spsc_empty(struct pl_daemon_spsc *q);

#endif
