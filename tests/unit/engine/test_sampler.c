/* SPDX-License-Identifier: MIT */
/* Unit tests for engine/src/sampler.c: greedy tie rule, seeding, the candidate sets kept by
 * top-k / top-p / min-p (checked by drawing many tokens and comparing the frequencies with
 * the renormalised distribution: a chi-square bound, deterministic given the seed), the
 * penalty arithmetic, and parameter validation. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pl/engine_sampler.h"

/* Draws per frequency test. */
#define N_DRAWS 100000

static struct pl_sampler_params params_plain(float temp) {
    struct pl_sampler_params p;
    pl_sampler_params_default(&p);
    p.temp = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = 1234;
    return p;
}

static struct pl_sampler *new_sampler(const struct pl_sampler_params *p, uint32_t n_vocab) {
    struct pl_sampler *s = NULL;
    assert_int_equal(pl_sampler_new(p, n_vocab, &s), 0);
    assert_non_null(s);
    return s;
}

/* Draw n tokens from fresh copies of logits; counts[n_vocab] gets the histogram. */
static void draw_many(struct pl_sampler *s, const float *logits, uint32_t n_vocab, int n,
                      uint32_t *counts) {
    float *work = malloc(n_vocab * sizeof(*work));
    assert_non_null(work);
    memset(counts, 0, n_vocab * sizeof(*counts));
    for (int i = 0; i < n; i++) {
        memcpy(work, logits, n_vocab * sizeof(*work));
        int32_t t = pl_sampler_sample(s, work);
        assert_true(t >= 0 && (uint32_t)t < n_vocab);
        counts[t]++;
    }
    free(work);
}

/* Expected distribution: softmax(logits / temp) restricted to keep[], renormalised. */
static void expected_probs(const float *logits, const bool *keep, uint32_t n, float temp,
                           double *out) {
    double max = -INFINITY, sum = 0.0;
    for (uint32_t i = 0; i < n; i++)
        if (keep[i] && logits[i] > max)
            max = logits[i];
    for (uint32_t i = 0; i < n; i++) {
        out[i] = keep[i] ? exp(((double)logits[i] - max) / temp) : 0.0;
        sum += out[i];
    }
    for (uint32_t i = 0; i < n; i++)
        out[i] /= sum;
}

/* Tokens outside the expected set must never be drawn; inside it the chi-square statistic
 * must stay below a bound that a correct sampler exceeds with probability < 1e-4 (df + 6
 * standard deviations of the chi-square distribution, plus slack for small df). */
static void assert_frequencies(const uint32_t *counts, const double *probs, uint32_t n,
                               int n_draws) {
    double chi2 = 0.0;
    int df = -1;
    for (uint32_t i = 0; i < n; i++) {
        if (probs[i] == 0.0) {
            if (counts[i] != 0)
                fail_msg("token %u drawn %u times but is outside the kept set", i, counts[i]);
            continue;
        }
        double e = probs[i] * n_draws;
        double d = (double)counts[i] - e;
        chi2 += d * d / e;
        df++;
    }
    double bound = df + 6.0 * sqrt(2.0 * (df > 0 ? df : 1)) + 10.0;
    if (chi2 > bound)
        fail_msg("chi-square %.2f above %.2f (df %d)", chi2, bound, df);
}

static void test_greedy_picks_argmax_lowest_id_on_tie(void **state) {
    (void)state;
    struct pl_sampler_params p = params_plain(0.0f);
    struct pl_sampler *s = new_sampler(&p, 6);
    float l1[6] = {1.0f, 5.0f, 2.0f, 5.0f, -3.0f, 4.0f};
    assert_int_equal(pl_sampler_sample(s, l1), 1);
    float l2[6] = {NAN, -1.0f, 7.0f, NAN, 7.0f, 0.0f};
    assert_int_equal(pl_sampler_sample(s, l2), 2);
    float l3[6] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    assert_int_equal(pl_sampler_sample(s, l3), 0);
    pl_sampler_free(s);
}

static void fill_random_logits(float *l, uint32_t n, unsigned seed) {
    srand(seed);
    for (uint32_t i = 0; i < n; i++)
        l[i] = (float)rand() / (float)RAND_MAX * 10.0f - 5.0f;
}

static void test_same_seed_gives_same_sequence(void **state) {
    (void)state;
    enum { V = 300, N = 500 };
    float base[V], work[V];
    fill_random_logits(base, V, 7);
    struct pl_sampler_params p;
    pl_sampler_params_default(&p);
    p.seed = 42;
    p.top_k = 0; /* sample from many tokens so that sequences carry information */
    p.min_p = 0.0f;
    struct pl_sampler *a = new_sampler(&p, V), *b = new_sampler(&p, V);
    int32_t seq[N];
    for (int i = 0; i < N; i++) {
        memcpy(work, base, sizeof(work));
        seq[i] = pl_sampler_sample(a, work);
        memcpy(work, base, sizeof(work));
        assert_int_equal(pl_sampler_sample(b, work), seq[i]);
    }
    /* Reset reseeds: the same sequence again. */
    pl_sampler_reset(a);
    for (int i = 0; i < N; i++) {
        memcpy(work, base, sizeof(work));
        assert_int_equal(pl_sampler_sample(a, work), seq[i]);
    }
    pl_sampler_free(a);
    pl_sampler_free(b);
}

static void test_different_seeds_differ(void **state) {
    (void)state;
    enum { V = 300, N = 200 };
    float base[V], work[V];
    fill_random_logits(base, V, 8);
    struct pl_sampler_params p = params_plain(1.0f);
    p.seed = 1;
    struct pl_sampler *a = new_sampler(&p, V);
    p.seed = 2;
    struct pl_sampler *b = new_sampler(&p, V);
    int same = 0;
    for (int i = 0; i < N; i++) {
        memcpy(work, base, sizeof(work));
        int32_t ta = pl_sampler_sample(a, work);
        memcpy(work, base, sizeof(work));
        int32_t tb = pl_sampler_sample(b, work);
        same += ta == tb;
    }
    assert_true(same < N / 2);
    pl_sampler_free(a);
    pl_sampler_free(b);
}

static void test_top_k_1_equals_greedy(void **state) {
    (void)state;
    enum { V = 32000 };
    float *base = malloc(V * sizeof(float)), *work = malloc(V * sizeof(float));
    assert_non_null(base);
    assert_non_null(work);
    struct pl_sampler_params pk = params_plain(1.5f);
    pk.top_k = 1;
    struct pl_sampler_params pg = params_plain(0.0f);
    struct pl_sampler *sk = new_sampler(&pk, V), *sg = new_sampler(&pg, V);
    for (unsigned trial = 0; trial < 20; trial++) {
        fill_random_logits(base, V, 100 + trial);
        if (trial % 2)
            base[trial * 37] = base[trial * 53] = 9.0f; /* a tie: the lower id must win */
        memcpy(work, base, V * sizeof(float));
        int32_t g = pl_sampler_sample(sg, work);
        memcpy(work, base, V * sizeof(float));
        assert_int_equal(pl_sampler_sample(sk, work), g);
        if (trial % 2)
            assert_int_equal(g, (int32_t)(trial * 37));
    }
    pl_sampler_free(sk);
    pl_sampler_free(sg);
    free(base);
    free(work);
}

static void test_top_k_keeps_the_k_best(void **state) {
    (void)state;
    enum { V = 10 };
    const float logits[V] = {0.5f, 2.0f, -1.0f, 1.5f, 0.0f, 1.0f, 3.0f, -2.0f, 0.2f, 0.9f};
    const bool keep[V] = {false, true, false, true, false, false, true, false, false, false};
    struct pl_sampler_params p = params_plain(1.0f);
    p.top_k = 3;
    struct pl_sampler *s = new_sampler(&p, V);
    uint32_t counts[V];
    double probs[V];
    draw_many(s, logits, V, N_DRAWS, counts);
    expected_probs(logits, keep, V, 1.0f, probs);
    assert_frequencies(counts, probs, V, N_DRAWS);
    pl_sampler_free(s);
}

static void test_top_k_selection_on_large_vocab(void **state) {
    (void)state;
    /* 32000 logits, top-k 40, a huge temperature (nearly uniform over the kept set): every
     * draw must be one of the true 40 best, and each of them must show up. */
    enum { V = 32000, K = 40 };
    float *base = malloc(V * sizeof(float));
    bool *keep = calloc(V, sizeof(bool));
    uint32_t *counts = malloc(V * sizeof(uint32_t));
    assert_true(base && keep && counts);
    fill_random_logits(base, V, 99);
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int i = 0; i < V; i++)
            if (!keep[i] && (best < 0 || base[i] > base[best]))
                best = i;
        keep[best] = true;
    }
    struct pl_sampler_params p = params_plain(1e4f);
    p.top_k = K;
    struct pl_sampler *s = new_sampler(&p, V);
    draw_many(s, base, V, 4000, counts);
    for (int i = 0; i < V; i++) {
        if (keep[i])
            assert_true(counts[i] > 0);
        else
            assert_int_equal(counts[i], 0);
    }
    pl_sampler_free(s);
    free(base);
    free(keep);
    free(counts);
}

static void test_top_k_ties_keep_lowest_ids(void **state) {
    (void)state;
    enum { V = 1000 };
    float base[V];
    for (int i = 0; i < V; i++)
        base[i] = 1.0f;
    struct pl_sampler_params p = params_plain(1.0f);
    p.top_k = 5;
    struct pl_sampler *s = new_sampler(&p, V);
    uint32_t counts[V];
    double probs[V];
    bool keep[V] = {true, true, true, true, true};
    draw_many(s, base, V, 20000, counts);
    expected_probs(base, keep, V, 1.0f, probs);
    assert_frequencies(counts, probs, V, 20000);
    pl_sampler_free(s);
}

static void test_top_p_keeps_smallest_prefix_reaching_p(void **state) {
    (void)state;
    /* Probabilities 0.40 0.25 0.15 0.10 0.06 0.04 on shuffled ids; p = 0.75 needs
     * 0.40 + 0.25 + 0.15 = 0.80 (0.65 is not enough): ids 4, 0 and 6. */
    enum { V = 8 };
    float logits[V];
    const double pr[V] = {0.25, 0.06, 0.04, 0.10, 0.40, 1e-30, 0.15, 1e-30};
    for (int i = 0; i < V; i++)
        logits[i] = (float)log(pr[i]);
    const bool keep[V] = {true, false, false, false, true, false, true, false};
    struct pl_sampler_params p = params_plain(1.0f);
    p.top_p = 0.75f;
    struct pl_sampler *s = new_sampler(&p, V);
    uint32_t counts[V];
    double probs[V];
    draw_many(s, logits, V, N_DRAWS, counts);
    expected_probs(logits, keep, V, 1.0f, probs);
    assert_frequencies(counts, probs, V, N_DRAWS);
    pl_sampler_free(s);

    /* Same set when top-k (larger than the kept set) runs first. */
    p.top_k = 5;
    s = new_sampler(&p, V);
    draw_many(s, logits, V, N_DRAWS, counts);
    assert_frequencies(counts, probs, V, N_DRAWS);
    pl_sampler_free(s);
}

static int cmp_rank(const void *a, const void *b, void *ctx) {
    const float *l = ctx;
    int ia = *(const int *)a, ib = *(const int *)b;
    if (l[ia] != l[ib])
        return l[ia] > l[ib] ? -1 : 1;
    return ia - ib;
}

static void test_top_p_extends_past_first_chunk(void **state) {
    (void)state;
    /* 700 nearly equal logits (the rest negligible): p = 0.9 keeps ~630 tokens, more than
     * the first selection chunk. The exact set is computed here by a full sort; draws are
     * checked for membership and, grouped in 10 rank bins, for frequencies. */
    enum { V = 5000, HOT = 700, BINS = 10 };
    float *l = malloc(V * sizeof(float));
    int *rank = malloc(V * sizeof(int));
    uint32_t *counts = malloc(V * sizeof(uint32_t));
    assert_true(l && rank && counts);
    srand(5);
    for (int i = 0; i < V; i++) {
        l[i] = -30.0f;
        rank[i] = i;
    }
    for (int i = 0; i < HOT; i++)
        l[(i * 7919) % V] = (float)rand() / (float)RAND_MAX * 0.5f;
    qsort_r(rank, V, sizeof(int), cmp_rank, l);
    double max = l[rank[0]], sum = 0.0, cum = 0.0;
    for (int i = 0; i < V; i++)
        sum += exp(l[i] - max);
    int n_keep = 0;
    while (n_keep < V) {
        cum += exp(l[rank[n_keep]] - max);
        n_keep++;
        if (cum >= 0.9 * sum)
            break;
    }
    assert_true(n_keep > 300 && n_keep < HOT);

    struct pl_sampler_params p = params_plain(1.0f);
    p.top_p = 0.9f;
    struct pl_sampler *s = new_sampler(&p, V);
    draw_many(s, l, V, N_DRAWS / 4, counts);
    uint32_t bin_count[BINS] = {0};
    double bin_prob[BINS] = {0}, kept_mass = 0.0;
    for (int r = 0; r < n_keep; r++)
        kept_mass += exp(l[rank[r]] - max);
    for (int r = 0; r < V; r++) {
        int id = rank[r];
        if (r >= n_keep) {
            if (counts[id] != 0)
                fail_msg("token %d (rank %d, kept %d) drawn", id, r, n_keep);
            continue;
        }
        int b = r * BINS / n_keep;
        bin_count[b] += counts[id];
        bin_prob[b] += exp(l[id] - max) / kept_mass;
    }
    assert_frequencies(bin_count, bin_prob, BINS, N_DRAWS / 4);
    pl_sampler_free(s);
    free(l);
    free(rank);
    free(counts);
}

static void test_min_p_keeps_tokens_above_fraction_of_top(void **state) {
    (void)state;
    /* p_max = 0.5, min_p = 0.15: keep p >= 0.075, i.e. 0.5 0.2 0.1 0.08 (not 0.06 0.04 0.02). */
    enum { V = 7 };
    const double pr[V] = {0.06, 0.5, 0.02, 0.08, 0.2, 0.04, 0.1};
    const bool keep[V] = {false, true, false, true, true, false, true};
    float logits[V];
    for (int i = 0; i < V; i++)
        logits[i] = (float)log(pr[i]) + 3.0f;
    struct pl_sampler_params p = params_plain(1.0f);
    p.min_p = 0.15f;
    struct pl_sampler *s = new_sampler(&p, V);
    uint32_t counts[V];
    double probs[V];
    draw_many(s, logits, V, N_DRAWS, counts);
    expected_probs(logits, keep, V, 1.0f, probs);
    assert_frequencies(counts, probs, V, N_DRAWS);
    pl_sampler_free(s);

    /* min-p runs before temperature (llama.cpp order): the set does not depend on temp,
     * the weights inside it do. */
    p.temp = 2.5f;
    s = new_sampler(&p, V);
    draw_many(s, logits, V, N_DRAWS, counts);
    expected_probs(logits, keep, V, 2.5f, probs);
    assert_frequencies(counts, probs, V, N_DRAWS);
    pl_sampler_free(s);
}

static void test_temperature_scales_distribution(void **state) {
    (void)state;
    enum { V = 6 };
    const float logits[V] = {1.0f, 0.0f, -1.0f, 2.0f, 0.5f, -0.5f};
    const bool keep[V] = {true, true, true, true, true, true};
    uint32_t counts[V];
    double probs[V];
    const float temps[] = {0.5f, 1.0f, 3.0f};
    for (size_t t = 0; t < sizeof(temps) / sizeof(temps[0]); t++) {
        struct pl_sampler_params p = params_plain(temps[t]);
        struct pl_sampler *s = new_sampler(&p, V);
        draw_many(s, logits, V, N_DRAWS, counts);
        expected_probs(logits, keep, V, temps[t], probs);
        assert_frequencies(counts, probs, V, N_DRAWS);
        pl_sampler_free(s);
    }
}

static void test_penalties_change_logits_as_llama_cpp(void **state) {
    (void)state;
    enum { V = 5 };
    struct pl_sampler_params p = params_plain(0.0f);
    p.repeat_penalty = 2.0f;
    p.freq_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    p.penalty_last_n = 64;
    struct pl_sampler *s = new_sampler(&p, V);
    pl_sampler_accept(s, 0);
    pl_sampler_accept(s, 1);
    pl_sampler_accept(s, 0);
    pl_sampler_accept(s, 7);  /* out of range: ignored */
    pl_sampler_accept(s, -1); /* ditto */
    float l[V] = {2.0f, -2.0f, 1.0f, 0.5f, 0.0f};
    /* token 0 (count 2): 2 / 2 - 2 * 0.5 - 0.25 = -0.25
     * token 1 (count 1): -2 * 2 - 1 * 0.5 - 0.25 = -4.75 */
    assert_int_equal(pl_sampler_sample(s, l), 2);
    assert_float_equal(l[0], -0.25f, 1e-6f);
    assert_float_equal(l[1], -4.75f, 1e-6f);
    assert_float_equal(l[2], 1.0f, 0.0f);
    assert_float_equal(l[3], 0.5f, 0.0f);
    assert_float_equal(l[4], 0.0f, 0.0f);

    /* Reset forgets the history. */
    pl_sampler_reset(s);
    float l2[V] = {2.0f, -2.0f, 1.0f, 0.5f, 0.0f};
    assert_int_equal(pl_sampler_sample(s, l2), 0);
    assert_float_equal(l2[0], 2.0f, 0.0f);
    pl_sampler_free(s);

    /* Only the last penalty_last_n tokens count: with a window of 2, after 0 1 1 2 the
     * window is {1, 2}; a zero logit is multiplied (stays 0) and then pays the rest. */
    p.penalty_last_n = 2;
    p.freq_penalty = 0.0f;
    p.presence_penalty = 0.0f;
    p.repeat_penalty = 4.0f;
    s = new_sampler(&p, V);
    pl_sampler_accept(s, 0);
    pl_sampler_accept(s, 1);
    pl_sampler_accept(s, 1);
    pl_sampler_accept(s, 2);
    float l3[V] = {2.0f, 8.0f, -1.0f, 0.5f, 0.0f};
    /* 8 / 4 = 2 now ties with token 0, and the lower id wins the tie. */
    assert_int_equal(pl_sampler_sample(s, l3), 0);
    assert_float_equal(l3[0], 2.0f, 0.0f);
    assert_float_equal(l3[1], 2.0f, 0.0f);
    assert_float_equal(l3[2], -4.0f, 0.0f);
    pl_sampler_free(s);
}

static void test_penalty_window_survives_long_history(void **state) {
    (void)state;
    /* After many tokens the counts must equal a direct count over the last n tokens. */
    enum { V = 50, W = 17, N = 1000 };
    struct pl_sampler_params p = params_plain(0.0f);
    p.penalty_last_n = W;
    p.repeat_penalty = 1.0f;
    p.freq_penalty = 1.0f;
    struct pl_sampler *s = new_sampler(&p, V);
    int32_t hist[N];
    srand(3);
    for (int i = 0; i < N; i++) {
        hist[i] = rand() % 9; /* few distinct tokens: plenty of repeats and evictions */
        pl_sampler_accept(s, hist[i]);
        if (i % 97 == 0 || i == N - 1) {
            float l[V] = {0};
            (void)pl_sampler_sample(s, l);
            for (int t = 0; t < V; t++) {
                int c = 0;
                for (int j = i - W + 1; j <= i; j++)
                    c += j >= 0 && hist[j] == t;
                assert_float_equal(l[t], -(float)c, 0.0f);
            }
        }
    }
    pl_sampler_free(s);
}

static void test_params_check_rejects_bad_values(void **state) {
    (void)state;
    struct pl_sampler_params ok, p;
    pl_sampler_params_default(&ok);
    assert_int_equal(pl_sampler_params_check(&ok), 0);
    assert_int_equal(pl_sampler_params_check(NULL), -EINVAL);

#define REJECT(field, value)                                                                       \
    do {                                                                                           \
        p = ok;                                                                                    \
        p.field = (value);                                                                         \
        assert_int_equal(pl_sampler_params_check(&p), -EINVAL);                                    \
        struct pl_sampler *s_ = NULL;                                                              \
        assert_int_equal(pl_sampler_new(&p, 10, &s_), -EINVAL);                                    \
        assert_null(s_);                                                                           \
    } while (0)
#define ACCEPT(field, value)                                                                       \
    do {                                                                                           \
        p = ok;                                                                                    \
        p.field = (value);                                                                         \
        assert_int_equal(pl_sampler_params_check(&p), 0);                                          \
    } while (0)

    REJECT(temp, NAN);
    REJECT(temp, -0.1f);
    REJECT(temp, INFINITY);
    ACCEPT(temp, 0.0f);
    ACCEPT(temp, 2.0f);
    REJECT(top_k, -1);
    ACCEPT(top_k, 0);
    REJECT(top_p, 0.0f);
    REJECT(top_p, -0.5f);
    REJECT(top_p, 1.01f);
    REJECT(top_p, NAN);
    ACCEPT(top_p, 1.0f);
    ACCEPT(top_p, 1e-6f);
    REJECT(min_p, -0.01f);
    REJECT(min_p, 1.5f);
    REJECT(min_p, NAN);
    ACCEPT(min_p, 0.0f);
    ACCEPT(min_p, 1.0f);
    REJECT(repeat_penalty, 0.0f);
    REJECT(repeat_penalty, -1.0f);
    REJECT(repeat_penalty, NAN);
    REJECT(repeat_penalty, INFINITY);
    ACCEPT(repeat_penalty, 1.3f);
    REJECT(penalty_last_n, -1);
    REJECT(penalty_last_n, PL_SAMPLER_MAX_PENALTY_LAST_N + 1);
    ACCEPT(penalty_last_n, 0);
    REJECT(freq_penalty, NAN);
    REJECT(freq_penalty, -INFINITY);
    ACCEPT(freq_penalty, -0.5f);
    REJECT(presence_penalty, NAN);
    REJECT(presence_penalty, INFINITY);
    ACCEPT(presence_penalty, 1.5f);
#undef REJECT
#undef ACCEPT

    struct pl_sampler *s = NULL;
    assert_int_equal(pl_sampler_new(&ok, 0, &s), -EINVAL);
    assert_int_equal(pl_sampler_new(&ok, 10, NULL), -EINVAL);
    assert_int_equal(pl_sampler_sample(NULL, NULL), -EINVAL);
    pl_sampler_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_picks_argmax_lowest_id_on_tie),
        cmocka_unit_test(test_same_seed_gives_same_sequence),
        cmocka_unit_test(test_different_seeds_differ),
        cmocka_unit_test(test_top_k_1_equals_greedy),
        cmocka_unit_test(test_top_k_keeps_the_k_best),
        cmocka_unit_test(test_top_k_selection_on_large_vocab),
        cmocka_unit_test(test_top_k_ties_keep_lowest_ids),
        cmocka_unit_test(test_top_p_keeps_smallest_prefix_reaching_p),
        cmocka_unit_test(test_top_p_extends_past_first_chunk),
        cmocka_unit_test(test_min_p_keeps_tokens_above_fraction_of_top),
        cmocka_unit_test(test_temperature_scales_distribution),
        cmocka_unit_test(test_penalties_change_logits_as_llama_cpp),
        cmocka_unit_test(test_penalty_window_survives_long_history),
        cmocka_unit_test(test_params_check_rejects_bad_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
