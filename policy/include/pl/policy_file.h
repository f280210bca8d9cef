/* SPDX-License-Identifier: MIT */
/* The access policy (pl_policy_*): parsed from the policy file (default
 * /etc/picolm/policy.conf, `picolmd --policy FILE`) into an immutable, reference-counted
 * object. The daemon loads it at start-up and on SIGHUP / `picoctl policy reload`, then swaps
 * its pointer: a file with any error is rejected as a whole (with file:line), so the old
 * policy simply stays. Deciding uses pl/policy_match.h; nothing here acts on the system.
 *
 * File format (line based; packaging/policy.conf.example is a complete, commented example):
 *
 *   # comment (also after a value)           blank lines are ignored
 *   [global]                                 at most once
 *   admin_group = picolm-admin               group (name or number) allowed on the admin
 *                                            socket besides root; absent: root only
 *   [defaults]                               at most once: limits every rule starts from
 *   max_sessions = 4
 *   [rule NAME]                              NAME: 1..63 of [A-Za-z0-9_.@-], unique
 *   match = uid:1000 | gid:100 | user:alice | group:audio
 *   match = default                          matches everyone; must be the last rule
 *   access = allow | deny                    required
 *   max_sessions = N                         concurrent sessions per uid
 *   max_queued = N                           requests queued or running per uid
 *   max_prompt_tokens = N                    per request
 *   max_new_tokens = N                       per request
 *   max_context = N                          prompt + new tokens per request
 *   rate_tokens_per_s = N                    token bucket refill rate per uid
 *   rate_burst = N                           token bucket size (default: the rate)
 *   weight = 1..1000                         fair share inside a priority class
 *   priority = interactive | batch           interactive sessions are served first
 *
 * Every count accepts `unlimited`. Rules are tried in file order and the first rule with a
 * matching item wins (uid:/user: match the caller's uid, gid:/group: its primary or any
 * supplementary group). A caller no rule matches is refused. User and group names are
 * resolved once, at load; an unknown name is an error. Keys a rule leaves out come from
 * [defaults], then from the built-in defaults (PL_POLICY_DEFAULT_*). */
#ifndef PL_POLICY_POLICY_FILE_H
#define PL_POLICY_POLICY_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PL_POLICY_DEFAULT_PATH "/etc/picolm/policy.conf"

/* Caps on what a policy file may hold. */
#define PL_POLICY_MAX_FILE_BYTES (1u << 20)
#define PL_POLICY_MAX_LINE_BYTES 1024u
#define PL_POLICY_MAX_RULES 256u
#define PL_POLICY_MAX_MATCH_ITEMS 64u
#define PL_POLICY_MAX_NAME_LEN 63u
#define PL_POLICY_MAX_COUNT 16777216u /* largest number any count limit takes */
#define PL_POLICY_MAX_WEIGHT 1000u

/* A count limit with this value is not enforced. */
#define PL_POLICY_UNLIMITED UINT32_MAX

/* Built-in defaults for a rule that sets nothing. */
#define PL_POLICY_DEFAULT_MAX_SESSIONS 4u
#define PL_POLICY_DEFAULT_MAX_QUEUED 8u
#define PL_POLICY_DEFAULT_MAX_PROMPT_TOKENS 4096u
#define PL_POLICY_DEFAULT_MAX_NEW_TOKENS 1024u
#define PL_POLICY_DEFAULT_MAX_CONTEXT PL_POLICY_UNLIMITED /* the daemon's n_ctx still applies */
#define PL_POLICY_DEFAULT_RATE PL_POLICY_UNLIMITED
#define PL_POLICY_DEFAULT_WEIGHT 100u

enum pl_policy_access {
    PL_POLICY_ACCESS_DENY = 0,
    PL_POLICY_ACCESS_ALLOW = 1,
};

/* Scheduling class: every runnable interactive session is served before any batch one. */
enum pl_policy_class {
    PL_POLICY_CLASS_INTERACTIVE = 0,
    PL_POLICY_CLASS_BATCH = 1,
    _PL_POLICY_CLASS_MAX
};

struct pl_policy_limits {
    uint32_t max_sessions;      /* concurrent sessions of one uid */
    uint32_t max_queued;        /* requests of one uid queued or running */
    uint32_t max_prompt_tokens; /* per request */
    uint32_t max_new_tokens;    /* per request */
    uint32_t max_context;       /* prompt + new tokens per request */
    uint32_t rate_tokens_per_s; /* token bucket refill; PL_POLICY_UNLIMITED: no bucket */
    uint32_t rate_burst;        /* token bucket capacity, >= 1 */
    uint32_t weight;            /* 1..PL_POLICY_MAX_WEIGHT */
    enum pl_policy_class priority;
};

enum pl_policy_match_kind {
    PL_POLICY_MATCH_UID = 0, /* id: a uid (from uid:N or user:NAME) */
    PL_POLICY_MATCH_GID = 1, /* id: a gid (from gid:N or group:NAME) */
    PL_POLICY_MATCH_DEFAULT = 2,
};

struct pl_policy_match_item {
    enum pl_policy_match_kind kind;
    uint32_t id;
};

/* One rule, read-only for users of the policy; valid as long as the policy reference is. */
struct pl_policy_rule {
    char name[PL_POLICY_MAX_NAME_LEN + 1];
    unsigned line; /* of its [rule ...] header */
    enum pl_policy_access access;
    struct pl_policy_limits limits;
    size_t n_match;
    struct pl_policy_match_item match[PL_POLICY_MAX_MATCH_ITEMS];
};

/* Why a load failed: "file:line: message" (line 0 for a file-wide problem). */
struct pl_policy_error {
    unsigned line;
    char msg[512];
};

struct pl_policy;

/* Parse len bytes of text (need not be NUL-terminated; a NUL inside is an error). source
 * names it in messages (NULL: "<policy>"). On success *ret is a new reference. On a parse
 * error returns -EINVAL and, if err is not NULL, fills *err; other failures: -ENOMEM,
 * -EFBIG (more than PL_POLICY_MAX_FILE_BYTES), or -errno from name resolution (err filled
 * too). *ret is untouched on failure. */
int pl_policy_new_from_text(const char *text, size_t len, const char *source,
                            struct pl_policy **ret, struct pl_policy_error *err);

/* Read path (O_CLOEXEC, regular file, at most PL_POLICY_MAX_FILE_BYTES) and parse it. Returns
 * like pl_policy_new_from_text(), plus -errno when the file cannot be read (err filled). */
int pl_policy_new_from_file(const char *path, struct pl_policy **ret, struct pl_policy_error *err);

/* Reference counting (atomic: references may be dropped from any thread). unref accepts NULL
 * and returns NULL, for `p = pl_policy_unref(p);`. ref returns its argument. */
struct pl_policy *pl_policy_ref(struct pl_policy *p);
struct pl_policy *pl_policy_unref(struct pl_policy *p);

/* Accessors (borrowed pointers, valid while the reference is). */
const char *pl_policy_source(const struct pl_policy *p);
size_t pl_policy_n_rules(const struct pl_policy *p);
/* The i-th rule in file order, or NULL if i is out of range. */
const struct pl_policy_rule *pl_policy_rule_at(const struct pl_policy *p, size_t i);
/* Whether [global] names an admin group, and which gid it resolved to. */
bool pl_policy_admin_gid(const struct pl_policy *p, uint32_t *ret_gid);

/* Fill l with the built-in defaults. */
void pl_policy_limits_init(struct pl_policy_limits *l);

/* Stable names used in the file and in messages: "allow"/"deny", "interactive"/"batch". */
const char *pl_policy_access_name(enum pl_policy_access a);
const char *pl_policy_class_name(enum pl_policy_class c);

#endif
