/* SPDX-License-Identifier: MIT */
/* Prometheus text format for the broker's statistics. Families: picolm_<counter>_total and
 * picolm_<histogram> (total), picolm_identity_<...>{identity="NAME"} (per policy identity),
 * picolm_<gauge>. Called by the event loop's metrics timer (textfile) and by picoctl. */
#include "metrics_text.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct help {
    const char *name;
    const char *text;
};

static const struct help helps[] = {
    {"sessions_opened", "Client sessions that completed the handshake."},
    {"sessions_closed", "Client sessions that ended (hang-up, kill, protocol error)."},
    {"sessions_killed", "Client sessions ended by picoctl kill."},
    {"requests", "Generate requests accepted."},
    {"tokens_in", "Prompt tokens of accepted requests."},
    {"tokens_out", "Tokens generated."},
    {"requests_finished_length", "Requests that reached max_tokens or the context."},
    {"requests_finished_stop", "Requests that ended on a stop string."},
    {"requests_finished_eos", "Requests that ended on an end-of-generation token."},
    {"requests_cancelled", "Requests cancelled (client, admin kill or drain)."},
    {"requests_failed", "Requests that ended with an error."},
    {"protocol_errors", "Sessions ended for breaking the protocol."},
    {"prefix_cache_hits", "Requests whose prompt started from cached prefix KV blocks."},
    {"prefix_cache_hit_tokens", "Prompt tokens taken from the prefix cache, not prefilled."},
    {"prefix_cache_loaded_blocks", "Prefix cache KV blocks read from its directory."},
    {"prefix_cache_saved_blocks", "Prefix cache KV blocks written to its directory."},
    {"prefix_cache_evicted_blocks", "Prefix cache KV blocks given up for room."},
    {"prefix_cache_files_rejected",
     "Prefix cache files ignored: written for another model, or damaged."},
    {"ttft_ns", "Time from request receipt to the first token."},
    {"inter_token_ns", "Time between two consecutive tokens of a request."},
    {"queue_wait_ns", "Time from request receipt to its first scheduled step."},
    {"step_ns", "Duration of one batched forward step."},
    {"batch_tokens", "Tokens in one batched forward step."},
    {"uptime_ns", "Time since picolmd started."},
    {"sessions_open", "Client sessions connected now."},
    {"requests_active", "Requests holding an engine sequence now."},
    {"requests_waiting", "Requests waiting for KV memory now."},
    {"kv_used_tokens", "KV cache tokens in use now."},
    {"kv_total_tokens", "KV cache pool size in tokens."},
    {"draining", "1 while picolmd drains (no new work)."},
    {"prefix_cache_blocks", "KV blocks the shared prefix cache holds now."},
};

static const char *help_of(const char *name) {
    for (size_t i = 0; i < sizeof(helps) / sizeof(helps[0]); i++)
        if (!strcmp(helps[i].name, name))
            return helps[i].text;
    return "picolm broker statistic.";
}

/* Metric names allow [a-zA-Z0-9_:]; anything else in a name from the wire becomes '_'. */
static void put_name(FILE *f, const char *prefix, const char *name, size_t drop,
                     const char *suffix) {
    size_t n = strlen(name);
    n = n > drop ? n - drop : 0;
    (void)fputs(prefix, f);
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        bool ok =
            (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
        (void)fputc(ok ? c : '_', f);
    }
    (void)fputs(suffix, f);
}

/* A label value: backslash, double quote and newline escaped. */
static void put_label(FILE *f, const char *v) {
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            (void)fprintf(f, "\\%c", *v);
        else if (*v == '\n')
            (void)fputs("\\n", f);
        else
            (void)fputc(*v, f);
    }
}

static bool ends_ns(const char *name) {
    size_t n = strlen(name);
    return n > 3 && !strcmp(name + n - 3, "_ns");
}

/* The family name: picolm_[identity_]<stem>[_seconds][suffix]. */
static void family(FILE *f, bool ident, const char *name, const char *suffix) {
    bool ns = ends_ns(name);
    char sfx[64];
    (void)snprintf(sfx, sizeof(sfx), "%s%s", ns ? "_seconds" : "", suffix);
    put_name(f, ident ? "picolm_identity_" : "picolm_", name, ns ? 3 : 0, sfx);
}

static void header(FILE *f, bool ident, const char *name, const char *suffix, const char *type) {
    (void)fputs("# HELP ", f);
    family(f, ident, name, suffix);
    (void)fprintf(f, " %s%s\n# TYPE ", help_of(name), ident ? " Per policy identity." : "");
    family(f, ident, name, suffix);
    (void)fprintf(f, " %s\n", type);
}

static void labels(FILE *f, const char *identity, const char *le) {
    if (!identity && !le)
        return;
    (void)fputc('{', f);
    if (identity) {
        (void)fputs("identity=\"", f);
        put_label(f, identity);
        (void)fputc('"', f);
    }
    if (le)
        (void)fprintf(f, "%sle=\"%s\"", identity ? "," : "", le);
    (void)fputc('}', f);
}

static void counter_line(FILE *f, const char *identity, const Picolm__Admin__V1__Counter *c) {
    family(f, identity != NULL, c->name, "_total");
    labels(f, identity, NULL);
    (void)fprintf(f, " %llu\n", (unsigned long long)c->value);
}

static void hist_lines(FILE *f, const char *identity, const Picolm__Admin__V1__Histogram *h) {
    double scale = ends_ns(h->name) ? 1e-9 : 1.0;
    uint64_t cum = 0;
    char le[64];
    /* counts has one more entry than bounds (the overflow bucket); tolerate a short array. */
    for (size_t i = 0; i < h->n_bounds; i++) {
        cum += i < h->n_counts ? h->counts[i] : 0;
        (void)snprintf(le, sizeof(le), "%.9g", h->bounds[i] * scale);
        family(f, identity != NULL, h->name, "_bucket");
        labels(f, identity, le);
        (void)fprintf(f, " %llu\n", (unsigned long long)cum);
    }
    family(f, identity != NULL, h->name, "_bucket");
    labels(f, identity, "+Inf");
    (void)fprintf(f, " %llu\n", (unsigned long long)h->count);
    family(f, identity != NULL, h->name, "_sum");
    labels(f, identity, NULL);
    (void)fprintf(f, " %.12g\n", h->sum * scale);
    family(f, identity != NULL, h->name, "_count");
    labels(f, identity, NULL);
    (void)fprintf(f, " %llu\n", (unsigned long long)h->count);
}

int pl_daemon_metrics_text_render(FILE *f, const Picolm__Admin__V1__Stats *st) {
    for (size_t i = 0; i < st->n_gauges; i++) {
        const Picolm__Admin__V1__Counter *g = st->gauges[i];
        double v = ends_ns(g->name) ? (double)g->value * 1e-9 : (double)g->value;
        header(f, false, g->name, "", "gauge");
        family(f, false, g->name, "");
        (void)fprintf(f, " %.12g\n", v);
    }
    for (size_t i = 0; i < st->n_counters; i++) {
        header(f, false, st->counters[i]->name, "_total", "counter");
        counter_line(f, NULL, st->counters[i]);
    }
    for (size_t i = 0; i < st->n_histograms; i++) {
        header(f, false, st->histograms[i]->name, "", "histogram");
        hist_lines(f, NULL, st->histograms[i]);
    }
    /* Per identity: one family per statistic, one series per identity (a family's lines
     * must stay together in the text format). Identities carry the same names in the same
     * order; look each up by name all the same. */
    if (st->n_identities > 0) {
        const Picolm__Admin__V1__IdentityStats *id0 = st->identities[0];
        for (size_t c = 0; c < id0->n_counters; c++) {
            const char *name = id0->counters[c]->name;
            header(f, true, name, "_total", "counter");
            for (size_t k = 0; k < st->n_identities; k++) {
                const Picolm__Admin__V1__IdentityStats *id = st->identities[k];
                for (size_t j = 0; j < id->n_counters; j++)
                    if (!strcmp(id->counters[j]->name, name)) {
                        counter_line(f, id->identity, id->counters[j]);
                        break;
                    }
            }
        }
        for (size_t h = 0; h < id0->n_histograms; h++) {
            const char *name = id0->histograms[h]->name;
            header(f, true, name, "", "histogram");
            for (size_t k = 0; k < st->n_identities; k++) {
                const Picolm__Admin__V1__IdentityStats *id = st->identities[k];
                for (size_t j = 0; j < id->n_histograms; j++)
                    if (!strcmp(id->histograms[j]->name, name)) {
                        hist_lines(f, id->identity, id->histograms[j]);
                        break;
                    }
            }
        }
    }
    return ferror(f) ? -EIO : 0;
}

int pl_daemon_metrics_text_write_at(int dir_fd, const char *name,
                                    const Picolm__Admin__V1__Stats *st) {
    char tmp[300];
    char *text = NULL;
    size_t len = 0;
    int r;
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", name) >= (int)sizeof(tmp))
        return -ENAMETOOLONG;
    FILE *mem = open_memstream(&text, &len);
    if (!mem)
        return -ENOMEM;
    r = pl_daemon_metrics_text_render(mem, st);
    if (fclose(mem) != 0 && r == 0)
        r = -ENOMEM;
    if (r < 0) {
        free(text);
        return r;
    }
    int fd = openat(dir_fd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        r = -errno;
        free(text);
        return r;
    }
    for (size_t off = 0; off < len;) {
        ssize_t n = write(fd, text + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            r = n < 0 ? -errno : -EIO;
            break;
        }
        off += (size_t)n;
    }
    free(text);
    if (close(fd) < 0 && r == 0)
        r = -errno;
    if (r == 0 && renameat(dir_fd, tmp, dir_fd, name) < 0)
        r = -errno;
    /* On failure the temp file stays (the sandboxed broker may not unlink); the next write
     * truncates it, and collectors ignore names that do not end in .prom. */
    return r;
}
