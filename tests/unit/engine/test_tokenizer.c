/* SPDX-License-Identifier: MIT */
/* Unit tests for the tokenizers (engine/src/tokenizer.c, tok_spm.c, tok_bpe.c, pretok.c,
 * unicode.c): every llama.cpp test vector in $PICOLM_TEST_DATA/tokenizer, the prompt token
 * ids and pieces of every $PICOLM_TEST_DATA/models reference, pre-tokenizer splits, special
 * tokens, bad input, long input, and error paths. */
#include <dirent.h>
#include <pthread.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cmocka.h>

#if defined(__GNUC__) && !defined(__clang__) /* clang has no such warning */
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

#include "json.h"
#include "pl/engine_gguf.h"
#include "pl/engine_tokenizer.h"
#include "pl/pl_err.h"
#include "pretok.h"
#include "unicode.h"

#define INP_SEP "\n__ggml_vocab_test__\n"

/* ---- Helpers ---- */

static const char *data_dir(void) {
    const char *d = getenv("PICOLM_TEST_DATA");
    return d && *d ? d : NULL;
}

static char *read_file(const char *path, size_t *ret_len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    assert_non_null(buf);
    for (;;) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap)
            break;
        cap *= 2;
        buf = realloc(buf, cap + 1);
        assert_non_null(buf);
    }
    fclose(f);
    buf[n] = '\0';
    *ret_len = n;
    return buf;
}

struct loaded {
    struct pl_gguf *g;
    struct pl_tokenizer *t;
};

static bool load_vocab(const char *path, struct loaded *l) {
    char err[256];
    int r = pl_gguf_open(path, &l->g, err, sizeof(err));
    if (r < 0) {
        print_error("cannot open %s: %s\n", path, err);
        return false;
    }
    r = pl_tokenizer_new(l->g, &l->t, err, sizeof(err));
    if (r < 0) {
        print_error("tokenizer for %s: %s (%s)\n", path, err, pl_strerror(r));
        pl_gguf_close(l->g);
        return false;
    }
    return true;
}

static void unload(struct loaded *l) {
    pl_tokenizer_free(l->t);
    pl_gguf_close(l->g);
}

/* Tokenize into a malloc'ed array (via the -ENOSPC size query). */
static int32_t *encode(const struct pl_tokenizer *t, const char *s, size_t len, bool add_special,
                       bool parse_special, size_t *ret_n) {
    size_t n = 0;
    int r = pl_tokenizer_encode(t, s, len, add_special, parse_special, NULL, 0, &n);
    assert_true(r == 0 || r == -ENOSPC);
    int32_t *ids = malloc((n ? n : 1) * sizeof(*ids));
    assert_non_null(ids);
    size_t n2 = 0;
    assert_int_equal(pl_tokenizer_encode(t, s, len, add_special, parse_special, ids, n, &n2), 0);
    assert_int_equal(n2, n);
    *ret_n = n;
    return ids;
}

/* Concatenated pieces of ids, malloc'ed. */
static char *detok(const struct pl_tokenizer *t, const int32_t *ids, size_t n, size_t *ret_len) {
    size_t cap = 64, len = 0;
    char *out = malloc(cap);
    assert_non_null(out);
    for (size_t i = 0; i < n; i++) {
        int k;
        while ((k = pl_tokenizer_piece(t, ids[i], out + len, cap - len)) == -ENOSPC) {
            cap *= 2;
            out = realloc(out, cap);
            assert_non_null(out);
        }
        assert_true(k >= 0);
        len += (size_t)k;
    }
    *ret_len = len;
    return out;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted names in dir ending with suffix; returns the count (names malloc'ed). */
static size_t list_dir(const char *dir, const char *suffix, char ***ret) {
    DIR *d = opendir(dir);
    size_t n = 0, cap = 16, sl = strlen(suffix);
    char **names = malloc(cap * sizeof(*names));
    assert_non_null(names);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            size_t l = strlen(e->d_name);
            if (l <= sl || strcmp(e->d_name + l - sl, suffix) != 0)
                continue;
            if (n == cap) {
                cap *= 2;
                names = realloc(names, cap * sizeof(*names));
                assert_non_null(names);
            }
            names[n++] = strdup(e->d_name);
        }
        closedir(d);
    }
    qsort(names, n, sizeof(*names), cmp_str);
    *ret = names;
    return n;
}

static void free_names(char **names, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static bool shared_vocab(const char *name, struct loaded *l) {
    const char *d = data_dir();
    char path[4096];
    if (!d)
        return false;
    snprintf(path, sizeof(path), "%s/tokenizer/%s", d, name);
    struct stat st;
    if (stat(path, &st) < 0)
        return false;
    return load_vocab(path, l);
}

/* ---- llama.cpp test vectors ---- */

static void run_vector_file(const char *dir, const char *name, size_t *ret_pass, size_t *ret_n) {
    char path[8192];
    size_t inp_len, out_len;
    struct loaded l;

    assert_true(strlen(dir) + strlen(name) + 8 < sizeof(path));
    snprintf(path, sizeof(path), "%s/%s.inp", dir, name);
    char *inp = read_file(path, &inp_len);
    snprintf(path, sizeof(path), "%s/%s.out", dir, name);
    char *outp = read_file(path, &out_len);
    if (!inp || !outp) {
        free(inp);
        free(outp);
        *ret_pass = *ret_n = 0;
        return;
    }
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    assert_true(load_vocab(path, &l));

    size_t pass = 0, n = 0;
    char *ip = inp, *op = outp;
    const size_t sep_len = strlen(INP_SEP);
    for (;;) {
        char *sep = memmem(ip, (size_t)(inp + inp_len - ip), INP_SEP, sep_len);
        if (!sep)
            break;
        char *nl = memchr(op, '\n', (size_t)(outp + out_len - op));
        assert_non_null(nl);
        *nl = '\0';

        int32_t want[4096];
        size_t n_want = 0;
        for (char *tokp = strtok(op, " "); tokp; tokp = strtok(NULL, " ")) {
            assert_true(n_want < 4096);
            want[n_want++] = (int32_t)strtol(tokp, NULL, 10);
        }
        size_t n_got;
        int32_t *got = encode(l.t, ip, (size_t)(sep - ip), false, false, &n_got);
        bool ok = n_got == n_want && memcmp(got, want, n_got * sizeof(*got)) == 0;
        if (ok) {
            pass++;
        } else {
            print_error("%s: input %zu '%.*s' mismatch\n  want:", name, n, (int)(sep - ip), ip);
            for (size_t i = 0; i < n_want; i++)
                print_error(" %d", want[i]);
            print_error("\n  got: ");
            for (size_t i = 0; i < n_got; i++)
                print_error(" %d", got[i]);
            print_error("\n");
        }
        free(got);
        n++;
        ip = sep + sep_len;
        op = nl + 1;
    }
    unload(&l);
    free(inp);
    free(outp);
    *ret_pass = pass;
    *ret_n = n;
}

static void test_vocab_vectors_match_llama_cpp(void **state) {
    (void)state;
    const char *d = data_dir();
    char dir[4096];
    char **names;
    if (!d)
        skip();
    snprintf(dir, sizeof(dir), "%s/tokenizer", d);
    size_t n = list_dir(dir, ".gguf", &names);
    if (n == 0) {
        free_names(names, n);
        skip();
    }
    size_t total_fail = 0, files = 0;
    for (size_t i = 0; i < n; i++) {
        size_t pass, cnt;
        run_vector_file(dir, names[i], &pass, &cnt);
        if (cnt == 0)
            continue;
        files++;
        printf("[ vectors  ] %s: %zu/%zu passed\n", names[i], pass, cnt);
        total_fail += cnt - pass;
    }
    free_names(names, n);
    assert_true(files > 0);
    assert_int_equal(total_fail, 0);
}

/* ---- Model references (prompts[].token_ids, token_pieces_hex) ---- */

static size_t unhex(const char *h, char *out) {
    size_t n = strlen(h) / 2;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        assert_int_equal(sscanf(h + 2 * i, "%2x", &v), 1);
        out[i] = (char)v;
    }
    return n;
}

static void test_model_refs_match_llama_cpp(void **state) {
    (void)state;
    const char *d = data_dir();
    char dir[4096], path[8192], err[256];
    char **names;
    if (!d)
        skip();
    snprintf(dir, sizeof(dir), "%s/models", d);
    size_t n = list_dir(dir, ".ref.json", &names);
    if (n == 0) {
        free_names(names, n);
        skip();
    }
    size_t checked = 0;
    for (size_t i = 0; i < n; i++) {
        struct pl_json *ref;
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        int r = pl_json_load_file(path, &ref, err, sizeof(err));
        if (r < 0)
            print_error("%s: %s\n", path, err);
        assert_int_equal(r, 0);
        const struct pl_json *mf = pl_json_get(ref, "model_file");
        assert_non_null(mf);
        snprintf(path, sizeof(path), "%s/%s", dir, mf->str);
        struct loaded l;
        assert_true(load_vocab(path, &l));

        const struct pl_json *adds_bos = pl_json_get(ref, "adds_bos");
        if (adds_bos)
            assert_int_equal(pl_tokenizer_adds_bos(l.t), adds_bos->boolean);
        const struct pl_json *bos = pl_json_get(ref, "bos_token_id");
        if (bos && bos->type == PL_JSON_NUMBER)
            assert_int_equal(pl_tokenizer_bos(l.t), (int32_t)bos->number);
        const struct pl_json *eos = pl_json_get(ref, "eos_token_id");
        if (eos && eos->type == PL_JSON_NUMBER) {
            assert_int_equal(pl_tokenizer_eos(l.t), (int32_t)eos->number);
            assert_true(pl_tokenizer_is_eog(l.t, (int32_t)eos->number));
        }

        const struct pl_json *prompts = pl_json_get(ref, "prompts");
        assert_non_null(prompts);
        size_t pass = 0;
        for (size_t p = 0; p < prompts->n; p++) {
            const struct pl_json *pr = pl_json_at(prompts, p);
            const struct pl_json *text = pl_json_get(pr, "text");
            const struct pl_json *want = pl_json_get(pr, "token_ids");
            const struct pl_json *hex = pl_json_get(pr, "token_pieces_hex");
            assert_non_null(text);
            assert_non_null(want);
            size_t n_got;
            int32_t *got = encode(l.t, text->str, text->str_len, true, false, &n_got);
            bool ok = n_got == want->n;
            for (size_t k = 0; ok && k < n_got; k++)
                ok = got[k] == (int32_t)pl_json_at(want, k)->number;
            if (!ok) {
                print_error("%s prompt %zu: token ids differ (got %zu, want %zu)\n", names[i], p,
                            n_got, want->n);
            }
            assert_true(ok);
            /* Pieces: byte for byte as llama.cpp renders them. */
            if (hex) {
                assert_int_equal(hex->n, n_got);
                for (size_t k = 0; k < n_got; k++) {
                    char wantb[512], gotb[512];
                    const struct pl_json *h = pl_json_at(hex, k);
                    assert_true(strlen(h->str) / 2 <= sizeof(wantb));
                    size_t wl = unhex(h->str, wantb);
                    int gl = pl_tokenizer_piece(l.t, got[k], gotb, sizeof(gotb));
                    assert_int_equal(gl, (int)wl);
                    assert_memory_equal(gotb, wantb, wl);
                }
            }
            /* Without the BOS the pieces give back the text (SPM: after the leading space). */
            size_t start = pl_tokenizer_adds_bos(l.t) ? 1 : 0, dl;
            char *back = detok(l.t, got + start, n_got - start, &dl);
            size_t skip_sp = pl_tokenizer_kind(l.t) == PL_TOKENIZER_SPM && dl > 0 ? 1 : 0;
            assert_int_equal(dl - skip_sp, text->str_len);
            assert_memory_equal(back + skip_sp, text->str, text->str_len);
            free(back);
            free(got);
            pass++;
        }
        printf("[ refs     ] %s: %zu/%zu prompts passed\n", names[i], pass, prompts->n);
        checked++;
        unload(&l);
        pl_json_free(ref);
    }
    free_names(names, n);
    assert_true(checked > 0);
}

/* ---- Edge cases on the shared vocabularies ---- */

static void test_empty_and_space_only_input(void **state) {
    (void)state;
    struct loaded spm, bpe;
    if (!shared_vocab("ggml-vocab-llama-spm.gguf", &spm))
        skip();
    size_t n;
    int32_t *ids = encode(spm.t, "", 0, false, false, &n);
    assert_int_equal(n, 0);
    free(ids);
    ids = encode(spm.t, "", 0, true, false, &n);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], pl_tokenizer_bos(spm.t));
    free(ids);
    /* Only spaces: all U+2581 pieces, which decode to the spaces plus the prefix. */
    const char *sp = "     ";
    ids = encode(spm.t, sp, 5, false, false, &n);
    assert_true(n > 0);
    size_t dl;
    char *back = detok(spm.t, ids, n, &dl);
    assert_int_equal(dl, 6);
    assert_memory_equal(back, "      ", 6);
    free(back);
    free(ids);
    unload(&spm);

    if (!shared_vocab("ggml-vocab-gpt-2.gguf", &bpe))
        return;
    ids = encode(bpe.t, "", 0, true, false, &n);
    assert_int_equal(n, 0); /* gpt2 vocab without add_bos_token: no BOS */
    free(ids);
    ids = encode(bpe.t, " \t\n  ", 5, false, false, &n);
    back = detok(bpe.t, ids, n, &dl);
    assert_int_equal(dl, 5);
    assert_memory_equal(back, " \t\n  ", 5);
    free(back);
    free(ids);
    unload(&bpe);
}

static void test_invalid_utf8_is_handled(void **state) {
    (void)state;
    struct loaded spm, bpe;
    static const char bad[] =
        "a\xff\xfez\xc3(\xe2\x82\xf0\x9f\x98\x80\x80\xed\xa0\x80\xf5\x80\x80\x80\xc3";
    size_t bl = sizeof(bad) - 1, n, dl;
    if (!shared_vocab("ggml-vocab-llama-spm.gguf", &spm))
        skip();
    /* SPM: bytes that form no token fall back to <0xXX> byte tokens: nothing is lost. */
    int32_t *ids = encode(spm.t, bad, bl, false, false, &n);
    char *back = detok(spm.t, ids, n, &dl);
    assert_int_equal(dl, bl + 1);
    assert_memory_equal(back + 1, bad, bl);
    bool saw_ff = false;
    for (size_t i = 0; i < n; i++)
        saw_ff |= ids[i] == 3 + 0xff; /* <0xFF> */
    assert_true(saw_ff);
    free(back);
    free(ids);
    /* A truncated sequence swallows the next bytes by its lead byte's length, as llama.cpp
     * cuts symbols: here the escaped space (E2 96 81) after "\xe2\x82" comes back as bytes. */
    ids = encode(spm.t, "x\xe2\x82 y", 5, false, false, &n);
    back = detok(spm.t, ids, n, &dl);
    assert_int_equal(dl, 8);
    assert_memory_equal(back, " x\xe2\x82\xe2\x96\x81y", 8);
    free(back);
    free(ids);
    unload(&spm);

    if (!shared_vocab("ggml-vocab-gpt-2.gguf", &bpe))
        return;
    /* BPE: each malformed byte becomes U+FFFD (as llama.cpp); valid parts survive. */
    ids = encode(bpe.t, bad, bl, false, false, &n);
    back = detok(bpe.t, ids, n, &dl);
    assert_true(dl > 0);
    assert_int_equal(back[0], 'a');
    assert_memory_equal(back + 1, "\xef\xbf\xbd\xef\xbf\xbd", 6);
    assert_non_null(memmem(back, dl, "\xf0\x9f\x98\x80", 4)); /* the emoji */
    free(back);
    free(ids);
    unload(&bpe);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Deterministic mixed text: words, digits, punctuation, accents, CJK, emoji, newlines. */
static char *make_text(size_t len) {
    static const char *const parts[] = {
        "the ",      "quick ",   "Brown ",     "fox's ",   "jumped ", "1234567 ", "3.14, ",
        "naïve ",    "café ",    "你好 ",      "🙂 ",    "  ",      "\n",       "\t",
        "don't ",    "(x+y)*2 ", "€1,299.99 ", "Zürich ",  "——",      "I'LL ",    "a",
        "hello\r\n", "   \n\n",  "ÿ",          "\xc2\xa0",
    };
    char *s = malloc(len + 16);
    size_t n = 0;
    uint64_t x = 0x9e3779b97f4a7c15ull;
    assert_non_null(s);
    while (n < len) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        const char *p = parts[x % (sizeof(parts) / sizeof(parts[0]))];
        size_t pl = strlen(p);
        if (n + pl > len)
            break;
        memcpy(s + n, p, pl);
        n += pl;
    }
    while (n < len)
        s[n++] = 'x';
    return s;
}

static void roundtrip_long(const char *vocab, const char *text, size_t len) {
    struct loaded l;
    if (!shared_vocab(vocab, &l))
        return;
    double t0 = now_s();
    size_t n, dl;
    int32_t *ids = encode(l.t, text, len, false, false, &n);
    double dt = now_s() - t0;
    printf("[ long     ] %s: %zu bytes -> %zu tokens in %.2f s\n", vocab, len, n, dt);
    assert_true(dt < 60.0);
    assert_true(n > 0);
    char *back = detok(l.t, ids, n, &dl);
    size_t off = pl_tokenizer_kind(l.t) == PL_TOKENIZER_SPM ? 1 : 0;
    assert_int_equal(dl, len + off);
    assert_memory_equal(back + off, text, len);
    free(back);
    free(ids);
    unload(&l);
}

static void test_long_input_completes(void **state) {
    (void)state;
    const size_t len = 1u << 20;
    if (!data_dir())
        skip();
    char *text = make_text(len);
    roundtrip_long("ggml-vocab-llama-spm.gguf", text, len);
    roundtrip_long("ggml-vocab-gpt-2.gguf", text, len);
    roundtrip_long("ggml-vocab-deepseek-llm.gguf", text, len);
    /* Degenerate inputs: one long run of the same character. */
    memset(text, ' ', len);
    roundtrip_long("ggml-vocab-llama-spm.gguf", text, len);
    roundtrip_long("ggml-vocab-gpt-2.gguf", text, len);
    memset(text, 'a', len);
    roundtrip_long("ggml-vocab-llama-spm.gguf", text, len);
    roundtrip_long("ggml-vocab-deepseek-llm.gguf", text, len);
    free(text);
}

static void test_parse_special_on_and_off(void **state) {
    (void)state;
    struct loaded spm, bpe;
    size_t n;
    if (!shared_vocab("ggml-vocab-llama-spm.gguf", &spm))
        skip();
    const char *s = "<s>Hello</s> world";
    int32_t *ids = encode(spm.t, s, strlen(s), false, true, &n);
    /* <s>, then "Hello" with the space prefix (it follows a special token), </s>, and
     * " world" again with a prefix space: llama.cpp adds it after every special token. */
    assert_true(n >= 4);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 15043); /* ▁Hello */
    assert_int_equal(ids[2], 2);
    free(ids);
    int32_t *off = encode(spm.t, s, strlen(s), false, false, &n);
    for (size_t i = 0; i < n; i++) {
        assert_int_not_equal(off[i], 1);
        assert_int_not_equal(off[i], 2);
    }
    free(off);
    /* add_special adds BOS, never EOS for this vocabulary. */
    ids = encode(spm.t, "Hello", 5, true, false, &n);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 15043);
    free(ids);
    unload(&spm);

    if (!shared_vocab("ggml-vocab-gpt-2.gguf", &bpe))
        return;
    s = "a<|endoftext|>b";
    ids = encode(bpe.t, s, strlen(s), false, true, &n);
    assert_int_equal(n, 3);
    assert_int_equal(ids[1], 50256);
    free(ids);
    ids = encode(bpe.t, s, strlen(s), false, false, &n);
    assert_true(n > 3);
    for (size_t i = 0; i < n; i++)
        assert_int_not_equal(ids[i], 50256);
    free(ids);
    unload(&bpe);
}

static void test_enospc_reports_needed_count(void **state) {
    (void)state;
    struct loaded l;
    if (!shared_vocab("ggml-vocab-llama-spm.gguf", &l))
        skip();
    int32_t out[2];
    size_t n = 0;
    const char *s = "Hello world, this is a test";
    assert_int_equal(pl_tokenizer_encode(l.t, s, strlen(s), true, false, out, 2, &n), -ENOSPC);
    assert_true(n > 2);
    int32_t *all = malloc(n * sizeof(*all));
    size_t n2;
    assert_int_equal(pl_tokenizer_encode(l.t, s, strlen(s), true, false, all, n, &n2), 0);
    assert_int_equal(n2, n);
    free(all);
    char buf[2];
    assert_int_equal(pl_tokenizer_piece(l.t, 15043, buf, sizeof(buf)), -ENOSPC); /* " Hello" */
    assert_int_equal(pl_tokenizer_piece(l.t, -1, buf, sizeof(buf)), -EINVAL);
    assert_int_equal(pl_tokenizer_piece(l.t, 32000, buf, sizeof(buf)), -EINVAL);
    assert_int_equal(pl_tokenizer_encode(l.t, NULL, 3, false, false, out, 2, &n), -EINVAL);
    /* Byte and control pieces. */
    assert_int_equal(pl_tokenizer_piece(l.t, 3 + 0x0a, buf, sizeof(buf)), 1);
    assert_int_equal(buf[0], '\n');
    char cb[8];
    assert_int_equal(pl_tokenizer_piece(l.t, 1, cb, sizeof(cb)), 3);
    assert_memory_equal(cb, "<s>", 3);
    assert_true(pl_tokenizer_is_control(l.t, 1));
    assert_false(pl_tokenizer_is_control(l.t, 15043));
    size_t tl;
    assert_string_equal(pl_tokenizer_token_text(l.t, 15043, &tl), "\xe2\x96\x81Hello");
    assert_null(pl_tokenizer_token_text(l.t, 40000, &tl));
    unload(&l);
}

/* ---- Synthetic vocabularies in memory ---- */

struct gbuf {
    uint8_t *p;
    size_t n, cap;
};

static void gput(struct gbuf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void gu32(struct gbuf *b, uint32_t v) {
    gput(b, &v, 4);
}
static void gu64(struct gbuf *b, uint64_t v) {
    gput(b, &v, 8);
}
static void gstr(struct gbuf *b, const char *s) {
    gu64(b, strlen(s));
    gput(b, s, strlen(s));
}
static void kv_str(struct gbuf *b, const char *k, const char *v) {
    gstr(b, k);
    gu32(b, PL_GGUF_TYPE_STRING);
    gstr(b, v);
}
static void kv_strs(struct gbuf *b, const char *k, const char *const *v, size_t n) {
    gstr(b, k);
    gu32(b, PL_GGUF_TYPE_ARRAY);
    gu32(b, PL_GGUF_TYPE_STRING);
    gu64(b, n);
    for (size_t i = 0; i < n; i++)
        gstr(b, v[i]);
}

/* A tiny gpt2-model GGUF: the 256 byte symbols as tokens, one merge, the given pre. */
static struct gbuf tiny_bpe_gguf(const char *pre) {
    struct gbuf b = {0};
    char *toks[258];
    for (unsigned i = 0; i < 256; i++) {
        uint8_t u[4];
        size_t n = pl_utf8_encode(pl_unicode_byte_to_cp((uint8_t)i), u);
        toks[i] = calloc(1, 5);
        memcpy(toks[i], u, n);
    }
    toks[256] = strdup("ab");
    toks[257] = strdup("<|endoftext|>");
    static const char *const merges[] = {"a b"};
    gput(&b, "GGUF", 4);
    gu32(&b, 3);
    gu64(&b, 0);
    gu64(&b, pre ? 4 : 3);
    kv_str(&b, "tokenizer.ggml.model", "gpt2");
    if (pre)
        kv_str(&b, "tokenizer.ggml.pre", pre);
    kv_strs(&b, "tokenizer.ggml.tokens", (const char *const *)toks, 258);
    kv_strs(&b, "tokenizer.ggml.merges", merges, 1);
    for (unsigned i = 0; i < 258; i++)
        free(toks[i]);
    return b;
}

static void test_unknown_pre_tokenizer_is_named(void **state) {
    (void)state;
    struct gbuf b = tiny_bpe_gguf("no-such-pretokenizer");
    struct pl_gguf *g;
    struct pl_tokenizer *t = NULL;
    char err[256];
    assert_int_equal(pl_gguf_open_mem(b.p, b.n, &g, err, sizeof(err)), 0);
    assert_int_equal(pl_tokenizer_new(g, &t, err, sizeof(err)), -PL_ERR_UNSUPPORTED);
    assert_null(t);
    assert_non_null(strstr(err, "no-such-pretokenizer"));
    pl_gguf_close(g);
    free(b.p);

    /* Without the key the "default" chain is used; merges apply. */
    b = tiny_bpe_gguf(NULL);
    assert_int_equal(pl_gguf_open_mem(b.p, b.n, &g, err, sizeof(err)), 0);
    assert_int_equal(pl_tokenizer_new(g, &t, err, sizeof(err)), 0);
    assert_int_equal(pl_tokenizer_kind(t), PL_TOKENIZER_BPE);
    assert_false(pl_tokenizer_adds_bos(t));
    int32_t ids[8];
    size_t n;
    assert_int_equal(pl_tokenizer_encode(t, "abc", 3, true, false, ids, 8, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 256);
    assert_int_equal(ids[1], 'c');
    /* "<|endoftext|>" has no token type here, but llama.cpp recognises it by its text as
     * end-of-text: it becomes a control, end-of-generation token. */
    assert_true(pl_tokenizer_is_control(t, 257));
    assert_true(pl_tokenizer_is_eog(t, 257));
    assert_int_equal(pl_tokenizer_encode(t, "<|endoftext|>", 13, false, true, ids, 8, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 257);
    assert_int_equal(pl_tokenizer_encode(t, "<|endoftext|>", 13, false, false, ids, 8, &n),
                     -ENOSPC);
    assert_int_equal(n, 13);
    pl_tokenizer_free(t);
    pl_gguf_close(g);
    free(b.p);
}

static void test_bad_metadata_is_rejected(void **state) {
    (void)state;
    struct gbuf b = {0};
    struct pl_gguf *g;
    struct pl_tokenizer *t = NULL;
    char err[256];
    static const char *const toks[] = {"a", "b", "a"};
    gput(&b, "GGUF", 4);
    gu32(&b, 3);
    gu64(&b, 0);
    gu64(&b, 2);
    kv_str(&b, "tokenizer.ggml.model", "llama");
    kv_strs(&b, "tokenizer.ggml.tokens", toks, 3);
    assert_int_equal(pl_gguf_open_mem(b.p, b.n, &g, err, sizeof(err)), 0);
    assert_int_equal(pl_tokenizer_new(g, &t, err, sizeof(err)), -PL_ERR_FORMAT);
    assert_non_null(strstr(err, "duplicate"));
    pl_gguf_close(g);
    free(b.p);

    b = (struct gbuf){0};
    gput(&b, "GGUF", 4);
    gu32(&b, 3);
    gu64(&b, 0);
    gu64(&b, 1);
    kv_str(&b, "tokenizer.ggml.model", "wordpiece-ish");
    assert_int_equal(pl_gguf_open_mem(b.p, b.n, &g, err, sizeof(err)), 0);
    assert_int_equal(pl_tokenizer_new(g, &t, err, sizeof(err)), -PL_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "wordpiece-ish"));
    pl_gguf_close(g);
    free(b.p);
}

/* ---- Pre-tokenizer splits ---- */

static void check_split(enum pl_pretok type, const char *text, const char *const *want) {
    uint32_t cps[256];
    size_t n = pl_utf8_decode_all((const uint8_t *)text, strlen(text), cps);
    struct pl_pretok_words w = {0}, s = {0};
    assert_int_equal(pl_pretok_split(type, cps, n, &w, &s), 0);
    size_t start = 0, k = 0;
    bool ok = true;
    for (; k < w.n; k++) {
        char word[256];
        size_t bl = 0;
        for (size_t i = start; i < start + w.len[k]; i++)
            bl += pl_utf8_encode(cps[i], (uint8_t *)word + bl);
        word[bl] = '\0';
        start += w.len[k];
        if (!want[k] || strcmp(word, want[k]) != 0) {
            print_error("pre %d, '%s': word %zu is '%s', want '%s'\n", (int)type, text, k, word,
                        want[k] ? want[k] : "(end)");
            ok = false;
            break;
        }
    }
    if (ok && want[k]) {
        print_error("pre %d, '%s': missing word '%s'\n", (int)type, text, want[k]);
        ok = false;
    }
    assert_true(ok);
    pl_pretok_words_done(&w);
    pl_pretok_words_done(&s);
}

static void test_pretokenizer_splits(void **state) {
    (void)state;
    const char *t1 = "Hello world's  12345 I'LL\n\n  ok!!";
    check_split(PL_PRETOK_GPT2, t1,
                (const char *const[]){"Hello", " world", "'s", " ", " 12345", " I", "'", "LL",
                                      "\n\n ", " ok", "!!", NULL});
    check_split(PL_PRETOK_LLAMA3, t1,
                (const char *const[]){"Hello", " world", "'s", " ", " ", "123", "45", " I", "'LL",
                                      "\n\n", " ", " ok", "!!", NULL});
    check_split(PL_PRETOK_QWEN2, t1,
                (const char *const[]){"Hello", " world", "'s", " ", " ", "1", "2", "3", "4", "5",
                                      " I", "'LL", "\n\n", " ", " ok", "!!", NULL});
    check_split(PL_PRETOK_STARCODER, "ab 12 c",
                (const char *const[]){"ab", " ", "1", "2", " c", NULL});
    check_split(PL_PRETOK_FALCON, "x=1234+y",
                (const char *const[]){"x", "=", "123", "4", "+", "y", NULL});
    check_split(PL_PRETOK_DEFAULT, "a, 12345",
                (const char *const[]){"a", ",", " ", "123", "45", NULL});
    check_split(PL_PRETOK_DEEPSEEK_CODER, "if x1:\n 你好",
                (const char *const[]){"if", " x", "1", ":", "\n", " ", "你好", NULL});
    check_split(PL_PRETOK_DEEPSEEK_LLM, "Hi, 世界 42  ",
                (const char *const[]){"Hi", ",", " ", "世界", " ", "42", "  ", NULL});
}

/* ---- Random input and concurrent use ---- */

static void test_random_bytes_never_break_encoding(void **state) {
    (void)state;
    static const char *const vocabs[] = {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf",
                                         "ggml-vocab-deepseek-llm.gguf"};
    static const char *const bits[] = {"<s>",  "</s>",     "<unk>",        "<|endoftext|>",
                                       " ",    "\n",       "\xe2\x96\x81", "'s",
                                       "\xc3", "\xf0\x9f", "1234"};
    uint64_t x = 42;
    bool any = false;
    for (size_t v = 0; v < sizeof(vocabs) / sizeof(vocabs[0]); v++) {
        struct loaded l;
        if (!shared_vocab(vocabs[v], &l))
            continue;
        any = true;
        for (int iter = 0; iter < 300; iter++) {
            char buf[512];
            size_t len = 0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            size_t target = x % 200;
            while (len < target) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if (x % 4 == 0) {
                    const char *b = bits[(x >> 8) % (sizeof(bits) / sizeof(bits[0]))];
                    size_t bl = strlen(b);
                    memcpy(buf + len, b, bl);
                    len += bl;
                } else {
                    buf[len++] = (char)(x >> 16);
                }
            }
            size_t n1, n2;
            int32_t *a = encode(l.t, buf, len, iter & 1, iter & 2, &n1);
            int32_t *b = encode(l.t, buf, len, iter & 1, iter & 2, &n2);
            assert_int_equal(n1, n2);
            for (size_t i = 0; i < n1; i++) {
                assert_true(a[i] >= 0 && (uint32_t)a[i] < pl_tokenizer_n_vocab(l.t));
                assert_int_equal(a[i], b[i]);
            }
            free(a);
            free(b);
        }
        unload(&l);
    }
    if (!any)
        skip();
}

struct thread_arg {
    const struct pl_tokenizer *t;
    const char *text;
    size_t len;
    int32_t *ids;
    size_t n;
};

static void *encode_thread(void *p) {
    struct thread_arg *a = p;
    size_t cap = a->len + 8;
    a->ids = malloc(cap * sizeof(*a->ids));
    if (a->ids && pl_tokenizer_encode(a->t, a->text, a->len, true, true, a->ids, cap, &a->n) < 0)
        a->n = (size_t)-1;
    return NULL;
}

static void test_concurrent_encoding_agrees(void **state) {
    (void)state;
    struct loaded l;
    if (!shared_vocab("ggml-vocab-deepseek-llm.gguf", &l) &&
        !shared_vocab("ggml-vocab-gpt-2.gguf", &l))
        skip();
    const size_t len = 64 * 1024;
    char *text = make_text(len);
    struct thread_arg args[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (struct thread_arg){l.t, text, len, NULL, 0};
        assert_int_equal(pthread_create(&th[i], NULL, encode_thread, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < 4; i++) {
        assert_non_null(args[i].ids);
        assert_int_equal(args[i].n, args[0].n);
        assert_memory_equal(args[i].ids, args[0].ids, args[0].n * sizeof(int32_t));
    }
    for (int i = 0; i < 4; i++)
        free(args[i].ids);
    free(text);
    unload(&l);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vocab_vectors_match_llama_cpp),
        cmocka_unit_test(test_model_refs_match_llama_cpp),
        cmocka_unit_test(test_empty_and_space_only_input),
        cmocka_unit_test(test_invalid_utf8_is_handled),
        cmocka_unit_test(test_long_input_completes),
        cmocka_unit_test(test_parse_special_on_and_off),
        cmocka_unit_test(test_enospc_reports_needed_count),
        cmocka_unit_test(test_unknown_pre_tokenizer_is_named),
        cmocka_unit_test(test_bad_metadata_is_rejected),
        cmocka_unit_test(test_pretokenizer_splits),
        cmocka_unit_test(test_random_bytes_never_break_encoding),
        cmocka_unit_test(test_concurrent_encoding_agrees),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
