/* SPDX-License-Identifier: MIT */
/* The admin protocol on admin.sock (mode 0600): one AdminRequest per SOCK_SEQPACKET datagram,
 * one AdminResponse back. Status (with weight residency: backing, reason, locked bytes from
 * smaps, KV pool), sessions, kill, drain. Event thread only. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "daemon.h"
#include "pl/admin.pb-c.h"
#include "pl/picolm.pb-c.h"
#include "pl/engine_gguf.h"
#include "pl/engine_model.h"
#include "pl/pl_err.h"
#include "pl/pl_log.h"
#include "scheduler.h"

#define ADMIN_MAX_REQ 4096

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

static int send_resp(int fd, const Picolm__Admin__V1__AdminResponse *resp) {
    size_t len = protobuf_c_message_get_packed_size(&resp->base);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return -ENOMEM;
    (void)protobuf_c_message_pack(&resp->base, buf);
    ssize_t n = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    free(buf);
    return n == (ssize_t)len ? 0 : -EIO;
}

static int do_status(struct pl_daemon *d, int fd, Picolm__Admin__V1__AdminResponse *resp) {
    const struct pl_model_hparams *hp = pl_model_hparams(d->model);
    struct pl_daemon_sched_stats *st = pl_daemon_sched_stats(d->sched);
    Picolm__Admin__V1__Status s = PICOLM__ADMIN__V1__STATUS__INIT;
    Picolm__Admin__V1__Residency r = PICOLM__ADMIN__V1__RESIDENCY__INIT;
    Picolm__Admin__V1__KvPool kv = PICOLM__ADMIN__V1__KV_POOL__INIT;
    uint64_t locked, huge, thp;

    pl_daemon_init_residency_measure(&d->res, &locked, &huge, &thp);
    r.bytes_mapped = d->res.base ? d->res.bytes : d->res.weight_bytes;
    r.bytes_locked = d->res.base ? locked : (d->res.locked ? d->res.weight_bytes : 0);
    r.bytes_hugetlb = huge;
    r.bytes_thp = thp;
    r.backing = d->res.backing;
    char reason[448];
    (void)snprintf(reason, sizeof(reason), "%s%s%s", d->res.reason,
                   d->res.locked ? "" : "; ", d->res.locked ? "" : d->res.lock_reason);
    r.backing_reason = reason;
    r.locked = d->res.locked;
    r.address = (uint64_t)(uintptr_t)d->res.base;
    kv.total_tokens = pl_daemon_sched_kv_total(d->sched);
    kv.used_tokens = atomic_load_explicit(&st->kv_used_tokens, memory_order_relaxed);
    kv.block_tokens = 16;
    kv.bytes = kv.total_tokens * 2ull * hp->n_layer * hp->n_head_kv * hp->head_dim *
               (d->cfg.kv_type == PL_KV_F16 ? 2 : 4);
    s.version = PL_DAEMON_VERSION;
    s.uptime_ns = pl_daemon_now_ns() - d->t_start_ns;
    s.model_name = d->model_name;
    s.model_path = d->cfg.model;
    s.architecture = (char *)hp->arch;
    s.n_params = hp->n_params;
    s.file_bytes = pl_gguf_file_size(pl_model_gguf(d->model));
    s.residency = &r;
    s.kv = &kv;
    s.n_cpus = d->cfg.n_cpus;
    s.cpus = d->cfg.cpus;
    s.policy_path = "";
    s.sessions = d->sessions.n_open;
    s.draining = d->draining;
    resp->result_case = PICOLM__ADMIN__V1__ADMIN_RESPONSE__RESULT_STATUS;
    resp->status = &s;
    return send_resp(fd, resp);
}

static int do_sessions(struct pl_daemon *d, int fd, Picolm__Admin__V1__AdminResponse *resp) {
    uint32_t n = d->sessions.n_open, k = 0;
    Picolm__Admin__V1__Session *arr = calloc(n ? n : 1, sizeof(*arr));
    Picolm__Admin__V1__Session **ptrs = calloc(n ? n : 1, sizeof(*ptrs));
    Picolm__Admin__V1__SessionList list = PICOLM__ADMIN__V1__SESSION_LIST__INIT;
    int r = -ENOMEM;
    if (!arr || !ptrs)
        goto out;
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
        e->ttft_ns = atomic_load_explicit(&s->ttft_ns, memory_order_relaxed);
        e->queue_wait_ns = atomic_load_explicit(&s->queue_ns, memory_order_relaxed);
        e->kv_tokens = atomic_load_explicit(&s->kv_tokens, memory_order_relaxed);
        e->user = "";
        e->exe = "";
        e->identity = "";
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

static int do_kill(struct pl_daemon *d, int fd, Picolm__Admin__V1__AdminResponse *resp,
                   const Picolm__Admin__V1__KillRequest *k) {
    Picolm__Admin__V1__KillResult kr = PICOLM__ADMIN__V1__KILL_RESULT__INIT;
    for (uint32_t i = 0; k && i < d->sessions.n; i++) {
        struct pl_daemon_session *s = &d->sessions.s[i];
        if (s->state != PL_DAEMON_SESSION_OPEN && s->state != PL_DAEMON_SESSION_HANDSHAKE)
            continue;
        bool hit = (k->target_case == PICOLM__ADMIN__V1__KILL_REQUEST__TARGET_SESSION_ID &&
                    s->id == k->session_id) ||
                   (k->target_case == PICOLM__ADMIN__V1__KILL_REQUEST__TARGET_PID &&
                    s->peer.pid == k->pid) ||
                   (k->target_case == PICOLM__ADMIN__V1__KILL_REQUEST__TARGET_UID &&
                    s->state == PL_DAEMON_SESSION_OPEN && s->peer.uid == k->uid);
        if (!hit)
            continue;
        pl_daemon_event_loop_kill_session(d, s, "killed by admin");
        kr.killed++;
    }
    resp->result_case = PICOLM__ADMIN__V1__ADMIN_RESPONSE__RESULT_KILL;
    resp->kill = &kr;
    return send_resp(fd, resp);
}

int pl_daemon_admin_serve(struct pl_daemon *d, int fd) {
    uint8_t buf[ADMIN_MAX_REQ];
    ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC);
    if (n < 0)
        return errno == EAGAIN ? 0 : -errno;
    if (n == 0)
        return -PL_ERR_GONE;
    Picolm__Admin__V1__AdminResponse resp = PICOLM__ADMIN__V1__ADMIN_RESPONSE__INIT;
    if ((size_t)n > sizeof(buf)) {
        resp.error_code = PICOLM__V1__ERROR_CODE__ERROR_CODE_INVALID_ARGUMENT;
        resp.error_message = "admin request too large";
        return send_resp(fd, &resp);
    }
    Picolm__Admin__V1__AdminRequest *req =
        picolm__admin__v1__admin_request__unpack(NULL, (size_t)n, buf);
    if (!req) {
        resp.error_code = PICOLM__V1__ERROR_CODE__ERROR_CODE_INVALID_ARGUMENT;
        resp.error_message = "malformed admin request";
        return send_resp(fd, &resp);
    }
    resp.request_id = req->request_id;
    int r;
    switch (req->cmd_case) {
    case PICOLM__ADMIN__V1__ADMIN_REQUEST__CMD_STATUS:
        r = do_status(d, fd, &resp);
        break;
    case PICOLM__ADMIN__V1__ADMIN_REQUEST__CMD_SESSIONS:
        r = do_sessions(d, fd, &resp);
        break;
    case PICOLM__ADMIN__V1__ADMIN_REQUEST__CMD_KILL:
        r = do_kill(d, fd, &resp, req->kill);
        break;
    case PICOLM__ADMIN__V1__ADMIN_REQUEST__CMD_DRAIN:
        pl_daemon_event_loop_drain(d, "drain requested by admin");
        r = send_resp(fd, &resp);
        break;
    case PICOLM__ADMIN__V1__ADMIN_REQUEST__CMD_POLICY:
    case PICOLM__ADMIN__V1__ADMIN_REQUEST__CMD_MODEL_INFO:
    case PICOLM__ADMIN__V1__ADMIN_REQUEST__CMD_STATS:
    case PICOLM__ADMIN__V1__ADMIN_REQUEST__CMD__NOT_SET:
    case _PICOLM__ADMIN__V1__ADMIN_REQUEST__CMD__CASE_IS_INT_SIZE:
    default:
        resp.error_code = PICOLM__V1__ERROR_CODE__ERROR_CODE_UNSUPPORTED;
        resp.error_message = "command not supported by this picolmd";
        r = send_resp(fd, &resp);
        break;
    }
    picolm__admin__v1__admin_request__free_unpacked(req, NULL);
    return r;
}
