/* SPDX-License-Identifier: MIT */
/* daemon/stats.c: identity slots, bucket edges, totals vs per-identity sets, the Stats
 * snapshot (counts, gauges), lock-free recording from two threads while a third reads, the
 * log rate limiter, and the session start/end bookkeeping. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "pl/admin.pb-c.h"
#include "session.h"
#include "stats.h"

static const Picolm__Admin__V1__Histogram *hist(Picolm__Admin__V1__Histogram **hs, size_t n,
                                                const char *name) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(hs[i]->name, name))
            return hs[i];
    fail_msg("no histogram %s", name);
    return NULL;
}

static uint64_t ctr(Picolm__Admin__V1__Counter **cs, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(cs[i]->name, name))
            return cs[i]->value;
    fail_msg("no counter %s", name);
    return 0;
}

static void test_ident_slots_are_stable_and_bounded(void **state) {
    struct pl_daemon_stats *st = NULL;
    char name[32];
    assert_int_equal(pl_daemon_stats_new(&st), 0);
    uint32_t a = pl_daemon_stats_ident(st, "alice");
    uint32_t d = pl_daemon_stats_ident(st, "");
    assert_int_equal(pl_daemon_stats_ident(st, "alice"), a);
    assert_int_equal(pl_daemon_stats_ident(st, "default"), d); /* "" counts as default */
    assert_int_not_equal(a, d);
    for (int i = 0; i < 100; i++) {
        snprintf(name, sizeof(name), "rule%d", i);
        uint32_t k = pl_daemon_stats_ident(st, name);
        assert_true(k < PL_DAEMON_STATS_MAX_IDENT);
    }
    /* The table is full: newcomers share the last slot, named "_other". */
    uint32_t o = pl_daemon_stats_ident(st, "late");
    assert_int_equal(o, PL_DAEMON_STATS_MAX_IDENT - 1);
    assert_string_equal(st->names[o], "_other");
    assert_int_equal(pl_daemon_stats_ident(st, "alice"), a);
    assert_int_equal(pl_daemon_stats_ident(NULL, "x"), PL_DAEMON_STATS_NO_IDENT);
    pl_daemon_stats_free(st);
}

static void test_buckets_are_upper_inclusive(void **state) {
    struct pl_daemon_stats *st = NULL;
    Picolm__Admin__V1__Stats *m = NULL;
    uint32_t nb;
    assert_int_equal(pl_daemon_stats_new(&st), 0);
    const uint64_t *b = pl_daemon_stats_hist_bounds(PL_DAEMON_HIST_TTFT, &nb);
    assert_true(nb > 2);
    pl_daemon_stats_observe(st, PL_DAEMON_STATS_NO_IDENT, PL_DAEMON_HIST_TTFT, 0);
    pl_daemon_stats_observe(st, PL_DAEMON_STATS_NO_IDENT, PL_DAEMON_HIST_TTFT, b[0]);
    pl_daemon_stats_observe(st, PL_DAEMON_STATS_NO_IDENT, PL_DAEMON_HIST_TTFT, b[0] + 1);
    pl_daemon_stats_observe(st, PL_DAEMON_STATS_NO_IDENT, PL_DAEMON_HIST_TTFT, b[nb - 1]);
    pl_daemon_stats_observe(st, PL_DAEMON_STATS_NO_IDENT, PL_DAEMON_HIST_TTFT, b[nb - 1] + 1);
    pl_daemon_stats_observe(st, PL_DAEMON_STATS_NO_IDENT, PL_DAEMON_HIST_TTFT, UINT64_MAX / 4);
    assert_int_equal(pl_daemon_stats_proto(st, NULL, &m), 0);
    const Picolm__Admin__V1__Histogram *h = hist(m->histograms, m->n_histograms, "ttft_ns");
    assert_int_equal(h->n_bounds, nb);
    assert_int_equal(h->n_counts, nb + 1);
    assert_int_equal(h->counts[0], 2);      /* 0 and exactly b[0] */
    assert_int_equal(h->counts[1], 1);      /* b[0] + 1 */
    assert_int_equal(h->counts[nb - 1], 1); /* exactly the last bound */
    assert_int_equal(h->counts[nb], 2);     /* overflow */
    assert_int_equal(h->count, 6);
    assert_true(h->bounds[0] == (double)b[0]);
    double sum = (double)(b[0] + b[0] + 1 + b[nb - 1] + b[nb - 1] + 1 + UINT64_MAX / 4);
    assert_true(h->sum > sum * 0.999999 && h->sum < sum * 1.000001);
    assert_int_equal(m->n_gauges, 0);
    pl_daemon_stats_proto_free(m);
    pl_daemon_stats_free(st);
}

static void test_identity_counts_add_to_the_total(void **state) {
    struct pl_daemon_stats *st = NULL;
    Picolm__Admin__V1__Stats *m = NULL;
    struct pl_daemon_stats_gauges g = {.uptime_ns = 5, .sessions_open = 2, .kv_total_tokens = 64};
    assert_int_equal(pl_daemon_stats_new(&st), 0);
    uint32_t a = pl_daemon_stats_ident(st, "a"), b = pl_daemon_stats_ident(st, "b");
    pl_daemon_stats_add(st, a, PL_DAEMON_CTR_TOKENS_OUT, 10);
    pl_daemon_stats_add(st, b, PL_DAEMON_CTR_TOKENS_OUT, 5);
    pl_daemon_stats_add(st, PL_DAEMON_STATS_NO_IDENT, PL_DAEMON_CTR_TOKENS_OUT, 1);
    pl_daemon_stats_add(st, a, PL_DAEMON_CTR_REQUESTS, 2);
    pl_daemon_stats_add(st, 12345, PL_DAEMON_CTR_REQUESTS, 1); /* bad slot: total only */
    pl_daemon_stats_add(st, a, (enum pl_daemon_ctr)99, 1);     /* ignored */
    pl_daemon_stats_observe(st, b, PL_DAEMON_HIST_QUEUE_WAIT, 1000);
    pl_daemon_stats_add(NULL, a, PL_DAEMON_CTR_REQUESTS, 1); /* no stats: no effect */
    assert_int_equal(pl_daemon_stats_proto(st, &g, &m), 0);
    assert_int_equal(ctr(m->counters, m->n_counters, "tokens_out"), 16);
    assert_int_equal(ctr(m->counters, m->n_counters, "requests"), 3);
    assert_int_equal(m->n_identities, 2);
    assert_string_equal(m->identities[0]->identity, "a");
    assert_int_equal(ctr(m->identities[0]->counters, m->identities[0]->n_counters, "tokens_out"),
                     10);
    assert_int_equal(ctr(m->identities[1]->counters, m->identities[1]->n_counters, "tokens_out"),
                     5);
    assert_int_equal(
        hist(m->identities[1]->histograms, m->identities[1]->n_histograms, "queue_wait_ns")->count,
        1);
    assert_int_equal(
        hist(m->identities[0]->histograms, m->identities[0]->n_histograms, "queue_wait_ns")->count,
        0);
    assert_int_equal(ctr(m->gauges, m->n_gauges, "sessions_open"), 2);
    assert_int_equal(ctr(m->gauges, m->n_gauges, "kv_total_tokens"), 64);
    /* The snapshot packs and unpacks as a valid message. */
    size_t len = protobuf_c_message_get_packed_size(&m->base);
    uint8_t *buf = malloc(len);
    assert_non_null(buf);
    protobuf_c_message_pack(&m->base, buf);
    Picolm__Admin__V1__Stats *u = picolm__admin__v1__stats__unpack(NULL, len, buf);
    assert_non_null(u);
    assert_int_equal(u->n_identities, 2);
    picolm__admin__v1__stats__free_unpacked(u, NULL);
    free(buf);
    pl_daemon_stats_proto_free(m);
    pl_daemon_stats_free(st);
}

/* ---- Two writers, one reader ---- */

#define N_PER_WRITER 200000

struct race {
    struct pl_daemon_stats *st;
    uint32_t ident;
    _Atomic int done;
};

static void *writer(void *arg) {
    struct race *r = arg;
    for (uint64_t i = 0; i < N_PER_WRITER; i++) {
        pl_daemon_stats_add(r->st, r->ident, PL_DAEMON_CTR_TOKENS_OUT, 1);
        pl_daemon_stats_observe(r->st, r->ident, PL_DAEMON_HIST_INTER_TOKEN, i * 1000);
    }
    atomic_fetch_add(&r->done, 1);
    return NULL;
}

static bool has_ctr(Picolm__Admin__V1__Counter **cs, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(cs[i]->name, name))
            return true;
    return false;
}

/* The prefix cache's block counters are the broker's alone: in the total, in no identity's
 * set (where they would read 0 forever); its hits are per identity like the others. */
static void test_broker_wide_counters_stay_out_of_identities(void **state) {
    (void)state;
    struct pl_daemon_stats *st = NULL;
    Picolm__Admin__V1__Stats *m = NULL;
    struct pl_daemon_stats_gauges g = {.prefix_cache_blocks = 7};
    assert_int_equal(pl_daemon_stats_new(&st), 0);
    uint32_t a = pl_daemon_stats_ident(st, "a");
    pl_daemon_stats_add(st, a, PL_DAEMON_CTR_PREFIX_HITS, 1);
    pl_daemon_stats_add(st, a, PL_DAEMON_CTR_PREFIX_TOKENS, 96);
    pl_daemon_stats_add(st, PL_DAEMON_STATS_NO_IDENT, PL_DAEMON_CTR_PREFIX_LOADED, 12);
    pl_daemon_stats_add(st, PL_DAEMON_STATS_NO_IDENT, PL_DAEMON_CTR_PREFIX_REJECTED, 2);
    assert_int_equal(pl_daemon_stats_proto(st, &g, &m), 0);
    assert_int_equal(m->n_counters, _PL_DAEMON_CTR_MAX);
    assert_int_equal(ctr(m->counters, m->n_counters, "prefix_cache_hits"), 1);
    assert_int_equal(ctr(m->counters, m->n_counters, "prefix_cache_hit_tokens"), 96);
    assert_int_equal(ctr(m->counters, m->n_counters, "prefix_cache_loaded_blocks"), 12);
    assert_int_equal(ctr(m->counters, m->n_counters, "prefix_cache_files_rejected"), 2);
    assert_int_equal(ctr(m->counters, m->n_counters, "prefix_cache_saved_blocks"), 0);
    assert_int_equal(ctr(m->gauges, m->n_gauges, "prefix_cache_blocks"), 7);
    const Picolm__Admin__V1__IdentityStats *id = m->identities[0];
    assert_int_equal(ctr(id->counters, id->n_counters, "prefix_cache_hit_tokens"), 96);
    size_t n_total_only = 0;
    for (int c = 0; c < _PL_DAEMON_CTR_MAX; c++) {
        const char *name = pl_daemon_stats_ctr_name((enum pl_daemon_ctr)c);
        bool only = pl_daemon_stats_ctr_total_only((enum pl_daemon_ctr)c);
        n_total_only += only;
        assert_true(has_ctr(m->counters, m->n_counters, name));
        assert_true(has_ctr(id->counters, id->n_counters, name) == !only);
    }
    assert_int_equal(n_total_only, 4);
    assert_int_equal(id->n_counters, _PL_DAEMON_CTR_MAX - n_total_only);
    pl_daemon_stats_proto_free(m);
    pl_daemon_stats_free(st);
}

static void test_concurrent_recording_loses_nothing(void **state) {
    struct race r = {0};
    pthread_t t[2];
    assert_int_equal(pl_daemon_stats_new(&r.st), 0);
    r.ident = pl_daemon_stats_ident(r.st, "x");
    assert_int_equal(pthread_create(&t[0], NULL, writer, &r), 0);
    assert_int_equal(pthread_create(&t[1], NULL, writer, &r), 0);
    /* Snapshots taken meanwhile are self-consistent: count equals the sum of the buckets. */
    while (atomic_load(&r.done) < 2) {
        Picolm__Admin__V1__Stats *m = NULL;
        assert_int_equal(pl_daemon_stats_proto(r.st, NULL, &m), 0);
        const Picolm__Admin__V1__Histogram *h =
            hist(m->histograms, m->n_histograms, "inter_token_ns");
        uint64_t s = 0;
        for (size_t i = 0; i < h->n_counts; i++)
            s += h->counts[i];
        assert_int_equal(s, h->count);
        assert_true(h->count <= 2 * N_PER_WRITER);
        pl_daemon_stats_proto_free(m);
    }
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);
    Picolm__Admin__V1__Stats *m = NULL;
    assert_int_equal(pl_daemon_stats_proto(r.st, NULL, &m), 0);
    assert_int_equal(ctr(m->counters, m->n_counters, "tokens_out"), 2 * N_PER_WRITER);
    assert_int_equal(hist(m->histograms, m->n_histograms, "inter_token_ns")->count,
                     2 * N_PER_WRITER);
    assert_int_equal(ctr(m->identities[0]->counters, m->identities[0]->n_counters, "tokens_out"),
                     2 * N_PER_WRITER);
    pl_daemon_stats_proto_free(m);
    pl_daemon_stats_free(r.st);
}

static void test_warnings_are_rate_limited(void **state) {
    struct pl_daemon_stats *st = NULL;
    uint64_t supp = 99, t = 1000000000ull;
    int allowed = 0;
    assert_int_equal(pl_daemon_stats_new(&st), 0);
    for (int i = 0; i < 50; i++)
        allowed += pl_daemon_stats_warn_allow(st, t + (uint64_t)i, &supp);
    assert_int_equal(allowed, 10);
    /* The next window: allowed again, and told how many were dropped. */
    assert_true(pl_daemon_stats_warn_allow(st, t + 6000000000ull, &supp));
    assert_int_equal(supp, 40);
    assert_true(pl_daemon_stats_warn_allow(st, t + 6000000001ull, &supp));
    assert_int_equal(supp, 0);
    assert_true(pl_daemon_stats_warn_allow(NULL, t, &supp));
    pl_daemon_stats_free(st);
}

static void test_session_start_and_end_count_and_name(void **state) {
    struct pl_daemon_stats *st = NULL;
    struct pl_daemon_session *s = calloc(1, sizeof(*s));
    Picolm__Admin__V1__Stats *m = NULL;
    char comm[32] = "";
    assert_non_null(s);
    assert_int_equal(pl_daemon_stats_new(&st), 0);
    s->id = 7;
    s->peer.pid = getpid();
    snprintf(s->rule, sizeof(s->rule), "editors");
    FILE *f = fopen("/proc/self/comm", "r");
    assert_non_null(f);
    assert_non_null(fgets(comm, sizeof(comm), f));
    fclose(f);
    comm[strcspn(comm, "\n")] = '\0';
    pl_daemon_stats_session_start(st, s, 1000);
    assert_string_equal(s->exe, comm);
    assert_int_equal(s->stats_ident, pl_daemon_stats_ident(st, "editors"));
    pl_daemon_stats_session_end(st, s, "client hung up", 2000);
    assert_int_equal(pl_daemon_stats_proto(st, NULL, &m), 0);
    assert_int_equal(ctr(m->counters, m->n_counters, "sessions_opened"), 1);
    assert_int_equal(ctr(m->counters, m->n_counters, "sessions_closed"), 1);
    assert_string_equal(m->identities[0]->identity, "editors");
    assert_int_equal(
        ctr(m->identities[0]->counters, m->identities[0]->n_counters, "sessions_opened"), 1);
    pl_daemon_stats_proto_free(m);
    /* A pid that does not exist: no name, no crash. */
    s->peer.pid = 0;
    pl_daemon_stats_session_start(st, s, 3000);
    assert_string_equal(s->exe, "");
    pl_daemon_stats_free(st);
    free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ident_slots_are_stable_and_bounded),
        cmocka_unit_test(test_buckets_are_upper_inclusive),
        cmocka_unit_test(test_identity_counts_add_to_the_total),
        cmocka_unit_test(test_broker_wide_counters_stay_out_of_identities),
        cmocka_unit_test(test_concurrent_recording_loses_nothing),
        cmocka_unit_test(test_warnings_are_rate_limited),
        cmocka_unit_test(test_session_start_and_end_count_and_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
