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

/* For NH heads (o and p NH * hd, NH * BT floats apart) and NJ 16-float chunks of the
 * output from chunk j: o = o * alpha[h] + sum over s < n of p[h][s] * v row s. */
#define DEFINE_PV(NH, NJ)                                                                          \
    static void pv_##NH##_##NJ(float *o, uint32_t hd, const float *p, const float *alpha,          \
                               const float *v, size_t vs, uint32_t n, uint32_t j) {                \
        __m512 acc[NH][NJ];                                                                        \
        _Pragma("GCC unroll 8") for (int h = 0; h < NH; h++) {                                     \
            const __m512 al = _mm512_set1_ps(alpha[h]);                                            \
            _Pragma("GCC unroll 8") for (int c = 0; c < NJ; c++) acc[h][c] =                       \
                _mm512_mul_ps(_mm512_loadu_ps(o + (size_t)h * hd + 16 * (j + c)), al);             \
        }                                                                                          \
        for (uint32_t s = 0; s < n; s++) {                                                         \
            __m512 ps[NH];                                                                         \
            _Pragma("GCC unroll 8") for (int h = 0; h < NH; h++) ps[h] =                           \
                _mm512_set1_ps(p[h * BT + s]);                                                     \
            _Pragma("GCC unroll 8") for (int c = 0; c < NJ; c++) {                                 \
                const __m512 vc = _mm512_loadu_ps(v + s * vs + 16 * (j + c));                      \
                _Pragma("GCC unroll 8") for (int h = 0; h < NH; h++) acc[h][c] =                   \
                    _mm512_fmadd_ps(ps[h], vc, acc[h][c]);                                         \
            }                                                                                      \
        }                                                                                          \
        _Pragma("GCC unroll 8") for (int h = 0; h < NH; h++)                                       \
            _Pragma("GCC unroll 8") for (int c = 0; c < NJ; c++)                                   \
                _mm512_storeu_ps(o + (size_t)h * hd + 16 * (j + c), acc[h][c]);                    \
    }

DEFINE_PV(2, 8)
DEFINE_PV(2, 4)
DEFINE_PV(2, 1)
DEFINE_PV(1, 8)
DEFINE_PV(1, 4)
DEFINE_PV(1, 1)

/* Chunks of 8, then 4, then single, for NH heads. */
#define PV_COLS(NH, o, hd, p, alpha, v, vs, n)                                                     \
    do {                                                                                           \
        const uint32_t nc_ = (hd) / 16;                                                            \
        uint32_t j_ = 0;                                                                           \
        for (; j_ + 8 <= nc_; j_ += 8)                                                             \
            pv_##NH##_8(o, hd, p, alpha, v, vs, n, j_);                                            \
        for (; j_ + 4 <= nc_; j_ += 4)                                                             \
            pv_##NH##_4(o, hd, p, alpha, v, vs, n, j_);                                            \
        for (; j_ < nc_; j_++)                                                                     \
            pv_##NH##_1(o, hd, p, alpha, v, vs, n, j_);                                            \
    } while (0)

/* V rows [0, n) of a block at src (row_bytes apart, head_dim hd) as f32 rows hd apart in
 * dst, rows [n, BT) zero. */
static void block_to_f32(const uint8_t *src, size_t row_bytes, uint32_t n, uint32_t hd, bool f16,
                         float *dst) {
    for (uint32_t s = 0; s < n; s++) {
        const uint8_t *r = src + (size_t)s * row_bytes;
        float *d = dst + (size_t)s * hd;
        if (f16) {
            for (uint32_t i = 0; i < hd; i += 16)
                _mm512_storeu_ps(d + i, _mm512_cvtph_ps(_mm256_loadu_si256(
                                            (const __m256i *)(const void *)(r + 2 * i))));
        } else {
            memcpy(d, r, hd * sizeof(float));
        }
    }
    if (n < BT)
        memset(dst + (size_t)n * hd, 0, (size_t)(BT - n) * hd * sizeof(float));
}

/* Blocks ahead of the current one whose K and V rows are prefetched. */
#define ATTN_PF_BLOCKS 2

/* One PREFETCHT0 in asm: GCC's vectorizer drops _mm_prefetch calls from the loops it
 * vectorizes (at -O3 the loop below lost every prefetch). */
INLINE void pf_line(const void *p) {
    __asm__ volatile("prefetcht0 %0" : : "m"(*(const char *)p));
}

/* The K and V rows of this item's head in block bi, prefetched: a decode step reads the
 * cache of a layer once, after the layer's weights have streamed through the caches, so
 * the rows come from memory; their lines (a head's slice of each row, rows row_bytes
 * apart) are a stride the hardware prefetchers do not follow, and without this the loads
 * of block_to_f32 waited on each block's misses in turn. */
static void prefetch_block(const struct pl_kv *kv, const struct pl_attn_item *it, uint32_t bi,
                           size_t head_bytes) {
    const uint8_t *k = pl_kv_k_block(kv, it->il, it->seq, bi) + it->k_off;
    const uint8_t *v = pl_kv_v_block(kv, it->il, it->seq, bi) + it->head_off;
    for (size_t o = 0; o < BT * head_bytes; o += 64)
        pf_line(k + o);
    for (uint32_t s = 0; s < BT; s++)
        for (size_t o = 0; o < head_bytes; o += 64)
            pf_line(v + s * kv->row_bytes + o);
}

void pl_attn_item_avx512(const struct pl_attn *a, const struct pl_attn_item *it) {
    const struct pl_kv *kv = it->kv;
    const uint32_t hd = a->head_dim, nq = it->n_q;
    const bool f16 = kv->type == PL_KV_F16;
    float *qb = (float *)(void *)(it->scratch + a->off_q);
    float *vb = (float *)(void *)(it->scratch + a->off_v);
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
            prefetch_block(kv, it, bi + ATTN_PF_BLOCKS, head_bytes);
        const __mmask16 valid = (__mmask16)(n == BT ? 0xFFFFu : (1u << n) - 1u);
        const uint8_t *kr = pl_kv_k_block(kv, it->il, it->seq, bi) + it->k_off;
        const uint8_t *vr = pl_kv_v_block(kv, it->il, it->seq, bi) + it->head_off;
        const float *v = (const float *)(const void *)vr;
        size_t vs = kv->row_bytes / sizeof(float);

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

        /* V as f32 (F16 cache, or a partial block), then o = o * alpha + p . V, two heads
         * at a time. */
        if (f16 || n < BT) {
            block_to_f32(vr, kv->row_bytes, n, hd, f16, vb);
            v = vb;
            vs = hd;
        }
        uint32_t h = 0;
        for (; h + 2 <= nq; h += 2)
            PV_COLS(2, it->out + (size_t)h * hd, hd, pb + h * BT, ab + h, v, vs, n);
        for (; h < nq; h++)
            PV_COLS(1, it->out + (size_t)h * hd, hd, pb + h * BT, ab + h, v, vs, n);
    }

    for (uint32_t h = 0; h < nq; h++) {
        const double sum = (double)_mm512_reduce_add_ps(_mm512_loadu_ps(lb + h * BT));
        const __m512 inv = _mm512_set1_ps((float)(1.0 / sum));
        float *o = it->out + (size_t)h * hd;
        for (uint32_t d = 0; d < hd; d += 16)
            _mm512_storeu_ps(o + d, _mm512_mul_ps(_mm512_loadu_ps(o + d), inv));
    }
}
