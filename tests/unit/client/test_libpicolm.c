/* SPDX-License-Identifier: MIT */
/* libpicolm (client/src/libpicolm.c) against a fake broker (fake_broker.c) that speaks the real
 * ipc handshake and rings: argument checks, connect failures, streaming, interleaved requests,
 * cancellation, tokenizer calls, broker errors, malformed records, timeouts and broker death. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "fake_broker.h"
#include "picolm.h"
#include "pl/ipc_abi.h"
#include "pl/ipc_doorbell.h"
#include "pl/picolm.pb-c.h"

/* ---- Allocation counting ----
 * Without sanitizers (which bring their own malloc), this binary interposes the allocator so a
 * test can count the allocations libpicolm.so makes on the token path. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define COUNT_ALLOCS 0
#else
#define COUNT_ALLOCS 1
/* Exported, so that the definitions interpose on libc's for libpicolm.so too. */
#define PL_TEST_EXPORT __attribute__((visibility("default")))
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t m);
extern void *__libc_realloc(void *p, size_t n);
extern void *__libc_memalign(size_t align, size_t n);
extern void __libc_free(void *p);
static _Atomic int g_counting;
static _Atomic long g_allocs;

static void count(void) {
    if (atomic_load_explicit(&g_counting, memory_order_relaxed))
        atomic_fetch_add_explicit(&g_allocs, 1, memory_order_relaxed);
}
PL_TEST_EXPORT void *malloc(size_t n) {
    count();
    return __libc_malloc(n);
}
PL_TEST_EXPORT void *calloc(size_t n, size_t m) {
    count();
    return __libc_calloc(n, m);
}
PL_TEST_EXPORT void *realloc(void *p, size_t n) {
    count();
    return __libc_realloc(p, n);
}
PL_TEST_EXPORT void *aligned_alloc(size_t align, size_t n) {
    count();
    return __libc_memalign(align, n);
}
PL_TEST_EXPORT int posix_memalign(void **ret, size_t align, size_t n) {
    count();
    void *p = __libc_memalign(align, n);
    if (!p)
        return ENOMEM;
    *ret = p;
    return 0;
}
PL_TEST_EXPORT void free(void *p) {
    __libc_free(p);
}
#endif

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- Fixtures ---- */

struct fx {
    struct fb_handle fb;
    picolm_client *c;
};

static struct fx *fx_start(fb_scenario_fn scenario, void *arg) {
    struct fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    assert_int_equal(fb_start(&f->fb, scenario, arg, 0), 0);
    char err[256];
    int r = picolm_connect_ex(f->fb.path, &f->c, err, sizeof(err));
    if (r != PICOLM_OK)
        fail_msg("connect: %s: %s", picolm_strerror(r), err);
    return f;
}

static void fx_stop(struct fx *f) {
    picolm_close(f->c);
    (void)fb_stop(&f->fb);
    free(f);
}

static void params_prompt(struct picolm_generate_params *p, const char *prompt) {
    picolm_generate_params_init(p);
    p->prompt = prompt;
    p->sampling.temperature = 0;
}

struct collect {
    char text[4096];
    size_t len;
    size_t n_chunks;
    size_t stop_after; /* 0: never stop */
};

static int on_chunk(void *user, const struct picolm_chunk *ch) {
    struct collect *c = user;
    assert_true(ch->text_len <= sizeof(c->text) - c->len);
    memcpy(c->text + c->len, ch->text, ch->text_len);
    c->len += ch->text_len;
    c->n_chunks++;
    return c->stop_after && c->n_chunks >= c->stop_after;
}

/* ---- Arguments and connecting ---- */

static void test_strerror_names_every_status(void **state) {
    (void)state;
    for (int s = PICOLM_E_SYSTEM; s <= PICOLM_OK; s++) {
        const char *m = picolm_strerror(s);
        assert_non_null(m);
        assert_string_not_equal(m, "unknown status");
        for (int t = PICOLM_E_SYSTEM; t < s; t++)
            assert_string_not_equal(m, picolm_strerror(t));
    }
    assert_string_equal(picolm_strerror(-1000), "unknown status");
    assert_string_equal(picolm_strerror(5), "unknown status");
}

static void test_params_init_sets_size_and_defaults(void **state) {
    (void)state;
    struct picolm_generate_params p;
    memset(&p, 0xab, sizeof(p));
    picolm_generate_params_init(&p);
    assert_int_equal(p.size, sizeof(p));
    assert_null(p.prompt);
    assert_null(p.tokens);
    assert_int_equal(p.flags, 0);
    assert_true(p.sampling.temperature > 0.0f);
    assert_int_equal(p.sampling.reserved, 0);
    picolm_generate_params_init(NULL); /* ignored */
}

static void test_null_arguments_are_invalid(void **state) {
    (void)state;
    struct picolm_generate_params p;
    params_prompt(&p, "x");
    struct picolm_result res = {.size = sizeof(res)};
    picolm_stream *s = NULL;
    size_t n;
    int32_t ids[4];
    char buf[4];
    struct picolm_model_info info = {.size = sizeof(info)};
    struct picolm_chunk ch;
    assert_int_equal(picolm_connect(NULL, NULL), PICOLM_E_INVALID);
    assert_int_equal(picolm_generate(NULL, &p, NULL, NULL, &res), PICOLM_E_INVALID);
    assert_int_equal(picolm_stream_start(NULL, &p, &s), PICOLM_E_INVALID);
    assert_int_equal(picolm_stream_next(NULL, &ch), PICOLM_E_INVALID);
    assert_int_equal(picolm_stream_end(NULL, &res), PICOLM_E_INVALID);
    assert_int_equal(picolm_cancel(NULL, 1), PICOLM_E_INVALID);
    assert_int_equal(picolm_tokenize(NULL, "x", 1, 0, ids, 4, &n), PICOLM_E_INVALID);
    assert_int_equal(picolm_detokenize(NULL, ids, 1, buf, 4, &n), PICOLM_E_INVALID);
    assert_int_equal(picolm_model_info(NULL, &info), PICOLM_E_INVALID);
    assert_int_equal(picolm_set_spin(NULL, 0), PICOLM_E_INVALID);
    assert_int_equal(picolm_set_timeout(NULL, 0), PICOLM_E_INVALID);
    assert_string_equal(picolm_last_error(NULL), "");
    assert_int_equal(picolm_session_id(NULL), 0);
    assert_int_equal(picolm_stream_id(NULL), 0);
    picolm_close(NULL);
}

static void test_connect_to_missing_socket_is_unreachable(void **state) {
    (void)state;
    picolm_client *c = (picolm_client *)0x1;
    char err[256];
    assert_int_equal(picolm_connect_ex("/nonexistent/picolm.sock", &c, err, sizeof(err)),
                     PICOLM_E_UNREACHABLE);
    assert_ptr_equal(c, (picolm_client *)0x1); /* untouched on failure */
    assert_non_null(strstr(err, "/nonexistent/picolm.sock"));

    /* A regular file is not a broker either. */
    char path[] = "/tmp/pl-notsock-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(picolm_connect(path, &c), PICOLM_E_UNREACHABLE);
    unlink(path);

    /* NULL path: $PICOLM_SOCKET decides. */
    setenv("PICOLM_SOCKET", "/nonexistent/from-env.sock", 1);
    assert_int_equal(picolm_connect_ex(NULL, &c, err, sizeof(err)), PICOLM_E_UNREACHABLE);
    assert_non_null(strstr(err, "from-env.sock"));
    unsetenv("PICOLM_SOCKET");
}

static void test_connect_rejects_bad_paths(void **state) {
    (void)state;
    picolm_client *c;
    char longpath[300];
    memset(longpath, 'a', sizeof(longpath) - 1);
    longpath[sizeof(longpath) - 1] = '\0';
    assert_int_equal(picolm_connect("", &c), PICOLM_E_INVALID);
    assert_int_equal(picolm_connect(longpath, &c), PICOLM_E_INVALID);
}

static void noop_scenario(struct fb *b, void *arg) {
    (void)b;
    (void)arg;
}

static void test_connect_reports_broker_refusals(void **state) {
    (void)state;
    static const struct {
        uint32_t status;
        int want;
    } cases[] = {
        {PL_IPC_WELCOME_DENIED, PICOLM_E_DENIED},
        {PL_IPC_WELCOME_BUSY, PICOLM_E_EXHAUSTED},
        {PL_IPC_WELCOME_VERSION, PICOLM_E_VERSION},
        {PL_IPC_WELCOME_ERROR, PICOLM_E_INTERNAL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct fb_handle h;
        assert_int_equal(fb_start(&h, noop_scenario, NULL, cases[i].status), 0);
        picolm_client *c = NULL;
        char err[256];
        assert_int_equal(picolm_connect_ex(h.path, &c, err, sizeof(err)), cases[i].want);
        assert_null(c);
        assert_true(err[0] != '\0');
        (void)fb_stop(&h);
    }
}

/* ---- Happy paths against the toy broker ---- */

static void test_generate_streams_every_chunk(void **state) {
    (void)state;
    struct fx *f = fx_start(fb_scenario_echo, NULL);
    assert_int_equal(picolm_session_id(f->c), 42);
    struct picolm_generate_params p;
    params_prompt(&p, "hello world");
    struct collect col = {0};
    struct picolm_result res = {.size = sizeof(res)};
    assert_int_equal(picolm_generate(f->c, &p, on_chunk, &col, &res), PICOLM_OK);
    assert_int_equal(col.len, 11);
    assert_memory_equal(col.text, "hello world", 11);
    assert_int_equal(col.n_chunks, 11);
    assert_int_equal(res.finish_reason, PICOLM_FINISH_EOS);
    assert_int_equal(res.generated_tokens, 11);
    assert_int_equal(res.prompt_tokens, 11);
    assert_int_equal(res.seed, 7);
    assert_true(res.request_id > 0);

    /* max_tokens, and the token callback may be NULL. */
    p.max_tokens = 3;
    assert_int_equal(picolm_generate(f->c, &p, NULL, NULL, &res), PICOLM_OK);
    assert_int_equal(res.finish_reason, PICOLM_FINISH_LENGTH);
    assert_int_equal(res.generated_tokens, 3);
    fx_stop(f);
}

static void test_result_respects_caller_size(void **state) {
    (void)state;
    struct fx *f = fx_start(fb_scenario_echo, NULL);
    struct picolm_generate_params p;
    params_prompt(&p, "ab");
    /* A caller built against a larger (future) result struct: bytes beyond ours untouched. */
    struct {
        struct picolm_result r;
        uint8_t future[32];
    } big;
    memset(&big, 0x5a, sizeof(big));
    big.r.size = sizeof(big);
    assert_int_equal(picolm_generate(f->c, &p, NULL, NULL, &big.r), PICOLM_OK);
    assert_int_equal(big.r.size, sizeof(big));
    assert_int_equal(big.r.generated_tokens, 2);
    for (size_t i = 0; i < sizeof(big.future); i++)
        assert_int_equal(big.future[i], 0x5a);

    struct picolm_result small = {.size = sizeof(small) - 8};
    assert_int_equal(picolm_generate(f->c, &p, NULL, NULL, &small), PICOLM_E_INVALID);
    fx_stop(f);
}

static void test_generate_rejects_bad_params(void **state) {
    (void)state;
    struct fx *f = fx_start(fb_scenario_echo, NULL);
    struct picolm_generate_params p;
    int32_t toks[2] = {1, 2};
    const char *stops[1] = {NULL};

    params_prompt(&p, "x");
    p.tokens = toks;
    p.n_tokens = 2;
    assert_int_equal(picolm_generate(f->c, &p, NULL, NULL, NULL), PICOLM_E_INVALID);
    assert_true(strlen(picolm_last_error(f->c)) > 0);

    params_prompt(&p, NULL);
    assert_int_equal(picolm_generate(f->c, &p, NULL, NULL, NULL), PICOLM_E_INVALID);

    params_prompt(&p, NULL);
    p.tokens = toks;
    p.n_tokens = 0;
    assert_int_equal(picolm_generate(f->c, &p, NULL, NULL, NULL), PICOLM_E_INVALID);

    params_prompt(&p, NULL);
    toks[1] = -5;
    p.tokens = toks;
    p.n_tokens = 2;
    assert_int_equal(picolm_generate(f->c, &p, NULL, NULL, NULL), PICOLM_E_INVALID);

    params_prompt(&p, "x");
    p.flags = 0x80;
    assert_int_equal(picolm_generate(f->c, &p, NULL, NULL, NULL), PICOLM_E_INVALID);

    params_prompt(&p, "x");
    p.sampling.reserved = 1;
    assert_int_equal(picolm_generate(f->c, &p, NULL, NULL, NULL), PICOLM_E_INVALID);

    params_prompt(&p, "x");
    p.n_stop = 1;
    assert_int_equal(picolm_generate(f->c, &p, NULL, NULL, NULL), PICOLM_E_INVALID);
    p.stop = stops;
    assert_int_equal(picolm_generate(f->c, &p, NULL, NULL, NULL), PICOLM_E_INVALID);

    params_prompt(&p, "x");
    p.size = 8;
    assert_int_equal(picolm_generate(f->c, &p, NULL, NULL, NULL), PICOLM_E_INVALID);

    /* A newer caller's larger struct: zero tail accepted, non-zero tail unsupported. */
    struct {
        struct picolm_generate_params p;
        uint64_t future;
    } big;
    memset(&big, 0, sizeof(big));
    params_prompt(&big.p, "ok");
    big.p.size = sizeof(big);
    assert_int_equal(picolm_generate(f->c, &big.p, NULL, NULL, NULL), PICOLM_OK);
    big.future = 1;
    assert_int_equal(picolm_generate(f->c, &big.p, NULL, NULL, NULL), PICOLM_E_UNSUPPORTED);

    /* The connection is still fine after all that. */
    params_prompt(&p, "fine");
    assert_int_equal(picolm_generate(f->c, &p, NULL, NULL, NULL), PICOLM_OK);
    assert_string_equal(picolm_last_error(f->c), "");
    fx_stop(f);
}

static void test_broker_error_reaches_the_caller(void **state) {
    (void)state;
    struct fx *f = fx_start(fb_scenario_echo, NULL);
    struct picolm_generate_params p;
    params_prompt(&p, ""); /* the toy broker refuses empty prompts */
    assert_int_equal(picolm_generate(f->c, &p, NULL, NULL, NULL), PICOLM_E_INVALID);
    assert_non_null(strstr(picolm_last_error(f->c), "prompt"));
    /* Only that request failed. */
    params_prompt(&p, "ok");
    assert_int_equal(picolm_generate(f->c, &p, NULL, NULL, NULL), PICOLM_OK);
    fx_stop(f);
}

static void test_streams_interleave_on_one_connection(void **state) {
    (void)state;
    struct fx *f = fx_start(fb_scenario_echo, NULL);
    struct picolm_generate_params pa, pb;
    params_prompt(&pa, "aaaaaaaaaaaaaaaaaaaa");
    params_prompt(&pb, "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbb");
    picolm_stream *a, *b;
    assert_int_equal(picolm_stream_start(f->c, &pa, &a), PICOLM_OK);
    assert_int_equal(picolm_stream_start(f->c, &pb, &b), PICOLM_OK);
    assert_int_not_equal(picolm_stream_id(a), picolm_stream_id(b));

    /* Read b to its end first: a's chunks arriving meanwhile must be queued for a. */
    struct picolm_chunk ch;
    size_t nb = 0, na = 0;
    int r;
    while ((r = picolm_stream_next(b, &ch)) == 1) {
        assert_int_equal(ch.request_id, picolm_stream_id(b));
        assert_int_equal(ch.text_len, 1);
        assert_int_equal(ch.text[0], 'b');
        assert_int_equal(ch.n_ids, 1);
        assert_int_equal(ch.ids[0], 'b');
        nb++;
    }
    assert_int_equal(r, 0);
    assert_int_equal(picolm_stream_next(b, &ch), 0); /* stays finished */
    while ((r = picolm_stream_next(a, &ch)) == 1) {
        assert_int_equal(ch.text[0], 'a');
        na++;
    }
    assert_int_equal(r, 0);
    assert_int_equal(na, 20);
    assert_int_equal(nb, 30);
    struct picolm_result ra = {.size = sizeof(ra)}, rb = {.size = sizeof(rb)};
    assert_int_equal(picolm_stream_end(a, &ra), PICOLM_OK);
    assert_int_equal(picolm_stream_end(b, &rb), PICOLM_OK);
    assert_int_equal(ra.generated_tokens, 20);
    assert_int_equal(rb.generated_tokens, 30);
    fx_stop(f);
}

static void test_callback_can_stop_generation(void **state) {
    (void)state;
    struct fx *f = fx_start(fb_scenario_echo, NULL);
    struct picolm_generate_params p;
    params_prompt(&p, "infinite");
    struct collect col = {.stop_after = 5};
    struct picolm_result res = {.size = sizeof(res)};
    assert_int_equal(picolm_generate(f->c, &p, on_chunk, &col, &res), PICOLM_E_CANCELLED);
    assert_int_equal(col.n_chunks, 5);
    assert_int_equal(res.finish_reason, PICOLM_FINISH_CANCELLED);
    /* The connection goes on. */
    params_prompt(&p, "next");
    assert_int_equal(picolm_generate(f->c, &p, NULL, NULL, NULL), PICOLM_OK);
    fx_stop(f);
}

struct canceller {
    picolm_client *c;
    uint64_t id;
    int rc;
};

static void *cancel_thread(void *arg) {
    struct canceller *k = arg;
    usleep(20000);
    k->rc = picolm_cancel(k->c, k->id);
    return NULL;
}

static void test_cancel_from_another_thread(void **state) {
    (void)state;
    struct fx *f = fx_start(fb_scenario_echo, NULL);
    struct picolm_generate_params p;
    params_prompt(&p, "infinite");
    picolm_stream *s;
    assert_int_equal(picolm_stream_start(f->c, &p, &s), PICOLM_OK);
    struct canceller k = {.c = f->c, .id = picolm_stream_id(s), .rc = 1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, cancel_thread, &k), 0);
    struct picolm_chunk ch;
    int r;
    size_t n = 0;
    while ((r = picolm_stream_next(s, &ch)) == 1)
        n++;
    pthread_join(t, NULL);
    assert_int_equal(k.rc, PICOLM_OK);
    assert_int_equal(r, PICOLM_E_CANCELLED);
    assert_true(n > 0);
    assert_int_equal(picolm_stream_next(s, &ch), PICOLM_E_CANCELLED); /* sticky */
    struct picolm_result res = {.size = sizeof(res)};
    assert_int_equal(picolm_stream_end(s, &res), PICOLM_E_CANCELLED);
    assert_int_equal(res.finish_reason, PICOLM_FINISH_CANCELLED);

    assert_int_equal(picolm_cancel(f->c, 0), PICOLM_E_NOT_FOUND);
    assert_int_equal(picolm_cancel(f->c, 1000000), PICOLM_E_NOT_FOUND);
    fx_stop(f);
}

static void test_stream_end_cancels_a_running_stream(void **state) {
    (void)state;
    struct fx *f = fx_start(fb_scenario_echo, NULL);
    struct picolm_generate_params p;
    params_prompt(&p, "infinite");
    picolm_stream *s;
    assert_int_equal(picolm_stream_start(f->c, &p, &s), PICOLM_OK);
    struct picolm_chunk ch;
    assert_int_equal(picolm_stream_next(s, &ch), 1);
    struct picolm_result res = {.size = sizeof(res)};
    assert_int_equal(picolm_stream_end(s, &res), PICOLM_E_CANCELLED);
    assert_int_equal(res.finish_reason, PICOLM_FINISH_CANCELLED);
    /* A stream ended before it was ever read. */
    params_prompt(&p, "short");
    assert_int_equal(picolm_stream_start(f->c, &p, &s), PICOLM_OK);
    int r = picolm_stream_end(s, NULL);
    assert_true(r == PICOLM_OK || r == PICOLM_E_CANCELLED);
    fx_stop(f);
}

static void test_tokenize_and_detokenize(void **state) {
    (void)state;
    struct fx *f = fx_start(fb_scenario_echo, NULL);
    int32_t ids[16];
    size_t n = 99;
    assert_int_equal(picolm_tokenize(f->c, "abc", 0, PICOLM_TOK_ADD_SPECIAL, ids, 16, &n),
                     PICOLM_OK);
    assert_int_equal(n, 4);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 'a');
    assert_int_equal(ids[3], 'c');

    /* Too small a buffer: the size needed, nothing written. */
    int32_t small[2] = {-7, -7};
    assert_int_equal(picolm_tokenize(f->c, "abcdef", 6, 0, small, 2, &n), PICOLM_E_RANGE);
    assert_int_equal(n, 6);
    assert_int_equal(small[0], -7);
    assert_int_equal(picolm_tokenize(f->c, "abcdef", 6, 0, NULL, 0, &n), PICOLM_E_RANGE);
    assert_int_equal(n, 6);
    assert_int_equal(picolm_tokenize(f->c, "x", 1, 0x100, ids, 16, &n), PICOLM_E_INVALID);
    assert_int_equal(picolm_tokenize(f->c, NULL, 1, 0, ids, 16, &n), PICOLM_E_INVALID);
    assert_int_equal(picolm_tokenize(f->c, "x", 1, 0, NULL, 16, &n), PICOLM_E_INVALID);

    char text[8];
    size_t len = 0;
    assert_int_equal(picolm_detokenize(f->c, ids + 1, 3, text, sizeof(text), &len), PICOLM_OK);
    assert_int_equal(len, 3);
    assert_string_equal(text, "abc");
    assert_int_equal(picolm_detokenize(f->c, ids + 1, 3, text, 2, &len), PICOLM_E_RANGE);
    assert_int_equal(len, 3);
    int32_t bad = 300;
    assert_int_equal(picolm_detokenize(f->c, &bad, 1, text, sizeof(text), &len), PICOLM_E_INVALID);
    assert_non_null(strstr(picolm_last_error(f->c), "out of range"));
    assert_int_equal(picolm_detokenize(f->c, NULL, 3, text, sizeof(text), &len), PICOLM_E_INVALID);
    fx_stop(f);
}

static void test_model_info(void **state) {
    (void)state;
    struct fx *f = fx_start(fb_scenario_echo, NULL);
    struct picolm_model_info info = {.size = sizeof(info)};
    assert_int_equal(picolm_model_info(f->c, &info), PICOLM_OK);
    assert_string_equal(info.name, "toy-bytes");
    assert_string_equal(info.architecture, "toy");
    assert_int_equal(info.n_vocab, 256);
    assert_int_equal(info.bos, 1);
    assert_int_equal(info.eos, -1);
    assert_int_equal(info.size, sizeof(info));
    struct picolm_model_info small = {.size = 4};
    assert_int_equal(picolm_model_info(f->c, &small), PICOLM_E_INVALID);
    assert_int_equal(picolm_model_info(f->c, NULL), PICOLM_E_INVALID);
    fx_stop(f);
}

/* ---- Per-request features: messages, template, format, schema, stop, logprobs ---- */

/* Append to a description of what reached the wire. */
static void desc_add(char *d, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void desc_add(char *d, size_t cap, const char *fmt, ...) {
    size_t n = strlen(d);
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(d + n, cap - n, fmt, ap);
    va_end(ap);
}

/* The broker decodes each Generate and answers with one chunk whose text describes every
 * feature field it received, two ids (7, 9) with logprobs (when asked for N, N alternatives
 * per id: id 100 * (i + 1) + j, logprob -(i + j + 1)), then Done. Ends on a Generate with
 * max_tokens 99. */
static void features_scenario(struct fb *b, void *arg) {
    (void)arg;
    for (;;) {
        uint32_t type, len;
        if (fb_recv(b, &type, &len, 5000) != 1 || type != 1)
            return;
        Picolm__V1__Generate *g = picolm__v1__generate__unpack(NULL, len, b->buf);
        if (!g)
            return;
        char d[2048] = "";
        switch (g->input_case) {
        case PICOLM__V1__GENERATE__INPUT_PROMPT:
            desc_add(d, sizeof(d), "prompt=%.*s;", (int)g->prompt.len, g->prompt.data);
            break;
        case PICOLM__V1__GENERATE__INPUT_TOKENS:
            desc_add(d, sizeof(d), "tokens=%zu;", g->tokens ? g->tokens->n_ids : 0);
            break;
        case PICOLM__V1__GENERATE__INPUT_MESSAGES:
            desc_add(d, sizeof(d), "messages=%zu;", g->messages->n_messages);
            for (size_t i = 0; i < g->messages->n_messages; i++)
                desc_add(d, sizeof(d), "%s|%s;", g->messages->messages[i]->role,
                         g->messages->messages[i]->content);
            desc_add(d, sizeof(d), "template=%s;", g->messages->template_);
            break;
        case PICOLM__V1__GENERATE__INPUT__NOT_SET:
        case _PICOLM__V1__GENERATE__INPUT__CASE_IS_INT_SIZE:
        default:
            desc_add(d, sizeof(d), "input=none;");
            break;
        }
        desc_add(d, sizeof(d), "format=%s;schema=%.*s;stop=%zu", g->format, (int)g->json_schema.len,
                 g->json_schema.data, g->n_stop);
        for (size_t i = 0; i < g->n_stop; i++)
            desc_add(d, sizeof(d), "|%.*s", (int)g->stop[i].len, g->stop[i].data);
        desc_add(d, sizeof(d), ";logprobs=%u;max=%u", g->logprobs, g->max_tokens);

        int32_t ids[2] = {7, 9};
        float lps[2] = {-0.25f, -1.5f};
        Picolm__V1__TokenLogprob tl[2 * 20], *tp[2 * 20];
        Picolm__V1__TokenChunk c;
        picolm__v1__token_chunk__init(&c);
        c.request_id = g->request_id;
        c.n_ids = 2;
        c.ids = ids;
        c.text.data = (uint8_t *)d;
        c.text.len = strlen(d);
        uint32_t n_top = g->logprobs > 20 ? 20 : g->logprobs;
        if (g->logprobs) {
            c.n_logprobs = 2;
            c.logprobs = lps;
            for (uint32_t i = 0; i < 2; i++) {
                for (uint32_t j = 0; j < n_top; j++) {
                    Picolm__V1__TokenLogprob *t = &tl[i * n_top + j];
                    picolm__v1__token_logprob__init(t);
                    t->id = (int32_t)(100 * (i + 1) + j);
                    t->logprob = -(float)(i + j + 1);
                    tp[i * n_top + j] = t;
                }
            }
            c.n_top = 2 * n_top;
            c.top = tp;
        }
        fb_send(b, 101, &c.base);
        Picolm__V1__Done dn;
        picolm__v1__done__init(&dn);
        dn.request_id = g->request_id;
        dn.finish_reason = PICOLM__V1__FINISH_REASON__FINISH_REASON_STOP;
        dn.generated_tokens = 2;
        fb_send(b, 102, &dn.base);
        bool last = g->max_tokens == 99;
        picolm__v1__generate__free_unpacked(g, NULL);
        if (last)
            return;
    }
}

struct lp_collect {
    char text[2048];
    size_t len;
    size_t n_ids, n_top;
    int32_t ids[4];
    float lp[4];
    int32_t top_id[4][20];
    float top_lp[4][20];
    int lp_status;
};

static int on_lp_chunk(void *user, const struct picolm_chunk *ch) {
    struct lp_collect *c = user;
    assert_true(ch->text_len < sizeof(c->text) - c->len);
    memcpy(c->text + c->len, ch->text, ch->text_len);
    c->len += ch->text_len;
    c->text[c->len] = '\0';
    c->n_top = picolm_chunk_n_top(ch);
    for (size_t i = 0; i < ch->n_ids && c->n_ids < 4; i++, c->n_ids++) {
        c->ids[c->n_ids] = ch->ids[i];
        c->lp_status = picolm_chunk_logprob(ch, i, &c->lp[c->n_ids]);
        for (size_t j = 0; j < c->n_top && j < 20; j++)
            assert_int_equal(
                picolm_chunk_top(ch, i, j, &c->top_id[c->n_ids][j], &c->top_lp[c->n_ids][j]),
                PICOLM_OK);
    }
    /* Out of range and bad arguments. */
    float x;
    int32_t id;
    if (c->lp_status == PICOLM_OK) {
        assert_int_equal(picolm_chunk_logprob(ch, ch->n_ids, &x), PICOLM_E_RANGE);
        assert_int_equal(picolm_chunk_top(ch, 0, c->n_top, &id, &x), PICOLM_E_RANGE);
    } else {
        assert_int_equal(picolm_chunk_top(ch, 0, 0, &id, &x), PICOLM_E_NOT_FOUND);
    }
    assert_int_equal(picolm_chunk_logprob(ch, 0, NULL), PICOLM_E_INVALID);
    assert_int_equal(picolm_chunk_logprob(NULL, 0, &x), PICOLM_E_INVALID);
    assert_int_equal(picolm_chunk_n_top(NULL), 0);
    /* A copy of the struct still works (it is the same chunk); a foreign chunk does not. */
    struct picolm_chunk copy = *ch;
    assert_int_equal(picolm_chunk_n_top(&copy), c->n_top);
    struct {
        uint8_t before[64];
        int32_t ids[2];
    } fake = {.ids = {1, 2}};
    memset(fake.before, 0, sizeof(fake.before));
    struct picolm_chunk foreign = {.ids = fake.ids, .n_ids = 2};
    assert_int_equal(picolm_chunk_logprob(&foreign, 0, &x), PICOLM_E_INVALID);
    assert_int_equal(picolm_chunk_top(&foreign, 0, 0, &id, &x), PICOLM_E_INVALID);
    return 0;
}

static void test_feature_fields_reach_the_wire(void **state) {
    (void)state;
    struct fx *f = fx_start(features_scenario, NULL);
    struct picolm_message msgs[3] = {
        {"system", "Answer in JSON."}, {"user", "caf\xc3\xa9?"}, {"assistant", NULL}};
    const char *stops[2] = {"\n\n", "END"};
    const char schema[] = "{\"type\":\"object\"}";
    struct picolm_generate_params p;
    picolm_generate_params_init(&p);
    p.messages = msgs;
    p.n_messages = 3;
    p.chat_template = "chatml";
    p.format = "json";
    p.json_schema = schema;
    p.stop = stops;
    p.n_stop = 2;
    p.logprobs = 3;
    struct lp_collect col = {0};
    struct picolm_result res = {.size = sizeof(res)};
    assert_int_equal(picolm_generate(f->c, &p, on_lp_chunk, &col, &res), PICOLM_OK);
    assert_string_equal(col.text, "messages=3;system|Answer in JSON.;user|caf\xc3\xa9?;"
                                  "assistant|;template=chatml;format=json;"
                                  "schema={\"type\":\"object\"};stop=2|\n\n|END;logprobs=3;"
                                  "max=0");
    assert_int_equal(res.finish_reason, PICOLM_FINISH_STOP);
    assert_int_equal(col.n_ids, 2);
    assert_int_equal(col.n_top, 3);
    assert_int_equal(col.lp_status, PICOLM_OK);
    assert_true(col.lp[0] == -0.25f && col.lp[1] == -1.5f);
    for (int i = 0; i < 2; i++) {
        for (int j = 0; j < 3; j++) {
            assert_int_equal(col.top_id[i][j], 100 * (i + 1) + j);
            assert_true(col.top_lp[i][j] == -(float)(i + j + 1));
        }
    }

    /* A schema with an explicit length (not NUL-terminated), no format, a model template,
     * and the stream form with the same accessors. */
    picolm_generate_params_init(&p);
    struct picolm_message one = {"user", "hi"};
    p.messages = &one;
    p.n_messages = 1;
    p.json_schema = "{\"type\":\"integer\"}XXXX";
    p.json_schema_len = 18;
    p.logprobs = 1;
    picolm_stream *st;
    assert_int_equal(picolm_stream_start(f->c, &p, &st), PICOLM_OK);
    struct picolm_chunk ch;
    assert_int_equal(picolm_stream_next(st, &ch), 1);
    assert_int_equal(ch.text_len, strlen("messages=1;user|hi;template=;format=;"
                                         "schema={\"type\":\"integer\"};stop=0;logprobs=1;max=0"));
    assert_memory_equal(ch.text, "messages=1;user|hi;template=;format=;", 37);
    assert_int_equal(picolm_chunk_n_top(&ch), 1);
    float lp;
    int32_t id;
    assert_int_equal(picolm_chunk_logprob(&ch, 1, &lp), PICOLM_OK);
    assert_true(lp == -1.5f);
    assert_int_equal(picolm_chunk_top(&ch, 1, 0, &id, NULL), PICOLM_OK);
    assert_int_equal(id, 200);
    assert_int_equal(picolm_stream_next(st, &ch), 0);
    assert_int_equal(picolm_stream_end(st, NULL), PICOLM_OK);

    /* Without logprobs the chunk has none. */
    params_prompt(&p, "plain");
    p.max_tokens = 99;
    memset(&col, 0, sizeof(col));
    assert_int_equal(picolm_generate(f->c, &p, on_lp_chunk, &col, NULL), PICOLM_OK);
    assert_string_equal(col.text, "prompt=plain;format=;schema=;stop=0;logprobs=0;max=99");
    assert_int_equal(col.n_top, 0);
    assert_int_equal(col.lp_status, PICOLM_E_NOT_FOUND);
    fx_stop(f);
}

static void test_params_of_the_first_layout_still_work(void **state) {
    (void)state;
    struct fx *f = fx_start(fb_scenario_echo, NULL);
    /* A caller built against the first header: its struct ends at n_stop. An exact-size
     * heap copy lets the sanitizers catch any read past it. */
    struct picolm_generate_params full;
    params_prompt(&full, "old");
    full.size = PICOLM_GENERATE_PARAMS_SIZE_V0;
    void *old = malloc(PICOLM_GENERATE_PARAMS_SIZE_V0);
    assert_non_null(old);
    memcpy(old, &full, PICOLM_GENERATE_PARAMS_SIZE_V0);
    struct collect col = {0};
    assert_int_equal(picolm_generate(f->c, old, on_chunk, &col, NULL), PICOLM_OK);
    assert_int_equal(col.len, 3);
    assert_memory_equal(col.text, "old", 3);
    free(old);
    /* Smaller than the first layout: refused. */
    full.size = PICOLM_GENERATE_PARAMS_SIZE_V0 - 1;
    assert_int_equal(picolm_generate(f->c, &full, NULL, NULL, NULL), PICOLM_E_INVALID);
    fx_stop(f);
}

static void test_feature_params_are_checked(void **state) {
    (void)state;
    struct fx *f = fx_start(fb_scenario_echo, NULL);
    struct picolm_message good = {"user", "hi"};
    struct picolm_message no_role = {NULL, "hi"};
    struct picolm_message empty_role = {"", "hi"};
    struct picolm_message bad_utf8 = {"user", "\xc3\x28"};
    struct picolm_message surrogate = {"user", "\xed\xa0\x80"};
    struct picolm_message overlong = {"us\xc0\xaf"
                                      "er",
                                      "x"};
    struct picolm_generate_params p;

#define EXPECT_INVALID(setup)                                                                      \
    do {                                                                                           \
        picolm_generate_params_init(&p);                                                           \
        p.messages = &good;                                                                        \
        p.n_messages = 1;                                                                          \
        setup;                                                                                     \
        assert_int_equal(picolm_generate(f->c, &p, NULL, NULL, NULL), PICOLM_E_INVALID);           \
        assert_true(strlen(picolm_last_error(f->c)) > 0);                                          \
    } while (0)
    EXPECT_INVALID(p.prompt = "also a prompt");
    EXPECT_INVALID(p.n_messages = 0);
    EXPECT_INVALID(p.messages = NULL);
    EXPECT_INVALID(p.messages = &no_role);
    EXPECT_INVALID(p.messages = &empty_role);
    EXPECT_INVALID(p.messages = &bad_utf8);
    EXPECT_INVALID(p.messages = &surrogate);
    EXPECT_INVALID(p.messages = &overlong);
    EXPECT_INVALID(
        (p.messages = NULL, p.n_messages = 0, p.prompt = "x", p.chat_template = "chatml"));
    EXPECT_INVALID(p.chat_template = "caf\xe9");
    EXPECT_INVALID(p.format = "\xff");
    EXPECT_INVALID(p.json_schema_len = 4);
    EXPECT_INVALID(p.logprobs = 5000);
    EXPECT_INVALID(p.reserved = 1);
#undef EXPECT_INVALID
    /* The connection is still fine after refused parameters. */
    params_prompt(&p, "ok");
    struct collect col = {0};
    assert_int_equal(picolm_generate(f->c, &p, on_chunk, &col, NULL), PICOLM_OK);
    assert_int_equal(col.len, 2);
    fx_stop(f);
}

/* ---- A broker that misbehaves ---- */

enum bad_kind {
    BAD_GARBAGE,       /* undecodable payload */
    BAD_TYPE,          /* unknown record type */
    BAD_ID,            /* a response to a request id never issued */
    BAD_LOGPROBS,      /* logprob count != token count */
    BAD_TOP,           /* top logprobs without logprobs, or with an id below -1 */
    BAD_WRONG_KIND,    /* a TokenizeResult for a Generate */
    BAD_SESSION_ERROR, /* Error about the whole session */
    BAD_SILENCE,       /* never answers */
    BAD_TRUNCATED,     /* a valid chunk cut short */
    BAD_RING,          /* a completion ring index that cannot be */
};

static void bad_scenario(struct fb *b, void *arg) {
    enum bad_kind kind = (enum bad_kind)(uintptr_t)arg;
    uint32_t type, len;
    if (fb_recv(b, &type, &len, 5000) != 1)
        return;
    uint64_t id = 0;
    if (type == 1) {
        Picolm__V1__Generate *g = picolm__v1__generate__unpack(NULL, len, b->buf);
        if (g)
            id = g->request_id;
        picolm__v1__generate__free_unpacked(g, NULL);
    }
    switch (kind) {
    case BAD_GARBAGE: {
        uint8_t junk[24];
        memset(junk, 0xff, sizeof(junk));
        fb_send_raw(b, 101, junk, sizeof(junk));
        break;
    }
    case BAD_TYPE:
        fb_send_raw(b, 999, "", 0);
        break;
    case BAD_ID:
    case BAD_TOP:
    case BAD_LOGPROBS:
    case BAD_TRUNCATED: {
        int32_t ids[2] = {5, 6};
        float lp[1] = {-0.5f};
        Picolm__V1__TokenChunk c;
        picolm__v1__token_chunk__init(&c);
        c.request_id = kind == BAD_ID ? id + 1000 : id;
        c.n_ids = 2;
        c.ids = ids;
        c.text.data = (uint8_t *)"xy";
        c.text.len = 2;
        if (kind == BAD_LOGPROBS) {
            c.n_logprobs = 1;
            c.logprobs = lp;
        }
        Picolm__V1__TokenLogprob t0, t1;
        Picolm__V1__TokenLogprob *tp[2] = {&t0, &t1};
        float lp2[2] = {-1.0f, -2.0f};
        picolm__v1__token_logprob__init(&t0);
        picolm__v1__token_logprob__init(&t1);
        t1.id = -5;
        if (kind == BAD_TOP) {
            c.n_logprobs = 2;
            c.logprobs = lp2;
            c.n_top = 2;
            c.top = tp;
        }
        if (kind == BAD_TRUNCATED) {
            uint8_t buf[64];
            size_t n = protobuf_c_message_pack(&c.base, buf);
            fb_send_raw(b, 101, buf, (uint32_t)(n - 1));
        } else {
            fb_send(b, 101, &c.base);
        }
        break;
    }
    case BAD_WRONG_KIND: {
        Picolm__V1__TokenizeResult t;
        picolm__v1__tokenize_result__init(&t);
        t.request_id = id;
        fb_send(b, 104, &t.base);
        break;
    }
    case BAD_SESSION_ERROR: {
        Picolm__V1__Error e;
        picolm__v1__error__init(&e);
        e.code = PICOLM__V1__ERROR_CODE__ERROR_CODE_SHUTTING_DOWN;
        e.message = "draining";
        fb_send(b, 103, &e.base);
        break;
    }
    case BAD_SILENCE:
        break;
    case BAD_RING:
        /* Claim more published bytes than the ring holds, then wake the client. */
        atomic_store_explicit(&b->cq.ctrl->prod, 3u * (uint32_t)b->reg.cq.data_bytes + 8,
                              memory_order_release);
        (void)pl_ipc_doorbell_ring(b->client_fd);
        break;
    }
}

static void run_bad(enum bad_kind kind, int want) {
    struct fx *f = fx_start(bad_scenario, (void *)(uintptr_t)kind);
    struct picolm_generate_params p;
    params_prompt(&p, "hi");
    if (kind == BAD_SILENCE)
        assert_int_equal(picolm_set_timeout(f->c, 50), PICOLM_OK);
    int r = picolm_generate(f->c, &p, NULL, NULL, NULL);
    assert_int_equal(r, want);
    assert_true(strlen(picolm_last_error(f->c)) > 0);
    if (want != PICOLM_E_TIMEOUT) {
        /* A dead connection stays dead, with the same status, without touching the ring. */
        size_t n;
        int32_t ids[4];
        assert_int_equal(picolm_tokenize(f->c, "x", 1, 0, ids, 4, &n), want);
    }
    fx_stop(f);
}

static void test_garbage_record_is_a_protocol_error(void **state) {
    (void)state;
    run_bad(BAD_GARBAGE, PICOLM_E_PROTOCOL);
    run_bad(BAD_TRUNCATED, PICOLM_E_PROTOCOL);
}

static void test_unknown_record_type_or_broken_ring_is_a_protocol_error(void **state) {
    (void)state;
    run_bad(BAD_TYPE, PICOLM_E_PROTOCOL);
    run_bad(BAD_RING, PICOLM_E_PROTOCOL);
}

static void test_inconsistent_responses_are_protocol_errors(void **state) {
    (void)state;
    run_bad(BAD_ID, PICOLM_E_PROTOCOL);
    run_bad(BAD_LOGPROBS, PICOLM_E_PROTOCOL);
    run_bad(BAD_TOP, PICOLM_E_PROTOCOL);
    run_bad(BAD_WRONG_KIND, PICOLM_E_PROTOCOL);
}

static void test_session_error_ends_the_connection(void **state) {
    (void)state;
    run_bad(BAD_SESSION_ERROR, PICOLM_E_SHUTDOWN);
}

static void test_silent_broker_times_out(void **state) {
    (void)state;
    uint64_t t0 = now_ns();
    run_bad(BAD_SILENCE, PICOLM_E_TIMEOUT);
    assert_true(now_ns() - t0 < 5000000000ull);
}

static void test_broker_death_is_noticed_within_100ms(void **state) {
    (void)state;
    struct fx *f = fx_start(fb_scenario_echo, NULL);
    struct picolm_generate_params p;
    params_prompt(&p, "infinite");
    picolm_stream *s;
    assert_int_equal(picolm_stream_start(f->c, &p, &s), PICOLM_OK);
    struct picolm_chunk ch;
    assert_int_equal(picolm_stream_next(s, &ch), 1);
    uint64_t t0 = now_ns();
    assert_int_equal(kill(f->fb.pid, SIGKILL), 0);
    int r;
    while ((r = picolm_stream_next(s, &ch)) == 1)
        ; /* chunks already in the ring are still delivered */
    uint64_t dt = now_ns() - t0;
    assert_int_equal(r, PICOLM_E_BROKER_GONE);
    if (dt >= 100000000ull)
        fail_msg("broker death noticed after %.1f ms", (double)dt / 1e6);
    assert_int_equal(picolm_stream_end(s, NULL), PICOLM_E_BROKER_GONE);
    /* Everything afterwards fails fast the same way. */
    size_t n;
    int32_t ids[4];
    assert_int_equal(picolm_tokenize(f->c, "x", 1, 0, ids, 4, &n), PICOLM_E_BROKER_GONE);
    assert_int_equal(picolm_stream_start(f->c, &p, &s), PICOLM_E_BROKER_GONE);
    fx_stop(f);
}

static void test_streaming_allocates_nothing_per_token(void **state) {
    (void)state;
    if (!COUNT_ALLOCS)
        skip();
#if COUNT_ALLOCS
    struct fx *f = fx_start(fb_scenario_echo, NULL);
    struct picolm_generate_params p;
    params_prompt(&p, "infinite stream of tokens");
    picolm_stream *s;
    assert_int_equal(picolm_stream_start(f->c, &p, &s), PICOLM_OK);
    struct picolm_chunk ch;
    for (int i = 0; i < 64; i++) /* warm-up: queue and arena reach their size */
        assert_int_equal(picolm_stream_next(s, &ch), 1);
    atomic_store(&g_allocs, 0);
    atomic_store(&g_counting, 1);
    size_t bytes = 0;
    for (int i = 0; i < 2000; i++) {
        assert_int_equal(picolm_stream_next(s, &ch), 1);
        bytes += ch.text_len;
    }
    atomic_store(&g_counting, 0);
    assert_int_equal(bytes, 2000);
    long n = atomic_load(&g_allocs);
    if (n)
        fail_msg("%ld allocations while streaming 2000 tokens", n);
    assert_int_equal(picolm_stream_end(s, NULL), PICOLM_E_CANCELLED);
    fx_stop(f);
#endif
}

/* The broker writes three chunks and dies: what it wrote is still delivered, then the death. */
static void die_after_chunks(struct fb *b, void *arg) {
    (void)arg;
    uint32_t type, len;
    if (fb_recv(b, &type, &len, 5000) != 1 || type != 1)
        _exit(40);
    Picolm__V1__Generate *g = picolm__v1__generate__unpack(NULL, len, b->buf);
    if (!g)
        _exit(41);
    for (int i = 0; i < 3; i++) {
        int32_t id = 'a' + i;
        uint8_t ch = (uint8_t)id;
        Picolm__V1__TokenChunk c;
        picolm__v1__token_chunk__init(&c);
        c.request_id = g->request_id;
        c.n_ids = 1;
        c.ids = &id;
        c.text.data = &ch;
        c.text.len = 1;
        fb_send(b, 101, &c.base);
    }
    _exit(0);
}

static void test_records_written_before_death_are_delivered(void **state) {
    (void)state;
    struct fx *f = fx_start(die_after_chunks, NULL);
    struct picolm_generate_params p;
    params_prompt(&p, "x");
    struct collect col = {0};
    int r = picolm_generate(f->c, &p, on_chunk, &col, NULL);
    assert_int_equal(r, PICOLM_E_BROKER_GONE);
    assert_int_equal(col.n_chunks, 3);
    assert_memory_equal(col.text, "abc", 3);
    fx_stop(f);
}

/* A broker that starts reading late, then serves normally: the submission ring fills up. */
static void slow_start(struct fb *b, void *arg) {
    usleep(300000);
    fb_scenario_echo(b, arg);
}

static void test_full_submission_ring_waits_and_drains_completions(void **state) {
    (void)state;
    enum { N = 1500 };
    struct fx *f = fx_start(slow_start, NULL);
    static picolm_stream *s[N];
    struct picolm_generate_params p;
    /* ~64-byte records: N of them are more than the 64 KiB ring holds. */
    params_prompt(&p, "0123456789012345678901234567890123456789");
    alarm(60); /* a deadlock is a failure, not a hang */
    for (int i = 0; i < N; i++)
        assert_int_equal(picolm_stream_start(f->c, &p, &s[i]), PICOLM_OK);
    size_t ok = 0, refused = 0;
    struct picolm_chunk ch;
    for (int i = 0; i < N; i++) {
        int r;
        while ((r = picolm_stream_next(s[i], &ch)) == 1)
            ;
        if (r == 0)
            ok++;
        else if (r == PICOLM_E_INVALID) /* the toy broker runs 16 generations at most */
            refused++;
        else
            fail_msg("stream %d: %s: %s", i, picolm_strerror(r), picolm_last_error(f->c));
        (void)picolm_stream_end(s[i], NULL);
    }
    alarm(0);
    assert_int_equal(ok + refused, N);
    assert_true(ok >= 16);
    fx_stop(f);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strerror_names_every_status),
        cmocka_unit_test(test_params_init_sets_size_and_defaults),
        cmocka_unit_test(test_null_arguments_are_invalid),
        cmocka_unit_test(test_connect_to_missing_socket_is_unreachable),
        cmocka_unit_test(test_connect_rejects_bad_paths),
        cmocka_unit_test(test_connect_reports_broker_refusals),
        cmocka_unit_test(test_generate_streams_every_chunk),
        cmocka_unit_test(test_result_respects_caller_size),
        cmocka_unit_test(test_generate_rejects_bad_params),
        cmocka_unit_test(test_broker_error_reaches_the_caller),
        cmocka_unit_test(test_streams_interleave_on_one_connection),
        cmocka_unit_test(test_callback_can_stop_generation),
        cmocka_unit_test(test_cancel_from_another_thread),
        cmocka_unit_test(test_stream_end_cancels_a_running_stream),
        cmocka_unit_test(test_streaming_allocates_nothing_per_token),
        cmocka_unit_test(test_tokenize_and_detokenize),
        cmocka_unit_test(test_model_info),
        cmocka_unit_test(test_feature_fields_reach_the_wire),
        cmocka_unit_test(test_params_of_the_first_layout_still_work),
        cmocka_unit_test(test_feature_params_are_checked),
        cmocka_unit_test(test_garbage_record_is_a_protocol_error),
        cmocka_unit_test(test_unknown_record_type_or_broken_ring_is_a_protocol_error),
        cmocka_unit_test(test_inconsistent_responses_are_protocol_errors),
        cmocka_unit_test(test_session_error_ends_the_connection),
        cmocka_unit_test(test_silent_broker_times_out),
        cmocka_unit_test(test_broker_death_is_noticed_within_100ms),
        cmocka_unit_test(test_records_written_before_death_are_delivered),
        cmocka_unit_test(test_full_submission_ring_waits_and_drains_completions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
