/* SPDX-License-Identifier: MIT */
/* The fake broker of the libpicolm tests (fake_broker.h): the real ipc broker side of the
 * handshake in a forked child, plus a scripted or toy-model scenario. */
#include "fake_broker.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <protobuf-c/protobuf-c.h>

#include "pl/ipc_doorbell.h"
#include "pl/ipc_handshake.h"
#include "pl/ipc_peer.h"
#include "pl/picolm.pb-c.h"

#define FB_RING_BYTES (1u << 16)
#define FB_MAX_RECORD (1u << 14)

static void child_run(int lsock, fb_scenario_fn scenario, void *arg, uint32_t reject_status) {
    struct pollfd p = {.fd = lsock, .events = POLLIN};
    if (poll(&p, 1, 10000) != 1)
        _exit(10);
    struct fb *b = calloc(1, sizeof(*b));
    if (!b)
        _exit(11);
    b->sock = accept4(lsock, NULL, NULL, SOCK_CLOEXEC);
    if (b->sock < 0)
        _exit(12);
    struct pl_ipc_hello hello;
    struct pl_ipc_peer peer = PL_IPC_PEER_INIT;
    if (pl_ipc_handshake_recv_hello(b->sock, &hello, &peer) < 0)
        _exit(13);
    pl_ipc_peer_done(&peer);
    if (reject_status) {
        (void)pl_ipc_handshake_send_reject(b->sock, (enum pl_ipc_welcome_status)reject_status);
        _exit(0);
    }
    b->reg = (struct pl_ipc_region)PL_IPC_REGION_INIT;
    if (pl_ipc_region_create(&b->reg, FB_RING_BYTES, FB_RING_BYTES, FB_MAX_RECORD) < 0 ||
        pl_ipc_region_rings(&b->reg, PL_IPC_REGION_BROKER, &b->sq, &b->cq) < 0 ||
        pl_ipc_doorbell_open(&b->broker_fd) < 0 || pl_ipc_doorbell_open(&b->client_fd) < 0)
        _exit(14);
    if (pl_ipc_handshake_send_welcome(b->sock, 42, b->reg.bytes, b->reg.fd, b->broker_fd,
                                      b->client_fd) < 0)
        _exit(15);
    scenario(b, arg);
    /* Stay until the client hangs up, so that it never sees a premature death. */
    struct pollfd h = {.fd = b->sock, .events = POLLRDHUP};
    (void)poll(&h, 1, 10000);
    _exit(0);
}

int fb_start(struct fb_handle *h, fb_scenario_fn scenario, void *arg, uint32_t reject_status) {
    memset(h, 0, sizeof(*h));
    (void)snprintf(h->dir, sizeof(h->dir), "/tmp/pl-fb-XXXXXX");
    if (!mkdtemp(h->dir))
        return -errno;
    (void)snprintf(h->path, sizeof(h->path), "%s/sock", h->dir);
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -errno;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, h->path, strlen(h->path) + 1);
    if (bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(s, 4) < 0) {
        int r = -errno;
        close(s);
        return r;
    }
    fflush(NULL);
    h->pid = fork();
    if (h->pid < 0) {
        int r = -errno;
        close(s);
        return r;
    }
    if (h->pid == 0)
        child_run(s, scenario, arg, reject_status);
    close(s);
    return 0;
}

int fb_stop(struct fb_handle *h) {
    int status = 0;
    if (h->pid > 0) {
        /* Give a well-behaved child a moment to notice the hang-up, then insist. */
        for (int i = 0; i < 200; i++) {
            pid_t r = waitpid(h->pid, &status, WNOHANG);
            if (r == h->pid)
                goto reaped;
            if (r < 0)
                goto reaped;
            usleep(5000);
        }
        (void)kill(h->pid, SIGKILL);
        (void)waitpid(h->pid, &status, 0);
    }
reaped:
    h->pid = 0;
    (void)unlink(h->path);
    (void)rmdir(h->dir);
    return status;
}

int fb_recv(struct fb *b, uint32_t *type, uint32_t *len, int timeout_ms) {
    for (;;) {
        int r = pl_ipc_ring_read(&b->sq, b->buf, sizeof(b->buf), type, len);
        if (r == 1) {
            (void)pl_ipc_doorbell_notify(&b->sq, b->client_fd);
            return 1;
        }
        if (r < 0)
            return -1;
        if (timeout_ms == 0)
            return 0;
        r = pl_ipc_ring_sleep_prepare(&b->sq, 0);
        if (r < 0)
            return -1;
        if (r == 1)
            continue;
        struct pollfd p[2] = {{.fd = b->broker_fd, .events = POLLIN},
                              {.fd = b->sock, .events = POLLRDHUP}};
        int n = poll(p, 2, timeout_ms);
        pl_ipc_ring_sleep_finish(&b->sq);
        if (p[0].revents & POLLIN)
            (void)pl_ipc_doorbell_drain(b->broker_fd);
        if (n > 0 && p[1].revents)
            return -1;
        if (n == 0)
            return 0;
    }
}

void fb_send_raw(struct fb *b, uint32_t type, const void *payload, uint32_t len) {
    for (;;) {
        int r = pl_ipc_ring_push(&b->cq, type, payload, len);
        if (r == 0)
            break;
        if (r != -EAGAIN)
            _exit(20);
        if (pl_ipc_doorbell_wait(&b->cq, len, b->broker_fd, b->client_fd, 0, 10000) < 0)
            _exit(21);
    }
    if (pl_ipc_doorbell_notify(&b->cq, b->client_fd) < 0)
        _exit(22);
}

void fb_send(struct fb *b, uint32_t type, const ProtobufCMessage *msg) {
    static uint8_t out[FB_MAX_RECORD];
    size_t n = protobuf_c_message_get_packed_size(msg);
    if (n > sizeof(out))
        _exit(23);
    (void)protobuf_c_message_pack(msg, out);
    fb_send_raw(b, type, out, (uint32_t)n);
}

/* ---- The toy-model scenario ---- */

struct gen {
    bool active, inf, cancelled;
    uint64_t id;
    uint8_t text[256];
    size_t len, pos;
    uint32_t max_tokens, n;
};

static void send_done(struct fb *b, struct gen *g, Picolm__V1__FinishReason why) {
    Picolm__V1__Done d;
    picolm__v1__done__init(&d);
    d.request_id = g->id;
    d.finish_reason = why;
    d.prompt_tokens = (uint32_t)g->len;
    d.generated_tokens = g->n;
    d.ttft_ns = 1000;
    d.seed = 7;
    fb_send(b, 102, &d.base);
    g->active = false;
}

static void send_error(struct fb *b, uint64_t id, Picolm__V1__ErrorCode code, const char *msg) {
    Picolm__V1__Error e;
    picolm__v1__error__init(&e);
    e.request_id = id;
    e.code = code;
    e.message = (char *)msg;
    fb_send(b, 103, &e.base);
}

static void handle(struct fb *b, struct gen *gens, size_t n_gens, uint32_t type, uint32_t len) {
    switch (type) {
    case 1: {
        Picolm__V1__Generate *m = picolm__v1__generate__unpack(NULL, len, b->buf);
        if (!m)
            _exit(30);
        struct gen *g = NULL;
        for (size_t i = 0; i < n_gens && !g; i++)
            if (!gens[i].active)
                g = &gens[i];
        if (!g || m->input_case != PICOLM__V1__GENERATE__INPUT_PROMPT ||
            m->prompt.len > sizeof(g->text) || m->prompt.len == 0) {
            send_error(b, m->request_id, PICOLM__V1__ERROR_CODE__ERROR_CODE_INVALID_ARGUMENT,
                       "prompt: 1..256 bytes of text");
        } else {
            *g = (struct gen){.active = true,
                              .id = m->request_id,
                              .len = m->prompt.len,
                              .max_tokens = m->max_tokens};
            memcpy(g->text, m->prompt.data, m->prompt.len);
            g->inf = g->len >= 3 && !memcmp(g->text, "inf", 3);
        }
        picolm__v1__generate__free_unpacked(m, NULL);
        break;
    }
    case 2: {
        Picolm__V1__Cancel *m = picolm__v1__cancel__unpack(NULL, len, b->buf);
        if (!m)
            _exit(31);
        bool found = false;
        for (size_t i = 0; i < n_gens; i++)
            if (gens[i].active && gens[i].id == m->request_id)
                gens[i].cancelled = found = true;
        if (!found)
            send_error(b, m->request_id, PICOLM__V1__ERROR_CODE__ERROR_CODE_UNKNOWN_REQUEST,
                       "no such request");
        picolm__v1__cancel__free_unpacked(m, NULL);
        break;
    }
    case 3: {
        Picolm__V1__Tokenize *m = picolm__v1__tokenize__unpack(NULL, len, b->buf);
        if (!m)
            _exit(32);
        int32_t ids[1024];
        size_t n = 0;
        if (m->add_special)
            ids[n++] = 1;
        for (size_t i = 0; i < m->text.len && n < 1024; i++)
            ids[n++] = m->text.data[i];
        Picolm__V1__TokenizeResult res;
        picolm__v1__tokenize_result__init(&res);
        res.request_id = m->request_id;
        res.n_ids = n;
        res.ids = ids;
        fb_send(b, 104, &res.base);
        picolm__v1__tokenize__free_unpacked(m, NULL);
        break;
    }
    case 4: {
        Picolm__V1__Detokenize *m = picolm__v1__detokenize__unpack(NULL, len, b->buf);
        if (!m)
            _exit(33);
        uint8_t text[1024];
        size_t n = 0;
        bool bad = false;
        for (size_t i = 0; i < m->n_ids && n < sizeof(text); i++) {
            if (m->ids[i] < 0 || m->ids[i] > 255)
                bad = true;
            text[n++] = (uint8_t)m->ids[i];
        }
        if (bad) {
            send_error(b, m->request_id, PICOLM__V1__ERROR_CODE__ERROR_CODE_INVALID_ARGUMENT,
                       "token id out of range");
        } else {
            Picolm__V1__DetokenizeResult res;
            picolm__v1__detokenize_result__init(&res);
            res.request_id = m->request_id;
            res.text.data = text;
            res.text.len = n;
            fb_send(b, 105, &res.base);
        }
        picolm__v1__detokenize__free_unpacked(m, NULL);
        break;
    }
    case 5: {
        Picolm__V1__ModelInfoRequest *m = picolm__v1__model_info_request__unpack(NULL, len, b->buf);
        if (!m)
            _exit(34);
        Picolm__V1__ModelInfo info;
        picolm__v1__model_info__init(&info);
        info.request_id = m->request_id;
        info.name = "toy-bytes";
        info.architecture = "toy";
        info.tokenizer = "bytes";
        info.n_vocab = 256;
        info.n_ctx = 256;
        info.n_layer = 1;
        info.bos = 1;
        info.eos = -1;
        fb_send(b, 106, &info.base);
        picolm__v1__model_info_request__free_unpacked(m, NULL);
        break;
    }
    default:
        _exit(35);
    }
}

void fb_scenario_echo(struct fb *b, void *arg) {
    (void)arg;
    struct gen gens[16] = {0};
    for (;;) {
        bool busy = false;
        for (size_t i = 0; i < 16; i++)
            busy |= gens[i].active;
        uint32_t type, len;
        int r = fb_recv(b, &type, &len, busy ? 0 : 200);
        if (r < 0)
            return;
        if (r == 1) {
            handle(b, gens, 16, type, len);
            continue; /* take every pending request before the next round */
        }
        bool slow = false;
        for (size_t i = 0; i < 16; i++) {
            struct gen *g = &gens[i];
            if (!g->active)
                continue;
            if (g->cancelled) {
                send_done(b, g, PICOLM__V1__FINISH_REASON__FINISH_REASON_CANCELLED);
                continue;
            }
            if (g->max_tokens && g->n == g->max_tokens) {
                send_done(b, g, PICOLM__V1__FINISH_REASON__FINISH_REASON_LENGTH);
                continue;
            }
            if (!g->inf && g->pos == g->len) {
                send_done(b, g, PICOLM__V1__FINISH_REASON__FINISH_REASON_EOS);
                continue;
            }
            uint8_t ch = g->text[g->pos % g->len];
            int32_t id = ch;
            Picolm__V1__TokenChunk c;
            picolm__v1__token_chunk__init(&c);
            c.request_id = g->id;
            c.n_ids = 1;
            c.ids = &id;
            c.text.data = &ch;
            c.text.len = 1;
            fb_send(b, 101, &c.base);
            g->pos++;
            g->n++;
            slow |= g->inf;
        }
        if (slow)
            usleep(1000);
    }
}
