/* SPDX-License-Identifier: MIT */
/* The picolm CLI's in-process backend (`--model FILE`): loads the model with engine/, owns
 * one context and one sampler, and runs tokenize / generate / eval / info for
 * picolm_cli.c through the table in cli_backend.h. Buffers are sized once per request;
 * the token loop allocates nothing. A vocabulary-only GGUF (a tokenizer, no tensors, as
 * llama.cpp ships them) opens too: tokenize and info work, generate and eval say why not.
 * Per-request features (chat messages, JSON / JSON-Schema output, stop strings, logprobs)
 * use the engine APIs exactly as picolmd does (daemon/request_features.c, scheduler.c), so a
 * request gives the same tokens in-process and through the daemon. */
#include "cli_backend.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pl/engine_chat.h"
#include "pl/engine_gguf.h"
#include "pl/engine_grammar.h"
#include "pl/engine_logprobs.h"
#include "pl/engine_model.h"
#include "pl/engine_stop.h"
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
    struct pl_model *model;     /* NULL for a vocabulary-only file */
    struct pl_gguf *vocab_gguf; /* vocabulary-only file: its reader and tokenizer (owned) */
    struct pl_tokenizer *vocab_tok;
    const struct pl_tokenizer *tok;
    uint32_t n_vocab;
    struct pl_ctx *ctx;
    uint32_t ctx_n_ctx; /* n_ctx the context was created with */
    uint32_t ctx_n_batch;
    char *piece;
    size_t piece_cap;
    /* Features */
    int chat_family; /* detected from tokenizer.chat_template, 0: none */
    char bos_text[64], eos_text[64];
    struct pl_grammar_vocab *gvocab; /* built on the first constrained request */
    int32_t *chat_ids;               /* the last rendered conversation */
    size_t n_chat_ids;
};

/* The broker's limits on one request (daemon/request_features.h), kept here too. */
#define LOCAL_MAX_MSGS 1024u
#define LOCAL_MAX_ROLE 64u
#define LOCAL_MAX_SCHEMA (16u * 1024)

static struct local *to_local(struct pl_cli_backend *b) {
    return (struct local *)b;
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
    set_err(l,
            "'%.256s' holds a vocabulary only (no tensors): it can tokenize and describe, "
            "not %s",
            l->path, what);
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

static int local_tokenize(struct pl_cli_backend *b, const char *text, size_t len, bool add_special,
                          int32_t **ret_ids, size_t *ret_n) {
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
        struct pl_batch batch = {
            .n = m, .token = tokens + start, .pos = pos, .seq = seq, .logits = want};
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

/* ---- Per-request features (as daemon/request_features.c) ---- */

static void token_text(const struct pl_tokenizer *t, int32_t id, char *buf, size_t cap) {
    size_t len = 0;
    const char *s = id >= 0 ? pl_tokenizer_token_text(t, id, &len) : NULL;
    if (!s || len >= cap)
        len = 0;
    if (len)
        memcpy(buf, s, len);
    buf[len] = '\0';
}

/* Render the messages with the named or the model's template and tokenize the text (special
 * tokens parsed, BOS unless the template writes it) into l->chat_ids. */
static int render_chat(struct local *l, const struct pl_cli_gen_opts *o, int *ret_family) {
    struct pl_chat_msg *cm = NULL;
    char *text = NULL;
    size_t len = 0;
    int fam, r;
    if (o->n_messages > LOCAL_MAX_MSGS) {
        set_err(l, "messages: between 1 and %u messages", LOCAL_MAX_MSGS);
        return -EINVAL;
    }
    if (o->template_name && o->template_name[0]) {
        fam = pl_chat_template_from_name(o->template_name);
        if (fam < 0) {
            set_err(l,
                    "unknown chat template '%.32s' (llama2, llama3, chatml, qwen, zephyr, "
                    "mistral, phi3, gemma)",
                    o->template_name);
            return -EINVAL;
        }
    } else if (l->chat_family > 0) {
        fam = l->chat_family;
    } else {
        set_err(l, "the model has no chat template picolm recognises; name one with "
                   "--template");
        return -PL_ERR_UNSUPPORTED;
    }
    cm = calloc(o->n_messages, sizeof(*cm));
    if (!cm)
        return -ENOMEM;
    for (size_t i = 0; i < o->n_messages; i++) {
        const char *role = o->messages[i].role, *content = o->messages[i].content;
        size_t rl = role ? strlen(role) : 0;
        if (rl == 0 || rl > LOCAL_MAX_ROLE) {
            set_err(l, "messages[%zu]: role must be 1..%u bytes", i, LOCAL_MAX_ROLE);
            r = -EINVAL;
            goto out;
        }
        cm[i] = (struct pl_chat_msg){.role = role,
                                     .role_len = rl,
                                     .content = content ? content : "",
                                     .content_len = content ? strlen(content) : 0};
    }
    r = pl_chat_render((enum pl_chat_family)fam, cm, o->n_messages, true, l->bos_text, l->eos_text,
                       NULL, 0, &len);
    if (r < 0 && r != -ENOSPC) {
        set_err(l,
                "messages do not fit the %s template (roles must be system/user/assistant, "
                "alternating where the template wants it)",
                pl_chat_template_name((enum pl_chat_family)fam));
        goto out;
    }
    text = malloc(len + 1);
    if (!text) {
        r = -ENOMEM;
        goto out;
    }
    r = pl_chat_render((enum pl_chat_family)fam, cm, o->n_messages, true, l->bos_text, l->eos_text,
                       text, len + 1, &len);
    if (r < 0) {
        set_err(l, "cannot render the messages: %s", pl_strerror(r));
        goto out;
    }
    bool add_bos = !pl_chat_template_writes_bos((enum pl_chat_family)fam);
    size_t cap = len + 2, n = 0;
    free(l->chat_ids);
    l->chat_ids = malloc(cap * sizeof(int32_t));
    l->n_chat_ids = 0;
    if (!l->chat_ids) {
        r = -ENOMEM;
        goto out;
    }
    r = pl_tokenizer_encode(l->tok, text, len, add_bos, true, l->chat_ids, cap, &n);
    if (r == -ENOSPC) {
        int32_t *ids = realloc(l->chat_ids, (n ? n : 1) * sizeof(int32_t));
        if (!ids) {
            r = -ENOMEM;
            goto out;
        }
        l->chat_ids = ids;
        cap = n;
        r = pl_tokenizer_encode(l->tok, text, len, add_bos, true, l->chat_ids, cap, &n);
    }
    if (r < 0) {
        set_err(l, "the rendered conversation cannot be tokenized: %s", pl_strerror(r));
        goto out;
    }
    l->n_chat_ids = n;
    *ret_family = fam;
out:
    free(text);
    free(cm);
    return r;
}

/* One request's feature state: built before the prompt runs, used per token without
 * allocating (except the rare growth of the hold buffer). */
struct feat {
    struct pl_stop *stop;
    struct pl_grammar *grammar;
    struct pl_grammar_state *gst;
    float *lp_logits;       /* [n_vocab] logits the token was drawn from */
    struct pl_logprob *top; /* [top_n] */
    uint32_t top_n;
    bool lp;
    char *hold; /* stream bytes fed to the matcher, not yet released */
    size_t n_hold, hold_cap;
    uint64_t emitted; /* stream bytes released */
};

static void feat_done(struct feat *f) {
    pl_stop_free(f->stop);
    pl_grammar_state_free(f->gst);
    pl_grammar_free(f->grammar);
    free(f->lp_logits);
    free(f->top);
    free(f->hold);
    memset(f, 0, sizeof(*f));
}

/* The request's stop strings, then the chat family's end-of-turn strings while there is
 * room; the grammar; logprob buffers. */
static int feat_init(struct local *l, const struct pl_cli_gen_opts *o, int family, struct feat *f) {
    const char *strs[PL_STOP_MAX];
    size_t lens[PL_STOP_MAX], n = 0;
    char gerr[256] = "";
    int r;
    memset(f, 0, sizeof(*f));
    if (o->n_stop > PL_CLI_MAX_STOP) {
        set_err(l, "too many stop strings (max %u)", PL_CLI_MAX_STOP);
        return -EINVAL;
    }
    for (size_t i = 0; i < o->n_stop; i++, n++) {
        strs[n] = o->stop[i];
        lens[n] = o->stop[i] ? strlen(o->stop[i]) : 0;
        if (lens[n] == 0 || lens[n] > PL_STOP_MAX_LEN) {
            set_err(l, "a stop string is empty or over %u bytes", PL_STOP_MAX_LEN);
            return -EINVAL;
        }
    }
    if (family > 0) {
        size_t nf = 0;
        const char *const *fs = pl_chat_stop_strings((enum pl_chat_family)family, &nf);
        for (size_t i = 0; i < nf && n < PL_STOP_MAX; i++, n++) {
            strs[n] = fs[i];
            lens[n] = strlen(fs[i]);
        }
    }
    if (n > 0 && (r = pl_stop_new(strs, lens, n, &f->stop)) < 0) {
        set_err(l, "stop strings: %s", pl_strerror(r));
        return r;
    }
    if (o->json || o->json_schema) {
        if (o->json_schema_len > LOCAL_MAX_SCHEMA) {
            set_err(l, "json_schema: over %u bytes", LOCAL_MAX_SCHEMA);
            r = -EINVAL;
            goto fail;
        }
        if (!l->gvocab && (r = pl_grammar_vocab_new(l->tok, &l->gvocab)) < 0) {
            set_err(l, "cannot index the vocabulary for the grammar: %s", pl_strerror(r));
            goto fail;
        }
        r = pl_grammar_compile_json(l->gvocab, o->json_schema, o->json_schema_len, &f->grammar,
                                    gerr, sizeof(gerr));
        if (r < 0) {
            f->grammar = NULL;
            set_err(l, "json_schema: %s", gerr[0] ? gerr : pl_strerror(r));
            r = r == -ENOMEM ? r : -EINVAL;
            goto fail;
        }
        r = pl_grammar_state_new(f->grammar, &f->gst);
        if (r < 0) {
            f->gst = NULL;
            set_err(l, "out of memory for the grammar");
            goto fail;
        }
    }
    if (o->logprobs > PL_CLI_MAX_TOP_LOGPROBS) {
        set_err(l, "logprobs: at most %u alternatives per token", PL_CLI_MAX_TOP_LOGPROBS);
        r = -EINVAL;
        goto fail;
    }
    if (o->logprobs > 0) {
        f->lp = true;
        f->top_n = o->logprobs;
        f->lp_logits = malloc((size_t)l->n_vocab * sizeof(float));
        f->top = malloc(f->top_n * sizeof(*f->top));
        if (!f->lp_logits || !f->top) {
            r = -ENOMEM;
            goto fail;
        }
    }
    return 0;
fail:
    feat_done(f);
    return r;
}

/* Hand bytes [emitted, upto) of the stream to the callback with token t (piece set here),
 * then forget them. */
static int feat_release(struct feat *f, uint64_t upto, struct pl_cli_token *t,
                        pl_cli_token_fn on_token, void *ud) {
    size_t k = (size_t)(upto - f->emitted);
    t->piece = f->hold ? f->hold : "";
    t->len = k;
    int r = on_token(ud, t);
    if (k) {
        memmove(f->hold, f->hold + k, f->n_hold - k);
        f->n_hold -= k;
        f->emitted = upto;
    }
    return r;
}

/* Feed a generated piece to the stop matcher (when there is one) and release what is final.
 * Returns 1 when a stop string completed (its bytes and anything after are dropped), 0, or
 * a negative error (the callback's, or -ENOMEM). */
static int feat_text(struct feat *f, const char *piece, size_t len, struct pl_cli_token *t,
                     pl_cli_token_fn on_token, void *ud) {
    if (!f->stop) {
        t->piece = piece;
        t->len = len;
        return on_token(ud, t);
    }
    if (f->hold_cap - f->n_hold < len) {
        size_t cap = f->hold_cap ? f->hold_cap : PL_STOP_MAX_LEN * 2;
        while (cap - f->n_hold < len)
            cap *= 2;
        char *h = realloc(f->hold, cap);
        if (!h)
            return -ENOMEM;
        f->hold = h;
        f->hold_cap = cap;
    }
    memcpy(f->hold + f->n_hold, piece, len);
    f->n_hold += len;
    struct pl_stop_result res;
    int m = pl_stop_feed(f->stop, piece, len, &res);
    if (m < 0)
        return m;
    int r = feat_release(f, res.safe, t, on_token, ud);
    if (m == 1)
        f->n_hold = 0;
    return r < 0 ? r : m;
}

/* The generation ended without a stop match: release what was held back. Returns 1 when
 * the end completed a stop string, 0, or the callback's error. */
static int feat_flush(struct feat *f, pl_cli_token_fn on_token, void *ud) {
    if (!f->stop || f->n_hold == 0)
        return 0;
    struct pl_stop_result res;
    int m = pl_stop_flush(f->stop, &res);
    if (m < 0)
        return m;
    if (m == 1) {
        f->n_hold = 0;
        return 1;
    }
    struct pl_cli_token t = {.id = -1};
    int r = feat_release(f, res.safe, &t, on_token, ud);
    return r < 0 ? r : 0;
}

static int local_generate(struct pl_cli_backend *b, const int32_t *prompt, size_t n_prompt,
                          const struct pl_cli_gen_opts *o, pl_cli_token_fn on_token, void *ud,
                          struct pl_cli_gen_stats *ret_stats) {
    struct local *l = to_local(b);
    struct pl_sampler *smp = NULL;
    float *logits = NULL;
    struct pl_cli_gen_stats st = {0};
    struct feat f = {0};
    int family = 0;
    int r;

    if (!l->model)
        return vocab_only_refuse(l, "generate");
    uint32_t n_ctx = l->opts.n_ctx ? l->opts.n_ctx : default_n_ctx(l);
    if (o->n_messages > 0) {
        r = render_chat(l, o, &family);
        if (r < 0)
            return r;
        prompt = l->chat_ids;
        n_prompt = l->n_chat_ids;
    }
    st.n_prompt = n_prompt;
    st.prompt_ids = prompt;
    if (n_prompt == 0) {
        set_err(l, "the prompt has no tokens");
        return -EINVAL;
    }
    if (n_prompt > n_ctx) {
        set_err(l, "the prompt has %zu tokens, more than the context (%u; see --ctx)", n_prompt,
                n_ctx);
        return -E2BIG;
    }
    for (size_t i = 0; i < n_prompt; i++) {
        if (prompt[i] < 0 || (uint32_t)prompt[i] >= l->n_vocab) {
            set_err(l, "token %d out of range [0, %u)", prompt[i], l->n_vocab);
            return -EINVAL;
        }
    }
    r = feat_init(l, o, family, &f);
    if (r < 0)
        return r;
    r = pl_sampler_new(&o->sampler, l->n_vocab, &smp);
    if (r < 0) {
        set_err(l, "bad sampling parameters");
        goto out;
    }
    logits = malloc((size_t)l->n_vocab * sizeof(*logits));
    if (!logits) {
        r = -ENOMEM;
        goto out;
    }
    r = ensure_ctx(l, n_ctx, PL_MIN(LOCAL_N_BATCH, n_ctx));
    if (r < 0)
        goto out;

    uint64_t t0 = pl_now_ns();
    r = decode_prompt(l, prompt, n_prompt, false, logits, NULL, NULL);
    if (r < 0)
        goto out;
    for (size_t i = 0; i < n_prompt; i++)
        pl_sampler_accept(smp, prompt[i]);
    uint64_t t1 = pl_now_ns();
    st.prompt_ns = t1 - t0;

    /* The grammar's token budget, as the broker computes it: the tokens left when -n bounds
     * the answer within the context, else no bound. */
    size_t room = n_ctx - n_prompt;
    bool bounded = o->n_predict >= 0 && (uint64_t)o->n_predict <= room;
    size_t pos = n_prompt;
    for (;;) {
        if (o->n_predict >= 0 && st.n_gen >= (uint64_t)o->n_predict) {
            st.stop = PL_CLI_STOP_LENGTH;
            break;
        }
        /* Grammar mask and the logprobs copy come before the sampler changes the logits. */
        uint32_t left = bounded ? (uint32_t)((uint64_t)o->n_predict - st.n_gen) : 0;
        if (f.gst && pl_grammar_mask(f.gst, logits, left) <= 0) {
            set_err(l, "the output grammar allows no token here");
            r = -ENOTRECOVERABLE;
            goto out;
        }
        if (f.lp)
            memcpy(f.lp_logits, logits, (size_t)l->n_vocab * sizeof(float));
        int32_t tok = pl_sampler_sample(smp, logits);
        if (tok < 0) {
            r = tok;
            goto out;
        }
        pl_sampler_accept(smp, tok);
        int gram = 0;
        if (f.gst) {
            gram = pl_grammar_accept(f.gst, tok);
            if (gram < 0) {
                set_err(l, "sampled a token the output grammar refuses");
                r = -ENOTRECOVERABLE;
                goto out;
            }
        }
        if (gram == 1 || (!o->ignore_eos && pl_tokenizer_is_eog(l->tok, tok))) {
            st.stop = PL_CLI_STOP_EOG; /* an EOG is not output, nor its logprob */
            break;
        }
        struct pl_cli_token t = {.id = tok};
        if (f.lp) {
            float chosen = -INFINITY;
            int n = pl_logprobs_compute(f.lp_logits, l->n_vocab, tok, f.top_n, f.top, &chosen);
            for (uint32_t i = n < 0 ? 0 : (uint32_t)n; i < f.top_n; i++)
                f.top[i] = (struct pl_logprob){.id = -1, .logprob = -INFINITY};
            t.has_logprob = true;
            t.logprob = n < 0 ? -INFINITY : chosen;
            t.top = f.top;
            t.n_top = f.top_n;
        }
        size_t plen = 0;
        r = token_piece(l, tok, &plen);
        if (r < 0) {
            set_err(l, "cannot render token %d: %s", tok, pl_strerror(r));
            goto out;
        }
        st.n_gen++;
        r = feat_text(&f, l->piece, plen, &t, on_token, ud);
        if (r < 0)
            goto out;
        if (r == 1) {
            st.stop = PL_CLI_STOP_STRING;
            break;
        }
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
    if (st.stop != PL_CLI_STOP_STRING) {
        r = feat_flush(&f, on_token, ud);
        if (r < 0)
            goto out;
        if (r == 1)
            st.stop = PL_CLI_STOP_STRING;
    }
    st.gen_ns = pl_now_ns() - t1;
    r = 0;
out:
    if (ret_stats)
        *ret_stats = st;
    feat_done(&f);
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
    pl_grammar_vocab_free(l->gvocab);
    free(l->chat_ids);
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
        /* As picolmd: weights on huge pages when the system gives them (decode reads every
         * weight per token; 4 KiB file pages cost about a third of the speed). */
        struct pl_weights_info wi;
        (void)pl_model_place_weights(l->model, PL_WEIGHTS_AUTO, &wi);
        l->tok = pl_model_tokenizer(l->model);
        l->n_vocab = pl_model_hparams(l->model)->n_vocab;
    }
    /* The chat template family, as picolmd detects it (pl_daemon_features_new). */
    struct pl_gguf_str src;
    const struct pl_gguf *g = l->model ? pl_model_gguf(l->model) : l->vocab_gguf;
    if (pl_gguf_get_str(g, "tokenizer.chat_template", &src) == 0) {
        int fam = pl_chat_template_detect(src.ptr, (size_t)src.len);
        l->chat_family = fam > 0 ? fam : 0;
    }
    token_text(l->tok, pl_tokenizer_bos(l->tok), l->bos_text, sizeof(l->bos_text));
    token_text(l->tok, pl_tokenizer_eos(l->tok), l->eos_text, sizeof(l->eos_text));
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
