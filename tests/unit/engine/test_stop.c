/* SPDX-License-Identifier: MIT */
/* Unit tests for engine/src/stop.c: stop strings split over 1..n pieces, overlapping and
 * nested candidates, hold-back released when a partial match fails, sticky matches, and a
 * randomized comparison with a naive matcher (every prefix of the stream rescanned). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pl/engine_stop.h"

static struct pl_stop *make(const char *const *strs, size_t n) {
    size_t lens[PL_STOP_MAX];
    for (size_t i = 0; i < n; i++)
        lens[i] = strlen(strs[i]);
    struct pl_stop *s = NULL;
    assert_int_equal(pl_stop_new(strs, lens, n, &s), 0);
    return s;
}

/* Feed the pieces in order; returns the final result (flushed when nothing matched). */
static struct pl_stop_result run(struct pl_stop *s, const char *const *pieces, size_t n) {
    struct pl_stop_result r;
    uint64_t last_safe = 0;
    pl_stop_reset(s);
    for (size_t i = 0; i < n; i++) {
        int m = pl_stop_feed(s, pieces[i], strlen(pieces[i]), &r);
        assert_true(m == 0 || m == 1);
        assert_true(r.safe >= last_safe); /* never retracts */
        last_safe = r.safe;
        if (m == 1)
            return r;
    }
    assert_int_equal(pl_stop_flush(s, &r), 0);
    return r;
}

static void test_stop_matches_split_across_pieces(void **state) {
    (void)state;
    const char *stops[] = {"<|im_end|>"};
    struct pl_stop *s = make(stops, 1);
    const char *one[] = {"Hello<|im_end|>"};
    const char *two[] = {"Hello<|im_", "end|>"};
    const char *many[] = {"Hel", "lo", "<", "|", "im", "_", "e", "n", "d|", ">tail"};
    struct pl_stop_result r = run(s, one, 1);
    assert_true(r.matched);
    assert_int_equal(r.match_start, 5);
    assert_int_equal(r.match_end, 15);
    assert_int_equal(r.safe, 5);
    r = run(s, two, 2);
    assert_true(r.matched);
    assert_int_equal(r.match_start, 5);
    r = run(s, many, 10);
    assert_true(r.matched);
    assert_int_equal(r.match_start, 5);
    assert_int_equal(r.which, 0);
    pl_stop_free(s);
}

static void test_stop_holds_back_partial_match_then_releases(void **state) {
    (void)state;
    const char *stops[] = {"STOP"};
    struct pl_stop *s = make(stops, 1);
    struct pl_stop_result r;
    assert_int_equal(pl_stop_feed(s, "abcST", 5, &r), 0);
    assert_int_equal(r.safe, 3); /* "ST" held */
    assert_int_equal(pl_stop_feed(s, "O", 1, &r), 0);
    assert_int_equal(r.safe, 3);
    assert_int_equal(pl_stop_feed(s, "X", 1, &r), 0);
    assert_int_equal(r.safe, 7); /* partial match failed: all released */
    assert_int_equal(pl_stop_feed(s, "SSTO", 4, &r), 0);
    assert_int_equal(r.safe, 8); /* first S released, "STO" held */
    assert_int_equal(pl_stop_flush(s, &r), 0);
    assert_int_equal(r.safe, 11);
    pl_stop_free(s);
}

static void test_stop_overlapping_candidates(void **state) {
    (void)state;
    /* "abab" restarts inside itself; "bc" is nested inside "abcd". */
    const char *stops[] = {"ababc", "bc", "abcd"};
    struct pl_stop *s = make(stops, 3);
    const char *p1[] = {"xabab", "abc"};
    struct pl_stop_result r = run(s, p1, 2);
    assert_true(r.matched);
    assert_int_equal(r.which, 0); /* "ababc" and "bc" end together: the longer wins */
    assert_int_equal(r.match_start, 3);
    const char *p2[] = {"ab", "cd"};
    r = run(s, p2, 2);
    assert_true(r.matched);
    assert_int_equal(r.which, 1); /* "bc" completes before "abcd" */
    assert_int_equal(r.match_start, 1);
    pl_stop_free(s);
}

static void test_stop_is_sticky_after_a_match(void **state) {
    (void)state;
    const char *stops[] = {"\n\n"};
    struct pl_stop *s = make(stops, 1);
    struct pl_stop_result r;
    assert_int_equal(pl_stop_feed(s, "a\n\nb", 4, &r), 1);
    assert_int_equal(r.match_start, 1);
    assert_int_equal(pl_stop_feed(s, "more", 4, &r), 1);
    assert_int_equal(r.match_start, 1);
    assert_int_equal(pl_stop_flush(s, &r), 1);
    assert_int_equal(r.safe, 1);
    pl_stop_free(s);
}

static void test_stop_handles_nul_and_high_bytes(void **state) {
    (void)state;
    const char a[] = {'x', '\0', (char)0xff};
    const char *stops[] = {a};
    size_t lens[] = {3};
    struct pl_stop *s = NULL;
    assert_int_equal(pl_stop_new(stops, lens, 1, &s), 0);
    struct pl_stop_result r;
    const char in[] = {'q', 'x', '\0', (char)0xff, 'z'};
    assert_int_equal(pl_stop_feed(s, in, 2, &r), 0);
    assert_int_equal(r.safe, 1);
    assert_int_equal(pl_stop_feed(s, in + 2, 3, &r), 1);
    assert_int_equal(r.match_start, 1);
    pl_stop_free(s);
}

static void test_stop_rejects_bad_arguments(void **state) {
    (void)state;
    struct pl_stop *s = NULL;
    const char *one[] = {"x"};
    size_t zero[] = {0};
    size_t big[] = {PL_STOP_MAX_LEN + 1};
    assert_int_equal(pl_stop_new(one, zero, 1, &s), -EINVAL);
    assert_int_equal(pl_stop_new(one, big, 1, &s), -EINVAL);
    assert_int_equal(pl_stop_new(NULL, NULL, 1, &s), -EINVAL);
    assert_int_equal(pl_stop_new(one, zero, PL_STOP_MAX + 1, &s), -EINVAL);
    assert_null(s);
    assert_int_equal(pl_stop_new(NULL, NULL, 0, &s), 0);
    struct pl_stop_result r;
    assert_int_equal(pl_stop_feed(s, "abc", 3, &r), 0);
    assert_int_equal(r.safe, 3);
    assert_int_equal(pl_stop_feed(s, NULL, 1, &r), -EINVAL);
    assert_int_equal(pl_stop_feed(NULL, "a", 1, &r), -EINVAL);
    pl_stop_free(s);
    pl_stop_free(NULL);
}

/* ---- randomized comparison with a naive matcher ---- */

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(uint32_t n) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (uint32_t)(rs % n);
}

/* Naive: the first end position where some string ends (longest on a tie); and for a
 * prefix of length n without a match, n minus the longest suffix that is a proper prefix
 * of some string. */
static bool naive_match(const char *t, size_t n, char stops[][8], const size_t *lens, size_t k,
                        size_t *ret_start, size_t *ret_which) {
    for (size_t e = 1; e <= n; e++) {
        size_t best = SIZE_MAX, which = 0;
        for (size_t i = 0; i < k; i++)
            if (lens[i] <= e && memcmp(t + e - lens[i], stops[i], lens[i]) == 0 &&
                (best == SIZE_MAX || lens[i] > lens[which])) {
                best = e - lens[i];
                which = i;
            }
        if (best != SIZE_MAX) {
            *ret_start = best;
            *ret_which = which;
            return true;
        }
    }
    return false;
}

static size_t naive_safe(const char *t, size_t n, char stops[][8], const size_t *lens, size_t k) {
    size_t held = 0;
    for (size_t i = 0; i < k; i++)
        for (size_t l = 1; l < lens[i] && l <= n; l++)
            if (memcmp(t + n - l, stops[i], l) == 0 && l > held)
                held = l;
    return n - held;
}

static void test_stop_random_against_naive(void **state) {
    (void)state;
    for (int iter = 0; iter < 3000; iter++) {
        char stops[4][8];
        size_t lens[4];
        const char *ptrs[4];
        size_t k = 1 + rnd(4);
        for (size_t i = 0; i < k; i++) {
            lens[i] = 1 + rnd(6);
            for (size_t j = 0; j < lens[i]; j++)
                stops[i][j] = (char)('a' + rnd(3));
            ptrs[i] = stops[i];
        }
        struct pl_stop *s = NULL;
        assert_int_equal(pl_stop_new(ptrs, lens, k, &s), 0);
        char text[64];
        size_t n = rnd(40);
        for (size_t j = 0; j < n; j++)
            text[j] = (char)('a' + rnd(4));
        size_t want_start = 0, want_which = 0;
        bool want = naive_match(text, n, stops, lens, k, &want_start, &want_which);
        size_t pos = 0;
        struct pl_stop_result r = {0};
        int m = 0;
        while (pos < n && m == 0) {
            size_t piece = 1 + rnd(5);
            if (piece > n - pos)
                piece = n - pos;
            m = pl_stop_feed(s, text + pos, piece, &r);
            pos += piece;
            if (m == 0) {
                /* No match inside this prefix, and the hold-back is minimal. */
                size_t ws, ww;
                assert_false(naive_match(text, pos, stops, lens, k, &ws, &ww));
                assert_int_equal(r.safe, naive_safe(text, pos, stops, lens, k));
            }
        }
        assert_int_equal(m == 1, want);
        if (want) {
            assert_int_equal(r.match_start, want_start);
            assert_int_equal(r.safe, want_start);
            assert_int_equal(r.match_end, want_start + lens[want_which]);
            /* Duplicated strings: the first index is reported. */
            size_t first = want_which;
            for (size_t i = 0; i < want_which; i++)
                if (lens[i] == lens[want_which] && !memcmp(stops[i], stops[want_which], lens[i]))
                    first = i;
            assert_int_equal(r.which, first);
        }
        pl_stop_free(s);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stop_matches_split_across_pieces),
        cmocka_unit_test(test_stop_holds_back_partial_match_then_releases),
        cmocka_unit_test(test_stop_overlapping_candidates),
        cmocka_unit_test(test_stop_is_sticky_after_a_match),
        cmocka_unit_test(test_stop_handles_nul_and_high_bytes),
        cmocka_unit_test(test_stop_rejects_bad_arguments),
        cmocka_unit_test(test_stop_random_against_naive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
