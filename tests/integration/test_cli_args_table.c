/* SPDX-License-Identifier: MIT */
/* The picolm CLI's argument and model-file validation, table-driven: every bad argument
 * (missing value, non-numeric, out of range, unknown flag or command) and every bad model
 * file (missing, a directory, truncated, not GGUF) must print exactly one line on stderr,
 * nothing on stdout, and exit 2. Also: vocabulary-only GGUF files (no tensors) work with
 * `picolm tokenize` and `picolm info`, and tokenizing every input of the llama.cpp vectors in
 * $PICOLM_TEST_DATA/tokenizer through the CLI (stdin, --no-bos) gives the expected ids.
 * Runs the built binary (PL_BINARY_DIR/bin/picolm); exit 77 without the test data. */
#include <errno.h>
#include <fcntl.h>
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

#include "run.h"

#define PICOLM PL_BINARY_DIR "/bin/picolm"
#define MAX_ARGS 24

static char g_model[4096];  /* stories260K.gguf */
static char g_tokdir[4096]; /* $PICOLM_TEST_DATA/tokenizer */
static char g_tmp[256];     /* scratch directory */
static char g_trunc[512], g_text[512], g_empty[512], g_dir[512];

/* ---- Running the CLI ---- */

/* Run picolm with argv (NULL-terminated, without argv[0]) and in_len bytes of stdin. No
 * daemon socket is reachable from here: PICOLM_SOCKET points into the scratch directory. */
static struct pl_test_run run_cli(const char *const *args, const char *in, size_t in_len) {
    const char *argv[MAX_ARGS + 2] = {"picolm"};
    size_t n = 0;
    while (args[n] && n < MAX_ARGS) {
        argv[n + 1] = args[n];
        n++;
    }
    argv[n + 1] = NULL;
    char sock[600];
    assert_true((size_t)snprintf(sock, sizeof(sock), "PICOLM_SOCKET=%s/no-such.sock", g_tmp) <
                sizeof(sock));
    const char *env[] = {sock, NULL};
    struct pl_test_run r;
    assert_int_equal(pl_test_run(PICOLM, argv, in, in_len, env, &r), 0);
    return r;
}

static size_t count_lines(const char *s, size_t len) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += s[i] == '\n';
    if (len && s[len - 1] != '\n')
        n++;
    return n;
}

/* ---- The table of bad invocations ---- */

/* "@M" stands for the model, "@T" a truncated model, "@X" a text file, "@E" an empty file,
 * "@D" a directory. */
struct bad_case {
    const char *why;
    const char *args[MAX_ARGS];
};

static const struct bad_case k_bad[] = {
    /* commands */
    {"no command", {NULL}},
    {"unknown command", {"bogus", "-m", "@M", NULL}},
    {"unknown command that looks like a flag", {"--bogus", NULL}},
    {"unknown flag", {"generate", "-m", "@M", "--bogus", NULL}},
    {"unknown short flag", {"generate", "-m", "@M", "-Z", NULL}},
    {"flag of another command", {"tokenize", "-m", "@M", "-n", "5", NULL}},
    {"stray argument", {"info", "-m", "@M", "extra", NULL}},
    /* missing values (the flag is last) */
    {"--model without value", {"generate", "--model", NULL}},
    {"-m without value", {"info", "-m", NULL}},
    {"-n without value", {"generate", "-m", "@M", "-n", NULL}},
    {"-p without value", {"generate", "-m", "@M", "-p", NULL}},
    {"--temp without value", {"generate", "-m", "@M", "--temp", NULL}},
    {"--top-k without value", {"generate", "-m", "@M", "--top-k", NULL}},
    {"--top-p without value", {"generate", "-m", "@M", "--top-p", NULL}},
    {"--min-p without value", {"generate", "-m", "@M", "--min-p", NULL}},
    {"--seed without value", {"generate", "-m", "@M", "--seed", NULL}},
    {"--threads without value", {"generate", "-m", "@M", "--threads", NULL}},
    {"--ctx without value", {"generate", "-m", "@M", "--ctx", NULL}},
    {"--kv-type without value", {"generate", "-m", "@M", "--kv-type", NULL}},
    {"--tokens without value", {"eval", "-m", "@M", "--tokens", NULL}},
    {"--logits-out without value", {"eval", "-m", "@M", "--tokens", "1", "-o", NULL}},
    {"--repeat-penalty without value", {"generate", "-m", "@M", "--repeat-penalty", NULL}},
    {"--socket without value", {"generate", "--socket", NULL}},
    /* non-numeric */
    {"-n abc", {"generate", "-m", "@M", "-n", "abc", NULL}},
    {"-n 1e3", {"generate", "-m", "@M", "-n", "1e3", NULL}},
    {"-n empty", {"generate", "-m", "@M", "-n", "", NULL}},
    {"-n 5x", {"generate", "-m", "@M", "-n", "5x", NULL}},
    {"--temp x", {"generate", "-m", "@M", "--temp", "x", NULL}},
    {"--temp nan", {"generate", "-m", "@M", "--temp", "nan", NULL}},
    {"--top-k 1.5", {"generate", "-m", "@M", "--top-k", "1.5", NULL}},
    {"--seed abc", {"generate", "-m", "@M", "--seed", "abc", NULL}},
    {"--threads two", {"generate", "-m", "@M", "--threads", "two", NULL}},
    {"--ctx 12k", {"generate", "-m", "@M", "--ctx", "12k", NULL}},
    {"--frequency-penalty x", {"generate", "-m", "@M", "--frequency-penalty", "x", NULL}},
    {"--tokens 1,x", {"generate", "-m", "@M", "--tokens", "1,x", NULL}},
    {"--tokens empty item", {"eval", "-m", "@M", "--tokens", "1,,2", "-o", "-", NULL}},
    /* out of range */
    {"-n -5", {"generate", "-m", "@M", "-n", "-5", NULL}},
    {"-n huge", {"generate", "-m", "@M", "-n", "99999999999999999999", NULL}},
    {"--top-p 0", {"generate", "-m", "@M", "--top-p", "0", NULL}},
    {"--top-p 1.5", {"generate", "-m", "@M", "--top-p", "1.5", NULL}},
    {"--top-p -0.1", {"generate", "-m", "@M", "--top-p", "-0.1", NULL}},
    {"--temp -1", {"generate", "-m", "@M", "--temp", "-1", NULL}},
    {"--temp inf", {"generate", "-m", "@M", "--temp", "inf", NULL}},
    {"--top-k -3", {"generate", "-m", "@M", "--top-k", "-3", NULL}},
    {"--min-p 2", {"generate", "-m", "@M", "--min-p", "2", NULL}},
    {"--repeat-penalty -1", {"generate", "-m", "@M", "--repeat-penalty", "-1", NULL}},
    {"--repeat-last-n -2", {"generate", "-m", "@M", "--repeat-last-n", "-2", NULL}},
    {"--seed -1", {"generate", "-m", "@M", "--seed", "-1", NULL}},
    {"--seed above 2^64", {"generate", "-m", "@M", "--seed", "18446744073709551616", NULL}},
    {"--threads 100000", {"generate", "-m", "@M", "--threads", "100000", NULL}},
    {"--threads -1", {"generate", "-m", "@M", "--threads", "-1", NULL}},
    {"--ctx 0", {"generate", "-m", "@M", "--ctx", "0", NULL}},
    {"--ctx -1", {"generate", "-m", "@M", "--ctx", "-1", NULL}},
    {"--ctx huge", {"generate", "-m", "@M", "--ctx", "99999999", NULL}},
    {"--kv-type f8", {"generate", "-m", "@M", "--kv-type", "f8", NULL}},
    {"--tokens id out of the vocabulary", {"generate", "-m", "@M", "--tokens", "1,99999", NULL}},
    {"--tokens negative id", {"eval", "-m", "@M", "--tokens", "1,-2", "-o", "-", NULL}},
    {"-p twice", {"generate", "-m", "@M", "-p", "a", "-p", "b", NULL}},
    {"--model and --socket", {"info", "-m", "@M", "--socket", "/x", NULL}},
    {"eval without --logits-out", {"eval", "-m", "@M", "--tokens", "1,2", NULL}},
    {"eval without --tokens", {"eval", "-m", "@M", "-o", "-", NULL}},
    {"eval into a missing directory",
     {"eval", "-m", "@M", "--tokens", "1", "-o", "/nonexistent-dir/x", NULL}},
    /* model files */
    {"missing model file", {"generate", "-m", "/nonexistent/model.gguf", "-p", "x", NULL}},
    {"missing model file (info)", {"info", "-m", "/nonexistent/model.gguf", NULL}},
    {"missing model file (tokenize)", {"tokenize", "-m", "/nonexistent/m.gguf", "-p", "x", NULL}},
    {"directory as model", {"generate", "-m", "@D", "-p", "x", NULL}},
    {"truncated model", {"generate", "-m", "@T", "-p", "x", NULL}},
    {"truncated model (info)", {"info", "-m", "@T", NULL}},
    {"truncated model (tokenize)", {"tokenize", "-m", "@T", "-p", "x", NULL}},
    {"non-GGUF file", {"generate", "-m", "@X", "-p", "x", NULL}},
    {"non-GGUF file (eval)", {"eval", "-m", "@X", "--tokens", "1", "-o", "-", NULL}},
    {"empty file", {"info", "-m", "@E", NULL}},
};

static const char *subst(const char *a) {
    if (!a || a[0] != '@')
        return a;
    switch (a[1]) {
    case 'M':
        return g_model;
    case 'T':
        return g_trunc;
    case 'X':
        return g_text;
    case 'E':
        return g_empty;
    case 'D':
        return g_dir;
    default:
        return a;
    }
}

static void test_cli_bad_arguments_print_one_line_and_exit_2(void **state) {
    (void)state;
    size_t n_bad = 0;
    for (size_t i = 0; i < sizeof(k_bad) / sizeof(k_bad[0]); i++) {
        const char *args[MAX_ARGS + 1] = {NULL};
        for (size_t j = 0; j < MAX_ARGS && k_bad[i].args[j]; j++)
            args[j] = subst(k_bad[i].args[j]);
        struct pl_test_run r = run_cli(args, NULL, 0);
        size_t lines = count_lines(r.err, r.err_len);
        bool ok = r.status == 2 && lines == 1 && r.err_len > 0 && r.err[r.err_len - 1] == '\n' &&
                  r.out_len == 0 && strncmp(r.err, "picolm: ", 8) == 0;
        if (!ok) {
            n_bad++;
            fprintf(stderr, "FAIL %-40s exit %d, %zu stderr lines, %zu stdout bytes: %.300s\n",
                    k_bad[i].why, r.status, lines, r.out_len, r.err);
        }
        pl_test_run_free(&r);
    }
    assert_int_equal(n_bad, 0);
}

/* Values at the edges of each range are accepted (the table above is not rejecting all). */
static void test_cli_edge_values_are_accepted(void **state) {
    (void)state;
    static const char *const ok_args[][MAX_ARGS] = {
        {"generate", "-m", "@M", "-p", "x", "-n", "1", "--top-p", "1", "--temp", "0", NULL},
        {"generate", "-m", "@M", "-p", "x", "-n", "0", NULL},
        {"generate", "-m", "@M", "-p", "x", "-n", "1", "--top-k", "0", "--min-p", "0", NULL},
        {"generate", "-m", "@M", "-p", "x", "-n", "1", "--seed", "18446744073709551615", NULL},
        {"generate", "-m", "@M", "-p", "x", "-n", "1", "--threads", "512", "--ctx", "16", NULL},
        /* documented: --threads 0 means one per CPU */
        {"generate", "-m", "@M", "-p", "x", "-n", "1", "--threads", "0", NULL},
        {"generate", "-m", "@M", "-p", "x", "-n", "1", "--top-p=0.5", "--kv-type", "f32", NULL},
        {"tokenize", "-m", "@M", "-p", "", NULL},
        {"info", "-m", "@M", "--json", NULL},
    };
    for (size_t i = 0; i < sizeof(ok_args) / sizeof(ok_args[0]); i++) {
        const char *args[MAX_ARGS + 1] = {NULL};
        for (size_t j = 0; j < MAX_ARGS && ok_args[i][j]; j++)
            args[j] = subst(ok_args[i][j]);
        struct pl_test_run r = run_cli(args, NULL, 0);
        if (r.status != 0)
            fail_msg("case %zu (%s %s ...): exit %d: %s", i, ok_args[i][0], ok_args[i][3], r.status,
                     r.err);
        pl_test_run_free(&r);
    }
}

/* ---- Vocabulary-only files and the tokenizer vectors ---- */

static char *slurp_path(const char *path, size_t *ret_len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    char *p = pl_test_read_fd(fd, ret_len);
    close(fd);
    return p;
}

static const char *const k_vocabs[] = {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf",
                                       "ggml-vocab-deepseek-llm.gguf"};

static void test_cli_vocab_only_info_and_refusals(void **state) {
    (void)state;
    for (size_t v = 0; v < sizeof(k_vocabs) / sizeof(k_vocabs[0]); v++) {
        char path[4300];
        snprintf(path, sizeof(path), "%s/%s", g_tokdir, k_vocabs[v]);
        if (access(path, R_OK) != 0)
            skip();
        const char *info[] = {"info", "-m", path, NULL};
        struct pl_test_run r = run_cli(info, NULL, 0);
        if (r.status != 0 || !strstr(r.out, "tokens"))
            fail_msg("info on %s: exit %d: %s", k_vocabs[v], r.status, r.err);
        pl_test_run_free(&r);
        const char *info_json[] = {"info", "-m", path, "--json", NULL};
        r = run_cli(info_json, NULL, 0);
        if (r.status != 0 || r.out_len == 0 || r.out[0] != '{')
            fail_msg("info --json on %s: exit %d: %s", k_vocabs[v], r.status, r.err);
        pl_test_run_free(&r);
        /* No weights: generate and eval refuse in one line with exit 2. */
        const char *gen[] = {"generate", "-m", path, "-p", "Hello", NULL};
        const char *ev[] = {"eval", "-m", path, "--tokens", "1", "-o", "-", NULL};
        const char *const *bad[] = {gen, ev};
        for (int i = 0; i < 2; i++) {
            r = run_cli(bad[i], NULL, 0);
            if (r.status != 2 || count_lines(r.err, r.err_len) != 1 || r.out_len != 0)
                fail_msg("%s on vocabulary-only %s: exit %d, stderr: %s", bad[i][0], k_vocabs[v],
                         r.status, r.err);
            pl_test_run_free(&r);
        }
    }
}

/* Parse space-separated decimal ids of one line [p, end) into ids; returns the count. */
static size_t parse_ids(const char *p, const char *end, long *ids, size_t cap) {
    size_t n = 0;
    while (p < end) {
        while (p < end && (*p == ' ' || *p == '\n'))
            p++;
        if (p >= end)
            break;
        char *e;
        long v = strtol(p, &e, 10);
        if (e == p || n == cap)
            return (size_t)-1;
        ids[n++] = v;
        p = e;
    }
    return n;
}

static void test_cli_tokenize_vectors_through_vocab_only_files(void **state) {
    (void)state;
    static const char sep[] = "\n__ggml_vocab_test__\n";
    size_t n_checked = 0, n_failed = 0;
    for (size_t v = 0; v < sizeof(k_vocabs) / sizeof(k_vocabs[0]); v++) {
        char path[4300], inp_path[4400], out_path[4400];
        snprintf(path, sizeof(path), "%s/%s", g_tokdir, k_vocabs[v]);
        snprintf(inp_path, sizeof(inp_path), "%s.inp", path);
        snprintf(out_path, sizeof(out_path), "%s.out", path);
        size_t inp_len, out_len;
        char *inp = slurp_path(inp_path, &inp_len), *out = slurp_path(out_path, &out_len);
        if (!inp || !out || access(path, R_OK) != 0) {
            free(inp);
            free(out);
            skip();
        }
        const char *ip = inp, *op = out;
        const char *const iend = inp + inp_len, *const oend = out + out_len;
        while (ip < iend) {
            const char *s = memmem(ip, (size_t)(iend - ip), sep, sizeof(sep) - 1);
            assert_non_null(s);
            const char *oe = memchr(op, '\n', (size_t)(oend - op));
            assert_non_null(oe);
            long want[512], got[512];
            size_t n_want = parse_ids(op, oe, want, 512);
            assert_true(n_want != (size_t)-1);

            const char *args[] = {"tokenize", "-m", path, "--no-bos", NULL};
            struct pl_test_run r = run_cli(args, ip, (size_t)(s - ip));
            size_t n_got = r.status == 0 ? parse_ids(r.out, r.out + r.out_len, got, 512) : 0;
            bool ok = r.status == 0 && n_got == n_want &&
                      memcmp(got, want, n_want * sizeof(long)) == 0 &&
                      count_lines(r.out, r.out_len) <= 1;
            if (!ok) {
                n_failed++;
                fprintf(stderr,
                        "FAIL %s input %zu (%.40s): exit %d, got '%.200s', want '%.*s' %s\n",
                        k_vocabs[v], n_checked, ip, r.status, r.out, (int)(oe - op), op, r.err);
            }
            n_checked++;
            pl_test_run_free(&r);
            ip = s + sizeof(sep) - 1;
            op = oe + 1;
        }
        assert_true(op == oend); /* as many outputs as inputs */
        free(inp);
        free(out);
    }
    printf("tokenizer vectors: %zu checked, %zu failed\n", n_checked, n_failed);
    assert_int_equal(n_failed, 0);
}

/* ---- Setup ---- */

static void write_file(const char *path, const void *data, size_t len) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    if (len)
        assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
}

static int setup(void **state) {
    (void)state;
    size_t len;
    char *model = slurp_path(g_model, &len);
    if (!model || len < 8192)
        return -1;
    snprintf(g_trunc, sizeof(g_trunc), "%s/trunc.gguf", g_tmp);
    write_file(g_trunc, model, len / 2);
    free(model);
    snprintf(g_text, sizeof(g_text), "%s/text.gguf", g_tmp);
    write_file(g_text, "not a model\n", 12);
    snprintf(g_empty, sizeof(g_empty), "%s/empty.gguf", g_tmp);
    write_file(g_empty, "", 0);
    snprintf(g_dir, sizeof(g_dir), "%s/dir.gguf", g_tmp);
    return mkdir(g_dir, 0700);
}

static int teardown(void **state) {
    (void)state;
    (void)unlink(g_trunc);
    (void)unlink(g_text);
    (void)unlink(g_empty);
    (void)rmdir(g_dir);
    (void)rmdir(g_tmp);
    return 0;
}

int main(void) {
    const char *data = getenv("PICOLM_TEST_DATA");
    if (!data || !*data) {
        fprintf(stderr, "PICOLM_TEST_DATA not set: skipping\n");
        return 77;
    }
    snprintf(g_model, sizeof(g_model), "%s/models/stories260K.gguf", data);
    snprintf(g_tokdir, sizeof(g_tokdir), "%s/tokenizer", data);
    if (access(g_model, R_OK) != 0 || access(PICOLM, X_OK) != 0) {
        fprintf(stderr, "%s or %s missing: skipping\n", g_model, PICOLM);
        return 77;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(g_tmp, sizeof(g_tmp), "%s/pl-cli-args-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cli_bad_arguments_print_one_line_and_exit_2),
        cmocka_unit_test(test_cli_edge_values_are_accepted),
        cmocka_unit_test(test_cli_vocab_only_info_and_refusals),
        cmocka_unit_test(test_cli_tokenize_vectors_through_vocab_only_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
