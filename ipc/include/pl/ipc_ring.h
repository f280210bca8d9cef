/* SPDX-License-Identifier: MIT */
/* One side of a single-producer/single-consumer byte ring living in shared memory (layout in
 * pl/ipc_abi.h). The broker and the client each hold a struct pl_ipc_ring per ring, in private
 * memory: the producer side writes records with reserve/commit (zero copy) and publishes them;
 * the consumer side copies records out with read (or peeks at them in place) and publishes the
 * space it freed. Every value read from the shared control block or data area is treated as
 * hostile: it is loaded once, validated, and any violation marks the ring broken, after which
 * every call returns -PL_ERR_PROTOCOL. The peer can only hurt itself. */
#ifndef PL_IPC_IPC_RING_H
#define PL_IPC_IPC_RING_H

#include <stdbool.h>
#include <stdint.h>

#include "pl/ipc_abi.h"

enum pl_ipc_ring_role {
    PL_IPC_RING_PRODUCER = 0,
    PL_IPC_RING_CONSUMER = 1,
};

/* Caller-owned, private state of one side of a ring. Fields are private to ring.c. */
struct pl_ipc_ring {
    struct pl_ipc_ring_ctrl *ctrl; /* shared, untrusted */
    uint8_t *data;                 /* shared, untrusted; data_bytes long */
    uint32_t size;                 /* data_bytes, a power of two */
    uint32_t max_span;             /* largest record span in bytes */
    uint32_t role;                 /* enum pl_ipc_ring_role */
    uint32_t head;      /* own authoritative index: next write (producer) or read (consumer) */
    uint32_t published; /* own index as last stored into ctrl */
    uint32_t peer;      /* peer's index as last loaded and validated */
    uint32_t resv_pos;  /* producer: index of the open reservation's record header */
    uint32_t resv_cap;  /* producer: payload bytes reserved */
    uint32_t peek_span; /* consumer: span of the record returned by peek, 0 if none */
    uint32_t sleep_seq; /* this side's last sleep number (never 0 once used) */
    uint32_t woken_seq; /* the peer's sleep number we last woke for sure (0: none) */
    uint32_t wake_seq;  /* the peer's sleep number of the last PL_IPC_WAKE_FUTEX returned */
    bool resv_open;
    bool broken;
};

/* A futex to sleep on or to wake: a 32-bit word in the shared region (not process-private)
 * and, for a sleep, the value it held when the ring was last seen not ready. */
struct pl_ipc_futex {
    _Atomic uint32_t *word;
    uint32_t val;
};

/* What pl_ipc_ring_publish() asks its caller to do. */
#define PL_IPC_WAKE_DOORBELL 1 /* write the peer's doorbell */
#define PL_IPC_WAKE_FUTEX 2    /* FUTEX_WAKE pl_ipc_ring_wake_futex() */

/* Attach one side to a ring. ctrl and data are borrowed and must outlive r. data_bytes must be
 * a power of two in [PL_IPC_RING_MIN_BYTES, PL_IPC_RING_MAX_BYTES]; max_record_bytes a multiple
 * of 8 in [16, data_bytes / 2]. The starting indices are read from ctrl, so the broker must
 * call this before the peer can write the region (pl_ipc_region_rings() does).
 * Returns 0, -EINVAL on bad geometry, -PL_ERR_PROTOCOL if ctrl holds inconsistent indices. */
int pl_ipc_ring_init(struct pl_ipc_ring *r, struct pl_ipc_ring_ctrl *ctrl, void *data,
                     uint32_t data_bytes, uint32_t max_record_bytes, enum pl_ipc_ring_role role);

/* Largest payload one record can carry (max_record_bytes - 8). */
uint32_t pl_ipc_ring_max_payload(const struct pl_ipc_ring *r);

/* ---- Producer side ---- */

/* Reserve room for a record of up to len payload bytes and return where to write the payload
 * in *ret_payload (inside the shared data area, 8-byte aligned). Writes a wrap pad record when
 * the record would not fit before the end of the data area. A new reserve replaces an open one.
 * Returns 0; -EAGAIN if the ring is full; -EMSGSIZE if len > pl_ipc_ring_max_payload();
 * -EINVAL if r is not a producer; -PL_ERR_PROTOCOL if the consumer's index is invalid. */
int pl_ipc_ring_reserve(struct pl_ipc_ring *r, uint32_t len, void **ret_payload);

/* Finish the open reservation as a record of type with len (<= reserved) payload bytes. The
 * record becomes visible to the consumer at the next pl_ipc_ring_publish().
 * Returns 0; -EINVAL if no reservation is open, len is too large or type is reserved. */
int pl_ipc_ring_commit(struct pl_ipc_ring *r, uint32_t type, uint32_t len);

/* reserve + memcpy + commit. Returns what those return. */
int pl_ipc_ring_push(struct pl_ipc_ring *r, uint32_t type, const void *payload, uint32_t len);

/* ---- Consumer side ---- */

/* Copy the next record into buf (private memory, cap bytes) and consume it locally; the freed
 * space is handed back at the next pl_ipc_ring_publish(). The record's header is read once
 * and validated, wrap pads are skipped. *ret_type and *ret_len are set when 1 is returned.
 * Returns 1 (a record), 0 (ring empty), -EMSGSIZE (record larger than cap; not consumed),
 * -EINVAL (not a consumer), -PL_ERR_PROTOCOL (the producer broke the ring). */
int pl_ipc_ring_read(struct pl_ipc_ring *r, void *buf, uint32_t cap, uint32_t *ret_type,
                     uint32_t *ret_len);

/* Consumer: where the next pl_ipc_ring_read() starts, and going back there: a record read
 * since the mark (and not published as consumed since) is read again by the next read. */
uint32_t pl_ipc_ring_mark(const struct pl_ipc_ring *r);
void pl_ipc_ring_unread(struct pl_ipc_ring *r, uint32_t mark);

/* Zero-copy variant for a consumer that trusts its producer (the client reading completions):
 * validates the next record like read and points *ret_payload into the shared data area, where
 * it stays until pl_ipc_ring_consume(). The broker must use pl_ipc_ring_read() instead.
 * Returns like pl_ipc_ring_read(). */
int pl_ipc_ring_peek(struct pl_ipc_ring *r, const void **ret_payload, uint32_t *ret_type,
                     uint32_t *ret_len);

/* Consume the record returned by the last successful peek. Returns 0 or -EINVAL. */
int pl_ipc_ring_consume(struct pl_ipc_ring *r);

/* ---- Both sides ---- */

/* Store this side's index (producer: records committed; consumer: space freed) into the
 * control block if it changed, then report whether the peer sleeps waiting for it: returns
 * PL_IPC_WAKE_DOORBELL (1) if the peer set NEED_WAKEUP (the caller should ring the peer's
 * doorbell), PL_IPC_WAKE_FUTEX (2) if it set NEED_WAKEUP | WAKE_FUTEX (the caller should
 * FUTEX_WAKE pl_ipc_ring_wake_futex(), then call pl_ipc_ring_woke() if that woke someone),
 * 0 if not or if this very sleep of the peer (its non-zero sleep_seq) was already woken, or
 * -PL_ERR_PROTOCOL on a broken ring. */
int pl_ipc_ring_publish(struct pl_ipc_ring *r);

/* Publish in batches, for a side that commits (or consumes) many records in a row: only when
 * at least batch_bytes are unpublished, or when the peer has announced that it sleeps waiting
 * for us. Otherwise the progress stays private until a later call or pl_ipc_ring_publish(),
 * which the caller must make before it stops or waits (pl_ipc_doorbell_wait*() do). A batch
 * that a spinning peer can wait for within its spin budget keeps a stream syscall-free while
 * cutting the index traffic between the two cores (e.g. 2 KiB). Returns what
 * pl_ipc_ring_publish() returns (0 when it did not publish). */
int pl_ipc_ring_publish_batch(struct pl_ipc_ring *r, uint32_t batch_bytes);

/* Tell r that the FUTEX_WAKE asked for by the last pl_ipc_ring_publish() woke a sleeper
 * (FUTEX_WAKE returned 1): later publishes skip that same sleep of the peer. Without this
 * call every publish that sees the peer's futex flag asks for a wake again. */
void pl_ipc_ring_woke(struct pl_ipc_ring *r);

/* The word a peer sleeping on this side's progress waits on (this side's own index word), to
 * pass to FUTEX_WAKE after pl_ipc_ring_publish() returned PL_IPC_WAKE_FUTEX. */
struct pl_ipc_futex pl_ipc_ring_wake_futex(const struct pl_ipc_ring *r);

/* Is this side able to proceed? Consumer: is a record available; producer: is there room for
 * a record of need payload bytes. Reloads the peer's index (once) when the cached one does not
 * suffice. Returns 1 (yes), 0 (no), -EMSGSIZE, -PL_ERR_PROTOCOL. */
int pl_ipc_ring_ready(struct pl_ipc_ring *r, uint32_t need);

/* Sleep protocol, step 1: set this side's NEED_WAKEUP flag, full fence, re-check
 * pl_ipc_ring_ready(). Returns 1 if the ring became ready (the flag is cleared again: do not
 * sleep), 0 if the caller may now sleep on its doorbell, < 0 like pl_ipc_ring_ready(). */
int pl_ipc_ring_sleep_prepare(struct pl_ipc_ring *r, uint32_t need);

/* Like pl_ipc_ring_sleep_prepare(), but announce a futex sleep (NEED_WAKEUP | WAKE_FUTEX):
 * when it returns 0, *ret_futex holds the peer's index word and the value it was seen with;
 * sleep with FUTEX_WAIT on it (pl_ipc_doorbell_futex_sleep(), or an io_uring futex wait). The
 * peer must honour WAKE_FUTEX (see pl/ipc_abi.h, "Sleeping"). Returns like
 * pl_ipc_ring_sleep_prepare(). */
int pl_ipc_ring_sleep_prepare_futex(struct pl_ipc_ring *r, uint32_t need,
                                    struct pl_ipc_futex *ret_futex);

/* Sleep protocol, step 2, after waking up (for whatever reason): clear NEED_WAKEUP. */
void pl_ipc_ring_sleep_finish(struct pl_ipc_ring *r);

/* True once a protocol violation was detected; the ring then refuses all work. */
bool pl_ipc_ring_broken(const struct pl_ipc_ring *r);

#endif
