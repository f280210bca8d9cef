/* SPDX-License-Identifier: MIT */
/* The decode step's element-wise kernels with NEON (AArch64 AdvSIMD, chosen by matmul.c):
 * SwiGLU and RMSNorm, as matmul_avx2.c's on 4 lanes. Before them every FFN element went
 * through libm's expf one at a time and the norms through the scalar loop. The tails (n not
 * a multiple of 4) go through a zero-padded copy: NEON has no masked loads. */
#include "matmul.h"
#include "vexp_coef.h"

#include <arm_neon.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* 2^n for integer n in [-76, 0] (a normal float), built in the exponent field. */
static inline float32x4_t pow2i(int32x4_t n) {
    return vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n, vdupq_n_s32(127)), 23));
}

/* exp(x) for x <= 0: vexp_avx512.h's steps and vexp_coef.h's constants on 4 lanes, 2^n
 * applied as two normal powers of two (as vexp_avx2.h), so only the last multiply rounds into
 * the subnormals. 0 below -104 and for -inf; NaN comes out as exp(-104) (the caller keeps NaN
 * itself). */
static inline float32x4_t vexp4_nonpos(float32x4_t x) {
    x = vmaxnmq_f32(x, vdupq_n_f32(PL_VEXP_MIN)); /* FMAXNM: a NaN lane takes the bound */
    const float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(PL_VEXP_LOG2E)));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(PL_VEXP_LN2_HI));
    r = vfmsq_f32(r, n, vdupq_n_f32(PL_VEXP_LN2_LO));
    float32x4_t p = vdupq_n_f32(PL_VEXP_C7);
    p = vfmaq_f32(vdupq_n_f32(PL_VEXP_C6), p, r);
    p = vfmaq_f32(vdupq_n_f32(PL_VEXP_C5), p, r);
    p = vfmaq_f32(vdupq_n_f32(PL_VEXP_C4), p, r);
    p = vfmaq_f32(vdupq_n_f32(PL_VEXP_C3), p, r);
    p = vfmaq_f32(vdupq_n_f32(PL_VEXP_C2), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    const int32x4_t ni = vcvtq_s32_f32(n); /* n is integral: exact */
    const int32x4_t half = vshrq_n_s32(ni, 1);
    return vmulq_f32(vmulq_f32(p, pow2i(vsubq_s32(ni, half))), pow2i(half));
}

/* silu(g) * u of 4 lanes: exp(-|g|); g < 0 takes g e / (1 + e), the rest g / (1 + e). NaN
 * in g gives NaN (the quotient's numerator). */
static inline float32x4_t swiglu4(float32x4_t x, float32x4_t u) {
    const float32x4_t e = vexp4_nonpos(vnegq_f32(vabsq_f32(x)));
    const uint32x4_t neg = vcltq_f32(x, vdupq_n_f32(0.0f));
    const float32x4_t num = vbslq_f32(neg, vmulq_f32(x, e), x);
    return vmulq_f32(vdivq_f32(num, vaddq_f32(vdupq_n_f32(1.0f), e)), u);
}

void pl_mm_swiglu_neon(float *out, const float *g, const float *u, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(out + i, swiglu4(vld1q_f32(g + i), vld1q_f32(u + i)));
    if (i < n) {
        float tg[4] = {0.0f, 0.0f, 0.0f, 0.0f}, tu[4] = {0.0f, 0.0f, 0.0f, 0.0f}, to[4];
        memcpy(tg, g + i, (n - i) * sizeof(float));
        memcpy(tu, u + i, (n - i) * sizeof(float));
        vst1q_f32(to, swiglu4(vld1q_f32(tg), vld1q_f32(tu)));
        memcpy(out + i, to, (n - i) * sizeof(float));
    }
}

/* The scalar reference's operations lane by lane (as the AVX2 kernel): parts 0..7 in four
 * pairs of doubles, the tail's missing lanes adding +0.0, and the same additions combining
 * them in the same order. */
void pl_mm_rmsnorm_neon(float *restrict y, const float *restrict x, const float *restrict w,
                        uint32_t n, float eps) {
    float64x2_t p01 = vdupq_n_f64(0.0), p23 = p01, p45 = p01, p67 = p01;
    uint32_t i = 0;
    for (; i < n; i += 8) {
        float t[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
        const float *src = x + i;
        if (n - i < 8) {
            memcpy(t, x + i, (n - i) * sizeof(float));
            src = t;
        }
        const float32x4_t a = vld1q_f32(src), b = vld1q_f32(src + 4);
        const float32x4_t sa = vmulq_f32(a, a), sb = vmulq_f32(b, b);
        p01 = vaddq_f64(p01, vcvt_f64_f32(vget_low_f32(sa)));
        p23 = vaddq_f64(p23, vcvt_high_f64_f32(sa));
        p45 = vaddq_f64(p45, vcvt_f64_f32(vget_low_f32(sb)));
        p67 = vaddq_f64(p67, vcvt_high_f64_f32(sb));
    }
    /* (p0 + p4, p1 + p5), (p2 + p6, p3 + p7), then ((p0 + p4) + (p2 + p6), (p1 + p5) +
     * (p3 + p7)) */
    const float64x2_t b = vaddq_f64(vaddq_f64(p01, p45), vaddq_f64(p23, p67));
    const double sum = vgetq_lane_f64(b, 0) + vgetq_lane_f64(b, 1);
    const float mean = (float)(sum / n);
    const float32x4_t scale = vdupq_n_f32(1.0f / sqrtf(mean + eps));
    for (i = 0; i + 4 <= n; i += 4)
        vst1q_f32(y + i, vmulq_f32(vmulq_f32(vld1q_f32(x + i), scale), vld1q_f32(w + i)));
    for (; i < n; i++)
        y[i] = (x[i] * vgetq_lane_f32(scale, 0)) * w[i];
}
