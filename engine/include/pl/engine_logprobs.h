/* SPDX-License-Identifier: MIT */
/* Log-probabilities of generated tokens: the log-softmax of the chosen token and the N most
 * likely tokens of the same distribution, for requests that ask for logprobs. Called by the
 * daemon's inference loop and the in-process CLI once per generated token, on the logits the
 * token was drawn from. Allocates nothing; never sorts the whole vocabulary. */
#ifndef PL_ENGINE_ENGINE_LOGPROBS_H
#define PL_ENGINE_ENGINE_LOGPROBS_H

#include <stddef.h>
#include <stdint.h>

/* Largest top-N a caller may ask for. */
#define PL_LOGPROBS_MAX_TOP 256u

struct pl_logprob {
    int32_t id;
    float logprob; /* natural log of the probability; -INFINITY for a masked token */
};

/* log p(chosen) and the top_n most likely tokens of softmax(logits[n_vocab]) (borrowed, not
 * modified). NaN and -INFINITY logits count as probability 0 (logprob -INFINITY); +INFINITY
 * is rejected. top (capacity top_n, may be NULL when top_n is 0) receives min(top_n,
 * n_vocab) entries sorted by decreasing probability, the lower id first on a tie.
 * *ret_chosen gets log p(chosen) (ret_chosen may be NULL). The sum over the vocabulary is
 * computed in double precision. Cost O(n_vocab log top_n).
 * Returns the number of entries written to top, or -EINVAL (NULL logits, n_vocab 0 or above
 * INT32_MAX, chosen out of range, top_n above PL_LOGPROBS_MAX_TOP, top NULL with top_n > 0,
 * +INFINITY in logits, or no finite logit at all). */
int pl_logprobs_compute(const float *logits, uint32_t n_vocab, int32_t chosen, uint32_t top_n,
                        struct pl_logprob *top, float *ret_chosen);

#endif
