/* SPDX-License-Identifier: MIT */
/* Integration test of the built `picolm` binary (in-process mode) against the llama.cpp
 * references in $PICOLM_TEST_DATA/models: `generate --json --temp 0` reproduces the greedy
 * tokens and text, `tokenize` (stdin and -p) prints the reference ids, `eval` writes
 * n * n_vocab float32 logits that match the reference rows, and bad arguments exit 2 with
 * exactly one line on stderr and nothing on stdout. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "fidelity_ref.h"
#include "json.h"
#include "run.h"

#define PICOLM PL_BINARY_DIR "/bin/picolm"
#define TOL_FLOAT 0.002

static char g_models[4096];

/* Run picolm with argv (NULL-terminated, argv[0] = "picolm") and stdin bytes. */
static struct pl_test_run run_cli(const char *const *argv, const char *in, size_t in_len) {
    struct pl_test_run r;
    assert_int_equal(pl_test_run(PICOLM, argv, in, in_len, NULL, &r), 0);
    return r;
}

static bool load_ref(const char *name, struct fidelity_ref *ref) {
    char path[8192], err[512];
    (void)snprintf(path, sizeof(path), "%s/%s", g_models, name);
    if (access(path, R_OK) != 0)
        return false;
    int r = fidelity_ref_load(path, ref, err, sizeof(err));
    if (r < 0)
        fail_msg("%s: %s", path, err);
    return true;
}

static void model_path(const struct fidelity_ref *ref, char *buf, size_t cap) {
    (void)snprintf(buf, cap, "%s/%s", g_models, ref->model_file);
}

static char *ids_csv(const int32_t *ids, size_t n, const char *sep) {
    char *s = malloc(n * 12 + 1);
    assert_non_null(s);
    size_t len = 0;
    s[0] = '\0';
    for (size_t i = 0; i < n; i++)
        len += (size_t)sprintf(s + len, "%s%d", i ? sep : "", ids[i]);
    return s;
}

static void assert_json_ids(const struct pl_json *a, const int32_t *want, size_t n,
                            const char *what) {
    if (!a || a->type != PL_JSON_ARRAY)
        fail_msg("%s: not an array", what);
    if (a->n != n)
        fail_msg("%s: %zu ids, want %zu", what, a->n, n);
    for (size_t i = 0; i < n; i++) {
        const struct pl_json *v = pl_json_at(a, i);
        if (!v || v->type != PL_JSON_NUMBER || v->number != want[i])
            fail_msg("%s[%zu]: got %g, want %d", what, i, v ? v->number : -1.0, want[i]);
    }
}

/* ---- generate --json --temp 0 equals the reference greedy run ---- */

static void test_generate_json_greedy_matches_reference(void **state) {
    (void)state;
    struct fidelity_ref ref;
    if (!load_ref("stories260K.ref.json", &ref))
        skip();
    char model[8192], err[256];
    model_path(&ref, model, sizeof(model));
    /* The reference's own `text` field is compared too: same replacement rule (U+FFFD). */
    char json_path[8192];
    (void)snprintf(json_path, sizeof(json_path), "%s/stories260K.ref.json", g_models);
    struct pl_json *rj = NULL;
    assert_int_equal(pl_json_load_file(json_path, &rj, err, sizeof(err)), 0);
    for (size_t p = 0; p < ref.n_prompts; p++) {
        const struct fidelity_prompt *rp = &ref.prompts[p];
        /* Default KV cache is F16: llama.cpp's F16-cache run is the reference. */
        const int32_t *want = rp->has_greedy_f16 ? rp->greedy_f16.token_ids : rp->greedy.token_ids;
        const char *argv[] = {"picolm",       "generate", "--model", model,    "-p",
                              rp->text,       "-n",       "32",      "--temp", "0",
                              "--ignore-eos", "--json",   NULL};
        struct pl_test_run r = run_cli(argv, NULL, 0);
        if (r.status != 0)
            fail_msg("prompt %zu: exit %d, stderr: %s", p, r.status, r.err);
        assert_int_equal(r.err_len, 0);
        struct pl_json *j = NULL;
        if (pl_json_parse(r.out, r.out_len, &j, err, sizeof(err)) < 0)
            fail_msg("prompt %zu: stdout is not one JSON value: %s", p, err);
        assert_int_equal(j->type, PL_JSON_OBJECT);
        assert_int_equal(j->n, 3);
        assert_json_ids(pl_json_get(j, "prompt_tokens"), rp->token_ids, rp->n_tokens,
                        "prompt_tokens");
        assert_json_ids(pl_json_get(j, "tokens"), want, FIDELITY_N_GREEDY, "tokens");
        const struct pl_json *text = pl_json_get(j, "text");
        const struct pl_json *rtext =
            pl_json_get(pl_json_get(pl_json_at(pl_json_get(rj, "prompts"), p), "greedy"), "text");
        assert_non_null(text);
        assert_non_null(rtext);
        assert_int_equal(text->type, PL_JSON_STRING);
        if (text->str_len != rtext->str_len || memcmp(text->str, rtext->str, text->str_len))
            fail_msg("prompt %zu: text '%s', want '%s'", p, text->str, rtext->str);
        pl_json_free(j);
        pl_test_run_free(&r);
    }
    pl_json_free(rj);
    fidelity_ref_free(&ref);
}

static void test_generate_streams_text_and_is_deterministic_per_seed(void **state) {
    (void)state;
    struct fidelity_ref ref;
    if (!load_ref("stories260K.ref.json", &ref))
        skip();
    char model[8192];
    model_path(&ref, model, sizeof(model));
    const char *argv[] = {"picolm", "generate", "--model", model, "-n", "64", "--seed", "7", NULL};
    struct pl_test_run a = run_cli(argv, NULL, 0), b = run_cli(argv, NULL, 0);
    assert_int_equal(a.status, 0);
    assert_int_equal(b.status, 0);
    assert_true(a.out_len > 0);
    assert_int_equal(a.out_len, b.out_len);
    assert_memory_equal(a.out, b.out, a.out_len);
    pl_test_run_free(&a);
    pl_test_run_free(&b);
    /* -n 0 generates nothing. */
    const char *argv0[] = {"picolm", "generate", "--model", model, "-n", "0", NULL};
    struct pl_test_run z = run_cli(argv0, NULL, 0);
    assert_int_equal(z.status, 0);
    assert_int_equal(z.out_len, 0);
    pl_test_run_free(&z);
    fidelity_ref_free(&ref);
}

/* ---- tokenize ---- */

static void test_tokenize_prints_reference_ids(void **state) {
    (void)state;
    const char *names[] = {"stories260K.ref.json", "tiny-llama-spm-Q4_K_M.ref.json",
                           "tiny-llama-gpt2-Q4_0.ref.json"};
    int n_checked = 0;
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
        struct fidelity_ref ref;
        if (!load_ref(names[k], &ref))
            continue;
        char model[8192];
        model_path(&ref, model, sizeof(model));
        for (size_t p = 0; p < ref.n_prompts; p++) {
            const struct fidelity_prompt *rp = &ref.prompts[p];
            char *want = ids_csv(rp->token_ids, rp->n_tokens, " ");
            /* stdin, byte for byte (no trailing newline added). */
            const char *argv[] = {"picolm", "tokenize", "--model", model, NULL};
            struct pl_test_run r = run_cli(argv, rp->text, strlen(rp->text));
            if (r.status != 0)
                fail_msg("%s prompt %zu: exit %d: %s", names[k], p, r.status, r.err);
            if (r.out_len != strlen(want) + 1 || memcmp(r.out, want, strlen(want)) != 0 ||
                r.out[r.out_len - 1] != '\n')
                fail_msg("%s prompt %zu: got '%s', want '%s'", names[k], p, r.out, want);
            pl_test_run_free(&r);
            /* -p gives the same. */
            const char *argvp[] = {"picolm", "tokenize", "--model", model, "-p", rp->text, NULL};
            r = run_cli(argvp, NULL, 0);
            assert_int_equal(r.status, 0);
            assert_int_equal(r.out_len, strlen(want) + 1);
            assert_memory_equal(r.out, want, strlen(want));
            pl_test_run_free(&r);
            free(want);
            n_checked++;
        }
        fidelity_ref_free(&ref);
    }
    if (n_checked == 0)
        skip();
}

/* ---- eval ---- */

static void test_eval_writes_n_rows_of_logits(void **state) {
    (void)state;
    struct fidelity_ref ref;
    if (!load_ref("stories260K.ref.json", &ref))
        skip();
    char model[8192], out[] = "/tmp/picolm-cli-eval-XXXXXX";
    model_path(&ref, model, sizeof(model));
    int fd = mkstemp(out);
    assert_true(fd >= 0);
    close(fd);
    const struct fidelity_prompt *rp = &ref.prompts[0];
    char *csv = ids_csv(rp->token_ids, rp->n_tokens, ",");
    const char *argv[] = {"picolm",       "eval", "--model",   model, "--tokens", csv,
                          "--logits-out", out,    "--kv-type", "f32", NULL};
    struct pl_test_run r = run_cli(argv, NULL, 0);
    if (r.status != 0)
        fail_msg("exit %d: %s", r.status, r.err);
    assert_int_equal(r.out_len, 0);
    pl_test_run_free(&r);
    fd = open(out, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    size_t len = 0;
    float *rows = (float *)(void *)pl_test_read_fd(fd, &len);
    assert_non_null(rows);
    close(fd);
    (void)unlink(out);
    assert_int_equal(len, rp->n_tokens * ref.n_vocab * sizeof(float));
    for (int s = 0; s < 3; s++) {
        const float *got = rows + (size_t)rp->logit_positions[s] * ref.n_vocab;
        const float *want = ref.logits + (size_t)s * ref.n_vocab;
        double scale = 0.0, maxd = 0.0;
        for (uint32_t i = 0; i < ref.n_vocab; i++) {
            scale = fmax(scale, fabs(want[i]));
            maxd = fmax(maxd, fabs((double)got[i] - want[i]));
        }
        if (!(maxd <= TOL_FLOAT * scale))
            fail_msg("position %u: max |diff| %g > %g", rp->logit_positions[s], maxd,
                     TOL_FLOAT * scale);
    }
    free(rows);
    free(csv);
    fidelity_ref_free(&ref);
}

/* ---- usage errors ---- */

static void test_bad_arguments_exit_2_with_one_line(void **state) {
    (void)state;
    char model[8192];
    (void)snprintf(model, sizeof(model), "%s/stories260K.gguf", g_models);
    if (access(model, R_OK) != 0)
        skip();
    char bad_model[] = "/tmp/picolm-cli-bad-XXXXXX";
    int fd = mkstemp(bad_model);
    assert_true(fd >= 0);
    /* A truncated GGUF: the right magic, then nothing sensible. */
    assert_int_equal(write(fd, "GGUF\x03\x00\x00\x00\xff\xff", 10), 10);
    close(fd);
    const char *cases[][12] = {
        {"picolm", "generate", "--model", model, "--top-p", "abc", NULL},
        {"picolm", "generate", "--model", model, "--top-p", "1.5", NULL},
        {"picolm", "generate", "--model", model, "--min-p", "-0.1", NULL},
        {"picolm", "generate", "--model", model, "--temp", "-1", NULL},
        {"picolm", "generate", "--model", model, "--temp", "nan", NULL},
        {"picolm", "generate", "--model", model, "-n", "12x", NULL},
        {"picolm", "generate", "--model", model, "--top-k", "-3", NULL},
        {"picolm", "generate", "--model", model, "--repeat-penalty", "0", NULL},
        {"picolm", "generate", "--model", model, "--seed", "-1", NULL},
        {"picolm", "generate", "--model", model, "--no-such-flag", NULL},
        {"picolm", "generate", "--model", model, "-p", NULL},
        {"picolm", "generate", "--model", model, "--tokens", "1,x", NULL},
        {"picolm", "generate", "--model", model, "--tokens", "1,99999", NULL},
        {"picolm", "generate", "--model", model, "-p", "a", "--tokens", "1", NULL},
        /* Without --model the CLI asks the daemon: giving both is the usage error. */
        {"picolm", "generate", "--socket", "/nonexistent.sock", "--model", model, NULL},
        {"picolm", "generate", "--model", "/nonexistent/model.gguf", NULL},
        {"picolm", "generate", "--model", bad_model, NULL},
        {"picolm", "generate", "--model", "/", NULL},
        {"picolm", "tokenize", "--model", model, "stray", NULL},
        {"picolm", "eval", "--model", model, "--tokens", "1,2", NULL},
        {"picolm", "eval", "--model", model, "--logits-out", "/tmp/x", NULL},
        {"picolm", "info", "--model", bad_model, NULL},
        {"picolm", "info", "--model", model, "--ctx", "0", NULL},
        {"picolm", "info", "--model", model, "--kv-type", "q8", NULL},
        {"picolm", "frobnicate", NULL},
        {"picolm", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct pl_test_run r = run_cli(cases[i], NULL, 0);
        size_t lines = 0;
        for (size_t k = 0; k < r.err_len; k++)
            lines += r.err[k] == '\n';
        if (r.status != 2 || r.out_len != 0 || lines != 1 || strncmp(r.err, "picolm: ", 8) != 0)
            fail_msg("case %zu (%s %s ...): exit %d, stdout %zu bytes, stderr %zu lines: %s", i,
                     cases[i][1], cases[i][2] ? cases[i][2] : "", r.status, r.out_len, lines,
                     r.err);
        pl_test_run_free(&r);
    }
    (void)unlink(bad_model);
}

static void test_help_exits_0(void **state) {
    (void)state;
    const char *cases[][4] = {
        {"picolm", "--help", NULL},         {"picolm", "generate", "--help", NULL},
        {"picolm", "tokenize", "-h", NULL}, {"picolm", "eval", "--help", NULL},
        {"picolm", "info", "--help", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct pl_test_run r = run_cli(cases[i], NULL, 0);
        assert_int_equal(r.status, 0);
        assert_true(r.out_len > 0);
        assert_non_null(strstr(r.out, "usage: picolm"));
        pl_test_run_free(&r);
    }
}

int main(void) {
    const char *data = getenv("PICOLM_TEST_DATA");
    if (!data || !data[0] || access(PICOLM, X_OK) != 0) {
        fprintf(stderr, "PICOLM_TEST_DATA unset or %s not built: skipping\n", PICOLM);
        return 77;
    }
    (void)snprintf(g_models, sizeof(g_models), "%s/models", data);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generate_json_greedy_matches_reference),
        cmocka_unit_test(test_generate_streams_text_and_is_deterministic_per_seed),
        cmocka_unit_test(test_tokenize_prints_reference_ids),
        cmocka_unit_test(test_eval_writes_n_rows_of_logits),
        cmocka_unit_test(test_bad_arguments_exit_2_with_one_line),
        cmocka_unit_test(test_help_exits_0),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
