/* SPDX-License-Identifier: MIT */
/* Unit tests for client/src/cli_args.c: option forms, strict numbers, ranges, and the
 * exact one-line messages the CLI prints. */
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

#include "cli_args.h"

struct vals {
    const char *model;
    int64_t n;
    uint64_t seed;
    float top_p, temp;
    bool json;
};

static int parse(struct vals *v, char *err, int argc, ...) {
    char *argv[16];
    va_list ap;
    va_start(ap, argc);
    for (int i = 0; i < argc; i++)
        argv[i] = va_arg(ap, char *);
    va_end(ap);
    struct pl_cli_opt opts[] = {
        {"model", 'm', PL_CLI_OPT_STR, &v->model, 0, 0, false, false, "FILE", "model", false},
        {"n-predict", 'n', PL_CLI_OPT_I64, &v->n, -1, 100, false, false, "N", "count", false},
        {"seed", 0, PL_CLI_OPT_U64, &v->seed, 0, 0, false, false, "S", "seed", false},
        {"top-p", 0, PL_CLI_OPT_FLOAT, &v->top_p, 0, 1, true, false, "P", "top-p", false},
        {"temp", 0, PL_CLI_OPT_FLOAT, &v->temp, 0, INFINITY, false, false, "T", "temp", false},
        {"json", 0, PL_CLI_OPT_FLAG, &v->json, 0, 0, false, false, NULL, "json", false},
    };
    return pl_cli_args_parse(opts, sizeof(opts) / sizeof(opts[0]), argc, argv, err, PL_CLI_ERR_LEN);
}

static void test_accepts_all_option_forms(void **state) {
    (void)state;
    struct vals v = {0};
    char err[PL_CLI_ERR_LEN] = "";
    assert_int_equal(parse(&v, err, 8, "--model", "m.gguf", "-n", "-1", "--top-p=0.5", "--json",
                           "--seed", "18446744073709551615"),
                     0);
    assert_string_equal(v.model, "m.gguf");
    assert_int_equal(v.n, -1);
    assert_float_equal(v.top_p, 0.5f, 0.0f);
    assert_true(v.json);
    assert_true(v.seed == UINT64_MAX);
    /* A value may start with '-' (a prompt, a negative number). */
    struct vals w = {0};
    assert_int_equal(parse(&w, err, 2, "-m", "-odd-name"), 0);
    assert_string_equal(w.model, "-odd-name");
    assert_int_equal(parse(&w, err, 2, "-m", "--help"), 0);
    assert_string_equal(w.model, "--help");
}

static void test_help_is_reported(void **state) {
    (void)state;
    struct vals v = {0};
    char err[PL_CLI_ERR_LEN];
    assert_int_equal(parse(&v, err, 1, "--help"), 1);
    assert_int_equal(parse(&v, err, 2, "--json", "-h"), 1);
}

static void expect(int r, const char *err, int want_r, const char *want) {
    assert_int_equal(r, want_r);
    assert_string_equal(err, want);
}

static void test_errors_are_one_clear_line(void **state) {
    (void)state;
    struct vals v = {0};
    char e[PL_CLI_ERR_LEN];
    expect(parse(&v, e, 2, "--top-p", "abc"), e, -EINVAL,
           "--top-p: expected a number in (0, 1], got 'abc'");
    expect(parse(&v, e, 2, "--top-p", "0"), e, -EINVAL,
           "--top-p: expected a number in (0, 1], got '0'");
    expect(parse(&v, e, 2, "--top-p", "1.0001"), e, -EINVAL,
           "--top-p: expected a number in (0, 1], got '1.0001'");
    expect(parse(&v, e, 2, "--temp", "nan"), e, -EINVAL,
           "--temp: expected a number >= 0, got 'nan'");
    expect(parse(&v, e, 2, "--temp", "inf"), e, -EINVAL,
           "--temp: expected a number >= 0, got 'inf'");
    expect(parse(&v, e, 2, "--temp", "0x1p3"), e, -EINVAL,
           "--temp: expected a number >= 0, got '0x1p3'");
    expect(parse(&v, e, 2, "--temp", " 1"), e, -EINVAL, "--temp: expected a number >= 0, got ' 1'");
    expect(parse(&v, e, 2, "-n", "101"), e, -EINVAL,
           "-n: expected an integer in [-1, 100], got '101'");
    expect(parse(&v, e, 2, "--n-predict", "1e2"), e, -EINVAL,
           "--n-predict: expected an integer in [-1, 100], got '1e2'");
    expect(parse(&v, e, 2, "--seed", "-1"), e, -EINVAL,
           "--seed: expected an integer in [0, 18446744073709551615], got '-1'");
    expect(parse(&v, e, 2, "--seed", "18446744073709551616"), e, -EINVAL,
           "--seed: expected an integer in [0, 18446744073709551615], got "
           "'18446744073709551616'");
    expect(parse(&v, e, 1, "--model"), e, -EINVAL, "--model: missing value");
    expect(parse(&v, e, 1, "--json=yes"), e, -EINVAL, "--json: takes no value");
    expect(parse(&v, e, 1, "--bogus"), e, -ENOENT, "unknown option '--bogus'");
    expect(parse(&v, e, 1, "-x"), e, -ENOENT, "unknown option '-x'");
    expect(parse(&v, e, 1, "stray"), e, -ENOENT, "unexpected argument 'stray'");
    expect(parse(&v, e, 4, "-n", "1", "-n", "2"), e, -EINVAL, "-n: given more than once");
}

static void test_list_option_repeats_up_to_its_max(void **state) {
    (void)state;
    struct pl_cli_str_list stops = {0};
    bool flag = false;
    struct pl_cli_opt opts[] = {
        {"stop", 0, PL_CLI_OPT_STR_LIST, &stops, 0, 3, false, false, "STR", "stop", false},
        {"json", 0, PL_CLI_OPT_FLAG, &flag, 0, 0, false, false, NULL, "json", false},
    };
    char e[PL_CLI_ERR_LEN];
    char *argv[] = {"--stop", "a", "--stop=b c", "--json", "--stop", "--x"};
    assert_int_equal(pl_cli_args_parse(opts, 2, 6, argv, e, sizeof(e)), 0);
    assert_int_equal(stops.n, 3);
    assert_string_equal(stops.v[0], "a");
    assert_string_equal(stops.v[1], "b c");
    assert_string_equal(stops.v[2], "--x");
    assert_true(flag);
    struct pl_cli_str_list more = {0};
    opts[0].dst = &more;
    opts[0].seen = opts[1].seen = false;
    char *argv2[] = {"--stop", "1", "--stop", "2", "--stop", "3", "--stop", "4"};
    assert_int_equal(pl_cli_args_parse(opts, 1, 8, argv2, e, sizeof(e)), -EINVAL);
    assert_string_equal(e, "--stop: at most 3 values");
}

static void test_parse_ids(void **state) {
    (void)state;
    int32_t *ids = NULL;
    size_t n = 0;
    char e[PL_CLI_ERR_LEN];
    assert_int_equal(pl_cli_args_parse_ids("1,2, 3 ,2147483647", &ids, &n, e, sizeof(e)), 0);
    assert_int_equal(n, 4);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[2], 3);
    assert_int_equal(ids[3], INT32_MAX);
    free(ids);
    const char *bad[] = {"", ",", "1,", ",1", "1,,2", "a", "-1", "2147483648", "1;2", "1 2"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ids = NULL;
        assert_int_equal(pl_cli_args_parse_ids(bad[i], &ids, &n, e, sizeof(e)), -EINVAL);
        assert_null(ids);
        assert_non_null(strstr(e, "--tokens: expected comma-separated token ids"));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accepts_all_option_forms),
        cmocka_unit_test(test_help_is_reported),
        cmocka_unit_test(test_errors_are_one_clear_line),
        cmocka_unit_test(test_parse_ids),
        cmocka_unit_test(test_list_option_repeats_up_to_its_max),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
