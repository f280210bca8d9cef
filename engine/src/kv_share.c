/* SPDX-License-Identifier: MIT */
/* KV block sharing (pl_ctx_seq_share_prefix and friends, engine_model.h): refcounted blocks
 * of the paged KV pool handed between sequences and a caller's prefix cache, and block
 * copies in and out for persistence. Used by the broker's prefix cache. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kv.h"
#include "pl/engine_model.h"
#include "pl/pl_err.h"

_Static_assert(PL_CTX_KV_BLOCK_TOKENS == PL_KV_BLOCK_TOKENS, "public and private block sizes");

static bool held(const struct pl_kv *kv, uint32_t id) {
    return id < kv->n_blocks && kv->ref[id] > 0;
}

int pl_ctx_seq_blocks(const struct pl_ctx *c, int32_t seq, uint32_t first, uint32_t n,
                      uint32_t *ret_ids) {
    if (!c || (n && !ret_ids))
        return -EINVAL;
    const struct pl_kv *kv = pl_ctx_kv((struct pl_ctx *)c);
    if (seq < 0 || (uint32_t)seq >= kv->n_seq)
        return -EINVAL;
    uint32_t full = kv->seq_len[seq] / PL_KV_BLOCK_TOKENS;
    if (first > full || n > full - first)
        return -EINVAL;
    const uint32_t *row = kv->table + (size_t)seq * kv->max_seq_blocks;
    memcpy(ret_ids, row + first, (size_t)n * sizeof(*ret_ids));
    return 0;
}

int pl_ctx_seq_share_prefix(struct pl_ctx *c, int32_t seq, const uint32_t *ids, uint32_t n_blocks) {
    if (!c || (n_blocks && !ids))
        return -EINVAL;
    struct pl_kv *kv = pl_ctx_kv(c);
    if (seq < 0 || (uint32_t)seq >= kv->n_seq || kv->n_held[seq] != 0 || kv->seq_len[seq] != 0)
        return -EINVAL;
    if (n_blocks > kv->max_seq_blocks || (uint64_t)n_blocks * PL_KV_BLOCK_TOKENS > kv->n_ctx)
        return -EINVAL;
    for (uint32_t i = 0; i < n_blocks; i++) {
        if (!held(kv, ids[i]))
            return -EINVAL;
        /* A block twice in one table would be written through two positions. */
        for (uint32_t j = 0; j < i; j++)
            if (ids[j] == ids[i])
                return -EINVAL;
    }
    uint32_t *row = kv->table + (size_t)seq * kv->max_seq_blocks;
    for (uint32_t i = 0; i < n_blocks; i++) {
        kv->ref[ids[i]]++;
        row[i] = ids[i];
    }
    kv->n_held[seq] = n_blocks;
    kv->seq_len[seq] = n_blocks * PL_KV_BLOCK_TOKENS;
    return 0;
}

int pl_ctx_kv_block_ref(struct pl_ctx *c, uint32_t id) {
    if (!c)
        return -EINVAL;
    struct pl_kv *kv = pl_ctx_kv(c);
    if (!held(kv, id) || kv->ref[id] == UINT32_MAX)
        return -EINVAL;
    kv->ref[id]++;
    return 0;
}

void pl_ctx_kv_block_unref(struct pl_ctx *c, uint32_t id) {
    if (c)
        pl_kv_block_unref(pl_ctx_kv(c), id);
}

int pl_ctx_kv_block_alloc(struct pl_ctx *c, uint32_t *ret_id) {
    if (!c || !ret_id)
        return -EINVAL;
    struct pl_kv *kv = pl_ctx_kv(c);
    if (kv->n_free == 0)
        return -PL_ERR_EXHAUSTED;
    uint32_t id = kv->free_ids[--kv->n_free];
    kv->ref[id] = 1;
    *ret_id = id;
    return 0;
}

uint32_t pl_ctx_kv_free_blocks(const struct pl_ctx *c) {
    return c ? pl_ctx_kv((struct pl_ctx *)c)->n_free : 0;
}

size_t pl_ctx_kv_block_bytes(const struct pl_ctx *c) {
    if (!c)
        return 0;
    const struct pl_kv *kv = pl_ctx_kv((struct pl_ctx *)c);
    /* Fits: pl_kv_init() checked n_blocks * block_stride, which is at least as large. */
    return (size_t)2 * kv->n_layer * PL_KV_BLOCK_TOKENS * kv->row_bytes;
}

uint32_t pl_ctx_kv_type(const struct pl_ctx *c) {
    return c ? pl_ctx_kv((struct pl_ctx *)c)->type : 0;
}

uint32_t pl_ctx_kv_layers(const struct pl_ctx *c) {
    return c ? pl_ctx_kv((struct pl_ctx *)c)->n_layer : 0;
}

uint32_t pl_ctx_kv_dim(const struct pl_ctx *c) {
    return c ? pl_ctx_kv((struct pl_ctx *)c)->kv_dim : 0;
}

/* One layer's K of a block between the cache's dimension-major layout (kv.h) and the
 * slot-major rows of the copies (to_rows: cache -> rows), so what prefix caches store does
 * not depend on how the kernels want K laid out. */
static void k_block_copy(const struct pl_kv *kv, uint8_t *dst, const uint8_t *src, bool to_rows) {
    const size_t elt = kv->row_bytes / kv->kv_dim;
    for (uint32_t s = 0; s < PL_KV_BLOCK_TOKENS; s++)
        for (uint32_t d = 0; d < kv->kv_dim; d++) {
            const size_t row = (size_t)s * kv->row_bytes + (size_t)d * elt;
            const size_t col = ((size_t)d * PL_KV_BLOCK_TOKENS + s) * elt;
            memcpy(dst + (to_rows ? row : col), src + (to_rows ? col : row), elt);
        }
}

int pl_ctx_kv_block_read(struct pl_ctx *c, uint32_t id, void *buf, size_t len) {
    if (!c || !buf || len != pl_ctx_kv_block_bytes(c))
        return -EINVAL;
    const struct pl_kv *kv = pl_ctx_kv(c);
    if (!held(kv, id))
        return -EINVAL;
    const size_t blk = kv->block_bytes;
    uint8_t *out = buf;
    for (uint32_t il = 0; il < kv->n_layer; il++) {
        k_block_copy(kv, out, pl_kv_block_at(kv, kv->k, il, id), true);
        memcpy(out + blk, pl_kv_block_at(kv, kv->v, il, id), blk);
        out += 2 * blk;
    }
    return 0;
}

int pl_ctx_kv_block_write(struct pl_ctx *c, uint32_t id, const void *buf, size_t len) {
    if (!c || !buf || len != pl_ctx_kv_block_bytes(c))
        return -EINVAL;
    struct pl_kv *kv = pl_ctx_kv(c);
    if (!held(kv, id))
        return -EINVAL;
    const size_t blk = kv->block_bytes;
    const uint8_t *in = buf;
    for (uint32_t il = 0; il < kv->n_layer; il++) {
        k_block_copy(kv, pl_kv_block_at(kv, kv->k, il, id), in, false);
        memcpy(pl_kv_block_at(kv, kv->v, il, id), in + blk, blk);
        in += 2 * blk;
    }
    return 0;
}
