/* SPDX-License-Identifier: MIT */
/* Token sampler: repetition/frequency/presence penalties, top-k, top-p, min-p, temperature
 * and a seeded generator; temperature 0 is greedy (argmax, lowest id wins a tie). The
 * same seed and logits give the same tokens. All memory is allocated in pl_sampler_new():
 * sampling a token allocates nothing and never sorts the whole vocabulary. */
#ifndef PL_ENGINE_ENGINE_SAMPLER_H
#define PL_ENGINE_ENGINE_SAMPLER_H

#include <stdint.h>

struct pl_sampler_params {
    float temp;             /* 0: greedy; > 0: scale logits by 1/temp; negative/NaN: rejected */
    int32_t top_k;          /* 0: off; else keep the k most likely tokens; negative: rejected */
    float top_p;            /* in (0, 1]; 1: off */
    float min_p;            /* in [0, 1]; 0: off */
    float repeat_penalty;   /* > 0; 1: off */
    int32_t penalty_last_n; /* window of recent tokens for the penalties, in
                               [0, PL_SAMPLER_MAX_PENALTY_LAST_N]; 0: off */
    float freq_penalty;     /* finite, either sign; 0: off */
    float presence_penalty; /* finite, either sign; 0: off */
    uint64_t seed;
};

#define PL_SAMPLER_MAX_PENALTY_LAST_N (1 << 20)

/* Defaults: temp 0.8, top_k 40, top_p 0.95, min_p 0.05, repeat_penalty 1 (off),
 * penalty_last_n 64, freq/presence 0 (off), seed 0. */
void pl_sampler_params_default(struct pl_sampler_params *p);
/* 0 when p is usable; -EINVAL for any value outside the ranges documented on the struct
 * (NaN or infinite floats included). */
int pl_sampler_params_check(const struct pl_sampler_params *p);

struct pl_sampler;

/* Allocate every buffer sampling will need (O(n_vocab + penalty_last_n)).
 * Errors: -EINVAL (bad params, n_vocab 0 or above INT32_MAX), -ENOMEM. */
int pl_sampler_new(const struct pl_sampler_params *p, uint32_t n_vocab, struct pl_sampler **ret);
/* NULL is fine. */
void pl_sampler_free(struct pl_sampler *s);
/* Forget history and reseed with the params' seed. */
void pl_sampler_reset(struct pl_sampler *s);
/* Choose a token from logits[n_vocab] (borrowed; the array may be modified: the penalties
 * are applied in place). The chain is llama.cpp's default order: penalties, top-k, top-p,
 * min-p, temperature, then a draw from the softmax of what is left. With temp 0 the result
 * is the argmax of the penalised logits. NaN logits count as -inf. Returns a token id in
 * [0, n_vocab); -EINVAL when s or logits is NULL. Allocates nothing. */
int32_t pl_sampler_sample(struct pl_sampler *s, float *logits);
/* Record a token in the penalty history (prompt tokens and generated ones). Ids outside
 * [0, n_vocab) are ignored. O(1). */
void pl_sampler_accept(struct pl_sampler *s, int32_t token);

#endif
