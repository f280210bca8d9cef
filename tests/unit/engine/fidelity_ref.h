/* SPDX-License-Identifier: MIT */
/* Reader for the llama.cpp reference files in $PICOLM_TEST_DATA/models (NAME.ref.json and
 * NAME.logits.bin, layout in that folder's README.md), shared by the fidelity test and the
 * CLI integration test. Every count and index in the files is checked. */
#ifndef PL_TESTS_FIDELITY_REF_H
#define PL_TESTS_FIDELITY_REF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FIDELITY_N_GREEDY 32

struct fidelity_greedy {
    int32_t token_ids[FIDELITY_N_GREEDY];
    float top1[FIDELITY_N_GREEDY]; /* logit of the chosen token */
    float top2[FIDELITY_N_GREEDY]; /* second largest logit */
};

struct fidelity_prompt {
    char *text;         /* NUL-terminated UTF-8 (prompts hold no NUL byte) */
    int32_t *token_ids; /* [n_tokens] */
    size_t n_tokens;
    uint32_t logit_positions[3];       /* sorted, < n_tokens */
    struct fidelity_greedy greedy;     /* F32 KV cache */
    struct fidelity_greedy greedy_f16; /* F16 KV cache, when has_greedy_f16 */
    bool has_greedy_f16;
};

struct fidelity_ref {
    char model_file[256];
    uint32_t n_vocab;
    int32_t bos, eos;
    bool adds_bos;
    size_t n_prompts;
    struct fidelity_prompt *prompts;
    float *logits; /* [n_prompts][3][n_vocab] */
};

/* Parse ref_path (and its logits file, named by `logits_file`, next to it). Returns 0, or
 * a negative errno with a message in err. */
int fidelity_ref_load(const char *ref_path, struct fidelity_ref *ret, char *err, size_t err_len);
void fidelity_ref_free(struct fidelity_ref *r);

#endif
