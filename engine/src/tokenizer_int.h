/* SPDX-License-Identifier: MIT */
/* Private state shared by the tokenizer files: tokenizer.c (vocabulary, special tokens,
 * API), tok_spm.c (SentencePiece-style merges) and tok_bpe.c (byte-level BPE). */
#ifndef PL_ENGINE_TOKENIZER_INT_H
#define PL_ENGINE_TOKENIZER_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pl/engine_tokenizer.h"
#include "pretok.h"

/* Token attributes, as llama.cpp derives them from tokenizer.ggml.token_type. */
enum pl_tok_attr {
    PL_TOK_ATTR_UNDEFINED = 0,
    PL_TOK_ATTR_UNKNOWN = 1 << 0,
    PL_TOK_ATTR_UNUSED = 1 << 1,
    PL_TOK_ATTR_NORMAL = 1 << 2,
    PL_TOK_ATTR_CONTROL = 1 << 3,
    PL_TOK_ATTR_USER_DEFINED = 1 << 4,
    PL_TOK_ATTR_BYTE = 1 << 5,
    PL_TOK_ATTR_LSTRIP = 1 << 7, /* eat white space left of the token's text */
    PL_TOK_ATTR_RSTRIP = 1 << 8, /* eat white space right of it */
};

struct pl_tok_token {
    uint32_t off; /* into pool: the text, NUL-terminated */
    uint32_t len;
    float score;
    uint32_t attr; /* enum pl_tok_attr bits */
};

struct pl_tok_merge {
    uint32_t a_off, a_len; /* into merge_pool */
    uint32_t b_off, b_len;
};

struct pl_tokenizer {
    enum pl_tokenizer_kind kind;
    uint32_t n_vocab;
    char *pool;               /* every token's text, each NUL-terminated */
    struct pl_tok_token *tok; /* [n_vocab] */
    uint32_t *map;            /* open addressing text -> id + 1 (0 = empty) */
    size_t map_mask;

    int32_t bos, eos, unk, eot, eom, pad, sep;
    int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    bool add_bos, add_eos;
    bool add_space_prefix; /* SPM: prepend a space to text after BOS/special tokens */
    uint8_t *eog;          /* [n_vocab]: 1 for end-of-generation tokens */

    int32_t *special; /* control/user-defined/unknown ids, longest text first */
    size_t n_special;

    /* SPM */
    int32_t byte_tok[256]; /* byte-fallback token per byte, -1 when none */

    /* BPE */
    enum pl_pretok pre;
    bool ignore_merges;
    char *merge_pool;
    struct pl_tok_merge *merges; /* [n_merges], rank = index */
    uint32_t n_merges;
    uint32_t *merge_map; /* open addressing (a, b) -> rank + 1 */
    size_t merge_mask;
    uint8_t byte_enc[256][2]; /* UTF-8 of the code point that stands for each byte */
    uint8_t byte_enc_len[256];
};

/* A growable id list. */
struct pl_tok_vec {
    int32_t *v;
    size_t n;
    size_t cap;
};

int pl_tok_vec_push(struct pl_tok_vec *v, int32_t id);

/* Id of the token whose text is s[0..len), or -1. */
int32_t pl_tokenizer_find(const struct pl_tokenizer *t, const char *s, size_t len);

/* Rank of the merge "a b", or -1. */
int32_t pl_tokenizer_merge_rank(const struct pl_tokenizer *t, const char *a, size_t a_len,
                                const char *b, size_t b_len);

/* FNV-1a over s, continuing from h. */
static inline uint64_t pl_tok_hash(uint64_t h, const char *s, size_t len) {
    for (size_t i = 0; i < len; i++) {
        h ^= (uint8_t)s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}
#define PL_TOK_HASH_INIT 0xcbf29ce484222325ull

/* Tokenize one raw-text fragment (no special-token parsing) and append the ids to out.
 * SPM: prefix_space prepends " " before escaping spaces to U+2581. 0 or -ENOMEM. */
int pl_tokenizer_spm_encode(const struct pl_tokenizer *t, const char *text, size_t len,
                            bool prefix_space, struct pl_tok_vec *out);
int pl_tokenizer_bpe_encode(const struct pl_tokenizer *t, const char *text, size_t len,
                            struct pl_tok_vec *out);

/* Read tokenizer.ggml.merges into t (BPE only). 0, -PL_ERR_FORMAT (with a message in err),
 * -ENOMEM. */
struct pl_gguf;
int pl_tokenizer_bpe_load(struct pl_tokenizer *t, const struct pl_gguf *g, char *err,
                          size_t err_len);

#endif
