/* SPDX-License-Identifier: MIT */
/* Per-identity accounting (pl_policy_bucket_*, pl_policy_usage_*, pl_policy_request_check,
 * pl_policy_ratelimit_*): token buckets, session and queue counters, per-request limit checks
 * and a log rate limiter. The daemon keeps one struct pl_policy_usage and one bucket per uid
 * and passes the time in (CLOCK_MONOTONIC ns): nothing here reads a clock or allocates, so
 * the calls are safe on the hot path. A refused check returns -PL_ERR_QUOTA with a
 * struct pl_policy_refusal naming the limit; the enum values below are stable and may be
 * sent to clients. */
#ifndef PL_POLICY_POLICY_QUOTA_H
#define PL_POLICY_POLICY_QUOTA_H

#include <stdbool.h>
#include <stdint.h>

struct pl_policy_limits;

/* Which limit was hit. Stable numbering. */
enum pl_policy_limit {
    PL_POLICY_LIMIT_NONE = 0,
    PL_POLICY_LIMIT_MAX_SESSIONS = 1,
    PL_POLICY_LIMIT_MAX_QUEUED = 2,
    PL_POLICY_LIMIT_MAX_PROMPT_TOKENS = 3,
    PL_POLICY_LIMIT_MAX_NEW_TOKENS = 4,
    PL_POLICY_LIMIT_MAX_CONTEXT = 5,
    PL_POLICY_LIMIT_RATE = 6,
    _PL_POLICY_LIMIT_MAX
};

struct pl_policy_refusal {
    enum pl_policy_limit limit;
    uint64_t requested; /* what the caller asked for (count after the operation) */
    uint64_t allowed;   /* the limit */
    char msg[128];      /* e.g. "max_sessions: 5 sessions requested, limit 4" */
};

/* The policy-file key naming the limit ("max_sessions", ..., "rate_tokens_per_s"; "none"). */
const char *pl_policy_limit_name(enum pl_policy_limit l);

/* ---- Token bucket ---- */

/* Level kept in nano-tokens so refills are exact integers (no drift, no floats). */
struct pl_policy_bucket {
    uint64_t level_nt; /* current content, nano-tokens */
    uint64_t cap_nt;   /* burst * 1e9 */
    uint64_t last_ns;  /* time of the last refill */
    uint32_t rate;     /* tokens per second; PL_POLICY_UNLIMITED: never empty */
};

/* Start full at now_ns. rate 0 is treated as "never refills"; burst 0 as 1. */
void pl_policy_bucket_init(struct pl_policy_bucket *b, uint32_t rate_per_s, uint32_t burst,
                           uint64_t now_ns);
/* Change rate and burst (policy reload) keeping the current level (capped at the new burst). */
void pl_policy_bucket_set(struct pl_policy_bucket *b, uint32_t rate_per_s, uint32_t burst,
                          uint64_t now_ns);
/* Whole tokens available at now_ns (refills first; time going backwards adds nothing). */
uint64_t pl_policy_bucket_available(struct pl_policy_bucket *b, uint64_t now_ns);
/* Take n tokens at now_ns. Returns 0, or -PL_ERR_QUOTA (nothing taken) and, if ret is not
 * NULL, fills *ret with PL_POLICY_LIMIT_RATE. */
int pl_policy_bucket_take(struct pl_policy_bucket *b, uint64_t n, uint64_t now_ns,
                          struct pl_policy_refusal *ret);
/* Give back n tokens taken earlier and not used (a request reserved its whole budget and
 * ended early), at most up to the burst. */
void pl_policy_bucket_refund(struct pl_policy_bucket *b, uint64_t n, uint64_t now_ns);
/* Nanoseconds from now_ns until n tokens will be available (0: now; UINT64_MAX: never, i.e.
 * n exceeds the burst or the rate is 0). For a scheduler that defers instead of refusing. */
uint64_t pl_policy_bucket_wait_ns(struct pl_policy_bucket *b, uint64_t n, uint64_t now_ns);

/* ---- Session and queue counters (one per uid) ---- */

struct pl_policy_usage {
    uint32_t sessions;
    uint32_t queued;
};

/* Count one more session / queued request if the limit allows. Returns 0 (counted) or
 * -PL_ERR_QUOTA (not counted; *ret filled if not NULL). */
int pl_policy_usage_session_acquire(struct pl_policy_usage *u, const struct pl_policy_limits *l,
                                    struct pl_policy_refusal *ret);
int pl_policy_usage_queued_acquire(struct pl_policy_usage *u, const struct pl_policy_limits *l,
                                   struct pl_policy_refusal *ret);
/* Undo one acquire. Returns 0, or -EINVAL if the counter is already 0 (a daemon bug). */
int pl_policy_usage_session_release(struct pl_policy_usage *u);
int pl_policy_usage_queued_release(struct pl_policy_usage *u);

/* ---- Per-request limits ---- */

/* Check a request of n_prompt tokens asking for up to n_new new tokens against l, in this
 * order: max_prompt_tokens, max_new_tokens, max_context (n_prompt + n_new, no overflow).
 * Returns 0 or -PL_ERR_QUOTA with *ret (if not NULL) naming the first limit exceeded. */
int pl_policy_request_check(const struct pl_policy_limits *l, uint64_t n_prompt, uint64_t n_new,
                            struct pl_policy_refusal *ret);

/* ---- Log rate limiting ("log once per client, rate limited") ---- */

struct pl_policy_ratelimit {
    uint64_t interval_ns;
    uint32_t burst;
    uint32_t n_in_window;
    uint64_t window_start_ns;
    uint64_t n_suppressed; /* since the last allowed message */
};

/* At most burst messages per interval_ns (burst 0: none). */
void pl_policy_ratelimit_init(struct pl_policy_ratelimit *rl, uint64_t interval_ns, uint32_t burst);
/* Whether a message may be logged at now_ns. When it may, *ret_suppressed (if not NULL) gets
 * how many were suppressed since the last allowed one (log it with the message). */
bool pl_policy_ratelimit_allow(struct pl_policy_ratelimit *rl, uint64_t now_ns,
                               uint64_t *ret_suppressed);

#endif
