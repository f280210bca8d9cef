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
#include "quant_dotn.h"

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

/* ---- Dot products of NT tokens ----
 * Every kernel below takes NT activation rows (1 .. PL_QUANT_DOTN_MAX, a constant after
 * inlining) against one weight row: the weights are unpacked once per block for all of them,
 * and per token the operations are the same in the same order, so vec_dot (NT = 1) and
 * vec_dotn give a token the same bits. Prompts (no tiled kernels on aarch64) and the decode
 * step of several sessions take the tokens 8 at a time (matmul.c). */

#define NEON_NT_INLINE static inline __attribute__((always_inline))

/* ---- Legacy 32-element blocks ---- */

/* A block's 32 quants as signed bytes (elements 0..15, 16..31), offsets applied. */
struct neon_b32 {
    int8x16_t a, b;
};

static inline struct neon_b32 neon_u_q4_0(const struct pl_block_q4_0 *a) {
    uint8x16_t q = vld1q_u8(a->qs);
    return (struct neon_b32){
        vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F))), vdupq_n_s8(8)),
        vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), vdupq_n_s8(8))};
}

static inline struct neon_b32 neon_u_q4_1(const struct pl_block_q4_1 *a) {
    uint8x16_t q = vld1q_u8(a->qs);
    return (struct neon_b32){vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F))),
                             vreinterpretq_s8_u8(vshrq_n_u8(q, 4))};
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

static inline struct neon_b32 neon_u_q5_0(const struct pl_block_q5_0 *a) {
    uint8x16_t lo, hi;
    neon_q5_quants(a->qs, a->qh, &lo, &hi);
    return (struct neon_b32){vsubq_s8(vreinterpretq_s8_u8(lo), vdupq_n_s8(16)),
                             vsubq_s8(vreinterpretq_s8_u8(hi), vdupq_n_s8(16))};
}

static inline struct neon_b32 neon_u_q5_1(const struct pl_block_q5_1 *a) {
    uint8x16_t lo, hi;
    neon_q5_quants(a->qs, a->qh, &lo, &hi);
    return (struct neon_b32){vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi)};
}

static inline struct neon_b32 neon_u_q8_0(const struct pl_block_q8_0 *a) {
    return (struct neon_b32){vld1q_s8(a->qs), vld1q_s8(a->qs + 16)};
}

/* acc += the products of unpacked block u with the activation block bx, scaled by dw x its d */
#define NEON_B32_STEP(acc, u, dw, bx)                                                              \
    acc = vmlaq_n_f32(acc, vcvtq_f32_s32(neon_dot32((u).a, (u).b, (bx).qs)), (dw)*neon_h2f((bx).d))

/* NT tokens of a 32-element type against Q8_0 (MIN 0) or, with a minimum m, against Q8_1
 * (MIN 1: plus m times each block's s = d * sum(qs), the term MT(weight block, activation
 * block)). Per token two float accumulators alternate over the blocks, so consecutive
 * blocks' multiply-adds do not wait on each other. */
#define NEON_DEF_DOT32(name, wtype, xtype, unpack, MIN, MT)                                        \
    NEON_NT_INLINE void name##_n(int64_t n, const void *restrict w, const void *const *x,          \
                                 float *out, const int NT) {                                       \
        const struct wtype *a = w;                                                                 \
        const struct xtype *b[PL_QUANT_DOTN_MAX];                                                  \
        float32x4_t acc0[PL_QUANT_DOTN_MAX], acc1[PL_QUANT_DOTN_MAX];                              \
        float summ[PL_QUANT_DOTN_MAX];                                                             \
        for (int t = 0; t < NT; t++) {                                                             \
            b[t] = x[t];                                                                           \
            acc0[t] = acc1[t] = vdupq_n_f32(0.f);                                                  \
            summ[t] = 0.f;                                                                         \
        }                                                                                          \
        const int64_t nb = n / 32;                                                                 \
        int64_t i = 0;                                                                             \
        assert(n % 32 == 0);                                                                       \
        for (; i + 2 <= nb; i += 2) {                                                              \
            neon_prefetch(&a[i]);                                                                  \
            const struct neon_b32 u0 = unpack(&a[i]), u1 = unpack(&a[i + 1]);                      \
            const float d0 = neon_h2f(a[i].d), d1 = neon_h2f(a[i + 1].d);                          \
            for (int t = 0; t < NT; t++) {                                                         \
                NEON_B32_STEP(acc0[t], u0, d0, b[t][i]);                                           \
                NEON_B32_STEP(acc1[t], u1, d1, b[t][i + 1]);                                       \
                if (MIN)                                                                           \
                    summ[t] += MT(a[i], b[t][i]) + MT(a[i + 1], b[t][i + 1]);                      \
            }                                                                                      \
        }                                                                                          \
        if (i < nb) {                                                                              \
            const struct neon_b32 u0 = unpack(&a[i]);                                              \
            const float d0 = neon_h2f(a[i].d);                                                     \
            for (int t = 0; t < NT; t++) {                                                         \
                NEON_B32_STEP(acc0[t], u0, d0, b[t][i]);                                           \
                if (MIN)                                                                           \
                    summ[t] += MT(a[i], b[t][i]);                                                  \
            }                                                                                      \
        }                                                                                          \
        for (int t = 0; t < NT; t++) {                                                             \
            const float s = vaddvq_f32(vaddq_f32(acc0[t], acc1[t]));                               \
            out[t] = MIN ? s + summ[t] : s;                                                        \
        }                                                                                          \
    }
/* m x s of a block (the MIN types'), and the symmetric types' stand-in (never evaluated) */
#define NEON_MIN_OF(wb, xb) (neon_h2f((wb).m) * neon_h2f((xb).s))
#define NEON_NO_MIN(wb, xb) 0.f
NEON_DEF_DOT32(neon_q4_0, pl_block_q4_0, pl_block_q8_0, neon_u_q4_0, 0, NEON_NO_MIN)
NEON_DEF_DOT32(neon_q4_1, pl_block_q4_1, pl_block_q8_1, neon_u_q4_1, 1, NEON_MIN_OF)
NEON_DEF_DOT32(neon_q5_0, pl_block_q5_0, pl_block_q8_0, neon_u_q5_0, 0, NEON_NO_MIN)
NEON_DEF_DOT32(neon_q5_1, pl_block_q5_1, pl_block_q8_1, neon_u_q5_1, 1, NEON_MIN_OF)
NEON_DEF_DOT32(neon_q8_0, pl_block_q8_0, pl_block_q8_0, neon_u_q8_0, 0, NEON_NO_MIN)

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

/* Per-token state of the K-quant kernels: the activation rows, the row sums, the integer
 * sums of the current super-block. */
#define NEON_K_BEGIN                                                                               \
    const struct pl_block_q8_K *b[PL_QUANT_DOTN_MAX];                                              \
    float sum[PL_QUANT_DOTN_MAX];                                                                  \
    int32x4_t sumi[PL_QUANT_DOTN_MAX];                                                             \
    for (int t = 0; t < NT; t++) {                                                                 \
        b[t] = x[t];                                                                               \
        sum[t] = 0.f;                                                                              \
    }                                                                                              \
    assert(n % PL_QK_K == 0)
#define NEON_K_END                                                                                 \
    for (int t = 0; t < NT; t++)                                                                   \
    out[t] = sum[t]

NEON_NT_INLINE void neon_q2_K_n(int64_t n, const void *restrict w, const void *const *x, float *out,
                                const int NT) {
    const struct pl_block_q2_K *a = w;
    const uint8x16_t m2 = vdupq_n_u8(3), m4 = vdupq_n_u8(0x0F);
    NEON_K_BEGIN;
    for (int64_t i = 0; i < n / PL_QK_K; i++) {
        uint8x16_t sc = vld1q_u8(a[i].scales);
        const uint8x16_t mins = vshrq_n_u8(sc, 4);
        uint8_t scale[16];
        vst1q_u8(scale, vandq_u8(sc, m4));
        for (int t = 0; t < NT; t++)
            sumi[t] = vdupq_n_s32(0);
        neon_prefetch(&a[i]);
        for (int h = 0; h < 2; h++) {
            uint8x16_t q0 = vld1q_u8(a[i].qs + 32 * h), q1 = vld1q_u8(a[i].qs + 32 * h + 16);
            for (int s = 0; s < 4; s++) {
                int8x16_t sh = vdupq_n_s8((int8_t)(-2 * s));
                int8x16_t v0 = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(q0, sh), m2));
                int8x16_t v1 = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(q1, sh), m2));
                int j = 8 * h + 2 * s;
                for (int t = 0; t < NT; t++) {
                    const int8_t *y = b[t][i].qs + 128 * h + 32 * s;
                    sumi[t] =
                        vmlaq_n_s32(sumi[t], neon_dot16(vdupq_n_s32(0), v0, vld1q_s8(y)), scale[j]);
                    sumi[t] = vmlaq_n_s32(sumi[t], neon_dot16(vdupq_n_s32(0), v1, vld1q_s8(y + 16)),
                                          scale[j + 1]);
                }
            }
        }
        const float dw = neon_h2f(a[i].d), dmw = neon_h2f(a[i].dmin);
        for (int t = 0; t < NT; t++) {
            int32_t summ = neon_mins16(mins, b[t][i].bsums);
            float dall = b[t][i].d * dw;
            float dmin = b[t][i].d * dmw;
            sum[t] += dall * (float)vaddvq_s32(sumi[t]) - dmin * (float)summ;
        }
    }
    NEON_K_END;
}

NEON_NT_INLINE void neon_q3_K_n(int64_t n, const void *restrict w, const void *const *x, float *out,
                                const int NT) {
    const struct pl_block_q3_K *a = w;
    const uint8x16_t m2 = vdupq_n_u8(3), four = vdupq_n_u8(4);
    NEON_K_BEGIN;
    for (int64_t i = 0; i < n / PL_QK_K; i++) {
        int32_t scale[16];
        for (int j = 0; j < 16; j++)
            scale[j] = pl_q3k_scale(j, a[i].scales) - 32;
        uint8x16_t hm0 = vld1q_u8(a[i].hmask), hm1 = vld1q_u8(a[i].hmask + 16);
        for (int t = 0; t < NT; t++)
            sumi[t] = vdupq_n_s32(0);
        neon_prefetch(&a[i]);
        for (int h = 0; h < 2; h++) {
            uint8x16_t q0 = vld1q_u8(a[i].qs + 32 * h), q1 = vld1q_u8(a[i].qs + 32 * h + 16);
            for (int s = 0; s < 4; s++) {
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
                for (int t = 0; t < NT; t++) {
                    const int8_t *y = b[t][i].qs + 128 * h + 32 * s;
                    sumi[t] =
                        vmlaq_n_s32(sumi[t], neon_dot16(vdupq_n_s32(0), v0, vld1q_s8(y)), scale[j]);
                    sumi[t] = vmlaq_n_s32(sumi[t], neon_dot16(vdupq_n_s32(0), v1, vld1q_s8(y + 16)),
                                          scale[j + 1]);
                }
            }
        }
        const float dw = neon_h2f(a[i].d);
        for (int t = 0; t < NT; t++)
            sum[t] += (dw * b[t][i].d) * (float)vaddvq_s32(sumi[t]);
    }
    NEON_K_END;
}

/* Q4_K/Q5_K: the 8 scales and the 8 mins of a super-block. */
static inline void neon_q45_scales(const uint8_t *packed, int32_t scale[8], int16x8_t *ret_mins) {
    uint8_t mins[8];
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        pl_q4k_scale_min(j, packed, &sc, &m);
        scale[j] = sc;
        mins[j] = m;
    }
    *ret_mins = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mins)));
}

/* sum_j m_j * (bsums[2j] + bsums[2j+1]): the mins' part of a token's super-block */
static inline int32_t neon_q45_mins(int16x8_t mn, const int16_t *bsums) {
    int16x8_t bs = vpaddq_s16(vld1q_s16(bsums), vld1q_s16(bsums + 8));
    int32x4_t s = vmull_s16(vget_low_s16(bs), vget_low_s16(mn));
    s = vmlal_high_s16(s, bs, mn);
    return vaddvq_s32(s);
}

/* Q4_K (q5 = 0) or Q5_K (q5 = 1, its fifth bits from qh); a constant after inlining. */
NEON_NT_INLINE void neon_q45_K_n(int64_t n, const void *restrict w, const void *const *x,
                                 float *out, const int NT, const int q5) {
    const uint8_t *base = w;
    const size_t bb = q5 ? sizeof(struct pl_block_q5_K) : sizeof(struct pl_block_q4_K);
    const uint8x16_t m4 = vdupq_n_u8(0x0F), b4 = vdupq_n_u8(0x10);
    NEON_K_BEGIN;
    for (int64_t i = 0; i < n / PL_QK_K; i++) {
        const uint8_t *blk = base + (size_t)i * bb;
        /* d, dmin and the 12 scale bytes lead both layouts; Q5_K's qh, then qs, follow */
        const uint8_t *qs = blk + 16 + (q5 ? 32 : 0);
        int32_t scale[8];
        int16x8_t mn;
        neon_q45_scales(blk + 4, scale, &mn);
        uint8x16_t qh0 = vdupq_n_u8(0), qh1 = vdupq_n_u8(0);
        if (q5) {
            qh0 = vld1q_u8(blk + 16);
            qh1 = vld1q_u8(blk + 32);
        }
        for (int t = 0; t < NT; t++)
            sumi[t] = vdupq_n_s32(0);
        neon_prefetch(blk);
        for (int g = 0; g < 4; g++) {
            uint8x16_t q0 = vld1q_u8(qs + 32 * g), q1 = vld1q_u8(qs + 32 * g + 16);
            uint8x16_t l0 = vandq_u8(q0, m4), l1 = vandq_u8(q1, m4);
            uint8x16_t h0 = vshrq_n_u8(q0, 4), h1 = vshrq_n_u8(q1, 4);
            if (q5) {
                uint8x16_t bl = vdupq_n_u8((uint8_t)(1u << (2 * g)));
                uint8x16_t bh = vdupq_n_u8((uint8_t)(2u << (2 * g)));
                l0 = vorrq_u8(l0, vandq_u8(vtstq_u8(qh0, bl), b4));
                l1 = vorrq_u8(l1, vandq_u8(vtstq_u8(qh1, bl), b4));
                h0 = vorrq_u8(h0, vandq_u8(vtstq_u8(qh0, bh), b4));
                h1 = vorrq_u8(h1, vandq_u8(vtstq_u8(qh1, bh), b4));
            }
            for (int t = 0; t < NT; t++) {
                const int8_t *y = b[t][i].qs + 64 * g;
                sumi[t] = vmlaq_n_s32(
                    sumi[t], neon_dot32(vreinterpretq_s8_u8(l0), vreinterpretq_s8_u8(l1), y),
                    scale[2 * g]);
                sumi[t] = vmlaq_n_s32(
                    sumi[t], neon_dot32(vreinterpretq_s8_u8(h0), vreinterpretq_s8_u8(h1), y + 32),
                    scale[2 * g + 1]);
            }
        }
        uint16_t dh, dmh;
        memcpy(&dh, blk, sizeof(dh));
        memcpy(&dmh, blk + 2, sizeof(dmh));
        const float dw = neon_h2f(dh), dmw = neon_h2f(dmh);
        for (int t = 0; t < NT; t++) {
            int32_t summ = neon_q45_mins(mn, b[t][i].bsums);
            float d = dw * b[t][i].d, dmin = dmw * b[t][i].d;
            sum[t] += d * (float)vaddvq_s32(sumi[t]) - dmin * (float)summ;
        }
    }
    NEON_K_END;
}

NEON_NT_INLINE void neon_q6_K_n(int64_t n, const void *restrict w, const void *const *x, float *out,
                                const int NT) {
    const struct pl_block_q6_K *a = w;
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m30 = vdupq_n_u8(0x30);
    const int8x16_t s32 = vdupq_n_s8(32);
    NEON_K_BEGIN;
    for (int64_t i = 0; i < n / PL_QK_K; i++) {
        const int8_t *sc = a[i].scales;
        for (int t = 0; t < NT; t++)
            sumi[t] = vdupq_n_s32(0);
        neon_prefetch(&a[i]);
        for (int h = 0; h < 2; h++, sc += 8) {
            const uint8_t *ql = a[i].ql + 64 * h, *qh = a[i].qh + 32 * h;
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
                const int8x16_t v = vsubq_s8(vreinterpretq_s8_u8(u[k]), s32);
                for (int t = 0; t < NT; t++) {
                    const int8_t *y = b[t][i].qs + 128 * h + 16 * k;
                    int32x4_t p = neon_dot16(vdupq_n_s32(0), v, vld1q_s8(y));
                    sumi[t] = vmlaq_n_s32(sumi[t], p, sc[k]);
                }
            }
        }
        const float dw = neon_h2f(a[i].d);
        for (int t = 0; t < NT; t++)
            sum[t] += (dw * b[t][i].d) * (float)vaddvq_s32(sumi[t]);
    }
    NEON_K_END;
}

NEON_NT_INLINE void neon_q4_K_n(int64_t n, const void *restrict w, const void *const *x, float *out,
                                const int NT) {
    neon_q45_K_n(n, w, x, out, NT, 0);
}
NEON_NT_INLINE void neon_q5_K_n(int64_t n, const void *restrict w, const void *const *x, float *out,
                                const int NT) {
    neon_q45_K_n(n, w, x, out, NT, 1);
}

PL_QUANT_DEFINE_DOT1(neon_vec_dot_q4_0, neon_q4_0_n)
PL_QUANT_DEFINE_DOT1(neon_vec_dot_q4_1, neon_q4_1_n)
PL_QUANT_DEFINE_DOT1(neon_vec_dot_q5_0, neon_q5_0_n)
PL_QUANT_DEFINE_DOT1(neon_vec_dot_q5_1, neon_q5_1_n)
PL_QUANT_DEFINE_DOT1(neon_vec_dot_q8_0, neon_q8_0_n)
PL_QUANT_DEFINE_DOT1(neon_vec_dot_q2_K, neon_q2_K_n)
PL_QUANT_DEFINE_DOT1(neon_vec_dot_q3_K, neon_q3_K_n)
PL_QUANT_DEFINE_DOT1(neon_vec_dot_q4_K, neon_q4_K_n)
PL_QUANT_DEFINE_DOT1(neon_vec_dot_q5_K, neon_q5_K_n)
PL_QUANT_DEFINE_DOT1(neon_vec_dot_q6_K, neon_q6_K_n)
PL_QUANT_DEFINE_DOTN(neon_vec_dotn_q4_0, neon_q4_0_n)
PL_QUANT_DEFINE_DOTN(neon_vec_dotn_q4_1, neon_q4_1_n)
PL_QUANT_DEFINE_DOTN(neon_vec_dotn_q5_0, neon_q5_0_n)
PL_QUANT_DEFINE_DOTN(neon_vec_dotn_q5_1, neon_q5_1_n)
PL_QUANT_DEFINE_DOTN(neon_vec_dotn_q8_0, neon_q8_0_n)
PL_QUANT_DEFINE_DOTN(neon_vec_dotn_q2_K, neon_q2_K_n)
PL_QUANT_DEFINE_DOTN(neon_vec_dotn_q3_K, neon_q3_K_n)
PL_QUANT_DEFINE_DOTN(neon_vec_dotn_q4_K, neon_q4_K_n)
PL_QUANT_DEFINE_DOTN(neon_vec_dotn_q5_K, neon_q5_K_n)
PL_QUANT_DEFINE_DOTN(neon_vec_dotn_q6_K, neon_q6_K_n)

/* Install the integer dot products of this variant. */
static void neon_fill_dots(struct pl_quant_kernels table[_PL_GGML_TYPE_MAX]) {
#define NEON_SET(T, t)                                                                             \
    do {                                                                                           \
        table[PL_GGML_TYPE_##T].vec_dot = neon_vec_dot_##t;                                        \
        table[PL_GGML_TYPE_##T].vec_dotn = neon_vec_dotn_##t;                                      \
    } while (0)
    NEON_SET(Q4_0, q4_0);
    NEON_SET(Q4_1, q4_1);
    NEON_SET(Q5_0, q5_0);
    NEON_SET(Q5_1, q5_1);
    NEON_SET(Q8_0, q8_0);
    NEON_SET(Q2_K, q2_K);
    NEON_SET(Q3_K, q3_K);
    NEON_SET(Q4_K, q4_K);
    NEON_SET(Q5_K, q5_K);
    NEON_SET(Q6_K, q6_K);
#undef NEON_SET
}

#endif
