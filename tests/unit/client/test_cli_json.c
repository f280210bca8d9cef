/* SPDX-License-Identifier: MIT */
/* Unit tests for client/src/cli_json.c: escaping, valid UTF-8 passed through, and each
 * maximal invalid subpart replaced by one U+FFFD. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cli_json.h"

static void check(const char *in, size_t len, const char *want) {
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    assert_non_null(f);
    pl_cli_json_write_str(f, in, len);
    assert_int_equal(fclose(f), 0);
    assert_string_equal(buf, want);
    free(buf);
}

#define CHECK(lit, want) check(lit, sizeof(lit) - 1, want)

static void test_escapes_specials_and_controls(void **state) {
    (void)state;
    CHECK("a\"b\\c", "\"a\\\"b\\\\c\"");
    CHECK("\n\r\t\b\f", "\"\\n\\r\\t\\b\\f\"");
    CHECK("\x01\x1f\x7f", "\"\\u0001\\u001f\\u007f\"");
    CHECK("x\0y", "\"x\\u0000y\"");
    CHECK("", "\"\"");
}

static void test_valid_utf8_passes_through(void **state) {
    (void)state;
    CHECK("Z\xc3\xbcrich \xe2\x82\xac \xf0\x9f\x99\x82 \xe4\xbd\xa0",
          "\"Z\xc3\xbcrich \xe2\x82\xac \xf0\x9f\x99\x82 \xe4\xbd\xa0\"");
}

static void test_invalid_utf8_becomes_replacement_per_maximal_subpart(void **state) {
    (void)state;
#define R "\xef\xbf\xbd"
    CHECK("a\x80"
          "b",
          "\"a" R "b\"");             /* stray continuation */
    CHECK("\xc0\xaf", "\"" R R "\""); /* overlong lead: each byte */
    CHECK("\xe2\x82", "\"" R "\"");   /* truncated 3-byte: one U+FFFD */
    CHECK("\xe2\x82z", "\"" R "z\"");
    CHECK("\xf0\x9f\x99", "\"" R "\"");           /* truncated 4-byte */
    CHECK("\xed\xa0\x80", "\"" R R R "\"");       /* surrogate: ED A0 is no valid prefix */
    CHECK("\xf4\x90\x80\x80", "\"" R R R R "\""); /* above U+10FFFF */
    CHECK("\xff\xfe", "\"" R R "\"");
    CHECK("\xe0\x80\x80", "\"" R R R "\""); /* overlong 3-byte */
#undef R
}

/* ---- --messages files ---- */

static void test_messages_parse_with_escapes(void **state) {
    (void)state;
    const char text[] =
        " [ {\"role\" : \"system\", \"content\": \"a\\\"b\\n\\u00e9\\ud83d\\ude00/\\/\"},\n"
        "{\"content\":\"\", \"role\":\"user\"} ] \n";
    struct pl_cli_msg *m = NULL;
    size_t n = 0;
    char err[256];
    assert_int_equal(pl_cli_json_parse_messages(text, sizeof(text) - 1, &m, &n, err, sizeof(err)),
                     0);
    assert_int_equal(n, 2);
    assert_string_equal(m[0].role, "system");
    assert_string_equal(m[0].content, "a\"b\n\xc3\xa9\xf0\x9f\x98\x80//");
    assert_string_equal(m[1].role, "user");
    assert_string_equal(m[1].content, "");
    pl_cli_json_messages_free(m, n);
}

static void expect_bad(const char *text, const char *want_in_err) {
    struct pl_cli_msg *m = NULL;
    size_t n = 0;
    char err[256] = "";
    int r = pl_cli_json_parse_messages(text, strlen(text), &m, &n, err, sizeof(err));
    if (r != -EINVAL)
        fail_msg("'%s': got %d, want -EINVAL", text, r);
    assert_null(m);
    if (!strstr(err, want_in_err))
        fail_msg("'%s': error '%s' lacks '%s'", text, err, want_in_err);
    assert_null(strchr(err, '\n'));
}

static void test_messages_errors_are_one_clear_line(void **state) {
    (void)state;
    expect_bad("", "expected a JSON array");
    expect_bad("{}", "expected a JSON array");
    expect_bad("[]", "no messages");
    expect_bad("[1]", "messages[0]: expected an object");
    expect_bad("[{\"role\":\"user\"}]", "messages[0]: \"content\" is missing");
    expect_bad("[{\"role\":\"user\",\"content\":\"x\"},{\"content\":\"y\"}]",
               "messages[1]: \"role\" is missing");
    expect_bad("[{\"role\":\"user\",\"content\":3}]", "\"content\" must be a string");
    expect_bad("[{\"role\":\"\",\"content\":\"x\"}]", "1..64 bytes");
    expect_bad("[{\"role\":\"user\",\"name\":\"x\"}]", "unknown member \"name\"");
    expect_bad("[{\"role\":\"user\",\"role\":\"x\"}]", "given twice");
    expect_bad("[{\"role\":\"user\",\"content\":\"x\"}", "expected ',' or ']'");
    expect_bad("[{\"role\":\"user\",\"content\":\"x\"}] x", "after the array");
    expect_bad("[{\"role\":\"user\",\"content\":\"\\u0000\"}]", "\\u0000");
    expect_bad("[{\"role\":\"user\",\"content\":\"\\ud800\"}]", "surrogate");
    expect_bad("[{\"role\":\"user\",\"content\":\"\\q\"}]", "bad escape");
    expect_bad("[{\"role\":\"user\",\"content\":\"\xc3\x28\"}]", "invalid UTF-8");
    expect_bad("[{\"role\":\"user\",\"content\":\"a\nb\"}]", "control character");
    expect_bad("[{\"role\":\"user\",\"content\":\"abc", "unterminated");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escapes_specials_and_controls),
        cmocka_unit_test(test_valid_utf8_passes_through),
        cmocka_unit_test(test_invalid_utf8_becomes_replacement_per_maximal_subpart),
        cmocka_unit_test(test_messages_parse_with_escapes),
        cmocka_unit_test(test_messages_errors_are_one_clear_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
