/* SPDX-License-Identifier: MIT */
/* Unit tests for policy/src/policy_quota.c: token bucket arithmetic (exact refills, burst
 * cap, clock going backwards, overflow, wait times), session/queue counters, per-request
 * limits in their documented order, and the log rate limiter. Times are passed in: no sleeps. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "pl/pl_err.h"
#include "pl/policy_file.h"
#include "pl/policy_quota.h"

#define MS UINT64_C(1000000)
#define SEC UINT64_C(1000000000)

static void test_bucket_starts_full_and_refills_exactly(void **state) {
    (void)state;
    struct pl_policy_bucket b;
    uint64_t t = 5 * SEC;
    pl_policy_bucket_init(&b, 10, 20, t);
    assert_int_equal(pl_policy_bucket_available(&b, t), 20);
    assert_int_equal(pl_policy_bucket_take(&b, 20, t, NULL), 0);
    assert_int_equal(pl_policy_bucket_available(&b, t), 0);
    /* 10 tokens/s: one token per 100 ms, none before. */
    assert_int_equal(pl_policy_bucket_available(&b, t + 99 * MS), 0);
    assert_int_equal(pl_policy_bucket_available(&b, t + 100 * MS), 1);
    assert_int_equal(pl_policy_bucket_available(&b, t + 1550 * MS), 15);
    /* Many tiny steps add up exactly (no rounding loss). */
    struct pl_policy_bucket c;
    pl_policy_bucket_init(&c, 3, 1000, 0);
    assert_int_equal(pl_policy_bucket_take(&c, 1000, 0, NULL), 0);
    uint64_t now = 0;
    for (int i = 0; i < 10000; i++) {
        now += 333333; /* 1/3 ms steps, not a divisor of anything nice */
        (void)pl_policy_bucket_available(&c, now);
    }
    /* 3.33333 s at 3/s = 9.99999 tokens: 9 whole ones; the 10th needs 10000 nano-tokens,
     * i.e. 3333.3 ns more. */
    assert_int_equal(pl_policy_bucket_available(&c, now), 9);
    assert_int_equal(pl_policy_bucket_available(&c, now + 3333), 9);
    assert_int_equal(pl_policy_bucket_available(&c, now + 3334), 10);
    /* Capped at burst. */
    assert_int_equal(pl_policy_bucket_available(&b, t + 3600 * SEC), 20);
}

static void test_bucket_refuses_and_names_the_limit(void **state) {
    (void)state;
    struct pl_policy_bucket b;
    pl_policy_bucket_init(&b, 50, 100, 0);
    struct pl_policy_refusal ref;
    assert_int_equal(pl_policy_bucket_take(&b, 101, 0, &ref), -PL_ERR_QUOTA);
    assert_int_equal(ref.limit, PL_POLICY_LIMIT_RATE);
    assert_int_equal(ref.requested, 101);
    assert_int_equal(ref.allowed, 50);
    assert_non_null(strstr(ref.msg, "rate_tokens_per_s"));
    assert_int_equal(pl_policy_bucket_available(&b, 0), 100); /* nothing taken */
    assert_int_equal(pl_policy_bucket_take(&b, 60, 0, &ref), 0);
    assert_int_equal(pl_policy_bucket_take(&b, 41, 0, &ref), -PL_ERR_QUOTA);
    assert_int_equal(pl_policy_bucket_take(&b, 40, 0, NULL), 0);
    /* Huge n must not overflow into success. */
    assert_int_equal(pl_policy_bucket_take(&b, UINT64_MAX / 2, 100 * SEC, NULL), -PL_ERR_QUOTA);
}

static void test_bucket_wait_ns(void **state) {
    (void)state;
    struct pl_policy_bucket b;
    pl_policy_bucket_init(&b, 4, 8, 0);
    assert_int_equal(pl_policy_bucket_wait_ns(&b, 8, 0), 0);
    assert_int_equal(pl_policy_bucket_take(&b, 8, 0, NULL), 0);
    assert_int_equal(pl_policy_bucket_wait_ns(&b, 1, 0), 250 * MS);
    assert_int_equal(pl_policy_bucket_wait_ns(&b, 3, 0), 750 * MS);
    assert_int_equal(pl_policy_bucket_wait_ns(&b, 3, 100 * MS), 650 * MS);
    assert_int_equal(pl_policy_bucket_wait_ns(&b, 9, 0), UINT64_MAX); /* beyond the burst */
    /* Waiting exactly that long is enough. */
    assert_int_equal(pl_policy_bucket_take(&b, 3, 750 * MS, NULL), 0);
    /* A rate that does not divide 1e9: rounds up, never early. */
    struct pl_policy_bucket c;
    pl_policy_bucket_init(&c, 3, 1, 0);
    assert_int_equal(pl_policy_bucket_take(&c, 1, 0, NULL), 0);
    uint64_t w = pl_policy_bucket_wait_ns(&c, 1, 0);
    assert_int_equal(w, 333333334);
    assert_int_equal(pl_policy_bucket_available(&c, w - 1), 0);
    assert_int_equal(pl_policy_bucket_available(&c, w), 1);
    /* Rate 0 never refills. */
    struct pl_policy_bucket z;
    pl_policy_bucket_init(&z, 0, 2, 0);
    assert_int_equal(pl_policy_bucket_take(&z, 2, 0, NULL), 0);
    assert_int_equal(pl_policy_bucket_wait_ns(&z, 1, 0), UINT64_MAX);
    assert_int_equal(pl_policy_bucket_available(&z, 1000 * SEC), 0);
}

static void test_bucket_time_backwards_and_unlimited(void **state) {
    (void)state;
    struct pl_policy_bucket b;
    pl_policy_bucket_init(&b, 10, 10, 10 * SEC);
    assert_int_equal(pl_policy_bucket_take(&b, 10, 10 * SEC, NULL), 0);
    /* Going back adds nothing, and does not make the next forward step count twice. */
    assert_int_equal(pl_policy_bucket_available(&b, 5 * SEC), 0);
    assert_int_equal(pl_policy_bucket_available(&b, 10 * SEC + 500 * MS), 5);
    /* Unlimited never refuses. */
    struct pl_policy_bucket u;
    pl_policy_bucket_init(&u, PL_POLICY_UNLIMITED, 1, 0);
    assert_int_equal(pl_policy_bucket_take(&u, UINT64_MAX, 0, NULL), 0);
    assert_int_equal(pl_policy_bucket_wait_ns(&u, UINT64_MAX, 0), 0);
    assert_int_equal(pl_policy_bucket_available(&u, 0), UINT64_MAX);
    /* Huge elapsed time with a huge rate does not overflow. */
    struct pl_policy_bucket h;
    pl_policy_bucket_init(&h, UINT32_MAX - 1, UINT32_MAX, 0);
    assert_int_equal(pl_policy_bucket_take(&h, UINT32_MAX, 0, NULL), 0);
    assert_int_equal(pl_policy_bucket_available(&h, UINT64_MAX), UINT32_MAX);
}

static void test_bucket_set_keeps_level(void **state) {
    (void)state;
    struct pl_policy_bucket b;
    pl_policy_bucket_init(&b, 10, 100, 0);
    assert_int_equal(pl_policy_bucket_take(&b, 40, 0, NULL), 0);
    pl_policy_bucket_set(&b, 1, 100, 0);
    assert_int_equal(pl_policy_bucket_available(&b, 0), 60);
    assert_int_equal(pl_policy_bucket_available(&b, 2 * SEC), 62);
    pl_policy_bucket_set(&b, 1, 5, 2 * SEC); /* smaller burst: capped */
    assert_int_equal(pl_policy_bucket_available(&b, 2 * SEC), 5);
}

static void test_bucket_refund_caps_at_burst(void **state) {
    (void)state;
    struct pl_policy_bucket b;
    uint64_t t = 5000 * MS;
    pl_policy_bucket_init(&b, 10, 30, t);
    assert_int_equal(pl_policy_bucket_take(&b, 25, t, NULL), 0);
    assert_int_equal(pl_policy_bucket_available(&b, t), 5);
    pl_policy_bucket_refund(&b, 12, t);
    assert_int_equal(pl_policy_bucket_available(&b, t), 17);
    pl_policy_bucket_refund(&b, 100, t); /* never above the burst */
    assert_int_equal(pl_policy_bucket_available(&b, t), 30);
    pl_policy_bucket_refund(&b, UINT64_MAX, t); /* no overflow */
    assert_int_equal(pl_policy_bucket_available(&b, t), 30);
    /* Unlimited buckets ignore refunds. */
    pl_policy_bucket_init(&b, PL_POLICY_UNLIMITED, 1, t);
    pl_policy_bucket_refund(&b, 7, t);
    assert_int_equal(pl_policy_bucket_available(&b, t), UINT64_MAX);
}

static void test_usage_counters(void **state) {
    (void)state;
    struct pl_policy_limits l;
    pl_policy_limits_init(&l);
    l.max_sessions = 2;
    l.max_queued = 3;
    struct pl_policy_usage u = {0};
    struct pl_policy_refusal ref;
    assert_int_equal(pl_policy_usage_session_acquire(&u, &l, &ref), 0);
    assert_int_equal(pl_policy_usage_session_acquire(&u, &l, &ref), 0);
    assert_int_equal(pl_policy_usage_session_acquire(&u, &l, &ref), -PL_ERR_QUOTA);
    assert_int_equal(u.sessions, 2);
    assert_int_equal(ref.limit, PL_POLICY_LIMIT_MAX_SESSIONS);
    assert_int_equal(ref.requested, 3);
    assert_int_equal(ref.allowed, 2);
    assert_string_equal(ref.msg, "max_sessions: 3 sessions requested, limit 2");
    assert_int_equal(pl_policy_usage_session_release(&u), 0);
    assert_int_equal(pl_policy_usage_session_acquire(&u, &l, NULL), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(pl_policy_usage_queued_acquire(&u, &l, &ref), 0);
    assert_int_equal(pl_policy_usage_queued_acquire(&u, &l, &ref), -PL_ERR_QUOTA);
    assert_int_equal(ref.limit, PL_POLICY_LIMIT_MAX_QUEUED);
    assert_string_equal(pl_policy_limit_name(ref.limit), "max_queued");
    for (int i = 0; i < 3; i++)
        assert_int_equal(pl_policy_usage_queued_release(&u), 0);
    assert_int_equal(pl_policy_usage_queued_release(&u), -EINVAL);
    assert_int_equal(pl_policy_usage_session_release(&u), 0);
    assert_int_equal(pl_policy_usage_session_release(&u), 0);
    assert_int_equal(pl_policy_usage_session_release(&u), -EINVAL);
    /* max 0 refuses the first; unlimited stops only at the counter's end. */
    l.max_sessions = 0;
    assert_int_equal(pl_policy_usage_session_acquire(&u, &l, &ref), -PL_ERR_QUOTA);
    l.max_sessions = PL_POLICY_UNLIMITED;
    u.sessions = UINT32_MAX - 1;
    assert_int_equal(pl_policy_usage_session_acquire(&u, &l, NULL), 0);
    assert_int_equal(pl_policy_usage_session_acquire(&u, &l, NULL), -PL_ERR_QUOTA);
}

static void test_request_check_order(void **state) {
    (void)state;
    struct pl_policy_limits l;
    pl_policy_limits_init(&l);
    l.max_prompt_tokens = 100;
    l.max_new_tokens = 50;
    l.max_context = 120;
    struct pl_policy_refusal ref;
    assert_int_equal(pl_policy_request_check(&l, 100, 20, &ref), 0);
    assert_int_equal(pl_policy_request_check(&l, 101, 500, &ref), -PL_ERR_QUOTA);
    assert_int_equal(ref.limit, PL_POLICY_LIMIT_MAX_PROMPT_TOKENS);
    assert_string_equal(ref.msg, "max_prompt_tokens: 101 prompt tokens requested, limit 100");
    assert_int_equal(pl_policy_request_check(&l, 10, 51, &ref), -PL_ERR_QUOTA);
    assert_int_equal(ref.limit, PL_POLICY_LIMIT_MAX_NEW_TOKENS);
    assert_int_equal(pl_policy_request_check(&l, 100, 21, &ref), -PL_ERR_QUOTA);
    assert_int_equal(ref.limit, PL_POLICY_LIMIT_MAX_CONTEXT);
    assert_int_equal(ref.requested, 121);
    assert_int_equal(ref.allowed, 120);
    assert_non_null(strstr(ref.msg, "max_context"));
    l.max_prompt_tokens = PL_POLICY_UNLIMITED;
    l.max_new_tokens = PL_POLICY_UNLIMITED;
    assert_int_equal(pl_policy_request_check(&l, UINT64_MAX, UINT64_MAX, &ref), -PL_ERR_QUOTA);
    assert_int_equal(ref.limit, PL_POLICY_LIMIT_MAX_CONTEXT);
    l.max_context = PL_POLICY_UNLIMITED;
    assert_int_equal(pl_policy_request_check(&l, UINT64_MAX, UINT64_MAX, NULL), 0);
    for (int i = 0; i < _PL_POLICY_LIMIT_MAX; i++)
        assert_string_not_equal(pl_policy_limit_name((enum pl_policy_limit)i), "unknown");
}

static void test_ratelimit(void **state) {
    (void)state;
    struct pl_policy_ratelimit rl;
    pl_policy_ratelimit_init(&rl, 10 * SEC, 2);
    uint64_t sup = 99;
    assert_true(pl_policy_ratelimit_allow(&rl, 1 * SEC, &sup));
    assert_int_equal(sup, 0);
    assert_true(pl_policy_ratelimit_allow(&rl, 2 * SEC, NULL));
    for (int i = 0; i < 5; i++)
        assert_false(pl_policy_ratelimit_allow(&rl, 3 * SEC, &sup));
    assert_false(pl_policy_ratelimit_allow(&rl, 10 * SEC + 999, &sup));
    assert_true(pl_policy_ratelimit_allow(&rl, 11 * SEC, &sup));
    assert_int_equal(sup, 6);
    assert_true(pl_policy_ratelimit_allow(&rl, 11 * SEC, &sup));
    assert_int_equal(sup, 0);
    struct pl_policy_ratelimit none;
    pl_policy_ratelimit_init(&none, SEC, 0);
    assert_false(pl_policy_ratelimit_allow(&none, 0, NULL));
    assert_false(pl_policy_ratelimit_allow(&none, 100 * SEC, NULL));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bucket_starts_full_and_refills_exactly),
        cmocka_unit_test(test_bucket_refuses_and_names_the_limit),
        cmocka_unit_test(test_bucket_wait_ns),
        cmocka_unit_test(test_bucket_time_backwards_and_unlimited),
        cmocka_unit_test(test_bucket_set_keeps_level),
        cmocka_unit_test(test_bucket_refund_caps_at_burst),
        cmocka_unit_test(test_usage_counters),
        cmocka_unit_test(test_request_check_order),
        cmocka_unit_test(test_ratelimit),
    };
    return cmocka_run_group_tests_name("policy_quota", tests, NULL, NULL);
}
