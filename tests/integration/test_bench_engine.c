/* SPDX-License-Identifier: MIT */
/* picolm-bench engine end to end: a small model written by `picolm-bench mkmodel`, then the
 * engine benchmark's JSON report checked for consistency: every repetition's decode has a
 * ratio to the read bandwidth measured around it, the reported ratio is their median, the
 * effective bandwidth is bytes per token x tok/s, the same against the read loops over the
 * weights' copy (none without a copy); --no-bw drops the bandwidth fields; a bad
 * option exits 2. Also `picolm-bench decode` on two threads, and `picolm-bench serve` with
 * its shared-prefix TTFTs. Speed itself is not judged here
 * (benchmarks print figures; a shared host's noise would make any threshold flaky). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "json.h"
#include "run.h"

#define BENCH PL_BINARY_DIR "/bin/picolm-bench"
#define REPS 3

static char g_vocab[4096];
static char g_dir[] = "/tmp/picolm-bench-test-XXXXXX";
static char g_model[4096];

/* Run picolm-bench with argv (NULL-terminated, argv[0] = "picolm-bench"). */
static struct pl_test_run run_bench(const char *const *argv) {
    struct pl_test_run r;
    assert_int_equal(pl_test_run(BENCH, argv, NULL, 0, NULL, &r), 0);
    return r;
}

/* Run the bench (argv as run_bench), expect exit 0 and one JSON object on stdout. */
static struct pl_json *run_json(const char *const *argv) {
    struct pl_test_run r = run_bench(argv);
    if (r.status != 0)
        fail_msg("exit %d, stderr: %s", r.status, r.err);
    struct pl_json *j = NULL;
    char err[256];
    if (pl_json_parse(r.out, r.out_len, &j, err, sizeof(err)) != 0)
        fail_msg("not JSON (%s): %s", err, r.out);
    pl_test_run_free(&r);
    assert_int_equal(j->type, PL_JSON_OBJECT);
    return j;
}

static double num(const struct pl_json *obj, const char *key) {
    const struct pl_json *v = pl_json_get(obj, key);
    if (!v || v->type != PL_JSON_NUMBER)
        fail_msg("report has no number '%s'", key);
    return v->number;
}

/* The REPS numbers of array key into v. */
static void nums(const struct pl_json *obj, const char *key, double *v) {
    const struct pl_json *a = pl_json_get(obj, key);
    if (!a || a->type != PL_JSON_ARRAY || a->n != REPS)
        fail_msg("report has no array '%s' of %d numbers", key, REPS);
    for (size_t i = 0; i < REPS; i++) {
        const struct pl_json *x = pl_json_at(a, i);
        assert_non_null(x);
        assert_int_equal(x->type, PL_JSON_NUMBER);
        v[i] = x->number;
    }
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int make_model(void **state) {
    (void)state;
    if (!mkdtemp(g_dir))
        return -1;
    (void)snprintf(g_model, sizeof(g_model), "%s/tiny.gguf", g_dir);
    /* 2 layers of 256 wide (a Q4_K super-block per row), GQA 4:2, FFN 512 */
    const char *argv[] = {"picolm-bench", "mkmodel", "--shape", "256,2,4,2,512", "--type", "Q4_K_M",
                          "--vocab-from", g_vocab,   "--out",   g_model,         NULL};
    struct pl_test_run r = run_bench(argv);
    if (r.status != 0)
        fprintf(stderr, "mkmodel: exit %d: %s", r.status, r.err);
    pl_test_run_free(&r);
    return r.status == 0 ? 0 : -1;
}

static int remove_model(void **state) {
    (void)state;
    (void)unlink(g_model);
    (void)rmdir(g_dir);
    return 0;
}

static void test_report_pairs_each_decode_with_its_bandwidth(void **state) {
    (void)state;
    const char *argv[] = {"picolm-bench", "engine", "--model",  g_model, "--threads", "2",
                          "--reps",       "3",      "--prompt", "32",    "--gen",     "16",
                          "--batch",      "16",     "--json",   NULL};
    struct pl_json *j = run_json(argv);
    assert_true(num(j, "threads") == 2.0);
    assert_true(num(j, "reps") == REPS);
    assert_true(num(j, "prefill_tok_s") > 0.0);
    const double tps = num(j, "decode_tok_s"), bytes = num(j, "weight_bytes_per_token");
    assert_true(tps > 0.0 && num(j, "decode_best_tok_s") >= tps * 0.999);
    assert_true(bytes > 0.0);
    /* effective bandwidth = bytes per token x tok/s (printed to 1 MB/s) */
    assert_true(fabs(num(j, "decode_effective_gb_s") - bytes * tps * 1e-9) < 2e-3);
    assert_true(num(j, "read_gb_s_1t") > 0.0 && num(j, "read_gb_s") > 0.0);
    assert_true(num(j, "read_gb_s_decode") > 0.0);
    /* the ratio at the start: the mean decode's bandwidth over the start's N-thread figure */
    assert_true(fabs(num(j, "decode_bw_ratio_start") -
                     num(j, "decode_effective_gb_s") / num(j, "read_gb_s")) < 2e-3);
    /* per repetition: ratio = bytes x its tok/s / the bandwidth around it, and that
     * bandwidth is not simply the start's */
    double v[REPS], tg[REPS], bw[REPS], tg_sum = 0.0;
    nums(j, "decode_bw_ratios", v);
    nums(j, "decode_tok_s_reps", tg);
    nums(j, "read_gb_s_decodes", bw);
    bool all_start = true;
    for (size_t i = 0; i < REPS; i++) {
        assert_true(v[i] > 0.0 && isfinite(v[i]) && tg[i] > 0.0 && bw[i] > 0.0);
        assert_true(fabs(v[i] - bytes * tg[i] * 1e-9 / bw[i]) < 1e-3 * v[i] + 1e-4);
        all_start = all_start && bw[i] == num(j, "read_gb_s");
        tg_sum += 1.0 / tg[i];
    }
    assert_false(all_start);
    /* the mean over the repetitions: their tokens over their total time */
    assert_true(fabs(tps - REPS / tg_sum) < 0.01 * tps);
    qsort(v, REPS, sizeof(v[0]), cmp_double);
    assert_true(fabs(num(j, "decode_bw_ratio") - v[REPS / 2]) < 1e-4);
    /* the same against the read loops over the weights' own copy (THP here) */
    double vw[REPS];
    nums(j, "decode_bw_ratios_weights", vw);
    const double bw_w = num(j, "read_gb_s_weights");
    assert_true(bw_w > 0.0);
    for (size_t i = 0; i < REPS; i++) {
        assert_true(vw[i] > 0.0 && isfinite(vw[i]));
        /* its bandwidth: bytes x tok/s / ratio, and the reported one is their median */
        bw[i] = bytes * tg[i] * 1e-9 / vw[i];
    }
    qsort(vw, REPS, sizeof(vw[0]), cmp_double);
    qsort(bw, REPS, sizeof(bw[0]), cmp_double);
    assert_true(fabs(num(j, "decode_bw_ratio_weights") - vw[REPS / 2]) < 1e-4);
    assert_true(fabs(bw_w - bw[REPS / 2]) < 1e-3 * bw_w + 2e-3);
    /* peak RSS: at least the model file, and the read loop's buffer (1 GiB, in the child)
     * is not in it */
    assert_true(num(j, "peak_rss_bytes") >= num(j, "model_file_bytes"));
    assert_true(num(j, "peak_rss_bytes") < num(j, "model_file_bytes") + 512.0 * 1048576.0);
    pl_json_free(j);
}

static void test_no_bw_drops_the_bandwidth_fields(void **state) {
    (void)state;
    const char *argv[] = {"picolm-bench", "engine", "--model",  g_model, "--threads", "1",
                          "--reps",       "1",      "--prompt", "8",     "--gen",     "4",
                          "--no-bw",      "--json", NULL};
    struct pl_json *j = run_json(argv);
    assert_true(num(j, "decode_tok_s") > 0.0);
    assert_null(pl_json_get(j, "read_gb_s"));
    assert_null(pl_json_get(j, "decode_bw_ratio"));
    assert_null(pl_json_get(j, "decode_bw_ratios"));
    assert_null(pl_json_get(j, "read_gb_s_decodes"));
    assert_null(pl_json_get(j, "read_gb_s_weights"));
    assert_null(pl_json_get(j, "decode_bw_ratio_weights"));
    pl_json_free(j);
}

/* Weights left in the file mapping: no copy to read, so no figures over it (the child's
 * read loop still runs). */
static void test_weights_in_file_have_no_copy_figures(void **state) {
    (void)state;
    const char *argv[] = {"picolm-bench", "engine", "--model",  g_model, "--threads", "1",
                          "--reps",       "1",      "--prompt", "8",     "--gen",     "4",
                          "--weights",    "file",   "--json",   NULL};
    struct pl_json *j = run_json(argv);
    const struct pl_json *w = pl_json_get(j, "weights");
    assert_non_null(w);
    assert_int_equal(w->type, PL_JSON_STRING);
    assert_string_equal(w->str, "file");
    assert_true(num(j, "decode_bw_ratio") > 0.0);
    assert_null(pl_json_get(j, "read_gb_s_weights"));
    assert_null(pl_json_get(j, "decode_bw_ratios_weights"));
    pl_json_free(j);
}

/* `picolm-bench decode --threads 2`: the kernels and the read loop on two threads each, one
 * entry per type with a decode kernel here (none on a CPU without tiled kernels), each
 * ratio the quotient of its figures. */
static void test_decode_bench_on_two_threads(void **state) {
    (void)state;
    const char *argv[] = {"picolm-bench", "decode", "--mem-mib", "16",
                          "--threads",    "2",      "--json",    NULL};
    struct pl_json *j = run_json(argv);
    assert_true(num(j, "threads") == 2.0);
    const struct pl_json *types = pl_json_get(j, "types");
    assert_non_null(types);
    assert_int_equal(types->type, PL_JSON_ARRAY);
    for (size_t i = 0; i < types->n; i++) {
        const struct pl_json *t = pl_json_at(types, i);
        const double l2 = num(t, "l2_gbs"), mem = num(t, "mem_gbs"), bw = num(t, "read_bw_gbs");
        assert_true(l2 > 0.0 && mem > 0.0 && bw > 0.0);
        /* printed with 3 decimals */
        assert_true(fabs(num(t, "mem_over_bw") - mem / bw) < 2e-3 * (1.0 + mem / bw));
        assert_true(fabs(num(t, "l2_over_bw") - l2 / bw) < 2e-3 * (1.0 + l2 / bw));
    }
    pl_json_free(j);
}

/* `picolm-bench serve` through the built picolmd, with the shared-prefix TTFTs: every
 * client of each round finished, and the prefix figures are there, each broker TTFT (receipt
 * to first token) within its client's (submit to first chunk). */
static void test_serve_bench_with_shared_prefix(void **state) {
    (void)state;
    const char *argv[] = {"picolm-bench",    "serve", "--model",  g_model, "--clients", "1,2",
                          "--reps",          "1",     "--tokens", "4",     "--threads", "1",
                          "--shared-prefix", "200",   "--json",   NULL};
    struct pl_json *j = run_json(argv);
    const struct pl_json *rounds = pl_json_get(j, "rounds");
    assert_non_null(rounds);
    assert_int_equal(rounds->type, PL_JSON_ARRAY);
    assert_int_equal(rounds->n, 2);
    for (size_t i = 0; i < rounds->n; i++) {
        assert_true(num(pl_json_at(rounds, i), "clients") == (double)(i + 1));
        assert_true(num(pl_json_at(rounds, i), "failed") == 0.0);
    }
    const struct pl_json *sp = pl_json_get(j, "shared_prefix");
    assert_non_null(sp);
    assert_int_equal(sp->type, PL_JSON_OBJECT);
    assert_true(num(sp, "words") == 200.0);
    /* "Report N." + 200 words + the question: at least a token a word */
    assert_true(num(sp, "prompt_tokens") > 200.0 && num(sp, "prompt_tokens") < 3 * 200 + 64);
    assert_true(num(sp, "cold_broker_ttft_ns") > 0.0);
    assert_true(num(sp, "warm_broker_ttft_ns") > 0.0);
    assert_true(num(sp, "cold_broker_ttft_ns") <= num(sp, "cold_ttft_ns"));
    assert_true(num(sp, "warm_broker_ttft_ns") <= num(sp, "warm_ttft_ns"));
    pl_json_free(j);
}

static void test_bad_options_exit_2(void **state) {
    (void)state;
    const char *bad[][8] = {
        {"picolm-bench", "engine", "--model", g_model, "--reps", "0", NULL},
        {"picolm-bench", "engine", "--model", g_model, "--reps", "101", NULL},
        {"picolm-bench", "engine", "--model", g_model, "--threads", "x", NULL},
        {"picolm-bench", "engine", "--bogus", NULL},
        {"picolm-bench", "engine", NULL},
        {"picolm-bench", "decode", "--threads", "0", NULL},
        {"picolm-bench", "decode", "--threads", "65", NULL},
        {"picolm-bench", "serve", "--model", g_model, "--shared-prefix", "0", NULL},
        {"picolm-bench", "serve", "--model", g_model, "--shared-prefix", "1501", NULL},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct pl_test_run r = run_bench(bad[i]);
        assert_int_equal(r.status, 2);
        assert_int_equal(r.out_len, 0);
        pl_test_run_free(&r);
    }
}

int main(void) {
    const char *data = getenv("PICOLM_TEST_DATA");
    if (!data || !data[0] || access(BENCH, X_OK) != 0) {
        fprintf(stderr, "PICOLM_TEST_DATA unset or %s not built: skipping\n", BENCH);
        return 77;
    }
    (void)snprintf(g_vocab, sizeof(g_vocab), "%s/tokenizer/ggml-vocab-llama-spm.gguf", data);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_report_pairs_each_decode_with_its_bandwidth),
        cmocka_unit_test(test_no_bw_drops_the_bandwidth_fields),
        cmocka_unit_test(test_weights_in_file_have_no_copy_figures),
        cmocka_unit_test(test_decode_bench_on_two_threads),
        cmocka_unit_test(test_serve_bench_with_shared_prefix),
        cmocka_unit_test(test_bad_options_exit_2),
    };
    return cmocka_run_group_tests(tests, make_model, remove_model);
}
