/* SPDX-License-Identifier: MIT */
/* The broker's side of the access policy (pl_daemon_access_*): the policy in force (file or
 * built-in), a table of per-uid usage (sessions, queued requests, token bucket, log rate
 * limiter), and the decisions the event thread takes with them: admit a client at the
 * handshake, check and account a Generate, give its budget back when it ends, admit an admin
 * connection, reload the policy. Identity comes only from the kernel (SO_PEERCRED, taken by
 * pl_ipc_handshake_recv_hello, and SO_PEERGROUPS, read here), never from a message.
 * Event thread only; the scheduler reads the limits copied into each session. */
#ifndef PL_DAEMON_ACCESS_H
#define PL_DAEMON_ACCESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pl/policy_quota.h"

struct pl_policy;
struct pl_daemon_session;
struct pl_daemon_req;

struct pl_daemon_access_user {
    uint32_t uid;
    uint32_t refs; /* sessions of this uid holding the entry */
    uint64_t last_used_ns;
    struct pl_policy_usage usage;
    struct pl_policy_bucket bucket;
    struct pl_policy_ratelimit log_rl;
    bool used;
};

struct pl_daemon_access {
    struct pl_policy *policy; /* in force; never NULL after init */
    char path[4096];          /* the file reloads read */
    bool path_explicit;       /* --policy given: a missing file is an error */
    bool builtin;             /* the built-in allow-everyone policy is in force */
    uint64_t loaded_unix_ns;
    uint64_t n_reloads, n_reload_errors, n_denied, n_quota;
    char last_error[512]; /* of the last failed (re)load, "" when none */
    struct pl_daemon_access_user *users;
    uint32_t n_users; /* capacity */
    uint32_t *groups; /* [PL_POLICY_MAX_GROUPS] SO_PEERGROUPS scratch */
    struct pl_policy_ratelimit admin_rl;
    uint32_t owner_uid; /* euid at start-up, before any privilege drop */
};

/* Built-in policy used when the default file is missing: everyone is allowed, with no
 * per-user limits beyond the daemon's own (max_sessions, max_requests, ctx), weight 100,
 * interactive. */
#define PL_DAEMON_ACCESS_BUILTIN                                                                   \
    "[rule everyone]\nmatch = default\naccess = allow\nmax_sessions = unlimited\n"                 \
    "max_queued = unlimited\nmax_prompt_tokens = unlimited\nmax_new_tokens = unlimited\n"

/* Load the policy (path "" = PL_POLICY_DEFAULT_PATH; when that default file does not exist
 * the built-in policy is used and logged) and size the per-uid table for max_sessions
 * clients. Returns 0 or a negative code with "FILE:LINE: message" in err. */
int pl_daemon_access_init(struct pl_daemon_access *a, const char *path, uint32_t max_sessions,
                          char *err, size_t err_len);
void pl_daemon_access_done(struct pl_daemon_access *a);

/* Re-read the policy file; on any error the policy in force stays and err says why (with
 * the line). Existing sessions keep the limits they were admitted with; rate limits of known
 * uids follow the new policy at their next session. Returns 0 or a negative code. */
int pl_daemon_access_reload(struct pl_daemon_access *a, char *err, size_t err_len);

/* The admin group of the policy in force (for the socket's file group), or -1 (root only). */
int64_t pl_daemon_access_admin_gid(const struct pl_daemon_access *a);

/* Handshake: decide on s->peer (kernel identity) plus the supplementary groups of s->sock.
 * On success copies the rule's limits into the session and counts the session against its
 * uid's max_sessions; returns 0. Otherwise returns -PL_ERR_DENIED (policy refuses) or
 * -PL_ERR_QUOTA (max_sessions) or -errno, logs once per uid with rate limiting, and writes
 * the reason to msg. */
int pl_daemon_access_admit(struct pl_daemon_access *a, struct pl_daemon_session *s, uint64_t now_ns,
                           char *msg, size_t msg_len);
/* The session ends (kill or close): undo its counts. Idempotent. */
void pl_daemon_access_leave(struct pl_daemon_access *a, struct pl_daemon_session *s);

/* A Generate of n_prompt tokens asking for max_tokens new ones (0: as many as fit) on
 * session s. Checks max_prompt_tokens, max_new_tokens and max_context; returns 0 and the
 * largest number of new tokens the policy allows in *ret_cap (UINT32_MAX: no limit), or
 * -PL_ERR_QUOTA with the limit named in msg. Takes nothing. */
int pl_daemon_access_request_check(struct pl_daemon_access *a, const struct pl_daemon_session *s,
                                   uint32_t n_prompt, uint32_t max_tokens, uint32_t *ret_cap,
                                   char *msg, size_t msg_len);
/* Account the request q (n_prompt and max_new set) before it is handed to the scheduler:
 * one queued request against max_queued, and n_prompt + max_new tokens from the uid's
 * token bucket. Returns 0, or -PL_ERR_QUOTA (nothing taken) with the limit named in msg. */
int pl_daemon_access_request_begin(struct pl_daemon_access *a, struct pl_daemon_session *s,
                                   struct pl_daemon_req *q, uint64_t now_ns, char *msg,
                                   size_t msg_len);
/* q ended (REQ_DONE, or the hand-over failed): release the queued count and give back the
 * tokens it reserved but did not use (used: prompt tokens fed + tokens generated). */
void pl_daemon_access_request_end(struct pl_daemon_access *a, struct pl_daemon_req *q,
                                  uint64_t used, uint64_t now_ns);

/* May the peer of the admin connection fd use it (root or the policy's admin group, by
 * SO_PEERCRED and SO_PEERGROUPS)? Returns 0 or -PL_ERR_DENIED / -errno (logged, rate
 * limited). */
int pl_daemon_access_admin_check(struct pl_daemon_access *a, int fd, uint64_t now_ns);

#endif
