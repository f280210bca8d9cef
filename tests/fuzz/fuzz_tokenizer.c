/* SPDX-License-Identifier: MIT */
/* libFuzzer target for the tokenizers: the broker tokenizes every client's prompt, stop
 * strings and chat messages, so any bytes must come back as ids, never as a crash. Loads the
 * three vocabularies of $PICOLM_TEST_DATA/tokenizer once (SentencePiece llama, byte-level
 * BPE gpt-2, and deepseek-llm's regex pre-tokenizer). Input: one mode byte (bits 0-1 the
 * vocabulary, 3 = llama again; bit 2 add_special; bit 3 parse_special), then the text.
 * Checks, besides the sanitizers':
 *   - at most PL_TOKENIZER_MAX_IDS(len) ids;
 *   - every id is in the vocabulary and has a piece;
 *   - a too-small output buffer gives -ENOSPC and the count needed, the same count;
 *   - text without special handling comes back exactly from the pieces when it is valid
 *     UTF-8: byte-level BPE is lossless, and SentencePiece gives the text after the one
 *     space it puts in front (byte fallback covers what the vocabulary lacks), its space
 *     symbol U+2581 read as a space.
 * Built only with -DPL_BUILD_FUZZ=ON (clang); tests/fuzz/run-fuzz.sh fuzz_tokenizer SECONDS
 * (with PICOLM_TEST_DATA set). */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pl/engine_tokenizer.h"
#include "pl/pl_utf8.h"

#include "fuzz_vocab.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const vocab_files[3] = {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf",
                                           "ggml-vocab-deepseek-llm.gguf"};
static struct pl_tokenizer *toks[3];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    for (int i = 0; i < 3; i++)
        toks[i] = fuzz_vocab_load("fuzz_tokenizer", vocab_files[i]);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    const uint8_t mode = data[0];
    const struct pl_tokenizer *t = toks[(mode & 3u) == 3 ? 0 : mode & 3u];
    const bool add_special = mode & 4u, parse_special = mode & 8u;
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;

    size_t cap = PL_TOKENIZER_MAX_IDS(len), n = 0;
    int32_t *ids = malloc(cap * sizeof(*ids));
    if (!ids)
        return 0;
    int r = pl_tokenizer_encode(t, text, len, add_special, parse_special, ids, cap, &n);
    if (r == -ENOSPC) { /* over the bound the header promises */
        fprintf(stderr, "fuzz_tokenizer: %zu ids for %zu bytes\n", n, len);
        abort();
    }
    if (r < 0) {
        free(ids);
        return 0; /* -ENOMEM: a clean failure */
    }
    const uint32_t n_vocab = pl_tokenizer_n_vocab(t);
    char *back = malloc(len + 16), piece[512];
    size_t back_len = 0;
    bool fits = back != NULL;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (uint32_t)ids[i] >= n_vocab)
            abort();
        int p = pl_tokenizer_piece(t, ids[i], piece, sizeof(piece));
        if (p < 0)
            abort();
        if (fits && back_len + (size_t)p <= len + 16) {
            memcpy(back + back_len, piece, (size_t)p);
            back_len += (size_t)p;
        } else {
            fits = false;
        }
    }
    /* The count asked of a buffer one short. */
    if (n > 0) {
        size_t n2 = 0;
        if (pl_tokenizer_encode(t, text, len, add_special, parse_special, ids, n - 1, &n2) !=
                -ENOSPC ||
            n2 != n)
            abort();
    }
    if (!add_special && !parse_special && fits && pl_utf8_valid(data + 1, len)) {
        const bool spm = pl_tokenizer_kind(t) == PL_TOKENIZER_SPM;
        /* SentencePiece: one space in front of non-empty text, and U+2581 in the text is
         * its space symbol, so it comes back as a space (llama.cpp alike) */
        char *want = malloc(len + 1);
        size_t want_len = 0;
        if (!want)
            abort();
        if (spm && len > 0)
            want[want_len++] = ' ';
        for (size_t i = 0; i < len; i++) {
            if (spm && i + 2 < len && !memcmp(text + i, "\xe2\x96\x81", 3)) {
                want[want_len++] = ' ';
                i += 2;
                continue;
            }
            want[want_len++] = text[i];
        }
        const bool same = back_len == want_len && memcmp(back, want, want_len) == 0;
        free(want);
        if (!same) {
            fprintf(stderr,
                    "fuzz_tokenizer: round trip differs (%s, %zu bytes -> %zu ids -> %zu)\n",
                    vocab_files[(mode & 3u) == 3 ? 0 : mode & 3u], len, n, back_len);
            abort();
        }
    }
    free(back);
    free(ids);
    return 0;
}
