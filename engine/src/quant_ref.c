/* SPDX-License-Identifier: MIT */
/* Portable scalar reference kernels for every type the engine computes with: dequantize
 * (to_f32), quantize (from_f32, round-to-nearest with the scale search of ggml's *_ref
 * quantizers, so files we write decode like llama.cpp's) and the dot product of a weight
 * row with activations in the type's vec_dot_type (integer products per block, scaled by
 * the block scales, accumulated in float, as ggml's CPU reference does). The ISA kernels in
 * engine/arch/ are checked against these. Reached through pl_quant_ref_table. */
#include "quant_ref.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "quant_blocks.h"

#define fp16_f32 pl_fp16_to_f32_inline
#define f32_fp16 pl_f32_to_fp16_inline

/* ---- Rounding helpers (defined for every input: NaN and Inf never reach a cast) ---- */

/* Round to nearest, ties to even, as ggml's nearest_int: adding 1.5 * 2^23 leaves the
 * rounded value in the low mantissa bits. |f| is capped at 2^22 - 1 where the trick holds. */
static inline int nearest_int(float f) {
    if (f != f)
        return 0;
    if (f > 4194303.f)
        f = 4194303.f;
    else if (f < -4194303.f)
        f = -4194303.f;
    return (int)(pl_f32_to_bits(f + 12582912.f) & 0x7FFFFF) - 0x400000;
}

/* roundf (ties away from zero, as ggml's Q8_0/Q8_1 quantizers) into [-127, 127]. */
static inline int8_t round_q8(float v) {
    if (v != v)
        return 0;
    if (v > 127.f)
        v = 127.f;
    else if (v < -127.f)
        v = -127.f;
    return (int8_t)roundf(v);
}

/* (int)v truncated and clamped to [0, hi]: ggml's MIN(hi, (int8_t)(v)) for v >= 0. */
static inline uint8_t trunc_clamp(float v, int hi) {
    if (!(v > 0.f))
        return 0;
    if (v >= (float)hi)
        return (uint8_t)hi;
    return (uint8_t)v;
}

static inline int clamp_int(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* ---- F32, F16, BF16 ---- */

static void f32_to_f32(const void *restrict src, float *restrict dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static void f32_from_f32(const float *restrict src, void *restrict dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

/* Float types follow ggml's scalar path: float products summed in double. */
static float vec_dot_f32(int64_t n, const void *restrict w, const void *restrict x) {
    const float *a = w, *b = x;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(a[i] * b[i]);
    return (float)sum;
}

static void f16_to_f32(const void *restrict src, float *restrict dst, int64_t n) {
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = fp16_f32(s[i]);
}

static void f16_from_f32(const float *restrict src, void *restrict dst, int64_t n) {
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++)
        d[i] = f32_fp16(src[i]);
}

/* A product of two halves is exact in float. */
static float vec_dot_f16(int64_t n, const void *restrict w, const void *restrict x) {
    const uint16_t *a = w, *b = x;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(fp16_f32(a[i]) * fp16_f32(b[i]));
    return (float)sum;
}

static void bf16_to_f32(const void *restrict src, float *restrict dst, int64_t n) {
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = pl_bf16_to_f32_inline(s[i]);
}

static void bf16_from_f32(const float *restrict src, void *restrict dst, int64_t n) {
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++)
        d[i] = pl_f32_to_bf16_inline(src[i]);
}

static float vec_dot_bf16(int64_t n, const void *restrict w, const void *restrict x) {
    const uint16_t *a = w, *b = x;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(pl_bf16_to_f32_inline(a[i]) * pl_bf16_to_f32_inline(b[i]));
    return (float)sum;
}

/* ---- Q4_0, Q4_1, Q5_0, Q5_1: dequantize ---- */

static void q4_0_to_f32(const void *restrict src, float *restrict dst, int64_t n) {
    const struct pl_block_q4_0 *b = src;
    assert(n % PL_QK4_0 == 0);
    for (int64_t i = 0; i < n / PL_QK4_0; i++, dst += PL_QK4_0) {
        float d = fp16_f32(b[i].d);
        for (int j = 0; j < PL_QK4_0 / 2; j++) {
            dst[j] = (float)((b[i].qs[j] & 0x0F) - 8) * d;
            dst[j + PL_QK4_0 / 2] = (float)((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void q4_1_to_f32(const void *restrict src, float *restrict dst, int64_t n) {
    const struct pl_block_q4_1 *b = src;
    assert(n % PL_QK4_1 == 0);
    for (int64_t i = 0; i < n / PL_QK4_1; i++, dst += PL_QK4_1) {
        float d = fp16_f32(b[i].d), m = fp16_f32(b[i].m);
        for (int j = 0; j < PL_QK4_1 / 2; j++) {
            dst[j] = (float)(b[i].qs[j] & 0x0F) * d + m;
            dst[j + PL_QK4_1 / 2] = (float)(b[i].qs[j] >> 4) * d + m;
        }
    }
}

static inline uint32_t load_qh(const uint8_t qh[4]) {
    uint32_t v;
    memcpy(&v, qh, sizeof(v)); /* little-endian asserted in quant_blocks.h */
    return v;
}

/* The 5-bit values of a Q5_0/Q5_1 block, element order. */
static inline void q5_unpack(const uint8_t *qs, uint32_t qh, int out[32]) {
    for (int j = 0; j < 16; j++) {
        out[j] = (qs[j] & 0x0F) | (int)(((qh >> j) & 1) << 4);
        out[j + 16] = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
    }
}

static void q5_0_to_f32(const void *restrict src, float *restrict dst, int64_t n) {
    const struct pl_block_q5_0 *b = src;
    int q[PL_QK5_0];
    assert(n % PL_QK5_0 == 0);
    for (int64_t i = 0; i < n / PL_QK5_0; i++, dst += PL_QK5_0) {
        float d = fp16_f32(b[i].d);
        q5_unpack(b[i].qs, load_qh(b[i].qh), q);
        for (int j = 0; j < PL_QK5_0; j++)
            dst[j] = (float)(q[j] - 16) * d;
    }
}

static void q5_1_to_f32(const void *restrict src, float *restrict dst, int64_t n) {
    const struct pl_block_q5_1 *b = src;
    int q[PL_QK5_1];
    assert(n % PL_QK5_1 == 0);
    for (int64_t i = 0; i < n / PL_QK5_1; i++, dst += PL_QK5_1) {
        float d = fp16_f32(b[i].d), m = fp16_f32(b[i].m);
        q5_unpack(b[i].qs, load_qh(b[i].qh), q);
        for (int j = 0; j < PL_QK5_1; j++)
            dst[j] = (float)q[j] * d + m;
    }
}

static void q8_0_to_f32(const void *restrict src, float *restrict dst, int64_t n) {
    const struct pl_block_q8_0 *b = src;
    assert(n % PL_QK8_0 == 0);
    for (int64_t i = 0; i < n / PL_QK8_0; i++, dst += PL_QK8_0) {
        float d = fp16_f32(b[i].d);
        for (int j = 0; j < PL_QK8_0; j++)
            dst[j] = (float)b[i].qs[j] * d;
    }
}

static void q8_1_to_f32(const void *restrict src, float *restrict dst, int64_t n) {
    const struct pl_block_q8_1 *b = src;
    assert(n % PL_QK8_1 == 0);
    for (int64_t i = 0; i < n / PL_QK8_1; i++, dst += PL_QK8_1) {
        float d = fp16_f32(b[i].d);
        for (int j = 0; j < PL_QK8_1; j++)
            dst[j] = (float)b[i].qs[j] * d;
    }
}

/* ---- Q4_0 .. Q8_0: dot products ---- */

static float vec_dot_q4_0(int64_t n, const void *restrict w, const void *restrict x) {
    const struct pl_block_q4_0 *a = w;
    const struct pl_block_q8_0 *b = x;
    float sum = 0.f;
    assert(n % PL_QK8_0 == 0);
    for (int64_t i = 0; i < n / PL_QK8_0; i++) {
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            isum += ((a[i].qs[j] & 0x0F) - 8) * b[i].qs[j];
            isum += ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + 16];
        }
        sum += (float)isum * (fp16_f32(a[i].d) * fp16_f32(b[i].d));
    }
    return sum;
}

/* The minimum m of Q4_1/Q5_1 multiplies sum(x) = s of the Q8_1 block. */
static float vec_dot_q4_1(int64_t n, const void *restrict w, const void *restrict x) {
    const struct pl_block_q4_1 *a = w;
    const struct pl_block_q8_1 *b = x;
    float sum = 0.f;
    assert(n % PL_QK8_1 == 0);
    for (int64_t i = 0; i < n / PL_QK8_1; i++) {
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            isum += (a[i].qs[j] & 0x0F) * b[i].qs[j];
            isum += (a[i].qs[j] >> 4) * b[i].qs[j + 16];
        }
        sum += (fp16_f32(a[i].d) * fp16_f32(b[i].d)) * (float)isum +
               fp16_f32(a[i].m) * fp16_f32(b[i].s);
    }
    return sum;
}

static float vec_dot_q5_0(int64_t n, const void *restrict w, const void *restrict x) {
    const struct pl_block_q5_0 *a = w;
    const struct pl_block_q8_0 *b = x;
    float sum = 0.f;
    int q[PL_QK5_0];
    assert(n % PL_QK8_0 == 0);
    for (int64_t i = 0; i < n / PL_QK8_0; i++) {
        int isum = 0;
        q5_unpack(a[i].qs, load_qh(a[i].qh), q);
        for (int j = 0; j < PL_QK5_0; j++)
            isum += (q[j] - 16) * b[i].qs[j];
        sum += (float)isum * (fp16_f32(a[i].d) * fp16_f32(b[i].d));
    }
    return sum;
}

static float vec_dot_q5_1(int64_t n, const void *restrict w, const void *restrict x) {
    const struct pl_block_q5_1 *a = w;
    const struct pl_block_q8_1 *b = x;
    float sum = 0.f;
    int q[PL_QK5_1];
    assert(n % PL_QK8_1 == 0);
    for (int64_t i = 0; i < n / PL_QK8_1; i++) {
        int isum = 0;
        q5_unpack(a[i].qs, load_qh(a[i].qh), q);
        for (int j = 0; j < PL_QK5_1; j++)
            isum += q[j] * b[i].qs[j];
        sum += (fp16_f32(a[i].d) * fp16_f32(b[i].d)) * (float)isum +
               fp16_f32(a[i].m) * fp16_f32(b[i].s);
    }
    return sum;
}

static float vec_dot_q8_0(int64_t n, const void *restrict w, const void *restrict x) {
    const struct pl_block_q8_0 *a = w;
    const struct pl_block_q8_0 *b = x;
    float sum = 0.f;
    assert(n % PL_QK8_0 == 0);
    for (int64_t i = 0; i < n / PL_QK8_0; i++) {
        int isum = 0;
        for (int j = 0; j < PL_QK8_0; j++)
            isum += a[i].qs[j] * b[i].qs[j];
        sum += (float)isum * (fp16_f32(a[i].d) * fp16_f32(b[i].d));
    }
    return sum;
}

/* ---- Q4_0 .. Q8_1: quantize (ggml's *_ref rules) ---- */

/* The element of largest magnitude, with its sign (the first one on ties). */
static float signed_absmax(const float *x, int n) {
    float amax = 0.f, max = 0.f;
    for (int j = 0; j < n; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void min_max(const float *x, int n, float *ret_min, float *ret_max) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < min)
            min = x[j];
        if (x[j] > max)
            max = x[j];
    }
    *ret_min = min;
    *ret_max = max;
}

/* Q4_0: the extreme value maps to -8 (so the full range -8..7 is used on its side). */
static void q4_0_from_f32(const float *restrict src, void *restrict dst, int64_t n) {
    struct pl_block_q4_0 *b = dst;
    assert(n % PL_QK4_0 == 0);
    for (int64_t i = 0; i < n / PL_QK4_0; i++, src += PL_QK4_0) {
        float d = signed_absmax(src, PL_QK4_0) / -8.f;
        float id = d != 0.f ? 1.f / d : 0.f;
        b[i].d = f32_fp16(d);
        for (int j = 0; j < 16; j++) {
            uint8_t lo = trunc_clamp(src[j] * id + 8.5f, 15);
            uint8_t hi = trunc_clamp(src[j + 16] * id + 8.5f, 15);
            b[i].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

static void q4_1_from_f32(const float *restrict src, void *restrict dst, int64_t n) {
    struct pl_block_q4_1 *b = dst;
    assert(n % PL_QK4_1 == 0);
    for (int64_t i = 0; i < n / PL_QK4_1; i++, src += PL_QK4_1) {
        float min, max;
        min_max(src, PL_QK4_1, &min, &max);
        float d = (max - min) / 15.f;
        float id = d != 0.f ? 1.f / d : 0.f;
        b[i].d = f32_fp16(d);
        b[i].m = f32_fp16(min);
        for (int j = 0; j < 16; j++) {
            uint8_t lo = trunc_clamp((src[j] - min) * id + 0.5f, 15);
            uint8_t hi = trunc_clamp((src[j + 16] - min) * id + 0.5f, 15);
            b[i].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

/* Packs 32 5-bit values into the nibbles and the qh word of a Q5 block. */
static void q5_pack(const uint8_t q[32], uint8_t *qs, uint8_t qh_bytes[4]) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
        qh |= (uint32_t)((q[j] >> 4) & 1) << j;
        qh |= (uint32_t)((q[j + 16] >> 4) & 1) << (j + 16);
    }
    memcpy(qh_bytes, &qh, sizeof(qh));
}

static void q5_0_from_f32(const float *restrict src, void *restrict dst, int64_t n) {
    struct pl_block_q5_0 *b = dst;
    uint8_t q[PL_QK5_0];
    assert(n % PL_QK5_0 == 0);
    for (int64_t i = 0; i < n / PL_QK5_0; i++, src += PL_QK5_0) {
        float d = signed_absmax(src, PL_QK5_0) / -16.f;
        float id = d != 0.f ? 1.f / d : 0.f;
        b[i].d = f32_fp16(d);
        for (int j = 0; j < PL_QK5_0; j++)
            q[j] = trunc_clamp(src[j] * id + 16.5f, 31);
        q5_pack(q, b[i].qs, b[i].qh);
    }
}

static void q5_1_from_f32(const float *restrict src, void *restrict dst, int64_t n) {
    struct pl_block_q5_1 *b = dst;
    uint8_t q[PL_QK5_1];
    assert(n % PL_QK5_1 == 0);
    for (int64_t i = 0; i < n / PL_QK5_1; i++, src += PL_QK5_1) {
        float min, max;
        min_max(src, PL_QK5_1, &min, &max);
        float d = (max - min) / 31.f;
        float id = d != 0.f ? 1.f / d : 0.f;
        b[i].d = f32_fp16(d);
        b[i].m = f32_fp16(min);
        for (int j = 0; j < PL_QK5_1; j++)
            q[j] = trunc_clamp((src[j] - min) * id + 0.5f, 31);
        q5_pack(q, b[i].qs, b[i].qh);
    }
}

static float absmax(const float *x, int n) {
    float amax = 0.f;
    for (int j = 0; j < n; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    return amax;
}

static void q8_0_from_f32(const float *restrict src, void *restrict dst, int64_t n) {
    struct pl_block_q8_0 *b = dst;
    assert(n % PL_QK8_0 == 0);
    for (int64_t i = 0; i < n / PL_QK8_0; i++, src += PL_QK8_0) {
        float d = absmax(src, PL_QK8_0) / 127.f;
        float id = d != 0.f ? 1.f / d : 0.f;
        b[i].d = f32_fp16(d);
        for (int j = 0; j < PL_QK8_0; j++)
            b[i].qs[j] = round_q8(src[j] * id);
    }
}

/* s is computed from the unrounded scale, as ggml does. */
static void q8_1_from_f32(const float *restrict src, void *restrict dst, int64_t n) {
    struct pl_block_q8_1 *b = dst;
    assert(n % PL_QK8_1 == 0);
    for (int64_t i = 0; i < n / PL_QK8_1; i++, src += PL_QK8_1) {
        float d = absmax(src, PL_QK8_1) / 127.f;
        float id = d != 0.f ? 1.f / d : 0.f;
        int sum = 0;
        b[i].d = f32_fp16(d);
        for (int j = 0; j < PL_QK8_1; j++) {
            b[i].qs[j] = round_q8(src[j] * id);
            sum += b[i].qs[j];
        }
        b[i].s = f32_fp16((float)sum * d);
    }
}

/* ---- Q8_K (activations of the K-quant dot products) ---- */

/* The extreme value maps to -127 (not -128: keeps |q| <= 127 for the ISA kernels). */
static void q8_K_from_f32(const float *restrict src, void *restrict dst, int64_t n) {
    struct pl_block_q8_K *b = dst;
    assert(n % PL_QK_K == 0);
    for (int64_t i = 0; i < n / PL_QK_K; i++, src += PL_QK_K) {
        float max = signed_absmax(src, PL_QK_K);
        if (max == 0.f || max != max) {
            memset(&b[i], 0, sizeof(b[i]));
            continue;
        }
        float iscale = -127.f / max;
        for (int j = 0; j < PL_QK_K; j++) {
            int v = nearest_int(iscale * src[j]);
            b[i].qs[j] = (int8_t)clamp_int(v, -128, 127);
        }
        for (int j = 0; j < PL_QK_K / 16; j++) {
            int sum = 0;
            for (int l = 0; l < 16; l++)
                sum += b[i].qs[16 * j + l];
            b[i].bsums[j] = (int16_t)sum;
        }
        b[i].d = 1.f / iscale;
    }
}

static void q8_K_to_f32(const void *restrict src, float *restrict dst, int64_t n) {
    const struct pl_block_q8_K *b = src;
    assert(n % PL_QK_K == 0);
    for (int64_t i = 0; i < n / PL_QK_K; i++, dst += PL_QK_K)
        for (int j = 0; j < PL_QK_K; j++)
            dst[j] = b[i].d * (float)b[i].qs[j];
}

/* ---- K-quants: unpacking the quants of one super-block into element order ---- */

/* q[i] in 0..3 for element i = 128*h + 32*s + l: bits 2s of qs[32h + l]. */
static void unpack_2bit(const uint8_t *qs, int8_t q[PL_QK_K]) {
    for (int h = 0; h < 2; h++)
        for (int s = 0; s < 4; s++)
            for (int l = 0; l < 32; l++)
                q[128 * h + 32 * s + l] = (int8_t)((qs[32 * h + l] >> (2 * s)) & 3);
}

static void q3_K_unpack(const struct pl_block_q3_K *b, int8_t q[PL_QK_K]) {
    unpack_2bit(b->qs, q);
    /* element 32*k + l: bit k of hmask[l] */
    for (int k = 0; k < PL_QK_K / 32; k++)
        for (int l = 0; l < 32; l++)
            q[32 * k + l] = (int8_t)(q[32 * k + l] - (((b->hmask[l] >> k) & 1) ? 0 : 4));
}

/* Q4_K/Q5_K: element 64*g + 32*half + l is nibble `half` of qs[32g + l] (+16 for Q5_K
 * when bit 2g + half of qh[l] is set). */
static void q45_K_unpack(const uint8_t *qs, const uint8_t *qh, int8_t q[PL_QK_K]) {
    for (int g = 0; g < 4; g++) {
        for (int l = 0; l < 32; l++) {
            int lo = qs[32 * g + l] & 0x0F, hi = qs[32 * g + l] >> 4;
            if (qh) {
                lo |= ((qh[l] >> (2 * g)) & 1) << 4;
                hi |= ((qh[l] >> (2 * g + 1)) & 1) << 4;
            }
            q[64 * g + l] = (int8_t)lo;
            q[64 * g + 32 + l] = (int8_t)hi;
        }
    }
}

static void q6_K_unpack(const struct pl_block_q6_K *b, int8_t q[PL_QK_K]) {
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
        for (int l = 0; l < 32; l++) {
            q[128 * h + l] = (int8_t)(((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32);
            q[128 * h + 32 + l] = (int8_t)(((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32);
            q[128 * h + 64 + l] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            q[128 * h + 96 + l] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
}

/* ---- K-quants: dequantize ---- */

static void q2_K_to_f32(const void *restrict src, float *restrict dst, int64_t n) {
    const struct pl_block_q2_K *b = src;
    int8_t q[PL_QK_K];
    assert(n % PL_QK_K == 0);
    for (int64_t i = 0; i < n / PL_QK_K; i++, dst += PL_QK_K) {
        float d = fp16_f32(b[i].d), dmin = fp16_f32(b[i].dmin);
        unpack_2bit(b[i].qs, q);
        for (int j = 0; j < PL_QK_K / 16; j++) {
            float dl = d * (float)(b[i].scales[j] & 0x0F);
            float ml = dmin * (float)(b[i].scales[j] >> 4);
            for (int l = 0; l < 16; l++)
                dst[16 * j + l] = dl * (float)q[16 * j + l] - ml;
        }
    }
}

static void q3_K_to_f32(const void *restrict src, float *restrict dst, int64_t n) {
    const struct pl_block_q3_K *b = src;
    int8_t q[PL_QK_K];
    assert(n % PL_QK_K == 0);
    for (int64_t i = 0; i < n / PL_QK_K; i++, dst += PL_QK_K) {
        float d = fp16_f32(b[i].d);
        q3_K_unpack(&b[i], q);
        for (int j = 0; j < PL_QK_K / 16; j++) {
            float dl = d * (float)(pl_q3k_scale(j, b[i].scales) - 32);
            for (int l = 0; l < 16; l++)
                dst[16 * j + l] = dl * (float)q[16 * j + l];
        }
    }
}

static void q45_K_to_f32(uint16_t d16, uint16_t dmin16, const uint8_t *scales, const int8_t *q,
                         float *restrict dst) {
    float d = fp16_f32(d16), dmin = fp16_f32(dmin16);
    for (int j = 0; j < PL_QK_K / 32; j++) {
        uint8_t sc, m;
        pl_q4k_scale_min(j, scales, &sc, &m);
        float dl = d * (float)sc, ml = dmin * (float)m;
        for (int l = 0; l < 32; l++)
            dst[32 * j + l] = dl * (float)q[32 * j + l] - ml;
    }
}

static void q4_K_to_f32(const void *restrict src, float *restrict dst, int64_t n) {
    const struct pl_block_q4_K *b = src;
    int8_t q[PL_QK_K];
    assert(n % PL_QK_K == 0);
    for (int64_t i = 0; i < n / PL_QK_K; i++, dst += PL_QK_K) {
        q45_K_unpack(b[i].qs, NULL, q);
        q45_K_to_f32(b[i].d, b[i].dmin, b[i].scales, q, dst);
    }
}

static void q5_K_to_f32(const void *restrict src, float *restrict dst, int64_t n) {
    const struct pl_block_q5_K *b = src;
    int8_t q[PL_QK_K];
    assert(n % PL_QK_K == 0);
    for (int64_t i = 0; i < n / PL_QK_K; i++, dst += PL_QK_K) {
        q45_K_unpack(b[i].qs, b[i].qh, q);
        q45_K_to_f32(b[i].d, b[i].dmin, b[i].scales, q, dst);
    }
}

static void q6_K_to_f32(const void *restrict src, float *restrict dst, int64_t n) {
    const struct pl_block_q6_K *b = src;
    int8_t q[PL_QK_K];
    assert(n % PL_QK_K == 0);
    for (int64_t i = 0; i < n / PL_QK_K; i++, dst += PL_QK_K) {
        float d = fp16_f32(b[i].d);
        q6_K_unpack(&b[i], q);
        for (int j = 0; j < PL_QK_K / 16; j++) {
            float dl = d * (float)b[i].scales[j];
            for (int l = 0; l < 16; l++)
                dst[16 * j + l] = dl * (float)q[16 * j + l];
        }
    }
}

/* ---- K-quants: dot products with Q8_K ---- */

/* sum over 16-element sub-blocks j of scale[j] * sum(q * a); |result| < 2^31 for every
 * K-quant (at most 256 * 128 * 32 * 127). */
static int dot_sub16(const int8_t *q, const int8_t *a, const int *scale) {
    int isum = 0;
    for (int j = 0; j < PL_QK_K / 16; j++) {
        int s = 0;
        for (int l = 0; l < 16; l++)
            s += q[16 * j + l] * a[16 * j + l];
        isum += scale[j] * s;
    }
    return isum;
}

static float vec_dot_q2_K(int64_t n, const void *restrict w, const void *restrict x) {
    const struct pl_block_q2_K *a = w;
    const struct pl_block_q8_K *b = x;
    int8_t q[PL_QK_K];
    int sc[PL_QK_K / 16];
    float sum = 0.f;
    assert(n % PL_QK_K == 0);
    for (int64_t i = 0; i < n / PL_QK_K; i++) {
        int summ = 0; /* the mins times the activation sums, via bsums */
        for (int j = 0; j < PL_QK_K / 16; j++) {
            sc[j] = a[i].scales[j] & 0x0F;
            summ += b[i].bsums[j] * (a[i].scales[j] >> 4);
        }
        unpack_2bit(a[i].qs, q);
        int isum = dot_sub16(q, b[i].qs, sc);
        float dall = b[i].d * fp16_f32(a[i].d);
        float dmin = b[i].d * fp16_f32(a[i].dmin);
        sum += dall * (float)isum - dmin * (float)summ;
    }
    return sum;
}

static float vec_dot_q3_K(int64_t n, const void *restrict w, const void *restrict x) {
    const struct pl_block_q3_K *a = w;
    const struct pl_block_q8_K *b = x;
    int8_t q[PL_QK_K];
    int sc[PL_QK_K / 16];
    float sum = 0.f;
    assert(n % PL_QK_K == 0);
    for (int64_t i = 0; i < n / PL_QK_K; i++) {
        for (int j = 0; j < PL_QK_K / 16; j++)
            sc[j] = pl_q3k_scale(j, a[i].scales) - 32;
        q3_K_unpack(&a[i], q);
        int isum = dot_sub16(q, b[i].qs, sc);
        sum += (fp16_f32(a[i].d) * b[i].d) * (float)isum;
    }
    return sum;
}

/* Q4_K/Q5_K share everything but the unpacking. */
static float dot_q45_K(uint16_t d16, uint16_t dmin16, const uint8_t *scales, const int8_t *q,
                       const struct pl_block_q8_K *b) {
    int isum = 0, summ = 0;
    for (int j = 0; j < PL_QK_K / 32; j++) {
        uint8_t sc, m;
        int s = 0;
        pl_q4k_scale_min(j, scales, &sc, &m);
        for (int l = 0; l < 32; l++)
            s += q[32 * j + l] * b->qs[32 * j + l];
        isum += sc * s;
        summ += m * (b->bsums[2 * j] + b->bsums[2 * j + 1]);
    }
    float d = fp16_f32(d16) * b->d, dmin = fp16_f32(dmin16) * b->d;
    return d * (float)isum - dmin * (float)summ;
}

static float vec_dot_q4_K(int64_t n, const void *restrict w, const void *restrict x) {
    const struct pl_block_q4_K *a = w;
    const struct pl_block_q8_K *b = x;
    int8_t q[PL_QK_K];
    float sum = 0.f;
    assert(n % PL_QK_K == 0);
    for (int64_t i = 0; i < n / PL_QK_K; i++) {
        q45_K_unpack(a[i].qs, NULL, q);
        sum += dot_q45_K(a[i].d, a[i].dmin, a[i].scales, q, &b[i]);
    }
    return sum;
}

static float vec_dot_q5_K(int64_t n, const void *restrict w, const void *restrict x) {
    const struct pl_block_q5_K *a = w;
    const struct pl_block_q8_K *b = x;
    int8_t q[PL_QK_K];
    float sum = 0.f;
    assert(n % PL_QK_K == 0);
    for (int64_t i = 0; i < n / PL_QK_K; i++) {
        q45_K_unpack(a[i].qs, a[i].qh, q);
        sum += dot_q45_K(a[i].d, a[i].dmin, a[i].scales, q, &b[i]);
    }
    return sum;
}

static float vec_dot_q6_K(int64_t n, const void *restrict w, const void *restrict x) {
    const struct pl_block_q6_K *a = w;
    const struct pl_block_q8_K *b = x;
    int8_t q[PL_QK_K];
    int sc[PL_QK_K / 16];
    float sum = 0.f;
    assert(n % PL_QK_K == 0);
    for (int64_t i = 0; i < n / PL_QK_K; i++) {
        for (int j = 0; j < PL_QK_K / 16; j++)
            sc[j] = a[i].scales[j];
        q6_K_unpack(&a[i], q);
        int isum = dot_sub16(q, b[i].qs, sc);
        sum += (fp16_f32(a[i].d) * b[i].d) * (float)isum;
    }
    return sum;
}

/* ---- K-quants: scale search (after ggml's make_qkx2/make_q3/make_qx_quants) ---- */

/* Affine fit x ~ scale * L + min with L in 0..nmax, min <= 0, minimising the weighted error
 * (absolute if use_mad, else squared): start from the min/max grid, then try nstep+1 grid
 * densities (nmax + rmin + rdelta*k levels over the range), each followed by a weighted
 * least-squares refit of scale and min. Returns scale, sets *ret_neg_min = -min >= 0. */
static float fit_scale_min(int n, int nmax, const float *x, const float *wt, uint8_t *L,
                           float *ret_neg_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
                           int use_mad) {
    float min = x[0], max = x[0];
    float sum_w = wt[0], sum_x = wt[0] * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min)
            min = x[i];
        if (x[i] > max)
            max = x[i];
        sum_w += wt[i];
        sum_x += wt[i] * x[i];
    }
    if (min > 0.f)
        min = 0.f;
    if (!(max > min)) { /* constant (or NaN) group */
        memset(L, 0, (size_t)n);
        *ret_neg_min = min == min ? -min : 0.f;
        return 0.f;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1.f / iscale;
    float best = 0.f;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax);
        float diff = scale * L[i] + min - x[i];
        best += wt[i] * (use_mad ? fabsf(diff) : diff * diff);
    }
    for (int k = 0; k <= nstep; k++) {
        float sum_l = 0.f, sum_l2 = 0.f, sum_xl = 0.f;
        iscale = (rmin + rdelta * (float)k + (float)nmax) / (max - min);
        for (int i = 0; i < n; i++) {
            int l = clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            sum_l += wt[i] * (float)l;
            sum_l2 += wt[i] * (float)(l * l);
            sum_xl += wt[i] * (float)l * x[i];
        }
        float det = sum_w * sum_l2 - sum_l * sum_l;
        if (!(det > 0.f))
            continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
        if (this_min > 0.f) {
            this_min = 0.f;
            this_scale = sum_xl / sum_l2;
        }
        float err = 0.f;
        for (int i = 0; i < n; i++) {
            float diff = this_scale * Laux[i] + this_min - x[i];
            err += wt[i] * (use_mad ? fabsf(diff) : diff * diff);
        }
        if (err < best) {
            memcpy(L, Laux, (size_t)n);
            best = err;
            scale = this_scale;
            min = this_min;
        }
    }
    *ret_neg_min = -min;
    return scale;
}

#define GROUP_MAX_EPS 1e-15f

/* Symmetric fit for Q3_K sub-blocks: L in -nmax..nmax-1 around the signed extreme, then up
 * to 5 passes of coordinate descent on the x^2-weighted least-squares error. Returns the
 * (signed) scale; L is stored with offset nmax. */
static float fit_q3(int n, int nmax, const float *x, int8_t *L) {
    float max = signed_absmax(x, n);
    if (!(fabsf(max) >= GROUP_MAX_EPS)) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -(float)nmax / max;
    float sumlx = 0.f, suml2 = 0.f;
    for (int i = 0; i < n; i++) {
        int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        float w = x[i] * x[i];
        L[i] = (int8_t)l;
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)(l * l);
    }
    for (int pass = 0; pass < 5; pass++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (!(slx > 0.f))
                continue;
            float sl2 = suml2 - w * (float)(L[i] * L[i]);
            int nl = clamp_int(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
            if (nl == L[i])
                continue;
            slx += w * x[i] * (float)nl;
            sl2 += w * (float)(nl * nl);
            if (sl2 > 0.f && slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (int8_t)nl;
                sumlx = slx;
                suml2 = sl2;
                changed++;
            }
        }
        if (!changed)
            break;
    }
    for (int i = 0; i < n; i++)
        L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.f ? sumlx / suml2 : 0.f;
}

/* Symmetric fit for Q6_K sub-blocks (ggml's make_qx_quants with x^2 weights): try 19 grid
 * densities around nmax levels and keep the one maximising (sum w x l)^2 / sum w l^2.
 * Returns the signed scale; L is stored with offset nmax. */
static float fit_symmetric(int n, int nmax, const float *x, int8_t *L) {
    float max = signed_absmax(x, n);
    if (!(fabsf(max) >= GROUP_MAX_EPS)) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -(float)nmax / max;
    float sumlx = 0.f, suml2 = 0.f;
    for (int i = 0; i < n; i++) {
        int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        float w = x[i] * x[i];
        L[i] = (int8_t)(l + nmax);
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)(l * l);
    }
    float scale = suml2 != 0.f ? sumlx / suml2 : 0.f;
    float best = scale * sumlx;
    for (int k = -9; k <= 9; k++) {
        if (k == 0)
            continue;
        iscale = -((float)nmax + 0.1f * (float)k) / max;
        sumlx = suml2 = 0.f;
        for (int i = 0; i < n; i++) {
            int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
            float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)(l * l);
        }
        if (suml2 > 0.f && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* ---- K-quants: quantize ---- */

static void q2_K_from_f32(const float *restrict src, void *restrict dst, int64_t n) {
    struct pl_block_q2_K *b = dst;
    uint8_t L[PL_QK_K], Laux[16];
    float wt[16], scales[PL_QK_K / 16], mins[PL_QK_K / 16];
    assert(n % PL_QK_K == 0);
    for (int64_t i = 0; i < n / PL_QK_K; i++, src += PL_QK_K) {
        float max_scale = 0.f, max_min = 0.f; /* scales and mins are >= 0 here */
        for (int j = 0; j < PL_QK_K / 16; j++) {
            for (int l = 0; l < 16; l++)
                wt[l] = fabsf(src[16 * j + l]);
            scales[j] = fit_scale_min(16, 3, src + 16 * j, wt, L + 16 * j, &mins[j], Laux, -0.5f,
                                      0.1f, 15, 1);
            if (scales[j] > max_scale)
                max_scale = scales[j];
            if (mins[j] > max_min)
                max_min = mins[j];
        }
        /* 4-bit scales and mins relative to the super-block maxima */
        memset(b[i].scales, 0, sizeof(b[i].scales));
        b[i].d = 0;
        b[i].dmin = 0;
        if (max_scale > 0.f) {
            float iscale = 15.f / max_scale;
            for (int j = 0; j < PL_QK_K / 16; j++)
                b[i].scales[j] = (uint8_t)clamp_int(nearest_int(iscale * scales[j]), 0, 15);
            b[i].d = f32_fp16(max_scale / 15.f);
        }
        if (max_min > 0.f) {
            float iscale = 15.f / max_min;
            for (int j = 0; j < PL_QK_K / 16; j++)
                b[i].scales[j] |= (uint8_t)(clamp_int(nearest_int(iscale * mins[j]), 0, 15) << 4);
            b[i].dmin = f32_fp16(max_min / 15.f);
        }
        /* re-quantize against the scales as stored */
        for (int j = 0; j < PL_QK_K / 16; j++) {
            float d = fp16_f32(b[i].d) * (float)(b[i].scales[j] & 0x0F);
            if (d == 0.f)
                continue;
            float dm = fp16_f32(b[i].dmin) * (float)(b[i].scales[j] >> 4);
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (uint8_t)clamp_int(nearest_int((src[16 * j + l] + dm) / d), 0, 3);
        }
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++)
                b[i].qs[32 * h + l] =
                    (uint8_t)(L[128 * h + l] | (L[128 * h + 32 + l] << 2) |
                              (L[128 * h + 64 + l] << 4) | (L[128 * h + 96 + l] << 6));
    }
}

static void q3_K_from_f32(const float *restrict src, void *restrict dst, int64_t n) {
    struct pl_block_q3_K *b = dst;
    int8_t L[PL_QK_K];
    float scales[PL_QK_K / 16];
    assert(n % PL_QK_K == 0);
    for (int64_t i = 0; i < n / PL_QK_K; i++, src += PL_QK_K) {
        float max_scale = 0.f, amax = 0.f;
        for (int j = 0; j < PL_QK_K / 16; j++) {
            scales[j] = fit_q3(16, 4, src + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) {
                amax = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        memset(b[i].scales, 0, sizeof(b[i].scales));
        b[i].d = 0;
        if (max_scale != 0.f) {
            /* 6-bit signed scales (offset 32), the extreme one at -32 */
            float iscale = -32.f / max_scale;
            for (int j = 0; j < PL_QK_K / 16; j++) {
                int l = clamp_int(nearest_int(iscale * scales[j]), -32, 31) + 32;
                if (j < 8)
                    b[i].scales[j] = (uint8_t)(l & 0x0F);
                else
                    b[i].scales[j - 8] |= (uint8_t)((l & 0x0F) << 4);
                b[i].scales[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            b[i].d = f32_fp16(1.f / iscale);
        }
        for (int j = 0; j < PL_QK_K / 16; j++) {
            float d = fp16_f32(b[i].d) * (float)(pl_q3k_scale(j, b[i].scales) - 32);
            if (d == 0.f)
                continue;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (int8_t)(clamp_int(nearest_int(src[16 * j + l] / d), -4, 3) + 4);
        }
        /* bit 2 of L goes to hmask (bit 4h+s of hmask[l]), bits 0..1 to qs */
        memset(b[i].hmask, 0, sizeof(b[i].hmask));
        for (int k = 0; k < PL_QK_K; k++) {
            if (L[k] > 3) {
                b[i].hmask[k % 32] |= (uint8_t)(1u << (k / 32));
                L[k] = (int8_t)(L[k] - 4);
            }
        }
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++)
                b[i].qs[32 * h + l] =
                    (uint8_t)(L[128 * h + l] | (L[128 * h + 32 + l] << 2) |
                              (L[128 * h + 64 + l] << 4) | (L[128 * h + 96 + l] << 6));
    }
}

/* Shared by Q4_K (nmax 15) and Q5_K (nmax 31): fits the 8 sub-blocks, packs the 6-bit
 * scales and mins, re-quantizes against the stored values. L gets 0..nmax per element. */
static void q45_K_quantize(const float *x, int nmax, float rmin, int nstep, uint16_t *ret_d,
                           uint16_t *ret_dmin, uint8_t scales_out[PL_K_SCALE_SIZE],
                           uint8_t L[PL_QK_K]) {
    uint8_t Laux[32];
    float wt[32], scales[PL_QK_K / 32], mins[PL_QK_K / 32];
    float max_scale = 0.f, max_min = 0.f;
    for (int j = 0; j < PL_QK_K / 32; j++) {
        float sum_x2 = 0.f;
        for (int l = 0; l < 32; l++)
            sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32.f);
        for (int l = 0; l < 32; l++)
            wt[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = fit_scale_min(32, nmax, x + 32 * j, wt, L + 32 * j, &mins[j], Laux, rmin, 0.1f,
                                  nstep, 0);
        if (scales[j] > max_scale)
            max_scale = scales[j];
        if (mins[j] > max_min)
            max_min = mins[j];
    }
    float inv_scale = max_scale > 0.f ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0.f ? 63.f / max_min : 0.f;
    memset(scales_out, 0, PL_K_SCALE_SIZE);
    for (int j = 0; j < PL_QK_K / 32; j++) {
        uint8_t ls = (uint8_t)clamp_int(nearest_int(inv_scale * scales[j]), 0, 63);
        uint8_t lm = (uint8_t)clamp_int(nearest_int(inv_min * mins[j]), 0, 63);
        if (j < 4) {
            scales_out[j] |= ls;
            scales_out[j + 4] |= lm;
        } else {
            scales_out[j + 4] = (uint8_t)((ls & 0x0F) | ((lm & 0x0F) << 4));
            scales_out[j - 4] |= (uint8_t)((ls >> 4) << 6);
            scales_out[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *ret_d = f32_fp16(max_scale / 63.f);
    *ret_dmin = f32_fp16(max_min / 63.f);
    for (int j = 0; j < PL_QK_K / 32; j++) {
        uint8_t sc, m;
        pl_q4k_scale_min(j, scales_out, &sc, &m);
        float d = fp16_f32(*ret_d) * (float)sc;
        if (d == 0.f)
            continue;
        float dm = fp16_f32(*ret_dmin) * (float)m;
        for (int l = 0; l < 32; l++)
            L[32 * j + l] = (uint8_t)clamp_int(nearest_int((x[32 * j + l] + dm) / d), 0, nmax);
    }
}

static void q4_K_from_f32(const float *restrict src, void *restrict dst, int64_t n) {
    struct pl_block_q4_K *b = dst;
    uint8_t L[PL_QK_K];
    assert(n % PL_QK_K == 0);
    for (int64_t i = 0; i < n / PL_QK_K; i++, src += PL_QK_K) {
        q45_K_quantize(src, 15, -1.f, 20, &b[i].d, &b[i].dmin, b[i].scales, L);
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++)
                b[i].qs[32 * g + l] = (uint8_t)(L[64 * g + l] | (L[64 * g + 32 + l] << 4));
    }
}

static void q5_K_from_f32(const float *restrict src, void *restrict dst, int64_t n) {
    struct pl_block_q5_K *b = dst;
    uint8_t L[PL_QK_K];
    assert(n % PL_QK_K == 0);
    for (int64_t i = 0; i < n / PL_QK_K; i++, src += PL_QK_K) {
        q45_K_quantize(src, 31, -0.5f, 15, &b[i].d, &b[i].dmin, b[i].scales, L);
        memset(b[i].qh, 0, sizeof(b[i].qh));
        for (int g = 0; g < 4; g++) {
            for (int l = 0; l < 32; l++) {
                int lo = L[64 * g + l], hi = L[64 * g + 32 + l];
                b[i].qh[l] |= (uint8_t)(((lo >> 4) << (2 * g)) | ((hi >> 4) << (2 * g + 1)));
                b[i].qs[32 * g + l] = (uint8_t)((lo & 0x0F) | ((hi & 0x0F) << 4));
            }
        }
    }
}

static void q6_K_from_f32(const float *restrict src, void *restrict dst, int64_t n) {
    struct pl_block_q6_K *b = dst;
    int8_t L[PL_QK_K];
    float scales[PL_QK_K / 16];
    assert(n % PL_QK_K == 0);
    for (int64_t i = 0; i < n / PL_QK_K; i++, src += PL_QK_K) {
        float max_scale = 0.f, max_abs = 0.f;
        for (int j = 0; j < PL_QK_K / 16; j++) {
            scales[j] = fit_symmetric(16, 32, src + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > max_abs) {
                max_abs = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        if (!(max_abs >= GROUP_MAX_EPS)) {
            memset(&b[i], 0, sizeof(b[i]));
            continue;
        }
        /* 8-bit signed scales, the extreme one at -128 */
        float iscale = -128.f / max_scale;
        b[i].d = f32_fp16(1.f / iscale);
        for (int j = 0; j < PL_QK_K / 16; j++)
            b[i].scales[j] = (int8_t)clamp_int(nearest_int(iscale * scales[j]), -128, 127);
        for (int j = 0; j < PL_QK_K / 16; j++) {
            float d = fp16_f32(b[i].d) * (float)b[i].scales[j];
            if (d == 0.f)
                continue;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (int8_t)(clamp_int(nearest_int(src[16 * j + l] / d), -32, 31) + 32);
        }
        for (int h = 0; h < 2; h++) {
            uint8_t *ql = b[i].ql + 64 * h, *qh = b[i].qh + 32 * h;
            const int8_t *Lh = L + 128 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((Lh[l] & 0x0F) | ((Lh[64 + l] & 0x0F) << 4));
                ql[l + 32] = (uint8_t)((Lh[32 + l] & 0x0F) | ((Lh[96 + l] & 0x0F) << 4));
                qh[l] = (uint8_t)((Lh[l] >> 4) | ((Lh[32 + l] >> 4) << 2) |
                                  ((Lh[64 + l] >> 4) << 4) | ((Lh[96 + l] >> 4) << 6));
            }
        }
    }
}

/* ---- The table ---- */

/* A type's reference kernels: no vec_dotn or vec_dot_a (SIMD tables add those). */
#define REF(to, from, dot_type, dot)                                                               \
    { .to_f32 = (to), .from_f32 = (from), .vec_dot_type = (dot_type), .vec_dot = (dot) }

const struct pl_quant_kernels pl_quant_ref_table[_PL_GGML_TYPE_MAX] = {
    [PL_GGML_TYPE_F32] = REF(f32_to_f32, f32_from_f32, PL_GGML_TYPE_F32, vec_dot_f32),
    [PL_GGML_TYPE_F16] = REF(f16_to_f32, f16_from_f32, PL_GGML_TYPE_F16, vec_dot_f16),
    [PL_GGML_TYPE_BF16] = REF(bf16_to_f32, bf16_from_f32, PL_GGML_TYPE_BF16, vec_dot_bf16),
    [PL_GGML_TYPE_Q4_0] = REF(q4_0_to_f32, q4_0_from_f32, PL_GGML_TYPE_Q8_0, vec_dot_q4_0),
    [PL_GGML_TYPE_Q4_1] = REF(q4_1_to_f32, q4_1_from_f32, PL_GGML_TYPE_Q8_1, vec_dot_q4_1),
    [PL_GGML_TYPE_Q5_0] = REF(q5_0_to_f32, q5_0_from_f32, PL_GGML_TYPE_Q8_0, vec_dot_q5_0),
    [PL_GGML_TYPE_Q5_1] = REF(q5_1_to_f32, q5_1_from_f32, PL_GGML_TYPE_Q8_1, vec_dot_q5_1),
    [PL_GGML_TYPE_Q8_0] = REF(q8_0_to_f32, q8_0_from_f32, PL_GGML_TYPE_Q8_0, vec_dot_q8_0),
    [PL_GGML_TYPE_Q8_1] = REF(q8_1_to_f32, q8_1_from_f32, PL_GGML_TYPE_Q8_1, NULL),
    [PL_GGML_TYPE_Q2_K] = REF(q2_K_to_f32, q2_K_from_f32, PL_GGML_TYPE_Q8_K, vec_dot_q2_K),
    [PL_GGML_TYPE_Q3_K] = REF(q3_K_to_f32, q3_K_from_f32, PL_GGML_TYPE_Q8_K, vec_dot_q3_K),
    [PL_GGML_TYPE_Q4_K] = REF(q4_K_to_f32, q4_K_from_f32, PL_GGML_TYPE_Q8_K, vec_dot_q4_K),
    [PL_GGML_TYPE_Q5_K] = REF(q5_K_to_f32, q5_K_from_f32, PL_GGML_TYPE_Q8_K, vec_dot_q5_K),
    [PL_GGML_TYPE_Q6_K] = REF(q6_K_to_f32, q6_K_from_f32, PL_GGML_TYPE_Q8_K, vec_dot_q6_K),
    [PL_GGML_TYPE_Q8_K] = REF(q8_K_to_f32, q8_K_from_f32, PL_GGML_TYPE_Q8_K, NULL),
};
#undef REF
