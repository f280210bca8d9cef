/* SPDX-License-Identifier: MIT */
/* Policy file parser and the immutable policy object (pl_policy_*). The daemon calls it at
 * start-up and on reload; tests and the fuzzer call it on text. The format is documented in
 * pl/policy_file.h. The parser is strict: any mistake rejects the whole file with
 * "source:line: message", so a reload never half-applies. The file is input, not trusted
 * configuration: every line, count and name is capped. */
#include "pl/policy_file.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pl/pl_err.h"
#include "pl/pl_util.h"

struct pl_policy {
    atomic_uint n_ref;
    char source[256];
    bool has_admin_gid;
    uint32_t admin_gid;
    size_t n_rules;
    struct pl_policy_rule *rules; /* [n_rules] */
};

/* ---- Names ---- */

const char *pl_policy_access_name(enum pl_policy_access a) {
    switch (a) {
    case PL_POLICY_ACCESS_ALLOW:
        return "allow";
    case PL_POLICY_ACCESS_DENY:
        return "deny";
    }
    return "?";
}

const char *pl_policy_class_name(enum pl_policy_class c) {
    switch (c) {
    case PL_POLICY_CLASS_INTERACTIVE:
        return "interactive";
    case PL_POLICY_CLASS_BATCH:
        return "batch";
    case _PL_POLICY_CLASS_MAX:
        break;
    }
    return "?";
}

void pl_policy_limits_init(struct pl_policy_limits *l) {
    *l = (struct pl_policy_limits){
        .max_sessions = PL_POLICY_DEFAULT_MAX_SESSIONS,
        .max_queued = PL_POLICY_DEFAULT_MAX_QUEUED,
        .max_prompt_tokens = PL_POLICY_DEFAULT_MAX_PROMPT_TOKENS,
        .max_new_tokens = PL_POLICY_DEFAULT_MAX_NEW_TOKENS,
        .max_context = PL_POLICY_DEFAULT_MAX_CONTEXT,
        .rate_tokens_per_s = PL_POLICY_DEFAULT_RATE,
        .rate_burst = 0, /* 0 until resolved: "same as the rate" */
        .weight = PL_POLICY_DEFAULT_WEIGHT,
        .priority = PL_POLICY_CLASS_INTERACTIVE,
    };
}

/* ---- Parser state ---- */

enum section {
    SEC_NONE,
    SEC_GLOBAL,
    SEC_DEFAULTS,
    SEC_RULE,
};

/* Keys that may appear in [defaults] and [rule]; bit i of `seen` tracks key i. */
enum limit_key {
    K_MAX_SESSIONS,
    K_MAX_QUEUED,
    K_MAX_PROMPT,
    K_MAX_NEW,
    K_MAX_CONTEXT,
    K_RATE,
    K_BURST,
    K_WEIGHT,
    K_PRIORITY,
    K_MATCH,  /* rule only */
    K_ACCESS, /* rule only */
    _K_MAX
};

static const char *const key_names[_K_MAX] = {
    [K_MAX_SESSIONS] = "max_sessions",
    [K_MAX_QUEUED] = "max_queued",
    [K_MAX_PROMPT] = "max_prompt_tokens",
    [K_MAX_NEW] = "max_new_tokens",
    [K_MAX_CONTEXT] = "max_context",
    [K_RATE] = "rate_tokens_per_s",
    [K_BURST] = "rate_burst",
    [K_WEIGHT] = "weight",
    [K_PRIORITY] = "priority",
    [K_MATCH] = "match",
    [K_ACCESS] = "access",
};

struct parser {
    const char *source;
    struct pl_policy_error *err;
    unsigned line;
    enum section sec;
    bool seen_global, seen_defaults, seen_default_rule, seen_admin_group;
    unsigned default_rule_line;
    struct pl_policy_limits defaults;
    unsigned defaults_seen; /* bit mask of limit keys set in [defaults] */
    unsigned rule_seen;     /* same, for the current rule */
    struct pl_policy_rule *cur;
    struct pl_policy *p;
    size_t cap_rules;
    char *pwbuf; /* getpw/getgr scratch, grown on ERANGE */
    size_t pwbuf_len;
};

/* Record an error at line (the current line when 0 is not wanted) and return r. */
__attribute__((format(printf, 4, 5))) static int fail(struct parser *ps, unsigned line, int r,
                                                      const char *fmt, ...) {
    if (ps->err) {
        char what[384];
        va_list ap;
        va_start(ap, fmt);
        (void)vsnprintf(what, sizeof(what), fmt, ap);
        va_end(ap);
        ps->err->line = line;
        if (line > 0)
            (void)snprintf(ps->err->msg, sizeof(ps->err->msg), "%s:%u: %s", ps->source, line, what);
        else
            (void)snprintf(ps->err->msg, sizeof(ps->err->msg), "%s: %s", ps->source, what);
    }
    return r;
}

static bool is_space(char c) {
    return c == ' ' || c == '\t';
}

/* Trim spaces/tabs at both ends of [*s, *s+*len). */
static void trim(const char **s, size_t *len) {
    while (*len > 0 && is_space(**s)) {
        (*s)++;
        (*len)--;
    }
    while (*len > 0 && is_space((*s)[*len - 1]))
        (*len)--;
}

static bool tok_eq(const char *s, size_t len, const char *word) {
    size_t wl = strlen(word);
    return len == wl && memcmp(s, word, wl) == 0;
}

static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-' || c == '@';
}

/* Printable, length-capped rendering of untrusted text for messages. */
static const char *shown(const char *s, size_t len, char *buf, size_t buf_len) {
    size_t o = 0;
    for (size_t i = 0; i < len && o + 5 < buf_len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f)
            buf[o++] = (char)c;
        else
            o += (size_t)snprintf(buf + o, buf_len - o, "\\x%02x", c);
    }
    if (len > 0 && o + 5 >= buf_len && buf_len >= 4) {
        o = PL_MIN(o, buf_len - 4);
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o] = '\0';
    return buf;
}

/* A decimal number in [min, max] (no sign, no leading '+', at most 10 digits). */
static bool parse_u32(const char *s, size_t len, uint32_t min, uint32_t max, uint32_t *ret) {
    if (len == 0 || len > 10)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (v < min || v > max)
        return false;
    *ret = (uint32_t)v;
    return true;
}

/* ---- Name resolution ---- */

static int grow_pwbuf(struct parser *ps) {
    size_t n = ps->pwbuf_len ? ps->pwbuf_len * 2 : 1024;
    if (n > (1u << 20))
        return -ERANGE;
    char *b = realloc(ps->pwbuf, n);
    if (!b)
        return -ENOMEM;
    ps->pwbuf = b;
    ps->pwbuf_len = n;
    return 0;
}

/* Resolve a user name to its uid. Returns 0, -ENOENT or -errno. */
static int resolve_user(struct parser *ps, const char *name, uint32_t *ret_uid) {
    for (;;) {
        if (ps->pwbuf_len == 0) {
            int r = grow_pwbuf(ps);
            if (r < 0)
                return r;
        }
        struct passwd pw, *res = NULL;
        int e = getpwnam_r(name, &pw, ps->pwbuf, ps->pwbuf_len, &res);
        if (e == ERANGE) {
            int r = grow_pwbuf(ps);
            if (r < 0)
                return r;
            continue;
        }
        if (e == 0 && res) {
            *ret_uid = (uint32_t)res->pw_uid;
            return 0;
        }
        /* Not found is e == 0 with res NULL (glibc may also say ENOENT/ESRCH/EBADF/EPERM). */
        if (e == 0 || e == ENOENT || e == ESRCH || e == EBADF || e == EPERM)
            return -ENOENT;
        return -e;
    }
}

static int resolve_group(struct parser *ps, const char *name, uint32_t *ret_gid) {
    for (;;) {
        if (ps->pwbuf_len == 0) {
            int r = grow_pwbuf(ps);
            if (r < 0)
                return r;
        }
        struct group gr, *res = NULL;
        int e = getgrnam_r(name, &gr, ps->pwbuf, ps->pwbuf_len, &res);
        if (e == ERANGE) {
            int r = grow_pwbuf(ps);
            if (r < 0)
                return r;
            continue;
        }
        if (e == 0 && res) {
            *ret_gid = (uint32_t)res->gr_gid;
            return 0;
        }
        if (e == 0 || e == ENOENT || e == ESRCH || e == EBADF || e == EPERM)
            return -ENOENT;
        return -e;
    }
}

/* An id written as a number or a name: "1000" or "alice". is_group picks the database. */
static int parse_id(struct parser *ps, const char *s, size_t len, bool is_group, uint32_t *ret_id) {
    char buf[96];
    const char *what = is_group ? "group" : "user";
    if (len == 0)
        return fail(ps, ps->line, -EINVAL, "empty %s", what);
    if (s[0] >= '0' && s[0] <= '9') {
        /* (uid_t)-1 means "no id" to the kernel: refuse it. */
        if (!parse_u32(s, len, 0, UINT32_MAX - 1, ret_id))
            return fail(ps, ps->line, -EINVAL, "bad %s id '%s' (0..4294967294)",
                        is_group ? "group" : "user", shown(s, len, buf, 48));
        return 0;
    }
    if (len > PL_POLICY_MAX_NAME_LEN)
        return fail(ps, ps->line, -EINVAL, "%s name too long (at most %u characters)", what,
                    PL_POLICY_MAX_NAME_LEN);
    for (size_t i = 0; i < len; i++)
        if (!name_char(s[i]))
            return fail(ps, ps->line, -EINVAL, "bad character in %s name '%s'", what,
                        shown(s, len, buf, 80));
    char name[PL_POLICY_MAX_NAME_LEN + 1];
    memcpy(name, s, len);
    name[len] = '\0';
    int r = is_group ? resolve_group(ps, name, ret_id) : resolve_user(ps, name, ret_id);
    if (r == -ENOENT)
        return fail(ps, ps->line, -EINVAL, "unknown %s '%s'", what, name);
    if (r < 0)
        return fail(ps, ps->line, r, "cannot resolve %s '%s': %s", what, name, pl_strerror(r));
    return 0;
}

/* ---- Values ---- */

/* A count: a number in [min, PL_POLICY_MAX_COUNT] or `unlimited`. */
static int parse_count(struct parser *ps, const char *key, const char *v, size_t vl, uint32_t min,
                       uint32_t *ret) {
    char buf[48];
    if (tok_eq(v, vl, "unlimited")) {
        *ret = PL_POLICY_UNLIMITED;
        return 0;
    }
    if (!parse_u32(v, vl, min, PL_POLICY_MAX_COUNT, ret))
        return fail(ps, ps->line, -EINVAL, "%s: bad value '%s' (expected %u..%u or unlimited)", key,
                    shown(v, vl, buf, sizeof(buf)), min, PL_POLICY_MAX_COUNT);
    return 0;
}

/* Set limit key k of l from value v. */
static int set_limit(struct parser *ps, struct pl_policy_limits *l, enum limit_key k, const char *v,
                     size_t vl) {
    char buf[48];
    const char *key = key_names[k];
    switch (k) {
    case K_MAX_SESSIONS:
        return parse_count(ps, key, v, vl, 0, &l->max_sessions);
    case K_MAX_QUEUED:
        return parse_count(ps, key, v, vl, 0, &l->max_queued);
    case K_MAX_PROMPT:
        return parse_count(ps, key, v, vl, 1, &l->max_prompt_tokens);
    case K_MAX_NEW:
        return parse_count(ps, key, v, vl, 0, &l->max_new_tokens);
    case K_MAX_CONTEXT:
        return parse_count(ps, key, v, vl, 1, &l->max_context);
    case K_RATE:
        return parse_count(ps, key, v, vl, 1, &l->rate_tokens_per_s);
    case K_BURST:
        if (tok_eq(v, vl, "unlimited"))
            return fail(ps, ps->line, -EINVAL, "rate_burst cannot be unlimited");
        return parse_count(ps, key, v, vl, 1, &l->rate_burst);
    case K_WEIGHT:
        if (!parse_u32(v, vl, 1, PL_POLICY_MAX_WEIGHT, &l->weight))
            return fail(ps, ps->line, -EINVAL, "weight: bad value '%s' (expected 1..%u)",
                        shown(v, vl, buf, sizeof(buf)), PL_POLICY_MAX_WEIGHT);
        return 0;
    case K_PRIORITY:
        if (tok_eq(v, vl, "interactive"))
            l->priority = PL_POLICY_CLASS_INTERACTIVE;
        else if (tok_eq(v, vl, "batch"))
            l->priority = PL_POLICY_CLASS_BATCH;
        else
            return fail(ps, ps->line, -EINVAL,
                        "priority: bad value '%s' (expected interactive or batch)",
                        shown(v, vl, buf, sizeof(buf)));
        return 0;
    case K_MATCH:
    case K_ACCESS:
    case _K_MAX:
        break;
    }
    return fail(ps, ps->line, -EINVAL, "internal: key %d is not a limit", (int)k);
}

/* match = item | item | ...  (or `default` alone). */
static int parse_match(struct parser *ps, struct pl_policy_rule *rule, const char *v, size_t vl) {
    char buf[64];
    if (tok_eq(v, vl, "default")) {
        if (ps->seen_default_rule)
            return fail(ps, ps->line, -EINVAL, "a second default rule (the first is at line %u)",
                        ps->default_rule_line);
        rule->match[0] = (struct pl_policy_match_item){.kind = PL_POLICY_MATCH_DEFAULT};
        rule->n_match = 1;
        ps->seen_default_rule = true;
        ps->default_rule_line = rule->line;
        return 0;
    }
    size_t pos = 0;
    for (;;) {
        size_t end = pos;
        while (end < vl && v[end] != '|')
            end++;
        const char *it = v + pos;
        size_t il = end - pos;
        trim(&it, &il);
        if (il == 0)
            return fail(ps, ps->line, -EINVAL, "match: empty item");
        if (rule->n_match >= PL_POLICY_MAX_MATCH_ITEMS)
            return fail(ps, ps->line, -EINVAL, "match: more than %u items",
                        PL_POLICY_MAX_MATCH_ITEMS);
        const char *colon = memchr(it, ':', il);
        if (!colon) {
            if (tok_eq(it, il, "default"))
                return fail(ps, ps->line, -EINVAL,
                            "match: 'default' cannot be combined with other items");
            return fail(ps, ps->line, -EINVAL,
                        "match: bad item '%s' (expected uid:, gid:, user:, group: or default)",
                        shown(it, il, buf, sizeof(buf)));
        }
        size_t kl = (size_t)(colon - it);
        const char *arg = colon + 1;
        size_t al = il - kl - 1;
        trim(&arg, &al);
        struct pl_policy_match_item m;
        int r;
        if (tok_eq(it, kl, "uid") || tok_eq(it, kl, "gid")) {
            bool group = it[0] == 'g';
            m.kind = group ? PL_POLICY_MATCH_GID : PL_POLICY_MATCH_UID;
            if (!parse_u32(arg, al, 0, UINT32_MAX - 1, &m.id))
                return fail(ps, ps->line, -EINVAL, "match: bad %s '%s' (0..4294967294)",
                            group ? "gid" : "uid", shown(arg, al, buf, sizeof(buf)));
        } else if (tok_eq(it, kl, "user") || tok_eq(it, kl, "group")) {
            bool group = it[0] == 'g';
            m.kind = group ? PL_POLICY_MATCH_GID : PL_POLICY_MATCH_UID;
            if (al > 0 && arg[0] >= '0' && arg[0] <= '9')
                return fail(ps, ps->line, -EINVAL, "match: %s: takes a name; use %s:%s",
                            group ? "group" : "user", group ? "gid" : "uid",
                            shown(arg, al, buf, sizeof(buf)));
            r = parse_id(ps, arg, al, group, &m.id);
            if (r < 0)
                return r;
        } else {
            return fail(ps, ps->line, -EINVAL,
                        "match: unknown item kind '%s' (expected uid, gid, user or group)",
                        shown(it, kl, buf, sizeof(buf)));
        }
        rule->match[rule->n_match++] = m;
        if (end >= vl)
            break;
        pos = end + 1;
    }
    return 0;
}

/* ---- Sections ---- */

/* Check the finished current rule (if any) and fill what it left from [defaults]. */
static int finish_rule(struct parser *ps) {
    struct pl_policy_rule *rule = ps->cur;
    if (!rule)
        return 0;
    ps->cur = NULL;
    if (!(ps->rule_seen & (1u << K_MATCH)))
        return fail(ps, rule->line, -EINVAL, "rule '%s' has no 'match'", rule->name);
    if (!(ps->rule_seen & (1u << K_ACCESS)))
        return fail(ps, rule->line, -EINVAL, "rule '%s' has no 'access'", rule->name);
    /* Start from [defaults], then lay the keys the rule set on top: redo the merge with the
     * rule's own values, which are already in rule->limits for the keys it set. */
    struct pl_policy_limits own = rule->limits;
    struct pl_policy_limits *l = &rule->limits;
    *l = ps->defaults;
    unsigned s = ps->rule_seen;
    if (s & (1u << K_MAX_SESSIONS))
        l->max_sessions = own.max_sessions;
    if (s & (1u << K_MAX_QUEUED))
        l->max_queued = own.max_queued;
    if (s & (1u << K_MAX_PROMPT))
        l->max_prompt_tokens = own.max_prompt_tokens;
    if (s & (1u << K_MAX_NEW))
        l->max_new_tokens = own.max_new_tokens;
    if (s & (1u << K_MAX_CONTEXT))
        l->max_context = own.max_context;
    if (s & (1u << K_RATE))
        l->rate_tokens_per_s = own.rate_tokens_per_s;
    if (s & (1u << K_BURST))
        l->rate_burst = own.rate_burst;
    if (s & (1u << K_WEIGHT))
        l->weight = own.weight;
    if (s & (1u << K_PRIORITY))
        l->priority = own.priority;
    /* Burst: "same as the rate" unless set; an unlimited rate needs no bucket. */
    if (l->rate_burst == 0)
        l->rate_burst = l->rate_tokens_per_s == PL_POLICY_UNLIMITED ? 1 : l->rate_tokens_per_s;
    if (l->max_context != PL_POLICY_UNLIMITED && l->max_prompt_tokens != PL_POLICY_UNLIMITED &&
        l->max_prompt_tokens > l->max_context)
        return fail(ps, rule->line, -EINVAL,
                    "rule '%s': max_prompt_tokens (%u) exceeds max_context (%u)", rule->name,
                    l->max_prompt_tokens, l->max_context);
    return 0;
}

static int start_rule(struct parser *ps, const char *name, size_t nl) {
    char buf[80];
    if (nl == 0)
        return fail(ps, ps->line, -EINVAL, "rule without a name: use [rule NAME]");
    if (nl > PL_POLICY_MAX_NAME_LEN)
        return fail(ps, ps->line, -EINVAL, "rule name too long (at most %u characters)",
                    PL_POLICY_MAX_NAME_LEN);
    for (size_t i = 0; i < nl; i++)
        if (!name_char(name[i]))
            return fail(ps, ps->line, -EINVAL,
                        "bad character in rule name '%s' (allowed: A-Z a-z 0-9 _ . @ -)",
                        shown(name, nl, buf, sizeof(buf)));
    for (size_t i = 0; i < ps->p->n_rules; i++)
        if (tok_eq(name, nl, ps->p->rules[i].name))
            return fail(ps, ps->line, -EINVAL, "duplicate rule '%s' (first at line %u)",
                        ps->p->rules[i].name, ps->p->rules[i].line);
    if (ps->seen_default_rule)
        return fail(ps, ps->line, -EINVAL,
                    "rule after the default rule (line %u) could never match",
                    ps->default_rule_line);
    if (ps->p->n_rules >= PL_POLICY_MAX_RULES)
        return fail(ps, ps->line, -EINVAL, "more than %u rules", PL_POLICY_MAX_RULES);
    if (ps->p->n_rules == ps->cap_rules) {
        size_t cap = ps->cap_rules ? ps->cap_rules * 2 : 8;
        struct pl_policy_rule *nr = realloc(ps->p->rules, cap * sizeof(*nr));
        if (!nr)
            return fail(ps, 0, -ENOMEM, "out of memory");
        ps->p->rules = nr;
        ps->cap_rules = cap;
    }
    struct pl_policy_rule *rule = &ps->p->rules[ps->p->n_rules++];
    memset(rule, 0, sizeof(*rule));
    memcpy(rule->name, name, nl);
    rule->line = ps->line;
    rule->access = PL_POLICY_ACCESS_DENY;
    pl_policy_limits_init(&rule->limits);
    ps->cur = rule;
    ps->rule_seen = 0;
    return 0;
}

static int parse_section(struct parser *ps, const char *s, size_t len) {
    char buf[64];
    /* s starts with '['. */
    if (s[len - 1] != ']')
        return fail(ps, ps->line, -EINVAL, "section header without a closing ']'");
    const char *in = s + 1;
    size_t il = len - 2;
    trim(&in, &il);
    int r = finish_rule(ps);
    if (r < 0)
        return r;
    if (tok_eq(in, il, "global")) {
        if (ps->seen_global)
            return fail(ps, ps->line, -EINVAL, "second [global] section");
        if (ps->p->n_rules > 0)
            return fail(ps, ps->line, -EINVAL, "[global] must come before the rules");
        ps->seen_global = true;
        ps->sec = SEC_GLOBAL;
        return 0;
    }
    if (tok_eq(in, il, "defaults")) {
        if (ps->seen_defaults)
            return fail(ps, ps->line, -EINVAL, "second [defaults] section");
        if (ps->p->n_rules > 0)
            return fail(ps, ps->line, -EINVAL, "[defaults] must come before the rules");
        ps->seen_defaults = true;
        ps->sec = SEC_DEFAULTS;
        return 0;
    }
    if (il >= 4 && memcmp(in, "rule", 4) == 0 && (il == 4 || is_space(in[4]))) {
        const char *name = in + 4;
        size_t nl = il - 4;
        trim(&name, &nl);
        ps->sec = SEC_RULE;
        return start_rule(ps, name, nl);
    }
    return fail(ps, ps->line, -EINVAL,
                "unknown section '[%s]' (expected [global], [defaults] or [rule NAME])",
                shown(in, il, buf, sizeof(buf)));
}

static int find_key(const char *k, size_t kl) {
    for (int i = 0; i < _K_MAX; i++)
        if (tok_eq(k, kl, key_names[i]))
            return i;
    return -1;
}

static int parse_kv(struct parser *ps, const char *s, size_t len) {
    char buf[64];
    const char *eq = memchr(s, '=', len);
    if (!eq)
        return fail(ps, ps->line, -EINVAL, "expected 'key = value' or a [section]");
    const char *k = s;
    size_t kl = (size_t)(eq - s);
    const char *v = eq + 1;
    size_t vl = len - kl - 1;
    trim(&k, &kl);
    trim(&v, &vl);
    if (kl == 0)
        return fail(ps, ps->line, -EINVAL, "missing key before '='");
    if (vl == 0)
        return fail(ps, ps->line, -EINVAL, "%s: missing value", shown(k, kl, buf, sizeof(buf)));

    switch (ps->sec) {
    case SEC_NONE:
        return fail(ps, ps->line, -EINVAL, "'%s' outside any section",
                    shown(k, kl, buf, sizeof(buf)));
    case SEC_GLOBAL:
        if (!tok_eq(k, kl, "admin_group"))
            return fail(ps, ps->line, -EINVAL,
                        "unknown key '%s' in [global] (expected admin_group)",
                        shown(k, kl, buf, sizeof(buf)));
        if (ps->seen_admin_group)
            return fail(ps, ps->line, -EINVAL, "admin_group set twice");
        ps->seen_admin_group = true;
        ps->p->has_admin_gid = true;
        return parse_id(ps, v, vl, true, &ps->p->admin_gid);
    case SEC_DEFAULTS:
    case SEC_RULE:
        break;
    }

    int key = find_key(k, kl);
    if (key < 0)
        return fail(ps, ps->line, -EINVAL, "unknown key '%s'", shown(k, kl, buf, sizeof(buf)));
    unsigned *seen = ps->sec == SEC_RULE ? &ps->rule_seen : &ps->defaults_seen;
    if (*seen & (1u << key))
        return fail(ps, ps->line, -EINVAL, "%s set twice", key_names[key]);
    *seen |= 1u << key;

    if (ps->sec == SEC_DEFAULTS) {
        if (key == K_MATCH || key == K_ACCESS)
            return fail(ps, ps->line, -EINVAL, "'%s' belongs in a [rule], not in [defaults]",
                        key_names[key]);
        return set_limit(ps, &ps->defaults, (enum limit_key)key, v, vl);
    }
    struct pl_policy_rule *rule = ps->cur;
    if (key == K_MATCH)
        return parse_match(ps, rule, v, vl);
    if (key == K_ACCESS) {
        if (tok_eq(v, vl, "allow"))
            rule->access = PL_POLICY_ACCESS_ALLOW;
        else if (tok_eq(v, vl, "deny"))
            rule->access = PL_POLICY_ACCESS_DENY;
        else
            return fail(ps, ps->line, -EINVAL, "access: bad value '%s' (expected allow or deny)",
                        shown(v, vl, buf, sizeof(buf)));
        return 0;
    }
    return set_limit(ps, &rule->limits, (enum limit_key)key, v, vl);
}

static int parse_line(struct parser *ps, const char *s, size_t len) {
    /* A '#' starts a comment anywhere: no value can contain one. */
    const char *hash = memchr(s, '#', len);
    if (hash)
        len = (size_t)(hash - s);
    trim(&s, &len);
    if (len == 0)
        return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return fail(ps, ps->line, -EINVAL, "control character 0x%02x", c);
    }
    if (s[0] == '[')
        return parse_section(ps, s, len);
    return parse_kv(ps, s, len);
}

/* ---- Object ---- */

static void policy_free(struct pl_policy *p) {
    if (!p)
        return;
    free(p->rules);
    free(p);
}

int pl_policy_new_from_text(const char *text, size_t len, const char *source,
                            struct pl_policy **ret, struct pl_policy_error *err) {
    if ((!text && len > 0) || !ret)
        return -EINVAL;
    struct parser ps = {.source = source ? source : "<policy>", .err = err};
    pl_policy_limits_init(&ps.defaults);
    int r;
    if (err)
        *err = (struct pl_policy_error){0};
    if (len > PL_POLICY_MAX_FILE_BYTES) {
        r = fail(&ps, 0, -EFBIG, "larger than %u bytes", PL_POLICY_MAX_FILE_BYTES);
        goto out;
    }
    ps.p = calloc(1, sizeof(*ps.p));
    if (!ps.p) {
        r = fail(&ps, 0, -ENOMEM, "out of memory");
        goto out;
    }
    atomic_init(&ps.p->n_ref, 1);
    (void)snprintf(ps.p->source, sizeof(ps.p->source), "%s", ps.source);

    size_t pos = 0;
    while (pos < len) {
        ps.line++;
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - text) : len;
        size_t ll = end - pos;
        if (ll > 0 && text[pos + ll - 1] == '\r')
            ll--;
        if (ll > PL_POLICY_MAX_LINE_BYTES) {
            r = fail(&ps, ps.line, -EINVAL, "line longer than %u bytes", PL_POLICY_MAX_LINE_BYTES);
            goto out;
        }
        if (memchr(text + pos, '\0', ll)) {
            r = fail(&ps, ps.line, -EINVAL, "NUL byte");
            goto out;
        }
        r = parse_line(&ps, text + pos, ll);
        if (r < 0)
            goto out;
        pos = end + 1;
    }
    r = finish_rule(&ps);
    if (r < 0)
        goto out;
    if (ps.p->n_rules == 0) {
        r = fail(&ps, 0, -EINVAL, "no rules: every caller would be refused");
        goto out;
    }
    *ret = pl_steal_ptr(&ps.p);
    r = 0;
out:
    policy_free(ps.p);
    free(ps.pwbuf);
    return r;
}

int pl_policy_new_from_file(const char *path, struct pl_policy **ret, struct pl_policy_error *err) {
    if (!path || !ret)
        return -EINVAL;
    int r;
    char *buf = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (err)
        *err = (struct pl_policy_error){0};
    if (fd < 0) {
        r = -errno;
        goto fail_io;
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        r = -errno;
        goto fail_io;
    }
    if (!S_ISREG(st.st_mode)) {
        r = -EINVAL;
        if (err)
            (void)snprintf(err->msg, sizeof(err->msg), "%s: not a regular file", path);
        goto out;
    }
    /* Read up to the cap + 1 so a file that grows while we read is still caught. */
    size_t cap = PL_POLICY_MAX_FILE_BYTES + 1, len = 0;
    buf = malloc(cap);
    if (!buf) {
        r = -ENOMEM;
        goto fail_io;
    }
    for (;;) {
        ssize_t n = read(fd, buf + len, cap - len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            r = -errno;
            goto fail_io;
        }
        if (n == 0)
            break;
        len += (size_t)n;
        if (len == cap)
            break;
    }
    r = pl_policy_new_from_text(buf, len, path, ret, err);
    goto out;
fail_io:
    if (err)
        (void)snprintf(err->msg, sizeof(err->msg), "%s: %s", path, pl_strerror(r));
out:
    free(buf);
    pl_close_fd(&fd);
    return r;
}

struct pl_policy *pl_policy_ref(struct pl_policy *p) {
    if (p)
        /* Relaxed: taking a reference needs no ordering, the caller already holds one. */
        atomic_fetch_add_explicit(&p->n_ref, 1, memory_order_relaxed);
    return p;
}

struct pl_policy *pl_policy_unref(struct pl_policy *p) {
    if (!p)
        return NULL;
    /* Release pairs with the acquire fence below in whichever thread drops the last one, so
     * every use of the policy happens before it is freed. */
    if (atomic_fetch_sub_explicit(&p->n_ref, 1, memory_order_release) == 1) {
        atomic_thread_fence(memory_order_acquire);
        policy_free(p);
    }
    return NULL;
}

const char *pl_policy_source(const struct pl_policy *p) {
    return p ? p->source : "";
}

size_t pl_policy_n_rules(const struct pl_policy *p) {
    return p ? p->n_rules : 0;
}

const struct pl_policy_rule *pl_policy_rule_at(const struct pl_policy *p, size_t i) {
    if (!p || i >= p->n_rules)
        return NULL;
    return &p->rules[i];
}

bool pl_policy_admin_gid(const struct pl_policy *p, uint32_t *ret_gid) {
    if (!p || !p->has_admin_gid)
        return false;
    if (ret_gid)
        *ret_gid = p->admin_gid;
    return true;
}
