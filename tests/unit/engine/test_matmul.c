/* SPDX-License-Identifier: MIT */
/* Unit tests for the matmul drivers (engine/src/matmul.c) and the tiled kernels they call
 * (engine/arch/x86/matmul_avx512.c on CPUs with AVX-512 VNNI): pl_matmul_rows() and
 * pl_matmul_swiglu_rows() on random Q4_0, Q8_0, Q3_K, Q4_K, Q5_K and Q6_K weights, through the
 * tiled prefill kernels (several tiles, a partial last tile, more than one block of tiles, rows
 * that are not a multiple of the kernel's row group, rows longer than one unpacked chunk),
 * the decode vectors (fewer than PL_MM_MIN_TILED_TOK tokens) and the per-row dot products,
 * each compared with a double-precision product of the dequantized weights and quantized
 * activations; a decode step of 2 or 3 tokens also bit for bit with each token alone. Bias,
 * accumulate and an output stride wider than the rows are covered too. Without a tiled kernel for
 * this CPU (or with PICOLM_FORCE_SCALAR=1) only the per-row path runs. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "matmul.h"
#include "model_impl.h"
#include "pl/engine_quant.h"
#include "pl/engine_types.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static float frand(void) { /* uniform in [-1, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / (double)(1ull << 52) - 1.0);
}

/* A random weight matrix of type t: rows of n elements, with per-row magnitudes that vary
 * so the scales differ between rows and blocks. */
struct mat {
    struct pl_weight w;
    uint8_t *data;
    double *deq; /* [rows][n] dequantized */
};

static void mat_make(struct mat *m, uint32_t type, uint32_t n, uint32_t rows) {
    const struct pl_quant_kernels *ref = pl_quant_kernels_ref(type);
    uint64_t rb = 0;
    assert_non_null(ref);
    assert_int_equal(pl_type_row_bytes(type, n, &rb), 0);
    m->data = malloc((size_t)rb * rows);
    m->deq = malloc(sizeof(double) * n * rows);
    float *src = malloc(sizeof(float) * n), *back = malloc(sizeof(float) * n);
    assert_non_null(m->data);
    assert_non_null(m->deq);
    assert_non_null(src);
    assert_non_null(back);
    for (uint32_t r = 0; r < rows; r++) {
        for (uint32_t i = 0; i < n; i++)
            src[i] = frand() * (0.5f + (float)((r * 7 + i / 32) % 5)) + 0.1f * frand();
        ref->from_f32(src, m->data + (size_t)r * rb, n);
        ref->to_f32(m->data + (size_t)r * rb, back, n);
        for (uint32_t i = 0; i < n; i++)
            m->deq[(size_t)r * n + i] = back[i];
    }
    free(src);
    free(back);
    m->w = (struct pl_weight){.data = m->data,
                              .type = type,
                              .n_cols = n,
                              .n_rows = rows,
                              .row_bytes = (size_t)rb,
                              .k = pl_quant_kernels(type)};
    assert_non_null(m->w.k);
    m->w.vk = pl_quant_kernels(m->w.k->vec_dot_type);
    assert_non_null(m->w.vk);
    assert_int_equal(pl_type_row_bytes(m->w.k->vec_dot_type, n, &rb), 0);
    m->w.act_row_bytes = (size_t)rb;
}

static void mat_free(struct mat *m) {
    free(m->data);
    free(m->deq);
}

/* Activations for weight w: n_tok random rows quantized to its vec_dot_type (kept
 * dequantized in deq), repacked for the tiled kernel when there is one (tiled selects the
 * prefill tiles, else the one-slot decode vectors). */
struct acts {
    struct pl_mm_act act;
    uint8_t *xq, *tiles;
    double *deq; /* [n_tok][n] */
};

static void acts_make(struct acts *a, const struct pl_weight *w, uint32_t n_tok) {
    const uint32_t n = w->n_cols;
    const struct pl_quant_kernels *ak = pl_quant_kernels_ref(w->k->vec_dot_type);
    const struct pl_mm_tile_kernel *tk = pl_mm_tile_kernel(w->type, n);
    float *src = malloc(sizeof(float) * n), *back = malloc(sizeof(float) * n);
    assert_non_null(src);
    assert_non_null(back);
    a->xq = malloc(w->act_row_bytes * n_tok);
    a->deq = malloc(sizeof(double) * n * n_tok);
    assert_non_null(a->xq);
    assert_non_null(a->deq);
    for (uint32_t t = 0; t < n_tok; t++) {
        for (uint32_t i = 0; i < n; i++)
            src[i] = frand() * (1.0f + (float)((t + i / 256) % 3));
        ak->from_f32(src, a->xq + (size_t)t * w->act_row_bytes, n);
        ak->to_f32(a->xq + (size_t)t * w->act_row_bytes, back, n);
        for (uint32_t i = 0; i < n; i++)
            a->deq[(size_t)t * n + i] = back[i];
    }
    free(src);
    free(back);
    a->tiles = NULL;
    a->act = (struct pl_mm_act){.xq = a->xq, .stride = w->act_row_bytes, .tk = tk, .n_tok = n_tok};
    if (!tk)
        return;
    if (n_tok >= PL_MM_MIN_TILED_TOK) {
        const uint32_t n_tiles = (n_tok + PL_MM_TILE - 1) / PL_MM_TILE;
        a->act.tile_bytes = pl_mm_tile_bytes(n);
        a->tiles = aligned_alloc(64, a->act.tile_bytes * n_tiles);
        assert_non_null(a->tiles);
        for (uint32_t t = 0; t < n_tiles * PL_MM_TILE; t++) {
            uint8_t *tile = a->tiles + (size_t)(t / PL_MM_TILE) * a->act.tile_bytes;
            if (t < n_tok)
                tk->prep(a->xq + (size_t)t * w->act_row_bytes, n, tile, PL_MM_TILE, t % PL_MM_TILE);
            else
                pl_mm_tile_clear(n, tile, t % PL_MM_TILE);
        }
    } else {
        a->act.slots = 1;
        a->act.tile_bytes = (pl_mm_lay_bytes(n, 1) + 63) & ~(size_t)63; /* as forward.c */
        a->tiles = aligned_alloc(64, a->act.tile_bytes * n_tok);
        assert_non_null(a->tiles);
        for (uint32_t t = 0; t < n_tok; t++)
            tk->prep(a->xq + (size_t)t * w->act_row_bytes, n,
                     a->tiles + (size_t)t * a->act.tile_bytes, 1, 0);
    }
    a->act.tiles = a->tiles;
}

static void acts_free(struct acts *a) {
    free(a->xq);
    free(a->tiles);
    free(a->deq);
}

/* sum_i w[r][i] * x[t][i] and sum_i |w[r][i] * x[t][i]| (the error scale). */
static double dot_ref(const struct mat *m, const struct acts *a, uint32_t r, uint32_t t,
                      double *ret_abs) {
    const uint32_t n = m->w.n_cols;
    double s = 0.0, sa = 0.0;
    for (uint32_t i = 0; i < n; i++) {
        double p = m->deq[(size_t)r * n + i] * a->deq[(size_t)t * n + i];
        s += p;
        sa += fabs(p);
    }
    *ret_abs = sa;
    return s;
}

#define REL_TOL 2e-6 /* of sum |w x|: float accumulation over up to 6400 products */

struct shape {
    uint32_t n, rows, n_tok, r_lo;
};

/* Each shape runs with, for every type: per-row r_lo .. rows, out rows stride rows + 3. */
static const struct shape k_shapes[] = {
    {256, 13, 5, 1},   /* one tile, partial; row groups of 4 + 3 + ... */
    {512, 9, 2, 0},    /* decode vectors */
    {512, 10, 4, 1},   /* decode vectors, four tokens in one pass */
    {256, 7, 3, 1},    /* decode vectors of one super-block, 64-byte aligned slots */
    {2048, 38, 33, 2}, /* 3 tiles, last one partial */
    {6400, 11, 70, 0}, /* 25 super-blocks (2 unpacked chunks), 5 tiles in 2 blocks */
    {768, 22, 1, 5},   /* one token */
    {256, 1100, 1, 7}, /* decode results out in blocks: 9 of OUT_BLOCK, 3 of SWIGLU_ROWS */
    {2304, 9, 1, 1},   /* one token, 9 super-blocks: two full groups of 4 and one of 1 */
    {1024, 37, 2, 0},  /* two tokens, one full group of 4 super-blocks per row */
    {512, 203, 1, 2},  /* one token in 2, 3 or 4 weight streams: parts of unequal length */
    {512, 290, 3, 9},  /* the same for three tokens */
};

static const uint32_t k_types[] = {PL_GGML_TYPE_Q4_0, PL_GGML_TYPE_Q8_0, PL_GGML_TYPE_Q3_K,
                                   PL_GGML_TYPE_Q4_K, PL_GGML_TYPE_Q5_K, PL_GGML_TYPE_Q6_K};

/* a's tokens in one layout of `slots` slots for kernel tk (the rest cleared), as an act for
 * the weight w; *ret_lay: the buffer to free. */
static struct pl_mm_act lay_act(const struct acts *a, const struct pl_weight *w,
                                const struct pl_mm_tile_kernel *tk, uint32_t slots,
                                uint8_t **ret_lay) {
    struct pl_mm_act h = a->act;
    h.tk = tk;
    h.tile_bytes = (pl_mm_lay_bytes(w->n_cols, slots) + 63) & ~(size_t)63;
    h.slots = slots;
    uint8_t *lay = aligned_alloc(64, h.tile_bytes);
    assert_non_null(lay);
    for (uint32_t t = 0; t < slots; t++) {
        if (t < a->act.n_tok)
            tk->prep(a->xq + (size_t)t * w->act_row_bytes, w->n_cols, lay, slots, t);
        else
            pl_mm_lay_clear(w->n_cols, lay, slots, t);
    }
    h.tiles = lay;
    *ret_lay = lay;
    return h;
}

static void check_rows(uint32_t type, const struct shape *sh, bool bias_acc) {
    struct mat m;
    struct acts a;
    const uint32_t stride = sh->rows + 3;
    mat_make(&m, type, sh->n, sh->rows);
    acts_make(&a, &m.w, sh->n_tok);
    float *out = malloc(sizeof(float) * stride * sh->n_tok);
    float *bias = malloc(sizeof(float) * sh->rows);
    assert_non_null(out);
    assert_non_null(bias);
    for (uint32_t r = 0; r < sh->rows; r++)
        bias[r] = frand();
    for (size_t i = 0; i < (size_t)stride * sh->n_tok; i++)
        out[i] = 1000.0f + (float)(i % 7);
    pl_matmul_rows(&m.w, &a.act, out, stride, bias_acc ? bias : NULL, bias_acc, sh->r_lo, sh->rows);
    const struct pl_mm_tile_kernel *tk = pl_mm_tile_kernel(type, sh->n);
    if (tk && sh->n_tok <= PL_MM_HALF) {
        /* The same tokens in one full tile and in one half tile (what a kernel with vec_max
         * takes for such batches): bit-identical to each other and to the decode path above
         * (matmul.h). */
        for (uint32_t slots = PL_MM_HALF; slots <= PL_MM_TILE; slots *= 2) {
            if (slots == PL_MM_HALF && !tk->rows8)
                continue;
            uint8_t *lay;
            const struct pl_mm_act h = lay_act(&a, &m.w, tk, slots, &lay);
            float *out2 = malloc(sizeof(float) * (size_t)stride * sh->n_tok);
            assert_non_null(out2);
            for (size_t i = 0; i < (size_t)stride * sh->n_tok; i++)
                out2[i] = 1000.0f + (float)(i % 7);
            pl_matmul_rows(&m.w, &h, out2, stride, bias_acc ? bias : NULL, bias_acc, sh->r_lo,
                           sh->rows);
            if (memcmp(out2, out, sizeof(float) * (size_t)stride * sh->n_tok) != 0)
                fail_msg("type %u n %u tokens %u: a tile of %u slots differs from the decode "
                         "path",
                         type, sh->n, sh->n_tok, slots);
            free(out2);
            free(lay);
        }
    }
    if (sh->n_tok >= 2 && sh->n_tok < PL_MM_MIN_TILED_TOK) {
        /* Decode of several tokens (tokens in pairs where the kernel has a two-token form):
         * each token bit-identical to that token decoded alone (matmul.h). */
        float *one = malloc(sizeof(float) * stride);
        assert_non_null(one);
        for (uint32_t t = 0; t < sh->n_tok; t++) {
            struct pl_mm_act o = a.act;
            o.n_tok = 1;
            o.xq = a.act.xq + (size_t)t * a.act.stride;
            if (a.act.tiles)
                o.tiles = a.act.tiles + (size_t)t * a.act.tile_bytes;
            for (uint32_t r = 0; r < stride; r++)
                one[r] = 1000.0f + (float)(((size_t)t * stride + r) % 7);
            pl_matmul_rows(&m.w, &o, one, stride, bias_acc ? bias : NULL, bias_acc, sh->r_lo,
                           sh->rows);
            if (memcmp(one, out + (size_t)t * stride, sizeof(float) * stride) != 0)
                fail_msg("type %u n %u: token %u of %u differs from its decode alone", type, sh->n,
                         t, sh->n_tok);
        }
        free(one);
    }
    for (uint32_t t = 0; t < sh->n_tok; t++)
        for (uint32_t r = 0; r < stride; r++) {
            const size_t i = (size_t)t * stride + r;
            const float init = 1000.0f + (float)(i % 7);
            if (r < sh->r_lo || r >= sh->rows) {
                assert_true(out[i] == init); /* outside the rows: untouched */
                continue;
            }
            double sa, want = dot_ref(&m, &a, r, t, &sa);
            double tol = REL_TOL * sa + 1e-6;
            if (bias_acc) {
                want += (double)bias[r] + (double)init;
                tol += 1e-4; /* float rounding of ~1000 */
            }
            if (fabs((double)out[i] - want) > tol)
                fail_msg("type %u n %u tok %u row %u: got %.9g want %.9g (tol %.3g, %s)", type,
                         sh->n, t, r, (double)out[i], want, tol, a.act.tk ? "tiled" : "per-row");
        }
    free(out);
    free(bias);
    acts_free(&a);
    mat_free(&m);
}

static void test_rows(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof(k_types) / sizeof(k_types[0]); i++)
        for (size_t j = 0; j < sizeof(k_shapes) / sizeof(k_shapes[0]); j++)
            check_rows(k_types[i], &k_shapes[j], false);
}

static void test_rows_bias_accumulate(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof(k_types) / sizeof(k_types[0]); i++)
        for (size_t j = 0; j < sizeof(k_shapes) / sizeof(k_shapes[0]); j++)
            check_rows(k_types[i], &k_shapes[j], true);
}

static double silu_d(double x) {
    return x / (1.0 + exp(-x));
}

static void test_swiglu(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof(k_types) / sizeof(k_types[0]); i++)
        for (size_t j = 0; j < sizeof(k_shapes) / sizeof(k_shapes[0]); j++) {
            const struct shape *sh = &k_shapes[j];
            struct mat g, u;
            struct acts a;
            mat_make(&g, k_types[i], sh->n, sh->rows);
            mat_make(&u, k_types[i], sh->n, sh->rows);
            acts_make(&a, &g.w, sh->n_tok);
            float *out = calloc((size_t)sh->rows * sh->n_tok, sizeof(float));
            assert_non_null(out);
            pl_matmul_swiglu_rows(&g.w, &u.w, &a.act, out, sh->rows, sh->r_lo, sh->rows);
            for (uint32_t t = 0; t < sh->n_tok; t++)
                for (uint32_t r = sh->r_lo; r < sh->rows; r++) {
                    double sg, su;
                    const double gv = dot_ref(&g, &a, r, t, &sg), uv = dot_ref(&u, &a, r, t, &su);
                    const double want = silu_d(gv) * uv;
                    /* d(silu(g) u) <= |u| (1.1 dg) + |silu(g)| du */
                    const double tol =
                        (fabs(uv) * 1.1 * sg + (fabs(gv) + 1.0) * su) * REL_TOL + 1e-6;
                    const double got = out[(size_t)t * sh->rows + r];
                    if (fabs(got - want) > tol)
                        fail_msg("swiglu type %u n %u tok %u row %u: got %.9g want %.9g",
                                 k_types[i], sh->n, t, r, got, want);
                }
            /* bit-identical to the two products and pl_mm_swiglu() (however the rows are
             * taken: fused, in weight streams, in tiles) */
            const size_t len = (size_t)sh->rows * sh->n_tok;
            float *go = calloc(len, sizeof(float)), *uo = calloc(len, sizeof(float));
            assert_non_null(go);
            assert_non_null(uo);
            pl_matmul_rows(&g.w, &a.act, go, sh->rows, NULL, false, sh->r_lo, sh->rows);
            pl_matmul_rows(&u.w, &a.act, uo, sh->rows, NULL, false, sh->r_lo, sh->rows);
            for (uint32_t t = 0; t < sh->n_tok; t++) {
                float *o = go + (size_t)t * sh->rows + sh->r_lo;
                pl_mm_swiglu(o, o, uo + (size_t)t * sh->rows + sh->r_lo, sh->rows - sh->r_lo);
            }
            if (memcmp(go, out, len * sizeof(float)) != 0)
                fail_msg("swiglu type %u n %u tokens %u: differs from the two products", k_types[i],
                         sh->n, sh->n_tok);
            free(go);
            free(uo);
            free(out);
            acts_free(&a);
            mat_free(&g);
            mat_free(&u);
        }
}

/* pl_mm_swiglu (the AVX-512 kernel on CPUs with it) against the libm reference
 * pl_mm_swiglu_scalar, element by element: every length 0..67 (full vectors and each tail),
 * in place and not, on values from -120 to 120 (where exp(-x) overflows) and the special
 * values; and each element the same whatever its position (the tail is not a separate
 * computation). */
static void test_swiglu_elementwise(void **state) {
    (void)state;
    enum { N = 67 };
    float g[N], u[N], want[N], got[N], inplace[N];
    const float special[] = {0.0f,   -0.0f,   INFINITY, 1e-40f, -1e-40f, 88.5f,
                             -88.5f, -103.0f, -120.0f,  120.0f, 3.0e38f, -3.0e38f};
    for (int rep = 0; rep < 40; rep++) {
        for (int i = 0; i < N; i++) {
            const float scale = rep % 4 == 0 ? 120.0f : rep % 4 == 1 ? 8.0f : 1.0f;
            g[i] = frand() * scale;
            u[i] = frand() * 4.0f;
        }
        if (rep == 0)
            memcpy(g, special, sizeof(special));
        for (size_t n = 0; n <= N; n++) {
            for (size_t i = 0; i < N; i++)
                got[i] = inplace[i] = -7.0f; /* past n: must stay */
            pl_mm_swiglu_scalar(want, g, u, n);
            pl_mm_swiglu(got, g, u, n);
            memcpy(inplace, g, n * sizeof(float));
            pl_mm_swiglu(inplace, inplace, u, n);
            for (size_t i = 0; i < N; i++) {
                if (i >= n) {
                    assert_true(got[i] == -7.0f && inplace[i] == -7.0f);
                    continue;
                }
                assert_memory_equal(&got[i], &inplace[i], sizeof(float));
                if (isnan(want[i])) {
                    assert_true(isnan(got[i]));
                    continue;
                }
                /* a few ulp where the result is normal; below that, tiny either way (the
                 * reference's quotient is -0 once exp(-x) overflows) */
                const double d = fabs((double)got[i] - (double)want[i]);
                if (d > 4e-7 * fabs((double)want[i]) + 1e-35)
                    fail_msg("swiglu(%.9g) * %.9g: got %.9g want %.9g", (double)g[i], (double)u[i],
                             (double)got[i], (double)want[i]);
            }
        }
        /* The same value at another position gives the same bits. */
        float one[1];
        pl_mm_swiglu(one, &g[N - 1], &u[N - 1], 1);
        assert_memory_equal(one, &got[N - 1], sizeof(float));
    }
    const float nan_in = NAN, one_u = 1.0f;
    float r;
    pl_mm_swiglu(&r, &nan_in, &one_u, 1);
    assert_true(isnan(r));
}

/* Products with w (through act, or a half tile of act's tokens when half) into out. */
static void run_rows(const struct pl_weight *w, const struct acts *a, bool half, float *out,
                     size_t out_len) {
    struct pl_mm_act h = a->act;
    uint8_t *lay = NULL;
    h.tk = pl_mm_weight_kernel(w);
    if (half)
        h = lay_act(a, w, h.tk, PL_MM_HALF, &lay);
    for (size_t i = 0; i < out_len; i++)
        out[i] = 0.5f * (float)(i % 5);
    pl_matmul_rows(w, &h, out, w->n_rows, NULL, true, 1, w->n_rows);
    free(lay);
}

/* Weights repacked into a tiled kernel's own layout (pl_mm_repack_weight, done at load for
 * the model's copy) give bit for bit the products of the GGUF layout, on every path (decode
 * vectors one by one and several at once, half tiles, full tiles, SwiGLU); types without a
 * packed layout are left alone. */
static void test_packed_weights_bit_identical(void **state) {
    (void)state;
    uint32_t n_packed = 0;
    for (size_t i = 0; i < sizeof(k_types) / sizeof(k_types[0]); i++)
        for (size_t j = 0; j < sizeof(k_shapes) / sizeof(k_shapes[0]); j++) {
            const struct shape *sh = &k_shapes[j];
            struct mat m, g2;
            struct acts a;
            mat_make(&m, k_types[i], sh->n, sh->rows);
            mat_make(&g2, k_types[i], sh->n, sh->rows);
            acts_make(&a, &m.w, sh->n_tok);
            const size_t bytes = m.w.row_bytes * sh->rows, len = (size_t)sh->rows * sh->n_tok;
            struct pl_weight p = m.w, pg = g2.w;
            /* The copy at a different offset from a cache line per shape (any multiple of 4, as
             * the loader allows: Q6_K's groups lay a super-block's bytes out by the address) */
            uint8_t *p_buf = aligned_alloc(64, (bytes + 127) & ~(size_t)63);
            assert_non_null(p_buf);
            p.data = p_buf + (j * 20 + i * 8) % 64;
            pg.data = malloc(bytes);
            assert_non_null(pg.data);
            memcpy((void *)(uintptr_t)p.data, m.w.data, bytes);
            memcpy((void *)(uintptr_t)pg.data, g2.w.data, bytes);
            const int r = pl_mm_repack_weight(&p);
            assert_in_range(r, 0, 1);
            assert_int_equal(pl_mm_repack_weight(&pg), r);
            assert_true(p.packed == (r == 1));
            if (r == 0) {
                assert_memory_equal(p.data, m.w.data, bytes);
            } else {
                const struct pl_mm_tile_kernel *k = pl_mm_tile_kernel(p.type, p.n_cols);
                assert_ptr_equal(pl_mm_weight_kernel(&p), k->packed);
                assert_ptr_equal(k->packed->prep, k->prep); /* the same activations serve */
                assert_memory_not_equal(p.data, m.w.data, bytes);
                assert_int_equal(pl_mm_repack_weight(&p), 0); /* once */
                n_packed++;
            }
            float *want = malloc(sizeof(float) * len), *got = malloc(sizeof(float) * len);
            assert_non_null(want);
            assert_non_null(got);
            for (int half = 0; half < 2; half++) {
                if (half && (!a.act.tk || sh->n_tok > PL_MM_HALF || !a.act.tk->rows8))
                    continue;
                run_rows(&m.w, &a, half, want, len);
                run_rows(&p, &a, half, got, len);
                if (memcmp(want, got, sizeof(float) * len) != 0)
                    fail_msg("type %u n %u tokens %u%s: packed weights differ", k_types[i], sh->n,
                             sh->n_tok, half ? " (half tile)" : "");
            }
            struct pl_mm_act pa = a.act;
            pa.tk = pl_mm_weight_kernel(&p);
            pl_matmul_swiglu_rows(&m.w, &g2.w, &a.act, want, sh->rows, sh->r_lo, sh->rows);
            pl_matmul_swiglu_rows(&p, &pg, &pa, got, sh->rows, sh->r_lo, sh->rows);
            for (uint32_t t = 0; t < sh->n_tok; t++)
                if (memcmp(want + (size_t)t * sh->rows + sh->r_lo,
                           got + (size_t)t * sh->rows + sh->r_lo,
                           sizeof(float) * (sh->rows - sh->r_lo)) != 0)
                    fail_msg("swiglu type %u n %u tokens %u: packed weights differ", k_types[i],
                             sh->n, sh->n_tok);
            free(want);
            free(got);
            free(p_buf);
            free((void *)(uintptr_t)pg.data);
            acts_free(&a);
            mat_free(&m);
            mat_free(&g2);
        }
    /* Q4_0 and Q8_0 have a packed layout wherever there are AVX-512 tiles for them. */
    const struct pl_mm_tile_kernel *k = pl_mm_tile_kernel(PL_GGML_TYPE_Q4_0, 256);
    if (k && k->packed)
        assert_true(n_packed >= 2 * sizeof(k_shapes) / sizeof(k_shapes[0]));
}

/* pl_mm_rmsnorm (the AVX-512 kernel on CPUs with it) gives the bits of the scalar reference:
 * every length 1..67 (each tail), the model widths, values small and large (float squares
 * that overflow to infinity), a zero vector (the scale is then 1 / sqrt(eps)). */
static void test_rmsnorm_bits(void **state) {
    (void)state;
    enum { N = 5632 };
    float *x = malloc(sizeof(float) * N), *w = malloc(sizeof(float) * N);
    float *want = malloc(sizeof(float) * (N + 1)), *got = malloc(sizeof(float) * (N + 1));
    assert_non_null(x);
    assert_non_null(w);
    assert_non_null(want);
    assert_non_null(got);
    const uint32_t widths[] = {2048, 4096, 5632, 896, 3000};
    for (int rep = 0; rep < 24; rep++) {
        const float scale = rep % 4 == 0   ? 1e-3f
                            : rep % 4 == 1 ? 1.0f
                            : rep % 4 == 2 ? 300.0f
                                           : 3e19f;
        for (uint32_t i = 0; i < N; i++) {
            x[i] = rep == 5 ? 0.0f : frand() * scale;
            w[i] = 1.0f + frand();
        }
        for (uint32_t k = 0; k < 67 + sizeof(widths) / sizeof(widths[0]); k++) {
            const uint32_t n = k < 67 ? k + 1 : widths[k - 67];
            want[n] = got[n] = -7.0f; /* past n: must stay */
            pl_mm_rmsnorm_scalar(want, x, w, n, 1e-5f);
            pl_mm_rmsnorm(got, x, w, n, 1e-5f);
            assert_memory_equal(got, want, sizeof(float) * (n + 1));
        }
    }
    free(x);
    free(w);
    free(want);
    free(got);
}

/* pl_mm_decode_spans: within the rows decoded ([lo, hi) of w, and of up), each at most the
 * bytes asked for, the range's first row of w among them, and with several weight streams
 * (the PICOLM_PREFETCH runs of this test) the first row of each part of the range, of w and
 * of up. */
static void test_decode_spans(void **state) {
    (void)state;
    const uint32_t ns_set = pl_quant_prefetch()->streams;
    const uint32_t types[] = {PL_GGML_TYPE_Q4_K, PL_GGML_TYPE_Q4_0, PL_GGML_TYPE_Q8_0};
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        struct mat g, u;
        mat_make(&g, types[ti], 512, 700);
        mat_make(&u, types[ti], 512, 700);
        const size_t rb = g.w.row_bytes;
        const uint32_t ranges[][2] = {{0, 700}, {16, 48}, {100, 101}, {640, 700}, {5, 5}};
        const size_t budgets[] = {1 << 20, 4096, 100};
        for (size_t ri = 0; ri < sizeof(ranges) / sizeof(ranges[0]); ri++)
            for (size_t bi = 0; bi < sizeof(budgets) / sizeof(budgets[0]); bi++)
                for (int with_up = 0; with_up < 2; with_up++) {
                    const uint32_t lo = ranges[ri][0], hi = ranges[ri][1];
                    struct pl_mm_span sp[PL_MM_DECODE_SPANS];
                    const uint32_t n =
                        pl_mm_decode_spans(&g.w, with_up ? &u.w : NULL, 1, lo, hi, budgets[bi], sp);
                    assert_true(n <= PL_MM_DECODE_SPANS);
                    if (lo == hi) {
                        assert_int_equal(n, 0);
                        continue;
                    }
                    const uint32_t ns = ns_set > 1 && hi - lo >= ns_set * 16 ? ns_set : 1;
                    const uint32_t part = (hi - lo + ns - 1) / ns;
                    bool first_g[PL_QUANT_STREAMS_MAX] = {false}, first_u = false;
                    for (uint32_t i = 0; i < n; i++) {
                        assert_true(sp[i].len <= budgets[bi]);
                        const bool in_g = sp[i].p >= g.data + (size_t)lo * rb &&
                                          sp[i].p + sp[i].len <= g.data + (size_t)hi * rb;
                        const bool in_u = with_up && sp[i].p >= u.data + (size_t)lo * rb &&
                                          sp[i].p + sp[i].len <= u.data + (size_t)hi * rb;
                        assert_true(in_g || in_u);
                        assert_true(sp[i].len > 0);
                        for (uint32_t k = 0; k < ns; k++) {
                            if (sp[i].p == g.data + (size_t)(lo + k * part) * rb)
                                first_g[k] = true;
                            if (k == 0 && with_up && sp[i].p == u.data + (size_t)lo * rb)
                                first_u = true;
                        }
                    }
                    for (uint32_t k = 0; k < ns; k++)
                        assert_true(first_g[k]);
                    if (ns > 1 && with_up) /* gate and up rows in turn */
                        assert_true(first_u);
                }
        mat_free(&g);
        mat_free(&u);
    }
}

int main(void) {
    pl_quant_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows),
        cmocka_unit_test(test_rows_bias_accumulate),
        cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_swiglu_elementwise),
        cmocka_unit_test(test_packed_weights_bit_identical),
        cmocka_unit_test(test_rmsnorm_bits),
        cmocka_unit_test(test_decode_spans),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
