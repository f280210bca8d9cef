/* SPDX-License-Identifier: MIT */
/* Causal attention of a batch over the paged KV cache (engine-private): for every batch
 * entry and query head, softmax(q.K^T * kq_scale) . V over positions [0, pos] of the
 * entry's sequence. One pass over the K and V blocks with an online softmax (running max
 * and sum, the output rescaled when the max grows); the query heads of one KV head
 * (grouped-query attention) are processed together, so each K/V row is read once per entry
 * and group, in place. Used by forward.c, which runs pl_attn_run() on every pool thread;
 * the vector kernels live in engine/arch/<isa>/attn_*.c. */
#ifndef PL_ENGINE_ATTN_H
#define PL_ENGINE_ATTN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pl_kv;
struct pl_attn;

/* One work item: n_q consecutive query heads sharing one KV head, of one batch entry, over
 * positions [0, n_kv) of sequence seq in layer il. */
struct pl_attn_item {
    const struct pl_kv *kv;
    uint32_t il, seq, n_kv;
    size_t head_off;  /* bytes from the start of a V row to the KV head */
    size_t k_off;     /* bytes from the start of a K block to the KV head's head_dim x 16 */
    uint32_t n_q;     /* query heads, at most n_head / n_head_kv */
    const float *q;   /* [n_q][head_dim] */
    float *out;       /* [n_q][head_dim] */
    uint8_t *scratch; /* the calling thread's scratch (layout: struct pl_attn) */
};

/* Computes one item; the scalar one is in attn.c. */
typedef void (*pl_attn_item_fn)(const struct pl_attn *a, const struct pl_attn_item *it);

/* Shapes, the kernel chosen and per-thread scratch. Read-only while pl_attn_run() runs. */
struct pl_attn {
    uint32_t n_head, n_head_kv, head_dim;
    uint32_t n_ctx;       /* positions per sequence at most (pos < n_ctx) */
    uint32_t n_threads;   /* scratch slots: pl_attn_run() takes ith < n_threads */
    uint32_t kv_type;     /* enum pl_kv_type of the cache */
    float kq_scale;       /* 1 / sqrt(head_dim) */
    pl_attn_item_fn item; /* the kernel: scalar or vector */
    bool simd;            /* item is a vector kernel */
    /* Scratch of each thread: scratch_stride bytes at scratch + ith * scratch_stride, every
     * part 64-byte aligned at these byte offsets (G = n_head / n_head_kv, B =
     * PL_KV_BLOCK_TOKENS):
     *   off_q [G][head_dim] floats: the queries (rounded to f16 with an F16 cache);
     *   off_k, off_v [B][head_dim] floats: one block of K, of V, as f32;
     *   off_p [G][B] floats: probabilities of the block (unnormalised);
     *   off_l [G][B] floats: running sums (by lane in the vector kernels);
     *   off_m [G] floats: running maxima;  off_a [G] floats: rescale factors;
     *   off_o [G][head_dim] floats: the outputs being summed (scalar kernel). */
    uint8_t *scratch;
    size_t scratch_stride;
    size_t off_q, off_k, off_v, off_p, off_l, off_m, off_a, off_o;
};

/* Prepare attention for n_head query heads over n_head_kv KV heads (n_head a multiple of
 * it) of head_dim elements, sequences of at most n_ctx positions, n_threads threads and a
 * cache of kv_type (the scratch does not grow with n_ctx: one pass keeps no score row).
 * With allow_simd, the vector kernel is used when the CPU has one, head_dim suits it and
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
                 const int32_t *pos, const int32_t *seq, const float *q, float *out, uint32_t ith,
                 uint32_t nth);

/* The scalar kernel (any head_dim), also the reference for the vector ones. */
void pl_attn_item_scalar(const struct pl_attn *a, const struct pl_attn_item *it);

#ifdef PL_ATTN_HAVE_AVX512
/* engine/arch/x86/attn_avx512.c: head_dim a multiple of 16; call only when the CPU has
 * AVX-512 F and F16C. */
void pl_attn_item_avx512(const struct pl_attn *a, const struct pl_attn_item *it);
/* engine/arch/x86/attn_avx2.c: the same kernel on AVX2 + FMA + F16C. */
void pl_attn_item_avx2(const struct pl_attn *a, const struct pl_attn_item *it);
#endif

#endif
