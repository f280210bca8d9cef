/* SPDX-License-Identifier: MIT */
/* The access policy inside picolmd (see access.h): loading and reloading the policy,
 * per-uid accounting, and the admission decisions of the event thread. The decisions
 * themselves are policy/'s pure functions; this file feeds them kernel identities and keeps
 * the counters. */
#include "access.h"

#include <errno.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "pl/pl_err.h"
#include "pl/pl_log.h"
#include "pl/pl_util.h"
#include "pl/policy_file.h"
#include "pl/policy_match.h"
#include "session.h"

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59 /* Linux 4.13 */
#endif

/* A refused client is logged at most once per uid every LOG_INTERVAL (then the count of
 * refusals suppressed meanwhile is logged with the next message). */
#define LOG_INTERVAL_NS (30ull * 1000000000ull)

static uint64_t unix_now_ns(void) {
    struct timespec ts;
    (void)clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void set_msg(char *msg, size_t len, const char *text) {
    if (msg && len)
        (void)snprintf(msg, len, "%s", text);
}

/* ---- Loading ---- */

static int load(struct pl_daemon_access *a, struct pl_policy **ret, bool *ret_builtin, char *err,
                size_t err_len) {
    struct pl_policy_error perr = {0};
    int r = pl_policy_new_from_file(a->path, ret, &perr);
    if (r == -ENOENT && !a->path_explicit) {
        r = pl_policy_new_from_text(PL_DAEMON_ACCESS_BUILTIN, strlen(PL_DAEMON_ACCESS_BUILTIN),
                                    "<built-in policy>", ret, &perr);
        if (r == 0) {
            *ret_builtin = true;
            return 0;
        }
    }
    if (r < 0) {
        (void)snprintf(err, err_len, "%s", perr.msg[0] ? perr.msg : pl_strerror(r));
        return r;
    }
    *ret_builtin = false;
    return 0;
}

int pl_daemon_access_init(struct pl_daemon_access *a, const char *path, uint32_t max_sessions,
                          char *err, size_t err_len) {
    memset(a, 0, sizeof(*a));
    a->path_explicit = path && path[0];
    a->owner_uid = (uint32_t)geteuid();
    (void)snprintf(a->path, sizeof(a->path), "%s",
                   a->path_explicit ? path : PL_POLICY_DEFAULT_PATH);
    /* Every open session holds one entry; the rest keep the buckets of recent uids, so that
     * reconnecting does not refill a bucket. */
    a->n_users = max_sessions * 2u + 16u;
    a->users = calloc(a->n_users, sizeof(*a->users));
    a->groups = malloc(PL_POLICY_MAX_GROUPS * sizeof(uint32_t));
    if (!a->users || !a->groups) {
        pl_daemon_access_done(a);
        (void)snprintf(err, err_len, "out of memory for the policy tables");
        return -ENOMEM;
    }
    pl_policy_ratelimit_init(&a->admin_rl, LOG_INTERVAL_NS, 1);
    int r = load(a, &a->policy, &a->builtin, err, err_len);
    if (r < 0) {
        pl_daemon_access_done(a);
        return r;
    }
    a->loaded_unix_ns = unix_now_ns();
    if (a->builtin)
        pl_log_info("policy: %s does not exist: using the built-in policy (everyone allowed, "
                    "default limits)",
                    a->path);
    else
        pl_log_info("policy: %s: %zu rules", a->path, pl_policy_n_rules(a->policy));
    return 0;
}

void pl_daemon_access_done(struct pl_daemon_access *a) {
    a->policy = pl_policy_unref(a->policy);
    free(a->users);
    free(a->groups);
    a->users = NULL;
    a->groups = NULL;
}

int pl_daemon_access_reload(struct pl_daemon_access *a, char *err, size_t err_len) {
    struct pl_policy *fresh = NULL;
    bool builtin = false;
    int r = load(a, &fresh, &builtin, err, err_len);
    if (r < 0) {
        a->n_reload_errors++;
        (void)snprintf(a->last_error, sizeof(a->last_error), "%s", err);
        pl_log_err("policy reload rejected: %s; the policy in force stays", err);
        return r;
    }
    /* Swap: the old policy goes once nothing borrows from it (sessions copied their limits). */
    struct pl_policy *old = a->policy;
    a->policy = fresh;
    a->builtin = builtin;
    a->loaded_unix_ns = unix_now_ns();
    a->last_error[0] = '\0';
    a->n_reloads++;
    (void)pl_policy_unref(old);
    pl_log_info("policy reloaded: %s (%zu rules)", builtin ? "<built-in policy>" : a->path,
                pl_policy_n_rules(fresh));
    return 0;
}

int64_t pl_daemon_access_admin_gid(const struct pl_daemon_access *a) {
    uint32_t gid;
    if (a->policy && pl_policy_admin_gid(a->policy, &gid))
        return gid;
    return -1;
}

/* ---- Identity ---- */

/* Supplementary groups of the peer of fd, from the kernel. Returns the count (0 when the
 * kernel has none or does not say). */
static size_t peer_groups(struct pl_daemon_access *a, int fd) {
    socklen_t len = (socklen_t)(PL_POLICY_MAX_GROUPS * sizeof(uint32_t));
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, a->groups, &len) < 0)
        return 0; /* ENOPROTOOPT on old kernels: match on uid and primary gid only */
    return (size_t)len / sizeof(uint32_t);
}

/* The entry of uid: its own, a free one, or the least recently used idle one. NULL when
 * every entry is held by an open session (cannot happen: more entries than sessions). */
static struct pl_daemon_access_user *user_get(struct pl_daemon_access *a, uint32_t uid,
                                              uint64_t now_ns) {
    struct pl_daemon_access_user *spare = NULL;
    for (uint32_t i = 0; i < a->n_users; i++) {
        struct pl_daemon_access_user *u = &a->users[i];
        if (u->used && u->uid == uid)
            return u;
        if (!u->used) {
            if (!spare || spare->used)
                spare = u;
        } else if (u->refs == 0 &&
                   (!spare || (spare->used && u->last_used_ns < spare->last_used_ns))) {
            spare = u;
        }
    }
    if (!spare)
        return NULL;
    memset(spare, 0, sizeof(*spare));
    spare->used = true;
    spare->uid = uid;
    spare->last_used_ns = now_ns;
    pl_policy_bucket_init(&spare->bucket, PL_POLICY_UNLIMITED, 1, now_ns);
    pl_policy_ratelimit_init(&spare->log_rl, LOG_INTERVAL_NS, 1);
    return spare;
}

static void log_refusal(struct pl_daemon_access_user *u, uint64_t now_ns, int pid,
                        const char *what) {
    uint64_t suppressed = 0;
    if (u && !pl_policy_ratelimit_allow(&u->log_rl, now_ns, &suppressed))
        return;
    if (suppressed)
        pl_log_warn("refused pid %d uid %u: %s (%llu similar refusals of this uid suppressed)", pid,
                    u ? u->uid : 0u, what, (unsigned long long)suppressed);
    else
        pl_log_warn("refused pid %d uid %u: %s", pid, u ? u->uid : 0u, what);
}

/* ---- Sessions ---- */

int pl_daemon_access_admit(struct pl_daemon_access *a, struct pl_daemon_session *s, uint64_t now_ns,
                           char *msg, size_t msg_len) {
    struct pl_policy_verdict v;
    size_t n_groups = peer_groups(a, s->sock);
    struct pl_daemon_access_user *u = user_get(a, s->peer.uid, now_ns);
    if (!u) {
        set_msg(msg, msg_len, "no room in the per-user table");
        return -ENOSPC;
    }
    u->last_used_ns = now_ns;
    int r = pl_policy_match(a->policy, s->peer.uid, s->peer.gid, a->groups, n_groups, &v);
    if (r < 0) {
        a->n_denied++;
        set_msg(msg, msg_len, v.msg);
        log_refusal(u, now_ns, (int)s->peer.pid, v.msg);
        return r == -EINVAL ? r : -PL_ERR_DENIED;
    }
    struct pl_policy_refusal why;
    if (pl_policy_usage_session_acquire(&u->usage, &v.rule->limits, &why) < 0) {
        a->n_quota++;
        set_msg(msg, msg_len, why.msg);
        log_refusal(u, now_ns, (int)s->peer.pid, why.msg);
        return -PL_ERR_QUOTA;
    }
    u->refs++;
    /* A bucket starts full; a limited one keeps its level across sessions and reloads. */
    if (u->bucket.rate == PL_POLICY_UNLIMITED)
        pl_policy_bucket_init(&u->bucket, v.rule->limits.rate_tokens_per_s,
                              v.rule->limits.rate_burst, now_ns);
    else
        pl_policy_bucket_set(&u->bucket, v.rule->limits.rate_tokens_per_s,
                             v.rule->limits.rate_burst, now_ns);
    s->limits = v.rule->limits;
    (void)snprintf(s->rule, sizeof(s->rule), "%s", v.rule->name);
    s->access_user = (uint32_t)(u - a->users) + 1;
    s->ent_ready = false; /* the scheduler sets the entity up at its first request */
    pl_log_debug("session %llu: uid %u gid %u (%zu groups): rule '%s' (%s, weight %u)",
                 (unsigned long long)s->id, s->peer.uid, s->peer.gid, n_groups, v.rule->name,
                 pl_policy_class_name(v.rule->limits.priority), v.rule->limits.weight);
    return 0;
}

static struct pl_daemon_access_user *user_of(struct pl_daemon_access *a,
                                             const struct pl_daemon_session *s) {
    if (s->access_user == 0 || s->access_user > a->n_users)
        return NULL;
    return &a->users[s->access_user - 1];
}

void pl_daemon_access_leave(struct pl_daemon_access *a, struct pl_daemon_session *s) {
    struct pl_daemon_access_user *u = user_of(a, s);
    if (!u)
        return;
    /* Requests still with the scheduler stop counting against max_queued now: the client
     * that submitted them is gone. */
    for (uint32_t i = 0; i < s->n_reqs; i++)
        if (s->reqs[i].policy_queued) {
            s->reqs[i].policy_queued = false;
            (void)pl_policy_usage_queued_release(&u->usage);
        }
    (void)pl_policy_usage_session_release(&u->usage);
    if (u->refs > 0)
        u->refs--;
    s->access_user = 0;
}

/* ---- Requests ---- */

int pl_daemon_access_request_check(struct pl_daemon_access *a, const struct pl_daemon_session *s,
                                   uint32_t n_prompt, uint32_t max_tokens, uint32_t *ret_cap,
                                   char *msg, size_t msg_len) {
    const struct pl_policy_limits *l = &s->limits;
    struct pl_policy_refusal why;
    (void)a;
    /* max_tokens 0 asks for "as many as fit": check the prompt (and that one new token fits)
     * and cap the request at the limits instead of refusing it. */
    if (pl_policy_request_check(l, n_prompt, max_tokens ? max_tokens : 1, &why) < 0) {
        a->n_quota++;
        set_msg(msg, msg_len, why.msg);
        return -PL_ERR_QUOTA;
    }
    uint32_t cap = l->max_new_tokens;
    if (l->max_context != PL_POLICY_UNLIMITED)
        cap = PL_MIN(cap, l->max_context - n_prompt);
    *ret_cap = cap;
    return 0;
}

int pl_daemon_access_request_begin(struct pl_daemon_access *a, struct pl_daemon_session *s,
                                   struct pl_daemon_req *q, uint64_t now_ns, char *msg,
                                   size_t msg_len) {
    struct pl_daemon_access_user *u = user_of(a, s);
    struct pl_policy_refusal why;
    q->policy_queued = false;
    q->rate_taken = 0;
    if (!u)
        return 0; /* not admitted through the policy (cannot happen for an open session) */
    if (pl_policy_usage_queued_acquire(&u->usage, &s->limits, &why) < 0)
        goto refuse;
    uint64_t cost = (uint64_t)q->n_prompt + q->max_new;
    if (pl_policy_bucket_take(&u->bucket, cost, now_ns, &why) < 0) {
        (void)pl_policy_usage_queued_release(&u->usage);
        goto refuse;
    }
    q->policy_queued = true;
    q->rate_taken = cost;
    u->last_used_ns = now_ns;
    return 0;
refuse:
    a->n_quota++;
    set_msg(msg, msg_len, why.msg);
    log_refusal(u, now_ns, (int)s->peer.pid, why.msg);
    return -PL_ERR_QUOTA;
}

void pl_daemon_access_request_end(struct pl_daemon_access *a, struct pl_daemon_req *q,
                                  uint64_t used, uint64_t now_ns) {
    struct pl_daemon_access_user *u = user_of(a, q->s);
    if (!u) {
        q->policy_queued = false;
        q->rate_taken = 0;
        return;
    }
    if (q->policy_queued) {
        q->policy_queued = false;
        (void)pl_policy_usage_queued_release(&u->usage);
    }
    if (q->rate_taken > used)
        pl_policy_bucket_refund(&u->bucket, q->rate_taken - used, now_ns);
    q->rate_taken = 0;
}

/* ---- Admin ---- */

int pl_daemon_access_admin_check(struct pl_daemon_access *a, int fd, uint64_t now_ns) {
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
        return -errno;
    if (len != sizeof(cred))
        return -EPROTO;
    /* The uid that started the broker may administer it: an unprivileged broker (the tour,
     * a user service) has no other admin, and that uid can signal it anyway. (Root is an
     * admin by the policy; the service user a root broker drops to is not.) */
    if (cred.uid == a->owner_uid)
        return 0;
    size_t n_groups = peer_groups(a, fd);
    int r = pl_policy_match_admin(a->policy, cred.uid, cred.gid, a->groups, n_groups);
    if (r < 0) {
        uint64_t suppressed = 0;
        if (pl_policy_ratelimit_allow(&a->admin_rl, now_ns, &suppressed))
            pl_log_warn("admin socket: refused pid %d uid %u gid %u: not root and not in the "
                        "policy's admin_group (%llu more refusals suppressed)",
                        (int)cred.pid, (unsigned)cred.uid, (unsigned)cred.gid,
                        (unsigned long long)suppressed);
        return -PL_ERR_DENIED;
    }
    return 0;
}
