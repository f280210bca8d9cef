/* SPDX-License-Identifier: MIT */
/* Token sampler: llama.cpp's default chain (penalties, top-k, top-p, min-p, temperature,
 * draw) over a preallocated candidate array, with a xoshiro256** generator. Used by the
 * in-process CLI and by the daemon's inference loop, once per sequence. Nothing here
 * allocates after pl_sampler_new(), and nothing sorts the whole vocabulary: candidates are
 * picked by partial selection and only the survivors are sorted. */
#include "pl/engine_sampler.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pl/pl_util.h"

/* First batch of candidates examined by top-p when no top-k bounds the set; doubled until
 * the selected mass reaches p. Covers the usual case (a peaked distribution) in one step. */
#define TOP_P_FIRST_CHUNK 256u
/* Ranges at most this long are finished with insertion sort. */
#define SMALL_RANGE 16u

struct cand {
    float logit;
    int32_t id;
};

struct pl_sampler {
    struct pl_sampler_params p;
    uint32_t n_vocab;
    uint64_t rng[4];   /* xoshiro256** state */
    struct cand *cand; /* [n_vocab] candidate scratch */

    /* Penalty history: the last `win` accepted tokens in a ring, how often each token
     * occurs in it, and the list of distinct tokens in it (so the penalties touch only
     * those, never the whole vocabulary). */
    uint32_t win;       /* penalty_last_n */
    uint32_t ring_head; /* next slot to write */
    uint32_t ring_len;  /* tokens in the ring, <= win */
    int32_t *ring;      /* [win] */
    uint32_t *count;    /* [n_vocab] occurrences in the ring */
    uint32_t *dpos;     /* [n_vocab] index in distinct[] of a token whose count > 0 */
    int32_t *distinct;  /* [win] tokens with count > 0 */
    uint32_t n_distinct;
};

/* ---- Parameters ---- */

void pl_sampler_params_default(struct pl_sampler_params *p) {
    *p = (struct pl_sampler_params){
        .temp = 0.8f,
        .top_k = 40,
        .top_p = 0.95f,
        .min_p = 0.05f,
        .repeat_penalty = 1.0f,
        .penalty_last_n = 64,
        .freq_penalty = 0.0f,
        .presence_penalty = 0.0f,
        .seed = 0,
    };
}

int pl_sampler_params_check(const struct pl_sampler_params *p) {
    if (!p)
        return -EINVAL;
    /* isfinite() is false for NaN, so every range test below also rejects NaN. */
    if (!isfinite(p->temp) || p->temp < 0.0f)
        return -EINVAL;
    if (p->top_k < 0)
        return -EINVAL;
    if (!isfinite(p->top_p) || !(p->top_p > 0.0f && p->top_p <= 1.0f))
        return -EINVAL;
    if (!isfinite(p->min_p) || !(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return -EINVAL;
    /* The repeat penalty divides logits: 0 would divide by zero and a negative factor
     * would flip signs, which is no penalty at all. */
    if (!isfinite(p->repeat_penalty) || !(p->repeat_penalty > 0.0f))
        return -EINVAL;
    if (p->penalty_last_n < 0 || p->penalty_last_n > PL_SAMPLER_MAX_PENALTY_LAST_N)
        return -EINVAL;
    /* Frequency and presence penalties may be negative (they then encourage repetition,
     * as in llama.cpp and the OpenAI API), but must be finite. */
    if (!isfinite(p->freq_penalty) || !isfinite(p->presence_penalty))
        return -EINVAL;
    return 0;
}

/* ---- Generator: splitmix64 seeding, xoshiro256** ---- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl64(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(uint64_t s[4]) {
    uint64_t result = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

/* Uniform double in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t s[4]) {
    return (double)(rng_next(s) >> 11) * 0x1.0p-53;
}

static void rng_seed(uint64_t s[4], uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        s[i] = splitmix64(&x); /* splitmix64 never yields four zero words in a row */
}

/* ---- Partial selection and sorting of candidates ---- */

/* Total order: higher logit first, lower id first among equal logits (ids are distinct). */
static inline bool better(const struct cand *a, const struct cand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static inline void cswap(struct cand *a, struct cand *b) {
    struct cand t = *a;
    *a = *b;
    *b = t;
}

/* Sift down in a heap whose root is the WORST element. */
static void sift_worst(struct cand *h, size_t n, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && better(&h[w], &h[l]))
            w = l;
        if (r < n && better(&h[w], &h[r]))
            w = r;
        if (w == i)
            return;
        cswap(&h[i], &h[w]);
        i = w;
    }
}

static void insertion_sort(struct cand *c, size_t n) {
    for (size_t i = 1; i < n; i++) {
        struct cand x = c[i];
        size_t j = i;
        while (j > 0 && better(&x, &c[j - 1])) {
            c[j] = c[j - 1];
            j--;
        }
        c[j] = x;
    }
}

/* Sort best-first, in place, O(n log n) worst case (heapsort: no allocation, unlike some
 * qsort implementations). */
static void sort_best_first(struct cand *c, size_t n) {
    if (n <= SMALL_RANGE) {
        insertion_sort(c, n);
        return;
    }
    for (size_t i = n / 2; i-- > 0;)
        sift_worst(c, n, i);
    /* The worst element goes to the back each round, so the array ends best-first. */
    for (size_t end = n - 1; end > 0; end--) {
        cswap(&c[0], &c[end]);
        sift_worst(c, end, 0);
    }
}

/* Fallback selection with a bounded heap: O(n log k) whatever the data. */
static void heap_select(struct cand *c, size_t n, size_t k) {
    for (size_t i = k / 2; i-- > 0;)
        sift_worst(c, k, i);
    for (size_t j = k; j < n; j++) {
        if (better(&c[j], &c[0])) {
            cswap(&c[j], &c[0]);
            sift_worst(c, k, 0);
        }
    }
}

static unsigned ilog2(size_t n) {
    unsigned r = 0;
    while (n >>= 1)
        r++;
    return r;
}

/* Rearrange c[0..n) so that the k best candidates are in c[0..k), in no particular order.
 * Quickselect with a median-of-three pivot; if it degrades (too many rounds) the rest is
 * done by heap selection, so the worst case stays O(n log k). */
static void select_top(struct cand *c, size_t n, size_t k) {
    if (k == 0 || k >= n)
        return;
    size_t lo = 0, hi = n;
    unsigned budget = 2 * ilog2(n) + 4;
    /* Invariant: everything in [0, lo) is better than everything in [lo, n), and
     * everything in [hi, n) is worse than everything in [0, hi); lo <= k < hi. */
    while (hi - lo > SMALL_RANGE) {
        if (budget-- == 0) {
            heap_select(c + lo, hi - lo, k - lo);
            return;
        }
        size_t mid = lo + (hi - lo) / 2, last = hi - 1;
        /* Order c[lo], c[mid], c[last] so that the median ends up at mid. */
        if (better(&c[mid], &c[lo]))
            cswap(&c[mid], &c[lo]);
        if (better(&c[last], &c[lo]))
            cswap(&c[last], &c[lo]);
        if (better(&c[last], &c[mid]))
            cswap(&c[last], &c[mid]);
        cswap(&c[mid], &c[last]);
        struct cand pivot = c[last];
        size_t store = lo;
        for (size_t i = lo; i < last; i++) {
            if (better(&c[i], &pivot))
                cswap(&c[i], &c[store++]);
        }
        cswap(&c[store], &c[last]);
        if (store == k || store + 1 == k)
            return;
        if (k < store)
            hi = store;
        else
            lo = store + 1;
    }
    insertion_sort(c + lo, hi - lo);
}

/* ---- Penalty history ---- */

static void history_clear(struct pl_sampler *s) {
    for (uint32_t i = 0; i < s->n_distinct; i++)
        s->count[s->distinct[i]] = 0;
    s->n_distinct = 0;
    s->ring_head = 0;
    s->ring_len = 0;
}

void pl_sampler_accept(struct pl_sampler *s, int32_t token) {
    if (!s || s->win == 0 || token < 0 || (uint32_t)token >= s->n_vocab)
        return;
    if (s->ring_len == s->win) {
        /* Evict the oldest token: it sits where the next one is written. */
        int32_t old = s->ring[s->ring_head];
        if (--s->count[old] == 0) {
            uint32_t at = s->dpos[old];
            int32_t moved = s->distinct[--s->n_distinct];
            s->distinct[at] = moved;
            s->dpos[moved] = at;
        }
    } else {
        s->ring_len++;
    }
    s->ring[s->ring_head] = token;
    s->ring_head = s->ring_head + 1 == s->win ? 0 : s->ring_head + 1;
    if (s->count[token]++ == 0) {
        s->dpos[token] = s->n_distinct;
        s->distinct[s->n_distinct++] = token;
    }
}

/* llama.cpp's penalties: for each token seen in the window, a positive logit is divided by
 * the repeat penalty and a non-positive one multiplied by it, then count * freq_penalty and
 * presence_penalty are subtracted. */
static void apply_penalties(struct pl_sampler *s, float *logits) {
    const struct pl_sampler_params *p = &s->p;
    if (s->win == 0 ||
        (p->repeat_penalty == 1.0f && p->freq_penalty == 0.0f && p->presence_penalty == 0.0f))
        return;
    for (uint32_t i = 0; i < s->n_distinct; i++) {
        int32_t id = s->distinct[i];
        float l = logits[id];
        if (l <= 0.0f)
            l *= p->repeat_penalty;
        else
            l /= p->repeat_penalty;
        l -= (float)s->count[id] * p->freq_penalty + p->presence_penalty;
        logits[id] = l;
    }
}

/* ---- Lifetime ---- */

int pl_sampler_new(const struct pl_sampler_params *p, uint32_t n_vocab, struct pl_sampler **ret) {
    struct pl_sampler *s = NULL;
    int r = pl_sampler_params_check(p);
    if (r < 0 || !ret)
        return -EINVAL;
    if (n_vocab == 0 || n_vocab > INT32_MAX)
        return -EINVAL;
    s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->p = *p;
    s->n_vocab = n_vocab;
    s->win = (uint32_t)p->penalty_last_n;
    s->cand = calloc(n_vocab, sizeof(*s->cand));
    if (!s->cand)
        goto fail;
    if (s->win > 0) {
        s->ring = calloc(s->win, sizeof(*s->ring));
        s->distinct = calloc(s->win, sizeof(*s->distinct));
        s->count = calloc(n_vocab, sizeof(*s->count));
        s->dpos = calloc(n_vocab, sizeof(*s->dpos));
        if (!s->ring || !s->distinct || !s->count || !s->dpos)
            goto fail;
    }
    rng_seed(s->rng, p->seed);
    *ret = s;
    return 0;
fail:
    pl_sampler_free(s);
    return -ENOMEM;
}

void pl_sampler_free(struct pl_sampler *s) {
    if (!s)
        return;
    free(s->cand);
    free(s->ring);
    free(s->distinct);
    free(s->count);
    free(s->dpos);
    free(s);
}

void pl_sampler_reset(struct pl_sampler *s) {
    if (!s)
        return;
    if (s->win > 0)
        history_clear(s);
    rng_seed(s->rng, s->p.seed);
}

/* ---- The chain ---- */

static int32_t argmax(const float *logits, uint32_t n) {
    int32_t best = 0;
    float best_l = -INFINITY;
    bool found = false;
    for (uint32_t i = 0; i < n; i++) {
        float l = logits[i];
        /* Strictly greater: the lowest id wins a tie. NaN never compares greater. */
        if (!found ? !isnan(l) : l > best_l) {
            best = (int32_t)i;
            best_l = l;
            found = true;
        }
    }
    return best;
}

/* top-p over c[0..n) that is already sorted best-first: the shortest prefix whose softmax
 * mass reaches p (at least one token). */
static size_t top_p_sorted(const struct cand *c, size_t n, float p) {
    float max = c[0].logit;
    if (isinf(max))
        return 1; /* +inf takes all the mass; all -inf: keep the first, as llama.cpp does */
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += exp((double)(c[i].logit - max));
    double target = (double)p * sum, cum = 0.0;
    for (size_t i = 0; i < n; i++) {
        cum += exp((double)(c[i].logit - max));
        if (cum >= target)
            return i + 1;
    }
    return n;
}

/* top-p over c[0..n) in no order: select and sort the best TOP_P_FIRST_CHUNK candidates,
 * then twice as many more, and so on, until their mass reaches p. On return c[0..result)
 * is sorted best-first and holds the kept tokens. */
static size_t top_p_unsorted(struct cand *c, size_t n, float p) {
    float max = -INFINITY;
    for (size_t i = 0; i < n; i++)
        max = c[i].logit > max ? c[i].logit : max;
    if (isinf(max)) {
        select_top(c, n, 1);
        return 1;
    }
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += exp((double)(c[i].logit - max));
    double target = (double)p * sum, cum = 0.0;
    size_t done = 0, chunk = TOP_P_FIRST_CHUNK;
    for (;;) {
        size_t upto = n - done > chunk ? done + chunk : n;
        /* c[0..done) is sorted and better than all of c[done..n). */
        select_top(c + done, n - done, upto - done);
        sort_best_first(c + done, upto - done);
        for (size_t i = done; i < upto; i++) {
            cum += exp((double)(c[i].logit - max));
            if (cum >= target)
                return i + 1;
        }
        if (upto == n)
            return n;
        done = upto;
        chunk *= 2;
    }
}

int32_t pl_sampler_sample(struct pl_sampler *s, float *logits) {
    if (!s || !logits)
        return -EINVAL;
    const struct pl_sampler_params *p = &s->p;
    uint32_t n_vocab = s->n_vocab;

    apply_penalties(s, logits);
    if (p->temp <= 0.0f)
        return argmax(logits, n_vocab);

    struct cand *c = s->cand;
    for (uint32_t i = 0; i < n_vocab; i++) {
        float l = logits[i];
        c[i].logit = isnan(l) ? -INFINITY : l;
        c[i].id = (int32_t)i;
    }
    size_t n = n_vocab;
    bool sorted = false;

    if (p->top_k > 0) {
        size_t k = (uint32_t)p->top_k < n_vocab ? (size_t)p->top_k : n_vocab;
        select_top(c, n, k);
        n = k;
        sort_best_first(c, n);
        sorted = true;
    }
    if (p->top_p < 1.0f) {
        n = sorted ? top_p_sorted(c, n, p->top_p) : top_p_unsorted(c, n, p->top_p);
        sorted = true;
    }
    if (p->min_p > 0.0f) {
        /* Keep tokens whose probability is at least min_p times the top one's, i.e. whose
         * logit is at least max + log(min_p); the pass keeps their order. */
        float max = -INFINITY;
        if (sorted) {
            max = c[0].logit;
        } else {
            for (size_t i = 0; i < n; i++)
                max = c[i].logit > max ? c[i].logit : max;
        }
        float floor_l = max + logf(p->min_p);
        size_t kept = 0;
        for (size_t i = 0; i < n; i++) {
            if (c[i].logit >= floor_l)
                c[kept++] = c[i];
        }
        n = kept > 0 ? kept : 1; /* all -inf: keep the first, as the other filters do */
    }

    /* Temperature, softmax and the draw. */
    float max = -INFINITY;
    for (size_t i = 0; i < n; i++)
        max = c[i].logit > max ? c[i].logit : max;
    if (isinf(max)) {
        /* All -inf, or some +inf (which take all the mass): the first such candidate. */
        for (size_t i = 0; i < n; i++) {
            if (c[i].logit == max)
                return c[i].id;
        }
    }
    /* The weights replace the logits in the candidates: the draw needs only them. */
    double inv_t = 1.0 / (double)p->temp, sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        float w = (float)exp(((double)c[i].logit - (double)max) * inv_t);
        c[i].logit = w;
        sum += w;
    }
    double r = rng_uniform(s->rng) * sum, cum = 0.0;
    for (size_t i = 0; i < n; i++) {
        cum += c[i].logit;
        if (r < cum && c[i].logit > 0.0f)
            return c[i].id;
    }
    /* Rounding left r at or past the last partial sum: take the last token with weight. */
    for (size_t i = n; i-- > 0;) {
        if (c[i].logit > 0.0f)
            return c[i].id;
    }
    return c[0].id;
}
