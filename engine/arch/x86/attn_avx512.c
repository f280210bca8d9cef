/* SPDX-License-Identifier: MIT */
/* Attention with AVX-512 (see engine/src/attn.h): one pass over the K and V blocks of a
 * group of query heads with an online softmax. K is dimension-major in the cache (kv.h): a
 * block's 16 slots of one dimension are one vector, so a head's 16 scores are a sum of
 * head_dim vector FMAs with its broadcast query element, each K vector converted (F16C)
 * once in registers for all the group's heads. With an F16 cache each V block is converted
 * to f32 once into scratch and used by every head; an F32 cache is read in place. The
 * product with V takes two heads at a time so each V row chunk loaded serves both.
 * Numerics as the scalar kernel in attn.c: query and probabilities rounded to f16 with an
 * F16 cache (here by the hardware conversions, round to nearest even), sums per lane;
 * exp() is vexp_avx512.h's polynomial, also for the rescale factor, so the update has no
 * branch and no libm call. The K and V of the block two ahead are prefetched. Compiled with
 * -mavx512f -mf16c -mfma; attn.c calls it only on CPUs that have them, head_dim % 16 == 0. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "attn.h"
#include "kv.h"
#include "pl/engine_model.h"
#include "pl/pl_util.h"
#include "vexp_avx512.h"

#define BT PL_KV_BLOCK_TOKENS
#define INLINE static inline __attribute__((always_inline))

_Static_assert(PL_KV_BLOCK_TOKENS == 16, "a block's scores fill one 16-lane register");

INLINE __m512 round_f16(__m512 x) {
    return _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/* The scores of NH heads with one block: lane s of sc[h] = q[h] . K slot s (q[h] hd floats
 * from q[h - 1]), K dimension-major (kv.h) at k, f16 or f32. Dimension i's 16 slots are one
 * vector, converted once for the NH heads; each head sums over the dimensions in S
 * interleaved chains (NH x S = 8 independent FMA chains, enough to fill both FMA pipes),
 * added at the end. */
INLINE void scores_nh(const float *q, uint32_t hd, const uint8_t *k, __m512 *sc, const int NH,
                      const int S, const bool F16) {
    __m512 acc[8][8];
#pragma GCC unroll 8
    for (int h = 0; h < NH; h++)
#pragma GCC unroll 8
        for (int u = 0; u < S; u++)
            acc[h][u] = _mm512_setzero_ps();
    for (uint32_t i = 0; i < hd; i += (uint32_t)S) {
#pragma GCC unroll 8
        for (int u = 0; u < S; u++) {
            const size_t e = (size_t)(i + (uint32_t)u) * BT;
            const __m512 kv = F16 ? _mm512_cvtph_ps(_mm256_loadu_si256(
                                        (const __m256i *)(const void *)(k + 2 * e)))
                                  : _mm512_loadu_ps((const float *)(const void *)(k + 4 * e));
#pragma GCC unroll 8
            for (int h = 0; h < NH; h++)
                acc[h][u] = _mm512_fmadd_ps(_mm512_set1_ps(q[(size_t)h * hd + i + (uint32_t)u]), kv,
                                            acc[h][u]);
        }
    }
#pragma GCC unroll 8
    for (int h = 0; h < NH; h++) {
        for (int w = S / 2; w >= 1; w /= 2)
            for (int u = 0; u < w; u++)
                acc[h][u] = _mm512_add_ps(acc[h][u], acc[h][u + w]);
        sc[h] = acc[h][0];
    }
}

/* Scores of the nq heads of q with the block's K at k, into pb (BT floats a head), masked
 * to the valid slots (-inf beyond) and scaled. Heads in runs of 8, 4, 2, 1. */
static void scores_block(const float *q, uint32_t nq, uint32_t hd, const uint8_t *k, bool f16,
                         __m512 scale, __mmask16 valid, float *pb) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    uint32_t h = 0;
    while (h < nq) {
        __m512 sc[8];
        const uint32_t left = nq - h, nh = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
        const float *qh = q + (size_t)h * hd;
        if (f16) {
            if (nh == 8)
                scores_nh(qh, hd, k, sc, 8, 1, true);
            else if (nh == 4)
                scores_nh(qh, hd, k, sc, 4, 2, true);
            else if (nh == 2)
                scores_nh(qh, hd, k, sc, 2, 4, true);
            else
                scores_nh(qh, hd, k, sc, 1, 8, true);
        } else {
            if (nh == 8)
                scores_nh(qh, hd, k, sc, 8, 1, false);
            else if (nh == 4)
                scores_nh(qh, hd, k, sc, 4, 2, false);
            else if (nh == 2)
                scores_nh(qh, hd, k, sc, 2, 4, false);
            else
                scores_nh(qh, hd, k, sc, 1, 8, false);
        }
        for (uint32_t j = 0; j < nh; j++)
            _mm512_storeu_ps(pb + (h + j) * BT,
                             _mm512_mask_blend_ps(valid, ninf, _mm512_mul_ps(sc[j], scale)));
        h += nh;
    }
}

/* o = o * alpha[h] + sum over slots s < n of p[h][s] x V row s, for NH heads (o and p NH
 * x hd, NH x BT floats apart) and NJ 16-float chunks of the rows from chunk j; V rows vs
 * bytes apart at v, f16 or f32. Each V chunk is loaded (and converted) once for the NH heads,
 * straight from the cache: a block converted into scratch first made the cache's loads wait
 * on the scratch's stores (4 KiB of f32 stores cover every address's low 12 bits, which the
 * core compares to order loads after stores). NH x NJ <= 16 accumulators. */
INLINE void pv_nh(float *o, uint32_t hd, const float *p, const float *alpha, const uint8_t *v,
                  size_t vs, uint32_t n, uint32_t j, const int NH, const int NJ, const bool F16) {
    __m512 acc[8][8];
#pragma GCC unroll 8
    for (int h = 0; h < NH; h++) {
        const __m512 al = _mm512_set1_ps(alpha[h]);
#pragma GCC unroll 8
        for (int c = 0; c < NJ; c++)
            acc[h][c] = _mm512_mul_ps(_mm512_loadu_ps(o + (size_t)h * hd + 16 * (j + c)), al);
    }
    for (uint32_t s = 0; s < n; s++) {
        const uint8_t *row = v + s * vs;
        __m512 vc[8];
#pragma GCC unroll 8
        for (int c = 0; c < NJ; c++)
            vc[c] = F16 ? _mm512_cvtph_ps(_mm256_loadu_si256(
                              (const __m256i *)(const void *)(row + 2 * 16 * (j + c))))
                        : _mm512_loadu_ps((const float *)(const void *)(row + 4 * 16 * (j + c)));
#pragma GCC unroll 8
        for (int h = 0; h < NH; h++) {
            const __m512 ps = _mm512_set1_ps(p[h * BT + s]);
#pragma GCC unroll 8
            for (int c = 0; c < NJ; c++)
                acc[h][c] = _mm512_fmadd_ps(ps, vc[c], acc[h][c]);
        }
    }
#pragma GCC unroll 8
    for (int h = 0; h < NH; h++)
#pragma GCC unroll 8
        for (int c = 0; c < NJ; c++)
            _mm512_storeu_ps(o + (size_t)h * hd + 16 * (j + c), acc[h][c]);
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

/* The product with V of the nq heads: runs of 8 heads (2 chunks at a time), 4 (4), 2 (8),
 * 1 (8). */
static void pv_block(float *out, uint32_t nq, uint32_t hd, const float *pb, const float *ab,
                     const uint8_t *v, size_t vs, uint32_t n, bool f16) {
    uint32_t h = 0;
    while (h < nq) {
        const uint32_t left = nq - h, nh = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
        float *o = out + (size_t)h * hd;
        const float *p = pb + h * BT, *al = ab + h;
        if (f16) {
            if (nh == 8)
                pv_heads(o, hd, p, al, v, vs, n, 8, 2, true);
            else if (nh == 4)
                pv_heads(o, hd, p, al, v, vs, n, 4, 4, true);
            else if (nh == 2)
                pv_heads(o, hd, p, al, v, vs, n, 2, 8, true);
            else
                pv_heads(o, hd, p, al, v, vs, n, 1, 8, true);
        } else {
            if (nh == 8)
                pv_heads(o, hd, p, al, v, vs, n, 8, 2, false);
            else if (nh == 4)
                pv_heads(o, hd, p, al, v, vs, n, 4, 4, false);
            else if (nh == 2)
                pv_heads(o, hd, p, al, v, vs, n, 2, 8, false);
            else
                pv_heads(o, hd, p, al, v, vs, n, 1, 8, false);
        }
        h += nh;
    }
}

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
 * waited for free miss buffers (attention's share of a 1-thread decode at ~570 positions,
 * perf: 6.1-6.4% with one burst, 5.3-5.5% split; 4 blocks ahead instead of 2: the same). */
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

void pl_attn_item_avx512(const struct pl_attn *a, const struct pl_attn_item *it) {
    const struct pl_kv *kv = it->kv;
    const uint32_t hd = a->head_dim, nq = it->n_q;
    const bool f16 = kv->type == PL_KV_F16;
    float *qb = (float *)(void *)(it->scratch + a->off_q);
    float *pb = (float *)(void *)(it->scratch + a->off_p);
    float *lb = (float *)(void *)(it->scratch + a->off_l);
    float *mb = (float *)(void *)(it->scratch + a->off_m);
    float *ab = (float *)(void *)(it->scratch + a->off_a);
    const __m512 scale = _mm512_set1_ps(a->kq_scale);
    const float *q = it->q;

    if (f16) {
        for (size_t i = 0; i < (size_t)nq * hd; i += 16)
            _mm512_storeu_ps(qb + i, round_f16(_mm512_loadu_ps(it->q + i)));
        q = qb;
    }
    for (uint32_t h = 0; h < nq; h++) {
        mb[h] = -INFINITY;
        _mm512_storeu_ps(lb + h * BT, _mm512_setzero_ps());
    }
    memset(it->out, 0, (size_t)nq * hd * sizeof(float));

    const uint32_t n_blocks = (it->n_kv + BT - 1) / BT;
    const size_t head_bytes = (size_t)hd * (f16 ? 2 : 4);
    for (uint32_t b0 = 0, bi = 0; b0 < it->n_kv; b0 += BT, bi++) {
        const uint32_t n = PL_MIN(BT, it->n_kv - b0);
        if (bi + ATTN_PF_BLOCKS < n_blocks)
            prefetch_k(kv, it, bi + ATTN_PF_BLOCKS, head_bytes);
        const __mmask16 valid = (__mmask16)(n == BT ? 0xFFFFu : (1u << n) - 1u);
        const uint8_t *kr = pl_kv_k_block(kv, it->il, it->seq, bi) + it->k_off;
        const uint8_t *vr = pl_kv_v_block(kv, it->il, it->seq, bi) + it->head_off;

        /* Scores of every head first (slots past n hold stale values: masked to -inf),
         * then the softmax updates: short independent chains (max, exp) the core can
         * overlap across heads. */
        scores_block(q, nq, hd, kr, f16, scale, valid, pb);
        for (uint32_t h = 0; h < nq; h++) {
            const __m512 sc = _mm512_loadu_ps(pb + h * BT);
            const float m_old = mb[h], bmax = _mm512_reduce_max_ps(sc);
            const float m_new = bmax > m_old ? bmax : m_old;
            /* exp(m_old - m_new): 1 while the maximum holds, 0 on the first block. */
            const __m512 alpha = pl_vexp_nonpos(_mm512_set1_ps(m_old - m_new));
            const __m512 e = _mm512_maskz_mov_ps(
                valid, pl_vexp_nonpos(_mm512_sub_ps(sc, _mm512_set1_ps(m_new))));
            _mm512_storeu_ps(lb + h * BT, _mm512_fmadd_ps(_mm512_loadu_ps(lb + h * BT), alpha, e));
            _mm512_storeu_ps(pb + h * BT, f16 ? round_f16(e) : e);
            ab[h] = _mm512_cvtss_f32(alpha);
            mb[h] = m_new;
        }

        if (bi + ATTN_PF_BLOCKS < n_blocks)
            prefetch_v(kv, it, bi + ATTN_PF_BLOCKS, head_bytes);
        /* o = o * alpha + p . V. */
        pv_block(it->out, nq, hd, pb, ab, vr, kv->row_bytes, n, f16);
    }

    for (uint32_t h = 0; h < nq; h++) {
        const double sum = (double)_mm512_reduce_add_ps(_mm512_loadu_ps(lb + h * BT));
        const __m512 inv = _mm512_set1_ps((float)(1.0 / sum));
        float *o = it->out + (size_t)h * hd;
        for (uint32_t d = 0; d < hd; d += 16)
            _mm512_storeu_ps(o + d, _mm512_mul_ps(_mm512_loadu_ps(o + d), inv));
    }
}
