/* SPDX-License-Identifier: MIT */
/* Issue F1, client side: the per-request features through the picolm CLI, in-process
 * (--model) and through a real picolmd (--socket), and through libpicolm against the same
 * picolmd. The model is a copy of tiny-llama-spm-Q4_K_M with a ChatML tokenizer.chat_template.
 * Checks: --format json / --json-schema output parses (and matches the schema) in both modes
 * with identical greedy tokens; --stop ends the output right before the stop string;
 * --messages renders as pl_chat_render + tokenize do; --json --logprobs N gives N sorted
 * alternatives per token, equal in both modes; argument errors exit 2 with one stderr line;
 * chat over a scripted stdin answers with the template and falls back (said once) on a model
 * without one; libpicolm's messages/format/stop/logprobs fields and chunk accessors.
 * Needs $PICOLM_TEST_DATA/models/{tiny-llama-spm-Q4_K_M,stories260K}.gguf (exit 77). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
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

#include "gguf_writer.h"
#include "json.h"
#include "picolm.h"
#include "pl/engine_chat.h"
#include "pl/engine_gguf.h"
#include "pl/engine_model.h"
#include "pl/engine_tokenizer.h"
#include "run.h"

#define PICOLM PL_BINARY_DIR "/bin/picolm"
#define PICOLMD PL_BINARY_DIR "/bin/picolmd"

static char g_src_model[4096], g_plain_model[4096];
static char g_model[4096]; /* the ChatML copy */
static char g_tmp[64], g_sock[128];
static pid_t g_daemon;

/* ---- Running the CLI ---- */

static struct pl_test_run run_cli(const char *const *argv, const char *in) {
    const char *env[] = {"PICOLM_SOCKET", NULL};
    struct pl_test_run r;
    assert_int_equal(pl_test_run(PICOLM, argv, in, in ? strlen(in) : 0, env, &r), 0);
    return r;
}

static void assert_ok(const struct pl_test_run *r, const char *what) {
    if (r->status != 0)
        fail_msg("%s: exit %d, stderr: %s", what, r->status, r->err);
}

static void assert_usage_error(const struct pl_test_run *r, const char *what) {
    if (r->status != 2)
        fail_msg("%s: exit %d, want 2 (stderr: %s)", what, r->status, r->err);
    assert_int_equal(r->out_len, 0);
    assert_true(r->err_len > 8);
    assert_memory_equal(r->err, "picolm: ", 8);
    if (strchr(r->err, '\n') != r->err + r->err_len - 1)
        fail_msg("%s: not one line: %s", what, r->err);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

/* argv builder: mode 0 in-process on model, 1 through the daemon. */
struct args {
    const char *v[64];
    int n;
};

static void args_init(struct args *a, const char *cmd, int mode, const char *model) {
    a->n = 0;
    a->v[a->n++] = "picolm";
    a->v[a->n++] = cmd;
    a->v[a->n++] = mode ? "--socket" : "--model";
    a->v[a->n++] = mode ? g_sock : model;
}

static void args_add(struct args *a, const char *x) {
    assert_true(a->n < 62);
    a->v[a->n++] = x;
    a->v[a->n] = NULL;
}

static struct pl_json *parse_out(const struct pl_test_run *r) {
    struct pl_json *j = NULL;
    char err[256];
    if (pl_json_parse(r->out, r->out_len, &j, err, sizeof(err)) != 0)
        fail_msg("output is not JSON (%s): %s", err, r->out);
    return j;
}

/* ---- The ChatML copy of the model (as tests/integration/test_features.c makes it) ---- */

static const char chatml_src[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

static int make_chat_model(const char *src, const char *dst) {
    struct pl_gguf *g = NULL;
    struct bench_gguf_writer *w = NULL;
    int r = pl_gguf_open(src, &g, NULL, 0);
    if (r < 0)
        return r;
    r = bench_gguf_writer_new((uint32_t)pl_gguf_alignment(g), &w);
    for (uint64_t i = 0; r == 0 && i < pl_gguf_n_kv(g); i++) {
        const struct pl_gguf_kv *kv = pl_gguf_kv_at(g, i);
        if (pl_gguf_str_eq(kv->key, "general.alignment") ||
            pl_gguf_str_eq(kv->key, "tokenizer.chat_template"))
            continue;
        r = bench_gguf_writer_copy_kv(w, kv);
    }
    if (r == 0)
        r = bench_gguf_writer_add_str(w, "tokenizer.chat_template", chatml_src);
    for (uint64_t i = 0; r == 0 && i < pl_gguf_n_tensors(g); i++) {
        const struct pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
        r = bench_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne);
    }
    if (r == 0)
        r = bench_gguf_writer_open(w, dst);
    for (uint64_t i = 0; r == 0 && i < pl_gguf_n_tensors(g); i++) {
        const struct pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
        r = bench_gguf_writer_write(w, t->data, t->n_bytes);
    }
    if (r == 0)
        r = bench_gguf_writer_close(w);
    bench_gguf_writer_free(w);
    pl_gguf_close(g);
    return r;
}

/* ---- The daemon, once for the whole file ---- */

static int daemon_up(void **state) {
    (void)state;
    (void)snprintf(g_sock, sizeof(g_sock), "%s/picolm.sock", g_tmp);
    fflush(NULL);
    g_daemon = fork();
    if (g_daemon < 0)
        return -1;
    if (g_daemon == 0) {
        char *argv[] = {PICOLMD, "--model", g_model,       "--socket-dir", g_tmp, "--foreground",
                        "--ctx", "2048",    "--log-level", "warn",         NULL};
        execv(PICOLMD, argv);
        _exit(127);
    }
    for (int i = 0; i < 6000; i++) {
        if (access(g_sock, F_OK) == 0)
            return 0;
        int ws;
        if (waitpid(g_daemon, &ws, WNOHANG) == g_daemon) {
            g_daemon = 0;
            return -1;
        }
        usleep(10000);
    }
    return -1;
}

static int daemon_down(void **state) {
    (void)state;
    if (g_daemon > 0) {
        (void)kill(g_daemon, SIGTERM);
        int ws;
        (void)waitpid(g_daemon, &ws, 0);
        g_daemon = 0;
    }
    return 0;
}

/* ---- --format json / --json-schema ---- */

static void test_json_output_parses_in_both_modes(void **state) {
    (void)state;
    char schema_path[128];
    (void)snprintf(schema_path, sizeof(schema_path), "%s/schema.json", g_tmp);
    write_file(schema_path, "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\","
                            "\"maxLength\":12},\"age\":{\"type\":\"integer\"}},"
                            "\"required\":[\"name\",\"age\"]}");
    for (int schema = 0; schema < 2; schema++) {
        char *texts[2] = {NULL, NULL};
        for (int mode = 0; mode < 2; mode++) {
            struct args a;
            args_init(&a, "generate", mode, g_model);
            const char *rest[] = {"-p", "The user record:", "-n", "64", "--temp", "0", "--json"};
            for (size_t i = 0; i < sizeof(rest) / sizeof(rest[0]); i++)
                args_add(&a, rest[i]);
            if (schema) {
                args_add(&a, "--json-schema");
                args_add(&a, schema_path);
            } else {
                args_add(&a, "--format");
                args_add(&a, "json");
            }
            struct pl_test_run r = run_cli(a.v, NULL);
            assert_ok(&r, "generate --format/--json-schema");
            struct pl_json *j = parse_out(&r);
            const struct pl_json *t = pl_json_get(j, "text");
            assert_non_null(t);
            assert_int_equal(t->type, PL_JSON_STRING);
            struct pl_json *v = NULL;
            char err[256];
            if (pl_json_parse(t->str, t->str_len, &v, err, sizeof(err)) != 0)
                fail_msg("mode %d schema %d: text is not JSON (%s): %s", mode, schema, err, t->str);
            assert_int_equal(v->type, PL_JSON_OBJECT);
            if (schema) {
                const struct pl_json *name = pl_json_get(v, "name");
                const struct pl_json *age = pl_json_get(v, "age");
                assert_non_null(name);
                assert_non_null(age);
                assert_int_equal(name->type, PL_JSON_STRING);
                assert_int_equal(age->type, PL_JSON_NUMBER);
                assert_true(age->number == floor(age->number));
            }
            pl_json_free(v);
            texts[mode] = strdup(r.out);
            pl_json_free(j);
            pl_test_run_free(&r);
        }
        /* Same engine calls in-process as in picolmd: the same greedy tokens. */
        assert_string_equal(texts[0], texts[1]);
        free(texts[0]);
        free(texts[1]);
    }
}

/* ---- --stop ---- */

static void test_stop_ends_before_the_string(void **state) {
    (void)state;
    const char *base[] = {"picolm", "generate", "--model", g_model, "-p", "Once upon a time",
                          "-n",     "40",       "--temp",  "0",     NULL};
    struct pl_test_run full = run_cli(base, NULL);
    assert_ok(&full, "generate");
    assert_true(full.out_len > 30);
    /* A stop string from the middle of the greedy output (likely across token pieces). */
    char stop[8];
    memcpy(stop, full.out + 15, 5);
    stop[5] = '\0';
    size_t at = (size_t)(strstr(full.out, stop) - full.out);
    char stop2[] = "\x01zz";
    for (int mode = 0; mode < 2; mode++) {
        struct args a;
        args_init(&a, "generate", mode, g_model);
        const char *rest[] = {"-p", "Once upon a time", "-n",  "40",     "--temp",
                              "0",  "--stop",           stop2, "--stop", stop};
        for (size_t i = 0; i < sizeof(rest) / sizeof(rest[0]); i++)
            args_add(&a, rest[i]);
        struct pl_test_run r = run_cli(a.v, NULL);
        assert_ok(&r, "generate --stop");
        if (r.out_len != at || memcmp(r.out, full.out, at) != 0)
            fail_msg("mode %d: stop '%s': got '%s', want the first %zu bytes of '%s'", mode, stop,
                     r.out, at, full.out);
        pl_test_run_free(&r);
        /* In --json, the text also ends there. */
        args_add(&a, "--json");
        r = run_cli(a.v, NULL);
        assert_ok(&r, "generate --stop --json");
        struct pl_json *j = parse_out(&r);
        const struct pl_json *t = pl_json_get(j, "text");
        assert_int_equal(t->str_len, at);
        assert_memory_equal(t->str, full.out, at);
        pl_json_free(j);
        pl_test_run_free(&r);
    }
    pl_test_run_free(&full);
}

/* ---- --messages ---- */

static void test_messages_render_as_the_engine_does(void **state) {
    (void)state;
    char path[128];
    (void)snprintf(path, sizeof(path), "%s/msgs.json", g_tmp);
    write_file(path, "[{\"role\":\"system\",\"content\":\"You are terse.\"},\n"
                     " {\"role\":\"user\",\"content\":\"Say \\\"hi\\\" \\u00e9\"}]");
    /* The expected prompt: ChatML render + tokenize with special tokens, BOS added. */
    struct pl_model *m = NULL;
    assert_int_equal(pl_model_load(g_model, NULL, &m, NULL, 0), 0);
    const struct pl_tokenizer *tok = pl_model_tokenizer(m);
    struct pl_chat_msg cms[2] = {{"system", 6, "You are terse.", 14},
                                 {"user", 4, "Say \"hi\" \xc3\xa9", 11}};
    char bos[64] = "", eos[64] = "";
    size_t bl = 0, el = 0;
    const char *bt = pl_tokenizer_token_text(tok, pl_tokenizer_bos(tok), &bl);
    const char *et = pl_tokenizer_token_text(tok, pl_tokenizer_eos(tok), &el);
    memcpy(bos, bt, bl);
    memcpy(eos, et, el);
    char text[1024];
    size_t len = 0;
    assert_int_equal(
        pl_chat_render(PL_CHAT_CHATML, cms, 2, true, bos, eos, text, sizeof(text), &len), 0);
    int32_t want[512];
    size_t n_want = 0;
    assert_int_equal(pl_tokenizer_encode(tok, text, len,
                                         !pl_chat_template_writes_bos(PL_CHAT_CHATML), true, want,
                                         512, &n_want),
                     0);
    pl_model_free(m);

    const char *argv[] = {"picolm", "generate", "--model", g_model,  "--messages",
                          path,     "-n",       "0",       "--json", NULL};
    struct pl_test_run r = run_cli(argv, NULL);
    assert_ok(&r, "generate --messages -n 0");
    struct pl_json *j = parse_out(&r);
    const struct pl_json *p = pl_json_get(j, "prompt_tokens");
    assert_non_null(p);
    assert_int_equal(p->type, PL_JSON_ARRAY);
    assert_int_equal(p->n, n_want);
    for (size_t i = 0; i < n_want; i++)
        assert_int_equal((int32_t)pl_json_at(p, i)->number, want[i]);
    pl_json_free(j);
    pl_test_run_free(&r);

    /* Greedy answers: in-process equals the daemon (which renders it itself), and an
     * explicit --template chatml changes nothing on this model. */
    char *outs[3];
    for (int k = 0; k < 3; k++) {
        struct args a;
        args_init(&a, "generate", k == 1, g_model);
        const char *rest[] = {"--messages", path, "-n", "12", "--temp", "0", "--json"};
        for (size_t i = 0; i < sizeof(rest) / sizeof(rest[0]); i++)
            args_add(&a, rest[i]);
        if (k == 2) {
            args_add(&a, "--template");
            args_add(&a, "chatml");
        }
        r = run_cli(a.v, NULL);
        assert_ok(&r, "generate --messages");
        j = parse_out(&r);
        outs[k] = strdup(pl_json_get(j, "text")->str);
        if (k == 1)
            assert_int_equal(pl_json_get(j, "prompt_tokens")->type, PL_JSON_NULL);
        pl_json_free(j);
        pl_test_run_free(&r);
    }
    assert_string_equal(outs[0], outs[1]);
    assert_string_equal(outs[0], outs[2]);
    for (int k = 0; k < 3; k++)
        free(outs[k]);
}

/* ---- --logprobs ---- */

static void test_logprobs_in_json_output(void **state) {
    (void)state;
    struct pl_json *js[2];
    for (int mode = 0; mode < 2; mode++) {
        struct args a;
        args_init(&a, "generate", mode, g_model);
        const char *rest[] = {"-p", "Hello",  "-n",         "10", "--temp",
                              "0",  "--json", "--logprobs", "3"};
        for (size_t i = 0; i < sizeof(rest) / sizeof(rest[0]); i++)
            args_add(&a, rest[i]);
        struct pl_test_run r = run_cli(a.v, NULL);
        assert_ok(&r, "generate --logprobs");
        js[mode] = parse_out(&r);
        const struct pl_json *toks = pl_json_get(js[mode], "tokens");
        const struct pl_json *lps = pl_json_get(js[mode], "logprobs");
        assert_non_null(lps);
        assert_int_equal(lps->n, toks->n);
        assert_true(toks->n > 0);
        for (size_t i = 0; i < lps->n; i++) {
            const struct pl_json *e = pl_json_at(lps, i);
            assert_int_equal((int32_t)pl_json_get(e, "id")->number,
                             (int32_t)pl_json_at(toks, i)->number);
            double lp = pl_json_get(e, "logprob")->number;
            assert_true(lp <= 0.0);
            const struct pl_json *top = pl_json_get(e, "top");
            assert_int_equal(top->n, 3);
            /* Greedy: the chosen token is the most likely one. */
            assert_int_equal((int32_t)pl_json_get(pl_json_at(top, 0), "id")->number,
                             (int32_t)pl_json_get(e, "id")->number);
            assert_true(fabs(pl_json_get(pl_json_at(top, 0), "logprob")->number - lp) < 1e-6);
            for (size_t k = 1; k < top->n; k++)
                assert_true(pl_json_get(pl_json_at(top, k), "logprob")->number <=
                            pl_json_get(pl_json_at(top, k - 1), "logprob")->number);
        }
        pl_test_run_free(&r);
    }
    /* Both modes: the same tokens and alternatives, the same values (to float precision). */
    const struct pl_json *a = pl_json_get(js[0], "logprobs"), *b = pl_json_get(js[1], "logprobs");
    assert_int_equal(a->n, b->n);
    for (size_t i = 0; i < a->n; i++) {
        const struct pl_json *ta = pl_json_get(pl_json_at(a, i), "top");
        const struct pl_json *tb = pl_json_get(pl_json_at(b, i), "top");
        for (size_t k = 0; k < 3; k++) {
            assert_int_equal((int32_t)pl_json_get(pl_json_at(ta, k), "id")->number,
                             (int32_t)pl_json_get(pl_json_at(tb, k), "id")->number);
            assert_true(fabs(pl_json_get(pl_json_at(ta, k), "logprob")->number -
                             pl_json_get(pl_json_at(tb, k), "logprob")->number) < 1e-5);
        }
    }
    pl_json_free(js[0]);
    pl_json_free(js[1]);

    /* Without --json: a note on stderr, plain text on stdout. */
    const char *argv[] = {"picolm", "generate", "--model", g_model,      "-p", "Hello", "-n",
                          "4",      "--temp",   "0",       "--logprobs", "2",  NULL};
    struct pl_test_run r = run_cli(argv, NULL);
    assert_ok(&r, "generate --logprobs without --json");
    assert_non_null(strstr(r.err, "--logprobs is printed with --json only"));
    assert_null(strchr(r.out, '{'));
    pl_test_run_free(&r);
}

/* ---- Argument errors ---- */

static void test_argument_errors_exit_2_with_one_line(void **state) {
    (void)state;
    char good[128], bad_json[128], bad_role[128], schema_bad[128], big[128];
    (void)snprintf(good, sizeof(good), "%s/good.json", g_tmp);
    (void)snprintf(bad_json, sizeof(bad_json), "%s/bad.json", g_tmp);
    (void)snprintf(bad_role, sizeof(bad_role), "%s/role.json", g_tmp);
    (void)snprintf(schema_bad, sizeof(schema_bad), "%s/schema-bad.json", g_tmp);
    (void)snprintf(big, sizeof(big), "%s/long-stop", g_tmp);
    write_file(good, "[{\"role\":\"user\",\"content\":\"hi\"}]");
    write_file(bad_json, "[{\"role\":\"user\",\"content\":\"hi\"}");
    write_file(bad_role, "[{\"role\":\"tool\",\"content\":\"hi\"}]");
    write_file(schema_bad, "{\"type\":\"object\",\"patternProperties\":{}}");
    char long_stop[300];
    memset(long_stop, 'x', 257);
    long_stop[257] = '\0';

    for (int mode = 0; mode < 2; mode++) {
        const char *cases[][8] = {
            {"--format", "xml", NULL},
            {"--stop", "", NULL},
            {"--stop", long_stop, NULL},
            {"--logprobs", "21", NULL},
            {"--logprobs", "-1", NULL},
            {"--messages", "/nonexistent/m.json", NULL},
            {"--messages", bad_json, NULL},
            {"--messages", good, "-p", "x", NULL},
            {"--template", "chatml", "-p", "x", NULL},
            {"--messages", good, "--template", "nosuch", NULL},
            {"--messages", bad_role, "--template", "phi3", NULL},
            {"--json-schema", schema_bad, "-p", "x", NULL},
            {"--json-schema", "/nonexistent/s.json", NULL},
            {"--stop", "1", "--stop", "2", "--stop", "3", "--stop", NULL},
        };
        for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
            struct args a;
            args_init(&a, "generate", mode, g_model);
            args_add(&a, "-n");
            args_add(&a, "4");
            for (int k = 0; cases[c][k]; k++)
                args_add(&a, cases[c][k]);
            if (c == sizeof(cases) / sizeof(cases[0]) - 1) {
                /* 17 stop strings */
                static const char *const nums[] = {"4",  "5",  "6",  "7",  "8",  "9",  "10",
                                                   "11", "12", "13", "14", "15", "16", "17"};
                args_add(&a, "4");
                for (size_t k = 1; k < sizeof(nums) / sizeof(nums[0]); k++) {
                    args_add(&a, "--stop");
                    args_add(&a, nums[k]);
                }
            }
            struct pl_test_run r = run_cli(a.v, NULL);
            char what[96];
            (void)snprintf(what, sizeof(what), "mode %d case %zu (%s)", mode, c, cases[c][0]);
            assert_usage_error(&r, what);
            pl_test_run_free(&r);
        }
    }
    /* Messages for a model without a chat template, in-process: exit 2, one line. */
    const char *argv[] = {"picolm", "generate", "--model", g_plain_model, "--messages",
                          good,     "-n",       "2",       NULL};
    struct pl_test_run r = run_cli(argv, NULL);
    assert_usage_error(&r, "--messages on a model without a template");
    assert_non_null(strstr(r.err, "--template"));
    pl_test_run_free(&r);
}

/* ---- chat ---- */

static void test_chat_uses_the_template_and_keeps_history(void **state) {
    (void)state;
    char path[128];
    (void)snprintf(path, sizeof(path), "%s/first.json", g_tmp);
    write_file(path, "[{\"role\":\"user\",\"content\":\"Tell me a story.\"}]");
    for (int mode = 0; mode < 2; mode++) {
        struct args a;
        args_init(&a, "chat", mode, g_model);
        const char *rest[] = {"-n", "12", "--temp", "0"};
        for (size_t i = 0; i < sizeof(rest) / sizeof(rest[0]); i++)
            args_add(&a, rest[i]);
        struct pl_test_run c = run_cli(a.v, "Tell me a story.\nAnd then?\n");
        assert_ok(&c, "chat");
        assert_null(strstr(c.err, "plain concatenation"));
        /* The first answer is generate --messages [that line], then a newline. */
        args_init(&a, "generate", mode, g_model);
        const char *rest2[] = {"--messages", path, "-n", "12", "--temp", "0"};
        for (size_t i = 0; i < sizeof(rest2) / sizeof(rest2[0]); i++)
            args_add(&a, rest2[i]);
        struct pl_test_run g = run_cli(a.v, NULL);
        assert_ok(&g, "generate --messages");
        if (c.out_len <= g.out_len || memcmp(c.out, g.out, g.out_len) != 0 ||
            c.out[g.out_len] != '\n')
            fail_msg("mode %d: chat '%s' does not start with generate's '%s'", mode, c.out, g.out);
        /* A second answer follows. */
        assert_true(c.out_len > g.out_len + 1);
        assert_int_equal(c.out[c.out_len - 1], '\n');
        assert_null(strstr(c.out, "<|im_end|>"));
        pl_test_run_free(&c);
        pl_test_run_free(&g);
    }
    /* A model without a template: plain concatenation, said once. */
    const char *argv[] = {"picolm", "chat",   "--model", g_plain_model, "-n",
                          "4",      "--temp", "0",       NULL};
    struct pl_test_run c = run_cli(argv, "one\ntwo\nthree\n");
    assert_ok(&c, "chat without a template");
    const char *p = strstr(c.err, "plain concatenation");
    assert_non_null(p);
    assert_null(strstr(p + 1, "plain concatenation"));
    pl_test_run_free(&c);
}

/* ---- libpicolm through picolmd ---- */

struct lp_seen {
    char text[4096];
    size_t len, n_ids, n_with_lp, bad;
};

static int on_chunk(void *user, const struct picolm_chunk *ch) {
    struct lp_seen *s = user;
    if (ch->text_len < sizeof(s->text) - s->len) {
        memcpy(s->text + s->len, ch->text, ch->text_len);
        s->len += ch->text_len;
        s->text[s->len] = '\0';
    }
    for (size_t i = 0; i < ch->n_ids; i++) {
        float lp, t0, t1;
        int32_t id0, id1;
        s->n_ids++;
        if (picolm_chunk_logprob(ch, i, &lp) != PICOLM_OK)
            continue;
        s->n_with_lp++;
        if (picolm_chunk_n_top(ch) != 2 || picolm_chunk_top(ch, i, 0, &id0, &t0) != PICOLM_OK ||
            picolm_chunk_top(ch, i, 1, &id1, &t1) != PICOLM_OK || !(lp <= 0.0f) || !(t0 >= t1) ||
            id0 == id1 || !(t0 >= lp))
            s->bad++;
    }
    return 0;
}

static void test_libpicolm_features_through_picolmd(void **state) {
    (void)state;
    picolm_client *c = NULL;
    char err[256];
    int r = picolm_connect_ex(g_sock, &c, err, sizeof(err));
    if (r != PICOLM_OK)
        fail_msg("connect: %s", err);
    struct picolm_message msgs[2] = {{"system", "Reply in JSON."}, {"user", "Who are you?"}};
    struct picolm_generate_params p;
    picolm_generate_params_init(&p);
    p.messages = msgs;
    p.n_messages = 2;
    p.format = "json";
    p.logprobs = 2;
    p.max_tokens = 48;
    p.sampling.temperature = 0;
    struct lp_seen s = {0};
    struct picolm_result res = {.size = sizeof(res)};
    assert_int_equal(picolm_generate(c, &p, on_chunk, &s, &res), PICOLM_OK);
    struct pl_json *j = NULL;
    if (pl_json_parse(s.text, s.len, &j, err, sizeof(err)) != 0)
        fail_msg("not JSON (%s): %s", err, s.text);
    assert_int_equal(j->type, PL_JSON_OBJECT);
    pl_json_free(j);
    assert_true(s.n_ids > 0);
    assert_int_equal(s.n_with_lp, s.n_ids);
    assert_int_equal(s.bad, 0);

    /* A stop string through libpicolm: the text ends before it, finish_reason STOP. */
    struct lp_seen full = {0};
    picolm_generate_params_init(&p);
    p.prompt = "Once upon a time";
    p.max_tokens = 32;
    p.sampling.temperature = 0;
    assert_int_equal(picolm_generate(c, &p, on_chunk, &full, NULL), PICOLM_OK);
    assert_true(full.len > 20);
    char stop[6];
    memcpy(stop, full.text + 12, 4);
    stop[4] = '\0';
    size_t at = (size_t)(strstr(full.text, stop) - full.text);
    const char *stops[1] = {stop};
    p.stop = stops;
    p.n_stop = 1;
    struct lp_seen cut = {0};
    assert_int_equal(picolm_generate(c, &p, on_chunk, &cut, &res), PICOLM_OK);
    assert_int_equal(res.finish_reason, PICOLM_FINISH_STOP);
    assert_int_equal(cut.len, at);
    assert_memory_equal(cut.text, full.text, at);
    assert_int_equal(cut.n_with_lp, 0);

    /* Refusals by the broker: an unknown template name, a role the template refuses, a
     * schema outside the subset; the connection stays usable. */
    picolm_generate_params_init(&p);
    p.messages = msgs;
    p.n_messages = 2;
    p.chat_template = "nosuch";
    assert_int_equal(picolm_generate(c, &p, NULL, NULL, NULL), PICOLM_E_INVALID);
    assert_non_null(strstr(picolm_last_error(c), "nosuch"));
    struct picolm_message tool = {"tool", "x"};
    p.messages = &tool;
    p.n_messages = 1;
    p.chat_template = "phi3";
    assert_int_equal(picolm_generate(c, &p, NULL, NULL, NULL), PICOLM_E_INVALID);
    picolm_generate_params_init(&p);
    p.prompt = "x";
    p.json_schema = "{\"type\":\"object\",\"patternProperties\":{}}";
    assert_int_equal(picolm_generate(c, &p, NULL, NULL, NULL), PICOLM_E_INVALID);
    p.json_schema = NULL;
    p.format = "yaml";
    assert_int_equal(picolm_generate(c, &p, NULL, NULL, NULL), PICOLM_E_INVALID);
    p.format = NULL;
    p.logprobs = 21;
    assert_int_equal(picolm_generate(c, &p, NULL, NULL, NULL), PICOLM_E_INVALID);
    p.logprobs = 0;
    p.max_tokens = 2;
    assert_int_equal(picolm_generate(c, &p, NULL, NULL, NULL), PICOLM_OK);
    picolm_close(c);
}

int main(void) {
    const char *data = getenv("PICOLM_TEST_DATA");
    if (!data) {
        fprintf(stderr, "PICOLM_TEST_DATA not set: skipping\n");
        return 77;
    }
    (void)snprintf(g_src_model, sizeof(g_src_model), "%s/models/tiny-llama-spm-Q4_K_M.gguf", data);
    (void)snprintf(g_plain_model, sizeof(g_plain_model), "%s/models/stories260K.gguf", data);
    if (access(g_src_model, R_OK) != 0 || access(g_plain_model, R_OK) != 0) {
        fprintf(stderr, "test models missing: skipping\n");
        return 77;
    }
    if (access(PICOLM, X_OK) != 0 || access(PICOLMD, X_OK) != 0) {
        fprintf(stderr, "picolm/picolmd not built: skipping\n");
        return 77;
    }
    strcpy(g_tmp, "/tmp/picolm-clif.XXXXXX");
    if (!mkdtemp(g_tmp))
        return 1;
    (void)snprintf(g_model, sizeof(g_model), "%s/chatml.gguf", g_tmp);
    if (make_chat_model(g_src_model, g_model) != 0) {
        fprintf(stderr, "cannot write %s\n", g_model);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_output_parses_in_both_modes),
        cmocka_unit_test(test_stop_ends_before_the_string),
        cmocka_unit_test(test_messages_render_as_the_engine_does),
        cmocka_unit_test(test_logprobs_in_json_output),
        cmocka_unit_test(test_argument_errors_exit_2_with_one_line),
        cmocka_unit_test(test_chat_uses_the_template_and_keeps_history),
        cmocka_unit_test(test_libpicolm_features_through_picolmd),
    };
    int r = cmocka_run_group_tests(tests, daemon_up, daemon_down);
    char cmd[128];
    (void)snprintf(cmd, sizeof(cmd), "rm -rf %s", g_tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", g_tmp);
    return r;
}
