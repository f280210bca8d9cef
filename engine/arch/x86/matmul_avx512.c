/* SPDX-License-Identifier: MIT */
/* Tiled matrix x matrix kernels with AVX-512 VNNI (see engine/src/matmul.h), for prefill:
 * one weight super-block (256 elements) is unpacked once into four registers of unsigned
 * bytes, laid out so that every 32-bit lane holds elements of one sub-block only, and then
 * multiplied with the 16 tokens of an activation tile by vpdpbusd (4 per token and
 * super-block). Lanes never mix sub-blocks, so the sub-block scales are applied by one
 * float multiply per token and super-block; the weights' offsets and mins (Q4_0's -8,
 * Q8_0's +128 bias, Q6_K's -32, Q4_K's mins) are applied once per row for all 16 tokens
 * through the tile's per-sub-block activation sums. Compiled with -mavx512{f,bw,vl,vnni};
 * matmul.c calls it only on CPUs that have them. Integer sums are exact; float rounding
 * differs from the per-row dot products only in the order of additions. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "matmul.h"
#include "quant_blocks.h"
#include "pl/engine_types.h"

#define T PL_MM_TILE

_Static_assert(PL_MM_TILE == 16, "the kernels below hold 16 token accumulators");

/* ---- Activation repacking (once per token and matrix: cost is negligible) ---- */

/* Layout 32 (Q8_K): qword 8k + j of the super-block = qword 4j + k of the source, so lane
 * pair (2j, 2j + 1) of register k holds elements 32j + 8k .. 32j + 8k + 7. */
static void prep_q8_K_32(const void *xq, int64_t n, uint8_t *tile, uint32_t t) {
    const struct pl_block_q8_K *b = xq;
    for (int64_t s = 0; s < n / 256; s++) {
        int8_t *q = pl_mm_tile_qs(tile, n, s, t);
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < 8; j++)
                memcpy(q + 8 * (8 * k + j), b[s].qs + 8 * (4 * j + k), 8);
        float *da = pl_mm_tile_da(tile, n, s, t);
        for (int j = 0; j < 8; j++)
            da[j] = b[s].d;
        for (uint32_t j = 0; j < 16; j++)
            pl_mm_tile_fs(tile, n, s, j)[t] =
                j < 8 ? b[s].d * (float)(b[s].bsums[2 * j] + b[s].bsums[2 * j + 1]) : 0.0f;
    }
}

/* Layout 16 (Q8_K): dword 16k + j = dword 4j + k of the source, so lane j of register k
 * holds elements 16j + 4k .. 16j + 4k + 3. */
static void prep_q8_K_16(const void *xq, int64_t n, uint8_t *tile, uint32_t t) {
    const struct pl_block_q8_K *b = xq;
    for (int64_t s = 0; s < n / 256; s++) {
        int8_t *q = pl_mm_tile_qs(tile, n, s, t);
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < 16; j++)
                memcpy(q + 4 * (16 * k + j), b[s].qs + 4 * (4 * j + k), 4);
        float *da = pl_mm_tile_da(tile, n, s, t);
        for (int j = 0; j < 8; j++)
            da[j] = b[s].d;
        for (uint32_t j = 0; j < 16; j++)
            pl_mm_tile_fs(tile, n, s, j)[t] = b[s].d * (float)b[s].bsums[j];
    }
}

/* Layout 32 (Q8_0): block j of the super-block's 8 feeds lanes 2j, 2j + 1: qword 8k + j =
 * qword k of block j. */
static void prep_q8_0_32(const void *xq, int64_t n, uint8_t *tile, uint32_t t) {
    const struct pl_block_q8_0 *b = xq;
    for (int64_t s = 0; s < n / 256; s++) {
        int8_t *q = pl_mm_tile_qs(tile, n, s, t);
        float *da = pl_mm_tile_da(tile, n, s, t);
        for (int j = 0; j < 8; j++) {
            const struct pl_block_q8_0 *bj = &b[8 * s + j];
            int sum = 0;
            for (int k = 0; k < 4; k++)
                memcpy(q + 8 * (8 * k + j), bj->qs + 8 * k, 8);
            for (int i = 0; i < PL_QK8_0; i++)
                sum += bj->qs[i];
            da[j] = pl_fp16_to_f32_inline(bj->d);
            pl_mm_tile_fs(tile, n, s, (uint32_t)j)[t] = da[j] * (float)sum;
        }
        for (uint32_t j = 8; j < 16; j++)
            pl_mm_tile_fs(tile, n, s, j)[t] = 0.0f;
    }
}

/* ---- Weight unpacking: one super-block of one row ---- */

/* An unpacked super-block: four registers of unsigned bytes in the tile's lane order, the
 * float scale of each lane's sub-block, and per sub-block the coefficient c_j such that the
 * row's result is sum(lanes) - sum_j c_j * fs_j. */
struct unpacked {
    __m512i w[4];
    __m512 scale;
    float c[16];
};

static inline float h2f(uint16_t h) {
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

static inline void unpack_q4_K(const uint8_t *row, int64_t s, struct unpacked *u) {
    const struct pl_block_q4_K *b = (const struct pl_block_q4_K *)(const void *)row + s;
    const __m512i q0 = _mm512_loadu_si512(b->qs), q1 = _mm512_loadu_si512(b->qs + 64);
    const __m512i shift = _mm512_set_epi64(4, 0, 4, 0, 4, 0, 4, 0);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int k = 0; k < 4; k++) {
        /* qword j: source qword 4 (j / 2) + k, low nibbles for even j, high for odd */
        __m512i idx = _mm512_set_epi64(12 + k, 12 + k, 8 + k, 8 + k, 4 + k, 4 + k, k, k);
        __m512i v = _mm512_permutex2var_epi64(q0, idx, q1);
        u->w[k] = _mm512_and_si512(_mm512_srlv_epi64(v, shift), m4);
    }
    /* 6-bit scales and mins of the 8 sub-blocks (see pl_q4k_scale_min). */
    uint32_t w0, w1, w2;
    memcpy(&w0, b->scales, 4);
    memcpy(&w1, b->scales + 4, 4);
    memcpy(&w2, b->scales + 8, 4);
    const uint32_t m6 = 0x3F3F3F3Fu, k4 = 0x0F0F0F0Fu, k2 = 0x03030303u;
    uint32_t sc[2] = {w0 & m6, (w2 & k4) | (((w0 >> 6) & k2) << 4)};
    uint32_t mn[2] = {w1 & m6, ((w2 >> 4) & k4) | (((w1 >> 6) & k2) << 4)};
    __m128i s8 = _mm_loadl_epi64((const __m128i *)(const void *)sc);
    s8 = _mm_unpacklo_epi8(s8, s8); /* byte l = scale of sub-block l / 2 */
    const float d = h2f(b->d), dmin = h2f(b->dmin);
    u->scale = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(s8)), _mm512_set1_ps(d));
    const uint8_t *m8 = (const uint8_t *)mn;
    for (int j = 0; j < 8; j++)
        u->c[j] = dmin * (float)m8[j];
}

static inline void unpack_q6_K(const uint8_t *row, int64_t s, struct unpacked *u) {
    const struct pl_block_q6_K *b = (const struct pl_block_q6_K *)(const void *)row + s;
    const __m512i l0 = _mm512_loadu_si512(b->ql), l1 = _mm512_loadu_si512(b->ql + 64);
    const __m512i qh = _mm512_loadu_si512(b->qh);
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(0x03);
    /* lane j: half h = j / 8, quarter s = (j % 8) / 2, 16-element half of it j % 2 */
    const __m512i lsh = _mm512_set_epi32(4, 4, 4, 4, 0, 0, 0, 0, 4, 4, 4, 4, 0, 0, 0, 0);
    const __m512i hsh = _mm512_set_epi32(6, 6, 4, 4, 2, 2, 0, 0, 6, 6, 4, 4, 2, 2, 0, 0);
    for (int k = 0; k < 4; k++) {
        __m512i il = _mm512_set_epi32(28 + k, 24 + k, 20 + k, 16 + k, 28 + k, 24 + k, 20 + k,
                                      16 + k, 12 + k, 8 + k, 4 + k, k, 12 + k, 8 + k, 4 + k, k);
        __m512i ih = _mm512_set_epi32(12 + k, 8 + k, 12 + k, 8 + k, 12 + k, 8 + k, 12 + k,
                                      8 + k, 4 + k, k, 4 + k, k, 4 + k, k, 4 + k, k);
        __m512i lo = _mm512_and_si512(
            _mm512_srlv_epi32(_mm512_permutex2var_epi32(l0, il, l1), lsh), m4);
        __m512i hi = _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(ih, qh), hsh),
                                      m2);
        u->w[k] = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 4));
    }
    const float d = h2f(b->d);
    __m512 sc = _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)b->scales)));
    u->scale = _mm512_mul_ps(sc, _mm512_set1_ps(d));
    for (int j = 0; j < 16; j++)
        u->c[j] = 32.0f * d * (float)b->scales[j];
}

/* Q4_0 and Q8_0: the super-block is 8 blocks; block j feeds lanes 2j, 2j + 1. */
static inline void blocks_scale(const float *d8, struct unpacked *u, float bias) {
    const __m512i pairs = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    u->scale = _mm512_permutexvar_ps(pairs, _mm512_castps256_ps512(_mm256_loadu_ps(d8)));
    for (int j = 0; j < 8; j++)
        u->c[j] = bias * d8[j];
}

static inline void unpack_q4_0(const uint8_t *row, int64_t s, struct unpacked *u) {
    const struct pl_block_q4_0 *b = (const struct pl_block_q4_0 *)(const void *)row + 8 * s;
    uint64_t q[2][8];
    float d8[8];
    for (int j = 0; j < 8; j++) {
        memcpy(&q[0][j], b[j].qs, 8);
        memcpy(&q[1][j], b[j].qs + 8, 8);
        d8[j] = h2f(b[j].d);
    }
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i a = _mm512_loadu_si512(q[0]), c = _mm512_loadu_si512(q[1]);
    u->w[0] = _mm512_and_si512(a, m4); /* elements 0..7 of each block */
    u->w[1] = _mm512_and_si512(c, m4); /* 8..15 */
    u->w[2] = _mm512_and_si512(_mm512_srli_epi64(a, 4), m4); /* 16..23 */
    u->w[3] = _mm512_and_si512(_mm512_srli_epi64(c, 4), m4); /* 24..31 */
    blocks_scale(d8, u, 8.0f);
}

static inline void unpack_q8_0(const uint8_t *row, int64_t s, struct unpacked *u) {
    const struct pl_block_q8_0 *b = (const struct pl_block_q8_0 *)(const void *)row + 8 * s;
    uint64_t q[4][8];
    float d8[8];
    for (int j = 0; j < 8; j++) {
        memcpy(&q[0][j], b[j].qs, 8);
        memcpy(&q[1][j], b[j].qs + 8, 8);
        memcpy(&q[2][j], b[j].qs + 16, 8);
        memcpy(&q[3][j], b[j].qs + 24, 8);
        d8[j] = h2f(b[j].d);
    }
    const __m512i bias = _mm512_set1_epi8((char)0x80); /* w + 128 as unsigned bytes */
    for (int k = 0; k < 4; k++)
        u->w[k] = _mm512_xor_si512(_mm512_loadu_si512(q[k]), bias);
    blocks_scale(d8, u, 128.0f);
}

/* ---- The row kernel ---- */

/* For each of n_rows rows: 16 float accumulators (one per token), 4 vpdpbusd per token and
 * super-block, then sum(lanes) minus the offsets/mins term, computed over token lanes. */
#define DEFINE_ROWS(name, unpack, n_sub, act_q8_K)                                            \
    static void name(int64_t n, const uint8_t *w, size_t row_bytes, uint32_t n_rows,          \
                     const uint8_t *tile, float *out) {                                      \
        const int64_t n_sb = n / 256;                                                         \
        uint8_t *tl = (uint8_t *)(uintptr_t)tile;                                             \
        const __m512i pairs =                                                                 \
            _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);                 \
        (void)pairs;                                                                          \
        for (uint32_t r = 0; r < n_rows; r++) {                                               \
            const uint8_t *row = w + (size_t)r * row_bytes;                                   \
            __m512 acc[T];                                                                    \
            __m512 mins = _mm512_setzero_ps();                                                \
            for (uint32_t t = 0; t < T; t++)                                                  \
                acc[t] = _mm512_setzero_ps();                                                 \
            for (int64_t s = 0; s < n_sb; s++) {                                              \
                struct unpacked u;                                                            \
                unpack(row, s, &u);                                                           \
                const int8_t *q = pl_mm_tile_qs(tl, n, s, 0);                                 \
                const float *da = pl_mm_tile_da(tl, n, s, 0);                                 \
                _Pragma("GCC unroll 16") for (uint32_t t = 0; t < T; t++) {                   \
                    const int8_t *qt = q + 256 * t;                                           \
                    __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u.w[0],           \
                                                    _mm512_load_si512(qt));                   \
                    p = _mm512_dpbusd_epi32(p, u.w[1], _mm512_load_si512(qt + 64));           \
                    p = _mm512_dpbusd_epi32(p, u.w[2], _mm512_load_si512(qt + 128));          \
                    p = _mm512_dpbusd_epi32(p, u.w[3], _mm512_load_si512(qt + 192));          \
                    __m512 sc;                                                                \
                    if (act_q8_K)                                                             \
                        sc = _mm512_mul_ps(u.scale, _mm512_set1_ps(da[8 * t]));               \
                    else                                                                      \
                        sc = _mm512_mul_ps(u.scale,                                           \
                                           _mm512_permutexvar_ps(pairs,                       \
                                               _mm512_castps256_ps512(                        \
                                                   _mm256_load_ps(da + 8 * t))));             \
                    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), sc, acc[t]);              \
                }                                                                             \
                for (uint32_t j = 0; j < (n_sub); j++)                                        \
                    mins = _mm512_fmadd_ps(_mm512_set1_ps(u.c[j]),                            \
                                           _mm512_load_ps(pl_mm_tile_fs(tl, n, s, j)), mins); \
            }                                                                                 \
            float m[T];                                                                       \
            _mm512_storeu_ps(m, mins);                                                        \
            for (uint32_t t = 0; t < T; t++)                                                  \
                out[r * T + t] = _mm512_reduce_add_ps(acc[t]) - m[t];                         \
        }                                                                                     \
    }

DEFINE_ROWS(rows_q4_K, unpack_q4_K, 8, 1)
DEFINE_ROWS(rows_q6_K, unpack_q6_K, 16, 1)
DEFINE_ROWS(rows_q4_0, unpack_q4_0, 8, 0)
DEFINE_ROWS(rows_q8_0, unpack_q8_0, 8, 0)

static const struct pl_mm_tile_kernel k_q4_K = {PL_GGML_TYPE_Q8_K, 32, prep_q8_K_32, rows_q4_K};
static const struct pl_mm_tile_kernel k_q6_K = {PL_GGML_TYPE_Q8_K, 16, prep_q8_K_16, rows_q6_K};
static const struct pl_mm_tile_kernel k_q4_0 = {PL_GGML_TYPE_Q8_0, 32, prep_q8_0_32, rows_q4_0};
static const struct pl_mm_tile_kernel k_q8_0 = {PL_GGML_TYPE_Q8_0, 32, prep_q8_0_32, rows_q8_0};

const struct pl_mm_tile_kernel *pl_mm_avx512_kernel(uint32_t type) {
    switch (type) {
    case PL_GGML_TYPE_Q4_K:
        return &k_q4_K;
    case PL_GGML_TYPE_Q6_K:
        return &k_q6_K;
    case PL_GGML_TYPE_Q4_0:
        return &k_q4_0;
    case PL_GGML_TYPE_Q8_0:
        return &k_q8_0;
    default:
        return NULL;
    }
}
