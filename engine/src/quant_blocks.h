/* SPDX-License-Identifier: MIT */
/* On-disk block layouts of the ggml quantized types, byte for byte as GGUF stores them
 * (little-endian, no padding), plus the inline half/bfloat16 conversions the kernels use.
 * Private to engine/: included by the scalar references (quant_ref.c), the dispatcher
 * (quant.c) and the ISA kernels under engine/arch/. Every size is checked at compile time
 * and must agree with the type table in types.c (checked by the unit test too). */
#ifndef PL_ENGINE_QUANT_BLOCKS_H
#define PL_ENGINE_QUANT_BLOCKS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pl/engine_quant.h"

/* Elements per block. */
#define PL_QK4_0 32
#define PL_QK4_1 32
#define PL_QK5_0 32
#define PL_QK5_1 32
#define PL_QK8_0 32
#define PL_QK8_1 32
#define PL_QK_K 256        /* super-block of the K-quants */
#define PL_K_SCALE_SIZE 12 /* packed 6-bit scales/mins of Q4_K and Q5_K */

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "GGUF blocks are little-endian");

/* ---- Legacy 32-element blocks ---- */

/* x[i] = d * (q[i] - 8); element j < 16 in the low nibble of qs[j], j >= 16 in the high
 * nibble of qs[j - 16]. */
struct pl_block_q4_0 {
    uint16_t d; /* fp16 scale */
    uint8_t qs[PL_QK4_0 / 2];
};
_Static_assert(sizeof(struct pl_block_q4_0) == 18, "q4_0 block size");

/* x[i] = d * q[i] + m; nibble order as Q4_0. */
struct pl_block_q4_1 {
    uint16_t d; /* fp16 scale */
    uint16_t m; /* fp16 minimum */
    uint8_t qs[PL_QK4_1 / 2];
};
_Static_assert(sizeof(struct pl_block_q4_1) == 20, "q4_1 block size");

/* x[i] = d * (q[i] - 16); low 4 bits as Q4_0, bit 4 of element i is bit i of the
 * little-endian 32-bit word qh. */
struct pl_block_q5_0 {
    uint16_t d;    /* fp16 scale */
    uint8_t qh[4]; /* high bits, a little-endian uint32 (kept as bytes: unaligned) */
    uint8_t qs[PL_QK5_0 / 2];
};
_Static_assert(sizeof(struct pl_block_q5_0) == 22, "q5_0 block size");

/* x[i] = d * q[i] + m; bits as Q5_0. */
struct pl_block_q5_1 {
    uint16_t d; /* fp16 scale */
    uint16_t m; /* fp16 minimum */
    uint8_t qh[4];
    uint8_t qs[PL_QK5_1 / 2];
};
_Static_assert(sizeof(struct pl_block_q5_1) == 24, "q5_1 block size");

/* x[i] = d * qs[i]. */
struct pl_block_q8_0 {
    uint16_t d; /* fp16 scale */
    int8_t qs[PL_QK8_0];
};
_Static_assert(sizeof(struct pl_block_q8_0) == 34, "q8_0 block size");

/* x[i] = d * qs[i]; s = d * sum(qs) (fp16), used by the dot products with Q4_1/Q5_1 to
 * apply the weight block's minimum in one multiply. Activations only. */
struct pl_block_q8_1 {
    uint16_t d; /* fp16 scale */
    uint16_t s; /* fp16: d * sum(qs) */
    int8_t qs[PL_QK8_1];
};
_Static_assert(sizeof(struct pl_block_q8_1) == 36, "q8_1 block size");

/* ---- K-quants: 256-element super-blocks ---- */

/* 16 sub-blocks of 16. scales[j]: low nibble = scale, high nibble = min of sub-block j;
 * x = d * scale * q - dmin * min with q 2 bits. Element i = 128*h + 32*s + l (h < 2,
 * s < 4, l < 32) is bits 2s..2s+1 of qs[32*h + l]; its sub-block is i / 16. */
struct pl_block_q2_K {
    uint8_t scales[PL_QK_K / 16];
    uint8_t qs[PL_QK_K / 4];
    uint16_t d;    /* fp16 super-block scale of the scales */
    uint16_t dmin; /* fp16 super-block scale of the mins */
};
_Static_assert(sizeof(struct pl_block_q2_K) == 2 * 2 + PL_QK_K / 16 + PL_QK_K / 4,
               "q2_K block size");

/* 16 sub-blocks of 16, signed 6-bit scales stored with offset 32: low 4 bits of scale j in
 * scales[j % 8] (low nibble for j < 8, high for j >= 8), top 2 bits in bits 2*(j/4) of
 * scales[8 + j % 4]. q = low 2 bits (as Q2_K) - 4 unless the hmask bit is set; the hmask
 * bit of element i = 128*h + 32*s + l is bit (4h + s) of hmask[l]. x = d * (scale-32) * q. */
struct pl_block_q3_K {
    uint8_t hmask[PL_QK_K / 8];
    uint8_t qs[PL_QK_K / 4];
    uint8_t scales[12];
    uint16_t d; /* fp16 super-block scale */
};
_Static_assert(sizeof(struct pl_block_q3_K) == 2 + PL_QK_K / 4 + PL_QK_K / 8 + 12,
               "q3_K block size");

/* 8 sub-blocks of 32 with 6-bit scale and min (see pl_q4k_scale_min). x = d * scale * q -
 * dmin * min; element i = 64*g + 32*half + l is the low (half 0) or high (half 1) nibble
 * of qs[32*g + l]; its sub-block is i / 32. */
struct pl_block_q4_K {
    uint16_t d;    /* fp16 super-block scale of the scales */
    uint16_t dmin; /* fp16 super-block scale of the mins */
    uint8_t scales[PL_K_SCALE_SIZE];
    uint8_t qs[PL_QK_K / 2];
};
_Static_assert(sizeof(struct pl_block_q4_K) == 2 * 2 + PL_K_SCALE_SIZE + PL_QK_K / 2,
               "q4_K block size");

/* As Q4_K plus a 5th bit: bit (2g + half) of qh[l] for element 64*g + 32*half + l. */
struct pl_block_q5_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[PL_K_SCALE_SIZE];
    uint8_t qh[PL_QK_K / 8];
    uint8_t qs[PL_QK_K / 2];
};
_Static_assert(sizeof(struct pl_block_q5_K) == 2 * 2 + PL_K_SCALE_SIZE + PL_QK_K / 8 + PL_QK_K / 2,
               "q5_K block size");

/* 16 sub-blocks of 16 with signed 8-bit scales; q = 6 bits - 32, x = d * scale * q. For
 * element i = 128*h + 32*s + l: low 4 bits are the low (s < 2) or high (s >= 2) nibble of
 * ql[64*h + 32*(s%2) + l], top 2 bits are bits 2s..2s+1 of qh[32*h + l]; scale i / 16. */
struct pl_block_q6_K {
    uint8_t ql[PL_QK_K / 2];
    uint8_t qh[PL_QK_K / 4];
    int8_t scales[PL_QK_K / 16];
    uint16_t d; /* fp16 super-block scale */
};
_Static_assert(sizeof(struct pl_block_q6_K) == 2 + PL_QK_K / 16 + 3 * PL_QK_K / 4,
               "q6_K block size");

/* Activations for the K-quant dot products: x = d * qs, bsums[j] = sum of qs[16j..16j+15]
 * (lets the dot products apply the weight minimums per 16 elements without touching qs). */
struct pl_block_q8_K {
    float d;
    int8_t qs[PL_QK_K];
    int16_t bsums[PL_QK_K / 16];
};
_Static_assert(sizeof(struct pl_block_q8_K) == 4 + PL_QK_K + PL_QK_K / 16 * 2, "q8_K block size");

/* A Q8_K block re-laid for the kernels' vec_dot_a (pl_quant_q8_K_align()): the same fields,
 * the quants on a 64-byte boundary of a 64-byte aligned block, so that no 64-byte load of
 * them straddles two cache lines (in ggml's 292-byte blocks every one does). */
struct pl_block_q8_Ka {
    float d;
    uint8_t pad0[60];
    int8_t qs[PL_QK_K];
    int16_t bsums[PL_QK_K / 16];
    uint8_t pad1[32];
};
_Static_assert(sizeof(struct pl_block_q8_Ka) == PL_QUANT_Q8_KA_BYTES, "q8_Ka block size");

/* The 6-bit scale and min of sub-block j (< 8) of a Q4_K/Q5_K block: sub-blocks 0..3 keep
 * them in the low 6 bits of bytes j and j+4; sub-blocks 4..7 keep the low 4 bits in the
 * nibbles of byte j+4 and the top 2 bits in bits 6..7 of bytes j-4 (scale) and j (min). */
static inline void pl_q4k_scale_min(int j, const uint8_t *q, uint8_t *ret_scale, uint8_t *ret_min) {
    if (j < 4) {
        *ret_scale = q[j] & 63;
        *ret_min = q[j + 4] & 63;
    } else {
        *ret_scale = (uint8_t)((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
        *ret_min = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* All 8 of them at once from the 12 packed bytes q: byte j of *ret_scales is the scale of
 * sub-block j, byte j of *ret_mins its min (as pl_q4k_scale_min), for the SIMD kernels. */
static inline void pl_q4k_scales_mins8(const uint8_t *q, uint64_t *ret_scales, uint64_t *ret_mins) {
    uint32_t w0, w1, w2;
    memcpy(&w0, q, 4);
    memcpy(&w1, q + 4, 4);
    memcpy(&w2, q + 8, 4);
    const uint32_t m6 = 0x3F3F3F3Fu, m4 = 0x0F0F0F0Fu, m2 = 0x03030303u;
    const uint32_t sc_hi = (w2 & m4) | (((w0 >> 6) & m2) << 4);
    const uint32_t mn_hi = ((w2 >> 4) & m4) | (((w1 >> 6) & m2) << 4);
    *ret_scales = (uint64_t)(w0 & m6) | ((uint64_t)sc_hi << 32);
    *ret_mins = (uint64_t)(w1 & m6) | ((uint64_t)mn_hi << 32);
}

/* The 6-bit stored value (0..63, offset 32) of scale j (< 16) of a Q3_K block. */
static inline int pl_q3k_scale(int j, const uint8_t *scales) {
    int lo = j < 8 ? (scales[j] & 0x0F) : (scales[j - 8] >> 4);
    int hi = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    return lo | (hi << 4);
}

/* ---- Half and bfloat16 (bit-exact, no tables, no FPU mode dependence) ---- */

static inline float pl_bits_to_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static inline uint32_t pl_f32_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float pl_fp16_to_f32_inline(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1F;
    uint32_t mant = h & 0x3FF;
    if (exp == 0x1F) /* Inf or NaN: payload kept, NaN stays NaN */
        return pl_bits_to_f32(sign | 0x7F800000u | (mant << 13));
    if (exp != 0) /* normal: rebias 15 -> 127 */
        return pl_bits_to_f32(sign | ((exp + 112) << 23) | (mant << 13));
    /* zero or subnormal: mant * 2^-24, exact in float */
    return pl_bits_to_f32(sign | pl_f32_to_bits((float)mant * 0x1p-24f));
}

/* Round to nearest, ties to even; overflow gives Inf, NaN stays a (quiet) NaN. */
static inline uint16_t pl_f32_to_fp16_inline(float f) {
    uint32_t x = pl_f32_to_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7FFFFFFFu;
    uint32_t h, rem, half;
    if (ax > 0x7F800000u) /* NaN: set the quiet bit, keep the top of the payload */
        return (uint16_t)(sign | 0x7E00 | ((ax >> 13) & 0x3FF));
    if (ax >= 0x477FF000u) /* >= 65520 (halfway past 65504) or Inf */
        return (uint16_t)(sign | 0x7C00);
    if (ax >= 0x38800000u) {           /* >= 2^-14: normal half */
        uint32_t r = ax - 0x38000000u; /* exponent rebias 127 -> 15 */
        h = r >> 13;
        rem = r & 0x1FFF;
        if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
            h++; /* a carry into the exponent is the correct result */
        return (uint16_t)(sign | h);
    }
    if (ax < 0x33000000u) /* below 2^-25 (half the smallest subnormal): zero */
        return (uint16_t)sign;
    /* subnormal half: round (m * 2^(e-150)) / 2^-24 */
    {
        uint32_t e = ax >> 23; /* 102..112 */
        uint32_t m = (ax & 0x7FFFFF) | 0x800000;
        uint32_t shift = 126 - e; /* 14..24 */
        h = m >> shift;
        rem = m & ((1u << shift) - 1);
        half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1)))
            h++; /* may become 0x400, the smallest normal: correct */
        return (uint16_t)(sign | h);
    }
}

static inline float pl_bf16_to_f32_inline(uint16_t h) {
    return pl_bits_to_f32((uint32_t)h << 16);
}

/* Round to nearest, ties to even (subnormals kept); NaN stays a quiet NaN. */
static inline uint16_t pl_f32_to_bf16_inline(float f) {
    uint32_t x = pl_f32_to_bits(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((x >> 16) | 0x40);
    return (uint16_t)((x + 0x7FFFu + ((x >> 16) & 1)) >> 16);
}

#endif
