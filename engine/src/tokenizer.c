/* SPDX-License-Identifier: MIT */
/* Tokenizer common part: reads the vocabulary and special-token metadata from GGUF
 * (tokenizer.ggml.*), splits input text around special tokens, dispatches the raw text to
 * the SPM (tok_spm.c) or byte-level BPE (tok_bpe.c) algorithm, and turns ids back into
 * bytes. Behaviour follows llama.cpp's llama_vocab (June 2025) so that ids match it exactly.
 * Used by the model loader, the CLI and the daemon. */
#include "pl/engine_tokenizer.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pl/engine_gguf.h"
#include "pl/pl_err.h"
#include "pl/pl_util.h"
#include "tokenizer_int.h"
#include "unicode.h"

/* GGUF token types (tokenizer.ggml.token_type). */
enum {
    TT_NORMAL = 1,
    TT_UNKNOWN = 2,
    TT_CONTROL = 3,
    TT_USER_DEFINED = 4,
    TT_UNUSED = 5,
    TT_BYTE = 6,
};

#define MAX_VOCAB (1u << 24)

static void set_err(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t err_len, const char *fmt, ...) {
    if (!err || !err_len)
        return;
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

/* ---- Id vectors ---- */

int pl_tok_vec_push(struct pl_tok_vec *v, int32_t id) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        int32_t *p = realloc(v->v, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        v->v = p;
        v->cap = cap;
    }
    v->v[v->n++] = id;
    return 0;
}

/* ---- Text -> id map ---- */

static size_t table_size(size_t n) {
    size_t s = 16;
    while (s < n * 2)
        s <<= 1;
    return s;
}

int32_t pl_tokenizer_find(const struct pl_tokenizer *t, const char *s, size_t len) {
    size_t i = pl_tok_hash(PL_TOK_HASH_INIT, s, len) & t->map_mask;
    for (;;) {
        uint32_t e = t->map[i];
        if (!e)
            return -1;
        const struct pl_tok_token *tk = &t->tok[e - 1];
        if (tk->len == len && memcmp(t->pool + tk->off, s, len) == 0)
            return (int32_t)(e - 1);
        i = (i + 1) & t->map_mask;
    }
}

/* Insert id; -EEXIST when its text is already present. */
static int map_insert(struct pl_tokenizer *t, uint32_t id) {
    const struct pl_tok_token *tk = &t->tok[id];
    const char *s = t->pool + tk->off;
    size_t i = pl_tok_hash(PL_TOK_HASH_INIT, s, tk->len) & t->map_mask;
    for (;;) {
        uint32_t e = t->map[i];
        if (!e) {
            t->map[i] = id + 1;
            return 0;
        }
        const struct pl_tok_token *o = &t->tok[e - 1];
        if (o->len == tk->len && memcmp(t->pool + o->off, s, tk->len) == 0)
            return -EEXIST;
        i = (i + 1) & t->map_mask;
    }
}

static const char *tok_text(const struct pl_tokenizer *t, int32_t id) {
    return t->pool + t->tok[id].off;
}

static bool text_is(const struct pl_tokenizer *t, int32_t id, const char *s) {
    size_t n = strlen(s);
    return t->tok[id].len == n && memcmp(tok_text(t, id), s, n) == 0;
}

/* ---- Loading ---- */

static int load_tokens(struct pl_tokenizer *t, const struct pl_gguf *g, char *err, size_t err_len) {
    struct pl_gguf_arr toks, scores = {0}, types = {0};
    bool have_scores = false, have_types = false;
    int r;

    r = pl_gguf_get_arr(g, "tokenizer.ggml.tokens", PL_GGUF_TYPE_STRING, &toks);
    if (r < 0) {
        set_err(err, err_len, "tokenizer.ggml.tokens: %s",
                r == -ENOENT ? "missing" : "not an array of strings");
        return -PL_ERR_FORMAT;
    }
    if (toks.n == 0 || toks.n > MAX_VOCAB) {
        set_err(err, err_len, "tokenizer.ggml.tokens: %llu tokens (expected 1..%u)",
                (unsigned long long)toks.n, MAX_VOCAB);
        return -PL_ERR_FORMAT;
    }
    t->n_vocab = (uint32_t)toks.n;

    r = pl_gguf_get_arr(g, "tokenizer.ggml.scores", _PL_GGUF_TYPE_MAX, &scores);
    if (r == 0) {
        if ((scores.type != PL_GGUF_TYPE_FLOAT32 && scores.type != PL_GGUF_TYPE_INT32) ||
            scores.n < toks.n) {
            set_err(err, err_len, "tokenizer.ggml.scores: expected >= %u float32 or int32 elements",
                    t->n_vocab);
            return -PL_ERR_FORMAT;
        }
        have_scores = true;
    } else if (r != -ENOENT) {
        set_err(err, err_len, "tokenizer.ggml.scores: not an array");
        return -PL_ERR_FORMAT;
    }
    r = pl_gguf_get_arr(g, "tokenizer.ggml.token_type", _PL_GGUF_TYPE_MAX, &types);
    if (r == 0) {
        if (types.type != PL_GGUF_TYPE_INT32 || types.n < toks.n) {
            set_err(err, err_len, "tokenizer.ggml.token_type: expected >= %u int32 elements",
                    t->n_vocab);
            return -PL_ERR_FORMAT;
        }
        have_types = true;
    } else if (r != -ENOENT) {
        set_err(err, err_len, "tokenizer.ggml.token_type: not an array");
        return -PL_ERR_FORMAT;
    }

    t->tok = calloc(t->n_vocab, sizeof(*t->tok));
    if (!t->tok)
        return -ENOMEM;

    /* Pool size: every text plus its NUL; an empty token becomes "[EMPTY_<id>]". */
    uint64_t pool_len = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        struct pl_gguf_str s;
        if (pl_gguf_arr_str(&toks, i, &s) < 0)
            return -PL_ERR_FORMAT;
        pool_len += (s.len ? s.len : 24) + 1;
    }
    if (pool_len > UINT32_MAX) {
        set_err(err, err_len, "tokenizer.ggml.tokens: texts too large (%llu bytes)",
                (unsigned long long)pool_len);
        return -PL_ERR_FORMAT;
    }
    t->pool = malloc(pool_len);
    if (!t->pool)
        return -ENOMEM;

    uint32_t off = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        struct pl_gguf_str s;
        struct pl_tok_token *tk = &t->tok[i];
        (void)pl_gguf_arr_str(&toks, i, &s);
        tk->off = off;
        if (s.len) {
            memcpy(t->pool + off, s.ptr, s.len);
            tk->len = (uint32_t)s.len;
        } else {
            int n = snprintf(t->pool + off, 24, "[EMPTY_%u]", i);
            tk->len = (uint32_t)n;
        }
        t->pool[off + tk->len] = '\0';
        off += tk->len + 1;

        if (have_scores) {
            if (scores.type == PL_GGUF_TYPE_FLOAT32) {
                memcpy(&tk->score, (const char *)scores.data + 4 * (size_t)i, 4);
            } else {
                int32_t v;
                memcpy(&v, (const char *)scores.data + 4 * (size_t)i, 4);
                tk->score = (float)v;
            }
        }
        tk->attr = PL_TOK_ATTR_NORMAL;
        if (have_types) {
            int32_t ty;
            memcpy(&ty, (const char *)types.data + 4 * (size_t)i, 4);
            switch (ty) {
            case TT_NORMAL:
                tk->attr = PL_TOK_ATTR_NORMAL;
                break;
            case TT_UNKNOWN:
                tk->attr = PL_TOK_ATTR_UNKNOWN;
                break;
            case TT_CONTROL:
                tk->attr = PL_TOK_ATTR_CONTROL;
                break;
            case TT_USER_DEFINED:
                tk->attr = PL_TOK_ATTR_USER_DEFINED;
                break;
            case TT_UNUSED:
                tk->attr = PL_TOK_ATTR_UNUSED;
                break;
            case TT_BYTE:
                tk->attr = PL_TOK_ATTR_BYTE;
                break;
            default:
                tk->attr = PL_TOK_ATTR_UNDEFINED;
                break;
            }
        }
    }

    size_t ts = table_size(t->n_vocab);
    t->map = calloc(ts, sizeof(*t->map));
    if (!t->map)
        return -ENOMEM;
    t->map_mask = ts - 1;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        if (map_insert(t, i) < 0) {
            int32_t other = pl_tokenizer_find(t, tok_text(t, (int32_t)i), t->tok[i].len);
            set_err(err, err_len, "tokenizer.ggml.tokens: duplicate token '%.64s' (ids %d and %u)",
                    tok_text(t, (int32_t)i), other, i);
            return -PL_ERR_FORMAT;
        }
    }
    return 0;
}

/* An optional token-id key: keeps *id when absent or out of range (as llama.cpp, which
 * warns), sets it to -1 for a negative value. */
static int read_id(const struct pl_tokenizer *t, const struct pl_gguf *g, const char *key,
                   int32_t *id, char *err, size_t err_len) {
    uint64_t v;
    int r = pl_gguf_get_u64(g, key, &v);
    if (r == -ENOENT)
        return 0;
    if (r < 0) {
        int32_t s;
        if (pl_gguf_get_i32(g, key, &s) == 0 && s < 0) {
            *id = -1;
            return 0;
        }
        set_err(err, err_len, "%s: not a token id", key);
        return -PL_ERR_FORMAT;
    }
    if (v < t->n_vocab)
        *id = (int32_t)v;
    return 0;
}

static int read_bool(const struct pl_gguf *g, const char *key, bool *val, char *err,
                     size_t err_len) {
    bool b;
    int r = pl_gguf_get_bool(g, key, &b);
    if (r == -ENOENT)
        return 0;
    if (r < 0) {
        set_err(err, err_len, "%s: not a bool", key);
        return -PL_ERR_FORMAT;
    }
    *val = b;
    return 0;
}

static bool text_in(const struct pl_tokenizer *t, int32_t id, const char *const *list) {
    for (size_t i = 0; list[i]; i++)
        if (text_is(t, id, list[i]))
            return true;
    return false;
}

/* llama.cpp finds some special tokens by their text and forces them to control type. */
static void detect_by_text(struct pl_tokenizer *t, int32_t *slot, const char *const *list) {
    if (*slot >= 0)
        return;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        if (text_in(t, (int32_t)i, list)) {
            *slot = (int32_t)i;
            t->tok[i].attr |= PL_TOK_ATTR_CONTROL;
            return;
        }
    }
}

static const char *const eot_texts[] = {"<|eot_id|>",
                                        "<|im_end|>",
                                        "<|end|>",
                                        "<end_of_turn>",
                                        "<|endoftext|>",
                                        "<EOT>",
                                        "_<EOT>",
                                        "<\xef\xbd\x9c"
                                        "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                        "<end_of_utterance>",
                                        NULL};
static const char *const eom_texts[] = {"<|eom_id|>", NULL};
static const char *const fim_pre_texts[] = {"<|fim_prefix|>",
                                            "<fim-prefix>",
                                            "<fim_prefix>",
                                            "<\xef\xbd\x9c"
                                            "fim\xe2\x96\x81"
                                            "begin\xef\xbd\x9c>",
                                            "<PRE>",
                                            "\xe2\x96\x81<PRE>",
                                            NULL};
static const char *const fim_suf_texts[] = {"<|fim_suffix|>",
                                            "<fim-suffix>",
                                            "<fim_suffix>",
                                            "<\xef\xbd\x9c"
                                            "fim\xe2\x96\x81hole\xef\xbd\x9c>",
                                            "<SUF>",
                                            "\xe2\x96\x81<SUF>",
                                            NULL};
static const char *const fim_mid_texts[] = {"<|fim_middle|>",
                                            "<fim-middle>",
                                            "<fim_middle>",
                                            "<\xef\xbd\x9c"
                                            "fim\xe2\x96\x81"
                                            "end\xef\xbd\x9c>",
                                            "<MID>",
                                            "\xe2\x96\x81<MID>",
                                            NULL};
static const char *const fim_pad_texts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", NULL};
static const char *const fim_rep_texts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                            "<REPO>",       "<reponame>",    NULL};
static const char *const fim_sep_texts[] = {"<|file_sep|>", NULL};
static const char *const eog_texts[] = {
    "<|eot_id|>",      "<|im_end|>",         "<|end|>", "<end_of_turn>",
    "<|endoftext|>",   "<|eom_id|>",         "<EOT>",   "_<EOT>",
    "<|end_of_text|>", "<end_of_utterance>", NULL};

/* Longest text first; equal lengths by id, so the order is deterministic. */
static int special_cmp(const void *a, const void *b, void *ctx) {
    const struct pl_tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (t->tok[x].len != t->tok[y].len)
        return t->tok[x].len > t->tok[y].len ? -1 : 1;
    return (x > y) - (x < y);
}

static int load_special(struct pl_tokenizer *t, const struct pl_gguf *g, char *err,
                        size_t err_len) {
    static const struct {
        const char *key;
        size_t off;
    } ids[] = {
        {"tokenizer.ggml.bos_token_id", offsetof(struct pl_tokenizer, bos)},
        {"tokenizer.ggml.eos_token_id", offsetof(struct pl_tokenizer, eos)},
        {"tokenizer.ggml.eot_token_id", offsetof(struct pl_tokenizer, eot)},
        {"tokenizer.ggml.eom_token_id", offsetof(struct pl_tokenizer, eom)},
        {"tokenizer.ggml.unknown_token_id", offsetof(struct pl_tokenizer, unk)},
        {"tokenizer.ggml.seperator_token_id", offsetof(struct pl_tokenizer, sep)},
        {"tokenizer.ggml.padding_token_id", offsetof(struct pl_tokenizer, pad)},
        {"tokenizer.ggml.fim_pre_token_id", offsetof(struct pl_tokenizer, fim_pre)},
        {"tokenizer.ggml.fim_suf_token_id", offsetof(struct pl_tokenizer, fim_suf)},
        {"tokenizer.ggml.fim_mid_token_id", offsetof(struct pl_tokenizer, fim_mid)},
        {"tokenizer.ggml.fim_pad_token_id", offsetof(struct pl_tokenizer, fim_pad)},
        {"tokenizer.ggml.fim_rep_token_id", offsetof(struct pl_tokenizer, fim_rep)},
        {"tokenizer.ggml.fim_sep_token_id", offsetof(struct pl_tokenizer, fim_sep)},
        {"tokenizer.ggml.prefix_token_id", offsetof(struct pl_tokenizer, fim_pre)},
        {"tokenizer.ggml.suffix_token_id", offsetof(struct pl_tokenizer, fim_suf)},
        {"tokenizer.ggml.middle_token_id", offsetof(struct pl_tokenizer, fim_mid)},
    };
    int r;

    for (size_t i = 0; i < PL_ARRAY_SIZE(ids); i++) {
        int32_t *slot = (int32_t *)(void *)((char *)t + ids[i].off);
        if (*slot >= 0 && (uint32_t)*slot >= t->n_vocab)
            *slot = -1; /* a default id past the vocabulary */
        if ((r = read_id(t, g, ids[i].key, slot, err, err_len)) < 0)
            return r;
    }
    if ((r = read_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos, err, err_len)) < 0 ||
        (r = read_bool(g, "tokenizer.ggml.add_eos_token", &t->add_eos, err, err_len)) < 0)
        return r;
    if (t->add_bos && t->bos < 0) {
        set_err(err, err_len, "tokenizer.ggml.add_bos_token is true, but no BOS token is set");
        return -PL_ERR_FORMAT;
    }
    if (t->add_eos && t->eos < 0) {
        set_err(err, err_len, "tokenizer.ggml.add_eos_token is true, but no EOS token is set");
        return -PL_ERR_FORMAT;
    }

    detect_by_text(t, &t->eot, eot_texts);
    detect_by_text(t, &t->eom, eom_texts);
    detect_by_text(t, &t->fim_pre, fim_pre_texts);
    detect_by_text(t, &t->fim_suf, fim_suf_texts);
    detect_by_text(t, &t->fim_mid, fim_mid_texts);
    detect_by_text(t, &t->fim_pad, fim_pad_texts);
    detect_by_text(t, &t->fim_rep, fim_rep_texts);
    detect_by_text(t, &t->fim_sep, fim_sep_texts);

    /* Control tokens named "...unused..." are unused. */
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        struct pl_tok_token *tk = &t->tok[i];
        if ((tk->attr & PL_TOK_ATTR_CONTROL) && strstr(t->pool + tk->off, "unused"))
            tk->attr |= PL_TOK_ATTR_UNUSED;
    }

    t->eog = calloc(t->n_vocab, 1);
    if (!t->eog)
        return -ENOMEM;
    const int32_t eog_ids[] = {t->fim_pad, t->fim_rep, t->fim_sep, t->eos, t->eot, t->eom};
    for (size_t i = 0; i < PL_ARRAY_SIZE(eog_ids); i++)
        if (eog_ids[i] >= 0)
            t->eog[eog_ids[i]] = 1;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        if (text_in(t, (int32_t)i, eog_texts)) {
            t->eog[i] = 1;
            t->tok[i].attr |= PL_TOK_ATTR_CONTROL;
        }
    }

    /* Special tokens for the text partition, longest text first (ties: lower id). */
    size_t n = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++)
        if (t->tok[i].attr & (PL_TOK_ATTR_CONTROL | PL_TOK_ATTR_USER_DEFINED | PL_TOK_ATTR_UNKNOWN))
            n++;
    t->special = malloc((n ? n : 1) * sizeof(*t->special));
    if (!t->special)
        return -ENOMEM;
    for (uint32_t i = 0; i < t->n_vocab; i++)
        if (t->tok[i].attr & (PL_TOK_ATTR_CONTROL | PL_TOK_ATTR_USER_DEFINED | PL_TOK_ATTR_UNKNOWN))
            t->special[t->n_special++] = (int32_t)i;
    qsort_r(t->special, t->n_special, sizeof(*t->special), special_cmp, t);

    /* Per-model strip attributes llama.cpp sets by name (they are not in the file). */
    struct pl_gguf_str name;
    if (pl_gguf_get_str(g, "general.name", &name) == 0 && name.len < 4096) {
        char lower[4096];
        for (size_t i = 0; i < name.len; i++) {
            char c = name.ptr[i];
            lower[i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
        }
        if (memmem(lower, name.len, "phi-3", 5) || memmem(lower, name.len, "phi3", 4)) {
            for (size_t i = 0; i < t->n_special; i++)
                t->tok[t->special[i]].attr |= PL_TOK_ATTR_RSTRIP;
            static const char *const no_rstrip[] = {"<unk>", "<s>", "<|endoftext|>"};
            int32_t id = pl_tokenizer_find(t, "</s>", 4);
            if (id >= 0)
                t->tok[id].attr |= PL_TOK_ATTR_RSTRIP;
            for (size_t i = 0; i < PL_ARRAY_SIZE(no_rstrip); i++)
                if ((id = pl_tokenizer_find(t, no_rstrip[i], strlen(no_rstrip[i]))) >= 0)
                    t->tok[id].attr &= ~(uint32_t)PL_TOK_ATTR_RSTRIP;
        }
    }
    return 0;
}

static void spm_byte_tokens(struct pl_tokenizer *t) {
    static const char hex[] = "0123456789ABCDEF";
    for (unsigned b = 0; b < 256; b++) {
        char buf[7] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>', 0};
        char one = (char)b;
        int32_t id = pl_tokenizer_find(t, buf, 6);
        if (id < 0)
            id = pl_tokenizer_find(t, &one, 1);
        t->byte_tok[b] = id;
    }
}

int pl_tokenizer_new(const struct pl_gguf *g, struct pl_tokenizer **ret, char *err,
                     size_t err_len) {
    struct pl_tokenizer *t = NULL;
    struct pl_gguf_str model, pre;
    int r;

    if (!g || !ret)
        return -EINVAL;
    if (err && err_len)
        err[0] = '\0';

    r = pl_gguf_get_str(g, "tokenizer.ggml.model", &model);
    if (r < 0) {
        set_err(err, err_len, "tokenizer.ggml.model: %s",
                r == -ENOENT ? "missing" : "not a string");
        return -PL_ERR_FORMAT;
    }
    t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    t->bos = t->eos = t->unk = t->eot = t->eom = t->pad = t->sep = -1;
    t->fim_pre = t->fim_suf = t->fim_mid = t->fim_pad = t->fim_rep = t->fim_sep = -1;

    if (pl_gguf_str_eq(model, "llama")) {
        t->kind = PL_TOKENIZER_SPM;
        t->bos = 1;
        t->eos = 2;
        t->unk = 0;
        t->add_bos = true;
        t->add_space_prefix = true;
    } else if (pl_gguf_str_eq(model, "gpt2")) {
        struct pl_pretok_info info = {PL_PRETOK_DEFAULT, false, false};
        t->kind = PL_TOKENIZER_BPE;
        t->bos = 11;
        t->eos = 11;
        r = pl_gguf_get_str(g, "tokenizer.ggml.pre", &pre);
        if (r == 0) {
            if (pl_pretok_lookup(pre.ptr, pre.len, &info) < 0) {
                set_err(err, err_len, "unknown pre-tokenizer type: '%.*s'",
                        (int)PL_MIN(pre.len, (uint64_t)128), pre.ptr);
                r = -PL_ERR_UNSUPPORTED;
                goto fail;
            }
        } else if (r != -ENOENT) {
            set_err(err, err_len, "tokenizer.ggml.pre: not a string");
            r = -PL_ERR_FORMAT;
            goto fail;
        }
        t->pre = info.type;
        t->ignore_merges = info.ignore_merges;
        t->add_bos = info.add_bos;
    } else {
        set_err(err, err_len, "unknown tokenizer model: '%.*s'",
                (int)PL_MIN(model.len, (uint64_t)128), model.ptr);
        r = -PL_ERR_UNSUPPORTED;
        goto fail;
    }
    if ((r = read_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix, err, err_len)) <
        0)
        goto fail;
    if ((r = load_tokens(t, g, err, err_len)) < 0)
        goto fail;
    if (t->kind == PL_TOKENIZER_BPE && (r = pl_tokenizer_bpe_load(t, g, err, err_len)) < 0)
        goto fail;
    if ((r = load_special(t, g, err, err_len)) < 0)
        goto fail;
    spm_byte_tokens(t);
    *ret = t;
    return 0;
fail:
    if (r == -ENOMEM)
        set_err(err, err_len, "out of memory while loading the vocabulary");
    pl_tokenizer_free(t);
    return r;
}

void pl_tokenizer_free(struct pl_tokenizer *t) {
    if (!t)
        return;
    free(t->pool);
    free(t->tok);
    free(t->map);
    free(t->eog);
    free(t->special);
    free(t->merge_pool);
    free(t->merges);
    free(t->merge_map);
    free(t);
}

/* ---- Getters ---- */

enum pl_tokenizer_kind pl_tokenizer_kind(const struct pl_tokenizer *t) {
    return t->kind;
}
uint32_t pl_tokenizer_n_vocab(const struct pl_tokenizer *t) {
    return t->n_vocab;
}
int32_t pl_tokenizer_bos(const struct pl_tokenizer *t) {
    return t->bos;
}
int32_t pl_tokenizer_eos(const struct pl_tokenizer *t) {
    return t->eos;
}
bool pl_tokenizer_adds_bos(const struct pl_tokenizer *t) {
    return t->add_bos;
}
bool pl_tokenizer_adds_eos(const struct pl_tokenizer *t) {
    return t->add_eos;
}
bool pl_tokenizer_is_eog(const struct pl_tokenizer *t, int32_t id) {
    return id >= 0 && (uint32_t)id < t->n_vocab && t->eog[id];
}
bool pl_tokenizer_is_control(const struct pl_tokenizer *t, int32_t id) {
    return id >= 0 && (uint32_t)id < t->n_vocab && (t->tok[id].attr & PL_TOK_ATTR_CONTROL);
}
const char *pl_tokenizer_token_text(const struct pl_tokenizer *t, int32_t id, size_t *ret_len) {
    if (!t || id < 0 || (uint32_t)id >= t->n_vocab)
        return NULL;
    if (ret_len)
        *ret_len = t->tok[id].len;
    return tok_text(t, id);
}

/* ---- Encoding ---- */

/* A piece of the input: raw text [off, off + len) or a special token. */
struct frag {
    int32_t id; /* -1 for raw text */
    size_t off, len;
};

struct frag_vec {
    struct frag *v;
    size_t n, cap;
};

static int frag_push(struct frag_vec *f, int32_t id, size_t off, size_t len) {
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        struct frag *p = realloc(f->v, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        f->v = p;
        f->cap = cap;
    }
    f->v[f->n++] = (struct frag){id, off, len};
    return 0;
}

static bool c_isspace(char c) {
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* Split the raw fragments around every occurrence of each special token in turn (longest
 * first), as llama.cpp's tokenizer_st_partition. Without parse_special only user-defined
 * tokens are split out; control and unknown tokens stay text. */
static int partition(const struct pl_tokenizer *t, const char *text, size_t len, bool parse_special,
                     struct frag_vec *cur, struct frag_vec *tmp) {
    int r;
    cur->n = 0;
    if (len == 0)
        return 0;
    if ((r = frag_push(cur, -1, 0, len)) < 0)
        return r;
    for (size_t k = 0; k < t->n_special; k++) {
        int32_t id = t->special[k];
        const struct pl_tok_token *tk = &t->tok[id];
        const char *s = t->pool + tk->off;
        if (!parse_special && (tk->attr & (PL_TOK_ATTR_CONTROL | PL_TOK_ATTR_UNKNOWN)))
            continue;
        /* Most special tokens do not occur at all: check before rebuilding the list. */
        bool any = false;
        for (size_t i = 0; i < cur->n && !any; i++)
            any = cur->v[i].id < 0 && memmem(text + cur->v[i].off, cur->v[i].len, s, tk->len);
        if (!any)
            continue;
        tmp->n = 0;
        for (size_t i = 0; i < cur->n; i++) {
            struct frag f = cur->v[i];
            if (f.id >= 0) {
                if ((r = frag_push(tmp, f.id, 0, 0)) < 0)
                    return r;
                continue;
            }
            size_t pos = f.off, end = f.off + f.len;
            for (;;) {
                const char *m = memmem(text + pos, end - pos, s, tk->len);
                if (!m)
                    break;
                size_t at = (size_t)(m - text), left_end = at;
                if (tk->attr & PL_TOK_ATTR_LSTRIP)
                    while (left_end > pos && c_isspace(text[left_end - 1]))
                        left_end--;
                if (left_end > pos && (r = frag_push(tmp, -1, pos, left_end - pos)) < 0)
                    return r;
                if ((r = frag_push(tmp, id, 0, 0)) < 0)
                    return r;
                pos = at + tk->len;
                if (tk->attr & PL_TOK_ATTR_RSTRIP)
                    while (pos < end && c_isspace(text[pos]))
                        pos++;
            }
            if (pos < end && (r = frag_push(tmp, -1, pos, end - pos)) < 0)
                return r;
        }
        struct frag_vec sw = *cur;
        *cur = *tmp;
        *tmp = sw;
    }
    return 0;
}

static int encode_all(const struct pl_tokenizer *t, const char *text, size_t len, bool add_special,
                      bool parse_special, struct pl_tok_vec *out) {
    struct frag_vec cur = {0}, tmp = {0};
    int r;

    if ((r = partition(t, text, len, parse_special, &cur, &tmp)) < 0)
        goto out;
    if (add_special && t->add_bos && (r = pl_tok_vec_push(out, t->bos)) < 0)
        goto out;
    /* SPM: a space is prepended to the first text fragment and to each one that follows a
     * special token (llama.cpp's is_prev_special, true at the start). */
    bool prev_special = true;
    for (size_t i = 0; i < cur.n; i++) {
        const struct frag *f = &cur.v[i];
        if (f->id >= 0) {
            r = pl_tok_vec_push(out, f->id);
            prev_special = true;
        } else if (t->kind == PL_TOKENIZER_SPM) {
            r = pl_tokenizer_spm_encode(t, text + f->off, f->len,
                                        t->add_space_prefix && prev_special, out);
            prev_special = false;
        } else {
            r = pl_tokenizer_bpe_encode(t, text + f->off, f->len, out);
        }
        if (r < 0)
            goto out;
    }
    if (add_special && t->add_eos && (r = pl_tok_vec_push(out, t->eos)) < 0)
        goto out;
    r = 0;
out:
    free(cur.v);
    free(tmp.v);
    return r;
}

int pl_tokenizer_encode(const struct pl_tokenizer *t, const char *text, size_t len,
                        bool add_special, bool parse_special, int32_t *out, size_t cap,
                        size_t *ret_n) {
    struct pl_tok_vec v = {0};
    int r;

    if (!t || !ret_n || (!text && len) || (!out && cap))
        return -EINVAL;
    r = encode_all(t, text ? text : "", len, add_special, parse_special, &v);
    if (r < 0)
        goto out;
    *ret_n = v.n;
    if (v.n > cap) {
        r = -ENOSPC;
        goto out;
    }
    if (v.n)
        memcpy(out, v.v, v.n * sizeof(*out));
    r = 0;
out:
    free(v.v);
    return r;
}

/* ---- Decoding ---- */

static int copy_out(char *buf, size_t cap, const void *src, size_t n) {
    if (n > (size_t)INT32_MAX)
        return -EOVERFLOW;
    if (n > cap)
        return -ENOSPC;
    if (n)
        memcpy(buf, src, n);
    return (int)n;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Byte of a "<0xXX>" token; like strtol in llama.cpp, parsing stops at a non-hex digit. */
static uint8_t byte_of(const struct pl_tokenizer *t, int32_t id) {
    const struct pl_tok_token *tk = &t->tok[id];
    const char *s = t->pool + tk->off;
    unsigned v = 0;
    for (size_t i = 3; i < 5 && i < tk->len; i++) {
        int h = hexval(s[i]);
        if (h < 0)
            break;
        v = v * 16 + (unsigned)h;
    }
    return (uint8_t)v;
}

int pl_tokenizer_piece(const struct pl_tokenizer *t, int32_t id, char *buf, size_t cap) {
    if (!t || id < 0 || (uint32_t)id >= t->n_vocab || (!buf && cap))
        return -EINVAL;
    const struct pl_tok_token *tk = &t->tok[id];
    const char *s = t->pool + tk->off;
    uint32_t attr = tk->attr;

    if (attr & (PL_TOK_ATTR_UNKNOWN | PL_TOK_ATTR_CONTROL | PL_TOK_ATTR_USER_DEFINED))
        return copy_out(buf, cap, s, tk->len);
    if (attr & PL_TOK_ATTR_NORMAL) {
        size_t n = 0;
        if (t->kind == PL_TOKENIZER_SPM) {
            /* U+2581 (E2 96 81) stands for a space. */
            for (size_t i = 0; i < tk->len; n++) {
                bool sp = i + 3 <= tk->len && (uint8_t)s[i] == 0xe2 && (uint8_t)s[i + 1] == 0x96 &&
                          (uint8_t)s[i + 2] == 0x81;
                if (n >= cap)
                    return -ENOSPC;
                buf[n] = sp ? ' ' : s[i];
                i += sp ? 3 : 1;
            }
            return (int)n;
        }
        /* Byte-level BPE: each code point stands for one byte. A code point outside the map
         * renders as llama.cpp does: "[UNK_BYTE_0x<hex of its UTF-8>" + token text + "]". */
        size_t pos = 0;
        while (pos < tk->len) {
            uint32_t cp = pl_utf8_decode((const uint8_t *)s, tk->len, &pos);
            int b = pl_unicode_cp_to_byte(cp);
            if (b >= 0) {
                if (n >= cap)
                    return -ENOSPC;
                buf[n++] = (char)b;
                continue;
            }
            char tmp[32];
            uint8_t u[4];
            size_t ul = pl_utf8_encode(cp, u);
            int k = snprintf(tmp, sizeof(tmp), "[UNK_BYTE_0x");
            for (size_t j = 0; j < ul; j++)
                k += snprintf(tmp + k, sizeof(tmp) - (size_t)k, "%02x", u[j]);
            if (n + (size_t)k + tk->len + 1 > cap)
                return -ENOSPC;
            memcpy(buf + n, tmp, (size_t)k);
            n += (size_t)k;
            memcpy(buf + n, s, tk->len);
            n += tk->len;
            buf[n++] = ']';
        }
        return (int)n;
    }
    if (attr & PL_TOK_ATTR_BYTE) {
        uint8_t b = byte_of(t, id);
        return copy_out(buf, cap, &b, 1);
    }
    return 0; /* unused and undefined tokens render as nothing, as in llama.cpp */
}
