/* SPDX-License-Identifier: MIT */
/* Load against a real picolmd with libpicolm client processes (label load): N clients x R
 * requests (or for S seconds) with mixed prompt lengths and lengths to generate, of which
 * about 10% are cancelled mid-stream and 5% end with the client dropping its connection
 * mid-stream (and connecting again). Every request must either complete with its full token
 * count, or end with the reason the client caused; every token stream must be exactly the
 * greedy reference (or a prefix of it when cut short): no token lost or duplicated. After the
 * run: no session or KV block in use, the daemon's fds as before, its RSS grown by < 4 MiB.
 * Scale: PL_LOAD_CLIENTS (default 16), PL_LOAD_REQUESTS (default 25), PL_LOAD_SECONDS (if set:
 * each client runs for that long instead). tests/load/soak.sh runs the big one. */
#include <errno.h>
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

#include "daemon_harness.h"
#include "picolm.h"

#define N_PROMPTS 6
#define REF_LEN 64

static char model[4096];
static struct pl_test_daemon daemon_;
static char prompts[N_PROMPTS][2048];
static int32_t ref[N_PROMPTS][REF_LEN];
static const uint32_t lengths[] = {8, 24, 64};

struct tally { /* per client, sent to the parent */
    uint64_t requests, completed, cancelled, dropped, tokens, bad;
};

/* No session open any more; *ret_kv: KV tokens still in use (the prefix cache may keep the
 * blocks of the prompts' prefixes). */
static int wait_no_sessions(uint64_t *ret_kv) {
    uint64_t t0 = pl_test_now_ms();
    for (;;) {
        uint32_t s = 1;
        if (pl_test_daemon_status(&daemon_, &s, ret_kv) == 0 && s == 0)
            return 0;
        if (pl_test_now_ms() - t0 > 2000)
            return -ETIMEDOUT;
        usleep(1000);
    }
}

static int teardown(void **state) {
    (void)state;
    pl_test_daemon_done(&daemon_);
    return 0;
}

static void make_prompts(void) {
    static const char *words = "Once upon a time there was a little girl named Lily who liked "
                               "to play in the park with her big red ball and her dog. ";
    for (int i = 0; i < N_PROMPTS; i++) {
        prompts[i][0] = '\0';
        /* 1, 2, 4, 8 ... sentences: from a few tokens to ~150 */
        int reps = 1 << (i / 2);
        for (int k = 0; k < reps && strlen(prompts[i]) + strlen(words) < sizeof(prompts[i]); k++)
            strcat(prompts[i], words);
        if (i % 2)
            prompts[i][strlen(prompts[i]) / 2] = '\0'; /* odd ones: cut mid-sentence */
    }
}

static void params(struct picolm_generate_params *p, int pi, uint32_t max) {
    picolm_generate_params_init(p);
    p->prompt = prompts[pi];
    p->max_tokens = max;
    p->flags = PICOLM_GEN_IGNORE_EOS;
    p->sampling.temperature = 0;
}

/* One request on c. mode: 0 normal, 1 cancel after a few chunks, 2 drop the connection after
 * a few chunks. Returns 0 (accounted in t), or -1 on a wrong outcome. *pc may be replaced. */
static int one_request(picolm_client **pc, const char *path, int pi, uint32_t max, int mode,
                       uint32_t cut, struct tally *t) {
    struct picolm_generate_params p;
    params(&p, pi, max);
    picolm_stream *st = NULL;
    size_t n = 0;
    bool cancel_sent = false;
    t->requests++;
    if (picolm_stream_start(*pc, &p, &st) != PICOLM_OK)
        return -1;
    for (;;) {
        struct picolm_chunk ch;
        int r = picolm_stream_next(st, &ch);
        if (r == 1) {
            for (size_t i = 0; i < ch.n_ids; i++) {
                if (n >= max || ch.ids[i] != ref[pi][n])
                    return -1; /* a token too many, or not the reference: lost or duplicated */
                n++;
            }
            if (n >= cut && mode == 1 && !cancel_sent) {
                if (picolm_cancel(*pc, picolm_stream_id(st)) != PICOLM_OK)
                    return -1;
                cancel_sent = true;
            }
            if (n >= cut && mode == 2) {
                picolm_close(*pc); /* frees the stream too */
                *pc = NULL;
                t->dropped++;
                t->tokens += n;
                return picolm_connect(path, pc) == PICOLM_OK ? 0 : -1;
            }
            continue;
        }
        struct picolm_result res = {.size = sizeof(res)};
        int end = picolm_stream_end(st, &res);
        t->tokens += n;
        if (r == 0 && end == PICOLM_OK && n == max && res.generated_tokens == max) {
            t->completed++;
            return 0;
        }
        if (r == PICOLM_E_CANCELLED && cancel_sent && n <= max) {
            t->cancelled++;
            return 0;
        }
        fprintf(stderr, "load: request ended %d/%d with %zu of %u tokens (mode %d)\n", r, end, n,
                max, mode);
        return -1;
    }
}

static void client(const char *path, int idx, uint64_t n_req, uint64_t seconds, int res_fd) {
    struct tally t = {0};
    picolm_client *c = NULL;
    uint64_t rng = 0x9e3779b97f4a7c15ull * (uint64_t)(idx + 1);
    if (picolm_connect(path, &c) != PICOLM_OK)
        _exit(2);
    uint64_t t_end = pl_test_now_ms() + seconds * 1000;
    for (uint64_t k = 0; seconds ? pl_test_now_ms() < t_end : k < n_req; k++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        int pi = (int)(rng % N_PROMPTS);
        uint32_t max = lengths[(rng >> 8) % 3];
        uint32_t roll = (uint32_t)((rng >> 16) % 100);
        int mode = roll < 10 ? 1 : roll < 15 ? 2 : 0;
        uint32_t cut = 1 + (uint32_t)((rng >> 24) % (max / 2 + 1));
        if (one_request(&c, path, pi, max, mode, cut, &t) < 0)
            t.bad++;
        if (!c)
            _exit(3);
    }
    picolm_close(c);
    (void)!write(res_fd, &t, sizeof(t));
    _exit(0);
}

static void test_clients_requests_nothing_lost(void **state) {
    (void)state;
    struct pl_test_daemon *d = &daemon_;
    const char *env;
    int n_clients = (env = getenv("PL_LOAD_CLIENTS")) ? atoi(env) : 16;
    uint64_t n_req = (env = getenv("PL_LOAD_REQUESTS")) ? strtoull(env, NULL, 10) : 25;
    uint64_t seconds = (env = getenv("PL_LOAD_SECONDS")) ? strtoull(env, NULL, 10) : 0;
    /* Room for every client's request at once (KV and queue): a refusal for lack of room
     * would be an outcome no client caused. */
    char maxs[16], kv[16], queue[16];
    (void)snprintf(maxs, sizeof(maxs), "%d", n_clients + 16);
    (void)snprintf(kv, sizeof(kv), "%d", (n_clients + 2) * 256);
    (void)snprintf(queue, sizeof(queue), "%d", n_clients * 2);
    const char *extra[] = {
        "--max-sessions", maxs, "--kv-pool-tokens", kv, "--queue-max", queue, NULL};
    assert_int_equal(pl_test_daemon_start(d, model, extra), 0);
    char path[128];
    (void)snprintf(path, sizeof(path), "%s/picolm.sock", d->dir);

    /* Greedy references, one client alone; then the baseline of fds and RSS. */
    make_prompts();
    picolm_client *c = NULL;
    assert_int_equal(picolm_connect(path, &c), PICOLM_OK);
    for (int i = 0; i < N_PROMPTS; i++) {
        struct picolm_generate_params p;
        params(&p, i, REF_LEN);
        picolm_stream *st = NULL;
        assert_int_equal(picolm_stream_start(c, &p, &st), PICOLM_OK);
        size_t n = 0;
        struct picolm_chunk ch;
        int r;
        while ((r = picolm_stream_next(st, &ch)) == 1)
            for (size_t k = 0; k < ch.n_ids && n < REF_LEN; k++)
                ref[i][n++] = ch.ids[k];
        assert_int_equal(r, 0);
        assert_int_equal(n, REF_LEN);
        assert_int_equal(picolm_stream_end(st, NULL), PICOLM_OK);
    }
    picolm_close(c);
    uint64_t kv0 = 0, kv1 = 0;
    assert_int_equal(wait_no_sessions(&kv0), 0);
    usleep(100000);
    unsigned fd0 = 0, fd1 = 0;
    long rss0 = 0, rss1 = 0;
    assert_int_equal(pl_test_daemon_fds(d, &fd0), 0);
    assert_int_equal(pl_test_daemon_rss_kb(d, &rss0), 0);

    int res[2];
    assert_int_equal(pipe(res), 0);
    pid_t *kids = calloc((size_t)n_clients, sizeof(*kids));
    assert_non_null(kids);
    uint64_t t0 = pl_test_now_ms();
    for (int i = 0; i < n_clients; i++) {
        kids[i] = fork();
        assert_true(kids[i] >= 0);
        if (kids[i] == 0)
            client(path, i, n_req, seconds, res[1]);
    }
    struct tally sum = {0};
    for (int i = 0; i < n_clients; i++) {
        int st;
        assert_int_equal(waitpid(kids[i], &st, 0), kids[i]);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fail_msg("load client %d: status 0x%x", i, st);
        struct tally t;
        assert_int_equal(read(res[0], &t, sizeof(t)), sizeof(t));
        sum.requests += t.requests;
        sum.completed += t.completed;
        sum.cancelled += t.cancelled;
        sum.dropped += t.dropped;
        sum.tokens += t.tokens;
        sum.bad += t.bad;
    }
    uint64_t dt = pl_test_now_ms() - t0;
    free(kids);
    close(res[0]);
    close(res[1]);
    printf("# %d clients: %llu requests (%llu completed, %llu cancelled, %llu dropped, %llu "
           "wrong) and %llu tokens in %.1f s (%.0f tokens/s)\n",
           n_clients, (unsigned long long)sum.requests, (unsigned long long)sum.completed,
           (unsigned long long)sum.cancelled, (unsigned long long)sum.dropped,
           (unsigned long long)sum.bad, (unsigned long long)sum.tokens, dt / 1000.0,
           sum.tokens * 1000.0 / (double)(dt ? dt : 1));
    assert_int_equal(sum.bad, 0);
    assert_int_equal(sum.completed + sum.cancelled + sum.dropped, sum.requests);

    assert_true(pl_test_daemon_alive(d));
    assert_int_equal(wait_no_sessions(&kv1), 0);
    usleep(200000);
    assert_int_equal(pl_test_daemon_fds(d, &fd1), 0);
    assert_int_equal(pl_test_daemon_rss_kb(d, &rss1), 0);
    printf("# after the run: no session; KV tokens in use %llu -> %llu, fds %u -> %u, RSS %ld -> "
           "%ld KiB\n",
           (unsigned long long)kv0, (unsigned long long)kv1, fd0, fd1, rss0, rss1);
    assert_true(kv1 <= kv0);
    assert_int_equal(fd1, fd0);
    assert_true(rss1 - rss0 < 4096);
    assert_int_equal(pl_test_daemon_stop(d), 0);
}

int main(void) {
    if (pl_test_model_path("stories260K.gguf", model, sizeof(model)) < 0)
        return 77;
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_clients_requests_nothing_lost, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
