/* SPDX-License-Identifier: MIT */
/* Option-table parser for the picolm CLI. Numbers are parsed strictly (the whole string,
 * no blanks, no hex, no NaN/inf) and checked against the option's range; every error is
 * one line naming the option and quoting (a capped copy of) the offending text. */
#include "cli_args.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest piece of a bad argument quoted back in an error message. */
#define QUOTE_MAX 64

/* Copy s into buf for quoting: capped, non-printable bytes shown as '?'. */
static const char *quote(const char *s, char *buf, size_t cap) {
    size_t n = 0, len = strlen(s);
    for (; n < len && n < QUOTE_MAX && n + 4 < cap; n++) {
        unsigned char ch = (unsigned char)s[n];
        buf[n] = (ch < 0x20 || ch == 0x7f) ? '?' : (char)ch;
    }
    if (n < len && n + 4 <= cap) {
        memcpy(buf + n, "...", 3);
        n += 3;
    }
    buf[n] = '\0';
    return buf;
}

/* "--top-p" or "-n" as the user would write it. */
static void opt_display(const struct pl_cli_opt *o, bool as_short, char *buf, size_t cap) {
    if (as_short)
        (void)snprintf(buf, cap, "-%c", o->short_name);
    else
        (void)snprintf(buf, cap, "--%s", o->name);
}

static void range_text(const struct pl_cli_opt *o, char *buf, size_t cap) {
    const char *what = o->kind == PL_CLI_OPT_FLOAT ? "a number" : "an integer";
    bool lo = isfinite(o->min), hi = isfinite(o->max);
    if (o->kind == PL_CLI_OPT_U64)
        (void)snprintf(buf, cap, "an integer in [0, %" PRIu64 "]", UINT64_MAX);
    else if (lo && hi)
        (void)snprintf(buf, cap, "%s in %c%.17g, %.17g%c", what, o->min_open ? '(' : '[', o->min,
                       o->max, o->max_open ? ')' : ']');
    else if (lo)
        (void)snprintf(buf, cap, "%s %s %.17g", what, o->min_open ? ">" : ">=", o->min);
    else if (hi)
        (void)snprintf(buf, cap, "%s %s %.17g", what, o->max_open ? "<" : "<=", o->max);
    else
        (void)snprintf(buf, cap, "%s", what);
}

static bool in_range(const struct pl_cli_opt *o, double v) {
    if (o->min_open ? !(v > o->min) : !(v >= o->min))
        return false;
    if (o->max_open ? !(v < o->max) : !(v <= o->max))
        return false;
    return true;
}

/* Strict decimal integer: optional sign, digits, nothing else. */
static bool parse_i64(const char *s, int64_t *ret) {
    const char *p = s;
    if (*p == '-' || *p == '+')
        p++;
    if (*p < '0' || *p > '9')
        return false;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return false;
    *ret = v;
    return true;
}

static bool parse_u64(const char *s, uint64_t *ret) {
    if (*s < '0' || *s > '9')
        return false;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return false;
    *ret = v;
    return true;
}

/* Decimal float ("0.5", "-1e-3", ".5"): no blanks, no hex, no NaN/inf. */
static bool parse_float(const char *s, float *ret) {
    const char *p = s;
    if (*p == '-' || *p == '+')
        p++;
    if (!((*p >= '0' && *p <= '9') || (*p == '.' && p[1] >= '0' && p[1] <= '9')))
        return false;
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
        return false;
    char *end = NULL;
    errno = 0;
    float v = strtof(s, &end);
    if (errno == ERANGE && isinf(v))
        return false;
    if (*end != '\0' || !isfinite(v))
        return false;
    *ret = v;
    return true;
}

static int set_value(struct pl_cli_opt *o, const char *shown, const char *val, char *err,
                     size_t err_len) {
    char q[QUOTE_MAX + 8], range[160];
    switch (o->kind) {
    case PL_CLI_OPT_STR:
        *(const char **)o->dst = val;
        return 0;
    case PL_CLI_OPT_I64: {
        int64_t v;
        if (parse_i64(val, &v) && in_range(o, (double)v)) {
            *(int64_t *)o->dst = v;
            return 0;
        }
        break;
    }
    case PL_CLI_OPT_U64: {
        uint64_t v;
        if (parse_u64(val, &v)) {
            *(uint64_t *)o->dst = v;
            return 0;
        }
        break;
    }
    case PL_CLI_OPT_FLOAT: {
        float v;
        if (parse_float(val, &v) && in_range(o, v)) {
            *(float *)o->dst = v;
            return 0;
        }
        break;
    }
    case PL_CLI_OPT_STR_LIST: {
        struct pl_cli_str_list *l = o->dst;
        size_t max = o->max < PL_CLI_LIST_MAX ? (size_t)o->max : PL_CLI_LIST_MAX;
        if (l->n >= max) {
            (void)snprintf(err, err_len, "%s: at most %zu values", shown, max);
            return -EINVAL;
        }
        l->v[l->n++] = val;
        return 0;
    }
    case PL_CLI_OPT_FLAG:
        break;
    }
    range_text(o, range, sizeof(range));
    (void)snprintf(err, err_len, "%s: expected %s, got '%s'", shown, range,
                   quote(val, q, sizeof(q)));
    return -EINVAL;
}

int pl_cli_args_parse(struct pl_cli_opt *opts, size_t n_opts, int argc, char **argv, char *err,
                      size_t err_len) {
    char q[QUOTE_MAX + 8], shown[80];
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        const char *inline_val = NULL;
        struct pl_cli_opt *o = NULL;
        bool as_short = false;

        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0)
            return 1;
        if (arg[0] == '-' && arg[1] == '-' && arg[2] != '\0') {
            const char *name = arg + 2;
            const char *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            for (size_t k = 0; k < n_opts; k++) {
                if (strlen(opts[k].name) == len && strncmp(opts[k].name, name, len) == 0) {
                    o = &opts[k];
                    break;
                }
            }
            if (o && eq)
                inline_val = eq + 1;
        } else if (arg[0] == '-' && arg[1] != '\0' && arg[2] == '\0') {
            for (size_t k = 0; k < n_opts; k++) {
                if (opts[k].short_name != 0 && opts[k].short_name == arg[1]) {
                    o = &opts[k];
                    as_short = true;
                    break;
                }
            }
        } else {
            (void)snprintf(err, err_len, "unexpected argument '%s'", quote(arg, q, sizeof(q)));
            return -ENOENT;
        }
        if (!o) {
            (void)snprintf(err, err_len, "unknown option '%s'", quote(arg, q, sizeof(q)));
            return -ENOENT;
        }
        opt_display(o, as_short, shown, sizeof(shown));
        if (o->seen && o->kind != PL_CLI_OPT_STR_LIST) {
            (void)snprintf(err, err_len, "%s: given more than once", shown);
            return -EINVAL;
        }
        o->seen = true;
        if (o->kind == PL_CLI_OPT_FLAG) {
            if (inline_val) {
                (void)snprintf(err, err_len, "%s: takes no value", shown);
                return -EINVAL;
            }
            *(bool *)o->dst = true;
            continue;
        }
        const char *val = inline_val;
        if (!val) {
            /* The next word is the value even when it starts with '-' (a prompt may). */
            if (i + 1 >= argc) {
                (void)snprintf(err, err_len, "%s: missing value", shown);
                return -EINVAL;
            }
            val = argv[++i];
        }
        int r = set_value(o, shown, val, err, err_len);
        if (r < 0)
            return r;
    }
    return 0;
}

void pl_cli_args_usage(const struct pl_cli_opt *opts, size_t n_opts, void *fp) {
    FILE *f = fp;
    for (size_t k = 0; k < n_opts; k++) {
        const struct pl_cli_opt *o = &opts[k];
        char left[64];
        int n;
        if (o->short_name)
            n = snprintf(left, sizeof(left), "-%c, --%s", o->short_name, o->name);
        else
            n = snprintf(left, sizeof(left), "    --%s", o->name);
        if (n > 0 && (size_t)n < sizeof(left) && o->kind != PL_CLI_OPT_FLAG)
            (void)snprintf(left + n, sizeof(left) - (size_t)n, " %s",
                           o->metavar ? o->metavar : "VALUE");
        (void)fprintf(f, "  %-28s %s\n", left, o->help);
    }
    (void)fprintf(f, "  %-28s %s\n", "-h, --help", "show this help and exit");
}

int pl_cli_args_parse_ids(const char *s, int32_t **ret_ids, size_t *ret_n, char *err,
                          size_t err_len) {
    char q[QUOTE_MAX + 8];
    size_t cap = 1;
    for (const char *p = s; *p; p++)
        cap += *p == ',';
    int32_t *ids = calloc(cap, sizeof(*ids));
    if (!ids)
        return -ENOMEM;
    size_t n = 0;
    const char *p = s;
    for (;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p < '0' || *p > '9')
            goto bad;
        char *end = NULL;
        errno = 0;
        unsigned long long v = strtoull(p, &end, 10);
        if (errno != 0 || v > INT32_MAX)
            goto bad;
        ids[n++] = (int32_t)v;
        p = end;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '\0')
            break;
        if (*p != ',')
            goto bad;
        p++;
    }
    *ret_ids = ids;
    *ret_n = n;
    return 0;
bad:
    free(ids);
    (void)snprintf(err, err_len,
                   "--tokens: expected comma-separated token ids in [0, %d], got '%s'", INT32_MAX,
                   quote(s, q, sizeof(q)));
    return -EINVAL;
}
