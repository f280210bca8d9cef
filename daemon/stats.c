/* SPDX-License-Identifier: MIT */
/* Broker statistics: relaxed atomic counters and fixed-bucket histograms, in total and per
 * policy identity; their snapshot as an admin Stats message; the session start/end log lines
 * and the rate limiter for client-triggered log lines. Recorded from the inference thread
 * (tokens, latencies, steps) and the event thread (sessions, requests); read by the event
 * thread (admin.c, the metrics textfile). */
#include "stats.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pl/admin.pb-c.h"
#include "pl/pl_log.h"
#include "session.h"

/* ---- Names and bounds ---- */

static const char *const ctr_names[_PL_DAEMON_CTR_MAX] = {
    [PL_DAEMON_CTR_SESSIONS_OPENED] = "sessions_opened",
    [PL_DAEMON_CTR_SESSIONS_CLOSED] = "sessions_closed",
    [PL_DAEMON_CTR_SESSIONS_KILLED] = "sessions_killed",
    [PL_DAEMON_CTR_REQUESTS] = "requests",
    [PL_DAEMON_CTR_TOKENS_IN] = "tokens_in",
    [PL_DAEMON_CTR_TOKENS_OUT] = "tokens_out",
    [PL_DAEMON_CTR_FINISH_LENGTH] = "requests_finished_length",
    [PL_DAEMON_CTR_FINISH_STOP] = "requests_finished_stop",
    [PL_DAEMON_CTR_FINISH_EOS] = "requests_finished_eos",
    [PL_DAEMON_CTR_FINISH_CANCELLED] = "requests_cancelled",
    [PL_DAEMON_CTR_REQUESTS_FAILED] = "requests_failed",
    [PL_DAEMON_CTR_PROTOCOL_ERRORS] = "protocol_errors",
    [PL_DAEMON_CTR_PREFIX_HITS] = "prefix_cache_hits",
    [PL_DAEMON_CTR_PREFIX_TOKENS] = "prefix_cache_hit_tokens",
    [PL_DAEMON_CTR_PREFIX_LOADED] = "prefix_cache_loaded_blocks",
    [PL_DAEMON_CTR_PREFIX_SAVED] = "prefix_cache_saved_blocks",
    [PL_DAEMON_CTR_PREFIX_EVICTED] = "prefix_cache_evicted_blocks",
    [PL_DAEMON_CTR_PREFIX_REJECTED] = "prefix_cache_files_rejected",
};

static const char *const hist_names[_PL_DAEMON_HIST_MAX] = {
    [PL_DAEMON_HIST_TTFT] = "ttft_ns",
    [PL_DAEMON_HIST_INTER_TOKEN] = "inter_token_ns",
    [PL_DAEMON_HIST_QUEUE_WAIT] = "queue_wait_ns",
    [PL_DAEMON_HIST_STEP] = "step_ns",
    [PL_DAEMON_HIST_BATCH] = "batch_tokens",
};

/* Latencies: 10 us .. 30 s, roughly 1-2.5-5 per decade. */
static const uint64_t ns_bounds[] = {
    10000ull,      25000ull,      50000ull,      100000ull,      250000ull,
    500000ull,     1000000ull,    2500000ull,    5000000ull,     10000000ull,
    25000000ull,   50000000ull,   100000000ull,  250000000ull,   500000000ull,
    1000000000ull, 2500000000ull, 5000000000ull, 10000000000ull, 30000000000ull,
};
/* Batch sizes: powers of two up to the largest batch the config allows. */
static const uint64_t batch_bounds[] = {1,   2,   4,   8,    16,   32,   64,
                                        128, 256, 512, 1024, 2048, 4096, 8192};

_Static_assert(sizeof(ns_bounds) / sizeof(ns_bounds[0]) <= PL_DAEMON_HIST_MAX_BOUNDS,
               "too many latency buckets");
_Static_assert(sizeof(batch_bounds) / sizeof(batch_bounds[0]) <= PL_DAEMON_HIST_MAX_BOUNDS,
               "too many batch buckets");

const char *pl_daemon_stats_ctr_name(enum pl_daemon_ctr c) {
    return (unsigned)c < _PL_DAEMON_CTR_MAX ? ctr_names[c] : "unknown";
}

bool pl_daemon_stats_ctr_total_only(enum pl_daemon_ctr c) {
    return c >= PL_DAEMON_CTR_PREFIX_LOADED && c < _PL_DAEMON_CTR_MAX;
}

const char *pl_daemon_stats_hist_name(enum pl_daemon_hist h) {
    return (unsigned)h < _PL_DAEMON_HIST_MAX ? hist_names[h] : "unknown";
}

const uint64_t *pl_daemon_stats_hist_bounds(enum pl_daemon_hist h, uint32_t *ret_n) {
    if (h == PL_DAEMON_HIST_BATCH) {
        *ret_n = (uint32_t)(sizeof(batch_bounds) / sizeof(batch_bounds[0]));
        return batch_bounds;
    }
    *ret_n = (uint32_t)(sizeof(ns_bounds) / sizeof(ns_bounds[0]));
    return ns_bounds;
}

/* ---- Life cycle, identities ---- */

int pl_daemon_stats_new(struct pl_daemon_stats **ret) {
    struct pl_daemon_stats *st = calloc(1, sizeof(*st));
    if (!st)
        return -ENOMEM;
    st->rl_session = (struct pl_daemon_ratelimit){.window_ns = 5000000000ull, .burst = 200};
    st->rl_warn = (struct pl_daemon_ratelimit){.window_ns = 5000000000ull, .burst = 10};
    *ret = st;
    return 0;
}

void pl_daemon_stats_free(struct pl_daemon_stats *st) {
    free(st);
}

uint32_t pl_daemon_stats_ident(struct pl_daemon_stats *st, const char *name) {
    if (!st)
        return PL_DAEMON_STATS_NO_IDENT;
    if (!name || !*name)
        name = "default";
    /* Only the event thread writes: a relaxed load sees its own stores. */
    uint32_t n = atomic_load_explicit(&st->n_ident, memory_order_relaxed);
    for (uint32_t i = 0; i < n; i++)
        if (!strncmp(st->names[i], name, PL_DAEMON_STATS_IDENT_LEN - 1))
            return i;
    if (n == PL_DAEMON_STATS_MAX_IDENT - 1) {
        /* The last slot collects everyone after the table filled up. */
        (void)snprintf(st->names[n], PL_DAEMON_STATS_IDENT_LEN, "_other");
        n++;
        atomic_store_explicit(&st->n_ident, n, memory_order_release);
    }
    if (n == PL_DAEMON_STATS_MAX_IDENT)
        return PL_DAEMON_STATS_MAX_IDENT - 1;
    (void)snprintf(st->names[n], PL_DAEMON_STATS_IDENT_LEN, "%s", name);
    /* Release: the name is written before a reader's acquire load of n_ident shows it. */
    atomic_store_explicit(&st->n_ident, n + 1, memory_order_release);
    return n;
}

/* ---- Recording ---- */

static void hist_add(struct pl_daemon_hist_data *hd, enum pl_daemon_hist h, uint64_t v) {
    uint32_t nb;
    const uint64_t *b = pl_daemon_stats_hist_bounds(h, &nb);
    uint32_t i = 0;
    while (i < nb && v > b[i]) /* buckets are "<= bound", as Prometheus' le */
        i++;
    atomic_fetch_add_explicit(&hd->counts[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&hd->sum, v, memory_order_relaxed);
}

void pl_daemon_stats_add(struct pl_daemon_stats *st, uint32_t ident, enum pl_daemon_ctr c,
                         uint64_t n) {
    if (!st || (unsigned)c >= _PL_DAEMON_CTR_MAX)
        return;
    atomic_fetch_add_explicit(&st->total.ctr[c], n, memory_order_relaxed);
    if (ident < PL_DAEMON_STATS_MAX_IDENT)
        atomic_fetch_add_explicit(&st->ident[ident].ctr[c], n, memory_order_relaxed);
}

void pl_daemon_stats_observe(struct pl_daemon_stats *st, uint32_t ident, enum pl_daemon_hist h,
                             uint64_t value) {
    if (!st || (unsigned)h >= _PL_DAEMON_HIST_MAX)
        return;
    hist_add(&st->total.h[h], h, value);
    if (ident < PL_DAEMON_STATS_MAX_IDENT)
        hist_add(&st->ident[ident].h[h], h, value);
}

/* ---- Snapshot as a Stats message ---- */

/* Everything one snapshot needs, in one allocation per array. */
struct snap {
    Picolm__Admin__V1__Stats m;
    Picolm__Admin__V1__IdentityStats *ids;
    Picolm__Admin__V1__IdentityStats **id_ptrs;
    Picolm__Admin__V1__Counter *ctrs; /* [(1 + n_ident) * CTR_MAX + N_GAUGES] */
    Picolm__Admin__V1__Counter **ctr_ptrs;
    Picolm__Admin__V1__Histogram *hists; /* [(1 + n_ident) * HIST_MAX] */
    Picolm__Admin__V1__Histogram **hist_ptrs;
    double *bounds;   /* [HIST_MAX][MAX_BOUNDS], shared by all sets */
    uint64_t *counts; /* [(1 + n_ident) * HIST_MAX][MAX_BOUNDS + 1] */
    char **id_names;
};

#define N_GAUGES 8u

static void fill_set(struct snap *sn, const struct pl_daemon_stats_set *set, size_t k,
                     Picolm__Admin__V1__Counter ***ret_ctrs, size_t *ret_nc,
                     Picolm__Admin__V1__Histogram ***ret_hists, size_t *ret_nh) {
    size_t c0 = k * _PL_DAEMON_CTR_MAX, h0 = k * _PL_DAEMON_HIST_MAX, nc = 0;
    for (size_t c = 0; c < _PL_DAEMON_CTR_MAX; c++) {
        if (k > 0 && pl_daemon_stats_ctr_total_only((enum pl_daemon_ctr)c))
            continue; /* an identity's set: never counted there */
        Picolm__Admin__V1__Counter *e = &sn->ctrs[c0 + nc];
        picolm__admin__v1__counter__init(e);
        e->name = (char *)ctr_names[c];
        e->value = atomic_load_explicit(&set->ctr[c], memory_order_relaxed);
        sn->ctr_ptrs[c0 + nc++] = e;
    }
    for (size_t h = 0; h < _PL_DAEMON_HIST_MAX; h++) {
        Picolm__Admin__V1__Histogram *e = &sn->hists[h0 + h];
        uint32_t nb;
        (void)pl_daemon_stats_hist_bounds((enum pl_daemon_hist)h, &nb);
        uint64_t *cnt = &sn->counts[(h0 + h) * (PL_DAEMON_HIST_MAX_BOUNDS + 1)];
        picolm__admin__v1__histogram__init(e);
        e->name = (char *)hist_names[h];
        e->n_bounds = nb;
        e->bounds = &sn->bounds[h * PL_DAEMON_HIST_MAX_BOUNDS];
        e->n_counts = nb + 1u;
        e->counts = cnt;
        /* The count is the sum of the buckets read, so that it always equals the +Inf
         * bucket; the sum is read separately and may lead or lag by in-flight samples. */
        for (uint32_t i = 0; i <= nb; i++) {
            cnt[i] = atomic_load_explicit(&set->h[h].counts[i], memory_order_relaxed);
            e->count += cnt[i];
        }
        e->sum = (double)atomic_load_explicit(&set->h[h].sum, memory_order_relaxed);
        sn->hist_ptrs[h0 + h] = e;
    }
    *ret_ctrs = &sn->ctr_ptrs[c0];
    *ret_nc = nc;
    *ret_hists = &sn->hist_ptrs[h0];
    *ret_nh = _PL_DAEMON_HIST_MAX;
}

static void snap_free(struct snap *sn) {
    if (!sn)
        return;
    free(sn->ids);
    free(sn->id_ptrs);
    free(sn->ctrs);
    free(sn->ctr_ptrs);
    free(sn->hists);
    free(sn->hist_ptrs);
    free(sn->bounds);
    free(sn->counts);
    free(sn->id_names);
    free(sn);
}

int pl_daemon_stats_proto(const struct pl_daemon_stats *st, const struct pl_daemon_stats_gauges *g,
                          struct Picolm__Admin__V1__Stats **ret) {
    struct snap *sn = calloc(1, sizeof(*sn));
    if (!sn || !st)
        goto oom;
    /* Acquire: pairs with the release store in pl_daemon_stats_ident(); names below n are
     * complete. */
    uint32_t n = atomic_load_explicit(&st->n_ident, memory_order_acquire);
    size_t sets = 1 + (size_t)n;
    sn->ids = calloc(n ? n : 1, sizeof(*sn->ids));
    sn->id_ptrs = calloc(n ? n : 1, sizeof(*sn->id_ptrs));
    sn->ctrs = calloc(sets * _PL_DAEMON_CTR_MAX + N_GAUGES, sizeof(*sn->ctrs));
    sn->ctr_ptrs = calloc(sets * _PL_DAEMON_CTR_MAX + N_GAUGES, sizeof(*sn->ctr_ptrs));
    sn->hists = calloc(sets * _PL_DAEMON_HIST_MAX, sizeof(*sn->hists));
    sn->hist_ptrs = calloc(sets * _PL_DAEMON_HIST_MAX, sizeof(*sn->hist_ptrs));
    sn->bounds = calloc((size_t)_PL_DAEMON_HIST_MAX * PL_DAEMON_HIST_MAX_BOUNDS, sizeof(double));
    sn->counts =
        calloc(sets * _PL_DAEMON_HIST_MAX * (PL_DAEMON_HIST_MAX_BOUNDS + 1), sizeof(uint64_t));
    sn->id_names = calloc(n ? n : 1, sizeof(char *));
    if (!sn->ids || !sn->id_ptrs || !sn->ctrs || !sn->ctr_ptrs || !sn->hists || !sn->hist_ptrs ||
        !sn->bounds || !sn->counts || !sn->id_names)
        goto oom;
    for (size_t h = 0; h < _PL_DAEMON_HIST_MAX; h++) {
        uint32_t nb;
        const uint64_t *b = pl_daemon_stats_hist_bounds((enum pl_daemon_hist)h, &nb);
        for (uint32_t i = 0; i < nb; i++)
            sn->bounds[h * PL_DAEMON_HIST_MAX_BOUNDS + i] = (double)b[i];
    }
    picolm__admin__v1__stats__init(&sn->m);
    fill_set(sn, &st->total, 0, &sn->m.counters, &sn->m.n_counters, &sn->m.histograms,
             &sn->m.n_histograms);
    for (uint32_t i = 0; i < n; i++) {
        Picolm__Admin__V1__IdentityStats *e = &sn->ids[i];
        picolm__admin__v1__identity_stats__init(e);
        e->identity = (char *)st->names[i];
        fill_set(sn, &st->ident[i], 1 + i, &e->counters, &e->n_counters, &e->histograms,
                 &e->n_histograms);
        sn->id_ptrs[i] = e;
    }
    sn->m.n_identities = n;
    sn->m.identities = sn->id_ptrs;
    if (g) {
        static const char *const gn[N_GAUGES] = {
            "uptime_ns",      "sessions_open",   "requests_active", "requests_waiting",
            "kv_used_tokens", "kv_total_tokens", "draining",        "prefix_cache_blocks"};
        const uint64_t gv[N_GAUGES] = {
            g->uptime_ns,      g->sessions_open,   g->requests_active, g->requests_waiting,
            g->kv_used_tokens, g->kv_total_tokens, g->draining,        g->prefix_cache_blocks};
        size_t base = sets * _PL_DAEMON_CTR_MAX;
        for (size_t i = 0; i < N_GAUGES; i++) {
            Picolm__Admin__V1__Counter *e = &sn->ctrs[base + i];
            picolm__admin__v1__counter__init(e);
            e->name = (char *)gn[i];
            e->value = gv[i];
            sn->ctr_ptrs[base + i] = e;
        }
        sn->m.n_gauges = N_GAUGES;
        sn->m.gauges = &sn->ctr_ptrs[base];
    }
    *ret = &sn->m; /* m is the first member: pl_daemon_stats_proto_free() finds sn again */
    return 0;
oom:
    snap_free(sn);
    return -ENOMEM;
}

void pl_daemon_stats_proto_free(struct Picolm__Admin__V1__Stats *m) {
    snap_free((struct snap *)(void *)m);
}

/* ---- Log lines ---- */

static bool rl_allow(struct pl_daemon_ratelimit *rl, uint64_t now, uint64_t *ret_suppressed) {
    if (now - rl->start_ns >= rl->window_ns || rl->start_ns == 0) {
        rl->start_ns = now ? now : 1;
        rl->n = 0;
    }
    if (rl->n >= rl->burst) {
        rl->suppressed++;
        return false;
    }
    rl->n++;
    *ret_suppressed = rl->suppressed;
    rl->suppressed = 0;
    return true;
}

bool pl_daemon_stats_warn_allow(struct pl_daemon_stats *st, uint64_t now_ns,
                                uint64_t *ret_suppressed) {
    *ret_suppressed = 0;
    return !st || rl_allow(&st->rl_warn, now_ns, ret_suppressed);
}

/* The peer's comm from /proc: informational only (the pid may be reused; the kernel's
 * credentials are what the policy uses). Untrusted text: the process names itself. */
static void read_comm(int32_t pid, char *out, size_t cap) {
    char p[64];
    out[0] = '\0';
    if (pid <= 0)
        return;
    (void)snprintf(p, sizeof(p), "/proc/%d/comm", (int)pid);
    FILE *f = fopen(p, "re");
    if (!f)
        return;
    if (fgets(out, (int)cap, f)) {
        for (size_t i = 0; out[i]; i++) {
            if (out[i] == '\n') {
                out[i] = '\0';
                break;
            }
            if ((unsigned char)out[i] < 0x20 || (unsigned char)out[i] >= 0x7f || out[i] == '"')
                out[i] = '?'; /* keep log lines and tables one clean line */
        }
    } else {
        out[0] = '\0';
    }
    (void)fclose(f);
}

void pl_daemon_stats_session_start(struct pl_daemon_stats *st, struct pl_daemon_session *s,
                                   uint64_t now_ns) {
    uint64_t supp = 0;
    read_comm(s->peer.pid, s->exe, sizeof(s->exe));
    s->stats_ident = pl_daemon_stats_ident(st, s->rule);
    pl_daemon_stats_add(st, s->stats_ident, PL_DAEMON_CTR_SESSIONS_OPENED, 1);
    if (st && !rl_allow(&st->rl_session, now_ns, &supp))
        return;
    pl_log_info("session %llu start: pid=%d uid=%u gid=%u exe=\"%s\" identity=\"%s\" "
                "suppressed_before=%llu",
                (unsigned long long)s->id, (int)s->peer.pid, s->peer.uid, s->peer.gid, s->exe,
                s->rule[0] ? s->rule : "default", (unsigned long long)supp);
}

void pl_daemon_stats_session_end(struct pl_daemon_stats *st, struct pl_daemon_session *s,
                                 const char *why, uint64_t now_ns) {
    uint64_t supp = 0;
    pl_daemon_stats_add(st, s->stats_ident, PL_DAEMON_CTR_SESSIONS_CLOSED, 1);
    if (st && !rl_allow(&st->rl_session, now_ns, &supp))
        return;
    uint64_t age = now_ns - s->t_open_ns;
    pl_log_info("session %llu end: pid=%d uid=%u exe=\"%s\" identity=\"%s\" requests=%llu "
                "tokens_in=%llu tokens_out=%llu age_ms=%llu last_ttft_ms=%.3f "
                "last_queue_ms=%.3f reason=\"%s\" suppressed_before=%llu",
                (unsigned long long)s->id, (int)s->peer.pid, s->peer.uid, s->exe,
                s->rule[0] ? s->rule : "default", (unsigned long long)s->n_requests,
                (unsigned long long)atomic_load_explicit(&s->tokens_in, memory_order_relaxed),
                (unsigned long long)atomic_load_explicit(&s->tokens_out, memory_order_relaxed),
                (unsigned long long)(age / 1000000ull),
                (double)atomic_load_explicit(&s->ttft_ns, memory_order_relaxed) / 1e6,
                (double)atomic_load_explicit(&s->queue_ns, memory_order_relaxed) / 1e6,
                s->kill_pending ? "killed by admin" : why, (unsigned long long)supp);
}
