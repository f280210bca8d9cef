/* SPDX-License-Identifier: MIT */
/* SPSC byte ring over shared memory (pl_ipc_ring_*), used by the broker and by libpicolm for
 * both the submission and the completion ring. Record format and index rules are in
 * pl/ipc_abi.h. Trust: whatever the peer can write (its index, its flag word, the data area)
 * is read once into a local, validated, and only the local is used afterwards. This side's own
 * index is authoritative in private memory and never read back from the shared block. */
#include "pl/ipc_ring.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "pl/pl_err.h"

static int broken(struct pl_ipc_ring *r) {
    r->broken = true;
    r->resv_open = false;
    r->peek_span = 0;
    return -PL_ERR_PROTOCOL;
}

static bool is_pow2(uint32_t v) {
    return v != 0 && (v & (v - 1)) == 0;
}

int pl_ipc_ring_init(struct pl_ipc_ring *r, struct pl_ipc_ring_ctrl *ctrl, void *data,
                     uint32_t data_bytes, uint32_t max_record_bytes, enum pl_ipc_ring_role role) {
    if (!r || !ctrl || !data || !is_pow2(data_bytes) || data_bytes < PL_IPC_RING_MIN_BYTES ||
        data_bytes > PL_IPC_RING_MAX_BYTES || max_record_bytes < 16 ||
        max_record_bytes % PL_IPC_REC_ALIGN != 0 || max_record_bytes > data_bytes / 2 ||
        (role != PL_IPC_RING_PRODUCER && role != PL_IPC_RING_CONSUMER))
        return -EINVAL;

    /* Both indices are read once here; the caller guarantees nobody else writes them yet
     * (the broker initialises a fresh region; a client attaches to a ring it owns one side of). */
    uint32_t prod = atomic_load_explicit(&ctrl->prod, memory_order_acquire);
    uint32_t cons = atomic_load_explicit(&ctrl->cons, memory_order_acquire);
    if ((prod | cons) % PL_IPC_REC_ALIGN != 0 || (uint32_t)(prod - cons) > data_bytes)
        return -PL_ERR_PROTOCOL;

    struct pl_ipc_ring n = {
        .ctrl = ctrl,
        .data = data,
        .size = data_bytes,
        .max_span = max_record_bytes,
        .role = role,
    };
    if (role == PL_IPC_RING_PRODUCER) {
        n.head = n.published = prod;
        n.peer = cons;
    } else {
        n.head = n.published = cons;
        n.peer = prod;
    }
    *r = n;
    return 0;
}

uint32_t pl_ipc_ring_max_payload(const struct pl_ipc_ring *r) {
    return r->max_span - PL_IPC_REC_HDR_BYTES;
}

bool pl_ipc_ring_broken(const struct pl_ipc_ring *r) {
    return r->broken;
}

/* ---- Producer side ---- */

/* Load the consumer's index (untrusted) and validate it against what we know: it is 8-byte
 * aligned and has advanced by at most the bytes we have published since the last load (so it
 * never moves backwards and never passes our published index). Returns 0 or -PL_ERR_PROTOCOL. */
static int refresh_cons(struct pl_ipc_ring *r) {
    /* Acquire pairs with the consumer's release store of cons in pl_ipc_ring_publish(): the
     * consumer's reads of the bytes it freed happen before we overwrite them. */
    uint32_t cons = atomic_load_explicit(&r->ctrl->cons, memory_order_acquire); /* untrusted */
    uint32_t advanced = cons - r->peer;
    if (cons % PL_IPC_REC_ALIGN != 0 || advanced > (uint32_t)(r->published - r->peer))
        return broken(r);
    r->peer = cons;
    return 0;
}

/* Bytes needed at the current write position for a record of span bytes: the span itself,
 * plus the tail of the data area when the record has to start over at offset 0. */
static uint32_t bytes_needed(const struct pl_ipc_ring *r, uint32_t span) {
    uint32_t tail = r->size - (r->head & (r->size - 1));
    return span <= tail ? span : tail + span;
}

static int producer_room(struct pl_ipc_ring *r, uint32_t need) {
    /* head - peer <= size always holds: we only advance head into validated free space. */
    if (r->size - (r->head - r->peer) >= need)
        return 1;
    int rc = refresh_cons(r);
    if (rc < 0)
        return rc;
    return r->size - (r->head - r->peer) >= need;
}

int pl_ipc_ring_reserve(struct pl_ipc_ring *r, uint32_t len, void **ret_payload) {
    if (r->broken)
        return -PL_ERR_PROTOCOL;
    if (r->role != PL_IPC_RING_PRODUCER)
        return -EINVAL;
    if (len > pl_ipc_ring_max_payload(r))
        return -EMSGSIZE;

    uint32_t span = PL_IPC_REC_SPAN(len);
    int rc = producer_room(r, bytes_needed(r, span));
    if (rc <= 0)
        return rc < 0 ? rc : -EAGAIN;

    uint32_t pos = r->head & (r->size - 1);
    uint32_t tail = r->size - pos;
    if (span > tail) {
        /* The record does not fit before the end: fill the tail with one pad record. It
         * becomes visible with the record itself, at the next publish. */
        struct pl_ipc_rec_hdr pad = {.len = tail - PL_IPC_REC_HDR_BYTES, .type = PL_IPC_REC_PAD};
        memcpy(r->data + pos, &pad, sizeof(pad));
        r->head += tail;
        pos = 0;
    }
    r->resv_pos = r->head;
    r->resv_cap = len;
    r->resv_open = true;
    *ret_payload = r->data + pos + PL_IPC_REC_HDR_BYTES;
    return 0;
}

int pl_ipc_ring_commit(struct pl_ipc_ring *r, uint32_t type, uint32_t len) {
    if (r->broken)
        return -PL_ERR_PROTOCOL;
    if (!r->resv_open || len > r->resv_cap || type >= PL_IPC_REC_TYPE_RESERVED)
        return -EINVAL;
    struct pl_ipc_rec_hdr h = {.len = len, .type = type};
    memcpy(r->data + (r->resv_pos & (r->size - 1)), &h, sizeof(h));
    r->head = r->resv_pos + PL_IPC_REC_SPAN(len);
    r->resv_open = false;
    return 0;
}

int pl_ipc_ring_push(struct pl_ipc_ring *r, uint32_t type, const void *payload, uint32_t len) {
    if (type >= PL_IPC_REC_TYPE_RESERVED || (len && !payload))
        return -EINVAL;
    void *dst;
    int rc = pl_ipc_ring_reserve(r, len, &dst);
    if (rc < 0)
        return rc;
    if (len)
        memcpy(dst, payload, len);
    return pl_ipc_ring_commit(r, type, len);
}

/* ---- Consumer side ---- */

/* Load the producer's index (untrusted) and validate it: 8-byte aligned, never behind what we
 * already saw, and at most size bytes ahead of our own read index. Returns 0 or -PL_ERR_PROTOCOL.
 */
static int refresh_prod(struct pl_ipc_ring *r) {
    /* Acquire pairs with the producer's release store of prod in pl_ipc_ring_publish(): the
     * record bytes written before that store are visible once we see the new index. */
    uint32_t prod = atomic_load_explicit(&r->ctrl->prod, memory_order_acquire); /* untrusted */
    uint32_t avail = prod - r->head;
    if (prod % PL_IPC_REC_ALIGN != 0 || avail > r->size || avail < (uint32_t)(r->peer - r->head))
        return broken(r);
    r->peer = prod;
    return 0;
}

/* Find the next record: skip wrap pads, validate the header (read once, into *ret_hdr).
 * Returns 1 with *ret_pos = data offset of the header, 0 if the ring is empty, or
 * -PL_ERR_PROTOCOL. Pads skipped are consumed (head advances) even when 0 is returned. */
static int next_record(struct pl_ipc_ring *r, uint32_t *ret_pos, struct pl_ipc_rec_hdr *ret_hdr) {
    bool refreshed = false;
    for (;;) {
        uint32_t avail = r->peer - r->head;
        if (avail == 0) {
            if (refreshed)
                return 0;
            int rc = refresh_prod(r);
            if (rc < 0)
                return rc;
            refreshed = true;
            continue;
        }
        /* avail is a validated multiple of 8 and >= 8 here, so a header is published. */
        uint32_t pos = r->head & (r->size - 1);
        struct pl_ipc_rec_hdr h;
        memcpy(&h, r->data + pos, sizeof(h)); /* untrusted: read once */
        uint32_t room = r->size - pos;        /* bytes before the end of the data area */
        if (h.type == PL_IPC_REC_PAD) {
            /* A pad must cover exactly the tail, and the tail must be published. */
            if (h.len != room - PL_IPC_REC_HDR_BYTES || room > avail)
                return broken(r);
            r->head += room;
            continue;
        }
        if (h.type >= PL_IPC_REC_TYPE_RESERVED || h.len > r->max_span - PL_IPC_REC_HDR_BYTES)
            return broken(r);
        uint32_t span = PL_IPC_REC_SPAN(h.len); /* no overflow: len <= max_span - 8 */
        if (span > avail || span > room)
            return broken(r);
        *ret_pos = pos;
        *ret_hdr = h;
        return 1;
    }
}

int pl_ipc_ring_read(struct pl_ipc_ring *r, void *buf, uint32_t cap, uint32_t *ret_type,
                     uint32_t *ret_len) {
    if (r->broken)
        return -PL_ERR_PROTOCOL;
    if (r->role != PL_IPC_RING_CONSUMER)
        return -EINVAL;
    r->peek_span = 0;
    uint32_t pos;
    struct pl_ipc_rec_hdr h;
    int rc = next_record(r, &pos, &h);
    if (rc <= 0)
        return rc;
    if (h.len > cap)
        return -EMSGSIZE;
    /* Copy to private memory before anyone parses it; the validated local h.len is the only
     * length used. */
    if (h.len)
        memcpy(buf, r->data + pos + PL_IPC_REC_HDR_BYTES, h.len);
    r->head += PL_IPC_REC_SPAN(h.len);
    *ret_type = h.type;
    *ret_len = h.len;
    return 1;
}

uint32_t pl_ipc_ring_mark(const struct pl_ipc_ring *r) {
    return r->head;
}

void pl_ipc_ring_unread(struct pl_ipc_ring *r, uint32_t mark) {
    /* Only back over what this side read and has not published (mark..head): the producer may
     * already reuse anything before r->published. */
    if (r->role == PL_IPC_RING_CONSUMER && mark - r->published <= r->head - r->published)
        r->head = mark;
}

int pl_ipc_ring_peek(struct pl_ipc_ring *r, const void **ret_payload, uint32_t *ret_type,
                     uint32_t *ret_len) {
    if (r->broken)
        return -PL_ERR_PROTOCOL;
    if (r->role != PL_IPC_RING_CONSUMER)
        return -EINVAL;
    r->peek_span = 0;
    uint32_t pos;
    struct pl_ipc_rec_hdr h;
    int rc = next_record(r, &pos, &h);
    if (rc <= 0)
        return rc;
    r->peek_span = PL_IPC_REC_SPAN(h.len);
    *ret_payload = r->data + pos + PL_IPC_REC_HDR_BYTES;
    *ret_type = h.type;
    *ret_len = h.len;
    return 1;
}

int pl_ipc_ring_consume(struct pl_ipc_ring *r) {
    if (r->broken)
        return -PL_ERR_PROTOCOL;
    if (r->role != PL_IPC_RING_CONSUMER || r->peek_span == 0)
        return -EINVAL;
    r->head += r->peek_span;
    r->peek_span = 0;
    return 0;
}

/* ---- Both sides ---- */

int pl_ipc_ring_publish(struct pl_ipc_ring *r) {
    if (r->broken)
        return -PL_ERR_PROTOCOL;
    if (r->head == r->published)
        return 0; /* nothing new: the peer cannot be waiting on us for anything we did */
    bool producer = r->role == PL_IPC_RING_PRODUCER;
    _Atomic uint32_t *own = producer ? &r->ctrl->prod : &r->ctrl->cons;
    _Atomic uint32_t *peer_flags = producer ? &r->ctrl->cons_flags : &r->ctrl->prod_flags;
    _Atomic uint32_t *peer_seq = producer ? &r->ctrl->cons_sleep_seq : &r->ctrl->prod_sleep_seq;

    /* Release pairs with the peer's acquire load of this index (refresh_prod/refresh_cons):
     * producer: the record bytes are visible before the index; consumer: our reads of the
     * freed bytes are done before the producer may reuse them. */
    atomic_store_explicit(own, r->head, memory_order_release);
    r->published = r->head;

    /* Full fence between our index store and our load of the peer's NEED_WAKEUP flag. It pairs
     * with the fence in the peer's pl_ipc_ring_sleep_prepare(), which sits between its flag
     * store and its re-load of our index: of the two sides at least one sees the other's
     * store, so either the peer re-check finds our progress or we see its flag and ring. */
    atomic_thread_fence(memory_order_seq_cst);
    /* Acquire pairs with the release store of the flags in the peer's prepare(): seeing this
     * sleep's flags, we also see the sleep_seq stored before them. */
    uint32_t flags = atomic_load_explicit(peer_flags, memory_order_acquire); /* untrusted */
    if (!(flags & PL_IPC_RING_NEED_WAKEUP))
        return 0;
    /* One wake-up per sleep: a waker that keeps publishing while the peer is still on its way
     * out of the same sleep costs no further syscalls. The value only steers our wake-ups: a
     * peer that lies about it can only sleep through its own data. */
    uint32_t seq = atomic_load_explicit(peer_seq, memory_order_relaxed); /* untrusted */
    if (seq != 0 && seq == r->woken_seq)
        return 0;
    if (flags & PL_IPC_RING_WAKE_FUTEX) {
        /* A FUTEX_WAKE is not sticky: one that lands before the peer enters FUTEX_WAIT is lost
         * when the peer had already seen this very index (its wait value is current). So this
         * sleep counts as woken only once a wake reached a sleeper (pl_ipc_ring_woke()). */
        r->wake_seq = seq;
        return PL_IPC_WAKE_FUTEX;
    }
    r->woken_seq = seq; /* a doorbell ring stays pending until the peer drains it */
    return PL_IPC_WAKE_DOORBELL;
}

void pl_ipc_ring_woke(struct pl_ipc_ring *r) {
    r->woken_seq = r->wake_seq;
}

int pl_ipc_ring_publish_batch(struct pl_ipc_ring *r, uint32_t batch_bytes) {
    if (r->broken)
        return -PL_ERR_PROTOCOL;
    uint32_t pending = r->head - r->published;
    if (pending == 0)
        return 0;
    if (pending < batch_bytes) {
        /* Hold the batch back unless the peer sleeps waiting for us. The flag line changes
         * only when the peer goes to sleep or wakes up, so in a busy stream this load hits
         * our cache; it is only a hint (a flag we miss here is seen by the next full publish,
         * which the caller makes before it waits or idles). */
        _Atomic uint32_t *peer_flags =
            r->role == PL_IPC_RING_PRODUCER ? &r->ctrl->cons_flags : &r->ctrl->prod_flags;
        uint32_t flags = atomic_load_explicit(peer_flags, memory_order_relaxed); /* untrusted */
        if (!(flags & PL_IPC_RING_NEED_WAKEUP))
            return 0;
    }
    return pl_ipc_ring_publish(r);
}

struct pl_ipc_futex pl_ipc_ring_wake_futex(const struct pl_ipc_ring *r) {
    struct pl_ipc_futex f = {
        .word = r->role == PL_IPC_RING_PRODUCER ? &r->ctrl->prod : &r->ctrl->cons,
        .val = r->published,
    };
    return f;
}

int pl_ipc_ring_ready(struct pl_ipc_ring *r, uint32_t need) {
    if (r->broken)
        return -PL_ERR_PROTOCOL;
    if (r->role == PL_IPC_RING_PRODUCER) {
        if (need > pl_ipc_ring_max_payload(r))
            return -EMSGSIZE;
        return producer_room(r, bytes_needed(r, PL_IPC_REC_SPAN(need)));
    }
    if (r->peer != r->head)
        return 1;
    int rc = refresh_prod(r);
    if (rc < 0)
        return rc;
    return r->peer != r->head;
}

/* Announce a sleep with flags (NEED_WAKEUP [| WAKE_FUTEX]) and re-check. */
static int prepare(struct pl_ipc_ring *r, uint32_t need, uint32_t flags) {
    if (r->broken)
        return -PL_ERR_PROTOCOL;
    bool producer = r->role == PL_IPC_RING_PRODUCER;
    _Atomic uint32_t *own_flags = producer ? &r->ctrl->prod_flags : &r->ctrl->cons_flags;
    _Atomic uint32_t *own_seq = producer ? &r->ctrl->prod_sleep_seq : &r->ctrl->cons_sleep_seq;
    if (++r->sleep_seq == 0)
        r->sleep_seq = 1; /* 0 means "no sleep number" to the peer */
    atomic_store_explicit(own_seq, r->sleep_seq, memory_order_relaxed);
    /* Release pairs with the acquire load of our flags in the peer's pl_ipc_ring_publish():
     * whoever sees these flags also sees this sleep's number. */
    atomic_store_explicit(own_flags, flags, memory_order_release);
    /* Full fence between the flag store and the re-check's load of the peer index. Pairs with
     * the fence in the peer's pl_ipc_ring_publish() (index store, fence, flag load). */
    atomic_thread_fence(memory_order_seq_cst);
    int rc = pl_ipc_ring_ready(r, need);
    if (rc != 0)
        atomic_store_explicit(own_flags, 0, memory_order_relaxed);
    return rc;
}

int pl_ipc_ring_sleep_prepare(struct pl_ipc_ring *r, uint32_t need) {
    return prepare(r, need, PL_IPC_RING_NEED_WAKEUP);
}

int pl_ipc_ring_sleep_prepare_futex(struct pl_ipc_ring *r, uint32_t need,
                                    struct pl_ipc_futex *ret_futex) {
    int rc = prepare(r, need, PL_IPC_RING_NEED_WAKEUP | PL_IPC_RING_WAKE_FUTEX);
    if (rc != 0)
        return rc;
    /* ready() returned 0, so it has just reloaded the peer's index and found it short: r->peer
     * is what the word held. If the peer moves it before we sleep, FUTEX_WAIT returns at once. */
    ret_futex->word = r->role == PL_IPC_RING_PRODUCER ? &r->ctrl->cons : &r->ctrl->prod;
    ret_futex->val = r->peer;
    return 0;
}

void pl_ipc_ring_sleep_finish(struct pl_ipc_ring *r) {
    _Atomic uint32_t *own_flags =
        r->role == PL_IPC_RING_PRODUCER ? &r->ctrl->prod_flags : &r->ctrl->cons_flags;
    /* Relaxed: a wake-up that races with this clear is at worst spurious; the caller re-checks
     * the ring before it ever sleeps again, through sleep_prepare's fence. */
    atomic_store_explicit(own_flags, 0, memory_order_relaxed);
}
