/* SPDX-License-Identifier: MIT */
/* Tests of the attention (engine/src/attn.c, engine/arch/x86/attn_{simd.h,avx512.c,avx2.c}):
 * the scalar and the vector kernel (AVX-512, or AVX2 with PICOLM_ISA=avx2) against a
 * double-precision two-pass softmax over the same cache values, on random Q/K/V in a paged
 * cache whose blocks interleave with another sequence's; F16 and F32 caches, grouped-query
 * ratios 1, 4 and 8 (and groups of 2, 3, 5, 7 heads), head dims 16 to 128 (and an odd one on
 * the scalar kernel), sequence lengths around block boundaries, score ranges wide enough that
 * exp() of the first scores underflows and a later block brings a far larger maximum; the
 * work split over threads running at once (groups cut for decode) giving identical bits. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "attn.h"
#include "kv.h"
#include "pl/engine_model.h"
#include "pl/engine_quant.h"

#define B PL_KV_BLOCK_TOKENS
#define LAYERS 2u
#define LAYER 1u /* the layer attended (not the first: layer offsets count) */

/* Lengths attended: 1, around block boundaries, and a long one. */
static const uint32_t n_kvs[] = {1, 2, B - 1, B, B + 1, 2 * B, 2 * B + 1, 5 * B + 7, 300};
#define N_TOK (sizeof(n_kvs) / sizeof(n_kvs[0]))
#define MAX_KV 300u

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static double urand(void) { /* [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

enum pattern {
    RANDOM,  /* i.i.d. values */
    RISING,  /* scores grow with position: every block brings a new, far larger maximum */
    FALLING, /* the maximum is at position 0, later scores far below it */
};

struct fixture {
    struct pl_kv kv;
    uint32_t n_head, n_head_kv, hd;
    float *kf, *vf; /* [MAX_KV][kv_dim]: the values the cache holds, as f32 */
    float *q;       /* [N_TOK][n_head * hd] */
};

/* x[0..n) into the cache at row, element i at i x stride elements (V rows: 1; K slots,
 * dimension-major: PL_KV_BLOCK_TOKENS), and what the cache holds, as f32, into held. */
static void store(struct pl_kv *kv, void *row, size_t stride, const float *x, uint32_t n,
                  float *held) {
    for (uint32_t i = 0; i < n; i++) {
        if (kv->type == PL_KV_F16) {
            uint16_t h = pl_f32_to_fp16(x[i]);
            ((uint16_t *)row)[i * stride] = h;
            held[i] = pl_fp16_to_f32(h);
        } else {
            ((float *)row)[i * stride] = x[i];
            held[i] = x[i];
        }
    }
}

/* Bytes that read as NaN in either cache type, into every slot of a block. */
static void poison_block(struct pl_kv *kv, uint8_t *block) {
    memset(block, 0xFF, kv->block_bytes);
}

/* A cache with MAX_KV positions of sequence 0 (its blocks interleaved with sequence 1's)
 * and queries for the N_TOK entries. amp scales the queries: scores reach about amp. */
static void fixture_make(struct fixture *f, uint32_t type, uint32_t n_head, uint32_t n_head_kv,
                         uint32_t hd, enum pattern pat, double amp) {
    const uint32_t kv_dim = n_head_kv * hd, q_dim = n_head * hd;
    memset(f, 0, sizeof(*f));
    f->n_head = n_head;
    f->n_head_kv = n_head_kv;
    f->hd = hd;
    assert_int_equal(pl_kv_init(&f->kv, LAYERS, kv_dim, 2, MAX_KV, 2 * MAX_KV, type), 0);
    for (uint32_t len = B; len < MAX_KV + B; len += 2 * B) {
        uint32_t l = len < MAX_KV ? len : MAX_KV;
        assert_int_equal(pl_kv_reserve(&f->kv, 0, l), 0);
        assert_int_equal(pl_kv_reserve(&f->kv, 1, l), 0);
    }
    /* Every slot reserved starts as NaN: slots past the last position written (the end of
     * the last block) must never reach a result. */
    for (uint32_t l = 0; l < LAYERS; l++)
        for (uint32_t sq = 0; sq < 2; sq++)
            for (uint32_t i = 0; i < f->kv.n_held[sq]; i++) {
                poison_block(&f->kv, (uint8_t *)pl_kv_k_block(&f->kv, l, sq, i));
                poison_block(&f->kv, (uint8_t *)pl_kv_v_block(&f->kv, l, sq, i));
            }
    f->kf = calloc((size_t)MAX_KV * kv_dim, sizeof(float));
    f->vf = calloc((size_t)MAX_KV * kv_dim, sizeof(float));
    f->q = calloc((size_t)N_TOK * q_dim, sizeof(float));
    float *tmp = calloc(kv_dim, sizeof(float));
    assert_non_null(f->kf);
    assert_non_null(f->vf);
    assert_non_null(f->q);
    assert_non_null(tmp);

    /* Queries: random, or along dimension 0 only for the ordered patterns. */
    for (size_t i = 0; i < (size_t)N_TOK * q_dim; i++) {
        double x = pat == RANDOM ? urand() : (i % hd == 0 ? 1.0 : 0.02 * urand());
        f->q[i] = (float)(x * amp * (pat == RANDOM ? sqrt(3.0 / hd) * sqrt(sqrt(hd)) : sqrt(hd)));
    }
    for (uint32_t p = 0; p < MAX_KV; p++) {
        for (uint32_t l = 0; l < LAYERS; l++) {
            for (uint32_t i = 0; i < kv_dim; i++) {
                double x = urand();
                if (pat != RANDOM && i % hd == 0) /* the component the queries look at */
                    x = pat == RISING ? -1.0 + 2.0 * p / MAX_KV : (p == 0 ? 1.0 : -0.5 * x * x);
                tmp[i] = (float)x;
            }
            store(&f->kv, pl_kv_k_slot(&f->kv, l, 0, p), B, tmp, kv_dim,
                  f->kf + (size_t)p * kv_dim);
            for (uint32_t i = 0; i < kv_dim; i++)
                tmp[i] = (float)urand();
            store(&f->kv, pl_kv_v_row(&f->kv, l, 0, p), 1, tmp, kv_dim, f->vf + (size_t)p * kv_dim);
        }
    }
    /* Sequence 1's rows: garbage the attention of sequence 0 must never see. */
    for (uint32_t p = 0; p < MAX_KV; p++)
        for (uint32_t l = 0; l < LAYERS; l++) {
            for (uint32_t i = 0; i < kv_dim; i++)
                memset((uint8_t *)pl_kv_k_slot(&f->kv, l, 1, p) +
                           (size_t)i * B * (f->kv.row_bytes / kv_dim),
                       0x7F, f->kv.row_bytes / kv_dim);
            memset(pl_kv_v_row(&f->kv, l, 1, p), 0xFF, f->kv.row_bytes);
        }
    free(tmp);
}

static void fixture_free(struct fixture *f) {
    pl_kv_done(&f->kv);
    free(f->kf);
    free(f->vf);
    free(f->q);
}

/* Two-pass softmax in double over the held values (the query rounded to f16 with an F16
 * cache, as the kernels define it); out [N_TOK][n_head * hd]. Returns the widest score range
 * seen (max - min over one entry and head). */
static double reference(const struct fixture *f, double *out) {
    const uint32_t hd = f->hd, kv_dim = f->n_head_kv * hd, q_dim = f->n_head * hd;
    const uint32_t g = f->n_head / f->n_head_kv;
    double *sc = calloc(MAX_KV, sizeof(double)), widest = 0.0;
    assert_non_null(sc);
    for (uint32_t t = 0; t < N_TOK; t++)
        for (uint32_t h = 0; h < f->n_head; h++) {
            const float *q = f->q + (size_t)t * q_dim + (size_t)h * hd;
            const size_t ko = (size_t)(h / g) * hd;
            double mx = -INFINITY, mn = INFINITY, sum = 0.0;
            for (uint32_t p = 0; p < n_kvs[t]; p++) {
                double acc = 0.0;
                for (uint32_t d = 0; d < hd; d++) {
                    double qd =
                        f->kv.type == PL_KV_F16 ? pl_fp16_to_f32(pl_f32_to_fp16(q[d])) : q[d];
                    acc += qd * f->kf[(size_t)p * kv_dim + ko + d];
                }
                sc[p] = acc / sqrt((double)hd);
                mx = fmax(mx, sc[p]);
                mn = fmin(mn, sc[p]);
            }
            widest = fmax(widest, mx - mn);
            for (uint32_t p = 0; p < n_kvs[t]; p++)
                sum += sc[p] = exp(sc[p] - mx);
            double *o = out + (size_t)t * q_dim + (size_t)h * hd;
            for (uint32_t d = 0; d < hd; d++) {
                double acc = 0.0;
                for (uint32_t p = 0; p < n_kvs[t]; p++)
                    acc += sc[p] * f->vf[(size_t)p * kv_dim + ko + d];
                o[d] = acc / sum;
            }
        }
    free(sc);
    return widest;
}

struct share {
    pthread_t tid;
    const struct pl_attn *a;
    const struct fixture *f;
    const int32_t *pos, *seq;
    uint32_t n_tok, ith, nth;
    float *out;
};

static void *share_run(void *arg) {
    const struct share *sh = arg;
    pl_attn_run(sh->a, &sh->f->kv, LAYER, sh->n_tok, sh->pos, sh->seq, sh->f->q, sh->out, sh->ith,
                sh->nth);
    return NULL;
}

/* Attention of the first n_tok entries by kernel choice simd, on nth threads at once (as
 * the forward pass runs it); returns false when that kernel is not available here. */
static bool run(const struct fixture *f, bool simd, uint32_t nth, uint32_t n_tok, float *out) {
    struct pl_attn a;
    struct share sh[4];
    int32_t pos[N_TOK], seq[N_TOK];
    for (uint32_t t = 0; t < N_TOK; t++) {
        pos[t] = (int32_t)n_kvs[t] - 1;
        seq[t] = 0;
    }
    assert_int_equal(
        pl_attn_init(&a, f->n_head, f->n_head_kv, f->hd, MAX_KV, nth, f->kv.type, simd), 0);
    if (a.simd != simd) {
        pl_attn_done(&a);
        return false;
    }
    assert_true(nth >= 1 && nth <= 4);
    for (uint32_t ith = 0; ith < nth; ith++) {
        sh[ith] = (struct share){.a = &a,
                                 .f = f,
                                 .pos = pos,
                                 .seq = seq,
                                 .n_tok = n_tok,
                                 .ith = ith,
                                 .nth = nth,
                                 .out = out};
        if (ith > 0)
            assert_int_equal(pthread_create(&sh[ith].tid, NULL, share_run, &sh[ith]), 0);
    }
    share_run(&sh[0]);
    for (uint32_t ith = 1; ith < nth; ith++)
        assert_int_equal(pthread_join(sh[ith].tid, NULL), 0);
    pl_attn_done(&a);
    return true;
}

/* max |got - want| over the n_tok entries, relative to max |v| (1). */
static double max_err(const float *got, const double *want, size_t n) {
    double e = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i]))
            return INFINITY;
        e = fmax(e, fabs(got[i] - want[i]));
    }
    return e;
}

static void check_case(uint32_t type, uint32_t n_head, uint32_t n_head_kv, uint32_t hd,
                       enum pattern pat, double amp, bool want_simd) {
    struct fixture f;
    fixture_make(&f, type, n_head, n_head_kv, hd, pat, amp);
    const size_t n = (size_t)N_TOK * n_head * hd;
    double *want = calloc(n, sizeof(double));
    float *got = calloc(n, sizeof(float)), *got3 = calloc(n, sizeof(float));
    assert_non_null(want);
    assert_non_null(got);
    assert_non_null(got3);
    const double range = reference(&f, want);
    /* The probabilities are rounded to f16 with an F16 cache (relative 2^-11); float scores
     * err by about 2^-24 of their magnitude, which exp() turns into a relative error. */
    const double tol = (type == PL_KV_F16 ? 4e-4 : 2e-5) + 1e-6 * amp;
    const bool simds[2] = {false, true};
    for (int k = 0; k < 2; k++) {
        if (simds[k] && !want_simd)
            continue;
        memset(got, 0, n * sizeof(float));
        if (!run(&f, simds[k], 1, N_TOK, got)) {
            static bool told;
            if (!told)
                print_message("[ attn ] no vector kernel here: scalar only\n");
            told = true;
            continue;
        }
        double e = max_err(got, want, n);
        if (e > tol || getenv("ATTN_VERBOSE"))
            print_message("[ attn ] %s type %u heads %u/%u hd %u pattern %d amp %g: max err %g "
                          "(tol %g, score range %g)\n",
                          simds[k] ? "simd" : "scalar", type, n_head, n_head_kv, hd, pat, amp, e,
                          tol, range);
        assert_true(e <= tol);
        /* Three threads, and a lone decode entry over four (groups cut in parts): every
         * head gets exactly the same result whatever the split. */
        memset(got3, 0, n * sizeof(float));
        assert_true(run(&f, simds[k], 3, N_TOK, got3));
        assert_memory_equal(got, got3, n * sizeof(float));
        memset(got3, 0, n * sizeof(float));
        assert_true(run(&f, simds[k], 4, 1, got3));
        assert_memory_equal(got, got3, (size_t)n_head * hd * sizeof(float));
    }
    if (pat != RANDOM) /* the wide ranges were really exercised */
        assert_true(range > (amp > 50 ? 100.0 : 1.0));
    free(want);
    free(got);
    free(got3);
    fixture_free(&f);
}

static void test_attn_f16_gqa(void **state) {
    (void)state;
    static const uint32_t ratios[] = {1, 4, 8};
    for (size_t r = 0; r < 3; r++) {
        check_case(PL_KV_F16, 2 * ratios[r], 2, 64, RANDOM, 4.0, true);
        check_case(PL_KV_F16, 2 * ratios[r], 2, 128, RANDOM, 4.0, true);
    }
}

static void test_attn_f32_gqa(void **state) {
    (void)state;
    static const uint32_t ratios[] = {1, 4, 8};
    for (size_t r = 0; r < 3; r++) {
        check_case(PL_KV_F32, 2 * ratios[r], 2, 64, RANDOM, 4.0, true);
        check_case(PL_KV_F32, 2 * ratios[r], 2, 128, RANDOM, 4.0, true);
    }
}

/* Head sizes of 1 to 5 chunks of 16 and groups of 2, 3, 5 and 7 query heads: every run
 * length of the vector kernels (8, 4, 2, 1 heads; AVX2 at most 4) and their chunk tails. */
static void test_attn_head_shapes(void **state) {
    (void)state;
    static const uint32_t hds[] = {16, 32, 48, 80};
    static const uint32_t groups[] = {2, 3, 5, 7};
    for (size_t i = 0; i < 4; i++)
        for (size_t g = 0; g < 4; g++) {
            check_case(PL_KV_F16, 2 * groups[g], 2, hds[i], RANDOM, 4.0, true);
            check_case(PL_KV_F32, groups[g], 1, hds[i], RANDOM, 4.0, true);
        }
}

/* Scores spanning hundreds: the first scores' exp() underflows once a block brings a new
 * maximum (RISING), or every later score underflows against the first (FALLING). */
static void test_attn_wide_score_ranges(void **state) {
    (void)state;
    static const enum pattern pats[] = {RISING, FALLING, RANDOM};
    for (size_t p = 0; p < 3; p++) {
        check_case(PL_KV_F16, 8, 2, 64, pats[p], 200.0, true);
        check_case(PL_KV_F32, 8, 2, 128, pats[p], 200.0, true);
        check_case(PL_KV_F32, 4, 1, 64, pats[p], 2.0, true);
    }
}

/* A head dim the vector kernel does not take: the scalar kernel, chosen even when the
 * vector one is asked for. */
static void test_attn_odd_head_dim(void **state) {
    (void)state;
    check_case(PL_KV_F16, 8, 2, 37, RANDOM, 4.0, false);
    check_case(PL_KV_F32, 4, 4, 37, RISING, 200.0, false);
    struct pl_attn a;
    assert_int_equal(pl_attn_init(&a, 8, 2, 37, 64, 1, PL_KV_F16, true), 0);
    assert_false(a.simd);
    pl_attn_done(&a);
}

static void test_attn_init_rejects_bad_shapes(void **state) {
    (void)state;
    struct pl_attn a;
    assert_int_equal(pl_attn_init(&a, 6, 4, 64, 64, 1, PL_KV_F16, true), -EINVAL);
    assert_int_equal(pl_attn_init(&a, 0, 1, 64, 64, 1, PL_KV_F16, true), -EINVAL);
    assert_int_equal(pl_attn_init(&a, 4, 0, 64, 64, 1, PL_KV_F16, true), -EINVAL);
    assert_int_equal(pl_attn_init(&a, 4, 2, 0, 64, 1, PL_KV_F16, true), -EINVAL);
    assert_int_equal(pl_attn_init(&a, 4, 2, 64, 64, 0, PL_KV_F16, true), -EINVAL);
    assert_int_equal(pl_attn_init(&a, 4, 2, 64, 64, 1, 7, true), -EINVAL);
    pl_attn_done(&a); /* safe after a failed init */
    pl_attn_done(&a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attn_f16_gqa),
        cmocka_unit_test(test_attn_f32_gqa),
        cmocka_unit_test(test_attn_head_shapes),
        cmocka_unit_test(test_attn_wide_score_ranges),
        cmocka_unit_test(test_attn_odd_head_dim),
        cmocka_unit_test(test_attn_init_rejects_bad_shapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
