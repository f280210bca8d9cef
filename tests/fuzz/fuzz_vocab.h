/* SPDX-License-Identifier: MIT */
/* The vocabularies the fuzz targets tokenize with: fuzz_vocab_load(target, file) opens
 * $PICOLM_TEST_DATA/tokenizer/FILE once, at LLVMFuzzerInitialize(), and returns its
 * tokenizer. Without the variable or the file the program exits with 77 (the smoke test
 * counts as skipped, as the other tests without their data); a file that does not load
 * aborts it (a finding). Header-only: each target is compiled on its own. */
#ifndef PL_FUZZ_VOCAB_H
#define PL_FUZZ_VOCAB_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "pl/engine_gguf.h"
#include "pl/engine_tokenizer.h"

static struct pl_tokenizer *fuzz_vocab_load(const char *target, const char *file) {
    const char *data = getenv("PICOLM_TEST_DATA");
    char path[4096], err[256];
    struct pl_gguf *g = NULL;
    struct pl_tokenizer *t = NULL;
    if (!data || !data[0]) {
        fprintf(stderr, "%s: set PICOLM_TEST_DATA (the folder with tokenizer/)\n", target);
        exit(77);
    }
    (void)snprintf(path, sizeof(path), "%s/tokenizer/%s", data, file);
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "%s: no %s: skipped\n", target, path);
        exit(77);
    }
    if (pl_gguf_open(path, &g, err, sizeof(err)) < 0 ||
        pl_tokenizer_new(g, &t, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s: %s: %s\n", target, path, err);
        abort();
    }
    pl_gguf_close(g);
    return t;
}

#endif
