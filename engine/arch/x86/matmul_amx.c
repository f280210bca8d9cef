/* SPDX-License-Identifier: MIT */
/* Tiled matrix x matrix kernels with AMX-INT8 (see engine/src/matmul.h) for Q4_K and Q6_K
 * weights, for batches of more than AMX_VEC_MAX (4) tokens: prefill tiles and the decode
 * step of five or more sessions. One call takes 16 weight rows.
 *
 * The sub-block scales are folded into the weights: each element becomes the integer
 * w = scale x q (Q4_K: 0..945; Q6_K: scale x (q - 32), -8128..8001), split into its low
 * byte (unsigned) and high byte (signed), w = lo + 256 hi. A super-block's integer sum
 * sum_k w_k y_k - exactly the reference's sum over sub-blocks of scale x (integer sub-block
 * sum) - is then two tile products over the whole super-block, lo . y (TDPBUSD) and
 * hi . y (TDPBSSD), four 64-element chunks each, accumulated in two tiles of 16 rows x NT
 * token sums: no per-sub-block sums leave the tiles. Per row and token the sum becomes a
 * float once per super-block, times d x the token's scale, as in the reference; Q4_K then
 * subtracts dmin x the token's scale x sum_j min_j x (the token's sub-block sum), which is
 * exact in floats (|sum| < 2^21).
 *
 * The rows' super-blocks are unpacked (lo and hi bytes) one at a time into a double-buffered
 * stack buffer (the 16 rows' 8 KiB stay in L1: unpacking 2 or 4 super-blocks at a time cost an
 * 8-token step 2-12% more), which serves every tile of the call, and the same super-block of
 * the next call's rows is prefetched into L2. The products scale x q come from VPMADDUBSW
 * against the scale in every even (then every odd) byte, giving the even and the odd
 * elements' products as words, whose low and high bytes are blended back into element order.
 * Q4_K's elements are taken in the order its nibbles lie (chunk c: sub-blocks s_a(c) and
 * s_a(c) + 2, s_a = 0, 1, 4, 5), and its activations are laid out in the same order; Q6_K
 * takes the AVX-512 kernels' lane order (layout 16, q6k_lanes.h: chunk c holds 4 elements of
 * every sub-block), from the GGUF blocks or from the layout those kernels repack Q6_K into
 * at load, which it then shares with them: the decode steps go to their vec_q6_Kp.
 *
 * Per token the operations do not depend on the other tokens of the tile, nor on how many
 * there are: full tiles (16 tokens, 512-bit float vectors) and half tiles (8 tokens,
 * 256-bit) give bit-identical results. Steps of up to AMX_VEC_MAX tokens use the AVX-512
 * kernels' decode path (the `dec` kernel), bit-identical too. Compiled with -mamx-tile -mamx-int8
 * and AVX-512; matmul.c calls it only on CPUs with AMX-INT8 whose kernel granted this process the
 * tile state (arch_prctl ARCH_REQ_XCOMP_PERM). */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "matmul.h"
#include "q6k_lanes.h"
#include "quant_blocks.h"
#include "pl/engine_types.h"

#define AMX_ROWS PL_MM_ROWS_MAX /* weight rows per call: the rows of a weight tile */

_Static_assert(AMX_ROWS == 16, "a weight tile holds 16 rows");

/* Tile registers: the two accumulators (16 rows x NT int32), and two sets of a low-byte
 * and a high-byte weight tile (16 rows x 64 bytes) with an activation tile (16 rows of
 * NT tokens x 4 bytes), alternating between chunks. */
#define T_CL 0
#define T_CH 1
#define T_AL0 2
#define T_AH0 3
#define T_B0 4
#define T_AL1 5
#define T_AH1 6
#define T_B1 7

struct tilecfg {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

/* Configure the tiles for nt tokens (one ldtilecfg per call). */
static inline void tile_config(uint32_t nt) {
    _Alignas(64) struct tilecfg c;
    memset(&c, 0, sizeof(c));
    c.palette = 1;
    for (int t = 0; t < 8; t++) {
        c.rows[t] = AMX_ROWS;
        c.colsb[t] = (uint16_t)(t == T_CL || t == T_CH || t == T_B0 || t == T_B1 ? 4 * nt : 64);
    }
    _tile_loadconfig(&c);
}

/* ---- Activations: the lane layout of matmul.h, groups in the weights' element order ---- */

/* Q4_K's order: position p of the 64 groups holds group q4k_group(p) of element order. */
static inline uint32_t q4k_group(uint32_t p) {
    static const uint8_t s_a[4] = {0, 1, 4, 5};
    const uint32_t c = p / 16, k = p % 16;
    return 8 * (s_a[c] + (k < 8 ? 0 : 2)) + k % 8;
}

/* Q8_K activations; order 1: Q4_K's, else layout 16's (group 16c + j: elements 16j + 4c ..
 * 16j + 4c + 3). sub: elements per sub-block (32: Q4_K, 16: Q6_K) for the sums fs and ns. */
static inline void prep_q8_K(const void *xq, int64_t n, uint8_t *lay, uint32_t nt, uint32_t t,
                             uint32_t sub, int order) {
    const struct pl_block_q8_K *b = xq;
    for (int64_t s = 0; s < n / 256; s++) {
        for (uint32_t p = 0; p < 64; p++)
            memcpy(pl_mm_lay_qs(lay, n, nt, s, p, t),
                   b[s].qs + 4 * (order ? q4k_group(p) : 4 * (p % 16) + p / 16), 4);
        for (uint32_t j = 0; j < 8; j++)
            pl_mm_lay_da(lay, n, nt, s, j)[t] = b[s].d;
        for (uint32_t j = 0; j < 16; j++) {
            int sum;
            if (sub == 16)
                sum = b[s].bsums[j];
            else
                sum = j < 8 ? b[s].bsums[2 * j] + b[s].bsums[2 * j + 1] : 0;
            pl_mm_lay_fs(lay, n, nt, s, j)[t] = (float)sum; /* the integer sum itself */
            pl_mm_lay_ns(lay, n, nt, s, j)[t] = -sum;
        }
    }
}

static void prep_q4_K(const void *xq, int64_t n, uint8_t *lay, uint32_t nt, uint32_t t) {
    prep_q8_K(xq, n, lay, nt, t, 32, 1);
}

static void prep_q6_K(const void *xq, int64_t n, uint8_t *lay, uint32_t nt, uint32_t t) {
    prep_q8_K(xq, n, lay, nt, t, 16, 0);
}

/* ---- Weights: one super-block of one row to low and high bytes ---- */

/* The unpacked super-blocks of the call's rows: lo/hi[c][r] the 256 low and high bytes of
 * super-block s0 + c of row r (in the kernel's element order), d[c][r] its scale; Q4_K
 * also the integer minimums mn[c][r][j] (as floats: exact) and their scale dmin. Rows past
 * the last hold zeros. */
struct sbuf {
    uint8_t lo[AMX_ROWS][256];
    int8_t hi[AMX_ROWS][256];
    float d[AMX_ROWS], dmin[AMX_ROWS];
    float mn[AMX_ROWS][8];
};

static inline float h2f(uint16_t h) {
    return _cvtsh_ss(h);
}

static inline void unpack_q4_K(const uint8_t *row, int64_t s, uint8_t *lo, int8_t *hi, float *d,
                               float *dmin, float *mn) {
    const struct pl_block_q4_K *b = (const struct pl_block_q4_K *)(const void *)row + s;
    uint64_t scv, mnv; /* the 8 scales and mins, a byte each */
    pl_q4k_scales_mins8(b->scales, &scv, &mnv);
    _mm256_storeu_ps(mn,
                     _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)mnv))));
    *d = h2f(b->d);
    *dmin = h2f(b->dmin);
    /* The 8 scales in every qword; the products scale x q (at most 945) as words for the
     * even and for the odd elements (VPMADDUBSW against the scale in every even, then every
     * odd byte), their low and high bytes blended back into element order. */
    const __m512i scb = _mm512_set1_epi64((long long)scv);
    const __mmask64 odd = 0xAAAAAAAAAAAAAAAAull;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int h = 0; h < 2; h++) {
        /* qs bytes 64h .. 64h + 63: the low nibbles of lanes 0, 1 are sub-block 4h, of lanes
         * 2, 3 sub-block 4h + 2 (chunk 2h); the high nibbles sub-blocks 4h + 1 and 4h + 3
         * (chunk 2h + 1). */
        const __m512i x = _mm512_loadu_si512(b->qs + 64 * h);
        for (int k = 0; k < 2; k++) {
            const int c = 2 * h + k, sa = 4 * h + k, sc2 = sa + 2;
            const __m512i z =
                k ? _mm512_and_si512(_mm512_srli_epi16(x, 4), m4) : _mm512_and_si512(x, m4);
#define CE(v) ((long long)(0x8000800080008000ull | 0x0001000100010001ull * (uint64_t)(v)))
            const __m512i ce = _mm512_set_epi64(CE(sc2), CE(sc2), CE(sc2), CE(sc2), CE(sa), CE(sa),
                                                CE(sa), CE(sa));
#undef CE
            const __m512i co =
                _mm512_or_si512(_mm512_slli_epi16(ce, 8), _mm512_set1_epi16((short)0x0080));
            const __m512i e = _mm512_maddubs_epi16(z, _mm512_shuffle_epi8(scb, ce));
            const __m512i o = _mm512_maddubs_epi16(z, _mm512_shuffle_epi8(scb, co));
            _mm512_store_si512(lo + 64 * c,
                               _mm512_mask_blend_epi8(odd, e, _mm512_slli_epi16(o, 8)));
            _mm512_store_si512(hi + 64 * c,
                               _mm512_mask_blend_epi8(odd, _mm512_srli_epi16(e, 8), o));
        }
    }
}

/* Q6_K without widening, from the four registers of layout 16 (q6k_lanes.h): register c is
 * chunk c, its dword j 4 elements of sub-block j, so one vector of scales serves every
 * chunk. The values are multiplied by their sub-block's scale with VPMADDUBSW against the
 * scale in every even (then every odd) byte, so the even elements' products and the odd
 * elements' come out as words; the offset 32 x scale is subtracted and the low and high bytes
 * of the words are interleaved back into order by byte blends. */
static inline void q6_lohi(const __m512i w[4], const int8_t *scales, uint8_t *lo, int8_t *hi) {
    const __m512i off32 = _mm512_set1_epi8(32);
    const __mmask64 odd = 0xAAAAAAAAAAAAAAAAull;
    const __m512i scb =
        _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)scales));
    /* dword j: byte indices j, -, j, - (even bytes; - is 0x80: zero) and -, j, -, j (odd) */
    const __m512i j = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i ce = _mm512_or_si512(_mm512_or_si512(j, _mm512_slli_epi32(j, 16)),
                                       _mm512_set1_epi32((int)0x80008000u));
    const __m512i co = _mm512_or_si512(_mm512_slli_epi16(ce, 8), _mm512_set1_epi16((short)0x0080));
    const __m512i be = _mm512_shuffle_epi8(scb, ce), bo = _mm512_shuffle_epi8(scb, co);
    const __m512i offw = _mm512_maddubs_epi16(off32, be); /* 32 x scale */
    for (int c = 0; c < 4; c++) {
        const __m512i e = _mm512_sub_epi16(_mm512_maddubs_epi16(w[c], be), offw);
        const __m512i o = _mm512_sub_epi16(_mm512_maddubs_epi16(w[c], bo), offw);
        _mm512_store_si512(lo + 64 * c, _mm512_mask_blend_epi8(odd, e, _mm512_slli_epi16(o, 8)));
        _mm512_store_si512(hi + 64 * c, _mm512_mask_blend_epi8(odd, _mm512_srli_epi16(e, 8), o));
    }
}

static inline void unpack_q6_K(const uint8_t *row, int64_t s, uint8_t *lo, int8_t *hi, float *d,
                               float *dmin, float *mn) {
    const struct pl_block_q6_K *b = (const struct pl_block_q6_K *)(const void *)row + s;
    __m512i w[4];
    (void)mn;
    pl_q6k_lanes(b, w);
    *d = h2f(b->d);
    *dmin = 0.0f;
    q6_lohi(w, b->scales, lo, hi);
}

/* The same from the packed layout. */
static inline void unpack_q6_Kp(const uint8_t *row, int64_t s, uint8_t *lo, int8_t *hi, float *d,
                                float *dmin, float *mn) {
    const uint8_t *p = row + (size_t)s * sizeof(struct pl_block_q6_K);
    __m512i w[4];
    uint16_t dh;
    (void)mn;
    pl_q6kp_lanes(p, w);
    memcpy(&dh, p + PL_Q6KP_D, sizeof(dh));
    *d = h2f(dh);
    *dmin = 0.0f;
    q6_lohi(w, (const int8_t *)(p + PL_Q6KP_SC), lo, hi);
}

/* ---- The row kernel ---- */

/* Super-block s of the row at w, the same row of the next call (16 rows on), fetched into
 * L2 while this call works from its unpacked copy: its 16-row pattern is not one the
 * hardware prefetchers follow. Prefetches past the end of the matrix are harmless hints. */
static inline void prefetch_next(const uint8_t *w, int64_t s, size_t sb_bytes) {
    const char *p = (const char *)w + (size_t)s * sb_bytes;
    for (size_t o = 0; o < sb_bytes + 63; o += 64)
        _mm_prefetch(p + o, _MM_HINT_T1);
}

/* Chunk k of super-block s: the low and high weight tiles (ta_l, ta_h) and the tokens'
 * tile (tb) loaded, both products accumulated. Inside DEFINE_AMX_ROWS. */
#define AMX_CHUNK(ta_l, ta_h, tb, k, NT)                                                           \
    do {                                                                                           \
        _tile_loadd(tb, pl_mm_lay_qs(tl, n, NT, s, 16 * (k), 0), 4 * (NT));                        \
        _tile_loadd(ta_l, cur->lo[0] + 64 * (k), 256);                                             \
        _tile_dpbusd(T_CL, ta_l, tb);                                                              \
        _tile_loadd(ta_h, cur->hi[0] + 64 * (k), 256);                                             \
        _tile_dpbssd(T_CH, ta_h, tb);                                                              \
    } while (0)

#define DEFINE_AMX_ROWS(name, W, NT, unpack, mins, sb_bytes)                                       \
    /* Super-block s of the call's rows into b (rows past n_rows: zeros), fetching the same        \
     * super-block of the next call's rows into L2. */                                             \
    static inline void name##_unpack(const uint8_t *w, size_t row_bytes, uint32_t n_rows,          \
                                     int64_t s, struct sbuf *b) {                                  \
        for (uint32_t r = 0; r < n_rows; r++) {                                                    \
            const uint8_t *wr = w + (size_t)r * row_bytes;                                         \
            prefetch_next(wr + (size_t)AMX_ROWS * row_bytes, s, sb_bytes);                         \
            unpack(wr, s, b->lo[r], b->hi[r], &b->d[r], &b->dmin[r], b->mn[r]);                    \
        }                                                                                          \
        for (uint32_t r = n_rows; r < AMX_ROWS; r++) {                                             \
            memset(b->lo[r], 0, 256);                                                              \
            memset(b->hi[r], 0, 256);                                                              \
            memset(b->mn[r], 0, sizeof(b->mn[r]));                                                 \
            b->d[r] = b->dmin[r] = 0.0f;                                                           \
        }                                                                                          \
    }                                                                                              \
    static void name(int64_t n, const uint8_t *w, size_t row_bytes, uint32_t n_rows,               \
                     const uint8_t *tiles, size_t tile_bytes, uint32_t n_tiles, float *out) {      \
        _Alignas(64) struct sbuf buf[2];                                                           \
        _Alignas(64) int32_t cl[AMX_ROWS][NT], ch[AMX_ROWS][NT];                                   \
        const int64_t n_sb = n / 256;                                                              \
        if (n_rows == 0 || n_rows > AMX_ROWS)                                                      \
            return;                                                                                \
        tile_config(NT);                                                                           \
        name##_unpack(w, row_bytes, n_rows, 0, &buf[0]);                                           \
        for (int64_t s = 0; s < n_sb; s++) {                                                       \
            const struct sbuf *cur = &buf[s & 1];                                                  \
            for (uint32_t i = 0; i < n_tiles; i++) {                                               \
                uint8_t *tl = (uint8_t *)(uintptr_t)(tiles + (size_t)i * tile_bytes);              \
                float *o = out + (size_t)i * n_rows * (NT);                                        \
                _tile_zero(T_CL);                                                                  \
                _tile_zero(T_CH);                                                                  \
                AMX_CHUNK(T_AL0, T_AH0, T_B0, 0, NT);                                              \
                AMX_CHUNK(T_AL1, T_AH1, T_B1, 1, NT);                                              \
                AMX_CHUNK(T_AL0, T_AH0, T_B0, 2, NT);                                              \
                AMX_CHUNK(T_AL1, T_AH1, T_B1, 3, NT);                                              \
                _tile_stored(T_CL, cl, 4 * (NT));                                                  \
                _tile_stored(T_CH, ch, 4 * (NT));                                                  \
                /* With several tiles the next super-block is unpacked here, between the           \
                 * first tile's products and its floats, where it overlaps the products;           \
                 * a single tile unpacks it after its floats. */                                   \
                if (i == 0 && n_tiles > 1 && s + 1 < n_sb)                                         \
                    name##_unpack(w, row_bytes, n_rows, s + 1, &buf[(s + 1) & 1]);                 \
                const __m##W da = _mm##W##_load_ps(pl_mm_lay_da(tl, n, NT, s, 0));                 \
                __m##W sj[8]; /* Q4_K: the tokens' integer sub-block sums */                       \
                for (uint32_t j = 0; (mins) && j < 8; j++)                                         \
                    sj[j] = _mm##W##_load_ps(pl_mm_lay_fs(tl, n, NT, s, j));                       \
                for (uint32_t r = 0; r < n_rows; r++) {                                            \
                    __m##W a = s == 0 ? _mm##W##_setzero_ps() : _mm##W##_loadu_ps(o + r * (NT));   \
                    const __m##W##i isum = _mm##W##_add_epi32(                                     \
                        _mm##W##_load_si##W((const __m##W##i *)(const void *)cl[r]),               \
                        _mm##W##_slli_epi32(                                                       \
                            _mm##W##_load_si##W((const __m##W##i *)(const void *)ch[r]), 8));      \
                    a = _mm##W##_fmadd_ps(_mm##W##_mul_ps(da, _mm##W##_set1_ps(cur->d[r])),        \
                                          _mm##W##_cvtepi32_ps(isum), a);                          \
                    if (mins) {                                                                    \
                        __m##W ms = _mm##W##_setzero_ps();                                         \
                        for (uint32_t j = 0; j < 8; j++)                                           \
                            ms = _mm##W##_fmadd_ps(_mm##W##_set1_ps(cur->mn[r][j]), sj[j], ms);    \
                        a = _mm##W##_fnmadd_ps(                                                    \
                            _mm##W##_mul_ps(da, _mm##W##_set1_ps(cur->dmin[r])), ms, a);           \
                    }                                                                              \
                    _mm##W##_storeu_ps(o + r * (NT), a);                                           \
                }                                                                                  \
            }                                                                                      \
            if (n_tiles == 1 && s + 1 < n_sb)                                                      \
                name##_unpack(w, row_bytes, n_rows, s + 1, &buf[(s + 1) & 1]);                     \
        }                                                                                          \
    }

DEFINE_AMX_ROWS(rows_q4_K, 512, PL_MM_TILE, unpack_q4_K, 1, sizeof(struct pl_block_q4_K))
DEFINE_AMX_ROWS(rows_q6_K, 512, PL_MM_TILE, unpack_q6_K, 0, sizeof(struct pl_block_q6_K))
DEFINE_AMX_ROWS(rows8_q4_K, 256, PL_MM_HALF, unpack_q4_K, 1, sizeof(struct pl_block_q4_K))
DEFINE_AMX_ROWS(rows8_q6_K, 256, PL_MM_HALF, unpack_q6_K, 0, sizeof(struct pl_block_q6_K))
DEFINE_AMX_ROWS(rows_q6_Kp, 512, PL_MM_TILE, unpack_q6_Kp, 0, sizeof(struct pl_block_q6_K))
DEFINE_AMX_ROWS(rows8_q6_Kp, 256, PL_MM_HALF, unpack_q6_Kp, 0, sizeof(struct pl_block_q6_K))

/* ---- The kernel table ---- */

/* The decode paths (dec) are linked by pl_mm_amx_init. Steps of up to AMX_VEC_MAX tokens
 * take them (one pass of the multi-token dot products over the weights), larger ones a half
 * tile here (TinyLlama Q4_K_M, 2 threads, step ms at 4 / 5 / 8 tokens: dot products 37.0 /
 * 44.9 / 68.7, AMX 41.6 / 45.4 / 43). */
#define AMX_VEC_MAX 4u
static struct pl_mm_tile_kernel k_q4_K = {
    PL_GGML_TYPE_Q8_K, 32,   prep_q4_K, rows_q4_K, NULL, rows8_q4_K, AMX_ROWS, NULL, NULL,
    AMX_VEC_MAX,       NULL, NULL,      0};
static struct pl_mm_tile_kernel k_q6_K = {
    PL_GGML_TYPE_Q8_K, 16,   prep_q6_K, rows_q6_K, NULL, rows8_q6_K, AMX_ROWS, NULL, NULL,
    AMX_VEC_MAX,       NULL, NULL,      0};
/* Q6_K repacked at load into the AVX-512 kernels' layout (where they have one packed row by
 * row; not their groups of 4 rows, which these tiles do not read): the tiles here, the decode
 * steps their vec_q6_Kp / vec_q6_Kpn (the same vectors: layout 16). */
static struct pl_mm_tile_kernel k_q6_Kp = {
    PL_GGML_TYPE_Q8_K, 16,   prep_q6_K, rows_q6_Kp, NULL, rows8_q6_Kp, AMX_ROWS, NULL, NULL,
    AMX_VEC_MAX,       NULL, NULL,      0};

void pl_mm_amx_init(void) {
    k_q4_K.dec = pl_mm_avx512_kernel(PL_GGML_TYPE_Q4_K, INT64_MAX);
    const struct pl_mm_tile_kernel *q6 = pl_mm_avx512_kernel(PL_GGML_TYPE_Q6_K, INT64_MAX);
    k_q6_K.dec = q6;
    if (q6 && q6->packed && q6->packed->vec_rows && q6->repack && q6->packed->row_group <= 1) {
        k_q6_Kp.vec_rows = q6->packed->vec_rows;
        k_q6_Kp.vec_rowsn = q6->packed->vec_rowsn;
        k_q6_K.packed = &k_q6_Kp;
        k_q6_K.repack = q6->repack;
    }
}

const struct pl_mm_tile_kernel *pl_mm_amx_kernel(uint32_t type) {
    switch (type) {
    case PL_GGML_TYPE_Q4_K:
        return &k_q4_K;
    case PL_GGML_TYPE_Q6_K:
        return &k_q6_K;
    default:
        return NULL;
    }
}
