/* SPDX-License-Identifier: MIT */
/* picoctl: see and steer picolmd over its admin socket. One subcommand per run (status,
 * sessions, kill, policy, model info, drain, stats, top); tables for people by default,
 * --json for scripts, --prometheus for metrics. Exit status: 0 success, 1 the broker
 * answered with an error (or refused us), 2 bad usage, 3 the broker is unreachable. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "admin_client.h"
#include "json_writer.h"
#include "metrics_text.h"
#include "pl/admin.pb-c.h"
#include "pl/picolm.pb-c.h"
#include "pl/pl_util.h"

#define DEFAULT_SOCKET "/run/picolm/admin.sock"
#define EXIT_BROKER 1
#define EXIT_USAGE 2
#define EXIT_UNREACHABLE 3

typedef Picolm__Admin__V1__AdminRequest req_t;
typedef Picolm__Admin__V1__AdminResponse resp_t;

struct opts {
    const char *socket;
    bool json;
    bool prometheus;
    int timeout_ms;
    double interval_s; /* top */
    long iterations;   /* top: 0 = until interrupted */
};

static void usage(FILE *f) {
    (void)fprintf(
        f, "usage: picoctl [--socket PATH] [--json] [--timeout MS] COMMAND [ARGS]\n"
           "\n"
           "commands:\n"
           "  status                    version, uptime, model, memory residency, KV pool,\n"
           "                            CPUs, privileges, policy\n"
           "  sessions                  connected clients with their counts and timings\n"
           "  kill SESSION | --pid PID | --uid UID\n"
           "                            cancel the session's requests and disconnect it\n"
           "  policy show | reload      show or reload the policy in force\n"
           "  model info                GGUF metadata and a tokenizer summary\n"
           "  drain                     stop accepting clients, finish running work, exit\n"
           "  stats [--prometheus]      counters and latency histograms since start\n"
           "  top [--interval S] [--iterations N]\n"
           "                            live view of sessions and stats\n"
           "\n"
           "options:\n"
           "  --socket PATH   admin socket (default " DEFAULT_SOCKET ", or $PICOLM_ADMIN_SOCKET)\n"
           "  --json          machine-readable output\n"
           "  --timeout MS    wait this long for an answer (default 5000)\n"
           "  -h, --help      this text\n"
           "\n"
           "exit status: 0 ok, 1 picolmd answered with an error, 2 bad usage, 3 unreachable\n");
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    (void)fputs("picoctl: ", stderr);
    (void)vfprintf(stderr, fmt, ap);
    (void)fputs(" (see picoctl --help)\n", stderr);
    va_end(ap);
    return EXIT_USAGE;
}

static bool parse_u64(const char *s, uint64_t max, uint64_t *ret) {
    char *end;
    if (!s || !*s || *s == '-' || *s == '+')
        return false;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v > max)
        return false;
    *ret = v;
    return true;
}

/* ---- Talking to the broker ---- */

static const char *code_name(uint32_t code) {
    const ProtobufCEnumValue *v =
        protobuf_c_enum_descriptor_get_value(&picolm__v1__error_code__descriptor, (int)code);
    return v ? v->name : "UNKNOWN";
}

/* One request; on failure prints the message and returns the exit status (> 0). */
static int call(const struct opts *o, req_t *req, resp_t **ret) {
    struct pl_ctl_admin a;
    enum pl_ctl_fail why = PL_CTL_FAIL_IO;
    char err[512];
    if (pl_ctl_admin_open(&a, o->socket, o->timeout_ms, &why, err, sizeof(err)) < 0) {
        (void)fprintf(stderr, "picoctl: %s\n", err);
        return EXIT_UNREACHABLE;
    }
    int r = pl_ctl_admin_call(&a, req, ret, &why, err, sizeof(err));
    pl_ctl_admin_close(&a);
    if (r < 0) {
        (void)fprintf(stderr, "picoctl: %s\n", err);
        return why == PL_CTL_FAIL_UNREACHABLE ? EXIT_UNREACHABLE : EXIT_BROKER;
    }
    if ((*ret)->error_code != 0) {
        resp_t *resp = *ret;
        if (resp->error_code == PICOLM__V1__ERROR_CODE__ERROR_CODE_PERMISSION_DENIED)
            (void)fprintf(stderr, "picoctl: permission denied: %s\n",
                          resp->error_message && *resp->error_message ? resp->error_message
                                                                      : "by picolmd");
        else
            (void)fprintf(stderr, "picoctl: picolmd: %s (%s)\n",
                          resp->error_message && *resp->error_message ? resp->error_message
                                                                      : "request failed",
                          code_name(resp->error_code));
        picolm__admin__v1__admin_response__free_unpacked(resp, NULL);
        *ret = NULL;
        return EXIT_BROKER;
    }
    return 0;
}

static int expect(resp_t *resp, Picolm__Admin__V1__AdminResponse__ResultCase want) {
    if (resp->result_case == want)
        return 0;
    (void)fprintf(stderr,
                  "picoctl: picolmd answered with something else than asked (result %d); "
                  "is it another version?\n",
                  (int)resp->result_case);
    picolm__admin__v1__admin_response__free_unpacked(resp, NULL);
    return EXIT_BROKER;
}

static int finish_json(struct pl_jw *w) {
    if (pl_jw_finish(w) < 0) {
        (void)fprintf(stderr, "picoctl: cannot write the output\n");
        return EXIT_BROKER;
    }
    return 0;
}

/* ---- Formatting helpers ---- */

static const char *user_name(uint32_t uid, char *buf, size_t cap) {
    struct passwd pw, *res = NULL;
    char tmp[1024];
    if (getpwuid_r(uid, &pw, tmp, sizeof(tmp), &res) == 0 && res)
        (void)snprintf(buf, cap, "%s", pw.pw_name);
    else
        (void)snprintf(buf, cap, "%u", uid);
    return buf;
}

static const char *human_bytes(uint64_t b, char *buf, size_t cap) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    (void)snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", v, units[u]);
    return buf;
}

static const char *human_ns(uint64_t ns, char *buf, size_t cap) {
    if (ns == 0)
        (void)snprintf(buf, cap, "-");
    else if (ns < 1000000ull)
        (void)snprintf(buf, cap, "%.0fus", (double)ns / 1e3);
    else if (ns < 10000000000ull)
        (void)snprintf(buf, cap, "%.1fms", (double)ns / 1e6);
    else
        (void)snprintf(buf, cap, "%.1fs", (double)ns / 1e9);
    return buf;
}

static const char *human_age(uint64_t ns, char *buf, size_t cap) {
    uint64_t s = ns / 1000000000ull;
    if (s < 60)
        (void)snprintf(buf, cap, "%" PRIu64 "s", s);
    else if (s < 3600)
        (void)snprintf(buf, cap, "%" PRIu64 "m%02" PRIu64 "s", s / 60, s % 60);
    else if (s < 86400)
        (void)snprintf(buf, cap, "%" PRIu64 "h%02" PRIu64 "m", s / 3600, s / 60 % 60);
    else
        (void)snprintf(buf, cap, "%" PRIu64 "d%02" PRIu64 "h", s / 86400, s / 3600 % 24);
    return buf;
}

static const char *human_time(uint64_t unix_ns, char *buf, size_t cap) {
    if (!unix_ns) {
        (void)snprintf(buf, cap, "-");
        return buf;
    }
    time_t t = (time_t)(unix_ns / 1000000000ull);
    struct tm tm;
    if (!localtime_r(&t, &tm) || !strftime(buf, cap, "%Y-%m-%d %H:%M:%S %z", &tm))
        (void)snprintf(buf, cap, "%" PRIu64, (uint64_t)(unix_ns / 1000000000ull));
    return buf;
}

/* A quantile (0..1) from a histogram: linear inside the bucket; the overflow bucket answers
 * with its lower bound. 0 when empty. */
static double hist_quantile(const Picolm__Admin__V1__Histogram *h, double q) {
    if (!h || h->count == 0)
        return 0.0;
    double rank = q * (double)h->count, seen = 0.0;
    for (size_t i = 0; i < h->n_counts; i++) {
        double c = (double)h->counts[i];
        if (seen + c >= rank && c > 0) {
            if (i == 0 && h->n_bounds > 0)
                return h->bounds[0]; /* no lower edge known: answer with the bound */
            double lo = h->bounds[i - 1];
            if (i >= h->n_bounds)
                return lo;
            double hi = h->bounds[i];
            return lo + (hi - lo) * ((rank - seen) / c);
        }
        seen += c;
    }
    return h->n_bounds ? h->bounds[h->n_bounds - 1] : 0.0;
}

static uint64_t find_ctr(Picolm__Admin__V1__Counter **cs, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(cs[i]->name, name))
            return cs[i]->value;
    return 0;
}

/* ---- status ---- */

static int cmd_status(const struct opts *o) {
    req_t req = PICOLM__ADMIN__V1__ADMIN_REQUEST__INIT;
    Picolm__Admin__V1__StatusRequest sr = PICOLM__ADMIN__V1__STATUS_REQUEST__INIT;
    resp_t *resp = NULL;
    req.cmd_case = PICOLM__ADMIN__V1__ADMIN_REQUEST__CMD_STATUS;
    req.status = &sr;
    int r = call(o, &req, &resp);
    if (r || (r = expect(resp, PICOLM__ADMIN__V1__ADMIN_RESPONSE__RESULT_STATUS)))
        return r;
    const Picolm__Admin__V1__Status *s = resp->status;
    const Picolm__Admin__V1__Residency *res = s->residency;
    const Picolm__Admin__V1__KvPool *kv = s->kv;
    Picolm__Admin__V1__Residency res0 = PICOLM__ADMIN__V1__RESIDENCY__INIT;
    Picolm__Admin__V1__KvPool kv0 = PICOLM__ADMIN__V1__KV_POOL__INIT;
    char b1[64], b2[64], b3[64], user[64];
    if (!res)
        res = &res0;
    if (!kv)
        kv = &kv0;
    user_name(s->uid, user, sizeof(user));
    if (o->json) {
        struct pl_jw w;
        char cap[32];
        pl_jw_init(&w, stdout);
        pl_jw_obj_begin(&w, NULL);
        pl_jw_str(&w, "version", s->version);
        pl_jw_u64(&w, "uptime_ns", s->uptime_ns);
        pl_jw_obj_begin(&w, "model");
        pl_jw_str(&w, "name", s->model_name);
        pl_jw_str(&w, "path", s->model_path);
        pl_jw_str(&w, "architecture", s->architecture);
        pl_jw_u64(&w, "n_params", s->n_params);
        pl_jw_str(&w, "quant_mix", s->quant_mix);
        pl_jw_u64(&w, "file_bytes", s->file_bytes);
        pl_jw_obj_end(&w);
        pl_jw_obj_begin(&w, "memory");
        pl_jw_str(&w, "backing", res->backing);
        pl_jw_str(&w, "backing_reason", res->backing_reason);
        pl_jw_u64(&w, "bytes_mapped", res->bytes_mapped);
        pl_jw_u64(&w, "bytes_locked", res->bytes_locked);
        pl_jw_u64(&w, "bytes_hugetlb", res->bytes_hugetlb);
        pl_jw_u64(&w, "bytes_thp", res->bytes_thp);
        pl_jw_bool(&w, "locked", res->locked);
        pl_jw_u64(&w, "major_faults", res->major_faults);
        pl_jw_u64(&w, "minor_faults", res->minor_faults);
        pl_jw_obj_end(&w);
        pl_jw_obj_begin(&w, "kv");
        pl_jw_u64(&w, "total_tokens", kv->total_tokens);
        pl_jw_u64(&w, "used_tokens", kv->used_tokens);
        pl_jw_u64(&w, "reserved_tokens", kv->reserved_tokens);
        pl_jw_u64(&w, "block_tokens", kv->block_tokens);
        pl_jw_u64(&w, "bytes", kv->bytes);
        pl_jw_arr_begin(&w, "per_session");
        for (size_t i = 0; i < kv->n_per_session; i++) {
            pl_jw_obj_begin(&w, NULL);
            pl_jw_u64(&w, "session", kv->per_session[i]->session_id);
            pl_jw_u64(&w, "tokens", kv->per_session[i]->tokens);
            pl_jw_obj_end(&w);
        }
        pl_jw_arr_end(&w);
        pl_jw_obj_end(&w);
        pl_jw_arr_begin(&w, "cpus");
        for (size_t i = 0; i < s->n_cpus; i++)
            pl_jw_u64(&w, NULL, s->cpus[i]);
        pl_jw_arr_end(&w);
        pl_jw_obj_begin(&w, "security");
        pl_jw_bool(&w, "seccomp", s->seccomp);
        pl_jw_bool(&w, "no_new_privs", s->no_new_privs);
        (void)snprintf(cap, sizeof(cap), "%016" PRIx64, s->cap_eff);
        pl_jw_str(&w, "cap_eff", cap);
        pl_jw_u64(&w, "uid", s->uid);
        pl_jw_u64(&w, "gid", s->gid);
        pl_jw_str(&w, "user", user);
        pl_jw_obj_end(&w);
        pl_jw_obj_begin(&w, "policy");
        pl_jw_str(&w, "path", s->policy_path);
        pl_jw_bool(&w, "builtin", s->policy_builtin);
        pl_jw_u64(&w, "loaded_unix_ns", s->policy_loaded_unix_ns);
        pl_jw_obj_end(&w);
        pl_jw_str(&w, "config_path", s->config_path);
        pl_jw_u64(&w, "sessions", s->sessions);
        pl_jw_u64(&w, "sessions_total", s->sessions_total);
        pl_jw_bool(&w, "draining", s->draining);
        pl_jw_obj_begin(&w, "metrics");
        pl_jw_str(&w, "file", s->metrics_file);
        pl_jw_u64(&w, "interval_s", s->metrics_interval_s);
        pl_jw_obj_end(&w);
        pl_jw_obj_end(&w);
        r = finish_json(&w);
    } else {
        printf("picolmd %s, up %s%s\n", s->version, human_age(s->uptime_ns, b1, sizeof(b1)),
               s->draining ? ", DRAINING" : "");
        printf("model       %s (%s, %.2fB params, %s)\n", s->model_name, s->architecture,
               (double)s->n_params / 1e9, human_bytes(s->file_bytes, b1, sizeof(b1)));
        printf("            %s\n", s->model_path);
        printf("quant mix   %s\n", s->quant_mix[0] ? s->quant_mix : "-");
        printf("memory      %s, %s mapped, %s locked, %s hugetlb, %s THP\n", res->backing,
               human_bytes(res->bytes_mapped, b1, sizeof(b1)),
               human_bytes(res->bytes_locked, b2, sizeof(b2)),
               human_bytes(res->bytes_hugetlb, b3, sizeof(b3)),
               human_bytes(res->bytes_thp, user, sizeof(user)));
        printf("            %s\n", res->backing_reason);
        printf("faults      %" PRIu64 " major, %" PRIu64 " minor since start\n", res->major_faults,
               res->minor_faults);
        printf("KV pool     %" PRIu64 " / %" PRIu64 " tokens used (%" PRIu64 " reserved), %s\n",
               kv->used_tokens, kv->total_tokens, kv->reserved_tokens,
               human_bytes(kv->bytes, b1, sizeof(b1)));
        for (size_t i = 0; i < kv->n_per_session; i++)
            printf("            session %" PRIu64 ": %" PRIu64 " tokens\n",
                   kv->per_session[i]->session_id, kv->per_session[i]->tokens);
        printf("cpus        ");
        if (!s->n_cpus)
            printf("not pinned");
        for (size_t i = 0; i < s->n_cpus; i++)
            printf("%s%u", i ? "," : "", s->cpus[i]);
        printf("\n");
        user_name(s->uid, user, sizeof(user));
        printf("security    running as %s (uid %u gid %u), seccomp %s, no_new_privs %s, "
               "CapEff %016" PRIx64 "\n",
               user, s->uid, s->gid, s->seccomp ? "on" : "off", s->no_new_privs ? "on" : "off",
               s->cap_eff);
        printf("policy      %s (loaded %s)\n",
               s->policy_builtin   ? "built-in (everyone allowed)"
               : s->policy_path[0] ? s->policy_path
                                   : "-",
               human_time(s->policy_loaded_unix_ns, b1, sizeof(b1)));
        printf("sessions    %u open, %" PRIu64 " since start\n", s->sessions, s->sessions_total);
        if (s->metrics_file[0])
            printf("metrics     %s every %us\n", s->metrics_file, s->metrics_interval_s);
    }
    picolm__admin__v1__admin_response__free_unpacked(resp, NULL);
    return r;
}

/* ---- sessions ---- */

static void session_json(struct pl_jw *w, const Picolm__Admin__V1__Session *e) {
    char user[64];
    pl_jw_obj_begin(w, NULL);
    pl_jw_u64(w, "id", e->id);
    pl_jw_i64(w, "pid", e->pid);
    pl_jw_u64(w, "uid", e->uid);
    pl_jw_u64(w, "gid", e->gid);
    pl_jw_str(w, "user", e->user[0] ? e->user : user_name(e->uid, user, sizeof(user)));
    pl_jw_str(w, "exe", e->exe);
    pl_jw_str(w, "identity", e->identity);
    pl_jw_str(w, "state", e->state);
    pl_jw_bool(w, "killing", e->killing);
    pl_jw_u64(w, "requests", e->requests);
    pl_jw_u64(w, "tokens_in", e->tokens_in);
    pl_jw_u64(w, "tokens_out", e->tokens_out);
    pl_jw_dbl(w, "tokens_per_s", e->tokens_per_s);
    pl_jw_u64(w, "queue_wait_ns", e->queue_wait_ns);
    pl_jw_u64(w, "ttft_ns", e->ttft_ns);
    pl_jw_u64(w, "age_ns", e->age_ns);
    pl_jw_u64(w, "kv_tokens", e->kv_tokens);
    pl_jw_obj_end(w);
}

/* rates: tokens/s per session to show instead of the lifetime average (top), or NULL. */
static void sessions_table(const Picolm__Admin__V1__SessionList *l, const double *rates) {
    char user[64], b1[32], b2[32], b3[32];
    printf("%-6s %-7s %-10s %-15s %-12s %-9s %8s %8s %8s %9s %9s %8s\n", "ID", "PID", "USER", "EXE",
           "IDENTITY", "STATE", "TOK_IN", "TOK_OUT", "TOK/S", "QUEUE", "TTFT", "AGE");
    for (size_t i = 0; i < l->n_sessions; i++) {
        const Picolm__Admin__V1__Session *e = l->sessions[i];
        printf("%-6" PRIu64 " %-7d %-10.10s %-15.15s %-12.12s %-9s %8" PRIu64 " %8" PRIu64
               " %8.1f %9s %9s %8s\n",
               e->id, e->pid, e->user[0] ? e->user : user_name(e->uid, user, sizeof(user)),
               e->exe[0] ? e->exe : "-", e->identity[0] ? e->identity : "-",
               e->killing ? "killing" : e->state, e->tokens_in, e->tokens_out,
               rates ? rates[i] : e->tokens_per_s, human_ns(e->queue_wait_ns, b1, sizeof(b1)),
               human_ns(e->ttft_ns, b2, sizeof(b2)), human_age(e->age_ns, b3, sizeof(b3)));
    }
    if (!l->n_sessions)
        printf("(no sessions)\n");
}

static int get_sessions(const struct opts *o, resp_t **ret) {
    req_t req = PICOLM__ADMIN__V1__ADMIN_REQUEST__INIT;
    Picolm__Admin__V1__SessionsRequest sr = PICOLM__ADMIN__V1__SESSIONS_REQUEST__INIT;
    req.cmd_case = PICOLM__ADMIN__V1__ADMIN_REQUEST__CMD_SESSIONS;
    req.sessions = &sr;
    int r = call(o, &req, ret);
    if (r || (r = expect(*ret, PICOLM__ADMIN__V1__ADMIN_RESPONSE__RESULT_SESSIONS)))
        return r;
    return 0;
}

static int cmd_sessions(const struct opts *o) {
    resp_t *resp = NULL;
    int r = get_sessions(o, &resp);
    if (r)
        return r;
    const Picolm__Admin__V1__SessionList *l = resp->sessions;
    if (o->json) {
        struct pl_jw w;
        pl_jw_init(&w, stdout);
        pl_jw_obj_begin(&w, NULL);
        pl_jw_arr_begin(&w, "sessions");
        for (size_t i = 0; l && i < l->n_sessions; i++)
            session_json(&w, l->sessions[i]);
        pl_jw_arr_end(&w);
        pl_jw_obj_end(&w);
        r = finish_json(&w);
    } else if (l) {
        sessions_table(l, NULL);
    }
    picolm__admin__v1__admin_response__free_unpacked(resp, NULL);
    return r;
}

/* ---- kill ---- */

static int cmd_kill(const struct opts *o, int argc, char **argv) {
    req_t req = PICOLM__ADMIN__V1__ADMIN_REQUEST__INIT;
    Picolm__Admin__V1__KillRequest kr = PICOLM__ADMIN__V1__KILL_REQUEST__INIT;
    resp_t *resp = NULL;
    uint64_t v;
    if (argc == 1 && parse_u64(argv[0], UINT64_MAX, &v) && v > 0) {
        kr.target_case = PICOLM__ADMIN__V1__KILL_REQUEST__TARGET_SESSION_ID;
        kr.session_id = v;
    } else if (argc == 2 && !strcmp(argv[0], "--pid")) {
        if (!parse_u64(argv[1], INT32_MAX, &v) || v == 0)
            return usage_error("kill --pid: '%s' is not a process id", argv[1]);
        kr.target_case = PICOLM__ADMIN__V1__KILL_REQUEST__TARGET_PID;
        kr.pid = (int32_t)v;
    } else if (argc == 2 && !strcmp(argv[0], "--uid")) {
        if (!parse_u64(argv[1], UINT32_MAX - 1, &v)) {
            struct passwd pw, *res = NULL;
            char tmp[1024];
            if (getpwnam_r(argv[1], &pw, tmp, sizeof(tmp), &res) != 0 || !res)
                return usage_error("kill --uid: '%s' is neither a uid nor a user", argv[1]);
            v = pw.pw_uid;
        }
        kr.target_case = PICOLM__ADMIN__V1__KILL_REQUEST__TARGET_UID;
        kr.uid = (uint32_t)v;
    } else {
        return usage_error("kill needs one of: SESSION, --pid PID, --uid UID");
    }
    req.cmd_case = PICOLM__ADMIN__V1__ADMIN_REQUEST__CMD_KILL;
    req.kill = &kr;
    int r = call(o, &req, &resp);
    if (r || (r = expect(resp, PICOLM__ADMIN__V1__ADMIN_RESPONSE__RESULT_KILL)))
        return r;
    uint32_t n = resp->kill ? resp->kill->killed : 0;
    if (o->json) {
        struct pl_jw w;
        pl_jw_init(&w, stdout);
        pl_jw_obj_begin(&w, NULL);
        pl_jw_u64(&w, "killed", n);
        pl_jw_obj_end(&w);
        r = finish_json(&w);
    } else {
        printf("killed %u session%s\n", n, n == 1 ? "" : "s");
    }
    picolm__admin__v1__admin_response__free_unpacked(resp, NULL);
    return r;
}

/* ---- policy ---- */

static int cmd_policy(const struct opts *o, int argc, char **argv) {
    req_t req = PICOLM__ADMIN__V1__ADMIN_REQUEST__INIT;
    Picolm__Admin__V1__PolicyRequest pr = PICOLM__ADMIN__V1__POLICY_REQUEST__INIT;
    resp_t *resp = NULL;
    char b1[64];
    if (argc != 1 || (strcmp(argv[0], "show") && strcmp(argv[0], "reload")))
        return usage_error("policy needs 'show' or 'reload'");
    bool reload = !strcmp(argv[0], "reload");
    pr.action = reload ? PICOLM__ADMIN__V1__POLICY_REQUEST__ACTION__ACTION_RELOAD
                       : PICOLM__ADMIN__V1__POLICY_REQUEST__ACTION__ACTION_SHOW;
    req.cmd_case = PICOLM__ADMIN__V1__ADMIN_REQUEST__CMD_POLICY;
    req.policy = &pr;
    int r = call(o, &req, &resp);
    if (r || (r = expect(resp, PICOLM__ADMIN__V1__ADMIN_RESPONSE__RESULT_POLICY)))
        return r;
    const Picolm__Admin__V1__PolicyText *p = resp->policy;
    if (o->json) {
        struct pl_jw w;
        pl_jw_init(&w, stdout);
        pl_jw_obj_begin(&w, NULL);
        pl_jw_str(&w, "action", reload ? "reload" : "show");
        pl_jw_bool(&w, "reloaded", reload);
        pl_jw_str(&w, "path", p ? p->path : "");
        pl_jw_u64(&w, "loaded_unix_ns", p ? p->loaded_unix_ns : 0);
        pl_jw_bool(&w, "builtin", p ? p->builtin : false);
        pl_jw_str(&w, "last_error", p ? p->last_error : "");
        pl_jw_str(&w, "text", p ? p->text : "");
        pl_jw_obj_end(&w);
        r = finish_json(&w);
    } else if (p) {
        if (reload)
            printf("reloaded %s\n", p->path[0] ? p->path : "(no file)");
        printf("# %s, loaded %s\n", p->path[0] ? p->path : "(built in / no file)",
               human_time(p->loaded_unix_ns, b1, sizeof(b1)));
        if (p->last_error[0])
            printf("# the last reload FAILED, the policy in force is older than this file:\n"
                   "#   %s\n",
                   p->last_error);
        if (!reload) {
            (void)fputs(p->text, stdout);
            if (p->text[0] && p->text[strlen(p->text) - 1] != '\n')
                (void)fputc('\n', stdout);
        }
    }
    picolm__admin__v1__admin_response__free_unpacked(resp, NULL);
    return r;
}

/* ---- model info ---- */

static int cmd_model(const struct opts *o, int argc, char **argv) {
    req_t req = PICOLM__ADMIN__V1__ADMIN_REQUEST__INIT;
    Picolm__Admin__V1__ModelInfoRequest mr = PICOLM__ADMIN__V1__MODEL_INFO_REQUEST__INIT;
    resp_t *resp = NULL;
    if (argc != 1 || strcmp(argv[0], "info"))
        return usage_error("model needs 'info'");
    req.cmd_case = PICOLM__ADMIN__V1__ADMIN_REQUEST__CMD_MODEL_INFO;
    req.model_info = &mr;
    int r = call(o, &req, &resp);
    if (r || (r = expect(resp, PICOLM__ADMIN__V1__ADMIN_RESPONSE__RESULT_MODEL)))
        return r;
    const Picolm__Admin__V1__ModelMetadata *m = resp->model;
    if (o->json) {
        struct pl_jw w;
        pl_jw_init(&w, stdout);
        pl_jw_obj_begin(&w, NULL);
        pl_jw_str(&w, "tokenizer", m ? m->tokenizer_summary : "");
        pl_jw_obj_begin(&w, "metadata");
        for (size_t i = 0; m && i < m->n_kv; i++)
            pl_jw_str(&w, m->kv[i]->key, m->kv[i]->value);
        pl_jw_obj_end(&w);
        pl_jw_obj_end(&w);
        r = finish_json(&w);
    } else if (m) {
        size_t kw = 0;
        for (size_t i = 0; i < m->n_kv; i++)
            if (strlen(m->kv[i]->key) > kw)
                kw = strlen(m->kv[i]->key);
        for (size_t i = 0; i < m->n_kv; i++)
            printf("%-*s  %s\n", (int)(kw > 48 ? 48 : kw), m->kv[i]->key, m->kv[i]->value);
        printf("\ntokenizer: %s\n", m->tokenizer_summary);
    }
    picolm__admin__v1__admin_response__free_unpacked(resp, NULL);
    return r;
}

/* ---- drain ---- */

static int cmd_drain(const struct opts *o) {
    req_t req = PICOLM__ADMIN__V1__ADMIN_REQUEST__INIT;
    Picolm__Admin__V1__DrainRequest dr = PICOLM__ADMIN__V1__DRAIN_REQUEST__INIT;
    resp_t *resp = NULL;
    req.cmd_case = PICOLM__ADMIN__V1__ADMIN_REQUEST__CMD_DRAIN;
    req.drain = &dr;
    int r = call(o, &req, &resp);
    if (r)
        return r;
    if (o->json) {
        struct pl_jw w;
        pl_jw_init(&w, stdout);
        pl_jw_obj_begin(&w, NULL);
        pl_jw_bool(&w, "draining", true);
        pl_jw_obj_end(&w);
        r = finish_json(&w);
    } else {
        printf("picolmd is draining: no new clients; it exits when running requests finish\n");
    }
    picolm__admin__v1__admin_response__free_unpacked(resp, NULL);
    return r;
}

/* ---- stats ---- */

static int get_stats(const struct opts *o, resp_t **ret) {
    req_t req = PICOLM__ADMIN__V1__ADMIN_REQUEST__INIT;
    Picolm__Admin__V1__StatsRequest sr = PICOLM__ADMIN__V1__STATS_REQUEST__INIT;
    req.cmd_case = PICOLM__ADMIN__V1__ADMIN_REQUEST__CMD_STATS;
    req.stats = &sr;
    int r = call(o, &req, ret);
    if (r || (r = expect(*ret, PICOLM__ADMIN__V1__ADMIN_RESPONSE__RESULT_STATS)))
        return r;
    if (!(*ret)->stats) {
        picolm__admin__v1__admin_response__free_unpacked(*ret, NULL);
        (void)fprintf(stderr, "picoctl: picolmd sent no statistics\n");
        return EXIT_BROKER;
    }
    return 0;
}

static void counters_json(struct pl_jw *w, const char *key, Picolm__Admin__V1__Counter **cs,
                          size_t n) {
    pl_jw_obj_begin(w, key);
    for (size_t i = 0; i < n; i++)
        pl_jw_u64(w, cs[i]->name, cs[i]->value);
    pl_jw_obj_end(w);
}

static void hists_json(struct pl_jw *w, Picolm__Admin__V1__Histogram **hs, size_t n) {
    pl_jw_obj_begin(w, "histograms");
    for (size_t i = 0; i < n; i++) {
        const Picolm__Admin__V1__Histogram *h = hs[i];
        pl_jw_obj_begin(w, h->name);
        pl_jw_u64(w, "count", h->count);
        pl_jw_dbl(w, "sum", h->sum);
        pl_jw_dbl(w, "p50", hist_quantile(h, 0.50));
        pl_jw_dbl(w, "p95", hist_quantile(h, 0.95));
        pl_jw_dbl(w, "p99", hist_quantile(h, 0.99));
        pl_jw_arr_begin(w, "bounds");
        for (size_t k = 0; k < h->n_bounds; k++)
            pl_jw_dbl(w, NULL, h->bounds[k]);
        pl_jw_arr_end(w);
        pl_jw_arr_begin(w, "counts");
        for (size_t k = 0; k < h->n_counts; k++)
            pl_jw_u64(w, NULL, h->counts[k]);
        pl_jw_arr_end(w);
        pl_jw_obj_end(w);
    }
    pl_jw_obj_end(w);
}

static void stats_json(struct pl_jw *w, const char *key, const Picolm__Admin__V1__Stats *st) {
    pl_jw_obj_begin(w, key);
    counters_json(w, "gauges", st->gauges, st->n_gauges);
    counters_json(w, "counters", st->counters, st->n_counters);
    hists_json(w, st->histograms, st->n_histograms);
    pl_jw_obj_begin(w, "identities");
    for (size_t i = 0; i < st->n_identities; i++) {
        const Picolm__Admin__V1__IdentityStats *id = st->identities[i];
        pl_jw_obj_begin(w, id->identity);
        counters_json(w, "counters", id->counters, id->n_counters);
        hists_json(w, id->histograms, id->n_histograms);
        pl_jw_obj_end(w);
    }
    pl_jw_obj_end(w);
    pl_jw_obj_end(w);
}

static void hist_row(const char *label, const Picolm__Admin__V1__Histogram *h) {
    char b1[32], b2[32], b3[32], b4[32];
    if (!h)
        return;
    bool ns = strlen(h->name) > 3 && !strcmp(h->name + strlen(h->name) - 3, "_ns");
    if (ns)
        printf("  %-22s %10" PRIu64 " %9s %9s %9s %9s\n", label, h->count,
               human_ns(h->count ? (uint64_t)(h->sum / (double)h->count) : 0, b1, sizeof(b1)),
               human_ns((uint64_t)hist_quantile(h, 0.5), b2, sizeof(b2)),
               human_ns((uint64_t)hist_quantile(h, 0.95), b3, sizeof(b3)),
               human_ns((uint64_t)hist_quantile(h, 0.99), b4, sizeof(b4)));
    else
        printf("  %-22s %10" PRIu64 " %9.1f %9.1f %9.1f %9.1f\n", label, h->count,
               h->count ? h->sum / (double)h->count : 0.0, hist_quantile(h, 0.5),
               hist_quantile(h, 0.95), hist_quantile(h, 0.99));
}

static void stats_table(const Picolm__Admin__V1__Stats *st) {
    printf("%-30s %10s\n", "COUNTER", "TOTAL");
    for (size_t i = 0; i < st->n_counters; i++)
        printf("  %-28s %10" PRIu64 "\n", st->counters[i]->name, st->counters[i]->value);
    printf("\n%-24s %10s %9s %9s %9s %9s\n", "HISTOGRAM", "COUNT", "MEAN", "P50", "P95", "P99");
    for (size_t i = 0; i < st->n_histograms; i++)
        hist_row(st->histograms[i]->name, st->histograms[i]);
    for (size_t k = 0; k < st->n_identities; k++) {
        const Picolm__Admin__V1__IdentityStats *id = st->identities[k];
        printf("\nidentity %s: %" PRIu64 " sessions, %" PRIu64 " requests, %" PRIu64
               " tokens in, %" PRIu64 " out, %" PRIu64 " cancelled, %" PRIu64 " failed\n",
               id->identity, find_ctr(id->counters, id->n_counters, "sessions_opened"),
               find_ctr(id->counters, id->n_counters, "requests"),
               find_ctr(id->counters, id->n_counters, "tokens_in"),
               find_ctr(id->counters, id->n_counters, "tokens_out"),
               find_ctr(id->counters, id->n_counters, "requests_cancelled"),
               find_ctr(id->counters, id->n_counters, "requests_failed"));
        for (size_t i = 0; i < id->n_histograms; i++)
            if (id->histograms[i]->count)
                hist_row(id->histograms[i]->name, id->histograms[i]);
    }
}

static int cmd_stats(const struct opts *o) {
    resp_t *resp = NULL;
    int r = get_stats(o, &resp);
    if (r)
        return r;
    if (o->prometheus) {
        if (pl_daemon_metrics_text_render(stdout, resp->stats) < 0 || fflush(stdout) != 0)
            r = EXIT_BROKER;
    } else if (o->json) {
        struct pl_jw w;
        pl_jw_init(&w, stdout);
        stats_json(&w, NULL, resp->stats);
        r = finish_json(&w);
    } else {
        stats_table(resp->stats);
    }
    picolm__admin__v1__admin_response__free_unpacked(resp, NULL);
    return r;
}

/* ---- top ---- */

struct seen {
    uint64_t id, tokens_out, t_ns;
};

static int cmd_top(const struct opts *o) {
    struct seen *prev = NULL, *cur = NULL;
    size_t n_prev = 0;
    bool tty = isatty(STDOUT_FILENO);
    int r = 0;
    for (long it = 0; o->iterations == 0 || it < o->iterations; it++) {
        resp_t *ss = NULL, *st = NULL;
        if ((r = get_sessions(o, &ss)) != 0)
            break;
        if ((r = get_stats(o, &st)) != 0) {
            picolm__admin__v1__admin_response__free_unpacked(ss, NULL);
            break;
        }
        const Picolm__Admin__V1__SessionList *l = ss->sessions;
        size_t n = l ? l->n_sessions : 0;
        uint64_t now = pl_now_ns();
        double *rates = calloc(n ? n : 1, sizeof(double));
        cur = calloc(n ? n : 1, sizeof(*cur));
        if (!rates || !cur) {
            free(rates);
            free(cur);
            cur = NULL;
            picolm__admin__v1__admin_response__free_unpacked(ss, NULL);
            picolm__admin__v1__admin_response__free_unpacked(st, NULL);
            (void)fprintf(stderr, "picoctl: out of memory\n");
            r = EXIT_BROKER;
            break;
        }
        /* Tokens/s between two refreshes; the lifetime average for a new session. */
        for (size_t i = 0; i < n; i++) {
            const Picolm__Admin__V1__Session *e = l->sessions[i];
            cur[i] = (struct seen){e->id, e->tokens_out, now};
            rates[i] = e->tokens_per_s;
            for (size_t k = 0; k < n_prev; k++)
                if (prev[k].id == e->id && now > prev[k].t_ns &&
                    e->tokens_out >= prev[k].tokens_out)
                    rates[i] = (double)(e->tokens_out - prev[k].tokens_out) * 1e9 /
                               (double)(now - prev[k].t_ns);
        }
        if (o->json) {
            /* One JSON document per line and refresh. */
            struct pl_jw w;
            pl_jw_init(&w, stdout);
            pl_jw_obj_begin(&w, NULL);
            pl_jw_arr_begin(&w, "sessions");
            for (size_t i = 0; i < n; i++)
                session_json(&w, l->sessions[i]);
            pl_jw_arr_end(&w);
            pl_jw_arr_begin(&w, "rates");
            for (size_t i = 0; i < n; i++)
                pl_jw_dbl(&w, NULL, rates[i]);
            pl_jw_arr_end(&w);
            stats_json(&w, "stats", st->stats);
            pl_jw_obj_end(&w);
            r = finish_json(&w);
        } else {
            const Picolm__Admin__V1__Stats *s = st->stats;
            if (tty)
                printf("\033[H\033[2J");
            printf("picoctl top: %zu sessions, %" PRIu64 " requests, %" PRIu64
                   " tokens out, KV %" PRIu64 "/%" PRIu64 "\n\n",
                   n, find_ctr(s->counters, s->n_counters, "requests"),
                   find_ctr(s->counters, s->n_counters, "tokens_out"),
                   find_ctr(s->gauges, s->n_gauges, "kv_used_tokens"),
                   find_ctr(s->gauges, s->n_gauges, "kv_total_tokens"));
            if (l)
                sessions_table(l, rates);
            printf("\n%-24s %10s %9s %9s %9s %9s\n", "HISTOGRAM", "COUNT", "MEAN", "P50", "P95",
                   "P99");
            for (size_t i = 0; i < s->n_histograms; i++)
                hist_row(s->histograms[i]->name, s->histograms[i]);
            (void)fflush(stdout);
        }
        free(rates);
        free(prev);
        prev = cur;
        n_prev = n;
        cur = NULL;
        picolm__admin__v1__admin_response__free_unpacked(ss, NULL);
        picolm__admin__v1__admin_response__free_unpacked(st, NULL);
        if (r)
            break;
        if (o->iterations == 0 || it + 1 < o->iterations) {
            double whole = (double)(time_t)o->interval_s;
            struct timespec ts = {.tv_sec = (time_t)whole,
                                  .tv_nsec = (long)((o->interval_s - whole) * 1e9)};
            while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
        }
    }
    free(prev);
    return r;
}

/* ---- main ---- */

int main(int argc, char **argv) {
    struct opts o = {
        .socket = getenv("PICOLM_ADMIN_SOCKET"), .timeout_ms = 5000, .interval_s = 1.0};
    char *rest[8];
    int n_rest = 0;
    uint64_t v;
    if (!o.socket || !*o.socket)
        o.socket = DEFAULT_SOCKET;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            o.json = true;
        } else if (!strcmp(a, "--prometheus")) {
            o.prometheus = true;
        } else if (!strcmp(a, "--socket") || !strncmp(a, "--socket=", 9)) {
            o.socket = a[8] == '=' ? a + 9 : (i + 1 < argc ? argv[++i] : NULL);
            if (!o.socket || !*o.socket)
                return usage_error("--socket needs a path");
        } else if (!strcmp(a, "--timeout")) {
            if (i + 1 >= argc || !parse_u64(argv[++i], INT_MAX, &v) || v == 0)
                return usage_error("--timeout needs milliseconds (1 or more)");
            o.timeout_ms = (int)v;
        } else if (!strcmp(a, "--interval")) {
            char *end;
            if (i + 1 >= argc)
                return usage_error("--interval needs seconds");
            o.interval_s = strtod(argv[++i], &end);
            if (*end || !(o.interval_s >= 0.05 && o.interval_s <= 3600.0))
                return usage_error("--interval: '%s' is not a number of seconds in [0.05, 3600]",
                                   argv[i]);
        } else if (!strcmp(a, "--iterations")) {
            if (i + 1 >= argc || !parse_u64(argv[++i], LONG_MAX, &v))
                return usage_error("--iterations needs a count");
            o.iterations = (long)v;
        } else if ((!strcmp(a, "--pid") || !strcmp(a, "--uid")) && n_rest + 2 <= 8) {
            rest[n_rest++] = argv[i];
            if (i + 1 < argc)
                rest[n_rest++] = argv[++i];
        } else if (a[0] == '-' && a[1] != '\0') {
            return usage_error("unknown option '%s'", a);
        } else {
            if (n_rest == 8)
                return usage_error("too many arguments ('%s')", a);
            rest[n_rest++] = argv[i];
        }
    }
    if (n_rest == 0)
        return usage_error("no command given");
    const char *cmd = rest[0];
    int nargs = n_rest - 1;
    char **args = rest + 1;
    if (o.prometheus && strcmp(cmd, "stats"))
        return usage_error("--prometheus goes with 'stats' only, not '%s'", cmd);
    if (!strcmp(cmd, "status") || !strcmp(cmd, "sessions") || !strcmp(cmd, "drain") ||
        !strcmp(cmd, "stats") || !strcmp(cmd, "top")) {
        if (nargs)
            return usage_error("'%s' takes no arguments", cmd);
        if (!strcmp(cmd, "status"))
            return cmd_status(&o);
        if (!strcmp(cmd, "sessions"))
            return cmd_sessions(&o);
        if (!strcmp(cmd, "drain"))
            return cmd_drain(&o);
        if (!strcmp(cmd, "stats"))
            return cmd_stats(&o);
        return cmd_top(&o);
    }
    if (!strcmp(cmd, "kill"))
        return cmd_kill(&o, nargs, args);
    if (!strcmp(cmd, "policy"))
        return cmd_policy(&o, nargs, args);
    if (!strcmp(cmd, "model"))
        return cmd_model(&o, nargs, args);
    return usage_error("unknown command '%s'", cmd);
}
