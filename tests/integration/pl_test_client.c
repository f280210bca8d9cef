/* SPDX-License-Identifier: MIT */
/* Minimal picolmd client for the integration tests (see pl_test_client.h). */
#include "pl_test_client.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "pl/ipc_doorbell.h"
#include "pl/ipc_handshake.h"
#include "pl/picolm.pb-c.h"
#include "pl/pl_util.h"
#include "records.h"

static int connect_to(const char *dir, const char *name) {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    (void)snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", dir, name);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int e = -errno;
        (void)close(fd);
        return e;
    }
    return fd;
}

int pl_test_client_connect(const char *dir, struct pl_test_client *c) {
    struct pl_ipc_handshake_result hr = {
        .region_fd = -1, .broker_doorbell_fd = -1, .client_doorbell_fd = -1};
    memset(c, 0, sizeof(*c));
    c->reg = (struct pl_ipc_region)PL_IPC_REGION_INIT;
    c->sock = c->db_broker = c->db_client = -1;
    int fd = connect_to(dir, "picolm.sock");
    if (fd < 0)
        return fd;
    c->sock = fd;
    int r = pl_ipc_handshake_client(fd, &hr);
    if (r < 0)
        goto fail;
    r = pl_ipc_region_attach(&c->reg, hr.region_fd, 1000);
    if (r < 0)
        goto fail;
    hr.region_fd = -1;
    c->db_broker = pl_steal_fd(&hr.broker_doorbell_fd);
    c->db_client = pl_steal_fd(&hr.client_doorbell_fd);
    c->session_id = hr.session_id;
    r = pl_ipc_region_rings(&c->reg, PL_IPC_REGION_CLIENT, &c->sq, &c->cq);
    if (r < 0)
        goto fail;
    return 0;
fail:
    pl_ipc_handshake_result_done(&hr);
    pl_test_client_close(c);
    return r;
}

void pl_test_client_close(struct pl_test_client *c) {
    pl_ipc_region_done(&c->reg);
    pl_close_fd(&c->sock);
    pl_close_fd(&c->db_broker);
    pl_close_fd(&c->db_client);
}

int pl_test_client_send_raw(struct pl_test_client *c, uint32_t type, const void *p, uint32_t n) {
    /* The broker wakes clients with FUTEX_WAKE only (it never writes a shared eventfd). */
    int r = pl_ipc_doorbell_wait_futex(&c->sq, n, c->db_broker, 20000, 5000);
    if (r < 0)
        return r;
    r = pl_ipc_ring_push(&c->sq, type, p, n);
    if (r < 0)
        return r;
    return pl_ipc_doorbell_notify(&c->sq, c->db_broker);
}

int pl_test_client_send(struct pl_test_client *c, uint32_t type, const ProtobufCMessage *m) {
    uint8_t buf[32768];
    size_t n = protobuf_c_message_get_packed_size(m);
    if (n > sizeof(buf))
        return -EMSGSIZE;
    (void)protobuf_c_message_pack(m, buf);
    return pl_test_client_send_raw(c, type, buf, (uint32_t)n);
}

int pl_test_client_recv(struct pl_test_client *c, uint32_t *type, void *buf, uint32_t cap,
                        uint32_t *len, int timeout_ms) {
    int r = pl_ipc_ring_read(&c->cq, buf, cap, type, len);
    if (r != 0)
        return r;
    r = pl_ipc_doorbell_wait_futex(&c->cq, 0, c->db_broker, 20000, timeout_ms);
    if (r == -ETIMEDOUT)
        return 0;
    if (r < 0)
        return r;
    r = pl_ipc_ring_read(&c->cq, buf, cap, type, len);
    /* Hand the space back (rings the broker if it waits for room). */
    (void)pl_ipc_doorbell_notify(&c->cq, c->db_broker);
    return r;
}

int pl_test_client_generate(struct pl_test_client *c, uint64_t id, const int32_t *ids, uint32_t n,
                            const char *text, uint32_t max_tokens, bool stream, bool ignore_eos) {
    Picolm__V1__Generate g;
    picolm__v1__generate__init(&g);
    Picolm__V1__TokenList tl = PICOLM__V1__TOKEN_LIST__INIT;
    g.request_id = id;
    if (ids) {
        tl.n_ids = n;
        tl.ids = (int32_t *)ids;
        g.input_case = PICOLM__V1__GENERATE__INPUT_TOKENS;
        g.tokens = &tl;
    } else {
        g.input_case = PICOLM__V1__GENERATE__INPUT_PROMPT;
        g.prompt.data = (uint8_t *)text;
        g.prompt.len = strlen(text);
    }
    g.max_tokens = max_tokens;
    g.stream = stream;
    g.ignore_eos = ignore_eos;
    return pl_test_client_send(c, PL_DAEMON_REC_GENERATE, &g.base);
}

int pl_test_client_collect(struct pl_test_client *c, uint64_t id, struct pl_test_result *res,
                           int timeout_ms, void (*on_chunk)(void *), void *arg) {
    static _Thread_local uint8_t buf[65536];
    memset(res, 0, sizeof(*res));
    for (;;) {
        uint32_t type, len;
        int r = pl_test_client_recv(c, &type, buf, sizeof(buf), &len, timeout_ms);
        if (r == 0)
            return -ETIMEDOUT;
        if (r < 0)
            return r;
        if (type == PL_DAEMON_REC_TOKEN_CHUNK) {
            Picolm__V1__TokenChunk *m = picolm__v1__token_chunk__unpack(NULL, len, buf);
            if (!m)
                return -EPROTO;
            if (m->request_id == id) {
                for (size_t i = 0; i < m->n_ids && res->n_ids < PL_ARRAY_SIZE(res->ids); i++)
                    res->ids[res->n_ids++] = m->ids[i];
                size_t t = PL_MIN(m->text.len, sizeof(res->text) - res->n_text);
                memcpy(res->text + res->n_text, m->text.data, t);
                res->n_text += (uint32_t)t;
                res->n_chunks++;
            }
            picolm__v1__token_chunk__free_unpacked(m, NULL);
            if (on_chunk)
                on_chunk(arg);
        } else if (type == PL_DAEMON_REC_DONE) {
            Picolm__V1__Done *m = picolm__v1__done__unpack(NULL, len, buf);
            if (!m)
                return -EPROTO;
            bool mine = m->request_id == id;
            res->finish = m->finish_reason;
            res->generated = m->generated_tokens;
            picolm__v1__done__free_unpacked(m, NULL);
            if (mine)
                return 0;
        } else if (type == PL_DAEMON_REC_ERROR) {
            Picolm__V1__Error *m = picolm__v1__error__unpack(NULL, len, buf);
            if (!m)
                return -EPROTO;
            bool mine = m->request_id == id;
            res->error_code = m->code;
            picolm__v1__error__free_unpacked(m, NULL);
            if (mine)
                return 0;
        }
    }
}

int pl_test_admin(const char *dir, const Picolm__Admin__V1__AdminRequest *req,
                  Picolm__Admin__V1__AdminResponse **ret) {
    uint8_t buf[65536];
    int fd = connect_to(dir, "admin.sock");
    if (fd < 0)
        return fd;
    size_t n = protobuf_c_message_get_packed_size(&req->base);
    (void)protobuf_c_message_pack(&req->base, buf);
    int r = -EIO;
    if (send(fd, buf, n, MSG_NOSIGNAL) == (ssize_t)n) {
        ssize_t m = recv(fd, buf, sizeof(buf), 0);
        if (m > 0) {
            *ret = picolm__admin__v1__admin_response__unpack(NULL, (size_t)m, buf);
            r = *ret ? 0 : -EPROTO;
        }
    }
    (void)close(fd);
    return r;
}

int pl_test_admin_status(const char *dir, Picolm__Admin__V1__AdminResponse **ret) {
    Picolm__Admin__V1__AdminRequest req = PICOLM__ADMIN__V1__ADMIN_REQUEST__INIT;
    Picolm__Admin__V1__StatusRequest st = PICOLM__ADMIN__V1__STATUS_REQUEST__INIT;
    req.request_id = 1;
    req.cmd_case = PICOLM__ADMIN__V1__ADMIN_REQUEST__CMD_STATUS;
    req.status = &st;
    return pl_test_admin(dir, &req, ret);
}

/* name in list (n entries) into *ret: true when found. */
static bool find_counter(Picolm__Admin__V1__Counter **list, size_t n, const char *name,
                         uint64_t *ret) {
    for (size_t i = 0; i < n; i++)
        if (list[i]->name && strcmp(list[i]->name, name) == 0) {
            *ret = list[i]->value;
            return true;
        }
    return false;
}

int pl_test_admin_counter(const char *dir, const char *name, uint64_t *ret) {
    Picolm__Admin__V1__AdminRequest req = PICOLM__ADMIN__V1__ADMIN_REQUEST__INIT;
    Picolm__Admin__V1__StatsRequest st = PICOLM__ADMIN__V1__STATS_REQUEST__INIT;
    Picolm__Admin__V1__AdminResponse *resp = NULL;
    req.request_id = 2;
    req.cmd_case = PICOLM__ADMIN__V1__ADMIN_REQUEST__CMD_STATS;
    req.stats = &st;
    int r = pl_test_admin(dir, &req, &resp);
    if (r < 0)
        return r;
    r = -EOPNOTSUPP;
    const Picolm__Admin__V1__Stats *m = resp->stats;
    if (resp->result_case == PICOLM__ADMIN__V1__ADMIN_RESPONSE__RESULT_STATS && m)
        r = find_counter(m->counters, m->n_counters, name, ret) ||
                    find_counter(m->gauges, m->n_gauges, name, ret)
                ? 0
                : -ENOENT;
    picolm__admin__v1__admin_response__free_unpacked(resp, NULL);
    return r;
}

int pl_test_smaps(pid_t pid, uint64_t addr, struct pl_test_smaps *ret) {
    static const struct {
        const char *name;
        size_t off;
    } fields[] = {
        {"Size:", offsetof(struct pl_test_smaps, size_kb)},
        {"Locked:", offsetof(struct pl_test_smaps, locked_kb)},
        {"KernelPageSize:", offsetof(struct pl_test_smaps, kernel_page_kb)},
        {"AnonHugePages:", offsetof(struct pl_test_smaps, anon_huge_kb)},
        {"Private_Hugetlb:", offsetof(struct pl_test_smaps, hugetlb_kb)},
    };
    char p[64], line[512];
    bool in = false, found = false;
    (void)snprintf(p, sizeof(p), "/proc/%d/smaps", (int)pid);
    FILE *f = fopen(p, "re");
    if (!f)
        return -errno;
    memset(ret, 0, sizeof(*ret));
    while (fgets(line, sizeof(line), f)) {
        unsigned long a, b;
        /* a mapping's header line: "start-end perms ..." (field lines have no '-' first) */
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = a == addr;
            found |= in;
            continue;
        }
        for (size_t i = 0; in && i < sizeof(fields) / sizeof(fields[0]); i++) {
            const size_t n = strlen(fields[i].name);
            unsigned long long v;
            if (!strncmp(line, fields[i].name, n) && sscanf(line + n, "%llu kB", &v) == 1)
                memcpy((char *)ret + fields[i].off, &v, sizeof(v));
        }
    }
    (void)fclose(f);
    return found ? 0 : -ENOENT;
}
