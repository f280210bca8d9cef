/* SPDX-License-Identifier: MIT */
/* The admin protocol on admin.sock (mode 0600): one AdminRequest per SOCK_SEQPACKET datagram,
 * one AdminResponse back (the connection was admitted by pl_daemon_access_admin_check()),
 * dispatched through one table of commands: status (model, weight
 * residency from smaps, page faults, KV pool, CPUs, privileges), sessions, kill (cancel,
 * tell the client why, then disconnect), drain, policy show/reload, model info (GGUF
 * metadata), stats (counters + histograms, total and per identity). Also the admin timers:
 * kills in progress and the Prometheus textfile. Event thread only; picoctl is the client. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "metrics_file.h"
#include "pl/admin.pb-c.h"
#include "pl/engine_gguf.h"
#include "pl/engine_model.h"
#include "pl/engine_tokenizer.h"
#include "pl/engine_types.h"
#include "pl/picolm.pb-c.h"
#include "pl/pl_err.h"
#include "pl/pl_log.h"
#include "pl/pl_util.h"
#include "records.h"
#include "scheduler.h"
#include "stats.h"

#define ADMIN_MAX_REQ 4096
/* A killed session gets this long to report its cancelled requests and the session Error
 * before it is closed regardless (a client that does not read its ring). */
#define KILL_GRACE_NS 2000000000ull
/* Policy/config text shown by `picoctl policy show`, at most. */
#define POLICY_TEXT_MAX (64u * 1024)
/* GGUF metadata: long values are summarised, arrays show their first elements. */
#define MODEL_VALUE_MAX 256u
#define MODEL_ARRAY_SHOW 8u

#define E_INVALID PICOLM__V1__ERROR_CODE__ERROR_CODE_INVALID_ARGUMENT
#define E_INTERNAL PICOLM__V1__ERROR_CODE__ERROR_CODE_INTERNAL
#define E_UNSUPPORTED PICOLM__V1__ERROR_CODE__ERROR_CODE_UNSUPPORTED
#define E_DENIED PICOLM__V1__ERROR_CODE__ERROR_CODE_PERMISSION_DENIED
#define E_UNKNOWN PICOLM__V1__ERROR_CODE__ERROR_CODE_UNKNOWN_REQUEST
#define E_EXHAUSTED PICOLM__V1__ERROR_CODE__ERROR_CODE_RESOURCE_EXHAUSTED

typedef Picolm__Admin__V1__AdminResponse resp_t;

static const char *state_name(uint32_t st) {
    switch (st) {
    case PL_DAEMON_SESSION_HANDSHAKE:
        return "handshake";
    case PL_DAEMON_SESSION_OPEN:
        return "open";
    case PL_DAEMON_SESSION_CLOSING:
        return "closing";
    default:
        return "free";
    }
}

static int send_resp(int fd, const resp_t *resp) {
    size_t len = protobuf_c_message_get_packed_size(&resp->base);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return -ENOMEM;
    (void)protobuf_c_message_pack(&resp->base, buf);
    ssize_t n = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    int r = n == (ssize_t)len ? 0 : (n < 0 ? -errno : -EIO);
    free(buf);
    if (r == -EMSGSIZE && resp->error_code == 0) {
        /* One datagram per answer: say why instead of leaving picoctl to time out. */
        char msg[160];
        resp_t e = PICOLM__ADMIN__V1__ADMIN_RESPONSE__INIT;
        (void)snprintf(msg, sizeof(msg),
                       "the answer (%zu bytes) is larger than one admin datagram may be "
                       "(socket buffer, net.core.wmem_max)",
                       len);
        pl_log_warn("admin: %s", msg);
        e.request_id = resp->request_id;
        e.error_code = E_EXHAUSTED;
        e.error_message = msg;
        return send_resp(fd, &e);
    }
    return r;
}

static int send_error(int fd, resp_t *resp, uint32_t code, const char *msg) {
    resp->result_case = PICOLM__ADMIN__V1__ADMIN_RESPONSE__RESULT__NOT_SET;
    resp->error_code = code;
    resp->error_message = (char *)msg;
    return send_resp(fd, resp);
}

/* ---- Policy ---- */

/* The policy slot: the access module (access.h) holds the policy in force. */
static void policy_describe(struct pl_daemon *d, const char **ret_path, uint64_t *ret_loaded) {
    *ret_path = d->access.builtin ? "" : d->access.path;
    *ret_loaded = d->access.loaded_unix_ns;
}

static int policy_reload(struct pl_daemon *d, char *err, size_t err_len) {
    return pl_daemon_access_reload(&d->access, err, err_len);
}

static int do_policy(struct pl_daemon *d, int fd, resp_t *resp,
                     const Picolm__Admin__V1__AdminRequest *req) {
    Picolm__Admin__V1__PolicyText pt = PICOLM__ADMIN__V1__POLICY_TEXT__INIT;
    const Picolm__Admin__V1__PolicyRequest *pr = req->policy;
    char err[512] = "";
    const char *path;
    char *text = NULL;
    int r;
    if (pr && pr->action == PICOLM__ADMIN__V1__POLICY_REQUEST__ACTION__ACTION_RELOAD) {
        r = policy_reload(d, err, sizeof(err));
        if (r < 0) {
            pl_log_warn("admin: policy reload failed, the policy in force stays: %s", err);
            return send_error(fd, resp, E_INVALID, err[0] ? err : pl_strerror(r));
        }
        pl_log_info("admin: policy reloaded from %s", d->access.path);
    } else if (pr && pr->action != PICOLM__ADMIN__V1__POLICY_REQUEST__ACTION__ACTION_SHOW) {
        return send_error(fd, resp, E_INVALID, "unknown policy action");
    }
    policy_describe(d, &path, &pt.loaded_unix_ns);
    pt.path = (char *)path;
    pt.builtin = d->access.builtin;
    pt.last_error = d->access.last_error;
    pt.text = d->access.builtin ? PL_DAEMON_ACCESS_BUILTIN : "";
    if (path[0]) {
        FILE *f = fopen(path, "re");
        text = calloc(1, POLICY_TEXT_MAX + 1);
        if (f && text) {
            size_t n = fread(text, 1, POLICY_TEXT_MAX, f);
            text[n] = '\0';
            pt.text = text;
        }
        if (f)
            (void)fclose(f);
    }
    resp->result_case = PICOLM__ADMIN__V1__ADMIN_RESPONSE__RESULT_POLICY;
    resp->policy = &pt;
    r = send_resp(fd, resp);
    free(text);
    return r;
}

/* ---- Status ---- */

/* Seccomp mode, NoNewPrivs and CapEff of this thread's process, from /proc/self/status. */
static void read_privileges(bool *ret_seccomp, bool *ret_nnp, uint64_t *ret_cap) {
    char line[256];
    FILE *f = fopen("/proc/self/status", "re");
    *ret_seccomp = *ret_nnp = false;
    *ret_cap = 0;
    if (!f)
        return;
    while (fgets(line, sizeof(line), f)) {
        unsigned long long v;
        if (sscanf(line, "Seccomp: %llu", &v) == 1)
            *ret_seccomp = v != 0;
        else if (sscanf(line, "NoNewPrivs: %llu", &v) == 1)
            *ret_nnp = v != 0;
        else if (sscanf(line, "CapEff: %llx", &v) == 1)
            *ret_cap = v;
    }
    (void)fclose(f);
}

/* "Q4_K 62%, F32 30%, Q6_K 8%": tensor bytes per type, largest first. */
static void quant_mix(const struct pl_gguf *g, char *out, size_t cap) {
    uint64_t bytes[64] = {0}, total = 0;
    out[0] = '\0';
    for (uint64_t i = 0; i < pl_gguf_n_tensors(g); i++) {
        const struct pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
        if (t && t->type < 64) {
            bytes[t->type] += t->n_bytes;
            total += t->n_bytes;
        }
    }
    size_t len = 0;
    for (;;) {
        uint32_t best = 64;
        for (uint32_t t = 0; t < 64; t++)
            if (bytes[t] && (best == 64 || bytes[t] > bytes[best]))
                best = t;
        if (best == 64 || !total)
            break;
        const struct pl_type_info *ti = pl_type_info(best);
        int n =
            snprintf(out + len, cap - len, "%s%s %.1f%%", len ? ", " : "",
                     ti && ti->name ? ti->name : "?", 100.0 * (double)bytes[best] / (double)total);
        if (n < 0 || (size_t)n >= cap - len)
            break;
        len += (size_t)n;
        bytes[best] = 0;
    }
}

static int do_status(struct pl_daemon *d, int fd, resp_t *resp,
                     const Picolm__Admin__V1__AdminRequest *req) {
    const struct pl_model_hparams *hp = pl_model_hparams(d->model);
    struct pl_daemon_sched_stats *st = pl_daemon_sched_stats(d->sched);
    Picolm__Admin__V1__Status s = PICOLM__ADMIN__V1__STATUS__INIT;
    Picolm__Admin__V1__Residency r = PICOLM__ADMIN__V1__RESIDENCY__INIT;
    Picolm__Admin__V1__KvPool kv = PICOLM__ADMIN__V1__KV_POOL__INIT;
    uint64_t locked, huge, thp;
    char reason[448], mix[256];
    struct rusage ru;
    int rc;

    pl_daemon_init_residency_measure(&d->res, &locked, &huge, &thp);
    r.bytes_mapped = d->res.base ? d->res.bytes : d->res.weight_bytes;
    r.bytes_locked = d->res.base ? locked : (d->res.locked ? d->res.weight_bytes : 0);
    r.bytes_hugetlb = huge;
    r.bytes_thp = thp;
    r.backing = d->res.backing;
    (void)snprintf(reason, sizeof(reason), "%s%s%s", d->res.reason, d->res.locked ? "" : "; ",
                   d->res.locked ? "" : d->res.lock_reason);
    r.backing_reason = reason;
    r.locked = d->res.locked;
    r.address = (uint64_t)(uintptr_t)d->res.base;
    if (getrusage(RUSAGE_SELF, &ru) == 0) { /* the whole process, since it started */
        r.major_faults = (uint64_t)ru.ru_majflt;
        r.minor_faults = (uint64_t)ru.ru_minflt;
    }

    /* KV pool, and what each session holds of it. */
    Picolm__Admin__V1__KvSession *kvs = calloc(d->sessions.n, sizeof(*kvs));
    Picolm__Admin__V1__KvSession **kvp = calloc(d->sessions.n, sizeof(*kvp));
    if (!kvs || !kvp) {
        free(kvs);
        free(kvp);
        return send_error(fd, resp, E_INTERNAL, "out of memory");
    }
    kv.total_tokens = pl_daemon_sched_kv_total(d->sched);
    kv.used_tokens = atomic_load_explicit(&st->kv_used_tokens, memory_order_relaxed);
    kv.reserved_tokens = atomic_load_explicit(&st->kv_reserved_tokens, memory_order_relaxed);
    kv.block_tokens = 16;
    kv.bytes = kv.total_tokens * 2ull * hp->n_layer * hp->n_head_kv * hp->head_dim *
               (d->cfg.kv_type == PL_KV_F16 ? 2 : 4);
    for (uint32_t i = 0; i < d->sessions.n; i++) {
        const struct pl_daemon_session *ss = &d->sessions.s[i];
        if (ss->state != PL_DAEMON_SESSION_OPEN && ss->state != PL_DAEMON_SESSION_CLOSING)
            continue;
        Picolm__Admin__V1__KvSession *e = &kvs[kv.n_per_session];
        picolm__admin__v1__kv_session__init(e);
        e->session_id = ss->id;
        e->tokens = atomic_load_explicit(&ss->kv_tokens, memory_order_relaxed);
        kvp[kv.n_per_session++] = e;
    }
    kv.per_session = kvp;

    quant_mix(pl_model_gguf(d->model), mix, sizeof(mix));
    s.version = PL_DAEMON_VERSION;
    s.uptime_ns = pl_daemon_now_ns() - d->t_start_ns;
    s.model_name = d->model_name;
    s.model_path = d->cfg.model;
    s.architecture = (char *)hp->arch;
    s.n_params = hp->n_params;
    s.quant_mix = mix;
    s.file_bytes = pl_gguf_file_size(pl_model_gguf(d->model));
    s.residency = &r;
    s.kv = &kv;
    s.n_cpus = d->cfg.n_cpus;
    s.cpus = d->cfg.cpus;
    bool seccomp, nnp;
    read_privileges(&seccomp, &nnp, &s.cap_eff);
    s.seccomp = seccomp;
    s.no_new_privs = nnp;
    s.uid = (uint32_t)getuid();
    s.gid = (uint32_t)getgid();
    const char *ppath;
    policy_describe(d, &ppath, &s.policy_loaded_unix_ns);
    s.policy_path = (char *)ppath;
    s.policy_builtin = d->access.builtin;
    s.config_path = d->cfg.config_path;
    s.sessions = d->sessions.n_open;
    s.sessions_total = d->n_sessions_total;
    s.draining = d->draining;
    s.metrics_file = d->cfg.metrics_file;
    s.metrics_interval_s = d->cfg.metrics_interval_s;
    resp->result_case = PICOLM__ADMIN__V1__ADMIN_RESPONSE__RESULT_STATUS;
    resp->status = &s;
    rc = send_resp(fd, resp);
    free(kvs);
    free(kvp);
    return rc;
}

/* ---- Sessions ---- */

static int do_sessions(struct pl_daemon *d, int fd, resp_t *resp,
                       const Picolm__Admin__V1__AdminRequest *req) {
    uint32_t n = d->sessions.n_open, k = 0;
    Picolm__Admin__V1__Session *arr = calloc(n ? n : 1, sizeof(*arr));
    Picolm__Admin__V1__Session **ptrs = calloc(n ? n : 1, sizeof(*ptrs));
    Picolm__Admin__V1__SessionList list = PICOLM__ADMIN__V1__SESSION_LIST__INIT;
    int r;
    if (!arr || !ptrs) {
        r = send_error(fd, resp, E_INTERNAL, "out of memory");
        goto out;
    }
    uint64_t now = pl_daemon_now_ns();
    for (uint32_t i = 0; i < d->sessions.n && k < n; i++) {
        struct pl_daemon_session *s = &d->sessions.s[i];
        if (s->state == PL_DAEMON_SESSION_FREE)
            continue;
        Picolm__Admin__V1__Session *e = &arr[k];
        picolm__admin__v1__session__init(e);
        e->id = s->id;
        e->pid = s->peer.pid;
        e->uid = s->peer.uid;
        e->gid = s->peer.gid;
        e->state = (char *)state_name(s->state);
        e->tokens_in = atomic_load_explicit(&s->tokens_in, memory_order_relaxed);
        e->tokens_out = atomic_load_explicit(&s->tokens_out, memory_order_relaxed);
        e->age_ns = now - s->t_open_ns;
        /* Lifetime average; picoctl top shows the rate between two refreshes. */
        e->tokens_per_s = e->age_ns ? (double)e->tokens_out * 1e9 / (double)e->age_ns : 0.0;
        e->ttft_ns = atomic_load_explicit(&s->ttft_ns, memory_order_relaxed);
        e->queue_wait_ns = atomic_load_explicit(&s->queue_ns, memory_order_relaxed);
        e->kv_tokens = atomic_load_explicit(&s->kv_tokens, memory_order_relaxed);
        e->user = ""; /* picoctl resolves uid to a name: no NSS inside the sandboxed broker */
        e->exe = s->exe;
        e->identity = s->state == PL_DAEMON_SESSION_HANDSHAKE ? ""
                      : s->rule[0]                            ? s->rule
                                                              : "default";
        e->requests = s->n_requests;
        e->killing = s->kill_pending;
        ptrs[k++] = e;
    }
    list.n_sessions = k;
    list.sessions = ptrs;
    resp->result_case = PICOLM__ADMIN__V1__ADMIN_RESPONSE__RESULT_SESSIONS;
    resp->sessions = &list;
    r = send_resp(fd, resp);
out:
    free(arr);
    free(ptrs);
    return r;
}

/* ---- Kill ---- */

/* Queue a session-level Error (request_id 0) for the client: libpicolm reports it as the
 * reason its connection ended. The caller checked the outbox has room. */
static void queue_session_error(struct pl_daemon *d, struct pl_daemon_session *s, uint32_t code,
                                const char *msg) {
    Picolm__V1__Error e = PICOLM__V1__ERROR__INIT;
    struct pl_daemon_outbox_slot *o = pl_daemon_session_outbox_next(s);
    e.code = (Picolm__V1__ErrorCode)code;
    e.message = (char *)msg;
    o->type = PL_DAEMON_REC_ERROR;
    o->len = (uint32_t)protobuf_c_message_pack(&e.base, o->buf);
    pl_daemon_session_outbox_commit(s);
    if (!atomic_exchange_explicit(&s->outbox_signalled, true, memory_order_seq_cst))
        if (pl_daemon_sched_send(d->sched, PL_DAEMON_CMD_OUTBOX, s) < 0)
            pl_log_err("scheduler queue full (sizing bug)");
}

/* Step a kill along: (1) the cancelled requests report Done(CANCELLED, "killed by admin"),
 * (2) a session Error says why the session ends, (3) once the scheduler has written it out
 * (or the grace time is over) the session is closed. */
static void kill_progress(struct pl_daemon *d, struct pl_daemon_session *s, uint64_t now) {
    if (s->state != PL_DAEMON_SESSION_OPEN || !s->kill_pending)
        return;
    bool late = now >= s->kill_deadline_ns;
    if (!late && s->n_inflight > 0)
        return;
    if (!late && !s->kill_notified) {
        if (!pl_daemon_session_outbox_has_room(s))
            return;
        queue_session_error(d, s, E_DENIED,
                            "the session was killed by an administrator (picoctl kill)");
        s->kill_notified = true;
        return;
    }
    /* Acquire: pairs with the scheduler's release store of outbox_done after it copied the
     * Error into the completion ring; the scheduler publishes committed records even once
     * the session is dead, so closing now loses nothing. */
    if (!late && atomic_load_explicit(&s->outbox_done, memory_order_acquire) != s->outbox_tail)
        return;
    pl_daemon_event_loop_kill_session(d, s, "killed by admin");
}

static void kill_begin(struct pl_daemon *d, struct pl_daemon_session *s, uint64_t now) {
    if (s->state == PL_DAEMON_SESSION_HANDSHAKE) {
        pl_daemon_event_loop_kill_session(d, s, "killed by admin during the handshake");
        return;
    }
    if (s->kill_pending)
        return;
    s->kill_pending = true;
    s->kill_deadline_ns = now + KILL_GRACE_NS;
    pl_daemon_stats_add(d->stats, s->stats_ident, PL_DAEMON_CTR_SESSIONS_KILLED, 1);
    pl_log_info("session %llu (pid %d uid %u): killed by admin, cancelling %u requests",
                (unsigned long long)s->id, (int)s->peer.pid, s->peer.uid, s->n_inflight);
    for (uint32_t j = 0; j < s->n_reqs; j++) {
        struct pl_daemon_req *q = &s->reqs[j];
        if (q->state != PL_DAEMON_REQ_SUBMITTED)
            continue;
        atomic_store_explicit(&q->cancel_why, 1, memory_order_relaxed);
        /* Release: pairs with the scheduler's acquire load of cancel in prepare(). */
        atomic_store_explicit(&q->cancel, true, memory_order_release);
    }
    pl_daemon_sched_kick(d->sched);
    kill_progress(d, s, now);
}

static int do_kill(struct pl_daemon *d, int fd, resp_t *resp,
                   const Picolm__Admin__V1__AdminRequest *req) {
    Picolm__Admin__V1__KillResult kr = PICOLM__ADMIN__V1__KILL_RESULT__INIT;
    const Picolm__Admin__V1__KillRequest *k = req->kill;
    char msg[128];
    if (!k || k->target_case == PICOLM__ADMIN__V1__KILL_REQUEST__TARGET__NOT_SET)
        return send_error(fd, resp, E_INVALID, "kill needs a session id, a pid or a uid");
    uint64_t now = pl_daemon_now_ns();
    for (uint32_t i = 0; i < d->sessions.n; i++) {
        struct pl_daemon_session *s = &d->sessions.s[i];
        if (s->state != PL_DAEMON_SESSION_OPEN && s->state != PL_DAEMON_SESSION_HANDSHAKE)
            continue;
        bool hit = (k->target_case == PICOLM__ADMIN__V1__KILL_REQUEST__TARGET_SESSION_ID &&
                    s->id == k->session_id) ||
                   (k->target_case == PICOLM__ADMIN__V1__KILL_REQUEST__TARGET_PID &&
                    s->state == PL_DAEMON_SESSION_OPEN && s->peer.pid == k->pid) ||
                   (k->target_case == PICOLM__ADMIN__V1__KILL_REQUEST__TARGET_UID &&
                    s->state == PL_DAEMON_SESSION_OPEN && s->peer.uid == k->uid);
        if (!hit)
            continue;
        kill_begin(d, s, now);
        kr.killed++;
    }
    if (kr.killed == 0) {
        if (k->target_case == PICOLM__ADMIN__V1__KILL_REQUEST__TARGET_SESSION_ID)
            (void)snprintf(msg, sizeof(msg), "no session %llu", (unsigned long long)k->session_id);
        else if (k->target_case == PICOLM__ADMIN__V1__KILL_REQUEST__TARGET_PID)
            (void)snprintf(msg, sizeof(msg), "no session of pid %d", (int)k->pid);
        else
            (void)snprintf(msg, sizeof(msg), "no session of uid %u", k->uid);
        return send_error(fd, resp, E_UNKNOWN, msg);
    }
    resp->result_case = PICOLM__ADMIN__V1__ADMIN_RESPONSE__RESULT_KILL;
    resp->kill = &kr;
    return send_resp(fd, resp);
}

/* ---- Drain ---- */

static int do_drain(struct pl_daemon *d, int fd, resp_t *resp,
                    const Picolm__Admin__V1__AdminRequest *req) {
    pl_daemon_event_loop_drain(d, "drain requested by admin");
    return send_resp(fd, resp);
}

/* ---- Model info ---- */

/* Render one GGUF value as text into out (cap bytes). */
static void kv_text(const struct pl_gguf_kv *kv, char *out, size_t cap) {
    switch (kv->type) {
    case PL_GGUF_TYPE_UINT8:
    case PL_GGUF_TYPE_UINT16:
    case PL_GGUF_TYPE_UINT32:
    case PL_GGUF_TYPE_UINT64:
        (void)snprintf(out, cap, "%" PRIu64, kv->v.u64);
        return;
    case PL_GGUF_TYPE_INT8:
    case PL_GGUF_TYPE_INT16:
    case PL_GGUF_TYPE_INT32:
    case PL_GGUF_TYPE_INT64:
        (void)snprintf(out, cap, "%" PRId64, kv->v.i64);
        return;
    case PL_GGUF_TYPE_FLOAT32:
    case PL_GGUF_TYPE_FLOAT64:
        (void)snprintf(out, cap, "%g", kv->v.f64);
        return;
    case PL_GGUF_TYPE_BOOL:
        (void)snprintf(out, cap, "%s", kv->v.u64 ? "true" : "false");
        return;
    case PL_GGUF_TYPE_STRING: {
        uint64_t n = kv->v.str.len;
        if (n + 1 <= cap) {
            (void)snprintf(out, cap, "%.*s", (int)n, kv->v.str.ptr);
        } else {
            (void)snprintf(out, cap, "%.*s... (%" PRIu64 " bytes)", (int)(cap - 32), kv->v.str.ptr,
                           n);
        }
        return;
    }
    case PL_GGUF_TYPE_ARRAY: {
        const struct pl_gguf_arr *a = &kv->v.arr;
        size_t len = 0;
        int w = snprintf(out, cap, "[%" PRIu64 " items", a->n);
        len = w > 0 ? (size_t)w : 0;
        for (uint64_t i = 0; i < a->n && i < MODEL_ARRAY_SHOW && len + 40 < cap; i++) {
            struct pl_gguf_str s;
            const uint8_t *p = a->data;
            w = 0;
            if (a->type == PL_GGUF_TYPE_STRING && pl_gguf_arr_str(a, i, &s) == 0)
                w = snprintf(out + len, cap - len, "%s \"%.*s\"", i ? "," : ":",
                             (int)PL_MIN(s.len, 24u), s.ptr);
            else if (p && a->type == PL_GGUF_TYPE_INT32) {
                int32_t v;
                memcpy(&v, p + i * 4, 4);
                w = snprintf(out + len, cap - len, "%s %d", i ? "," : ":", v);
            } else if (p && a->type == PL_GGUF_TYPE_UINT32) {
                uint32_t v;
                memcpy(&v, p + i * 4, 4);
                w = snprintf(out + len, cap - len, "%s %u", i ? "," : ":", v);
            } else if (p && a->type == PL_GGUF_TYPE_FLOAT32) {
                float v;
                memcpy(&v, p + i * 4, 4);
                w = snprintf(out + len, cap - len, "%s %g", i ? "," : ":", (double)v);
            }
            if (w <= 0 || (size_t)w >= cap - len)
                break;
            len += (size_t)w;
        }
        if (len + 6 < cap)
            (void)snprintf(out + len, cap - len, "%s]", a->n > MODEL_ARRAY_SHOW ? ", ..." : "");
        return;
    }
    default:
        (void)snprintf(out, cap, "(type %u)", kv->type);
        return;
    }
}

static int do_model_info(struct pl_daemon *d, int fd, resp_t *resp,
                         const Picolm__Admin__V1__AdminRequest *req) {
    const struct pl_gguf *g = pl_model_gguf(d->model);
    const struct pl_tokenizer *tok = pl_model_tokenizer(d->model);
    Picolm__Admin__V1__ModelMetadata mm = PICOLM__ADMIN__V1__MODEL_METADATA__INIT;
    uint64_t n = pl_gguf_n_kv(g);
    char summary[256];
    int r;
    /* Bounded by the GGUF reader's caps; keys are capped here to keep one datagram. */
    n = PL_MIN(n, 1024u);
    Picolm__Admin__V1__ModelMetadata__Kv *kvs = calloc(n ? n : 1, sizeof(*kvs));
    Picolm__Admin__V1__ModelMetadata__Kv **ptrs = calloc(n ? n : 1, sizeof(*ptrs));
    char *text = calloc(n ? n : 1, MODEL_VALUE_MAX + 256);
    if (!kvs || !ptrs || !text) {
        r = send_error(fd, resp, E_INTERNAL, "out of memory");
        goto out;
    }
    for (uint64_t i = 0; i < n; i++) {
        const struct pl_gguf_kv *kv = pl_gguf_kv_at(g, i);
        char *key = text + i * (MODEL_VALUE_MAX + 256);
        char *val = key + 256;
        if (!kv)
            break;
        (void)snprintf(key, 256, "%.*s", (int)PL_MIN(kv->key.len, 255u), kv->key.ptr);
        kv_text(kv, val, MODEL_VALUE_MAX);
        picolm__admin__v1__model_metadata__kv__init(&kvs[i]);
        kvs[i].key = key;
        kvs[i].value = val;
        ptrs[mm.n_kv++] = &kvs[i];
    }
    mm.kv = ptrs;
    (void)snprintf(summary, sizeof(summary),
                   "%s tokenizer, %u tokens, bos %d, eos %d, adds bos %s, adds eos %s",
                   pl_tokenizer_kind(tok) == PL_TOKENIZER_BPE ? "gpt2 (BPE)" : "llama (SPM)",
                   pl_tokenizer_n_vocab(tok), (int)pl_tokenizer_bos(tok),
                   (int)pl_tokenizer_eos(tok), pl_tokenizer_adds_bos(tok) ? "yes" : "no",
                   pl_tokenizer_adds_eos(tok) ? "yes" : "no");
    mm.tokenizer_summary = summary;
    resp->result_case = PICOLM__ADMIN__V1__ADMIN_RESPONSE__RESULT_MODEL;
    resp->model = &mm;
    r = send_resp(fd, resp);
out:
    free(kvs);
    free(ptrs);
    free(text);
    return r;
}

/* ---- Stats ---- */

static void gauges(struct pl_daemon *d, struct pl_daemon_stats_gauges *g) {
    struct pl_daemon_sched_stats *st = pl_daemon_sched_stats(d->sched);
    memset(g, 0, sizeof(*g));
    g->uptime_ns = pl_daemon_now_ns() - d->t_start_ns;
    g->sessions_open = d->sessions.n_open;
    g->requests_active = atomic_load_explicit(&st->n_active, memory_order_relaxed);
    g->requests_waiting = atomic_load_explicit(&st->n_waiting, memory_order_relaxed);
    g->kv_used_tokens = atomic_load_explicit(&st->kv_used_tokens, memory_order_relaxed);
    g->kv_total_tokens = pl_daemon_sched_kv_total(d->sched);
    g->draining = d->draining;
    g->prefix_cache_blocks = atomic_load_explicit(&st->prefix_blocks, memory_order_relaxed);
}

static int do_stats(struct pl_daemon *d, int fd, resp_t *resp,
                    const Picolm__Admin__V1__AdminRequest *req) {
    struct pl_daemon_stats_gauges g;
    Picolm__Admin__V1__Stats *m = NULL;
    gauges(d, &g);
    if (pl_daemon_stats_proto(d->stats, &g, &m) < 0)
        return send_error(fd, resp, E_INTERNAL, "out of memory");
    resp->result_case = PICOLM__ADMIN__V1__ADMIN_RESPONSE__RESULT_STATS;
    resp->stats = m;
    int r = send_resp(fd, resp);
    pl_daemon_stats_proto_free(m);
    return r;
}

/* ---- Dispatch ---- */

typedef int (*admin_fn)(struct pl_daemon *d, int fd, resp_t *resp,
                        const Picolm__Admin__V1__AdminRequest *req);

struct admin_cmd {
    Picolm__Admin__V1__AdminRequest__CmdCase cmd;
    const char *name;
    admin_fn fn;
};

/* One row per command. The policy row's handler is the slot issue #6 fills (see above). */
static const struct admin_cmd cmds[] = {
    {PICOLM__ADMIN__V1__ADMIN_REQUEST__CMD_STATUS, "status", do_status},
    {PICOLM__ADMIN__V1__ADMIN_REQUEST__CMD_SESSIONS, "sessions", do_sessions},
    {PICOLM__ADMIN__V1__ADMIN_REQUEST__CMD_KILL, "kill", do_kill},
    {PICOLM__ADMIN__V1__ADMIN_REQUEST__CMD_POLICY, "policy", do_policy},
    {PICOLM__ADMIN__V1__ADMIN_REQUEST__CMD_MODEL_INFO, "model info", do_model_info},
    {PICOLM__ADMIN__V1__ADMIN_REQUEST__CMD_DRAIN, "drain", do_drain},
    {PICOLM__ADMIN__V1__ADMIN_REQUEST__CMD_STATS, "stats", do_stats},
};

int pl_daemon_admin_serve(struct pl_daemon *d, int fd) {
    uint8_t buf[ADMIN_MAX_REQ];
    ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC);
    if (n < 0)
        return errno == EAGAIN ? 0 : -errno;
    if (n == 0)
        return -PL_ERR_GONE;
    resp_t resp = PICOLM__ADMIN__V1__ADMIN_RESPONSE__INIT;
    if ((size_t)n > sizeof(buf))
        return send_error(fd, &resp, E_INVALID, "admin request too large");
    Picolm__Admin__V1__AdminRequest *req =
        picolm__admin__v1__admin_request__unpack(NULL, (size_t)n, buf);
    if (!req)
        return send_error(fd, &resp, E_INVALID, "malformed admin request");
    resp.request_id = req->request_id;
    int r = 1;
    for (size_t i = 0; i < PL_ARRAY_SIZE(cmds); i++)
        if (cmds[i].cmd == req->cmd_case) {
            pl_log_debug("admin: %s", cmds[i].name);
            r = cmds[i].fn(d, fd, &resp, req);
            break;
        }
    if (r == 1)
        r = send_error(fd, &resp, E_UNSUPPORTED, "command not supported by this picolmd");
    picolm__admin__v1__admin_request__free_unpacked(req, NULL);
    return r;
}

/* ---- Timers ---- */

static void metrics_write(struct pl_daemon *d) {
    struct pl_daemon_stats_gauges g;
    Picolm__Admin__V1__Stats *m = NULL;
    uint64_t suppressed;
    gauges(d, &g);
    int r = pl_daemon_stats_proto(d->stats, &g, &m);
    if (r == 0)
        r = pl_daemon_metrics_file_write(m);
    pl_daemon_stats_proto_free(m);
    if (r < 0 && pl_daemon_stats_warn_allow(d->stats, pl_daemon_now_ns(), &suppressed))
        pl_log_warn("cannot write the metrics file %s: %s, ignoring", d->cfg.metrics_file,
                    pl_strerror(r));
}

void pl_daemon_admin_tick(struct pl_daemon *d, uint64_t now_ns) {
    for (uint32_t i = 0; i < d->sessions.n; i++)
        if (d->sessions.s[i].kill_pending)
            kill_progress(d, &d->sessions.s[i], now_ns);
    if (pl_daemon_metrics_file_dir_fd() < 0)
        return;
    if (d->quit || (d->cfg.metrics_interval_s && now_ns >= d->metrics_next_ns)) {
        metrics_write(d);
        d->metrics_next_ns = now_ns + (uint64_t)d->cfg.metrics_interval_s * 1000000000ull;
    }
}
