/* SPDX-License-Identifier: MIT */
/* SentencePiece-style tokenization (`tokenizer.ggml.model` = llama), as llama.cpp's
 * llm_tokenizer_spm: spaces become U+2581, the text is cut into UTF-8 characters, and the
 * adjacent pair whose concatenation is the vocabulary token with the highest score (ties:
 * leftmost) is merged until no pair is a token; symbols that are not tokens fall back to
 * byte tokens <0xXX>. A binary heap of candidate pairs keeps it O(n log n). Called by
 * tokenizer.c for each raw-text fragment. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bigram_heap.h"
#include "pl/pl_util.h"
#include "tokenizer_int.h"
#include "unicode.h"

struct sym {
    int32_t prev, next;
    uint32_t off, n; /* bytes of the escaped text; n = 0 once merged away */
};

struct bigram {
    int32_t left, right;
    float score;
    uint32_t size; /* bytes of left + right when the pair was queued */
};

/* a is popped before b: higher score, then smaller left index. */
static inline bool before(const struct bigram *a, const struct bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

PL_BIGRAM_HEAP(256)

struct spm {
    const struct pl_tokenizer *t;
    const char *text;
    struct sym *sym;
    struct heap heap;
};

static int try_add(struct spm *s, int32_t left, int32_t right) {
    if (left < 0 || right < 0)
        return 0;
    /* Adjacent symbols are contiguous in the text. */
    uint32_t size = s->sym[left].n + s->sym[right].n;
    int32_t id = pl_tokenizer_find(s->t, s->text + s->sym[left].off, size);
    if (id < 0)
        return 0;
    return heap_push(&s->heap, (struct bigram){left, right, s->t->tok[id].score, size});
}

static int emit_symbol(const struct spm *s, const struct sym *y, struct pl_tok_vec *out) {
    int32_t id = pl_tokenizer_find(s->t, s->text + y->off, y->n);
    int r;
    if (id >= 0)
        return pl_tok_vec_push(out, id);
    /* Every merged symbol is a token, so only single characters get here. llama.cpp would
     * fail on a byte without a byte token; use the unknown token then, or drop the byte. */
    for (uint32_t j = 0; j < y->n; j++) {
        int32_t b = s->t->byte_tok[(uint8_t)s->text[y->off + j]];
        if (b < 0)
            b = s->t->unk;
        if (b >= 0 && (r = pl_tok_vec_push(out, b)) < 0)
            return r;
    }
    return 0;
}

int pl_tokenizer_spm_encode(const struct pl_tokenizer *t, const char *text, size_t len,
                            bool prefix_space, struct pl_tok_vec *out) {
    struct spm s = {t, NULL, NULL, {0}};
    char *buf = NULL;
    size_t n_bytes = 0, n_sym = 0;
    int r = 0;

    /* Escape: every space (and the prefix) becomes U+2581. */
    size_t cap;
    if (pl_mul_overflow(len + 1, (size_t)3, &cap) || cap > UINT32_MAX)
        return -ENOMEM; /* the symbol offsets are 32-bit */
    buf = malloc(cap ? cap : 1);
    if (!buf)
        return -ENOMEM;
    if (prefix_space) {
        memcpy(buf, "\xe2\x96\x81", 3);
        n_bytes = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(buf + n_bytes, "\xe2\x96\x81", 3);
            n_bytes += 3;
        } else {
            buf[n_bytes++] = text[i];
        }
    }
    if (n_bytes == 0)
        goto out;
    s.text = buf;

    s.sym = malloc(n_bytes * sizeof(*s.sym));
    if (!s.sym) {
        r = -ENOMEM;
        goto out;
    }
    for (size_t off = 0; off < n_bytes;) {
        size_t n = PL_MIN(pl_utf8_len((uint8_t)buf[off]), n_bytes - off);
        s.sym[n_sym] = (struct sym){(int32_t)n_sym - 1, -1, (uint32_t)off, (uint32_t)n};
        off += n;
        if (off < n_bytes)
            s.sym[n_sym].next = (int32_t)n_sym + 1;
        n_sym++;
    }
    if (n_sym > INT32_MAX) {
        r = -ENOMEM;
        goto out;
    }

    for (size_t i = 1; i < n_sym; i++)
        if ((r = try_add(&s, (int32_t)i - 1, (int32_t)i)) < 0)
            goto out;

    while (s.heap.n) {
        struct bigram b = heap_pop(&s.heap);
        struct sym *l = &s.sym[b.left], *rt = &s.sym[b.right];
        /* Stale: one side was merged into something else since the pair was queued. */
        if (l->n == 0 || rt->n == 0 || l->n + rt->n != b.size)
            continue;
        l->n += rt->n;
        rt->n = 0;
        l->next = rt->next;
        if (rt->next >= 0)
            s.sym[rt->next].prev = b.left;
        if ((r = try_add(&s, l->prev, b.left)) < 0 || (r = try_add(&s, b.left, l->next)) < 0)
            goto out;
    }

    for (int32_t i = 0; i != -1; i = s.sym[i].next)
        if ((r = emit_symbol(&s, &s.sym[i], out)) < 0)
            goto out;
out:
    free(s.heap.v);
    free(s.sym);
    free(buf);
    return r;
}
