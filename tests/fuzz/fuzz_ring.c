/* SPDX-License-Identifier: MIT */
/* libFuzzer target for the shared-memory ring (ipc/src/ring.c) against a hostile peer. The
 * input is a script: a 4-byte set-up (role, data size, max record, starting index, so indices
 * near the 2^32 wrap are covered), then operations. The peer's operations write whatever the
 * script says into the parts of the region a real peer can write (its index, its flag and
 * sleep words, any byte of the data area: well-formed records, wrong pads, raw garbage); our
 * side's operations are the calls the broker makes (consumer: read, peek/consume, publish,
 * ready, sleep; producer: reserve/commit/push against a lying consumer index). After each call
 * the harness checks what the broker relies on: a record handed out lies inside the data area
 * and inside published data, its length is within bounds and its bytes are the ones the
 * producer wrote; indices stay 8-aligned and inside the window; a producer only ever reserves
 * space the consumer validly freed; once broken, the ring stays broken. The data area is
 * exactly sized on the heap, so ASan sees any access past it. Built only with
 * -DPL_BUILD_FUZZ=ON (clang); run with tests/fuzz/run-fuzz.sh fuzz_ring SECONDS. */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pl/ipc_abi.h"
#include "pl/ipc_ring.h"
#include "pl/pl_err.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct script {
    const uint8_t *p;
    size_t n;
};

static uint8_t u8(struct script *s) {
    if (!s->n)
        return 0;
    s->n--;
    return *s->p++;
}
static uint16_t u16(struct script *s) {
    return (uint16_t)(u8(s) | (u8(s) << 8));
}
static uint32_t u32(struct script *s) {
    return (uint32_t)u16(s) | ((uint32_t)u16(s) << 16);
}

struct h {
    struct pl_ipc_ring r;
    struct pl_ipc_ring_ctrl *ctrl;
    uint8_t *data;
    uint32_t size, mask;
    uint32_t peer_pos; /* the hostile peer's own cursor (producer: write; consumer: read) */
    bool broken_seen;
    uint8_t buf[8192];
};

/* A result that says "broken" must stick; a broken ring refuses everything. */
static void check_rc(struct h *h, int rc) {
    if (h->broken_seen && rc != -PL_ERR_PROTOCOL)
        abort();
    if (rc == -PL_ERR_PROTOCOL) {
        if (!pl_ipc_ring_broken(&h->r))
            abort();
        h->broken_seen = true;
    }
}

static void check_indices(const struct h *h) {
    const struct pl_ipc_ring *r = &h->r;
    if (h->broken_seen)
        return;
    if (r->head % PL_IPC_REC_ALIGN || r->peer % PL_IPC_REC_ALIGN || r->published % PL_IPC_REC_ALIGN)
        abort();
    if (r->role == PL_IPC_RING_CONSUMER) {
        /* Never consumed past the validated producer index, which is at most size ahead of
         * what we consumed. (It may be more than size ahead of what we published: a producer
         * that overwrites records we copied out but did not hand back yet hurts only itself,
         * since read() never looks at them again.) */
        if ((uint32_t)(r->peer - r->head) > h->size ||
            (uint32_t)(r->head - r->published) > (uint32_t)(r->peer - r->published))
            abort();
    } else {
        /* Never wrote past what the consumer freed; the consumer index never passed ours. */
        if ((uint32_t)(r->head - r->peer) > h->size ||
            (uint32_t)(r->published - r->peer) > (uint32_t)(r->head - r->peer))
            abort();
    }
}

/* ---- The hostile producer (we are the broker reading submissions) ---- */

static void peer_write_record(struct h *h, struct script *s) {
    uint32_t len = u16(s);
    uint8_t tsel = u8(s);
    uint32_t type = tsel < 200 ? tsel : tsel < 230 ? PL_IPC_REC_PAD : 0xffffff00u + tsel;
    uint32_t pos = h->peer_pos & h->mask;
    uint32_t span = PL_IPC_REC_SPAN(len & 0xffffu);
    if (span > h->size - pos && span <= h->size) {
        struct pl_ipc_rec_hdr pad = {.len = h->size - pos - 8, .type = PL_IPC_REC_PAD};
        memcpy(h->data + pos, &pad, sizeof(pad));
        h->peer_pos += h->size - pos;
        pos = 0;
    }
    struct pl_ipc_rec_hdr hd = {.len = len, .type = type};
    memcpy(h->data + pos, &hd, sizeof(hd));
    /* payload: a pattern that depends on the position, so the copy check below can tell */
    for (uint32_t i = 0; i < len && pos + 8 + i < h->size; i++)
        h->data[pos + 8 + i] = (uint8_t)(i * 31 + pos);
    h->peer_pos += span;
}

static void consumer_op(struct h *h, struct script *s, uint8_t op) {
    struct pl_ipc_ring *r = &h->r;
    int rc = 0;
    switch (op % 12) {
    case 0: /* a raw index, anything at all */
        atomic_store_explicit(&h->ctrl->prod, u32(s), memory_order_relaxed);
        return;
    case 1: /* publish what the peer wrote */
        atomic_store_explicit(&h->ctrl->prod, h->peer_pos, memory_order_release);
        return;
    case 2:
        peer_write_record(h, s);
        return;
    case 3: { /* a pad with any length */
        struct pl_ipc_rec_hdr pad = {.len = u16(s), .type = PL_IPC_REC_PAD};
        memcpy(h->data + (h->peer_pos & h->mask), &pad, sizeof(pad));
        h->peer_pos += 8u * (u8(s) % 64u + 1u);
        return;
    }
    case 4: { /* raw bytes anywhere in the data area */
        uint32_t off = u16(s) & h->mask;
        uint32_t n = u8(s) % 16u;
        for (uint32_t i = 0; i < n && off + i < h->size; i++)
            h->data[off + i] = u8(s);
        return;
    }
    case 5: /* the peer's cursor jumps */
        h->peer_pos += 8u * (uint32_t)(int8_t)u8(s);
        return;
    case 6: { /* what the broker does with every submission */
        uint32_t cap = u8(s) & 1 ? sizeof(h->buf) : u16(s) % sizeof(h->buf);
        uint32_t type = 0xdead, len = 0xdead;
        uint32_t before = r->head;
        rc = pl_ipc_ring_read(r, h->buf, cap, &type, &len);
        check_rc(h, rc);
        if (rc == 1) {
            uint32_t span = PL_IPC_REC_SPAN(len);
            uint32_t start = r->head - span;
            uint32_t pos = start & h->mask;
            if (len > cap || len > pl_ipc_ring_max_payload(r) || type >= PL_IPC_REC_TYPE_RESERVED ||
                pos + span > h->size || (uint32_t)(r->head - before) > h->size ||
                (uint32_t)(start - before) > h->size || memcmp(h->buf, h->data + pos + 8, len) != 0)
                abort();
        } else if (rc != 0 && rc != -EMSGSIZE && rc != -PL_ERR_PROTOCOL) {
            abort();
        }
        break;
    }
    case 7: {
        const void *p = NULL;
        uint32_t type, len;
        rc = pl_ipc_ring_peek(r, &p, &type, &len);
        check_rc(h, rc);
        if (rc == 1) {
            const uint8_t *b = p;
            if (b < h->data + 8 || b + len > h->data + h->size || type >= PL_IPC_REC_TYPE_RESERVED)
                abort();
            if (u8(s) & 1) {
                rc = pl_ipc_ring_consume(r);
                check_rc(h, rc);
                if (rc != 0)
                    abort();
            }
        }
        break;
    }
    case 8:
        rc = pl_ipc_ring_publish(r);
        check_rc(h, rc);
        if (rc >= 0 && atomic_load(&h->ctrl->cons) != r->published)
            abort();
        break;
    case 9:
        rc = pl_ipc_ring_ready(r, 0);
        check_rc(h, rc);
        break;
    case 10:
        rc = pl_ipc_ring_sleep_prepare(r, 0);
        check_rc(h, rc);
        pl_ipc_ring_sleep_finish(r);
        break;
    case 11: /* the peer's own flag and sleep words */
        atomic_store(&h->ctrl->prod_flags, u32(s));
        atomic_store(&h->ctrl->prod_sleep_seq, u32(s));
        return;
    }
    check_indices(h);
}

/* ---- The hostile consumer (we are the broker writing completions) ---- */

static void producer_op(struct h *h, struct script *s, uint8_t op) {
    struct pl_ipc_ring *r = &h->r;
    int rc = 0;
    switch (op % 10) {
    case 0:
        atomic_store_explicit(&h->ctrl->cons, u32(s), memory_order_relaxed);
        return;
    case 1: /* an honest consumer that took everything published */
        atomic_store_explicit(&h->ctrl->cons, atomic_load(&h->ctrl->prod), memory_order_release);
        return;
    case 2: /* a consumer index moved by any multiple of 8, either way */
        atomic_store(&h->ctrl->cons, atomic_load(&h->ctrl->cons) + 8u * (uint32_t)(int8_t)u8(s));
        return;
    case 3: {
        uint32_t len = u8(s) & 1 ? u16(s) : u8(s);
        void *p = NULL;
        uint32_t peer0 = r->peer, pub0 = r->published;
        rc = pl_ipc_ring_reserve(r, len, &p);
        check_rc(h, rc);
        if (rc == 0) {
            uint8_t *b = p;
            /* Inside the data area, and inside space the consumer validly freed. */
            if (b < h->data + 8 || b + len > h->data + h->size ||
                (uint32_t)(r->resv_pos + PL_IPC_REC_SPAN(len) - r->peer) > h->size ||
                (uint32_t)(r->peer - peer0) > (uint32_t)(pub0 - peer0))
                abort();
            memset(b, 0xab, len);
            if (u8(s) & 1) {
                uint32_t clen = u8(s) & 1 ? len : u16(s);
                rc = pl_ipc_ring_commit(r, u8(s), clen);
                check_rc(h, rc);
                if ((rc != 0 && (clen <= len || rc != -EINVAL)) || (rc == 0 && clen > len))
                    abort();
            }
        } else if (rc != -EAGAIN && rc != -EMSGSIZE && rc != -PL_ERR_PROTOCOL) {
            abort();
        }
        break;
    }
    case 4: {
        uint32_t len = u8(s);
        uint8_t payload[256];
        memset(payload, 0x5a, sizeof(payload));
        rc = pl_ipc_ring_push(r, u8(s), payload, len);
        check_rc(h, rc);
        break;
    }
    case 5:
        rc = pl_ipc_ring_publish(r);
        check_rc(h, rc);
        if (rc >= 0 && atomic_load(&h->ctrl->prod) != r->published)
            abort();
        break;
    case 6:
        rc = pl_ipc_ring_publish_batch(r, u16(s));
        check_rc(h, rc);
        break;
    case 7:
        rc = pl_ipc_ring_sleep_prepare(r, u8(s));
        check_rc(h, rc);
        pl_ipc_ring_sleep_finish(r);
        break;
    case 8:
        atomic_store(&h->ctrl->cons_flags, u32(s));
        atomic_store(&h->ctrl->cons_sleep_seq, u32(s));
        return;
    case 9: { /* the consumer scribbles on the data area: the producer never reads it back */
        uint32_t off = u16(s) & h->mask;
        h->data[off] = u8(s);
        return;
    }
    }
    check_indices(h);
}

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n) {
    struct script s = {in, n};
    if (n < 8)
        return 0;
    static struct h h;
    memset(&h.r, 0, sizeof(h.r));
    uint8_t mode = u8(&s);
    uint32_t size = PL_IPC_RING_MIN_BYTES << (u8(&s) % 5u);     /* 256 .. 4096 */
    uint32_t max_rec = 16u + 8u * (u8(&s) % (size / 16u - 1u)); /* 16 .. size/2 */
    uint32_t start = u32(&s) & ~7u;
    if (max_rec > size / 2)
        max_rec = size / 2;

    h.ctrl = aligned_alloc(64, sizeof(*h.ctrl));
    h.data = malloc(size);
    if (!h.ctrl || !h.data)
        abort();
    memset(h.ctrl, 0, sizeof(*h.ctrl));
    memset(h.data, 0, size);
    atomic_store(&h.ctrl->prod, start);
    atomic_store(&h.ctrl->cons, start);
    h.size = size;
    h.mask = size - 1;
    h.peer_pos = start;
    h.broken_seen = false;
    bool consumer = mode & 1;
    int rc = pl_ipc_ring_init(&h.r, h.ctrl, h.data, size, max_rec,
                              consumer ? PL_IPC_RING_CONSUMER : PL_IPC_RING_PRODUCER);
    if (rc != 0)
        abort(); /* the geometry above is always valid */
    while (s.n) {
        uint8_t op = u8(&s);
        if (consumer)
            consumer_op(&h, &s, op);
        else
            producer_op(&h, &s, op);
    }
    free(h.data);
    free(h.ctrl);
    return 0;
}
