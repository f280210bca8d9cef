/* SPDX-License-Identifier: MIT */
/* Token sampler: repetition/frequency/presence penalties, top-k, top-p, min-p, temperature
 * and a seeded generator; temperature <= 0 is greedy (argmax, lowest id wins a tie). The
 * same seed and logits give the same tokens. All memory is allocated in pl_sampler_new():
 * sampling a token allocates nothing and never sorts the whole vocabulary. */
#ifndef PL_ENGINE_ENGINE_SAMPLER_H
#define PL_ENGINE_ENGINE_SAMPLER_H

#include <stdint.h>

struct pl_sampler_params {
    float temp;             /* <= 0: greedy */
    int32_t top_k;          /* <= 0: off */
    float top_p;            /* >= 1: off */
    float min_p;            /* <= 0: off */
    float repeat_penalty;   /* 1: off */
    int32_t penalty_last_n; /* window of recent tokens for the penalties; 0: off */
    float freq_penalty;     /* 0: off */
    float presence_penalty; /* 0: off */
    uint64_t seed;
};

/* Defaults: temp 0.8, top_k 40, top_p 0.95, min_p 0.05, penalties off, seed 0. */
void pl_sampler_params_default(struct pl_sampler_params *p);
/* 0 when p is usable; -EINVAL for NaN, negative temperature, top_p outside (0, 1], ... */
int pl_sampler_params_check(const struct pl_sampler_params *p);

struct pl_sampler;

int pl_sampler_new(const struct pl_sampler_params *p, uint32_t n_vocab, struct pl_sampler **ret);
void pl_sampler_free(struct pl_sampler *s);
/* Forget history and reseed with the params' seed. */
void pl_sampler_reset(struct pl_sampler *s);
/* Choose a token from logits[n_vocab] (the array may be modified). */
int32_t pl_sampler_sample(struct pl_sampler *s, float *logits);
/* Record a token in the penalty history (prompt tokens and generated ones). */
void pl_sampler_accept(struct pl_sampler *s, int32_t token);

#endif
