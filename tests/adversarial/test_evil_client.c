/* SPDX-License-Identifier: MIT */
/* Hostile clients against a real picolmd (STYLE.md §12): while well-behaved client processes
 * stream greedy generations, picolm-evil-client (evil_client.c) runs every attack it knows,
 * first one after the other, then all at once, with different seeds each round. Pass: the
 * broker stays up; each attack that must end its session ends it and shows up in the
 * protocol_errors counter of admin stats; the well-behaved clients' token streams are
 * complete and identical to a run without attackers; afterwards no session, KV block or fd
 * is left over. PICOLM_EVIL_ROUNDS sets the number of rounds (default 2). */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "daemon_harness.h"
#include "pl_test_client.h"

#define EVIL PL_BINARY_DIR "/bin/picolm-evil-client"
#define N_GOOD 4
#define MAX_NEW 32
#define MAX_ATTACKS 64

static char model[4096];
static struct pl_test_daemon daemon_; /* stopped by teardown, also after a failure */

static int teardown(void **state) {
    (void)state;
    pl_test_daemon_done(&daemon_);
    return 0;
}

static const char *prompts[N_GOOD] = {"Once upon a time", "The little dog", "Lily wanted to",
                                      "One day, a big"};

struct expected {
    int32_t ids[MAX_NEW];
    uint32_t n;
};

struct attack {
    char name[64];
    char expect[8];
};

static int list_attacks(struct attack *a) {
    FILE *p = popen(EVIL " list", "r");
    assert_non_null(p);
    int n = 0;
    while (n < MAX_ATTACKS && fscanf(p, "%63s %7s", a[n].name, a[n].expect) == 2)
        n++;
    assert_int_equal(pclose(p), 0);
    return n;
}

static int run_one(struct pl_test_client *c, int i, uint64_t id, struct expected *out) {
    static struct pl_test_result r;
    if (pl_test_client_generate(c, id, NULL, 0, prompts[i], MAX_NEW, true, true) < 0 ||
        pl_test_client_collect(c, id, &r, 20000, NULL, NULL) < 0)
        return -1;
    if (r.error_code != 0 || r.n_ids > MAX_NEW)
        return -1;
    out->n = r.n_ids;
    memcpy(out->ids, r.ids, r.n_ids * sizeof(int32_t));
    return 0;
}

/* A well-behaved client: generates its prompt again and again until stop_fd is readable,
 * comparing every stream to the expected one. Exit 0, or 1 on a difference, 2 on an error.
 * Writes its number of rounds into res_fd. */
static void good_client(const char *dir, int i, const struct expected *want, int stop_fd,
                        int res_fd) {
    struct pl_test_client c;
    struct expected got;
    uint32_t rounds = 0;
    if (pl_test_client_connect(dir, &c) < 0)
        _exit(2);
    for (;;) {
        struct pollfd p = {.fd = stop_fd, .events = POLLIN};
        if (rounds >= 3 && poll(&p, 1, 0) > 0)
            break;
        if (run_one(&c, i, 1000 + rounds, &got) < 0)
            _exit(2);
        if (got.n != want->n || memcmp(got.ids, want->ids, got.n * sizeof(int32_t)) != 0) {
            fprintf(stderr, "good client %d: round %u differs\n", i, rounds);
            _exit(1);
        }
        rounds++;
    }
    pl_test_client_close(&c);
    uint32_t msg[2] = {(uint32_t)i, rounds};
    if (write(res_fd, msg, sizeof(msg)) != (ssize_t)sizeof(msg))
        _exit(2);
    _exit(0);
}

static pid_t spawn_evil(const char *dir, const char *name, unsigned seed) {
    char s[32];
    (void)snprintf(s, sizeof(s), "%u", seed);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl(EVIL, EVIL, dir, name, s, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Did the attack end as it must? */
static void check_evil(const struct attack *a, int st) {
    bool ok;
    if (!strcmp(a->expect, "dies"))
        ok = (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) || (WIFEXITED(st) && !WEXITSTATUS(st));
    else
        ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (!ok)
        fail_msg("attack %s (%s): status 0x%x", a->name, a->expect, st);
}

static void test_attackers_hurt_nobody_else(void **state) {
    (void)state;
    struct pl_test_daemon *dp = &daemon_;
#define d (*dp)
    const char *extra[] = {"--max-sessions", "64", NULL};
    assert_int_equal(pl_test_daemon_start(&d, model, extra), 0);

    /* Reference: the same generations with nobody else around. */
    static struct expected want[N_GOOD];
    struct pl_test_client c;
    assert_int_equal(pl_test_client_connect(d.dir, &c), 0);
    for (int i = 0; i < N_GOOD; i++) {
        assert_int_equal(run_one(&c, i, 1 + (uint64_t)i, &want[i]), 0);
        assert_int_equal(want[i].n, MAX_NEW);
    }
    pl_test_client_close(&c);
    assert_int_equal(pl_test_daemon_wait_idle(&d, 2000), 0);

    static struct attack attacks[MAX_ATTACKS];
    int n_attacks = list_attacks(attacks);
    assert_true(n_attacks >= 15);
    uint64_t perr0 = 0, perr1 = 0;
    assert_int_equal(pl_test_daemon_counter(&d, "protocol_errors", &perr0), 0);
    unsigned fds0 = 0, fds1 = 0;
    usleep(100000); /* the admin connections of the queries above close too */
    assert_int_equal(pl_test_daemon_fds(&d, &fds0), 0);

    int stop[2], res[2];
    assert_int_equal(pipe(stop), 0);
    assert_int_equal(pipe(res), 0);
    pid_t good[N_GOOD];
    for (int i = 0; i < N_GOOD; i++) {
        good[i] = fork();
        assert_true(good[i] >= 0);
        if (good[i] == 0) {
            close(stop[1]);
            good_client(d.dir, i, &want[i], stop[0], res[1]);
        }
    }
    close(stop[0]);

    const char *env = getenv("PICOLM_EVIL_ROUNDS");
    int rounds = env ? atoi(env) : 2;
    unsigned n_ends = 0, n_runs = 0;
    for (int round = 0; round < rounds; round++) {
        bool parallel = round % 2 == 1;
        pid_t pids[MAX_ATTACKS];
        for (int k = 0; k < n_attacks; k++) {
            unsigned seed = (unsigned)(round * 1000 + k);
            pids[k] = spawn_evil(d.dir, attacks[k].name, seed);
            if (!parallel) {
                int st;
                assert_int_equal(waitpid(pids[k], &st, 0), pids[k]);
                check_evil(&attacks[k], st);
            }
            n_runs++;
            if (!strcmp(attacks[k].expect, "ends"))
                n_ends++;
        }
        for (int k = 0; parallel && k < n_attacks; k++) {
            int st;
            assert_int_equal(waitpid(pids[k], &st, 0), pids[k]);
            check_evil(&attacks[k], st);
        }
        assert_true(pl_test_daemon_alive(&d));
    }

    close(stop[1]); /* the good clients finish their current round and report */
    uint32_t total_rounds = 0;
    for (int i = 0; i < N_GOOD; i++) {
        int st;
        assert_int_equal(waitpid(good[i], &st, 0), good[i]);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fail_msg("good client %d: status 0x%x", i, st);
        uint32_t msg[2];
        assert_int_equal(read(res[0], msg, sizeof(msg)), sizeof(msg));
        total_rounds += msg[1];
    }
    close(res[0]);
    close(res[1]);

    assert_true(pl_test_daemon_alive(&d));
    assert_int_equal(pl_test_daemon_wait_idle(&d, 5000), 0);
    assert_int_equal(pl_test_daemon_counter(&d, "protocol_errors", &perr1), 0);
    printf("# %u attacks run (%u must end their session), protocol_errors +%llu, "
           "%u good streams of %d tokens identical to the reference\n",
           n_runs, n_ends, (unsigned long long)(perr1 - perr0), total_rounds, MAX_NEW);
    assert_true(perr1 - perr0 >= n_ends);
    usleep(100000);
    assert_int_equal(pl_test_daemon_fds(&d, &fds1), 0);
    assert_int_equal(fds1, fds0);
    assert_int_equal(pl_test_daemon_stop(&d), 0);
#undef d
}

int main(void) {
    if (pl_test_model_path("stories260K.gguf", model, sizeof(model)) < 0)
        return 77;
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_attackers_hurt_nobody_else, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
