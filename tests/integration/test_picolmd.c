/* SPDX-License-Identifier: MIT */
/* picolmd end to end: a real daemon on a temporary socket dir with stories260K, real client
 * processes. Exact greedy tokens for 8 concurrent clients against in-process decoding (also
 * on the quantized tiny-llama models, whose batched steps take the tiled kernels),
 * cancel, SIGKILLed client (KV back within 100 ms), connect/disconnect churn (no fd or RSS
 * growth), KV pool exhaustion, malformed records, SIGTERM drain, residency vs smaps. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "pl/engine_model.h"
#include "pl/engine_tokenizer.h"
#include "pl/picolm.pb-c.h"
#include "pl_test_client.h"
#include "records.h"

static char model_path[4096];

struct daemon {
    pid_t pid;
    char dir[64];
};

static uint64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The daemon of the running test: a failed assertion jumps out of the test before its
 * daemon_stop, and a daemon left running would hold the test's output pipe open (ctest then
 * waits for its timeout). The next daemon_start, and main at the end, reap it. */
static pid_t g_live;

static void reap_leftover(void) {
    if (g_live > 0) {
        kill(g_live, SIGKILL);
        (void)waitpid(g_live, NULL, 0);
    }
    g_live = 0;
}

static void daemon_start(struct daemon *d, const char *const *extra) {
    const char *args[40];
    reap_leftover();
    int n = 0;
    strcpy(d->dir, "/tmp/picolmd-test.XXXXXX");
    assert_non_null(mkdtemp(d->dir));
    args[n++] = PL_BINARY_DIR "/bin/picolmd";
    args[n++] = "--model";
    args[n++] = model_path;
    args[n++] = "--socket-dir";
    args[n++] = d->dir;
    args[n++] = "--foreground";
    args[n++] = "--ctx";
    args[n++] = "256";
    args[n++] = "--log-level";
    args[n++] = "warn";
    for (int i = 0; extra && extra[i]; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    d->pid = fork();
    assert_true(d->pid >= 0);
    if (d->pid == 0) {
        execv(args[0], (char *const *)args);
        _exit(127);
    }
    g_live = d->pid;
    for (int i = 0; i < 500; i++) {
        Picolm__Admin__V1__AdminResponse *resp = NULL;
        if (pl_test_admin_status(d->dir, &resp) == 0) {
            picolm__admin__v1__admin_response__free_unpacked(resp, NULL);
            return;
        }
        usleep(10000);
    }
    fail_msg("picolmd did not come up");
}

static int daemon_stop(struct daemon *d) {
    int st = 0;
    kill(d->pid, SIGTERM);
    assert_int_equal(waitpid(d->pid, &st, 0), d->pid);
    g_live = 0;
    char p[128];
    snprintf(p, sizeof(p), "%s/picolm.sock", d->dir);
    unlink(p);
    snprintf(p, sizeof(p), "%s/admin.sock", d->dir);
    unlink(p);
    rmdir(d->dir);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static uint64_t kv_used(const char *dir) {
    Picolm__Admin__V1__AdminResponse *resp = NULL;
    assert_int_equal(pl_test_admin_status(dir, &resp), 0);
    uint64_t u = resp->status->kv->used_tokens;
    picolm__admin__v1__admin_response__free_unpacked(resp, NULL);
    return u;
}

/* ---- In-process reference ---- */

static const char *prompts[8] = {"Once upon a time", "The little dog",   "Lily wanted to",
                                 "One day, a big",   "Tom and Sue went", "The sun was",
                                 "There was a girl", "A bird sat on"};

#define MAX_NEW 24

static void reference(const char *text, int32_t *out, uint32_t *n_out) {
    struct pl_model *m = NULL;
    struct pl_ctx *c = NULL;
    struct pl_model_opts mo = {.n_threads = 1};
    assert_int_equal(pl_model_load(model_path, &mo, &m, NULL, 0), 0);
    struct pl_ctx_opts co = {.n_ctx = 256, .n_seq = 1};
    assert_int_equal(pl_ctx_new(m, &co, &c), 0);
    const struct pl_tokenizer *tok = pl_model_tokenizer(m);
    uint32_t nv = pl_model_hparams(m)->n_vocab;
    int32_t ids[256], pos[256], seq[256] = {0};
    size_t n = 0;
    assert_int_equal(pl_tokenizer_encode(tok, text, strlen(text), true, false, ids, 256, &n), 0);
    for (size_t i = 0; i < n; i++)
        pos[i] = (int32_t)i;
    float *lg = malloc(nv * sizeof(float));
    struct pl_batch b = {.n = (uint32_t)n, .token = ids, .pos = pos, .seq = seq};
    assert_int_equal(pl_ctx_decode(c, &b, lg), 0);
    *n_out = 0;
    for (uint32_t k = 0; k < MAX_NEW; k++) {
        int32_t best = 0;
        for (uint32_t v = 1; v < nv; v++)
            if (lg[v] > lg[best])
                best = (int32_t)v;
        if (pl_tokenizer_is_eog(tok, best))
            break;
        out[(*n_out)++] = best;
        int32_t p = (int32_t)(n + k), t = best, sq = 0;
        struct pl_batch b1 = {.n = 1, .token = &t, .pos = &p, .seq = &sq};
        assert_int_equal(pl_ctx_decode(c, &b1, lg), 0);
    }
    free(lg);
    pl_ctx_free(c);
    pl_model_free(m);
}

/* ---- Tests ---- */

static void test_eight_concurrent_greedy_clients_match_in_process(void **state) {
    (void)state;
    struct daemon d;
    daemon_start(&d, NULL);
    int go[2], res[2];
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(res), 0);
    pid_t kids[8];
    for (int i = 0; i < 8; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            struct pl_test_client c;
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            static struct pl_test_result r;
            char x;
            if (pl_test_client_connect(d.dir, &c) < 0)
                _exit(2);
            if (read(go[0], &x, 1) != 1)
                _exit(3);
            if (pl_test_client_generate(&c, 100 + i, NULL, 0, prompts[i], MAX_NEW, true, false) <
                    0 ||
                pl_test_client_collect(&c, 100 + i, &r, 10000, NULL, NULL) < 0)
                _exit(4);
            /* One write (< PIPE_BUF) so the children's results cannot interleave. */
            uint32_t msg[2 + MAX_NEW] = {(uint32_t)i, r.n_ids};
            if (r.n_ids > MAX_NEW)
                _exit(5);
            memcpy(msg + 2, r.ids, r.n_ids * 4);
            if (write(res[1], msg, sizeof(msg)) != (ssize_t)sizeof(msg))
                _exit(5);
            _exit(0);
        }
    }
    usleep(100000);
    char gobuf[8] = {0};
    assert_int_equal(write(go[1], gobuf, 8), 8);
    for (int i = 0; i < 8; i++) {
        int st;
        assert_true(waitpid(kids[i], &st, 0) > 0);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    for (int k = 0; k < 8; k++) {
        uint32_t hdr[2];
        int32_t got[MAX_NEW], want[MAX_NEW];
        uint32_t n_want;
        uint32_t msg[2 + MAX_NEW];
        assert_int_equal(read(res[0], msg, sizeof(msg)), sizeof(msg));
        hdr[0] = msg[0];
        hdr[1] = msg[1];
        assert_true(hdr[0] < 8 && hdr[1] <= MAX_NEW);
        memcpy(got, msg + 2, hdr[1] * 4);
        reference(prompts[hdr[0]], want, &n_want);
        assert_int_equal(hdr[1], n_want);
        assert_memory_equal(got, want, n_want * 4);
    }
    assert_int_equal(daemon_stop(&d), 0);
}

/* The same on quantized models whose matrices go through the tiled kernels (AMX or AVX-512
 * where the CPU has them): a token's logits must not depend on how many other sessions share
 * its step (up to 8 tokens: the multi-token decode kernels, or AMX half tiles from 5; more:
 * tiles). Q4_K + Q6_K, Q8_0 (tied output),
 * Q4_0. */
static char test_data[4096];

static void eight_clients_on(const char *name) {
    char saved[sizeof(model_path)];
    memcpy(saved, model_path, sizeof(saved));
    snprintf(model_path, sizeof(model_path), "%s/models/%s", test_data, name);
    if (access(model_path, R_OK) != 0)
        fail_msg("missing test model %s", model_path);
    test_eight_concurrent_greedy_clients_match_in_process(NULL);
    memcpy(model_path, saved, sizeof(saved));
}

static void test_eight_clients_match_in_process_q4_k_m(void **state) {
    (void)state;
    eight_clients_on("tiny-llama-spm-Q4_K_M.gguf");
}

static void test_eight_clients_match_in_process_q8_0(void **state) {
    (void)state;
    eight_clients_on("tiny-llama-spm-tied-Q8_0.gguf");
}

static void test_eight_clients_match_in_process_q4_0(void **state) {
    (void)state;
    eight_clients_on("tiny-llama-gpt2-Q4_0.gguf");
}

static struct pl_test_client *cancel_client;
static int cancel_sent;
static void send_cancel(void *arg) {
    (void)arg;
    if (cancel_sent++)
        return;
    Picolm__V1__Cancel c = PICOLM__V1__CANCEL__INIT;
    c.request_id = 7;
    assert_int_equal(pl_test_client_send(cancel_client, PL_DAEMON_REC_CANCEL, &c.base), 0);
}

static void test_cancel_mid_stream_gives_done_cancelled(void **state) {
    (void)state;
    struct daemon d;
    struct pl_test_client c;
    static struct pl_test_result r;
    daemon_start(&d, NULL);
    assert_int_equal(pl_test_client_connect(d.dir, &c), 0);
    cancel_client = &c;
    cancel_sent = 0;
    assert_int_equal(pl_test_client_generate(&c, 7, NULL, 0, "Once", 0, true, true), 0);
    assert_int_equal(pl_test_client_collect(&c, 7, &r, 10000, send_cancel, NULL), 0);
    assert_int_equal(r.finish, PICOLM__V1__FINISH_REASON__FINISH_REASON_CANCELLED);
    assert_true(r.generated < 250);
    pl_test_client_close(&c);
    assert_int_equal(daemon_stop(&d), 0);
}

/* One request slot per session: each request is sent the moment the previous one's Done is
 * read, so its slot must be free by then (the broker announces finished requests to its event
 * thread lazily, and that thread must take them before it reads the next submission). */
static void test_back_to_back_requests_on_one_slot(void **state) {
    (void)state;
    struct daemon d;
    struct pl_test_client c;
    static struct pl_test_result r;
    const char *extra[] = {"--max-requests", "1", NULL};
    daemon_start(&d, extra);
    assert_int_equal(pl_test_client_connect(d.dir, &c), 0);
    for (uint64_t id = 1; id <= 300; id++) {
        assert_int_equal(pl_test_client_generate(&c, id, NULL, 0, "Once", 1, id % 2, true), 0);
        assert_int_equal(pl_test_client_collect(&c, id, &r, 10000, NULL, NULL), 0);
        if (r.error_code)
            fail_msg("request %llu: error %u", (unsigned long long)id, r.error_code);
        assert_int_equal(r.finish, PICOLM__V1__FINISH_REASON__FINISH_REASON_LENGTH);
        assert_int_equal(r.generated, 1);
    }
    pl_test_client_close(&c);
    assert_int_equal(daemon_stop(&d), 0);
}

static void test_sigkill_client_returns_kv_within_100ms(void **state) {
    (void)state;
    struct daemon d;
    /* A context long enough that four unread streams overflow the completion ring: the
     * requests then stall mid-stream, holding their KV blocks, until the client dies. */
    const char *extra[] = {"--ctx", "2048", NULL};
    daemon_start(&d, extra);
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t kid = fork();
    if (kid == 0) {
        struct pl_test_client c;
        static uint8_t buf[65536];
        uint32_t type, len;
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (pl_test_client_connect(d.dir, &c) < 0)
            _exit(2);
        for (uint64_t id = 1; id <= 4; id++)
            if (pl_test_client_generate(&c, id, NULL, 0, "Once upon", 0, true, true) < 0)
                _exit(2);
        if (pl_test_client_recv(&c, &type, buf, sizeof(buf), &len, 5000) != 1)
            _exit(2);
        (void)!write(p[1], "x", 1);
        pause(); /* stop reading: the daemon stalls this session's streams */
        _exit(0);
    }
    char x;
    assert_int_equal(read(p[0], &x, 1), 1);
    /* Wait until the streams are stalled on the full ring (KV in use and not changing). */
    uint64_t prev = 0, t_wait = now_ms();
    for (;;) {
        uint64_t u = kv_used(d.dir);
        if (u > 0 && u == prev)
            break;
        prev = u;
        if (now_ms() - t_wait > 10000) {
            kill(kid, SIGKILL);
            fail_msg("streams never stalled (kv used %llu)", (unsigned long long)u);
        }
        usleep(50000);
    }
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
    uint64_t t0 = now_ms();
    /* 100 ms, stretched by PICOLM_TEST_TIME_SCALE in sanitizer builds (cmake sets it). */
    const char *scale_env = getenv("PICOLM_TEST_TIME_SCALE");
    uint64_t scale = scale_env && atoi(scale_env) > 0 ? (uint64_t)atoi(scale_env) : 1;
    while (kv_used(d.dir) != 0 && now_ms() - t0 < 1000 * scale)
        usleep(1000);
    uint64_t dt = now_ms() - t0;
    assert_int_equal(kv_used(d.dir), 0);
    if (dt > 100 * scale)
        fail_msg("KV came back after %llu ms (limit %llu ms)", (unsigned long long)dt,
                 (unsigned long long)(100 * scale));
    assert_int_equal(daemon_stop(&d), 0);
}

static unsigned count_fds(pid_t pid) {
    char p[64];
    unsigned n = 0;
    snprintf(p, sizeof(p), "/proc/%d/fd", (int)pid);
    DIR *dd = opendir(p);
    assert_non_null(dd);
    while (readdir(dd))
        n++;
    closedir(dd);
    return n;
}

static long rss_kb(pid_t pid) {
    char p[64], line[256];
    long kb = -1;
    snprintf(p, sizeof(p), "/proc/%d/status", (int)pid);
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

static void test_thousand_connect_cycles_leak_nothing(void **state) {
    (void)state;
    struct daemon d;
    daemon_start(&d, NULL);
    struct pl_test_client c;
    /* Warm up, so that lazily touched pages count in the baseline. */
    for (int i = 0; i < 50; i++) {
        assert_int_equal(pl_test_client_connect(d.dir, &c), 0);
        pl_test_client_close(&c);
    }
    usleep(200000);
    unsigned fd0 = count_fds(d.pid);
    long rss0 = rss_kb(d.pid);
    for (int i = 0; i < 1000; i++) {
        assert_int_equal(pl_test_client_connect(d.dir, &c), 0);
        pl_test_client_close(&c);
    }
    usleep(300000);
    unsigned fd1 = count_fds(d.pid);
    long rss1 = rss_kb(d.pid);
    assert_int_equal(fd1, fd0);
#if defined(__SANITIZE_ADDRESS__)
    /* ASan keeps freed blocks resident in its quarantine (up to 256 MB): RSS says nothing
     * here; the fd count above still holds. */
    (void)rss0;
    (void)rss1;
#else
    assert_true(rss1 - rss0 < 2048);
#endif
    assert_int_equal(daemon_stop(&d), 0);
}

/* A client that closes and reconnects at once finds its old session still being released
 * (the scheduler hands the slot back asynchronously): with one session slot, it waits for
 * that slot instead of being refused, every time. */
static void test_reconnect_waits_for_a_closing_slot(void **state) {
    (void)state;
    struct daemon d;
    static const char *const extra[] = {"--max-sessions", "1", NULL};
    daemon_start(&d, extra);
    struct pl_test_client c;
    for (int i = 0; i < 300; i++) {
        const int r = pl_test_client_connect(d.dir, &c);
        if (r != 0)
            fail_msg("cycle %d: connect: %d", i, r);
        pl_test_client_close(&c);
    }
    assert_int_equal(daemon_stop(&d), 0);
}

static void test_full_kv_pool_gives_resource_exhausted(void **state) {
    (void)state;
    struct daemon d;
    /* The pool is smaller than the context; request 2 holds nearly all of it for 500
     * tokens (tens of ms even on this tiny model), so request 3, sent right after, meets a
     * full pool however the client and the daemon are scheduled. */
    const char *extra[] = {"--kv-pool-tokens", "512", "--ctx", "1024", "--queue-max", "0", NULL};
    daemon_start(&d, extra);
    struct pl_test_client c;
    static struct pl_test_result r;
    assert_int_equal(pl_test_client_connect(d.dir, &c), 0);
    /* More than the whole pool. */
    assert_int_equal(pl_test_client_generate(&c, 1, NULL, 0, "Once", 600, true, true), 0);
    assert_int_equal(pl_test_client_collect(&c, 1, &r, 5000, NULL, NULL), 0);
    assert_int_equal(r.error_code, PICOLM__V1__ERROR_CODE__ERROR_CODE_RESOURCE_EXHAUSTED);
    /* Fill the pool, then one more. */
    assert_int_equal(pl_test_client_generate(&c, 2, NULL, 0, "Once", 500, false, true), 0);
    assert_int_equal(pl_test_client_generate(&c, 3, NULL, 0, "Once", 500, false, true), 0);
    assert_int_equal(pl_test_client_collect(&c, 3, &r, 5000, NULL, NULL), 0);
    assert_int_equal(r.error_code, PICOLM__V1__ERROR_CODE__ERROR_CODE_RESOURCE_EXHAUSTED);
    assert_int_equal(pl_test_client_collect(&c, 2, &r, 10000, NULL, NULL), 0);
    assert_int_equal(r.finish, PICOLM__V1__FINISH_REASON__FINISH_REASON_LENGTH);
    assert_int_equal(r.n_ids, 500);
    pl_test_client_close(&c);
    assert_int_equal(daemon_stop(&d), 0);
}

static void test_malformed_record_ends_only_that_session(void **state) {
    (void)state;
    struct daemon d;
    daemon_start(&d, NULL);
    struct pl_test_client bad, good;
    static struct pl_test_result r;
    assert_int_equal(pl_test_client_connect(d.dir, &bad), 0);
    assert_int_equal(pl_test_client_connect(d.dir, &good), 0);
    static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
    assert_int_equal(pl_test_client_send_raw(&bad, PL_DAEMON_REC_GENERATE, junk, sizeof(junk)), 0);
    /* The daemon closes the bad session's socket. */
    char x;
    struct timeval tv = {.tv_sec = 5};
    setsockopt(bad.sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    assert_int_equal(recv(bad.sock, &x, 1, 0), 0);
    assert_int_equal(pl_test_client_generate(&good, 5, NULL, 0, "Once", 8, true, true), 0);
    assert_int_equal(pl_test_client_collect(&good, 5, &r, 5000, NULL, NULL), 0);
    assert_int_equal(r.finish, PICOLM__V1__FINISH_REASON__FINISH_REASON_LENGTH);
    assert_int_equal(r.n_ids, 8);
    pl_test_client_close(&bad);
    pl_test_client_close(&good);
    assert_int_equal(daemon_stop(&d), 0);
}

static pid_t drain_pid;
static int drain_sent;
static void send_sigterm(void *arg) {
    (void)arg;
    if (!drain_sent++)
        kill(drain_pid, SIGTERM);
}

static void test_sigterm_drains_then_exits_zero(void **state) {
    (void)state;
    struct daemon d;
    daemon_start(&d, NULL);
    struct pl_test_client c;
    static struct pl_test_result r;
    assert_int_equal(pl_test_client_connect(d.dir, &c), 0);
    drain_pid = d.pid;
    drain_sent = 0;
    assert_int_equal(pl_test_client_generate(&c, 9, NULL, 0, "Once", 150, true, true), 0);
    assert_int_equal(pl_test_client_collect(&c, 9, &r, 10000, send_sigterm, NULL), 0);
    assert_int_equal(r.finish, PICOLM__V1__FINISH_REASON__FINISH_REASON_LENGTH);
    assert_int_equal(r.n_ids, 150);
    int st;
    assert_int_equal(waitpid(d.pid, &st, 0), d.pid);
    g_live = 0;
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    pl_test_client_close(&c);
    rmdir(d.dir);
}

static void test_residency_matches_smaps(void **state) {
    (void)state;
    struct daemon d;
    daemon_start(&d, NULL);
    Picolm__Admin__V1__AdminResponse *resp = NULL;
    assert_int_equal(pl_test_admin_status(d.dir, &resp), 0);
    Picolm__Admin__V1__Residency *res = resp->status->residency;
    assert_non_null(res);
    assert_true(res->backing_reason[0] != '\0');
    /* Find our mapping in smaps and check what status says about it. */
    struct pl_test_smaps sm = {0};
    const bool mapped = strcmp(res->backing, "file") != 0;
    if (mapped)
        assert_int_equal(pl_test_smaps(d.pid, res->address, &sm), 0);
    if (mapped) {
        /* hugetlb pages are never swapped: mlock leaves their mapping alone, and smaps counts
         * them as Private_Hugetlb, not Locked */
        if (!strcmp(res->backing, "hugetlb")) {
            assert_int_equal(sm.kernel_page_kb, 2048);
            assert_int_equal(sm.hugetlb_kb, sm.size_kb);
            assert_int_equal(sm.hugetlb_kb * 1024, res->bytes_hugetlb);
        } else if (res->locked) {
            assert_int_equal(sm.locked_kb, sm.size_kb);
            assert_int_equal(sm.locked_kb * 1024, res->bytes_locked);
        }
        /* khugepaged may collapse more of the mapping between the status answer and this
         * read (slowly, under sanitizers): THP bytes only grow, and never past the mapping. */
        if (!strcmp(res->backing, "thp")) {
            assert_true(sm.anon_huge_kb * 1024 >= res->bytes_thp);
            assert_true(sm.anon_huge_kb <= sm.size_kb);
        }
        assert_int_equal(sm.size_kb * 1024, res->bytes_mapped);
    }
    picolm__admin__v1__admin_response__free_unpacked(resp, NULL);
    assert_int_equal(daemon_stop(&d), 0);
}

int main(void) {
    const char *data = getenv("PICOLM_TEST_DATA");
    if (!data)
        return 77;
    snprintf(test_data, sizeof(test_data), "%s", data);
    snprintf(model_path, sizeof(model_path), "%s/models/stories260K.gguf", data);
    if (access(model_path, R_OK) != 0)
        return 77;
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eight_concurrent_greedy_clients_match_in_process),
        cmocka_unit_test(test_eight_clients_match_in_process_q4_k_m),
        cmocka_unit_test(test_eight_clients_match_in_process_q8_0),
        cmocka_unit_test(test_eight_clients_match_in_process_q4_0),
        cmocka_unit_test(test_cancel_mid_stream_gives_done_cancelled),
        cmocka_unit_test(test_back_to_back_requests_on_one_slot),
        cmocka_unit_test(test_sigkill_client_returns_kv_within_100ms),
        cmocka_unit_test(test_thousand_connect_cycles_leak_nothing),
        cmocka_unit_test(test_reconnect_waits_for_a_closing_slot),
        cmocka_unit_test(test_full_kv_pool_gives_resource_exhausted),
        cmocka_unit_test(test_malformed_record_ends_only_that_session),
        cmocka_unit_test(test_sigterm_drains_then_exits_zero),
        cmocka_unit_test(test_residency_matches_smaps),
    };
    int r = cmocka_run_group_tests(tests, NULL, NULL);
    reap_leftover();
    return r;
}
