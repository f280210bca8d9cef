/* SPDX-License-Identifier: MIT */
/* Broker statistics (pl_daemon_stats_*): counters and fixed-bucket histograms since start,
 * in total and per policy identity (the name of the policy rule a session matched). Lock-free:
 * the inference thread and the event thread record with relaxed atomic adds, and the event
 * thread reads them for picoctl stats and the metrics textfile (admin.c, metrics_text.c).
 * Also the structured session start/end log lines and a log rate limiter for lines a client
 * can trigger. */
#ifndef PL_DAEMON_STATS_H
#define PL_DAEMON_STATS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pl_daemon_session;
struct Picolm__Admin__V1__Stats;

enum pl_daemon_ctr {
    PL_DAEMON_CTR_SESSIONS_OPENED = 0,
    PL_DAEMON_CTR_SESSIONS_CLOSED,
    PL_DAEMON_CTR_SESSIONS_KILLED, /* by picoctl kill */
    PL_DAEMON_CTR_REQUESTS,        /* Generates accepted and handed to the scheduler */
    PL_DAEMON_CTR_TOKENS_IN,       /* prompt tokens of those */
    PL_DAEMON_CTR_TOKENS_OUT,      /* tokens generated */
    PL_DAEMON_CTR_FINISH_LENGTH,
    PL_DAEMON_CTR_FINISH_STOP,
    PL_DAEMON_CTR_FINISH_EOS,
    PL_DAEMON_CTR_FINISH_CANCELLED,
    PL_DAEMON_CTR_REQUESTS_FAILED, /* ended with an Error (KV exhausted, internal...) */
    PL_DAEMON_CTR_PROTOCOL_ERRORS, /* sessions ended for breaking the protocol */
    PL_DAEMON_CTR_PREFIX_HITS,     /* requests that started from cached prefix blocks */
    PL_DAEMON_CTR_PREFIX_TOKENS,   /* prompt tokens those did not prefill */
    /* Broker-wide only (no identity set shows them; pl_daemon_stats_ctr_total_only): */
    PL_DAEMON_CTR_PREFIX_LOADED,   /* prefix cache blocks read from its directory */
    PL_DAEMON_CTR_PREFIX_SAVED,    /* blocks written to it */
    PL_DAEMON_CTR_PREFIX_EVICTED,  /* blocks given up for room */
    PL_DAEMON_CTR_PREFIX_REJECTED, /* its files ignored: another model, or damaged */
    _PL_DAEMON_CTR_MAX,
};

enum pl_daemon_hist {
    PL_DAEMON_HIST_TTFT = 0,    /* ns, receipt to first token */
    PL_DAEMON_HIST_INTER_TOKEN, /* ns between two tokens of one request */
    PL_DAEMON_HIST_QUEUE_WAIT,  /* ns, receipt to first scheduled step */
    PL_DAEMON_HIST_STEP,        /* ns per forward step (total only) */
    PL_DAEMON_HIST_BATCH,       /* tokens per forward step (total only) */
    _PL_DAEMON_HIST_MAX,
};

/* Upper bounds per histogram, at most this many; one overflow bucket follows. */
#define PL_DAEMON_HIST_MAX_BOUNDS 24u
/* Identities tracked separately; later ones are counted under "_other". */
#define PL_DAEMON_STATS_MAX_IDENT 64u
#define PL_DAEMON_STATS_IDENT_LEN 64u
/* "No identity": total only. */
#define PL_DAEMON_STATS_NO_IDENT UINT32_MAX

struct pl_daemon_hist_data {
    _Atomic uint64_t counts[PL_DAEMON_HIST_MAX_BOUNDS + 1]; /* per bucket, not cumulative */
    _Atomic uint64_t sum;                                   /* of the observed values */
};

struct pl_daemon_stats_set {
    _Atomic uint64_t ctr[_PL_DAEMON_CTR_MAX];
    struct pl_daemon_hist_data h[_PL_DAEMON_HIST_MAX];
};

/* A log rate limiter: at most burst lines per window_ns (event thread only). */
struct pl_daemon_ratelimit {
    uint64_t window_ns;
    uint32_t burst;
    uint32_t n;
    uint64_t start_ns;
    uint64_t suppressed;
};

struct pl_daemon_stats {
    struct pl_daemon_stats_set total;
    /* Identities: the event thread writes a name, then publishes n_ident (release); names
     * never change once published. */
    _Atomic uint32_t n_ident;
    char names[PL_DAEMON_STATS_MAX_IDENT][PL_DAEMON_STATS_IDENT_LEN];
    struct pl_daemon_stats_set ident[PL_DAEMON_STATS_MAX_IDENT];
    struct pl_daemon_ratelimit rl_session; /* session start/end lines */
    struct pl_daemon_ratelimit rl_warn;    /* client-triggered warnings */
};

/* Allocate zeroed statistics. Returns 0 or -ENOMEM. */
int pl_daemon_stats_new(struct pl_daemon_stats **ret);
void pl_daemon_stats_free(struct pl_daemon_stats *st);

/* The slot of identity name ("" counts as "default"), registering it on first use (event
 * thread only). A full table gives the shared "_other" slot. */
uint32_t pl_daemon_stats_ident(struct pl_daemon_stats *st, const char *name);

/* Record (any thread; st may be NULL: nothing happens). ident: a slot from
 * pl_daemon_stats_ident() or PL_DAEMON_STATS_NO_IDENT. */
void pl_daemon_stats_add(struct pl_daemon_stats *st, uint32_t ident, enum pl_daemon_ctr c,
                         uint64_t n);
void pl_daemon_stats_observe(struct pl_daemon_stats *st, uint32_t ident, enum pl_daemon_hist h,
                             uint64_t value);

/* Histogram name ("ttft_ns", ...), its bounds and their number. */
const char *pl_daemon_stats_hist_name(enum pl_daemon_hist h);
const uint64_t *pl_daemon_stats_hist_bounds(enum pl_daemon_hist h, uint32_t *ret_n);
const char *pl_daemon_stats_ctr_name(enum pl_daemon_ctr c);
/* True for the counters kept for the broker as a whole only (no identity set has them). */
bool pl_daemon_stats_ctr_total_only(enum pl_daemon_ctr c);

/* Gauges the broker adds beside the counters (filled by the caller). */
struct pl_daemon_stats_gauges {
    uint64_t uptime_ns;
    uint64_t sessions_open;
    uint64_t requests_active;
    uint64_t requests_waiting;
    uint64_t kv_used_tokens;
    uint64_t kv_total_tokens;
    uint64_t draining;
    uint64_t prefix_cache_blocks; /* KV blocks the shared prefix cache holds now */
};

/* A snapshot as the admin protocol's Stats message. Allocates; free with
 * pl_daemon_stats_proto_free(). Returns 0 or -ENOMEM. */
int pl_daemon_stats_proto(const struct pl_daemon_stats *st, const struct pl_daemon_stats_gauges *g,
                          struct Picolm__Admin__V1__Stats **ret);
void pl_daemon_stats_proto_free(struct Picolm__Admin__V1__Stats *m);

/* ---- Structured session log lines (event thread) ---- */

/* A session became OPEN: set its identity slot and executable name, count it and log one
 * line "session N start: ..." (rate-limited). */
void pl_daemon_stats_session_start(struct pl_daemon_stats *st, struct pl_daemon_session *s,
                                   uint64_t now_ns);
/* An OPEN session is closing: count it and log "session N end: ..." with its counts and
 * timings (rate-limited). */
void pl_daemon_stats_session_end(struct pl_daemon_stats *st, struct pl_daemon_session *s,
                                 const char *why, uint64_t now_ns);

/* May a client-triggered warning be logged now? *ret_suppressed gets how many were dropped
 * since the last one allowed (mention them in the line). st may be NULL (always true). */
bool pl_daemon_stats_warn_allow(struct pl_daemon_stats *st, uint64_t now_ns,
                                uint64_t *ret_suppressed);

#endif
