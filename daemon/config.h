/* SPDX-License-Identifier: MIT */
/* picolmd configuration (pl_daemon_config_*): defaults, the `key = value` config file and
 * the command-line flags, in that order of precedence (flags win). Every key is documented
 * in packaging/picolmd.conf.example. main.c builds it once; SIGHUP re-reads the file and
 * applies the keys marked "live". */
#ifndef PL_DAEMON_CONFIG_H
#define PL_DAEMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define PL_DAEMON_DEFAULT_SOCKET_DIR "/run/picolm"
#define PL_DAEMON_MAX_CPUS 256
#define PL_DAEMON_VERSION "0.1.0"

enum pl_daemon_hugepages {
    PL_DAEMON_HUGEPAGES_AUTO = 0, /* hugetlb, else THP, else the file mapping */
    PL_DAEMON_HUGEPAGES_THP = 1,  /* skip hugetlb */
    PL_DAEMON_HUGEPAGES_OFF = 2,  /* keep the weights in the file mapping */
};

struct pl_daemon_config {
    char model[4096];
    char socket_dir[512];
    char config_path[4096];            /* "" when none */
    uint32_t cpus[PL_DAEMON_MAX_CPUS]; /* inference + matmul worker cores */
    uint32_t n_cpus;                   /* 0: every CPU the daemon may run on, unpinned */
    uint32_t n_ctx;                    /* tokens per request; 0: min(n_ctx_train, 4096) */
    uint64_t kv_pool_tokens;           /* 0: from kv_pool_mb, else n_ctx * max_active */
    uint64_t kv_pool_mb;
    uint32_t max_sessions; /* connected clients */
    uint32_t max_requests; /* in flight per session (bounded per-session queue) */
    uint32_t max_active;   /* requests decoding at once (engine sequences) */
    uint32_t batch;        /* max tokens per forward step */
    uint32_t kv_type;      /* enum pl_kv_type */
    bool require_mlock;
    bool foreground;
    uint32_t hugepages;           /* enum pl_daemon_hugepages */
    char policy_path[4096];       /* "" : PL_POLICY_DEFAULT_PATH, built-in policy if missing */
    char user[64];                /* run as this user after start-up (root only) */
    bool no_drop;                 /* development: keep the start-up credentials */
    bool no_seccomp;              /* development: no seccomp filter */
    uint32_t decode_slots;        /* requests decoded per step, by policy weight; 0: all */
    uint32_t prefix_cache_tokens; /* shared prefix KV cache, tokens (0: off) */
    char prefix_cache_dir[4096];  /* persist the prefix cache there ("": in memory only) */
    /* live: re-read on SIGHUP */
    int log_level;               /* enum pl_log_level */
    uint32_t prefill_chunk;      /* prompt tokens per step over all prefilling requests */
    uint32_t stream_coalesce_us; /* a streamed token may wait this long for later ones */
    uint32_t queue_max;          /* requests waiting for KV blocks; 0: fail at once */
    uint32_t queue_timeout_ms;   /* how long such a request may wait */
    uint32_t drain_timeout_ms;   /* SIGTERM: then cancel what still runs */
    uint32_t handshake_timeout_ms;
    /* observability (metrics_text.c) */
    char metrics_file[4096];     /* Prometheus textfile, "" for none */
    uint32_t metrics_interval_s; /* between writes; 0: only at exit */
};

void pl_daemon_config_defaults(struct pl_daemon_config *c);

/* Read a config file over c. Unknown keys and bad values are errors naming file:line.
 * Returns 0, -ENOENT/-errno (cannot read), -EINVAL (with the reason in err). */
int pl_daemon_config_load_file(struct pl_daemon_config *c, const char *path, char *err,
                               size_t err_len);

/* Parse argv over c (after the file, which --config names: the caller runs
 * pl_daemon_config_find_file() first). Returns 0, 1 when --help/--version was printed
 * (exit 0), or -EINVAL with the reason in err. */
int pl_daemon_config_parse_args(struct pl_daemon_config *c, int argc, char **argv, char *err,
                                size_t err_len);

/* The --config FILE / -c FILE argument, or NULL. */
const char *pl_daemon_config_find_file(int argc, char **argv);

/* Check the finished configuration (model set, ranges). Returns 0 or -EINVAL with err. */
int pl_daemon_config_check(const struct pl_daemon_config *c, char *err, size_t err_len);

/* Parse a CPU list ("0-3,6") into cpus[]. Returns 0 or -EINVAL. */
int pl_daemon_config_parse_cpus(const char *s, uint32_t *cpus, uint32_t *ret_n);

void pl_daemon_config_usage(FILE *f);

#endif
