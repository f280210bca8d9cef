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
#include <string.h>

#define PL_KV_BLOCK_TOKENS 16u

struct pl_kv {
    uint32_t n_layer;
    uint32_t kv_dim; /* n_head_kv * head_dim */
    uint32_t n_seq;
    uint32_t n_ctx;          /* max tokens per sequence */
    uint32_t max_seq_blocks; /* ceil(n_ctx / PL_KV_BLOCK_TOKENS) */
    uint32_t n_blocks;       /* blocks in the pool */
    uint32_t type;           /* enum pl_kv_type */
    size_t row_bytes;        /* one token's K (or V) row of one layer */
    size_t block_bytes;      /* PL_KV_BLOCK_TOKENS * row_bytes: a block of one layer */
    size_t block_stride;     /* n_layer * block_bytes: a block of every layer */
    size_t map_bytes;        /* the k and v mappings' length each */
    uint8_t *k;              /* [n_blocks][n_layer][kv_dim][PL_KV_BLOCK_TOKENS] */
    uint8_t *v;              /* [n_blocks][n_layer][PL_KV_BLOCK_TOKENS][kv_dim] */
    uint32_t *free_ids;      /* [n_blocks] stack of free block ids */
    uint32_t n_free;
    uint32_t *table;   /* [n_seq][max_seq_blocks] block ids */
    uint32_t *n_held;  /* [n_seq] blocks held by each sequence */
    uint32_t *seq_len; /* [n_seq] tokens cached per sequence */
    uint32_t *ref;     /* [n_blocks] holders of each block (sequences and prefix
                          caches, kv_share.c); 0 exactly for blocks on the free list */
};

/* Allocate a pool of ceil(n_tokens / PL_KV_BLOCK_TOKENS) blocks. Returns 0, -EINVAL (a zero
 * dimension, unknown type), -EOVERFLOW (sizes do not fit), -ENOMEM. */
int pl_kv_init(struct pl_kv *kv, uint32_t n_layer, uint32_t kv_dim, uint32_t n_seq, uint32_t n_ctx,
               uint32_t n_tokens, uint32_t type);
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

/* Block id in layer il of base (kv->k or kv->v): PL_KV_BLOCK_TOKENS token slots of kv_dim
 * elements (block_bytes). A block's layers are contiguous, so the memory a pool touches grows
 * with the blocks in use (the pool is on transparent huge pages, kv.c). Within a block, V is
 * slot-major (slot s's row of kv_dim elements at s * row_bytes) and K dimension-major
 * (element d of slot s at d * PL_KV_BLOCK_TOKENS + s): a KV head's K is head_dim x 16
 * contiguous elements, the 16 slots of one dimension a vector, so the attention kernels
 * take a block's 16 scores as one sum of head_dim vector products, without a transpose. */
static inline uint8_t *pl_kv_block_at(const struct pl_kv *kv, uint8_t *base, uint32_t il,
                                      uint32_t id) {
    return base + (size_t)id * kv->block_stride + (size_t)il * kv->block_bytes;
}

static inline uint32_t pl_kv_block_id(const struct pl_kv *kv, uint32_t seq, uint32_t i) {
    return kv->table[(size_t)seq * kv->max_seq_blocks + i];
}

/* Element 0 of token slot pos of seq in layer il (pos below the reserved length); its
 * element d is d * PL_KV_BLOCK_TOKENS elements on. */
static inline void *pl_kv_k_slot(const struct pl_kv *kv, uint32_t il, uint32_t seq, uint32_t pos) {
    return pl_kv_block_at(kv, kv->k, il, pl_kv_block_id(kv, seq, pos / PL_KV_BLOCK_TOKENS)) +
           (size_t)(pos % PL_KV_BLOCK_TOKENS) * (kv->row_bytes / kv->kv_dim);
}

/* Row of token slot pos of seq in layer il (pos below the reserved length). */
static inline void *pl_kv_v_row(const struct pl_kv *kv, uint32_t il, uint32_t seq, uint32_t pos) {
    return pl_kv_block_at(kv, kv->v, il, pl_kv_block_id(kv, seq, pos / PL_KV_BLOCK_TOKENS)) +
           (size_t)(pos % PL_KV_BLOCK_TOKENS) * kv->row_bytes;
}

/* Store the kv_dim elements of one token (elt bytes each, contiguous at row) as the K of the
 * slot at dst (pl_kv_k_slot). */
static inline void pl_kv_k_scatter(void *dst, const void *row, uint32_t kv_dim, size_t elt) {
    uint8_t *d = dst;
    const uint8_t *r = row;
    if (elt == 2) {
        for (uint32_t i = 0; i < kv_dim; i++)
            memcpy(d + (size_t)i * PL_KV_BLOCK_TOKENS * 2, r + (size_t)i * 2, 2);
    } else {
        for (uint32_t i = 0; i < kv_dim; i++)
            memcpy(d + (size_t)i * PL_KV_BLOCK_TOKENS * 4, r + (size_t)i * 4, 4);
    }
}

/* Block i of seq's table in layer il, as pl_kv_block_at(): K dimension-major, V rows. */
static inline const uint8_t *pl_kv_k_block(const struct pl_kv *kv, uint32_t il, uint32_t seq,
                                           uint32_t i) {
    return pl_kv_block_at(kv, kv->k, il, pl_kv_block_id(kv, seq, i));
}

static inline const uint8_t *pl_kv_v_block(const struct pl_kv *kv, uint32_t il, uint32_t seq,
                                           uint32_t i) {
    return pl_kv_block_at(kv, kv->v, il, pl_kv_block_id(kv, seq, i));
}

#endif
