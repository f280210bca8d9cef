/* SPDX-License-Identifier: MIT */
/* Tiled matrix x matrix kernels with AVX-512 VNNI (see engine/src/matmul.h). Every weight
 * super-block (256 elements) is unpacked into four registers of unsigned bytes, laid out so
 * that every 32-bit lane holds elements of one sub-block only. Prefill (16-token tiles):
 * the lanes of the tile's registers are tokens instead - each 64-byte group of the tile
 * holds the same 4 elements of all 16 tokens - so a weight row's 4 bytes of a group are
 * broadcast and multiplied with the group by one vpdpbusd for 16 tokens. Four rows share
 * each activation load, and the results need no horizontal sums. The rows' super-blocks
 * are unpacked into a small stack buffer once per call, for all the tiles of a block. The
 * weights' offsets (Q4_0's -8, Q8_0's +128 bias, Q6_K's -32) start each sub-block's integer
 * sum at -offset x the tile's int sums. Per token the float operations are those of the
 * decode kernels (batch invariance, matmul.h): K-quants scale their sub-block sums by the
 * integer scales (exact) and take one fused step per super-block, Q4_0/Q8_0 sum their 8
 * scaled block sums in a fixed tree. Decode (one token) of Q4_0/Q8_0 uses the same unpacking
 * with a one-slot layout, one weight row at a time with software prefetch; so do Q4_K and
 * Q6_K where they are repacked at load (CPUs with GFNI and VBMI), and elsewhere decode
 * through the per-row dot products. Q4_0/Q8_0 super-blocks are gathered from their
 * 18/34-byte blocks by word permutes (every field sits at an even offset), or, for weights
 * repacked at load, read in register order (see "Weights repacked at load"). Compiled with
 * -mavx512{f,bw,vl,vnni}; matmul.c calls it only on CPUs that have them. */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "matmul.h"
#include "pl/engine_quant.h"
#include "q6k_lanes.h"
#include "quant_blocks.h"
#include "quant_x86.h"
#include "vexp_avx512.h"
#include "pl/engine_types.h"

_Static_assert(PL_MM_TILE == 16, "the kernels below hold 16 token accumulators");

/* ---- Activation repacking (once per token and matrix: cost is negligible) ---- */

/* Scatter one slot's 256 values, in lane order, into the groups of super-block s. */
static inline void put_groups(uint8_t *lay, int64_t n, uint32_t nt, int64_t s, uint32_t t,
                              const int8_t *q) {
    if (nt == 1) {
        memcpy(pl_mm_lay_qs(lay, n, 1, s, 0, 0), q, 256);
        return;
    }
    for (uint32_t g = 0; g < 64; g++)
        memcpy(pl_mm_lay_qs(lay, n, nt, s, g, t), q + 4 * g, 4);
}

/* Layout 32 (Q8_K): qword 8k + j of the super-block = qword 4j + k of the source, so lane
 * pair (2j, 2j + 1) of register k holds elements 32j + 8k .. 32j + 8k + 7. */
static void prep_q8_K_32(const void *xq, int64_t n, uint8_t *lay, uint32_t nt, uint32_t t) {
    const struct pl_block_q8_K *b = xq;
    for (int64_t s = 0; s < n / 256; s++) {
        int8_t q[256];
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < 8; j++)
                memcpy(q + 8 * (8 * k + j), b[s].qs + 8 * (4 * j + k), 8);
        put_groups(lay, n, nt, s, t, q);
        for (uint32_t j = 0; j < 8; j++)
            pl_mm_lay_da(lay, n, nt, s, j)[t] = b[s].d;
        for (uint32_t j = 0; j < 16; j++) {
            const int sum = j < 8 ? b[s].bsums[2 * j] + b[s].bsums[2 * j + 1] : 0;
            pl_mm_lay_fs(lay, n, nt, s, j)[t] = (float)sum;
            pl_mm_lay_ns(lay, n, nt, s, j)[t] = -sum;
        }
    }
}

/* Layout 16 (Q8_K): dword 16k + j = dword 4j + k of the source, so lane j of register k
 * holds elements 16j + 4k .. 16j + 4k + 3. */
static void prep_q8_K_16(const void *xq, int64_t n, uint8_t *lay, uint32_t nt, uint32_t t) {
    const struct pl_block_q8_K *b = xq;
    for (int64_t s = 0; s < n / 256; s++) {
        int8_t q[256];
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < 16; j++)
                memcpy(q + 4 * (16 * k + j), b[s].qs + 4 * (4 * j + k), 4);
        put_groups(lay, n, nt, s, t, q);
        for (uint32_t j = 0; j < 8; j++)
            pl_mm_lay_da(lay, n, nt, s, j)[t] = b[s].d;
        for (uint32_t j = 0; j < 16; j++) {
            pl_mm_lay_fs(lay, n, nt, s, j)[t] = (float)b[s].bsums[j];
            pl_mm_lay_ns(lay, n, nt, s, j)[t] = -b[s].bsums[j];
        }
    }
}

/* Layout 32 (Q8_0): block j of the super-block's 8 feeds lanes 2j, 2j + 1: qword 8k + j =
 * qword k of block j. */
static void prep_q8_0_32(const void *xq, int64_t n, uint8_t *lay, uint32_t nt, uint32_t t) {
    const struct pl_block_q8_0 *b = xq;
    for (int64_t s = 0; s < n / 256; s++) {
        int8_t q[256];
        for (uint32_t j = 0; j < 8; j++) {
            const struct pl_block_q8_0 *bj = &b[8 * s + j];
            int sum = 0;
            for (int k = 0; k < 4; k++)
                memcpy(q + 8 * (8 * k + (int)j), bj->qs + 8 * k, 8);
            for (int i = 0; i < PL_QK8_0; i++)
                sum += bj->qs[i];
            const float d = pl_fp16_to_f32_inline(bj->d);
            pl_mm_lay_da(lay, n, nt, s, j)[t] = d;
            pl_mm_lay_fs(lay, n, nt, s, j)[t] = (float)sum;
            pl_mm_lay_ns(lay, n, nt, s, j)[t] = -sum;
        }
        put_groups(lay, n, nt, s, t, q);
        for (uint32_t j = 8; j < 16; j++) {
            pl_mm_lay_fs(lay, n, nt, s, j)[t] = 0.0f;
            pl_mm_lay_ns(lay, n, nt, s, j)[t] = 0;
        }
    }
}

/* ---- Weight unpacking: one super-block of one row ---- */

/* An unpacked super-block: four registers of unsigned bytes in the tile's lane order and
 * the scales. */
struct unpacked {
    __m512i w[4];
    /* Q4_0 / Q8_0: lane j the float scale of block j (lanes 8..15 zero); K-quants: lane j
     * the integer scale of sub-block j (bits of an int32). */
    __m512 scale;
    __m512 mn;     /* Q4_K: lane j the min of sub-block j (an integer), else zero */
    float d, dmin; /* K-quants: the super-block's scales */
};

static inline uint64_t load_u64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static inline float h2f(uint16_t h) {
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

/* Q4_K (qh NULL) or Q5_K: b is the block, whose d, dmin and 12 scale bytes lead both
 * layouts, qs its 128 nibble bytes. Register k, qword j: source qword 4 (j / 2) + k of qs, low
 * nibbles for even j, high for odd, i.e. elements 32j + 8k + i; Q5_K's fifth bit of that
 * element is bit j of qh[8k + i]. */
static inline __attribute__((always_inline)) void
unpack_q45_K(const uint8_t *b, const uint8_t *qs, const uint8_t *qh, struct unpacked *u) {
    const __m512i q0 = _mm512_loadu_si512(qs), q1 = _mm512_loadu_si512(qs + 64);
    const __m512i shift = _mm512_set_epi64(4, 0, 4, 0, 4, 0, 4, 0);
    const __m512i bit_j = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i m4 = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
    for (int k = 0; k < 4; k++) {
        __m512i idx = _mm512_set_epi64(12 + k, 12 + k, 8 + k, 8 + k, 4 + k, 4 + k, k, k);
        __m512i v = _mm512_permutex2var_epi64(q0, idx, q1);
        u->w[k] = _mm512_and_si512(_mm512_srlv_epi64(v, shift), m4);
        if (qh) {
            const __m512i h = _mm512_and_si512(
                _mm512_srlv_epi64(_mm512_set1_epi64((long long)load_u64(qh + 8 * k)), bit_j), one);
            u->w[k] = _mm512_or_si512(u->w[k], _mm512_slli_epi64(h, 4));
        }
    }
    /* 6-bit scales and mins of the 8 sub-blocks, a byte each. */
    uint64_t sc, mn;
    pl_q4k_scales_mins8(b + 4, &sc, &mn);
    uint32_t d2;
    memcpy(&d2, b, sizeof(d2));
    const __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128((int)d2));
    u->d = _mm_cvtss_f32(dd);
    u->dmin = _mm_cvtss_f32(_mm_movehdup_ps(dd));
    u->scale = _mm512_castsi512_ps(_mm512_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc)));
    u->mn = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_cvtsi64_si128((long long)mn)));
}

static inline void unpack_q4_K(const uint8_t *row, int64_t s, struct unpacked *u) {
    const struct pl_block_q4_K *b = (const struct pl_block_q4_K *)(const void *)row + s;
    unpack_q45_K((const uint8_t *)b, b->qs, NULL, u);
}

static inline void unpack_q5_K(const uint8_t *row, int64_t s, struct unpacked *u) {
    const struct pl_block_q5_K *b = (const struct pl_block_q5_K *)(const void *)row + s;
    unpack_q45_K((const uint8_t *)b, b->qs, b->qh, u);
}

/* Q3_K in layout 16: byte i of lane j of register k is element e = 16j + 4k + i, i.e. half
 * h = j / 8, quarter c = (j % 8) / 2, l = 16 (j % 2) + 4k + i; its low 2 bits are bits 2c, 2c + 1
 * of qs[32h + l], its third bit is bit 4h + c of hmask[l] (q = 0..7, value q - 4). Lane j's
 * dword of qs is 8h + 4 (j % 2) + k, of hmask 4 (j % 2) + k. */
static inline void unpack_q3_K(const uint8_t *row, int64_t s, struct unpacked *u) {
    const struct pl_block_q3_K *b = (const struct pl_block_q3_K *)(const void *)row + s;
    const __m512i qs = _mm512_loadu_si512(b->qs);
    const __m512i hm =
        _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)b->hmask));
    const __m512i base = _mm512_set_epi32(12, 8, 12, 8, 12, 8, 12, 8, 4, 0, 4, 0, 4, 0, 4, 0);
    const __m512i lo_shift = _mm512_set_epi32(6, 6, 4, 4, 2, 2, 0, 0, 6, 6, 4, 4, 2, 2, 0, 0);
    const __m512i hi_shift = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    const __m512i hm_base = _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0);
    const __m512i m3 = _mm512_set1_epi8(3), one = _mm512_set1_epi8(1);
    for (int k = 0; k < 4; k++) {
        const __m512i kk = _mm512_set1_epi32(k);
        const __m512i lo = _mm512_and_si512(
            _mm512_srlv_epi32(_mm512_permutexvar_epi32(_mm512_add_epi32(base, kk), qs), lo_shift),
            m3);
        const __m512i hi = _mm512_and_si512(
            _mm512_srlv_epi32(_mm512_permutexvar_epi32(_mm512_add_epi32(hm_base, kk), hm),
                              hi_shift),
            one);
        u->w[k] = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 2));
    }
    int8_t sc[16];
    for (int j = 0; j < 16; j++)
        sc[j] = (int8_t)(pl_q3k_scale(j, b->scales) - 32);
    u->scale = _mm512_castsi512_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)sc)));
    u->d = h2f(b->d);
    u->dmin = 0.0f;
    u->mn = _mm512_setzero_ps();
}

static inline void unpack_q6_K(const uint8_t *row, int64_t s, struct unpacked *u) {
    const struct pl_block_q6_K *b = (const struct pl_block_q6_K *)(const void *)row + s;
    pl_q6k_lanes(b, u->w);
    u->d = h2f(b->d);
    u->dmin = 0.0f;
    u->scale = _mm512_castsi512_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)b->scales)));
    u->mn = _mm512_setzero_ps();
}

/* Q4_0 and Q8_0: the super-block is 8 blocks; block j feeds lanes 2j, 2j + 1. d8h holds
 * the 8 block scales as fp16 in its low 128 bits. */
static inline void blocks_scale(__m128i d8h, struct unpacked *u) {
    u->scale = _mm512_zextps256_ps512(_mm256_cvtph_ps(d8h));
    u->mn = _mm512_setzero_ps();
    u->d = u->dmin = 0.0f;
}

/* Word indices for _mm512_permutex2var_epi16 over (a, b) where a holds bytes [0, 64) and b
 * bytes [off_b, off_b + 64) of the source: the word at source byte offset o (even). */
#define W2(o, off_b) ((o) < 64 ? (o) / 2 : 32 + ((o) - (off_b)) / 2)

/* Four Q4_0 blocks (72 bytes) sit in the first 72 bytes of (a = [0, 64), b = [8, 72)). Word
 * 4j + i (j < 4, i < 4) of the low 256 bits: qs bytes 2i, 2i + 1 of block j; of the high
 * 256 bits: qs bytes 8 + 2i, 9 + 2i. */
#define Q40_QW(j, i) W2(18 * (j) + 2 + 2 * (i), 8)
#define Q40_QW_J(j) Q40_QW(j, 0), Q40_QW(j, 1), Q40_QW(j, 2), Q40_QW(j, 3)
#define Q40_QH(j, i) W2(18 * (j) + 10 + 2 * (i), 8)
#define Q40_QH_J(j) Q40_QH(j, 0), Q40_QH(j, 1), Q40_QH(j, 2), Q40_QH(j, 3)

static inline void unpack_q4_0(const uint8_t *row, int64_t s, struct unpacked *u) {
    const uint8_t *p = row + (size_t)s * 8 * sizeof(struct pl_block_q4_0);
    /* _mm512_set_epi16 takes words high to low: reverse order. */
    const __m512i idx = _mm512_set_epi16(
        Q40_QH(3, 3), Q40_QH(3, 2), Q40_QH(3, 1), Q40_QH(3, 0), Q40_QH(2, 3), Q40_QH(2, 2),
        Q40_QH(2, 1), Q40_QH(2, 0), Q40_QH(1, 3), Q40_QH(1, 2), Q40_QH(1, 1), Q40_QH(1, 0),
        Q40_QH(0, 3), Q40_QH(0, 2), Q40_QH(0, 1), Q40_QH(0, 0), Q40_QW(3, 3), Q40_QW(3, 2),
        Q40_QW(3, 1), Q40_QW(3, 0), Q40_QW(2, 3), Q40_QW(2, 2), Q40_QW(2, 1), Q40_QW(2, 0),
        Q40_QW(1, 3), Q40_QW(1, 2), Q40_QW(1, 1), Q40_QW(1, 0), Q40_QW(0, 3), Q40_QW(0, 2),
        Q40_QW(0, 1), Q40_QW(0, 0));
    /* The scales: words 0, 9, 18, 27 of each half's first 64 bytes. */
    const __m512i idx_d = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                           0, 0, 0, 0, 0, 59, 50, 41, 32, 27, 18, 9, 0);
    const __m512i a0 = _mm512_loadu_si512(p), b0 = _mm512_loadu_si512(p + 8);
    const __m512i a1 = _mm512_loadu_si512(p + 72), b1 = _mm512_loadu_si512(p + 80);
    const __m512i h0 = _mm512_permutex2var_epi16(a0, idx, b0); /* blocks 0..3 */
    const __m512i h1 = _mm512_permutex2var_epi16(a1, idx, b1); /* blocks 4..7 */
    /* qs bytes 0..7 of every block (qword j = block j), and bytes 8..15. */
    const __m512i lo = _mm512_shuffle_i64x2(h0, h1, 0x44);
    const __m512i hi = _mm512_shuffle_i64x2(h0, h1, 0xEE);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    u->w[0] = _mm512_and_si512(lo, m4);                       /* elements 0..7 of each block */
    u->w[1] = _mm512_and_si512(hi, m4);                       /* 8..15 */
    u->w[2] = _mm512_and_si512(_mm512_srli_epi64(lo, 4), m4); /* 16..23 */
    u->w[3] = _mm512_and_si512(_mm512_srli_epi64(hi, 4), m4); /* 24..31 */
    blocks_scale(_mm512_castsi512_si128(_mm512_permutex2var_epi16(a0, idx_d, a1)), u);
}

/* Four Q8_0 blocks (136 bytes) at p: qs bytes 0..15 of each block lie in (a = [0, 64),
 * b = [64, 128)), bytes 16..31 in (a = [8, 72), b = [72, 136)); Q80_B counts from byte 8, where
 * block j's byte 18 + 2i is byte 34j + 10 + 2i. */
#define Q80_A(j, i) W2(34 * (j) + 2 + 2 * (i), 64)
#define Q80_B(j, i) W2(34 * (j) + 10 + 2 * (i), 64)

static inline void q8_0_half(const uint8_t *p, __m512i *ret01, __m512i *ret23, __m128i *ret_d) {
    /* Low 256 bits: qword j = qs bytes 0..7 (resp. 16..23) of block j; high 256 bits:
     * bytes 8..15 (resp. 24..31). */
#define Q80_IDX(M)                                                                                 \
    _mm512_set_epi16(M(3, 7), M(3, 6), M(3, 5), M(3, 4), M(2, 7), M(2, 6), M(2, 5), M(2, 4),       \
                     M(1, 7), M(1, 6), M(1, 5), M(1, 4), M(0, 7), M(0, 6), M(0, 5), M(0, 4),       \
                     M(3, 3), M(3, 2), M(3, 1), M(3, 0), M(2, 3), M(2, 2), M(2, 1), M(2, 0),       \
                     M(1, 3), M(1, 2), M(1, 1), M(1, 0), M(0, 3), M(0, 2), M(0, 1), M(0, 0))
    const __m512i ia = Q80_IDX(Q80_A), ib = Q80_IDX(Q80_B);
#undef Q80_IDX
    /* Scales at bytes 0, 34, 68, 102: words 0, 17 of a, 2, 19 of b. */
    const __m512i idx_d = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                           0, 0, 0, 0, 0, 0, 0, 0, 0, 51, 34, 17, 0);
    const __m512i a = _mm512_loadu_si512(p), b = _mm512_loadu_si512(p + 64);
    const __m512i c = _mm512_loadu_si512(p + 8), d = _mm512_loadu_si512(p + 72);
    *ret01 = _mm512_permutex2var_epi16(a, ia, b);
    *ret23 = _mm512_permutex2var_epi16(c, ib, d);
    *ret_d = _mm512_castsi512_si128(_mm512_permutex2var_epi16(a, idx_d, b));
}

static inline void unpack_q8_0(const uint8_t *row, int64_t s, struct unpacked *u) {
    const uint8_t *p = row + (size_t)s * 8 * sizeof(struct pl_block_q8_0);
    __m512i x01, x23, y01, y23;
    __m128i dx, dy;
    q8_0_half(p, &x01, &x23, &dx);
    q8_0_half(p + 4 * sizeof(struct pl_block_q8_0), &y01, &y23, &dy);
    const __m512i bias = _mm512_set1_epi8((char)0x80); /* w + 128 as unsigned bytes */
    u->w[0] = _mm512_xor_si512(_mm512_shuffle_i64x2(x01, y01, 0x44), bias);
    u->w[1] = _mm512_xor_si512(_mm512_shuffle_i64x2(x01, y01, 0xEE), bias);
    u->w[2] = _mm512_xor_si512(_mm512_shuffle_i64x2(x23, y23, 0x44), bias);
    u->w[3] = _mm512_xor_si512(_mm512_shuffle_i64x2(x23, y23, 0xEE), bias);
    blocks_scale(_mm_unpacklo_epi64(dx, dy), u);
}

/* ---- Weights repacked at load (matmul.h: pl_mm_tile_kernel.packed) ----
 * Q4_0 and Q8_0 gather each super-block from 8 blocks of 18 or 34 bytes with word permutes:
 * most of the decode kernel's shuffle work, and what kept it below the memory's rate (Q8_0:
 * 0.84-0.87 of a read loop over one large matrix). Repacked, every super-block holds what
 * unpack_q4_0 / unpack_q8_0 build, in their register order, followed by the 8 block scales
 * as fp16, in the same number of bytes:
 *   Q4_0: [64] w[0] | w[2] << 4, [64] w[1] | w[3] << 4, [16] scales     (144 bytes)
 *   Q8_0: [4][64] w[k] (already + 128 as unsigned bytes), [16] scales  (272 bytes)
 * so a packed unpack is plain loads (and Q4_0's nibble split). The unpacked registers are
 * the same bits, hence every product is bit-identical to the GGUF layout's. */

/* The nibble planes of the packed layouts (Q4_0, Q4_K, and Q6_K's low 4 bits): w[0..3],
 * each byte < 16, as [64] w[0] | w[2] << 4, [64] w[1] | w[3] << 4 at p (read back by
 * pl_nibbles_load, q6k_lanes.h). */
static inline void nibbles_store(uint8_t *p, const __m512i w[4]) {
    /* nibbles are < 16: shifting a qword left by 4 moves none into the next byte */
    _mm512_storeu_si512(p, _mm512_or_si512(w[0], _mm512_slli_epi64(w[2], 4)));
    _mm512_storeu_si512(p + 64, _mm512_or_si512(w[1], _mm512_slli_epi64(w[3], 4)));
}

#define Q40P_SC 128 /* offset of the 8 fp16 block scales in a packed Q4_0 super-block */
#define Q80P_SC 256 /* the same in a packed Q8_0 super-block */

static inline void unpack_q4_0p(const uint8_t *row, int64_t s, struct unpacked *u) {
    const uint8_t *p = row + (size_t)s * 8 * sizeof(struct pl_block_q4_0);
    pl_nibbles_load(p, u->w);
    blocks_scale(_mm_loadu_si128((const __m128i *)(const void *)(p + Q40P_SC)), u);
}

static inline void unpack_q8_0p(const uint8_t *row, int64_t s, struct unpacked *u) {
    const uint8_t *p = row + (size_t)s * 8 * sizeof(struct pl_block_q8_0);
    for (int k = 0; k < 4; k++)
        u->w[k] = _mm512_loadu_si512(p + 64 * k);
    blocks_scale(_mm_loadu_si128((const __m128i *)(const void *)(p + Q80P_SC)), u);
}

/* The fp16 scales of the 8 blocks of super-block s (blocks of bb bytes, scale first). */
static void block_scales(const uint8_t *row, int64_t s, size_t bb, uint8_t *dst) {
    for (int j = 0; j < 8; j++)
        memcpy(dst + 2 * j, row + ((size_t)s * 8 + (size_t)j) * bb, 2);
}

/* matmul.h's repack for a layout packed row by row: one(n, src, dst) packs one row. */
#define DEFINE_REPACK_ROWS(name, one)                                                              \
    static void name(int64_t n, size_t row_bytes, uint32_t n_rows, const uint8_t *src,             \
                     uint8_t *dst) {                                                               \
        for (uint32_t r = 0; r < n_rows; r++)                                                      \
            one(n, src + (size_t)r * row_bytes, dst + (size_t)r * row_bytes);                      \
    }

/* The groups of 4 rows (row_group 4: Q4_0 and Q4_K, see repack_q4_Kx for the layout) keep
 * a super-block's nibbles as 8 chunks of 64 bytes, 16 bytes per row: row r's registers w
 * (layout 32, each byte < 16) into the super-block of its group at p. */
#define X4_ROWS 4u
static void x4_store_nibbles(uint8_t *p, uint32_t r, const __m512i w[4]) {
    _Alignas(64) uint8_t b[4][64];
    for (int k = 0; k < 4; k++)
        _mm512_store_si512(b[k], w[k]);
    for (int t = 0; t < 8; t++)
        for (int i = 0; i < 16; i++) {
            const int k = t < 4 ? 0 : 2, o = 16 * (t % 4) + i;
            p[64 * t + 16 * r + i] = (uint8_t)(b[k][o] | b[k + 1][o] << 4);
        }
}

/* Row r's registers back from the super-block of its group at p (x4_store_nibbles). */
static inline __attribute__((always_inline)) void x4_load_nibbles(const uint8_t *p, uint32_t r,
                                                                  __m512i w[4]) {
    const uint8_t *c = p + 16 * r;
#define CHUNK(t) _mm_loadu_si128((const __m128i *)(const void *)(c + 64 * (t)))
    __m512i x = _mm512_castsi128_si512(CHUNK(0)), y = _mm512_castsi128_si512(CHUNK(4));
    x = _mm512_inserti32x4(_mm512_inserti32x4(_mm512_inserti32x4(x, CHUNK(1), 1), CHUNK(2), 2),
                           CHUNK(3), 3);
    y = _mm512_inserti32x4(_mm512_inserti32x4(_mm512_inserti32x4(y, CHUNK(5), 1), CHUNK(6), 2),
                           CHUNK(7), 3);
#undef CHUNK
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    w[0] = _mm512_and_si512(x, m4);
    w[1] = _mm512_and_si512(_mm512_srli_epi64(x, 4), m4);
    w[2] = _mm512_and_si512(y, m4);
    w[3] = _mm512_and_si512(_mm512_srli_epi64(y, 4), m4);
}

/* Q4_0 in groups of 4 rows (k_q4_0x; a matrix's rows past its last whole group stay packed
 * one by one): super-block s of the group is 4 x 144 bytes, the nibbles as Q4_K's groups
 * (x4_store_nibbles) in [8][64], then the fp16 scales of blocks 0..3 of rows 0..3 at Q40X_SC (row
 * r's block k at 4r + k), and those of blocks 4..7 the same at Q40X_SC + 32: each a vector of 16
 * floats in the decode kernel's lane order (lane 4r + k) in one conversion. */
#define Q40X_SB (X4_ROWS * 8 * sizeof(struct pl_block_q4_0))
#define Q40X_SC 512
_Static_assert(Q40X_SC + 64 == Q40X_SB, "a group's super-block keeps its bytes");

/* src: a row of n elements in the GGUF layout; dst (another buffer): the packed row. */
static void repack_q4_0_row(int64_t n, const uint8_t *src, uint8_t *dst) {
    for (int64_t s = 0; s < n / 256; s++) {
        struct unpacked u;
        unpack_q4_0(src, s, &u);
        uint8_t *p = dst + (size_t)s * 8 * sizeof(struct pl_block_q4_0);
        nibbles_store(p, u.w);
        block_scales(src, s, sizeof(struct pl_block_q4_0), p + Q40P_SC);
    }
}

/* k_q4_0's repack: a whole group (4 rows of n elements at src, row_bytes apart), or the rows
 * past the last one each as packed Q4_0. */
static void repack_q4_0(int64_t n, size_t row_bytes, uint32_t n_rows, const uint8_t *src,
                        uint8_t *dst) {
    if (n_rows != X4_ROWS) {
        for (uint32_t r = 0; r < n_rows; r++)
            repack_q4_0_row(n, src + (size_t)r * row_bytes, dst + (size_t)r * row_bytes);
        return;
    }
    for (int64_t s = 0; s < n / 256; s++) {
        uint8_t *p = dst + (size_t)s * Q40X_SB;
        for (uint32_t r = 0; r < X4_ROWS; r++) {
            const uint8_t *row = src + (size_t)r * row_bytes;
            struct unpacked u;
            unpack_q4_0(row, s, &u);
            x4_store_nibbles(p, r, u.w);
            for (uint32_t j = 0; j < 8; j++)
                memcpy(p + Q40X_SC + 32 * (j / 4) + 2 * (4 * r + j % 4),
                       row + ((size_t)s * 8 + j) * sizeof(struct pl_block_q4_0), 2);
        }
    }
}

static void repack_q8_0_row(int64_t n, const uint8_t *src, uint8_t *dst) {
    for (int64_t s = 0; s < n / 256; s++) {
        struct unpacked u;
        unpack_q8_0(src, s, &u);
        uint8_t *p = dst + (size_t)s * 8 * sizeof(struct pl_block_q8_0);
        for (int k = 0; k < 4; k++)
            _mm512_storeu_si512(p + 64 * k, u.w[k]);
        block_scales(src, s, sizeof(struct pl_block_q8_0), p + Q80P_SC);
    }
}

DEFINE_REPACK_ROWS(repack_q8_0, repack_q8_0_row)

/* Q4_K, repacked (on CPUs with GFNI and VBMI, which its decode kernel needs). Decoding the
 * GGUF layout spends most of its work rearranging bits: the quants into the lane order by
 * qword permutes, the 6-bit scales and mins out of their 12 packed bytes. Repacked, each
 * super-block keeps its 144 bytes:
 *   [64] w[0] | w[2] << 4, [64] w[1] | w[3] << 4   (unpack_q4_K's registers, as Q4_0's)
 *   [12] the 8 scales and 8 mins as one little-endian stream of 6-bit fields: scale j at
 *        bit 6j, min j at bit 48 + 6j
 *   [4]  d, dmin (fp16)
 * so the quants are two loads and four masks or shifts, and a vector of scales or mins one
 * VPMULTISHIFTQB from a broadcast of the stream (decode), or a variable shift (prefill). */
#define Q4KP_SC 128 /* offset of the scale stream in a packed super-block */
#define Q4KP_MN 134 /* the 8 bytes from the mins' first bit (bit 48 of the stream) */
#define Q4KP_D 140  /* offset of d, dmin */
/* Q5_K, repacked (as Q4_K): its 176 bytes hold Q4_K's packed super-block with the fifth bits
 * inserted after the nibble planes:
 *   [128] the low 4 bits, as Q4_K's
 *   [32]  bit 4 of w[k] as a 64-bit mask (bit i: byte i of w[k]), k = 0..3
 *   [12] [4] the scale stream and d, dmin, as Q4_K's
 * so the fifth bits are one masked byte add per register. The functions below that take q5
 * (a constant after inlining) serve both layouts. */
#define Q5KP_HB 128
#define KP_SB(q5) ((q5) ? sizeof(struct pl_block_q5_K) : sizeof(struct pl_block_q4_K))
#define KP_SC(q5) ((q5) ? 160 : Q4KP_SC)
#define KP_MN(q5) (KP_SC(q5) + 6)
#define KP_D(q5) (KP_SC(q5) + 12)

/* The 8 six-bit fields at bits 6j of x, as 8 int32. */
static inline __m256i fields6(uint64_t x) {
    const __m512i shifts = _mm512_set_epi64(42, 36, 30, 24, 18, 12, 6, 0);
    const __m512i f = _mm512_and_si512(_mm512_srlv_epi64(_mm512_set1_epi64((long long)x), shifts),
                                       _mm512_set1_epi64(63));
    return _mm512_cvtepi64_epi32(f);
}

/* Register k's fifth bits (packed Q5_K at p) added to its nibbles. */
static inline __m512i q5kp_hi(const uint8_t *p, int k, __m512i w) {
    return _mm512_mask_add_epi8(w, (__mmask64)load_u64(p + Q5KP_HB + 8 * k), w,
                                _mm512_set1_epi8(0x10));
}

static inline __attribute__((always_inline)) void unpack_kp(const uint8_t *row, int64_t s,
                                                            struct unpacked *u, int q5) {
    const uint8_t *p = row + (size_t)s * KP_SB(q5);
    pl_nibbles_load(p, u->w);
    for (int k = 0; q5 && k < 4; k++)
        u->w[k] = q5kp_hi(p, k, u->w[k]);
    u->scale = _mm512_castsi512_ps(_mm512_zextsi256_si512(fields6(load_u64(p + KP_SC(q5)))));
    u->mn = _mm512_zextps256_ps512(_mm256_cvtepi32_ps(fields6(load_u64(p + KP_MN(q5)))));
    uint32_t dd;
    memcpy(&dd, p + KP_D(q5), sizeof(dd));
    const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128((int)dd));
    u->d = _mm_cvtss_f32(f);
    u->dmin = _mm_cvtss_f32(_mm_movehdup_ps(f));
}

static inline __attribute__((always_inline)) void unpack_q4_Kp(const uint8_t *row, int64_t s,
                                                               struct unpacked *u) {
    unpack_kp(row, s, u, 0);
}

static inline __attribute__((always_inline)) void unpack_q5_Kp(const uint8_t *row, int64_t s,
                                                               struct unpacked *u) {
    unpack_kp(row, s, u, 1);
}

/* The 12-byte scale stream (scale j at bit 6j, min j at bit 48 + 6j) of the 12 GGUF scale
 * bytes `scales`, to st. */
static void kp_scale_stream(const uint8_t *scales, uint8_t *st) {
    uint64_t sc, mn, sc48 = 0, mn48 = 0;
    pl_q4k_scales_mins8(scales, &sc, &mn);
    for (int j = 0; j < 8; j++) {
        sc48 |= (sc >> 8 * j & 63) << 6 * j;
        mn48 |= (mn >> 8 * j & 63) << 6 * j;
    }
    const uint64_t lo64 = sc48 | mn48 << 48;
    const uint32_t hi32 = (uint32_t)(mn48 >> 16);
    memcpy(st, &lo64, sizeof(lo64));
    memcpy(st + 8, &hi32, sizeof(hi32));
}

/* The scale stream at p + KP_SC(q5), then d and dmin (dd: the block's first 4 bytes, as
 * both types store them). */
static void kp_store_scales(const uint8_t *scales, const void *dd, uint8_t *p, int q5) {
    kp_scale_stream(scales, p + KP_SC(q5));
    memcpy(p + KP_D(q5), dd, 4);
}

static void repack_q4_K_row(int64_t n, const uint8_t *src, uint8_t *dst) {
    const struct pl_block_q4_K *b = (const struct pl_block_q4_K *)(const void *)src;
    for (int64_t s = 0; s < n / 256; s++) {
        struct unpacked u;
        unpack_q4_K(src, s, &u);
        uint8_t *p = dst + (size_t)s * sizeof(struct pl_block_q4_K);
        nibbles_store(p, u.w);
        kp_store_scales(b[s].scales, &b[s], p, 0);
    }
}

/* Q4_K in groups of 4 rows (row_group 4: the layout of k_q4_Kx's kernels; a matrix's rows
 * past its last whole group stay packed one by one). Per-row decode (vec_q4_Kp) spends most of its
 * work on each super-block's own sums: from its VPDPBUSD lanes to the sub-blocks' sums, their
 * scales and mins, and a float chain per row. With 4 rows side by side, one 128-bit lane per row,
 * each of those steps is one operation for all 4 rows. Super-block s of the group is
 * Q4KX_SB = 4 x 144 bytes:
 *   [8][64] chunk t, 16 bytes per row (row r at 16r): byte 4c + i holds in its low nibble
 *           the weight of activation group 4m + c (layout 32's groups of 4: dword lane
 *           4(m % 4) + c of register m / 4), i its byte, and in its high nibble that of
 *           group 4(m + 4) + c; m = 8 (t / 4) + t % 4. So chunk t holds sub-blocks 2P and
 *           2P + 1 (P = t % 4): lanes c = 0, 1 the first, 2, 3 the second.
 *   [4][12] row r's scale stream (packed Q4_K's Q4KP_SC bytes) at Q4KX_SC + 12r
 *   [4][4]  row r's d, dmin (fp16) at Q4KX_D + 4r
 * The same bytes as the 4 rows' GGUF blocks. Row r's registers for the tiles (unpack_q4_Kx):
 * w[0] | w[1] << 4 is its 16 bytes of chunks 0..3, w[2] | w[3] << 4 those of chunks 4..7. */
#define Q4KX_ROWS X4_ROWS
#define Q4KX_SB (Q4KX_ROWS * sizeof(struct pl_block_q4_K))
#define Q4KX_SC 512
#define Q4KX_D 560
_Static_assert(Q4KX_D + 4 * Q4KX_ROWS == Q4KX_SB, "a group's super-block keeps its bytes");

/* src: 4 rows of n elements in the GGUF layout, row_bytes apart; dst: the packed group. */
static void repack_q4_Kx(int64_t n, size_t row_bytes, const uint8_t *src, uint8_t *dst) {
    for (int64_t s = 0; s < n / 256; s++) {
        uint8_t *p = dst + (size_t)s * Q4KX_SB;
        for (uint32_t r = 0; r < Q4KX_ROWS; r++) {
            const uint8_t *row = src + (size_t)r * row_bytes;
            const struct pl_block_q4_K *b = (const struct pl_block_q4_K *)(const void *)row + s;
            struct unpacked u;
            unpack_q4_K(row, s, &u);
            x4_store_nibbles(p, r, u.w);
            kp_scale_stream(b->scales, p + Q4KX_SC + 12 * r);
            memcpy(p + Q4KX_D + 4 * r, b, 4);
        }
    }
}

/* k_q4_K_gv's repack: a whole group, or the rows past the last one each as packed Q4_K. */
static void repack_q4_K(int64_t n, size_t row_bytes, uint32_t n_rows, const uint8_t *src,
                        uint8_t *dst) {
    if (n_rows == Q4KX_ROWS) {
        repack_q4_Kx(n, row_bytes, src, dst);
        return;
    }
    for (uint32_t r = 0; r < n_rows; r++)
        repack_q4_K_row(n, src + (size_t)r * row_bytes, dst + (size_t)r * row_bytes);
}

static void repack_q5_K_row(int64_t n, const uint8_t *src, uint8_t *dst) {
    const struct pl_block_q5_K *b = (const struct pl_block_q5_K *)(const void *)src;
    const __m512i m4 = _mm512_set1_epi8(0x0F), bit4 = _mm512_set1_epi8(0x10);
    for (int64_t s = 0; s < n / 256; s++) {
        struct unpacked u;
        unpack_q5_K(src, s, &u);
        uint8_t *p = dst + (size_t)s * sizeof(struct pl_block_q5_K);
        __m512i lo[4];
        for (int k = 0; k < 4; k++) {
            lo[k] = _mm512_and_si512(u.w[k], m4);
            const uint64_t hb = _mm512_test_epi8_mask(u.w[k], bit4);
            memcpy(p + Q5KP_HB + 8 * k, &hb, sizeof(hb));
        }
        nibbles_store(p, lo);
        kp_store_scales(b[s].scales, &b[s], p, 1);
    }
}

DEFINE_REPACK_ROWS(repack_q5_K, repack_q5_K_row)

/* Q6_K, repacked (with GFNI and VBMI, as Q4_K). The GGUF layout spreads each 6-bit quant
 * over a nibble of ql and two bits of qh in an order the lanes do not follow: unpack_q6_K
 * spends 32 operations on it. Repacked, each super-block keeps its 210 bytes, laid out for
 * plain loads (q6k_lanes.h: the low 4 bits of the registers as packed Q4_0, then their high
 * 2 bits, the scales and d). The AMX tiles read this layout too. */
static inline void unpack_q6_Kp(const uint8_t *row, int64_t s, struct unpacked *u) {
    const uint8_t *p = row + (size_t)s * sizeof(struct pl_block_q6_K);
    pl_q6kp_lanes(p, u->w);
    uint16_t d;
    memcpy(&d, p + PL_Q6KP_D, sizeof(d));
    u->d = h2f(d);
    u->dmin = 0.0f;
    u->scale = _mm512_castsi512_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p + PL_Q6KP_SC))));
    u->mn = _mm512_setzero_ps();
}

/* Super-block s of the GGUF row src, packed into the 210 bytes at p. */
static void repack_q6_K_sb(const uint8_t *src, int64_t s, uint8_t *p) {
    const struct pl_block_q6_K *b = (const struct pl_block_q6_K *)(const void *)src;
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(0x03);
    struct unpacked u;
    unpack_q6_K(src, s, &u);
    __m512i l[4], h = _mm512_setzero_si512();
    for (int k = 0; k < 4; k++) {
        l[k] = _mm512_and_si512(u.w[k], m4);
        /* values < 64: the high 2 bits, shifted within the byte */
        h = _mm512_or_si512(
            h, _mm512_slli_epi64(_mm512_and_si512(_mm512_srli_epi64(u.w[k], 4), m2), 2 * k));
    }
    nibbles_store(p, l);
    _mm512_storeu_si512(p + 128, h);
    memcpy(p + PL_Q6KP_SC, b[s].scales, 16);
    memcpy(p + PL_Q6KP_D, &b[s].d, sizeof(b[s].d));
}

static void repack_q6_K_row(int64_t n, const uint8_t *src, uint8_t *dst) {
    for (int64_t s = 0; s < n / 256; s++)
        repack_q6_K_sb(src, s, dst + (size_t)s * sizeof(struct pl_block_q6_K));
}

DEFINE_REPACK_ROWS(repack_q6_K, repack_q6_K_row)

/* Q6_K in groups of 4 rows (row_group 4, k_q6_Kx; where the groups are chosen, x4_here; a
 * matrix's rows past its last whole group stay packed one by one; rows of up to Q6KX_N_MAX).
 * Packed row by row, a super-block is 210 bytes, so its three 64-byte plane loads straddle two
 * cache lines but for one super-block in 32; in a group the bytes stay the same but move apart
 * so that the planes start on a line: super-block
 * s of the 4 rows is a chunk of Q6KX_CHUNK = 832 bytes (13 lines), the rows' planes ([4][192],
 * the packed super-block's first 192 bytes) and then their scales ([4][16]); the rows' d (8
 * bytes per super-block, row r's at 2r) go before the first chunk as far as the chunks'
 * alignment allows, the rest after the last. With a the bytes from the group's start to the
 * next 64-byte boundary, the first h = a + 64k bytes (the most that fits in the 8 n_sb bytes
 * of d; all of them when a is not a multiple of 8 or does not fit) hold the d of super-blocks
 * 0 .. h / 8 - 1, the chunks start at h, and the d of super-blocks h / 8 on follow them. h
 * comes from the group's address: a repacked matrix must not move (model_relocate.c repacks
 * after its copy); wherever it lies, the layout is the same bytes and gives the same bits.
 * Zen 4 VM, `picolm-bench decode`, rows of 2048: first a scratch kernel reading the packed
 * rows as if each super-block took 256 bytes (so its planes lie on lines): L2-sized matrix
 * 46-47 -> 62 GB/s, from memory 0.74-0.80 -> 0.91-0.95 of the read loop; then this layout
 * against the rows (3 alternating runs): L2-sized 47.6-48.2 -> 56.7-56.9 GB/s, from memory
 * 0.84-0.87 -> 0.86-0.99. In the engine (TinyLlama shape Q4_K_M, 1 thread, rdtsc around the
 * output product, two copies of it in the two layouts taking every other decode step of a
 * run, 7 runs with the copies swapped against 7 without, to cancel where each copy lies):
 * ~7% shorter in groups, ~0.7% of a step. */
#define Q6KX_CHUNK (X4_ROWS * (192u + 16u))
_Static_assert(Q6KX_CHUNK + 8 == X4_ROWS * sizeof(struct pl_block_q6_K),
               "a chunk and the rows' d keep a super-block's bytes");

/* h, the bytes of d before the first chunk of the group at g (rows of n_sb super-blocks). */
static inline size_t q6kx_head(const uint8_t *g, int64_t n_sb) {
    const size_t a = (size_t)(-(uintptr_t)g & 63), dn = 8 * (size_t)n_sb;
    return a % 8 == 0 && a <= dn ? a + (dn - a) / 64 * 64 : dn;
}

/* The 4 rows' d of super-block s (8 bytes) in the group at g whose head is h. */
static inline const uint8_t *q6kx_d(const uint8_t *g, size_t h, int64_t n_sb, int64_t s) {
    return g + 8 * (size_t)s + (8 * (size_t)s < h ? 0 : (size_t)Q6KX_CHUNK * (size_t)n_sb);
}

/* k_q6_Kx's repack: a whole group (4 rows of n elements at src, row_bytes apart), or the rows
 * past the last one each packed on its own. */
static void repack_q6_Kx(int64_t n, size_t row_bytes, uint32_t n_rows, const uint8_t *src,
                         uint8_t *dst) {
    if (n_rows != X4_ROWS) {
        repack_q6_K(n, row_bytes, n_rows, src, dst);
        return;
    }
    const int64_t n_sb = n / 256;
    const size_t h = q6kx_head(dst, n_sb);
    for (int64_t s = 0; s < n_sb; s++) {
        uint8_t *c = dst + h + (size_t)Q6KX_CHUNK * (size_t)s;
        uint8_t *d = dst + (q6kx_d(dst, h, n_sb, s) - dst);
        for (uint32_t r = 0; r < X4_ROWS; r++) {
            uint8_t sb[sizeof(struct pl_block_q6_K)];
            repack_q6_K_sb(src + (size_t)r * row_bytes, s, sb);
            memcpy(c + 192 * r, sb, 192);
            memcpy(c + 192 * X4_ROWS + 16 * r, sb + PL_Q6KP_SC, 16);
            memcpy(d + 2 * r, sb + PL_Q6KP_D, 2);
        }
    }
}

/* Q3_K, repacked (with GFNI and VBMI, as Q6_K). Each super-block keeps its 110 bytes:
 *   [64] the low 2 bits of w[0..3]: bits 2k, 2k + 1 of byte i are those of w[k]'s byte i
 *   [32] the third bits: w[k]'s as a 64-bit mask (bit i: byte i), k = 0..3
 *   [12] the 16 stored 6-bit scales (offset 32) as one little-endian stream, scale j at bit 6j
 *   [2]  d
 * so the quants are a shift, a mask and one masked byte add per register. */
#define Q3KP_HB 64
#define Q3KP_SC 96
#define Q3KP_D 108

/* The 16 scales (stored - 32) of a packed Q3_K super-block at p, as int32 lanes. */
static inline __m512i q3kp_scales(const uint8_t *p) {
    const __m512i lo = _mm512_castsi256_si512(fields6(load_u64(p + Q3KP_SC)));
    const __m512i sc = _mm512_inserti64x4(lo, fields6(load_u64(p + Q3KP_SC + 6)), 1);
    return _mm512_sub_epi32(sc, _mm512_set1_epi32(32));
}

/* w[0..3] of a packed Q3_K super-block at p (0..7 per byte). */
static inline __attribute__((always_inline)) void q3kp_lanes(const uint8_t *p, __m512i w[4]) {
    __m512i l = _mm512_loadu_si512(p);
    __asm__("" : "+v"(l)); /* one load (see q4kp_load) */
    const __m512i m3 = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
    for (int k = 0; k < 4; k++) {
        const __m512i q = _mm512_and_si512(k ? _mm512_srli_epi64(l, 2 * k) : l, m3);
        w[k] = _mm512_mask_add_epi8(q, (__mmask64)load_u64(p + Q3KP_HB + 8 * k), q, four);
    }
}

static inline __attribute__((always_inline)) void unpack_q3_Kp(const uint8_t *row, int64_t s,
                                                               struct unpacked *u) {
    const uint8_t *p = row + (size_t)s * sizeof(struct pl_block_q3_K);
    q3kp_lanes(p, u->w);
    uint16_t d;
    memcpy(&d, p + Q3KP_D, sizeof(d));
    u->d = h2f(d);
    u->dmin = 0.0f;
    u->scale = _mm512_castsi512_ps(q3kp_scales(p));
    u->mn = _mm512_setzero_ps();
}

static void repack_q3_K_row(int64_t n, const uint8_t *src, uint8_t *dst) {
    const struct pl_block_q3_K *b = (const struct pl_block_q3_K *)(const void *)src;
    const __m512i m3 = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
    for (int64_t s = 0; s < n / 256; s++) {
        struct unpacked u;
        unpack_q3_K(src, s, &u);
        uint8_t *p = dst + (size_t)s * sizeof(struct pl_block_q3_K);
        __m512i l = _mm512_setzero_si512();
        for (int k = 0; k < 4; k++) {
            /* values < 4: shifting a qword left by 2k moves none into the next byte */
            l = _mm512_or_si512(l, _mm512_slli_epi64(_mm512_and_si512(u.w[k], m3), 2 * k));
            const uint64_t hb = _mm512_test_epi8_mask(u.w[k], four);
            memcpy(p + Q3KP_HB + 8 * k, &hb, sizeof(hb));
        }
        _mm512_storeu_si512(p, l);
        uint64_t lo = 0, hi = 0;
        for (int j = 0; j < 8; j++) {
            lo |= (uint64_t)pl_q3k_scale(j, b[s].scales) << 6 * j;
            hi |= (uint64_t)pl_q3k_scale(8 + j, b[s].scales) << 6 * j;
        }
        const uint64_t w0 = lo | hi << 48;
        const uint32_t w1 = (uint32_t)(hi >> 16);
        memcpy(p + Q3KP_SC, &w0, sizeof(w0));
        memcpy(p + Q3KP_SC + 8, &w1, sizeof(w1));
        memcpy(p + Q3KP_D, &b[s].d, sizeof(b[s].d));
    }
}

DEFINE_REPACK_ROWS(repack_q3_K, repack_q3_K_row)

/* ---- The row kernels ---- */

/* Prefill. Lanes are tokens: the kernel reads one group (4 values of 16 tokens) per load
 * and multiplies it, by vpdpbusd, with the 4 weight bytes of that group broadcast from each
 * of R_MAX rows, so one activation load serves R_MAX rows and the int32 sum of a sub-block
 * is converted once for 16 tokens. The rows' super-blocks are unpacked first, SB_CHUNK at
 * a time, into a packed_sb array on the stack, and then serve every tile of the call. */
#define R_MAX PL_MM_ROWS
#define SB_CHUNK 24

_Static_assert(PL_MM_ROWS == 4, "the row kernels handle 1 to 4 rows");

struct packed_sb {
    _Alignas(64) uint8_t w[256]; /* the four unpacked registers: group g = bytes 4g .. 4g + 3 */
    union {
        float scale[16]; /* Q4_0 / Q8_0: of each block */
        int32_t isc[16]; /* K-quants: of each sub-block */
    };
    float mn[8];   /* Q4_K: of each sub-block */
    float d, dmin; /* K-quants */
};

static inline void pack_sb(const struct unpacked *u, struct packed_sb *p) {
    for (int k = 0; k < 4; k++)
        _mm512_store_si512(p->w + 64 * k, u->w[k]);
    _mm512_store_ps(p->scale, u->scale);
    _mm256_store_ps(p->mn, _mm512_castps512_ps256(u->mn));
    p->d = u->d;
    p->dmin = u->dmin;
}

/* The 4 weight bytes of group g, to broadcast to every token lane. */
static inline int32_t group_word(const struct packed_sb *p, uint32_t g) {
    int32_t v;
    memcpy(&v, p->w + 4 * g, 4);
    return v;
}

/* The weight rows after a group (the driver's next call, bytes bytes from w + bytes) are
 * fetched into L2 while the group's tiles are computed, part i of n_tiles: the hardware
 * prefetchers see no stream while the kernel works from its unpacked copy. */
static inline void prefetch_next(const uint8_t *w, size_t bytes, uint32_t i, uint32_t n_tiles) {
    const char *p = (const char *)w + bytes;
    for (size_t o = bytes * i / n_tiles & ~(size_t)63; o < bytes * (i + 1) / n_tiles; o += 64)
        _mm_prefetch(p + o, _MM_HINT_T1);
}

/* acc[r] (NT tokens) += rows r < nr of chunk [s0, s0 + n_sc) . tile; pk[r * n_sc + c] is
 * super-block s0 + c of row r. n_sub: sub-blocks per super-block (8: layout 32, 16: layout
 * 16); block_da: activation scale per 32-element block (Q8_0), else per super-block. Made for
 * W-bit vectors of NT tokens: full tiles (512, PL_MM_TILE) and half tiles (256, PL_MM_HALF)
 * run the very same operations per token lane in the same order, so a token's results are
 * bit-identical in either. */
#define DEFINE_ROWS_CHUNK(fname, W, NT)                                                            \
    static inline __attribute__((always_inline)) void fname(                                       \
        const struct packed_sb *pk, uint32_t nr, int64_t n_sc, uint8_t *tl, int64_t n, int64_t s0, \
        uint32_t n_sub, int block_da, int off_shift, __m##W *acc) {                                \
        for (int64_t c = 0; c < n_sc; c++) {                                                       \
            const int64_t s = s0 + c;                                                              \
            const int8_t *q = pl_mm_lay_qs(tl, n, NT, s, 0, 0);                                    \
            __m##W part[R_MAX];                                                                    \
            for (uint32_t r = 0; r < nr; r++)                                                      \
                part[r] = _mm##W##_setzero_ps();                                                   \
            __m##W part2[R_MAX];                                                                   \
            __m##W##i isum[R_MAX]; /* K-quants: sum_j scale_j x sub-block sum_j, exact */          \
            for (uint32_t r = 0; r < nr; r++) {                                                    \
                part2[r] = _mm##W##_setzero_ps();                                                  \
                isum[r] = _mm##W##_setzero_si##W();                                                \
            }                                                                                      \
            /* Two sub-blocks at a time: 2 * nr independent vpdpbusd chains. Q4_0 / Q8_0           \
             * (block_da) take blocks k and k + 4, k = 0, 2, 1, 3: the batch-invariant tree        \
             * (below). */                                                                         \
            for (uint32_t q2 = 0; q2 < n_sub / 2; q2++) {                                          \
                const uint32_t jA = block_da ? (q2 == 1 ? 2 : q2 == 2 ? 1 : q2) : 2 * q2;          \
                const uint32_t jB = block_da ? jA + 4 : jA + 1;                                    \
                __m##W##i p[2][R_MAX];                                                             \
                for (uint32_t jj = 0; jj < 2; jj++) {                                              \
                    /* A weight offset of 2^off_shift: start at -offset x the activations'         \
                     * sum. */                                                                     \
                    const __m##W##i p0 =                                                           \
                        off_shift ? _mm##W##_slli_epi32(                                           \
                                        _mm##W##_load_si##W(                                       \
                                            (const __m##W##i *)(const void *)pl_mm_lay_ns(         \
                                                tl, n, NT, s, jj ? jB : jA)),                      \
                                        (unsigned)off_shift)                                       \
                                  : _mm##W##_setzero_si##W();                                      \
                    for (uint32_t r = 0; r < nr; r++)                                              \
                        p[jj][r] = p0;                                                             \
                }                                                                                  \
                for (uint32_t k = 0; k < 4; k++)                                                   \
                    for (uint32_t h = 0; h < 16 / n_sub; h++)                                      \
                        for (uint32_t jj = 0; jj < 2; jj++) {                                      \
                            const uint32_t g = 16 * k + (16 / n_sub) * (jj ? jB : jA) + h;         \
                            const __m##W##i a = _mm##W##_load_si##W(                               \
                                (const __m##W##i *)(const void *)(q + 4 * g * (NT)));              \
                            for (uint32_t r = 0; r < nr; r++)                                      \
                                p[jj][r] = _mm##W##_dpbusd_epi32(                                  \
                                    p[jj][r],                                                      \
                                    _mm##W##_set1_epi32(group_word(&pk[r * n_sc + c], g)), a);     \
                        }                                                                          \
                if (block_da) {                                                                    \
                    /* m_j = sum_j x (da_j x dw_j); t_k = m_k + m_k+4; u0 = t0 + t2 (part),        \
                     * u1 = t1 + t3 (part2); acc += u0 + u1: the decode kernel's order. */         \
                    const __m##W daA = _mm##W##_load_ps(pl_mm_lay_da(tl, n, NT, s, jA));           \
                    const __m##W daB = _mm##W##_load_ps(pl_mm_lay_da(tl, n, NT, s, jB));           \
                    for (uint32_t r = 0; r < nr; r++) {                                            \
                        const __m##W t = _mm##W##_add_ps(                                          \
                            _mm##W##_mul_ps(                                                       \
                                _mm##W##_cvtepi32_ps(p[0][r]),                                     \
                                _mm##W##_mul_ps(daA,                                               \
                                                _mm##W##_set1_ps(pk[r * n_sc + c].scale[jA]))),    \
                            _mm##W##_mul_ps(                                                       \
                                _mm##W##_cvtepi32_ps(p[1][r]),                                     \
                                _mm##W##_mul_ps(daB,                                               \
                                                _mm##W##_set1_ps(pk[r * n_sc + c].scale[jB]))));   \
                        if (q2 == 0)                                                               \
                            part[r] = t;                                                           \
                        else if (q2 == 1)                                                          \
                            part[r] = _mm##W##_add_ps(part[r], t);                                 \
                        else if (q2 == 2)                                                          \
                            part2[r] = t;                                                          \
                        else                                                                       \
                            acc[r] = _mm##W##_add_ps(                                              \
                                acc[r], _mm##W##_add_ps(part[r], _mm##W##_add_ps(part2[r], t)));   \
                    }                                                                              \
                }                                                                                  \
                for (uint32_t jj = 0; !block_da && jj < 2; jj++)                                   \
                    for (uint32_t r = 0; r < nr; r++)                                              \
                        isum[r] = _mm##W##_add_epi32(                                              \
                            isum[r],                                                               \
                            _mm##W##_mullo_epi32(                                                  \
                                p[jj][r], _mm##W##_set1_epi32(pk[r * n_sc + c].isc[jA + jj])));    \
            }                                                                                      \
            /* K-quants, batch-invariant (matmul.h): s = fma(da x d, isum, s), then Q4_K's         \
             * s = fma(-(da x dmin), sum_j mn_j x (the tokens' sub-block sums), s). */             \
            if (!block_da) {                                                                       \
                const __m##W da = _mm##W##_load_ps(pl_mm_lay_da(tl, n, NT, s, 0));                 \
                __m##W fs[8];                                                                      \
                for (uint32_t j = 0; !off_shift && j < 8; j++)                                     \
                    fs[j] = _mm##W##_load_ps(pl_mm_lay_fs(tl, n, NT, s, j));                       \
                for (uint32_t r = 0; r < nr; r++) {                                                \
                    const struct packed_sb *b = &pk[r * n_sc + c];                                 \
                    acc[r] = _mm##W##_fmadd_ps(_mm##W##_mul_ps(da, _mm##W##_set1_ps(b->d)),        \
                                               _mm##W##_cvtepi32_ps(isum[r]), acc[r]);             \
                    if (!off_shift) {                                                              \
                        __m##W ms = _mm##W##_setzero_ps();                                         \
                        for (uint32_t j = 0; j < 8; j++)                                           \
                            ms = _mm##W##_fmadd_ps(_mm##W##_set1_ps(b->mn[j]), fs[j], ms);         \
                        acc[r] = _mm##W##_fnmadd_ps(                                               \
                            _mm##W##_mul_ps(da, _mm##W##_set1_ps(b->dmin)), ms, acc[r]);           \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

DEFINE_ROWS_CHUNK(rows_chunk, 512, PL_MM_TILE)
DEFINE_ROWS_CHUNK(rows_chunk8, 256, PL_MM_HALF)

/* Rows r < nr (compile-time constant after inlining) of w times n_tiles tiles: the rows'
 * super-blocks are unpacked SB_CHUNK at a time and each chunk is used for every tile; with
 * more than one chunk the partial sums go through out. W-bit vectors of NT tokens, with the
 * matching chunk kernel: DEFINE_ROWS for full tiles, DEFINE_ROWS8 for half tiles. */
#define DEFINE_ROWS_W(name, chunk, W, NT, unpack, n_sub, block_da, off_shift)                      \
    static inline __attribute__((always_inline)) void name##_group(                                \
        int64_t n, const uint8_t *w, size_t row_bytes, uint32_t nr, const uint8_t *tiles,          \
        size_t tile_bytes, uint32_t n_tiles, struct packed_sb *pk, float *out) {                   \
        const int64_t n_sb = n / 256;                                                              \
        for (int64_t s0 = 0; s0 < n_sb; s0 += SB_CHUNK) {                                          \
            const int64_t n_sc = n_sb - s0 < SB_CHUNK ? n_sb - s0 : SB_CHUNK;                      \
            for (uint32_t r = 0; r < nr; r++)                                                      \
                for (int64_t c = 0; c < n_sc; c++) {                                               \
                    struct unpacked u;                                                             \
                    unpack(w + (size_t)r * row_bytes, s0 + c, &u);                                 \
                    pack_sb(&u, &pk[r * n_sc + c]);                                                \
                }                                                                                  \
            for (uint32_t i = 0; i < n_tiles; i++) {                                               \
                uint8_t *tl = (uint8_t *)(uintptr_t)(tiles + (size_t)i * tile_bytes);              \
                if (s0 == 0)                                                                       \
                    prefetch_next(w, nr *row_bytes, i, n_tiles);                                   \
                float *o = out + (size_t)i * nr * (NT);                                            \
                __m##W acc[R_MAX];                                                                 \
                for (uint32_t r = 0; r < nr; r++)                                                  \
                    acc[r] = s0 == 0 ? _mm##W##_setzero_ps() : _mm##W##_loadu_ps(o + r * (NT));    \
                chunk(pk, nr, n_sc, tl, n, s0, (n_sub), (block_da), (off_shift), acc);             \
                for (uint32_t r = 0; r < nr; r++)                                                  \
                    _mm##W##_storeu_ps(o + r * (NT), acc[r]);                                      \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static void name(int64_t n, const uint8_t *w, size_t row_bytes, uint32_t n_rows,               \
                     const uint8_t *tiles, size_t tile_bytes, uint32_t n_tiles, float *out) {      \
        _Alignas(64) struct packed_sb pk[R_MAX * SB_CHUNK];                                        \
        switch (n_rows) {                                                                          \
        case 4:                                                                                    \
            name##_group(n, w, row_bytes, 4, tiles, tile_bytes, n_tiles, pk, out);                 \
            break;                                                                                 \
        case 3:                                                                                    \
            name##_group(n, w, row_bytes, 3, tiles, tile_bytes, n_tiles, pk, out);                 \
            break;                                                                                 \
        case 2:                                                                                    \
            name##_group(n, w, row_bytes, 2, tiles, tile_bytes, n_tiles, pk, out);                 \
            break;                                                                                 \
        case 1:                                                                                    \
            name##_group(n, w, row_bytes, 1, tiles, tile_bytes, n_tiles, pk, out);                 \
            break;                                                                                 \
        default:                                                                                   \
            break;                                                                                 \
        }                                                                                          \
    }

#define DEFINE_ROWS(name, unpack, n_sub, block_da, off_shift)                                      \
    DEFINE_ROWS_W(name, rows_chunk, 512, PL_MM_TILE, unpack, n_sub, block_da, off_shift)
#define DEFINE_ROWS8(name, unpack, n_sub, block_da, off_shift)                                     \
    DEFINE_ROWS_W(name, rows_chunk8, 256, PL_MM_HALF, unpack, n_sub, block_da, off_shift)

/* fn, a vec_rowsn (matmul.h) with the target attributes attr: impl(n, w, row_bytes, n_rows,
 * vec, out, NT) with NT = nv (2 .. PL_QUANT_DOTN_MAX) a constant, so impl's loops over the
 * vectors unroll. */
#define DEFINE_NT_DISPATCH(attr, fn, impl)                                                         \
    static attr void fn(int64_t n, const uint8_t *w, size_t row_bytes, uint32_t n_rows,            \
                        const uint8_t *const *vec, uint32_t nv, float *const *out) {               \
        switch (nv) {                                                                              \
        case 8:                                                                                    \
            impl(n, w, row_bytes, n_rows, vec, out, 8);                                            \
            break;                                                                                 \
        case 7:                                                                                    \
            impl(n, w, row_bytes, n_rows, vec, out, 7);                                            \
            break;                                                                                 \
        case 6:                                                                                    \
            impl(n, w, row_bytes, n_rows, vec, out, 6);                                            \
            break;                                                                                 \
        case 5:                                                                                    \
            impl(n, w, row_bytes, n_rows, vec, out, 5);                                            \
            break;                                                                                 \
        case 4:                                                                                    \
            impl(n, w, row_bytes, n_rows, vec, out, 4);                                            \
            break;                                                                                 \
        case 3:                                                                                    \
            impl(n, w, row_bytes, n_rows, vec, out, 3);                                            \
            break;                                                                                 \
        default:                                                                                   \
            impl(n, w, row_bytes, n_rows, vec, out, 2);                                            \
            break;                                                                                 \
        }                                                                                          \
    }
_Static_assert(PL_QUANT_DOTN_MAX == 8, "DEFINE_NT_DISPATCH covers 2 .. 8 vectors");

/* The decode kernels' weight stream: the lines of [row + from, row + to) that start in it,
 * each once, prefetched with the process's hint (pl_quant_x86_pf). Called per super-block
 * with the range VEC_PF_BYTES ahead of it, so the sweep runs that far ahead of the loads, one
 * line at a time. On the Zen 5 machine 8 KB, twice the per-row kernels' distance:
 * `picolm-bench decode`, the median of 8 alternating runs each, memory / read loop with 4 KB
 * -> 8 KB (T0 then): Q4_K 0.81-0.85 -> 0.89-0.98, Q6_K 0.82-0.87 -> 0.84-0.88, Q4_0 0.83-0.84
 * -> 0.84-0.88, Q8_0 0.86-0.87 -> 0.87-0.90 (rows of 2048 and 5632); 6 KB was between, 12 KB
 * no better than 4 KB (with NTA: 6 KB and 12 KB both a little below 8 KB); NTA over T0 there:
 * Q4_K 0.84 -> 0.89, Q6_K 0.89 -> 0.95, Q4_0 0.86 -> 0.90, Q8_0 0.87 -> 0.96, L2-sized
 * matrices unchanged. On Intel, T0 2 KB ahead (quant_x86.c). */
#define VEC_PF_BYTES ((size_t)pl_quant_x86_pf.decode_bytes)
static inline __attribute__((always_inline)) void pf_sweep(const uint8_t *row, size_t from,
                                                           size_t to) {
    const size_t o0 = (from + 63) & ~(size_t)63;
    if (o0 < to)
        pl_x86_pf_lines((const char *)row + o0, (int)((to - o0 + 63) / 64));
}

/* The sweep for super-blocks [s, s + k) of sb bytes each: their bytes, VEC_PF_BYTES on. */
static inline __attribute__((always_inline)) void pf_sbs(const uint8_t *row, int64_t s, int64_t k,
                                                         size_t sb) {
    pf_sweep(row, VEC_PF_BYTES + (size_t)s * sb, VEC_PF_BYTES + (size_t)(s + k) * sb);
}

/* The steady state's form of the sweep: LINES (a constant after inlining) lines from
 * VEC_PF_BYTES past the start of super-block s, an unaligned address. Called once per step of
 * STEP bytes with LINES = ceil(STEP / 64), it covers every line too, a few of them twice (a
 * line straddling two steps), without the sweep's variable count: on the Intel VM (T0 2 KB),
 * `picolm-bench decode` from memory, rows of 2048, three alternating runs, sweep -> this:
 * Q8_0 13.3-13.8 -> 14.3-14.8 GB/s, Q4_0 12.2-12.8 -> 12.4-13.1, Q6_K (vec_q6_Kp, steps of 4
 * super-blocks; PICOLM_ISA=avx512) 12.5-13.0 -> 13.2-13.5; in the engine (TinyLlama shape, 1
 * thread) Q8_0 13.2 -> 13.7-14.0 tok/s, Q4_0 23.7 -> 24.0-24.2. The Q4_0 / Q8_0 decode
 * (DEFINE_VEC_ROWS) steps one super-block at a time, not the pair it computes together: there,
 * rdtsc around each 2048 x 2048 product of the engine's decode (1 thread), Q8_0 15.9-16.0 ->
 * 16.7-17.0 GB/s (14.0-14.2 -> 14.7-15.1 tok/s; with one weight stream 14.8-16.2 -> 16.9-17.0),
 * Q4_0 16.0-16.2 -> 17.0-17.1 (27.1-27.3 -> 28.5 tok/s). In vec_q6_Kp a step per super-block
 * instead of per 4 made no difference then (16.3-16.7 against 16.4-16.9 GB/s); on the Zen 5
 * VM it reads much faster, so vec_q6_Kp steps per super-block now. */
static inline __attribute__((always_inline)) void pf_step(const uint8_t *row, int64_t s, size_t sb,
                                                          int lines) {
    pl_x86_pf_lines((const char *)row + VEC_PF_BYTES + (size_t)s * sb, lines);
}

/* Decode of Q4_0 / Q8_0: one token, one row at a time, super-blocks in order: a single
 * forward stream, prefetched VEC_PF_BYTES ahead (pf_step per super-block, the sweep for the
 * odd one at a row's end).
 * Measured on a Zen 5 core (47 GB/s read loop, TinyLlama-sized rows of 2048 and 5632): two
 * rows interleaved, each super-block prefetching the same one of the next row pair, reached
 * 0.58-0.63 (Q4_0) and 0.73-0.78 (Q8_0) of the read bandwidth; a sweep over the pair, 0.86-0.94
 * and 0.80-0.83; one row, 0.92-0.96 and 0.93-0.97. The hardware prefetchers follow one
 * stream, not two interleaved ones. Batch invariance (matmul.h): per super-block the exact
 * integer block sums (offset 2^off_shift x the activation sums included) become
 * m_j = sum_j x (da_j x dw_j), summed as (m0 + m4 + (m2 + m6)) + (m1 + m5 + (m3 + m7)) and
 * added to the row's sum: the float operations rows() does per token. The multi-token form
 * (name##n) still takes row pairs, whose trees share registers; it sweeps the pair's bytes
 * at twice the rate, from the next pair's end on (2 x row_bytes + VEC_PF_BYTES ahead), and
 * computes NT times as much per byte. One row takes its
 * super-blocks in pairs instead, the integer sums to floats and the trees of both in
 * 512-bit operations (name##_m2, name##_trees): Q4_0 over an L2-sized matrix 52 -> 63-67
 * GB/s, so the kernel keeps a margin over the bus when the host slows the core. In the
 * packed layouts (sc_at: the scales' offset in a super-block, else -1) the pair's 16 fp16
 * scales become floats in one conversion, and the block sums are even lanes plus odd lanes
 * (two permutes): on the Intel VM over an L2-sized matrix Q4_0 33.4-34.5 -> 34.8-37.2 GB/s,
 * Q8_0 70.8-72.8 -> 73.2-75.6; from memory, and in the engine, the same within the noise. */
#define DEFINE_VEC_ROWS(name, unpack, off_shift, sb_bytes, sc_at)                                  \
    /* the 8 block products m_j of an unpacked super-block s with the vector v */                  \
    static inline __attribute__((always_inline))                                                   \
    __m256 name##_m(const struct unpacked *u, uint8_t *v, int64_t n, int64_t s) {                  \
        const int8_t *q = pl_mm_lay_qs(v, n, 1, s, 0, 0);                                          \
        __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u->w[0], _mm512_load_si512(q));    \
        p = _mm512_dpbusd_epi32(p, u->w[1], _mm512_load_si512(q + 64));                            \
        p = _mm512_dpbusd_epi32(p, u->w[2], _mm512_load_si512(q + 128));                           \
        p = _mm512_dpbusd_epi32(p, u->w[3], _mm512_load_si512(q + 192));                           \
        /* block j: lanes 2j + 2j+1, plus the offset term */                                       \
        const __m256i isum = _mm256_add_epi32(                                                     \
            _mm512_cvtepi64_epi32(_mm512_add_epi64(p, _mm512_srli_epi64(p, 32))),                  \
            _mm256_slli_epi32(                                                                     \
                _mm256_loadu_si256((const __m256i *)(const void *)pl_mm_lay_ns(v, n, 1, s, 0)),    \
                (off_shift)));                                                                     \
        return _mm256_mul_ps(_mm256_cvtepi32_ps(isum),                                             \
                             _mm256_mul_ps(_mm256_loadu_ps(pl_mm_lay_da(v, n, 1, s, 0)),           \
                                           _mm512_castps512_ps256(u->scale)));                     \
    }                                                                                              \
    /* name##_m of super-blocks s (lanes 0..7) and s + 1 (lanes 8..15) of one row, in              \
     * 512-bit operations: per lane the same operations */                                         \
    static inline __attribute__((always_inline))                                                   \
    __m512 name##_m2(const uint8_t *row, const struct unpacked *u0, const struct unpacked *u1,     \
                     uint8_t *v, int64_t n, int64_t s) {                                           \
        const int8_t *q0 = pl_mm_lay_qs(v, n, 1, s, 0, 0);                                         \
        const int8_t *q1 = pl_mm_lay_qs(v, n, 1, s + 1, 0, 0);                                     \
        __m512i p0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u0->w[0], _mm512_load_si512(q0)); \
        __m512i p1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u1->w[0], _mm512_load_si512(q1)); \
        for (int k = 1; k < 4; k++) {                                                              \
            p0 = _mm512_dpbusd_epi32(p0, u0->w[k], _mm512_load_si512(q0 + 64 * k));                \
            p1 = _mm512_dpbusd_epi32(p1, u1->w[k], _mm512_load_si512(q1 + 64 * k));                \
        }                                                                                          \
        /* block j's lanes 2j + 2j+1 summed: the even lanes of both super-blocks plus their odd    \
         * lanes (lanes 0..7: s, 8..15: s + 1) */                                                  \
        const __m512i even =                                                                       \
            _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);           \
        const __m512i odd =                                                                        \
            _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);           \
        const __m512i isum = _mm512_add_epi32(_mm512_permutex2var_epi32(p0, even, p1),             \
                                              _mm512_permutex2var_epi32(p0, odd, p1));             \
        const __m512i ns = _mm512_inserti64x4(                                                     \
            _mm512_castsi256_si512(                                                                \
                _mm256_loadu_si256((const __m256i *)(const void *)pl_mm_lay_ns(v, n, 1, s, 0))),   \
            _mm256_loadu_si256((const __m256i *)(const void *)pl_mm_lay_ns(v, n, 1, s + 1, 0)),    \
            1);                                                                                    \
        /* the 16 block scales: converted from the packed layout's fp16 in one go (sc_at: their    \
         * offset in a super-block), else the unpacked ones side by side */                        \
        const uint8_t *h0 = row + (size_t)s * (sb_bytes) + ((sc_at) < 0 ? 0 : (sc_at));            \
        const __m512 sc =                                                                          \
            (sc_at) >= 0                                                                           \
                ? _mm512_cvtph_ps(_mm256_inserti128_si256(                                         \
                      _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)h0)),  \
                      _mm_loadu_si128((const __m128i *)(const void *)(h0 + (sb_bytes))), 1))       \
                : _mm512_castpd_ps(                                                                \
                      _mm512_insertf64x4(_mm512_castps_pd(u0->scale),                              \
                                         _mm256_castps_pd(_mm512_castps512_ps256(u1->scale)), 1)); \
        return _mm512_mul_ps(                                                                      \
            _mm512_cvtepi32_ps(_mm512_add_epi32(isum, _mm512_slli_epi32(ns, (off_shift)))),        \
            _mm512_mul_ps(_mm512_loadu_ps(pl_mm_lay_da(v, n, 1, s, 0)), sc));                      \
    }                                                                                              \
    /* The batch-invariant trees of the two halves of m, in lanes 0 and 8; acc += those of         \
     * m0 (row 0 in lanes 0..7) and m1 (row 1, 8..15) */                                           \
    static inline __attribute__((always_inline)) __m512 name##_trees(__m512 m) {                   \
        const __m512 t = _mm512_add_ps(m, _mm512_shuffle_f32x4(m, m, 0xB1));                       \
        const __m512 uu = _mm512_add_ps(t, _mm512_permute_ps(t, 0x4E));                            \
        return _mm512_add_ps(uu, _mm512_permute_ps(uu, 0xB1));                                     \
    }                                                                                              \
    static inline __attribute__((always_inline))                                                   \
    __m512 name##_tree(__m512 acc, __m256 m0, __m256 m1) {                                         \
        return _mm512_add_ps(                                                                      \
            acc, name##_trees(_mm512_castpd_ps(_mm512_insertf64x4(                                 \
                     _mm512_castps_pd(_mm512_castps256_ps512(m0)), _mm256_castps_pd(m1), 1))));    \
    }                                                                                              \
    /* one row's tree, as name##_tree's per-row lanes */                                           \
    static inline __attribute__((always_inline)) float name##_tree1(float a0, __m256 m) {          \
        const __m128 t = _mm_add_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));       \
        const __m128 uu = _mm_add_ps(t, _mm_movehl_ps(t, t));                                      \
        return a0 + _mm_cvtss_f32(_mm_add_ss(uu, _mm_movehdup_ps(uu)));                            \
    }                                                                                              \
    static void name(int64_t n, const uint8_t *w, size_t row_bytes, uint32_t n_rows,               \
                     const uint8_t *vec, float *out) {                                             \
        const int64_t n_sb = n / 256;                                                              \
        uint8_t *v = (uint8_t *)(uintptr_t)vec;                                                    \
        for (uint32_t r = 0; r < n_rows; r++) {                                                    \
            const uint8_t *r0 = w + (size_t)r * row_bytes;                                         \
            float a0 = 0.0f;                                                                       \
            int64_t s = 0;                                                                         \
            for (; s + 2 <= n_sb; s += 2) {                                                        \
                struct unpacked u0, u1;                                                            \
                /* a super-block's lines before each (see pf_step) */                              \
                pf_step(r0, s, (sb_bytes), (int)(((sb_bytes) + 63) / 64));                         \
                unpack(r0, s, &u0);                                                                \
                pf_step(r0, s + 1, (sb_bytes), (int)(((sb_bytes) + 63) / 64));                     \
                unpack(r0, s + 1, &u1);                                                            \
                /* the trees of both super-blocks side by side (lanes 0 and 8), added to           \
                 * the row's sum in order */                                                       \
                const __m512 t = name##_trees(name##_m2(r0, &u0, &u1, v, n, s));                   \
                a0 += _mm512_cvtss_f32(t);                                                         \
                a0 += _mm_cvtss_f32(_mm512_extractf32x4_ps(t, 2));                                 \
            }                                                                                      \
            for (; s < n_sb; s++) {                                                                \
                struct unpacked u0;                                                                \
                pf_sbs(r0, s, 1, (sb_bytes));                                                      \
                unpack(r0, s, &u0);                                                                \
                a0 = name##_tree1(a0, name##_m(&u0, v, n, s));                                     \
            }                                                                                      \
            out[r] = a0;                                                                           \
        }                                                                                          \
    }                                                                                              \
    /* NT tokens (vectors vec[t], 2 .. 4; NT constant after inlining): each super-block of a       \
     * row pair unpacked once for all; per token name()'s operations, so out[t] is                 \
     * bit-identical to name()'s. */                                                               \
    static inline __attribute__((always_inline)) void name##_n(                                    \
        int64_t n, const uint8_t *w, size_t row_bytes, uint32_t n_rows, const uint8_t *const *vec, \
        float *const *out, const int NT) {                                                         \
        const int64_t n_sb = n / 256;                                                              \
        uint8_t *v[PL_QUANT_DOTN_MAX];                                                             \
        for (int t = 0; t < NT; t++)                                                               \
            v[t] = (uint8_t *)(uintptr_t)vec[t];                                                   \
        const size_t pair_pf = 2 * row_bytes + VEC_PF_BYTES;                                       \
        uint32_t r = 0;                                                                            \
        for (; r + 2 <= n_rows; r += 2) {                                                          \
            const uint8_t *r0 = w + (size_t)r * row_bytes, *r1 = r0 + row_bytes;                   \
            __m512 acc[PL_QUANT_DOTN_MAX];                                                         \
            for (int t = 0; t < NT; t++)                                                           \
                acc[t] = _mm512_setzero_ps();                                                      \
            for (int64_t s = 0; s < n_sb; s++) {                                                   \
                struct unpacked u0, u1;                                                            \
                /* the pair's 2 x row_bytes, swept at twice the rate, past the next pair */        \
                pf_sweep(r0, pair_pf + 2 * (size_t)s * (sb_bytes),                                 \
                         pair_pf + 2 * (size_t)(s + 1) * (sb_bytes));                              \
                unpack(r0, s, &u0);                                                                \
                unpack(r1, s, &u1);                                                                \
                for (int t = 0; t < NT; t++)                                                       \
                    acc[t] =                                                                       \
                        name##_tree(acc[t], name##_m(&u0, v[t], n, s), name##_m(&u1, v[t], n, s)); \
            }                                                                                      \
            for (int t = 0; t < NT; t++) {                                                         \
                out[t][r] = _mm512_cvtss_f32(acc[t]);                                              \
                out[t][r + 1] = _mm_cvtss_f32(_mm512_extractf32x4_ps(acc[t], 2));                  \
            }                                                                                      \
        }                                                                                          \
        for (; r < n_rows; r++) {                                                                  \
            const uint8_t *r0 = w + (size_t)r * row_bytes;                                         \
            float a[PL_QUANT_DOTN_MAX] = {0.0f};                                                   \
            for (int64_t s = 0; s < n_sb; s++) {                                                   \
                struct unpacked u0;                                                                \
                pf_sbs(r0, s, 1, (sb_bytes));                                                      \
                unpack(r0, s, &u0);                                                                \
                for (int t = 0; t < NT; t++)                                                       \
                    a[t] = name##_tree1(a[t], name##_m(&u0, v[t], n, s));                          \
            }                                                                                      \
            for (int t = 0; t < NT; t++)                                                           \
                out[t][r] = a[t];                                                                  \
        }                                                                                          \
    }                                                                                              \
    DEFINE_NT_DISPATCH(, name##n, name##_n)

/* Offsets: Q6_K's 32, Q4_0's 8, Q8_0's 128 (its bias); Q4_K's mins go through fs. */
DEFINE_ROWS(rows_q4_K, unpack_q4_K, 8, 0, 0)
DEFINE_ROWS(rows_q6_K, unpack_q6_K, 16, 0, 5)
DEFINE_ROWS(rows_q4_0, unpack_q4_0, 8, 1, 3)
DEFINE_ROWS(rows_q8_0, unpack_q8_0, 8, 1, 7)
DEFINE_ROWS8(rows8_q4_K, unpack_q4_K, 8, 0, 0)
DEFINE_ROWS(rows_q5_K, unpack_q5_K, 8, 0, 0)
DEFINE_ROWS8(rows8_q5_K, unpack_q5_K, 8, 0, 0)
DEFINE_ROWS(rows_q3_K, unpack_q3_K, 16, 0, 2)
DEFINE_ROWS8(rows8_q3_K, unpack_q3_K, 16, 0, 2)
DEFINE_ROWS8(rows8_q6_K, unpack_q6_K, 16, 0, 5)
DEFINE_ROWS8(rows8_q4_0, unpack_q4_0, 8, 1, 3)
DEFINE_ROWS8(rows8_q8_0, unpack_q8_0, 8, 1, 7)
DEFINE_VEC_ROWS(vec_q4_0, unpack_q4_0, 3, 8 * sizeof(struct pl_block_q4_0), -1)
DEFINE_VEC_ROWS(vec_q8_0, unpack_q8_0, 7, 8 * sizeof(struct pl_block_q8_0), -1)
DEFINE_ROWS(rows_q4_0p, unpack_q4_0p, 8, 1, 3)
DEFINE_ROWS(rows_q8_0p, unpack_q8_0p, 8, 1, 7)
DEFINE_ROWS8(rows8_q4_0p, unpack_q4_0p, 8, 1, 3)
DEFINE_ROWS8(rows8_q8_0p, unpack_q8_0p, 8, 1, 7)
DEFINE_VEC_ROWS(vec_q4_0p, unpack_q4_0p, 3, 8 * sizeof(struct pl_block_q4_0), Q40P_SC)
DEFINE_VEC_ROWS(vec_q8_0p, unpack_q8_0p, 7, 8 * sizeof(struct pl_block_q8_0), Q80P_SC)

/* The body of a software-pipelined decode kernel over rows [0, n_rows) of w (n, w, row_bytes,
 * n_rows, vec, out: the kernel's parameters): GROUP(row, v, n, s0, k, &g, Q) computes the
 * integer work of super-blocks [s0, s0 + k) (k <= 4) into g (type SUMS_T), and CHAIN(sum, &g,
 * k) continues a row's float chain over them. Each group's chain runs after the next group's
 * integer work (the next row's first group for a row's last), from registers, so in program
 * order the two overlap; the memory stream stays one row after the other. Same operations in
 * the same order per row, so the same bits. INIT: pend's initializer (unset, GCC 12 cannot
 * tell that pend is set whenever it is read). */
#define PIPELINED_ROWS(SUMS_T, GROUP, CHAIN, Q, INIT)                                              \
    const int64_t n_sb = n / 256;                                                                  \
    uint8_t *v = (uint8_t *)(uintptr_t)vec;                                                        \
    float sum = 0.0f;                                                                              \
    SUMS_T pend = INIT; /* the group whose chain is pending: pk super-blocks of row pr */          \
    int64_t pk = 0;                                                                                \
    bool p_last = false; /* the pending group ends its row */                                      \
    uint32_t pr = 0;                                                                               \
    for (uint32_t r = 0; r < n_rows; r++) {                                                        \
        const uint8_t *row = w + (size_t)r * row_bytes;                                            \
        for (int64_t s0 = 0; s0 < n_sb; s0 += 4) {                                                 \
            const int64_t k = n_sb - s0 < 4 ? n_sb - s0 : 4;                                       \
            SUMS_T g;                                                                              \
            GROUP(row, v, n, s0, k, &g, Q);                                                        \
            if (pk) {                                                                              \
                sum = CHAIN(sum, &pend, pk);                                                       \
                if (p_last) {                                                                      \
                    out[pr] = sum;                                                                 \
                    sum = 0.0f;                                                                    \
                }                                                                                  \
            }                                                                                      \
            pend = g;                                                                              \
            pk = k;                                                                                \
            p_last = s0 + 4 >= n_sb;                                                               \
            pr = r;                                                                                \
        }                                                                                          \
    }                                                                                              \
    if (pk) /* the last row's last group */                                                        \
        out[pr] = CHAIN(sum, &pend, pk);

/* ---- Q4_K decode from the packed layout (GFNI, VBMI) ----
 * (Q4_K's rows past a matrix's last group of 4, and Q5_K: whole groups of Q4_K rows take
 * vec_q4_Kx below.)
 * Per super-block, the int32 lanes of four VPDPBUSDs hold the sub-blocks' partial sums in
 * lane pairs (layout 32), so one multiply by the scales (lane pair j: scale j) gives
 * lanes that sum to isum; the mins times minus the sub-blocks' activation sums (ns of the
 * layout) sum to -msum. Four super-blocks' sums are reduced together (q4kp_reduce4).
 * Batch invariance (matmul.h): per super-block s = fma(da x d, isum, s), then
 * s = fma(da x dmin, -msum, s), which is the tile kernels' fma(-(da x dmin), msum, s) (the
 * product's sign moves, not its rounding). The chain is two dependent FMAs per super-block,
 * longer than the integer work of a super-block on a Zen 5 core: vec_q4_Kp runs each group's
 * chain one group late (below). Packed Q5_K goes through the same functions with q5 set: its
 * fifth bits join the nibbles (q5kp_hi), the rest is Q4_K's. Zen 5 VM, `picolm-bench decode`:
 * Q5_K over an L2-sized matrix 47 GB/s, from memory 0.93 of the read loop; the per-row
 * vec_dot_q5_K over the GGUF layout ran 26 GB/s in L2 (`picolm-bench kernels`). */
#define TARGET_GV __attribute__((target("gfni,avx512vbmi")))
#define GF_HI_NIBBLE 0x1020408000000000ll /* GF(2) affine matrix: high nibble moved down */

/* A packed super-block's quants (in the lane order of layout 32), scales (lane pairs 2j,
 * 2j + 1: scale j) and mins (lane j: min j), as int32 lanes. */
struct q4kp_w {
    __m512i w[4], sc;
    __m256i mn;
};

/* A packed super-block's quants, in the lane order of layout 32. */
static inline TARGET_GV __attribute__((always_inline)) void q4kp_quants(const uint8_t *p,
                                                                        __m512i w[4], int q5) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), hi_nib = _mm512_set1_epi64(GF_HI_NIBBLE);
    __m512i lo = _mm512_loadu_si512(p), hi = _mm512_loadu_si512(p + 64);
    /* One load per 64 bytes: left to itself the compiler folds the loads into both users and
     * reads every line twice from L1 (47 -> 49 GB/s over an L2-sized matrix without); the
     * empty asm makes lo and hi registers. */
    __asm__("" : "+v"(lo), "+v"(hi));
    w[0] = _mm512_and_si512(lo, m4);
    w[1] = _mm512_and_si512(hi, m4);
    w[2] = _mm512_gf2p8affine_epi64_epi8(lo, hi_nib, 0);
    w[3] = _mm512_gf2p8affine_epi64_epi8(hi, hi_nib, 0);
    for (int k = 0; q5 && k < 4; k++)
        w[k] = q5kp_hi(p, k, w[k]);
}

static inline TARGET_GV __attribute__((always_inline)) void q4kp_load(const uint8_t *p,
                                                                      struct q4kp_w *u, int q5) {
    /* the field of lane pair j (scale: byte 0 of each dword, stream bit 6j) or lane j
     * (min); the bits above the field go with the mask */
    const __m512i sc_ctl =
        _mm512_set_epi64(42ll << 32 | 42, 36ll << 32 | 36, 30ll << 32 | 30, 24ll << 32 | 24,
                         18ll << 32 | 18, 12ll << 32 | 12, 6ll << 32 | 6, 0);
    const __m256i mn_ctl =
        _mm256_set_epi64x(42ll << 32 | 36, 30ll << 32 | 24, 18ll << 32 | 12, 6ll << 32 | 0);
    q4kp_quants(p, u->w, q5);
    u->sc = _mm512_and_si512(
        _mm512_maskz_multishift_epi64_epi8(0x1111111111111111ull, sc_ctl,
                                           _mm512_set1_epi64((long long)load_u64(p + KP_SC(q5)))),
        _mm512_set1_epi32(63));
    u->mn = _mm256_and_si256(
        _mm256_maskz_multishift_epi64_epi8(0x11111111u, mn_ctl,
                                           _mm256_set1_epi64x((long long)load_u64(p + KP_MN(q5)))),
        _mm256_set1_epi32(63));
}

/* The quants w (q4kp_quants) dotted with activations q: per int32 lane 16 products (layout
 * 32: lane pair 2j, 2j + 1 holds sub-block j). */
static inline TARGET_GV __attribute__((always_inline)) __m512i q4kp_dot4(const __m512i w[4],
                                                                         const int8_t *q) {
    __m512i pa = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[0], _mm512_load_si512(q));
    __m512i pb = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[2], _mm512_load_si512(q + 128));
    pa = _mm512_dpbusd_epi32(pa, w[1], _mm512_load_si512(q + 64));
    pb = _mm512_dpbusd_epi32(pb, w[3], _mm512_load_si512(q + 192));
    return _mm512_add_epi32(pa, pb);
}

/* The integer sums of a loaded super-block with the decode vector's (q, ns): lanes 0..7 sum
 * to isum, lanes 8..15 to -msum. */
static inline TARGET_GV __attribute__((always_inline)) __m512i
q4kp_dot(const struct q4kp_w *u, const int8_t *q, const int32_t *ns) {
    const __m512i ps = _mm512_mullo_epi32(q4kp_dot4(u->w, q), u->sc);
    const __m256i ms =
        _mm256_mullo_epi32(u->mn, _mm256_loadu_si256((const __m256i *)(const void *)ns));
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_add_epi32(
                                  _mm512_castsi512_si256(ps), _mm512_extracti64x4_epi64(ps, 1))),
                              ms, 1);
}

/* Four super-blocks' z: lanes 0..3 their isums, lanes 8..11 their -msums. */
static inline TARGET_GV __attribute__((always_inline)) __m512i
q4kp_reduce4(__m512i z0, __m512i z1, __m512i z2, __m512i z3) {
    const __m512i a =
        _mm512_add_epi32(_mm512_unpacklo_epi32(z0, z1), _mm512_unpackhi_epi32(z0, z1));
    const __m512i b =
        _mm512_add_epi32(_mm512_unpacklo_epi32(z2, z3), _mm512_unpackhi_epi32(z2, z3));
    const __m512i c = _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
    return _mm512_add_epi32(c, _mm512_shuffle_i32x4(c, c, _MM_SHUFFLE(2, 3, 0, 1)));
}

/* Lane i (< 4, a constant after inlining) of x. The chains read their sums from registers:
 * a 512-bit store read back as floats stalls its loads (no store forwarding): packed Q6_K
 * decode went from 54-57 to 59-63 GB/s over an L2-sized matrix without it. */
static inline __attribute__((always_inline)) float lane4(__m128 x, int i) {
    return _mm_cvtss_f32(i == 0   ? x
                         : i == 1 ? _mm_movehdup_ps(x)
                         : i == 2 ? _mm_movehl_ps(x, x)
                                  : _mm_shuffle_ps(x, x, 3));
}

/* What the float chain needs of a group of up to 4 super-blocks: lane i of f the isum of
 * super-block i, lane 8 + i its -msum; dd[i] lanes 0, 1: [da x d, da x dmin]. In registers:
 * stored as two floats and read back one at a time, every read of the chain waited on its
 * store. Both changes (this and q4kp_load's single loads) over an L2-sized matrix, median
 * of 3 alternating `picolm-bench decode` runs: 46.3 -> 50.2 GB/s; the engine's 1-thread
 * TinyLlama Q4_K_M decode 50.0 -> 51.3 tok/s, 0.81 -> 0.85 of the read bandwidth. */
struct q4kp_sums {
    __m512 f;
    __m128 dd[4];
};

/* [da x d, da x dmin] of super-block s of packed row w. */
static inline TARGET_GV __attribute__((always_inline)) __m128
q4kp_dd(const uint8_t *w, uint8_t *v, int64_t n, int64_t s, int q5) {
    uint32_t d2;
    memcpy(&d2, w + (size_t)s * KP_SB(q5) + KP_D(q5), sizeof(d2));
    return _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int)d2)),
                      _mm_set1_ps(*pl_mm_lay_da(v, n, 1, s, 0)));
}

/* Super-block s of packed row w: its q4kp_dot, and [da x d, da x dmin] into dd. */
static inline TARGET_GV __attribute__((always_inline)) __m512i
q4kp_sb(const uint8_t *w, uint8_t *v, int64_t n, int64_t s, __m128 *dd, int q5) {
    const uint8_t *p = w + (size_t)s * KP_SB(q5);
    *dd = q4kp_dd(w, v, n, s, q5);
    struct q4kp_w u;
    q4kp_load(p, &u, q5);
    return q4kp_dot(&u, pl_mm_lay_qs(v, n, 1, s, 0, 0), pl_mm_lay_ns(v, n, 1, s, 0));
}

/* Super-blocks [s0, s0 + k) (k <= 4) of packed row w into g, with the prefetch of their
 * bytes VEC_PF_BYTES on (a full group's 576 (Q5_K: 704): 10 (12) lines cover them at any
 * alignment). */
static inline TARGET_GV __attribute__((always_inline)) void
q4kp_group(const uint8_t *w, uint8_t *v, int64_t n, int64_t s0, int64_t k, struct q4kp_sums *g,
           int q5) {
    const __m512i zero = _mm512_setzero_si512();
    __m512i r;
    if (k == 4) {
        pf_step(w, s0, KP_SB(q5), (int)((4 * KP_SB(q5) + 63) / 64 + 1));
        const __m512i z0 = q4kp_sb(w, v, n, s0, &g->dd[0], q5);
        const __m512i z1 = q4kp_sb(w, v, n, s0 + 1, &g->dd[1], q5);
        const __m512i z2 = q4kp_sb(w, v, n, s0 + 2, &g->dd[2], q5);
        const __m512i z3 = q4kp_sb(w, v, n, s0 + 3, &g->dd[3], q5);
        r = q4kp_reduce4(z0, z1, z2, z3);
    } else {
        pf_sbs(w, s0, k, KP_SB(q5));
        g->dd[1] = g->dd[2] = g->dd[3] = _mm_setzero_ps(); /* past k: never read */
        const __m512i z0 = q4kp_sb(w, v, n, s0, &g->dd[0], q5);
        const __m512i z1 = k > 1 ? q4kp_sb(w, v, n, s0 + 1, &g->dd[1], q5) : zero;
        const __m512i z2 = k > 2 ? q4kp_sb(w, v, n, s0 + 2, &g->dd[2], q5) : zero;
        r = q4kp_reduce4(z0, z1, z2, zero);
    }
    g->f = _mm512_cvtepi32_ps(r);
}

/* The float chain of a group g of k super-blocks, continuing sum. */
static inline TARGET_GV __attribute__((always_inline)) float
q4kp_chain(float sum, const struct q4kp_sums *g, int64_t k) {
    const __m128 fi = _mm512_castps512_ps128(g->f), fm = _mm512_extractf32x4_ps(g->f, 2);
    for (int i = 0; i < 4; i++)
        if (i < k) {
            sum = fmaf(_mm_cvtss_f32(g->dd[i]), lane4(fi, i), sum);
            sum = fmaf(_mm_cvtss_f32(_mm_movehdup_ps(g->dd[i])), lane4(fm, i), sum);
        }
    return sum;
}

/* Software-pipelined (PIPELINED_ROWS). Zen 5 VM, `picolm-bench decode`, rows of 2048, 3 runs
 * each: L2-sized matrix 43-45 -> 51-53 GB/s, from memory 0.72-0.87 -> 0.88-0.97 of the read
 * loop (2 threads: L2 80 -> 79-94, memory 0.80-0.82 -> 0.84-0.89). Rows of 5632: L2 48, the
 * chain within a row then bounds it. Interleaving two rows' groups instead (two chains at
 * once) reached L2 48.6 but read memory at 0.66-0.77: the prefetchers follow one stream. */
static inline TARGET_GV __attribute__((always_inline)) void
kp_vec(int64_t n, const uint8_t *w, size_t row_bytes, uint32_t n_rows, const uint8_t *vec,
       float *out, int q5) {
    PIPELINED_ROWS(struct q4kp_sums, q4kp_group, q4kp_chain, q5, {.f = _mm512_setzero_ps()});
}

static TARGET_GV void vec_q4_Kp(int64_t n, const uint8_t *w, size_t row_bytes, uint32_t n_rows,
                                const uint8_t *vec, float *out) {
    kp_vec(n, w, row_bytes, n_rows, vec, out, 0);
}

static TARGET_GV void vec_q5_Kp(int64_t n, const uint8_t *w, size_t row_bytes, uint32_t n_rows,
                                const uint8_t *vec, float *out) {
    kp_vec(n, w, row_bytes, n_rows, vec, out, 1);
}

/* NT decode vectors (2 .. PL_QUANT_DOTN_MAX; NT constant after inlining): each super-block
 * is loaded once for all of them; per vector the operations of vec_q4_Kp (the same sums,
 * reductions and chain), so out[t] is bit-identical to its result for vec[t]. */
static inline TARGET_GV __attribute__((always_inline)) void
kp_n(int64_t n, const uint8_t *w, size_t row_bytes, uint32_t n_rows, const uint8_t *const *vec,
     float *const *out, const int NT, int q5) {
    const int64_t n_sb = n / 256;
    uint8_t *v[PL_QUANT_DOTN_MAX];
    for (int t = 0; t < NT; t++)
        v[t] = (uint8_t *)(uintptr_t)vec[t];
    for (uint32_t r = 0; r < n_rows; r++) {
        const uint8_t *row = w + (size_t)r * row_bytes;
        float sum[PL_QUANT_DOTN_MAX];
        for (int t = 0; t < NT; t++)
            sum[t] = 0.0f;
        for (int64_t s0 = 0; s0 < n_sb; s0 += 4) {
            const int64_t k = n_sb - s0 < 4 ? n_sb - s0 : 4;
            _Alignas(64) __m512i z[PL_QUANT_DOTN_MAX][4];
            __m128 dd[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps()};
            pf_sbs(row, s0, k, KP_SB(q5));
            for (int64_t i = 0; i < 4; i++) {
                if (i >= k) {
                    for (int t = 0; t < NT; t++)
                        z[t][i] = _mm512_setzero_si512();
                    continue;
                }
                const uint8_t *p = row + (size_t)(s0 + i) * KP_SB(q5);
                struct q4kp_w u;
                q4kp_load(p, &u, q5);
                uint32_t d2;
                memcpy(&d2, p + KP_D(q5), sizeof(d2));
                dd[i] = _mm_cvtph_ps(_mm_cvtsi32_si128((int)d2));
                for (int t = 0; t < NT; t++)
                    z[t][i] = q4kp_dot(&u, pl_mm_lay_qs(v[t], n, 1, s0 + i, 0, 0),
                                       pl_mm_lay_ns(v[t], n, 1, s0 + i, 0));
            }
            for (int t = 0; t < NT; t++) {
                const __m512 f =
                    _mm512_cvtepi32_ps(q4kp_reduce4(z[t][0], z[t][1], z[t][2], z[t][3]));
                const __m128 fi = _mm512_castps512_ps128(f), fm = _mm512_extractf32x4_ps(f, 2);
                for (int i = 0; i < 4; i++)
                    if (i < k) {
                        const float da = *pl_mm_lay_da(v[t], n, 1, s0 + i, 0);
                        sum[t] = fmaf(_mm_cvtss_f32(dd[i]) * da, lane4(fi, i), sum[t]);
                        sum[t] =
                            fmaf(_mm_cvtss_f32(_mm_movehdup_ps(dd[i])) * da, lane4(fm, i), sum[t]);
                    }
            }
        }
        for (int t = 0; t < NT; t++)
            out[t][r] = sum[t];
    }
}

#define q5kp_n(n, w, row_bytes, n_rows, vec, out, NT) kp_n(n, w, row_bytes, n_rows, vec, out, NT, 1)
DEFINE_NT_DISPATCH(TARGET_GV, vec_q5_Kpn, q5kp_n)
#undef q5kp_n

DEFINE_ROWS(rows_q4_Kp, unpack_q4_Kp, 8, 0, 0)
DEFINE_ROWS8(rows8_q4_Kp, unpack_q4_Kp, 8, 0, 0)
DEFINE_ROWS(rows_q5_Kp, unpack_q5_Kp, 8, 0, 0)
DEFINE_ROWS8(rows8_q5_Kp, unpack_q5_Kp, 8, 0, 0)

/* ---- Q4_K over groups of 4 rows (repack_q4_Kx's layout) ----
 * Decode, per super-block of a group: each chunk's nibbles (an AND and a GF2P8AFFINEQB)
 * dotted with the two 16-byte activation groups they pair with, broadcast to the 4 rows'
 * lanes: 16 VPDPBUSDs into a[P] (sub-blocks 2P, 2P + 1), each int32 lane a sum of 16
 * products of a nibble and an int8: |sum| <= 16 x 15 x 128 = 30720 fits int16. Two VPACKSSDWs and
 * two VPDPWSSDs with the scales as int16 give lanes that sum to each row's isum; one VPDPWSSD of
 * the mins with the activations' sub-block sums (ns, minus those sums, as int16) lanes that
 * sum to -msum. Each row's 4 lanes are added, and the 4 rows' float chains are two FMAs per
 * super-block in lane 0 of each row's 128-bit lane: s = fma(da x d, isum, s), then
 * s = fma(da x dmin, -msum, s): vec_q4_Kp's operations on the same integers, so the same
 * bits (batch invariance, matmul.h). */
struct q4kx_c {
    __m512i m4, hi_nib, m63, sc_idx, mn_idx, sc0, sc1, mn;
    __m512i dd_idx;
};

/* A group super-block's scales (int16 lanes: s0 [sc0, sc0, sc1, sc1, sc2, sc2, sc3, sc3] and
 * s1 the same of 4..7 per row lane, mn [mn0 .. mn7]) and dd (float lanes 4r, 4r + 1: row r's
 * d, dmin). */
struct q4kx_sc {
    __m512i s0, s1, mn;
    __m512 dd;
};

static inline TARGET_GV __attribute__((always_inline)) void q4kx_consts(struct q4kx_c *c) {
#define W16(a, b, c, d)                                                                            \
    ((long long)(a) | (long long)(b) << 16 | (long long)(c) << 32 | (long long)(d) << 48)
#define LANES(q0, q1) q1, q0, q1, q0, q1, q0, q1, q0
    c->m4 = _mm512_set1_epi8(0x0F);
    c->hi_nib = _mm512_set1_epi64(GF_HI_NIBBLE);
    c->m63 = _mm512_set1_epi16(63);
    /* the multishift controls: the field of each int16 lane, from its row's qword */
    c->sc0 = _mm512_set_epi64(LANES(W16(0, 0, 6, 6), W16(12, 12, 18, 18)));
    c->sc1 = _mm512_set_epi64(LANES(W16(24, 24, 30, 30), W16(36, 36, 42, 42)));
    c->mn = _mm512_set_epi64(LANES(W16(0, 6, 12, 18), W16(24, 30, 36, 42)));
#undef LANES
#undef W16
    /* byte 16r + 8h + i of the streams' vector (Q4KX_SC on): stream byte 12r + i of the
     * scales' qword, 12r + 6 + i of the mins' (bits 48.. of row r's stream) */
    _Alignas(64) uint8_t si[64], mi[64];
    for (int b = 0; b < 64; b++) {
        si[b] = (uint8_t)(12 * (b / 16) + b % 8);
        mi[b] = (uint8_t)(si[b] + 6);
    }
    c->sc_idx = _mm512_load_si512(si);
    c->mn_idx = _mm512_load_si512(mi);
    c->dd_idx = _mm512_set_epi32(7, 6, 7, 6, 5, 4, 5, 4, 3, 2, 3, 2, 1, 0, 1, 0);
}

/* Chunk t of the group super-block at p: its low and high nibbles. */
static inline TARGET_GV __attribute__((always_inline)) void
q4kx_quants(const struct q4kx_c *c, const uint8_t *p, int t, __m512i *lo, __m512i *hi) {
    __m512i x = _mm512_loadu_si512(p + 64 * t);
    __asm__("" : "+v"(x)); /* one load (see q4kp_quants) */
    *lo = _mm512_and_si512(x, c->m4);
    *hi = _mm512_gf2p8affine_epi64_epi8(x, c->hi_nib, 0);
}

/* a + chunk t's products (lo, hi) with the decode vector's quants q. */
static inline __attribute__((always_inline)) __m512i q4kx_dot(__m512i a, __m512i lo, __m512i hi,
                                                              const int8_t *q, int t) {
    const int m = 8 * (t / 4) + t % 4;
    a = _mm512_dpbusd_epi32(
        a, lo, _mm512_broadcast_i32x4(_mm_load_si128((const __m128i *)(const void *)(q + 16 * m))));
    return _mm512_dpbusd_epi32(
        a, hi,
        _mm512_broadcast_i32x4(_mm_load_si128((const __m128i *)(const void *)(q + 16 * m + 64))));
}

static inline TARGET_GV __attribute__((always_inline)) void
q4kx_scales(const struct q4kx_c *c, const uint8_t *p, struct q4kx_sc *o) {
    const __m512i st = _mm512_loadu_si512(p + Q4KX_SC); /* the 4 streams, then the 4 d, dmin */
    const __m512i ss = _mm512_permutexvar_epi8(c->sc_idx, st);
    const __m512i sm = _mm512_permutexvar_epi8(c->mn_idx, st);
    o->s0 = _mm512_and_si512(_mm512_multishift_epi64_epi8(c->sc0, ss), c->m63);
    o->s1 = _mm512_and_si512(_mm512_multishift_epi64_epi8(c->sc1, ss), c->m63);
    o->mn = _mm512_and_si512(_mm512_multishift_epi64_epi8(c->mn, sm), c->m63);
    o->dd = _mm512_permutexvar_ps(c->dd_idx, _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128(
                                                 (const __m128i *)(const void *)(p + Q4KX_D)))));
}

/* From the sub-block pairs' sums a[4], the scales o and the activations' ns: lane 4r row r's
 * isum, lane 4r + 1 its -msum, as floats (exact integers). */
static inline TARGET_GV __attribute__((always_inline)) __m512
q4kx_fsum(const __m512i a[4], const struct q4kx_sc *o, const int32_t *ns) {
    const __m512i zero = _mm512_setzero_si512();
    const __m512i is =
        _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(zero, _mm512_packs_epi32(a[0], a[1]), o->s0),
                            _mm512_packs_epi32(a[2], a[3]), o->s1);
    const __m512i ns16 = _mm512_broadcast_i32x4(
        _mm256_cvtepi32_epi16(_mm256_loadu_si256((const __m256i *)(const void *)ns)));
    const __m512i ms = _mm512_dpwssd_epi32(zero, o->mn, ns16);
    const __m512i u =
        _mm512_add_epi32(_mm512_unpacklo_epi32(is, ms), _mm512_unpackhi_epi32(is, ms));
    return _mm512_cvtepi32_ps(_mm512_add_epi32(u, _mm512_shuffle_epi32(u, _MM_PERM_BADC)));
}

/* The 4 rows' float chains (lane 4r) over one super-block. */
static inline TARGET_GV __attribute__((always_inline)) __m512 q4kx_chain(__m512 acc, __m512 f,
                                                                         __m512 dd, float da) {
    const __m512 d = _mm512_mul_ps(dd, _mm512_set1_ps(da));
    acc = _mm512_fmadd_ps(d, f, acc);
    return _mm512_fmadd_ps(_mm512_movehdup_ps(d), _mm512_movehdup_ps(f), acc);
}

/* Lanes 0, 4, 8, 12 of acc: the 4 rows' results. */
static inline __attribute__((always_inline)) void q4kx_store(float *out, __m512 acc) {
    const __m512 o = _mm512_permutexvar_ps(
        _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0), acc);
    _mm_storeu_ps(out, _mm512_castps512_ps128(o));
}

/* The decode kernels over groups of 4 rows (attributes attr): vec_rows `name` and vec_rowsn
 * name##n. Per group super-block (SB bytes) at p: CONSTS(&c) sets the constants c (type C_T)
 * once per call; QUANTS(&c, p, t, &lo, &hi) gives chunk t's nibbles, dotted with the decode
 * vector into a[P] (q4kx_dot); SCALES(&c, p, &o) its scales (type SC_T); acc =
 * STEP(acc, a, &o, v, n, s) continues the 4 rows' sums in lanes 0, 4, 8, 12. The rows past
 * the last whole group (packed one by one) go through TAIL (a vec_rows) and TAIL_N(n, w,
 * row_bytes, n_rows, vec, out, NT). With NT vectors each super-block's nibbles and scales
 * serve all of them, and per vector the operations are the one-vector kernel's: the same
 * bits. */
#define DEFINE_X4_VEC(attr, name, SB, C_T, CONSTS, QUANTS, SC_T, SCALES, STEP, TAIL, TAIL_N)       \
    static inline attr __attribute__((always_inline)) void name##_group(                           \
        const C_T *c, int64_t n, const uint8_t *g, uint8_t *v, float *out) {                       \
        __m512 acc = _mm512_setzero_ps();                                                          \
        for (int64_t s = 0; s < n / 256; s++) {                                                    \
            const uint8_t *p = g + (size_t)s * (SB);                                               \
            pf_step(g, s, (SB), (int)((SB) / 64));                                                 \
            const int8_t *q = pl_mm_lay_qs(v, n, 1, s, 0, 0);                                      \
            __m512i a[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(),                        \
                            _mm512_setzero_si512(), _mm512_setzero_si512()};                       \
            for (int t = 0; t < 8; t++) {                                                          \
                __m512i lo, hi;                                                                    \
                QUANTS(c, p, t, &lo, &hi);                                                         \
                a[t % 4] = q4kx_dot(a[t % 4], lo, hi, q, t);                                       \
            }                                                                                      \
            SC_T o;                                                                                \
            SCALES(c, p, &o);                                                                      \
            acc = STEP(acc, a, &o, v, n, s);                                                       \
        }                                                                                          \
        q4kx_store(out, acc);                                                                      \
    }                                                                                              \
    static attr void name(int64_t n, const uint8_t *w, size_t row_bytes, uint32_t n_rows,          \
                          const uint8_t *vec, float *out) {                                        \
        C_T c;                                                                                     \
        CONSTS(&c);                                                                                \
        uint8_t *v = (uint8_t *)(uintptr_t)vec;                                                    \
        const uint32_t ng = n_rows / X4_ROWS;                                                      \
        for (uint32_t g = 0; g < ng; g++)                                                          \
            name##_group(&c, n, w + (size_t)g * X4_ROWS * row_bytes, v, out + X4_ROWS * g);        \
        if (n_rows % X4_ROWS)                                                                      \
            TAIL(n, w + (size_t)ng * X4_ROWS * row_bytes, row_bytes, n_rows % X4_ROWS, vec,        \
                 out + X4_ROWS * ng);                                                              \
    }                                                                                              \
    static inline attr __attribute__((always_inline)) void name##_n(                               \
        int64_t n, const uint8_t *w, size_t row_bytes, uint32_t n_rows, const uint8_t *const *vec, \
        float *const *out, const int NT) {                                                         \
        C_T c;                                                                                     \
        CONSTS(&c);                                                                                \
        uint8_t *v[PL_QUANT_DOTN_MAX];                                                             \
        float *o_tail[PL_QUANT_DOTN_MAX];                                                          \
        const uint32_t ng = n_rows / X4_ROWS;                                                      \
        for (int t = 0; t < NT; t++) {                                                             \
            v[t] = (uint8_t *)(uintptr_t)vec[t];                                                   \
            o_tail[t] = out[t] + X4_ROWS * ng;                                                     \
        }                                                                                          \
        for (uint32_t gi = 0; gi < ng; gi++) {                                                     \
            const uint8_t *g = w + (size_t)gi * X4_ROWS * row_bytes;                               \
            __m512 acc[PL_QUANT_DOTN_MAX];                                                         \
            for (int t = 0; t < NT; t++)                                                           \
                acc[t] = _mm512_setzero_ps();                                                      \
            for (int64_t s = 0; s < n / 256; s++) {                                                \
                const uint8_t *p = g + (size_t)s * (SB);                                           \
                pf_step(g, s, (SB), (int)((SB) / 64));                                             \
                __m512i lo[8], hi[8];                                                              \
                for (int k = 0; k < 8; k++)                                                        \
                    QUANTS(&c, p, k, &lo[k], &hi[k]);                                              \
                SC_T o;                                                                            \
                SCALES(&c, p, &o);                                                                 \
                for (int t = 0; t < NT; t++) {                                                     \
                    const int8_t *q = pl_mm_lay_qs(v[t], n, 1, s, 0, 0);                           \
                    __m512i a[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(),                \
                                    _mm512_setzero_si512(), _mm512_setzero_si512()};               \
                    for (int k = 0; k < 8; k++)                                                    \
                        a[k % 4] = q4kx_dot(a[k % 4], lo[k], hi[k], q, k);                         \
                    acc[t] = STEP(acc[t], a, &o, v[t], n, s);                                      \
                }                                                                                  \
            }                                                                                      \
            for (int t = 0; t < NT; t++)                                                           \
                q4kx_store(out[t] + X4_ROWS * gi, acc[t]);                                         \
        }                                                                                          \
        if (n_rows % X4_ROWS)                                                                      \
            TAIL_N(n, w + (size_t)ng * X4_ROWS * row_bytes, row_bytes, n_rows % X4_ROWS, vec,      \
                   o_tail, NT);                                                                    \
    }                                                                                              \
    DEFINE_NT_DISPATCH(attr, name##n, name##_n)

/* Q4_K's step: the 4 rows' integer sums of super-block s, then their float chains. */
static inline TARGET_GV __attribute__((always_inline)) __m512
q4kx_step(__m512 acc, const __m512i a[4], const struct q4kx_sc *o, uint8_t *v, int64_t n,
          int64_t s) {
    return q4kx_chain(acc, q4kx_fsum(a, o, pl_mm_lay_ns(v, n, 1, s, 0)), o->dd,
                      *pl_mm_lay_da(v, n, 1, s, 0));
}

#define q4kx_tail_n(n, w, row_bytes, n_rows, vec, out, NT)                                         \
    kp_n(n, w, row_bytes, n_rows, vec, out, NT, 0)
DEFINE_X4_VEC(TARGET_GV, vec_q4_Kx, Q4KX_SB, struct q4kx_c, q4kx_consts, q4kx_quants,
              struct q4kx_sc, q4kx_scales, q4kx_step, vec_q4_Kp, q4kx_tail_n)
#undef q4kx_tail_n

/* Tiles: row r of the group at g, super-block s, unpacked as unpack_q4_Kp unpacks a row. */
static inline __attribute__((always_inline)) void unpack_q4_Kx(const uint8_t *g, uint32_t r,
                                                               int64_t s, struct unpacked *u) {
    const uint8_t *p = g + (size_t)s * Q4KX_SB;
    x4_load_nibbles(p, r, u->w);
    const uint8_t *st = p + Q4KX_SC + 12 * r;
    u->scale = _mm512_castsi512_ps(_mm512_zextsi256_si512(fields6(load_u64(st))));
    u->mn = _mm512_zextps256_ps512(_mm256_cvtepi32_ps(fields6(load_u64(st + 6))));
    uint32_t dd;
    memcpy(&dd, p + Q4KX_D + 4 * r, sizeof(dd));
    const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128((int)dd));
    u->d = _mm_cvtss_f32(f);
    u->dmin = _mm_cvtss_f32(_mm_movehdup_ps(f));
}

/* DEFINE_ROWS_W unpacks row r by unpack(w + r x row_bytes, s, u); rows() is called on a
 * whole group (row_step == Q4KX_ROWS), so w is the group's start and r the row in it. */
_Static_assert(PL_MM_ROWS == Q4KX_ROWS, "rows() takes one group per call");
#define unpack_q4_Kx_row(row, s, u) unpack_q4_Kx(w, r, s, u)
DEFINE_ROWS(rows_q4_Kx4, unpack_q4_Kx_row, 8, 0, 0)
DEFINE_ROWS8(rows8_q4_Kx4, unpack_q4_Kx_row, 8, 0, 0)
#undef unpack_q4_Kx_row

/* rows() / rows8() of k_q4_Kx: a whole group through whole, rows past the last one (packed
 * one by one) through rest. */
#define DEFINE_GROUP_ROWS(name, whole, rest)                                                       \
    static void name(int64_t n, const uint8_t *w, size_t row_bytes, uint32_t n_rows,               \
                     const uint8_t *tiles, size_t tile_bytes, uint32_t n_tiles, float *out) {      \
        if (n_rows == Q4KX_ROWS)                                                                   \
            whole(n, w, row_bytes, n_rows, tiles, tile_bytes, n_tiles, out);                       \
        else                                                                                       \
            rest(n, w, row_bytes, n_rows, tiles, tile_bytes, n_tiles, out);                        \
    }
DEFINE_GROUP_ROWS(rows_q4_Kx, rows_q4_Kx4, rows_q4_Kp)
DEFINE_GROUP_ROWS(rows8_q4_Kx, rows8_q4_Kx4, rows8_q4_Kp)

/* ---- Q4_0 over groups of 4 rows (repack_q4_0's layout) ----
 * Per super-block of a group: the chunks' products as in vec_q4_Kx (a[P]: blocks 2P, 2P + 1
 * in lanes 0, 1 and 2, 3 of each row's 128-bit lane), the lane pairs added into blocks 0..3
 * and 4..7 of the 4 rows (lane 4r + k of two vectors) with the offset term (8 x ns), then
 * vec_q4_0p's float operations for each row in its lanes: m_j = isum_j x (da_j x dw_j),
 * s += ((m0 + m4) + (m2 + m6)) + ((m1 + m5) + (m3 + m7)); so the same bits. Shifts split the
 * nibbles: no GFNI needed, as for packed Q4_0. */

/* Chunk t of the group super-block at p: its low and high nibbles. */
static inline __attribute__((always_inline)) void x4_quants(const uint8_t *p, int t, __m512i *lo,
                                                            __m512i *hi) {
    __m512i x = _mm512_loadu_si512(p + 64 * t);
    __asm__("" : "+v"(x)); /* one load (see q4kp_quants) */
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    *lo = _mm512_and_si512(x, m4);
    *hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), m4);
}

/* Per row lane [block 4h, .., 4h + 3] from a0 = a[2h] and a1 = a[2h + 1] (lane pairs). */
static inline __attribute__((always_inline)) __m512i x4_blocks(__m512i a0, __m512i a1) {
    const __m512 f0 = _mm512_castsi512_ps(a0), f1 = _mm512_castsi512_ps(a1);
    return _mm512_add_epi32(
        _mm512_castps_si512(_mm512_shuffle_ps(f0, f1, _MM_SHUFFLE(2, 0, 2, 0))),
        _mm512_castps_si512(_mm512_shuffle_ps(f0, f1, _MM_SHUFFLE(3, 1, 3, 1))));
}

/* A group super-block's scales: lane 4r + k of lo (hi) is row r's block k (4 + k). */
struct q40x_sc {
    __m512 lo, hi;
};

/* No constants (DEFINE_X4_VEC's C_T). */
struct x4_none {
    char unused;
};
static inline __attribute__((always_inline)) void x4_none_set(struct x4_none *c) {
    c->unused = 0;
}

static inline __attribute__((always_inline)) void
q40x_quants(const struct x4_none *c, const uint8_t *p, int t, __m512i *lo, __m512i *hi) {
    (void)c;
    x4_quants(p, t, lo, hi);
}

/* The scales of the group super-block at p (see Q40X_SC). */
static inline __attribute__((always_inline)) void q40x_scales(const struct x4_none *c,
                                                              const uint8_t *p, struct q40x_sc *o) {
    (void)c;
    o->lo = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p + Q40X_SC)));
    o->hi = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p + Q40X_SC + 32)));
}

/* acc (lane 4r) plus row r's tree of super-block s, from a[4], the scales o and the decode
 * vector v. */
static inline __attribute__((always_inline)) __m512 q40x_step(__m512 acc, const __m512i a[4],
                                                              const struct q40x_sc *o, uint8_t *v,
                                                              int64_t n, int64_t s) {
    const int32_t *ns = pl_mm_lay_ns(v, n, 1, s, 0);
    const float *da = pl_mm_lay_da(v, n, 1, s, 0);
    const __m512i o_lo = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)ns));
    const __m512i o_hi =
        _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)(ns + 4)));
    const __m512i i_lo = _mm512_add_epi32(x4_blocks(a[0], a[1]), _mm512_slli_epi32(o_lo, 3));
    const __m512i i_hi = _mm512_add_epi32(x4_blocks(a[2], a[3]), _mm512_slli_epi32(o_hi, 3));
    const __m512 m_lo = _mm512_mul_ps(
        _mm512_cvtepi32_ps(i_lo), _mm512_mul_ps(_mm512_broadcast_f32x4(_mm_loadu_ps(da)), o->lo));
    const __m512 m_hi =
        _mm512_mul_ps(_mm512_cvtepi32_ps(i_hi),
                      _mm512_mul_ps(_mm512_broadcast_f32x4(_mm_loadu_ps(da + 4)), o->hi));
    const __m512 t = _mm512_add_ps(m_lo, m_hi);
    const __m512 u = _mm512_add_ps(t, _mm512_permute_ps(t, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm512_add_ps(acc, _mm512_add_ps(u, _mm512_movehdup_ps(u)));
}

#define q40x_tail_n(n, w, row_bytes, n_rows, vec, out, NT)                                         \
    vec_q4_0pn(n, w, row_bytes, n_rows, vec, (uint32_t)(NT), out)
DEFINE_X4_VEC(, vec_q4_0x, Q40X_SB, struct x4_none, x4_none_set, q40x_quants, struct q40x_sc,
              q40x_scales, q40x_step, vec_q4_0p, q40x_tail_n)
#undef q40x_tail_n

/* Tiles: row r of the group at g, super-block s, unpacked as unpack_q4_0p unpacks a row. */
static inline __attribute__((always_inline)) void unpack_q4_0x(const uint8_t *g, uint32_t r,
                                                               int64_t s, struct unpacked *u) {
    const uint8_t *p = g + (size_t)s * Q40X_SB;
    x4_load_nibbles(p, r, u->w);
    blocks_scale(_mm_unpacklo_epi64(
                     _mm_loadl_epi64((const __m128i *)(const void *)(p + Q40X_SC + 8 * r)),
                     _mm_loadl_epi64((const __m128i *)(const void *)(p + Q40X_SC + 32 + 8 * r))),
                 u);
}

/* as unpack_q4_Kx_row */
#define unpack_q4_0x_row(row, s, u) unpack_q4_0x(w, r, s, u)
DEFINE_ROWS(rows_q4_0x4, unpack_q4_0x_row, 8, 1, 3)
DEFINE_ROWS8(rows8_q4_0x4, unpack_q4_0x_row, 8, 1, 3)
#undef unpack_q4_0x_row
DEFINE_GROUP_ROWS(rows_q4_0x, rows_q4_0x4, rows_q4_0p)
DEFINE_GROUP_ROWS(rows8_q4_0x, rows8_q4_0x4, rows8_q4_0p)

/* ---- Q6_K decode from the packed layout (GFNI, VBMI) ----
 * The 6-bit quants come out of the three 64-byte planes by GF2P8AFFINEQB (a bit matrix per
 * byte: a nibble, or one 2-bit field of the high plane moved to bits 4-5) and one VPTERNLOGD
 * each; layout 16 puts sub-block j in lane j of every register, so four VPDPBUSDs give the
 * sub-blocks' sums, the offset -32 comes from ns (minus their activation sums), and one
 * multiply by the scales gives lanes that sum to isum. Batch invariance (matmul.h): per
 * super-block s = fma(da x d, isum, s), the tile kernels' operation. */
/* GF(2) matrices moving bits 2k, 2k + 1 of a byte to bits 4, 5 (the rest zero) */
#define GF_Q6H(k) ((0x01ll << (2 * (k))) << 24 | (0x02ll << (2 * (k))) << 16)

struct q6kp_w {
    __m512i w[4], sc;
};

/* The super-block whose three 64-byte planes are at p and 16 scales at sc. */
static inline TARGET_GV __attribute__((always_inline)) void
q6k_planes(const uint8_t *p, const uint8_t *sc, struct q6kp_w *u) {
    __m512i lo = _mm512_loadu_si512(p), hi = _mm512_loadu_si512(p + 64);
    __m512i h = _mm512_loadu_si512(p + 128);
    __asm__("" : "+v"(lo), "+v"(hi), "+v"(h)); /* one load each, as q4kp_load: L2 62 -> 64 GB/s */
    const __m512i m4 = _mm512_set1_epi8(0x0F), g_hi = _mm512_set1_epi64(GF_HI_NIBBLE);
    __m512i h2[4];
    for (int k = 0; k < 4; k++)
        h2[k] = _mm512_gf2p8affine_epi64_epi8(h, _mm512_set1_epi64(GF_Q6H(k)), 0);
    /* (low nibble & 15) | high bits in one VPTERNLOGD: (a & b) | c is 0xEA */
    u->w[0] = _mm512_ternarylogic_epi64(lo, m4, h2[0], 0xEA);
    u->w[1] = _mm512_ternarylogic_epi64(hi, m4, h2[1], 0xEA);
    u->w[2] = _mm512_or_si512(_mm512_gf2p8affine_epi64_epi8(lo, g_hi, 0), h2[2]);
    u->w[3] = _mm512_or_si512(_mm512_gf2p8affine_epi64_epi8(hi, g_hi, 0), h2[3]);
    u->sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)sc));
}

static inline TARGET_GV __attribute__((always_inline)) void q6kp_load(const uint8_t *p,
                                                                      struct q6kp_w *u) {
    q6k_planes(p, p + PL_Q6KP_SC, u);
}

/* Packed Q3_K, for the same kernels (q3 set below): its scales by one multishift. */
static inline TARGET_GV __attribute__((always_inline)) void q3kp_load(const uint8_t *p,
                                                                      struct q6kp_w *u) {
    q3kp_lanes(p, u->w);
    /* lanes 2q, 2q + 1 (bytes 0 and 4 of qword q): fields 2q mod 8 and 2q + 1 mod 8 of the
     * stream's bits 0..47 (q < 4: scales 0..7) or of its bits 48..95 (q >= 4: scales 8..15) */
    const __m512i ctl =
        _mm512_set_epi64(42ll << 32 | 36, 30ll << 32 | 24, 18ll << 32 | 12, 6ll << 32 | 0,
                         42ll << 32 | 36, 30ll << 32 | 24, 18ll << 32 | 12, 6ll << 32 | 0);
    const __m512i x =
        _mm512_inserti64x4(_mm512_set1_epi64((long long)load_u64(p + Q3KP_SC)),
                           _mm256_set1_epi64x((long long)load_u64(p + Q3KP_SC + 6)), 1);
    u->sc = _mm512_sub_epi32(
        _mm512_and_si512(_mm512_maskz_multishift_epi64_epi8(0x1111111111111111ull, ctl, x),
                         _mm512_set1_epi32(63)),
        _mm512_set1_epi32(32));
}

/* Q6_K (q3 = 0) or Q3_K (q3 = 1, a constant after inlining): super-block bytes, d's offset,
 * and the weights' offset (32 or 4) as a shift. */
#define K6_SB(q3) ((q3) ? sizeof(struct pl_block_q3_K) : sizeof(struct pl_block_q6_K))
#define K6_D(q3) ((q3) ? Q3KP_D : PL_Q6KP_D)
#define K6_OFF(q3) ((q3) ? 2 : 5)

/* The 16 lanes that sum to isum, of a loaded super-block and the decode vector's (q, ns). */
static inline TARGET_GV __attribute__((always_inline)) __m512i
q6kp_dot(const struct q6kp_w *u, const int8_t *q, const int32_t *ns, int q3) {
    __m512i pa = _mm512_dpbusd_epi32(_mm512_slli_epi32(_mm512_loadu_si512(ns), K6_OFF(q3)), u->w[0],
                                     _mm512_load_si512(q));
    __m512i pb = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u->w[2], _mm512_load_si512(q + 128));
    pa = _mm512_dpbusd_epi32(pa, u->w[1], _mm512_load_si512(q + 64));
    pb = _mm512_dpbusd_epi32(pb, u->w[3], _mm512_load_si512(q + 192));
    return _mm512_mullo_epi32(_mm512_add_epi32(pa, pb), u->sc);
}

/* Four super-blocks' lanes: their totals in lanes 0..3. */
static inline TARGET_GV __attribute__((always_inline)) __m512i
q6kp_reduce4(__m512i z0, __m512i z1, __m512i z2, __m512i z3) {
    const __m512i c = q4kp_reduce4(z0, z1, z2, z3); /* chunks 0 + 1 and 2 + 3 */
    return _mm512_add_epi32(c, _mm512_shuffle_i32x4(c, c, _MM_SHUFFLE(1, 0, 3, 2)));
}

/* Super-block s of packed row w: its lanes, and da x d into *dd. */
static inline TARGET_GV __attribute__((always_inline)) __m512i
q6kp_sb(const uint8_t *w, uint8_t *v, int64_t n, int64_t s, float *dd, int q3) {
    const uint8_t *p = w + (size_t)s * K6_SB(q3);
    uint16_t d;
    memcpy(&d, p + K6_D(q3), sizeof(d));
    *dd = h2f(d) * *pl_mm_lay_da(v, n, 1, s, 0);
    struct q6kp_w u;
    if (q3)
        q3kp_load(p, &u);
    else
        q6kp_load(p, &u);
    return q6kp_dot(&u, pl_mm_lay_qs(v, n, 1, s, 0, 0), pl_mm_lay_ns(v, n, 1, s, 0), q3);
}

/* What the float chain needs of a group of up to 4 super-blocks: lane i of x the isum of
 * super-block i, dd[i] its da x d. */
struct k6_sums {
    __m128 x;
    float dd[4];
};

/* Super-blocks [s0, s0 + k) (k <= 4) of packed row w into g. */
static inline TARGET_GV __attribute__((always_inline)) void k6_group(const uint8_t *w, uint8_t *v,
                                                                     int64_t n, int64_t s0,
                                                                     int64_t k, struct k6_sums *g,
                                                                     int q3) {
    const size_t sb = K6_SB(q3);
    const int lines = (int)((sb + 63) / 64);
    const __m512i zero = _mm512_setzero_si512();
    __m512i z0, z1, z2, z3;
    if (k == 4) {
        /* a step per super-block (ceil(210 / 64) = 4 lines, see pf_step), not one of 14
         * lines per 4: on the Zen 5 VM, `picolm-bench decode`, rows of 2048, median of 4 (2
         * threads: 3) alternating runs, memory / read loop 0.69 -> 0.87 (2 threads 0.76 ->
         * 0.93), L2-sized matrix 64 -> 71 GB/s. The same for Q4_K's groups measured worse
         * there (0.92 -> 0.87). */
        pf_step(w, s0, sb, lines);
        z0 = q6kp_sb(w, v, n, s0, &g->dd[0], q3);
        pf_step(w, s0 + 1, sb, lines);
        z1 = q6kp_sb(w, v, n, s0 + 1, &g->dd[1], q3);
        pf_step(w, s0 + 2, sb, lines);
        z2 = q6kp_sb(w, v, n, s0 + 2, &g->dd[2], q3);
        pf_step(w, s0 + 3, sb, lines);
        z3 = q6kp_sb(w, v, n, s0 + 3, &g->dd[3], q3);
    } else {
        pf_sbs(w, s0, k, sb);
        g->dd[1] = g->dd[2] = g->dd[3] = 0.0f; /* past k: never read */
        z0 = q6kp_sb(w, v, n, s0, &g->dd[0], q3);
        z1 = k > 1 ? q6kp_sb(w, v, n, s0 + 1, &g->dd[1], q3) : zero;
        z2 = k > 2 ? q6kp_sb(w, v, n, s0 + 2, &g->dd[2], q3) : zero;
        z3 = k > 3 ? q6kp_sb(w, v, n, s0 + 3, &g->dd[3], q3) : zero;
    }
    g->x = _mm512_castps512_ps128(_mm512_cvtepi32_ps(q6kp_reduce4(z0, z1, z2, z3)));
}

/* The float chain of a group g of k super-blocks, continuing sum. */
static inline __attribute__((always_inline)) float k6_chain(float sum, const struct k6_sums *g,
                                                            int64_t k) {
    for (int i = 0; i < 4; i++)
        if (i < k)
            sum = fmaf(g->dd[i], lane4(g->x, i), sum);
    return sum;
}

/* Software-pipelined (PIPELINED_ROWS), as kp_vec: each group's chain is the reduction, the
 * conversion and up to 4 dependent FMAs. Zen 5 VM, `picolm-bench decode`, 1 thread, 3
 * alternating runs: L2-sized matrix Q3_K 31.6 -> 33.7 GB/s, Q6_K 69.8-70.2 -> 71.0-71.7. */
static inline TARGET_GV __attribute__((always_inline)) void
k6_vec(int64_t n, const uint8_t *w, size_t row_bytes, uint32_t n_rows, const uint8_t *vec,
       float *out, int q3) {
    PIPELINED_ROWS(struct k6_sums, k6_group, k6_chain, q3, {.x = _mm_setzero_ps()});
}

static TARGET_GV void vec_q6_Kp(int64_t n, const uint8_t *w, size_t row_bytes, uint32_t n_rows,
                                const uint8_t *vec, float *out) {
    k6_vec(n, w, row_bytes, n_rows, vec, out, 0);
}

static TARGET_GV void vec_q3_Kp(int64_t n, const uint8_t *w, size_t row_bytes, uint32_t n_rows,
                                const uint8_t *vec, float *out) {
    k6_vec(n, w, row_bytes, n_rows, vec, out, 1);
}

/* NT decode vectors: each super-block loaded once for all; per vector vec_q6_Kp's
 * operations (bit-identical results). */
static inline TARGET_GV __attribute__((always_inline)) void
k6_n(int64_t n, const uint8_t *w, size_t row_bytes, uint32_t n_rows, const uint8_t *const *vec,
     float *const *out, const int NT, int q3) {
    const int64_t n_sb = n / 256;
    const size_t sb = K6_SB(q3);
    uint8_t *v[PL_QUANT_DOTN_MAX];
    for (int t = 0; t < NT; t++)
        v[t] = (uint8_t *)(uintptr_t)vec[t];
    for (uint32_t r = 0; r < n_rows; r++) {
        const uint8_t *row = w + (size_t)r * row_bytes;
        float sum[PL_QUANT_DOTN_MAX];
        for (int t = 0; t < NT; t++)
            sum[t] = 0.0f;
        for (int64_t s0 = 0; s0 < n_sb; s0 += 4) {
            const int64_t k = n_sb - s0 < 4 ? n_sb - s0 : 4;
            _Alignas(64) __m512i z[PL_QUANT_DOTN_MAX][4];
            float d[4] = {0.0f};
            pf_sbs(row, s0, k, sb);
            for (int64_t i = 0; i < 4; i++) {
                if (i >= k) {
                    for (int t = 0; t < NT; t++)
                        z[t][i] = _mm512_setzero_si512();
                    continue;
                }
                const uint8_t *p = row + (size_t)(s0 + i) * sb;
                uint16_t dh;
                memcpy(&dh, p + K6_D(q3), sizeof(dh));
                d[i] = h2f(dh);
                struct q6kp_w u;
                if (q3)
                    q3kp_load(p, &u);
                else
                    q6kp_load(p, &u);
                for (int t = 0; t < NT; t++)
                    z[t][i] = q6kp_dot(&u, pl_mm_lay_qs(v[t], n, 1, s0 + i, 0, 0),
                                       pl_mm_lay_ns(v[t], n, 1, s0 + i, 0), q3);
            }
            for (int t = 0; t < NT; t++) {
                const __m128 x = _mm512_castps512_ps128(
                    _mm512_cvtepi32_ps(q6kp_reduce4(z[t][0], z[t][1], z[t][2], z[t][3])));
                for (int i = 0; i < 4; i++)
                    if (i < k)
                        sum[t] =
                            fmaf(d[i] * *pl_mm_lay_da(v[t], n, 1, s0 + i, 0), lane4(x, i), sum[t]);
            }
        }
        for (int t = 0; t < NT; t++)
            out[t][r] = sum[t];
    }
}

#define q6kp_n(n, w, row_bytes, n_rows, vec, out, NT) k6_n(n, w, row_bytes, n_rows, vec, out, NT, 0)
#define q3kp_n(n, w, row_bytes, n_rows, vec, out, NT) k6_n(n, w, row_bytes, n_rows, vec, out, NT, 1)
DEFINE_NT_DISPATCH(TARGET_GV, vec_q6_Kpn, q6kp_n)
DEFINE_NT_DISPATCH(TARGET_GV, vec_q3_Kpn, q3kp_n)
#undef q6kp_n
#undef q3kp_n

DEFINE_ROWS(rows_q6_Kp, unpack_q6_Kp, 16, 0, 5)
DEFINE_ROWS8(rows8_q6_Kp, unpack_q6_Kp, 16, 0, 5)
DEFINE_ROWS(rows_q3_Kp, unpack_q3_Kp, 16, 0, 2)
DEFINE_ROWS8(rows8_q3_Kp, unpack_q3_Kp, 16, 0, 2)

/* ---- Q6_K over groups of 4 rows (repack_q6_Kx's layout) ----
 * Decode: per super-block the chunk's 4 rows through vec_q6_Kp's integer operations (one
 * q6kp_dot each), their isums in lanes 0..3 by one reduction, and the 4 rows' float chains
 * in those lanes: s = fma(da x d, isum, s) per super-block, vec_q6_Kp's operations on the
 * same values in the same order, so the same bits (batch invariance, matmul.h). One forward
 * stream: the head's d, the chunks in order, the rest of d right after them. */

/* The 4 rows' isums of the super-block whose chunk is at c, with the decode vector v's. */
static inline TARGET_GV __attribute__((always_inline)) __m128
q6kx_isums(const uint8_t *c, uint8_t *v, int64_t n, int64_t s) {
    const int8_t *q = pl_mm_lay_qs(v, n, 1, s, 0, 0);
    const int32_t *ns = pl_mm_lay_ns(v, n, 1, s, 0);
    __m512i z[X4_ROWS];
    for (uint32_t r = 0; r < X4_ROWS; r++) {
        struct q6kp_w u;
        q6k_planes(c + 192 * r, c + 192 * X4_ROWS + 16 * r, &u);
        z[r] = q6kp_dot(&u, q, ns, 0);
    }
    return _mm512_castps512_ps128(_mm512_cvtepi32_ps(q6kp_reduce4(z[0], z[1], z[2], z[3])));
}

/* The 4 rows' d of super-block s as floats. */
static inline __attribute__((always_inline)) __m128 q6kx_dvec(const uint8_t *g, size_t h,
                                                              int64_t n_sb, int64_t s) {
    return _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)(const void *)q6kx_d(g, h, n_sb, s)));
}

static inline TARGET_GV __attribute__((always_inline)) void q6kx_group(int64_t n, const uint8_t *g,
                                                                       uint8_t *v, float *out) {
    const int64_t n_sb = n / 256;
    const size_t h = q6kx_head(g, n_sb);
    const uint8_t *c0 = g + h;
    __m128 acc = _mm_setzero_ps();
    for (int64_t s = 0; s < n_sb; s++) {
        pf_step(c0, s, Q6KX_CHUNK, (int)(Q6KX_CHUNK / 64));
        const __m128 x = q6kx_isums(c0 + (size_t)Q6KX_CHUNK * (size_t)s, v, n, s);
        const __m128 dd =
            _mm_mul_ps(q6kx_dvec(g, h, n_sb, s), _mm_set1_ps(*pl_mm_lay_da(v, n, 1, s, 0)));
        acc = _mm_fmadd_ps(dd, x, acc);
    }
    _mm_storeu_ps(out, acc);
}

static TARGET_GV void vec_q6_Kx(int64_t n, const uint8_t *w, size_t row_bytes, uint32_t n_rows,
                                const uint8_t *vec, float *out) {
    uint8_t *v = (uint8_t *)(uintptr_t)vec;
    const uint32_t ng = n_rows / X4_ROWS;
    for (uint32_t g = 0; g < ng; g++)
        q6kx_group(n, w + (size_t)g * X4_ROWS * row_bytes, v, out + X4_ROWS * g);
    if (n_rows % X4_ROWS)
        vec_q6_Kp(n, w + (size_t)ng * X4_ROWS * row_bytes, row_bytes, n_rows % X4_ROWS, vec,
                  out + X4_ROWS * ng);
}

/* NT decode vectors: each chunk loaded once for all; per vector vec_q6_Kx's operations. */
static inline TARGET_GV __attribute__((always_inline)) void
q6kx_n(int64_t n, const uint8_t *w, size_t row_bytes, uint32_t n_rows, const uint8_t *const *vec,
       float *const *out, const int NT) {
    const int64_t n_sb = n / 256;
    const uint32_t ng = n_rows / X4_ROWS;
    uint8_t *v[PL_QUANT_DOTN_MAX];
    float *o_tail[PL_QUANT_DOTN_MAX];
    for (int t = 0; t < NT; t++) {
        v[t] = (uint8_t *)(uintptr_t)vec[t];
        o_tail[t] = out[t] + X4_ROWS * ng;
    }
    for (uint32_t gi = 0; gi < ng; gi++) {
        const uint8_t *g = w + (size_t)gi * X4_ROWS * row_bytes;
        const size_t h = q6kx_head(g, n_sb);
        const uint8_t *c0 = g + h;
        __m128 acc[PL_QUANT_DOTN_MAX];
        for (int t = 0; t < NT; t++)
            acc[t] = _mm_setzero_ps();
        for (int64_t s = 0; s < n_sb; s++) {
            pf_step(c0, s, Q6KX_CHUNK, (int)(Q6KX_CHUNK / 64));
            const uint8_t *c = c0 + (size_t)Q6KX_CHUNK * (size_t)s;
            struct q6kp_w u[X4_ROWS];
            for (uint32_t r = 0; r < X4_ROWS; r++)
                q6k_planes(c + 192 * r, c + 192 * X4_ROWS + 16 * r, &u[r]);
            const __m128 d = q6kx_dvec(g, h, n_sb, s);
            for (int t = 0; t < NT; t++) {
                const int8_t *q = pl_mm_lay_qs(v[t], n, 1, s, 0, 0);
                const int32_t *ns = pl_mm_lay_ns(v[t], n, 1, s, 0);
                const __m128 x = _mm512_castps512_ps128(_mm512_cvtepi32_ps(
                    q6kp_reduce4(q6kp_dot(&u[0], q, ns, 0), q6kp_dot(&u[1], q, ns, 0),
                                 q6kp_dot(&u[2], q, ns, 0), q6kp_dot(&u[3], q, ns, 0))));
                const __m128 dd = _mm_mul_ps(d, _mm_set1_ps(*pl_mm_lay_da(v[t], n, 1, s, 0)));
                acc[t] = _mm_fmadd_ps(dd, x, acc[t]);
            }
        }
        for (int t = 0; t < NT; t++)
            _mm_storeu_ps(out[t] + X4_ROWS * gi, acc[t]);
    }
    if (n_rows % X4_ROWS)
        k6_n(n, w + (size_t)ng * X4_ROWS * row_bytes, row_bytes, n_rows % X4_ROWS, vec, o_tail, NT,
             0);
}
DEFINE_NT_DISPATCH(TARGET_GV, vec_q6_Kxn, q6kx_n)

/* Tiles: row r of the group at g, super-block s, unpacked as unpack_q6_Kp unpacks a row. */
static inline __attribute__((always_inline)) void
unpack_q6_Kx(const uint8_t *g, int64_t n, uint32_t r, int64_t s, struct unpacked *u) {
    const int64_t n_sb = n / 256;
    const size_t h = q6kx_head(g, n_sb);
    const uint8_t *c = g + h + (size_t)Q6KX_CHUNK * (size_t)s;
    pl_q6kp_lanes(c + 192 * r, u->w);
    uint16_t d;
    memcpy(&d, q6kx_d(g, h, n_sb, s) + 2 * r, sizeof(d));
    u->d = h2f(d);
    u->dmin = 0.0f;
    u->scale = _mm512_castsi512_ps(_mm512_cvtepi8_epi32(
        _mm_loadu_si128((const __m128i *)(const void *)(c + 192 * X4_ROWS + 16 * r))));
    u->mn = _mm512_setzero_ps();
}

/* As rows_q4_Kx4: w is the group's start and r the row in it (a whole group per call). */
#define unpack_q6_Kx_row(row, s, u) unpack_q6_Kx(w, n, r, s, u)
DEFINE_ROWS(rows_q6_Kx4, unpack_q6_Kx_row, 16, 0, 5)
DEFINE_ROWS8(rows8_q6_Kx4, unpack_q6_Kx_row, 16, 0, 5)
#undef unpack_q6_Kx_row
DEFINE_GROUP_ROWS(rows_q6_Kx, rows_q6_Kx4, rows_q6_Kp)
DEFINE_GROUP_ROWS(rows8_q6_Kx, rows8_q6_Kx4, rows8_q6_Kp)

/* A K-quant's kernels: k_T, tiles over the GGUF layout with decode through quant_avx512.c's
 * per-row dot product (for Q4_K faster than a decode vector kernel on the GGUF layout); with
 * GFNI and VBMI, k_T_gv, whose weights are repacked at load (repack_T) into the layout of
 * packed_k: k_Tp (decoded by vec_Tp / vec_Tpn), for Q4_K k_q4_Kx (groups of 4 rows). */
#define DEFINE_KQ_KERNELS(T, layout, prep, packed_k)                                               \
    static const struct pl_mm_tile_kernel k_##T = {PL_GGML_TYPE_Q8_K,                              \
                                                   layout,                                         \
                                                   prep,                                           \
                                                   rows_##T,                                       \
                                                   NULL,                                           \
                                                   rows8_##T,                                      \
                                                   PL_MM_ROWS,                                     \
                                                   NULL,                                           \
                                                   NULL,                                           \
                                                   0,                                              \
                                                   NULL,                                           \
                                                   NULL,                                           \
                                                   0};                                             \
    static const struct pl_mm_tile_kernel k_##T##_gv = {                                           \
        PL_GGML_TYPE_Q8_K, layout,     prep, rows_##T, NULL, rows8_##T, PL_MM_ROWS, NULL, NULL, 0, \
        &packed_k,         repack_##T, 0};
#define DEFINE_KQ_PACKED(T, layout, prep)                                                          \
    static const struct pl_mm_tile_kernel k_##T##p = {                                             \
        PL_GGML_TYPE_Q8_K, layout, prep, rows_##T##p, vec_##T##p, rows8_##T##p, PL_MM_ROWS, NULL,  \
        vec_##T##pn,       0,      NULL, NULL,        0};
DEFINE_KQ_PACKED(q3_K, 16, prep_q8_K_16)
DEFINE_KQ_PACKED(q5_K, 32, prep_q8_K_32)
DEFINE_KQ_PACKED(q6_K, 16, prep_q8_K_16)
/* Q4_K packed in groups of 4 rows (repack_q4_K: rows past the last group as k_q4_Kp's). */
static const struct pl_mm_tile_kernel k_q4_Kx = {
    PL_GGML_TYPE_Q8_K, 32, prep_q8_K_32, rows_q4_Kx, vec_q4_Kx, rows8_q4_Kx, PL_MM_ROWS, NULL,
    vec_q4_Kxn,        0,  NULL,         NULL,       Q4KX_ROWS};
DEFINE_KQ_KERNELS(q3_K, 16, prep_q8_K_16, k_q3_Kp)
DEFINE_KQ_KERNELS(q4_K, 32, prep_q8_K_32, k_q4_Kx)
DEFINE_KQ_KERNELS(q5_K, 32, prep_q8_K_32, k_q5_Kp)
DEFINE_KQ_KERNELS(q6_K, 16, prep_q8_K_16, k_q6_Kp)
/* Q6_K packed in groups of 4 rows (repack_q6_Kx: rows past the last group as k_q6_Kp's). */
static const struct pl_mm_tile_kernel k_q6_Kx = {
    PL_GGML_TYPE_Q8_K, 16, prep_q8_K_16, rows_q6_Kx, vec_q6_Kx, rows8_q6_Kx, PL_MM_ROWS, NULL,
    vec_q6_Kxn,        0,  NULL,         NULL,       X4_ROWS};
static const struct pl_mm_tile_kernel k_q6_K_gx = {PL_GGML_TYPE_Q8_K,
                                                   16,
                                                   prep_q8_K_16,
                                                   rows_q6_K,
                                                   NULL,
                                                   rows8_q6_K,
                                                   PL_MM_ROWS,
                                                   NULL,
                                                   NULL,
                                                   0,
                                                   &k_q6_Kx,
                                                   repack_q6_Kx,
                                                   0};
static const struct pl_mm_tile_kernel k_q8_0p = {
    PL_GGML_TYPE_Q8_0, 32, prep_q8_0_32, rows_q8_0p, vec_q8_0p, rows8_q8_0p, PL_MM_ROWS, NULL,
    vec_q8_0pn,        0,  NULL,         NULL,       0};
/* Q4_0 packed in groups of 4 rows (repack_q4_0: rows past the last group packed one by one,
 * through vec_q4_0p, rows_q4_0p). */
static const struct pl_mm_tile_kernel k_q4_0x = {
    PL_GGML_TYPE_Q8_0, 32, prep_q8_0_32, rows_q4_0x, vec_q4_0x, rows8_q4_0x, PL_MM_ROWS, NULL,
    vec_q4_0xn,        0,  NULL,         NULL,       X4_ROWS};
static const struct pl_mm_tile_kernel k_q4_0 = {
    PL_GGML_TYPE_Q8_0, 32, prep_q8_0_32, rows_q4_0,   vec_q4_0, rows8_q4_0, PL_MM_ROWS, NULL,
    vec_q4_0n,         0,  &k_q4_0x,     repack_q4_0, 0};
/* Q4_0 packed one row at a time (where the groups are not measured yet: x4_here). */
static const struct pl_mm_tile_kernel k_q4_0p = {
    PL_GGML_TYPE_Q8_0, 32, prep_q8_0_32, rows_q4_0p, vec_q4_0p, rows8_q4_0p, PL_MM_ROWS, NULL,
    vec_q4_0pn,        0,  NULL,         NULL,       0};
DEFINE_REPACK_ROWS(repack_q4_0_rows, repack_q4_0_row)
static const struct pl_mm_tile_kernel k_q4_0_rows = {
    PL_GGML_TYPE_Q8_0, 32, prep_q8_0_32, rows_q4_0,        vec_q4_0, rows8_q4_0, PL_MM_ROWS, NULL,
    vec_q4_0n,         0,  &k_q4_0p,     repack_q4_0_rows, 0};
static const struct pl_mm_tile_kernel k_q8_0 = {
    PL_GGML_TYPE_Q8_0, 32, prep_q8_0_32, rows_q8_0,   vec_q8_0, rows8_q8_0, PL_MM_ROWS, NULL,
    vec_q8_0n,         0,  &k_q8_0p,     repack_q8_0, 0};

/* GFNI and VBMI (Ice Lake, Sapphire Rapids, Zen 4 on): optional beside AVX-512 VNNI. */
static bool have_gv(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("gfni") && __builtin_cpu_supports("avx512vbmi");
}

/* The groups of 4 rows (Q4_K: repacked at all; Q4_0, and Q6_K with rows up to Q6KX_N_MAX:
 * grouped rather than packed one row at a time), pl_mm_repack_mode: by default on Zen, where
 * they were measured; "all" asks for them, "rows" (the default elsewhere) not. On an Intel Xeon
 * core (the AMX VM with PICOLM_ISA=avx512, TinyLlama-shape Q4_K_M, 2 alternating rounds) the
 * per-row vec_dot_q4_K_gv over the GGUF layout decoded 6-8% faster than vec_q4_Kp over the rows
 * repacked one by one (1 thread 22.2-22.5 -> 23.9-24.2 tok/s, 2 threads 44.3-44.4 -> 46.3-47.0),
 * for 1-2% of prefill (AVX-512 tiles over the GGUF layout: 2 threads 237-238 -> 232-236 tok/s);
 * and there a one-token decode reads two weight streams per core (4-5%), which a grouped layout
 * cannot. The groups are not measured on Intel yet. */
static bool x4_here(void) {
    const enum pl_mm_repack m = pl_mm_repack_mode();
    return m == PL_MM_REPACK_ALL || (m == PL_MM_REPACK_AUTO && pl_quant_x86_zen());
}

/* Q6_K's groups of 4 rows only up to rows of this many elements. A group's pass reads the
 * decode vector's bytes for every super-block once, and between two uses of the same vector
 * line the group's 840 bytes per super-block go through L1 besides the vector's own: with
 * longer rows the vector no longer stays in L1. Zen 4 VM, `picolm-bench decode`, memory /
 * read loop, groups against rows packed one by one (3-4 alternating runs each): rows of 2048
 * 0.86-0.99 against 0.84-0.87, 2304 and 3072 0.89-1.00 against 0.75-0.84, 4096 0.83-0.92
 * against 0.94-0.99, 5632 0.59-0.73 against 0.79-0.95 (a scratch kernel that read the vector's
 * first 8 super-blocks over and over instead: 0.83-0.90). */
#define Q6KX_N_MAX 3072

const struct pl_mm_tile_kernel *pl_mm_avx512_kernel(uint32_t type, int64_t n) {
    switch (type) {
    case PL_GGML_TYPE_Q4_K:
        return have_gv() && x4_here() ? &k_q4_K_gv : &k_q4_K;
    case PL_GGML_TYPE_Q3_K:
        return have_gv() ? &k_q3_K_gv : &k_q3_K;
    case PL_GGML_TYPE_Q5_K:
        return have_gv() ? &k_q5_K_gv : &k_q5_K;
    case PL_GGML_TYPE_Q6_K:
        if (!have_gv())
            return &k_q6_K;
        return x4_here() && n <= Q6KX_N_MAX ? &k_q6_K_gx : &k_q6_K_gv;
    case PL_GGML_TYPE_Q4_0:
        return x4_here() ? &k_q4_0 : &k_q4_0_rows;
    case PL_GGML_TYPE_Q8_0:
        return &k_q8_0;
    default:
        return NULL;
    }
}

/* silu(x) = x / (1 + exp(-x)) from e = exp(-|x|) <= 1, which cannot overflow: x / (1 + e)
 * for x >= 0, as the reference; (x * e) / (1 + e) for x < 0 (where the reference's exp(-x)
 * overflows below -88 and its quotient is -0, this is the tiny true value). NaN stays NaN
 * (it fails x < 0 and passes through the quotient). */
void pl_mm_swiglu_avx512(float *out, const float *g, const float *u, size_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m512 x = _mm512_maskz_loadu_ps(m, g + i);
        const __m512 e =
            pl_vexp_nonpos(_mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(x), sign)));
        const __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
        const __m512 num = _mm512_mask_mul_ps(x, neg, x, e);
        const __m512 r = _mm512_div_ps(num, _mm512_add_ps(one, e));
        _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(r, _mm512_maskz_loadu_ps(m, u + i)));
    }
}

/* The scalar reference's operations lane by lane: part k is lane k, the tail's missing lanes
 * add +0.0 (a no-op on sums of squares, which start at +0.0), and the same additions combine
 * the lanes in the same order. */
void pl_mm_rmsnorm_avx512(float *restrict y, const float *restrict x, const float *restrict w,
                          uint32_t n, float eps) {
    __m512d part = _mm512_setzero_pd();
    for (uint32_t i = 0; i < n; i += 8) {
        const __mmask8 m = n - i >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << (n - i)) - 1);
        const __m256 v = _mm256_maskz_loadu_ps(m, x + i);
        part = _mm512_add_pd(part, _mm512_cvtps_pd(_mm256_mul_ps(v, v)));
    }
    /* (p0 + p4, p1 + p5, p2 + p6, p3 + p7), then ((p0 + p4) + (p2 + p6), (p1 + p5) + (p3 + p7)) */
    const __m256d a = _mm256_add_pd(_mm512_castpd512_pd256(part), _mm512_extractf64x4_pd(part, 1));
    const __m128d b = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
    const double sum = _mm_cvtsd_f64(b) + _mm_cvtsd_f64(_mm_unpackhi_pd(b, b));
    const float mean = (float)(sum / n);
    const __m512 scale = _mm512_set1_ps(1.0f / sqrtf(mean + eps));
    for (uint32_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), scale);
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + i)));
    }
}
