/* SPDX-License-Identifier: MIT */
/* Baseline Armv8-A Advanced SIMD kernels (installed by quant_arm.c on every aarch64 CPU):
 * the integer dot products of the quantized weight types with widening multiplies
 * (SMULL: int8 x int8 -> int16, SADALP: pairwise add into int32 lanes; the kernels
 * themselves are shared with the dot-product variant, quant_neon_dots.h), the F32, F16
 * and BF16 dot products (float products, exact or rounded as the reference rounds them,
 * summed in double lanes), and the activation quantizers Q8_0, Q8_1, Q8_K, F16 and BF16,
 * bit-identical to the scalar references in quant_ref.c. */
#include <arm_neon.h>
#include <assert.h>
#include <stdint.h>
#include <string.h>

#include "quant_arm.h"

/* Built for the baseline target (no dot-product flag in engine/CMakeLists.txt), so
 * quant_neon_dots.h's neon_dot16() is the SMULL/SADALP form here. */
#include "quant_neon_dots.h"

/* ---- F32, F16, BF16 dot products ---- */

/* acc[0..1] += the four float products p, widened to double (the reference's sum) */
static inline void neon_add_f64(float64x2_t acc[2], float32x4_t p) {
    acc[0] = vaddq_f64(acc[0], vcvt_f64_f32(vget_low_f32(p)));
    acc[1] = vaddq_f64(acc[1], vcvt_high_f64_f32(p));
}

static inline float neon_sum_f64(const float64x2_t acc[4], double tail) {
    float64x2_t s = vaddq_f64(vaddq_f64(acc[0], acc[1]), vaddq_f64(acc[2], acc[3]));
    return (float)(vaddvq_f64(s) + tail);
}

static float neon_vec_dot_f32(int64_t n, const void *restrict w, const void *restrict x) {
    const float *a = w, *b = x;
    float64x2_t acc[4] = {vdupq_n_f64(0.0), vdupq_n_f64(0.0), vdupq_n_f64(0.0), vdupq_n_f64(0.0)};
    double tail = 0.0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        neon_add_f64(acc, vmulq_f32(vld1q_f32(a + i), vld1q_f32(b + i)));
        neon_add_f64(acc + 2, vmulq_f32(vld1q_f32(a + i + 4), vld1q_f32(b + i + 4)));
    }
    for (; i < n; i++)
        tail += (double)(a[i] * b[i]);
    return neon_sum_f64(acc, tail);
}

static inline float32x4_t neon_load_f16x4(const uint16_t *p) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
}

/* Products of two halves are exact in float, as in the reference. */
static float neon_vec_dot_f16(int64_t n, const void *restrict w, const void *restrict x) {
    const uint16_t *a = w, *b = x;
    float64x2_t acc[4] = {vdupq_n_f64(0.0), vdupq_n_f64(0.0), vdupq_n_f64(0.0), vdupq_n_f64(0.0)};
    double tail = 0.0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        neon_add_f64(acc, vmulq_f32(neon_load_f16x4(a + i), neon_load_f16x4(b + i)));
        neon_add_f64(acc + 2, vmulq_f32(neon_load_f16x4(a + i + 4), neon_load_f16x4(b + i + 4)));
    }
    for (; i < n; i++)
        tail += (double)(pl_fp16_to_f32_inline(a[i]) * pl_fp16_to_f32_inline(b[i]));
    return neon_sum_f64(acc, tail);
}

static inline float32x4_t neon_load_bf16x4(const uint16_t *p) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
}

static float neon_vec_dot_bf16(int64_t n, const void *restrict w, const void *restrict x) {
    const uint16_t *a = w, *b = x;
    float64x2_t acc[4] = {vdupq_n_f64(0.0), vdupq_n_f64(0.0), vdupq_n_f64(0.0), vdupq_n_f64(0.0)};
    double tail = 0.0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        neon_add_f64(acc, vmulq_f32(neon_load_bf16x4(a + i), neon_load_bf16x4(b + i)));
        neon_add_f64(acc + 2, vmulq_f32(neon_load_bf16x4(a + i + 4), neon_load_bf16x4(b + i + 4)));
    }
    for (; i < n; i++)
        tail += (double)(pl_bf16_to_f32_inline(a[i]) * pl_bf16_to_f32_inline(b[i]));
    return neon_sum_f64(acc, tail);
}

/* ---- F16 and BF16 from f32 ---- */

/* FCVT (single -> half) rounds to nearest even (the FPCR default Linux keeps), keeps
 * subnormals (FZ off), saturates to Inf and quiets NaNs keeping the top payload bits:
 * pl_f32_to_fp16_inline bit for bit. */
static void neon_f16_from_f32(const float *restrict src, void *restrict dst, int64_t n) {
    uint16_t *d = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float16x8_t h = vcvt_high_f16_f32(vcvt_f16_f32(vld1q_f32(src + i)), vld1q_f32(src + i + 4));
        vst1q_u16(d + i, vreinterpretq_u16_f16(h));
    }
    for (; i < n; i++)
        d[i] = pl_f32_to_fp16_inline(src[i]);
}

/* Integer round to nearest even as pl_f32_to_bf16_inline; NaN -> top half | 0x40. */
static inline uint16x4_t neon_bf16x4(float32x4_t f) {
    uint32x4_t x = vreinterpretq_u32_f32(f);
    uint32x4_t odd = vandq_u32(vshrq_n_u32(x, 16), vdupq_n_u32(1));
    uint32x4_t r = vshrq_n_u32(vaddq_u32(vaddq_u32(x, vdupq_n_u32(0x7FFF)), odd), 16);
    uint32x4_t nan = vcgtq_u32(vandq_u32(x, vdupq_n_u32(0x7FFFFFFFu)), vdupq_n_u32(0x7F800000u));
    uint32x4_t q = vorrq_u32(vshrq_n_u32(x, 16), vdupq_n_u32(0x40));
    return vmovn_u32(vbslq_u32(nan, q, r));
}

static void neon_bf16_from_f32(const float *restrict src, void *restrict dst, int64_t n) {
    uint16_t *d = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        vst1q_u16(d + i, vcombine_u16(neon_bf16x4(vld1q_f32(src + i)),
                                      neon_bf16x4(vld1q_f32(src + i + 4))));
    for (; i < n; i++)
        d[i] = pl_f32_to_bf16_inline(src[i]);
}

/* ---- Q8_0, Q8_1, Q8_K activation quantizers ---- */

/* max(0, |x|) over n (a multiple of 16) floats; NaNs are skipped, as fmaxf does. */
static inline float neon_absmax(const float *x, int n) {
    float32x4_t m0 = vdupq_n_f32(0.f), m1 = m0, m2 = m0, m3 = m0;
    for (int j = 0; j < n; j += 16) {
        m0 = vmaxnmq_f32(m0, vabsq_f32(vld1q_f32(x + j)));
        m1 = vmaxnmq_f32(m1, vabsq_f32(vld1q_f32(x + j + 4)));
        m2 = vmaxnmq_f32(m2, vabsq_f32(vld1q_f32(x + j + 8)));
        m3 = vmaxnmq_f32(m3, vabsq_f32(vld1q_f32(x + j + 12)));
    }
    return vmaxnmvq_f32(vmaxnmq_f32(vmaxnmq_f32(m0, m1), vmaxnmq_f32(m2, m3)));
}

/* 16 int32 lanes clamped to [lo, hi] and narrowed to int8 */
static inline int8x16_t neon_narrow16(int32x4_t v0, int32x4_t v1, int32x4_t v2, int32x4_t v3,
                                      int32_t lo, int32_t hi) {
    const int32x4_t vlo = vdupq_n_s32(lo), vhi = vdupq_n_s32(hi);
    v0 = vminq_s32(vmaxq_s32(v0, vlo), vhi);
    v1 = vminq_s32(vmaxq_s32(v1, vlo), vhi);
    v2 = vminq_s32(vmaxq_s32(v2, vlo), vhi);
    v3 = vminq_s32(vmaxq_s32(v3, vlo), vhi);
    int16x8_t a = vcombine_s16(vmovn_s32(v0), vmovn_s32(v1));
    int16x8_t b = vcombine_s16(vmovn_s32(v2), vmovn_s32(v3));
    return vcombine_s8(vmovn_s16(a), vmovn_s16(b));
}

/* 16 quants round(x * id) (ties away from zero: FCVTAS, as roundf; NaN -> 0) in
 * [-127, 127], as the reference's round_q8. */
static inline int8x16_t neon_round_q8(const float *x, float id) {
    return neon_narrow16(vcvtaq_s32_f32(vmulq_n_f32(vld1q_f32(x), id)),
                         vcvtaq_s32_f32(vmulq_n_f32(vld1q_f32(x + 4), id)),
                         vcvtaq_s32_f32(vmulq_n_f32(vld1q_f32(x + 8), id)),
                         vcvtaq_s32_f32(vmulq_n_f32(vld1q_f32(x + 12), id)), -127, 127);
}

static void neon_q8_0_from_f32(const float *restrict src, void *restrict dst, int64_t n) {
    struct pl_block_q8_0 *b = dst;
    assert(n % PL_QK8_0 == 0);
    for (int64_t i = 0; i < n / PL_QK8_0; i++, src += PL_QK8_0) {
        float d = neon_absmax(src, PL_QK8_0) / 127.f;
        float id = d != 0.f ? 1.f / d : 0.f;
        b[i].d = pl_f32_to_fp16_inline(d);
        vst1q_s8(b[i].qs, neon_round_q8(src, id));
        vst1q_s8(b[i].qs + 16, neon_round_q8(src + 16, id));
    }
}

static void neon_q8_1_from_f32(const float *restrict src, void *restrict dst, int64_t n) {
    struct pl_block_q8_1 *b = dst;
    assert(n % PL_QK8_1 == 0);
    for (int64_t i = 0; i < n / PL_QK8_1; i++, src += PL_QK8_1) {
        float d = neon_absmax(src, PL_QK8_1) / 127.f;
        float id = d != 0.f ? 1.f / d : 0.f;
        int8x16_t q0 = neon_round_q8(src, id), q1 = neon_round_q8(src + 16, id);
        int sum = vaddlvq_s8(q0) + vaddlvq_s8(q1);
        b[i].d = pl_f32_to_fp16_inline(d);
        vst1q_s8(b[i].qs, q0);
        vst1q_s8(b[i].qs + 16, q1);
        b[i].s = pl_f32_to_fp16_inline((float)sum * d);
    }
}

/* Q8_K: scale from the first element of largest magnitude (with its sign), quants
 * rounded to nearest even (FCVTNS, as the reference's nearest_int) into [-128, 127]. */
static void neon_q8_K_from_f32(const float *restrict src, void *restrict dst, int64_t n) {
    struct pl_block_q8_K *b = dst;
    assert(n % PL_QK_K == 0);
    for (int64_t i = 0; i < n / PL_QK_K; i++, src += PL_QK_K) {
        float amax = neon_absmax(src, PL_QK_K), max = 0.f;
        if (amax == 0.f) {
            memset(&b[i], 0, sizeof(b[i]));
            continue;
        }
        for (int j = 0; j < PL_QK_K; j++) {
            if (__builtin_fabsf(src[j]) == amax) {
                max = src[j];
                break;
            }
        }
        float iscale = -127.f / max;
        for (int j = 0; j < PL_QK_K; j += 16) {
            const float *x = src + j;
            int8x16_t q =
                neon_narrow16(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x), iscale)),
                              vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + 4), iscale)),
                              vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + 8), iscale)),
                              vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + 12), iscale)), -128, 127);
            vst1q_s8(b[i].qs + j, q);
            b[i].bsums[j / 16] = vaddlvq_s8(q);
        }
        b[i].d = 1.f / iscale;
    }
}

void pl_quant_neon_fill(struct pl_quant_kernels table[_PL_GGML_TYPE_MAX]) {
    neon_fill_dots(table);
    table[PL_GGML_TYPE_F32].vec_dot = neon_vec_dot_f32;
    table[PL_GGML_TYPE_F16].vec_dot = neon_vec_dot_f16;
    table[PL_GGML_TYPE_F16].from_f32 = neon_f16_from_f32;
    table[PL_GGML_TYPE_BF16].vec_dot = neon_vec_dot_bf16;
    table[PL_GGML_TYPE_BF16].from_f32 = neon_bf16_from_f32;
    table[PL_GGML_TYPE_Q8_0].from_f32 = neon_q8_0_from_f32;
    table[PL_GGML_TYPE_Q8_1].from_f32 = neon_q8_1_from_f32;
    table[PL_GGML_TYPE_Q8_K].from_f32 = neon_q8_K_from_f32;
}
