/* SPDX-License-Identifier: MIT */
/* Tests of the paged KV cache (engine/src/kv.c): block accounting, reservation within the
 * pool and n_ctx, rows of a sequence staying put as it grows, clearing returning blocks,
 * argument and size checks. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kv.h"
#include "pl/engine_model.h"
#include "pl/pl_err.h"

#define B PL_KV_BLOCK_TOKENS

static void test_kv_reserve_and_clear_account_blocks(void **state) {
    (void)state;
    struct pl_kv kv;
    /* 2 layers, kv_dim 8, 3 sequences of up to 4 blocks, pool of 5 blocks. */
    assert_int_equal(pl_kv_init(&kv, 2, 8, 3, 4 * B, 5 * B - 3, PL_KV_F16), 0);
    assert_int_equal(kv.n_blocks, 5);
    assert_int_equal(kv.n_free, 5);
    assert_int_equal(kv.row_bytes, 16);

    assert_int_equal(pl_kv_blocks_needed(&kv, 0, 1), 1);
    assert_int_equal(pl_kv_blocks_needed(&kv, 0, B + 1), 2);
    assert_int_equal(pl_kv_reserve(&kv, 0, B + 1), 0);
    assert_int_equal(kv.n_free, 3);
    assert_int_equal(pl_kv_blocks_needed(&kv, 0, 2 * B), 0);
    assert_int_equal(pl_kv_reserve(&kv, 0, 2 * B), 0); /* no new block */
    assert_int_equal(kv.n_free, 3);

    /* Rows written for seq 0 stay where they are when other sequences take blocks. */
    uint8_t *r0 = pl_kv_k_slot(&kv, 1, 0, B + 2);
    const uint16_t row[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    pl_kv_k_scatter(r0, row, 8, 2);
    assert_int_equal(pl_kv_reserve(&kv, 1, 3 * B), 0);
    assert_int_equal(kv.n_free, 0);
    assert_ptr_equal(pl_kv_k_slot(&kv, 1, 0, B + 2), r0);
    for (uint32_t i = 0; i < 8; i++) { /* element i of the slot: i x 16 elements on */
        uint16_t h;
        memcpy(&h, r0 + (size_t)i * B * 2, 2);
        assert_int_equal(h, row[i]);
    }
    /* Distinct sequences never share a row; K and V are distinct memory. */
    assert_ptr_not_equal(pl_kv_k_slot(&kv, 1, 1, B + 2), r0);
    assert_ptr_not_equal(pl_kv_v_row(&kv, 1, 0, B + 2), r0);

    /* Pool empty: nothing is taken on refusal. */
    assert_int_equal(pl_kv_reserve(&kv, 2, 1), -PL_ERR_EXHAUSTED);
    assert_int_equal(kv.n_held[2], 0);
    /* Past n_ctx. */
    assert_int_equal(pl_kv_reserve(&kv, 0, 4 * B + 1), -PL_ERR_EXHAUSTED);
    assert_int_equal(pl_kv_reserve(&kv, 3, 1), -PL_ERR_EXHAUSTED); /* no such sequence */

    kv.seq_len[1] = 3 * B;
    pl_kv_seq_clear(&kv, 1);
    assert_int_equal(kv.n_free, 3);
    assert_int_equal(kv.n_held[1], 0);
    assert_int_equal(kv.seq_len[1], 0);
    assert_int_equal(pl_kv_reserve(&kv, 2, 3 * B), 0);
    assert_int_equal(kv.n_free, 0);
    pl_kv_seq_clear(&kv, 0);
    pl_kv_seq_clear(&kv, 2);
    pl_kv_seq_clear(&kv, 99); /* ignored */
    assert_int_equal(kv.n_free, 5);

    /* Every block id is back exactly once. */
    uint32_t seen = 0;
    for (uint32_t i = 0; i < kv.n_free; i++) {
        assert_true(kv.free_ids[i] < 5);
        assert_false(seen & (1u << kv.free_ids[i]));
        seen |= 1u << kv.free_ids[i];
    }
    pl_kv_done(&kv);
    pl_kv_done(&kv); /* twice is fine */
}

static void test_kv_init_rejects_bad_sizes(void **state) {
    (void)state;
    struct pl_kv kv;
    assert_int_equal(pl_kv_init(&kv, 0, 8, 1, 16, 16, PL_KV_F16), -EINVAL);
    assert_int_equal(pl_kv_init(&kv, 1, 8, 1, 16, 0, PL_KV_F16), -EINVAL);
    assert_int_equal(pl_kv_init(&kv, 1, 8, 1, 16, 16, 9), -EINVAL);
    int r = pl_kv_init(&kv, 1024, 1u << 20, 1, 16, UINT32_MAX, PL_KV_F32);
    assert_true(r == -EOVERFLOW || r == -ENOMEM);
    pl_kv_done(&kv);
}

static void test_kv_f32_rows(void **state) {
    (void)state;
    struct pl_kv kv;
    assert_int_equal(pl_kv_init(&kv, 3, 5, 1, 40, 40, PL_KV_F32), 0);
    assert_int_equal(kv.row_bytes, 20);
    assert_int_equal(pl_kv_reserve(&kv, 0, 40), 0);
    for (uint32_t il = 0; il < 3; il++)
        for (uint32_t p = 0; p + 1 < 40; p++) {
            uint8_t *a = pl_kv_v_row(&kv, il, 0, p), *b = pl_kv_v_row(&kv, il, 0, p + 1);
            if ((p + 1) % B != 0)
                assert_ptr_equal(b, a + kv.row_bytes); /* V rows: contiguous in a block */
            assert_ptr_equal(pl_kv_v_block(&kv, il, 0, p / B) + (p % B) * kv.row_bytes, a);
            /* K: the slots of one dimension adjacent, dimension d at d x 16 elements. */
            uint8_t *ka = pl_kv_k_slot(&kv, il, 0, p), *kb = pl_kv_k_slot(&kv, il, 0, p + 1);
            if ((p + 1) % B != 0)
                assert_ptr_equal(kb, ka + sizeof(float));
            assert_ptr_equal(pl_kv_k_block(&kv, il, 0, p / B) + (p % B) * sizeof(float), ka);
            const float x[5] = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f};
            pl_kv_k_scatter(ka, x, 5, sizeof(float));
            for (uint32_t d = 0; d < 5; d++) {
                float y;
                memcpy(&y, pl_kv_k_block(&kv, il, 0, p / B) + ((size_t)d * B + p % B) * 4, 4);
                assert_true(y == x[d]);
            }
        }
    pl_kv_done(&kv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_reserve_and_clear_account_blocks),
        cmocka_unit_test(test_kv_init_rejects_bad_sizes),
        cmocka_unit_test(test_kv_f32_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
