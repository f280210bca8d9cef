/* SPDX-License-Identifier: MIT */
/* libpicolm against the real picolmd (built binary, temporary socket directory) on
 * $PICOLM_TEST_DATA/models/stories260K.gguf: model info and tokenization match the llama.cpp
 * reference, greedy generation (callback and iterator forms, alone and two streams at once)
 * reproduces the reference tokens, cancel ends a stream with PICOLM_E_CANCELLED and the
 * session goes on, and a broker SIGKILLed mid-stream is reported as PICOLM_E_BROKER_GONE
 * within 100 ms. Skips (77) when the model or the picolmd binary is missing. */
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "fidelity_ref.h"
#include "picolm.h"

#define PICOLMD PL_BINARY_DIR "/bin/picolmd"
#define MODEL_NAME "stories260K"
/* A reference step whose top-2 logit margin is below this may legitimately flip with F16 KV
 * or batched kernels: compare tokens only up to the first such step. */
#define SAFE_MARGIN 0.05f

static char g_model[4096];
static struct fidelity_ref g_ref;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- A broker per test ---- */

struct broker {
    pid_t pid;
    char dir[64];
    char sock[128];
};

static void broker_start(struct broker *b) {
    (void)snprintf(b->dir, sizeof(b->dir), "/tmp/picolm-it-XXXXXX");
    assert_non_null(mkdtemp(b->dir));
    (void)snprintf(b->sock, sizeof(b->sock), "%s/picolm.sock", b->dir);
    fflush(NULL);
    b->pid = fork();
    assert_true(b->pid >= 0);
    if (b->pid == 0) {
        char *argv[] = {PICOLMD,       "--model", g_model, "--socket-dir", b->dir, "--foreground",
                        "--log-level", "warn",    NULL};
        execv(PICOLMD, argv);
        _exit(127);
    }
    uint64_t deadline = now_ns() + 60ull * 1000000000ull;
    for (;;) {
        int status;
        if (waitpid(b->pid, &status, WNOHANG) == b->pid) {
            b->pid = 0;
            fail_msg("picolmd exited during start-up (status 0x%x)", status);
        }
        picolm_client *c;
        if (picolm_connect(b->sock, &c) == PICOLM_OK) {
            picolm_close(c);
            return;
        }
        if (now_ns() > deadline)
            fail_msg("picolmd did not accept connections within 60 s");
        usleep(10000);
    }
}

static void broker_stop(struct broker *b) {
    if (b->pid > 0) {
        (void)kill(b->pid, SIGTERM);
        int status;
        for (int i = 0; i < 1000 && b->pid > 0; i++) {
            if (waitpid(b->pid, &status, WNOHANG) == b->pid)
                b->pid = 0;
            else
                usleep(10000);
        }
        if (b->pid > 0) {
            (void)kill(b->pid, SIGKILL);
            (void)waitpid(b->pid, &status, 0);
        }
        b->pid = 0;
    }
    char p[160];
    (void)snprintf(p, sizeof(p), "%s/admin.sock", b->dir);
    (void)unlink(p);
    (void)unlink(b->sock);
    (void)rmdir(b->dir);
}

struct fx {
    struct broker b;
    picolm_client *c;
};

static int setup(void **state) {
    struct fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    broker_start(&f->b);
    char err[256];
    int r = picolm_connect_ex(f->b.sock, &f->c, err, sizeof(err));
    if (r != PICOLM_OK)
        fail_msg("connect: %s: %s", picolm_strerror(r), err);
    assert_int_equal(picolm_set_timeout(f->c, 30000), PICOLM_OK);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    struct fx *f = *state;
    picolm_close(f->c);
    broker_stop(&f->b);
    free(f);
    return 0;
}

/* How many reference greedy tokens of prompt p are safe to compare. */
static size_t safe_prefix(const struct fidelity_prompt *p) {
    const struct fidelity_greedy *g = p->has_greedy_f16 ? &p->greedy_f16 : &p->greedy;
    size_t n = 0;
    while (n < FIDELITY_N_GREEDY && g->top1[n] - g->top2[n] >= SAFE_MARGIN)
        n++;
    return n;
}

static const int32_t *ref_tokens(const struct fidelity_prompt *p) {
    return p->has_greedy_f16 ? p->greedy_f16.token_ids : p->greedy.token_ids;
}

static void greedy_params(struct picolm_generate_params *gp, const struct fidelity_prompt *p) {
    picolm_generate_params_init(gp);
    gp->tokens = p->token_ids;
    gp->n_tokens = p->n_tokens;
    gp->max_tokens = FIDELITY_N_GREEDY;
    gp->flags = PICOLM_GEN_IGNORE_EOS;
    gp->sampling.temperature = 0;
    gp->sampling.repeat_penalty = 1;
}

struct collect {
    int32_t ids[256];
    size_t n_ids;
    char text[4096];
    size_t text_len;
    size_t n_chunks;
};

static int collect_cb(void *user, const struct picolm_chunk *ch) {
    struct collect *c = user;
    c->n_chunks++;
    for (size_t i = 0; i < ch->n_ids && c->n_ids < 256; i++)
        c->ids[c->n_ids++] = ch->ids[i];
    if (ch->text_len <= sizeof(c->text) - c->text_len) {
        memcpy(c->text + c->text_len, ch->text, ch->text_len);
        c->text_len += ch->text_len;
    }
    return 0;
}

static void assert_matches_reference(const struct fidelity_prompt *p, const int32_t *ids,
                                     size_t n) {
    assert_int_equal(n, FIDELITY_N_GREEDY);
    size_t safe = safe_prefix(p);
    const int32_t *want = ref_tokens(p);
    for (size_t k = 0; k < safe; k++)
        if (ids[k] != want[k])
            fail_msg("prompt '%.40s': token %zu is %d, reference %d", p->text, k, ids[k], want[k]);
}

/* ---- Tests ---- */

static void test_model_info_matches_the_file(void **state) {
    struct fx *f = *state;
    struct picolm_model_info info = {.size = sizeof(info)};
    int r = picolm_model_info(f->c, &info);
    if (r != PICOLM_OK)
        fail_msg("model_info: %s: %s", picolm_strerror(r), picolm_last_error(f->c));
    assert_int_equal(info.n_vocab, g_ref.n_vocab);
    assert_string_equal(info.architecture, "llama");
    assert_int_equal(info.bos, g_ref.bos);
    assert_int_equal(info.eos, g_ref.eos);
    assert_int_equal(info.n_layer, 5);
    assert_true(info.n_ctx > 0);
}

static void test_tokenize_matches_reference(void **state) {
    struct fx *f = *state;
    for (size_t i = 0; i < g_ref.n_prompts; i++) {
        const struct fidelity_prompt *p = &g_ref.prompts[i];
        int32_t ids[1024];
        size_t n = 0;
        int r =
            picolm_tokenize(f->c, p->text, strlen(p->text), PICOLM_TOK_ADD_SPECIAL, ids, 1024, &n);
        if (r != PICOLM_OK)
            fail_msg("tokenize: %s: %s", picolm_strerror(r), picolm_last_error(f->c));
        assert_int_equal(n, p->n_tokens);
        assert_memory_equal(ids, p->token_ids, n * sizeof(int32_t));
        /* Too small a buffer reports the size needed. */
        size_t need = 0;
        assert_int_equal(picolm_tokenize(f->c, p->text, 0, PICOLM_TOK_ADD_SPECIAL, ids, 1, &need),
                         n > 1 ? PICOLM_E_RANGE : PICOLM_OK);
        assert_int_equal(need, n);
    }
}

/* The largest text a Tokenize takes, malformed so that each space's U+2581 falls apart into
 * byte tokens: about two ids a byte, which the broker once refused as untokenizable (its cap
 * was the byte count + 8). */
static void test_tokenize_takes_a_text_of_more_ids_than_bytes(void **state) {
    struct fx *f = *state;
    static char text[4096];
    static int32_t ids[3 * 4096 + 2];
    for (size_t i = 0; i < sizeof(text); i += 2) {
        text[i] = '\xe2';
        text[i + 1] = ' ';
    }
    size_t n = 0, need = 0;
    int r = picolm_tokenize(f->c, text, sizeof(text), 0, ids, sizeof(ids) / sizeof(ids[0]), &n);
    if (r != PICOLM_OK)
        fail_msg("tokenize: %s: %s", picolm_strerror(r), picolm_last_error(f->c));
    assert_true(n > sizeof(text) + 8 && n <= sizeof(ids) / sizeof(ids[0]));
    for (size_t i = 0; i < n; i++)
        assert_true(ids[i] >= 0 && (uint32_t)ids[i] < g_ref.n_vocab);
    assert_int_equal(picolm_tokenize(f->c, text, sizeof(text), 0, ids, 1, &need), PICOLM_E_RANGE);
    assert_int_equal(need, n);
}

static void test_generate_greedy_matches_reference(void **state) {
    struct fx *f = *state;
    for (size_t i = 0; i < g_ref.n_prompts; i++) {
        const struct fidelity_prompt *p = &g_ref.prompts[i];
        struct picolm_generate_params gp;
        greedy_params(&gp, p);
        struct collect col = {0};
        struct picolm_result res = {.size = sizeof(res)};
        int r = picolm_generate(f->c, &gp, collect_cb, &col, &res);
        if (r != PICOLM_OK)
            fail_msg("generate: %s: %s", picolm_strerror(r), picolm_last_error(f->c));
        assert_matches_reference(p, col.ids, col.n_ids);
        assert_int_equal(res.generated_tokens, FIDELITY_N_GREEDY);
        assert_int_equal(res.prompt_tokens, p->n_tokens);
        assert_int_equal(res.finish_reason, PICOLM_FINISH_LENGTH);

        /* The chunk texts are the exact pieces: detokenize agrees. */
        char text[4096];
        size_t len = 0;
        r = picolm_detokenize(f->c, col.ids, col.n_ids, text, sizeof(text), &len);
        if (r != PICOLM_OK)
            fail_msg("detokenize: %s: %s", picolm_strerror(r), picolm_last_error(f->c));
        assert_int_equal(len, col.text_len);
        assert_memory_equal(text, col.text, len);
    }
}

static void test_two_streams_at_once_match_reference(void **state) {
    struct fx *f = *state;
    assert_true(g_ref.n_prompts >= 2);
    const struct fidelity_prompt *pa = &g_ref.prompts[0], *pb = &g_ref.prompts[1];
    struct picolm_generate_params ga, gb;
    greedy_params(&ga, pa);
    greedy_params(&gb, pb);
    picolm_stream *a, *b;
    assert_int_equal(picolm_stream_start(f->c, &ga, &a), PICOLM_OK);
    assert_int_equal(picolm_stream_start(f->c, &gb, &b), PICOLM_OK);
    struct collect ca = {0}, cb = {0};
    int ra = 1, rb = 1;
    struct picolm_chunk ch;
    /* Alternate between the streams until both end. */
    while (ra == 1 || rb == 1) {
        if (ra == 1 && (ra = picolm_stream_next(a, &ch)) == 1)
            (void)collect_cb(&ca, &ch);
        if (rb == 1 && (rb = picolm_stream_next(b, &ch)) == 1)
            (void)collect_cb(&cb, &ch);
    }
    assert_int_equal(ra, 0);
    assert_int_equal(rb, 0);
    assert_int_equal(picolm_stream_end(a, NULL), PICOLM_OK);
    assert_int_equal(picolm_stream_end(b, NULL), PICOLM_OK);
    assert_matches_reference(pa, ca.ids, ca.n_ids);
    assert_matches_reference(pb, cb.ids, cb.n_ids);
}

static void test_no_stream_and_stop_strings(void **state) {
    struct fx *f = *state;
    const struct fidelity_prompt *p = &g_ref.prompts[0];
    struct picolm_generate_params gp;
    greedy_params(&gp, p);
    gp.flags |= PICOLM_GEN_NO_STREAM;
    struct collect col = {0};
    struct picolm_result res = {.size = sizeof(res)};
    int r = picolm_generate(f->c, &gp, collect_cb, &col, &res);
    if (r != PICOLM_OK)
        fail_msg("generate: %s: %s", picolm_strerror(r), picolm_last_error(f->c));
    assert_matches_reference(p, col.ids, col.n_ids);
    assert_int_equal(col.n_chunks, 1); /* the whole text at the end */

    /* Stop at a piece of the reference continuation: the text ends before it. */
    struct picolm_generate_params sp;
    picolm_generate_params_init(&sp);
    sp.prompt = "Once upon a time";
    sp.max_tokens = 64;
    sp.sampling.temperature = 0;
    struct collect full = {0};
    assert_int_equal(picolm_generate(f->c, &sp, collect_cb, &full, NULL), PICOLM_OK);
    assert_true(full.text_len > 12);
    char stop[8];
    memcpy(stop, full.text + full.text_len / 2, 5);
    stop[5] = '\0';
    const char *stops[1] = {stop};
    sp.stop = stops;
    sp.n_stop = 1;
    struct collect cut = {0};
    assert_int_equal(picolm_generate(f->c, &sp, collect_cb, &cut, &res), PICOLM_OK);
    assert_int_equal(res.finish_reason, PICOLM_FINISH_STOP);
    assert_true(cut.text_len < full.text_len);
    assert_memory_equal(cut.text, full.text, cut.text_len);
}

static void test_cancel_ends_a_stream(void **state) {
    struct fx *f = *state;
    struct picolm_generate_params gp;
    picolm_generate_params_init(&gp);
    gp.prompt = "Once upon a time";
    gp.max_tokens = 0; /* until the context is full: far longer than the test waits */
    gp.flags = PICOLM_GEN_IGNORE_EOS;
    picolm_stream *s;
    assert_int_equal(picolm_stream_start(f->c, &gp, &s), PICOLM_OK);
    struct picolm_chunk ch;
    size_t n = 0;
    int r;
    while ((r = picolm_stream_next(s, &ch)) == 1) {
        n += ch.n_ids;
        if (n >= 3 && n < 3 + ch.n_ids)
            assert_int_equal(picolm_cancel(f->c, picolm_stream_id(s)), PICOLM_OK);
    }
    assert_int_equal(r, PICOLM_E_CANCELLED);
    struct picolm_result res = {.size = sizeof(res)};
    assert_int_equal(picolm_stream_end(s, &res), PICOLM_E_CANCELLED);
    assert_int_equal(res.finish_reason, PICOLM_FINISH_CANCELLED);

    /* Ending a running stream cancels it too; then the session serves the next request. */
    assert_int_equal(picolm_stream_start(f->c, &gp, &s), PICOLM_OK);
    assert_int_equal(picolm_stream_next(s, &ch), 1);
    assert_int_equal(picolm_stream_end(s, NULL), PICOLM_E_CANCELLED);
    struct picolm_generate_params g2;
    greedy_params(&g2, &g_ref.prompts[0]);
    struct collect col = {0};
    assert_int_equal(picolm_generate(f->c, &g2, collect_cb, &col, NULL), PICOLM_OK);
    assert_matches_reference(&g_ref.prompts[0], col.ids, col.n_ids);
}

static void test_bad_request_fails_only_that_request(void **state) {
    struct fx *f = *state;
    struct picolm_generate_params gp;
    picolm_generate_params_init(&gp);
    int32_t bad = 1 << 20; /* beyond the vocabulary */
    gp.tokens = &bad;
    gp.n_tokens = 1;
    gp.max_tokens = 4;
    int r = picolm_generate(f->c, &gp, NULL, NULL, NULL);
    assert_int_equal(r, PICOLM_E_INVALID);
    assert_true(strlen(picolm_last_error(f->c)) > 0);
    struct picolm_model_info info = {.size = sizeof(info)};
    assert_int_equal(picolm_model_info(f->c, &info), PICOLM_OK);
}

static void test_broker_sigkill_is_noticed_within_100ms(void **state) {
    struct fx *f = *state;
    struct picolm_generate_params gp;
    picolm_generate_params_init(&gp);
    gp.prompt = "Once upon a time";
    gp.flags = PICOLM_GEN_IGNORE_EOS;
    picolm_stream *s;
    assert_int_equal(picolm_stream_start(f->c, &gp, &s), PICOLM_OK);
    struct picolm_chunk ch;
    assert_int_equal(picolm_stream_next(s, &ch), 1);
    uint64_t t0 = now_ns();
    assert_int_equal(kill(f->b.pid, SIGKILL), 0);
    int r;
    while ((r = picolm_stream_next(s, &ch)) == 1)
        ;
    uint64_t dt = now_ns() - t0;
    assert_int_equal(r, PICOLM_E_BROKER_GONE);
    if (dt >= 100000000ull)
        fail_msg("broker death noticed after %.1f ms", (double)dt / 1e6);
    assert_int_equal(picolm_stream_end(s, NULL), PICOLM_E_BROKER_GONE);
    int status;
    (void)waitpid(f->b.pid, &status, 0);
    f->b.pid = 0;
    /* Nobody listens any more. */
    picolm_client *c2;
    int r2 = picolm_connect(f->b.sock, &c2);
    assert_int_equal(r2, PICOLM_E_UNREACHABLE);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const char *data = getenv("PICOLM_TEST_DATA");
    if (!data || !*data) {
        fprintf(stderr, "PICOLM_TEST_DATA not set: skipping\n");
        return 77;
    }
    (void)snprintf(g_model, sizeof(g_model), "%s/models/" MODEL_NAME ".gguf", data);
    if (access(g_model, R_OK) < 0 || access(PICOLMD, X_OK) < 0) {
        fprintf(stderr, "%s or %s missing: skipping\n", g_model, PICOLMD);
        return 77;
    }
    char ref_path[4200], err[256];
    (void)snprintf(ref_path, sizeof(ref_path), "%s/models/" MODEL_NAME ".ref.json", data);
    if (fidelity_ref_load(ref_path, &g_ref, err, sizeof(err)) < 0) {
        fprintf(stderr, "cannot read %s: %s\n", ref_path, err);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_model_info_matches_the_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tokenize_matches_reference, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tokenize_takes_a_text_of_more_ids_than_bytes, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_generate_greedy_matches_reference, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_streams_at_once_match_reference, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_stream_and_stop_strings, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel_ends_a_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_request_fails_only_that_request, setup, teardown),
        cmocka_unit_test_setup_teardown(test_broker_sigkill_is_noticed_within_100ms, setup,
                                        teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    fidelity_ref_free(&g_ref);
    return rc;
}
