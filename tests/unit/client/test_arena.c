/* SPDX-License-Identifier: MIT */
/* libpicolm's protobuf-c bump allocator (client/src/arena.c): alignment, overflow blocks that
 * make the next cycle's block big enough (so a steady stream allocates nothing), the per-cycle
 * limit, and decoding real messages through it. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "arena.h"
#include "pl/picolm.pb-c.h"

static void *arena_get(struct pl_client_arena *a, size_t n) {
    return a->pb.alloc(a->pb.allocator_data, n);
}

static void test_arena_hands_out_aligned_disjoint_slices(void **state) {
    (void)state;
    struct pl_client_arena a;
    assert_int_equal(pl_client_arena_init(&a, 1024, 1 << 20), 0);
    uint8_t *p = arena_get(&a, 1), *q = arena_get(&a, 7), *r = arena_get(&a, 0);
    assert_non_null(p);
    assert_non_null(q);
    assert_non_null(r);
    assert_int_equal((uintptr_t)p % 16, 0);
    assert_int_equal((uintptr_t)q % 16, 0);
    assert_true(q >= p + 1 && r >= q + 7);
    memset(q, 0xee, 7);
    assert_ptr_equal(a.blocks, NULL);
    pl_client_arena_reset(&a);
    assert_ptr_equal(arena_get(&a, 1), p); /* rewound */
    pl_client_arena_done(&a);
    pl_client_arena_done(&a); /* twice is fine */
}

static void test_arena_grows_once_then_stays_put(void **state) {
    (void)state;
    struct pl_client_arena a;
    assert_int_equal(pl_client_arena_init(&a, 64, 1 << 20), 0);
    /* A cycle needing 10 KiB overflows the 64-byte block... */
    for (int i = 0; i < 10; i++)
        assert_non_null(arena_get(&a, 1024));
    assert_non_null(a.blocks);
    pl_client_arena_reset(&a);
    assert_null(a.blocks);
    assert_true(a.cap >= 10 * 1024);
    /* ...and the same cycle afterwards fits the main block: no more allocations. */
    uint8_t *base = a.buf;
    for (int cycle = 0; cycle < 100; cycle++) {
        for (int i = 0; i < 10; i++)
            assert_non_null(arena_get(&a, 1024));
        assert_null(a.blocks);
        pl_client_arena_reset(&a);
        assert_ptr_equal(a.buf, base);
    }
    pl_client_arena_done(&a);
}

static void test_arena_refuses_beyond_its_limit(void **state) {
    (void)state;
    struct pl_client_arena a;
    assert_int_equal(pl_client_arena_init(&a, 256, 4096), 0);
    assert_non_null(arena_get(&a, 4000));
    assert_null(arena_get(&a, 200)); /* 4000 + 200 > 4096 */
    assert_null(arena_get(&a, SIZE_MAX));
    pl_client_arena_reset(&a);
    assert_non_null(arena_get(&a, 4096));
    assert_true(a.cap <= 4096);
    pl_client_arena_done(&a);
    assert_int_equal(pl_client_arena_init(&a, 8192, 4096), -EINVAL);
}

static void test_arena_decodes_protobuf_messages(void **state) {
    (void)state;
    int32_t ids[300];
    for (int i = 0; i < 300; i++)
        ids[i] = i * 7;
    Picolm__V1__TokenChunk c;
    picolm__v1__token_chunk__init(&c);
    c.request_id = 99;
    c.n_ids = 300;
    c.ids = ids;
    c.text.data = (uint8_t *)"hello";
    c.text.len = 5;
    uint8_t buf[4096];
    size_t n = picolm__v1__token_chunk__pack(&c, buf);

    struct pl_client_arena a;
    assert_int_equal(pl_client_arena_init(&a, 128, 1 << 20), 0);
    for (int round = 0; round < 3; round++) {
        Picolm__V1__TokenChunk *m = picolm__v1__token_chunk__unpack(&a.pb, n, buf);
        assert_non_null(m);
        assert_int_equal(m->request_id, 99);
        assert_int_equal(m->n_ids, 300);
        assert_memory_equal(m->ids, ids, sizeof(ids));
        assert_int_equal(m->text.len, 5);
        assert_memory_equal(m->text.data, "hello", 5);
        pl_client_arena_reset(&a);
    }
    /* A limit too small for the message makes unpack fail cleanly. */
    pl_client_arena_done(&a);
    assert_int_equal(pl_client_arena_init(&a, 64, 256), 0);
    assert_null(picolm__v1__token_chunk__unpack(&a.pb, n, buf));
    pl_client_arena_done(&a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arena_hands_out_aligned_disjoint_slices),
        cmocka_unit_test(test_arena_grows_once_then_stays_put),
        cmocka_unit_test(test_arena_refuses_beyond_its_limit),
        cmocka_unit_test(test_arena_decodes_protobuf_messages),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
