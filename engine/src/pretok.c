/* SPDX-License-Identifier: MIT */
/* Byte-level BPE pre-tokenizers (called by tok_bpe.c). llama.cpp splits text with a chain
 * of regular expressions per `tokenizer.ggml.pre` value: each regex refines every current
 * segment into its matches and the gaps between them. The GPT-2 and LLaMA-3 regexes run
 * through hand-written fast paths in llama.cpp (unicode.cpp), whose behaviour they define,
 * so those two are replicated step by step; every other regex follows ECMAScript
 * (std::regex) leftmost-first semantics, with \p{..} classes decided by category flags and
 * \s by the White_Space property, as llama.cpp's "collapsed" regex text does. */
#include "pretok.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "unicode.h"

/* ---- Name table ---- */

struct pretok_name {
    const char *name;
    enum pl_pretok type;
    bool ignore_merges;
    bool add_bos;
};

static const struct pretok_name pretok_names[] = {
    {"default", PL_PRETOK_DEFAULT, false, false},
    {"llama3", PL_PRETOK_LLAMA3, true, true},
    {"llama-v3", PL_PRETOK_LLAMA3, true, true},
    {"llama-bpe", PL_PRETOK_LLAMA3, true, true},
    {"falcon3", PL_PRETOK_LLAMA3, true, true},
    {"pixtral", PL_PRETOK_LLAMA3, true, true},
    {"dbrx", PL_PRETOK_LLAMA3, false, false},
    {"smaug-bpe", PL_PRETOK_LLAMA3, false, false},
    {"deepseek-llm", PL_PRETOK_DEEPSEEK_LLM, false, false},
    {"deepseek-coder", PL_PRETOK_DEEPSEEK_CODER, false, false},
    {"falcon", PL_PRETOK_FALCON, false, false},
    {"mpt", PL_PRETOK_GPT2, false, false},
    {"gpt-2", PL_PRETOK_GPT2, false, false},
    {"gpt2", PL_PRETOK_GPT2, false, false},
    {"gpt-neox", PL_PRETOK_GPT2, false, false},
    {"phi-2", PL_PRETOK_GPT2, false, false},
    {"olmo", PL_PRETOK_GPT2, false, false},
    {"jais", PL_PRETOK_GPT2, false, false},
    {"gigachat", PL_PRETOK_GPT2, false, false},
    {"jina-es", PL_PRETOK_GPT2, false, false},
    {"jina-de", PL_PRETOK_GPT2, false, false},
    {"jina-v2-es", PL_PRETOK_GPT2, false, false},
    {"jina-v2-de", PL_PRETOK_GPT2, false, false},
    {"exaone4", PL_PRETOK_GPT2, false, false},
    {"starcoder", PL_PRETOK_STARCODER, false, false},
    {"refact", PL_PRETOK_STARCODER, false, false},
    {"command-r", PL_PRETOK_STARCODER, false, false},
    {"smollm", PL_PRETOK_STARCODER, false, false},
    {"codeshell", PL_PRETOK_STARCODER, false, false},
    {"exaone", PL_PRETOK_STARCODER, false, false},
    {"minerva-7b", PL_PRETOK_STARCODER, false, false},
    {"qwen2", PL_PRETOK_QWEN2, false, false},
    {"stablelm2", PL_PRETOK_QWEN2, false, false},
    {"deepseek-r1-qwen", PL_PRETOK_QWEN2, false, false},
    {"megrez", PL_PRETOK_QWEN2, false, false},
};

int pl_pretok_lookup(const char *name, size_t len, struct pl_pretok_info *ret) {
    for (size_t i = 0; i < sizeof(pretok_names) / sizeof(pretok_names[0]); i++) {
        const struct pretok_name *p = &pretok_names[i];
        if (strlen(p->name) == len && memcmp(p->name, name, len) == 0) {
            ret->type = p->type;
            ret->ignore_merges = p->ignore_merges;
            ret->add_bos = p->add_bos;
            return 0;
        }
    }
    return -ENOENT;
}

/* ---- Word lists ---- */

void pl_pretok_words_done(struct pl_pretok_words *w) {
    free(w->len);
    w->len = NULL;
    w->n = w->cap = 0;
}

static int push(struct pl_pretok_words *w, size_t len) {
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 64;
        size_t *p = realloc(w->len, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        w->len = p;
        w->cap = cap;
    }
    w->len[w->n++] = len;
    return 0;
}

/* ---- Character classes ---- */

static inline uint32_t fl(uint32_t cp) {
    return pl_unicode_flags(cp);
}
static inline bool is_ws(uint32_t cp) {
    return fl(cp) & PL_UCAT_WHITESPACE;
}
static inline bool is_l(uint32_t cp) {
    return fl(cp) & PL_UCAT_LETTER;
}
static inline bool is_n(uint32_t cp) {
    return fl(cp) & PL_UCAT_NUMBER;
}
static inline bool is_p(uint32_t cp) {
    return fl(cp) & PL_UCAT_PUNCT;
}
static inline bool is_crlf(uint32_t cp) {
    return cp == '\r' || cp == '\n';
}
/* [^\s\p{L}\p{N}] */
static inline bool is_other(uint32_t cp) {
    return !(fl(cp) & (PL_UCAT_WHITESPACE | PL_UCAT_LETTER | PL_UCAT_NUMBER));
}

struct cp_range {
    uint32_t lo, hi; /* inclusive */
};

static bool in_ranges(uint32_t cp, const struct cp_range *r, size_t n) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r[mid].hi < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && r[lo].lo <= cp;
}

/* Regexes without \p{..} run in llama.cpp on the raw code points (std::wregex), with every
 * non-ASCII White_Space code point replaced by U+000B first; classes see that value. */
static inline uint32_t wmap(uint32_t cp) {
    return (cp > 0x7f && is_ws(cp)) ? 0x0b : cp;
}

/* deepseek-llm, regex 2: \s?[A-Za-zµÀ-ÖØ-öø-ƺ...𞤀-𞥃]+ (cased letters, as ranges). */
static const struct cp_range ds_letters[] = {
    {0x41, 0x5a},       {0x61, 0x7a},       {0xb5, 0xb5},       {0xc0, 0xd6},
    {0xd8, 0xf6},       {0xf8, 0x1ba},      {0x1bc, 0x1bf},     {0x1c4, 0x293},
    {0x295, 0x2af},     {0x370, 0x373},     {0x376, 0x377},     {0x37b, 0x37d},
    {0x37f, 0x37f},     {0x386, 0x386},     {0x388, 0x38a},     {0x38c, 0x38c},
    {0x38e, 0x3a1},     {0x3a3, 0x3f5},     {0x3f7, 0x481},     {0x48a, 0x52f},
    {0x531, 0x556},     {0x10a0, 0x10c5},   {0x13a0, 0x13f5},   {0x13f8, 0x13fd},
    {0x1c90, 0x1cba},   {0x1cbd, 0x1cbf},   {0x1d00, 0x1d2b},   {0x1d6b, 0x1d77},
    {0x1d79, 0x1d9a},   {0x1e00, 0x1f15},   {0x1f18, 0x1f1d},   {0x1f20, 0x1f45},
    {0x1f48, 0x1f4d},   {0x1f50, 0x1f57},   {0x1f59, 0x1f59},   {0x1f5b, 0x1f5b},
    {0x1f5d, 0x1f5d},   {0x1f5f, 0x1f7d},   {0x1f80, 0x1fb4},   {0x1fb6, 0x1fbc},
    {0x1fbe, 0x1fbe},   {0x1fc2, 0x1fc4},   {0x1fc6, 0x1fcc},   {0x1fd0, 0x1fd3},
    {0x1fd6, 0x1fdb},   {0x1fe0, 0x1fec},   {0x1ff2, 0x1ff4},   {0x1ff6, 0x1ffc},
    {0x2102, 0x2102},   {0x2107, 0x2107},   {0x210a, 0x2113},   {0x2115, 0x2115},
    {0x2119, 0x211d},   {0x2124, 0x2124},   {0x2126, 0x2126},   {0x2128, 0x2128},
    {0x212a, 0x212d},   {0x212f, 0x2134},   {0x2139, 0x2139},   {0x213c, 0x213f},
    {0x2145, 0x2149},   {0x214e, 0x214e},   {0x2183, 0x2184},   {0x2c00, 0x2c7b},
    {0x2c7e, 0x2ce4},   {0x2ceb, 0x2cee},   {0x2cf2, 0x2cf3},   {0xa640, 0xa66d},
    {0xa680, 0xa69b},   {0xa722, 0xa76f},   {0xa771, 0xa787},   {0xa78b, 0xa78e},
    {0xab70, 0xabbf},   {0xfb00, 0xfb06},   {0xfb13, 0xfb17},   {0xff21, 0xff3a},
    {0xff41, 0xff5a},   {0x10400, 0x1044f}, {0x104b0, 0x104d3}, {0x104d8, 0x104fb},
    {0x10c80, 0x10cb2}, {0x10cc0, 0x10cf2}, {0x118a0, 0x118df}, {0x1e900, 0x1e943},
};

/* deepseek-llm, regex 3: \s?[!-/:-~！-／：-～‘-‟　-。]+ */
static const struct cp_range ds_punct[] = {
    {0x21, 0x2f},     {0x3a, 0x7e},     {0x2018, 0x201f},
    {0x3000, 0x3002}, {0xff01, 0xff0f}, {0xff1a, 0xff5e},
};

/* deepseek-llm and deepseek-coder: [一-龥ࠀ-一가-퟿]+ */
static const struct cp_range ds_cjk[] = {
    {0x800, 0x9fa5}, /* U+0800..U+4E00 and U+4E00..U+9FA5 */
    {0xac00, 0xd7ff},
};

#define N_RANGES(a) (sizeof(a) / sizeof((a)[0]))

/* ---- Generic regex stage ----
 * A matcher returns the length of the leftmost-first match starting exactly at pos (0 when
 * none). The driver does what std::regex_iterator does in llama.cpp: scan for the next
 * match, emit the gap before it and the match as words, continue after the match. */

typedef size_t (*match_fn)(const uint32_t *c, size_t pos, size_t end);

static int regex_stage(match_fn m, const uint32_t *c, size_t s, size_t e,
                       struct pl_pretok_words *out) {
    size_t gap = s, pos = s;
    int r;
    while (pos < e) {
        size_t len = m(c, pos, e);
        if (!len) {
            pos++;
            continue;
        }
        if (pos > gap && (r = push(out, pos - gap)) < 0)
            return r;
        if ((r = push(out, len)) < 0)
            return r;
        pos += len;
        gap = pos;
    }
    if (gap < e && (r = push(out, e - gap)) < 0)
        return r;
    return 0;
}

/* A run of code points satisfying pred from pos. */
#define RUN(pred, c, q, end)                                                                       \
    do {                                                                                           \
        while ((q) < (end) && pred((c)[q]))                                                        \
            (q)++;                                                                                 \
    } while (0)

/* [\p{P}\$\+<=>\^~\|]+ ("default") and [\p{P}\$\+<=>\^~\|`]+ ("falcon") */
static bool is_default_punct(uint32_t cp) {
    return is_p(cp) || (cp < 128 && cp && strchr("$+<=>^~|", (int)cp));
}
static bool is_falcon_punct(uint32_t cp) {
    return is_default_punct(cp) || cp == '`';
}
static size_t m_default_punct(const uint32_t *c, size_t pos, size_t end) {
    size_t q = pos;
    RUN(is_default_punct, c, q, end);
    return q - pos;
}
static size_t m_falcon_punct(const uint32_t *c, size_t pos, size_t end) {
    size_t q = pos;
    RUN(is_falcon_punct, c, q, end);
    return q - pos;
}

/* \p{N}+ and \p{N} */
static size_t m_numbers(const uint32_t *c, size_t pos, size_t end) {
    size_t q = pos;
    RUN(is_n, c, q, end);
    return q - pos;
}
static size_t m_number(const uint32_t *c, size_t pos, size_t end) {
    (void)end;
    return is_n(c[pos]) ? 1 : 0;
}

/* [0-9][0-9][0-9] */
static size_t m_three_digits(const uint32_t *c, size_t pos, size_t end) {
    if (end - pos < 3)
        return 0;
    for (size_t k = 0; k < 3; k++)
        if (c[pos + k] < '0' || c[pos + k] > '9')
            return 0;
    return 3;
}

/* [\r\n] */
static size_t m_crlf(const uint32_t *c, size_t pos, size_t end) {
    (void)end;
    return is_crlf(c[pos]) ? 1 : 0;
}

/* \s?X+ for a class X: the greedy optional \s only helps when X starts right after it. */
static size_t opt_ws_run(const uint32_t *c, size_t pos, size_t end, bool (*x)(uint32_t),
                         bool mapped) {
    uint32_t c0 = mapped ? wmap(c[pos]) : c[pos];
    size_t q = pos;
    if (is_ws(c0) && pos + 1 < end && x(mapped ? wmap(c[pos + 1]) : c[pos + 1]))
        q = pos + 1;
    else if (!x(c0))
        return 0;
    while (q < end && x(mapped ? wmap(c[q]) : c[q]))
        q++;
    return q - pos;
}

static bool is_ds_letter(uint32_t cp) {
    return in_ranges(cp, ds_letters, N_RANGES(ds_letters));
}
static bool is_ds_punct(uint32_t cp) {
    return in_ranges(cp, ds_punct, N_RANGES(ds_punct));
}
static bool is_ds_cjk(uint32_t cp) {
    return in_ranges(cp, ds_cjk, N_RANGES(ds_cjk));
}
static bool is_ds_cjk_mapped(uint32_t cp) {
    return is_ds_cjk(wmap(cp));
}

static size_t m_ds_letters(const uint32_t *c, size_t pos, size_t end) {
    return opt_ws_run(c, pos, end, is_ds_letter, true);
}
static size_t m_ds_punct(const uint32_t *c, size_t pos, size_t end) {
    return opt_ws_run(c, pos, end, is_ds_punct, true);
}
static size_t m_ds_cjk(const uint32_t *c, size_t pos, size_t end) {
    size_t q = pos;
    RUN(is_ds_cjk_mapped, c, q, end);
    return q - pos;
}
/* \s?\p{L}+ and \s?\p{P}+ (deepseek-coder) */
static size_t m_ws_letters(const uint32_t *c, size_t pos, size_t end) {
    return opt_ws_run(c, pos, end, is_l, false);
}
static size_t m_ws_punct(const uint32_t *c, size_t pos, size_t end) {
    return opt_ws_run(c, pos, end, is_p, false);
}

/* \s+$ : the trailing white-space run of the segment, found directly (a per-position
 * matcher would rescan long runs). */
static int trailing_ws_stage(const uint32_t *c, size_t s, size_t e, struct pl_pretok_words *out) {
    size_t k = e;
    int r;
    while (k > s && is_ws(wmap(c[k - 1])))
        k--;
    if (k > s && (r = push(out, k - s)) < 0)
        return r;
    if (k < e && (r = push(out, e - k)) < 0)
        return r;
    return 0;
}

/* Qwen2: (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|
 * \p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ with ECMAScript semantics. */
static size_t m_qwen2(const uint32_t *c, size_t pos, size_t end) {
    uint32_t c0 = c[pos];
    size_t q;

    if (c0 == '\'' && pos + 1 < end) {
        uint32_t a = c[pos + 1];
        if (a == 's' || a == 'S' || a == 't' || a == 'T' || a == 'm' || a == 'M' || a == 'd' ||
            a == 'D')
            return 2;
        if (pos + 2 < end) {
            uint32_t b = c[pos + 2];
            if (((a == 'r' || a == 'R' || a == 'v' || a == 'V') && (b == 'e' || b == 'E')) ||
                ((a == 'l' || a == 'L') && (b == 'l' || b == 'L')))
                return 3;
        }
    }
    if (!is_crlf(c0) && !is_l(c0) && !is_n(c0) && pos + 1 < end && is_l(c[pos + 1])) {
        q = pos + 1;
        RUN(is_l, c, q, end);
        return q - pos;
    }
    if (is_l(c0)) {
        q = pos;
        RUN(is_l, c, q, end);
        return q - pos;
    }
    if (is_n(c0))
        return 1;
    q = pos;
    if (c0 == ' ' && pos + 1 < end && is_other(c[pos + 1]))
        q = pos + 1;
    if (is_other(c[q])) {
        RUN(is_other, c, q, end);
        RUN(is_crlf, c, q, end);
        return q - pos;
    }
    q = pos;
    size_t last_crlf = 0;
    bool seen_crlf = false;
    while (q < end && is_ws(c[q])) {
        if (is_crlf(c[q])) {
            last_crlf = q;
            seen_crlf = true;
        }
        q++;
    }
    if (seen_crlf)
        return last_crlf + 1 - pos;
    if (q == pos)
        return 0;
    if (q == end || q - pos == 1)
        return q - pos;
    return q - pos - 1;
}

/* ---- llama.cpp's fast paths ---- */

/* Flags of position p inside [ini, end), 0 outside (llama.cpp's "out of range"); the code
 * point, or OOR outside. */
#define OOR 0xFFFFFFFFu
static inline uint32_t getf(const uint32_t *c, size_t ini, size_t end, size_t p) {
    return p >= ini && p < end ? fl(c[p]) : 0u;
}
static inline uint32_t getc_(const uint32_t *c, size_t ini, size_t end, size_t p) {
    return p >= ini && p < end ? c[p] : OOR;
}
#define GETF(p) getf(c, ini, end, (p))
#define GETC(p) getc_(c, ini, end, (p))

struct fast {
    struct pl_pretok_words *out;
    size_t prev_end;
    int err;
};

static size_t fast_add(struct fast *f, size_t end_pos) {
    size_t len = end_pos - f->prev_end;
    if (len > 0 && !f->err)
        f->err = push(f->out, len);
    f->prev_end = end_pos;
    return len;
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S) */
static int gpt2_stage(const uint32_t *c, size_t ini, size_t end, struct pl_pretok_words *out) {
    struct fast f = {out, ini, 0};
    const uint32_t L = PL_UCAT_LETTER, N = PL_UCAT_NUMBER, W = PL_UCAT_WHITESPACE;

    for (size_t pos = ini; pos < end;) {
        uint32_t cpt = c[pos];
        uint32_t flags = fl(cpt);

        if (cpt == '\'' && pos + 1 < end) {
            uint32_t nx = c[pos + 1];
            if (nx == 's' || nx == 't' || nx == 'm' || nx == 'd') {
                pos += fast_add(&f, pos + 2);
                continue;
            }
            if (pos + 2 < end) {
                uint32_t nn = c[pos + 2];
                if ((nx == 'r' && nn == 'e') || (nx == 'v' && nn == 'e') ||
                    (nx == 'l' && nn == 'l')) {
                    pos += fast_add(&f, pos + 3);
                    continue;
                }
            }
        }
        uint32_t f2 = cpt == ' ' ? GETF(pos + 1) : flags;
        if (f2 & L) {
            pos += cpt == ' ';
            while (f2 & L)
                f2 = GETF(++pos);
            fast_add(&f, pos);
            continue;
        }
        if (f2 & N) {
            pos += cpt == ' ';
            while (f2 & N)
                f2 = GETF(++pos);
            fast_add(&f, pos);
            continue;
        }
        if (!(f2 & (W | L | N)) && f2) {
            pos += cpt == ' ';
            while (!(f2 & (W | L | N)) && f2)
                f2 = GETF(++pos);
            fast_add(&f, pos);
            continue;
        }
        size_t nws = 0;
        while (GETF(pos + nws) & W)
            nws++;
        if (nws > 1 && GETC(pos + nws) != OOR) {
            pos += nws - 1;
            fast_add(&f, pos);
            continue;
        }
        if (nws > 0) {
            pos += nws;
            fast_add(&f, pos);
            continue;
        }
        fast_add(&f, ++pos);
    }
    return f.err;
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
 * \s*[\r\n]+|\s+(?!\S)|\s+ */
static int llama3_stage(const uint32_t *c, size_t ini, size_t end, struct pl_pretok_words *out) {
    struct fast f = {out, ini, 0};
    const uint32_t L = PL_UCAT_LETTER, N = PL_UCAT_NUMBER, W = PL_UCAT_WHITESPACE;

    for (size_t pos = ini; pos < end;) {
        uint32_t cpt = c[pos];
        uint32_t flags = fl(cpt);

        if (cpt == '\'' && pos + 1 < end) {
            uint32_t nx = pl_unicode_tolower(c[pos + 1]);
            if (nx == 's' || nx == 't' || nx == 'm' || nx == 'd') {
                pos += fast_add(&f, pos + 2);
                continue;
            }
            if (pos + 2 < end) {
                uint32_t nn = pl_unicode_tolower(c[pos + 2]);
                if ((nx == 'r' && nn == 'e') || (nx == 'v' && nn == 'e') ||
                    (nx == 'l' && nn == 'l')) {
                    pos += fast_add(&f, pos + 3);
                    continue;
                }
            }
        }
        if (!(cpt == '\r' || cpt == '\n' || (flags & N))) {
            if ((flags & L) || (GETF(pos + 1) & L)) {
                pos++;
                while (GETF(pos) & L)
                    pos++;
                fast_add(&f, pos);
                continue;
            }
        }
        if (flags & N) {
            size_t start = pos;
            while (GETF(pos) & N) {
                if (++pos - start >= 3) {
                    fast_add(&f, pos);
                    start = pos;
                }
            }
            fast_add(&f, pos);
            continue;
        }
        uint32_t f2 = cpt == ' ' ? GETF(pos + 1) : flags;
        if (!(f2 & (W | L | N)) && flags) {
            pos += cpt == ' ';
            while (!(f2 & (W | L | N)) && f2)
                f2 = GETF(++pos);
            uint32_t c2 = GETC(pos);
            while (c2 == '\r' || c2 == '\n')
                c2 = GETC(++pos);
            fast_add(&f, pos);
            continue;
        }
        size_t nws = 0, last_crlf_end = 0;
        while (GETF(pos + nws) & W) {
            uint32_t c2 = GETC(pos + nws);
            if (c2 == '\r' || c2 == '\n')
                last_crlf_end = pos + nws + 1;
            nws++;
        }
        if (last_crlf_end > 0) {
            pos = last_crlf_end;
            fast_add(&f, pos);
            continue;
        }
        if (nws > 1 && GETC(pos + nws) != OOR) {
            pos += nws - 1;
            fast_add(&f, pos);
            continue;
        }
        if (nws > 0) {
            pos += nws;
            fast_add(&f, pos);
            continue;
        }
        fast_add(&f, ++pos);
    }
    return f.err;
}

#undef GETF
#undef GETC
#undef OOR

/* ---- Chains ---- */

enum stage_kind { ST_REGEX, ST_GPT2, ST_LLAMA3, ST_TRAILING_WS };

struct stage {
    enum stage_kind kind;
    match_fn m;
};

#define MAX_STAGES 6

struct chain {
    size_t n;
    struct stage st[MAX_STAGES];
};

static const struct chain chains[_PL_PRETOK_MAX] = {
    [PL_PRETOK_DEFAULT] = {4,
                           {{ST_REGEX, m_default_punct},
                            {ST_GPT2, NULL},
                            {ST_REGEX, m_numbers},
                            {ST_REGEX, m_three_digits}}},
    [PL_PRETOK_GPT2] = {1, {{ST_GPT2, NULL}}},
    [PL_PRETOK_LLAMA3] = {1, {{ST_LLAMA3, NULL}}},
    [PL_PRETOK_QWEN2] = {1, {{ST_REGEX, m_qwen2}}},
    [PL_PRETOK_DEEPSEEK_LLM] = {6,
                                {{ST_REGEX, m_crlf},
                                 {ST_REGEX, m_ds_letters},
                                 {ST_REGEX, m_ds_punct},
                                 {ST_TRAILING_WS, NULL},
                                 {ST_REGEX, m_ds_cjk},
                                 {ST_REGEX, m_numbers}}},
    [PL_PRETOK_DEEPSEEK_CODER] = {5,
                                  {{ST_REGEX, m_crlf},
                                   {ST_REGEX, m_ws_letters},
                                   {ST_REGEX, m_ws_punct},
                                   {ST_REGEX, m_ds_cjk},
                                   {ST_REGEX, m_number}}},
    [PL_PRETOK_STARCODER] = {2, {{ST_REGEX, m_number}, {ST_GPT2, NULL}}},
    [PL_PRETOK_FALCON] =
        {3, {{ST_REGEX, m_falcon_punct}, {ST_GPT2, NULL}, {ST_REGEX, m_three_digits}}},
};

int pl_pretok_split(enum pl_pretok type, const uint32_t *cps, size_t n,
                    struct pl_pretok_words *words, struct pl_pretok_words *scratch) {
    if ((unsigned)type >= _PL_PRETOK_MAX)
        return -EINVAL;
    const struct chain *ch = &chains[type];
    struct pl_pretok_words *in = scratch, *out = words;
    int r;

    /* Stage k reads the segments in `in` and writes the refined ones to `out`; arrange the
     * ping-pong so the last stage writes into `words`. */
    if (ch->n % 2 == 0) {
        in = words;
        out = scratch;
    }
    in->n = 0;
    if (n == 0) {
        words->n = 0;
        return 0;
    }
    if ((r = push(in, n)) < 0)
        return r;
    for (size_t k = 0; k < ch->n; k++) {
        const struct stage *st = &ch->st[k];
        size_t start = 0;
        out->n = 0;
        for (size_t i = 0; i < in->n; i++) {
            size_t s = start, e = start + in->len[i];
            start = e;
            switch (st->kind) {
            case ST_REGEX:
                r = regex_stage(st->m, cps, s, e, out);
                break;
            case ST_GPT2:
                r = gpt2_stage(cps, s, e, out);
                break;
            case ST_LLAMA3:
                r = llama3_stage(cps, s, e, out);
                break;
            case ST_TRAILING_WS:
                r = trailing_ws_stage(cps, s, e, out);
                break;
            default:
                r = -EINVAL;
                break;
            }
            if (r < 0)
                return r;
        }
        struct pl_pretok_words *tmp = in;
        in = out;
        out = tmp;
    }
    return 0;
}
