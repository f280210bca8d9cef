/* SPDX-License-Identifier: MIT */
/* Tests of the batched forward pass and inference contexts (engine/src/forward.c): logits
 * against a naive double-precision LLaMA written here (dequantized weights, plain loops),
 * batching and thread-count invariance, KV pool exhaustion and reuse, batch validation,
 * and a smoke check against llama.cpp's recorded logits and greedy tokens for stories260K.
 * Needs $PICOLM_TEST_DATA/models/stories260K.gguf (exit 77 when missing). */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pl/engine_gguf.h"
#include "pl/engine_model.h"
#include "pl/engine_quant.h"
#include "pl/pl_err.h"

/* Named tolerances: max |ours - reference| divided by the row's max |reference logit|. */
#define TOL_REF_KV_F32 1e-4 /* f32 activations/cache vs double: rounding only */
#define TOL_REF_KV_F16 5e-3 /* llama.cpp itself moves ~5e-4 of the row max with an F16 cache */
#define TOL_LLAMACPP 2e-3   /* the brief's smoke bound: 0.2% of the row max */
#define TOL_BATCH 1e-5      /* batched vs alone: same arithmetic, expected bit-identical */

static char g_model_path[4096];
static char g_ref_path[4096];
static char g_bin_path[4096];

/* Prompt 0 of the stories260K references (tokens are inputs here, not expected results). */
static const int32_t k_toks[] = {1,   291, 410, 456, 425, 417, 340, 268, 420, 327, 416,
                                 272, 414, 444, 410, 449, 425, 423, 427, 419, 334};
#define N_TOKS ((uint32_t)(sizeof(k_toks) / sizeof(k_toks[0])))

static struct pl_model *load_model(uint32_t n_threads) {
    struct pl_model_opts o = {.n_threads = n_threads};
    struct pl_model *m = NULL;
    char err[512];
    int r = pl_model_load(g_model_path, &o, &m, err, sizeof(err));
    if (r < 0)
        fail_msg("load %s: %d %s", g_model_path, r, err);
    return m;
}

static struct pl_ctx *new_ctx(struct pl_model *m, uint32_t n_ctx, uint32_t n_seq,
                              uint32_t n_kv_tokens, uint32_t n_batch, uint32_t kv_type) {
    struct pl_ctx_opts o = {.n_ctx = n_ctx,
                            .n_seq = n_seq,
                            .n_kv_tokens = n_kv_tokens,
                            .n_batch = n_batch,
                            .kv_type = kv_type};
    struct pl_ctx *c = NULL;
    assert_int_equal(pl_ctx_new(m, &o, &c), 0);
    return c;
}

/* Decode one token of one sequence, logits into out. */
static int decode1(struct pl_ctx *c, int32_t tok, int32_t pos, int32_t seq, float *out) {
    bool want = true;
    struct pl_batch b = {.n = 1, .token = &tok, .pos = &pos, .seq = &seq, .logits = &want};
    return pl_ctx_decode(c, &b, out);
}

static double row_rel_diff(const float *a, const double *ref, uint32_t n) {
    double md = 0, mx = 0;
    for (uint32_t i = 0; i < n; i++) {
        md = fmax(md, fabs((double)a[i] - ref[i]));
        mx = fmax(mx, fabs(ref[i]));
    }
    return md / (mx > 0 ? mx : 1);
}

static double row_rel_diff_f(const float *a, const float *b, uint32_t n) {
    double md = 0, mx = 0;
    for (uint32_t i = 0; i < n; i++) {
        md = fmax(md, fabs((double)a[i] - (double)b[i]));
        mx = fmax(mx, fabs((double)b[i]));
    }
    return md / (mx > 0 ? mx : 1);
}

/* ---- Naive reference LLaMA in double precision ---- */

struct ref_layer {
    double *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *wg, *wu, *wd;
};

struct ref_model {
    struct pl_model_hparams hp;
    double *embd, *out_norm, *out;
    struct ref_layer *l;
};

/* The whole tensor as doubles, dequantized by the scalar reference kernels. */
static double *ref_tensor(const struct pl_gguf *g, const char *name) {
    const struct pl_gguf_tensor *t = pl_gguf_find_tensor(g, name);
    if (!t)
        fail_msg("reference: no tensor %s", name);
    const struct pl_quant_kernels *k = pl_quant_kernels_ref(t->type);
    assert_non_null(k);
    assert_non_null(k->to_f32);
    float *f = malloc(t->n_elems * sizeof(float));
    double *d = malloc(t->n_elems * sizeof(double));
    assert_non_null(f);
    assert_non_null(d);
    k->to_f32(t->data, f, (int64_t)t->n_elems);
    for (uint64_t i = 0; i < t->n_elems; i++)
        d[i] = f[i];
    free(f);
    return d;
}

static void ref_load(struct ref_model *r, const struct pl_model *m) {
    const struct pl_gguf *g = pl_model_gguf(m);
    char name[128];
    r->hp = *pl_model_hparams(m);
    r->embd = ref_tensor(g, "token_embd.weight");
    r->out_norm = ref_tensor(g, "output_norm.weight");
    r->out = pl_gguf_find_tensor(g, "output.weight") ? ref_tensor(g, "output.weight")
                                                     : ref_tensor(g, "token_embd.weight");
    r->l = calloc(r->hp.n_layer, sizeof(*r->l));
    assert_non_null(r->l);
    for (uint32_t i = 0; i < r->hp.n_layer; i++) {
#define T(field, suffix)                                                                           \
    (snprintf(name, sizeof(name), "blk.%u." suffix, i), r->l[i].field = ref_tensor(g, name))
        T(attn_norm, "attn_norm.weight");
        T(wq, "attn_q.weight");
        T(wk, "attn_k.weight");
        T(wv, "attn_v.weight");
        T(wo, "attn_output.weight");
        T(ffn_norm, "ffn_norm.weight");
        T(wg, "ffn_gate.weight");
        T(wu, "ffn_up.weight");
        T(wd, "ffn_down.weight");
#undef T
    }
}

static void ref_free(struct ref_model *r) {
    for (uint32_t i = 0; i < r->hp.n_layer; i++) {
        struct ref_layer *l = &r->l[i];
        free(l->attn_norm), free(l->wq), free(l->wk), free(l->wv), free(l->wo);
        free(l->ffn_norm), free(l->wg), free(l->wu), free(l->wd);
    }
    free(r->l);
    free(r->embd), free(r->out_norm), free(r->out);
}

static void ref_rmsnorm(double *y, const double *x, const double *w, uint32_t n, double eps) {
    double ss = 0;
    for (uint32_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    double s = 1.0 / sqrt(ss / n + eps);
    for (uint32_t i = 0; i < n; i++)
        y[i] = x[i] * s * w[i];
}

/* y[rows] = W[rows][cols] x[cols] */
static void ref_matvec(double *y, const double *w, const double *x, uint32_t rows, uint32_t cols) {
    for (uint32_t r = 0; r < rows; r++) {
        double s = 0;
        for (uint32_t i = 0; i < cols; i++)
            s += w[(size_t)r * cols + i] * x[i];
        y[r] = s;
    }
}

static void ref_rope(double *x, uint32_t n_heads, const struct pl_model_hparams *hp, int pos) {
    for (uint32_t h = 0; h < n_heads; h++)
        for (uint32_t i = 0; i < hp->n_rot / 2; i++) {
            double theta = pos * (double)hp->rope_freq_scale *
                           pow((double)hp->rope_freq_base, -2.0 * i / hp->n_rot);
            double *p = x + (size_t)h * hp->head_dim + 2 * i;
            double x0 = p[0], x1 = p[1];
            p[0] = x0 * cos(theta) - x1 * sin(theta);
            p[1] = x0 * sin(theta) + x1 * cos(theta);
        }
}

/* Logits of every position of toks[0..n): out[n][n_vocab]. */
static void ref_forward(const struct ref_model *r, const int32_t *toks, uint32_t n, double *out) {
    const struct pl_model_hparams *hp = &r->hp;
    const uint32_t E = hp->n_embd, F = hp->n_ff, hd = hp->head_dim;
    const uint32_t qd = hp->n_head * hd, kvd = hp->n_head_kv * hd;
    double *K = calloc((size_t)hp->n_layer * n * kvd, sizeof(double));
    double *V = calloc((size_t)hp->n_layer * n * kvd, sizeof(double));
    double *x = calloc(E, sizeof(double)), *xb = calloc(E, sizeof(double));
    double *q = calloc(qd, sizeof(double)), *att = calloc(qd, sizeof(double));
    double *tmp = calloc(E, sizeof(double)), *sc = calloc(n, sizeof(double));
    double *g = calloc(F, sizeof(double)), *u = calloc(F, sizeof(double));
    assert_true(K && V && x && xb && q && att && tmp && sc && g && u);

    for (uint32_t p = 0; p < n; p++) {
        memcpy(x, r->embd + (size_t)toks[p] * E, E * sizeof(double));
        for (uint32_t il = 0; il < hp->n_layer; il++) {
            const struct ref_layer *l = &r->l[il];
            double *kp = K + ((size_t)il * n + p) * kvd, *vp = V + ((size_t)il * n + p) * kvd;
            ref_rmsnorm(xb, x, l->attn_norm, E, hp->rms_eps);
            ref_matvec(q, l->wq, xb, qd, E);
            ref_matvec(kp, l->wk, xb, kvd, E);
            ref_matvec(vp, l->wv, xb, kvd, E);
            ref_rope(q, hp->n_head, hp, (int)p);
            ref_rope(kp, hp->n_head_kv, hp, (int)p);
            for (uint32_t h = 0; h < hp->n_head; h++) {
                uint32_t kh = h / (hp->n_head / hp->n_head_kv);
                double mx = -INFINITY, sum = 0;
                for (uint32_t t = 0; t <= p; t++) {
                    const double *kt = K + ((size_t)il * n + t) * kvd + (size_t)kh * hd;
                    double s = 0;
                    for (uint32_t d = 0; d < hd; d++)
                        s += q[(size_t)h * hd + d] * kt[d];
                    sc[t] = s / sqrt((double)hd);
                    mx = fmax(mx, sc[t]);
                }
                for (uint32_t t = 0; t <= p; t++)
                    sum += (sc[t] = exp(sc[t] - mx));
                for (uint32_t d = 0; d < hd; d++) {
                    double a = 0;
                    for (uint32_t t = 0; t <= p; t++)
                        a += sc[t] / sum * V[((size_t)il * n + t) * kvd + (size_t)kh * hd + d];
                    att[(size_t)h * hd + d] = a;
                }
            }
            ref_matvec(tmp, l->wo, att, E, qd);
            for (uint32_t i = 0; i < E; i++)
                x[i] += tmp[i];
            ref_rmsnorm(xb, x, l->ffn_norm, E, hp->rms_eps);
            ref_matvec(g, l->wg, xb, F, E);
            ref_matvec(u, l->wu, xb, F, E);
            for (uint32_t i = 0; i < F; i++)
                g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
            ref_matvec(tmp, l->wd, g, E, F);
            for (uint32_t i = 0; i < E; i++)
                x[i] += tmp[i];
        }
        ref_rmsnorm(xb, x, r->out_norm, E, hp->rms_eps);
        ref_matvec(out + (size_t)p * hp->n_vocab, r->out, xb, hp->n_vocab, E);
    }
    free(K), free(V), free(x), free(xb), free(q), free(att), free(tmp), free(sc), free(g), free(u);
}

/* ---- Tests ---- */

/* Our logits for every position, fed one token per call and as one prefill batch, against
 * the double reference. */
static void check_against_reference(uint32_t kv_type, double tol) {
    struct pl_model *m = load_model(2);
    const uint32_t nv = pl_model_hparams(m)->n_vocab;
    struct ref_model ref;
    double *want = malloc((size_t)N_TOKS * nv * sizeof(double));
    float *got = malloc((size_t)N_TOKS * nv * sizeof(float));
    assert_non_null(want);
    assert_non_null(got);
    ref_load(&ref, m);
    ref_forward(&ref, k_toks, N_TOKS, want);

    /* One token per call. */
    struct pl_ctx *c = new_ctx(m, 64, 1, 0, 8, kv_type);
    double worst = 0;
    for (uint32_t p = 0; p < N_TOKS; p++) {
        assert_int_equal(decode1(c, k_toks[p], (int32_t)p, 0, got), 0);
        worst = fmax(worst, row_rel_diff(got, want + (size_t)p * nv, nv));
    }
    print_message("kv %s, token by token: max rel diff %.3g\n", kv_type ? "f32" : "f16", worst);
    assert_true(worst < tol);
    assert_int_equal(pl_ctx_seq_len(c, 0), N_TOKS);
    pl_ctx_free(c);

    /* Whole prompt in one batch, logits everywhere. */
    c = new_ctx(m, 64, 1, 0, 64, kv_type);
    int32_t pos[N_TOKS], seq[N_TOKS];
    bool lg[N_TOKS];
    for (uint32_t i = 0; i < N_TOKS; i++)
        pos[i] = (int32_t)i, seq[i] = 0, lg[i] = true;
    struct pl_batch b = {.n = N_TOKS, .token = k_toks, .pos = pos, .seq = seq, .logits = lg};
    assert_int_equal(pl_ctx_decode(c, &b, got), 0);
    worst = 0;
    for (uint32_t p = 0; p < N_TOKS; p++)
        worst = fmax(worst, row_rel_diff(got + (size_t)p * nv, want + (size_t)p * nv, nv));
    print_message("kv %s, one batch:     max rel diff %.3g\n", kv_type ? "f32" : "f16", worst);
    assert_true(worst < tol);
    pl_ctx_free(c);

    ref_free(&ref);
    free(want);
    free(got);
    pl_model_free(m);
}

static void test_forward_matches_reference_kv_f32(void **state) {
    (void)state;
    check_against_reference(PL_KV_F32, TOL_REF_KV_F32);
}

static void test_forward_matches_reference_kv_f16(void **state) {
    (void)state;
    check_against_reference(PL_KV_F16, TOL_REF_KV_F16);
}

/* Three sequences of different lengths prefilled and then decoded together give the
 * logits each gets alone; and the thread count does not change any logit. */
static void test_forward_batched_sequences_match_solo(void **state) {
    (void)state;
    static const uint32_t lens[3] = {5, 2, 9};
    static const uint32_t offs[3] = {0, 7, 3}; /* where in k_toks each sequence starts */
    const uint32_t n_steps = 3;
    struct pl_model *m = load_model(2);
    struct pl_model *m3 = load_model(3);
    const uint32_t nv = pl_model_hparams(m)->n_vocab;
    float *solo = calloc((size_t)3 * (9 + n_steps) * nv, sizeof(float));
    float *bat = calloc((size_t)3 * (9 + n_steps) * nv, sizeof(float));
    assert_non_null(solo);
    assert_non_null(bat);
#define AT(buf, s, p) ((buf) + ((size_t)(s) * (9 + n_steps) + (p)) * nv)

    /* Alone: one sequence at a time in a single-sequence context (one token per call). */
    struct pl_ctx *c = new_ctx(m, 64, 1, 0, 16, PL_KV_F16);
    for (uint32_t s = 0; s < 3; s++) {
        for (uint32_t p = 0; p < lens[s] + n_steps; p++)
            assert_int_equal(decode1(c, k_toks[offs[s] + p], (int32_t)p, 0, AT(solo, s, p)), 0);
        pl_ctx_seq_clear(c, 0);
    }
    pl_ctx_free(c);

    /* Together, on a pool of 3 threads: one interleaved prefill batch, then steps of one
     * token per sequence. */
    c = new_ctx(m3, 64, 3, 0, 32, PL_KV_F16);
    int32_t tok[32], pos[32], seq[32];
    bool lg[32];
    uint32_t n = 0, done[3] = {0, 0, 0};
    for (uint32_t round = 0; n < lens[0] + lens[1] + lens[2]; round++)
        for (uint32_t s = 0; s < 3; s++)
            if (done[s] < lens[s]) {
                tok[n] = k_toks[offs[s] + done[s]];
                pos[n] = (int32_t)done[s];
                seq[n] = (int32_t)s;
                lg[n] = true;
                n++, done[s]++;
            }
    float *out = calloc((size_t)n * nv, sizeof(float));
    assert_non_null(out);
    struct pl_batch b = {.n = n, .token = tok, .pos = pos, .seq = seq, .logits = lg};
    assert_int_equal(pl_ctx_decode(c, &b, out), 0);
    for (uint32_t i = 0; i < n; i++)
        memcpy(AT(bat, seq[i], pos[i]), out + (size_t)i * nv, nv * sizeof(float));
    for (uint32_t k = 0; k < n_steps; k++) {
        for (uint32_t s = 0; s < 3; s++) {
            tok[s] = k_toks[offs[s] + lens[s] + k];
            pos[s] = (int32_t)(lens[s] + k);
            seq[s] = (int32_t)s;
            lg[s] = true;
        }
        b.n = 3;
        assert_int_equal(pl_ctx_decode(c, &b, out), 0);
        for (uint32_t s = 0; s < 3; s++)
            memcpy(AT(bat, s, lens[s] + k), out + (size_t)s * nv, nv * sizeof(float));
    }
    for (uint32_t s = 0; s < 3; s++)
        assert_int_equal(pl_ctx_seq_len(c, (int32_t)s), lens[s] + n_steps);

    double worst = 0;
    bool identical = true;
    for (uint32_t s = 0; s < 3; s++)
        for (uint32_t p = 0; p < lens[s] + n_steps; p++) {
            worst = fmax(worst, row_rel_diff_f(AT(bat, s, p), AT(solo, s, p), nv));
            identical &= memcmp(AT(bat, s, p), AT(solo, s, p), nv * sizeof(float)) == 0;
        }
    print_message("batched vs alone: max rel diff %.3g (%s)\n", worst,
                  identical ? "bit-identical" : "not bit-identical");
    assert_true(worst <= TOL_BATCH);
#undef AT
    free(out);
    free(solo);
    free(bat);
    pl_ctx_free(c);
    pl_model_free(m);
    pl_model_free(m3);
}

/* A full pool refuses a batch without changing anything: the sequences go on exactly as in
 * a context that never saw the refused batch. Clearing a sequence returns its blocks. */
static void test_forward_pool_exhaustion_leaves_cache_unchanged(void **state) {
    (void)state;
    struct pl_model *m = load_model(2);
    const uint32_t nv = pl_model_hparams(m)->n_vocab;
    float *a = malloc(nv * sizeof(float)), *b = malloc(nv * sizeof(float));
    assert_non_null(a);
    assert_non_null(b);
    /* 32 token slots = 2 blocks of 16 for 2 sequences of up to 64 tokens. */
    struct pl_ctx *c = new_ctx(m, 64, 2, 32, 32, PL_KV_F16);
    struct pl_ctx *ref = new_ctx(m, 64, 1, 0, 32, PL_KV_F16);
    assert_int_equal(pl_ctx_kv_total(c), 32);

    for (uint32_t p = 0; p < 17; p++) { /* seq 0 takes both blocks */
        assert_int_equal(decode1(c, k_toks[p], (int32_t)p, 0, a), 0);
        assert_int_equal(decode1(ref, k_toks[p], (int32_t)p, 0, b), 0);
    }
    assert_int_equal(pl_ctx_kv_used(c), 32);

    /* seq 1 needs a third block. A mixed batch (seq 0 would fit) is refused as a whole. */
    int32_t tok[2] = {k_toks[17], 5}, pos[2] = {17, 0}, seq[2] = {0, 1};
    struct pl_batch bt = {.n = 2, .token = tok, .pos = pos, .seq = seq, .logits = NULL};
    assert_int_equal(pl_ctx_decode(c, &bt, a), -PL_ERR_EXHAUSTED);
    assert_int_equal(decode1(c, 5, 0, 1, a), -PL_ERR_EXHAUSTED);
    assert_int_equal(pl_ctx_seq_len(c, 0), 17);
    assert_int_equal(pl_ctx_seq_len(c, 1), 0);
    assert_int_equal(pl_ctx_kv_used(c), 32);

    /* seq 0 continues up to the pool's 32 tokens with the same logits as the reference. */
    for (uint32_t p = 17; p < 21; p++) {
        assert_int_equal(decode1(c, k_toks[p], (int32_t)p, 0, a), 0);
        assert_int_equal(decode1(ref, k_toks[p], (int32_t)p, 0, b), 0);
        assert_memory_equal(a, b, nv * sizeof(float));
    }

    /* Clearing seq 0 returns its blocks; seq 1 then fits and decodes as a fresh sequence. */
    pl_ctx_seq_clear(c, 0);
    assert_int_equal(pl_ctx_kv_used(c), 0);
    assert_int_equal(pl_ctx_seq_len(c, 0), 0);
    pl_ctx_seq_clear(ref, 0);
    for (uint32_t p = 0; p < 18; p++) {
        assert_int_equal(decode1(c, k_toks[p], (int32_t)p, 1, a), 0);
        assert_int_equal(decode1(ref, k_toks[p], (int32_t)p, 0, b), 0);
        assert_memory_equal(a, b, nv * sizeof(float));
    }
    assert_int_equal(pl_ctx_kv_used(c), 32);
    pl_ctx_seq_clear(c, 1);
    pl_ctx_seq_clear(c, 7);  /* out of range: ignored */
    pl_ctx_seq_clear(c, -1); /* out of range: ignored */
    assert_int_equal(pl_ctx_kv_used(c), 0);
    pl_ctx_free(c);

    /* A sequence may not grow past n_ctx even when the pool has room. */
    c = new_ctx(m, 16, 1, 64, 32, PL_KV_F32);
    for (uint32_t p = 0; p < 16; p++)
        assert_int_equal(decode1(c, k_toks[p], (int32_t)p, 0, a), 0);
    assert_int_equal(decode1(c, 3, 16, 0, a), -PL_ERR_EXHAUSTED);
    assert_int_equal(pl_ctx_seq_len(c, 0), 16);
    pl_ctx_free(c);

    pl_ctx_free(ref);
    free(a);
    free(b);
    pl_model_free(m);
}

/* Every malformed batch entry is refused with -EINVAL and changes nothing. */
static void test_forward_rejects_bad_batches(void **state) {
    (void)state;
    struct pl_model *m = load_model(1);
    const uint32_t nv = pl_model_hparams(m)->n_vocab;
    float *out = malloc(2 * nv * sizeof(float));
    assert_non_null(out);
    struct pl_ctx *c = new_ctx(m, 32, 2, 0, 4, PL_KV_F16);
    assert_int_equal(decode1(c, 1, 0, 0, out), 0);

    assert_int_equal(decode1(c, -1, 1, 0, out), -EINVAL);
    assert_int_equal(decode1(c, (int32_t)nv, 1, 0, out), -EINVAL);
    assert_int_equal(decode1(c, 5, 1, -1, out), -EINVAL);
    assert_int_equal(decode1(c, 5, 1, 2, out), -EINVAL);
    assert_int_equal(decode1(c, 5, 0, 0, out), -EINVAL);  /* position already cached */
    assert_int_equal(decode1(c, 5, 2, 0, out), -EINVAL);  /* gap */
    assert_int_equal(decode1(c, 5, -1, 0, out), -EINVAL); /* negative */
    assert_int_equal(decode1(c, 5, 1, 0, NULL), -EINVAL); /* logits wanted, no buffer */
    {
        int32_t tok[2] = {5, 6}, pos[2] = {1, 1}, seq[2] = {0, 0}; /* repeated position */
        struct pl_batch b = {.n = 2, .token = tok, .pos = pos, .seq = seq};
        assert_int_equal(pl_ctx_decode(c, &b, out), -EINVAL);
        pos[1] = 3; /* skips position 2 */
        assert_int_equal(pl_ctx_decode(c, &b, out), -EINVAL);
        b.token = NULL;
        assert_int_equal(pl_ctx_decode(c, &b, out), -EINVAL);
    }
    {
        int32_t tok[5] = {5, 6, 7, 8, 9}, pos[5] = {1, 2, 3, 4, 5}, seq[5] = {0};
        struct pl_batch b = {.n = 5, .token = tok, .pos = pos, .seq = seq}; /* n > n_batch */
        assert_int_equal(pl_ctx_decode(c, &b, out), -EINVAL);
        b.n = 0;
        assert_int_equal(pl_ctx_decode(c, &b, out), 0);
    }
    assert_int_equal(pl_ctx_decode(c, NULL, out), -EINVAL);
    assert_int_equal(pl_ctx_seq_len(c, 0), 1);
    assert_int_equal(pl_ctx_seq_len(c, 1), 0);
    assert_int_equal(pl_ctx_kv_used(c), 16);

    /* No logits wanted: out may be NULL. */
    {
        int32_t tok = 5, pos = 1, seq = 0;
        bool no = false;
        struct pl_batch b = {.n = 1, .token = &tok, .pos = &pos, .seq = &seq, .logits = &no};
        assert_int_equal(pl_ctx_decode(c, &b, NULL), 0);
        assert_int_equal(pl_ctx_seq_len(c, 0), 2);
    }
    pl_ctx_free(c);

    struct pl_ctx_opts bad = {.kv_type = 7};
    assert_int_equal(pl_ctx_new(m, &bad, &c), -EINVAL);
    assert_int_equal(pl_ctx_new(NULL, NULL, &c), -EINVAL);
    free(out);
    pl_model_free(m);
}

/* ---- Smoke check against llama.cpp (stories260K prompt 0) ---- */

static char *slurp(const char *path, size_t *ret_len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t cap = 0, len = 0;
    for (;;) {
        if (len + 65536 + 1 > cap) {
            cap = (len + 65536 + 1) * 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        size_t got = fread(buf + len, 1, 65536, f);
        len += got;
        if (got == 0)
            break;
    }
    fclose(f);
    buf[len] = '\0';
    *ret_len = len;
    return buf;
}

/* Parse the numbers of the JSON array that follows `"key": [` after *at; advances *at. */
static uint32_t json_numbers(const char **at, const char *key, double *out, uint32_t cap) {
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\": [", key);
    const char *p = strstr(*at, pat);
    assert_non_null(p);
    p += strlen(pat);
    uint32_t n = 0;
    while (*p && *p != ']') {
        char *end;
        double v = strtod(p, &end);
        if (end == p) {
            p++;
            continue;
        }
        assert_true(n < cap);
        out[n++] = v;
        p = end;
    }
    *at = p;
    return n;
}

static void test_forward_matches_llamacpp_stories260k(void **state) {
    (void)state;
    size_t json_len, bin_len;
    char *json = slurp(g_ref_path, &json_len);
    float *bin = (float *)(void *)slurp(g_bin_path, &bin_len);
    if (!json || !bin) {
        free(json);
        free(bin);
        skip();
    }
    struct pl_model *m = load_model(2);
    const uint32_t nv = pl_model_hparams(m)->n_vocab;
    assert_true(bin_len >= (size_t)3 * nv * sizeof(float));

    double ids[256], lpos[3], greedy[32], top1[32], top2[32];
    const char *at = strstr(json, "\"prompts\"");
    assert_non_null(at);
    uint32_t n = json_numbers(&at, "token_ids", ids, 256);
    assert_int_equal(json_numbers(&at, "logit_positions", lpos, 3), 3);
    assert_int_equal(json_numbers(&at, "token_ids", greedy, 32), 32); /* greedy's */
    assert_int_equal(json_numbers(&at, "top1_logit", top1, 32), 32);
    assert_int_equal(json_numbers(&at, "top2_logit", top2, 32), 32);

    struct pl_ctx *c = new_ctx(m, 256, 1, 0, 64, PL_KV_F32);
    int32_t tok[256], pos[256], seq[256];
    bool lg[256];
    for (uint32_t i = 0; i < n; i++) {
        tok[i] = (int32_t)ids[i], pos[i] = (int32_t)i, seq[i] = 0;
        lg[i] = i == (uint32_t)lpos[0] || i == (uint32_t)lpos[1] || i == (uint32_t)lpos[2];
    }
    float *out = calloc((size_t)3 * nv, sizeof(float));
    assert_non_null(out);
    /* Prefill chunked by n_batch (positions 0 and n/2 land in different chunks). */
    uint32_t k = 0;
    for (uint32_t i0 = 0; i0 < n; i0 += 16) {
        uint32_t cnt = n - i0 < 16 ? n - i0 : 16;
        struct pl_batch b = {
            .n = cnt, .token = tok + i0, .pos = pos + i0, .seq = seq + i0, .logits = lg + i0};
        uint32_t wanted = 0;
        for (uint32_t i = 0; i < cnt; i++)
            wanted += lg[i0 + i];
        assert_int_equal(pl_ctx_decode(c, &b, out + (size_t)k * nv), 0);
        k += wanted;
    }
    assert_int_equal(k, 3);
    double worst = 0;
    for (uint32_t s = 0; s < 3; s++) {
        float *want = bin + (size_t)s * nv;
        worst = fmax(worst, row_rel_diff_f(out + (size_t)s * nv, want, nv));
    }
    print_message("stories260K prompt 0 vs llama.cpp: max rel diff %.3g\n", worst);
    assert_true(worst < TOL_LLAMACPP);

    /* Greedy continuation: equal token by token while llama.cpp's margin is safe. */
    float *lgt = out + 2 * (size_t)nv;
    uint32_t agree = 0;
    for (uint32_t step = 0; step < 32; step++) {
        uint32_t best = 0;
        for (uint32_t i = 1; i < nv; i++)
            if (lgt[i] > lgt[best])
                best = i;
        if (top1[step] - top2[step] < 0.001) /* below what 2 float orders may move */
            break;
        assert_int_equal(best, (uint32_t)greedy[step]);
        assert_true(fabs(lgt[best] - top1[step]) < TOL_LLAMACPP * fabs(top1[step]) + 1e-3);
        agree++;
        assert_int_equal(decode1(c, (int32_t)greedy[step], (int32_t)(n + step), 0, lgt), 0);
    }
    print_message("greedy tokens equal to llama.cpp: %u / 32\n", agree);
    assert_true(agree >= 16);

    pl_ctx_free(c);
    free(out);
    free(json);
    free(bin);
    pl_model_free(m);
}

int main(void) {
    const char *data = getenv("PICOLM_TEST_DATA");
    if (!data || !*data) {
        fprintf(stderr, "PICOLM_TEST_DATA not set: skipping\n");
        return 77;
    }
    snprintf(g_model_path, sizeof(g_model_path), "%s/models/stories260K.gguf", data);
    snprintf(g_ref_path, sizeof(g_ref_path), "%s/models/stories260K.ref.json", data);
    snprintf(g_bin_path, sizeof(g_bin_path), "%s/models/stories260K.logits.bin", data);
    FILE *f = fopen(g_model_path, "rb");
    if (!f) {
        fprintf(stderr, "%s missing: skipping\n", g_model_path);
        return 77;
    }
    fclose(f);

    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_matches_reference_kv_f32),
        cmocka_unit_test(test_forward_matches_reference_kv_f16),
        cmocka_unit_test(test_forward_batched_sequences_match_solo),
        cmocka_unit_test(test_forward_pool_exhaustion_leaves_cache_unchanged),
        cmocka_unit_test(test_forward_rejects_bad_batches),
        cmocka_unit_test(test_forward_matches_llamacpp_stories260k),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
