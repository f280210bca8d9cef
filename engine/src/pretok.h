/* SPDX-License-Identifier: MIT */
/* Byte-level BPE pre-tokenizers: split a code point sequence into words the way
 * llama.cpp's regex chain for each `tokenizer.ggml.pre` value does. Each regex is a
 * hand-written matcher over code points and category flags; used by tok_bpe.c. */
#ifndef PL_ENGINE_PRETOK_H
#define PL_ENGINE_PRETOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum pl_pretok {
    PL_PRETOK_DEFAULT = 0,    /* "default" or no key: llama.cpp's fallback chain */
    PL_PRETOK_GPT2,           /* gpt-2, mpt, gpt-neox, phi-2, olmo, ... */
    PL_PRETOK_LLAMA3,         /* llama-bpe, llama3, dbrx, smaug-bpe */
    PL_PRETOK_QWEN2,          /* qwen2, stablelm2, deepseek-r1-qwen, megrez */
    PL_PRETOK_DEEPSEEK_LLM,   /* deepseek-llm */
    PL_PRETOK_DEEPSEEK_CODER, /* deepseek-coder */
    PL_PRETOK_STARCODER,      /* starcoder, refact, command-r, smollm, codeshell, ... */
    PL_PRETOK_FALCON,         /* falcon */
    _PL_PRETOK_MAX
};

/* What a `tokenizer.ggml.pre` value selects. */
struct pl_pretok_info {
    enum pl_pretok type;
    bool ignore_merges; /* a word that is itself a token is emitted whole (llama3) */
    bool add_bos;       /* default for add_bos_token when the key is absent */
};

/* Look up a pre-tokenizer name (len bytes). 0, or -ENOENT for an unknown name. */
int pl_pretok_lookup(const char *name, size_t len, struct pl_pretok_info *ret);

/* A growable list of word lengths, in code points. */
struct pl_pretok_words {
    size_t *len;
    size_t n;
    size_t cap;
};

void pl_pretok_words_done(struct pl_pretok_words *w);

/* Split cps[0..n) into words (their lengths, in order, summing to n) into *words, which is
 * reset first; scratch is a second list the function may use (both reusable across calls).
 * 0 or -ENOMEM. */
int pl_pretok_split(enum pl_pretok type, const uint32_t *cps, size_t n,
                    struct pl_pretok_words *words, struct pl_pretok_words *scratch);

#endif
