/* SPDX-License-Identifier: MIT */
/* Inference contexts and the batched LLaMA forward pass, computed as llama.cpp's CPU backend
 * does: RMSNorm, Q/K/V projections (+ optional biases), "normal" RoPE on adjacent pairs,
 * grouped-query causal attention over a paged KV cache, output projection, SwiGLU FFN,
 * final norm and logits. One pl_ctx_decode() runs one thread-pool job: every thread walks
 * the same phases, separated by barriers, each taking its share of rows or tokens. */
#include "pl/engine_model.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "kv.h"
#include "matmul.h"
#include "model_impl.h"
#include "pl/engine_quant.h"
#include "pl/engine_types.h"
#include "pl/pl_err.h"
#include "pl/pl_util.h"
#include "threadpool.h"

/* Caps on context options (memory is the real limit; these keep sizes far from overflow). */
#define MAX_CTX (1u << 22)
#define MAX_SEQ (1u << 16)
#define MAX_BATCH (1u << 16)

/* Batches are run in chunks of at most CHUNK entries: the scratch is sized for a chunk, not
 * for n_batch, and a chunk's activations (and their tiles) stay in L2 while the weights
 * stream past them once per chunk. Entries of a chunk attend to the KV rows earlier chunks
 * wrote, so chunking does not change any result. */
#define CHUNK 64u

/* Batches of fewer entries run "private": see pl_ctx.th_xb. */
#define PRIV (PL_MM_MIN_TILED_TOK - 1u)
_Static_assert(PL_MM_MIN_TILED_TOK == PL_CTX_BATCHED_MIN, "engine_model.h promises this");
/* A private batch's half tile (prep_act) fits in the room of its PRIV decode vectors, and
 * the multi-token decode kernels take any private batch in one call. */
_Static_assert(PRIV >= PL_MM_HALF && PRIV <= PL_QUANT_DOTN_MAX, "private batch sizes");

/* Matrix products per forward run, at most: per layer Q, K, V, O, gate, up, down; output. */
#define MM_PER_LAYER 7u
#define MM_EXTRA 1u

/* Work shares of one matrix product: the rows are split into one segment per thread, in
 * units of ROWS_MIN rows, at the run's cuts (pl_split in threadpool.h: equal at first, then
 * following what each thread computed in the runs before). A thread walks its own segment
 * from the front in chunks of half of what is left, at least about GRAIN_BYTES of weights -
 * one unbroken weight stream, as a static split - and, when its segment is done, takes
 * GRAIN_BYTES chunks from the back of the others' segments, so a thread the OS or the memory
 * system slowed down gets help and all finish within a chunk of each other (a static split
 * waits for the slowest, whole-segment stealing for the last big chunk). Each segment's state
 * is one 64-bit word on its own cache line: the run generation (high half; a word of an older
 * run reads as untouched, so nothing is cleared per run) and the units taken from the front
 * and from the back. */
#define ROWS_MIN 16u
#define GRAIN_BYTES ((uint64_t)64 << 10)
#define DYNAMIC_MIN_BYTES ((uint64_t)256 << 10) /* smaller matrices: a static split */
#define SEG_UNITS_MAX 0xFFFFu                   /* units per segment in a 16-bit count */

struct mm_counter {
    _Atomic uint64_t w; /* gen << 32 | back << 16 | front */
    uint8_t pad[56];    /* one cache line each: the owner's claims stay in its cache */
};

struct pl_ctx {
    struct pl_model *m;
    struct pl_threadpool *pool;
    struct pl_kv kv;
    uint32_t n_ctx, n_seq, n_batch, n_threads;
    uint32_t n_chunk; /* entries per forward run: min(n_batch, CHUNK) */
    uint32_t q_dim, kv_dim;
    float rope_theta_scale;              /* freq_base^(-2 / n_rot) */
    const struct pl_quant_kernels *kv_k; /* kernels of the cache's element type */
    struct pl_attn attn;                 /* attention shapes, kernels, per-thread scratch */
    struct mm_counter *mm;               /* [n_mm][n_threads] segment words (see ROWS_MIN) */
    /* The segments' cuts (threadpool.h's split): per kind of run (0: batched, 1: private,
     * as the threads' speeds differ with the kernels) the shares [n_threads] and cuts
     * [n_threads + 1]; this run's cuts; the weight bytes each thread computed this run. */
    double *shares[2];
    uint32_t *cuts[2];
    const uint32_t *cut;
    struct pl_split_done *done; /* [n_threads] */
    uint32_t n_mm;
    uint32_t gen; /* run generation, stamped in the segment words */

    /* Scratch, [n_chunk][...] row-major. */
    float *x;    /* [n_chunk][n_embd] residual stream */
    float *xb;   /* [n_chunk][n_embd] normed input of the next matmul */
    float *q;    /* [n_chunk][q_dim] */
    float *k;    /* [n_chunk][kv_dim] */
    float *v;    /* [n_chunk][kv_dim] */
    float *att;  /* [n_chunk][q_dim] attention output */
    float *hg;   /* [n_chunk][n_ff] silu(gate) * up */
    float *hu;   /* [n_chunk][n_ff] up, when gate and up are not fused (else unused) */
    uint8_t *xq; /* [n_chunk][xq_stride] activations in a weight's vec_dot_type */
    size_t xq_stride;
    uint8_t *tiles; /* [ceil(n_chunk / PL_MM_TILE)][tile_bytes] repacked activations */
    size_t tile_bytes;
    /* Per thread, for batches below PL_MM_MIN_TILED_TOK (decode), where every thread
     * prepares the whole (small) input itself instead of a share of it plus a barrier:
     * normed inputs [PRIV][n_embd], activations [PRIV][xq_stride], one-slot layouts
     * [PRIV][vec_bytes]. */
    float *th_xb;
    uint8_t *th_xq;
    uint8_t *th_vec;
    size_t vec_bytes;
    /* Per thread: rope caches [PRIV][n_rot] (a private batch's tokens; else one). */
    float *th_rope;

    /* Validation scratch and the current step (set by the caller before the parallel run). */
    uint32_t *seq_count; /* [n_seq] */
    uint32_t *out_rows;  /* [n_chunk] chunk entries whose logits are wanted */
    uint32_t n_out;
    const struct pl_batch *b; /* the current chunk */
    struct pl_batch chunk;    /* storage for b */
    float *out;               /* logits of the chunk's first wanted entry */
};

/* ---- Small kernels (llama.cpp's numerics: float math, double sums where ggml uses them) ---- */

static void split(uint32_t n, uint32_t ith, uint32_t nth, uint32_t *ret_lo, uint32_t *ret_hi) {
    *ret_lo = (uint32_t)((uint64_t)n * ith / nth);
    *ret_hi = (uint32_t)((uint64_t)n * (ith + 1) / nth);
}

/* split() in whole quads of rows: every share but the last starts and ends on a multiple
 * of 4, as the dynamic shares' units do (ROWS_MIN), so each RoPE pair of a product's output
 * is computed by one thread (qkv_rows), and no share cuts a group of a layout that packs
 * rows in groups of 4 (matmul.h's row_group: a cut group is computed whole for each side). */
#define SPLIT_UNIT 4u
static void split_quads(uint32_t n, uint32_t ith, uint32_t nth, uint32_t *ret_lo,
                        uint32_t *ret_hi) {
    split((n + SPLIT_UNIT - 1) / SPLIT_UNIT, ith, nth, ret_lo, ret_hi);
    *ret_lo = PL_MIN(SPLIT_UNIT * *ret_lo, n);
    *ret_hi = PL_MIN(SPLIT_UNIT * *ret_hi, n);
}
_Static_assert(ROWS_MIN % SPLIT_UNIT == 0 && SPLIT_UNIT % 2 == 0,
               "shares keep RoPE pairs and row groups whole");

/* ---- Matrix multiplication ---- */

/* The tiled kernel w uses (tiles, or one-slot layouts for small batches), or NULL for
 * per-row dot products. */
static const struct pl_mm_tile_kernel *tile_kernel(const struct pl_weight *w) {
    return pl_mm_weight_kernel(w);
}

/* Small batches: every thread prepares all of each matmul input itself. */
static inline bool is_private(uint32_t n_tok) {
    return n_tok < PL_MM_MIN_TILED_TOK;
}

/* A private batch asks for the lines of its input vectors (and the norm weights) at once
 * before a loop walks them: the residual x, the attention output and silu(gate) * up were
 * written by every thread, each its rows, and the norm weights were last read a step ago (long
 * evicted by the weight stream), so the walk would wait for each line from the other core's
 * cache or from memory in turn. Zen 5 VM, TinyLlama at 2 threads, on every other decode step
 * of a run: steps 1.4-2.8% shorter in 6 of 7 runs (Q4_K_M, Q4_0, Q8_0), 0.5% longer in one;
 * at 1 thread -0.6..+0.4%. */
static void prefetch_floats(const float *p, size_t n) {
    pl_mm_prefetch(p, n * sizeof(float), 3);
}

/* The rows a thread normalizes for a batch of n: its share [lo, hi) of c->xb, or (private)
 * all of them into its own buffer. Returns the buffer. */
static float *norm_rows(struct pl_ctx *c, const float *w, uint32_t n, uint32_t lo, uint32_t hi,
                        uint32_t ith) {
    const uint32_t n_embd = c->m->hp.n_embd;
    float *dst = c->xb;
    if (is_private(n)) {
        dst = c->th_xb + (size_t)ith * PRIV * n_embd;
        lo = 0;
        hi = n;
        prefetch_floats(c->x, (size_t)n * n_embd);
        prefetch_floats(w, n_embd);
    }
    for (uint32_t t = lo; t < hi; t++)
        pl_mm_rmsnorm(dst + (size_t)t * n_embd, c->x + (size_t)t * n_embd, w, n_embd,
                      c->m->hp.rms_eps);
    return dst;
}

/* The activations for w: rows [lo, hi) of src quantized to w's vec_dot_type into c->xq (or
 * src itself when that type is F32), and repacked into tiles when w has a tiled kernel (the
 * thread owning the last row also clears the tile's padding slots). The caller puts a
 * barrier between this and any matmul reading other threads' rows. Private batches (every
 * src row visible to this thread) go whole into this thread's buffers: no barrier. */
static void prep_act(struct pl_ctx *c, const struct pl_weight *w, const float *src,
                     size_t src_stride, uint32_t n_tok, uint32_t lo, uint32_t hi, uint32_t ith,
                     struct pl_mm_act *ret) {
    const struct pl_mm_tile_kernel *tk = tile_kernel(w);
    /* Small batches: decode vectors (the kernel's decode path), or one half tile when the
     * kernel's products are cheap enough for this many tokens (vec_max, matmul.h). */
    const bool half = tk && is_private(n_tok) && tk->rows8 && tk->vec_max && n_tok > tk->vec_max;
    if (tk && is_private(n_tok) && !half && tk->dec)
        tk = tk->dec; /* the kernel's decode path */
    if (tk && is_private(n_tok) && !half && !tk->vec_rows)
        tk = NULL; /* decode by per-row dot products (matmul.h) */
    *ret = (struct pl_mm_act){.xq = c->xq,
                              .stride = c->xq_stride,
                              .tk = tk,
                              .tiles = c->tiles,
                              .tile_bytes = c->tile_bytes,
                              .n_tok = n_tok};
    if (is_private(n_tok)) {
        uint8_t *xq = c->th_xq + (size_t)ith * PRIV * c->xq_stride;
        uint8_t *vec = c->th_vec + (size_t)ith * PRIV * c->vec_bytes;
        ret->xq = xq;
        ret->tiles = vec;
        ret->tile_bytes = half ? pl_mm_lay_bytes(w->n_cols, PL_MM_HALF) : c->vec_bytes;
        ret->slots = half ? PL_MM_HALF : 1;
        if (w->k->vec_dot_type == PL_GGML_TYPE_F32) {
            ret->xq = (const uint8_t *)src;
            ret->stride = src_stride * sizeof(float);
            return;
        }
        for (uint32_t t = 0; t < n_tok; t++)
            prefetch_floats(src + (size_t)t * src_stride, w->n_cols);
        for (uint32_t t = 0; t < n_tok; t++) {
            uint8_t *xt = xq + (size_t)t * c->xq_stride;
            w->vk->from_f32(src + (size_t)t * src_stride, xt, w->n_cols);
            if (half) /* this thread's own half tile: PRIV vectors' room holds it */
                tk->prep(xt, w->n_cols, vec, PL_MM_HALF, t);
            else if (tk)
                tk->prep(xt, w->n_cols, vec + (size_t)t * c->vec_bytes, 1, 0);
        }
        for (uint32_t t = n_tok; half && t < PL_MM_HALF; t++)
            pl_mm_lay_clear(w->n_cols, vec, PL_MM_HALF, t);
        return;
    }
    if (w->k->vec_dot_type == PL_GGML_TYPE_F32) {
        ret->xq = (const uint8_t *)src;
        ret->stride = src_stride * sizeof(float);
        return;
    }
    for (uint32_t t = lo; t < hi; t++) {
        uint8_t *xq = c->xq + (size_t)t * c->xq_stride;
        w->vk->from_f32(src + (size_t)t * src_stride, xq, w->n_cols);
        if (tk)
            tk->prep(xq, w->n_cols, c->tiles + (size_t)(t / PL_MM_TILE) * c->tile_bytes, PL_MM_TILE,
                     t % PL_MM_TILE);
    }
    if (tk && hi == n_tok)
        for (uint32_t t = n_tok; t % PL_MM_TILE; t++)
            pl_mm_tile_clear(w->n_cols, c->tiles + (size_t)(t / PL_MM_TILE) * c->tile_bytes,
                             t % PL_MM_TILE);
}

/* Weights a and b can share one activation preparation: the prepared act names the tiled
 * kernel that every product of the group runs, so that must be the same kernel (Q4_0 and
 * Q8_0, or a packed and an unpacked Q4_0, share the activations' layout but not the
 * kernel that reads their weights). */
static bool same_act(const struct pl_weight *a, const struct pl_weight *b) {
    if (a->k->vec_dot_type != b->k->vec_dot_type || a->n_cols != b->n_cols)
        return false;
    return tile_kernel(a) == tile_kernel(b);
}

/* The FFN's gate and up products run fused (pl_matmul_swiglu_rows: one activation
 * preparation, no up buffer) when the two weights share type and kernel. */
static bool gate_up_fused(const struct pl_layer *l) {
    return l->w_gate.type == l->w_up.type && same_act(&l->w_gate, &l->w_up);
}

/* Rows [0, n_rows) of product number *mm_k of this run (every thread numbers the products
 * alike), handed out in chunks (see ROWS_MIN); one thread, or a small matrix, takes a
 * static share without atomics. */
struct mm_share {
    struct mm_counter *seg; /* NULL: the static share [lo, hi) */
    uint32_t n_rows, nth, ith, gen;
    uint32_t n_units, grain; /* units of ROWS_MIN rows; units per claim */
    uint32_t d;              /* segment (ith + d) % nth is claimed from: own first */
    uint32_t lo, hi;
    bool done;
    const uint32_t *cut;        /* the run's segment cuts */
    size_t row_bytes;           /* of the rows handed out */
    struct pl_split_done *stat; /* this thread's work in the run */
};

static void share_begin(struct pl_ctx *c, uint32_t *mm_k, uint32_t n_rows, size_t row_bytes,
                        uint32_t ith, uint32_t nth, struct mm_share *ret) {
    uint32_t k = (*mm_k)++;
    const uint32_t n_units = (n_rows + ROWS_MIN - 1) / ROWS_MIN;
    *ret = (struct mm_share){.seg = NULL,
                             .n_rows = n_rows,
                             .nth = nth,
                             .ith = ith,
                             .gen = c->gen,
                             .n_units = n_units,
                             .d = 0,
                             .lo = 0,
                             .hi = n_rows,
                             .done = false};
    if (nth == 1 || k >= c->n_mm)
        return; /* alone (or past the counters, impossible by construction): all rows */
    if ((uint64_t)n_rows * row_bytes < DYNAMIC_MIN_BYTES || n_units + 1 > SEG_UNITS_MAX) {
        /* Small matrices (tiny models): the cache lines bouncing between cores cost more
         * than any imbalance. (Segments too long for the word - a segment may hold any
         * share of the units: never for real vocabularies, below 1M rows.) */
        split_quads(n_rows, ith, nth, &ret->lo, &ret->hi);
        return;
    }
    ret->seg = c->mm + (size_t)k * c->n_threads;
    ret->cut = c->cut;
    ret->row_bytes = row_bytes;
    ret->stat = &c->done[ith];
    const uint64_t unit_bytes = (uint64_t)row_bytes * ROWS_MIN;
    ret->grain = (uint32_t)PL_MAX((GRAIN_BYTES + unit_bytes - 1) / unit_bytes, 1);
}

/* The units a claim takes of a segment with `left` units left: from the back (another
 * thread's segment) up to grain of them; from the front (the owner) half of what is left, at
 * least grain: the owner makes a few large claims first and grain-sized ones at the end,
 * where a thief may come. A claim is a locked compare-and-swap, which waits for the core's
 * loads in flight: at a claim per grain they took ~4% of a 2-thread decode step (perf,
 * TinyLlama Q4_K_M), about 140 ns each; with quarters of what was left 1.0-1.6%, and with
 * halves the kernels' share of the step's samples rose by 0.7-2.1 points in each of 5
 * alternating runs (share_next and the barrier waits 3.5-3.7% -> 2.9-3.0%). */
static uint32_t claim_size(const struct mm_share *sh, bool front, uint32_t left) {
    return PL_MIN(front ? PL_MAX(sh->grain, left / 2) : sh->grain, left);
}

/* The rows of the t units from unit a. */
static void unit_rows(const struct mm_share *sh, uint32_t a, uint32_t t, uint32_t *ret_lo,
                      uint32_t *ret_hi) {
    *ret_lo = PL_MIN(a * ROWS_MIN, sh->n_rows);
    *ret_hi = PL_MIN((a + t) * ROWS_MIN, sh->n_rows);
}

/* Claim claim_size() units of segment i, from its front or its back; false when it is empty. */
static bool seg_claim(const struct mm_share *sh, uint32_t i, bool front, uint32_t *ret_lo,
                      uint32_t *ret_hi) {
    uint32_t u_lo, u_hi;
    pl_split_range(sh->n_units, sh->cut, i, &u_lo, &u_hi);
    const uint32_t len = u_hi - u_lo;
    _Atomic uint64_t *w = &sh->seg[i].w;
    uint64_t old = atomic_load_explicit(w, memory_order_relaxed), nw;
    uint32_t f, b, t;
    do {
        f = 0;
        b = 0;
        if ((uint32_t)(old >> 32) == sh->gen) {
            f = (uint32_t)(old & 0xFFFFu);
            b = (uint32_t)((old >> 16) & 0xFFFFu);
        }
        if (f + b >= len)
            return false;
        t = claim_size(sh, front, len - f - b);
        nw = (uint64_t)sh->gen << 32 | (uint64_t)(front ? b : b + t) << 16 |
             (uint64_t)(front ? f + t : f);
        /* Relaxed: the barriers around each phase order the rows' writes and reads; the
         * word only arbitrates who computes which rows. */
    } while (!atomic_compare_exchange_weak_explicit(w, &old, nw, memory_order_relaxed,
                                                    memory_order_relaxed));
    unit_rows(sh, front ? u_lo + f : u_hi - b - t, t, ret_lo, ret_hi);
    return true;
}

/* The rows of the share this thread's first share_next() will hand it, whatever the others
 * claimed so far: its own segment's first claim, or its static share. */
static void share_first(const struct mm_share *sh, uint32_t *ret_lo, uint32_t *ret_hi) {
    if (!sh->seg) {
        *ret_lo = sh->lo;
        *ret_hi = sh->hi;
        return;
    }
    uint32_t u_lo, u_hi;
    pl_split_range(sh->n_units, sh->cut, sh->ith, &u_lo, &u_hi);
    unit_rows(sh, u_lo, claim_size(sh, true, u_hi - u_lo), ret_lo, ret_hi);
}

static bool share_next(struct mm_share *sh, uint32_t *ret_lo, uint32_t *ret_hi) {
    if (!sh->seg) {
        if (sh->done)
            return false;
        sh->done = true;
        *ret_lo = sh->lo;
        *ret_hi = sh->hi;
        return sh->lo < sh->hi;
    }
    /* Own segment first, then the others' tails, each until it is empty. */
    for (; sh->d < sh->nth; sh->d++)
        if (seg_claim(sh, (sh->ith + sh->d) % sh->nth, sh->d == 0, ret_lo, ret_hi)) {
            sh->stat->work += (uint64_t)(*ret_hi - *ret_lo) * sh->row_bytes;
            return true;
        }
    return false;
}

/* ---- Warming the next product's weights at a barrier ----
 *
 * In a decode step the weights stream from memory only while the matrix products run; in
 * the gaps between them the bus idles. A thread that reaches a barrier before the others
 * (a faster core, a smaller last share, the gap's own work) spends its wait prefetching the
 * first bytes it will read of the next product, WARM_PIECE bytes per look at the barrier, up
 * to WARM_BYTES (into L2: a core's L2 holds them with room to spare on the CPUs we run on).
 * The product then starts from cache while its own prefetches get going. A hint only: the
 * results cannot change. Zen 5 VM, TinyLlama Q4_K_M / Q4_0 / Q8_0 at 2 threads, the warm
 * on every other decode step of one run (so both halves see the same host): steps 0.3-3.2%
 * shorter with it, in each of 9 runs (64 KB to 512 KB alike; the threads wait 1.5-2.4% of a
 * step at these barriers). */
#define WARM_BYTES ((size_t)192 << 10)
#define WARM_PIECE 512u

struct warm {
    struct pl_ctx *c;
    const struct pl_weight *w, *up;
    uint32_t mm_k, n_tok, ith, nth;
    bool ready;    /* spans set (at the first piece: the last to arrive never needs them) */
    uint32_t n, i; /* spans; the next piece is of span i (round robin over the streams) */
    struct pl_mm_span span[PL_MM_DECODE_SPANS];
    size_t off[PL_MM_DECODE_SPANS];
};

/* One piece of the warm (pl_threadpool_idle_fn). The spans: the first bytes this thread
 * reads of product number mm_k (rows of w, with up the fused SwiGLU's). */
static bool warm_piece(void *arg) {
    struct warm *w = arg;
    if (!w->ready) {
        struct mm_share sh;
        uint32_t lo, hi;
        share_begin(w->c, &w->mm_k, w->w->n_rows, w->up ? 2 * w->w->row_bytes : w->w->row_bytes,
                    w->ith, w->nth, &sh);
        share_first(&sh, &lo, &hi);
        w->n = pl_mm_decode_spans(w->w, w->up, w->n_tok, lo, hi, WARM_BYTES, w->span);
        for (uint32_t i = 0; i < w->n; i++) /* WARM_BYTES in all */
            w->span[i].len = PL_MIN(w->span[i].len, WARM_BYTES / w->n);
        w->ready = true;
    }
    for (uint32_t k = 0; k < w->n; k++, w->i = (w->i + 1) % w->n) {
        const struct pl_mm_span *sp = &w->span[w->i];
        if (w->off[w->i] >= sp->len)
            continue;
        const size_t n = PL_MIN((size_t)WARM_PIECE, sp->len - w->off[w->i]);
        pl_mm_prefetch(sp->p + w->off[w->i], n, 2);
        w->off[w->i] += n;
        w->i = (w->i + 1) % w->n;
        return true;
    }
    return false;
}

/* A barrier; a private batch's threads warm product number mm_k (w; up: the fused SwiGLU's)
 * while they wait. */
static void barrier_warm(struct pl_ctx *c, uint32_t mm_k, const struct pl_weight *w,
                         const struct pl_weight *up, uint32_t n_tok, uint32_t ith, uint32_t nth) {
    if (!is_private(n_tok) || nth == 1) {
        pl_threadpool_barrier(c->pool);
        return;
    }
    struct warm wm = {
        .c = c, .w = w, .up = up, .mm_k = mm_k, .n_tok = n_tok, .ith = ith, .nth = nth};
    pl_threadpool_barrier_idle(c->pool, warm_piece, &wm);
}

/* ---- RoPE ---- */

/* cache[0..n_rot) = interleaved (cos, sin) for pos, as ggml_rope_cache_init with ext_factor
 * 0 and attn_factor 1: theta starts at pos and is multiplied by theta_scale per pair. */
static void rope_cache(const struct pl_ctx *c, int32_t pos, float *cache) {
    const struct pl_model *m = c->m;
    const float *ff = m->rope_freqs.data;
    float theta = (float)pos;
    for (uint32_t i0 = 0; i0 < m->hp.n_rot; i0 += 2) {
        float th = m->hp.rope_freq_scale * (ff ? theta / ff[i0 / 2] : theta);
        cache[i0] = cosf(th);
        cache[i0 + 1] = sinf(th);
        theta *= c->rope_theta_scale;
    }
}

/* Rotate the adjacent pairs (x[2i], x[2i+1]) among the first n_rot dims of each head that lie
 * in dims [lo, hi) of a token's heads (lo on a pair's first dim). */
static void rope_rows(float *x, uint32_t lo, uint32_t hi, uint32_t head_dim, uint32_t n_rot,
                      const float *cache) {
    for (uint32_t h = lo / head_dim; (uint64_t)h * head_dim < hi; h++) {
        const uint32_t h0 = h * head_dim;
        float *xh = x + h0;
        const uint32_t end = PL_MIN(PL_MIN(hi - h0, head_dim), n_rot);
        for (uint32_t i0 = PL_MAX(lo, h0) - h0; i0 + 1 < end; i0 += 2) {
            const float cs = cache[i0], sn = cache[i0 + 1];
            const float x0 = xh[i0], x1 = xh[i0 + 1];
            xh[i0] = x0 * cs - x1 * sn;
            xh[i0 + 1] = x0 * sn + x1 * cs;
        }
    }
}

/* Dims [lo, hi) of a token's K (kt) and V (vt) into the cache slot (seq, pos) of layer il. */
static void kv_store_k(struct pl_ctx *c, uint32_t il, uint32_t seq, uint32_t pos, const float *kt,
                       uint32_t lo, uint32_t hi) {
    uint8_t *ks = pl_kv_k_slot(&c->kv, il, seq, pos);
    if (c->kv.type != PL_KV_F16) {
        pl_kv_k_scatter(ks + (size_t)lo * PL_KV_BLOCK_TOKENS * sizeof(float), kt + lo, hi - lo,
                        sizeof(float));
        return;
    }
    /* K is dimension-major in its block (kv.h): converted in chunks, then spread
     * PL_KV_BLOCK_TOKENS slots apart. */
    uint16_t hk[256];
    for (uint32_t i = lo; i < hi; i += 256) {
        const uint32_t nk = PL_MIN(256u, hi - i);
        c->kv_k->from_f32(kt + i, hk, nk);
        pl_kv_k_scatter(ks + (size_t)i * PL_KV_BLOCK_TOKENS * 2, hk, nk, 2);
    }
}

static void kv_store_v(struct pl_ctx *c, uint32_t il, uint32_t seq, uint32_t pos, const float *vt,
                       uint32_t lo, uint32_t hi) {
    uint8_t *vr = pl_kv_v_row(&c->kv, il, seq, pos);
    if (c->kv.type == PL_KV_F16)
        c->kv_k->from_f32(vt + lo, vr + (size_t)lo * 2, hi - lo);
    else
        memcpy(vr + (size_t)lo * sizeof(float), vt + lo, (size_t)(hi - lo) * sizeof(float));
}

/* What follows product j (0 Q, 1 K, 2 V) for dims [lo, hi) of entry t of the chunk, in
 * layer il: RoPE on Q and K (cache: t's), then K and V into the cache at (seq, pos). */
static void qkv_after(struct pl_ctx *c, uint32_t il, uint32_t t, uint32_t j, uint32_t lo,
                      uint32_t hi, const float *cache) {
    const struct pl_model_hparams *hp = &c->m->hp;
    const uint32_t seq = (uint32_t)c->b->seq[t], pos = (uint32_t)c->b->pos[t];
    if (j == 0) {
        rope_rows(c->q + (size_t)t * c->q_dim, lo, hi, hp->head_dim, hp->n_rot, cache);
    } else if (j == 1) {
        float *kt = c->k + (size_t)t * c->kv_dim;
        rope_rows(kt, lo, hi, hp->head_dim, hp->n_rot, cache);
        kv_store_k(c, il, seq, pos, kt, lo, hi);
    } else {
        kv_store_v(c, il, seq, pos, c->v + (size_t)t * c->kv_dim, lo, hi);
    }
}

/* A private batch's Q, K and V products end in qkv_after(), row share by row share, on the
 * thread that computed the rows (their lines still in its cache): no pass over q and k after
 * the products, and no barrier for one. lo even (split_quads, ROWS_MIN) and head_dim even,
 * so each pair is whole in one share. rope: [n_tok][n_rot] caches, computed once per run. */
struct qkv_epi {
    uint32_t il;
    const float *rope;
};

static void qkv_rows(struct pl_ctx *c, const struct qkv_epi *e, uint32_t j, uint32_t lo,
                     uint32_t hi, uint32_t n_tok) {
    for (uint32_t t = 0; t < n_tok; t++)
        qkv_after(c, e->il, t, j, lo, hi, e->rope + (size_t)t * c->m->hp.n_rot);
}

/* ---- Matrix products ---- */

/* One projection group sharing an input: weights ws[i] write outs[i] (stride = rows). The
 * input rows [0, n_tok) of src must be complete for this thread's token share [lo, hi)
 * (same split as the caller's producer) - other threads' rows are only read after the
 * barrier below. Ends without a barrier: the caller adds one before reading outs. */
static void matmul_group(struct pl_ctx *c, const struct pl_weight *const *ws, float *const *outs,
                         const float *const *biases, const bool *accumulate, uint32_t n_w,
                         const float *src, size_t src_stride, uint32_t n_tok, uint32_t ith,
                         uint32_t nth, uint32_t *mm_k, const struct qkv_epi *epi) {
    uint32_t lo, hi;
    const bool priv = is_private(n_tok);
    split(n_tok, ith, nth, &lo, &hi);
    for (uint32_t i = 0; i < n_w;) {
        uint32_t j;
        struct pl_mm_act act;
        if (i > 0 && !priv) /* others may still read xq / the tiles of the previous group */
            pl_threadpool_barrier(c->pool);
        prep_act(c, ws[i], src, src_stride, n_tok, lo, hi, ith, &act);
        if (!priv)
            pl_threadpool_barrier(c->pool);
        for (j = i; j < n_w && same_act(ws[i], ws[j]); j++) {
            struct mm_share sh;
            uint32_t r_lo, r_hi;
            share_begin(c, mm_k, ws[j]->n_rows, ws[j]->row_bytes, ith, nth, &sh);
            while (share_next(&sh, &r_lo, &r_hi)) {
                pl_matmul_rows(ws[j], &act, outs[j], ws[j]->n_rows, biases[j], accumulate[j], r_lo,
                               r_hi);
                if (epi)
                    qkv_rows(c, epi, j, r_lo, r_hi, n_tok);
            }
        }
        i = j;
    }
}

/* The FFN's gate and up projections and silu(gate) * up into c->hg: fused row by row when
 * the two weights share a type (one activation preparation, no up buffer), else two
 * products and a separate pass. Ends without a barrier. */
static void ffn_gate_up(struct pl_ctx *c, const struct pl_layer *l, const float *src,
                        uint32_t n_tok, uint32_t ith, uint32_t nth, uint32_t *mm_k) {
    const uint32_t n_embd = c->m->hp.n_embd, n_ff = c->m->hp.n_ff;
    uint32_t lo, hi, r_lo, r_hi;

    if (gate_up_fused(l)) {
        struct pl_mm_act act;
        split(n_tok, ith, nth, &lo, &hi);
        prep_act(c, &l->w_gate, src, n_embd, n_tok, lo, hi, ith, &act);
        if (!is_private(n_tok))
            pl_threadpool_barrier(c->pool);
        struct mm_share sh;
        share_begin(c, mm_k, n_ff, 2 * l->w_gate.row_bytes, ith, nth, &sh);
        while (share_next(&sh, &r_lo, &r_hi))
            pl_matmul_swiglu_rows(&l->w_gate, &l->w_up, &act, c->hg, n_ff, r_lo, r_hi);
        return;
    }
    const struct pl_weight *ws[2] = {&l->w_gate, &l->w_up};
    float *outs[2] = {c->hg, c->hu};
    const float *bs[2] = {NULL, NULL};
    const bool acc[2] = {false, false};
    matmul_group(c, ws, outs, bs, acc, 2, src, n_embd, n_tok, ith, nth, mm_k, NULL);
    pl_threadpool_barrier(c->pool);
    /* By rows of n_ff (columns of hg), so one token is shared by every thread. */
    split(n_ff, ith, nth, &r_lo, &r_hi);
    for (uint32_t t = 0; t < n_tok; t++) {
        float *g = c->hg + (size_t)t * n_ff + r_lo;
        pl_mm_swiglu(g, g, c->hu + (size_t)t * n_ff + r_lo, r_hi - r_lo);
    }
}

/* ---- The forward pass (runs on every pool thread) ---- */

static void forward_thread(void *arg, uint32_t ith, uint32_t nth) {
    struct pl_ctx *c = arg;
    const struct pl_model *m = c->m;
    const struct pl_model_hparams *hp = &m->hp;
    const struct pl_batch *b = c->b;
    const uint32_t n = b->n, n_embd = hp->n_embd;
    uint32_t lo, hi, mm_k = 0;

    split(n, ith, nth, &lo, &hi);
    /* A private batch ropes in its Q and K products (qkv_rows), with every token's cache made
     * here once for all layers; other batches rope per layer, each thread its tokens. */
    const bool fused_rope = is_private(n) && hp->head_dim % 2 == 0;
    float *rope = c->th_rope + (size_t)ith * PRIV * hp->n_rot;
    for (uint32_t t = 0; fused_rope && t < n; t++)
        rope_cache(c, b->pos[t], rope + (size_t)t * hp->n_rot);

    /* Embeddings: dequantize each token's row. */
    for (uint32_t t = lo; t < hi; t++) {
        const uint8_t *row =
            (const uint8_t *)m->tok_embd.data + (size_t)b->token[t] * m->tok_embd.row_bytes;
        m->tok_embd.k->to_f32(row, c->x + (size_t)t * n_embd, n_embd);
    }
    if (is_private(n)) /* every thread reads every row of x next */
        barrier_warm(c, mm_k, &m->layers[0].wq, NULL, n, ith, nth);

    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const struct pl_layer *l = &m->layers[il];

        /* Attention norm; Q, K, V. Rows [lo, hi) of xb are this thread's own. */
        const float *xn = norm_rows(c, l->attn_norm.data, n, lo, hi, ith);
        {
            const struct pl_weight *ws[3] = {&l->wq, &l->wk, &l->wv};
            float *outs[3] = {c->q, c->k, c->v};
            const float *bs[3] = {l->bq.data, l->bk.data, l->bv.data};
            const bool acc[3] = {false, false, false};
            const struct qkv_epi epi = {.il = il, .rope = rope};
            matmul_group(c, ws, outs, bs, acc, 3, xn, n_embd, n, ith, nth, &mm_k,
                         fused_rope ? &epi : NULL);
        }
        barrier_warm(c, mm_k, &l->wo, NULL, n, ith, nth);

        /* Otherwise the same now, each thread for its entries, whole rows. */
        if (!fused_rope) {
            for (uint32_t t = lo; t < hi; t++) {
                rope_cache(c, b->pos[t], rope);
                for (uint32_t j = 0; j < 3; j++)
                    qkv_after(c, il, t, j, 0, j == 0 ? c->q_dim : c->kv_dim, rope);
            }
            pl_threadpool_barrier(c->pool);
        }

        /* Attention (attn.c). */
        pl_attn_run(&c->attn, &c->kv, il, n, b->pos, b->seq, c->q, c->att, ith, nth);
        barrier_warm(c, mm_k, &l->wo, NULL, n, ith, nth);

        /* Output projection + residual: x = (wo.att + bo) + x. */
        {
            const struct pl_weight *ws[1] = {&l->wo};
            float *outs[1] = {c->x};
            const float *bs[1] = {l->bo.data};
            const bool acc[1] = {true};
            matmul_group(c, ws, outs, bs, acc, 1, c->att, c->q_dim, n, ith, nth, &mm_k, NULL);
        }
        barrier_warm(c, mm_k, &l->w_gate, gate_up_fused(l) ? &l->w_up : NULL, n, ith, nth);

        /* FFN: norm, gate and up, silu(gate) * up, down + residual. */
        xn = norm_rows(c, l->ffn_norm.data, n, lo, hi, ith);
        ffn_gate_up(c, l, xn, n, ith, nth, &mm_k);
        barrier_warm(c, mm_k, &l->w_down, NULL, n, ith, nth);
        {
            const struct pl_weight *ws[1] = {&l->w_down};
            float *outs[1] = {c->x};
            const float *bs[1] = {NULL};
            const bool acc[1] = {true};
            matmul_group(c, ws, outs, bs, acc, 1, c->hg, hp->n_ff, n, ith, nth, &mm_k, NULL);
        }
        if (il + 1 < hp->n_layer)
            barrier_warm(c, mm_k, &m->layers[il + 1].wq, NULL, n, ith, nth);
        else if (c->n_out)
            barrier_warm(c, mm_k, &m->output, NULL, c->n_out, ith, nth);
        else
            pl_threadpool_barrier(c->pool);
    }

    /* Final norm for the entries whose logits are wanted, packed into xb rows [0, n_out),
     * then the output projection straight into the caller's buffer. */
    if (c->n_out == 0)
        return;
    float *xo = c->xb;
    split(c->n_out, ith, nth, &lo, &hi);
    if (is_private(c->n_out)) {
        xo = c->th_xb + (size_t)ith * PRIV * n_embd;
        lo = 0;
        hi = c->n_out;
    }
    for (uint32_t k = lo; k < hi; k++)
        pl_mm_rmsnorm(xo + (size_t)k * n_embd, c->x + (size_t)c->out_rows[k] * n_embd,
                      m->output_norm.data, n_embd, hp->rms_eps);
    {
        const struct pl_weight *ws[1] = {&m->output};
        float *outs[1] = {c->out};
        const float *bs[1] = {NULL};
        const bool acc[1] = {false};
        matmul_group(c, ws, outs, bs, acc, 1, xo, n_embd, c->n_out, ith, nth, &mm_k, NULL);
    }
    /* The pool's final barrier publishes the logits to the caller. */
}

/* ---- Contexts ---- */

void pl_ctx_free(struct pl_ctx *c) {
    if (!c)
        return;
    pl_threadpool_free(c->pool);
    pl_kv_done(&c->kv);
    free(c->x);
    free(c->xb);
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->att);
    free(c->hg);
    free(c->hu);
    free(c->xq);
    free(c->tiles);
    free(c->th_xb);
    free(c->th_xq);
    free(c->th_vec);
    free(c->th_rope);
    pl_attn_done(&c->attn);
    free(c->mm);
    free(c->done);
    for (int k = 0; k < 2; k++) {
        free(c->shares[k]);
        free(c->cuts[k]);
    }
    free(c->seq_count);
    free(c->out_rows);
    free(c);
}

/* calloc of a * b elements of size sz, overflow-checked. */
static void *alloc3(size_t a, size_t b, size_t sz) {
    size_t n;
    if (pl_mul_overflow(a, b, &n))
        return NULL;
    return calloc(n ? n : 1, sz);
}

static size_t max_act_row(const struct pl_weight *w, size_t cur) {
    return w->k->vec_dot_type == PL_GGML_TYPE_F32 ? cur : PL_MAX(cur, w->act_row_bytes);
}

static size_t max_tile(const struct pl_weight *w, size_t cur, uint32_t nt) {
    return pl_mm_tile_kernel(w->type, w->n_cols) ? PL_MAX(cur, pl_mm_lay_bytes(w->n_cols, nt))
                                                 : cur;
}

int pl_ctx_new(struct pl_model *m, const struct pl_ctx_opts *opts, struct pl_ctx **ret) {
    struct pl_ctx_opts o = opts ? *opts : (struct pl_ctx_opts){0};
    struct pl_ctx *c;
    uint64_t kv_tokens;
    int r;

    if (!m || !ret)
        return -EINVAL;
    const struct pl_model_hparams *hp = &m->hp;
    if (!o.n_ctx)
        o.n_ctx = PL_MIN(hp->n_ctx_train, 4096u);
    if (!o.n_seq)
        o.n_seq = 1;
    if (!o.n_batch)
        o.n_batch = 512;
    kv_tokens = o.n_kv_tokens ? o.n_kv_tokens : (uint64_t)o.n_ctx * o.n_seq;
    if (o.n_ctx > MAX_CTX || o.n_seq > MAX_SEQ || o.n_batch > MAX_BATCH || kv_tokens > UINT32_MAX ||
        (o.kv_type != PL_KV_F16 && o.kv_type != PL_KV_F32))
        return -EINVAL;

    c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->m = m;
    c->n_ctx = o.n_ctx;
    c->n_seq = o.n_seq;
    c->n_batch = o.n_batch;
    c->n_threads = m->n_threads;
    c->q_dim = hp->n_head * hp->head_dim;
    c->kv_dim = hp->n_head_kv * hp->head_dim;
    c->rope_theta_scale = powf(hp->rope_freq_base, -2.0f / (float)hp->n_rot);
    c->kv_k = pl_quant_kernels(o.kv_type == PL_KV_F16 ? PL_GGML_TYPE_F16 : PL_GGML_TYPE_F32);
    if (!c->kv_k || (o.kv_type == PL_KV_F16 && !c->kv_k->from_f32)) {
        r = -PL_ERR_UNSUPPORTED;
        goto fail;
    }

    r = pl_kv_init(&c->kv, hp->n_layer, c->kv_dim, o.n_seq, o.n_ctx, (uint32_t)kv_tokens,
                   o.kv_type);
    if (r < 0)
        goto fail;

    /* The widest activation row any matmul input needs in its vec_dot_type. */
    size_t act = 0, tile = 0, vec = 0;
    bool need_hu = false;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const struct pl_layer *l = &m->layers[il];
        const struct pl_weight *ws[PL_LAYER_N_MATS] = {PL_LAYER_MATS(l)};
        for (size_t i = 0; i < PL_ARRAY_SIZE(ws); i++) {
            act = max_act_row(ws[i], act);
            tile = max_tile(ws[i], tile, PL_MM_TILE);
            vec = max_tile(ws[i], vec, 1);
        }
        need_hu |= !gate_up_fused(l);
    }
    act = max_act_row(&m->output, act);
    tile = max_tile(&m->output, tile, PL_MM_TILE);
    vec = max_tile(&m->output, vec, 1);
    c->xq_stride = PL_ALIGN_UP(act, (size_t)64);
    c->tile_bytes = tile;
    c->vec_bytes = PL_ALIGN_UP(vec, (size_t)64);
    c->n_chunk = PL_MIN(o.n_batch, CHUNK);

    const size_t nb = c->n_chunk, nt = c->n_threads;
    c->x = alloc3(nb, hp->n_embd, sizeof(float));
    c->xb = alloc3(nb, hp->n_embd, sizeof(float));
    c->q = alloc3(nb, c->q_dim, sizeof(float));
    c->k = alloc3(nb, c->kv_dim, sizeof(float));
    c->v = alloc3(nb, c->kv_dim, sizeof(float));
    c->att = alloc3(nb, c->q_dim, sizeof(float));
    c->hg = alloc3(nb, hp->n_ff, sizeof(float));
    c->hu = alloc3(need_hu ? nb : 1, hp->n_ff, sizeof(float));
    c->xq = alloc3(nb, c->xq_stride, 1);
    if (tile > 0) {
        void *p = NULL;
        if (posix_memalign(&p, 64, (nb + PL_MM_TILE - 1) / PL_MM_TILE * tile) == 0)
            c->tiles = p;
        p = NULL;
        if (posix_memalign(&p, 64, nt * PRIV * c->vec_bytes) == 0)
            c->th_vec = p;
    }
    c->th_xb = alloc3(nt * PRIV, hp->n_embd, sizeof(float));
    {
        void *p = NULL;
        if (posix_memalign(&p, 64, nt * PRIV * c->xq_stride + 64) == 0)
            c->th_xq = p;
    }
    c->th_rope = alloc3(nt, (size_t)PRIV * hp->n_rot, sizeof(float));
    c->n_mm = hp->n_layer * MM_PER_LAYER + MM_EXTRA;
    {
        void *p = NULL;
        if (posix_memalign(&p, 64, (size_t)c->n_mm * nt * sizeof(*c->mm)) == 0) {
            c->mm = p;
            memset(p, 0, (size_t)c->n_mm * nt * sizeof(*c->mm));
        }
    }
    {
        void *p = NULL;
        if (posix_memalign(&p, 64, nt * sizeof(*c->done)) == 0) {
            c->done = p;
            memset(p, 0, nt * sizeof(*c->done));
        }
    }
    for (int k = 0; k < 2; k++) {
        c->shares[k] = alloc3(nt, 1, sizeof(double));
        c->cuts[k] = alloc3(nt + 1, 1, sizeof(uint32_t));
        if (c->shares[k] && c->cuts[k])
            pl_split_reset(c->shares[k], c->cuts[k], (uint32_t)nt);
    }
    c->seq_count = alloc3(o.n_seq, 1, sizeof(uint32_t));
    c->out_rows = alloc3(nb, 1, sizeof(uint32_t));
    if (!c->x || !c->xb || !c->q || !c->k || !c->v || !c->att || !c->hg || !c->hu || !c->xq ||
        !c->th_rope || !c->seq_count || !c->mm || !c->out_rows || !c->done || !c->shares[0] ||
        !c->shares[1] || !c->cuts[0] || !c->cuts[1] || (tile > 0 && (!c->tiles || !c->th_vec)) ||
        !c->th_xb || !c->th_xq) {
        r = -ENOMEM;
        goto fail;
    }
    r = pl_attn_init(&c->attn, hp->n_head, hp->n_head_kv, hp->head_dim, o.n_ctx, c->n_threads,
                     o.kv_type, true);
    if (r < 0)
        goto fail;
    r = pl_threadpool_new(c->n_threads, m->pin, &c->pool);
    if (r < 0)
        goto fail;
    pl_threadpool_set_idle_yield(c->pool, m->idle_yield);
    *ret = c;
    return 0;

fail:
    pl_ctx_free(c);
    return r;
}

int pl_ctx_decode(struct pl_ctx *c, const struct pl_batch *b, float *out) {
    uint32_t need = 0;
    bool any_out = false;

    if (!c || !b)
        return -EINVAL;
    if (b->n == 0)
        return 0;
    if (b->n > c->n_batch || !b->token || !b->pos || !b->seq)
        return -EINVAL;

    /* Validate every entry before touching any state: token and sequence in range, and
     * positions that continue each sequence in batch order. */
    memset(c->seq_count, 0, c->n_seq * sizeof(*c->seq_count));
    for (uint32_t i = 0; i < b->n; i++) {
        int32_t tok = b->token[i], seq = b->seq[i], pos = b->pos[i];
        if (tok < 0 || (uint32_t)tok >= c->m->hp.n_vocab || seq < 0 || (uint32_t)seq >= c->n_seq)
            return -EINVAL;
        if (pos < 0 || (uint64_t)pos != (uint64_t)c->kv.seq_len[seq] + c->seq_count[seq])
            return -EINVAL;
        c->seq_count[seq]++;
        any_out |= b->logits ? b->logits[i] : i + 1 == b->n;
    }
    if (any_out && !out)
        return -EINVAL;
    /* Capacity: each sequence's context and the shared block pool. A sequence's count is
     * consumed at its first entry so each is charged once. */
    for (uint32_t i = 0; i < b->n; i++) {
        uint32_t seq = (uint32_t)b->seq[i];
        if (!c->seq_count[seq])
            continue;
        uint32_t new_len = c->kv.seq_len[seq] + c->seq_count[seq];
        c->seq_count[seq] = 0;
        if (new_len > c->n_ctx)
            return -PL_ERR_EXHAUSTED;
        need += pl_kv_blocks_needed(&c->kv, seq, new_len);
    }
    if (need > c->kv.n_free)
        return -PL_ERR_EXHAUSTED;

    /* Commit: reserve the blocks (cannot fail now) and extend the sequences. */
    for (uint32_t i = 0; i < b->n; i++) {
        uint32_t seq = (uint32_t)b->seq[i];
        int r = pl_kv_reserve(&c->kv, seq, (uint32_t)b->pos[i] + 1);
        if (r < 0)
            return r; /* unreachable: checked above */
        c->kv.seq_len[seq] = (uint32_t)b->pos[i] + 1;
    }

    /* Run chunk by chunk; each chunk's wanted logits follow the previous chunk's. */
    const size_t n_vocab = c->m->hp.n_vocab;
    for (uint32_t i0 = 0, n = 0; i0 < b->n; i0 += n) {
        uint32_t rem = b->n - i0, n_out = 0;
        n = PL_MIN(c->n_chunk, rem);
        /* Never leave a last piece too short for the batched kernels (engine_model.h). */
        if (n < rem && rem - n < PL_CTX_BATCHED_MIN && n >= 2 * PL_CTX_BATCHED_MIN)
            n -= PL_CTX_BATCHED_MIN - (rem - n);
        for (uint32_t i = 0; i < n; i++)
            if (b->logits ? b->logits[i0 + i] : i0 + i + 1 == b->n)
                c->out_rows[n_out++] = i;
        c->chunk = (struct pl_batch){
            .n = n, .token = b->token + i0, .pos = b->pos + i0, .seq = b->seq + i0};
        c->b = &c->chunk;
        c->out = out;
        c->n_out = n_out;
        /* A new generation: every segment word of earlier runs reads as untouched (the run
         * starts after this store, threadpool.h). Generation 0 is never used, so the zeroed
         * words at creation are stale too. */
        if (++c->gen == 0)
            c->gen = 1;
        /* This run's segment cuts, then the next one's from the work each thread did. */
        const int kind = is_private(n) ? 1 : 0;
        c->cut = c->cuts[kind];
        for (uint32_t i = 0; i < c->n_threads; i++)
            c->done[i].work = 0;
        pl_threadpool_run(c->pool, forward_thread, c);
        pl_split_update(c->shares[kind], c->cuts[kind], c->done, c->n_threads);
        if (n_out)
            out += n_out * n_vocab;
    }
    c->b = NULL;
    c->out = NULL;
    return 0;
}

uint32_t pl_ctx_seq_len(const struct pl_ctx *c, int32_t seq) {
    if (!c || seq < 0 || (uint32_t)seq >= c->n_seq)
        return 0;
    return c->kv.seq_len[seq];
}

void pl_ctx_seq_clear(struct pl_ctx *c, int32_t seq) {
    if (!c || seq < 0 || (uint32_t)seq >= c->n_seq)
        return;
    pl_kv_seq_clear(&c->kv, (uint32_t)seq);
}

uint32_t pl_ctx_kv_used(const struct pl_ctx *c) {
    return c ? (c->kv.n_blocks - c->kv.n_free) * PL_KV_BLOCK_TOKENS : 0;
}

uint32_t pl_ctx_kv_total(const struct pl_ctx *c) {
    return c ? c->kv.n_blocks * PL_KV_BLOCK_TOKENS : 0;
}

struct pl_kv *pl_ctx_kv(struct pl_ctx *c) {
    return &c->kv;
}
