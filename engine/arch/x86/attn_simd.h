/* SPDX-License-Identifier: MIT */
/* The vector attention kernel (see engine/src/attn.h), written once for the x86 vector
 * widths: included by attn_avx512.c (a block's 16 slots in one zmm) and attn_avx2.c (in two
 * ymm), each of which first defines
 *   vf, vmask               16 floats; a mask of the block's valid slots
 *   vf_zero, vf_set1, vf_add, vf_sub, vf_mul, vf_fmadd, vf_loadu, vf_loadu_bytes, vf_storeu,
 *   vf_load_f16 (16 halves), vf_round_f16 (to f16 and back, nearest even), vf_rmax, vf_radd
 *   (across the lanes), vf_first (lane 0), vf_exp_nonpos (exp of x <= 0), vm_first(n)
 *   (slots [0, n)), vf_blend(m, fill, x) (x where m, else fill), vf_maskz(m, x)
 *   ATTN_ITEM               the kernel's name
 *   ATTN_SC_CHAINS          FMA chains in flight for the scores (a power of two, <= 8)
 *   ATTN_PV_ACC             accumulators (of 16 floats) for the product with V (<= 16)
 * One pass over the K and V blocks of a group of query heads with an online softmax. K is
 * dimension-major in the cache (kv.h): a block's 16 slots of one dimension are one vector,
 * so a head's 16 scores are a sum of head_dim vector FMAs with its broadcast query element,
 * each K vector converted (F16C) once in registers for all the group's heads. V is read in
 * place, each row chunk loaded (and converted) once for a run of heads. Numerics as the
 * scalar kernel in attn.c: query and probabilities rounded to f16 with an F16 cache (here by
 * the hardware conversions, round to nearest even), sums per lane; exp() is a polynomial
 * (vexp_avx512.h, vexp_avx2.h), also for the rescale factor, so the update has no branch and
 * no libm call. The K and V of the block two ahead are prefetched. head_dim % 16 == 0. */
#ifndef PL_ENGINE_ATTN_SIMD_H
#define PL_ENGINE_ATTN_SIMD_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "attn.h"
#include "kv.h"
#include "pl/engine_model.h"
#include "pl/pl_util.h"

#define BT PL_KV_BLOCK_TOKENS

_Static_assert(PL_KV_BLOCK_TOKENS == 16, "a block's scores fill one vector of 16 floats");
_Static_assert(ATTN_SC_CHAINS >= 1 && ATTN_SC_CHAINS <= 8, "scores_nh keeps up to 8 x 8 chains");
_Static_assert(ATTN_PV_ACC >= 1 && ATTN_PV_ACC <= 16, "pv_nh keeps up to 8 x 8 accumulators");

/* A run of NH heads: its chains per head for the scores, its 16-float chunks at a time in
 * the product with V. */
#define SC_S(NH) (ATTN_SC_CHAINS / (NH) >= 1 ? ATTN_SC_CHAINS / (NH) : 1)
#define PV_NJ(NH) (ATTN_PV_ACC / (NH) >= 8 ? 8 : ATTN_PV_ACC / (NH) >= 1 ? ATTN_PV_ACC / (NH) : 1)
/* The longest run: 8 heads where the chains allow one each, else ATTN_SC_CHAINS. */
#define RUN_MAX (ATTN_SC_CHAINS >= 8 ? 8 : ATTN_SC_CHAINS)

/* Heads left -> the run's length: 8, 4, 2 or 1, at most RUN_MAX. */
static inline uint32_t run_len(uint32_t left) {
    return left >= 8 && RUN_MAX >= 8   ? 8
           : left >= 4 && RUN_MAX >= 4 ? 4
           : left >= 2 && RUN_MAX >= 2 ? 2
                                       : 1;
}

/* The scores of NH heads with one block: lane s of sc[h] = q[h] . K slot s (q[h] hd floats
 * from q[h - 1]), K dimension-major (kv.h) at k, f16 or f32. Dimension i's 16 slots are one
 * vector, converted once for the NH heads; each head sums over the dimensions in S
 * interleaved chains (NH x S = ATTN_SC_CHAINS independent FMA chains, enough to fill the FMA
 * pipes), added at the end. */
INLINE void scores_nh(const float *q, uint32_t hd, const uint8_t *k, vf *sc, const int NH,
                      const int S, const bool F16) {
    vf acc[8][8];
#pragma GCC unroll 8
    for (int h = 0; h < NH; h++)
#pragma GCC unroll 8
        for (int u = 0; u < S; u++)
            acc[h][u] = vf_zero();
    for (uint32_t i = 0; i < hd; i += (uint32_t)S) {
#pragma GCC unroll 8
        for (int u = 0; u < S; u++) {
            const size_t e = (size_t)(i + (uint32_t)u) * BT;
            const vf kv = F16 ? vf_load_f16(k + 2 * e) : vf_loadu_bytes(k + 4 * e);
#pragma GCC unroll 8
            for (int h = 0; h < NH; h++)
                acc[h][u] = vf_fmadd(vf_set1(q[(size_t)h * hd + i + (uint32_t)u]), kv, acc[h][u]);
        }
    }
#pragma GCC unroll 8
    for (int h = 0; h < NH; h++) {
        for (int w = S / 2; w >= 1; w /= 2)
            for (int u = 0; u < w; u++)
                acc[h][u] = vf_add(acc[h][u], acc[h][u + w]);
        sc[h] = acc[h][0];
    }
}

/* Scores of the nq heads of q with the block's K at k, into pb (BT floats a head), masked
 * to the valid slots (-inf beyond) and scaled. Heads in runs of 8 (where RUN_MAX allows),
 * 4, 2, 1. */
#define SCORES_RUN(NH)                                                                             \
    do {                                                                                           \
        if (f16)                                                                                   \
            scores_nh(qh, hd, k, sc, (NH), SC_S(NH), true);                                        \
        else                                                                                       \
            scores_nh(qh, hd, k, sc, (NH), SC_S(NH), false);                                       \
    } while (0)
static void scores_block(const float *q, uint32_t nq, uint32_t hd, const uint8_t *k, bool f16,
                         vf scale, vmask valid, float *pb) {
    const vf ninf = vf_set1(-INFINITY);
    uint32_t h = 0;
    while (h < nq) {
        vf sc[8];
        const uint32_t nh = run_len(nq - h);
        const float *qh = q + (size_t)h * hd;
        if (nh == 8)
            SCORES_RUN(RUN_MAX >= 8 ? 8 : 1); /* (never 1: a constant for RUN_MAX < 8) */
        else if (nh == 4)
            SCORES_RUN(RUN_MAX >= 4 ? 4 : 1);
        else if (nh == 2)
            SCORES_RUN(RUN_MAX >= 2 ? 2 : 1);
        else
            SCORES_RUN(1);
        for (uint32_t j = 0; j < nh; j++)
            vf_storeu(pb + (h + j) * BT, vf_blend(valid, ninf, vf_mul(sc[j], scale)));
        h += nh;
    }
}
#undef SCORES_RUN

/* o = o * alpha[h] + sum over slots s < n of p[h][s] x V row s, for NH heads (o and p NH
 * x hd, NH x BT floats apart) and NJ 16-float chunks of the rows from chunk j; V rows vs
 * bytes apart at v, f16 or f32. Each V chunk is loaded (and converted) once for the NH heads,
 * straight from the cache: a block converted into scratch first made the cache's loads wait
 * on the scratch's stores (4 KiB of f32 stores cover every address's low 12 bits, which the
 * core compares to order loads after stores). NH x NJ <= ATTN_PV_ACC accumulators. */
INLINE void pv_nh(float *o, uint32_t hd, const float *p, const float *alpha, const uint8_t *v,
                  size_t vs, uint32_t n, uint32_t j, const int NH, const int NJ, const bool F16) {
    vf acc[8][8];
#pragma GCC unroll 8
    for (int h = 0; h < NH; h++) {
        const vf al = vf_set1(alpha[h]);
#pragma GCC unroll 8
        for (int c = 0; c < NJ; c++)
            acc[h][c] = vf_mul(vf_loadu(o + (size_t)h * hd + 16 * (j + c)), al);
    }
    for (uint32_t s = 0; s < n; s++) {
        const uint8_t *row = v + s * vs;
        vf vc[8];
#pragma GCC unroll 8
        for (int c = 0; c < NJ; c++)
            vc[c] =
                F16 ? vf_load_f16(row + 2 * 16 * (j + c)) : vf_loadu_bytes(row + 4 * 16 * (j + c));
#pragma GCC unroll 8
        for (int h = 0; h < NH; h++) {
            const vf ps = vf_set1(p[h * BT + s]);
#pragma GCC unroll 8
            for (int c = 0; c < NJ; c++)
                acc[h][c] = vf_fmadd(ps, vc[c], acc[h][c]);
        }
    }
#pragma GCC unroll 8
    for (int h = 0; h < NH; h++)
#pragma GCC unroll 8
        for (int c = 0; c < NJ; c++)
            vf_storeu(o + (size_t)h * hd + 16 * (j + c), acc[h][c]);
}

/* The chunks [0, hd / 16) of NH heads, NJ at a time (then 1 at a time). */
INLINE void pv_heads(float *o, uint32_t hd, const float *p, const float *alpha, const uint8_t *v,
                     size_t vs, uint32_t n, const int NH, const int NJ, const bool F16) {
    const uint32_t nc = hd / 16;
    uint32_t j = 0;
    for (; j + (uint32_t)NJ <= nc; j += (uint32_t)NJ)
        pv_nh(o, hd, p, alpha, v, vs, n, j, NH, NJ, F16);
    for (; j < nc; j++)
        pv_nh(o, hd, p, alpha, v, vs, n, j, NH, 1, F16);
}

/* The product with V of the nq heads, in runs as the scores' (AVX-512: 8 heads 2 chunks at a
 * time, 4 heads 4, 2 heads 8, 1 head 8). */
#define PV_RUN(NH)                                                                                 \
    do {                                                                                           \
        if (f16)                                                                                   \
            pv_heads(o, hd, p, al, v, vs, n, (NH), PV_NJ(NH), true);                               \
        else                                                                                       \
            pv_heads(o, hd, p, al, v, vs, n, (NH), PV_NJ(NH), false);                              \
    } while (0)
static void pv_block(float *out, uint32_t nq, uint32_t hd, const float *pb, const float *ab,
                     const uint8_t *v, size_t vs, uint32_t n, bool f16) {
    uint32_t h = 0;
    while (h < nq) {
        const uint32_t nh = run_len(nq - h);
        float *o = out + (size_t)h * hd;
        const float *p = pb + h * BT, *al = ab + h;
        if (nh == 8)
            PV_RUN(RUN_MAX >= 8 ? 8 : 1);
        else if (nh == 4)
            PV_RUN(RUN_MAX >= 4 ? 4 : 1);
        else if (nh == 2)
            PV_RUN(RUN_MAX >= 2 ? 2 : 1);
        else
            PV_RUN(1);
        h += nh;
    }
}
#undef PV_RUN

/* Blocks ahead of the current one whose K and V rows are prefetched. */
#define ATTN_PF_BLOCKS 2

/* One PREFETCHT0 in asm: GCC's vectorizer drops _mm_prefetch calls from the loops it
 * vectorizes (at -O3 the loop below lost every prefetch). */
INLINE void pf_line(const void *p) {
    __asm__ volatile("prefetcht0 %0" : : "m"(*(const char *)p));
}

/* The K (a contiguous head_dim x 16) and the V rows of this item's head in block bi,
 * prefetched: a decode step reads the cache of a layer once, after the layer's weights have
 * streamed through the caches, so they come from memory, and a sequence's blocks are
 * block_stride apart, which the hardware prefetchers do not follow. K's lines are asked for
 * before a block's scores, V's before its product with V: in one burst, the prefetches
 * waited for free miss buffers (AVX-512, attention's share of a 1-thread decode at ~570
 * positions, perf: 6.1-6.4% with one burst, 5.3-5.5% split; 4 blocks ahead instead of 2: the
 * same). */
static void prefetch_k(const struct pl_kv *kv, const struct pl_attn_item *it, uint32_t bi,
                       size_t head_bytes) {
    const uint8_t *k = pl_kv_k_block(kv, it->il, it->seq, bi) + it->k_off;
    for (size_t o = 0; o < BT * head_bytes; o += 64)
        pf_line(k + o);
}

static void prefetch_v(const struct pl_kv *kv, const struct pl_attn_item *it, uint32_t bi,
                       size_t head_bytes) {
    const uint8_t *v = pl_kv_v_block(kv, it->il, it->seq, bi) + it->head_off;
    for (uint32_t s = 0; s < BT; s++)
        for (size_t o = 0; o < head_bytes; o += 64)
            pf_line(v + s * kv->row_bytes + o);
}

void ATTN_ITEM(const struct pl_attn *a, const struct pl_attn_item *it) {
    const struct pl_kv *kv = it->kv;
    const uint32_t hd = a->head_dim, nq = it->n_q;
    const bool f16 = kv->type == PL_KV_F16;
    float *qb = (float *)(void *)(it->scratch + a->off_q);
    float *pb = (float *)(void *)(it->scratch + a->off_p);
    float *lb = (float *)(void *)(it->scratch + a->off_l);
    float *mb = (float *)(void *)(it->scratch + a->off_m);
    float *ab = (float *)(void *)(it->scratch + a->off_a);
    const vf scale = vf_set1(a->kq_scale);
    const float *q = it->q;

    if (f16) {
        for (size_t i = 0; i < (size_t)nq * hd; i += 16)
            vf_storeu(qb + i, vf_round_f16(vf_loadu(it->q + i)));
        q = qb;
    }
    for (uint32_t h = 0; h < nq; h++) {
        mb[h] = -INFINITY;
        vf_storeu(lb + h * BT, vf_zero());
    }
    memset(it->out, 0, (size_t)nq * hd * sizeof(float));

    const uint32_t n_blocks = (it->n_kv + BT - 1) / BT;
    const size_t head_bytes = (size_t)hd * (f16 ? 2 : 4);
    for (uint32_t b0 = 0, bi = 0; b0 < it->n_kv; b0 += BT, bi++) {
        const uint32_t n = PL_MIN(BT, it->n_kv - b0);
        if (bi + ATTN_PF_BLOCKS < n_blocks)
            prefetch_k(kv, it, bi + ATTN_PF_BLOCKS, head_bytes);
        const vmask valid = vm_first(n);
        const uint8_t *kr = pl_kv_k_block(kv, it->il, it->seq, bi) + it->k_off;
        const uint8_t *vr = pl_kv_v_block(kv, it->il, it->seq, bi) + it->head_off;

        /* Scores of every head first (slots past n hold stale values: masked to -inf),
         * then the softmax updates: short independent chains (max, exp) the core can
         * overlap across heads. */
        scores_block(q, nq, hd, kr, f16, scale, valid, pb);
        for (uint32_t h = 0; h < nq; h++) {
            const vf sc = vf_loadu(pb + h * BT);
            const float m_old = mb[h], bmax = vf_rmax(sc);
            const float m_new = bmax > m_old ? bmax : m_old;
            /* exp(m_old - m_new): 1 while the maximum holds, 0 on the first block. */
            const vf alpha = vf_exp_nonpos(vf_set1(m_old - m_new));
            const vf e = vf_maskz(valid, vf_exp_nonpos(vf_sub(sc, vf_set1(m_new))));
            vf_storeu(lb + h * BT, vf_fmadd(vf_loadu(lb + h * BT), alpha, e));
            vf_storeu(pb + h * BT, f16 ? vf_round_f16(e) : e);
            ab[h] = vf_first(alpha);
            mb[h] = m_new;
        }

        if (bi + ATTN_PF_BLOCKS < n_blocks)
            prefetch_v(kv, it, bi + ATTN_PF_BLOCKS, head_bytes);
        /* o = o * alpha + p . V. */
        pv_block(it->out, nq, hd, pb, ab, vr, kv->row_bytes, n, f16);
    }

    for (uint32_t h = 0; h < nq; h++) {
        const double sum = (double)vf_radd(vf_loadu(lb + h * BT));
        const vf inv = vf_set1((float)(1.0 / sum));
        float *o = it->out + (size_t)h * hd;
        for (uint32_t d = 0; d < hd; d += 16)
            vf_storeu(o + d, vf_mul(vf_loadu(o + d), inv));
    }
}

#endif
