/* SPDX-License-Identifier: MIT */
/* Tokenizers read from GGUF metadata: SentencePiece-style (`tokenizer.ggml.model` = llama:
 * scores, byte fallback, leading-space rules) and byte-level BPE (`gpt2`: merges, byte <->
 * unicode map, per-`tokenizer.ggml.pre` pre-tokenizers). Text in, token ids out, and back
 * to exact bytes. A tokenizer is immutable after creation; every function taking a const
 * tokenizer is safe to call from several threads at once. */
#ifndef PL_ENGINE_ENGINE_TOKENIZER_H
#define PL_ENGINE_ENGINE_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pl_gguf;
struct pl_tokenizer;

enum pl_tokenizer_kind {
    PL_TOKENIZER_SPM = 1, /* tokenizer.ggml.model = "llama" */
    PL_TOKENIZER_BPE = 2, /* tokenizer.ggml.model = "gpt2" */
};

/* Build a tokenizer from g's tokenizer.* metadata; copies what it needs (g may be closed
 * afterwards). Errors: -PL_ERR_FORMAT (missing/malformed keys), -PL_ERR_UNSUPPORTED (an
 * unknown model or pre-tokenizer: the message names it), -ENOMEM. */
int pl_tokenizer_new(const struct pl_gguf *g, struct pl_tokenizer **ret, char *err, size_t err_len);
void pl_tokenizer_free(struct pl_tokenizer *t);

enum pl_tokenizer_kind pl_tokenizer_kind(const struct pl_tokenizer *t);
uint32_t pl_tokenizer_n_vocab(const struct pl_tokenizer *t);
int32_t pl_tokenizer_bos(const struct pl_tokenizer *t); /* -1 when none */
int32_t pl_tokenizer_eos(const struct pl_tokenizer *t); /* -1 when none */
bool pl_tokenizer_adds_bos(const struct pl_tokenizer *t);
bool pl_tokenizer_adds_eos(const struct pl_tokenizer *t);
/* True for end-of-generation tokens (EOS, EOT, <|im_end|>, ... as the metadata marks). */
bool pl_tokenizer_is_eog(const struct pl_tokenizer *t, int32_t id);
bool pl_tokenizer_is_control(const struct pl_tokenizer *t, int32_t id);

/* Tokenize len bytes of text (any bytes: malformed UTF-8 never fails; SPM keeps such bytes
 * as <0xXX> byte tokens, BPE reads each as U+FFFD, as llama.cpp). add_special: prepend BOS /
 * append EOS as the vocabulary says; parse_special: recognise control-token text such as
 * "<s>" in the input (user-defined tokens are always recognised, as in llama.cpp). Ids match
 * llama.cpp's llama_tokenize() with the same flags. Writes up to cap ids to out (out may be
 * NULL when cap is 0) and the count to *ret_n. Returns 0, -ENOSPC when cap is too small
 * (*ret_n is then the count needed), -EINVAL, -ENOMEM. Allocates scratch per call. */
/* Ids pl_tokenizer_encode() can give for len bytes: at most 3 per byte (SentencePiece writes
 * a space as U+2581, whose 3 bytes may all fall back to byte tokens when malformed UTF-8
 * around it swallows them; byte-level BPE reads a stray byte as U+FFFD, 3 bytes), plus BOS
 * and EOS. */
#define PL_TOKENIZER_MAX_IDS(len) (3 * (size_t)(len) + 2)

int pl_tokenizer_encode(const struct pl_tokenizer *t, const char *text, size_t len,
                        bool add_special, bool parse_special, int32_t *out, size_t cap,
                        size_t *ret_n);

/* The exact bytes token id stands for (byte tokens give their byte, "▁" gives a space,
 * byte-level BPE symbols are mapped back to bytes, control, user-defined and unknown tokens
 * give their text; unused and undefined-type tokens give nothing, as llama.cpp's
 * token_to_piece with special = true). Returns the byte count (the piece is not
 * NUL-terminated), -ENOSPC when cap is too small, -EINVAL for an id out of range. */
int pl_tokenizer_piece(const struct pl_tokenizer *t, int32_t id, char *buf, size_t cap);

/* The token's text as stored in the vocabulary (not decoded); NULL for a bad id. */
const char *pl_tokenizer_token_text(const struct pl_tokenizer *t, int32_t id, size_t *ret_len);

#endif
