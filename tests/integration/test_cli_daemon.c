/* SPDX-License-Identifier: MIT */
/* The picolm CLI's daemon backend against a real picolmd on
 * $PICOLM_TEST_DATA/models/stories260K.gguf: generate/tokenize through the daemon print
 * exactly what the in-process backend (--model) prints for the same arguments, $PICOLM_SOCKET
 * is the default socket, info describes the daemon's model, chat streams an answer per line
 * (its first answer equals `generate -p LINE`), and the exit codes: 3 with one stderr line
 * when no broker listens, 2 for bad usage (--socket with --model, eval or --threads without
 * --model). Skips (77) without the model or the binaries. */
#include <errno.h>
#include <fcntl.h>
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "fidelity_ref.h"
#include "run.h"

#define PICOLM PL_BINARY_DIR "/bin/picolm"
#define PICOLMD PL_BINARY_DIR "/bin/picolmd"

static char g_model[4096];
static struct fidelity_ref g_ref;
static pid_t g_daemon;
static char g_dir[64], g_sock[128];

/* ---- Running the CLI ---- */

/* Run picolm with argv (NULL-terminated, argv[0] = "picolm"), stdin text and, when env_sock
 * is set, PICOLM_SOCKET=env_sock (else unset). */
static struct pl_test_run run_cli(const char *const *argv, const char *in, const char *env_sock) {
    char sock[256];
    const char *env[] = {"PICOLM_SOCKET", NULL};
    if (env_sock) {
        assert_true((size_t)snprintf(sock, sizeof(sock), "PICOLM_SOCKET=%s", env_sock) <
                    sizeof(sock));
        env[0] = sock;
    }
    struct pl_test_run r;
    assert_int_equal(pl_test_run(PICOLM, argv, in, in ? strlen(in) : 0, env, &r), 0);
    return r;
}

static void assert_ok(const struct pl_test_run *r, const char *what) {
    if (r->status != 0)
        fail_msg("%s: exit %d, stderr: %s", what, r->status, r->err);
}

static void assert_one_error_line(const struct pl_test_run *r, int status) {
    if (r->status != status)
        fail_msg("exit %d, want %d (stderr: %s)", r->status, status, r->err);
    assert_int_equal(r->out_len, 0);
    assert_true(r->err_len > 8);
    assert_memory_equal(r->err, "picolm: ", 8);
    assert_non_null(strchr(r->err, '\n'));
    assert_true(strchr(r->err, '\n') == r->err + r->err_len - 1);
}

static char *ids_csv(const int32_t *ids, size_t n) {
    char *s = malloc(n * 12 + 1);
    assert_non_null(s);
    size_t len = 0;
    s[0] = '\0';
    for (size_t i = 0; i < n; i++)
        len += (size_t)sprintf(s + len, "%s%d", i ? "," : "", ids[i]);
    return s;
}

/* ---- The daemon, once for the whole file ---- */

static int daemon_up(void **state) {
    (void)state;
    (void)snprintf(g_dir, sizeof(g_dir), "/tmp/picolm-clid-XXXXXX");
    assert_non_null(mkdtemp(g_dir));
    (void)snprintf(g_sock, sizeof(g_sock), "%s/picolm.sock", g_dir);
    fflush(NULL);
    g_daemon = fork();
    assert_true(g_daemon >= 0);
    if (g_daemon == 0) {
        char *argv[] = {PICOLMD,       "--model", g_model, "--socket-dir", g_dir, "--foreground",
                        "--log-level", "warn",    NULL};
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
    }
    char p[160];
    (void)snprintf(p, sizeof(p), "%s/admin.sock", g_dir);
    (void)unlink(p);
    (void)unlink(g_sock);
    (void)rmdir(g_dir);
    return 0;
}

/* ---- Tests ---- */

static void test_generate_through_daemon_equals_in_process(void **state) {
    (void)state;
    for (size_t i = 0; i < g_ref.n_prompts; i++) {
        char *ids = ids_csv(g_ref.prompts[i].token_ids, g_ref.prompts[i].n_tokens);
        const char *d_argv[] = {"picolm", "generate", "--socket", g_sock, "--tokens",     ids,
                                "--temp", "0",        "-n",       "32",   "--ignore-eos", "--json",
                                NULL};
        const char *l_argv[] = {"picolm", "generate", "--model", g_model, "--tokens",     ids,
                                "--temp", "0",        "-n",      "32",    "--ignore-eos", "--json",
                                NULL};
        struct pl_test_run d = run_cli(d_argv, NULL, NULL), l = run_cli(l_argv, NULL, NULL);
        assert_ok(&d, "generate --socket");
        assert_ok(&l, "generate --model");
        if (d.out_len != l.out_len || memcmp(d.out, l.out, d.out_len))
            fail_msg("daemon:\n%s\nin-process:\n%s", d.out, l.out);
        pl_test_run_free(&d);
        pl_test_run_free(&l);
        free(ids);
    }
    /* Text prompt, streamed (no --json). */
    const char *d_argv[] = {"picolm", "generate", "--socket", g_sock, "-p", "Once upon a time",
                            "--temp", "0",        "-n",       "24",   NULL};
    const char *l_argv[] = {"picolm", "generate", "--model", g_model, "-p", "Once upon a time",
                            "--temp", "0",        "-n",      "24",    NULL};
    struct pl_test_run d = run_cli(d_argv, NULL, NULL), l = run_cli(l_argv, NULL, NULL);
    assert_ok(&d, "generate -p --socket");
    assert_ok(&l, "generate -p --model");
    assert_true(d.out_len > 0);
    assert_int_equal(d.out_len, l.out_len);
    assert_memory_equal(d.out, l.out, d.out_len);
    pl_test_run_free(&d);
    pl_test_run_free(&l);
}

static void test_picolm_socket_is_the_default(void **state) {
    (void)state;
    const char *argv[] = {"picolm", "tokenize", "-p", "Hello world", NULL};
    const char *l_argv[] = {"picolm", "tokenize", "--model", g_model, "-p", "Hello world", NULL};
    struct pl_test_run d = run_cli(argv, NULL, g_sock), l = run_cli(l_argv, NULL, NULL);
    assert_ok(&d, "tokenize via $PICOLM_SOCKET");
    assert_ok(&l, "tokenize --model");
    assert_string_equal(d.out, l.out);
    pl_test_run_free(&d);
    pl_test_run_free(&l);

    /* stdin, without special tokens. */
    const char *s_argv[] = {"picolm", "tokenize", "--socket", g_sock, "--no-bos", NULL};
    const char *ls_argv[] = {"picolm", "tokenize", "--model", g_model, "--no-bos", NULL};
    d = run_cli(s_argv, "The quick brown fox", NULL);
    l = run_cli(ls_argv, "The quick brown fox", NULL);
    assert_ok(&d, "tokenize stdin");
    assert_string_equal(d.out, l.out);
    pl_test_run_free(&d);
    pl_test_run_free(&l);
}

static void test_info_describes_the_daemon_model(void **state) {
    (void)state;
    const char *argv[] = {"picolm", "info", "--socket", g_sock, NULL};
    struct pl_test_run r = run_cli(argv, NULL, NULL);
    assert_ok(&r, "info");
    assert_non_null(strstr(r.out, "llama"));
    assert_non_null(strstr(r.out, "512"));
    assert_non_null(strstr(r.out, g_sock));
    pl_test_run_free(&r);
    const char *jargv[] = {"picolm", "info", "--socket", g_sock, "--json", NULL};
    r = run_cli(jargv, NULL, NULL);
    assert_ok(&r, "info --json");
    assert_non_null(strstr(r.out, "\"n_vocab\":512"));
    assert_non_null(strstr(r.out, "\"daemon\":true"));
    pl_test_run_free(&r);
}

static void test_chat_answers_each_line(void **state) {
    (void)state;
    const char *c_argv[] = {"picolm", "chat", "--socket", g_sock, "--temp", "0", "-n", "16", NULL};
    struct pl_test_run c = run_cli(c_argv, "Once upon a time\nLily went\n", NULL);
    assert_ok(&c, "chat");
    /* Two answers, one line each at least. */
    size_t lines = 0;
    for (size_t i = 0; i < c.out_len; i++)
        lines += c.out[i] == '\n';
    assert_true(lines >= 2);
    /* The first answer is what generate prints for that line. */
    const char *g_argv[] = {"picolm", "generate", "--socket", g_sock, "-p", "Once upon a time",
                            "--temp", "0",        "-n",       "16",   NULL};
    struct pl_test_run g = run_cli(g_argv, NULL, NULL);
    assert_ok(&g, "generate");
    assert_true(c.out_len > g.out_len);
    assert_memory_equal(c.out, g.out, g.out_len);
    pl_test_run_free(&c);
    pl_test_run_free(&g);

    /* In-process chat works the same way. */
    const char *l_argv[] = {"picolm", "chat", "--model", g_model, "--temp", "0", "-n", "16", NULL};
    struct pl_test_run l = run_cli(l_argv, "Once upon a time\n", NULL);
    assert_ok(&l, "chat --model");
    assert_true(l.out_len > 0);
    pl_test_run_free(&l);
}

static void test_exit_codes(void **state) {
    (void)state;
    /* 3: nobody listens. */
    const char *u_argv[] = {"picolm", "generate", "--socket", "/nonexistent/picolm.sock",
                            "-p",     "x",        NULL};
    struct pl_test_run r = run_cli(u_argv, NULL, NULL);
    assert_one_error_line(&r, 3);
    pl_test_run_free(&r);
    const char *u2_argv[] = {"picolm", "info", NULL};
    r = run_cli(u2_argv, NULL, "/nonexistent/from-env.sock");
    assert_one_error_line(&r, 3);
    assert_non_null(strstr(r.err, "from-env.sock"));
    pl_test_run_free(&r);
    const char *u3_argv[] = {"picolm", "chat", "--socket", "/nonexistent/picolm.sock", NULL};
    r = run_cli(u3_argv, "hello\n", NULL);
    assert_one_error_line(&r, 3);
    pl_test_run_free(&r);

    /* 2: bad usage. */
    const char *b_argv[] = {"picolm", "generate", "--socket", g_sock, "--model",
                            g_model,  "-p",       "x",        NULL};
    r = run_cli(b_argv, NULL, NULL);
    assert_one_error_line(&r, 2);
    pl_test_run_free(&r);
    const char *e_argv[] = {"picolm", "eval",         "--socket",  g_sock, "--tokens",
                            "1,2",    "--logits-out", "/dev/null", NULL};
    r = run_cli(e_argv, NULL, NULL);
    assert_one_error_line(&r, 2);
    pl_test_run_free(&r);
    const char *t_argv[] = {"picolm", "generate", "--socket", g_sock, "--threads",
                            "2",      "-p",       "x",        NULL};
    r = run_cli(t_argv, NULL, NULL);
    assert_one_error_line(&r, 2);
    pl_test_run_free(&r);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const char *data = getenv("PICOLM_TEST_DATA");
    if (!data || !*data)
        return 77;
    (void)snprintf(g_model, sizeof(g_model), "%s/models/stories260K.gguf", data);
    if (access(g_model, R_OK) < 0 || access(PICOLMD, X_OK) < 0 || access(PICOLM, X_OK) < 0) {
        fprintf(stderr, "model or binaries missing: skipping\n");
        return 77;
    }
    char ref_path[4200], err[256];
    (void)snprintf(ref_path, sizeof(ref_path), "%s/models/stories260K.ref.json", data);
    if (fidelity_ref_load(ref_path, &g_ref, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s: %s\n", ref_path, err);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generate_through_daemon_equals_in_process),
        cmocka_unit_test(test_picolm_socket_is_the_default),
        cmocka_unit_test(test_info_describes_the_daemon_model),
        cmocka_unit_test(test_chat_answers_each_line),
        cmocka_unit_test(test_exit_codes),
    };
    int rc = cmocka_run_group_tests(tests, daemon_up, daemon_down);
    fidelity_ref_free(&g_ref);
    return rc;
}
