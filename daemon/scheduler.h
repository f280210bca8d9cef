/* SPDX-License-Identifier: MIT */
/* The inference thread (pl_daemon_sched_*): continuous batching over every request with
 * work. Each step drains the message queue from the event thread (new requests, session
 * closes, queued replies), admits waiting requests while the KV pool has room, builds one
 * batch of every decoding request's next token plus a bounded chunk of prompt tokens, runs
 * one pl_ctx_decode(), samples per request, matches stop strings, and appends TokenChunk /
 * Done / Error records to each client's completion ring, which only this thread writes.
 * A request whose client does not drain its ring stalls alone. Nothing is allocated and no
 * syscall is made per token; the client's doorbell is rung only when it sleeps, and for a
 * stream of fast tokens at most once per stream_coalesce_us (a request's first token, its
 * end and every reply go out at once). */
#ifndef PL_DAEMON_SCHEDULER_H
#define PL_DAEMON_SCHEDULER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spsc.h"

struct pl_model;
struct pl_daemon_req;
struct pl_daemon_session;
struct pl_daemon_sched;
struct pl_daemon_stats;

/* Messages event -> scheduler. */
enum pl_daemon_cmd {
    PL_DAEMON_CMD_NEW = 1,    /* ptr: struct pl_daemon_req, SUBMITTED */
    PL_DAEMON_CMD_CLOSE = 2,  /* ptr: session (dead already set): drop it, then RELEASED */
    PL_DAEMON_CMD_OUTBOX = 3, /* ptr: session with replies in its outbox */
};

/* Notices scheduler -> event. */
enum pl_daemon_notice {
    PL_DAEMON_NOTICE_REQ_DONE = 1,         /* ptr: request, back to the event thread */
    PL_DAEMON_NOTICE_SESSION_RELEASED = 2, /* ptr: session; the scheduler holds nothing of it */
    PL_DAEMON_NOTICE_OUTBOX_FREED = 3,     /* ptr: session whose outbox has room again */
    PL_DAEMON_NOTICE_CQ_BROKEN = 4,        /* ptr: session whose client broke its completion
                                              ring (sent once per session): end it */
    PL_DAEMON_NOTICE_CQ_WAIT = 5,          /* ptr: session whose completion ring is full; arg:
                                              its consumer index as we saw it. Wait (futex on
                                              that word, through io_uring) and kick us. At most
                                              one queued per session (cq_wait_posted) */
};

struct pl_daemon_sched_opts {
    uint32_t n_seq; /* requests decoding at once */
    uint32_t n_ctx;
    uint32_t n_batch;
    uint32_t kv_tokens;
    uint32_t kv_type;
    const uint32_t *cpus; /* pin the thread and the engine pool; NULL/0: no pinning */
    uint32_t n_cpus;
    uint32_t prefill_chunk;
    uint32_t stream_coalesce_us; /* a streamed token may wait this long for later ones so
                                    that one client wake-up delivers several (0: none) */
    uint32_t queue_max;
    uint32_t queue_timeout_ms;
    uint32_t max_held; /* request slots over all sessions */
    uint32_t max_sessions;
    uint32_t decode_slots;         /* requests given a token per step, chosen by policy weight and
                                      class (pl/policy_sched.h); 0: every decoding request */
    struct pl_daemon_stats *stats; /* borrowed; histograms and counters (NULL: none) */
    uint32_t prefix_cache_tokens;  /* shared prefix KV cache size (0: off) */
    const char *prefix_cache_dir;  /* borrowed for the call: persistence ("" / NULL: none) */
};

/* Live counters, written by the scheduler (relaxed), read by admin. */
struct pl_daemon_sched_stats {
    _Atomic uint64_t steps;
    _Atomic uint64_t tokens_decoded; /* batch entries */
    _Atomic uint64_t tokens_generated;
    _Atomic uint64_t requests_done;
    _Atomic uint64_t kv_exhausted; /* requests refused for KV */
    _Atomic uint32_t kv_used_tokens;
    _Atomic uint32_t kv_reserved_tokens;
    _Atomic uint32_t n_active;
    _Atomic uint32_t n_waiting;
    _Atomic uint32_t prefix_blocks; /* KV blocks the prefix cache holds */
};

/* Create the scheduler and start its thread, which pins itself to opts->cpus and creates the
 * engine context (so the pool's workers are pinned to the same cores). Borrows m (must
 * outlive the scheduler). Returns 0 or a negative code (-ENOMEM, the engine's pl_ctx_new()
 * error, -errno from thread creation) with the reason in err. */
int pl_daemon_sched_start(struct pl_model *m, const struct pl_daemon_sched_opts *opts,
                          struct pl_daemon_sched **ret, char *err, size_t err_len);
/* Stop the thread and free everything. Accepts NULL. */
void pl_daemon_sched_stop(struct pl_daemon_sched *s);

/* ---- Event-thread side ---- */
/* Queue a message and wake the scheduler if it sleeps. Returns 0 or -ENOSPC (a sizing bug). */
int pl_daemon_sched_send(struct pl_daemon_sched *s, uint32_t kind, void *ptr);
/* Wake the scheduler if it sleeps (after setting a cancel flag, or on a doorbell). */
void pl_daemon_sched_kick(struct pl_daemon_sched *s);
/* Next notice, if any. */
bool pl_daemon_sched_notice(struct pl_daemon_sched *s, struct pl_daemon_msg *ret);
/* Notices queued that pl_daemon_sched_notice() has not returned yet (event thread). */
bool pl_daemon_sched_notice_pending(struct pl_daemon_sched *s);
/* The eventfd the scheduler writes after posting notices (poll it, then drain it). */
int pl_daemon_sched_notify_fd(const struct pl_daemon_sched *s);
/* Live settings. */
void pl_daemon_sched_set_live(struct pl_daemon_sched *s, uint32_t prefill_chunk,
                              uint32_t stream_coalesce_us, uint32_t queue_max,
                              uint32_t queue_timeout_ms);
struct pl_daemon_sched_stats *pl_daemon_sched_stats(struct pl_daemon_sched *s);
uint32_t pl_daemon_sched_kv_total(const struct pl_daemon_sched *s);
uint32_t pl_daemon_sched_n_ctx(const struct pl_daemon_sched *s);
/* Chat templates and the grammar vocabulary of the model (immutable once started: the
 * event thread may use them while the scheduler runs). */
struct pl_daemon_features;
const struct pl_daemon_features *pl_daemon_sched_features(const struct pl_daemon_sched *s);

/* Monotonic clock in ns (vDSO, no syscall). */
uint64_t pl_daemon_now_ns(void);

#endif
