/* SPDX-License-Identifier: MIT */
/* A matrix of small random LLaMA models written to GGUF (tools/bench/gguf_writer.c) with the
 * engine's own reference quantizers, one per weight type the engine computes with and per
 * shape (head_dim 64/128, MHA/GQA, partial rotary, rope freq base and linear scaling, q/k/v
 * biases, tied output, n_ff off the 256 grid, mixed per-tensor types, F16 and F32 caches),
 * each run through pl_ctx_decode() (multi-token prompts of several sequences in one batch,
 * then decode steps) and compared with a double-precision LLaMA written here over the
 * dequantized weights: once with exact activations (loose bound: the engine quantizes each
 * matmul input) and once rounding every matmul input through the engine's activation type
 * as the engine does (bound per type: see the tolerances). CTest runs the binary twice: SIMD
 * kernels and PICOLM_FORCE_SCALAR=1. The tokenizer comes from
 * $PICOLM_TEST_DATA/models/stories260K.gguf (and the 32000-token llama-spm vocabulary for one
 * case); exit 77 when missing. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "gguf_writer.h"
#include "pl/engine_gguf.h"
#include "pl/engine_model.h"
#include "pl/engine_quant.h"
#include "pl/engine_types.h"
#include "pl/pl_err.h"

/* ---- Tolerances (max |engine - reference| / max |reference| over a logits row) ---- */

/* Against the reference that rounds every matmul input (and, with an F16 cache, K, V, the
 * query and the attention weights) exactly as the engine does. Without flips the two agree
 * to ~1e-7 of the row max for every type. A flip - one activation element the engine's float
 * input (differing from our correctly rounded one in the last bits) sends to the next
 * quantum - happens about once per model here, and these random 1-2 layer models amplify
 * it: one flip moves a row by up to ~2e-2 for Q8_0/Q8_1/Q8_K activations (measured by
 * perturbing the reference's inputs by 3e-7), ~1.5e-3 for BF16 and ~5e-4 for F16. So:
 *   F32 weights, F32 cache: nothing to flip: float vs double only; */
#define TOL_F32 1e-4
/*   F32 weights, F16 cache: flips of the f16 rounding of K/V/q/p only; */
#define TOL_F32_KV16 1e-3
/*   F16 / BF16 weights: f16 / bf16 rounding flips; */
#define TOL_F16 3e-3
#define TOL_BF16 1e-2
/*   quantized weights: the promise's bound for quantized models. */
#define TOL_ACTQ 3e-2
/* Against exact activations: the activation quantization itself (Q8_K steps over 256
 * elements are the coarsest) through the model: measured up to 4e-2 of the row max and a
 * cosine of 0.998 on these models. */
#define TOL_EXACT 8e-2
#define MIN_COSINE_EXACT 0.995
#define MIN_COSINE 0.999

#define N_THREADS 3u /* odd, so row and token splits are uneven */

static char g_vocab_small[4096]; /* stories260K.gguf: 512-token SPM vocabulary */
static char g_vocab_large[4096]; /* ggml-vocab-llama-spm.gguf: 32000 tokens */
static char g_tmpdir[256];

/* ---- Deterministic random numbers ---- */

static uint64_t g_rng;

static uint32_t rng_u32(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}

/* Uniform in [-1, 1). */
static float rng_f(void) {
    return (float)((double)rng_u32() / 2147483648.0 - 1.0);
}

/* ---- Independent decoders for the simple block formats ---- */

static float half_to_f(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15), e = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
    double v;
    if (e == 0)
        v = ldexp((double)mant, -24);
    else if (e == 31)
        v = mant ? NAN : INFINITY;
    else
        v = ldexp((double)(mant | 0x400u), (int)e - 25);
    return (float)(sign ? -v : v);
}

static uint16_t rd16(const uint8_t *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}

/* Dequantize n elements of type t with the decoders above; false when t is not one of them. */
static bool own_decode(uint32_t t, const uint8_t *src, float *dst, int64_t n) {
    switch (t) {
    case PL_GGML_TYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return true;
    case PL_GGML_TYPE_F16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = half_to_f(rd16(src + 2 * i));
        return true;
    case PL_GGML_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)rd16(src + 2 * i) << 16;
            memcpy(&dst[i], &u, sizeof(u));
        }
        return true;
    case PL_GGML_TYPE_Q8_0:
        for (int64_t b = 0; b < n / 32; b++, src += 34) {
            float d = half_to_f(rd16(src));
            for (int j = 0; j < 32; j++)
                dst[b * 32 + j] = d * (float)(int8_t)src[2 + j];
        }
        return true;
    case PL_GGML_TYPE_Q4_0:
    case PL_GGML_TYPE_Q4_1: {
        const bool one = t == PL_GGML_TYPE_Q4_1;
        const size_t bs = one ? 20 : 18;
        for (int64_t b = 0; b < n / 32; b++, src += bs) {
            float d = half_to_f(rd16(src)), m = one ? half_to_f(rd16(src + 2)) : 0.0f;
            const uint8_t *qs = src + (one ? 4 : 2);
            for (int j = 0; j < 16; j++) {
                int lo = qs[j] & 0xF, hi = qs[j] >> 4;
                dst[b * 32 + j] = one ? d * (float)lo + m : d * (float)(lo - 8);
                dst[b * 32 + j + 16] = one ? d * (float)hi + m : d * (float)(hi - 8);
            }
        }
        return true;
    }
    case PL_GGML_TYPE_Q5_0:
    case PL_GGML_TYPE_Q5_1: {
        const bool one = t == PL_GGML_TYPE_Q5_1;
        const size_t bs = one ? 24 : 22;
        for (int64_t b = 0; b < n / 32; b++, src += bs) {
            float d = half_to_f(rd16(src)), m = one ? half_to_f(rd16(src + 2)) : 0.0f;
            const uint8_t *qhp = src + (one ? 4 : 2), *qs = qhp + 4;
            uint32_t qh = (uint32_t)qhp[0] | (uint32_t)qhp[1] << 8 | (uint32_t)qhp[2] << 16 |
                          (uint32_t)qhp[3] << 24;
            for (int j = 0; j < 16; j++) {
                int lo = (qs[j] & 0xF) | (int)(((qh >> j) & 1u) << 4);
                int hi = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
                dst[b * 32 + j] = one ? d * (float)lo + m : d * (float)(lo - 16);
                dst[b * 32 + j + 16] = one ? d * (float)hi + m : d * (float)(hi - 16);
            }
        }
        return true;
    }
    default:
        return false;
    }
}

/* Dequantize with our decoder when we have one, else the engine's scalar to_f32 (the
 * K-quants, whose decoders the llama.cpp references of the shared models vouch for). */
static void dequant(uint32_t t, const void *src, float *dst, int64_t n) {
    if (!own_decode(t, src, dst, n))
        pl_quant_kernels_ref(t)->to_f32(src, dst, n);
}

/* The activation type ggml pairs with each weight type. */
static uint32_t act_type_of(uint32_t t) {
    switch (t) {
    case PL_GGML_TYPE_Q4_0:
    case PL_GGML_TYPE_Q5_0:
    case PL_GGML_TYPE_Q8_0:
        return PL_GGML_TYPE_Q8_0;
    case PL_GGML_TYPE_Q4_1:
    case PL_GGML_TYPE_Q5_1:
        return PL_GGML_TYPE_Q8_1;
    case PL_GGML_TYPE_Q2_K:
    case PL_GGML_TYPE_Q3_K:
    case PL_GGML_TYPE_Q4_K:
    case PL_GGML_TYPE_Q5_K:
    case PL_GGML_TYPE_Q6_K:
        return PL_GGML_TYPE_Q8_K;
    default:
        return t; /* F32, F16, BF16 */
    }
}

/* ---- Test models ---- */

enum { W_Q, W_K, W_V, W_O, W_GATE, W_UP, W_DOWN, N_W };

struct mcase {
    const char *name;
    uint32_t wtype[N_W]; /* per layer weight type */
    uint32_t embd_type, out_type;
    bool tied;
    uint32_t head_dim, n_head, n_head_kv, n_ff, n_rot, n_layer;
    float freq_base, scale_factor; /* scale_factor 0: no rope.scaling keys */
    bool bias;
    uint32_t kv_type;
    bool large_vocab;
    uint32_t long_prompt; /* extra: one sequence of this many tokens (0: none) */
};

/* Reference model: dequantized weights. */
struct rlayer {
    float *w[N_W];               /* [rows][cols] */
    float *wmin[N_W];            /* as rmodel.embd_min */
    float *attn_norm, *ffn_norm; /* [n_embd] */
    float *bq, *bk, *bv;         /* NULL without biases */
};

struct rmodel {
    const struct mcase *mc;
    uint32_t n_embd, q_dim, kv_dim, n_vocab;
    float *embd; /* [n_vocab][n_embd] */
    float *out;  /* [n_vocab][n_embd] (tied: embd) */
    /* Q4_1/Q5_1 weights: each block's m, [rows][cols / 32] (else NULL); see r_matvec(). */
    float *embd_min, *out_min;
    float *out_norm; /* [n_embd] */
    struct rlayer *layers;
};

static void rmodel_free(struct rmodel *r) {
    if (r->layers)
        for (uint32_t il = 0; il < r->mc->n_layer; il++) {
            struct rlayer *l = &r->layers[il];
            for (int i = 0; i < N_W; i++) {
                free(l->w[i]);
                free(l->wmin[i]);
            }
            free(l->attn_norm);
            free(l->ffn_norm);
            free(l->bq);
            free(l->bk);
            free(l->bv);
        }
    free(r->layers);
    if (r->out != r->embd) {
        free(r->out);
        free(r->out_min);
    }
    free(r->embd_min);
    free(r->embd);
    free(r->out_norm);
}

static void w_shape(const struct rmodel *r, int i, uint32_t *cols, uint32_t *rows) {
    const uint32_t ff = r->mc->n_ff;
    switch (i) {
    case W_Q:
        *cols = r->n_embd;
        *rows = r->q_dim;
        break;
    case W_K:
    case W_V:
        *cols = r->n_embd;
        *rows = r->kv_dim;
        break;
    case W_O:
        *cols = r->q_dim;
        *rows = r->n_embd;
        break;
    case W_GATE:
    case W_UP:
        *cols = r->n_embd;
        *rows = ff;
        break;
    default:
        *cols = ff;
        *rows = r->n_embd;
        break;
    }
}

/* One tensor queued for the file: its bytes and where its dequantized copy goes. */
struct qtensor {
    char name[64];
    uint32_t type;
    uint64_t ne[2];
    uint32_t n_dims;
    uint8_t *bytes;
    size_t n_bytes;
};

/* Random f32 values for a [rows][cols] matrix of the given scale, quantized to type t; the
 * dequantized values (what the engine computes with) go to *ret_deq. */
static void make_tensor(struct qtensor *qt, const char *name, uint32_t t, uint32_t cols,
                        uint32_t rows, float scale, float offset, float **ret_deq,
                        float **ret_min) {
    const size_t n = (size_t)cols * rows;
    float *f = malloc(n * sizeof(float));
    uint64_t row_bytes = 0;
    assert_non_null(f);
    for (size_t i = 0; i < n; i++)
        f[i] = offset + scale * rng_f();
    /* A few outliers per matrix, as trained weights have. */
    for (uint32_t k = 0; k < rows / 8 + 1; k++)
        f[rng_u32() % n] *= 4.0f;
    assert_int_equal(pl_type_row_bytes(t, cols, &row_bytes), 0);
    snprintf(qt->name, sizeof(qt->name), "%s", name);
    qt->type = t;
    qt->ne[0] = cols;
    qt->ne[1] = rows;
    qt->n_dims = rows > 1 ? 2 : 1;
    qt->n_bytes = (size_t)row_bytes * rows;
    qt->bytes = malloc(qt->n_bytes);
    assert_non_null(qt->bytes);
    if (t == PL_GGML_TYPE_F32) {
        memcpy(qt->bytes, f, qt->n_bytes);
    } else {
        const struct pl_quant_kernels *k = pl_quant_kernels_ref(t);
        assert_non_null(k);
        assert_non_null(k->from_f32);
        for (uint32_t r = 0; r < rows; r++)
            k->from_f32(f + (size_t)r * cols, qt->bytes + (size_t)r * row_bytes, cols);
    }
    float *deq = malloc(n * sizeof(float));
    assert_non_null(deq);
    for (uint32_t r = 0; r < rows; r++)
        dequant(t, qt->bytes + (size_t)r * row_bytes, deq + (size_t)r * cols, cols);
    free(f);
    *ret_deq = deq;
    if (t == PL_GGML_TYPE_Q4_1 || t == PL_GGML_TYPE_Q5_1) {
        const size_t nb = n / 32, bs = t == PL_GGML_TYPE_Q4_1 ? 20 : 24;
        float *mins = malloc(nb * sizeof(float));
        assert_non_null(mins);
        for (size_t b = 0; b < nb; b++)
            mins[b] = half_to_f(rd16(qt->bytes + b * bs + 2));
        assert_non_null(ret_min);
        *ret_min = mins;
    }
}

static void add_u32(struct bench_gguf_writer *w, const char *k, uint32_t v) {
    assert_int_equal(bench_gguf_writer_add_u32(w, k, v), 0);
}

static void add_f32(struct bench_gguf_writer *w, const char *k, float v) {
    assert_int_equal(bench_gguf_writer_add_f32(w, k, v), 0);
}

/* Write the case's model to path and fill the reference model. Returns false (skip) when
 * the vocabulary file is missing. */
static bool build_model(const struct mcase *mc, const char *path, struct rmodel *r) {
    struct pl_gguf *vg = NULL;
    char err[256];
    const char *vocab = mc->large_vocab ? g_vocab_large : g_vocab_small;
    if (pl_gguf_open(vocab, &vg, err, sizeof(err)) < 0)
        return false;
    struct pl_gguf_arr toks;
    assert_int_equal(pl_gguf_get_arr(vg, "tokenizer.ggml.tokens", PL_GGUF_TYPE_STRING, &toks), 0);

    memset(r, 0, sizeof(*r));
    r->mc = mc;
    r->n_embd = mc->n_head * mc->head_dim;
    r->q_dim = r->n_embd;
    r->kv_dim = mc->n_head_kv * mc->head_dim;
    r->n_vocab = (uint32_t)toks.n;
    r->layers = calloc(mc->n_layer, sizeof(*r->layers));
    assert_non_null(r->layers);

    struct bench_gguf_writer *w = NULL;
    assert_int_equal(bench_gguf_writer_new(32, &w), 0);
    assert_int_equal(bench_gguf_writer_add_str(w, "general.architecture", "llama"), 0);
    add_u32(w, "llama.context_length", 2048);
    add_u32(w, "llama.embedding_length", r->n_embd);
    add_u32(w, "llama.block_count", mc->n_layer);
    add_u32(w, "llama.feed_forward_length", mc->n_ff);
    add_u32(w, "llama.attention.head_count", mc->n_head);
    add_u32(w, "llama.attention.head_count_kv", mc->n_head_kv);
    add_u32(w, "llama.rope.dimension_count", mc->n_rot);
    add_f32(w, "llama.rope.freq_base", mc->freq_base);
    add_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    if (mc->scale_factor > 0.0f) {
        assert_int_equal(bench_gguf_writer_add_str(w, "llama.rope.scaling.type", "linear"), 0);
        add_f32(w, "llama.rope.scaling.factor", mc->scale_factor);
    }
    for (uint64_t i = 0; i < pl_gguf_n_kv(vg); i++) {
        const struct pl_gguf_kv *kv = pl_gguf_kv_at(vg, i);
        if (kv->key.len > 10 && memcmp(kv->key.ptr, "tokenizer.", 10) == 0)
            assert_int_equal(bench_gguf_writer_copy_kv(w, kv), 0);
    }

    /* Tensors: embeddings, output, norms, then each layer. */
    size_t n_t = 0, cap_t = 4 + (size_t)mc->n_layer * 12;
    struct qtensor *qt = calloc(cap_t, sizeof(*qt));
    char name[64];
    assert_non_null(qt);
    const float s_embd = 1.0f;
    make_tensor(&qt[n_t++], "token_embd.weight", mc->embd_type, r->n_embd, r->n_vocab, s_embd, 0.0f,
                &r->embd, &r->embd_min);
    if (mc->tied) {
        r->out = r->embd;
        r->out_min = r->embd_min;
    } else {
        make_tensor(&qt[n_t++], "output.weight", mc->out_type, r->n_embd, r->n_vocab,
                    2.0f / sqrtf((float)r->n_embd), 0.0f, &r->out, &r->out_min);
    }
    make_tensor(&qt[n_t++], "output_norm.weight", PL_GGML_TYPE_F32, r->n_embd, 1, 0.2f, 1.0f,
                &r->out_norm, NULL);
    for (uint32_t il = 0; il < mc->n_layer; il++) {
        struct rlayer *l = &r->layers[il];
        static const char *const wn[N_W] = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                                            "ffn_gate", "ffn_up", "ffn_down"};
        snprintf(name, sizeof(name), "blk.%u.attn_norm.weight", il);
        make_tensor(&qt[n_t++], name, PL_GGML_TYPE_F32, r->n_embd, 1, 0.2f, 1.0f, &l->attn_norm,
                    NULL);
        for (int i = 0; i < N_W; i++) {
            uint32_t cols, rows;
            w_shape(r, i, &cols, &rows);
            snprintf(name, sizeof(name), "blk.%u.%s.weight", il, wn[i]);
            /* Scale ~ 1/sqrt(cols) keeps activations O(1); a small per-matrix offset gives
             * the blocks a non-zero mean, so the formats' mins/offsets matter. */
            float s = 1.5f / sqrtf((float)cols);
            make_tensor(&qt[n_t++], name, mc->wtype[i], cols, rows, s, 0.1f * s * rng_f(), &l->w[i],
                        &l->wmin[i]);
        }
        if (mc->bias) {
            snprintf(name, sizeof(name), "blk.%u.attn_q.bias", il);
            make_tensor(&qt[n_t++], name, PL_GGML_TYPE_F32, r->q_dim, 1, 0.3f, 0.0f, &l->bq, NULL);
            snprintf(name, sizeof(name), "blk.%u.attn_k.bias", il);
            make_tensor(&qt[n_t++], name, PL_GGML_TYPE_F32, r->kv_dim, 1, 0.3f, 0.0f, &l->bk, NULL);
            snprintf(name, sizeof(name), "blk.%u.attn_v.bias", il);
            make_tensor(&qt[n_t++], name, PL_GGML_TYPE_F32, r->kv_dim, 1, 0.3f, 0.0f, &l->bv, NULL);
        }
        snprintf(name, sizeof(name), "blk.%u.ffn_norm.weight", il);
        make_tensor(&qt[n_t++], name, PL_GGML_TYPE_F32, r->n_embd, 1, 0.2f, 1.0f, &l->ffn_norm,
                    NULL);
    }
    for (size_t i = 0; i < n_t; i++)
        assert_int_equal(
            bench_gguf_writer_add_tensor(w, qt[i].name, qt[i].type, qt[i].n_dims, qt[i].ne), 0);
    assert_int_equal(bench_gguf_writer_open(w, path), 0);
    for (size_t i = 0; i < n_t; i++) {
        assert_int_equal(bench_gguf_writer_write(w, qt[i].bytes, qt[i].n_bytes), 0);
        free(qt[i].bytes);
    }
    assert_int_equal(bench_gguf_writer_close(w), 0);
    bench_gguf_writer_free(w);
    free(qt);
    pl_gguf_close(vg);
    return true;
}

/* ---- Reference forward pass (double) ---- */

/* Round a matmul input the way the engine feeds it to a weight of type wt: to float, then
 * (quantized types, F16, BF16) through the activation type and back. For Q8_1 (Q4_1/Q5_1
 * weights) the dot products take each block's sum from the block's f16 field s instead of
 * summing the values: corr[b] = s - sum of block b's values (else corr is untouched). */
static void act_round(double *x, uint32_t n, uint32_t wt, float *fbuf, uint8_t *qbuf,
                      double *corr) {
    uint32_t at = act_type_of(wt);
    for (uint32_t i = 0; i < n; i++)
        fbuf[i] = (float)x[i];
    if (at != PL_GGML_TYPE_F32) {
        const struct pl_quant_kernels *k = pl_quant_kernels_ref(at);
        k->from_f32(fbuf, qbuf, n);
        k->to_f32(qbuf, fbuf, n);
    }
    for (uint32_t i = 0; i < n; i++)
        x[i] = fbuf[i];
    if (at == PL_GGML_TYPE_Q8_1)
        for (uint32_t b = 0; b < n / 32; b++) {
            double sum = 0.0;
            for (uint32_t i = 0; i < 32; i++)
                sum += x[b * 32 + i];
            corr[b] = half_to_f(rd16(qbuf + (size_t)b * 36 + 2)) - sum;
        }
}

static double round_f16(double v) {
    return (double)pl_fp16_to_f32(pl_f32_to_fp16((float)v));
}

static void r_rmsnorm(double *y, const double *x, const float *w, uint32_t n) {
    double ss = 0.0;
    for (uint32_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    double s = 1.0 / sqrt(ss / n + 1e-5);
    for (uint32_t i = 0; i < n; i++)
        y[i] = x[i] * s * w[i];
}

/* y[rows] = W[rows][cols] . x (+ bias); with wmin and corr (Q4_1/Q5_1 weights, Q8_1
 * activations): + sum over blocks of m * corr, as the engine applies m to the f16 sum s. */
static void r_matvec(double *y, const float *w, const double *x, uint32_t cols, uint32_t rows,
                     const float *bias, const float *wmin, const double *corr) {
    for (uint32_t r = 0; r < rows; r++) {
        const float *wr = w + (size_t)r * cols;
        double s = 0.0;
        for (uint32_t c = 0; c < cols; c++)
            s += (double)wr[c] * x[c];
        if (wmin && corr)
            for (uint32_t b = 0; b < cols / 32; b++)
                s += (double)wmin[(size_t)r * (cols / 32) + b] * corr[b];
        y[r] = s + (bias ? bias[r] : 0.0);
    }
}

static void r_rope(double *x, uint32_t n_heads, const struct mcase *mc, uint32_t pos) {
    double fs = mc->scale_factor > 0.0f ? 1.0 / mc->scale_factor : 1.0;
    for (uint32_t h = 0; h < n_heads; h++) {
        double *xh = x + (size_t)h * mc->head_dim;
        for (uint32_t i0 = 0; i0 < mc->n_rot; i0 += 2) {
            double th = fs * pos * pow((double)mc->freq_base, -(double)i0 / mc->n_rot);
            double c = cos(th), s = sin(th), a = xh[i0], b = xh[i0 + 1];
            xh[i0] = a * c - b * s;
            xh[i0 + 1] = a * s + b * c;
        }
    }
}

/* Logits [n][n_vocab] for every position of one sequence. actq: round matmul inputs, the
 * query and the cache (F16) and the attention weights (F16 cache) as the engine does. */
static void r_forward(const struct rmodel *r, const int32_t *toks, uint32_t n, bool actq,
                      double *logits) {
    const struct mcase *mc = r->mc;
    const uint32_t E = r->n_embd, F = mc->n_ff, hd = mc->head_dim;
    const uint32_t wide = E > F ? E : F;
    const bool f16 = actq && mc->kv_type == PL_KV_F16;
    double *x = calloc((size_t)n * E, sizeof(double));
    double *q = calloc((size_t)n * r->q_dim, sizeof(double));
    double *k = calloc((size_t)n * r->kv_dim, sizeof(double));
    double *v = calloc((size_t)n * r->kv_dim, sizeof(double));
    double *xn = calloc(wide, sizeof(double)), *a = calloc(wide, sizeof(double));
    double *g = calloc(F, sizeof(double)), *u = calloc(F, sizeof(double));
    double *att = calloc(r->q_dim, sizeof(double)), *tmp = calloc(wide, sizeof(double));
    double *sc = calloc(n, sizeof(double));
    float *fbuf = calloc(wide, sizeof(float));
    uint8_t *qbuf = calloc((size_t)wide * 4 + 64, 1);
    double *corr = calloc(wide / 32 + 1, sizeof(double));
    const double *cq = actq ? corr : NULL;
    assert_true(x && q && k && v && xn && a && g && u && att && tmp && sc && fbuf && qbuf && corr);

    for (uint32_t t = 0; t < n; t++)
        for (uint32_t i = 0; i < E; i++)
            x[(size_t)t * E + i] = r->embd[(size_t)toks[t] * E + i];

    for (uint32_t il = 0; il < mc->n_layer; il++) {
        const struct rlayer *l = &r->layers[il];
        const float *bias[3] = {l->bq, l->bk, l->bv};
        double *outs[3] = {q, k, v};
        const uint32_t dims[3] = {r->q_dim, r->kv_dim, r->kv_dim};
        for (uint32_t t = 0; t < n; t++) {
            r_rmsnorm(xn, x + (size_t)t * E, l->attn_norm, E);
            for (int i = 0; i < 3; i++) {
                memcpy(a, xn, E * sizeof(double));
                if (actq)
                    act_round(a, E, mc->wtype[W_Q + i], fbuf, qbuf, corr);
                r_matvec(outs[i] + (size_t)t * dims[i], l->w[W_Q + i], a, E, dims[i], bias[i],
                         l->wmin[W_Q + i], cq);
            }
            r_rope(q + (size_t)t * r->q_dim, mc->n_head, mc, t);
            r_rope(k + (size_t)t * r->kv_dim, mc->n_head_kv, mc, t);
            if (f16)
                for (uint32_t i = 0; i < r->kv_dim; i++) {
                    k[(size_t)t * r->kv_dim + i] = round_f16(k[(size_t)t * r->kv_dim + i]);
                    v[(size_t)t * r->kv_dim + i] = round_f16(v[(size_t)t * r->kv_dim + i]);
                }
        }
        for (uint32_t t = 0; t < n; t++) {
            for (uint32_t h = 0; h < mc->n_head; h++) {
                const uint32_t kvh = h / (mc->n_head / mc->n_head_kv);
                double qh[128], mx = -INFINITY, sum = 0.0;
                for (uint32_t d = 0; d < hd; d++) {
                    qh[d] = q[(size_t)t * r->q_dim + (size_t)h * hd + d];
                    if (f16)
                        qh[d] = round_f16(qh[d]);
                }
                for (uint32_t p = 0; p <= t; p++) {
                    const double *kp = k + (size_t)p * r->kv_dim + (size_t)kvh * hd;
                    double s = 0.0;
                    for (uint32_t d = 0; d < hd; d++)
                        s += qh[d] * kp[d];
                    sc[p] = s / sqrt((double)hd);
                    mx = sc[p] > mx ? sc[p] : mx;
                }
                for (uint32_t p = 0; p <= t; p++) {
                    sc[p] = exp(sc[p] - mx);
                    sum += sc[p];
                }
                double *o = att + (size_t)h * hd;
                memset(o, 0, hd * sizeof(double));
                for (uint32_t p = 0; p <= t; p++) {
                    double pr = sc[p] / sum;
                    if (f16)
                        pr = round_f16(pr);
                    const double *vp = v + (size_t)p * r->kv_dim + (size_t)kvh * hd;
                    for (uint32_t d = 0; d < hd; d++)
                        o[d] += pr * vp[d];
                }
            }
            double *xt = x + (size_t)t * E;
            memcpy(a, att, r->q_dim * sizeof(double));
            if (actq)
                act_round(a, r->q_dim, mc->wtype[W_O], fbuf, qbuf, corr);
            r_matvec(tmp, l->w[W_O], a, r->q_dim, E, NULL, l->wmin[W_O], cq);
            for (uint32_t i = 0; i < E; i++)
                xt[i] += tmp[i];

            r_rmsnorm(xn, xt, l->ffn_norm, E);
            memcpy(a, xn, E * sizeof(double));
            if (actq)
                act_round(a, E, mc->wtype[W_GATE], fbuf, qbuf, corr);
            r_matvec(g, l->w[W_GATE], a, E, F, NULL, l->wmin[W_GATE], cq);
            memcpy(a, xn, E * sizeof(double));
            if (actq)
                act_round(a, E, mc->wtype[W_UP], fbuf, qbuf, corr);
            r_matvec(u, l->w[W_UP], a, E, F, NULL, l->wmin[W_UP], cq);
            for (uint32_t i = 0; i < F; i++)
                a[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
            if (actq)
                act_round(a, F, mc->wtype[W_DOWN], fbuf, qbuf, corr);
            r_matvec(tmp, l->w[W_DOWN], a, F, E, NULL, l->wmin[W_DOWN], cq);
            for (uint32_t i = 0; i < E; i++)
                xt[i] += tmp[i];
        }
    }
    const uint32_t ot = mc->tied ? mc->embd_type : mc->out_type;
    for (uint32_t t = 0; t < n; t++) {
        r_rmsnorm(a, x + (size_t)t * E, r->out_norm, E);
        if (actq)
            act_round(a, E, ot, fbuf, qbuf, corr);
        r_matvec(logits + (size_t)t * r->n_vocab, r->out, a, E, r->n_vocab, NULL, r->out_min, cq);
    }
    free(x);
    free(q);
    free(k);
    free(v);
    free(xn);
    free(a);
    free(g);
    free(u);
    free(att);
    free(tmp);
    free(sc);
    free(fbuf);
    free(qbuf);
    free(corr);
}

/* ---- Comparison ---- */

struct err_stat {
    double rel; /* max over rows of max|d| / max|ref| */
    double cos; /* min over rows */
};

static void compare_row(const float *e, const double *ref, uint32_t n, struct err_stat *st) {
    double mx = 0.0, md = 0.0, ee = 0.0, rr = 0.0, er = 0.0;
    for (uint32_t i = 0; i < n; i++) {
        assert_true(isfinite(e[i]));
        mx = fmax(mx, fabs(ref[i]));
        md = fmax(md, fabs((double)e[i] - ref[i]));
        ee += (double)e[i] * e[i];
        rr += ref[i] * ref[i];
        er += (double)e[i] * ref[i];
    }
    st->rel = fmax(st->rel, md / (mx > 0.0 ? mx : 1.0));
    st->cos = fmin(st->cos, er / sqrt(ee * rr + 1e-300));
}

/* ---- The driver ---- */

#define MAX_SEQS 3
#define N_STEPS 4

struct seqplan {
    uint32_t n_prompt; /* tokens in the first batch */
    int32_t toks[160];
    uint32_t n_total;
};

static void run_case(void **state) {
    const struct mcase *mc = *state;
    char path[512];
    struct rmodel r = {0};

    g_rng = 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)strlen(mc->name) * 1315423911u;
    for (const char *p = mc->name; *p; p++)
        g_rng = g_rng * 1099511628211ull + (uint8_t)*p;
    if (!g_rng)
        g_rng = 1;
    snprintf(path, sizeof(path), "%s/%s.gguf", g_tmpdir, mc->name);
    if (!build_model(mc, path, &r))
        skip();

    struct pl_model_opts mo = {.n_threads = N_THREADS};
    struct pl_model *m = NULL;
    char err[512];
    int rc = pl_model_load(path, &mo, &m, err, sizeof(err));
    if (rc < 0)
        fail_msg("%s: load: %d %s", mc->name, rc, err);
    (void)unlink(path);
    const struct pl_model_hparams *hp = pl_model_hparams(m);
    assert_int_equal(hp->n_head_kv, mc->n_head_kv);
    assert_int_equal(hp->n_rot, mc->n_rot);
    assert_int_equal(hp->tied_output, mc->tied);
    assert_int_equal(hp->has_qkv_bias, mc->bias);
    assert_int_equal(hp->n_vocab, r.n_vocab);
    /* The engine pairs each type with the activation type we model. */
    for (int i = 0; i < N_W; i++)
        assert_int_equal(pl_quant_kernels(mc->wtype[i])->vec_dot_type, act_type_of(mc->wtype[i]));

    /* Sequences: prompts of several lengths decoded together in the first batch (tiled path:
     * >= 4 entries, more than one tile), then N_STEPS steps of one token each for every live
     * sequence (private path), with a third sequence joining at step 2 with a 3-token prompt
     * (batch of 4: tiled again, mixed positions). */
    struct seqplan sp[MAX_SEQS] = {
        {.n_prompt = mc->long_prompt ? mc->long_prompt : 21}, {.n_prompt = 5}, {.n_prompt = 0}};
    const uint32_t V = r.n_vocab;
    for (int s = 0; s < MAX_SEQS; s++) {
        sp[s].n_total = (s == 2 ? 3 + (N_STEPS - 2) : sp[s].n_prompt + N_STEPS);
        for (uint32_t i = 0; i < sp[s].n_total; i++)
            sp[s].toks[i] = (int32_t)(rng_u32() % V);
    }

    struct pl_ctx_opts co = {
        .n_ctx = 256, .n_seq = MAX_SEQS, .n_batch = 256, .kv_type = mc->kv_type};
    struct pl_ctx *c = NULL;
    assert_int_equal(pl_ctx_new(m, &co, &c), 0);

    /* Engine logits per sequence per position (NaN: not requested). */
    float *elog[MAX_SEQS];
    for (int s = 0; s < MAX_SEQS; s++) {
        elog[s] = malloc((size_t)sp[s].n_total * V * sizeof(float));
        assert_non_null(elog[s]);
        for (size_t i = 0; i < (size_t)sp[s].n_total * V; i++)
            elog[s][i] = NAN;
    }
    uint32_t done[MAX_SEQS] = {0};
    int32_t bt[256], bp[256], bs[256];
    bool bl[256];
    float *out = malloc((size_t)256 * V * sizeof(float));
    assert_non_null(out);

    for (int step = 0; step <= N_STEPS; step++) {
        uint32_t n = 0, take[MAX_SEQS], at[MAX_SEQS];
        for (int s = 0; s < MAX_SEQS; s++) {
            if (s == 2)
                take[s] = step == 2 ? 3 : (step > 2 ? 1 : 0);
            else
                take[s] = step == 0 ? sp[s].n_prompt : 1;
            at[s] = done[s];
        }
        /* Interleave the sequences, up to 3 entries of each in turn, so that entries of
         * different sequences share tiles and chunks. */
        for (bool more = true; more;) {
            more = false;
            for (int s = 0; s < MAX_SEQS; s++)
                for (uint32_t i = 0; i < 3u && at[s] < done[s] + take[s]; i++, n++) {
                    bt[n] = sp[s].toks[at[s]];
                    bp[n] = (int32_t)at[s]++;
                    bs[n] = s;
                    bl[n] = true;
                    more = true;
                }
        }
        struct pl_batch b = {.n = n, .token = bt, .pos = bp, .seq = bs, .logits = bl};
        assert_int_equal(pl_ctx_decode(c, &b, out), 0);
        for (uint32_t i = 0; i < n; i++)
            memcpy(elog[bs[i]] + (size_t)bp[i] * V, out + (size_t)i * V, V * sizeof(float));
        for (uint32_t i = 0; i < n; i++)
            done[bs[i]]++;
    }

    struct err_stat st_q = {0.0, 1.0}, st_x = {0.0, 1.0};
    for (int s = 0; s < MAX_SEQS; s++) {
        uint32_t nt = sp[s].n_total;
        assert_int_equal(done[s], nt);
        assert_int_equal(pl_ctx_seq_len(c, s), nt);
        double *rq = malloc((size_t)nt * V * sizeof(double));
        double *rx = malloc((size_t)nt * V * sizeof(double));
        assert_true(rq && rx);
        r_forward(&r, sp[s].toks, nt, true, rq);
        r_forward(&r, sp[s].toks, nt, false, rx);
        for (uint32_t t = 0; t < nt; t++) {
            if (getenv("PL_MATRIX_VERBOSE")) {
                struct err_stat one = {0.0, 1.0};
                compare_row(elog[s] + (size_t)t * V, rq + (size_t)t * V, V, &one);
                printf("    seq %d pos %u: %.2e\n", s, t, one.rel);
            }
            compare_row(elog[s] + (size_t)t * V, rq + (size_t)t * V, V, &st_q);
            compare_row(elog[s] + (size_t)t * V, rx + (size_t)t * V, V, &st_x);
        }
        free(rq);
        free(rx);
    }
    /* The widest activation rounding of any matmul input picks the bound. */
    int worst = 0; /* 0 F32, 1 F16, 2 BF16, 3 quantized */
    for (int i = 0; i <= N_W; i++) {
        uint32_t t = i < N_W ? mc->wtype[i] : (mc->tied ? mc->embd_type : mc->out_type);
        int rank = t == PL_GGML_TYPE_F32    ? 0
                   : t == PL_GGML_TYPE_F16  ? 1
                   : t == PL_GGML_TYPE_BF16 ? 2
                                            : 3;
        worst = rank > worst ? rank : worst;
    }
    static const double tols[4] = {TOL_F32, TOL_F16, TOL_BF16, TOL_ACTQ};
    double tol_q = tols[worst];
    if (worst == 0 && mc->kv_type == PL_KV_F16)
        tol_q = TOL_F32_KV16;
    printf("  [%s] %-28s vs actq ref: %.2e (tol %.0e, cos %.7f)  vs exact ref: %.2e (cos "
           "%.7f)\n",
           pl_quant_isa(), mc->name, st_q.rel, tol_q, st_q.cos, st_x.rel, st_x.cos);
    if (st_q.rel > tol_q || st_q.cos < MIN_COSINE || st_x.rel > TOL_EXACT ||
        st_x.cos < MIN_COSINE_EXACT)
        fail_msg("%s: engine logits off the reference (see above)", mc->name);

    free(out);
    for (int s = 0; s < MAX_SEQS; s++)
        free(elog[s]);
    pl_ctx_free(c);
    pl_model_free(m);
    rmodel_free(&r);
}

/* ---- Our decoders agree with the engine's scalar to_f32 ---- */

static void test_matrix_own_decoders_match_scalar_to_f32(void **state) {
    (void)state;
    static const uint32_t types[] = {PL_GGML_TYPE_F16,  PL_GGML_TYPE_BF16, PL_GGML_TYPE_Q4_0,
                                     PL_GGML_TYPE_Q4_1, PL_GGML_TYPE_Q5_0, PL_GGML_TYPE_Q5_1,
                                     PL_GGML_TYPE_Q8_0};
    enum { N = 1024 };
    static float src[N], a[N], b[N];
    static uint8_t q[N * 4];
    g_rng = 12345;
    for (int i = 0; i < N; i++)
        src[i] = rng_f() * (i % 7 == 0 ? 8.0f : 1.0f) + (i / 32 % 3 == 0 ? 0.5f : 0.0f);
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        const struct pl_quant_kernels *k = pl_quant_kernels_ref(types[ti]);
        assert_non_null(k);
        k->from_f32(src, q, N);
        k->to_f32(q, a, N);
        assert_true(own_decode(types[ti], q, b, N));
        for (int i = 0; i < N; i++)
            if (memcmp(&a[i], &b[i], sizeof(float)) != 0)
                fail_msg("type %s element %d: scalar to_f32 %g, ours %g",
                         pl_type_info(types[ti])->name, i, (double)a[i], (double)b[i]);
    }
}

/* ---- The matrix ---- */

#define ALL7(t)                                                                                    \
    { t, t, t, t, t, t, t }

/* Shape A: head_dim 64, 4 heads (n_embd 256), MHA, full rotary, base 10000, untied, F32
 * cache. Shape B: head_dim 128, 4 heads (n_embd 512), GQA (1 KV head), n_rot 32, base
 * 500000, linear scaling x4, q/k/v biases, tied output, F16 cache. n_ff: 352 / 608 for
 * 32-element blocks (off the 256 grid), 512 / 768 for K-quants. */
#define CASE_A(nm, t, ff)                                                                          \
    {                                                                                              \
        .name = nm "-A", .wtype = ALL7(t), .embd_type = t, .out_type = t, .head_dim = 64,          \
        .n_head = 4, .n_head_kv = 4, .n_ff = ff, .n_rot = 64, .n_layer = 2, .freq_base = 10000.0f, \
        .kv_type = PL_KV_F32                                                                       \
    }
#define CASE_B(nm, t, ff)                                                                          \
    {                                                                                              \
        .name = nm "-B", .wtype = ALL7(t), .embd_type = t, .tied = true, .head_dim = 128,          \
        .n_head = 4, .n_head_kv = 1, .n_ff = ff, .n_rot = 32, .n_layer = 2,                        \
        .freq_base = 500000.0f, .scale_factor = 4.0f, .bias = true, .kv_type = PL_KV_F16           \
    }

static const struct mcase k_cases[] = {
    CASE_A("F32", PL_GGML_TYPE_F32, 200),
    CASE_B("F32", PL_GGML_TYPE_F32, 330),
    CASE_A("F16", PL_GGML_TYPE_F16, 200),
    CASE_B("F16", PL_GGML_TYPE_F16, 330),
    CASE_A("BF16", PL_GGML_TYPE_BF16, 200),
    CASE_B("BF16", PL_GGML_TYPE_BF16, 330),
    CASE_A("Q4_0", PL_GGML_TYPE_Q4_0, 352),
    CASE_B("Q4_0", PL_GGML_TYPE_Q4_0, 608),
    CASE_A("Q4_1", PL_GGML_TYPE_Q4_1, 352),
    CASE_B("Q4_1", PL_GGML_TYPE_Q4_1, 608),
    CASE_A("Q5_0", PL_GGML_TYPE_Q5_0, 352),
    CASE_B("Q5_0", PL_GGML_TYPE_Q5_0, 608),
    CASE_A("Q5_1", PL_GGML_TYPE_Q5_1, 352),
    CASE_B("Q5_1", PL_GGML_TYPE_Q5_1, 608),
    CASE_A("Q8_0", PL_GGML_TYPE_Q8_0, 352),
    CASE_B("Q8_0", PL_GGML_TYPE_Q8_0, 608),
    CASE_A("Q2_K", PL_GGML_TYPE_Q2_K, 512),
    CASE_B("Q2_K", PL_GGML_TYPE_Q2_K, 768),
    CASE_A("Q3_K", PL_GGML_TYPE_Q3_K, 512),
    CASE_B("Q3_K", PL_GGML_TYPE_Q3_K, 768),
    CASE_A("Q4_K", PL_GGML_TYPE_Q4_K, 512),
    CASE_B("Q4_K", PL_GGML_TYPE_Q4_K, 768),
    CASE_A("Q5_K", PL_GGML_TYPE_Q5_K, 512),
    CASE_B("Q5_K", PL_GGML_TYPE_Q5_K, 768),
    CASE_A("Q6_K", PL_GGML_TYPE_Q6_K, 512),
    CASE_B("Q6_K", PL_GGML_TYPE_Q6_K, 768),
    /* Q4_K_M-like mix: q/k/v of two types (one activation preparation shared by q and k,
     * another for v), gate and up of different types (the unfused FFN path), Q6_K down and
     * output, Q4_K embeddings; GQA 8:2, head_dim 64, partial rotary. */
    {.name = "mix-K",
     .wtype = {PL_GGML_TYPE_Q4_K, PL_GGML_TYPE_Q4_K, PL_GGML_TYPE_Q6_K, PL_GGML_TYPE_Q5_K,
               PL_GGML_TYPE_Q4_K, PL_GGML_TYPE_Q5_K, PL_GGML_TYPE_Q6_K},
     .embd_type = PL_GGML_TYPE_Q4_K,
     .out_type = PL_GGML_TYPE_Q6_K,
     .head_dim = 64,
     .n_head = 8,
     .n_head_kv = 2,
     .n_ff = 1024,
     .n_rot = 48,
     .n_layer = 2,
     .freq_base = 10000.0f,
     .kv_type = PL_KV_F16},
    /* Mix of 32-element block types with different activation types (Q8_0, Q8_1, F16,
     * BF16) inside one projection group; n_embd 192 (no tiled kernel anywhere). */
    {.name = "mix-32",
     .wtype = {PL_GGML_TYPE_Q5_1, PL_GGML_TYPE_Q4_1, PL_GGML_TYPE_Q8_0, PL_GGML_TYPE_Q5_0,
               PL_GGML_TYPE_Q4_0, PL_GGML_TYPE_Q4_1, PL_GGML_TYPE_BF16},
     .embd_type = PL_GGML_TYPE_Q8_0,
     .out_type = PL_GGML_TYPE_F16,
     .head_dim = 64,
     .n_head = 3,
     .n_head_kv = 3,
     .n_ff = 288,
     .n_rot = 64,
     .n_layer = 2,
     .freq_base = 10000.0f,
     .bias = true,
     .kv_type = PL_KV_F32},
    /* The same mix with n_embd 256: tiled kernels for the 256-multiple inputs. */
    {.name = "mix-32-tiled",
     .wtype = {PL_GGML_TYPE_Q5_1, PL_GGML_TYPE_Q4_1, PL_GGML_TYPE_Q8_0, PL_GGML_TYPE_Q5_0,
               PL_GGML_TYPE_Q4_0, PL_GGML_TYPE_Q4_1, PL_GGML_TYPE_Q8_0},
     .embd_type = PL_GGML_TYPE_Q5_0,
     .out_type = PL_GGML_TYPE_Q4_1,
     .head_dim = 64,
     .n_head = 4,
     .n_head_kv = 2,
     .n_ff = 512,
     .n_rot = 32,
     .n_layer = 2,
     .freq_base = 1000000.0f,
     .scale_factor = 2.0f,
     .kv_type = PL_KV_F16},
    /* A prompt longer than one forward chunk (64 entries), n_ff off the 256 grid. */
    {.name = "long-prompt-Q8_0",
     .wtype = ALL7(PL_GGML_TYPE_Q8_0),
     .embd_type = PL_GGML_TYPE_Q8_0,
     .out_type = PL_GGML_TYPE_Q8_0,
     .head_dim = 64,
     .n_head = 4,
     .n_head_kv = 2,
     .n_ff = 352,
     .n_rot = 64,
     .n_layer = 1,
     .freq_base = 10000.0f,
     .kv_type = PL_KV_F16,
     .long_prompt = 150},
    /* The LLaMA-2 vocabulary (32000 tokens), tied Q6_K embeddings. */
    {.name = "llama-spm-vocab-Q6_K",
     .wtype = ALL7(PL_GGML_TYPE_Q4_K),
     .embd_type = PL_GGML_TYPE_Q6_K,
     .tied = true,
     .head_dim = 64,
     .n_head = 4,
     .n_head_kv = 4,
     .n_ff = 512,
     .n_rot = 64,
     .n_layer = 1,
     .freq_base = 10000.0f,
     .kv_type = PL_KV_F16,
     .large_vocab = true},
};

int main(void) {
    const char *data = getenv("PICOLM_TEST_DATA");
    if (!data || !*data) {
        fprintf(stderr, "PICOLM_TEST_DATA not set: skipping\n");
        return 77;
    }
    snprintf(g_vocab_small, sizeof(g_vocab_small), "%s/models/stories260K.gguf", data);
    snprintf(g_vocab_large, sizeof(g_vocab_large), "%s/tokenizer/ggml-vocab-llama-spm.gguf", data);
    if (access(g_vocab_small, R_OK) != 0) {
        fprintf(stderr, "%s missing: skipping\n", g_vocab_small);
        return 77;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(g_tmpdir, sizeof(g_tmpdir), "%s/pl-matrix-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    pl_quant_init();
    printf("kernels: %s\n", pl_quant_isa());

    enum { N_CASES = sizeof(k_cases) / sizeof(k_cases[0]) };
    struct CMUnitTest tests[N_CASES + 1];
    tests[0] = (struct CMUnitTest)cmocka_unit_test(test_matrix_own_decoders_match_scalar_to_f32);
    for (size_t i = 0; i < N_CASES; i++)
        tests[i + 1] = (struct CMUnitTest){
            .name = k_cases[i].name, .test_func = run_case, .initial_state = (void *)&k_cases[i]};
    if (getenv("PL_MATRIX_FILTER"))
        cmocka_set_test_filter(getenv("PL_MATRIX_FILTER"));
    int r = cmocka_run_group_tests_name(
        strcmp(pl_quant_isa(), "scalar") == 0 ? "engine_matrix_scalar" : "engine_matrix", tests,
        NULL, NULL);
    (void)rmdir(g_tmpdir);
    return r;
}
