/* SPDX-License-Identifier: MIT */
/* AVX-512 kernels (compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mfma -mf16c;
 * installed by quant_x86.c over the AVX2 set, only on CPUs and kernels with AVX-512 state
 * enabled): 512-bit vec_dot for every compute type, with VNNI (vpdpbusd,
 * vpdpwssd) for the integer sums. Integer sums are exact for every input byte, as in the
 * AVX2 set; the K-quants reduce them per super-block and then follow the reference's float
 * expression, the others differ from it only in the order of float additions. The
 * activation quantizers stay those of the AVX2 set: they are not on the weight path. */
#include "quant_x86.h"

#include <assert.h>
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "quant_blocks.h"
#include "quant_dotn.h"

/* ---- Helpers ---- */

static inline float h2f(uint16_t h) {
    return _cvtsh_ss(h);
}

static inline __m128i load128(const void *p) {
    return _mm_loadu_si128((const __m128i *)p);
}

static inline __m256i load256(const void *p) {
    return _mm256_loadu_si256((const __m256i *)p);
}

static inline __m512i load512(const void *p) {
    return _mm512_loadu_si512(p);
}

/* One 32-byte run in both halves (one load, no shuffle). */
static inline __m512i bcast256(const void *p) {
    return _mm512_broadcast_i64x4(load256(p));
}

static inline uint32_t load_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

/* Per-half shift counts for the variable 16-bit shifts: c0 in words 0..15, c1 in 16..31. */
static inline __m512i counts2(int c0, int c1) {
    return _mm512_inserti64x4(_mm512_set1_epi16((short)c0), _mm256_set1_epi16((short)c1), 1);
}

/* Software prefetch of the weight stream: decode reads every weight once, and a kernel
 * that spends a few cycles per cache line does not keep enough misses in flight on its own
 * for the hardware prefetchers to reach the bus limit. pl_quant_x86_pf.bytes ahead, with its
 * hint (quant_x86.c: a Zen 5 core reading 45 GB/s needs ~4 KB in flight, NTA; an Intel core
 * reading 16-18 GB/s is fastest at 2 KB with T0). `lines` 64-byte lines from there. */
static inline __attribute__((always_inline)) void pf(const void *p, int lines) {
    pl_x86_pf_lines((const char *)p + pl_quant_x86_pf.bytes, lines);
}

/* ---- F32, F16, BF16 ---- */

static float vec_dot_f32(int64_t n, const void *restrict w, const void *restrict x) {
    const float *a = w, *b = x;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    __m512 acc2 = _mm512_setzero_ps(), acc3 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
        acc2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32), acc2);
        acc3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48), acc3);
    }
    for (; i + 16 <= n; i += 16)
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    if (i < n) { /* masked tail: lanes past n read nothing and add zero */
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        acc1 =
            _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc1);
    }
    return _mm512_reduce_add_ps(
        _mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
}

static inline __m512 f16x16(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
}

static float vec_dot_f16(int64_t n, const void *restrict w, const void *restrict x) {
    const uint16_t *a = w, *b = x;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    __m512 acc2 = _mm512_setzero_ps(), acc3 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        acc0 = _mm512_fmadd_ps(f16x16(a + i), f16x16(b + i), acc0);
        acc1 = _mm512_fmadd_ps(f16x16(a + i + 16), f16x16(b + i + 16), acc1);
        acc2 = _mm512_fmadd_ps(f16x16(a + i + 32), f16x16(b + i + 32), acc2);
        acc3 = _mm512_fmadd_ps(f16x16(a + i + 48), f16x16(b + i + 48), acc3);
    }
    for (; i + 16 <= n; i += 16)
        acc0 = _mm512_fmadd_ps(f16x16(a + i), f16x16(b + i), acc0);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m512 va = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, a + i));
        __m512 vb = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, b + i));
        acc1 = _mm512_fmadd_ps(va, vb, acc1);
    }
    return _mm512_reduce_add_ps(
        _mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
}

/* BF16 widened by a shift, products by FMA: exact products as the reference's (the
 * AVX512_BF16 vdpbf16ps would flush subnormal inputs and products to zero). */
static inline __m512 bf16x16(const uint16_t *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(load256(p)), 16));
}

static float vec_dot_bf16(int64_t n, const void *restrict w, const void *restrict x) {
    const uint16_t *a = w, *b = x;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    __m512 acc2 = _mm512_setzero_ps(), acc3 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        acc0 = _mm512_fmadd_ps(bf16x16(a + i), bf16x16(b + i), acc0);
        acc1 = _mm512_fmadd_ps(bf16x16(a + i + 16), bf16x16(b + i + 16), acc1);
        acc2 = _mm512_fmadd_ps(bf16x16(a + i + 32), bf16x16(b + i + 32), acc2);
        acc3 = _mm512_fmadd_ps(bf16x16(a + i + 48), bf16x16(b + i + 48), acc3);
    }
    for (; i + 16 <= n; i += 16)
        acc0 = _mm512_fmadd_ps(bf16x16(a + i), bf16x16(b + i), acc0);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m512 va = _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, a + i)), 16));
        __m512 vb = _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, b + i)), 16));
        acc1 = _mm512_fmadd_ps(va, vb, acc1);
    }
    return _mm512_reduce_add_ps(
        _mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
}

/* ---- Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: groups of 8 blocks with vector block scales ----
 * Per block (256-bit): the 32 quants in element order from one broadcast load, one or two
 * VNNI sums against the activation block, then one int32->float conversion and one FMA
 * whose scale operand is an embedded broadcast from a small stack array: no shuffle per
 * block. The block scales (and Q4_1/Q5_1 minimums, Q8_1 sums) of 8 blocks are picked
 * out of the raw block bytes by VPERMT2W and converted together, so the per-block scalar
 * fp16 conversions and products (which saturate the shuffle port) are gone. Four float
 * accumulators keep the FMA latency off the critical path. Integer sums are exact for
 * every input byte; only the order of float additions differs from the reference. */

/* Word index, for VPERMT2W over 128 bytes starting `base` bytes into the group, of the
 * fp16 at byte offset off of block k (block stride S); only the low 6 bits matter (lanes
 * the blend does not take may hold any value). */
#define WIX(S, off, base, k) ((int16_t)((((k) * (S) + (off) - (base)) / 2) & 63))
#define WIX8(S, off, base)                                                                         \
    WIX(S, off, base, 0), WIX(S, off, base, 1), WIX(S, off, base, 2), WIX(S, off, base, 3),        \
        WIX(S, off, base, 4), WIX(S, off, base, 5), WIX(S, off, base, 6), WIX(S, off, base, 7)
/* Second window: 128 bytes from byte 128 of the group, or its last 128 bytes when the
 * group is shorter than 256 (8 S > 128 whenever a field lies past byte 128): no load
 * leaves the group, and every field past byte 128 lies inside. */
#define WBASE2(S) (-128 + 8 * (S) < 128 ? -128 + 8 * (S) : 128)
/* Bit k set (k < 8: field off0, k >= 8: field off1) when that fp16 lies past byte 128. */
#define WHI(S, off, k) (((k) * (S) + (off) + 2 > 128) ? 1u << (k) : 0u)
#define WHI8(S, off, sh)                                                                           \
    ((WHI(S, off, 0) | WHI(S, off, 1) | WHI(S, off, 2) | WHI(S, off, 3) | WHI(S, off, 4) |         \
      WHI(S, off, 5) | WHI(S, off, 6) | WHI(S, off, 7))                                            \
     << (sh))

/* A gather of two fp16 fields of 8 blocks of stride S: word tables for both windows and
 * the blend mask (lanes from the second window). */
struct f16x2_gather {
    int16_t lo[16], hi[16]; /* the upper 16 result words are not used */
    uint32_t mask;
    int stride;
};
#define F16X2_GATHER(S, off0, off1)                                                                \
    {                                                                                              \
        {WIX8(S, off0, 0), WIX8(S, off1, 0)},                                                      \
            {WIX8(S, off0, WBASE2(S)), WIX8(S, off1, WBASE2(S))},                                  \
            WHI8(S, off0, 0) | WHI8(S, off1, 8), S                                                 \
    }

/* Q4_0 (18 bytes: d), Q4_1 (20: d, m), Q5_0 (22: d), Q5_1 (24: d, m), Q8_0 (34: d),
 * Q8_1 (36: d, s). Single-field types repeat the field. */
static const struct f16x2_gather g_q4_0 __attribute__((aligned(64))) = F16X2_GATHER(18, 0, 0);
static const struct f16x2_gather g_q4_1 __attribute__((aligned(64))) = F16X2_GATHER(20, 0, 2);
static const struct f16x2_gather g_q5_0 __attribute__((aligned(64))) = F16X2_GATHER(22, 0, 0);
static const struct f16x2_gather g_q5_1 __attribute__((aligned(64))) = F16X2_GATHER(24, 0, 2);
static const struct f16x2_gather g_q8_0 __attribute__((aligned(64))) = F16X2_GATHER(34, 0, 0);
static const struct f16x2_gather g_q8_1 __attribute__((aligned(64))) = F16X2_GATHER(36, 0, 2);

/* The two fields of the 8 blocks at p as 16 floats (lanes 0..7: off0, 8..15: off1). */
static inline __m512 f16x2_gather8(const uint8_t *p, const struct f16x2_gather *g) {
    __m512i t = _mm512_permutex2var_epi16(load512(p), _mm512_castsi256_si512(load256(g->lo)),
                                          load512(p + 64));
    if (g->mask) {
        const uint8_t *q = p + WBASE2(g->stride);
        __m512i u = _mm512_permutex2var_epi16(load512(q), _mm512_castsi256_si512(load256(g->hi)),
                                              load512(q + 64));
        t = _mm512_mask_blend_epi16((__mmask32)g->mask, t, u);
    }
    return _mm512_cvtph_ps(_mm512_castsi512_si256(t));
}

/* w . y over one 32-byte block, w and y signed: (w + 128) . y - 128 . y (exact). */
static inline __m256i dot32_s8s8(__m256i w, __m256i y) {
    const __m256i bias = _mm256_set1_epi8((char)0x80);
    __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_xor_si256(w, bias), y);
    return _mm256_sub_epi32(p, _mm256_dpbusd_epi32(_mm256_setzero_si256(), bias, y));
}

/* The 32 quants of a nibble-packed block in element order, from one broadcast 16-byte
 * load: low nibbles in the lower half, high nibbles (masked shift) in the upper. */
static inline __m256i nibbles32(const uint8_t *qs) {
    __m256i q = _mm256_broadcastsi128_si256(load128(qs));
    q = _mm256_mask_srli_epi16(q, (__mmask16)0xFF00, q, 4);
    return _mm256_and_si256(q, _mm256_set1_epi8(0x0F));
}

enum b32_kind { B32_Q4_0, B32_Q4_1, B32_Q5_0, B32_Q5_1, B32_Q8_0 };

/* Integer dot product of one weight block (at w) with one activation block's quants (y),
 * per int32 lane (8 lanes). Offset types subtract their offset times sum(y) (exact);
 * Q4_1/Q5_1 return the unsigned u . y, their minimum goes through the Q8_1 sum. */
static inline __attribute__((always_inline)) __m256i b32_dot(enum b32_kind k, const uint8_t *w,
                                                             const int8_t *y8) {
    __m256i y = load256(y8), u;
    switch (k) {
    case B32_Q4_0:
        u = nibbles32(w + 2);
        return _mm256_sub_epi32(
            _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, y),
            _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(8), y));
    case B32_Q4_1:
        return _mm256_dpbusd_epi32(_mm256_setzero_si256(), nibbles32(w + 4), y);
    case B32_Q5_0:
        u = _mm256_or_si256(nibbles32(w + 6), _mm256_maskz_mov_epi8((__mmask32)load_u32(w + 2),
                                                                    _mm256_set1_epi8(0x10)));
        return _mm256_sub_epi32(
            _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, y),
            _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(16), y));
    case B32_Q5_1:
        u = _mm256_or_si256(nibbles32(w + 8), _mm256_maskz_mov_epi8((__mmask32)load_u32(w + 4),
                                                                    _mm256_set1_epi8(0x10)));
        return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, y);
    case B32_Q8_0:
    default:
        return dot32_s8s8(load256(w + 2), y);
    }
}

/* b32_dot of two consecutive blocks (at w and w + ws; activations at y0, y1), lanes 0..7 the
 * first's, 8..15 the second's (Q4_1, Q5_0, Q5_1: the types without tiles, whose vec_dot is
 * free to take blocks in pairs). The nibbles come from two broadcast loads and one insert;
 * one masked shift and one mask make both blocks' quants. */
static inline __attribute__((always_inline)) __m512i
b32_dot2(enum b32_kind k, const uint8_t *w, int ws, const int8_t *y0, const int8_t *y1) {
    const int qs = k == B32_Q4_1 ? 4 : k == B32_Q5_0 ? 6 : 8; /* quants' offset in a block */
    const __m512i y = _mm512_inserti64x4(_mm512_castsi256_si512(load256(y0)), load256(y1), 1);
    __m512i q =
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(load128(w + qs))),
                           _mm256_broadcastsi128_si256(load128(w + ws + qs)), 1);
    q = _mm512_mask_srli_epi16(q, (__mmask32)0xFF00FF00u, q, 4);
    __m512i u = _mm512_and_si512(q, _mm512_set1_epi8(0x0F));
    if (k != B32_Q4_1) { /* the fifth bits: qh of each block, a 32-bit mask */
        const int qh = k == B32_Q5_0 ? 2 : 4;
        const uint64_t m = (uint64_t)load_u32(w + qh) | (uint64_t)load_u32(w + ws + qh) << 32;
        u = _mm512_or_si512(u, _mm512_maskz_mov_epi8((__mmask64)m, _mm512_set1_epi8(0x10)));
    }
    const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, y);
    if (k != B32_Q5_0)
        return p;
    return _mm512_sub_epi32(p,
                            _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(16), y));
}

static inline float hsum256(__m256 v) {
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    return _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)));
}

/* sum over nb blocks of d_w d_x (w . y) (+ m_w s_x for Q4_1/Q5_1). ws/xs: block sizes of
 * the weight and activation types; gw/gx their scale gathers. */
static inline __attribute__((always_inline)) float
b32_vec_dot(enum b32_kind k, int64_t n, const uint8_t *w, const uint8_t *x, int ws, int xs,
            const struct f16x2_gather *gw, const struct f16x2_gather *gx) {
    const bool has_min = k == B32_Q4_1 || k == B32_Q5_1;
    float s8[8] __attribute__((aligned(32)));
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    __m256 macc = _mm256_setzero_ps();
    /* Q4_0 / Q8_0 keep one block per register: their bits are those of the kernels before
     * (the tiles' types; the pairs' float order differs) */
    const bool pairs = k == B32_Q4_1 || k == B32_Q5_0 || k == B32_Q5_1;
    __m512 acc2[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    int64_t nb = n / 32, i = 0;
    assert(n % 32 == 0);
    for (; i + 8 <= nb; i += 8) {
        const uint8_t *wg = w + i * ws, *xg = x + i * xs;
        /* the group spans 8 * ws bytes: prefetch its lines */
        pf(wg, (8 * ws + 63) / 64);
        __m512 dw = f16x2_gather8(wg, gw), dx = f16x2_gather8(xg, gx);
        __m512 s = _mm512_mul_ps(dw, dx);
        _mm256_store_ps(s8, _mm512_castps512_ps256(s));
        if (has_min) /* m_w (lanes 8..15 of dw) times s_x (lanes 8..15 of dx) */
            macc = _mm256_add_ps(macc,
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
        if (pairs) {
            /* block pair (2j, 2j + 1) in one register, its two scale products spread over
             * the pair's halves by one permute of s */
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                const int8_t *y = (const int8_t *)(xg + 2 * j * xs + (has_min ? 4 : 2));
                const __m512i p = b32_dot2(k, wg + 2 * j * ws, ws, y, y + xs);
                const __m512 sc = _mm512_permutexvar_ps(
                    _mm512_set_epi32(2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1,
                                     2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j, 2 * j, 2 * j, 2 * j,
                                     2 * j, 2 * j, 2 * j, 2 * j),
                    s);
                acc2[j & 1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), sc, acc2[j & 1]);
            }
            continue;
        }
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            __m256i p = b32_dot(k, wg + j * ws, (const int8_t *)(xg + j * xs + (has_min ? 4 : 2)));
            acc[j & 3] =
                _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_broadcast_ss(&s8[j]), acc[j & 3]);
        }
    }
    if (pairs) { /* the pairs' accumulators: first blocks' lanes, second blocks' lanes */
        const __m512 a2 = _mm512_add_ps(acc2[0], acc2[1]);
        acc[0] = _mm512_castps512_ps256(a2);
        acc[1] = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a2), 1));
    }
    float sum =
        hsum256(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    float summ = hsum256(macc);
    for (; i < nb; i++) { /* the last < 8 blocks, one at a time with scalar scales */
        const uint8_t *wb = w + i * ws, *xb = x + i * xs;
        uint16_t dwh, dxh;
        memcpy(&dwh, wb, 2);
        memcpy(&dxh, xb, 2);
        __m256i p = b32_dot(k, wb, (const int8_t *)(xb + (has_min ? 4 : 2)));
        sum += h2f(dwh) * h2f(dxh) * hsum256(_mm256_cvtepi32_ps(p));
        if (has_min) {
            uint16_t mh, sh;
            memcpy(&mh, wb + 2, 2);
            memcpy(&sh, xb + 2, 2);
            summ += h2f(mh) * h2f(sh);
        }
    }
    return sum + summ;
}

static float vec_dot_q4_0(int64_t n, const void *restrict w, const void *restrict x) {
    return b32_vec_dot(B32_Q4_0, n, w, x, sizeof(struct pl_block_q4_0),
                       sizeof(struct pl_block_q8_0), &g_q4_0, &g_q8_0);
}

static float vec_dot_q4_1(int64_t n, const void *restrict w, const void *restrict x) {
    return b32_vec_dot(B32_Q4_1, n, w, x, sizeof(struct pl_block_q4_1),
                       sizeof(struct pl_block_q8_1), &g_q4_1, &g_q8_1);
}

static float vec_dot_q5_0(int64_t n, const void *restrict w, const void *restrict x) {
    return b32_vec_dot(B32_Q5_0, n, w, x, sizeof(struct pl_block_q5_0),
                       sizeof(struct pl_block_q8_0), &g_q5_0, &g_q8_0);
}

static float vec_dot_q5_1(int64_t n, const void *restrict w, const void *restrict x) {
    return b32_vec_dot(B32_Q5_1, n, w, x, sizeof(struct pl_block_q5_1),
                       sizeof(struct pl_block_q8_1), &g_q5_1, &g_q8_1);
}

static float vec_dot_q8_0(int64_t n, const void *restrict w, const void *restrict x) {
    return b32_vec_dot(B32_Q8_0, n, w, x, sizeof(struct pl_block_q8_0),
                       sizeof(struct pl_block_q8_0), &g_q8_0, &g_q8_0);
}

/* ---- K-quants: 64 elements per register ---- */

/* acc += sum over int16 pairs of (u . y pairs) * scale: maddubs is exact for u <= 127. */
static inline __m512i dot_scaled(__m512i acc, __m512i u, __m512i y, __m512i sc) {
    return _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(u, y), sc);
}

/* Word w of chunk k's scale vector, for 16-element sub-blocks (Q2_K/Q3_K/Q6_K: a
 * 64-element chunk spans 4 of them): scale 4k + w / 8. A constant table: building it per
 * call costs more than a short row's work. */
#define W8(j) j, j, j, j, j, j, j, j
static const int16_t perm_span8[4][32] __attribute__((aligned(64))) = {
    {W8(0), W8(1), W8(2), W8(3)},
    {W8(4), W8(5), W8(6), W8(7)},
    {W8(8), W8(9), W8(10), W8(11)},
    {W8(12), W8(13), W8(14), W8(15)},
};

struct perm16 {
    __m512i idx[4];
};

/* span 8: perm_span8; span 16 (Q4_K/Q5_K sub-blocks of 32): q4k_perm below. */
static inline struct perm16 perm16_load(const int16_t (*t)[32]) {
    struct perm16 p;
    for (int k = 0; k < 4; k++)
        p.idx[k] = _mm512_load_si512(t[k]);
    return p;
}

/* The 8 scales (words 0..7) and mins (words 8..15) of a Q4_K/Q5_K block as int16, from
 * its 12 packed bytes (see pl_q4k_scale_min), in vector registers throughout. */
static inline __m256i q4k_scales16(const uint8_t *s) {
    __m128i v = _mm_setr_epi32((int)load_u32(s), (int)load_u32(s + 4), (int)load_u32(s + 8), 0);
    __m128i a = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0)); /* w0 w2 w1 w2 */
    __m128i b = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0)); /* w0 w0 w1 w1 */
    const __m128i lo_mask = _mm_setr_epi32(0x3F3F3F3F, 0x0F0F0F0F, 0x3F3F3F3F, 0x0F0F0F0F);
    const __m128i hi_mask = _mm_setr_epi32(0, 0x30303030, 0, 0x30303030);
    /* scales 0-3: w0 & 63; 4-7: (w2 & 15) | (w0 >> 6) << 4; mins 0-3: w1 & 63;
     * 4-7: (w2 >> 4 & 15) | (w1 >> 6) << 4 */
    __m128i lo = _mm_and_si128(_mm_srlv_epi32(a, _mm_setr_epi32(0, 0, 0, 4)), lo_mask);
    __m128i hi = _mm_and_si128(_mm_srli_epi32(b, 2), hi_mask);
    return _mm256_cvtepu8_epi16(_mm_or_si128(lo, hi));
}

/* Word w of group g's scale vector is scale 2g + w / 16. */
static const int16_t q4k_perm[4][32] __attribute__((aligned(64))) = {
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
     1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
    {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
     3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
     5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5},
    {6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6,
     7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7},
};

/* Quants of group g of a Q4_K block: [low nibbles | high nibbles] of its 32 bytes, i.e.
 * elements 64g .. 64g+63 in order (masked shift: words 16..31 only). */
static inline __m512i q4k_group(const uint8_t *qs) {
    __m512i q = bcast256(qs);
    q = _mm512_mask_srli_epi16(q, (__mmask32)0xFFFF0000u, q, 4);
    return _mm512_and_si512(q, _mm512_set1_epi8(0x0F));
}

/* The batch-invariant float step of a K-quant super-block (matmul.h): s0 = d x da,
 * s1 = dmin x da; fi, fm the exact integer sums as floats. The tile kernels do the same two
 * fused operations per token, in the same order. */
static inline float kq_step(float sum, float s0, float s1, float fi, float fm) {
    sum = fmaf(s0, fi, sum);
    return fmaf(-s1, fm, sum);
}

/* [d, dmin] of a Q4_K or Q5_K block (dd: its first 4 bytes, d then dmin as fp16) times the
 * activation scale da. */
static inline __m128 kq_dd(const void *dd, float da) {
    return _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int)load_u32(dd))), _mm_set1_ps(da));
}

/* The totals of acc's 16 lanes and of pm's 8, reduced side by side in one register. */
static inline void hsum2_epi32(__m512i acc, __m256i pm, int32_t *ret_a, int32_t *ret_m) {
    __m512i z =
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_add_epi32(
                               _mm512_castsi512_si256(acc), _mm512_extracti64x4_epi64(acc, 1))),
                           pm, 1);
    z = _mm512_add_epi32(z, _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(2, 3, 0, 1)));
    z = _mm512_add_epi32(z, _mm512_shuffle_epi32(z, _MM_PERM_BADC));
    z = _mm512_add_epi32(z, _mm512_shuffle_epi32(z, _MM_PERM_CDAB));
    *ret_a = _mm_cvtsi128_si32(_mm512_castsi512_si128(z));
    *ret_m = _mm_cvtsi128_si32(_mm512_extracti32x4_epi32(z, 2));
}

/* The integer totals of four super-blocks at once, as floats: f[k] = sum of acc[k]'s 16
 * lanes, f[4 + k] = sum of pm[k]'s 8 lanes (one reduction tree for all eight: a quarter of
 * the shuffles of one reduction per super-block). */
static inline void reduce4_kq(const __m512i acc[4], const __m256i pm[4], float f[8]) {
    const __m512i a01 = _mm512_add_epi32(_mm512_shuffle_i64x2(acc[0], acc[1], 0x44),
                                         _mm512_shuffle_i64x2(acc[0], acc[1], 0xEE));
    const __m512i a23 = _mm512_add_epi32(_mm512_shuffle_i64x2(acc[2], acc[3], 0x44),
                                         _mm512_shuffle_i64x2(acc[2], acc[3], 0xEE));
    __m512i ta = _mm512_add_epi32(_mm512_shuffle_i64x2(a01, a23, 0x88),
                                  _mm512_shuffle_i64x2(a01, a23, 0xDD));
    const __m512i p01 = _mm512_inserti64x4(_mm512_castsi256_si512(pm[0]), pm[1], 1);
    const __m512i p23 = _mm512_inserti64x4(_mm512_castsi256_si512(pm[2]), pm[3], 1);
    __m512i tp = _mm512_add_epi32(_mm512_shuffle_i64x2(p01, p23, 0x88),
                                  _mm512_shuffle_i64x2(p01, p23, 0xDD));
    /* 128-bit chunk k of ta (tp): super-block k's 4 partial sums */
    ta = _mm512_add_epi32(ta, _mm512_shuffle_epi32(ta, _MM_PERM_BADC));
    ta = _mm512_add_epi32(ta, _mm512_shuffle_epi32(ta, _MM_PERM_CDAB));
    tp = _mm512_add_epi32(tp, _mm512_shuffle_epi32(tp, _MM_PERM_BADC));
    tp = _mm512_add_epi32(tp, _mm512_shuffle_epi32(tp, _MM_PERM_CDAB));
    const __m512i idx = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 28, 24, 20, 16, 12, 8, 4, 0);
    _mm256_storeu_ps(
        f, _mm512_castps512_ps256(_mm512_cvtepi32_ps(_mm512_permutex2var_epi32(ta, idx, tp))));
}

/* The super-block loop of the Q4_K row kernels: SB(i, acc, pm, dd) computes super-block
 * i's sums (acc: scales x quants . activations in 16 lanes, pm: mins x activation sums in 8)
 * and dd = kq_dd(); groups of four share one reduction tree, the rest go one at a time;
 * each takes kq_step in order. Uses a, nb and sum of the kernel. */
#define Q4K_ROW_LOOP(SB)                                                                           \
    do {                                                                                           \
        int64_t i = 0;                                                                             \
        for (; i + 4 <= nb; i += 4) {                                                              \
            __m512i acc[4];                                                                        \
            __m256i pm[4];                                                                         \
            float sc[8], f[8];                                                                     \
            for (int k = 0; k < 4; k++) {                                                          \
                __m128 dd;                                                                         \
                SB(i + k, acc[k], pm[k], dd);                                                      \
                _mm_storel_pi((__m64 *)(void *)(sc + 2 * k), dd);                                  \
            }                                                                                      \
            reduce4_kq(acc, pm, f);                                                                \
            for (int k = 0; k < 4; k++)                                                            \
                sum = kq_step(sum, sc[2 * k], sc[2 * k + 1], f[k], f[4 + k]);                      \
        }                                                                                          \
        for (; i < nb; i++) {                                                                      \
            __m512i acc;                                                                           \
            __m256i pm;                                                                            \
            __m128 dd;                                                                             \
            int32_t isum, msum;                                                                    \
            SB(i, acc, pm, dd);                                                                    \
            hsum2_epi32(acc, pm, &isum, &msum);                                                    \
            sum = kq_step(sum, _mm_cvtss_f32(dd), _mm_cvtss_f32(_mm_movehdup_ps(dd)), (float)isum, \
                          (float)msum);                                                            \
        }                                                                                          \
    } while (0)

/* Q4_K: the integer sums of a super-block (scales x quants . activations, and mins x
 * activation sums) are exact; they become floats in the batch-invariant order of the tile
 * kernels (kq_step, matmul.h), so a token's result does not depend on its batch. */
static float vec_dot_q4_K(int64_t n, const void *restrict w, const void *restrict x) {
    const struct pl_block_q4_K *a = w;
    const struct pl_block_q8_K *b = x;
    const int64_t nb = n / PL_QK_K;
    float sum = 0.0f;
    assert(n % PL_QK_K == 0);
    /* one super-block for Q4K_ROW_LOOP (pm: 4 lanes, zero-extended) */
#define Q4K_SB(i, ret_acc, ret_pm, ret_dd)                                                         \
    do {                                                                                           \
        pf(&a[i], 3);                                                                              \
        __m256i sm = q4k_scales16(a[i].scales);                                                    \
        __m512i sc16 = _mm512_castsi256_si512(sm);                                                 \
        /* mins times the 32-element activation sums: bsums pairs by hadd */                       \
        __m128i bs = _mm_hadd_epi16(load128(b[i].bsums), load128(b[i].bsums + 8));                 \
        (ret_pm) = _mm256_zextsi128_si256(_mm_madd_epi16(bs, _mm256_extracti128_si256(sm, 1)));    \
        /* two independent chains: the groups' multiply-adds overlap */                            \
        __m512i acc0 = _mm512_setzero_si512(), acc1 = _mm512_setzero_si512();                      \
        for (int g = 0; g < 4; g += 2) {                                                           \
            __m512i sc0 = _mm512_permutexvar_epi16(_mm512_load_si512(q4k_perm[g]), sc16);          \
            __m512i sc1 = _mm512_permutexvar_epi16(_mm512_load_si512(q4k_perm[g + 1]), sc16);      \
            acc0 = dot_scaled(acc0, q4k_group(a[i].qs + 32 * g), load512(b[i].qs + 64 * g), sc0);  \
            acc1 = dot_scaled(acc1, q4k_group(a[i].qs + 32 * g + 32),                              \
                              load512(b[i].qs + 64 * g + 64), sc1);                                \
        }                                                                                          \
        (ret_acc) = _mm512_add_epi32(acc0, acc1);                                                  \
        (ret_dd) = kq_dd(&a[i], b[i].d);                                                           \
    } while (0)
    Q4K_ROW_LOOP(Q4K_SB);
#undef Q4K_SB
    return sum;
}

/* ---- Q4_K with GFNI and VBMI (Ice Lake, Sapphire Rapids, Zen 4) ----
 * The AVX-512 F/BW kernel above is bound by port 5 (shuffles) on Intel cores: ~22 p5 uops
 * per 144-byte block. Here the nibbles come out of one GF2P8AFFINEQB per 64 quants (a
 * per-qword bit matrix: low nibbles in the lower half, high nibbles in the upper), the
 * 6-bit scales are unpacked from broadcast loads without any shuffle, and each group's
 * int16 scale vector is one zero-masked VPERMB of the unpacked bytes. */

#define TARGET_GV __attribute__((target("gfni,avx512vbmi")))

/* Bytes 0..15 of the result: [sc0-3, m0-3, sc4-7, m4-7] (see pl_q4k_scale_min), from
 * w0 w1 (one 64-bit broadcast) and w2 (one 32-bit broadcast) of the 12 packed bytes:
 * sc0-3 = w0 & 63, m0-3 = w1 & 63, sc4-7 = (w2 & 15) | (w0 >> 6) << 4,
 * m4-7 = (w2 >> 4 & 15) | (w1 >> 6) << 4. */
static inline TARGET_GV __m128i q4k_scales_bytes(const uint8_t *s) {
    uint64_t w01;
    memcpy(&w01, s, sizeof(w01));
    __m128i x = _mm_set1_epi64x((long long)w01);      /* w0 w1 w0 w1 */
    __m128i z = _mm_set1_epi32((int)load_u32(s + 8)); /* w2 w2 w2 w2 */
    __m128i lo = _mm_and_si128(_mm_srlv_epi32(x, _mm_setr_epi32(0, 0, 2, 2)),
                               _mm_setr_epi32(0x3F3F3F3F, 0x3F3F3F3F, 0x30303030, 0x30303030));
    __m128i hi = _mm_and_si128(_mm_srlv_epi32(z, _mm_setr_epi32(0, 0, 0, 4)),
                               _mm_setr_epi32(0, 0, 0x0F0F0F0F, 0x0F0F0F0F));
    return _mm_or_si128(lo, hi);
}

/* Byte position of scale j and min j in q4k_scales_bytes()'s result. */
#define Q4K_SC_POS(j) ((j) < 4 ? (j) : 4 + (j))
#define Q4K_M_POS(j) ((j) < 4 ? 4 + (j) : 8 + (j))

/* VPERMB indices (constant tables: building them per call would cost more than a short
 * row): group g's int16 scale vector (words 0..15: scale 2g, 16..31: scale 2g+1; the odd
 * bytes are zeroed by the mask), and the 8 mins each twice as int16 (16 words). */
#define SC16(j) Q4K_SC_POS(j), Q4K_SC_POS(j), Q4K_SC_POS(j), Q4K_SC_POS(j)
#define SC64(j, k)                                                                                 \
    SC16(j), SC16(j), SC16(j), SC16(j), SC16(j), SC16(j), SC16(j), SC16(j), SC16(k), SC16(k),      \
        SC16(k), SC16(k), SC16(k), SC16(k), SC16(k), SC16(k)
static const uint8_t q4k_gv_sc_idx[4][64]
    __attribute__((aligned(64))) = {{SC64(0, 1)}, {SC64(2, 3)}, {SC64(4, 5)}, {SC64(6, 7)}};
#define M4(j) Q4K_M_POS(j), Q4K_M_POS(j), Q4K_M_POS(j), Q4K_M_POS(j)
static const uint8_t q4k_gv_m_idx[32]
    __attribute__((aligned(32))) = {M4(0), M4(1), M4(2), M4(3), M4(4), M4(5), M4(6), M4(7)};

/* GF(2) affine matrices (row for result bit i in byte 7 - i): identity on the low
 * nibble, and high nibble moved down; applied per qword. */
#define GF_LO_NIBBLE 0x0102040800000000ll
#define GF_HI_NIBBLE 0x1020408000000000ll

/* The constants of the GFNI/VBMI Q4_K kernels (single- and multi-token), as locals. */
#define Q4K_GV_CONSTS                                                                              \
    const __m512i sci0 = _mm512_load_si512(q4k_gv_sc_idx[0]);                                      \
    const __m512i sci1 = _mm512_load_si512(q4k_gv_sc_idx[1]);                                      \
    const __m512i sci2 = _mm512_load_si512(q4k_gv_sc_idx[2]);                                      \
    const __m512i sci3 = _mm512_load_si512(q4k_gv_sc_idx[3]);                                      \
    const __m256i mi = _mm256_load_si256((const __m256i *)q4k_gv_m_idx);                           \
    const __m512i nib =                                                                            \
        _mm512_inserti64x4(_mm512_set1_epi64(GF_LO_NIBBLE), _mm256_set1_epi64x(GF_HI_NIBBLE), 1);  \
    const __mmask64 even = 0x5555555555555555ull

/* One super-block for Q4K_ROW_LOOP (uses a and b of the kernels below). */
#define Q4K_GV_SB(i, ret_acc, ret_pm, ret_dd)                                                      \
    do {                                                                                           \
        pf(&a[i], 3);                                                                              \
        __m512i v = _mm512_castsi128_si512(q4k_scales_bytes(a[i].scales));                         \
        const uint8_t *q = a[i].qs;                                                                \
        const int8_t *y = b[i].qs;                                                                 \
        /* two independent chains of multiply-adds */                                              \
        __m512i acc0 = _mm512_dpwssd_epi32(                                                        \
            _mm512_setzero_si512(),                                                                \
            _mm512_maddubs_epi16(_mm512_gf2p8affine_epi64_epi8(bcast256(q), nib, 0), load512(y)),  \
            _mm512_maskz_permutexvar_epi8(even, sci0, v));                                         \
        __m512i acc1 = _mm512_dpwssd_epi32(                                                        \
            _mm512_setzero_si512(),                                                                \
            _mm512_maddubs_epi16(_mm512_gf2p8affine_epi64_epi8(bcast256(q + 32), nib, 0),          \
                                 load512(y + 64)),                                                 \
            _mm512_maskz_permutexvar_epi8(even, sci1, v));                                         \
        acc0 = _mm512_dpwssd_epi32(                                                                \
            acc0,                                                                                  \
            _mm512_maddubs_epi16(_mm512_gf2p8affine_epi64_epi8(bcast256(q + 64), nib, 0),          \
                                 load512(y + 128)),                                                \
            _mm512_maskz_permutexvar_epi8(even, sci2, v));                                         \
        acc1 = _mm512_dpwssd_epi32(                                                                \
            acc1,                                                                                  \
            _mm512_maddubs_epi16(_mm512_gf2p8affine_epi64_epi8(bcast256(q + 96), nib, 0),          \
                                 load512(y + 192)),                                                \
            _mm512_maskz_permutexvar_epi8(even, sci3, v));                                         \
        /* mins times the 16-element activation sums (each min covers two) */                      \
        __m256i m16 =                                                                              \
            _mm256_maskz_permutexvar_epi8((__mmask32)even, mi, _mm512_castsi512_si256(v));         \
        (ret_pm) = _mm256_madd_epi16(load256(b[i].bsums), m16);                                    \
        (ret_acc) = _mm512_add_epi32(acc0, acc1);                                                  \
        (ret_dd) = kq_dd(&a[i], b[i].d);                                                           \
    } while (0)
/* A row kernel over activation blocks of type BT: ggml's Q8_K (vec_dot), or the blocks that
 * pl_quant_q8_K_align() re-lays with 64-byte aligned quants (vec_dot_a). The same operations in
 * the same order: bit-identical results. */
#define DEFINE_Q4K_GV_ROW(name, BT)                                                                \
    static TARGET_GV float name(int64_t n, const void *restrict w, const void *restrict x) {       \
        const struct pl_block_q4_K *a = w;                                                         \
        const BT *b = x;                                                                           \
        Q4K_GV_CONSTS;                                                                             \
        float sum = 0.0f;                                                                          \
        assert(n % PL_QK_K == 0);                                                                  \
        const int64_t nb = n / PL_QK_K;                                                            \
        Q4K_ROW_LOOP(Q4K_GV_SB);                                                                   \
        return sum;                                                                                \
    }
DEFINE_Q4K_GV_ROW(vec_dot_q4_K_gv, struct pl_block_q8_K)
DEFINE_Q4K_GV_ROW(vec_dot_q4_K_gv_a, struct pl_block_q8_Ka)
#undef DEFINE_Q4K_GV_ROW
#undef Q4K_GV_SB

/* NT tokens (2 .. PL_QUANT_DOTN_MAX) against one Q4_K row (a decode step of several sessions): the
 * nibbles and the scale vectors of each super-block are made once and serve every token; per token
 * the operations are vec_dot_q4_K_gv's, in its order (integer sums, then kq_step per
 * super-block with the same grouping), so out[t] is bit-identical to
 * vec_dot_q4_K_gv(n, w, x[t]). NT is a constant after inlining. */
static inline __attribute__((always_inline)) TARGET_GV void
q4_K_gv_n(int64_t n, const void *restrict w, const void *const *x, float *out, const int NT) {
    const struct pl_block_q4_K *a = w;
    const struct pl_block_q8_K *b[PL_QUANT_DOTN_MAX];
    for (int t = 0; t < NT; t++)
        b[t] = x[t];
    Q4K_GV_CONSTS;
    float sum[PL_QUANT_DOTN_MAX] = {0.0f};
    assert(n % PL_QK_K == 0);
    const int64_t nb = n / PL_QK_K;
    /* super-block i for every token: ret_acc[t], ret_pm[t], ret_dd[t] */
#define Q4K_GV2_SB(i, ret_acc, ret_pm, ret_dd)                                                     \
    do {                                                                                           \
        pf(&a[i], 3);                                                                              \
        const __m512i v = _mm512_castsi128_si512(q4k_scales_bytes(a[i].scales));                   \
        const uint8_t *q = a[i].qs;                                                                \
        const __m512i u0 = _mm512_gf2p8affine_epi64_epi8(bcast256(q), nib, 0);                     \
        const __m512i u1 = _mm512_gf2p8affine_epi64_epi8(bcast256(q + 32), nib, 0);                \
        const __m512i u2 = _mm512_gf2p8affine_epi64_epi8(bcast256(q + 64), nib, 0);                \
        const __m512i u3 = _mm512_gf2p8affine_epi64_epi8(bcast256(q + 96), nib, 0);                \
        const __m512i s0 = _mm512_maskz_permutexvar_epi8(even, sci0, v);                           \
        const __m512i s1 = _mm512_maskz_permutexvar_epi8(even, sci1, v);                           \
        const __m512i s2 = _mm512_maskz_permutexvar_epi8(even, sci2, v);                           \
        const __m512i s3 = _mm512_maskz_permutexvar_epi8(even, sci3, v);                           \
        const __m256i m16 =                                                                        \
            _mm256_maskz_permutexvar_epi8((__mmask32)even, mi, _mm512_castsi512_si256(v));         \
        _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) {                                     \
            const int8_t *y = b[t][i].qs;                                                          \
            __m512i acc0 = _mm512_dpwssd_epi32(_mm512_setzero_si512(),                             \
                                               _mm512_maddubs_epi16(u0, load512(y)), s0);          \
            __m512i acc1 = _mm512_dpwssd_epi32(_mm512_setzero_si512(),                             \
                                               _mm512_maddubs_epi16(u1, load512(y + 64)), s1);     \
            acc0 = _mm512_dpwssd_epi32(acc0, _mm512_maddubs_epi16(u2, load512(y + 128)), s2);      \
            acc1 = _mm512_dpwssd_epi32(acc1, _mm512_maddubs_epi16(u3, load512(y + 192)), s3);      \
            (ret_pm)[t] = _mm256_madd_epi16(load256(b[t][i].bsums), m16);                          \
            (ret_acc)[t] = _mm512_add_epi32(acc0, acc1);                                           \
            (ret_dd)[t] = kq_dd(&a[i], b[t][i].d);                                                 \
        }                                                                                          \
    } while (0)
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        __m512i acc[PL_QUANT_DOTN_MAX][4];
        __m256i pm[PL_QUANT_DOTN_MAX][4];
        float sc[PL_QUANT_DOTN_MAX][8];
        for (int k = 0; k < 4; k++) {
            __m512i ak[PL_QUANT_DOTN_MAX];
            __m256i pk[PL_QUANT_DOTN_MAX];
            __m128 dk[PL_QUANT_DOTN_MAX];
            Q4K_GV2_SB(i + k, ak, pk, dk);
#pragma GCC unroll 8
            for (int t = 0; t < NT; t++) {
                acc[t][k] = ak[t];
                pm[t][k] = pk[t];
                _mm_storel_pi((__m64 *)(void *)(sc[t] + 2 * k), dk[t]);
            }
        }
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            float f[8];
            reduce4_kq(acc[t], pm[t], f);
            for (int k = 0; k < 4; k++)
                sum[t] = kq_step(sum[t], sc[t][2 * k], sc[t][2 * k + 1], f[k], f[4 + k]);
        }
    }
    for (; i < nb; i++) {
        __m512i ak[PL_QUANT_DOTN_MAX];
        __m256i pk[PL_QUANT_DOTN_MAX];
        __m128 dk[PL_QUANT_DOTN_MAX];
        Q4K_GV2_SB(i, ak, pk, dk);
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            int32_t isum, msum;
            hsum2_epi32(ak[t], pk[t], &isum, &msum);
            sum[t] = kq_step(sum[t], _mm_cvtss_f32(dk[t]), _mm_cvtss_f32(_mm_movehdup_ps(dk[t])),
                             (float)isum, (float)msum);
        }
    }
#undef Q4K_GV2_SB
    for (int t = 0; t < NT; t++)
        out[t] = sum[t];
}

static TARGET_GV void vec_dotn_q4_K_gv(int64_t n, const void *restrict w, const void *const *x,
                                       uint32_t nx, float *out) {
    switch (nx) {
    case 8:
        q4_K_gv_n(n, w, x, out, 8);
        break;
    case 7:
        q4_K_gv_n(n, w, x, out, 7);
        break;
    case 6:
        q4_K_gv_n(n, w, x, out, 6);
        break;
    case 5:
        q4_K_gv_n(n, w, x, out, 5);
        break;
    case 4:
        q4_K_gv_n(n, w, x, out, 4);
        break;
    case 3:
        q4_K_gv_n(n, w, x, out, 3);
        break;
    default:
        q4_K_gv_n(n, w, x, out, 2);
        break;
    }
}

/* Q5_K: Q4_K's quants plus a fifth bit, its scales and mins; the same exact integer sums and
 * batch-invariant steps (Q4K_ROW_LOOP), so the tile kernels (matmul_avx512.c) give a token the
 * same result. */
static float vec_dot_q5_K(int64_t n, const void *restrict w, const void *restrict x) {
    const struct pl_block_q5_K *a = w;
    const struct pl_block_q8_K *b = x;
    const int64_t nb = n / PL_QK_K;
    const __m512i m4 = _mm512_set1_epi8(0x0F), bit4 = _mm512_set1_epi8(0x10);
    const __m512i shift = counts2(0, 4);
    const struct perm16 P = perm16_load(q4k_perm);
    float sum = 0.0f;
    assert(n % PL_QK_K == 0);
    /* one super-block for Q4K_ROW_LOOP; group g's fifth bits: bit 2g (low nibbles) and
     * 2g + 1 (high) of qh[l], moved to bit 4 by a right shift and a left shift by 4 */
#define Q5K_SB(i, ret_acc, ret_pm, ret_dd)                                                         \
    do {                                                                                           \
        pf(&a[i], 3);                                                                              \
        const __m256i sm = q4k_scales16(a[i].scales);                                              \
        const __m512i sc16 = _mm512_castsi256_si512(sm);                                           \
        const __m128i bs = _mm_hadd_epi16(load128(b[i].bsums), load128(b[i].bsums + 8));           \
        (ret_pm) = _mm256_zextsi128_si256(_mm_madd_epi16(bs, _mm256_extracti128_si256(sm, 1)));    \
        const __m512i qh = bcast256(a[i].qh);                                                      \
        __m512i acc2[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};                        \
        for (int g = 0; g < 4; g++) {                                                              \
            const __m512i lo4 =                                                                    \
                _mm512_and_si512(_mm512_srlv_epi16(bcast256(a[i].qs + 32 * g), shift), m4);        \
            const __m512i hb =                                                                     \
                _mm512_slli_epi16(_mm512_srlv_epi16(qh, counts2(2 * g, 2 * g + 1)), 4);            \
            const __m512i u = _mm512_ternarylogic_epi32(lo4, hb, bit4, 0xF8); /* A | (B & C) */    \
            acc2[g & 1] = dot_scaled(acc2[g & 1], u, load512(b[i].qs + 64 * g),                    \
                                     _mm512_permutexvar_epi16(P.idx[g], sc16));                    \
        }                                                                                          \
        (ret_acc) = _mm512_add_epi32(acc2[0], acc2[1]);                                            \
        (ret_dd) = kq_dd(&a[i], b[i].d);                                                           \
    } while (0)
    Q4K_ROW_LOOP(Q5K_SB);
#undef Q5K_SB
    return sum;
}

/* sum_j sc16[j] * bsums[j] over the 16 sub-blocks, per int32 lane (8 lanes). */
static inline __m256i bsum_dot(__m256i sc16, const int16_t *bsums) {
    return _mm256_madd_epi16(sc16, load256(bsums));
}

static float vec_dot_q6_K(int64_t n, const void *restrict w, const void *restrict x) {
    const struct pl_block_q6_K *a = w;
    const struct pl_block_q8_K *b = x;
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i m3f = _mm512_set1_epi8(0x3F), qh_shift = counts2(0, 2);
    /* 64 elements = 4 sub-blocks of 16: span 8 */
    const struct perm16 P = perm16_load(perm_span8);
    float sum = 0.f;
    assert(n % PL_QK_K == 0);
    for (int64_t i = 0; i < n / PL_QK_K; i++) {
        pf(&a[i], 4);
        __m256i sc16y = _mm256_cvtepi8_epi16(load128(a[i].scales));
        __m512i sc16 = _mm512_castsi256_si512(sc16y);
        /* q in 0..63, value q - 32: the -32 goes through bsums */
        __m512i acc = _mm512_zextsi256_si512(_mm256_sub_epi32(
            _mm256_setzero_si256(), _mm256_slli_epi32(bsum_dot(sc16y, b[i].bsums), 5)));
        __m512i acc1 = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            __m512i ql = load512(a[i].ql + 64 * h);
            /* [qh, qh >> 2]: bits 0-1 feed s = 0, 1; bits 4-5 feed s = 2, 3 */
            __m512i t = _mm512_srlv_epi16(bcast256(a[i].qh + 32 * h), qh_shift);
            __m512i hi_a = _mm512_and_si512(_mm512_slli_epi16(t, 4), m30);
            __m512i u_a = _mm512_ternarylogic_epi32(ql, m4, hi_a, 0xEA); /* (A & B) | C */
            __m512i u_b = _mm512_ternarylogic_epi32(_mm512_srli_epi16(ql, 4), t, m4, 0xE4);
            u_b = _mm512_and_si512(u_b, m3f); /* (C ? A : B) & 0x3F */
            acc = dot_scaled(acc, u_a, load512(b[i].qs + 128 * h),
                             _mm512_permutexvar_epi16(P.idx[2 * h], sc16));
            acc1 = dot_scaled(acc1, u_b, load512(b[i].qs + 128 * h + 64),
                              _mm512_permutexvar_epi16(P.idx[2 * h + 1], sc16));
        }
        acc = _mm512_add_epi32(acc, acc1);
        /* batch-invariant (matmul.h): one fused step per super-block */
        sum = fmaf(h2f(a[i].d) * b[i].d, (float)_mm512_reduce_add_epi32(acc), sum);
    }
    return sum;
}

/* NT tokens (2 .. PL_QUANT_DOTN_MAX) against one Q6_K row: the 6-bit values and scale vectors are
 * made once; per token vec_dot_q6_K's operations in its order, so out[t] is bit-identical to it. */
static inline __attribute__((always_inline)) void
q6_K_n(int64_t n, const void *restrict w, const void *const *x, float *out, const int NT) {
    const struct pl_block_q6_K *a = w;
    const struct pl_block_q8_K *b[PL_QUANT_DOTN_MAX];
    for (int t = 0; t < NT; t++)
        b[t] = x[t];
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i m3f = _mm512_set1_epi8(0x3F), qh_shift = counts2(0, 2);
    const struct perm16 P = perm16_load(perm_span8);
    float sum[PL_QUANT_DOTN_MAX] = {0.f};
    assert(n % PL_QK_K == 0);
    for (int64_t i = 0; i < n / PL_QK_K; i++) {
        pf(&a[i], 4);
        __m256i sc16y = _mm256_cvtepi8_epi16(load128(a[i].scales));
        __m512i sc16 = _mm512_castsi256_si512(sc16y);
        __m512i acc[PL_QUANT_DOTN_MAX], acc1[PL_QUANT_DOTN_MAX];
        for (int t = 0; t < NT; t++) {
            acc[t] = _mm512_zextsi256_si512(_mm256_sub_epi32(
                _mm256_setzero_si256(), _mm256_slli_epi32(bsum_dot(sc16y, b[t][i].bsums), 5)));
            acc1[t] = _mm512_setzero_si512();
        }
        for (int h = 0; h < 2; h++) {
            __m512i ql = load512(a[i].ql + 64 * h);
            __m512i tq = _mm512_srlv_epi16(bcast256(a[i].qh + 32 * h), qh_shift);
            __m512i hi_a = _mm512_and_si512(_mm512_slli_epi16(tq, 4), m30);
            __m512i u_a = _mm512_ternarylogic_epi32(ql, m4, hi_a, 0xEA);
            __m512i u_b = _mm512_ternarylogic_epi32(_mm512_srli_epi16(ql, 4), tq, m4, 0xE4);
            u_b = _mm512_and_si512(u_b, m3f);
            const __m512i sa = _mm512_permutexvar_epi16(P.idx[2 * h], sc16);
            const __m512i sb = _mm512_permutexvar_epi16(P.idx[2 * h + 1], sc16);
            for (int t = 0; t < NT; t++) {
                acc[t] = dot_scaled(acc[t], u_a, load512(b[t][i].qs + 128 * h), sa);
                acc1[t] = dot_scaled(acc1[t], u_b, load512(b[t][i].qs + 128 * h + 64), sb);
            }
        }
        const float d = h2f(a[i].d);
        for (int t = 0; t < NT; t++)
            sum[t] =
                fmaf(d * b[t][i].d,
                     (float)_mm512_reduce_add_epi32(_mm512_add_epi32(acc[t], acc1[t])), sum[t]);
    }
    for (int t = 0; t < NT; t++)
        out[t] = sum[t];
}

PL_QUANT_DEFINE_DOTN(vec_dotn_q6_K, q6_K_n)

/* Q2_K: NT tokens (1 .. PL_QUANT_DOTN_MAX, constant after inlining) share each super-block's
 * unpacking (vec_dotn: 8 tokens' prompt rows at ~2.1x the rate of 8 vec_dot calls on one
 * core of the Zen 5 VM), per token the same operations as vec_dot. The float steps stay
 * llama.cpp's scalar form, sum += dall x isum - dmin x msum per super-block: carrying the
 * row in 16-lane float vectors instead ran vec_dot 1.5x faster, but moved the Q2_K model's
 * worst logit against llama.cpp's from 2.58% to 3.29% of the largest (test_fidelity allows
 * 3%; the model's error amplifies the last bits). */
static inline __attribute__((always_inline)) void
q2_K_n(int64_t n, const void *restrict w, const void *const *x, float *out, const int NT) {
    const struct pl_block_q2_K *a = w;
    const struct pl_block_q8_K *b[PL_QUANT_DOTN_MAX];
    const __m512i m3 = _mm512_set1_epi8(3);
    const struct perm16 P = perm16_load(perm_span8);
    float sum[PL_QUANT_DOTN_MAX];
    for (int t = 0; t < NT; t++) {
        b[t] = x[t];
        sum[t] = 0.0f;
    }
    assert(n % PL_QK_K == 0);
    for (int64_t i = 0; i < n / PL_QK_K; i++) {
        pf(&a[i], 2);
        __m128i raw = load128(a[i].scales);
        __m256i sc16y = _mm256_cvtepu8_epi16(_mm_and_si128(raw, _mm_set1_epi8(0x0F)));
        __m256i m16 =
            _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0F)));
        __m512i sc16 = _mm512_castsi256_si512(sc16y);
        __m512i acc[PL_QUANT_DOTN_MAX];
        for (int t = 0; t < NT; t++)
            acc[t] = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            __m512i q = bcast256(a[i].qs + 32 * h);
            for (int s = 0; s < 4; s += 2) {
                /* chunks s, s+1 of 32 elements: bits 2s, 2s+2 of qs[32h + l] */
                __m512i u = _mm512_and_si512(_mm512_srlv_epi16(q, counts2(2 * s, 2 * s + 2)), m3);
                const __m512i sc = _mm512_permutexvar_epi16(P.idx[2 * h + s / 2], sc16);
                for (int t = 0; t < NT; t++)
                    acc[t] = dot_scaled(acc[t], u, load512(b[t][i].qs + 128 * h + 32 * s), sc);
            }
        }
        const float d = h2f(a[i].d), dm = h2f(a[i].dmin);
        for (int t = 0; t < NT; t++) {
            int32_t isum, msum;
            hsum2_epi32(acc[t], bsum_dot(m16, b[t][i].bsums), &isum, &msum);
            const float dall = b[t][i].d * d, dmin = b[t][i].d * dm;
            sum[t] += dall * (float)isum - dmin * (float)msum;
        }
    }
    for (int t = 0; t < NT; t++)
        out[t] = sum[t];
}

static float vec_dot_q2_K(int64_t n, const void *restrict w, const void *restrict x) {
    const void *const xs[1] = {x};
    float r;
    q2_K_n(n, w, xs, &r, 1);
    return r;
}

PL_QUANT_DEFINE_DOTN(vec_dotn_q2_K, q2_K_n)

static float vec_dot_q3_K(int64_t n, const void *restrict w, const void *restrict x) {
    const struct pl_block_q3_K *a = w;
    const struct pl_block_q8_K *b = x;
    const __m512i m3 = _mm512_set1_epi8(3), bit2 = _mm512_set1_epi8(4);
    const struct perm16 P = perm16_load(perm_span8);
    float sum = 0.f;
    assert(n % PL_QK_K == 0);
    for (int64_t i = 0; i < n / PL_QK_K; i++) {
        const uint8_t *s8 = a[i].scales;
        pf(&a[i], 2);
        uint32_t w0 = load_u32(s8), w1 = load_u32(s8 + 4), w2 = load_u32(s8 + 8);
        const uint32_t k4 = 0x0F0F0F0F, k2 = 0x03030303;
        __m128i v = _mm_setr_epi32((int)((w0 & k4) | ((w2 & k2) << 4)),
                                   (int)((w1 & k4) | (((w2 >> 2) & k2) << 4)),
                                   (int)(((w0 >> 4) & k4) | (((w2 >> 4) & k2) << 4)),
                                   (int)(((w1 >> 4) & k4) | (((w2 >> 6) & k2) << 4)));
        __m256i sc16y = _mm256_cvtepi8_epi16(_mm_sub_epi8(v, _mm_set1_epi8(32)));
        __m512i sc16 = _mm512_castsi256_si512(sc16y);
        /* q = low 2 bits | hmask bit << 2 (0..7), value q - 4: the -4 goes through bsums */
        __m512i acc = _mm512_zextsi256_si512(_mm256_sub_epi32(
            _mm256_setzero_si256(), _mm256_slli_epi32(bsum_dot(sc16y, b[i].bsums), 2)));
        __m512i hm = bcast256(a[i].hmask);
        for (int h = 0; h < 2; h++) {
            __m512i q = bcast256(a[i].qs + 32 * h);
            for (int s = 0; s < 4; s += 2) {
                int k = 4 * h + s; /* hmask bits k, k+1 */
                __m512i lo = _mm512_and_si512(_mm512_srlv_epi16(q, counts2(2 * s, 2 * s + 2)), m3);
                __m512i hb = _mm512_slli_epi16(_mm512_srlv_epi16(hm, counts2(k, k + 1)), 2);
                __m512i u = _mm512_ternarylogic_epi32(lo, hb, bit2, 0xF8); /* A | (B & C) */
                acc = dot_scaled(acc, u, load512(b[i].qs + 32 * k),
                                 _mm512_permutexvar_epi16(P.idx[2 * h + s / 2], sc16));
            }
        }
        /* batch-invariant (matmul.h): one fused step per super-block, as Q6_K */
        sum = fmaf(h2f(a[i].d) * b[i].d, (float)_mm512_reduce_add_epi32(acc), sum);
    }
    return sum;
}

/* ---- Activations: Q8_0 ----
 * quant_avx2.c's quantizer, lane for lane in 512-bit registers (so the bytes are the
 * reference's, as test_quant_simd checks): absmax ignoring NaN, d = absmax / 127, each
 * x / d clamped to [-127, 127] with NaN as 0, rounded half away from zero. A decode step
 * quantizes every product's input on each thread; with AVX2 this took 1.6% of a 2-thread
 * TinyLlama Q4_0 decode step. */

static inline __m512i q8_round16(__m512 v) {
    v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);
    v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(-127.f)), _mm512_set1_ps(127.f));
    const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask16 half =
        _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, t)), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    const __m512i sign = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(INT32_MIN));
    const __m512 one = _mm512_castsi512_ps(_mm512_or_si512(sign, _mm512_set1_epi32(0x3F800000)));
    return _mm512_cvttps_epi32(_mm512_mask_add_ps(t, half, t, one));
}

static void q8_0_from_f32(const float *restrict src, void *restrict dst, int64_t n) {
    struct pl_block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / PL_QK8_0; i++, src += PL_QK8_0) {
        const __m512 x0 = _mm512_loadu_ps(src), x1 = _mm512_loadu_ps(src + 16);
        /* max(NaN, m) is m: NaN lanes drop out, as in the AVX2 scan */
        const __m512 m =
            _mm512_max_ps(_mm512_abs_ps(x1), _mm512_max_ps(_mm512_abs_ps(x0), _mm512_setzero_ps()));
        const float d = _mm512_reduce_max_ps(m) / 127.f;
        const float id = d != 0.f ? 1.f / d : 0.f;
        b[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        const __m512 vid = _mm512_set1_ps(id);
        _mm_storeu_si128((__m128i *)(void *)b[i].qs,
                         _mm512_cvtepi32_epi8(q8_round16(_mm512_mul_ps(x0, vid))));
        _mm_storeu_si128((__m128i *)(void *)(b[i].qs + 16),
                         _mm512_cvtepi32_epi8(q8_round16(_mm512_mul_ps(x1, vid))));
    }
}

/* ---- Activations: Q8_K ----
 * quant_avx2.c's quantizer in 512-bit registers, lane for lane: the first element of
 * largest magnitude (NaN ignored) with its sign sets iscale = -127 / max; each x * iscale
 * clamped to [-128, 127] with NaN as 0 and rounded to nearest even; bsums per 16. */

static void q8_K_from_f32(const float *restrict src, void *restrict dst, int64_t n) {
    struct pl_block_q8_K *b = dst;
    for (int64_t i = 0; i < n / PL_QK_K; i++, src += PL_QK_K) {
        __m512 ma = _mm512_setzero_ps(), mb = _mm512_setzero_ps();
        for (int k = 0; k < PL_QK_K / 16; k += 2) { /* max(NaN, m) is m */
            ma = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(src + 16 * k)), ma);
            mb = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(src + 16 * k + 16)), mb);
        }
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(ma, mb));
        float max = 0.f;
        for (int k = 0; k < PL_QK_K / 16; k++) {
            const __mmask16 eq = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(src + 16 * k)),
                                                    _mm512_set1_ps(amax), _CMP_EQ_OQ);
            if (eq) {
                max = src[16 * k + __builtin_ctz((unsigned)eq)];
                break;
            }
        }
        if (max == 0.f || max != max) {
            memset(&b[i], 0, sizeof(b[i]));
            continue;
        }
        const float iscale = -127.f / max;
        const __m512 vs = _mm512_set1_ps(iscale);
        for (int k = 0; k < PL_QK_K / 16; k++) {
            __m512 v = _mm512_mul_ps(_mm512_loadu_ps(src + 16 * k), vs);
            v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);
            v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(-128.f)), _mm512_set1_ps(127.f));
            const __m512i q = _mm512_cvttps_epi32(
                _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            _mm_storeu_si128((__m128i *)(void *)(b[i].qs + 16 * k), _mm512_cvtepi32_epi8(q));
            b[i].bsums[k] = (int16_t)_mm512_reduce_add_epi32(q);
        }
        b[i].d = 1.f / iscale;
    }
}

/* ---- The table ---- */

void pl_quant_avx512_fill(struct pl_quant_kernels table[_PL_GGML_TYPE_MAX], unsigned flags) {
    (void)pl_quant_prefetch(); /* the kernels' prefetch setting, before any of them runs */
    struct pl_quant_kernels before[_PL_GGML_TYPE_MAX]; /* the table as it came (AVX2's) */
    memcpy(before, table, sizeof(before));
    /* GFNI and VBMI use the AVX-512 state the caller has checked; they are optional
     * (Cascade Lake has neither) */
    __builtin_cpu_init();
    const bool have_gv = !(flags & PL_QUANT_X86_NO_GFNI_VBMI) && __builtin_cpu_supports("gfni") &&
                         __builtin_cpu_supports("avx512vbmi");
    table[PL_GGML_TYPE_F32].vec_dot = vec_dot_f32;
    table[PL_GGML_TYPE_F16].vec_dot = vec_dot_f16;
    table[PL_GGML_TYPE_BF16].vec_dot = vec_dot_bf16;
    table[PL_GGML_TYPE_Q4_0].vec_dot = vec_dot_q4_0;
    table[PL_GGML_TYPE_Q4_1].vec_dot = vec_dot_q4_1;
    table[PL_GGML_TYPE_Q5_0].vec_dot = vec_dot_q5_0;
    table[PL_GGML_TYPE_Q5_1].vec_dot = vec_dot_q5_1;
    table[PL_GGML_TYPE_Q8_0].vec_dot = vec_dot_q8_0;
    table[PL_GGML_TYPE_Q8_0].from_f32 = q8_0_from_f32;
    table[PL_GGML_TYPE_Q8_K].from_f32 = q8_K_from_f32;
    table[PL_GGML_TYPE_Q2_K].vec_dot = vec_dot_q2_K;
    table[PL_GGML_TYPE_Q3_K].vec_dot = vec_dot_q3_K;
    table[PL_GGML_TYPE_Q4_K].vec_dot = have_gv ? vec_dot_q4_K_gv : vec_dot_q4_K;
    table[PL_GGML_TYPE_Q5_K].vec_dot = vec_dot_q5_K;
    table[PL_GGML_TYPE_Q6_K].vec_dot = vec_dot_q6_K;
    table[PL_GGML_TYPE_Q4_K].vec_dotn = have_gv ? vec_dotn_q4_K_gv : NULL;
    table[PL_GGML_TYPE_Q4_K].vec_dot_a = have_gv ? vec_dot_q4_K_gv_a : NULL;
    table[PL_GGML_TYPE_Q6_K].vec_dotn = vec_dotn_q6_K;
    table[PL_GGML_TYPE_Q2_K].vec_dotn = vec_dotn_q2_K;
    /* vec_dotn and vec_dot_a must give vec_dot's bits: where this set replaced a type's
     * vec_dot but left one of them as it came, that one is the twin of the vec_dot it
     * replaced (AVX2's), not of this one */
    for (int t = 0; t < _PL_GGML_TYPE_MAX; t++) {
        if (table[t].vec_dot == before[t].vec_dot)
            continue;
        if (table[t].vec_dotn == before[t].vec_dotn)
            table[t].vec_dotn = NULL;
        if (table[t].vec_dot_a == before[t].vec_dot_a)
            table[t].vec_dot_a = NULL;
    }
}
