/* SPDX-License-Identifier: MIT */
/* Matrix x matrix products of the forward pass (engine-private): a weight matrix times a
 * batch of activation rows, for a range of weight rows. Decode-sized batches use the
 * per-row dot products of the quant dispatch table; larger batches use a tiled kernel when
 * the CPU has one for the weight type: activations are first repacked, PL_MM_TILE tokens
 * per tile, into the lane layout the kernel wants, and each weight block is then unpacked
 * once and multiplied with every token of the tile while it sits in registers. */
#ifndef PL_ENGINE_MATMUL_H
#define PL_ENGINE_MATMUL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pl/engine_quant.h"

struct pl_weight;

#define PL_MM_TILE 16u         /* tokens per activation tile */
#define PL_MM_MIN_TILED_TOK 9u /* fewer tokens: decode vectors, or one half tile (vec_max) */
#define PL_MM_HALF                                                                                 \
    8u                     /* at most this many: one half tile (rows8), e.g. the decode            \
                              step of several sessions, without 8 empty lanes */
#define PL_MM_ROWS 4u      /* weight rows per call of the AVX-512 kernels' rows() */
#define PL_MM_ROWS_MAX 16u /* ... and of any kernel's (the AMX ones take 16) */

/* A tiled kernel for one weight type (engine/arch/<isa>/matmul_*.c). Tiles hold super-blocks
 * of 256 elements (n % 256 == 0); the lane layout (layout: sub-blocks of 32 or 16 elements)
 * is shared by the weight types with the same act_type and layout. A layout holds nt token
 * slots: PL_MM_TILE for prefill tiles, 1 for the decode vectors. */
typedef void (*pl_mm_rows_fn)(int64_t n, const uint8_t *w, size_t row_bytes, uint32_t n_rows,
                              const uint8_t *tiles, size_t tile_bytes, uint32_t n_tiles,
                              float *out);

struct pl_mm_tile_kernel {
    uint32_t act_type; /* enum pl_ggml_type the prep reads: the weight's vec_dot_type */
    uint32_t layout;   /* 32 or 16: sub-block size of the lane layout */
    /* Repack one activation row xq (act_type, n elements) into slot t of a layout of nt
     * slots. */
    void (*prep)(const void *xq, int64_t n, uint8_t *buf, uint32_t nt, uint32_t t);
    /* out[(i * n_rows + r) * PL_MM_TILE + t] = w row r . slot t of tile i, for r < n_rows
     * (1 .. PL_MM_ROWS), i < n_tiles (tiles tile_bytes apart, 64-byte aligned), every
     * slot. Each row is unpacked once per call, for all its tiles. */
    void (*rows)(int64_t n, const uint8_t *w, size_t row_bytes, uint32_t n_rows,
                 const uint8_t *tiles, size_t tile_bytes, uint32_t n_tiles, float *out);
    /* Decode: out[r] = w row r . vec for r < n_rows, vec a one-slot layout. NULL: decode
     * uses the per-row vec_dot of the quant table.
     * Batch invariance: a token's result must not depend on its batch (a session decoded
     * alone and the same session in a step with others give the same greedy tokens), so
     * decode (vec_rows, or the per-row vec_dot) and rows() / rows8() do the same float
     * operations per row and token, from the same exact integer sums:
     *   Q4_K, Q6_K (AMX tiles): per super-block s = fma(da x d, isum, s), then (Q4_K)
     *     s = fma(-(da x dmin), msum, s) - quant_avx512.c's kq_step;
     *   Q4_0, Q8_0: per super-block m_j = isum_j x (da_j x dw_j) for its 8 blocks,
     *     s += ((m0 + m4) + (m2 + m6)) + ((m1 + m5) + (m3 + m7)).
     * The AVX-512 tiles of Q4_K / Q6_K (CPUs without AMX) take the AMX tiles' form. */
    void (*vec_rows)(int64_t n, const uint8_t *w, size_t row_bytes, uint32_t n_rows,
                     const uint8_t *vec, float *out);
    /* rows() over tiles of PL_MM_HALF slots (layouts with nt = PL_MM_HALF), out[(i * n_rows +
     * r) * PL_MM_HALF + t]: per token the same operations in the same order as rows(), so
     * the results are bit-identical. NULL: full tiles only. */
    void (*rows8)(int64_t n, const uint8_t *w, size_t row_bytes, uint32_t n_rows,
                  const uint8_t *tiles, size_t tile_bytes, uint32_t n_tiles, float *out);
    /* Weight rows per call of rows() / rows8() (n_rows 1 .. row_step): PL_MM_ROWS or
     * PL_MM_ROWS_MAX. */
    uint32_t row_step;
    /* Non-NULL: batches below PL_MM_MIN_TILED_TOK use this kernel instead (its prep and
     * vec_rows, or the per-row dot products when it has no vec_rows). */
    const struct pl_mm_tile_kernel *dec;
    /* nv decode vectors at once (2 .. PL_QUANT_DOTN_MAX): out[t][r] = w row r . vec[t],
     * bit-identical to vec_rows() per vector (each row unpacked once for all). NULL: none. */
    void (*vec_rowsn)(int64_t n, const uint8_t *w, size_t row_bytes, uint32_t n_rows,
                      const uint8_t *const *vec, uint32_t nv, float *const *out);
    /* Batches of up to this many tokens take the decode path (one vector per token, or the
     * per-row dot products), larger ones below PL_MM_MIN_TILED_TOK one half tile (rows8):
     * AMX products are cheap enough to win from a few tokens on. 0: PL_MM_MIN_TILED_TOK - 1
     * (the decode path for every batch below the tiles). */
    uint32_t vec_max;
    /* Non-NULL: this kernel for weights repacked at load into the kernel's own layout (same
     * bytes per row; results bit-identical to this kernel's), and repack() writes that
     * layout: dst = the n_rows rows of n elements at src (row_bytes apart), repacked
     * (separate buffers); n_rows is packed->row_group, or what is left of the matrix past its
     * last whole group. See pl_mm_repack_weight(). */
    const struct pl_mm_tile_kernel *packed;
    void (*repack)(int64_t n, size_t row_bytes, uint32_t n_rows, const uint8_t *src, uint8_t *dst);
    /* 0: each row is laid out on its own. G > 1: the layout interleaves rows in groups of G
     * (rows [G g, G g + G), whose G x row_bytes bytes the group occupies in any order), and
     * the rows past the last whole group each on their own. Such a kernel is called only on
     * whole groups: every call's rows start on a group (a multiple of G, or a row past the
     * last whole group) and end on one (the same, or the matrix's end); pl_matmul_rows and
     * pl_matmul_swiglu_rows compute a range that cuts a group through the whole group.
     * G <= PL_MM_ROWS_MAX. */
    uint32_t row_group;
};

/* Layout of nt slots for rows of n_sb = n / 256 super-blocks. The 256 int8 values of a slot's
 * super-block are 64 groups of 4 in the kernel's lane order (group 16k + l: dword lane l of
 * the k-th weight register); a group holds the 4 values of every slot side by side, so one
 * 64-byte load gives 16 slots' values of one group:
 *   qs  [n_sb][64][nt][4] int8;
 *   da  [n_sb][8][nt]     float: the activation scale of each 32-element block;
 *   fs  [n_sb][16][nt]    float: the sum of the int8 values of each sub-block of
 *                         `layout` elements (8 or 16 per super-block; exact), for the
 *                         weights' mins;
 *   ns  [n_sb][16][nt]    int32: minus the sum of the int8 values of each sub-block (the
 *                         prefill kernels' start value for weights with an offset).
 * With nt == 1 (decode vectors) a slot's 256 values and 8 scales are contiguous. */
static inline int8_t *pl_mm_lay_qs(uint8_t *buf, int64_t n, uint32_t nt, int64_t s, uint32_t g,
                                   uint32_t t) {
    (void)n;
    return (int8_t *)(buf + (((size_t)s * 64u + g) * nt + t) * 4u);
}
static inline float *pl_mm_lay_da(uint8_t *buf, int64_t n, uint32_t nt, int64_t s, uint32_t j) {
    return (float *)(void *)(buf + (size_t)(n / 256) * nt * 256u) + ((size_t)s * 8u + j) * nt;
}
static inline float *pl_mm_lay_fs(uint8_t *buf, int64_t n, uint32_t nt, int64_t s, uint32_t j) {
    return (float *)(void *)(buf + (size_t)(n / 256) * nt * (256u + 32u)) +
           ((size_t)s * 16u + j) * nt;
}
static inline int32_t *pl_mm_lay_ns(uint8_t *buf, int64_t n, uint32_t nt, int64_t s, uint32_t j) {
    return (int32_t *)(void *)(buf + (size_t)(n / 256) * nt * (256u + 32u + 64u)) +
           ((size_t)s * 16u + j) * nt;
}

/* Bytes of a layout of nt slots for rows of n elements (n % 256 == 0). */
static inline size_t pl_mm_lay_bytes(int64_t n, uint32_t nt) {
    return (size_t)(n / 256) * nt * (256u + 32u + 64u + 64u);
}

/* Bytes of one tile for rows of n elements (n % 256 == 0). */
size_t pl_mm_tile_bytes(int64_t n);
/* Zero slot t of a tile (padding past the last token). */
void pl_mm_tile_clear(int64_t n, uint8_t *tile, uint32_t t);
/* The same for a layout of nt slots. */
void pl_mm_lay_clear(int64_t n, uint8_t *buf, uint32_t nt, uint32_t t);

/* The tiled kernel for weight type t with rows of n elements, or NULL (none for this CPU,
 * n not a multiple of 256, or the environment refuses AVX-512: pl_quant_env_allows). */
const struct pl_mm_tile_kernel *pl_mm_tile_kernel(uint32_t type, int64_t n);
/* The kernel for weight w: pl_mm_tile_kernel()'s, or its packed form when w was repacked. */
const struct pl_mm_tile_kernel *pl_mm_weight_kernel(const struct pl_weight *w);
/* Rewrite w's rows in place into the packed layout of its kernel (w's memory must be
 * writable: a copy the model owns), once, before any product reads it. Returns 1 (packed),
 * 0 (no packed layout for this type, CPU or shape; w unchanged), -ENOMEM. */
int pl_mm_repack_weight(struct pl_weight *w);
/* Which types have a packed layout where the kernels offer one, from PICOLM_REPACK (read
 * once): "all" every such type, Q4_K, Q4_0 and (rows of up to 3072) Q6_K in groups of 4 rows;
 * "rows" what CPUs other than AMD's get by default: all but Q4_K, whose per-row dot products
 * decode faster there, and Q4_0 and Q6_K packed one row at a time (matmul_avx512.c's x4_here);
 * anything else (auto) "all" on AMD's CPUs, "rows" on others. */
enum pl_mm_repack { PL_MM_REPACK_AUTO, PL_MM_REPACK_ALL, PL_MM_REPACK_ROWS };
enum pl_mm_repack pl_mm_repack_mode(void);
/* The tiled kernels' instruction set ("amx", "avx512"), or NULL when there are none. */
const char *pl_mm_isa(void);

/* out[i] = silu(g[i]) * u[i] for i < n, silu(x) = x / (1 + exp(-x)); out may be g or u.
 * Every SwiGLU of the forward pass goes through pl_mm_swiglu(), so a value's result does not
 * depend on the path (decode, prefill, fused or not) that computed it. */
typedef void (*pl_mm_swiglu_fn)(float *out, const float *g, const float *u, size_t n);
void pl_mm_swiglu(float *out, const float *g, const float *u, size_t n);
/* The portable reference: expf from libm. */
void pl_mm_swiglu_scalar(float *out, const float *g, const float *u, size_t n);

/* y[i] = (x[i] * scale) * w[i] for i < n, scale = 1 / sqrtf(mean + eps), mean the float of
 * the double sum of the float squares x[i]^2 over n: ggml_rms_norm followed by ggml_mul. The
 * sum runs in 8 partial sums (part k takes the elements i = k mod 8, in order), added as
 * ((p0 + p4) + (p2 + p6)) + ((p1 + p5) + (p3 + p7)): one chain of n additions, as ggml
 * writes it, was the costliest part of the norms in a decode step; the order differs from
 * ggml's only in double rounding, far below the float mean's. Every path computes the same
 * bits (the partial sums are a vector's lanes). */
typedef void (*pl_mm_rmsnorm_fn)(float *restrict y, const float *restrict x,
                                 const float *restrict w, uint32_t n, float eps);
void pl_mm_rmsnorm(float *restrict y, const float *restrict x, const float *restrict w, uint32_t n,
                   float eps);
/* The portable reference. */
void pl_mm_rmsnorm_scalar(float *restrict y, const float *restrict x, const float *restrict w,
                          uint32_t n, float eps);

#ifdef PL_MM_HAVE_AVX2
/* engine/arch/x86/matmul_avx2.c (call only when the CPU has AVX2 and FMA): pl_mm_swiglu as
 * the AVX-512 kernel's operations on 8 lanes (exp(-|x|) by the same reduction and
 * polynomial, so within a few ulp of the reference where the result is a normal float), and
 * pl_mm_rmsnorm with the 8 partial sums in two vectors of doubles (the reference's bits). */
void pl_mm_swiglu_avx2(float *out, const float *g, const float *u, size_t n);
void pl_mm_rmsnorm_avx2(float *restrict y, const float *restrict x, const float *restrict w,
                        uint32_t n, float eps);
#endif
#ifdef PL_MM_HAVE_NEON
/* engine/arch/arm/matmul_neon.c (AArch64 AdvSIMD): the AVX2 kernels' operations on 4 lanes,
 * with the same properties (SwiGLU within a few ulp of the reference where the result is a
 * normal float; RMSNorm the reference's bits). */
void pl_mm_swiglu_neon(float *out, const float *g, const float *u, size_t n);
void pl_mm_rmsnorm_neon(float *restrict y, const float *restrict x, const float *restrict w,
                        uint32_t n, float eps);
#endif
#ifdef PL_MM_HAVE_AVX512
/* engine/arch/x86/matmul_avx512.c: its kernel for a weight type with rows of n elements
 * (n % 256 == 0; INT64_MAX: the kernel for the longest rows, whose layout is packed one row
 * at a time where it is packed at all), or NULL. Call only when the CPU has AVX-512
 * F/BW/VL/VNNI. */
const struct pl_mm_tile_kernel *pl_mm_avx512_kernel(uint32_t type, int64_t n);
/* pl_mm_swiglu with AVX-512F: x * sigmoid(x), the sigmoid from exp(-|x|) by vexp_avx512.h
 * (within a few ulp of the reference where the result is a normal float; the tail of n by
 * masked loads, so each element takes the same operations wherever it lies). */
void pl_mm_swiglu_avx512(float *out, const float *g, const float *u, size_t n);
/* pl_mm_rmsnorm with AVX-512F: the 8 partial sums in the lanes of one vector of doubles. */
void pl_mm_rmsnorm_avx512(float *restrict y, const float *restrict x, const float *restrict w,
                          uint32_t n, float eps);
#endif
#ifdef PL_MM_HAVE_AMX
/* engine/arch/x86/matmul_amx.c: its kernel for a weight type, or NULL; init links the
 * decode paths (once, before the first lookup). Call only when the CPU has AMX-INT8 and
 * AVX-512 VNNI and the process holds the tile data permission. */
void pl_mm_amx_init(void);
const struct pl_mm_tile_kernel *pl_mm_amx_kernel(uint32_t type);
#endif

/* Activations of one matmul: n_tok rows in the weight's vec_dot_type at xq (stride bytes
 * apart); with tk, also repacked: into ceil(n_tok / PL_MM_TILE) tiles of tile_bytes when
 * n_tok >= PL_MM_MIN_TILED_TOK, else into n_tok one-slot layouts (tile_bytes apart) for
 * tk->vec_rows. */
struct pl_mm_act {
    const uint8_t *xq;
    size_t stride;
    const struct pl_mm_tile_kernel *tk; /* NULL: per-row dot products */
    const uint8_t *tiles;
    size_t tile_bytes;
    uint32_t n_tok;
    /* slots per tile: PL_MM_TILE (also when 0) or PL_MM_HALF (tk->rows8); 1: one decode
     * vector per token (tk->vec_rows / vec_rowsn) */
    uint32_t slots;
};

/* out[t * out_stride + r] (+)= w[r] . act[t] (+ bias[r]) for r in [r_lo, r_hi), every t.
 * With accumulate the product (plus bias) is added to out, as (w.x + b) + out. */
void pl_matmul_rows(const struct pl_weight *w, const struct pl_mm_act *act, float *out,
                    size_t out_stride, const float *bias, bool accumulate, uint32_t r_lo,
                    uint32_t r_hi);

/* SwiGLU: out[t * out_stride + r] = silu(gate[r] . act[t]) * (up[r] . act[t]) for r in
 * [r_lo, r_hi); gate and up must share type and shape. */
void pl_matmul_swiglu_rows(const struct pl_weight *gate, const struct pl_weight *up,
                           const struct pl_mm_act *act, float *out, size_t out_stride,
                           uint32_t r_lo, uint32_t r_hi);

/* Ask for every cache line of [p, p + len): __builtin_prefetch with locality 0 (NTA), 2 (L2)
 * or 3 (T0), a constant where the caller's is. A hint: any address will do. */
static inline void pl_mm_prefetch(const void *p, size_t len, int locality) {
    const uintptr_t e = (uintptr_t)p + len;
    for (uintptr_t a = (uintptr_t)p & ~(uintptr_t)63; a < e; a += 64) {
        if (locality == 0)
            __builtin_prefetch((const void *)a, 0, 0);
        else if (locality == 2)
            __builtin_prefetch((const void *)a, 0, 2);
        else
            __builtin_prefetch((const void *)a, 0, 3);
    }
}

/* A run of weight bytes. */
struct pl_mm_span {
    const uint8_t *p;
    size_t len;
};

/* Most spans pl_mm_decode_spans() returns: a gate and an up stream per part. */
#define PL_MM_DECODE_SPANS (2u * PL_QUANT_STREAMS_MAX)

/* The weight bytes a decode of n_tok (< PL_MM_MIN_TILED_TOK) tokens over rows [r_lo, r_hi)
 * of w reads first (pl_matmul_rows, or with up pl_matmul_swiglu_rows): the start of each
 * stream it reads at once (one per part of the row range; gate and up each where the kernel
 * takes them row by row in turn), up to per_stream bytes of each, into spans. Returns the
 * number of spans. For warming the caches ahead of the loads. */
uint32_t pl_mm_decode_spans(const struct pl_weight *w, const struct pl_weight *up, uint32_t n_tok,
                            uint32_t r_lo, uint32_t r_hi, size_t per_stream,
                            struct pl_mm_span *spans);

#endif
