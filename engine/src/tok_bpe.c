/* SPDX-License-Identifier: MIT */
/* Byte-level BPE (`tokenizer.ggml.model` = gpt2), as llama.cpp's llm_tokenizer_bpe: the
 * pre-tokenizer (pretok.c) splits the text into words, each word's UTF-8 bytes are mapped
 * to GPT-2's printable code points, and adjacent symbols are merged by ascending merge
 * rank (tokenizer.ggml.merges, "a b", rank = index; ties: leftmost) through a binary heap.
 * Called by tokenizer.c for each raw-text fragment. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigram_heap.h"
#include "pl/engine_gguf.h"
#include "pl/pl_err.h"
#include "pl/pl_util.h"
#include "tokenizer_int.h"
#include "unicode.h"

/* ---- Merge table ---- */

static uint64_t merge_hash(const char *a, size_t a_len, const char *b, size_t b_len) {
    uint64_t h = pl_tok_hash(PL_TOK_HASH_INIT, a, a_len);
    h ^= 0xff; /* a separator no UTF-8 text contains, so "ab"+"c" != "a"+"bc" */
    h *= 0x100000001b3ull;
    return pl_tok_hash(h, b, b_len);
}

int32_t pl_tokenizer_merge_rank(const struct pl_tokenizer *t, const char *a, size_t a_len,
                                const char *b, size_t b_len) {
    size_t i = merge_hash(a, a_len, b, b_len) & t->merge_mask;
    for (;;) {
        uint32_t e = t->merge_map[i];
        if (!e)
            return -1;
        const struct pl_tok_merge *m = &t->merges[e - 1];
        if (m->a_len == a_len && m->b_len == b_len &&
            memcmp(t->merge_pool + m->a_off, a, a_len) == 0 &&
            memcmp(t->merge_pool + m->b_off, b, b_len) == 0)
            return (int32_t)(e - 1);
        i = (i + 1) & t->merge_mask;
    }
}

int pl_tokenizer_bpe_load(struct pl_tokenizer *t, const struct pl_gguf *g, char *err,
                          size_t err_len) {
    struct pl_gguf_arr arr;
    int r = pl_gguf_get_arr(g, "tokenizer.ggml.merges", PL_GGUF_TYPE_STRING, &arr);
    if (r < 0) {
        if (err && err_len)
            (void)snprintf(err, err_len, "tokenizer.ggml.merges: %s",
                           r == -ENOENT ? "missing" : "not an array of strings");
        return -PL_ERR_FORMAT;
    }
    if (arr.n > INT32_MAX - 1) {
        if (err && err_len)
            (void)snprintf(err, err_len, "tokenizer.ggml.merges: too many merges");
        return -PL_ERR_FORMAT;
    }

    uint64_t pool_len = 0;
    for (uint64_t i = 0; i < arr.n; i++) {
        struct pl_gguf_str s;
        if (pl_gguf_arr_str(&arr, i, &s) < 0)
            return -PL_ERR_FORMAT;
        pool_len += s.len;
    }
    if (pool_len > UINT32_MAX) {
        if (err && err_len)
            (void)snprintf(err, err_len, "tokenizer.ggml.merges: texts too large");
        return -PL_ERR_FORMAT;
    }
    t->merge_pool = malloc(pool_len ? pool_len : 1);
    t->merges = malloc((arr.n ? arr.n : 1) * sizeof(*t->merges));
    size_t ts = 16;
    while (ts < arr.n * 2)
        ts <<= 1;
    t->merge_map = calloc(ts, sizeof(*t->merge_map));
    if (!t->merge_pool || !t->merges || !t->merge_map)
        return -ENOMEM;
    t->merge_mask = ts - 1;

    uint32_t off = 0;
    for (uint64_t i = 0; i < arr.n; i++) {
        struct pl_gguf_str s;
        (void)pl_gguf_arr_str(&arr, i, &s);
        /* Split at the first space after the first byte; a line without one is kept but can
         * never match (llama.cpp stores it as the pair ("", "")). Only the first of two
         * equal pairs counts. */
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        memcpy(t->merge_pool + off, s.ptr, s.len);
        struct pl_tok_merge *m = &t->merges[t->n_merges];
        if (sp) {
            size_t a_len = (size_t)(sp - s.ptr);
            *m = (struct pl_tok_merge){off, (uint32_t)a_len, off + (uint32_t)a_len + 1,
                                       (uint32_t)(s.len - a_len - 1)};
        } else {
            *m = (struct pl_tok_merge){off, 0, off, 0};
        }
        off += (uint32_t)s.len;
        t->n_merges++;

        const char *a = t->merge_pool + m->a_off, *b = t->merge_pool + m->b_off;
        size_t h = merge_hash(a, m->a_len, b, m->b_len) & t->merge_mask;
        for (;;) {
            uint32_t e = t->merge_map[h];
            if (!e) {
                t->merge_map[h] = (uint32_t)i + 1;
                break;
            }
            const struct pl_tok_merge *o = &t->merges[e - 1];
            if (o->a_len == m->a_len && o->b_len == m->b_len &&
                memcmp(t->merge_pool + o->a_off, a, m->a_len) == 0 &&
                memcmp(t->merge_pool + o->b_off, b, m->b_len) == 0)
                break; /* duplicate: keep the lower rank */
            h = (h + 1) & t->merge_mask;
        }
    }

    for (unsigned b = 0; b < 256; b++) {
        uint8_t u[4];
        size_t n = pl_utf8_encode(pl_unicode_byte_to_cp((uint8_t)b), u);
        memcpy(t->byte_enc[b], u, n); /* the code points are < U+0800: at most 2 bytes */
        t->byte_enc_len[b] = (uint8_t)n;
    }
    return 0;
}

/* ---- Merging ---- */

struct sym {
    int32_t prev, next;
    uint32_t off, n; /* bytes of the encoded word; n = 0 once merged away */
};

struct bigram {
    int32_t left, right;
    int32_t rank;
    uint32_t size;
};

/* a is popped before b: lower rank, then smaller left index. */
static inline bool before(const struct bigram *a, const struct bigram *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

PL_BIGRAM_HEAP(64)

/* Scratch reused across the words of one fragment. */
struct bpe {
    const struct pl_tokenizer *t;
    char *word;
    size_t word_cap;
    struct sym *sym;
    size_t sym_cap;
    struct heap heap;
};

static int add_bigram(struct bpe *s, int32_t left, int32_t right) {
    if (left < 0 || right < 0)
        return 0;
    const struct sym *l = &s->sym[left], *r = &s->sym[right];
    int32_t rank = pl_tokenizer_merge_rank(s->t, s->word + l->off, l->n, s->word + r->off, r->n);
    if (rank < 0)
        return 0;
    return heap_push(&s->heap, (struct bigram){left, right, rank, l->n + r->n});
}

static int emit(const struct bpe *s, const struct sym *y, struct pl_tok_vec *out) {
    int32_t id = pl_tokenizer_find(s->t, s->word + y->off, y->n);
    int r;
    if (id >= 0)
        return pl_tok_vec_push(out, id);
    /* As llama.cpp: try each byte of the symbol as a one-byte token; drop what is not. */
    for (uint32_t j = 0; j < y->n; j++) {
        id = pl_tokenizer_find(s->t, s->word + y->off + j, 1);
        if (id >= 0 && (r = pl_tok_vec_push(out, id)) < 0)
            return r;
    }
    return 0;
}

static int encode_word(struct bpe *s, size_t len, struct pl_tok_vec *out) {
    size_t n_sym = 0;
    int r;

    if (s->t->ignore_merges) {
        int32_t id = pl_tokenizer_find(s->t, s->word, len);
        if (id >= 0)
            return pl_tok_vec_push(out, id);
    }
    if (len > s->sym_cap) {
        struct sym *p = realloc(s->sym, len * sizeof(*p));
        if (!p)
            return -ENOMEM;
        s->sym = p;
        s->sym_cap = len;
    }
    for (size_t off = 0; off < len;) {
        size_t n = PL_MIN(pl_utf8_len((uint8_t)s->word[off]), len - off);
        s->sym[n_sym] = (struct sym){(int32_t)n_sym - 1, -1, (uint32_t)off, (uint32_t)n};
        off += n;
        if (off < len)
            s->sym[n_sym].next = (int32_t)n_sym + 1;
        n_sym++;
    }
    s->heap.n = 0;
    for (size_t i = 1; i < n_sym; i++)
        if ((r = add_bigram(s, (int32_t)i - 1, (int32_t)i)) < 0)
            return r;
    while (s->heap.n) {
        struct bigram b = heap_pop(&s->heap);
        struct sym *l = &s->sym[b.left], *rt = &s->sym[b.right];
        /* Stale: a side changed since the pair was queued (llama.cpp compares texts; a
         * symbol only grows by absorbing its right neighbour, so lengths tell the same). */
        if (l->n == 0 || rt->n == 0 || l->n + rt->n != b.size)
            continue;
        l->n += rt->n;
        rt->n = 0;
        l->next = rt->next;
        if (rt->next >= 0)
            s->sym[rt->next].prev = b.left;
        if ((r = add_bigram(s, l->prev, b.left)) < 0 || (r = add_bigram(s, b.left, l->next)) < 0)
            return r;
    }
    for (int32_t i = 0; i != -1; i = s->sym[i].next)
        if ((r = emit(s, &s->sym[i], out)) < 0)
            return r;
    return 0;
}

int pl_tokenizer_bpe_encode(const struct pl_tokenizer *t, const char *text, size_t len,
                            struct pl_tok_vec *out) {
    struct bpe s = {.t = t};
    struct pl_pretok_words words = {0}, scratch = {0};
    uint32_t *cps = NULL;
    int r = 0;

    if (len == 0)
        return 0;
    if (len > UINT32_MAX / 8)
        return -ENOMEM; /* encoded words use 32-bit offsets */
    cps = malloc(len * sizeof(*cps));
    if (!cps)
        return -ENOMEM;
    size_t n = pl_utf8_decode_all((const uint8_t *)text, len, cps);
    if ((r = pl_pretok_split(t->pre, cps, n, &words, &scratch)) < 0)
        goto out;

    size_t start = 0;
    for (size_t w = 0; w < words.n; w++) {
        size_t wl = words.len[w];
        /* Each code point is at most 4 UTF-8 bytes, each byte at most 2 encoded bytes. */
        size_t need = wl * 8;
        if (need > s.word_cap) {
            char *p = realloc(s.word, need);
            if (!p) {
                r = -ENOMEM;
                goto out;
            }
            s.word = p;
            s.word_cap = need;
        }
        size_t bl = 0;
        for (size_t i = start; i < start + wl; i++) {
            uint8_t u[4];
            size_t ul = pl_utf8_encode(cps[i], u);
            for (size_t k = 0; k < ul; k++) {
                memcpy(s.word + bl, t->byte_enc[u[k]], t->byte_enc_len[u[k]]);
                bl += t->byte_enc_len[u[k]];
            }
        }
        start += wl;
        if (bl && (r = encode_word(&s, bl, out)) < 0)
            goto out;
    }
out:
    pl_pretok_words_done(&words);
    pl_pretok_words_done(&scratch);
    free(cps);
    free(s.word);
    free(s.sym);
    free(s.heap.v);
    return r;
}
