/* SPDX-License-Identifier: MIT */
/* libpicolm's public API (picolm.h): request bookkeeping over one connection (conn.c),
 * protobuf-c encoding of requests, decoding and validation of the broker's records, and the
 * per-stream chunk queues that let several requests share a connection. The token path
 * allocates nothing in steady state: records are copied into one private buffer, unpacked
 * into a reusable arena (arena.c) and appended to a queue that only grows. */
#include "picolm.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pl/picolm.pb-c.h"
#include "pl/pl_err.h"
#include "pl/pl_utf8.h"
#include "pl/pl_util.h"

#include "arena.h"
#include "conn.h"
#include "wire.h"

#define DEFAULT_SPIN_NS 250000u
#define MAX_SPIN_NS 1000000000u
/* Arena: starts at 64 KiB, and one record may never decode into more than 256 MiB. */
#define ARENA_INITIAL_BYTES (64u * 1024u)
#define ARENA_LIMIT_BYTES (256u * 1024u * 1024u)
/* A stream nobody reads may queue this much before it fails with PICOLM_E_NOMEM. */
#define QUEUE_LIMIT_BYTES (256u * 1024u * 1024u)
/* Records handled per pump before the freed space is handed back to the broker. */
#define PUMP_BATCH 256
#define MSG_BYTES 256
/* Most top logprobs per token a request may ask for (the broker takes 20 today) and a chunk
 * may carry. */
#define MAX_TOP_LOGPROBS 1024u

/* ---- Types ---- */

enum req_kind {
    REQ_GENERATE = 0,
    REQ_TOKENIZE = 1,
    REQ_DETOKENIZE = 2,
    REQ_MODEL_INFO = 3,
};

/* Queued chunks of one stream: entries of struct qent + ids[n_ids] + text[text_len] (padded
 * to 4 bytes) + logprobs[n_ids] + top[n_ids][top_n] (when has_lp), each 8-byte aligned. A
 * chunk handed out points its ids right after its qent, which is how the picolm_chunk_*
 * accessors find the logprobs; the magic (mixed with the entry's address) tells them the
 * chunk came from a queue. */
struct chunk_queue {
    uint8_t *buf;
    size_t cap;
    size_t head; /* next entry to hand out */
    size_t tail; /* end of the last entry */
};

struct qent {
    uint32_t magic;
    uint32_t n_ids;
    uint32_t text_len;
    uint32_t has_lp; /* 1: logprobs[n_ids] and top[n_ids][top_n] follow */
    uint32_t top_n;
    uint32_t reserved;
};

/* One alternative as queued (the wire's TokenLogprob). */
struct qtop {
    int32_t id;
    float logprob;
};

/* The logprobs of a chunk as received (borrowed from the decoded record). */
struct chunk_lp {
    const float *logprobs;                /* [n_ids] or NULL */
    Picolm__V1__TokenLogprob *const *top; /* [n_ids * top_n] */
    uint32_t top_n;
};

#define QENT_MAGIC 0x506c4c50u /* "PLLP" */

/* One request in flight. Lives in its stream, or on the stack of a blocking call; registered
 * in the client's table from submission until it is done (or given up). */
struct req {
    uint64_t id;
    enum req_kind kind;
    bool done;
    int status;          /* final status once done */
    char msg[MSG_BYTES]; /* the broker's message for a failed request */
    /* REQ_GENERATE */
    bool have_result;
    struct picolm_result result;
    struct chunk_queue q;
    /* REQ_TOKENIZE: caller's buffer */
    int32_t *ids;
    size_t ids_cap;
    size_t n_ids;
    /* REQ_DETOKENIZE: caller's buffer */
    char *text;
    size_t text_cap;
    size_t text_len;
    /* REQ_MODEL_INFO: full-size scratch, copied out by the caller */
    struct picolm_model_info *info;
};

struct picolm_stream {
    struct picolm_client *client;
    struct picolm_stream *prev, *next;
    bool cancel_sent;
    struct req req;
};

struct picolm_client {
    struct pl_client_conn conn;
    struct pl_client_arena arena;
    _Atomic uint64_t last_id; /* the last request id issued (ids start at 1); atomic only
                                 because picolm_cancel() may read it from another thread:
                                 relaxed everywhere, it publishes no other data */
    struct req **inflight;    /* [cap_inflight], n_inflight used */
    size_t n_inflight;
    size_t cap_inflight;
    struct picolm_stream *streams;
    int dead; /* 0, or the sticky status of a dead connection */
    char dead_msg[MSG_BYTES];
    char err[512];
};

/* ---- Errors ---- */

PL_EXPORT const char *picolm_strerror(int status) {
    switch (status) {
    case PICOLM_OK:
        return "success";
    case PICOLM_E_INVALID:
        return "invalid argument";
    case PICOLM_E_DENIED:
        return "permission denied by the broker's policy";
    case PICOLM_E_QUOTA:
        return "quota exceeded";
    case PICOLM_E_EXHAUSTED:
        return "broker resources exhausted";
    case PICOLM_E_BROKER_GONE:
        return "the broker went away";
    case PICOLM_E_PROTOCOL:
        return "protocol violation by the broker";
    case PICOLM_E_CANCELLED:
        return "cancelled";
    case PICOLM_E_UNREACHABLE:
        return "broker unreachable";
    case PICOLM_E_VERSION:
        return "incompatible protocol version";
    case PICOLM_E_NOMEM:
        return "out of memory";
    case PICOLM_E_TIMEOUT:
        return "timed out";
    case PICOLM_E_CONTEXT:
        return "prompt does not fit the context";
    case PICOLM_E_UNSUPPORTED:
        return "unsupported";
    case PICOLM_E_NOT_FOUND:
        return "no such request";
    case PICOLM_E_RANGE:
        return "buffer too small";
    case PICOLM_E_SHUTDOWN:
        return "the broker is shutting down";
    case PICOLM_E_INTERNAL:
        return "internal broker error";
    case PICOLM_E_SYSTEM:
        return "system error";
    default:
        return "unknown status";
    }
}

__attribute__((format(printf, 3, 0))) static void vset_msg(char *dst, size_t cap, const char *fmt,
                                                           va_list ap) {
    (void)vsnprintf(dst, cap, fmt, ap);
}

/* Record the message of a failed call on c and return status. */
static int fail(struct picolm_client *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct picolm_client *c, int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vset_msg(c->err, sizeof(c->err), fmt, ap);
    va_end(ap);
    return status;
}

/* Map a -errno / -PL_ERR_* from conn.c or ipc to a status. */
static int status_of(int r) {
    switch (-r) {
    case 0:
        return PICOLM_OK;
    case EINVAL:
    case EMSGSIZE:
    case ENAMETOOLONG:
        return PICOLM_E_INVALID;
    case ENOMEM:
        return PICOLM_E_NOMEM;
    case ETIMEDOUT:
        return PICOLM_E_TIMEOUT;
    case ENOENT:
    case ECONNREFUSED:
    case ENOTSOCK:
    case ENOTDIR:
    case EPROTOTYPE:
    case ELOOP:
        return PICOLM_E_UNREACHABLE;
    case EACCES:
    case EPERM:
        return PICOLM_E_DENIED;
    case ECONNABORTED:
        return PICOLM_E_INTERNAL;
    case ECONNRESET:
    case EPIPE:
    case PL_ERR_GONE:
        return PICOLM_E_BROKER_GONE;
    case PL_ERR_PROTOCOL:
        return PICOLM_E_PROTOCOL;
    case PL_ERR_VERSION:
        return PICOLM_E_VERSION;
    case PL_ERR_DENIED:
        return PICOLM_E_DENIED;
    case PL_ERR_EXHAUSTED:
        return PICOLM_E_EXHAUSTED;
    case PL_ERR_QUOTA:
        return PICOLM_E_QUOTA;
    case PL_ERR_CANCELLED:
        return PICOLM_E_CANCELLED;
    default:
        return PICOLM_E_SYSTEM;
    }
}

/* The broker's error codes (picolm.proto ErrorCode) as statuses. Unknown future codes are
 * reported as internal errors of the broker. */
static int status_of_code(int code) {
    switch (code) {
    case PICOLM__V1__ERROR_CODE__ERROR_CODE_INVALID_ARGUMENT:
        return PICOLM_E_INVALID;
    case PICOLM__V1__ERROR_CODE__ERROR_CODE_RESOURCE_EXHAUSTED:
        return PICOLM_E_EXHAUSTED;
    case PICOLM__V1__ERROR_CODE__ERROR_CODE_QUOTA_EXCEEDED:
        return PICOLM_E_QUOTA;
    case PICOLM__V1__ERROR_CODE__ERROR_CODE_PERMISSION_DENIED:
        return PICOLM_E_DENIED;
    case PICOLM__V1__ERROR_CODE__ERROR_CODE_CONTEXT_OVERFLOW:
        return PICOLM_E_CONTEXT;
    case PICOLM__V1__ERROR_CODE__ERROR_CODE_UNKNOWN_REQUEST:
        return PICOLM_E_NOT_FOUND;
    case PICOLM__V1__ERROR_CODE__ERROR_CODE_SHUTTING_DOWN:
        return PICOLM_E_SHUTDOWN;
    case PICOLM__V1__ERROR_CODE__ERROR_CODE_UNSUPPORTED:
        return PICOLM_E_UNSUPPORTED;
    case PICOLM__V1__ERROR_CODE__ERROR_CODE_INTERNAL:
    case PICOLM__V1__ERROR_CODE__ERROR_CODE_UNSPECIFIED:
    default:
        return PICOLM_E_INTERNAL;
    }
}

/* Copy a string from the broker (untrusted length) into dst, truncated, NUL-terminated. */
static void copy_str(char *dst, size_t cap, const char *src) {
    size_t n = src ? strnlen(src, cap - 1) : 0;
    memcpy(dst, src ? src : "", n);
    dst[n] = '\0';
}

/* ---- Request table ---- */

static int table_reserve(struct picolm_client *c) {
    if (c->n_inflight < c->cap_inflight)
        return 0;
    size_t cap = c->cap_inflight ? c->cap_inflight * 2 : 8;
    struct req **t = realloc(c->inflight, cap * sizeof(*t));
    if (!t)
        return -ENOMEM;
    c->inflight = t;
    c->cap_inflight = cap;
    return 0;
}

static void table_remove(struct picolm_client *c, const struct req *r) {
    for (size_t i = 0; i < c->n_inflight; i++) {
        if (c->inflight[i] == r) {
            c->inflight[i] = c->inflight[--c->n_inflight];
            return;
        }
    }
}

static void req_finish(struct picolm_client *c, struct req *r, int status, const char *msg) {
    r->done = true;
    r->status = status;
    copy_str(r->msg, sizeof(r->msg), msg);
    table_remove(c, r);
}

/* The connection is unusable: fail every request in flight with status, make every later call
 * fail the same way. Returns status. */
static int kill_client(struct picolm_client *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int kill_client(struct picolm_client *c, int status, const char *fmt, ...) {
    if (!c->dead) {
        va_list ap;
        va_start(ap, fmt);
        vset_msg(c->dead_msg, sizeof(c->dead_msg), fmt, ap);
        va_end(ap);
        c->dead = status;
    }
    while (c->n_inflight)
        req_finish(c, c->inflight[0], c->dead, c->dead_msg);
    copy_str(c->err, sizeof(c->err), c->dead_msg);
    return c->dead;
}

/* ---- Chunk queue ---- */

/* Offset of the logprobs after the qent (ids + text padded to 4 bytes). */
static size_t qent_lp_off(uint32_t n_ids, uint32_t text_len) {
    return PL_ALIGN_UP(sizeof(struct qent) + (size_t)n_ids * sizeof(int32_t) + text_len, (size_t)4);
}

static size_t qent_bytes(uint32_t n_ids, uint32_t text_len, bool has_lp, uint32_t top_n) {
    size_t n = qent_lp_off(n_ids, text_len);
    if (has_lp)
        n += (size_t)n_ids * sizeof(float) + (size_t)n_ids * top_n * sizeof(struct qtop);
    return PL_ALIGN_UP(n, (size_t)8);
}

static uint32_t qent_magic(const void *entry) {
    uintptr_t a = (uintptr_t)entry;
    return QENT_MAGIC ^ (uint32_t)a ^ (uint32_t)((uint64_t)a >> 32);
}

static int queue_push(struct chunk_queue *q, const int32_t *ids, uint32_t n_ids,
                      const uint8_t *text, uint32_t text_len, const struct chunk_lp *lp) {
    bool has_lp = lp && lp->logprobs;
    uint32_t top_n = has_lp ? lp->top_n : 0;
    size_t need = qent_bytes(n_ids, text_len, has_lp, top_n);
    if (q->head == q->tail)
        q->head = q->tail = 0;
    if (q->cap - q->tail < need) {
        size_t live = q->tail - q->head;
        if (q->head && q->cap - live >= need) {
            memmove(q->buf, q->buf + q->head, live); /* compact: no allocation */
        } else {
            size_t cap = q->cap ? q->cap : 4096;
            while (cap - live < need && cap <= QUEUE_LIMIT_BYTES)
                cap *= 2;
            if (cap > QUEUE_LIMIT_BYTES)
                return -ENOMEM;
            uint8_t *buf = malloc(cap);
            if (!buf)
                return -ENOMEM;
            if (live)
                memcpy(buf, q->buf + q->head, live);
            free(q->buf);
            q->buf = buf;
            q->cap = cap;
        }
        q->head = 0;
        q->tail = live;
    }
    uint8_t *p = q->buf + q->tail;
    struct qent e = {.magic = qent_magic(p),
                     .n_ids = n_ids,
                     .text_len = text_len,
                     .has_lp = has_lp,
                     .top_n = top_n};
    memcpy(p, &e, sizeof(e));
    if (n_ids)
        memcpy(p + sizeof(e), ids, (size_t)n_ids * sizeof(int32_t));
    if (text_len)
        memcpy(p + sizeof(e) + (size_t)n_ids * sizeof(int32_t), text, text_len);
    if (has_lp) {
        uint8_t *lpp = p + qent_lp_off(n_ids, text_len);
        memcpy(lpp, lp->logprobs, (size_t)n_ids * sizeof(float));
        lpp += (size_t)n_ids * sizeof(float);
        for (size_t i = 0; i < (size_t)n_ids * top_n; i++) {
            struct qtop t = {.id = lp->top[i]->id, .logprob = lp->top[i]->logprob};
            memcpy(lpp + i * sizeof(t), &t, sizeof(t));
        }
    }
    q->tail += need;
    return 0;
}

/* Hand out the oldest entry; its bytes stay in place until the next push. */
static bool queue_pop(struct chunk_queue *q, uint64_t request_id, struct picolm_chunk *ret) {
    if (q->head == q->tail)
        return false;
    const uint8_t *p = q->buf + q->head;
    struct qent e;
    memcpy(&e, p, sizeof(e));
    *ret = (struct picolm_chunk){
        .request_id = request_id,
        .ids = (const int32_t *)(const void *)(p + sizeof(e)),
        .n_ids = e.n_ids,
        .text = (const char *)p + sizeof(e) + (size_t)e.n_ids * sizeof(int32_t),
        .text_len = e.text_len,
    };
    q->head += qent_bytes(e.n_ids, e.text_len, e.has_lp, e.top_n);
    return true;
}

/* The queue entry a chunk was handed out from, or NULL when chunk is not one of ours. */
static const uint8_t *chunk_entry(const struct picolm_chunk *chunk, struct qent *ret) {
    if (!chunk || !chunk->ids)
        return NULL;
    const uint8_t *p = (const uint8_t *)chunk->ids - sizeof(struct qent);
    memcpy(ret, p, sizeof(*ret));
    if (ret->magic != qent_magic(p) || ret->n_ids != chunk->n_ids ||
        ret->text_len != chunk->text_len)
        return NULL;
    return p;
}

PL_EXPORT size_t picolm_chunk_n_top(const struct picolm_chunk *chunk) {
    struct qent e;
    if (!chunk_entry(chunk, &e) || !e.has_lp)
        return 0;
    return e.top_n;
}

PL_EXPORT int picolm_chunk_logprob(const struct picolm_chunk *chunk, size_t i, float *ret_logprob) {
    struct qent e;
    const uint8_t *p = ret_logprob ? chunk_entry(chunk, &e) : NULL;
    if (!p)
        return PICOLM_E_INVALID;
    if (!e.has_lp)
        return PICOLM_E_NOT_FOUND;
    if (i >= e.n_ids)
        return PICOLM_E_RANGE;
    memcpy(ret_logprob, p + qent_lp_off(e.n_ids, e.text_len) + i * sizeof(float), sizeof(float));
    return PICOLM_OK;
}

PL_EXPORT int picolm_chunk_top(const struct picolm_chunk *chunk, size_t i, size_t j,
                               int32_t *ret_id, float *ret_logprob) {
    struct qent e;
    const uint8_t *p = chunk_entry(chunk, &e);
    if (!p)
        return PICOLM_E_INVALID;
    if (!e.has_lp)
        return PICOLM_E_NOT_FOUND;
    if (i >= e.n_ids || j >= e.top_n)
        return PICOLM_E_RANGE;
    struct qtop t;
    memcpy(&t,
           p + qent_lp_off(e.n_ids, e.text_len) + (size_t)e.n_ids * sizeof(float) +
               (i * e.top_n + j) * sizeof(t),
           sizeof(t));
    if (ret_id)
        *ret_id = t.id;
    if (ret_logprob)
        *ret_logprob = t.logprob;
    return PICOLM_OK;
}

static void queue_clear(struct chunk_queue *q) {
    q->head = q->tail = 0;
}

static void queue_done(struct chunk_queue *q) {
    free(q->buf);
    *q = (struct chunk_queue){0};
}

/* ---- Decoding the broker's records ---- */

static int protocol(struct picolm_client *c, const char *what, uint64_t id) {
    return kill_client(c, PICOLM_E_PROTOCOL, "protocol violation by the broker: %s (request %llu)",
                       what, (unsigned long long)id);
}

/* Find the request a response belongs to. Returns the request, or NULL with *ret_r 0 for a
 * request this client gave up (drop the record) or a protocol error. */
static struct req *lookup(struct picolm_client *c, uint64_t id, enum req_kind kind, int *ret_r) {
    *ret_r = 0;
    if (id == 0 || id > atomic_load_explicit(&c->last_id, memory_order_relaxed)) {
        *ret_r = protocol(c, "response to a request id never issued", id);
        return NULL;
    }
    for (size_t i = 0; i < c->n_inflight; i++) {
        struct req *r = c->inflight[i];
        if (r->id != id)
            continue;
        if (r->kind != kind) {
            *ret_r = protocol(c, "response of the wrong type", id);
            return NULL;
        }
        return r;
    }
    return NULL; /* finished or given up: late records are dropped */
}

static bool ids_valid(const int32_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0)
            return false;
    return true;
}

static int on_token_chunk(struct picolm_client *c, const Picolm__V1__TokenChunk *m) {
    int r;
    struct req *q = lookup(c, m->request_id, REQ_GENERATE, &r);
    if (!q)
        return r;
    if (m->n_ids > UINT32_MAX / 8 || m->text.len > UINT32_MAX / 2 || !ids_valid(m->ids, m->n_ids))
        return protocol(c, "malformed token chunk", m->request_id);
    if (m->n_logprobs && m->n_logprobs != m->n_ids)
        return protocol(c, "logprob count differs from the token count", m->request_id);
    if (m->n_top && (!m->n_logprobs || m->n_top % m->n_ids))
        return protocol(c, "top logprobs are not a multiple of the token count", m->request_id);
    struct chunk_lp lp = {0};
    if (m->n_logprobs) {
        lp.logprobs = m->logprobs;
        lp.top = m->top;
        lp.top_n = (uint32_t)PL_MIN(m->n_top / m->n_ids, (size_t)UINT32_MAX);
        if (lp.top_n > MAX_TOP_LOGPROBS)
            return protocol(c, "more top logprobs per token than the library takes", m->request_id);
        for (size_t i = 0; i < m->n_top; i++)
            if (!m->top[i] || m->top[i]->id < -1)
                return protocol(c, "malformed top logprob", m->request_id);
    }
    if (!m->n_ids && !m->text.len)
        return 0;
    r = queue_push(&q->q, m->ids, (uint32_t)m->n_ids, m->text.data, (uint32_t)m->text.len, &lp);
    if (r < 0) {
        /* The application does not read this stream; fail it rather than the process. */
        req_finish(c, q, PICOLM_E_NOMEM, "the stream's unread chunks exceed the queue limit");
        queue_clear(&q->q);
    }
    return 0;
}

static int on_done(struct picolm_client *c, const Picolm__V1__Done *m) {
    int r;
    struct req *q = lookup(c, m->request_id, REQ_GENERATE, &r);
    if (!q)
        return r;
    struct picolm_result *res = &q->result;
    *res = (struct picolm_result){
        .size = sizeof(*res),
        .request_id = m->request_id,
        .finish_reason = (uint32_t)m->finish_reason,
        .prompt_tokens = m->prompt_tokens,
        .generated_tokens = m->generated_tokens,
        .queue_ns = m->queue_ns,
        .prefill_ns = m->prefill_ns,
        .decode_ns = m->decode_ns,
        .ttft_ns = m->ttft_ns,
        .seed = m->seed,
    };
    copy_str(res->reason, sizeof(res->reason), m->reason);
    q->have_result = true;
    bool cancelled = m->finish_reason == PICOLM__V1__FINISH_REASON__FINISH_REASON_CANCELLED;
    req_finish(c, q, cancelled ? PICOLM_E_CANCELLED : PICOLM_OK,
               cancelled ? (res->reason[0] ? res->reason : "the request was cancelled") : "");
    return 0;
}

static int on_error(struct picolm_client *c, const Picolm__V1__Error *m) {
    int status = status_of_code(m->code);
    char msg[MSG_BYTES];
    copy_str(msg, sizeof(msg), m->message);
    if (m->request_id == 0)
        return kill_client(c, status, "the broker ended the session: %s (%s)",
                           msg[0] ? msg : picolm_strerror(status), picolm_strerror(status));
    if (m->request_id > atomic_load_explicit(&c->last_id, memory_order_relaxed))
        return protocol(c, "error for a request id never issued", m->request_id);
    for (size_t i = 0; i < c->n_inflight; i++) {
        struct req *q = c->inflight[i];
        if (q->id == m->request_id) {
            req_finish(c, q, status, msg[0] ? msg : picolm_strerror(status));
            return 0;
        }
    }
    return 0; /* about a request already finished (e.g. a Cancel that came late) */
}

static int on_tokenize_result(struct picolm_client *c, const Picolm__V1__TokenizeResult *m) {
    int r;
    struct req *q = lookup(c, m->request_id, REQ_TOKENIZE, &r);
    if (!q)
        return r;
    if (!ids_valid(m->ids, m->n_ids))
        return protocol(c, "negative token id", m->request_id);
    q->n_ids = m->n_ids;
    if (m->n_ids > q->ids_cap) {
        req_finish(c, q, PICOLM_E_RANGE, "the id buffer is too small");
        return 0;
    }
    if (m->n_ids)
        memcpy(q->ids, m->ids, m->n_ids * sizeof(int32_t));
    req_finish(c, q, PICOLM_OK, "");
    return 0;
}

static int on_detokenize_result(struct picolm_client *c, const Picolm__V1__DetokenizeResult *m) {
    int r;
    struct req *q = lookup(c, m->request_id, REQ_DETOKENIZE, &r);
    if (!q)
        return r;
    q->text_len = m->text.len;
    if (m->text.len > q->text_cap) {
        req_finish(c, q, PICOLM_E_RANGE, "the text buffer is too small");
        return 0;
    }
    if (m->text.len)
        memcpy(q->text, m->text.data, m->text.len);
    if (m->text.len < q->text_cap)
        q->text[m->text.len] = '\0';
    req_finish(c, q, PICOLM_OK, "");
    return 0;
}

static int on_model_info(struct picolm_client *c, const Picolm__V1__ModelInfo *m) {
    int r;
    struct req *q = lookup(c, m->request_id, REQ_MODEL_INFO, &r);
    if (!q)
        return r;
    struct picolm_model_info *i = q->info;
    *i = (struct picolm_model_info){
        .size = sizeof(*i),
        .n_vocab = m->n_vocab,
        .n_ctx = m->n_ctx,
        .n_embd = m->n_embd,
        .n_layer = m->n_layer,
        .n_head = m->n_head,
        .n_head_kv = m->n_head_kv,
        .n_params = m->n_params,
        .file_bytes = m->file_bytes,
        .bos = m->bos < 0 ? -1 : m->bos,
        .eos = m->eos < 0 ? -1 : m->eos,
    };
    copy_str(i->name, sizeof(i->name), m->name);
    copy_str(i->architecture, sizeof(i->architecture), m->architecture);
    copy_str(i->tokenizer, sizeof(i->tokenizer), m->tokenizer);
    req_finish(c, q, PICOLM_OK, "");
    return 0;
}

/* Decode one record (private copy in c->conn.rx) and apply it. Returns 0 or a status that
 * killed the client. */
static int dispatch(struct picolm_client *c, uint32_t type, uint32_t len) {
    const uint8_t *data = c->conn.rx;
    ProtobufCAllocator *a = &c->arena.pb;
    pl_client_arena_reset(&c->arena);
    int r;
    switch (type) {
    case PL_CLIENT_REC_TOKEN_CHUNK: {
        Picolm__V1__TokenChunk *m = picolm__v1__token_chunk__unpack(a, len, data);
        r = m ? on_token_chunk(c, m) : protocol(c, "undecodable TokenChunk", 0);
        break;
    }
    case PL_CLIENT_REC_DONE: {
        Picolm__V1__Done *m = picolm__v1__done__unpack(a, len, data);
        r = m ? on_done(c, m) : protocol(c, "undecodable Done", 0);
        break;
    }
    case PL_CLIENT_REC_ERROR: {
        Picolm__V1__Error *m = picolm__v1__error__unpack(a, len, data);
        r = m ? on_error(c, m) : protocol(c, "undecodable Error", 0);
        break;
    }
    case PL_CLIENT_REC_TOKENIZE_RESULT: {
        Picolm__V1__TokenizeResult *m = picolm__v1__tokenize_result__unpack(a, len, data);
        r = m ? on_tokenize_result(c, m) : protocol(c, "undecodable TokenizeResult", 0);
        break;
    }
    case PL_CLIENT_REC_DETOKENIZE_RESULT: {
        Picolm__V1__DetokenizeResult *m = picolm__v1__detokenize_result__unpack(a, len, data);
        r = m ? on_detokenize_result(c, m) : protocol(c, "undecodable DetokenizeResult", 0);
        break;
    }
    case PL_CLIENT_REC_MODEL_INFO: {
        Picolm__V1__ModelInfo *m = picolm__v1__model_info__unpack(a, len, data);
        r = m ? on_model_info(c, m) : protocol(c, "undecodable ModelInfo", 0);
        break;
    }
    default:
        r = kill_client(c, PICOLM_E_PROTOCOL, "protocol violation by the broker: record type %u",
                        type);
        break;
    }
    return r;
}

/* ---- Driving the connection ---- */

/* Read and apply every completion available now. Returns the number of records handled, or a
 * status that killed the client. */
static int pump(struct picolm_client *c) {
    int n = 0;
    while (n < PUMP_BATCH) {
        uint32_t type, len;
        int r = pl_client_conn_read(&c->conn, &type, &len);
        if (r < 0)
            return kill_client(c, PICOLM_E_PROTOCOL,
                               "protocol violation by the broker: corrupt completion ring");
        if (r == 0)
            break;
        r = dispatch(c, type, len);
        if (r < 0)
            return r;
        n++;
    }
    if (n) {
        int r = pl_client_conn_release(&c->conn);
        if (r < 0)
            return kill_client(c, status_of(r), "cannot hand ring space back: %s", pl_strerror(r));
    }
    return n;
}

static int wait_failed(struct picolm_client *c, int r) {
    if (r == -ETIMEDOUT)
        return fail(c, PICOLM_E_TIMEOUT, "no answer from the broker within %d ms",
                    c->conn.timeout_ms);
    if (r == -PL_ERR_GONE)
        return kill_client(c, PICOLM_E_BROKER_GONE, "the broker closed the connection");
    return kill_client(c, status_of(r), "waiting for the broker failed: %s", pl_strerror(r));
}

/* Drive the connection until q is done or has a queued chunk. Returns PICOLM_OK (look at q),
 * or PICOLM_E_TIMEOUT (q is still in flight). Other failures finish q with their status. */
static int progress(struct picolm_client *c, struct req *q) {
    for (;;) {
        if (q->done || q->q.head != q->q.tail)
            return PICOLM_OK;
        int n = pump(c);
        if (n < 0 && !q->done) /* q was not registered: finish it with the kill's status */
            req_finish(c, q, c->dead, c->dead_msg);
        if (n < 0 || q->done)
            continue;
        if (n > 0)
            continue;
        int r = pl_client_conn_wait(&c->conn, 0);
        if (r < 0) {
            r = wait_failed(c, r);
            if (r == PICOLM_E_TIMEOUT)
                return r;
        }
    }
}

/* Send msg as a record of type from the owner thread, draining completions while the
 * submission ring is full. Returns PICOLM_OK or a status (the client may have been killed). */
static int send_owner(struct picolm_client *c, uint32_t type, const ProtobufCMessage *msg) {
    for (;;) {
        if (c->dead)
            return fail(c, c->dead, "%s", c->dead_msg);
        uint32_t need = 0;
        int r = pl_client_conn_send(&c->conn, type, msg, true, &need);
        if (r == 0)
            return PICOLM_OK;
        if (r == -EMSGSIZE)
            return fail(c, PICOLM_E_INVALID,
                        "request too large for one record (at most %u bytes encoded)",
                        pl_ipc_ring_max_payload(&c->conn.sq));
        if (r != -EAGAIN)
            return r == -PL_ERR_GONE
                       ? kill_client(c, PICOLM_E_BROKER_GONE, "the broker closed the connection")
                       : kill_client(c, status_of(r), "submission failed: %s", pl_strerror(r));
        int n = pump(c);
        if (n < 0)
            return n;
        if (n > 0)
            continue;
        r = pl_client_conn_wait(&c->conn, need);
        if (r < 0)
            return wait_failed(c, r);
    }
}

/* Register q under a new id and submit msg (whose request_id field is set through id_field).
 * On failure q is not registered. */
static int submit(struct picolm_client *c, struct req *q, uint32_t type, ProtobufCMessage *msg,
                  uint64_t *id_field) {
    if (c->dead)
        return fail(c, c->dead, "%s", c->dead_msg);
    if (table_reserve(c) < 0)
        return fail(c, PICOLM_E_NOMEM, "out of memory");
    q->id = atomic_fetch_add_explicit(&c->last_id, 1, memory_order_relaxed) + 1;
    *id_field = q->id;
    int r = send_owner(c, type, msg);
    if (r < 0)
        return r;
    c->inflight[c->n_inflight++] = q;
    return PICOLM_OK;
}

/* A blocking call: wait for q to finish. On timeout q is given up (unregistered). */
static int finish_blocking(struct picolm_client *c, struct req *q) {
    while (!q->done) {
        int r = progress(c, q);
        if (r == PICOLM_E_TIMEOUT) {
            table_remove(c, q);
            return r;
        }
    }
    if (q->status != PICOLM_OK)
        return fail(c, q->status, "%s", q->msg[0] ? q->msg : picolm_strerror(q->status));
    c->err[0] = '\0';
    return PICOLM_OK;
}

/* ---- Connection ---- */

static uint64_t env_spin_ns(void) {
    const char *s = getenv("PICOLM_SPIN_NS");
    if (!s || !*s)
        return DEFAULT_SPIN_NS;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v > MAX_SPIN_NS)
        return DEFAULT_SPIN_NS;
    return v;
}

PL_EXPORT int picolm_connect_ex(const char *socket_path, picolm_client **ret, char *err,
                                size_t err_len) {
    if (err && err_len)
        err[0] = '\0';
    if (!ret) {
        if (err && err_len)
            (void)snprintf(err, err_len, "ret is NULL");
        return PICOLM_E_INVALID;
    }
    const char *path = socket_path;
    if (!path) {
        path = getenv("PICOLM_SOCKET");
        if (!path || !*path)
            path = PICOLM_DEFAULT_SOCKET;
    }
    struct picolm_client *c = calloc(1, sizeof(*c));
    if (!c) {
        if (err && err_len)
            (void)snprintf(err, err_len, "out of memory");
        return PICOLM_E_NOMEM;
    }
    int r = pl_client_arena_init(&c->arena, ARENA_INITIAL_BYTES, ARENA_LIMIT_BYTES);
    if (r < 0) {
        free(c);
        if (err && err_len)
            (void)snprintf(err, err_len, "out of memory");
        return PICOLM_E_NOMEM;
    }
    r = pl_client_conn_open(&c->conn, path, err, err_len);
    if (r < 0) {
        pl_client_arena_done(&c->arena);
        free(c);
        return status_of(r);
    }
    c->conn.spin_ns = env_spin_ns();
    *ret = c;
    return PICOLM_OK;
}

PL_EXPORT int picolm_connect(const char *socket_path, picolm_client **ret) {
    return picolm_connect_ex(socket_path, ret, NULL, 0);
}

PL_EXPORT void picolm_close(picolm_client *c) {
    if (!c)
        return;
    while (c->streams) {
        struct picolm_stream *s = c->streams;
        c->streams = s->next;
        queue_done(&s->req.q);
        free(s);
    }
    pl_client_conn_close(&c->conn);
    pl_client_arena_done(&c->arena);
    free(c->inflight);
    free(c);
}

PL_EXPORT const char *picolm_last_error(const picolm_client *c) {
    return c ? c->err : "";
}

PL_EXPORT uint64_t picolm_session_id(const picolm_client *c) {
    return c ? c->conn.session_id : 0;
}

PL_EXPORT int picolm_set_spin(picolm_client *c, uint64_t spin_ns) {
    if (!c)
        return PICOLM_E_INVALID;
    if (spin_ns > MAX_SPIN_NS)
        return fail(c, PICOLM_E_INVALID, "spin_ns above one second");
    c->conn.spin_ns = spin_ns;
    return PICOLM_OK;
}

PL_EXPORT int picolm_set_timeout(picolm_client *c, int timeout_ms) {
    if (!c)
        return PICOLM_E_INVALID;
    if (timeout_ms < -1)
        return fail(c, PICOLM_E_INVALID, "timeout_ms below -1");
    c->conn.timeout_ms = timeout_ms;
    return PICOLM_OK;
}

/* ---- Extensible structs ---- */

/* Copy a caller's input struct of src_size bytes into dst (known_bytes; the bytes a smaller
 * struct lacks are zero). Returns PICOLM_OK, PICOLM_E_INVALID (smaller than the first layout,
 * min_bytes) or PICOLM_E_UNSUPPORTED (larger, with non-zero bytes this library does not
 * know). */
static int copy_in(void *dst, size_t known_bytes, size_t min_bytes, const void *src,
                   size_t src_size) {
    if (src_size < min_bytes)
        return PICOLM_E_INVALID;
    for (size_t i = known_bytes; i < src_size; i++)
        if (((const uint8_t *)src)[i])
            return PICOLM_E_UNSUPPORTED;
    memset(dst, 0, known_bytes);
    memcpy(dst, src, PL_MIN(src_size, known_bytes));
    return PICOLM_OK;
}

/* Whether s is well-formed UTF-8 (what protobuf-c checks when the broker decodes a string
 * field: a bad one would end the session instead of failing the request). */
static bool str_ok(const char *s) {
    return pl_utf8_valid(s, strlen(s));
}

/* Write a full output struct into the caller's, up to the caller's size, keeping its size. */
static void copy_out(void *dst, const void *src, size_t known_bytes) {
    size_t size;
    memcpy(&size, dst, sizeof(size));
    memcpy(dst, src, PL_MIN(size, known_bytes));
    memcpy(dst, &size, sizeof(size));
}

/* ---- Generation ---- */

PL_EXPORT void picolm_generate_params_init(struct picolm_generate_params *p) {
    if (!p)
        return;
    *p = (struct picolm_generate_params){
        .size = sizeof(*p),
        .sampling = {.temperature = 0.8f,
                     .top_k = 40,
                     .top_p = 0.95f,
                     .min_p = 0.05f,
                     .repeat_penalty = 1.0f,
                     .penalty_last_n = 64},
    };
}

#define STOP_INLINE 8

PL_EXPORT int picolm_stream_start(picolm_client *c, const struct picolm_generate_params *params,
                                  picolm_stream **ret) {
    if (!c)
        return PICOLM_E_INVALID;
    if (!params || !ret)
        return fail(c, PICOLM_E_INVALID, "params and ret must not be NULL");
    struct picolm_generate_params p;
    int r = copy_in(&p, sizeof(p), PICOLM_GENERATE_PARAMS_SIZE_V0, params, params->size);
    if (r < 0)
        return fail(c, r, "params->size %zu does not match this library (%zu)", params->size,
                    sizeof(p));
    if ((p.prompt != NULL) + (p.tokens != NULL) + (p.messages != NULL) != 1)
        return fail(c, PICOLM_E_INVALID, "give exactly one of prompt, tokens and messages");
    if (p.messages && (p.n_messages == 0 || p.n_messages > UINT32_MAX))
        return fail(c, PICOLM_E_INVALID, "n_messages must be in [1, 2^32)");
    if (!p.messages && p.n_messages)
        return fail(c, PICOLM_E_INVALID, "n_messages without messages");
    for (size_t i = 0; p.messages && i < p.n_messages; i++) {
        const struct picolm_message *m = &p.messages[i];
        if (!m->role || !m->role[0])
            return fail(c, PICOLM_E_INVALID, "messages[%zu].role is NULL or empty", i);
        if (!str_ok(m->role) || (m->content && !str_ok(m->content)))
            return fail(c, PICOLM_E_INVALID, "messages[%zu] is not valid UTF-8", i);
    }
    if (p.chat_template && p.chat_template[0] && !p.messages)
        return fail(c, PICOLM_E_INVALID, "chat_template applies to messages only");
    if ((p.chat_template && !str_ok(p.chat_template)) || (p.format && !str_ok(p.format)))
        return fail(c, PICOLM_E_INVALID, "chat_template or format is not valid UTF-8");
    if (!p.json_schema && p.json_schema_len)
        return fail(c, PICOLM_E_INVALID, "json_schema_len without json_schema");
    if (p.logprobs > MAX_TOP_LOGPROBS)
        return fail(c, PICOLM_E_INVALID, "logprobs above %u", MAX_TOP_LOGPROBS);
    if (p.reserved)
        return fail(c, PICOLM_E_INVALID, "reserved must be zero");
    if (p.tokens && (p.n_tokens == 0 || p.n_tokens > UINT32_MAX))
        return fail(c, PICOLM_E_INVALID, "n_tokens must be in [1, 2^32)");
    if (!p.tokens && p.n_tokens)
        return fail(c, PICOLM_E_INVALID, "n_tokens without tokens");
    if (p.flags & ~(PICOLM_GEN_IGNORE_EOS | PICOLM_GEN_NO_STREAM))
        return fail(c, PICOLM_E_INVALID, "unknown flags 0x%x", p.flags);
    if (p.sampling.reserved)
        return fail(c, PICOLM_E_INVALID, "sampling.reserved must be zero");
    if (p.n_stop && !p.stop)
        return fail(c, PICOLM_E_INVALID, "n_stop without stop");
    if (p.n_stop > 1024)
        return fail(c, PICOLM_E_INVALID, "too many stop strings (at most 1024)");
    for (size_t i = 0; i < p.n_stop; i++)
        if (!p.stop[i])
            return fail(c, PICOLM_E_INVALID, "stop[%zu] is NULL", i);
    if (p.tokens && !ids_valid(p.tokens, p.n_tokens))
        return fail(c, PICOLM_E_INVALID, "negative token id in tokens");
    if (c->dead)
        return fail(c, c->dead, "%s", c->dead_msg);

    struct picolm_stream *s = calloc(1, sizeof(*s));
    ProtobufCBinaryData stop_inline[STOP_INLINE];
    ProtobufCBinaryData *stops = stop_inline;
    if (p.n_stop > STOP_INLINE)
        stops = malloc(p.n_stop * sizeof(*stops));
    if (!s || !stops) {
        free(s);
        if (stops != stop_inline)
            free(stops);
        return fail(c, PICOLM_E_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < p.n_stop; i++)
        stops[i] = (ProtobufCBinaryData){.len = strlen(p.stop[i]), .data = (uint8_t *)p.stop[i]};

    Picolm__V1__SamplingParams sp;
    picolm__v1__sampling_params__init(&sp);
    sp.temperature = p.sampling.temperature;
    sp.top_k = p.sampling.top_k;
    sp.top_p = p.sampling.top_p;
    sp.min_p = p.sampling.min_p;
    sp.repeat_penalty = p.sampling.repeat_penalty;
    sp.penalty_last_n = p.sampling.penalty_last_n;
    sp.frequency_penalty = p.sampling.frequency_penalty;
    sp.presence_penalty = p.sampling.presence_penalty;
    sp.seed = p.sampling.seed;
    sp.has_seed = p.sampling.has_seed != 0;

    Picolm__V1__TokenList tl;
    picolm__v1__token_list__init(&tl);
    Picolm__V1__ChatMessages cm;
    picolm__v1__chat_messages__init(&cm);
    Picolm__V1__ChatMessage *msgs = NULL, **msg_ptrs = NULL;
    Picolm__V1__Generate g;
    picolm__v1__generate__init(&g);
    if (p.prompt) {
        g.input_case = PICOLM__V1__GENERATE__INPUT_PROMPT;
        g.prompt.data = (uint8_t *)p.prompt;
        g.prompt.len = p.prompt_len ? p.prompt_len : strlen(p.prompt);
    } else if (p.messages) {
        msgs = calloc(p.n_messages, sizeof(*msgs));
        msg_ptrs = calloc(p.n_messages, sizeof(*msg_ptrs));
        if (!msgs || !msg_ptrs) {
            r = fail(c, PICOLM_E_NOMEM, "out of memory");
            goto fail;
        }
        for (size_t i = 0; i < p.n_messages; i++) {
            picolm__v1__chat_message__init(&msgs[i]);
            /* Packing only reads the strings. */
            msgs[i].role = (char *)p.messages[i].role;
            msgs[i].content = (char *)(p.messages[i].content ? p.messages[i].content : "");
            msg_ptrs[i] = &msgs[i];
        }
        cm.n_messages = p.n_messages;
        cm.messages = msg_ptrs;
        cm.template_ = (char *)(p.chat_template ? p.chat_template : "");
        g.input_case = PICOLM__V1__GENERATE__INPUT_MESSAGES;
        g.messages = &cm;
    } else {
        tl.n_ids = p.n_tokens;
        tl.ids = (int32_t *)p.tokens; /* packing only reads it */
        g.input_case = PICOLM__V1__GENERATE__INPUT_TOKENS;
        g.tokens = &tl;
    }
    g.max_tokens = p.max_tokens;
    g.sampling = &sp;
    g.n_stop = p.n_stop;
    g.stop = p.n_stop ? stops : NULL;
    g.stream = !(p.flags & PICOLM_GEN_NO_STREAM);
    g.ignore_eos = (p.flags & PICOLM_GEN_IGNORE_EOS) != 0;
    g.logprobs = p.logprobs;
    g.format = (char *)(p.format ? p.format : "");
    if (p.json_schema) {
        g.json_schema.data = (uint8_t *)p.json_schema;
        g.json_schema.len = p.json_schema_len ? p.json_schema_len : strlen(p.json_schema);
    }

    s->client = c;
    s->req.kind = REQ_GENERATE;
    r = submit(c, &s->req, PL_CLIENT_REC_GENERATE, &g.base, &g.request_id);
fail:
    free(msgs);
    free(msg_ptrs);
    if (stops != stop_inline)
        free(stops);
    if (r < 0) {
        free(s);
        return r;
    }
    s->next = c->streams;
    if (c->streams)
        c->streams->prev = s;
    c->streams = s;
    c->err[0] = '\0';
    *ret = s;
    return PICOLM_OK;
}

PL_EXPORT uint64_t picolm_stream_id(const picolm_stream *s) {
    return s ? s->req.id : 0;
}

PL_EXPORT int picolm_stream_next(picolm_stream *s, struct picolm_chunk *ret_chunk) {
    if (!s)
        return PICOLM_E_INVALID;
    struct picolm_client *c = s->client;
    if (!ret_chunk)
        return fail(c, PICOLM_E_INVALID, "ret_chunk is NULL");
    for (;;) {
        if (queue_pop(&s->req.q, s->req.id, ret_chunk))
            return 1;
        if (s->req.done) {
            if (s->req.status == PICOLM_OK)
                return 0;
            return fail(c, s->req.status, "%s",
                        s->req.msg[0] ? s->req.msg : picolm_strerror(s->req.status));
        }
        int r = progress(c, &s->req);
        if (r < 0)
            return r;
    }
}

static int send_cancel(struct picolm_client *c, uint64_t id, bool owner) {
    Picolm__V1__Cancel m;
    picolm__v1__cancel__init(&m);
    m.request_id = id;
    if (owner)
        return send_owner(c, PL_CLIENT_REC_CANCEL, &m.base);
    int r = pl_client_conn_send(&c->conn, PL_CLIENT_REC_CANCEL, &m.base, false, NULL);
    return r < 0 ? status_of(r) : PICOLM_OK;
}

static void stream_free(struct picolm_stream *s) {
    struct picolm_client *c = s->client;
    table_remove(c, &s->req);
    if (s->prev)
        s->prev->next = s->next;
    else
        c->streams = s->next;
    if (s->next)
        s->next->prev = s->prev;
    queue_done(&s->req.q);
    free(s);
}

PL_EXPORT int picolm_stream_end(picolm_stream *s, struct picolm_result *ret) {
    if (!s)
        return PICOLM_E_INVALID;
    struct picolm_client *c = s->client;
    bool bad_ret = ret && ret->size < sizeof(*ret);
    int status;
    if (!s->req.done && !s->cancel_sent && !c->dead) {
        s->cancel_sent = true;
        (void)send_cancel(c, s->req.id, true); /* a failure kills the client and finishes s */
    }
    status = PICOLM_OK;
    while (!s->req.done) {
        queue_clear(&s->req.q); /* nobody will read them */
        if (progress(c, &s->req) == PICOLM_E_TIMEOUT) {
            status = PICOLM_E_TIMEOUT;
            break;
        }
    }
    if (s->req.done) {
        status = s->req.status;
        if (ret && !bad_ret && s->req.have_result)
            copy_out(ret, &s->req.result, sizeof(*ret));
    }
    if (status == PICOLM_OK)
        c->err[0] = '\0';
    else if (status == PICOLM_E_TIMEOUT)
        (void)fail(c, status, "the broker did not confirm the end within %d ms",
                   c->conn.timeout_ms);
    else
        (void)fail(c, status, "%s", s->req.msg[0] ? s->req.msg : picolm_strerror(status));
    stream_free(s);
    if (bad_ret)
        return fail(c, PICOLM_E_INVALID, "ret->size too small (the stream was ended)");
    return status;
}

PL_EXPORT int picolm_cancel(picolm_client *c, uint64_t request_id) {
    if (!c)
        return PICOLM_E_INVALID;
    if (request_id == 0 || request_id > atomic_load_explicit(&c->last_id, memory_order_relaxed))
        return PICOLM_E_NOT_FOUND; /* no message: c->err belongs to the owner thread */
    return send_cancel(c, request_id, false);
}

PL_EXPORT int picolm_generate(picolm_client *c, const struct picolm_generate_params *params,
                              picolm_token_cb cb, void *user, struct picolm_result *ret) {
    if (!c)
        return PICOLM_E_INVALID;
    if (ret && ret->size < sizeof(*ret))
        return fail(c, PICOLM_E_INVALID, "ret->size too small");
    picolm_stream *s;
    int r = picolm_stream_start(c, params, &s);
    if (r < 0)
        return r;
    bool stopped = false;
    struct picolm_chunk ch;
    while ((r = picolm_stream_next(s, &ch)) == 1) {
        if (cb && cb(user, &ch) != 0) {
            stopped = true;
            break;
        }
    }
    if (r == PICOLM_E_TIMEOUT) {
        /* Give the request up: ask the broker to stop it and forget it. */
        (void)send_cancel(c, s->req.id, true);
        stream_free(s);
        return fail(c, PICOLM_E_TIMEOUT, "no answer from the broker within %d ms",
                    c->conn.timeout_ms);
    }
    r = picolm_stream_end(s, ret);
    if (stopped && (r == PICOLM_OK || r == PICOLM_E_CANCELLED))
        return fail(c, PICOLM_E_CANCELLED, "the callback stopped the generation");
    return r;
}

/* ---- Tokenizer and model ---- */

PL_EXPORT int picolm_tokenize(picolm_client *c, const char *text, size_t len, uint32_t flags,
                              int32_t *ids, size_t cap, size_t *ret_n) {
    if (!c)
        return PICOLM_E_INVALID;
    if (!text || !ret_n || (cap && !ids))
        return fail(c, PICOLM_E_INVALID, "text, ret_n (and ids when cap > 0) must be set");
    if (flags & ~(PICOLM_TOK_ADD_SPECIAL | PICOLM_TOK_PARSE_SPECIAL))
        return fail(c, PICOLM_E_INVALID, "unknown flags 0x%x", flags);
    Picolm__V1__Tokenize m;
    picolm__v1__tokenize__init(&m);
    m.text.data = (uint8_t *)text;
    m.text.len = len ? len : strlen(text);
    m.add_special = (flags & PICOLM_TOK_ADD_SPECIAL) != 0;
    m.parse_special = (flags & PICOLM_TOK_PARSE_SPECIAL) != 0;
    struct req q = {.kind = REQ_TOKENIZE, .ids = ids, .ids_cap = cap};
    int r = submit(c, &q, PL_CLIENT_REC_TOKENIZE, &m.base, &m.request_id);
    if (r < 0)
        return r;
    r = finish_blocking(c, &q);
    if (r == PICOLM_OK || r == PICOLM_E_RANGE)
        *ret_n = q.n_ids;
    return r;
}

PL_EXPORT int picolm_detokenize(picolm_client *c, const int32_t *ids, size_t n_ids, char *buf,
                                size_t cap, size_t *ret_len) {
    if (!c)
        return PICOLM_E_INVALID;
    if ((n_ids && !ids) || !ret_len || (cap && !buf))
        return fail(c, PICOLM_E_INVALID,
                    "ids (when n_ids > 0), ret_len (and buf when cap > 0) "
                    "must be set");
    Picolm__V1__Detokenize m;
    picolm__v1__detokenize__init(&m);
    m.n_ids = n_ids;
    m.ids = (int32_t *)ids; /* packing only reads it */
    struct req q = {.kind = REQ_DETOKENIZE, .text = buf, .text_cap = cap};
    int r = submit(c, &q, PL_CLIENT_REC_DETOKENIZE, &m.base, &m.request_id);
    if (r < 0)
        return r;
    r = finish_blocking(c, &q);
    if (r == PICOLM_OK || r == PICOLM_E_RANGE)
        *ret_len = q.text_len;
    return r;
}

PL_EXPORT int picolm_model_info(picolm_client *c, struct picolm_model_info *ret) {
    if (!c)
        return PICOLM_E_INVALID;
    if (!ret || ret->size < sizeof(*ret))
        return fail(c, PICOLM_E_INVALID, "ret is NULL or ret->size too small");
    struct picolm_model_info full;
    Picolm__V1__ModelInfoRequest m;
    picolm__v1__model_info_request__init(&m);
    struct req q = {.kind = REQ_MODEL_INFO, .info = &full};
    int r = submit(c, &q, PL_CLIENT_REC_MODEL_INFO_REQUEST, &m.base, &m.request_id);
    if (r < 0)
        return r;
    r = finish_blocking(c, &q);
    if (r == PICOLM_OK)
        copy_out(ret, &full, sizeof(full));
    return r;
}
