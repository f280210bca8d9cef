/* SPDX-License-Identifier: MIT */
/* AVX2 + FMA + F16C kernels (compiled with -mavx2 -mfma -mf16c; installed by quant_x86.c
 * only on CPUs that have them): vec_dot of every compute type against its vec_dot_type and
 * from_f32 of the activation types. The integer parts are exact for every input byte, so
 * a dot product differs from the scalar reference (quant_ref.c) only in the order of its
 * float additions; the quantizers are bit-identical to the reference.
 *
 * quant_avxvnni.c compiles this file a second time with PL_QUANT_AVXVNNI (and -mavxvnni):
 * the "avxvnni" set, for CPUs with AVX-VNNI but without AVX-512 (Intel's client cores since
 * Alder Lake). There the integer dot products take VPDPBUSD / VPDPWSSD, one instruction
 * where AVX2 needs two or three (mad_us, madd_acc, offset_dot, the Q8_0 pair below). The
 * integer sums per int32 lane are the same numbers, so both sets give the same bits, except
 * for Q8_0 (its AVX2 lanes hold elements 2j, 2j + 1, 2j + 16, 2j + 17; AVX-VNNI's 4j..4j + 3). */
#include "quant_x86.h"

#include <assert.h>
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "quant_blocks.h"
#include "quant_dotn.h"

/* ---- Helpers ---- */

static inline float h2f(uint16_t h) {
    return _cvtsh_ss(h);
}

static inline float hsum128_ps(__m128 s) {
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float hsum_ps(__m256 v) {
    return hsum128_ps(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)));
}

static inline int32_t hsum_epi32_128(__m128i v) {
    v = _mm_add_epi32(v, _mm_unpackhi_epi64(v, v));
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(v);
}

static inline __m128i load128(const void *p) {
    return _mm_loadu_si128((const __m128i *)p);
}

static inline __m256i load256(const void *p) {
    return _mm256_loadu_si256((const __m256i *)p);
}

/* sum of 4 adjacent u8 * s8 products per int32 lane; exact when every pair of products
 * fits in int16 (|u| * 128 * 2 <= 32767: u <= 127; with AVX-VNNI for every u). */
static inline __m256i mad_us(__m256i u, __m256i s) {
#ifdef PL_QUANT_AVXVNNI
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

/* acc + the int32 sums of the adjacent int16 pair products p * s (wrapping, as VPMADDWD's
 * sums; no pair here reaches its one overflow, -32768 * -32768 twice). With AVX-VNNI and
 * fuse, one VPDPWSSD. The K-quant kernels fuse only with several tokens: on the Zen 5 VM
 * (AVX2 code, one core, L2-resident rows of 2048) VPDPWSSD gave 8-token Q4_K..Q6_K 3-11%
 * more, but one-token Q4_K 3-4% less (27.2-27.7 -> 26.2-26.5 GB/s; with two chains of
 * VPDPWSSD per token as well). */
static inline __m256i madd_acc(__m256i acc, __m256i p, __m256i s, bool fuse) {
#ifdef PL_QUANT_AVXVNNI
    if (fuse)
        return _mm256_dpwssd_avx_epi32(acc, p, s);
#endif
    (void)fuse;
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, s));
}

/* The 32 quants of a Q4_0/Q4_1 block in element order (0..15: low nibbles, 16..31: high). */
static inline __m256i nibbles32(const uint8_t *qs) {
    __m128i q = load128(qs);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

/* 0xFF in byte j where bit j of bits is set. */
static inline __m256i bits32_mask(uint32_t bits) {
    const __m256i spread = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                             0x0101010101010101, 0x0000000000000000);
    const __m256i bit = _mm256_set1_epi64x((int64_t)0x8040201008040201);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), spread);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

static inline uint32_t load_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

/* Software prefetch of the weight stream, as quant_avx512.c's: the hardware prefetchers
 * alone leave these kernels well short of the bus. `lines` 64-byte lines from
 * pl_quant_x86_pf.bytes past p. */
static inline __attribute__((always_inline)) void pf(const void *p, int lines) {
    pl_x86_pf_lines((const char *)p + pl_quant_x86_pf.bytes, lines);
}

/* ---- F32, F16, BF16 ---- */

static float vec_dot_f32(int64_t n, const void *restrict w, const void *restrict x) {
    const float *a = w, *b = x;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
        acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), acc2);
        acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), acc3);
    }
    for (; i + 8 <= n; i += 8)
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
    for (; i < n; i++)
        sum += a[i] * b[i];
    return sum;
}

static inline __m256 load_f16x8(const uint16_t *p) {
    return _mm256_cvtph_ps(load128(p));
}

static float vec_dot_f16(int64_t n, const void *restrict w, const void *restrict x) {
    const uint16_t *a = w, *b = x;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm256_fmadd_ps(load_f16x8(a + i), load_f16x8(b + i), acc0);
        acc1 = _mm256_fmadd_ps(load_f16x8(a + i + 8), load_f16x8(b + i + 8), acc1);
        acc2 = _mm256_fmadd_ps(load_f16x8(a + i + 16), load_f16x8(b + i + 16), acc2);
        acc3 = _mm256_fmadd_ps(load_f16x8(a + i + 24), load_f16x8(b + i + 24), acc3);
    }
    for (; i + 8 <= n; i += 8)
        acc0 = _mm256_fmadd_ps(load_f16x8(a + i), load_f16x8(b + i), acc0);
    float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
    for (; i < n; i++)
        sum += h2f(a[i]) * h2f(b[i]);
    return sum;
}

/* F16C's conversion rounds to nearest even, keeps subnormals, and quiets NaNs keeping the
 * top payload bits, exactly as pl_f32_to_fp16_inline does. */
static void f16_from_f32(const float *restrict src, void *restrict dst, int64_t n) {
    uint16_t *d = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(d + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        d[i] = pl_f32_to_fp16_inline(src[i]);
}

static inline __m256 load_bf16x8(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load128(p)), 16));
}

static float vec_dot_bf16(int64_t n, const void *restrict w, const void *restrict x) {
    const uint16_t *a = w, *b = x;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm256_fmadd_ps(load_bf16x8(a + i), load_bf16x8(b + i), acc0);
        acc1 = _mm256_fmadd_ps(load_bf16x8(a + i + 8), load_bf16x8(b + i + 8), acc1);
        acc2 = _mm256_fmadd_ps(load_bf16x8(a + i + 16), load_bf16x8(b + i + 16), acc2);
        acc3 = _mm256_fmadd_ps(load_bf16x8(a + i + 24), load_bf16x8(b + i + 24), acc3);
    }
    for (; i + 8 <= n; i += 8)
        acc0 = _mm256_fmadd_ps(load_bf16x8(a + i), load_bf16x8(b + i), acc0);
    float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
    for (; i < n; i++)
        sum += pl_bf16_to_f32_inline(a[i]) * pl_bf16_to_f32_inline(b[i]);
    return sum;
}

/* Integer rounding as pl_f32_to_bf16_inline (AVX-512 BF16's converter would flush
 * subnormals, so it is not used anywhere). */
static inline __m256i f32_to_bf16_epi32(__m256 f) {
    __m256i x = _mm256_castps_si256(f);
    __m256i hi = _mm256_srli_epi32(x, 16);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7FFFFFFF)),
                                     _mm256_set1_epi32(0x7F800000));
    __m256i rnd =
        _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), _mm256_and_si256(hi, _mm256_set1_epi32(1)));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(x, rnd), 16);
    __m256i q = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(r, q, nan);
}

static void bf16_from_f32(const float *restrict src, void *restrict dst, int64_t n) {
    uint16_t *d = dst;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i lo = f32_to_bf16_epi32(_mm256_loadu_ps(src + i));
        __m256i hi = f32_to_bf16_epi32(_mm256_loadu_ps(src + i + 8));
        /* values are 0..0xFFFF, so the signed-input pack does not saturate */
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8);
        _mm256_storeu_si256((__m256i *)(void *)(d + i), p);
    }
    for (; i < n; i++)
        d[i] = pl_f32_to_bf16_inline(src[i]);
}

/* ---- Activation quantizers: Q8_0, Q8_1, Q8_K ---- */

static inline __m256 abs_ps(__m256 v) {
    return _mm256_andnot_ps(_mm256_set1_ps(-0.f), v);
}

/* max |x| over 8k floats, ignoring NaN as fmaxf does (MAXPS returns its second operand
 * when either is NaN, and the running maximum is never NaN). */
static inline float absmax_ps(const float *x, int n) {
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < n; j += 8)
        m = _mm256_max_ps(abs_ps(_mm256_loadu_ps(x + j)), m);
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* NaN lanes become 0, the others are clamped to [lo, hi]. */
static inline __m256 clamp_nan0(__m256 v, float lo, float hi) {
    v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
    return _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(lo)), _mm256_set1_ps(hi));
}

/* roundf (ties away from zero) of integers-or-fractions below 2^23: v - trunc(v) is exact. */
static inline __m256i round_away(__m256 v) {
    __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m256 half = _mm256_cmp_ps(abs_ps(_mm256_sub_ps(v, t)), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    __m256 one = _mm256_or_ps(_mm256_and_ps(v, _mm256_set1_ps(-0.f)), _mm256_set1_ps(1.f));
    return _mm256_cvttps_epi32(_mm256_add_ps(t, _mm256_and_ps(half, one)));
}

/* 32 int32 (values in int8 range) to 32 int8 in order. */
static inline __m256i pack_i32x32(__m256i a, __m256i b, __m256i c, __m256i d) {
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* One Q8_0/Q8_1 block: returns sum(qs). */
static inline int32_t q8_block(const float *src, int8_t *qs, float id) {
    __m256 vid = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; k++) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(src + 8 * k), vid);
        q[k] = round_away(clamp_nan0(v, -127.f, 127.f));
    }
    _mm256_storeu_si256((__m256i *)(void *)qs, pack_i32x32(q[0], q[1], q[2], q[3]));
    __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    return hsum_epi32_128(_mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1)));
}

static void q8_0_from_f32(const float *restrict src, void *restrict dst, int64_t n) {
    struct pl_block_q8_0 *b = dst;
    assert(n % PL_QK8_0 == 0);
    for (int64_t i = 0; i < n / PL_QK8_0; i++, src += PL_QK8_0) {
        float d = absmax_ps(src, PL_QK8_0) / 127.f;
        float id = d != 0.f ? 1.f / d : 0.f;
        b[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        (void)q8_block(src, b[i].qs, id);
    }
}

static void q8_1_from_f32(const float *restrict src, void *restrict dst, int64_t n) {
    struct pl_block_q8_1 *b = dst;
    assert(n % PL_QK8_1 == 0);
    for (int64_t i = 0; i < n / PL_QK8_1; i++, src += PL_QK8_1) {
        float d = absmax_ps(src, PL_QK8_1) / 127.f;
        float id = d != 0.f ? 1.f / d : 0.f;
        b[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        int32_t sum = q8_block(src, b[i].qs, id);
        b[i].s = _cvtss_sh((float)sum * d, _MM_FROUND_TO_NEAREST_INT);
    }
}

/* The first element of largest magnitude, with its sign (as the reference's scan). */
static float signed_absmax_256(const float *x) {
    float amax = absmax_ps(x, PL_QK_K);
    __m256 va = _mm256_set1_ps(amax);
    for (int j = 0; j < PL_QK_K; j += 8) {
        int m = _mm256_movemask_ps(_mm256_cmp_ps(abs_ps(_mm256_loadu_ps(x + j)), va, _CMP_EQ_OQ));
        if (m)
            return x[j + __builtin_ctz((unsigned)m)];
    }
    return 0.f;
}

static void q8_K_from_f32(const float *restrict src, void *restrict dst, int64_t n) {
    struct pl_block_q8_K *b = dst;
    assert(n % PL_QK_K == 0);
    for (int64_t i = 0; i < n / PL_QK_K; i++, src += PL_QK_K) {
        float max = signed_absmax_256(src);
        if (max == 0.f || max != max) {
            memset(&b[i], 0, sizeof(b[i]));
            continue;
        }
        float iscale = -127.f / max;
        __m256 vs = _mm256_set1_ps(iscale);
        for (int j = 0; j < PL_QK_K; j += 32) {
            __m256i q[4];
            for (int k = 0; k < 4; k++) {
                /* clamping before rounding to nearest even = the reference's clamp after */
                __m256 v =
                    clamp_nan0(_mm256_mul_ps(_mm256_loadu_ps(src + j + 8 * k), vs), -128.f, 127.f);
                q[k] = _mm256_cvttps_epi32(
                    _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            }
            __m256i p = pack_i32x32(q[0], q[1], q[2], q[3]);
            _mm256_storeu_si256((__m256i *)(void *)(b[i].qs + j), p);
            /* sums of 8 biased bytes per 64-bit lane; a 16-sum is two lanes - 2 * 1024 */
            __m256i s = _mm256_sad_epu8(_mm256_xor_si256(p, _mm256_set1_epi8((char)0x80)),
                                        _mm256_setzero_si256());
            s = _mm256_add_epi64(s, _mm256_srli_si256(s, 8));
            b[i].bsums[j / 16] = (int16_t)(_mm256_extract_epi32(s, 0) - 2048);
            b[i].bsums[j / 16 + 1] = (int16_t)(_mm256_extract_epi32(s, 4) - 2048);
        }
        b[i].d = 1.f / iscale;
    }
}

/* ---- Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 ---- */

/* With more than two tokens, the array acc (float accumulators, or a super-block's scale
 * vectors) sent to memory at this point: the 16 ymm registers then hold the integer sums and
 * the unpacked weights of what follows instead of spilling them in the inner loop. Memory
 * or register, the float operations are the same. */
#define K_NT_PARK(acc)                                                                             \
    do {                                                                                           \
        if (NT > 2)                                                                                \
            __asm__ volatile("" : "+m"(acc));                                                      \
    } while (0)

/* The 32-element block types' integer dot products in two steps: the weight block's quants
 * unpacked (once for all tokens in vec_dotn), then their products with one activation
 * block, per int32 lane. Exact for every input byte. */
struct b32u {
    __m256i a, b;
};

/* (u - off) . y of unsigned quants u with an offset (Q4_0: 8, Q5_0: 16; AVX-VNNI: up to
 * 255) as u . y - off . y: each pair sum stays within int16 (AVX-VNNI: int32 lanes). */
static inline __m256i offset_dot(__m256i u, __m256i y, char off) {
#ifdef PL_QUANT_AVXVNNI
    return _mm256_sub_epi32(
        _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, y),
        _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(off), y));
#else
    __m256i p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(u, y),
                                   _mm256_maddubs_epi16(_mm256_set1_epi8(off), y));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
#endif
}

static inline struct b32u q4_0_u(const struct pl_block_q4_0 *a) {
    return (struct b32u){nibbles32(a->qs), _mm256_setzero_si256()};
}
static inline __m256i q4_0_du(struct b32u u, const struct pl_block_q8_0 *b) {
    return offset_dot(u.a, load256(b->qs), 8);
}

/* Q4_1: u . y; the minimum goes through the Q8_1 sum. */
static inline struct b32u q4_1_u(const struct pl_block_q4_1 *a) {
    return (struct b32u){nibbles32(a->qs), _mm256_setzero_si256()};
}
static inline __m256i q4_1_du(struct b32u u, const struct pl_block_q8_1 *b) {
    return mad_us(u.a, load256(b->qs));
}

/* The 5-bit quants of a Q5 block in element order. */
static inline __m256i q5_quants(const uint8_t *qs, const uint8_t *qh) {
    __m256i hi = _mm256_and_si256(bits32_mask(load_u32(qh)), _mm256_set1_epi8(0x10));
    return _mm256_or_si256(nibbles32(qs), hi);
}

static inline struct b32u q5_0_u(const struct pl_block_q5_0 *a) {
    return (struct b32u){q5_quants(a->qs, a->qh), _mm256_setzero_si256()};
}
static inline __m256i q5_0_du(struct b32u u, const struct pl_block_q8_0 *b) {
    return offset_dot(u.a, load256(b->qs), 16);
}

static inline struct b32u q5_1_u(const struct pl_block_q5_1 *a) {
    return (struct b32u){q5_quants(a->qs, a->qh), _mm256_setzero_si256()};
}
static inline __m256i q5_1_du(struct b32u u, const struct pl_block_q8_1 *b) {
    return mad_us(u.a, load256(b->qs));
}

/* Q8_0: w . y sign-extended to 16 bits: exact for every int8 pair, -128 * -128 included (the
 * abs/sign trick with maddubs is not); int16 products, int32 sums. With AVX-VNNI, w + 128 as
 * unsigned bytes (the sign bit flipped), then offset_dot's (w + 128) . y - 128 . y: exact
 * too, and three instructions per token where the widening takes five. */
static inline struct b32u q8_0_u(const struct pl_block_q8_0 *a) {
#ifdef PL_QUANT_AVXVNNI
    return (struct b32u){_mm256_xor_si256(load256(a->qs), _mm256_set1_epi8((char)0x80)),
                         _mm256_setzero_si256()};
#else
    return (struct b32u){_mm256_cvtepi8_epi16(load128(a->qs)),
                         _mm256_cvtepi8_epi16(load128(a->qs + 16))};
#endif
}
static inline __m256i q8_0_du(struct b32u u, const struct pl_block_q8_0 *b) {
#ifdef PL_QUANT_AVXVNNI
    return offset_dot(u.a, load256(b->qs), (char)0x80);
#else
    __m256i y0 = _mm256_cvtepi8_epi16(load128(b->qs));
    __m256i y1 = _mm256_cvtepi8_epi16(load128(b->qs + 16));
    return _mm256_add_epi32(_mm256_madd_epi16(u.a, y0), _mm256_madd_epi16(u.b, y1));
#endif
}

/* The fp16 values at p of 4 consecutive blocks (stride bytes apart) as 4 floats: gathered
 * into one 64-bit word and converted by one VCVTPH2PS. */
static inline __m128 halves4(const uint8_t *p, size_t stride) {
    uint64_t h = 0;
    for (int k = 0; k < 4; k++) {
        uint16_t v;
        memcpy(&v, p + k * stride, sizeof(v));
        h |= (uint64_t)v << (16 * k);
    }
    return _mm_cvtph_ps(_mm_cvtsi64_si128((long long)h));
}

/* vec_dot / vec_dotn of the 32-element block types, NT tokens (1 .. PL_QUANT_DOTN_MAX,
 * constant after inlining) against one weight row: per token 4 blocks per iteration into four
 * accumulators (one chain would leave the FMA latency, 4 cycles, as the bound per block),
 * their 4 scale products dw x dx made at once from the halves converted 4 at a time
 * (halves4) and read back by broadcast loads, which take no vector ALU (one block at a time,
 * two conversions, a multiply and a broadcast per block had cost about as much as its
 * integer dot product: one core of the Zen 5 VM, L2-resident rows, Q4_0 15.6 -> 18.6 GB/s,
 * Q8_0 30.7 -> 33.8). With a minimum (Q4_1, Q5_1: MIN 1), m x s of each block sums in a
 * vector of 4 beside them. The weights' quants and halves are unpacked once for all tokens;
 * per token the operations are vec_dot's, so vec_dotn gives each token vec_dot's bits. With
 * more than two tokens the accumulators live in memory between blocks (K_NT_PARK).
 * PF: lines prefetched per 4 blocks. */
#define DEFINE_VEC_DOT32(name, WT, XT, unpack, dotu, MIN, PF)                                      \
    static inline __attribute__((always_inline)) void name##_nt(                                   \
        int64_t n, const void *restrict w, const void *const *x, float *out, const int NT) {       \
        const struct WT *a = w;                                                                    \
        const struct XT *b[PL_QUANT_DOTN_MAX];                                                     \
        __m256 acc[PL_QUANT_DOTN_MAX][4];                                                          \
        __m128 ms[PL_QUANT_DOTN_MAX];                                                              \
        float summ[PL_QUANT_DOTN_MAX];                                                             \
        for (int t = 0; t < NT; t++) {                                                             \
            b[t] = x[t];                                                                           \
            for (int k = 0; k < 4; k++)                                                            \
                acc[t][k] = _mm256_setzero_ps();                                                   \
            ms[t] = _mm_setzero_ps();                                                              \
            summ[t] = 0.0f;                                                                        \
        }                                                                                          \
        const int64_t nb = n / 32;                                                                 \
        int64_t i = 0;                                                                             \
        assert(n % 32 == 0);                                                                       \
        for (; i + 4 <= nb; i += 4) {                                                              \
            _Alignas(16) float sc[PL_QUANT_DOTN_MAX][4];                                           \
            pf(&a[i], (PF));                                                                       \
            const __m128 dw = halves4((const uint8_t *)&a[i], sizeof(*a));                         \
            /* m and s follow d in both blocks */                                                  \
            const __m128 mw = MIN ? halves4((const uint8_t *)&a[i] + 2, sizeof(*a)) : dw;          \
            for (int t = 0; t < NT; t++) {                                                         \
                _mm_store_ps(sc[t],                                                                \
                             _mm_mul_ps(dw, halves4((const uint8_t *)&b[t][i], sizeof(*b[t]))));   \
                if (MIN)                                                                           \
                    ms[t] = _mm_add_ps(                                                            \
                        ms[t],                                                                     \
                        _mm_mul_ps(mw, halves4((const uint8_t *)&b[t][i] + 2, sizeof(*b[t]))));    \
            }                                                                                      \
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {                                  \
                const struct b32u u = unpack(&a[i + k]);                                           \
                for (int t = 0; t < NT; t++)                                                       \
                    acc[t][k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dotu(u, &b[t][i + k])),         \
                                                _mm256_broadcast_ss(&sc[t][k]), acc[t][k]);        \
                K_NT_PARK(acc);                                                                    \
            }                                                                                      \
        }                                                                                          \
        for (; i < nb; i++) {                                                                      \
            const uint8_t *pa = (const uint8_t *)&a[i];                                            \
            const struct b32u u = unpack(&a[i]);                                                   \
            for (int t = 0; t < NT; t++) {                                                         \
                const uint8_t *pb = (const uint8_t *)&b[t][i];                                     \
                acc[t][0] =                                                                        \
                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(dotu(u, &b[t][i])),                         \
                                    _mm256_set1_ps(h2f(a[i].d) * h2f(b[t][i].d)), acc[t][0]);      \
                if (MIN)                                                                           \
                    summ[t] +=                                                                     \
                        h2f((uint16_t)(pa[2] | pa[3] << 8)) * h2f((uint16_t)(pb[2] | pb[3] << 8)); \
            }                                                                                      \
        }                                                                                          \
        for (int t = 0; t < NT; t++) {                                                             \
            const float sm = summ[t] + hsum128_ps(ms[t]);                                          \
            out[t] = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[t][0], acc[t][1]),                    \
                                           _mm256_add_ps(acc[t][2], acc[t][3]))) +                 \
                     sm;                                                                           \
        }                                                                                          \
    }

DEFINE_VEC_DOT32(vec_dot_q4_0, pl_block_q4_0, pl_block_q8_0, q4_0_u, q4_0_du, 0, 2)
DEFINE_VEC_DOT32(vec_dot_q4_1, pl_block_q4_1, pl_block_q8_1, q4_1_u, q4_1_du, 1, 2)
DEFINE_VEC_DOT32(vec_dot_q5_0, pl_block_q5_0, pl_block_q8_0, q5_0_u, q5_0_du, 0, 2)
DEFINE_VEC_DOT32(vec_dot_q5_1, pl_block_q5_1, pl_block_q8_1, q5_1_u, q5_1_du, 1, 2)
DEFINE_VEC_DOT32(vec_dot_q8_0, pl_block_q8_0, pl_block_q8_0, q8_0_u, q8_0_du, 0, 3)
PL_QUANT_DEFINE_DOT1(vec_dot_q4_0, vec_dot_q4_0_nt)
PL_QUANT_DEFINE_DOT1(vec_dot_q4_1, vec_dot_q4_1_nt)
PL_QUANT_DEFINE_DOT1(vec_dot_q5_0, vec_dot_q5_0_nt)
PL_QUANT_DEFINE_DOT1(vec_dot_q5_1, vec_dot_q5_1_nt)
PL_QUANT_DEFINE_DOT1(vec_dot_q8_0, vec_dot_q8_0_nt)
PL_QUANT_DEFINE_DOTN(vec_dotn_q4_0, vec_dot_q4_0_nt)
PL_QUANT_DEFINE_DOTN(vec_dotn_q4_1, vec_dot_q4_1_nt)
PL_QUANT_DEFINE_DOTN(vec_dotn_q5_0, vec_dot_q5_0_nt)
PL_QUANT_DEFINE_DOTN(vec_dotn_q5_1, vec_dot_q5_1_nt)
PL_QUANT_DEFINE_DOTN(vec_dotn_q8_0, vec_dot_q8_0_nt)

/* ---- K-quants ---- */

/* For the 16-element sub-blocks of Q2_K/Q3_K/Q6_K: a chunk of 32 consecutive elements k
 * (0..7) covers sub-blocks 2k and 2k+1; its int16 scale vector holds sc[2k] in the low
 * 128-bit lane and sc[2k+1] in the high one. sc8: the 16 scales as int8 in both 128-bit
 * lanes; byte pairs (s, s) read as s * 257, shifted down arithmetically to s: two
 * operations (extracting int16 pairs from the widened scales took four). */
static inline __m256i chunk_scales8(__m256i sc8, int k) {
    const __m256i idx = _mm256_setr_epi8(
        (char)(2 * k), (char)(2 * k), (char)(2 * k), (char)(2 * k), (char)(2 * k), (char)(2 * k),
        (char)(2 * k), (char)(2 * k), (char)(2 * k), (char)(2 * k), (char)(2 * k), (char)(2 * k),
        (char)(2 * k), (char)(2 * k), (char)(2 * k), (char)(2 * k), (char)(2 * k + 1),
        (char)(2 * k + 1), (char)(2 * k + 1), (char)(2 * k + 1), (char)(2 * k + 1),
        (char)(2 * k + 1), (char)(2 * k + 1), (char)(2 * k + 1), (char)(2 * k + 1),
        (char)(2 * k + 1), (char)(2 * k + 1), (char)(2 * k + 1), (char)(2 * k + 1),
        (char)(2 * k + 1), (char)(2 * k + 1), (char)(2 * k + 1));
    return _mm256_srai_epi16(_mm256_shuffle_epi8(sc8, idx), 8);
}

/* The 2-bit field s (0..3) of the 32 bytes q: (q >> 2s) & 3. */
static inline __m256i crumbs(__m256i q, int s) {
    return _mm256_and_si256(_mm256_srli_epi16(q, 2 * s), _mm256_set1_epi8(3));
}

/* The K-quant row kernels below take NT tokens (1 .. PL_QUANT_DOTN_MAX, a constant after
 * inlining) against one weight row: the weights' unpacking, which costs about as much as a
 * token's multiply-adds, is done once per super-block for all of them, and per token the
 * operations are the same in the same order, so vec_dot (NT = 1) and vec_dotn give a token
 * the same bits. A prompt's rows without tiles, and the decode step of several sessions,
 * take the tokens 8 at a time (matmul.c). */
#define K_NT_BEGIN(BT)                                                                             \
    const struct BT *b[PL_QUANT_DOTN_MAX];                                                         \
    float sum[PL_QUANT_DOTN_MAX];                                                                  \
    for (int t = 0; t < NT; t++) {                                                                 \
        b[t] = x[t];                                                                               \
        sum[t] = 0.0f;                                                                             \
    }                                                                                              \
    assert(n % PL_QK_K == 0)
#define K_NT_END                                                                                   \
    for (int t = 0; t < NT; t++)                                                                   \
    out[t] = sum[t]

/* The 8 chunk scale vectors of a super-block (chunk_scales8): with many tokens made once
 * before the tokens' loops and kept in memory (K_NT_PARK), where the multiply-adds read them
 * as operands instead of holding them in registers; with one or two, made where used (K_CS:
 * a store and a load per chunk cost the single token ~7%). */
#define K_CHUNK_SCALES(cs, sc8)                                                                    \
    do {                                                                                           \
        if (NT > 2)                                                                                \
            for (int k_ = 0; k_ < 8; k_++)                                                         \
                (cs)[k_] = chunk_scales8((sc8), k_);                                               \
        K_NT_PARK(cs);                                                                             \
    } while (0)
#define K_CS(cs, sc8, k) (NT > 2 ? (cs)[k] : chunk_scales8((sc8), (k)))

/* Ends a chunk's multiply-adds with every token's integer sum in a register: without it GCC
 * interleaves the chunks' loads and products across tokens and keeps the sums on the stack
 * (vec_dotn of 8 tokens ~20% slower). Changes no result. */
#define K_NT_HOLD(acc)                                                                             \
    do {                                                                                           \
        for (int t_ = 0; t_ < NT; t_++)                                                            \
            __asm__("" : "+x"((acc)[t_]));                                                         \
    } while (0)

static inline __attribute__((always_inline)) void
q2_K_n(int64_t n, const void *restrict w, const void *const *x, float *out, const int NT) {
    const struct pl_block_q2_K *a = w;
    K_NT_BEGIN(pl_block_q8_K);
    __m256 vs[PL_QUANT_DOTN_MAX], vm[PL_QUANT_DOTN_MAX];
    for (int t = 0; t < NT; t++) {
        vs[t] = _mm256_setzero_ps();
        vm[t] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < n / PL_QK_K; i++) {
        pf(&a[i], 2);
        __m128i raw = load128(a[i].scales);
        const __m128i sc = _mm_and_si128(raw, _mm_set1_epi8(0x0F));
        const __m256i sc8 = _mm256_broadcastsi128_si256(sc);
        __m256i cs[8];
        K_CHUNK_SCALES(cs, sc8);
        __m256i m16 =
            _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0F)));
        __m256i acc[PL_QUANT_DOTN_MAX];
        for (int t = 0; t < NT; t++)
            acc[t] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i q = load256(a[i].qs + 32 * h);
            for (int s = 0; s < 4; s++) {
                int k = 4 * h + s;
                const __m256i u = crumbs(q, s);
                for (int t = 0; t < NT; t++) {
                    __m256i p = _mm256_maddubs_epi16(u, load256(b[t][i].qs + 32 * k));
                    acc[t] = madd_acc(acc[t], p, K_CS(cs, sc8, k), NT > 1);
                }
                K_NT_HOLD(acc);
            }
        }
        const float d = h2f(a[i].d), dm = h2f(a[i].dmin);
        for (int t = 0; t < NT; t++) {
            const __m256i summ = _mm256_madd_epi16(m16, load256(b[t][i].bsums));
            vs[t] =
                _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[t]), _mm256_set1_ps(b[t][i].d * d), vs[t]);
            vm[t] =
                _mm256_fmadd_ps(_mm256_cvtepi32_ps(summ), _mm256_set1_ps(b[t][i].d * dm), vm[t]);
        }
        K_NT_PARK(vs);
        K_NT_PARK(vm);
    }
    for (int t = 0; t < NT; t++)
        sum[t] = hsum_ps(vs[t]) - hsum_ps(vm[t]);
    K_NT_END;
}

/* The 16 signed 6-bit scales of a Q3_K block (stored value - 32), as int8. */
static inline __m128i q3k_scales(const uint8_t *s) {
    uint32_t w0 = load_u32(s), w1 = load_u32(s + 4), w2 = load_u32(s + 8);
    const uint32_t m4 = 0x0F0F0F0F, m2 = 0x03030303;
    __m128i v = _mm_setr_epi32((int)((w0 & m4) | ((w2 & m2) << 4)),
                               (int)((w1 & m4) | (((w2 >> 2) & m2) << 4)),
                               (int)(((w0 >> 4) & m4) | (((w2 >> 4) & m2) << 4)),
                               (int)(((w1 >> 4) & m4) | (((w2 >> 6) & m2) << 4)));
    return _mm_sub_epi8(v, _mm_set1_epi8(32));
}

static inline __attribute__((always_inline)) void
q3_K_n(int64_t n, const void *restrict w, const void *const *x, float *out, const int NT) {
    const struct pl_block_q3_K *a = w;
    K_NT_BEGIN(pl_block_q8_K);
    __m256 vs[PL_QUANT_DOTN_MAX];
    for (int t = 0; t < NT; t++)
        vs[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / PL_QK_K; i++) {
        pf(&a[i], 2);
        const __m128i sc = q3k_scales(a[i].scales);
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc);
        const __m256i sc8 = _mm256_broadcastsi128_si256(sc);
        __m256i cs[8];
        K_CHUNK_SCALES(cs, sc8);
        /* q = low 2 bits | hmask bit << 2 (0..7), value q - 4: the -4 goes through bsums */
        __m256i acc[PL_QUANT_DOTN_MAX];
        for (int t = 0; t < NT; t++)
            acc[t] = _mm256_sub_epi32(
                _mm256_setzero_si256(),
                _mm256_slli_epi32(_mm256_madd_epi16(sc16, load256(b[t][i].bsums)), 2));
        __m256i hm = load256(a[i].hmask);
        for (int h = 0; h < 2; h++) {
            __m256i q = load256(a[i].qs + 32 * h);
            for (int s = 0; s < 4; s++) {
                int k = 4 * h + s;
                __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, k), _mm256_set1_epi8(1));
                const __m256i u = _mm256_or_si256(crumbs(q, s), _mm256_slli_epi16(hb, 2));
                for (int t = 0; t < NT; t++) {
                    __m256i p = _mm256_maddubs_epi16(u, load256(b[t][i].qs + 32 * k));
                    acc[t] = madd_acc(acc[t], p, K_CS(cs, sc8, k), NT > 1);
                }
                K_NT_HOLD(acc);
            }
        }
        const float d = h2f(a[i].d);
        for (int t = 0; t < NT; t++)
            vs[t] =
                _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[t]), _mm256_set1_ps(d * b[t][i].d), vs[t]);
        K_NT_PARK(vs);
    }
    for (int t = 0; t < NT; t++)
        sum[t] = hsum_ps(vs[t]);
    K_NT_END;
}

/* The 8 sums bsums[2j] + bsums[2j+1] of a Q8_K block, as int16 in one vector. */
static inline __m128i q8k_pair_sums(const int16_t *bsums) {
    return _mm_hadd_epi16(load128(bsums), load128(bsums + 8));
}

/* Q4_K (q5 = 0) or Q5_K (q5 = 1, its fifth bits from qh). Per token two float vectors carry
 * the row across super-blocks: the scaled sums (8 lanes of int32 sub-block products, times
 * d x the token's d) and the mins' term (4 lanes of mins x activation sums, times dmin x the
 * token's d); they are summed across lanes once, at the row's end. */
static inline __attribute__((always_inline)) void q45_K_n(int64_t n, const void *restrict w,
                                                          const void *const *x, float *out,
                                                          const int NT, const int q5) {
    const uint8_t *a = w;
    const size_t bb = q5 ? sizeof(struct pl_block_q5_K) : sizeof(struct pl_block_q4_K);
    const __m256i m4 = _mm256_set1_epi8(0x0F), bit4 = _mm256_set1_epi8(0x10);
    K_NT_BEGIN(pl_block_q8_K);
    __m256 vs[PL_QUANT_DOTN_MAX];
    __m128 vm[PL_QUANT_DOTN_MAX];
    for (int t = 0; t < NT; t++) {
        vs[t] = _mm256_setzero_ps();
        vm[t] = _mm_setzero_ps();
    }
    for (int64_t i = 0; i < n / PL_QK_K; i++) {
        const uint8_t *blk = a + (size_t)i * bb;
        /* d, dmin and the 12 scale bytes lead both layouts; Q5_K's qh, then qs, follow */
        const uint8_t *qs = blk + 16 + (q5 ? 32 : 0);
        pf(blk, 3);
        uint64_t sc8, m8;
        pl_q4k_scales_mins8(blk + 4, &sc8, &m8);
        __m128i sc16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc8));
        const __m128i m16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)m8));
        /* sub-block j's scale in every int16 lane */
        __m256i cs[8];
        for (int j = 0; j < 8; j++)
            cs[j] = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(sc16),
                                        _mm256_set1_epi16((short)(0x0100 + 0x0202 * j)));
        K_NT_PARK(cs);
        /* d and dmin as floats in lanes 0 and 1 */
        const __m128 ddm = _mm_cvtph_ps(_mm_cvtsi32_si128((int)load_u32(blk)));
        __m256i qh = q5 ? load256(blk + 16) : _mm256_setzero_si256();
        __m256i acc[PL_QUANT_DOTN_MAX];
        for (int t = 0; t < NT; t++)
            acc[t] = _mm256_setzero_si256();
        for (int g = 0; g < 4; g++) {
            __m256i q = load256(qs + 32 * g);
            __m256i lo = _mm256_and_si256(q, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (q5) {
                /* bit 2g of qh[l] -> bit 4 of the low quant, bit 2g+1 -> of the high one */
                lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(qh, 4), bit4));
                hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(qh, 3), bit4));
                qh = _mm256_srli_epi16(qh, 2);
            }
            for (int t = 0; t < NT; t++) {
                __m256i p_lo = _mm256_maddubs_epi16(lo, load256(b[t][i].qs + 64 * g));
                __m256i p_hi = _mm256_maddubs_epi16(hi, load256(b[t][i].qs + 64 * g + 32));
                acc[t] = madd_acc(acc[t], p_lo, cs[2 * g], NT > 1);
                acc[t] = madd_acc(acc[t], p_hi, cs[2 * g + 1], NT > 1);
            }
            K_NT_HOLD(acc);
        }
        for (int t = 0; t < NT; t++) {
            const __m128 f = _mm_mul_ps(ddm, _mm_set1_ps(b[t][i].d)); /* d, dmin x token's d */
            vs[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[t]), _mm256_broadcastss_ps(f), vs[t]);
            const __m128i mins = _mm_madd_epi16(q8k_pair_sums(b[t][i].bsums), m16);
            vm[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(mins), _mm_shuffle_ps(f, f, 0x55), vm[t]);
        }
        K_NT_PARK(vs);
        K_NT_PARK(vm);
    }
    for (int t = 0; t < NT; t++) {
        sum[t] = hsum_ps(vs[t]) - hsum128_ps(vm[t]);
    }
    K_NT_END;
}

/* Per token a float vector carries the row across super-blocks (its 8 lanes summed once, at
 * the row's end), as in q45_K_n. */
static inline __attribute__((always_inline)) void
q6_K_n(int64_t n, const void *restrict w, const void *const *x, float *out, const int NT) {
    const struct pl_block_q6_K *a = w;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x30);
    K_NT_BEGIN(pl_block_q8_K);
    __m256 vs[PL_QUANT_DOTN_MAX];
    for (int t = 0; t < NT; t++)
        vs[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / PL_QK_K; i++) {
        pf(&a[i], 4);
        const __m128i raw = load128(a[i].scales);
        const __m256i sc16 = _mm256_cvtepi8_epi16(raw);
        const __m256i sc8 = _mm256_broadcastsi128_si256(raw);
        __m256i cs[8];
        K_CHUNK_SCALES(cs, sc8);
        __m256i acc[PL_QUANT_DOTN_MAX];
        /* q = 6 bits (0..63), value q - 32: the -32 goes through bsums */
        for (int t = 0; t < NT; t++)
            acc[t] = _mm256_sub_epi32(
                _mm256_setzero_si256(),
                _mm256_slli_epi32(_mm256_madd_epi16(sc16, load256(b[t][i].bsums)), 5));
        for (int h = 0; h < 2; h++) {
            __m256i l0 = load256(a[i].ql + 64 * h), l1 = load256(a[i].ql + 64 * h + 32);
            __m256i qh = load256(a[i].qh + 32 * h);
            __m256i u[4];
            u[0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                   _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2));
            u[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                   _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2));
            u[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                   _mm256_and_si256(qh, m2));
            u[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                   _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2));
            for (int s = 0; s < 4; s++) {
                int k = 4 * h + s;
                for (int t = 0; t < NT; t++) {
                    __m256i p = _mm256_maddubs_epi16(u[s], load256(b[t][i].qs + 32 * k));
                    acc[t] = madd_acc(acc[t], p, K_CS(cs, sc8, k), NT > 1);
                }
                K_NT_HOLD(acc);
            }
        }
        const float d = h2f(a[i].d);
        for (int t = 0; t < NT; t++)
            vs[t] =
                _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[t]), _mm256_set1_ps(d * b[t][i].d), vs[t]);
        K_NT_PARK(vs);
    }
    for (int t = 0; t < NT; t++)
        sum[t] = hsum_ps(vs[t]);
    K_NT_END;
}

#define Q4K_N(n, w, x, out, NT) q45_K_n(n, w, x, out, NT, 0)
#define Q5K_N(n, w, x, out, NT) q45_K_n(n, w, x, out, NT, 1)
PL_QUANT_DEFINE_DOT1(vec_dot_q2_K, q2_K_n)
PL_QUANT_DEFINE_DOT1(vec_dot_q3_K, q3_K_n)
PL_QUANT_DEFINE_DOT1(vec_dot_q4_K, Q4K_N)
PL_QUANT_DEFINE_DOT1(vec_dot_q5_K, Q5K_N)
PL_QUANT_DEFINE_DOT1(vec_dot_q6_K, q6_K_n)
PL_QUANT_DEFINE_DOTN(vec_dotn_q2_K, q2_K_n)
PL_QUANT_DEFINE_DOTN(vec_dotn_q3_K, q3_K_n)
PL_QUANT_DEFINE_DOTN(vec_dotn_q4_K, Q4K_N)
PL_QUANT_DEFINE_DOTN(vec_dotn_q5_K, Q5K_N)
PL_QUANT_DEFINE_DOTN(vec_dotn_q6_K, q6_K_n)

/* ---- The table ---- */

#ifdef PL_QUANT_AVXVNNI
void pl_quant_avxvnni_fill(struct pl_quant_kernels table[_PL_GGML_TYPE_MAX]) {
#else
void pl_quant_avx2_fill(struct pl_quant_kernels table[_PL_GGML_TYPE_MAX]) {
#endif
    (void)pl_quant_prefetch(); /* the kernels' prefetch setting, before any of them runs */
    table[PL_GGML_TYPE_F32].vec_dot = vec_dot_f32;
    table[PL_GGML_TYPE_F16].vec_dot = vec_dot_f16;
    table[PL_GGML_TYPE_F16].from_f32 = f16_from_f32;
    table[PL_GGML_TYPE_BF16].vec_dot = vec_dot_bf16;
    table[PL_GGML_TYPE_BF16].from_f32 = bf16_from_f32;
    table[PL_GGML_TYPE_Q4_0].vec_dot = vec_dot_q4_0;
    table[PL_GGML_TYPE_Q4_0].vec_dotn = vec_dotn_q4_0;
    table[PL_GGML_TYPE_Q4_1].vec_dot = vec_dot_q4_1;
    table[PL_GGML_TYPE_Q4_1].vec_dotn = vec_dotn_q4_1;
    table[PL_GGML_TYPE_Q5_0].vec_dot = vec_dot_q5_0;
    table[PL_GGML_TYPE_Q5_0].vec_dotn = vec_dotn_q5_0;
    table[PL_GGML_TYPE_Q5_1].vec_dot = vec_dot_q5_1;
    table[PL_GGML_TYPE_Q5_1].vec_dotn = vec_dotn_q5_1;
    table[PL_GGML_TYPE_Q8_0].vec_dot = vec_dot_q8_0;
    table[PL_GGML_TYPE_Q8_0].vec_dotn = vec_dotn_q8_0;
    table[PL_GGML_TYPE_Q8_0].from_f32 = q8_0_from_f32;
    table[PL_GGML_TYPE_Q8_1].from_f32 = q8_1_from_f32;
    table[PL_GGML_TYPE_Q2_K].vec_dot = vec_dot_q2_K;
    table[PL_GGML_TYPE_Q2_K].vec_dotn = vec_dotn_q2_K;
    table[PL_GGML_TYPE_Q3_K].vec_dot = vec_dot_q3_K;
    table[PL_GGML_TYPE_Q3_K].vec_dotn = vec_dotn_q3_K;
    table[PL_GGML_TYPE_Q4_K].vec_dot = vec_dot_q4_K;
    table[PL_GGML_TYPE_Q4_K].vec_dotn = vec_dotn_q4_K;
    table[PL_GGML_TYPE_Q5_K].vec_dot = vec_dot_q5_K;
    table[PL_GGML_TYPE_Q5_K].vec_dotn = vec_dotn_q5_K;
    table[PL_GGML_TYPE_Q6_K].vec_dot = vec_dot_q6_K;
    table[PL_GGML_TYPE_Q6_K].vec_dotn = vec_dotn_q6_K;
    table[PL_GGML_TYPE_Q8_K].from_f32 = q8_K_from_f32;
}
