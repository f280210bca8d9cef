/* SPDX-License-Identifier: MIT */
/* Tests of KV block sharing (engine/src/kv_share.c): a sequence started from another's full
 * blocks gives bit-identical logits to a full prefill, shared blocks survive the sequence
 * that wrote them while referenced and return to the pool with the last reference, block
 * copies round-trip, and bad arguments are refused. Needs
 * $PICOLM_TEST_DATA/models/stories260K.gguf (exit 77 when missing). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pl/engine_model.h"
#include "pl/pl_err.h"

#define BT PL_CTX_KV_BLOCK_TOKENS
#define N_TOK 45u

static char g_model_path[4096];

static void feed(struct pl_ctx *c, int32_t seq, const int32_t *tok, uint32_t from, uint32_t to,
                 float *out) {
    int32_t pos[N_TOK], sq[N_TOK];
    for (uint32_t i = from; i < to; i++) {
        pos[i - from] = (int32_t)i;
        sq[i - from] = seq;
    }
    struct pl_batch b = {.n = to - from, .token = tok + from, .pos = pos, .seq = sq};
    assert_int_equal(pl_ctx_decode(c, &b, out), 0);
}

static void test_shared_prefix_gives_identical_logits(void **state) {
    (void)state;
    struct pl_model *m = NULL;
    struct pl_ctx *c = NULL;
    char err[256];
    assert_int_equal(pl_model_load(g_model_path, NULL, &m, err, sizeof(err)), 0);
    struct pl_ctx_opts o = {.n_ctx = 128, .n_seq = 3, .n_kv_tokens = 16 * BT, .n_batch = 64};
    assert_int_equal(pl_ctx_new(m, &o, &c), 0);
    uint32_t nv = pl_model_hparams(m)->n_vocab;
    int32_t tok[N_TOK];
    for (uint32_t i = 0; i < N_TOK; i++)
        tok[i] = (int32_t)(1 + (i * 37u) % (nv - 1));
    float *ref = malloc(nv * sizeof(float)), *got = malloc(nv * sizeof(float));
    assert_non_null(ref);
    assert_non_null(got);

    feed(c, 0, tok, 0, N_TOK, ref);
    uint32_t total_free = pl_ctx_kv_free_blocks(c);
    uint32_t ids[2];
    assert_int_equal(pl_ctx_seq_blocks(c, 0, 0, 2, ids), 0);
    /* Only full blocks: 45 tokens fill 2. */
    uint32_t bad[3];
    assert_int_equal(pl_ctx_seq_blocks(c, 0, 0, 3, bad), -EINVAL);
    /* The cache keeps its own reference, as the broker does. */
    assert_int_equal(pl_ctx_kv_block_ref(c, ids[0]), 0);
    assert_int_equal(pl_ctx_kv_block_ref(c, ids[1]), 0);
    pl_ctx_seq_clear(c, 0);
    /* The third block went back; the two shared ones did not. */
    assert_int_equal(pl_ctx_kv_free_blocks(c), total_free + 1);

    assert_int_equal(pl_ctx_seq_share_prefix(c, 1, ids, 2), 0);
    assert_int_equal(pl_ctx_seq_len(c, 1), 2 * BT);
    /* Not into a non-empty sequence, not a repeated block. */
    assert_int_equal(pl_ctx_seq_share_prefix(c, 1, ids, 2), -EINVAL);
    uint32_t twice[2] = {ids[0], ids[0]};
    assert_int_equal(pl_ctx_seq_share_prefix(c, 2, twice, 2), -EINVAL);
    feed(c, 1, tok, 2 * BT, N_TOK, got);
    assert_memory_equal(ref, got, nv * sizeof(float));

    /* A second sharer at the same time, and a copy of a block round-trips. */
    assert_int_equal(pl_ctx_seq_share_prefix(c, 2, ids, 1), 0);
    feed(c, 2, tok, BT, N_TOK, got);
    assert_memory_equal(ref, got, nv * sizeof(float));
    size_t bb = pl_ctx_kv_block_bytes(c);
    assert_true(bb > 0);
    uint8_t *buf = malloc(bb), *buf2 = malloc(bb);
    assert_non_null(buf);
    assert_non_null(buf2);
    assert_int_equal(pl_ctx_kv_block_read(c, ids[1], buf, bb), 0);
    uint32_t fresh;
    assert_int_equal(pl_ctx_kv_block_alloc(c, &fresh), 0);
    assert_int_equal(pl_ctx_kv_block_write(c, fresh, buf, bb), 0);
    assert_int_equal(pl_ctx_kv_block_read(c, fresh, buf2, bb), 0);
    assert_memory_equal(buf, buf2, bb);
    assert_int_equal(pl_ctx_kv_block_read(c, fresh, buf2, bb - 1), -EINVAL);

    /* Release everything: every block is back in the pool. */
    pl_ctx_seq_clear(c, 1);
    pl_ctx_seq_clear(c, 2);
    pl_ctx_kv_block_unref(c, ids[0]);
    pl_ctx_kv_block_unref(c, ids[1]);
    pl_ctx_kv_block_unref(c, fresh);
    assert_int_equal(pl_ctx_kv_used(c), 0);
    /* A freed block can no longer be referenced or shared. */
    assert_int_equal(pl_ctx_kv_block_ref(c, ids[0]), -EINVAL);
    assert_int_equal(pl_ctx_seq_share_prefix(c, 1, ids, 1), -EINVAL);
    pl_ctx_kv_block_unref(c, ids[0]); /* ignored */
    assert_int_equal(pl_ctx_kv_used(c), 0);

    free(buf);
    free(buf2);
    free(ref);
    free(got);
    pl_ctx_free(c);
    pl_model_free(m);
}

int main(void) {
    const char *data = getenv("PICOLM_TEST_DATA");
    if (!data) {
        fprintf(stderr, "PICOLM_TEST_DATA not set: skipping\n");
        return 77;
    }
    (void)snprintf(g_model_path, sizeof(g_model_path), "%s/models/stories260K.gguf", data);
    FILE *f = fopen(g_model_path, "rb");
    if (!f) {
        fprintf(stderr, "%s missing: skipping\n", g_model_path);
        return 77;
    }
    fclose(f);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_prefix_gives_identical_logits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
