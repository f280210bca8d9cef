/* SPDX-License-Identifier: MIT */
/* Per-identity accounting (pl_policy_bucket_*, pl_policy_usage_*, pl_policy_request_check,
 * pl_policy_ratelimit_*). Called by the daemon's session table and scheduler with times it
 * read itself; integer arithmetic only, every product checked for overflow. */
#include "pl/policy_quota.h"

#include <errno.h>
#include <stdio.h>

#include "pl/pl_err.h"
#include "pl/pl_util.h"
#include "pl/policy_file.h"

#define NT_PER_TOKEN UINT64_C(1000000000) /* nano-tokens per token */

const char *pl_policy_limit_name(enum pl_policy_limit l) {
    switch (l) {
    case PL_POLICY_LIMIT_NONE:
        return "none";
    case PL_POLICY_LIMIT_MAX_SESSIONS:
        return "max_sessions";
    case PL_POLICY_LIMIT_MAX_QUEUED:
        return "max_queued";
    case PL_POLICY_LIMIT_MAX_PROMPT_TOKENS:
        return "max_prompt_tokens";
    case PL_POLICY_LIMIT_MAX_NEW_TOKENS:
        return "max_new_tokens";
    case PL_POLICY_LIMIT_MAX_CONTEXT:
        return "max_context";
    case PL_POLICY_LIMIT_RATE:
        return "rate_tokens_per_s";
    case _PL_POLICY_LIMIT_MAX:
        break;
    }
    return "unknown";
}

static int refuse(struct pl_policy_refusal *ret, enum pl_policy_limit l, uint64_t requested,
                  uint64_t allowed, const char *unit) {
    if (ret) {
        ret->limit = l;
        ret->requested = requested;
        ret->allowed = allowed;
        (void)snprintf(ret->msg, sizeof(ret->msg), "%s: %llu %s requested, limit %llu",
                       pl_policy_limit_name(l), (unsigned long long)requested, unit,
                       (unsigned long long)allowed);
    }
    return -PL_ERR_QUOTA;
}

/* ---- Token bucket ---- */

static void refill(struct pl_policy_bucket *b, uint64_t now_ns) {
    if (now_ns <= b->last_ns)
        return; /* a clock that went backwards (or stood still) adds nothing */
    uint64_t elapsed = now_ns - b->last_ns;
    b->last_ns = now_ns;
    if (b->rate == 0 || b->level_nt >= b->cap_nt) {
        b->level_nt = PL_MIN(b->level_nt, b->cap_nt);
        return;
    }
    /* rate tokens/s for elapsed ns = rate * elapsed nano-tokens, exactly. */
    uint64_t room = b->cap_nt - b->level_nt, add;
    if (pl_mul_overflow(elapsed, (uint64_t)b->rate, &add) || add >= room)
        b->level_nt = b->cap_nt;
    else
        b->level_nt += add;
}

void pl_policy_bucket_set(struct pl_policy_bucket *b, uint32_t rate_per_s, uint32_t burst,
                          uint64_t now_ns) {
    refill(b, now_ns);
    b->rate = rate_per_s;
    b->cap_nt = (uint64_t)(burst ? burst : 1) * NT_PER_TOKEN; /* < 2^32 * 1e9 < 2^62 */
    if (b->level_nt > b->cap_nt)
        b->level_nt = b->cap_nt;
    if (now_ns > b->last_ns)
        b->last_ns = now_ns;
}

void pl_policy_bucket_init(struct pl_policy_bucket *b, uint32_t rate_per_s, uint32_t burst,
                           uint64_t now_ns) {
    *b = (struct pl_policy_bucket){.last_ns = now_ns};
    pl_policy_bucket_set(b, rate_per_s, burst, now_ns);
    b->level_nt = b->cap_nt;
}

uint64_t pl_policy_bucket_available(struct pl_policy_bucket *b, uint64_t now_ns) {
    if (b->rate == PL_POLICY_UNLIMITED)
        return UINT64_MAX;
    refill(b, now_ns);
    return b->level_nt / NT_PER_TOKEN;
}

int pl_policy_bucket_take(struct pl_policy_bucket *b, uint64_t n, uint64_t now_ns,
                          struct pl_policy_refusal *ret) {
    if (b->rate == PL_POLICY_UNLIMITED)
        return 0;
    refill(b, now_ns);
    uint64_t need;
    if (pl_mul_overflow(n, NT_PER_TOKEN, &need) || need > b->level_nt) {
        if (ret) {
            ret->limit = PL_POLICY_LIMIT_RATE;
            ret->requested = n;
            ret->allowed = b->rate;
            (void)snprintf(ret->msg, sizeof(ret->msg),
                           "rate_tokens_per_s: %llu tokens requested, %llu available "
                           "(limit %u/s, burst %llu)",
                           (unsigned long long)n, (unsigned long long)(b->level_nt / NT_PER_TOKEN),
                           b->rate, (unsigned long long)(b->cap_nt / NT_PER_TOKEN));
        }
        return -PL_ERR_QUOTA;
    }
    b->level_nt -= need;
    return 0;
}

void pl_policy_bucket_refund(struct pl_policy_bucket *b, uint64_t n, uint64_t now_ns) {
    if (b->rate == PL_POLICY_UNLIMITED)
        return;
    refill(b, now_ns);
    uint64_t give, room = b->cap_nt - b->level_nt;
    if (pl_mul_overflow(n, NT_PER_TOKEN, &give) || give >= room)
        b->level_nt = b->cap_nt;
    else
        b->level_nt += give;
}

uint64_t pl_policy_bucket_wait_ns(struct pl_policy_bucket *b, uint64_t n, uint64_t now_ns) {
    if (b->rate == PL_POLICY_UNLIMITED)
        return 0;
    refill(b, now_ns);
    uint64_t need;
    if (pl_mul_overflow(n, NT_PER_TOKEN, &need) || need > b->cap_nt)
        return UINT64_MAX;
    if (need <= b->level_nt)
        return 0;
    if (b->rate == 0)
        return UINT64_MAX;
    uint64_t deficit = need - b->level_nt;
    /* ceil(deficit / rate) ns: the bucket gains rate nano-tokens per ns. */
    return deficit / b->rate + (deficit % b->rate != 0);
}

/* ---- Session and queue counters ---- */

int pl_policy_usage_session_acquire(struct pl_policy_usage *u, const struct pl_policy_limits *l,
                                    struct pl_policy_refusal *ret) {
    if (l->max_sessions != PL_POLICY_UNLIMITED && u->sessions >= l->max_sessions)
        return refuse(ret, PL_POLICY_LIMIT_MAX_SESSIONS, (uint64_t)u->sessions + 1, l->max_sessions,
                      "sessions");
    if (u->sessions == UINT32_MAX)
        return refuse(ret, PL_POLICY_LIMIT_MAX_SESSIONS, (uint64_t)u->sessions + 1, UINT32_MAX,
                      "sessions");
    u->sessions++;
    return 0;
}

int pl_policy_usage_queued_acquire(struct pl_policy_usage *u, const struct pl_policy_limits *l,
                                   struct pl_policy_refusal *ret) {
    if (l->max_queued != PL_POLICY_UNLIMITED && u->queued >= l->max_queued)
        return refuse(ret, PL_POLICY_LIMIT_MAX_QUEUED, (uint64_t)u->queued + 1, l->max_queued,
                      "requests");
    if (u->queued == UINT32_MAX)
        return refuse(ret, PL_POLICY_LIMIT_MAX_QUEUED, (uint64_t)u->queued + 1, UINT32_MAX,
                      "requests");
    u->queued++;
    return 0;
}

int pl_policy_usage_session_release(struct pl_policy_usage *u) {
    if (u->sessions == 0)
        return -EINVAL;
    u->sessions--;
    return 0;
}

int pl_policy_usage_queued_release(struct pl_policy_usage *u) {
    if (u->queued == 0)
        return -EINVAL;
    u->queued--;
    return 0;
}

/* ---- Per-request limits ---- */

int pl_policy_request_check(const struct pl_policy_limits *l, uint64_t n_prompt, uint64_t n_new,
                            struct pl_policy_refusal *ret) {
    if (l->max_prompt_tokens != PL_POLICY_UNLIMITED && n_prompt > l->max_prompt_tokens)
        return refuse(ret, PL_POLICY_LIMIT_MAX_PROMPT_TOKENS, n_prompt, l->max_prompt_tokens,
                      "prompt tokens");
    if (l->max_new_tokens != PL_POLICY_UNLIMITED && n_new > l->max_new_tokens)
        return refuse(ret, PL_POLICY_LIMIT_MAX_NEW_TOKENS, n_new, l->max_new_tokens, "new tokens");
    uint64_t total;
    if (pl_add_overflow(n_prompt, n_new, &total))
        total = UINT64_MAX;
    if (l->max_context != PL_POLICY_UNLIMITED && total > l->max_context)
        return refuse(ret, PL_POLICY_LIMIT_MAX_CONTEXT, total, l->max_context, "context tokens");
    return 0;
}

/* ---- Log rate limiting ---- */

void pl_policy_ratelimit_init(struct pl_policy_ratelimit *rl, uint64_t interval_ns,
                              uint32_t burst) {
    *rl = (struct pl_policy_ratelimit){.interval_ns = interval_ns, .burst = burst};
}

bool pl_policy_ratelimit_allow(struct pl_policy_ratelimit *rl, uint64_t now_ns,
                               uint64_t *ret_suppressed) {
    /* A new window starts interval_ns after the last one began (or at the first call). */
    if (rl->n_in_window == 0 || now_ns < rl->window_start_ns ||
        now_ns - rl->window_start_ns >= rl->interval_ns) {
        rl->window_start_ns = now_ns;
        rl->n_in_window = 0;
    }
    if (rl->n_in_window >= rl->burst) {
        if (rl->n_suppressed < UINT64_MAX)
            rl->n_suppressed++;
        return false;
    }
    rl->n_in_window++;
    if (ret_suppressed)
        *ret_suppressed = rl->n_suppressed;
    rl->n_suppressed = 0;
    return true;
}
