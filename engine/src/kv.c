/* SPDX-License-Identifier: MIT */
/* Paged KV cache: block pool, free list and per-sequence block tables (see kv.h). All memory
 * is allocated once in pl_kv_init(); forward.c reserves blocks before each decode step. */
#include "kv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "pl/engine_model.h"
#include "pl/pl_err.h"
#include "pl/pl_util.h"

static uint32_t blocks_for(uint32_t n_tokens) {
    return (uint32_t)(((uint64_t)n_tokens + PL_KV_BLOCK_TOKENS - 1) / PL_KV_BLOCK_TOKENS);
}

/* The K (or V) pool: anonymous memory, zero pages mapped on first touch, 2 MiB-aligned, its
 * whole 2 MiB chunks on transparent huge pages where the kernel allows (madvise; 4 KiB pages
 * otherwise), the last partial chunk on 4 KiB pages so a pool never holds more than its
 * used bytes plus the rest of one huge page. A decode step reads every block of a sequence
 * in each layer, and on 4 KiB pages each block's page walk went to memory (the weights
 * streaming through the caches evict the page tables): that, more than the data, was what
 * attention waited on. bytes: a multiple of POOL_ALIGN; used: the bytes the pool uses.
 * NULL on failure. */
#define POOL_ALIGN ((size_t)2 << 20)

static uint8_t *pool_map(size_t bytes, size_t used) {
    const size_t span = bytes + POOL_ALIGN;
    uint8_t *m = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    uint8_t *p = (uint8_t *)PL_ALIGN_UP((uintptr_t)m, (uintptr_t)POOL_ALIGN);
    const size_t head = (size_t)(p - m), tail = span - head - bytes;
    if (head)
        (void)munmap(m, head);
    if (tail)
        (void)munmap(p + bytes, tail);
    if (used >= POOL_ALIGN) /* advice only: EINVAL where THP is off */
        (void)madvise(p, used & ~(POOL_ALIGN - 1), MADV_HUGEPAGE);
    return p;
}

void pl_kv_done(struct pl_kv *kv) {
    if (!kv)
        return;
    if (kv->k)
        (void)munmap(kv->k, kv->map_bytes);
    if (kv->v)
        (void)munmap(kv->v, kv->map_bytes);
    free(kv->free_ids);
    free(kv->table);
    free(kv->n_held);
    free(kv->seq_len);
    free(kv->ref);
    memset(kv, 0, sizeof(*kv));
}

int pl_kv_init(struct pl_kv *kv, uint32_t n_layer, uint32_t kv_dim, uint32_t n_seq, uint32_t n_ctx,
               uint32_t n_tokens, uint32_t type) {
    size_t elt, row_bytes, block_bytes, block_stride, total, table_len;

    memset(kv, 0, sizeof(*kv));
    if (!n_layer || !kv_dim || !n_seq || !n_ctx || !n_tokens)
        return -EINVAL;
    if (type == PL_KV_F16)
        elt = 2;
    else if (type == PL_KV_F32)
        elt = 4;
    else
        return -EINVAL;

    kv->n_layer = n_layer;
    kv->kv_dim = kv_dim;
    kv->n_seq = n_seq;
    kv->n_ctx = n_ctx;
    kv->type = type;
    kv->max_seq_blocks = blocks_for(n_ctx);
    kv->n_blocks = blocks_for(n_tokens);
    if (pl_mul_overflow((size_t)kv_dim, elt, &row_bytes) ||
        pl_mul_overflow(row_bytes, (size_t)PL_KV_BLOCK_TOKENS, &block_bytes) ||
        pl_mul_overflow(block_bytes, (size_t)n_layer, &block_stride) ||
        pl_mul_overflow(block_stride, (size_t)kv->n_blocks, &total) ||
        total > SIZE_MAX - 2 * POOL_ALIGN ||
        pl_mul_overflow((size_t)n_seq, (size_t)kv->max_seq_blocks, &table_len))
        return -EOVERFLOW;
    kv->row_bytes = row_bytes;
    kv->block_bytes = block_bytes;
    kv->block_stride = block_stride;
    kv->map_bytes = PL_ALIGN_UP(total, POOL_ALIGN);

    kv->k = pool_map(kv->map_bytes, total);
    kv->v = pool_map(kv->map_bytes, total);
    kv->free_ids = calloc(kv->n_blocks, sizeof(*kv->free_ids));
    kv->table = calloc(table_len, sizeof(*kv->table));
    kv->n_held = calloc(n_seq, sizeof(*kv->n_held));
    kv->seq_len = calloc(n_seq, sizeof(*kv->seq_len));
    kv->ref = calloc(kv->n_blocks, sizeof(*kv->ref));
    if (!kv->k || !kv->v || !kv->free_ids || !kv->table || !kv->n_held || !kv->seq_len ||
        !kv->ref) {
        pl_kv_done(kv);
        return -ENOMEM;
    }
    /* Stack with block 0 on top, so a fresh pool hands out blocks in address order. */
    for (uint32_t i = 0; i < kv->n_blocks; i++)
        kv->free_ids[i] = kv->n_blocks - 1 - i;
    kv->n_free = kv->n_blocks;
    return 0;
}

uint32_t pl_kv_blocks_needed(const struct pl_kv *kv, uint32_t seq, uint32_t new_len) {
    uint32_t want = blocks_for(new_len);
    return want > kv->n_held[seq] ? want - kv->n_held[seq] : 0;
}

int pl_kv_reserve(struct pl_kv *kv, uint32_t seq, uint32_t new_len) {
    uint32_t need;
    if (seq >= kv->n_seq || new_len > kv->n_ctx)
        return -PL_ERR_EXHAUSTED;
    need = pl_kv_blocks_needed(kv, seq, new_len);
    if (need > kv->n_free)
        return -PL_ERR_EXHAUSTED;
    uint32_t *row = kv->table + (size_t)seq * kv->max_seq_blocks;
    while (need--) {
        uint32_t id = kv->free_ids[--kv->n_free];
        kv->ref[id] = 1;
        row[kv->n_held[seq]++] = id;
    }
    return 0;
}

void pl_kv_block_unref(struct pl_kv *kv, uint32_t id) {
    if (id < kv->n_blocks && kv->ref[id] > 0 && --kv->ref[id] == 0)
        kv->free_ids[kv->n_free++] = id;
}

void pl_kv_seq_clear(struct pl_kv *kv, uint32_t seq) {
    if (seq >= kv->n_seq)
        return;
    uint32_t *row = kv->table + (size_t)seq * kv->max_seq_blocks;
    /* Release in reverse so the next reservation gets the same blocks in the same order;
     * blocks still shared (a prefix cache, another sequence) stay where they are. */
    while (kv->n_held[seq] > 0)
        pl_kv_block_unref(kv, row[--kv->n_held[seq]]);
    kv->seq_len[seq] = 0;
}
