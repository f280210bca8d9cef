/* SPDX-License-Identifier: MIT */
/* tools/picoctl/json_writer.c: nesting and separators, string escaping (quotes, backslash,
 * control characters, UTF-8 kept), numbers (NaN/inf as null), misuse reported; every valid
 * document parses back with the test JSON reader to the same values. */
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

#include "json.h"
#include "json_writer.h"

struct out {
    char *buf;
    size_t len;
    FILE *f;
};

static void out_open(struct out *o) {
    o->buf = NULL;
    o->len = 0;
    o->f = open_memstream(&o->buf, &o->len);
    assert_non_null(o->f);
}

static void out_close(struct out *o) {
    fclose(o->f);
}

static void test_nested_document_round_trips(void **state) {
    struct out o;
    struct pl_jw w;
    out_open(&o);
    pl_jw_init(&w, o.f);
    pl_jw_obj_begin(&w, NULL);
    pl_jw_str(&w, "s", "a\"b\\c\n\t\x01 \xc3\xa9");
    pl_jw_u64(&w, "big", UINT64_MAX);
    pl_jw_i64(&w, "neg", -42);
    pl_jw_dbl(&w, "half", 0.5);
    pl_jw_dbl(&w, "nan", NAN);
    pl_jw_dbl(&w, "inf", INFINITY);
    pl_jw_bool(&w, "t", true);
    pl_jw_arr_begin(&w, "arr");
    pl_jw_u64(&w, NULL, 1);
    pl_jw_obj_begin(&w, NULL);
    pl_jw_obj_end(&w);
    pl_jw_arr_begin(&w, NULL);
    pl_jw_arr_end(&w);
    pl_jw_str(&w, NULL, "");
    pl_jw_arr_end(&w);
    pl_jw_obj_begin(&w, "empty");
    pl_jw_obj_end(&w);
    pl_jw_obj_end(&w);
    assert_int_equal(pl_jw_finish(&w), 0);
    out_close(&o);
    assert_string_equal(o.buf, "{\"s\":\"a\\\"b\\\\c\\n\\t\\u0001 \xc3\xa9\",\"big\":"
                               "18446744073709551615,\"neg\":-42,\"half\":0.5,\"nan\":null,"
                               "\"inf\":null,\"t\":true,\"arr\":[1,{},[],\"\"],\"empty\":{}}\n");
    struct pl_json *j = NULL;
    assert_int_equal(pl_json_parse(o.buf, o.len, &j, NULL, 0), 0);
    assert_string_equal(pl_json_get(j, "s")->str, "a\"b\\c\n\t\x01 \xc3\xa9");
    assert_true(pl_json_get(j, "neg")->number == -42);
    assert_int_equal(pl_json_get(j, "nan")->type, PL_JSON_NULL);
    assert_int_equal(pl_json_get(j, "arr")->n, 4);
    pl_json_free(j);
    free(o.buf);
}

static void test_misuse_is_reported(void **state) {
    struct out o;
    struct pl_jw w;
    /* Unclosed */
    out_open(&o);
    pl_jw_init(&w, o.f);
    pl_jw_obj_begin(&w, NULL);
    assert_int_equal(pl_jw_finish(&w), -EINVAL);
    out_close(&o);
    free(o.buf);
    /* Closed once too often */
    out_open(&o);
    pl_jw_init(&w, o.f);
    pl_jw_arr_begin(&w, NULL);
    pl_jw_arr_end(&w);
    pl_jw_arr_end(&w);
    assert_int_equal(pl_jw_finish(&w), -EINVAL);
    out_close(&o);
    free(o.buf);
    /* Too deep */
    out_open(&o);
    pl_jw_init(&w, o.f);
    for (int i = 0; i < PL_JW_MAX_DEPTH + 2; i++)
        pl_jw_arr_begin(&w, NULL);
    for (int i = 0; i < PL_JW_MAX_DEPTH; i++)
        pl_jw_arr_end(&w);
    assert_int_equal(pl_jw_finish(&w), -EINVAL);
    out_close(&o);
    free(o.buf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nested_document_round_trips),
        cmocka_unit_test(test_misuse_is_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
