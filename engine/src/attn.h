/* SPDX-License-Identifier: MIT */
/* Causal attention of a batch over the paged KV cache (engine-private): for every batch
 * entry and query head, softmax(q.K^T * kq_scale) . V over positions [0, pos] of the
 * entry's sequence, grouped-query heads sharing their KV head's rows in place. Used by
 * forward.c, which runs pl_attn_run() on every thread of its pool. */
#ifndef PL_ENGINE_ATTN_H
#define PL_ENGINE_ATTN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pl_kv;

/* Shapes, the kernels chosen and per-thread scratch. Read-only while pl_attn_run() runs. */
struct pl_attn {
    uint32_t n_head, n_head_kv, head_dim;
    uint32_t n_ctx;          /* max positions per sequence */
    uint32_t n_threads;      /* scratch slots: pl_attn_run() takes ith < n_threads */
    uint32_t kv_type;        /* enum pl_kv_type of the cache */
    float kq_scale;          /* 1 / sqrt(head_dim) */
    const void *simd;        /* the vector kernels, or NULL (scalar) */
    uint8_t *scratch;        /* [n_threads][scratch_stride] */
    size_t scratch_stride;
};

/* Prepare attention for n_head query heads over n_head_kv KV heads (n_head a multiple of
 * it) of head_dim elements, sequences of up to n_ctx positions, n_threads threads and a
 * cache of kv_type. With allow_simd, vector kernels are used when the CPU has them and
 * PICOLM_FORCE_SCALAR is not set. Returns 0, -EINVAL (bad shape or type), -ENOMEM. */
int pl_attn_init(struct pl_attn *a, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
                 uint32_t n_ctx, uint32_t n_threads, uint32_t kv_type, bool allow_simd);
/* Free the scratch; safe on a zeroed or already-done struct. */
void pl_attn_done(struct pl_attn *a);

/* Thread ith of nth: its share of the attention of batch entries [0, n_tok) in layer il.
 * Entry t is at position pos[t] of sequence seq[t], whose KV rows [0, pos[t]] are in kv;
 * its queries are q[t * n_head * head_dim ...] (head after head) and its output goes to the
 * same place in out. Every thread of one run must pass the same arguments but ith. */
void pl_attn_run(const struct pl_attn *a, const struct pl_kv *kv, uint32_t il, uint32_t n_tok,
                 const int32_t *pos, const int32_t *seq, const float *q, float *out,
                 uint32_t ith, uint32_t nth);

#endif
