/* SPDX-License-Identifier: MIT */
/* Unit tests for ipc/src/ring.c: record layout, wrap-around at every offset and at the 2^32
 * index wrap, full/empty, every record size, hostile indices and headers, the need-wakeup
 * report, a threaded producer/consumer (TSan) and a two-process 10M-record stress run. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "ipc_test_util.h"
#include "pl/ipc_abi.h"
#include "pl/ipc_doorbell.h"
#include "pl/ipc_region.h"
#include "pl/ipc_ring.h"
#include "pl/pl_err.h"
#include "pl/pl_util.h"

/* A ring in private memory: one control block, one data area, both sides attached. */
struct tring {
    struct pl_ipc_ring_ctrl *ctrl;
    uint8_t *data;
    uint32_t size;
    struct pl_ipc_ring prod;
    struct pl_ipc_ring cons;
};

static void tring_init(struct tring *t, uint32_t size, uint32_t max_rec, uint32_t start) {
    t->ctrl = aligned_alloc(64, sizeof(*t->ctrl));
    assert_non_null(t->ctrl);
    memset(t->ctrl, 0, sizeof(*t->ctrl));
    t->data = aligned_alloc(64, size);
    assert_non_null(t->data);
    memset(t->data, 0xa5, size);
    t->size = size;
    atomic_store(&t->ctrl->prod, start);
    atomic_store(&t->ctrl->cons, start);
    assert_int_equal(
        pl_ipc_ring_init(&t->prod, t->ctrl, t->data, size, max_rec, PL_IPC_RING_PRODUCER), 0);
    assert_int_equal(
        pl_ipc_ring_init(&t->cons, t->ctrl, t->data, size, max_rec, PL_IPC_RING_CONSUMER), 0);
}

static void tring_done(struct tring *t) {
    free(t->ctrl);
    free(t->data);
}

static void push_pattern(struct pl_ipc_ring *r, uint32_t type, uint32_t len, uint64_t seq) {
    uint8_t buf[PL_IPC_RING_MIN_BYTES * 256];
    assert_true(len <= sizeof(buf));
    pt_fill(buf, len, seq);
    assert_int_equal(pl_ipc_ring_push(r, type, buf, len), 0);
}

static void read_pattern(struct pl_ipc_ring *r, uint32_t type, uint32_t len, uint64_t seq) {
    static uint8_t buf[PL_IPC_RING_MIN_BYTES * 256], want[PL_IPC_RING_MIN_BYTES * 256];
    uint32_t got_type = 0, got_len = 0;
    assert_int_equal(pl_ipc_ring_read(r, buf, sizeof(buf), &got_type, &got_len), 1);
    assert_int_equal(got_type, type);
    assert_int_equal(got_len, len);
    pt_fill(want, len, seq);
    assert_memory_equal(buf, want, len);
}

/* ---- Geometry and layout ---- */

static void test_ring_init_rejects_bad_geometry(void **state) {
    (void)state;
    struct tring t;
    tring_init(&t, 256, 128, 0);
    struct pl_ipc_ring r;
    assert_int_equal(pl_ipc_ring_init(&r, t.ctrl, t.data, 384, 128, PL_IPC_RING_PRODUCER), -EINVAL);
    assert_int_equal(pl_ipc_ring_init(&r, t.ctrl, t.data, 128, 64, PL_IPC_RING_PRODUCER), -EINVAL);
    assert_int_equal(pl_ipc_ring_init(&r, t.ctrl, t.data, 256, 136, PL_IPC_RING_PRODUCER), -EINVAL);
    assert_int_equal(pl_ipc_ring_init(&r, t.ctrl, t.data, 256, 20, PL_IPC_RING_PRODUCER), -EINVAL);
    assert_int_equal(pl_ipc_ring_init(&r, t.ctrl, t.data, 256, 8, PL_IPC_RING_PRODUCER), -EINVAL);
    assert_int_equal(pl_ipc_ring_init(&r, t.ctrl, t.data, 256, 128, 7), -EINVAL);
    atomic_store(&t.ctrl->prod, 512); /* more than size ahead of cons */
    assert_int_equal(pl_ipc_ring_init(&r, t.ctrl, t.data, 256, 128, PL_IPC_RING_PRODUCER),
                     -PL_ERR_PROTOCOL);
    atomic_store(&t.ctrl->prod, 4); /* unaligned */
    assert_int_equal(pl_ipc_ring_init(&r, t.ctrl, t.data, 256, 128, PL_IPC_RING_CONSUMER),
                     -PL_ERR_PROTOCOL);
    tring_done(&t);
}

static void test_ring_record_layout_is_header_payload_padding(void **state) {
    (void)state;
    struct tring t;
    tring_init(&t, 256, 128, 0);
    uint8_t p[5] = {1, 2, 3, 4, 5};
    assert_int_equal(pl_ipc_ring_push(&t.prod, 42, p, 5), 0);
    assert_int_equal(pl_ipc_ring_publish(&t.prod), 0);
    assert_int_equal(atomic_load(&t.ctrl->prod), 16); /* 8 header + 5 payload + 3 padding */
    struct pl_ipc_rec_hdr h;
    memcpy(&h, t.data, sizeof(h));
    assert_int_equal(h.len, 5);
    assert_int_equal(h.type, 42);
    assert_memory_equal(t.data + 8, p, 5);
    tring_done(&t);
}

/* ---- Wrap-around, full, empty, sizes ---- */

/* unread goes back over records read since the mark, never over what was published as
 * consumed: the producer may already have reused that space. */
static void test_ring_unread_returns_to_the_mark(void **state) {
    (void)state;
    struct tring t;
    tring_init(&t, 256, 128, 0);
    uint8_t a[3] = {1, 2, 3}, b[2] = {7, 8}, buf[128];
    uint32_t type, len;
    assert_int_equal(pl_ipc_ring_push(&t.prod, 1, a, 3), 0);
    assert_int_equal(pl_ipc_ring_push(&t.prod, 2, b, 2), 0);
    assert_int_equal(pl_ipc_ring_publish(&t.prod), 0);
    assert_int_equal(pl_ipc_ring_read(&t.cons, buf, sizeof(buf), &type, &len), 1);
    assert_int_equal(type, 1);
    uint32_t mark = pl_ipc_ring_mark(&t.cons);
    assert_int_equal(pl_ipc_ring_read(&t.cons, buf, sizeof(buf), &type, &len), 1);
    assert_int_equal(type, 2);
    pl_ipc_ring_unread(&t.cons, mark);
    assert_int_equal(pl_ipc_ring_read(&t.cons, buf, sizeof(buf), &type, &len), 1);
    assert_int_equal(type, 2);
    assert_int_equal(len, 2);
    assert_memory_equal(buf, b, 2);
    /* Published as consumed: going back is refused (the next read finds the ring empty). */
    assert_true(pl_ipc_ring_publish(&t.cons) >= 0);
    pl_ipc_ring_unread(&t.cons, mark);
    assert_int_equal(pl_ipc_ring_read(&t.cons, buf, sizeof(buf), &type, &len), 0);
    /* A producer end ignores it. */
    uint32_t pm = pl_ipc_ring_mark(&t.prod);
    assert_int_equal(pl_ipc_ring_push(&t.prod, 3, a, 1), 0);
    pl_ipc_ring_unread(&t.prod, pm);
    assert_int_equal(pl_ipc_ring_mark(&t.prod), pm + 16);
    tring_done(&t);
}

/* For every 8-byte-aligned start offset and every payload size up to the maximum, one record
 * goes through (wrapping with a pad record where needed), also across the 2^32 index wrap. */
static void test_ring_wraps_at_every_offset_and_size(void **state) {
    (void)state;
    const uint32_t size = 256, max_rec = 128;
    const uint32_t bases[] = {0, 0xffffff00u};
    for (size_t b = 0; b < PL_ARRAY_SIZE(bases); b++) {
        for (uint32_t off = 0; off < size; off += 8) {
            struct tring t;
            tring_init(&t, size, max_rec, bases[b] + off);
            uint64_t seq = 0;
            for (uint32_t len = 0; len <= max_rec - 8; len++) {
                push_pattern(&t.prod, len % 7, len, seq);
                assert_int_equal(pl_ipc_ring_publish(&t.prod), 0);
                read_pattern(&t.cons, len % 7, len, seq);
                uint32_t ty, ln;
                uint8_t tmp[8];
                assert_int_equal(pl_ipc_ring_read(&t.cons, tmp, sizeof(tmp), &ty, &ln), 0);
                assert_int_equal(pl_ipc_ring_publish(&t.cons), 0);
                seq++;
            }
            tring_done(&t);
        }
    }
}

/* Fill to -EAGAIN at every start offset, then drain in order; an empty ring reads 0. */
static void test_ring_full_and_empty_at_every_offset(void **state) {
    (void)state;
    const uint32_t size = 256;
    for (uint32_t rec_len = 0; rec_len <= 40; rec_len += 8) {
        for (uint32_t off = 0; off < size; off += 8) {
            struct tring t;
            tring_init(&t, size, 128, off);
            uint8_t tmp[128];
            uint32_t ty, ln;
            assert_int_equal(pl_ipc_ring_read(&t.cons, tmp, sizeof(tmp), &ty, &ln), 0);
            assert_int_equal(pl_ipc_ring_ready(&t.cons, 0), 0);
            uint64_t n = 0;
            int rc;
            for (;;) {
                uint8_t buf[64];
                pt_fill(buf, rec_len, n);
                rc = pl_ipc_ring_push(&t.prod, 1, buf, rec_len);
                if (rc != 0)
                    break;
                n++;
            }
            assert_int_equal(rc, -EAGAIN);
            /* Without pads, a full ring holds exactly size / span records. */
            uint32_t span = PL_IPC_REC_SPAN(rec_len);
            assert_true(n >= (size - span) / span && n <= size / span);
            assert_int_equal(pl_ipc_ring_ready(&t.prod, rec_len), 0);
            assert_int_equal(pl_ipc_ring_publish(&t.prod), 0);
            for (uint64_t i = 0; i < n; i++)
                read_pattern(&t.cons, 1, rec_len, i);
            assert_int_equal(pl_ipc_ring_read(&t.cons, tmp, sizeof(tmp), &ty, &ln), 0);
            /* Space comes back only once the consumer publishes. */
            assert_int_equal(pl_ipc_ring_ready(&t.prod, rec_len), 0);
            assert_int_equal(pl_ipc_ring_publish(&t.cons), 0);
            assert_int_equal(pl_ipc_ring_ready(&t.prod, rec_len), 1);
            tring_done(&t);
        }
    }
}

/* Every payload size from 0 to the maximum, interleaved so positions vary. */
static void test_ring_every_record_size_up_to_max(void **state) {
    (void)state;
    struct tring t;
    tring_init(&t, 65536, 32768, 0);
    uint32_t max = pl_ipc_ring_max_payload(&t.prod);
    assert_int_equal(max, 32768 - 8);
    uint8_t *buf = malloc(max), *want = malloc(max);
    assert_non_null(buf);
    assert_non_null(want);
    for (uint32_t len = 0; len <= max; len++) {
        void *dst;
        assert_int_equal(pl_ipc_ring_reserve(&t.prod, len, &dst), 0);
        assert_int_equal(((uintptr_t)dst) % 8, 0);
        pt_fill(dst, len, len);
        assert_int_equal(pl_ipc_ring_commit(&t.prod, 3, len), 0);
        assert_int_equal(pl_ipc_ring_publish(&t.prod), 0);
        uint32_t ty, ln;
        assert_int_equal(pl_ipc_ring_read(&t.cons, buf, max, &ty, &ln), 1);
        assert_int_equal(ln, len);
        pt_fill(want, len, len);
        assert_memory_equal(buf, want, len);
        assert_int_equal(pl_ipc_ring_publish(&t.cons), 0);
    }
    assert_int_equal(pl_ipc_ring_reserve(&t.prod, max + 1, &(void *){NULL}), -EMSGSIZE);
    free(buf);
    free(want);
    tring_done(&t);
}

static void test_ring_commit_rules(void **state) {
    (void)state;
    struct tring t;
    tring_init(&t, 256, 128, 0);
    assert_int_equal(pl_ipc_ring_commit(&t.prod, 1, 0), -EINVAL); /* nothing reserved */
    void *dst;
    assert_int_equal(pl_ipc_ring_reserve(&t.prod, 32, &dst), 0);
    assert_int_equal(pl_ipc_ring_commit(&t.prod, 1, 33), -EINVAL);
    assert_int_equal(pl_ipc_ring_commit(&t.prod, PL_IPC_REC_PAD, 8), -EINVAL);
    assert_int_equal(pl_ipc_ring_commit(&t.prod, PL_IPC_REC_TYPE_RESERVED, 8), -EINVAL);
    memset(dst, 7, 8);
    assert_int_equal(pl_ipc_ring_commit(&t.prod, 9, 8), 0);       /* shorter than reserved */
    assert_int_equal(pl_ipc_ring_commit(&t.prod, 9, 8), -EINVAL); /* already committed */
    assert_int_equal(pl_ipc_ring_publish(&t.prod), 0);
    assert_int_equal(atomic_load(&t.ctrl->prod), 16);
    assert_int_equal(pl_ipc_ring_push(&t.prod, PL_IPC_REC_PAD, NULL, 0), -EINVAL);
    /* role checks */
    assert_int_equal(pl_ipc_ring_reserve(&t.cons, 8, &dst), -EINVAL);
    uint32_t ty, ln;
    uint8_t b[8];
    assert_int_equal(pl_ipc_ring_read(&t.prod, b, 8, &ty, &ln), -EINVAL);
    tring_done(&t);
}

static void test_ring_read_into_small_buffer_keeps_record(void **state) {
    (void)state;
    struct tring t;
    tring_init(&t, 256, 128, 0);
    push_pattern(&t.prod, 5, 40, 1);
    (void)pl_ipc_ring_publish(&t.prod);
    uint8_t small[16];
    uint32_t ty, ln;
    assert_int_equal(pl_ipc_ring_read(&t.cons, small, sizeof(small), &ty, &ln), -EMSGSIZE);
    assert_false(pl_ipc_ring_broken(&t.cons));
    read_pattern(&t.cons, 5, 40, 1);
    tring_done(&t);
}

static void test_ring_peek_consume_is_zero_copy(void **state) {
    (void)state;
    struct tring t;
    tring_init(&t, 256, 128, 200); /* so the second record wraps */
    push_pattern(&t.prod, 1, 24, 1);
    push_pattern(&t.prod, 2, 40, 2);
    (void)pl_ipc_ring_publish(&t.prod);
    const void *p;
    uint32_t ty, ln;
    uint8_t want[64];
    assert_int_equal(pl_ipc_ring_consume(&t.cons), -EINVAL);
    assert_int_equal(pl_ipc_ring_peek(&t.cons, &p, &ty, &ln), 1);
    assert_int_equal(ty, 1);
    pt_fill(want, 24, 1);
    assert_memory_equal(p, want, 24);
    assert_true((const uint8_t *)p >= t.data && (const uint8_t *)p < t.data + t.size);
    /* peeking again without consuming returns the same record */
    assert_int_equal(pl_ipc_ring_peek(&t.cons, &p, &ty, &ln), 1);
    assert_int_equal(ty, 1);
    assert_int_equal(pl_ipc_ring_consume(&t.cons), 0);
    assert_int_equal(pl_ipc_ring_peek(&t.cons, &p, &ty, &ln), 1);
    assert_int_equal(ty, 2);
    assert_int_equal(ln, 40);
    assert_ptr_equal(p, t.data + 8); /* wrapped to the start after a pad */
    assert_int_equal(pl_ipc_ring_consume(&t.cons), 0);
    assert_int_equal(pl_ipc_ring_peek(&t.cons, &p, &ty, &ln), 0);
    tring_done(&t);
}

/* ---- Need-wakeup reporting ---- */

static void test_ring_publish_reports_sleeping_peer(void **state) {
    (void)state;
    struct tring t;
    tring_init(&t, 256, 128, 0);
    assert_int_equal(pl_ipc_ring_publish(&t.prod), 0);          /* nothing new: never a wake-up */
    assert_int_equal(pl_ipc_ring_sleep_prepare(&t.cons, 0), 0); /* empty: may sleep */
    assert_int_equal(atomic_load(&t.ctrl->cons_flags), PL_IPC_RING_NEED_WAKEUP);
    push_pattern(&t.prod, 1, 8, 0);
    assert_int_equal(pl_ipc_ring_publish(&t.prod), 1);
    pl_ipc_ring_sleep_finish(&t.cons);
    assert_int_equal(atomic_load(&t.ctrl->cons_flags), 0);
    push_pattern(&t.prod, 1, 8, 1);
    assert_int_equal(pl_ipc_ring_publish(&t.prod), 0);
    /* data present: prepare refuses to sleep and leaves the flag clear */
    assert_int_equal(pl_ipc_ring_sleep_prepare(&t.cons, 0), 1);
    assert_int_equal(atomic_load(&t.ctrl->cons_flags), 0);

    /* producer side: full ring, producer sleeps for space, the consumer's publish reports it */
    while (pl_ipc_ring_push(&t.prod, 1, "xxxxxxxx", 8) == 0) {
    }
    (void)pl_ipc_ring_publish(&t.prod);
    assert_int_equal(pl_ipc_ring_sleep_prepare(&t.prod, 8), 0);
    assert_int_equal(atomic_load(&t.ctrl->prod_flags), PL_IPC_RING_NEED_WAKEUP);
    uint8_t b[16];
    uint32_t ty, ln;
    assert_int_equal(pl_ipc_ring_read(&t.cons, b, sizeof(b), &ty, &ln), 1);
    assert_int_equal(pl_ipc_ring_publish(&t.cons), 1);
    pl_ipc_ring_sleep_finish(&t.prod);
    assert_int_equal(pl_ipc_ring_sleep_prepare(&t.prod, 8), 1);
    tring_done(&t);
}

/* Batched publishing holds records back until batch_bytes are pending or the consumer sleeps. */
static void test_ring_publish_batch_waits_for_batch_or_sleeper(void **state) {
    (void)state;
    struct tring t;
    tring_init(&t, 1024, 128, 0);
    assert_int_equal(pl_ipc_ring_push(&t.prod, 1, "abcdefgh", 8), 0);
    assert_int_equal(pl_ipc_ring_publish_batch(&t.prod, 64), 0);
    assert_int_equal(atomic_load(&t.ctrl->prod), 0); /* held back */
    assert_int_equal(pl_ipc_ring_ready(&t.cons, 0), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(pl_ipc_ring_push(&t.prod, 1, "abcdefgh", 8), 0);
    assert_int_equal(pl_ipc_ring_publish_batch(&t.prod, 64), 0);
    assert_int_equal(atomic_load(&t.ctrl->prod), 64); /* 4 records of 16 bytes: published */
    /* the consumer drains and sleeps: the next single record goes out at once, with a wake */
    uint8_t b[16];
    uint32_t ty, ln;
    while (pl_ipc_ring_read(&t.cons, b, sizeof(b), &ty, &ln) == 1) {
    }
    assert_int_equal(pl_ipc_ring_sleep_prepare(&t.cons, 0), 0);
    assert_int_equal(pl_ipc_ring_push(&t.prod, 1, "abcdefgh", 8), 0);
    assert_int_equal(pl_ipc_ring_publish_batch(&t.prod, 64), PL_IPC_WAKE_DOORBELL);
    assert_int_equal(atomic_load(&t.ctrl->prod), 80);
    pl_ipc_ring_sleep_finish(&t.cons);
    tring_done(&t);
}

/* ---- Hostile producer (consumer-side validation) ---- */

static void write_hdr(struct tring *t, uint32_t pos, uint32_t len, uint32_t type) {
    struct pl_ipc_rec_hdr h = {.len = len, .type = type};
    memcpy(t->data + pos, &h, sizeof(h));
}

static int read_one(struct tring *t) {
    uint8_t b[256];
    uint32_t ty, ln;
    return pl_ipc_ring_read(&t->cons, b, sizeof(b), &ty, &ln);
}

static void test_ring_consumer_rejects_bad_prod_index(void **state) {
    (void)state;
    const uint32_t bad[] = {264, 4, 0xfffffff8u, 0x80000000u};
    for (size_t i = 0; i < PL_ARRAY_SIZE(bad); i++) {
        struct tring t;
        tring_init(&t, 256, 128, 0);
        atomic_store(&t.ctrl->prod, bad[i]);
        assert_int_equal(read_one(&t), -PL_ERR_PROTOCOL);
        assert_true(pl_ipc_ring_broken(&t.cons));
        /* sticky: even a repaired index does not bring it back */
        atomic_store(&t.ctrl->prod, 0);
        assert_int_equal(read_one(&t), -PL_ERR_PROTOCOL);
        assert_int_equal(pl_ipc_ring_publish(&t.cons), -PL_ERR_PROTOCOL);
        assert_int_equal(pl_ipc_ring_ready(&t.cons, 0), -PL_ERR_PROTOCOL);
        tring_done(&t);
    }
    /* an index that moves backwards */
    struct tring t;
    tring_init(&t, 256, 128, 0);
    write_hdr(&t, 0, 8, 1);
    write_hdr(&t, 16, 8, 1);
    atomic_store(&t.ctrl->prod, 32);
    assert_int_equal(read_one(&t), 1);
    atomic_store(&t.ctrl->prod, 16); /* behind what we saw: a cached view says 16 more */
    assert_int_equal(read_one(&t), 1);
    assert_int_equal(pl_ipc_ring_ready(&t.cons, 0), -PL_ERR_PROTOCOL);
    tring_done(&t);
}

static void test_ring_consumer_rejects_bad_records(void **state) {
    (void)state;
    struct {
        uint32_t pos, len, type, prod;
    } cases[] = {
        {0, 121, 1, 256},                      /* longer than max payload */
        {0, 0xffffffffu, 1, 256},              /* huge length */
        {0, 24, 1, 16},                        /* longer than published */
        {0, 8, PL_IPC_REC_TYPE_RESERVED, 16},  /* reserved type */
        {0, 8, PL_IPC_REC_PAD, 256},           /* pad that does not reach the end */
        {0, 248, PL_IPC_REC_PAD, 128},         /* pad reaching the end but not published */
        {0, 0xfffffff8u, PL_IPC_REC_PAD, 256}, /* pad with wrapping length */
    };
    for (size_t i = 0; i < PL_ARRAY_SIZE(cases); i++) {
        struct tring t;
        tring_init(&t, 256, 128, 0);
        write_hdr(&t, cases[i].pos, cases[i].len, cases[i].type);
        atomic_store(&t.ctrl->prod, cases[i].prod);
        assert_int_equal(read_one(&t), -PL_ERR_PROTOCOL);
        tring_done(&t);
    }
    /* a record that would run past the end of the data area */
    struct tring t;
    tring_init(&t, 256, 128, 192);
    write_hdr(&t, 192, 80, 1);
    atomic_store(&t.ctrl->prod, 192 + 128);
    assert_int_equal(read_one(&t), -PL_ERR_PROTOCOL);
    tring_done(&t);
}

/* ---- Hostile consumer (producer-side validation) ---- */

static void test_ring_producer_rejects_bad_cons_index(void **state) {
    (void)state;
    const uint32_t bad[] = {72, 0x80000000u, 0xfffffff0u, 3};
    for (size_t i = 0; i < PL_ARRAY_SIZE(bad); i++) {
        struct tring t;
        tring_init(&t, 256, 128, 0);
        for (int k = 0; k < 4; k++)
            push_pattern(&t.prod, 1, 8, (uint64_t)k); /* 64 bytes */
        (void)pl_ipc_ring_publish(&t.prod);
        push_pattern(&t.prod, 1, 8, 4); /* staged, not published: cons may not pass 64 */
        atomic_store(&t.ctrl->cons, bad[i]);
        int rc = 0;
        for (int k = 0; k < 64 && rc == 0; k++)
            rc = pl_ipc_ring_push(&t.prod, 1, "01234567", 8);
        assert_int_equal(rc, -PL_ERR_PROTOCOL);
        assert_true(pl_ipc_ring_broken(&t.prod));
        tring_done(&t);
    }
    /* a consumer index that goes backwards after having advanced */
    struct tring t;
    tring_init(&t, 256, 128, 0);
    for (int k = 0; k < 16; k++)
        push_pattern(&t.prod, 1, 8, (uint64_t)k);
    (void)pl_ipc_ring_publish(&t.prod);
    atomic_store(&t.ctrl->cons, 128);
    assert_int_equal(pl_ipc_ring_ready(&t.prod, 8), 1);
    for (int k = 0; k < 8; k++)
        push_pattern(&t.prod, 1, 8, (uint64_t)k);
    (void)pl_ipc_ring_publish(&t.prod);
    atomic_store(&t.ctrl->cons, 64);
    assert_int_equal(pl_ipc_ring_ready(&t.prod, 8), -PL_ERR_PROTOCOL);
    tring_done(&t);
}

/* ---- Threaded producer/consumer (the TSan target) ---- */

struct thr_ctx {
    struct tring *t;
    uint64_t n;
    int sq_wake, prod_wake; /* eventfds: consumer sleeps on sq_wake, producer on prod_wake */
    _Atomic uint64_t progress;
    int result;
};

static void *thr_producer(void *arg) {
    struct thr_ctx *c = arg;
    uint8_t buf[512];
    for (uint64_t i = 0; i < c->n; i++) {
        uint32_t len = 8 + (uint32_t)((i * 2654435761u) % 300);
        pt_fill(buf + 8, len - 8, i);
        memcpy(buf, &i, 8);
        int rc;
        while ((rc = pl_ipc_ring_push(&c->t->prod, 7, buf, len)) == -EAGAIN) {
            rc = pl_ipc_doorbell_wait(&c->t->prod, len, c->prod_wake, c->sq_wake, 2000, -1);
            if (rc < 0)
                break;
        }
        if (rc < 0) {
            c->result = rc;
            return NULL;
        }
        if ((i & 15) == 15 && pl_ipc_doorbell_notify(&c->t->prod, c->sq_wake) < 0)
            return NULL;
    }
    (void)pl_ipc_doorbell_notify(&c->t->prod, c->sq_wake);
    return NULL;
}

static void test_ring_threads_stream_in_order(void **state) {
    (void)state;
    struct tring t;
    tring_init(&t, 4096, 1024, 0xfffff000u);
    struct thr_ctx c = {.t = &t, .n = pt_env_count("PL_IPC_THREAD_RECORDS", 1000000)};
    assert_int_equal(pl_ipc_doorbell_open(&c.sq_wake), 0);
    assert_int_equal(pl_ipc_doorbell_open(&c.prod_wake), 0);
    struct pt_watchdog w;
    pt_watchdog_start(&w, &c.progress, 20, "threaded ring stream");
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, thr_producer, &c), 0);
    uint8_t buf[1024], want[1024];
    for (uint64_t i = 0; i < c.n; i++) {
        uint32_t ty, ln;
        int rc;
        while ((rc = pl_ipc_ring_read(&t.cons, buf, sizeof(buf), &ty, &ln)) == 0) {
            rc = pl_ipc_doorbell_wait(&t.cons, 0, c.sq_wake, c.prod_wake, 2000, -1);
            assert_int_equal(rc, 0);
        }
        assert_int_equal(rc, 1);
        uint64_t seq;
        memcpy(&seq, buf, 8);
        assert_int_equal(seq, i);
        assert_int_equal(ln, 8 + (uint32_t)((i * 2654435761u) % 300));
        pt_fill(want, ln - 8, i);
        assert_memory_equal(buf + 8, want, ln - 8);
        if ((i & 15) == 15)
            assert_int_equal(pl_ipc_doorbell_notify(&t.cons, c.prod_wake), 0);
        atomic_store_explicit(&c.progress, i, memory_order_relaxed);
    }
    pthread_join(th, NULL);
    pt_watchdog_stop(&w);
    assert_int_equal(c.result, 0);
    close(c.sq_wake);
    close(c.prod_wake);
    tring_done(&t);
}

/* ---- Two processes, 10 million records, sequence + checksum ---- */

/* Payload: u64 seq, u64 hash of the rest, then len - 16 pattern bytes. */
static void test_ring_two_process_stress(void **state) {
    (void)state;
    const uint64_t n = pt_env_count("PL_IPC_STRESS_RECORDS", 10000000);
    struct pl_ipc_region reg = PL_IPC_REGION_INIT;
    assert_int_equal(pl_ipc_region_create(&reg, 1u << 16, 1u << 12, 1024), 0);
    struct pl_ipc_ring bsq, bcq;
    assert_int_equal(pl_ipc_region_rings(&reg, PL_IPC_REGION_BROKER, &bsq, &bcq), 0);
    int broker_wake, client_wake;
    assert_int_equal(pl_ipc_doorbell_open(&broker_wake), 0);
    assert_int_equal(pl_ipc_doorbell_open(&client_wake), 0);

    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* client: produce n records on sq, using the doorbell protocol when full */
        (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
        struct pl_ipc_region creg = PL_IPC_REGION_INIT;
        int fd = dup(reg.fd);
        if (pl_ipc_region_attach(&creg, fd, 1000) < 0)
            _exit(10);
        struct pl_ipc_ring sq, cq;
        if (pl_ipc_region_rings(&creg, PL_IPC_REGION_CLIENT, &sq, &cq) < 0)
            _exit(11);
        for (uint64_t i = 0; i < n; i++) {
            uint32_t len = 16 + ((uint32_t)(i * 0x9e3779b1u) >> 26); /* 16..79 */
            void *dst;
            int rc;
            while ((rc = pl_ipc_ring_reserve(&sq, len, &dst)) == -EAGAIN)
                if (pl_ipc_doorbell_wait(&sq, len, client_wake, broker_wake, 5000, -1) < 0)
                    _exit(12);
            if (rc < 0)
                _exit(13);
            uint8_t *p = dst;
            pt_fill(p + 16, len - 16, i);
            uint64_t h = pt_hash(p + 16, len - 16);
            memcpy(p, &i, 8);
            memcpy(p + 8, &h, 8);
            if (pl_ipc_ring_commit(&sq, 0x51, len) < 0)
                _exit(14);
            if ((i & 31) == 31 && pl_ipc_doorbell_notify(&sq, broker_wake) < 0)
                _exit(15);
        }
        if (pl_ipc_doorbell_notify(&sq, broker_wake) < 0)
            _exit(16);
        _exit(0);
    }

    _Atomic uint64_t progress = 0;
    struct pt_watchdog w;
    pt_watchdog_start(&w, &progress, 20, "two-process stress");
    uint8_t buf[1024];
    uint64_t bad = 0, bytes = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t ty, ln;
        int rc;
        while ((rc = pl_ipc_ring_read(&bsq, buf, sizeof(buf), &ty, &ln)) == 0)
            assert_int_equal(pl_ipc_doorbell_wait(&bsq, 0, broker_wake, client_wake, 5000, -1), 0);
        assert_int_equal(rc, 1);
        uint64_t seq, h;
        memcpy(&seq, buf, 8);
        memcpy(&h, buf + 8, 8);
        if (seq != i || ty != 0x51 || ln != 16 + ((uint32_t)(i * 0x9e3779b1u) >> 26) ||
            h != pt_hash(buf + 16, ln - 16))
            bad++;
        bytes += ln;
        if ((i & 31) == 31)
            assert_int_equal(pl_ipc_doorbell_notify(&bsq, client_wake), 0);
        if ((i & 1023) == 0)
            atomic_store_explicit(&progress, i, memory_order_relaxed);
    }
    pt_watchdog_stop(&w);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(bad, 0);
    assert_true(bytes >= n * 16);
    uint8_t tmp[8];
    uint32_t ty, ln;
    assert_int_equal(pl_ipc_ring_read(&bsq, tmp, sizeof(tmp), &ty, &ln), 0); /* nothing extra */
    close(broker_wake);
    close(client_wake);
    pl_ipc_region_done(&reg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_init_rejects_bad_geometry),
        cmocka_unit_test(test_ring_record_layout_is_header_payload_padding),
        cmocka_unit_test(test_ring_unread_returns_to_the_mark),
        cmocka_unit_test(test_ring_wraps_at_every_offset_and_size),
        cmocka_unit_test(test_ring_full_and_empty_at_every_offset),
        cmocka_unit_test(test_ring_every_record_size_up_to_max),
        cmocka_unit_test(test_ring_commit_rules),
        cmocka_unit_test(test_ring_read_into_small_buffer_keeps_record),
        cmocka_unit_test(test_ring_peek_consume_is_zero_copy),
        cmocka_unit_test(test_ring_publish_reports_sleeping_peer),
        cmocka_unit_test(test_ring_publish_batch_waits_for_batch_or_sleeper),
        cmocka_unit_test(test_ring_consumer_rejects_bad_prod_index),
        cmocka_unit_test(test_ring_consumer_rejects_bad_records),
        cmocka_unit_test(test_ring_producer_rejects_bad_cons_index),
        cmocka_unit_test(test_ring_threads_stream_in_order),
        cmocka_unit_test(test_ring_two_process_stress),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
