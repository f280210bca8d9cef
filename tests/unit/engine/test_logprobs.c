/* SPDX-License-Identifier: MIT */
/* Unit tests for engine/src/logprobs.c: the chosen token's log-probability and the top-N
 * list against a naive computation (full log-softmax in double, full sort), on random
 * logits with ties, masked (-inf) and NaN entries, and argument checks. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pl/engine_logprobs.h"

/* Float results vs the double reference: relative to a logit scale of ~10. */
#define LOGPROB_TOL 1e-4

struct ref {
    int32_t id;
    double lp;
};

static int cmp_ref(const void *a, const void *b) {
    const struct ref *x = a, *y = b;
    if (x->lp != y->lp)
        return x->lp > y->lp ? -1 : 1;
    return x->id < y->id ? -1 : 1;
}

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Naive reference: every logprob in double, then a full sort. */
static void naive(const float *logits, uint32_t n, struct ref *out) {
    double max = -INFINITY;
    for (uint32_t i = 0; i < n; i++)
        if (!isnan(logits[i]) && logits[i] > max)
            max = logits[i];
    double sum = 0;
    for (uint32_t i = 0; i < n; i++)
        if (!isnan(logits[i]) && logits[i] != -INFINITY)
            sum += exp(logits[i] - max);
    for (uint32_t i = 0; i < n; i++) {
        out[i].id = (int32_t)i;
        out[i].lp =
            (isnan(logits[i]) || logits[i] == -INFINITY) ? -INFINITY : logits[i] - max - log(sum);
    }
}

static void check_case(const float *logits, uint32_t n, uint32_t top_n) {
    struct ref *r = malloc(n * sizeof(*r));
    struct pl_logprob top[PL_LOGPROBS_MAX_TOP];
    assert_non_null(r);
    naive(logits, n, r);
    int32_t chosen = (int32_t)(rnd() % n);
    double want_chosen = r[chosen].lp;
    qsort(r, n, sizeof(*r), cmp_ref);
    float got_chosen = 0;
    int k = pl_logprobs_compute(logits, n, chosen, top_n, top, &got_chosen);
    assert_int_equal(k, top_n < n ? top_n : n);
    if (isinf(want_chosen))
        assert_true(isinf(got_chosen) && got_chosen < 0);
    else
        assert_true(fabs(got_chosen - want_chosen) < LOGPROB_TOL);
    for (int i = 0; i < k; i++) {
        assert_int_equal(top[i].id, r[i].id);
        if (isinf(r[i].lp))
            assert_true(isinf(top[i].logprob) && top[i].logprob < 0);
        else
            assert_true(fabs(top[i].logprob - r[i].lp) < LOGPROB_TOL);
    }
    free(r);
}

static void test_logprobs_match_naive_on_random_logits(void **state) {
    (void)state;
    static const uint32_t sizes[] = {1, 2, 5, 64, 1000, 32000};
    static const uint32_t tops[] = {0, 1, 3, 20, 256};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        uint32_t n = sizes[s];
        float *l = malloc(n * sizeof(*l));
        assert_non_null(l);
        for (int rep = 0; rep < 4; rep++) {
            for (uint32_t i = 0; i < n; i++) {
                uint64_t x = rnd();
                /* Coarse values give many ties; some masked and NaN entries. */
                if (rep >= 2 && x % 7 == 0)
                    l[i] = -INFINITY;
                else if (rep == 3 && x % 11 == 0)
                    l[i] = NAN;
                else
                    l[i] = (float)((int)(x % 41) - 20) * (rep == 1 ? 0.25f : 0.5f);
            }
            l[rnd() % n] = 3.0f; /* at least one finite logit */
            for (size_t t = 0; t < sizeof(tops) / sizeof(tops[0]); t++)
                check_case(l, n, tops[t]);
        }
        free(l);
    }
}

static void test_logprobs_sum_to_one(void **state) {
    (void)state;
    float l[300];
    struct pl_logprob top[256];
    for (int i = 0; i < 256; i++)
        l[i] = (float)(rnd() % 1000) / 37.0f;
    int k = pl_logprobs_compute(l, 256, 0, 256, top, NULL);
    assert_int_equal(k, 256);
    double s = 0;
    for (int i = 0; i < k; i++) {
        s += exp(top[i].logprob);
        if (i > 0)
            assert_true(top[i].logprob <= top[i - 1].logprob);
    }
    assert_true(fabs(s - 1.0) < 1e-5);
}

static void test_logprobs_tie_prefers_lower_id(void **state) {
    (void)state;
    float l[6] = {1, 2, 2, 0, 2, -1};
    struct pl_logprob top[3];
    assert_int_equal(pl_logprobs_compute(l, 6, 3, 3, top, NULL), 3);
    assert_int_equal(top[0].id, 1);
    assert_int_equal(top[1].id, 2);
    assert_int_equal(top[2].id, 4);
    assert_true(fabs(top[0].logprob - top[2].logprob) < 1e-7);
}

static void test_logprobs_rejects_bad_arguments(void **state) {
    (void)state;
    float l[4] = {0, 1, 2, 3};
    struct pl_logprob top[4];
    float c;
    assert_int_equal(pl_logprobs_compute(NULL, 4, 0, 1, top, &c), -EINVAL);
    assert_int_equal(pl_logprobs_compute(l, 0, 0, 1, top, &c), -EINVAL);
    assert_int_equal(pl_logprobs_compute(l, 4, 4, 1, top, &c), -EINVAL);
    assert_int_equal(pl_logprobs_compute(l, 4, -1, 1, top, &c), -EINVAL);
    assert_int_equal(pl_logprobs_compute(l, 4, 0, 1, NULL, &c), -EINVAL);
    assert_int_equal(pl_logprobs_compute(l, 4, 0, PL_LOGPROBS_MAX_TOP + 1, top, &c), -EINVAL);
    float inf[2] = {INFINITY, 0};
    assert_int_equal(pl_logprobs_compute(inf, 2, 0, 1, top, &c), -EINVAL);
    float none[2] = {-INFINITY, NAN};
    assert_int_equal(pl_logprobs_compute(none, 2, 0, 1, top, &c), -EINVAL);
    assert_int_equal(pl_logprobs_compute(l, 4, 0, 0, NULL, NULL), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logprobs_match_naive_on_random_logits),
        cmocka_unit_test(test_logprobs_sum_to_one),
        cmocka_unit_test(test_logprobs_tie_prefers_lower_id),
        cmocka_unit_test(test_logprobs_rejects_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
