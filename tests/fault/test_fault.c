/* SPDX-License-Identifier: MIT */
/* Fault injection against a real picolmd, with libpicolm clients (label fault):
 * - the broker SIGKILLed while clients stream: each gets PICOLM_E_BROKER_GONE within 100 ms
 *   of the kill, and connects and generates again once the broker is restarted;
 * - clients SIGKILLed mid-write (half a record in the ring) and mid-read (replies piling up):
 *   the broker stays up, their sessions and KV blocks are gone within 100 ms;
 * - KV pool exhaustion: every request completes with its full token count or is refused with
 *   PICOLM_E_EXHAUSTED; the pool is empty again afterwards;
 * - the model file truncated, then replaced, on disk while the broker serves: it serves from
 *   its own copy, with the same tokens as before. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
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

#include "daemon_harness.h"
#include "picolm.h"

#define EVIL PL_BINARY_DIR "/bin/picolm-evil-client"

static char model[4096];
static struct pl_test_daemon daemon_;

static int teardown(void **state) {
    (void)state;
    pl_test_daemon_done(&daemon_);
    return 0;
}

static uint64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static void sock_path(const struct pl_test_daemon *d, char *buf, size_t len) {
    (void)snprintf(buf, len, "%s/picolm.sock", d->dir);
}

static int greedy(picolm_client *c, const char *prompt, uint32_t max, int32_t *ids, size_t *n_ids);

struct collect {
    int32_t *ids;
    size_t n, cap;
};

static int on_chunk(void *user, const struct picolm_chunk *ch) {
    struct collect *k = user;
    for (size_t i = 0; i < ch->n_ids && k->n < k->cap; i++)
        k->ids[k->n++] = ch->ids[i];
    return 0;
}

static int greedy(picolm_client *c, const char *prompt, uint32_t max, int32_t *ids, size_t *n_ids) {
    struct picolm_generate_params p;
    picolm_generate_params_init(&p);
    p.prompt = prompt;
    p.max_tokens = max;
    p.flags = PICOLM_GEN_IGNORE_EOS;
    p.sampling.temperature = 0;
    struct collect k = {ids, 0, max};
    struct picolm_result res = {.size = sizeof(res)};
    int r = picolm_generate(c, &p, ids ? on_chunk : NULL, &k, &res);
    if (n_ids)
        *n_ids = k.n;
    return r;
}

/* ---- The broker dies ---- */

/* A streaming client: generate again and again until a call fails; report the error and the
 * time it came; then reconnect (the broker comes back) and generate once more. */
static void streamer(const char *path, int ready_fd, int res_fd) {
    picolm_client *c = NULL;
    if (picolm_connect(path, &c) != PICOLM_OK)
        _exit(2);
    (void)!write(ready_fd, "r", 1);
    int r;
    do
        r = greedy(c, "Once upon a time", 0, NULL, NULL);
    while (r == PICOLM_OK);
    uint64_t t = now_us();
    picolm_close(c);
    int rc = 0;
    for (int i = 0; i < 1000; i++) {
        if ((rc = picolm_connect(path, &c)) == PICOLM_OK)
            break;
        usleep(10000);
    }
    int32_t ids[8];
    size_t n = 0;
    int again = rc == PICOLM_OK ? greedy(c, "Once", 8, ids, &n) : rc;
    picolm_close(c);
    int64_t msg[4] = {r, (int64_t)t, again, (int64_t)n};
    (void)!write(res_fd, msg, sizeof(msg));
    _exit(0);
}

static void test_broker_killed_gives_broker_gone_then_reconnect(void **state) {
    (void)state;
    struct pl_test_daemon *d = &daemon_;
    assert_int_equal(pl_test_daemon_start(d, model, NULL), 0);
    char path[128];
    sock_path(d, path, sizeof(path));
    enum { N = 4 };
    int ready[2], res[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(res), 0);
    pid_t kids[N];
    for (int i = 0; i < N; i++) {
        kids[i] = fork();
        assert_true(kids[i] >= 0);
        if (kids[i] == 0)
            streamer(path, ready[1], res[1]);
    }
    for (int i = 0; i < N; i++) {
        char x;
        assert_int_equal(read(ready[0], &x, 1), 1);
    }
    usleep(200000); /* all of them mid-stream */
    uint64_t t_kill = now_us();
    pl_test_daemon_kill(d);
    usleep(300000);
    assert_int_equal(pl_test_daemon_restart(d), 0);
    uint64_t worst = 0;
    for (int i = 0; i < N; i++) {
        int64_t msg[4];
        assert_int_equal(read(res[0], msg, sizeof(msg)), sizeof(msg));
        assert_int_equal(msg[0], PICOLM_E_BROKER_GONE);
        uint64_t dt = (uint64_t)msg[1] > t_kill ? (uint64_t)msg[1] - t_kill : 0;
        if (dt > worst)
            worst = dt;
        assert_int_equal(msg[2], PICOLM_OK); /* reconnected and served */
        assert_int_equal(msg[3], 8);
    }
    for (int i = 0; i < N; i++) {
        int st;
        assert_int_equal(waitpid(kids[i], &st, 0), kids[i]);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    printf("# %d streaming clients saw broker_gone at most %llu us after the SIGKILL\n", N,
           (unsigned long long)worst);
    assert_true(worst <= 100000);
    assert_int_equal(pl_test_daemon_wait_idle(d, 2000), 0);
    assert_int_equal(pl_test_daemon_stop(d), 0);
}

/* ---- Clients die ---- */

static void test_clients_killed_mid_write_and_mid_read(void **state) {
    (void)state;
    struct pl_test_daemon *d = &daemon_;
    assert_int_equal(pl_test_daemon_start(d, model, NULL), 0);
    picolm_client *c = NULL;
    char path[128];
    int32_t ids[16];
    size_t n = 0;
    sock_path(d, path, sizeof(path));
    /* Warm up (lazily opened fds count in the baseline), then measure. */
    assert_int_equal(picolm_connect(path, &c), PICOLM_OK);
    assert_int_equal(greedy(c, "Once", 16, ids, &n), PICOLM_OK);
    picolm_close(c);
    assert_int_equal(pl_test_daemon_wait_idle(d, 1000), 0);
    unsigned fd0 = 0, fd1 = 0;
    usleep(100000); /* the admin connection of the status query closes too */
    assert_int_equal(pl_test_daemon_fds(d, &fd0), 0);
    const char *attacks[] = {"die-mid-write", "die-mid-read", "die-mid-stream"};
    for (int round = 0; round < 10; round++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            char seed[16];
            (void)snprintf(seed, sizeof(seed), "%d", round);
            execl(EVIL, EVIL, d->dir, attacks[round % 3], seed, (char *)NULL);
            _exit(127);
        }
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        uint64_t t0 = pl_test_now_ms();
        assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
        /* Its session and KV blocks are released within 100 ms. */
        assert_int_equal(pl_test_daemon_wait_idle(d, 100), 0);
        assert_true(pl_test_now_ms() - t0 <= 100);
    }
    assert_int_equal(picolm_connect(path, &c), PICOLM_OK);
    assert_int_equal(greedy(c, "Once", 16, ids, &n), PICOLM_OK);
    assert_int_equal(n, 16);
    picolm_close(c);
    assert_int_equal(pl_test_daemon_wait_idle(d, 1000), 0);
    usleep(100000);
    assert_int_equal(pl_test_daemon_fds(d, &fd1), 0);
    assert_int_equal(fd1, fd0);
    assert_true(pl_test_daemon_alive(d));
    assert_int_equal(pl_test_daemon_stop(d), 0);
}

/* ---- KV exhaustion ---- */

static void test_kv_pool_exhaustion_refuses_cleanly(void **state) {
    (void)state;
    struct pl_test_daemon *d = &daemon_;
    const char *extra[] = {"--kv-pool-tokens", "128", "--queue-max", "0", NULL};
    assert_int_equal(pl_test_daemon_start(d, model, extra), 0);
    char path[128];
    sock_path(d, path, sizeof(path));
    enum { N = 6, ROUNDS = 5 };
    int res[2];
    assert_int_equal(pipe(res), 0);
    pid_t kids[N];
    for (int i = 0; i < N; i++) {
        kids[i] = fork();
        assert_true(kids[i] >= 0);
        if (kids[i] == 0) {
            picolm_client *c = NULL;
            int32_t ids[100];
            int32_t counts[2] = {0, 0}; /* completed, exhausted */
            if (picolm_connect(path, &c) != PICOLM_OK)
                _exit(2);
            for (int k = 0; k < ROUNDS; k++) {
                size_t n = 0;
                int r = greedy(c, "Once upon a time", 90, ids, &n);
                if (r == PICOLM_OK && n == 90)
                    counts[0]++;
                else if (r == PICOLM_E_EXHAUSTED && n == 0)
                    counts[1]++;
                else
                    _exit(3);
            }
            picolm_close(c);
            (void)!write(res[1], counts, sizeof(counts));
            _exit(0);
        }
    }
    int done = 0, refused = 0;
    for (int i = 0; i < N; i++) {
        int st;
        int32_t counts[2];
        assert_int_equal(waitpid(kids[i], &st, 0), kids[i]);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        assert_int_equal(read(res[0], counts, sizeof(counts)), sizeof(counts));
        done += counts[0];
        refused += counts[1];
    }
    printf("# KV pool of 128 tokens, %d requests of ~95 tokens: %d completed, %d refused\n",
           N * ROUNDS, done, refused);
    assert_int_equal(done + refused, N * ROUNDS);
    assert_true(done > 0);
    assert_int_equal(pl_test_daemon_wait_idle(d, 1000), 0);
    assert_int_equal(pl_test_daemon_stop(d), 0);
}

/* ---- The model file changes on disk ---- */

static int copy_file(const char *from, const char *to) {
    int in = open(from, O_RDONLY | O_CLOEXEC), out = -1, r = -1;
    char buf[65536];
    ssize_t n;
    if (in < 0)
        return -1;
    out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0)
        goto done;
    while ((n = read(in, buf, sizeof(buf))) > 0)
        if (write(out, buf, (size_t)n) != n)
            goto done;
    r = n == 0 ? 0 : -1;
done:
    close(in);
    if (out >= 0)
        close(out);
    return r;
}

static void test_model_file_truncated_or_replaced_keeps_serving(void **state) {
    (void)state;
    struct pl_test_daemon *d = &daemon_;
    char dir[] = "/tmp/picolm-fault-model.XXXXXX", copy[128], other[128];
    assert_non_null(mkdtemp(dir));
    (void)snprintf(copy, sizeof(copy), "%s/model.gguf", dir);
    (void)snprintf(other, sizeof(other), "%s/other.gguf", dir);
    assert_int_equal(copy_file(model, copy), 0);
    assert_int_equal(chmod(dir, 0755), 0);
    assert_int_equal(pl_test_daemon_start(d, copy, NULL), 0);
    char path[128];
    sock_path(d, path, sizeof(path));
    picolm_client *c = NULL;
    assert_int_equal(picolm_connect(path, &c), PICOLM_OK);
    int32_t want[48], got[48];
    size_t nw = 0, ng = 0;
    assert_int_equal(greedy(c, "Lily wanted to", 48, want, &nw), PICOLM_OK);
    assert_int_equal(nw, 48);

    /* Truncated under the broker's feet. */
    assert_int_equal(truncate(copy, 0), 0);
    assert_int_equal(greedy(c, "Lily wanted to", 48, got, &ng), PICOLM_OK);
    assert_int_equal(ng, nw);
    assert_memory_equal(got, want, nw * sizeof(int32_t));

    /* Replaced by another file (garbage of the same size as the original). */
    struct stat sb;
    assert_int_equal(stat(model, &sb), 0);
    int fd = open(other, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    static char junk[65536];
    memset(junk, 0x5a, sizeof(junk));
    for (off_t left = sb.st_size; left > 0; left -= (off_t)sizeof(junk))
        assert_true(write(fd, junk, left < (off_t)sizeof(junk) ? (size_t)left : sizeof(junk)) > 0);
    close(fd);
    assert_int_equal(rename(other, copy), 0);
    ng = 0;
    assert_int_equal(greedy(c, "Lily wanted to", 48, got, &ng), PICOLM_OK);
    assert_int_equal(ng, nw);
    assert_memory_equal(got, want, nw * sizeof(int32_t));
    picolm_close(c);
    assert_true(pl_test_daemon_alive(d));
    assert_int_equal(pl_test_daemon_stop(d), 0);
    unlink(copy);
    rmdir(dir);
}

int main(void) {
    if (pl_test_model_path("stories260K.gguf", model, sizeof(model)) < 0)
        return 77;
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_broker_killed_gives_broker_gone_then_reconnect, teardown),
        cmocka_unit_test_teardown(test_clients_killed_mid_write_and_mid_read, teardown),
        cmocka_unit_test_teardown(test_kv_pool_exhaustion_refuses_cleanly, teardown),
        cmocka_unit_test_teardown(test_model_file_truncated_or_replaced_keeps_serving, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
