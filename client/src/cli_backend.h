/* SPDX-License-Identifier: MIT */
/* What the picolm CLI needs from whoever runs the model: a small table of operations.
 * cli_local.c implements it in-process over engine/ (`--model FILE`); cli_daemon.c implements
 * it over libpicolm, served by picolmd (the default, `--socket PATH`). */
#ifndef PL_CLIENT_CLI_BACKEND_H
#define PL_CLIENT_CLI_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pl/engine_logprobs.h"
#include "pl/engine_sampler.h"

#define PL_CLI_MAX_TYPES 64

struct pl_cli_tensor_type {
    char name[16];  /* "Q4_K" */
    uint64_t count; /* tensors of this type */
    uint64_t bytes; /* their data bytes */
};

struct pl_cli_model_info {
    char path[4096];
    uint64_t file_size;
    uint32_t gguf_version;
    uint64_t n_tensors;
    uint64_t n_kv;
    char arch[32];
    char name[128]; /* general.name, "" when absent */
    uint32_t n_vocab, n_ctx_train, n_embd, n_layer, n_head, n_head_kv, n_ff, head_dim, n_rot;
    float rope_freq_base, rope_freq_scale, rms_eps;
    bool tied_output, has_qkv_bias;
    uint64_t n_params, weight_bytes;
    char tokenizer_kind[16]; /* "llama" (SentencePiece) or "gpt2" (byte-level BPE) */
    int32_t bos, eos;        /* -1: none */
    bool adds_bos;
    size_t n_types;
    struct pl_cli_tensor_type types[PL_CLI_MAX_TYPES];
    bool from_daemon; /* described by picolmd: path is the socket; only name, arch,
                         tokenizer, n_vocab, n_ctx_train (the daemon's context),
                         n_embd, n_layer, n_head(_kv), head_dim, n_params, file_size,
                         bos and eos are known */
};

enum pl_cli_stop {
    PL_CLI_STOP_LENGTH = 0,   /* n_predict tokens generated */
    PL_CLI_STOP_EOG = 1,      /* an end-of-generation token (not emitted) */
    PL_CLI_STOP_CTX_FULL = 2, /* the context is full */
    PL_CLI_STOP_STRING = 3,   /* a stop string (or the template's end of turn) appeared */
};

/* Most stop strings and top logprobs a request takes (as picolmd). */
#define PL_CLI_MAX_STOP 16u
#define PL_CLI_MAX_TOP_LOGPROBS 20u

/* A chat message (borrowed strings, NUL-terminated). */
struct pl_cli_chat_msg {
    const char *role;
    const char *content;
};

struct pl_cli_gen_opts {
    int64_t n_predict; /* -1: until end of generation or a full context */
    bool ignore_eos;   /* do not stop at end-of-generation tokens */
    struct pl_sampler_params sampler;
    /* Per-request features, handled by both backends as picolmd handles them. */
    const char *const *stop; /* n_stop NUL-terminated stop strings (1..256 bytes each) */
    size_t n_stop;           /* <= PL_CLI_MAX_STOP */
    bool json;               /* output one JSON object (or json_schema) */
    const char *json_schema; /* NULL: none; json_schema_len bytes */
    size_t json_schema_len;
    uint32_t logprobs; /* 0, or top-N (<= PL_CLI_MAX_TOP_LOGPROBS) */
    /* When n_messages > 0 the prompt is these messages rendered with template_name (NULL:
     * the model's template) and the prompt argument of generate is ignored; the template's
     * end-of-turn strings are added to the stop strings while there is room. */
    const struct pl_cli_chat_msg *messages;
    size_t n_messages;
    const char *template_name;
};

struct pl_cli_gen_stats {
    size_t n_prompt;
    const int32_t *prompt_ids; /* the prompt evaluated, when known (borrowed from the backend
                                  until its next call): the rendered messages in-process;
                                  NULL for messages through the daemon */
    size_t n_gen;
    uint64_t prompt_ns; /* prompt evaluation */
    uint64_t gen_ns;    /* generation, first sample to last */
    enum pl_cli_stop stop;
};

/* One generated token as the callback sees it (all borrowed until the call returns). */
struct pl_cli_token {
    int32_t id;        /* -1: bytes of no token of their own (text held back for a
                          stop string, released at the end) */
    const char *piece; /* output bytes now final (with stop strings, not necessarily
                          this token's own: they are released once they cannot begin
                          a stop string; the daemon backend passes a chunk's bytes
                          with its first token and empty pieces with the others) */
    size_t len;
    bool has_logprob; /* logprobs requested and known for this token */
    float logprob;
    const struct pl_logprob *top; /* n_top alternatives, most likely first */
    uint32_t n_top;
};

/* Called once per generated token. Return 0 to go on, a negative value to stop generation
 * (it is returned). */
typedef int (*pl_cli_token_fn)(void *ud, const struct pl_cli_token *t);
/* Called once per evaluated position with its n_vocab logits, in position order. */
typedef int (*pl_cli_logits_fn)(void *ud, const float *logits, uint32_t n_vocab);

struct pl_cli_backend;

struct pl_cli_backend_ops {
    int (*info)(struct pl_cli_backend *b, struct pl_cli_model_info *ret);
    uint32_t (*n_vocab)(struct pl_cli_backend *b);
    /* New array of ids in *ret_ids (caller frees); parse_special is always false. */
    int (*tokenize)(struct pl_cli_backend *b, const char *text, size_t len, bool add_special,
                    int32_t **ret_ids, size_t *ret_n);
    /* Errors besides the usual: -EINVAL (bad messages, template name, schema, stop
     * strings: message in err), -PL_ERR_UNSUPPORTED (messages without a template name for a
     * model whose template is not recognised). */
    int (*generate)(struct pl_cli_backend *b, const int32_t *prompt, size_t n_prompt,
                    const struct pl_cli_gen_opts *opts, pl_cli_token_fn on_token, void *ud,
                    struct pl_cli_gen_stats *ret_stats);
    int (*eval)(struct pl_cli_backend *b, const int32_t *tokens, size_t n, pl_cli_logits_fn on_row,
                void *ud);
    void (*close)(struct pl_cli_backend *b);
};

struct pl_cli_backend {
    const struct pl_cli_backend_ops *ops;
    /* Last error's message (set by operations that fail), "" otherwise. */
    char err[512];
};

struct pl_cli_local_opts {
    uint32_t n_threads; /* 0: engine default */
    uint32_t n_ctx;     /* 0: engine default (generate), the token count (eval) */
    uint32_t kv_type;   /* enum pl_kv_type */
};

/* Load model_path in-process. Errors: as pl_model_load(), message in err. */
int pl_cli_local_open(const char *model_path, const struct pl_cli_local_opts *opts,
                      struct pl_cli_backend **ret, char *err, size_t err_len);

/* Connect to picolmd at socket_path (NULL: $PICOLM_SOCKET, else the default socket) through
 * libpicolm (cli_daemon.c). eval is refused (-EINVAL): the protocol carries no logits.
 * Errors, with a message in err: -ECONNREFUSED (no broker listens there), -PL_ERR_DENIED,
 * -PL_ERR_EXHAUSTED, -PL_ERR_VERSION, -PL_ERR_GONE, -PL_ERR_PROTOCOL, -ENOMEM, -ECOMM. */
int pl_cli_daemon_open(const char *socket_path, struct pl_cli_backend **ret, char *err,
                       size_t err_len);

#endif
