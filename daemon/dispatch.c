/* SPDX-License-Identifier: MIT */
/* Client record dispatch on the event thread. Each record is copied out of the shared ring
 * into private memory (pl_ipc_ring_read), checked against its type's size limit, unpacked
 * with the session's bounded arena allocator, validated, and then either handed to the
 * scheduler (Generate), acted on (Cancel), or answered through the session's outbox
 * (Tokenize, Detokenize, ModelInfo, every Error): the completion ring has exactly one writer,
 * the inference thread. Invalid requests get an Error with a stable code; a malformed record,
 * an unknown type or an oversized record ends the session (STYLE.md §8). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "dispatch.h"
#include "pl/engine_chat.h"
#include "pl/engine_gguf.h"
#include "pl/engine_model.h"
#include "pl/engine_sampler.h"
#include "pl/engine_tokenizer.h"
#include "pl/ipc_doorbell.h"
#include "pl/ipc_ring.h"
#include "pl/picolm.pb-c.h"
#include "pl/pl_err.h"
#include "pl/pl_log.h"
#include "pl/pl_util.h"
#include "records.h"
#include "request_features.h"
#include "scheduler.h"
#include "stats.h"

#define E_INVALID PICOLM__V1__ERROR_CODE__ERROR_CODE_INVALID_ARGUMENT
#define E_EXHAUSTED PICOLM__V1__ERROR_CODE__ERROR_CODE_RESOURCE_EXHAUSTED
#define E_OVERFLOW PICOLM__V1__ERROR_CODE__ERROR_CODE_CONTEXT_OVERFLOW
#define E_UNKNOWN PICOLM__V1__ERROR_CODE__ERROR_CODE_UNKNOWN_REQUEST
#define E_SHUTDOWN PICOLM__V1__ERROR_CODE__ERROR_CODE_SHUTTING_DOWN
#define E_INTERNAL PICOLM__V1__ERROR_CODE__ERROR_CODE_INTERNAL
#define E_QUOTA PICOLM__V1__ERROR_CODE__ERROR_CODE_QUOTA_EXCEEDED
#define E_UNSUPPORTED PICOLM__V1__ERROR_CODE__ERROR_CODE_UNSUPPORTED

#define MAX_TOKENIZE_TEXT 4096u
_Static_assert(PL_TOKENIZER_MAX_IDS(MAX_TOKENIZE_TEXT) <= PL_DAEMON_MAX_RECORD,
               "scratch_ids holds a Tokenize reply's ids");
#define MAX_DETOKENIZE_IDS 4096u

/* ---- Replies through the outbox ---- */

/* Packs m into the session's outbox. The caller made sure the outbox has room (one reply at
 * most per record). Returns 0, or -EMSGSIZE (nothing sent) when m does not fit a record. */
static int put_reply(struct pl_daemon *d, struct pl_daemon_session *s, uint32_t type,
                     const ProtobufCMessage *m) {
    struct pl_daemon_outbox_slot *o = pl_daemon_session_outbox_next(s);
    size_t len = protobuf_c_message_get_packed_size(m);
    if (len > PL_DAEMON_MAX_RECORD - PL_IPC_REC_HDR_BYTES)
        return -EMSGSIZE;
    o->type = type;
    o->len = (uint32_t)protobuf_c_message_pack(m, o->buf);
    pl_daemon_session_outbox_commit(s);
    if (!atomic_exchange_explicit(&s->outbox_signalled, true, memory_order_seq_cst))
        if (pl_daemon_sched_send(d->sched, PL_DAEMON_CMD_OUTBOX, s) < 0)
            pl_log_err("scheduler queue full (sizing bug)");
    return 0;
}

/* An Error for request req_id (its constant message always fits a record). */
static int reply_error(struct pl_daemon *d, struct pl_daemon_session *s, uint64_t req_id, int code,
                       const char *msg) {
    Picolm__V1__Error e = PICOLM__V1__ERROR__INIT;
    e.request_id = req_id;
    e.code = (Picolm__V1__ErrorCode)code;
    e.message = (char *)msg;
    pl_log_debug("session %llu: request %llu: %s", (unsigned long long)s->id,
                 (unsigned long long)req_id, msg);
    (void)put_reply(d, s, PL_DAEMON_REC_ERROR, &e.base);
    return 0;
}

/* The answer m to request req_id; one that does not fit a record becomes an Error for the
 * request, so the client never waits for a reply that was dropped (Tokenize can get there:
 * up to 3 ids a byte of text, each a varint of up to 3 bytes). */
static void reply(struct pl_daemon *d, struct pl_daemon_session *s, uint64_t req_id, uint32_t type,
                  const ProtobufCMessage *m) {
    if (put_reply(d, s, type, m) == -EMSGSIZE)
        (void)reply_error(d, s, req_id, E_INVALID,
                          "the reply does not fit one record (32 KiB): ask for less");
}

/* ---- Generate ---- */

static uint64_t pick_seed(struct pl_daemon *d) {
    /* splitmix64 over a state seeded at start-up: no syscall per request. */
    uint64_t z = (d->seed_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int sampling_params(const Picolm__V1__SamplingParams *sp, struct pl_sampler_params *p) {
    memset(p, 0, sizeof(*p));
    p->top_p = 1.0f;
    p->repeat_penalty = 1.0f;
    if (!sp)
        return 0; /* all defaults: greedy, no filters */
    p->temp = sp->temperature > 0.0f ? sp->temperature : 0.0f;
    if (sp->temperature != sp->temperature)
        return -EINVAL; /* NaN */
    p->top_k = sp->top_k > 0 ? sp->top_k : 0;
    p->top_p = (sp->top_p == 0.0f || sp->top_p >= 1.0f) ? 1.0f : sp->top_p;
    p->min_p = sp->min_p > 0.0f ? sp->min_p : 0.0f;
    p->repeat_penalty = (sp->repeat_penalty == 0.0f) ? 1.0f : sp->repeat_penalty;
    p->freq_penalty = sp->frequency_penalty;
    p->presence_penalty = sp->presence_penalty;
    if (sp->penalty_last_n < 0)
        return -EINVAL;
    p->penalty_last_n = sp->penalty_last_n;
    if (p->penalty_last_n == 0 &&
        (p->repeat_penalty != 1.0f || p->freq_penalty != 0.0f || p->presence_penalty != 0.0f))
        p->penalty_last_n = 64;
    return pl_sampler_params_check(p);
}

int pl_daemon_dispatch_check_generate(const Picolm__V1__Generate *g,
                                      struct pl_sampler_params *ret_sp, const char **ret_msg) {
    if (g->logprobs > PL_DAEMON_MAX_TOP_LOGPROBS)
        return *ret_msg = "logprobs: at most 20 alternatives per token", E_INVALID;
    if (g->format && g->format[0] && strcmp(g->format, "json") != 0)
        return *ret_msg = "format: \"json\" or empty", E_INVALID;
    if (g->json_schema.len > PL_DAEMON_MAX_SCHEMA)
        return *ret_msg = "json_schema: over 16384 bytes", E_INVALID;
    if (g->input_case == PICOLM__V1__GENERATE__INPUT_MESSAGES &&
        (!g->messages || g->messages->n_messages == 0 ||
         g->messages->n_messages > PL_DAEMON_MAX_MSGS))
        return *ret_msg = "messages: between 1 and 1024 messages", E_INVALID;
    if (g->n_stop > PL_DAEMON_MAX_STOP)
        return *ret_msg = "too many stop strings (max 16)", E_INVALID;
    for (size_t i = 0; i < g->n_stop; i++)
        if (g->stop[i].len == 0 || g->stop[i].len > PL_DAEMON_MAX_STOP_LEN)
            return *ret_msg = "a stop string is empty or over 256 bytes", E_INVALID;
    if (sampling_params(g->sampling, ret_sp) < 0)
        return *ret_msg = "sampling parameters out of range", E_INVALID;
    return 0;
}

/* Render and tokenize a Generate's messages into out (n_ctx ids). Returns 0 or the error of
 * pl_daemon_features_render_chat() with a message for the client in err. */
static int chat_prompt(struct pl_daemon *d, const Picolm__V1__ChatMessages *cm, int32_t *out,
                       size_t *ret_n, int *ret_family, char *err, size_t err_len) {
    struct pl_daemon_chat_msg msgs[64];
    struct pl_daemon_chat_msg *m = msgs;
    int r = 0;
    if (cm->n_messages > sizeof(msgs) / sizeof(msgs[0])) {
        m = calloc(cm->n_messages, sizeof(*m));
        if (!m)
            return -ENOMEM;
    }
    for (size_t i = 0; i < cm->n_messages; i++) {
        if (!cm->messages[i]) {
            (void)snprintf(err, err_len, "messages[%zu]: missing", i);
            r = -EINVAL;
            goto out;
        }
        m[i].role = cm->messages[i]->role;
        m[i].content = cm->messages[i]->content;
    }
    /* Untrusted strings (protobuf-c checked them as UTF-8): the renderer validates roles,
     * their order and the sizes. */
    r = pl_daemon_features_render_chat(pl_daemon_sched_features(d->sched), m, cm->n_messages,
                                       cm->template_, out, d->n_ctx, ret_n, ret_family, err,
                                       err_len);
out:
    if (m != msgs)
        free(m);
    return r;
}

/* Stop strings (the request's, then the chat family's end-of-turn strings while there is
 * room), the output grammar and logprobs of a checked Generate. Returns 0 or a negative
 * code with a message for the client in err; the caller frees q->feat on error. */
static int request_features(struct pl_daemon *d, const Picolm__V1__Generate *g,
                            struct pl_daemon_req *q, int chat_family, char *err, size_t err_len) {
    const char *strs[PL_DAEMON_MAX_STOP];
    size_t lens[PL_DAEMON_MAX_STOP], n = 0;
    int r;
    pl_daemon_reqfeat_init(&q->feat);
    for (size_t i = 0; i < g->n_stop && n < PL_DAEMON_MAX_STOP; i++, n++) {
        strs[n] = (const char *)g->stop[i].data;
        lens[n] = g->stop[i].len;
    }
    if (chat_family > 0) {
        size_t nf = 0;
        const char *const *fs = pl_chat_stop_strings((enum pl_chat_family)chat_family, &nf);
        for (size_t i = 0; i < nf && n < PL_DAEMON_MAX_STOP; i++, n++) {
            strs[n] = fs[i];
            lens[n] = strlen(fs[i]);
        }
    }
    r = pl_daemon_reqfeat_set_stop(&q->feat, strs, lens, n);
    if (r < 0) {
        (void)snprintf(err, err_len, "stop strings: %s", pl_strerror(r));
        return r;
    }
    if ((g->format && g->format[0]) || g->json_schema.len > 0) {
        r = pl_daemon_reqfeat_set_grammar(&q->feat, pl_daemon_sched_features(d->sched),
                                          g->json_schema.len ? (const char *)g->json_schema.data
                                                             : NULL,
                                          g->json_schema.len, err, err_len);
        if (r < 0) {
            if (!err[0])
                (void)snprintf(err, err_len, "json_schema: %s", pl_strerror(r));
            return r == -ENOMEM ? r : -EINVAL;
        }
    }
    if (g->logprobs > 0) {
        r = pl_daemon_reqfeat_set_logprobs(&q->feat, g->logprobs, d->n_vocab);
        if (r < 0) {
            (void)snprintf(err, err_len, "out of memory for logprobs");
            return r;
        }
    }
    return 0;
}

static int on_generate(struct pl_daemon *d, struct pl_daemon_session *s,
                       const ProtobufCMessage *msg) {
    const Picolm__V1__Generate *g = (const Picolm__V1__Generate *)msg;
    const struct pl_tokenizer *tok = pl_model_tokenizer(d->model);
    struct pl_sampler_params sp;
    uint64_t id = g->request_id;

    if (id == 0)
        return reply_error(d, s, 0, E_INVALID, "request_id must not be 0");
    if (d->draining)
        return reply_error(d, s, id, E_SHUTDOWN, "the daemon is shutting down");
    if (pl_daemon_session_req_find(s, id))
        return reply_error(d, s, id, E_INVALID, "request_id is already in flight");
    const char *why = NULL;
    int code = pl_daemon_dispatch_check_generate(g, &sp, &why);
    if (code != 0)
        return reply_error(d, s, id, code, why);

    struct pl_daemon_req *q = pl_daemon_session_req_alloc(s);
    if (!q)
        return reply_error(d, s, id, E_EXHAUSTED,
                           "too many requests in flight on this session (max_requests)");

    size_t n = 0;
    int chat_family = 0;
    char emsg[256] = "";
    switch (g->input_case) {
    case PICOLM__V1__GENERATE__INPUT_PROMPT: {
        int r = pl_tokenizer_encode(tok, (const char *)g->prompt.data, g->prompt.len, true, false,
                                    q->prompt, d->n_ctx, &n);
        if (r == -ENOSPC)
            return reply_error(d, s, id, E_OVERFLOW, "the prompt is longer than the context");
        if (r < 0)
            return reply_error(d, s, id, E_INVALID, "the prompt cannot be tokenized");
        break;
    }
    case PICOLM__V1__GENERATE__INPUT_TOKENS: {
        const Picolm__V1__TokenList *tl = g->tokens;
        if (!tl || tl->n_ids == 0)
            return reply_error(d, s, id, E_INVALID, "empty token list");
        if (tl->n_ids > d->n_ctx)
            return reply_error(d, s, id, E_OVERFLOW, "the prompt is longer than the context");
        for (size_t i = 0; i < tl->n_ids; i++) {
            if (tl->ids[i] < 0 || (uint32_t)tl->ids[i] >= d->n_vocab)
                return reply_error(d, s, id, E_INVALID, "a token id is out of range");
            q->prompt[i] = tl->ids[i];
        }
        n = tl->n_ids;
        break;
    }
    case PICOLM__V1__GENERATE__INPUT_MESSAGES: {
        int r = chat_prompt(d, g->messages, q->prompt, &n, &chat_family, emsg, sizeof(emsg));
        if (r == -ENOSPC)
            return reply_error(d, s, id, E_OVERFLOW, emsg);
        if (r == -ENOMEM)
            return reply_error(d, s, id, E_INTERNAL, "out of memory for the conversation");
        if (r == -PL_ERR_UNSUPPORTED)
            return reply_error(d, s, id, E_UNSUPPORTED, emsg);
        if (r < 0)
            return reply_error(d, s, id, E_INVALID, emsg);
        break;
    }
    case PICOLM__V1__GENERATE__INPUT__NOT_SET:
    case _PICOLM__V1__GENERATE__INPUT__CASE_IS_INT_SIZE:
    default:
        return reply_error(d, s, id, E_INVALID, "no prompt: set prompt or tokens");
    }
    if (n == 0)
        return reply_error(d, s, id, E_INVALID, "the prompt is empty");
    if (n >= d->n_ctx)
        return reply_error(d, s, id, E_OVERFLOW,
                           "the prompt leaves no room in the context for a new token");

    uint32_t room = d->n_ctx - (uint32_t)n;
    q->id = id;
    q->n_prompt = (uint32_t)n;
    q->max_is_ctx = g->max_tokens == 0 || g->max_tokens > room;
    q->max_new = g->max_tokens == 0 ? room : PL_MIN(g->max_tokens, room);
    /* The caller's policy: prompt, new-token and context limits (max_tokens 0 is capped). */
    uint32_t cap;
    char qmsg[160];
    if (pl_daemon_access_request_check(&d->access, s, q->n_prompt, g->max_tokens, &cap, qmsg,
                                       sizeof(qmsg)) < 0)
        return reply_error(d, s, id, E_QUOTA, qmsg);
    if (q->max_new > cap) {
        q->max_new = cap;
        q->max_is_ctx = false;
    }
    q->n_need = q->n_prompt + q->max_new;
    q->stream = g->stream;
    q->ignore_eos = g->ignore_eos;
    q->seed = (g->sampling && g->sampling->has_seed) ? g->sampling->seed : pick_seed(d);
    sp.seed = q->seed;
    int fr = request_features(d, g, q, chat_family, emsg, sizeof(emsg));
    if (fr < 0) {
        pl_daemon_reqfeat_done(&q->feat);
        return reply_error(d, s, id, fr == -ENOMEM ? E_INTERNAL : E_INVALID, emsg);
    }
    if (pl_sampler_new(&sp, d->n_vocab, &q->sampler) < 0) {
        pl_daemon_reqfeat_done(&q->feat);
        return reply_error(d, s, id, E_INTERNAL, "out of memory for the sampler");
    }
    for (uint32_t i = 0; i < q->n_prompt; i++)
        pl_sampler_accept(q->sampler, q->prompt[i]);
    atomic_store_explicit(&q->cancel, false, memory_order_relaxed);
    atomic_store_explicit(&q->cancel_why, 0, memory_order_relaxed);
    /* Last check: the uid's queue (max_queued) and token bucket (prompt + max new tokens,
     * the unused part given back when the request ends). */
    if (pl_daemon_access_request_begin(&d->access, s, q, pl_daemon_now_ns(), qmsg, sizeof(qmsg)) <
        0) {
        pl_daemon_session_req_release(s, q);
        return reply_error(d, s, id, E_QUOTA, qmsg);
    }
    q->t_recv_ns = pl_daemon_now_ns();
    q->state = PL_DAEMON_REQ_SUBMITTED;
    s->n_inflight++;
    d->n_requests++;
    s->n_requests++;
    atomic_fetch_add_explicit(&s->tokens_in, q->n_prompt, memory_order_relaxed);
    pl_daemon_stats_add(d->stats, s->stats_ident, PL_DAEMON_CTR_REQUESTS, 1);
    pl_daemon_stats_add(d->stats, s->stats_ident, PL_DAEMON_CTR_TOKENS_IN, q->n_prompt);
    if (pl_daemon_sched_send(d->sched, PL_DAEMON_CMD_NEW, q) < 0) {
        pl_daemon_access_request_end(&d->access, q, 0, pl_daemon_now_ns());
        pl_daemon_session_req_release(s, q);
        return reply_error(d, s, id, E_INTERNAL, "scheduler queue full");
    }
    return 0;
}

/* ---- Cancel, Tokenize, Detokenize, ModelInfo ---- */

static int on_cancel(struct pl_daemon *d, struct pl_daemon_session *s,
                     const ProtobufCMessage *msg) {
    const Picolm__V1__Cancel *c = (const Picolm__V1__Cancel *)msg;
    struct pl_daemon_req *q = pl_daemon_session_req_find(s, c->request_id);
    if (!q)
        return reply_error(d, s, c->request_id, E_UNKNOWN, "no such request in flight");
    atomic_store_explicit(&q->cancel_why, 0, memory_order_relaxed);
    /* Release: pairs with the scheduler's acquire load of cancel in prepare(). */
    atomic_store_explicit(&q->cancel, true, memory_order_release);
    pl_daemon_sched_kick(d->sched);
    return 0;
}

static int on_tokenize(struct pl_daemon *d, struct pl_daemon_session *s,
                       const ProtobufCMessage *msg) {
    const Picolm__V1__Tokenize *t = (const Picolm__V1__Tokenize *)msg;
    size_t n = 0;
    if (t->text.len > MAX_TOKENIZE_TEXT)
        return reply_error(d, s, t->request_id, E_INVALID, "text over 4096 bytes");
    /* Up to 3 ids a byte (malformed UTF-8 around spaces, stray bytes): 4096 bytes once gave
     * more ids than the old cap of 4104, and the client an error for a valid text. */
    int r = pl_tokenizer_encode(pl_model_tokenizer(d->model), (const char *)t->text.data,
                                t->text.len, t->add_special, t->parse_special, d->scratch_ids,
                                PL_TOKENIZER_MAX_IDS(MAX_TOKENIZE_TEXT), &n);
    if (r < 0)
        return reply_error(d, s, t->request_id, E_INVALID, "the text cannot be tokenized");
    Picolm__V1__TokenizeResult res = PICOLM__V1__TOKENIZE_RESULT__INIT;
    res.request_id = t->request_id;
    res.n_ids = n;
    res.ids = d->scratch_ids;
    reply(d, s, t->request_id, PL_DAEMON_REC_TOKENIZE_RESULT, &res.base);
    return 0;
}

static int on_detokenize(struct pl_daemon *d, struct pl_daemon_session *s,
                         const ProtobufCMessage *msg) {
    const Picolm__V1__Detokenize *t = (const Picolm__V1__Detokenize *)msg;
    const struct pl_tokenizer *tok = pl_model_tokenizer(d->model);
    size_t len = 0, cap = PL_DAEMON_MAX_RECORD - 64;
    if (t->n_ids > MAX_DETOKENIZE_IDS)
        return reply_error(d, s, t->request_id, E_INVALID, "over 4096 ids");
    for (size_t i = 0; i < t->n_ids; i++) {
        if (t->ids[i] < 0 || (uint32_t)t->ids[i] >= d->n_vocab)
            return reply_error(d, s, t->request_id, E_INVALID, "a token id is out of range");
        int r = pl_tokenizer_piece(tok, t->ids[i], d->scratch_text + len, cap - len);
        if (r < 0)
            return reply_error(d, s, t->request_id, E_INVALID, "the text is too long");
        len += (size_t)r;
    }
    Picolm__V1__DetokenizeResult res = PICOLM__V1__DETOKENIZE_RESULT__INIT;
    res.request_id = t->request_id;
    res.text.len = len;
    res.text.data = (uint8_t *)d->scratch_text;
    reply(d, s, t->request_id, PL_DAEMON_REC_DETOKENIZE_RESULT, &res.base);
    return 0;
}

static int on_model_info(struct pl_daemon *d, struct pl_daemon_session *s,
                         const ProtobufCMessage *msg) {
    const Picolm__V1__ModelInfoRequest *mi = (const Picolm__V1__ModelInfoRequest *)msg;
    const struct pl_model_hparams *hp = pl_model_hparams(d->model);
    const struct pl_tokenizer *tok = pl_model_tokenizer(d->model);
    Picolm__V1__ModelInfo res = PICOLM__V1__MODEL_INFO__INIT;
    res.request_id = mi->request_id;
    res.name = d->model_name;
    res.architecture = (char *)hp->arch;
    res.n_vocab = hp->n_vocab;
    res.n_ctx = d->n_ctx;
    res.n_embd = hp->n_embd;
    res.n_layer = hp->n_layer;
    res.n_head = hp->n_head;
    res.n_head_kv = hp->n_head_kv;
    res.n_params = hp->n_params;
    res.file_bytes = pl_gguf_file_size(pl_model_gguf(d->model));
    res.tokenizer = pl_tokenizer_kind(tok) == PL_TOKENIZER_BPE ? "gpt2" : "llama";
    res.bos = pl_tokenizer_bos(tok);
    res.eos = pl_tokenizer_eos(tok);
    reply(d, s, mi->request_id, PL_DAEMON_REC_MODEL_INFO, &res.base);
    return 0;
}

/* ---- The table ---- */

typedef int (*handler_fn)(struct pl_daemon *, struct pl_daemon_session *, const ProtobufCMessage *);

struct rule {
    uint32_t states;  /* bit per enum pl_daemon_session_state */
    uint32_t max_len; /* payload bytes */
    const ProtobufCMessageDescriptor *desc;
    handler_fn fn;
};

#define OPEN (1u << PL_DAEMON_SESSION_OPEN)
static const struct rule rules[_PL_DAEMON_REC_CLIENT_MAX] = {
    [PL_DAEMON_REC_GENERATE] = {OPEN, PL_DAEMON_MAX_RECORD, &picolm__v1__generate__descriptor,
                                on_generate},
    [PL_DAEMON_REC_CANCEL] = {OPEN, 64, &picolm__v1__cancel__descriptor, on_cancel},
    [PL_DAEMON_REC_TOKENIZE] = {OPEN, MAX_TOKENIZE_TEXT + 64, &picolm__v1__tokenize__descriptor,
                                on_tokenize},
    [PL_DAEMON_REC_DETOKENIZE] = {OPEN, MAX_DETOKENIZE_IDS * 5 + 64,
                                  &picolm__v1__detokenize__descriptor, on_detokenize},
    [PL_DAEMON_REC_MODEL_INFO_REQUEST] = {OPEN, 64, &picolm__v1__model_info_request__descriptor,
                                          on_model_info},
};

int pl_daemon_dispatch_decode(uint32_t type, uint32_t state, const uint8_t *buf, uint32_t len,
                              struct pl_daemon_arena *arena, ProtobufCMessage **ret_msg,
                              const char **ret_why) {
    if (type >= _PL_DAEMON_REC_CLIENT_MAX || !rules[type].fn)
        return *ret_why = "unknown record type", -PL_ERR_PROTOCOL;
    const struct rule *ru = &rules[type];
    if (state >= 32 || !(ru->states & (1u << state)))
        return *ret_why = "record not allowed in this state", -PL_ERR_PROTOCOL;
    if (len > ru->max_len)
        return *ret_why = "record over its type's size limit", -PL_ERR_PROTOCOL;
    pl_daemon_arena_reset(arena);
    ProtobufCMessage *m = protobuf_c_message_unpack(ru->desc, &arena->pb, len, buf);
    if (!m)
        return *ret_why = "malformed protobuf", -PL_ERR_PROTOCOL;
    *ret_msg = m;
    return 0;
}

static int protocol_error(struct pl_daemon *d, struct pl_daemon_session *s, const char *what,
                          uint32_t type, uint32_t len) {
    uint64_t suppressed;
    d->n_protocol_errors++;
    pl_daemon_stats_add(d->stats, s->stats_ident, PL_DAEMON_CTR_PROTOCOL_ERRORS, 1);
    /* Client-triggered: rate-limited so that a flood of bad clients cannot flood the log. */
    if (pl_daemon_stats_warn_allow(d->stats, pl_daemon_now_ns(), &suppressed))
        pl_log_warn("session %llu (pid %d): %s (record type %u, %u bytes); ending the session"
                    " (%llu similar lines suppressed before)",
                    (unsigned long long)s->id, (int)s->peer.pid, what, type, len,
                    (unsigned long long)suppressed);
    return -PL_ERR_PROTOCOL;
}

int pl_daemon_dispatch_session(struct pl_daemon *d, struct pl_daemon_session *s) {
    for (;;) {
        /* Each record may produce one reply: without room, stop reading until the
         * scheduler drains the outbox (it sends OUTBOX_FREED). */
        if (!pl_daemon_session_outbox_has_room(s)) {
            atomic_store_explicit(&s->want_outbox_notice, true, memory_order_seq_cst);
            if (!pl_daemon_session_outbox_has_room(s)) {
                s->sq_paused = true;
                break;
            }
            atomic_store_explicit(&s->want_outbox_notice, false, memory_order_relaxed);
        }
        s->sq_paused = false;
        uint32_t type = 0, len = 0;
        uint32_t mark = pl_ipc_ring_mark(&s->sq);
        /* Untrusted: the ring validates indices and the record header, and copies the
         * payload into our private buffer before we look at it. */
        int r = pl_ipc_ring_read(&s->sq, s->rx, PL_DAEMON_MAX_RECORD, &type, &len);
        if (r == 0) {
            /* Empty: publish what we freed (waking a client that waits for space; FUTEX_WAKE
             * only, never its eventfd), then announce our sleep, re-check so no submission
             * is missed, and queue the io_uring wait for the client's wake-up. */
            if (pl_ipc_doorbell_notify_futex(&s->sq) < 0)
                return protocol_error(d, s, "broken submission ring", 0, 0);
            r = pl_daemon_event_loop_sq_sleep(d, s);
            if (r == 0)
                break;
            if (r < 0)
                return protocol_error(d, s, "broken submission ring", 0, 0);
            pl_ipc_ring_sleep_finish(&s->sq);
            continue;
        }
        if (r < 0)
            return protocol_error(
                d, s, r == -EMSGSIZE ? "record larger than allowed" : "broken submission ring", 0,
                0);
        /* A Generate sent right after the client read a Done can come in before we took
         * that request's REQ_DONE notice (the scheduler queues it before it publishes the
         * Done, and does not always announce it): its slot, its id and its quota would still
         * count as taken. Leave the record in the ring; the event loop takes the notices
         * and comes back here at once (pl_daemon_event_loop_run), and then it goes ahead. */
        if (type == PL_DAEMON_REC_GENERATE && !s->gen_deferred &&
            pl_daemon_sched_notice_pending(d->sched)) {
            pl_ipc_ring_unread(&s->sq, mark);
            s->gen_deferred = true;
            d->n_gen_deferred++;
            break;
        }
        if (type == PL_DAEMON_REC_GENERATE)
            s->gen_deferred = false;
        ProtobufCMessage *m = NULL;
        const char *why = NULL;
        if (pl_daemon_dispatch_decode(type, s->state, s->rx, len, &s->arena, &m, &why) < 0)
            return protocol_error(d, s, why, type, len);
        r = rules[type].fn(d, s, m);
        pl_daemon_arena_reset(&s->arena); /* everything unpacked is gone */
        if (r < 0)
            return r;
    }
    /* Publish consumption now so a client blocked on a full ring moves on. */
    if (pl_ipc_doorbell_notify_futex(&s->sq) < 0)
        return protocol_error(d, s, "broken submission ring", 0, 0);
    return 0;
}
