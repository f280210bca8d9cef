/* SPDX-License-Identifier: MIT */
/* The picolm CLI's in-process backend (`--model FILE`): loads the model with engine/, owns
 * one context and one sampler, and runs tokenize / generate / eval / info for
 * picolm_cli.c through the table in cli_backend.h. Buffers are sized once per request;
 * the token loop allocates nothing. A vocabulary-only GGUF (a tokenizer, no tensors, as
 * llama.cpp ships them) opens too: tokenize and info work, generate and eval say why not. */
#include "cli_backend.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pl/engine_gguf.h"
#include "pl/engine_model.h"
#include "pl/engine_sampler.h"
#include "pl/engine_tokenizer.h"
#include "pl/engine_types.h"
#include "pl/pl_err.h"
#include "pl/pl_util.h"

/* Tokens per pl_ctx_decode() call. */
#define LOCAL_N_BATCH 512u
/* Cap on the logits buffer of one eval chunk (n_batch rows of n_vocab floats). */
#define EVAL_MAX_LOGIT_BYTES (64u << 20)
/* Initial piece buffer; grown (rarely) when a token's bytes do not fit. */
#define PIECE_INIT 256u

struct local {
    struct pl_cli_backend base; /* first: the ops see a struct pl_cli_backend * */
    struct pl_cli_local_opts opts;
    char path[4096];
    struct pl_model *model;       /* NULL for a vocabulary-only file */
    struct pl_gguf *vocab_gguf;   /* vocabulary-only file: its reader and tokenizer (owned) */
    struct pl_tokenizer *vocab_tok;
    const struct pl_tokenizer *tok;
    uint32_t n_vocab;
    struct pl_ctx *ctx;
    uint32_t ctx_n_ctx;       /* n_ctx the context was created with */
    uint32_t ctx_n_batch;
    char *piece;
    size_t piece_cap;
};

static struct local *to_local(struct pl_cli_backend *b) {
    return (struct local *)b;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define set_err(l, ...) (void)snprintf((l)->base.err, sizeof((l)->base.err), __VA_ARGS__)

/* (Re)create the context when it is missing or was made for other sizes. */
static int ensure_ctx(struct local *l, uint32_t n_ctx, uint32_t n_batch) {
    if (l->ctx && l->ctx_n_ctx == n_ctx && l->ctx_n_batch == n_batch) {
        pl_ctx_seq_clear(l->ctx, 0);
        return 0;
    }
    pl_ctx_free(l->ctx);
    l->ctx = NULL;
    struct pl_ctx_opts co = {
        .n_ctx = n_ctx,
        .n_seq = 1,
        .n_kv_tokens = 0,
        .n_batch = n_batch,
        .kv_type = l->opts.kv_type,
    };
    int r = pl_ctx_new(l->model, &co, &l->ctx);
    if (r < 0) {
        set_err(l, "cannot create a context of %u tokens: %s", n_ctx, pl_strerror(r));
        return r;
    }
    l->ctx_n_ctx = n_ctx;
    l->ctx_n_batch = n_batch;
    return 0;
}

/* Default context length: as the engine picks it (min(n_ctx_train, 4096)), made explicit
 * so that the generation loop knows where the context ends. */
static uint32_t default_n_ctx(const struct local *l) {
    const struct pl_model_hparams *hp = pl_model_hparams(l->model);
    uint32_t n = hp->n_ctx_train;
    return n == 0 || n > 4096 ? 4096 : n;
}

/* A vocabulary-only file has no weights to run: a usage error (exit 2), in one line. */
static int vocab_only_refuse(struct local *l, const char *what) {
    set_err(l, "'%.256s' holds a vocabulary only (no tensors): it can tokenize and describe, "
               "not %s", l->path, what);
    return -EINVAL;
}

/* ---- info ---- */

static int local_info(struct pl_cli_backend *b, struct pl_cli_model_info *ret) {
    struct local *l = to_local(b);
    static const struct pl_model_hparams no_hp; /* vocabulary-only: no hyperparameters */
    const struct pl_model_hparams *hp = l->model ? pl_model_hparams(l->model) : &no_hp;
    const struct pl_gguf *g = l->model ? pl_model_gguf(l->model) : l->vocab_gguf;
    struct pl_cli_model_info *in = ret;
    memset(in, 0, sizeof(*in));
    (void)snprintf(in->path, sizeof(in->path), "%s", l->path);
    in->file_size = pl_gguf_file_size(g);
    in->gguf_version = pl_gguf_version(g);
    in->n_tensors = pl_gguf_n_tensors(g);
    in->n_kv = pl_gguf_n_kv(g);
    (void)snprintf(in->arch, sizeof(in->arch), "%s", hp->arch);
    struct pl_gguf_str name;
    if (!l->model && pl_gguf_get_str(g, "general.architecture", &name) == 0)
        (void)snprintf(in->arch, sizeof(in->arch), "%.*s",
                       (int)PL_MIN(name.len, (uint64_t)(sizeof(in->arch) - 1)), name.ptr);
    if (pl_gguf_get_str(g, "general.name", &name) == 0) {
        size_t n = name.len < sizeof(in->name) - 1 ? (size_t)name.len : sizeof(in->name) - 1;
        memcpy(in->name, name.ptr, n);
        in->name[n] = '\0';
    }
    in->n_vocab = l->n_vocab;
    in->n_ctx_train = hp->n_ctx_train;
    in->n_embd = hp->n_embd;
    in->n_layer = hp->n_layer;
    in->n_head = hp->n_head;
    in->n_head_kv = hp->n_head_kv;
    in->n_ff = hp->n_ff;
    in->head_dim = hp->head_dim;
    in->n_rot = hp->n_rot;
    in->rope_freq_base = hp->rope_freq_base;
    in->rope_freq_scale = hp->rope_freq_scale;
    in->rms_eps = hp->rms_eps;
    in->tied_output = hp->tied_output;
    in->has_qkv_bias = hp->has_qkv_bias;
    in->n_params = hp->n_params;
    in->weight_bytes = hp->weight_bytes;
    (void)snprintf(in->tokenizer_kind, sizeof(in->tokenizer_kind), "%s",
                   pl_tokenizer_kind(l->tok) == PL_TOKENIZER_BPE ? "gpt2" : "llama");
    in->bos = pl_tokenizer_bos(l->tok);
    in->eos = pl_tokenizer_eos(l->tok);
    in->adds_bos = pl_tokenizer_adds_bos(l->tok);

    /* Tensor types in id order. */
    uint64_t count[_PL_GGML_TYPE_MAX] = {0}, bytes[_PL_GGML_TYPE_MAX] = {0};
    for (uint64_t i = 0; i < in->n_tensors; i++) {
        const struct pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
        if (!t || t->type >= _PL_GGML_TYPE_MAX)
            continue;
        count[t->type]++;
        bytes[t->type] += t->n_bytes;
    }
    for (uint32_t t = 0; t < _PL_GGML_TYPE_MAX && in->n_types < PL_CLI_MAX_TYPES; t++) {
        if (count[t] == 0)
            continue;
        const struct pl_type_info *ti = pl_type_info(t);
        struct pl_cli_tensor_type *o = &in->types[in->n_types++];
        (void)snprintf(o->name, sizeof(o->name), "%s", ti && ti->name ? ti->name : "?");
        o->count = count[t];
        o->bytes = bytes[t];
    }
    return 0;
}

static uint32_t local_n_vocab(struct pl_cli_backend *b) {
    return to_local(b)->n_vocab;
}

/* ---- tokenize ---- */

static int local_tokenize(struct pl_cli_backend *b, const char *text, size_t len,
                          bool add_special, int32_t **ret_ids, size_t *ret_n) {
    struct local *l = to_local(b);
    /* A token covers at least one byte, plus BOS/EOS: len + 2 always suffices for the
     * tokenizers we have; -ENOSPC still gets one retry with the exact size. */
    size_t cap = len + 2, n = 0;
    int32_t *ids = malloc(cap * sizeof(*ids));
    if (!ids)
        return -ENOMEM;
    int r = pl_tokenizer_encode(l->tok, text, len, add_special, false, ids, cap, &n);
    if (r == -ENOSPC) {
        free(ids);
        cap = n;
        ids = malloc((cap ? cap : 1) * sizeof(*ids));
        if (!ids)
            return -ENOMEM;
        r = pl_tokenizer_encode(l->tok, text, len, add_special, false, ids, cap, &n);
    }
    if (r < 0) {
        free(ids);
        set_err(l, "tokenization failed: %s", pl_strerror(r));
        return r;
    }
    *ret_ids = ids;
    *ret_n = n;
    return 0;
}

/* ---- generate ---- */

/* The bytes of token id in l->piece; grows the buffer in the rare case it is too small. */
static int token_piece(struct local *l, int32_t id, size_t *ret_len) {
    for (;;) {
        int n = pl_tokenizer_piece(l->tok, id, l->piece, l->piece_cap);
        if (n >= 0) {
            *ret_len = (size_t)n;
            return 0;
        }
        if (n != -ENOSPC || l->piece_cap >= (1u << 24))
            return n;
        char *p = realloc(l->piece, l->piece_cap * 4);
        if (!p)
            return -ENOMEM;
        l->piece = p;
        l->piece_cap *= 4;
    }
}

static int decode_one(struct local *l, int32_t tok, int32_t pos, float *logits) {
    int32_t seq = 0;
    bool want = true;
    struct pl_batch batch = {.n = 1, .token = &tok, .pos = &pos, .seq = &seq, .logits = &want};
    return pl_ctx_decode(l->ctx, &batch, logits);
}

/* Feed tokens[0..n) at positions 0..n-1 in chunks of the context's n_batch. Rows for the
 * positions with want_all (or the last position only) go to on_row / out. */
static int decode_prompt(struct local *l, const int32_t *tokens, size_t n, bool want_all,
                         float *out, pl_cli_logits_fn on_row, void *ud) {
    uint32_t nb = l->ctx_n_batch;
    int32_t *pos = malloc(nb * sizeof(*pos)), *seq = calloc(nb, sizeof(*seq));
    bool *want = calloc(nb, sizeof(*want));
    int r = -ENOMEM;
    if (!pos || !seq || !want)
        goto out;
    for (size_t start = 0; start < n; start += nb) {
        uint32_t m = (uint32_t)PL_MIN((size_t)nb, n - start);
        for (uint32_t i = 0; i < m; i++) {
            pos[i] = (int32_t)(start + i);
            want[i] = want_all || start + i == n - 1;
        }
        struct pl_batch batch = {.n = m, .token = tokens + start, .pos = pos, .seq = seq,
                                 .logits = want};
        r = pl_ctx_decode(l->ctx, &batch, out);
        if (r < 0) {
            set_err(l, "forward pass failed at position %zu: %s", start, pl_strerror(r));
            goto out;
        }
        if (want_all && on_row) {
            for (uint32_t i = 0; i < m; i++) {
                r = on_row(ud, out + (size_t)i * l->n_vocab, l->n_vocab);
                if (r < 0)
                    goto out;
            }
        }
    }
    r = 0;
out:
    free(pos);
    free(seq);
    free(want);
    return r;
}

static int local_generate(struct pl_cli_backend *b, const int32_t *prompt, size_t n_prompt,
                          const struct pl_cli_gen_opts *o, pl_cli_token_fn on_token, void *ud,
                          struct pl_cli_gen_stats *ret_stats) {
    struct local *l = to_local(b);
    struct pl_sampler *smp = NULL;
    float *logits = NULL;
    struct pl_cli_gen_stats st = {.n_prompt = n_prompt};
    int r;

    if (!l->model)
        return vocab_only_refuse(l, "generate");
    uint32_t n_ctx = l->opts.n_ctx ? l->opts.n_ctx : default_n_ctx(l);
    if (n_prompt == 0) {
        set_err(l, "the prompt has no tokens");
        return -EINVAL;
    }
    if (n_prompt > n_ctx) {
        set_err(l, "the prompt has %zu tokens, more than the context (%u; see --ctx)",
                n_prompt, n_ctx);
        return -E2BIG;
    }
    for (size_t i = 0; i < n_prompt; i++) {
        if (prompt[i] < 0 || (uint32_t)prompt[i] >= l->n_vocab) {
            set_err(l, "token %d out of range [0, %u)", prompt[i], l->n_vocab);
            return -EINVAL;
        }
    }
    r = pl_sampler_new(&o->sampler, l->n_vocab, &smp);
    if (r < 0) {
        set_err(l, "bad sampling parameters");
        return r;
    }
    logits = malloc((size_t)l->n_vocab * sizeof(*logits));
    if (!logits) {
        r = -ENOMEM;
        goto out;
    }
    r = ensure_ctx(l, n_ctx, PL_MIN(LOCAL_N_BATCH, n_ctx));
    if (r < 0)
        goto out;

    uint64_t t0 = now_ns();
    r = decode_prompt(l, prompt, n_prompt, false, logits, NULL, NULL);
    if (r < 0)
        goto out;
    for (size_t i = 0; i < n_prompt; i++)
        pl_sampler_accept(smp, prompt[i]);
    uint64_t t1 = now_ns();
    st.prompt_ns = t1 - t0;

    size_t pos = n_prompt;
    for (;;) {
        if (o->n_predict >= 0 && st.n_gen >= (uint64_t)o->n_predict) {
            st.stop = PL_CLI_STOP_LENGTH;
            break;
        }
        int32_t tok = pl_sampler_sample(smp, logits);
        if (tok < 0) {
            r = tok;
            goto out;
        }
        if (!o->ignore_eos && pl_tokenizer_is_eog(l->tok, tok)) {
            st.stop = PL_CLI_STOP_EOG;
            break;
        }
        pl_sampler_accept(smp, tok);
        size_t plen = 0;
        r = token_piece(l, tok, &plen);
        if (r < 0) {
            set_err(l, "cannot render token %d: %s", tok, pl_strerror(r));
            goto out;
        }
        st.n_gen++;
        r = on_token(ud, tok, l->piece, plen);
        if (r < 0)
            goto out;
        /* The token just emitted needs a KV slot only if another one follows it. */
        if (o->n_predict >= 0 && st.n_gen >= (uint64_t)o->n_predict) {
            st.stop = PL_CLI_STOP_LENGTH;
            break;
        }
        if (pos >= n_ctx) {
            st.stop = PL_CLI_STOP_CTX_FULL;
            break;
        }
        r = decode_one(l, tok, (int32_t)pos, logits);
        if (r < 0) {
            set_err(l, "forward pass failed at position %zu: %s", pos, pl_strerror(r));
            goto out;
        }
        pos++;
    }
    st.gen_ns = now_ns() - t1;
    r = 0;
out:
    if (ret_stats)
        *ret_stats = st;
    pl_sampler_free(smp);
    free(logits);
    return r;
}

/* ---- eval ---- */

static int local_eval(struct pl_cli_backend *b, const int32_t *tokens, size_t n,
                      pl_cli_logits_fn on_row, void *ud) {
    struct local *l = to_local(b);
    float *out = NULL;
    if (!l->model)
        return vocab_only_refuse(l, "evaluate");
    if (n == 0) {
        set_err(l, "no tokens to evaluate");
        return -EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= l->n_vocab) {
            set_err(l, "token %d out of range [0, %u)", tokens[i], l->n_vocab);
            return -EINVAL;
        }
    }
    if (n > UINT32_MAX || (l->opts.n_ctx && n > l->opts.n_ctx)) {
        set_err(l, "%zu tokens do not fit the context (%u; see --ctx)", n, l->opts.n_ctx);
        return -E2BIG;
    }
    uint32_t n_ctx = l->opts.n_ctx ? l->opts.n_ctx : (uint32_t)n;
    size_t rows = EVAL_MAX_LOGIT_BYTES / ((size_t)l->n_vocab * sizeof(float));
    uint32_t nb = (uint32_t)PL_MAX((size_t)1, PL_MIN(rows, (size_t)LOCAL_N_BATCH));
    nb = PL_MIN(nb, n_ctx);
    int r = ensure_ctx(l, n_ctx, nb);
    if (r < 0)
        return r;
    out = malloc((size_t)nb * l->n_vocab * sizeof(*out));
    if (!out)
        return -ENOMEM;
    r = decode_prompt(l, tokens, n, true, out, on_row, ud);
    free(out);
    return r;
}

/* ---- lifetime ---- */

static void local_close(struct pl_cli_backend *b) {
    struct local *l = to_local(b);
    if (!l)
        return;
    pl_ctx_free(l->ctx);
    pl_model_free(l->model);
    pl_tokenizer_free(l->vocab_tok);
    pl_gguf_close(l->vocab_gguf);
    free(l->piece);
    free(l);
}

static const struct pl_cli_backend_ops local_ops = {
    .info = local_info,
    .n_vocab = local_n_vocab,
    .tokenize = local_tokenize,
    .generate = local_generate,
    .eval = local_eval,
    .close = local_close,
};

/* model_path could not load as a model: open it as a vocabulary-only file (no tensors, a
 * tokenizer). Returns 0, or < 0 when it is not one (then l is unchanged). */
static int open_vocab_only(struct local *l, const char *model_path) {
    struct pl_gguf *g = NULL;
    struct pl_tokenizer *t = NULL;
    char e[256];
    int r = pl_gguf_open(model_path, &g, e, sizeof(e));
    if (r < 0)
        return r;
    if (pl_gguf_n_tensors(g) != 0 || (r = pl_tokenizer_new(g, &t, e, sizeof(e))) < 0) {
        pl_gguf_close(g);
        return r < 0 ? r : -PL_ERR_FORMAT;
    }
    l->vocab_gguf = g;
    l->vocab_tok = t;
    l->tok = t;
    l->n_vocab = pl_tokenizer_n_vocab(t);
    return 0;
}

int pl_cli_local_open(const char *model_path, const struct pl_cli_local_opts *opts,
                      struct pl_cli_backend **ret, char *err, size_t err_len) {
    struct local *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->base.ops = &local_ops;
    l->opts = *opts;
    (void)snprintf(l->path, sizeof(l->path), "%s", model_path);
    struct pl_model_opts mo = {.n_threads = opts->n_threads};
    int r = pl_model_load(model_path, &mo, &l->model, err, err_len);
    /* Not a model we run (no tensors, or another architecture's vocabulary): maybe a
     * vocabulary-only file. Otherwise the model's error stands. */
    if ((r == -PL_ERR_FORMAT || r == -PL_ERR_UNSUPPORTED) && open_vocab_only(l, model_path) == 0)
        r = 0;
    if (r < 0)
        goto fail;
    if (l->model) {
        l->tok = pl_model_tokenizer(l->model);
        l->n_vocab = pl_model_hparams(l->model)->n_vocab;
    }
    l->piece_cap = PIECE_INIT;
    l->piece = malloc(l->piece_cap);
    if (!l->piece) {
        r = -ENOMEM;
        goto fail;
    }
    *ret = &l->base;
    return 0;
fail:
    local_close(&l->base);
    return r;
}
