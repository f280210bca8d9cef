/* SPDX-License-Identifier: MIT */
/* picolmd configuration: one table of keys shared by the config file (`key = value`) and
 * the flags (`--key value`, `--key=value`, dashes for underscores), so both stay in step.
 * Called by main.c at start-up and by the event loop on SIGHUP. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pl/engine_model.h"
#include "pl/pl_log.h"

enum kind { K_STR, K_U32, K_U64, K_BOOL, K_CPUS, K_LOG, K_HUGE, K_KVTYPE };

struct key {
    const char *name;
    enum kind kind;
    size_t off;
    size_t size;  /* K_STR: buffer size */
    uint64_t max; /* K_U32/K_U64: inclusive upper bound */
    const char *help;
};

#define F(field) offsetof(struct pl_daemon_config, field)
static const struct key keys[] = {
    {"model", K_STR, F(model), sizeof(((struct pl_daemon_config *)0)->model), 0,
     "GGUF model file (required)"},
    {"socket_dir", K_STR, F(socket_dir), sizeof(((struct pl_daemon_config *)0)->socket_dir), 0,
     "directory of picolm.sock and admin.sock (default " PL_DAEMON_DEFAULT_SOCKET_DIR ")"},
    {"cpus", K_CPUS, F(cpus), 0, 0, "CPU list for the inference loop and its workers, e.g. 2-5"},
    {"ctx", K_U32, F(n_ctx), 0, 1u << 20, "context tokens per request (0: model's, max 4096)"},
    {"kv_pool_mb", K_U64, F(kv_pool_mb), 0, 1u << 20, "KV pool size in MiB"},
    {"kv_pool_tokens", K_U64, F(kv_pool_tokens), 0, UINT32_MAX, "KV pool size in tokens"},
    {"kv_type", K_KVTYPE, F(kv_type), 0, 0, "f16 (default) or f32"},
    {"max_sessions", K_U32, F(max_sessions), 0, 4096, "connected clients at once"},
    {"max_requests", K_U32, F(max_requests), 0, 64, "requests in flight per session"},
    {"max_active", K_U32, F(max_active), 0, 1024, "requests decoding at once"},
    {"batch", K_U32, F(batch), 0, 8192, "max tokens per forward step"},
    {"require_mlock", K_BOOL, F(require_mlock), 0, 0, "fail if the weights cannot be locked"},
    {"foreground", K_BOOL, F(foreground), 0, 0, "do not detach"},
    {"hugepages", K_HUGE, F(hugepages), 0, 0, "auto, thp or off"},
    {"prefix_cache_tokens", K_U32, F(prefix_cache_tokens), 0, UINT32_MAX,
     "KV tokens kept for prompt prefixes shared between requests (0: off; default 8192)"},
    {"prefix_cache_dir", K_STR, F(prefix_cache_dir),
     sizeof(((struct pl_daemon_config *)0)->prefix_cache_dir), 0,
     "directory the daemon owns where cached prefixes persist across restarts"},
    {"policy", K_STR, F(policy_path), sizeof(((struct pl_daemon_config *)0)->policy_path), 0,
     "access policy file (default /etc/picolm/policy.conf; if that is missing: allow "
     "everyone with the default limits)"},
    {"user", K_STR, F(user), sizeof(((struct pl_daemon_config *)0)->user), 0,
     "user to switch to after start-up when started as root (default picolm)"},
    {"no_drop", K_BOOL, F(no_drop), 0, 0, "development: keep the start-up user and capabilities"},
    {"no_seccomp", K_BOOL, F(no_seccomp), 0, 0, "development: no seccomp filter (logs a warning)"},
    {"decode_slots", K_U32, F(decode_slots), 0, 1024,
     "requests given a token per step, chosen by policy weight and priority (0: all)"},
    {"log_level", K_LOG, F(log_level), 0, 0, "err, warn, info or debug (live)"},
    {"prefill_chunk", K_U32, F(prefill_chunk), 0, 8192, "prompt tokens per step (live)"},
    {"stream_coalesce_us", K_U32, F(stream_coalesce_us), 0, 100000,
     "longest a streamed token waits for later ones so that one client wake-up carries "
     "several (first tokens and ends never wait; 0: wake per token; default 1000) (live)"},
    {"queue_max", K_U32, F(queue_max), 0, 65536, "requests waiting for KV blocks (live)"},
    {"queue_timeout_ms", K_U32, F(queue_timeout_ms), 0, 3600000, "max wait for KV (live)"},
    {"drain_timeout_ms", K_U32, F(drain_timeout_ms), 0, 3600000, "SIGTERM grace (live)"},
    {"handshake_timeout_ms", K_U32, F(handshake_timeout_ms), 0, 600000,
     "time a client has to say hello (live)"},
    {"metrics_file", K_STR, F(metrics_file), sizeof(((struct pl_daemon_config *)0)->metrics_file),
     0, "write Prometheus metrics to this file (temp file + rename), for node_exporter"},
    {"metrics_interval", K_U32, F(metrics_interval_s), 0, 86400,
     "seconds between metrics file writes (default 15)"},
};
#undef F

static int set_err(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int set_err(char *err, size_t err_len, const char *fmt, ...) {
    if (err && err_len) {
        va_list ap;
        va_start(ap, fmt);
        (void)vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

void pl_daemon_config_defaults(struct pl_daemon_config *c) {
    memset(c, 0, sizeof(*c));
    (void)snprintf(c->socket_dir, sizeof(c->socket_dir), "%s", PL_DAEMON_DEFAULT_SOCKET_DIR);
    c->max_sessions = 64;
    c->max_requests = 4;
    c->max_active = 16;
    c->batch = 512;
    c->kv_type = PL_KV_F16;
    c->log_level = PL_LOG_INFO;
    c->prefill_chunk = 256;
    c->stream_coalesce_us = 1000;
    c->prefix_cache_tokens = 8192;
    c->queue_max = 32;
    c->queue_timeout_ms = 10000;
    c->drain_timeout_ms = 30000;
    c->handshake_timeout_ms = 5000;
    c->metrics_interval_s = 15;
    (void)snprintf(c->user, sizeof(c->user), "%s", "picolm");
}

int pl_daemon_config_parse_cpus(const char *s, uint32_t *cpus, uint32_t *ret_n) {
    uint32_t n = 0;
    const char *p = s;
    if (!*p)
        return -EINVAL;
    while (*p) {
        char *end;
        if (!isdigit((unsigned char)*p))
            return -EINVAL;
        unsigned long lo = strtoul(p, &end, 10), hi = lo;
        p = end;
        if (*p == '-') {
            p++;
            if (!isdigit((unsigned char)*p))
                return -EINVAL;
            hi = strtoul(p, &end, 10);
            p = end;
        }
        if (lo > hi || hi >= 4096 || hi - lo >= PL_DAEMON_MAX_CPUS)
            return -EINVAL;
        for (unsigned long c = lo; c <= hi; c++) {
            for (uint32_t i = 0; i < n; i++)
                if (cpus[i] == c)
                    return -EINVAL; /* listed twice */
            if (n == PL_DAEMON_MAX_CPUS)
                return -EINVAL;
            cpus[n++] = (uint32_t)c;
        }
        if (*p == ',')
            p++;
        else if (*p)
            return -EINVAL;
    }
    *ret_n = n;
    return 0;
}

static bool parse_u64(const char *v, uint64_t max, uint64_t *ret) {
    char *end;
    if (!isdigit((unsigned char)*v))
        return false;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end || x > max)
        return false;
    *ret = x;
    return true;
}

/* Apply one key; src names where it came from for the message. */
static int apply(struct pl_daemon_config *c, const struct key *k, const char *v, const char *src,
                 char *err, size_t err_len) {
    uint8_t *base = (uint8_t *)c;
    uint64_t x;
    switch (k->kind) {
    case K_STR:
        if (!*v || strlen(v) >= k->size)
            return set_err(err, err_len, "%s: %s: empty or too long", src, k->name);
        memcpy(base + k->off, v, strlen(v) + 1);
        return 0;
    case K_U32:
    case K_U64:
        if (!parse_u64(v, k->max, &x))
            return set_err(err, err_len, "%s: %s: '%s' is not a number in [0, %llu]", src, k->name,
                           v, (unsigned long long)k->max);
        if (k->kind == K_U32)
            *(uint32_t *)(void *)(base + k->off) = (uint32_t)x;
        else
            *(uint64_t *)(void *)(base + k->off) = x;
        return 0;
    case K_BOOL: {
        bool b;
        if (!strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "1") || !strcmp(v, "on"))
            b = true;
        else if (!strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "0") || !strcmp(v, "off"))
            b = false;
        else
            return set_err(err, err_len, "%s: %s: '%s' is not a boolean", src, k->name, v);
        *(bool *)(base + k->off) = b;
        return 0;
    }
    case K_CPUS:
        if (pl_daemon_config_parse_cpus(v, c->cpus, &c->n_cpus) < 0)
            return set_err(err, err_len, "%s: cpus: '%s' is not a CPU list like 0-3,6", src, v);
        return 0;
    case K_LOG:
        if (!strcmp(v, "err") || !strcmp(v, "error"))
            c->log_level = PL_LOG_ERR;
        else if (!strcmp(v, "warn") || !strcmp(v, "warning"))
            c->log_level = PL_LOG_WARN;
        else if (!strcmp(v, "info"))
            c->log_level = PL_LOG_INFO;
        else if (!strcmp(v, "debug"))
            c->log_level = PL_LOG_DEBUG;
        else
            return set_err(err, err_len, "%s: log_level: '%s' is not err/warn/info/debug", src, v);
        return 0;
    case K_HUGE:
        if (!strcmp(v, "auto"))
            c->hugepages = PL_DAEMON_HUGEPAGES_AUTO;
        else if (!strcmp(v, "thp"))
            c->hugepages = PL_DAEMON_HUGEPAGES_THP;
        else if (!strcmp(v, "off"))
            c->hugepages = PL_DAEMON_HUGEPAGES_OFF;
        else
            return set_err(err, err_len, "%s: hugepages: '%s' is not auto/thp/off", src, v);
        return 0;
    case K_KVTYPE:
        if (!strcmp(v, "f16"))
            c->kv_type = PL_KV_F16;
        else if (!strcmp(v, "f32"))
            c->kv_type = PL_KV_F32;
        else
            return set_err(err, err_len, "%s: kv_type: '%s' is not f16/f32", src, v);
        return 0;
    }
    return set_err(err, err_len, "%s: %s: internal error", src, k->name);
}

/* Key by name; in flags a dash stands for an underscore. */
static const struct key *find_key(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        const char *k = keys[i].name;
        if (strlen(k) != len)
            continue;
        size_t j = 0;
        while (j < len && (name[j] == k[j] || (name[j] == '-' && k[j] == '_')))
            j++;
        if (j == len)
            return &keys[i];
    }
    return NULL;
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

int pl_daemon_config_load_file(struct pl_daemon_config *c, const char *path, char *err,
                               size_t err_len) {
    FILE *f = fopen(path, "re");
    char line[8192], src[4200];
    unsigned lineno = 0;
    int r = 0;

    if (!f) {
        r = -errno;
        (void)snprintf(err, err_len, "%s: %s", path, strerror(-r));
        return r;
    }
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        (void)snprintf(src, sizeof(src), "%s:%u", path, lineno);
        if (!strchr(line, '\n') && !feof(f)) {
            r = set_err(err, err_len, "%s: line too long", src);
            break;
        }
        char *s = trim(line);
        if (!*s || *s == '#')
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            r = set_err(err, err_len, "%s: expected 'key = value'", src);
            break;
        }
        *eq = '\0';
        char *k = trim(s), *v = trim(eq + 1);
        const struct key *key = find_key(k, strlen(k));
        if (!key || strchr(k, '-')) {
            r = set_err(err, err_len, "%s: unknown key '%.64s'", src, k);
            break;
        }
        if ((r = apply(c, key, v, src, err, err_len)) < 0)
            break;
    }
    (void)fclose(f);
    if (r == 0)
        (void)snprintf(c->config_path, sizeof(c->config_path), "%s", path);
    return r;
}

const char *pl_daemon_config_find_file(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "--config") || !strcmp(argv[i], "-c")) && i + 1 < argc)
            return argv[i + 1];
        if (!strncmp(argv[i], "--config=", 9))
            return argv[i] + 9;
    }
    return NULL;
}

void pl_daemon_config_usage(FILE *f) {
    (void)fprintf(f, "usage: picolmd --model FILE [options]\n"
                     "  -c, --config FILE   read a config file (flags override it)\n");
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        char flag[64];
        size_t j = 0;
        for (; keys[i].name[j] && j < sizeof(flag) - 1; j++)
            flag[j] = keys[i].name[j] == '_' ? '-' : keys[i].name[j];
        flag[j] = '\0';
        (void)fprintf(f, "  --%-20s %s%s\n", flag, keys[i].kind == K_BOOL ? "[=BOOL] " : "VALUE ",
                      keys[i].help);
    }
    (void)fprintf(f, "  -h, --help          this text\n  --version           print the version\n");
}

int pl_daemon_config_parse_args(struct pl_daemon_config *c, int argc, char **argv, char *err,
                                size_t err_len) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            pl_daemon_config_usage(stdout);
            return 1;
        }
        if (!strcmp(a, "--version")) {
            (void)printf("picolmd %s\n", PL_DAEMON_VERSION);
            return 1;
        }
        if (!strcmp(a, "-c") || !strcmp(a, "--config")) {
            i++; /* read before the flags by pl_daemon_config_find_file() */
            continue;
        }
        if (!strncmp(a, "--config=", 9))
            continue;
        if (strncmp(a, "--", 2) != 0)
            return set_err(err, err_len, "unexpected argument '%.64s'", a);
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const struct key *k = find_key(name, len);
        if (!k || memchr(name, '_', len))
            return set_err(err, err_len, "unknown option '%.64s' (see --help)", a);
        const char *v;
        if (eq)
            v = eq + 1;
        else if (k->kind == K_BOOL)
            v = "true";
        else if (i + 1 < argc)
            v = argv[++i];
        else
            return set_err(err, err_len, "option '%s' needs a value", a);
        int r = apply(c, k, v, "command line", err, err_len);
        if (r < 0)
            return r;
    }
    return 0;
}

int pl_daemon_config_check(const struct pl_daemon_config *c, char *err, size_t err_len) {
    if (!c->model[0])
        return set_err(err, err_len, "no model: pass --model FILE or set 'model' in the config");
    if (!c->max_sessions || !c->max_requests || !c->max_active || !c->batch)
        return set_err(err, err_len,
                       "max_sessions, max_requests, max_active and batch must be at least 1");
    if (!c->prefill_chunk)
        return set_err(err, err_len, "prefill_chunk must be at least 1");
    if (c->max_active > c->batch)
        return set_err(err, err_len, "max_active (%u) cannot exceed batch (%u)", c->max_active,
                       c->batch);
    if (c->kv_pool_mb && c->kv_pool_tokens)
        return set_err(err, err_len, "set kv_pool_mb or kv_pool_tokens, not both");
    return 0;
}
