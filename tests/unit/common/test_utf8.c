/* SPDX-License-Identifier: MIT */
/* Unit tests for pl_utf8_seq / pl_utf8_valid against an oracle of their own: a sequence is
 * well-formed when decoding its bits and encoding the code point again in the shortest form
 * gives the same bytes (and the code point is a scalar value); a prefix may start a
 * well-formed sequence when some code point's encoding starts with it. Exhaustive over all
 * strings of up to 3 bytes, and over every code point. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pl/pl_utf8.h"

/* The shortest form of cp (a scalar value or a surrogate) into out; its length. */
static size_t encode(uint32_t cp, uint8_t out[4]) {
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | cp >> 6);
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | cp >> 12);
        out[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | cp >> 18);
    out[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

static bool scalar(uint32_t cp) {
    return cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF);
}

/* The oracle's length of the well-formed sequence at s[0..n), or 0. */
static size_t oracle_seq(const uint8_t *s, size_t n) {
    size_t k;
    if (s[0] < 0x80)
        k = 1;
    else if ((s[0] & 0xE0) == 0xC0)
        k = 2;
    else if ((s[0] & 0xF0) == 0xE0)
        k = 3;
    else if ((s[0] & 0xF8) == 0xF0)
        k = 4;
    else
        return 0;
    if (n < k)
        return 0;
    uint32_t cp = k == 1 ? s[0] : s[0] & (0x7Fu >> k);
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3Fu);
    }
    uint8_t again[4];
    if (!scalar(cp) || encode(cp, again) != k || memcmp(again, s, k) != 0)
        return 0;
    return k;
}

/* The oracle's view of a whole string: well-formed sequences throughout. */
static bool oracle_valid(const uint8_t *s, size_t n) {
    for (size_t i = 0, k; i < n; i += k)
        if (!(k = oracle_seq(s + i, n - i)))
            return false;
    return true;
}

/* Which strings of 1, 2 and 3 bytes begin some well-formed sequence (bit per string). */
static uint8_t *prefix3;
static uint8_t prefix2[65536 / 8], prefix1[256 / 8];

static void mark(uint8_t *set, uint32_t i) {
    set[i >> 3] |= (uint8_t)(1u << (i & 7));
}

static bool marked(const uint8_t *set, uint32_t i) {
    return set[i >> 3] >> (i & 7) & 1;
}

static int build_prefixes(void **state) {
    (void)state;
    prefix3 = calloc((size_t)1 << 21, 1);
    if (!prefix3)
        return -1;
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (!scalar(cp))
            continue;
        uint8_t b[4];
        const size_t k = encode(cp, b);
        mark(prefix1, b[0]);
        if (k >= 2)
            mark(prefix2, (uint32_t)b[0] << 8 | b[1]);
        if (k >= 3)
            mark(prefix3, (uint32_t)b[0] << 16 | (uint32_t)b[1] << 8 | b[2]);
    }
    return 0;
}

static int free_prefixes(void **state) {
    (void)state;
    free(prefix3);
    return 0;
}

/* The oracle's maximal subpart of an ill-formed s[0..n): the longest prefix (up to 3 bytes)
 * that begins a well-formed sequence, at least 1. */
static size_t oracle_skip(const uint8_t *s, size_t n) {
    if (n >= 3 && marked(prefix3, (uint32_t)s[0] << 16 | (uint32_t)s[1] << 8 | s[2]))
        return 3;
    if (n >= 2 && marked(prefix2, (uint32_t)s[0] << 8 | s[1]))
        return 2;
    return 1;
}

static void check(const uint8_t *s, size_t n) {
    size_t skip = 0;
    const size_t want = oracle_seq(s, n), got = pl_utf8_seq(s, n, &skip);
    if (got != want)
        fail_msg("%02x %02x %02x %02x (n %zu): length %zu, want %zu", s[0], n > 1 ? s[1] : 0,
                 n > 2 ? s[2] : 0, n > 3 ? s[3] : 0, n, got, want);
    if (!want && skip != oracle_skip(s, n))
        fail_msg("%02x %02x %02x (n %zu): skip %zu, want %zu", s[0], n > 1 ? s[1] : 0,
                 n > 2 ? s[2] : 0, n, skip, oracle_skip(s, n));
    if (pl_utf8_valid(s, n) != oracle_valid(s, n))
        fail_msg("%02x %02x %02x %02x (n %zu): valid %d", s[0], n > 1 ? s[1] : 0, n > 2 ? s[2] : 0,
                 n > 3 ? s[3] : 0, n, !oracle_valid(s, n));
}

static void test_every_string_of_up_to_three_bytes(void **state) {
    (void)state;
    uint8_t s[3];
    for (uint32_t a = 0; a < 256; a++) {
        s[0] = (uint8_t)a;
        check(s, 1);
        for (uint32_t b = 0; b < 256; b++) {
            s[1] = (uint8_t)b;
            check(s, 2);
            for (uint32_t c = 0; c < 256; c++) {
                s[2] = (uint8_t)c;
                check(s, 3);
            }
        }
    }
}

static void test_four_byte_strings_at_every_boundary(void **state) {
    (void)state;
    static const uint8_t tail[] = {0x00, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xFF};
    uint8_t s[4];
    for (uint32_t a = 0xC0; a < 256; a++)
        for (uint32_t b = 0; b < 256; b++)
            for (size_t c = 0; c < sizeof(tail); c++)
                for (size_t d = 0; d < sizeof(tail); d++) {
                    s[0] = (uint8_t)a;
                    s[1] = (uint8_t)b;
                    s[2] = tail[c];
                    s[3] = tail[d];
                    check(s, 4);
                }
}

/* Every scalar value's encoding is one sequence of its length, each proper prefix of it a
 * truncation whose maximal subpart is all of it; every surrogate's is ill-formed. */
static void test_every_code_point_and_its_truncations(void **state) {
    (void)state;
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        uint8_t b[4];
        const size_t k = encode(cp, b);
        size_t skip = 0;
        if (!scalar(cp)) {
            assert_int_equal(pl_utf8_seq(b, k, &skip), 0);
            assert_int_equal(skip, 1); /* ED A0..BF: the second byte is out of range */
            assert_false(pl_utf8_valid(b, k));
            continue;
        }
        if (pl_utf8_seq(b, k, NULL) != k)
            fail_msg("U+%04X: not one sequence of %zu bytes", cp, k);
        for (size_t n = 1; n < k; n++) {
            skip = 0;
            if (pl_utf8_seq(b, n, &skip) != 0 || skip != n)
                fail_msg("U+%04X cut to %zu bytes: skip %zu", cp, n, skip);
        }
    }
}

/* Strings: the standard's example of maximal subparts (Unicode 15, table 3-8), and whole
 * texts. */
static void test_strings(void **state) {
    (void)state;
    const uint8_t t[] = {0x61, 0xF1, 0x80, 0x80, 0xE1, 0x80, 0xC2,
                         0x62, 0x80, 0x63, 0x80, 0xBF, 0x64};
    static const size_t want[][2] = {{1, 0}, {0, 3}, {0, 2}, {0, 1}, {1, 0},
                                     {0, 1}, {1, 0}, {0, 1}, {0, 1}, {1, 0}};
    size_t i = 0;
    for (size_t k = 0; k < sizeof(want) / sizeof(want[0]); k++) {
        size_t skip = 0;
        const size_t n = pl_utf8_seq(t + i, sizeof(t) - i, &skip);
        assert_int_equal(n, want[k][0]);
        if (!n)
            assert_int_equal(skip, want[k][1]);
        i += n ? n : skip;
    }
    assert_int_equal(i, sizeof(t));

    assert_true(pl_utf8_valid("", 0));
    assert_true(pl_utf8_valid("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82", 14));
    assert_false(pl_utf8_valid("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99", 13)); /* cut */
    assert_false(pl_utf8_valid("\xc0\xaf", 2));                               /* overlong */
    assert_false(pl_utf8_valid("\xed\xa0\x80", 3));                           /* surrogate */
    assert_false(pl_utf8_valid("\xf4\x90\x80\x80", 4));                       /* > U+10FFFF */
    assert_true(pl_utf8_valid("\xf4\x8f\xbf\xbf", 4));                        /* U+10FFFF */
    assert_true(pl_utf8_valid("a\0b", 3)); /* U+0000 is a scalar value */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_string_of_up_to_three_bytes),
        cmocka_unit_test(test_four_byte_strings_at_every_boundary),
        cmocka_unit_test(test_every_code_point_and_its_truncations),
        cmocka_unit_test(test_strings),
    };
    return cmocka_run_group_tests(tests, build_prefixes, free_prefixes);
}
