/* SPDX-License-Identifier: MIT */
/* The picolm CLI's daemon backend (cli_backend.h over libpicolm): the same operations as the
 * in-process backend, served by picolmd. Token ids go to the broker as given, so both backends
 * see the same prompt; eval needs logits, which the protocol does not carry, so it is refused.
 * Used only by picolm_cli.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_backend.h"
#include "picolm.h"
#include "pl/pl_err.h"
#include "pl/pl_util.h"

struct daemon_backend {
    struct pl_cli_backend base; /* first: the ops see a struct pl_cli_backend * */
    picolm_client *client;
    char socket_path[4096];
    struct picolm_model_info info;
};

static struct daemon_backend *to_daemon(struct pl_cli_backend *b) {
    return (struct daemon_backend *)b;
}

/* A libpicolm status as the -errno / -PL_ERR_* the CLI expects: invalid input stays -EINVAL
 * (a usage error, as with --model); -EIO is never produced (it means "stdout failed"). */
static int errno_of(int status) {
    switch (status) {
    case PICOLM_OK:
        return 0;
    case PICOLM_E_INVALID:
        return -EINVAL;
    case PICOLM_E_CONTEXT:
        return -E2BIG;
    case PICOLM_E_NOMEM:
        return -ENOMEM;
    case PICOLM_E_DENIED:
        return -PL_ERR_DENIED;
    case PICOLM_E_QUOTA:
        return -PL_ERR_QUOTA;
    case PICOLM_E_EXHAUSTED:
        return -PL_ERR_EXHAUSTED;
    case PICOLM_E_BROKER_GONE:
    case PICOLM_E_SHUTDOWN:
        return -PL_ERR_GONE;
    case PICOLM_E_PROTOCOL:
        return -PL_ERR_PROTOCOL;
    case PICOLM_E_VERSION:
        return -PL_ERR_VERSION;
    case PICOLM_E_CANCELLED:
        return -PL_ERR_CANCELLED;
    case PICOLM_E_UNSUPPORTED:
        return -PL_ERR_UNSUPPORTED;
    case PICOLM_E_TIMEOUT:
        return -ETIMEDOUT;
    case PICOLM_E_UNREACHABLE:
        return -ECONNREFUSED;
    default:
        return -ECOMM;
    }
}

/* Record the broker's message for a failed call and return its errno form. */
static int failed(struct daemon_backend *d, const char *what, int status) {
    const char *detail = picolm_last_error(d->client);
    (void)snprintf(d->base.err, sizeof(d->base.err), "%s: %s%s%s", what, picolm_strerror(status),
                   detail[0] ? ": " : "", detail);
    return errno_of(status);
}

static int daemon_info(struct pl_cli_backend *b, struct pl_cli_model_info *ret) {
    struct daemon_backend *d = to_daemon(b);
    const struct picolm_model_info *i = &d->info;
    memset(ret, 0, sizeof(*ret));
    ret->from_daemon = true;
    (void)snprintf(ret->path, sizeof(ret->path), "%s", d->socket_path);
    ret->file_size = i->file_bytes;
    (void)snprintf(ret->arch, sizeof(ret->arch), "%s", i->architecture);
    (void)snprintf(ret->name, sizeof(ret->name), "%s", i->name);
    (void)snprintf(ret->tokenizer_kind, sizeof(ret->tokenizer_kind), "%.*s",
                   (int)sizeof(ret->tokenizer_kind) - 1, i->tokenizer);
    ret->n_vocab = i->n_vocab;
    ret->n_ctx_train = i->n_ctx;
    ret->n_embd = i->n_embd;
    ret->n_layer = i->n_layer;
    ret->n_head = i->n_head;
    ret->n_head_kv = i->n_head_kv;
    ret->head_dim = i->n_head ? i->n_embd / i->n_head : 0;
    ret->n_params = i->n_params;
    ret->bos = i->bos;
    ret->eos = i->eos;
    return 0;
}

static uint32_t daemon_n_vocab(struct pl_cli_backend *b) {
    return to_daemon(b)->info.n_vocab;
}

static int daemon_tokenize(struct pl_cli_backend *b, const char *text, size_t len, bool add_special,
                           int32_t **ret_ids, size_t *ret_n) {
    struct daemon_backend *d = to_daemon(b);
    uint32_t flags = add_special ? PICOLM_TOK_ADD_SPECIAL : 0;
    /* Text gives at most about a token a byte (+ BOS/EOS): one round trip in practice; up to
     * 3 a byte for malformed UTF-8 (PL_TOKENIZER_MAX_IDS), which the retry with the broker's
     * count covers. */
    size_t cap = len + 8;
    for (int attempt = 0; attempt < 2; attempt++) {
        int32_t *ids = malloc(cap * sizeof(*ids));
        if (!ids)
            return -ENOMEM;
        size_t n = 0;
        /* len 0 would mean strlen() to libpicolm: an empty text is tokenized as "". */
        int r = picolm_tokenize(d->client, len ? text : "", len, flags, ids, cap, &n);
        if (r == PICOLM_OK) {
            *ret_ids = ids;
            *ret_n = n;
            return 0;
        }
        free(ids);
        if (r != PICOLM_E_RANGE)
            return failed(d, "tokenize", r);
        cap = n;
    }
    (void)snprintf(d->base.err, sizeof(d->base.err), "tokenize: the broker's answer changed");
    return -PL_ERR_PROTOCOL;
}

struct gen_relay {
    pl_cli_token_fn on_token;
    void *ud;
    int cb_err;
    size_t n_gen;
    struct pl_logprob top[PL_CLI_MAX_TOP_LOGPROBS];
};

/* A chunk carries the concatenated pieces of its ids: the whole text goes with the first id,
 * the others follow with empty pieces (the bytes written are the same). Logprobs, when the
 * chunk has them, go with their ids. */
static int relay_chunk(void *user, const struct picolm_chunk *ch) {
    struct gen_relay *g = user;
    size_t n_top = PL_MIN(picolm_chunk_n_top(ch), (size_t)PL_CLI_MAX_TOP_LOGPROBS);
    for (size_t i = 0; i < ch->n_ids; i++) {
        struct pl_cli_token t = {
            .id = ch->ids[i], .piece = i ? "" : ch->text, .len = i ? 0 : ch->text_len};
        if (picolm_chunk_logprob(ch, i, &t.logprob) == PICOLM_OK) {
            t.has_logprob = true;
            for (size_t j = 0; j < n_top; j++)
                (void)picolm_chunk_top(ch, i, j, &g->top[j].id, &g->top[j].logprob);
            t.top = g->top;
            t.n_top = (uint32_t)n_top;
        }
        int r = g->on_token(g->ud, &t);
        if (r < 0) {
            g->cb_err = r;
            return 1;
        }
        g->n_gen++;
    }
    if (!ch->n_ids && ch->text_len) {
        struct pl_cli_token t = {.id = -1, .piece = ch->text, .len = ch->text_len};
        int r = g->on_token(g->ud, &t);
        if (r < 0) {
            g->cb_err = r;
            return 1;
        }
    }
    return 0;
}

static int daemon_generate(struct pl_cli_backend *b, const int32_t *prompt, size_t n_prompt,
                           const struct pl_cli_gen_opts *opts, pl_cli_token_fn on_token, void *ud,
                           struct pl_cli_gen_stats *ret_stats) {
    struct daemon_backend *d = to_daemon(b);
    memset(ret_stats, 0, sizeof(*ret_stats));
    ret_stats->n_prompt = n_prompt;
    if (opts->n_predict == 0)
        return 0; /* the protocol's max_tokens 0 means "no limit" */
    if (opts->n_predict > UINT32_MAX) {
        (void)snprintf(d->base.err, sizeof(d->base.err), "generate: -n too large");
        return -EINVAL;
    }
    struct picolm_generate_params p;
    picolm_generate_params_init(&p);
    struct picolm_message *msgs = NULL;
    if (opts->n_messages > 0) {
        msgs = calloc(opts->n_messages, sizeof(*msgs));
        if (!msgs)
            return -ENOMEM;
        for (size_t i = 0; i < opts->n_messages; i++)
            msgs[i] = (struct picolm_message){.role = opts->messages[i].role,
                                              .content = opts->messages[i].content};
        p.messages = msgs;
        p.n_messages = opts->n_messages;
        p.chat_template = opts->template_name;
    } else {
        p.tokens = prompt;
        p.n_tokens = n_prompt;
        ret_stats->prompt_ids = prompt;
    }
    p.stop = opts->stop;
    p.n_stop = opts->n_stop;
    p.format = opts->json ? "json" : NULL;
    p.json_schema = opts->json_schema;
    p.json_schema_len = opts->json_schema_len;
    p.logprobs = opts->logprobs;
    p.max_tokens = opts->n_predict < 0 ? 0 : (uint32_t)opts->n_predict;
    p.flags = opts->ignore_eos ? PICOLM_GEN_IGNORE_EOS : 0;
    p.sampling.temperature = opts->sampler.temp;
    p.sampling.top_k = opts->sampler.top_k;
    p.sampling.top_p = opts->sampler.top_p;
    p.sampling.min_p = opts->sampler.min_p;
    p.sampling.repeat_penalty = opts->sampler.repeat_penalty;
    p.sampling.penalty_last_n = opts->sampler.penalty_last_n;
    p.sampling.frequency_penalty = opts->sampler.freq_penalty;
    p.sampling.presence_penalty = opts->sampler.presence_penalty;
    p.sampling.seed = opts->sampler.seed;
    p.sampling.has_seed = 1;

    struct gen_relay g = {.on_token = on_token, .ud = ud};
    struct picolm_result res = {.size = sizeof(res)};
    int r = picolm_generate(d->client, &p, relay_chunk, &g, &res);
    free(msgs);
    if (g.cb_err)
        return g.cb_err;
    if (r != PICOLM_OK)
        return failed(d, "generate", r);
    ret_stats->n_prompt = res.prompt_tokens;
    ret_stats->n_gen = res.generated_tokens;
    ret_stats->prompt_ns = res.prefill_ns;
    ret_stats->gen_ns = res.decode_ns;
    ret_stats->stop = res.finish_reason == PICOLM_FINISH_EOS ? PL_CLI_STOP_EOG
                      : (opts->n_predict > 0 && res.generated_tokens >= opts->n_predict)
                          ? PL_CLI_STOP_LENGTH
                          : PL_CLI_STOP_CTX_FULL;
    if (res.finish_reason == PICOLM_FINISH_STOP)
        ret_stats->stop = PL_CLI_STOP_STRING;
    return 0;
}

static int daemon_eval(struct pl_cli_backend *b, const int32_t *tokens, size_t n,
                       pl_cli_logits_fn on_row, void *ud) {
    struct daemon_backend *d = to_daemon(b);
    (void)tokens;
    (void)n;
    (void)on_row;
    (void)ud;
    (void)snprintf(d->base.err, sizeof(d->base.err),
                   "eval runs in-process only (the daemon does not return logits): give "
                   "--model FILE");
    return -EINVAL;
}

static void daemon_close(struct pl_cli_backend *b) {
    struct daemon_backend *d = to_daemon(b);
    if (!d)
        return;
    picolm_close(d->client);
    free(d);
}

static const struct pl_cli_backend_ops daemon_ops = {
    .info = daemon_info,
    .n_vocab = daemon_n_vocab,
    .tokenize = daemon_tokenize,
    .generate = daemon_generate,
    .eval = daemon_eval,
    .close = daemon_close,
};

int pl_cli_daemon_open(const char *socket_path, struct pl_cli_backend **ret, char *err,
                       size_t err_len) {
    struct daemon_backend *d = calloc(1, sizeof(*d));
    if (!d) {
        (void)snprintf(err, err_len, "out of memory");
        return -ENOMEM;
    }
    const char *path = socket_path;
    if (!path) {
        path = getenv("PICOLM_SOCKET");
        if (!path || !*path)
            path = PICOLM_DEFAULT_SOCKET;
    }
    (void)snprintf(d->socket_path, sizeof(d->socket_path), "%s", path);
    int r = picolm_connect_ex(path, &d->client, err, err_len);
    if (r != PICOLM_OK) {
        free(d);
        return errno_of(r);
    }
    d->info.size = sizeof(d->info);
    r = picolm_model_info(d->client, &d->info);
    if (r != PICOLM_OK) {
        (void)snprintf(err, err_len, "model info: %s: %s", picolm_strerror(r),
                       picolm_last_error(d->client));
        picolm_close(d->client);
        free(d);
        return errno_of(r);
    }
    d->base.ops = &daemon_ops;
    *ret = &d->base;
    return 0;
}
