/* SPDX-License-Identifier: MIT */
/* Log-softmax of one token and partial selection of the top N (engine_logprobs.h). The
 * top N are kept in a min-heap built inside the caller's output array, so nothing is
 * allocated and the vocabulary is scanned twice (max, then sum + selection). */
#include "pl/engine_logprobs.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* True when a ranks below b: smaller logit, or the same logit and a larger id. */
static bool worse(float la, int32_t ia, float lb, int32_t ib) {
    if (la != lb)
        return la < lb;
    return ia > ib;
}

/* Sift entry i down in the min-heap h[0..n) keyed on the raw logit (stored in .logprob
 * until the end). */
static void sift_down(struct pl_logprob *h, uint32_t n, uint32_t i) {
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && worse(h[l].logprob, h[l].id, h[m].logprob, h[m].id))
            m = l;
        if (r < n && worse(h[r].logprob, h[r].id, h[m].logprob, h[m].id))
            m = r;
        if (m == i)
            return;
        struct pl_logprob t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static void sift_up(struct pl_logprob *h, uint32_t i) {
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (!worse(h[i].logprob, h[i].id, h[p].logprob, h[p].id))
            return;
        struct pl_logprob t = h[i];
        h[i] = h[p];
        h[p] = t;
        i = p;
    }
}

int pl_logprobs_compute(const float *logits, uint32_t n_vocab, int32_t chosen, uint32_t top_n,
                        struct pl_logprob *top, float *ret_chosen) {
    if (!logits || n_vocab == 0 || n_vocab > INT32_MAX || chosen < 0 ||
        (uint32_t)chosen >= n_vocab || top_n > PL_LOGPROBS_MAX_TOP || (top_n > 0 && !top))
        return -EINVAL;

    float max = -INFINITY;
    for (uint32_t i = 0; i < n_vocab; i++) {
        float x = logits[i];
        if (x == INFINITY)
            return -EINVAL;
        if (x > max) /* false for NaN */
            max = x;
    }
    if (max == -INFINITY)
        return -EINVAL;

    uint32_t k = top_n < n_vocab ? top_n : n_vocab;
    uint32_t n_heap = 0;
    double sum = 0.0;
    for (uint32_t i = 0; i < n_vocab; i++) {
        float x = logits[i];
        if (isnan(x))
            x = -INFINITY;
        if (x != -INFINITY)
            sum += exp((double)x - (double)max);
        if (k == 0)
            continue;
        if (n_heap < k) {
            top[n_heap] = (struct pl_logprob){.id = (int32_t)i, .logprob = x};
            sift_up(top, n_heap);
            n_heap++;
        } else if (worse(top[0].logprob, top[0].id, x, (int32_t)i)) {
            top[0] = (struct pl_logprob){.id = (int32_t)i, .logprob = x};
            sift_down(top, n_heap, 0);
        }
    }
    /* sum >= 1: the maximum contributes exp(0). */
    double log_z = (double)max + log(sum);

    /* Heap sort in place: repeatedly move the worst to the end, giving best-first order. */
    for (uint32_t n = n_heap; n > 1; n--) {
        struct pl_logprob t = top[0];
        top[0] = top[n - 1];
        top[n - 1] = t;
        sift_down(top, n - 1, 0);
    }
    for (uint32_t i = 0; i < n_heap; i++)
        top[i].logprob =
            top[i].logprob == -INFINITY ? -INFINITY : (float)((double)top[i].logprob - log_z);

    if (ret_chosen) {
        float x = logits[chosen];
        *ret_chosen = (isnan(x) || x == -INFINITY) ? -INFINITY : (float)((double)x - log_z);
    }
    return (int)n_heap;
}
