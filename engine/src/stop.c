/* SPDX-License-Identifier: MIT */
/* Stop-string matcher (engine_stop.h): an Aho-Corasick automaton. The current state is the
 * longest suffix of the stream that is a prefix of some stop string; its depth is exactly
 * the number of bytes that must be held back, and every match ending at the current byte
 * is a suffix of that state's string, so a match never reaches into bytes already declared
 * safe. Built once per request; feeding walks failure links and allocates nothing. */
#include "pl/engine_stop.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NONE UINT32_MAX

struct node {
    uint32_t child;   /* first child, NONE for a leaf */
    uint32_t sibling; /* next child of the same parent, NONE at the end */
    uint32_t fail;    /* longest proper suffix that is also a node */
    uint32_t out;     /* longest stop string that is a suffix of this node's string, or NONE */
    uint16_t depth;
    uint8_t byte; /* label of the edge from the parent */
};

struct pl_stop {
    uint32_t n_nodes;
    struct node *nodes;         /* [n_nodes], 0 is the root */
    uint32_t lens[PL_STOP_MAX]; /* bytes of each stop string */
    uint32_t state;
    uint64_t fed; /* bytes fed so far */
    bool matched;
    struct pl_stop_result match;
};

static uint32_t find_child(const struct pl_stop *s, uint32_t n, uint8_t c) {
    for (uint32_t k = s->nodes[n].child; k != NONE; k = s->nodes[k].sibling)
        if (s->nodes[k].byte == c)
            return k;
    return NONE;
}

int pl_stop_new(const char *const *strs, const size_t *lens, size_t n, struct pl_stop **ret) {
    if (!ret || n > PL_STOP_MAX || (n > 0 && (!strs || !lens)))
        return -EINVAL;
    size_t total = 1;
    for (size_t i = 0; i < n; i++) {
        if (!strs[i] || lens[i] == 0 || lens[i] > PL_STOP_MAX_LEN)
            return -EINVAL;
        total += lens[i];
    }
    struct pl_stop *s = calloc(1, sizeof(*s));
    uint32_t *queue = NULL;
    if (!s)
        return -ENOMEM;
    s->nodes = calloc(total, sizeof(*s->nodes));
    queue = calloc(total, sizeof(*queue));
    if (!s->nodes || !queue) {
        free(queue);
        pl_stop_free(s);
        return -ENOMEM;
    }
    s->nodes[0] = (struct node){.child = NONE, .sibling = NONE, .fail = 0, .out = NONE};
    s->n_nodes = 1;

    /* Trie of the strings; a duplicate keeps the first index. */
    for (size_t i = 0; i < n; i++) {
        const uint8_t *p = (const uint8_t *)strs[i];
        uint32_t cur = 0;
        s->lens[i] = (uint32_t)lens[i];
        for (size_t j = 0; j < lens[i]; j++) {
            uint32_t k = find_child(s, cur, p[j]);
            if (k == NONE) {
                k = s->n_nodes++;
                s->nodes[k] = (struct node){.child = NONE,
                                            .sibling = s->nodes[cur].child,
                                            .fail = 0,
                                            .out = NONE,
                                            .depth = (uint16_t)(j + 1),
                                            .byte = p[j]};
                s->nodes[cur].child = k;
            }
            cur = k;
        }
        if (s->nodes[cur].out == NONE)
            s->nodes[cur].out = (uint32_t)i;
    }

    /* Failure links in breadth-first order, so a node's fail target is finished first;
     * a node that ends no string inherits the longest match of its fail target. */
    uint32_t head = 0, tail = 0;
    for (uint32_t k = s->nodes[0].child; k != NONE; k = s->nodes[k].sibling) {
        s->nodes[k].fail = 0;
        queue[tail++] = k;
    }
    while (head < tail) {
        uint32_t v = queue[head++];
        for (uint32_t k = s->nodes[v].child; k != NONE; k = s->nodes[k].sibling) {
            uint32_t f = s->nodes[v].fail;
            uint32_t t;
            while ((t = find_child(s, f, s->nodes[k].byte)) == NONE && f != 0)
                f = s->nodes[f].fail;
            s->nodes[k].fail = (t != NONE && t != k) ? t : 0;
            if (s->nodes[k].out == NONE)
                s->nodes[k].out = s->nodes[s->nodes[k].fail].out;
            queue[tail++] = k;
        }
    }
    free(queue);
    pl_stop_reset(s);
    *ret = s;
    return 0;
}

void pl_stop_free(struct pl_stop *s) {
    if (!s)
        return;
    free(s->nodes);
    free(s);
}

void pl_stop_reset(struct pl_stop *s) {
    if (!s)
        return;
    s->state = 0;
    s->fed = 0;
    s->matched = false;
    memset(&s->match, 0, sizeof(s->match));
}

int pl_stop_feed(struct pl_stop *s, const void *bytes, size_t len, struct pl_stop_result *ret) {
    if (!s || !ret || (len > 0 && !bytes))
        return -EINVAL;
    if (s->matched) {
        *ret = s->match;
        return 1;
    }
    const uint8_t *p = bytes;
    uint32_t st = s->state;
    for (size_t i = 0; i < len; i++) {
        uint32_t t;
        while ((t = find_child(s, st, p[i])) == NONE && st != 0)
            st = s->nodes[st].fail;
        st = t == NONE ? 0 : t;
        s->fed++;
        uint32_t o = s->nodes[st].out;
        if (o != NONE) {
            s->matched = true;
            s->state = st;
            s->match = (struct pl_stop_result){.safe = s->fed - s->lens[o],
                                               .matched = true,
                                               .which = o,
                                               .match_start = s->fed - s->lens[o],
                                               .match_end = s->fed};
            *ret = s->match;
            return 1;
        }
    }
    s->state = st;
    *ret = (struct pl_stop_result){.safe = s->fed - s->nodes[st].depth};
    return 0;
}

int pl_stop_flush(struct pl_stop *s, struct pl_stop_result *ret) {
    if (!s || !ret)
        return -EINVAL;
    if (s->matched) {
        *ret = s->match;
        return 1;
    }
    *ret = (struct pl_stop_result){.safe = s->fed};
    return 0;
}
