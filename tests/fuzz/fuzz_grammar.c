/* SPDX-License-Identifier: MIT */
/* libFuzzer target for the JSON grammar: a client's json_schema is compiled inside the broker,
 * and the automaton then steers every token of the generation. Input: a schema, a NUL byte,
 * then a text (no NUL: JSON mode, the whole input is the text). Loads the llama vocabulary of
 * $PICOLM_TEST_DATA/tokenizer once for the token masks. Checks, besides the sanitizers':
 *   - compiling fails cleanly or gives a grammar;
 *   - the text fed byte by byte: when every byte is taken and the state says complete, the
 *     text is JSON (the engine's own JSON reader parses it), and the distance to a complete
 *     text is 0 exactly then;
 *   - 12 masked steps from the start, each taking an allowed token the input picks: the
 *     mask allows at least one token while the text is incomplete (and the limit of tokens
 *     left is honoured), and accept() takes every token the mask allowed.
 * Built only with -DPL_BUILD_FUZZ=ON (clang); tests/fuzz/run-fuzz.sh fuzz_grammar SECONDS
 * (with PICOLM_TEST_DATA set). */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_doc.h"
#include "pl/engine_grammar.h"
#include "pl/engine_tokenizer.h"

#include "fuzz_vocab.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define STEPS 12u

static struct pl_tokenizer *tok;
static struct pl_grammar_vocab *gv;
static float *logits;
static uint32_t n_vocab;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    tok = fuzz_vocab_load("fuzz_grammar", "ggml-vocab-llama-spm.gguf");
    if (pl_grammar_vocab_new(tok, &gv) < 0) {
        fprintf(stderr, "fuzz_grammar: no grammar vocabulary\n");
        abort();
    }
    n_vocab = pl_tokenizer_n_vocab(tok);
    logits = malloc(n_vocab * sizeof(*logits));
    if (!logits)
        abort();
    return 0;
}

/* Feed text byte by byte; check completeness against the JSON reader and the distance. */
static void feed(const struct pl_grammar *g, const char *text, size_t len) {
    struct pl_grammar_state *st = NULL;
    if (pl_grammar_state_new(g, &st) < 0)
        return;
    size_t i = 0;
    for (; i < len; i++) {
        if (pl_grammar_feed_text(st, text + i, 1) < 0)
            break;
        if (pl_grammar_state_complete(st) != (pl_grammar_state_distance(st) == 0))
            abort();
    }
    if (i > 0 && pl_grammar_state_complete(st)) {
        struct pl_json_doc *d = NULL;
        char err[128];
        int r = pl_json_doc_parse(text, i, &d, err, sizeof(err));
        if (r == -EINVAL) {
            fprintf(stderr,
                    "fuzz_grammar: the grammar took %zu bytes the JSON reader refuses: "
                    "%s\n",
                    i, err);
            abort();
        }
        pl_json_doc_free(d);
    }
    pl_grammar_state_free(st);
}

/* Masked steps: pick[k] chooses among the allowed tokens. */
static void steps(const struct pl_grammar *g, const uint8_t *pick, size_t n_pick) {
    struct pl_grammar_state *st = NULL;
    if (pl_grammar_state_new(g, &st) < 0)
        return;
    for (uint32_t k = 0; k < STEPS; k++) {
        for (uint32_t i = 0; i < n_vocab; i++)
            logits[i] = 0.0f;
        const uint32_t left = STEPS - k + 40; /* a limit the masks must respect */
        int n = pl_grammar_mask(st, logits, left);
        if (n < 0)
            abort(); /* the state has not ended: the mask must work */
        if (n == 0) {
            if (!pl_grammar_state_complete(st))
                abort(); /* stuck before the value is complete */
            break;
        }
        uint32_t want = (uint32_t)(k < n_pick ? pick[k] : k) % (uint32_t)n, id = 0, seen = 0;
        for (; id < n_vocab; id++)
            if (!isinf(logits[id]) && seen++ == want)
                break;
        if (id == n_vocab || seen != want + 1)
            abort(); /* fewer allowed tokens than the mask counted */
        int r = pl_grammar_accept(st, (int32_t)id);
        if (r < 0)
            abort(); /* an allowed token refused */
        if (r == 1)
            break; /* EOG on a complete text */
    }
    pl_grammar_state_free(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    const char *schema = nul ? (const char *)data : NULL;
    const size_t schema_len = nul ? (size_t)(nul - data) : 0;
    const char *text = nul ? (const char *)nul + 1 : (const char *)data;
    const size_t text_len = nul ? size - schema_len - 1 : size;
    struct pl_grammar *g = NULL;
    char err[256];
    if (pl_grammar_compile_json(gv, schema, schema_len, &g, err, sizeof(err)) < 0)
        return 0;
    feed(g, text, text_len);
    steps(g, (const uint8_t *)text, text_len);
    pl_grammar_free(g);
    return 0;
}
