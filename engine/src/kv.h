/* SPDX-License-Identifier: MIT */
/* Paged KV cache (engine-private): a pool of fixed-size blocks of PL_KV_BLOCK_TOKENS token
 * slots, each block holding K and V rows for every layer, a free list, and one block table
 * per sequence. Everything is allocated by pl_kv_init(); growing a sequence takes blocks
 * from the free list and never allocates. Used by forward.c; not thread-safe (the context
 * that owns it serialises decode calls, and workers only read/write rows of blocks the
 * calling thread reserved before the parallel section). */
#ifndef PL_ENGINE_KV_H
#define PL_ENGINE_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PL_KV_BLOCK_TOKENS 16u

struct pl_kv {
    uint32_t n_layer;
    uint32_t kv_dim;            /* n_head_kv * head_dim */
    uint32_t n_seq;
    uint32_t n_ctx;             /* max tokens per sequence */
    uint32_t max_seq_blocks;    /* ceil(n_ctx / PL_KV_BLOCK_TOKENS) */
    uint32_t n_blocks;          /* blocks in the pool */
    uint32_t type;              /* enum pl_kv_type */
    size_t row_bytes;           /* one token's K (or V) row of one layer */
    size_t layer_bytes;         /* n_blocks * PL_KV_BLOCK_TOKENS * row_bytes */
    uint8_t *k;                 /* [n_layer][n_blocks][PL_KV_BLOCK_TOKENS][kv_dim] */
    uint8_t *v;                 /* same shape */
    uint32_t *free_ids;         /* [n_blocks] stack of free block ids */
    uint32_t n_free;
    uint32_t *table;            /* [n_seq][max_seq_blocks] block ids */
    uint32_t *n_held;           /* [n_seq] blocks held by each sequence */
    uint32_t *seq_len;          /* [n_seq] tokens cached per sequence */
    uint32_t *ref;              /* [n_blocks] holders of each block (sequences and prefix
                                   caches, kv_share.c); 0 exactly for blocks on the free list */
};

/* Allocate a pool of ceil(n_tokens / PL_KV_BLOCK_TOKENS) blocks. Returns 0, -EINVAL (a zero
 * dimension, unknown type), -EOVERFLOW (sizes do not fit), -ENOMEM. */
int pl_kv_init(struct pl_kv *kv, uint32_t n_layer, uint32_t kv_dim, uint32_t n_seq,
               uint32_t n_ctx, uint32_t n_tokens, uint32_t type);
/* Free the memory; safe on a zeroed or already-done struct. */
void pl_kv_done(struct pl_kv *kv);

/* Blocks seq must still take from the pool to hold new_len tokens. */
uint32_t pl_kv_blocks_needed(const struct pl_kv *kv, uint32_t seq, uint32_t new_len);
/* Take blocks so seq can hold new_len (<= n_ctx) tokens. The caller checked with
 * pl_kv_blocks_needed() that the pool has them; returns -PL_ERR_EXHAUSTED otherwise (and
 * then takes none). Does not change seq_len. */
int pl_kv_reserve(struct pl_kv *kv, uint32_t seq, uint32_t new_len);
/* Forget seq's tokens: it drops its reference to each block; blocks nobody else holds go
 * back to the free list. */
void pl_kv_seq_clear(struct pl_kv *kv, uint32_t seq);

/* Drop one reference to block id (held); at 0 it goes back to the free list. */
void pl_kv_block_unref(struct pl_kv *kv, uint32_t id);

/* The context's KV cache (forward.c), for kv_share.c. */
struct pl_ctx;
struct pl_kv *pl_ctx_kv(struct pl_ctx *c);

/* Row of token slot pos of seq in layer il (pos below the reserved length). */
static inline void *pl_kv_k_row(const struct pl_kv *kv, uint32_t il, uint32_t seq, uint32_t pos) {
    uint32_t blk = kv->table[(size_t)seq * kv->max_seq_blocks + pos / PL_KV_BLOCK_TOKENS];
    return kv->k + il * kv->layer_bytes +
           ((size_t)blk * PL_KV_BLOCK_TOKENS + pos % PL_KV_BLOCK_TOKENS) * kv->row_bytes;
}

static inline void *pl_kv_v_row(const struct pl_kv *kv, uint32_t il, uint32_t seq, uint32_t pos) {
    uint32_t blk = kv->table[(size_t)seq * kv->max_seq_blocks + pos / PL_KV_BLOCK_TOKENS];
    return kv->v + il * kv->layer_bytes +
           ((size_t)blk * PL_KV_BLOCK_TOKENS + pos % PL_KV_BLOCK_TOKENS) * kv->row_bytes;
}

/* First row of block slot 0 of block i of seq's table in layer il: the block's
 * PL_KV_BLOCK_TOKENS rows follow contiguously (row_bytes apart). */
static inline const uint8_t *pl_kv_k_block(const struct pl_kv *kv, uint32_t il, uint32_t seq,
                                           uint32_t i) {
    uint32_t blk = kv->table[(size_t)seq * kv->max_seq_blocks + i];
    return kv->k + il * kv->layer_bytes + (size_t)blk * PL_KV_BLOCK_TOKENS * kv->row_bytes;
}

static inline const uint8_t *pl_kv_v_block(const struct pl_kv *kv, uint32_t il, uint32_t seq,
                                           uint32_t i) {
    uint32_t blk = kv->table[(size_t)seq * kv->max_seq_blocks + i];
    return kv->v + il * kv->layer_bytes + (size_t)blk * PL_KV_BLOCK_TOKENS * kv->row_bytes;
}

#endif
