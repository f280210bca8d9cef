/* SPDX-License-Identifier: MIT */
/* The binary min-heap of candidate merges both tokenizers use (tok_spm.c, tok_bpe.c). Each
 * file defines `struct bigram` and `static bool before(a, b)` (a is popped first), then
 * expands PL_BIGRAM_HEAP(initial_cap) to get `struct heap` with heap_push/heap_pop. */
#ifndef PL_ENGINE_BIGRAM_HEAP_H
#define PL_ENGINE_BIGRAM_HEAP_H

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>

#define PL_BIGRAM_HEAP(initial_cap)                                                                \
    struct heap {                                                                                  \
        struct bigram *v;                                                                          \
        size_t n, cap;                                                                             \
    };                                                                                             \
                                                                                                   \
    static int heap_push(struct heap *h, struct bigram x) {                                        \
        if (h->n == h->cap) {                                                                      \
            size_t cap = h->cap ? h->cap * 2 : (initial_cap);                                      \
            struct bigram *p = realloc(h->v, cap * sizeof(*p));                                    \
            if (!p)                                                                                \
                return -ENOMEM;                                                                    \
            h->v = p;                                                                              \
            h->cap = cap;                                                                          \
        }                                                                                          \
        size_t i = h->n++;                                                                         \
        while (i > 0) {                                                                            \
            size_t parent = (i - 1) / 2;                                                           \
            if (!before(&x, &h->v[parent]))                                                        \
                break;                                                                             \
            h->v[i] = h->v[parent];                                                                \
            i = parent;                                                                            \
        }                                                                                          \
        h->v[i] = x;                                                                               \
        return 0;                                                                                  \
    }                                                                                              \
                                                                                                   \
    /* Requires h->n > 0. */                                                                       \
    static struct bigram heap_pop(struct heap *h) {                                                \
        struct bigram top = h->v[0];                                                               \
        struct bigram last = h->v[--h->n];                                                         \
        size_t i = 0;                                                                              \
        for (;;) {                                                                                 \
            size_t c = 2 * i + 1;                                                                  \
            if (c >= h->n)                                                                         \
                break;                                                                             \
            if (c + 1 < h->n && before(&h->v[c + 1], &h->v[c]))                                    \
                c++;                                                                               \
            if (!before(&h->v[c], &last))                                                          \
                break;                                                                             \
            h->v[i] = h->v[c];                                                                     \
            i = c;                                                                                 \
        }                                                                                          \
        if (h->n)                                                                                  \
            h->v[i] = last;                                                                        \
        return top;                                                                                \
    }

#endif
