/* SPDX-License-Identifier: MIT */
/* The integer dot products of the quantized weight types with their Q8 activations, written
 * once for both aarch64 variants and included by each of their files: quant_neon.c
 * (baseline Armv8-A) and quant_neon_dotprod.c (compiled with +dotprod). The one primitive
 * that differs, neon_dot16(), follows the compiler's target: SDOT where the file is built
 * with the dot-product extension, widening multiplies otherwise. Each block's integer
 * products are exact; the float scaling follows the scalar references (quant_ref.c) up to
 * the order of float additions. Every function here is static: each variant gets its own
 * copy, and neon_fill_dots() installs them. Private to engine/arch/arm/. */
#ifndef PL_ENGINE_QUANT_NEON_DOTS_H
#define PL_ENGINE_QUANT_NEON_DOTS_H

#include <arm_neon.h>
#include <assert.h>
#include <stdint.h>
#include <string.h>

#include "pl/engine_quant.h"
#include "pl/engine_types.h"
#include "quant_blocks.h"

/* acc's lanes += the 16 products of the int8 pairs of a and b (any grouping of pairs to
 * lanes: only lane totals are used). */
static inline int32x4_t neon_dot16(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if defined(__ARM_FEATURE_DOTPROD)
    /* SDOT: lane k += the products of bytes 4k..4k+3 */
    return vdotq_s32(acc, a, b);
#else
    /* SMULL + SADALP: the low and high halves widened to int16 separately (a product is at
     * most 128 * 128 = 2^14, a pair sum 2^15: each SADALP input fits) */
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
    return vpadalq_s16(acc, vmull_high_s8(a, b));
#endif
}

/* fp16 -> f32 by the FCVT instruction (Armv8-A base): exact, as pl_fp16_to_f32_inline. */
static inline float neon_h2f(uint16_t h) {
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

/* sum of 32 products of two int8 vectors pairs with the 32 activations at y */
static inline int32x4_t neon_dot32(int8x16_t a0, int8x16_t a1, const int8_t *y) {
    int32x4_t acc = neon_dot16(vdupq_n_s32(0), a0, vld1q_s8(y));
    return neon_dot16(acc, a1, vld1q_s8(y + 16));
}

static inline __attribute__((always_inline)) void neon_prefetch(const void *p) {
    __builtin_prefetch((const char *)p + PL_QUANT_PREFETCH_BYTES, 0, 0);
}

/* ---- Legacy 32-element blocks ---- */

/* Each block's integer products as 4 lanes; the loops below alternate two float
 * accumulators, so consecutive blocks' multiply-adds do not wait on each other. */

static inline int32x4_t neon_blk_q4_0(const struct pl_block_q4_0 *a, const int8_t *y) {
    uint8x16_t q = vld1q_u8(a->qs);
    int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F))), vdupq_n_s8(8));
    int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), vdupq_n_s8(8));
    return neon_dot32(lo, hi, y);
}

static inline int32x4_t neon_blk_q4_1(const struct pl_block_q4_1 *a, const int8_t *y) {
    uint8x16_t q = vld1q_u8(a->qs);
    int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F)));
    int8x16_t hi = vreinterpretq_s8_u8(vshrq_n_u8(q, 4));
    return neon_dot32(lo, hi, y);
}

/* The 32 unsigned 5-bit quants of a Q5 block: low nibbles (elements 0..15) in ret_lo, high
 * nibbles (16..31) in ret_hi, each with bit 4 from bit i of the little-endian word qh. */
static inline void neon_q5_quants(const uint8_t *qs, const uint8_t qh[4], uint8x16_t *ret_lo,
                                  uint8x16_t *ret_hi) {
    static const uint8_t bits[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t bit = vld1q_u8(bits), b4 = vdupq_n_u8(0x10);
    uint8x16_t hl = vcombine_u8(vdup_n_u8(qh[0]), vdup_n_u8(qh[1]));
    uint8x16_t hh = vcombine_u8(vdup_n_u8(qh[2]), vdup_n_u8(qh[3]));
    uint8x16_t q = vld1q_u8(qs);
    *ret_lo = vorrq_u8(vandq_u8(q, vdupq_n_u8(0x0F)), vandq_u8(vtstq_u8(hl, bit), b4));
    *ret_hi = vorrq_u8(vshrq_n_u8(q, 4), vandq_u8(vtstq_u8(hh, bit), b4));
}

static inline int32x4_t neon_blk_q5_0(const struct pl_block_q5_0 *a, const int8_t *y) {
    uint8x16_t lo, hi;
    neon_q5_quants(a->qs, a->qh, &lo, &hi);
    return neon_dot32(vsubq_s8(vreinterpretq_s8_u8(lo), vdupq_n_s8(16)),
                      vsubq_s8(vreinterpretq_s8_u8(hi), vdupq_n_s8(16)), y);
}

static inline int32x4_t neon_blk_q5_1(const struct pl_block_q5_1 *a, const int8_t *y) {
    uint8x16_t lo, hi;
    neon_q5_quants(a->qs, a->qh, &lo, &hi);
    return neon_dot32(vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi), y);
}

static inline int32x4_t neon_blk_q8_0(const struct pl_block_q8_0 *a, const int8_t *y) {
    return neon_dot32(vld1q_s8(a->qs), vld1q_s8(a->qs + 16), y);
}

/* acc += the lanes p of block i scaled by d(weight) * d(activation) */
#define NEON_LEGACY_STEP(acc, blk, i)                                                              \
    acc = vmlaq_n_f32(acc, vcvtq_f32_s32(blk(&a[i], b[i].qs)), neon_h2f(a[i].d) * neon_h2f(b[i].d))

/* A symmetric type (no minimum) against Q8_0. */
#define NEON_DEF_DOT_SYM(name, wtype, blk)                                                         \
    static float name(int64_t n, const void *restrict w, const void *restrict x) {                 \
        const struct wtype *a = w;                                                                 \
        const struct pl_block_q8_0 *b = x;                                                         \
        float32x4_t acc0 = vdupq_n_f32(0.f), acc1 = vdupq_n_f32(0.f);                              \
        int64_t nb = n / PL_QK8_0, i = 0;                                                          \
        assert(n % PL_QK8_0 == 0);                                                                 \
        for (; i + 2 <= nb; i += 2) {                                                              \
            neon_prefetch(&a[i]);                                                                  \
            NEON_LEGACY_STEP(acc0, blk, i);                                                        \
            NEON_LEGACY_STEP(acc1, blk, i + 1);                                                    \
        }                                                                                          \
        if (i < nb)                                                                                \
            NEON_LEGACY_STEP(acc0, blk, i);                                                        \
        return vaddvq_f32(vaddq_f32(acc0, acc1));                                                  \
    }

/* A type with a minimum m against Q8_1: m times the block's s = d * sum(qs). */
#define NEON_DEF_DOT_MIN(name, wtype, blk)                                                         \
    static float name(int64_t n, const void *restrict w, const void *restrict x) {                 \
        const struct wtype *a = w;                                                                 \
        const struct pl_block_q8_1 *b = x;                                                         \
        float32x4_t acc0 = vdupq_n_f32(0.f), acc1 = vdupq_n_f32(0.f);                              \
        float summ = 0.f;                                                                          \
        int64_t nb = n / PL_QK8_1, i = 0;                                                          \
        assert(n % PL_QK8_1 == 0);                                                                 \
        for (; i + 2 <= nb; i += 2) {                                                              \
            neon_prefetch(&a[i]);                                                                  \
            NEON_LEGACY_STEP(acc0, blk, i);                                                        \
            NEON_LEGACY_STEP(acc1, blk, i + 1);                                                    \
            summ +=                                                                                \
                neon_h2f(a[i].m) * neon_h2f(b[i].s) + neon_h2f(a[i + 1].m) * neon_h2f(b[i + 1].s); \
        }                                                                                          \
        if (i < nb) {                                                                              \
            NEON_LEGACY_STEP(acc0, blk, i);                                                        \
            summ += neon_h2f(a[i].m) * neon_h2f(b[i].s);                                           \
        }                                                                                          \
        return vaddvq_f32(vaddq_f32(acc0, acc1)) + summ;                                           \
    }

NEON_DEF_DOT_SYM(neon_vec_dot_q4_0, pl_block_q4_0, neon_blk_q4_0)
NEON_DEF_DOT_SYM(neon_vec_dot_q5_0, pl_block_q5_0, neon_blk_q5_0)
NEON_DEF_DOT_SYM(neon_vec_dot_q8_0, pl_block_q8_0, neon_blk_q8_0)
NEON_DEF_DOT_MIN(neon_vec_dot_q4_1, pl_block_q4_1, neon_blk_q4_1)
NEON_DEF_DOT_MIN(neon_vec_dot_q5_1, pl_block_q5_1, neon_blk_q5_1)

/* ---- K-quants with Q8_K ---- */

/* sum_j mins[j] * bsums[j] over the 16 sub-blocks of 16 (Q2_K's mins) */
static inline int32_t neon_mins16(uint8x16_t mins, const int16_t *bsums) {
    int16x8_t m0 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mins)));
    int16x8_t m1 = vreinterpretq_s16_u16(vmovl_high_u8(mins));
    int16x8_t b0 = vld1q_s16(bsums), b1 = vld1q_s16(bsums + 8);
    int32x4_t s = vmull_s16(vget_low_s16(b0), vget_low_s16(m0));
    s = vmlal_high_s16(s, b0, m0);
    s = vmlal_s16(s, vget_low_s16(b1), vget_low_s16(m1));
    s = vmlal_high_s16(s, b1, m1);
    return vaddvq_s32(s);
}

static float neon_vec_dot_q2_K(int64_t n, const void *restrict w, const void *restrict x) {
    const struct pl_block_q2_K *a = w;
    const struct pl_block_q8_K *b = x;
    const uint8x16_t m2 = vdupq_n_u8(3), m4 = vdupq_n_u8(0x0F);
    float sum = 0.f;
    assert(n % PL_QK_K == 0);
    for (int64_t i = 0; i < n / PL_QK_K; i++) {
        uint8x16_t sc = vld1q_u8(a[i].scales);
        int32_t summ = neon_mins16(vshrq_n_u8(sc, 4), b[i].bsums);
        uint8_t scale[16];
        vst1q_u8(scale, vandq_u8(sc, m4));
        int32x4_t sumi = vdupq_n_s32(0);
        neon_prefetch(&a[i]);
        for (int h = 0; h < 2; h++) {
            uint8x16_t q0 = vld1q_u8(a[i].qs + 32 * h), q1 = vld1q_u8(a[i].qs + 32 * h + 16);
            const int8_t *y = b[i].qs + 128 * h;
            for (int s = 0; s < 4; s++, y += 32) {
                int8x16_t sh = vdupq_n_s8((int8_t)(-2 * s));
                int8x16_t v0 = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(q0, sh), m2));
                int8x16_t v1 = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(q1, sh), m2));
                int j = 8 * h + 2 * s;
                sumi = vmlaq_n_s32(sumi, neon_dot16(vdupq_n_s32(0), v0, vld1q_s8(y)), scale[j]);
                sumi = vmlaq_n_s32(sumi, neon_dot16(vdupq_n_s32(0), v1, vld1q_s8(y + 16)),
                                   scale[j + 1]);
            }
        }
        float dall = b[i].d * neon_h2f(a[i].d);
        float dmin = b[i].d * neon_h2f(a[i].dmin);
        sum += dall * (float)vaddvq_s32(sumi) - dmin * (float)summ;
    }
    return sum;
}

static float neon_vec_dot_q3_K(int64_t n, const void *restrict w, const void *restrict x) {
    const struct pl_block_q3_K *a = w;
    const struct pl_block_q8_K *b = x;
    const uint8x16_t m2 = vdupq_n_u8(3), four = vdupq_n_u8(4);
    float sum = 0.f;
    assert(n % PL_QK_K == 0);
    for (int64_t i = 0; i < n / PL_QK_K; i++) {
        int32_t scale[16];
        for (int j = 0; j < 16; j++)
            scale[j] = pl_q3k_scale(j, a[i].scales) - 32;
        uint8x16_t hm0 = vld1q_u8(a[i].hmask), hm1 = vld1q_u8(a[i].hmask + 16);
        int32x4_t sumi = vdupq_n_s32(0);
        neon_prefetch(&a[i]);
        for (int h = 0; h < 2; h++) {
            uint8x16_t q0 = vld1q_u8(a[i].qs + 32 * h), q1 = vld1q_u8(a[i].qs + 32 * h + 16);
            const int8_t *y = b[i].qs + 128 * h;
            for (int s = 0; s < 4; s++, y += 32) {
                int8x16_t sh = vdupq_n_s8((int8_t)(-2 * s));
                uint8x16_t bit = vdupq_n_u8((uint8_t)(1u << (4 * h + s)));
                /* q = low 2 bits, minus 4 where the hmask bit is clear */
                uint8x16_t l0 = vandq_u8(vshlq_u8(q0, sh), m2);
                uint8x16_t l1 = vandq_u8(vshlq_u8(q1, sh), m2);
                int8x16_t v0 =
                    vreinterpretq_s8_u8(vsubq_u8(l0, vbicq_u8(four, vtstq_u8(hm0, bit))));
                int8x16_t v1 =
                    vreinterpretq_s8_u8(vsubq_u8(l1, vbicq_u8(four, vtstq_u8(hm1, bit))));
                int j = 8 * h + 2 * s;
                sumi = vmlaq_n_s32(sumi, neon_dot16(vdupq_n_s32(0), v0, vld1q_s8(y)), scale[j]);
                sumi = vmlaq_n_s32(sumi, neon_dot16(vdupq_n_s32(0), v1, vld1q_s8(y + 16)),
                                   scale[j + 1]);
            }
        }
        sum += (neon_h2f(a[i].d) * b[i].d) * (float)vaddvq_s32(sumi);
    }
    return sum;
}

/* Q4_K/Q5_K: the 8 scales and the mins' part sum_j m_j * (bsums[2j] + bsums[2j+1]). */
static inline int32_t neon_q45_scales(const uint8_t *packed, const int16_t *bsums,
                                      int32_t scale[8]) {
    uint8_t mins[8];
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        pl_q4k_scale_min(j, packed, &sc, &m);
        scale[j] = sc;
        mins[j] = m;
    }
    int16x8_t bs = vpaddq_s16(vld1q_s16(bsums), vld1q_s16(bsums + 8));
    int16x8_t mn = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mins)));
    int32x4_t s = vmull_s16(vget_low_s16(bs), vget_low_s16(mn));
    s = vmlal_high_s16(s, bs, mn);
    return vaddvq_s32(s);
}

static float neon_vec_dot_q4_K(int64_t n, const void *restrict w, const void *restrict x) {
    const struct pl_block_q4_K *a = w;
    const struct pl_block_q8_K *b = x;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    float sum = 0.f;
    assert(n % PL_QK_K == 0);
    for (int64_t i = 0; i < n / PL_QK_K; i++) {
        int32_t scale[8];
        int32_t summ = neon_q45_scales(a[i].scales, b[i].bsums, scale);
        int32x4_t sumi = vdupq_n_s32(0);
        const int8_t *y = b[i].qs;
        neon_prefetch(&a[i]);
        for (int g = 0; g < 4; g++, y += 64) {
            uint8x16_t q0 = vld1q_u8(a[i].qs + 32 * g), q1 = vld1q_u8(a[i].qs + 32 * g + 16);
            int8x16_t l0 = vreinterpretq_s8_u8(vandq_u8(q0, m4));
            int8x16_t l1 = vreinterpretq_s8_u8(vandq_u8(q1, m4));
            int8x16_t h0 = vreinterpretq_s8_u8(vshrq_n_u8(q0, 4));
            int8x16_t h1 = vreinterpretq_s8_u8(vshrq_n_u8(q1, 4));
            sumi = vmlaq_n_s32(sumi, neon_dot32(l0, l1, y), scale[2 * g]);
            sumi = vmlaq_n_s32(sumi, neon_dot32(h0, h1, y + 32), scale[2 * g + 1]);
        }
        float d = neon_h2f(a[i].d) * b[i].d, dmin = neon_h2f(a[i].dmin) * b[i].d;
        sum += d * (float)vaddvq_s32(sumi) - dmin * (float)summ;
    }
    return sum;
}

static float neon_vec_dot_q5_K(int64_t n, const void *restrict w, const void *restrict x) {
    const struct pl_block_q5_K *a = w;
    const struct pl_block_q8_K *b = x;
    const uint8x16_t m4 = vdupq_n_u8(0x0F), b4 = vdupq_n_u8(0x10);
    float sum = 0.f;
    assert(n % PL_QK_K == 0);
    for (int64_t i = 0; i < n / PL_QK_K; i++) {
        int32_t scale[8];
        int32_t summ = neon_q45_scales(a[i].scales, b[i].bsums, scale);
        uint8x16_t qh0 = vld1q_u8(a[i].qh), qh1 = vld1q_u8(a[i].qh + 16);
        int32x4_t sumi = vdupq_n_s32(0);
        const int8_t *y = b[i].qs;
        neon_prefetch(&a[i]);
        for (int g = 0; g < 4; g++, y += 64) {
            uint8x16_t q0 = vld1q_u8(a[i].qs + 32 * g), q1 = vld1q_u8(a[i].qs + 32 * g + 16);
            uint8x16_t bl = vdupq_n_u8((uint8_t)(1u << (2 * g)));
            uint8x16_t bh = vdupq_n_u8((uint8_t)(2u << (2 * g)));
            int8x16_t l0 =
                vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q0, m4), vandq_u8(vtstq_u8(qh0, bl), b4)));
            int8x16_t l1 =
                vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q1, m4), vandq_u8(vtstq_u8(qh1, bl), b4)));
            int8x16_t h0 =
                vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(q0, 4), vandq_u8(vtstq_u8(qh0, bh), b4)));
            int8x16_t h1 =
                vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(q1, 4), vandq_u8(vtstq_u8(qh1, bh), b4)));
            sumi = vmlaq_n_s32(sumi, neon_dot32(l0, l1, y), scale[2 * g]);
            sumi = vmlaq_n_s32(sumi, neon_dot32(h0, h1, y + 32), scale[2 * g + 1]);
        }
        float d = neon_h2f(a[i].d) * b[i].d, dmin = neon_h2f(a[i].dmin) * b[i].d;
        sum += d * (float)vaddvq_s32(sumi) - dmin * (float)summ;
    }
    return sum;
}

static float neon_vec_dot_q6_K(int64_t n, const void *restrict w, const void *restrict x) {
    const struct pl_block_q6_K *a = w;
    const struct pl_block_q8_K *b = x;
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m30 = vdupq_n_u8(0x30);
    const int8x16_t s32 = vdupq_n_s8(32);
    float sum = 0.f;
    assert(n % PL_QK_K == 0);
    for (int64_t i = 0; i < n / PL_QK_K; i++) {
        const int8_t *sc = a[i].scales;
        int32x4_t sumi = vdupq_n_s32(0);
        neon_prefetch(&a[i]);
        for (int h = 0; h < 2; h++, sc += 8) {
            const uint8_t *ql = a[i].ql + 64 * h, *qh = a[i].qh + 32 * h;
            const int8_t *y = b[i].qs + 128 * h;
            uint8x16_t l0 = vld1q_u8(ql), l1 = vld1q_u8(ql + 16);
            uint8x16_t l2 = vld1q_u8(ql + 32), l3 = vld1q_u8(ql + 48);
            uint8x16_t h0 = vld1q_u8(qh), h1 = vld1q_u8(qh + 16);
            uint8x16_t u[8];
            /* 32-element chunk s: low nibbles of ql[0..31] (s 0), of ql[32..63] (s 1),
             * then their high nibbles (s 2, 3); top bits 2s..2s+1 of qh as 0x30 */
            u[0] = vorrq_u8(vandq_u8(l0, m4), vandq_u8(vshlq_n_u8(h0, 4), m30));
            u[1] = vorrq_u8(vandq_u8(l1, m4), vandq_u8(vshlq_n_u8(h1, 4), m30));
            u[2] = vorrq_u8(vandq_u8(l2, m4), vandq_u8(vshlq_n_u8(h0, 2), m30));
            u[3] = vorrq_u8(vandq_u8(l3, m4), vandq_u8(vshlq_n_u8(h1, 2), m30));
            u[4] = vorrq_u8(vshrq_n_u8(l0, 4), vandq_u8(h0, m30));
            u[5] = vorrq_u8(vshrq_n_u8(l1, 4), vandq_u8(h1, m30));
            u[6] = vorrq_u8(vshrq_n_u8(l2, 4), vandq_u8(vshrq_n_u8(h0, 2), m30));
            u[7] = vorrq_u8(vshrq_n_u8(l3, 4), vandq_u8(vshrq_n_u8(h1, 2), m30));
            for (int k = 0; k < 8; k++) {
                int8x16_t v = vsubq_s8(vreinterpretq_s8_u8(u[k]), s32);
                int32x4_t p = neon_dot16(vdupq_n_s32(0), v, vld1q_s8(y + 16 * k));
                sumi = vmlaq_n_s32(sumi, p, sc[k]);
            }
        }
        sum += (neon_h2f(a[i].d) * b[i].d) * (float)vaddvq_s32(sumi);
    }
    return sum;
}

/* Install the integer dot products of this variant. */
static void neon_fill_dots(struct pl_quant_kernels table[_PL_GGML_TYPE_MAX]) {
    table[PL_GGML_TYPE_Q4_0].vec_dot = neon_vec_dot_q4_0;
    table[PL_GGML_TYPE_Q4_1].vec_dot = neon_vec_dot_q4_1;
    table[PL_GGML_TYPE_Q5_0].vec_dot = neon_vec_dot_q5_0;
    table[PL_GGML_TYPE_Q5_1].vec_dot = neon_vec_dot_q5_1;
    table[PL_GGML_TYPE_Q8_0].vec_dot = neon_vec_dot_q8_0;
    table[PL_GGML_TYPE_Q2_K].vec_dot = neon_vec_dot_q2_K;
    table[PL_GGML_TYPE_Q3_K].vec_dot = neon_vec_dot_q3_K;
    table[PL_GGML_TYPE_Q4_K].vec_dot = neon_vec_dot_q4_K;
    table[PL_GGML_TYPE_Q5_K].vec_dot = neon_vec_dot_q5_K;
    table[PL_GGML_TYPE_Q6_K].vec_dot = neon_vec_dot_q6_K;
}

#endif
