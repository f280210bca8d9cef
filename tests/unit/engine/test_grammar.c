/* SPDX-License-Identifier: MIT */
/* Unit tests for engine/src/grammar.c (and the private JSON reader json.c it uses):
 * (a) the automaton accepts/rejects a table of texts in JSON mode and under schemas;
 *     schema compile errors; shortest-completion distances;
 * (b) token masks on a real 32000-token vocabulary: every allowed token is accepted, and
 *     the mask equals a brute-force check of every token's piece;
 * (c) 200 generations with a random-weight model (tiny-llama-spm-Q4_K_M.gguf, random seeds,
 *     temperature 1, at most 128 tokens, 8 sequences batched) under JSON mode and three
 *     schemas: every output parses (tests/support/json) and validates against its schema
 *     (a small validator below). Parts (b) and (c) need $PICOLM_TEST_DATA (skipped when
 *     missing). */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "json.h"
#include "pl/engine_grammar.h"
#include "pl/engine_model.h"
#include "pl/engine_sampler.h"
#include "pl/engine_tokenizer.h"
#include "pl/pl_err.h"
#include "pl/pl_utf8.h"

#define N_GENERATIONS 200
#define MAX_TOKENS 128
#define N_SEQ 8

static const char *const schema_person =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":5},"
    "\"age\":{\"type\":\"integer\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"enum\":[\"x\",\"y\"]},"
    "\"minItems\":1,\"maxItems\":2},"
    "\"ok\":{\"type\":\"boolean\"},\"n\":{\"type\":\"null\"}},"
    "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}";

static const char *const schema_nested =
    "{\"type\":\"object\",\"properties\":{"
    "\"id\":{\"type\":\"integer\"},"
    "\"score\":{\"type\":\"number\"},"
    "\"kind\":{\"enum\":[\"cat\",\"dog\",3,null]},"
    "\"owner\":{\"type\":\"object\",\"properties\":{"
    "\"first\":{\"type\":\"string\",\"maxLength\":8},"
    "\"pets\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"maxItems\":3}},"
    "\"required\":[\"first\",\"pets\"]},"
    "\"note\":{\"type\":[\"string\",\"null\"],\"maxLength\":6}},"
    "\"required\":[\"id\",\"kind\",\"owner\"]}";

static const char *const schema_list =
    "{\"type\":\"array\",\"minItems\":2,\"maxItems\":4,\"items\":{\"type\":\"object\","
    "\"properties\":{\"k\":{\"const\":\"v\"},\"x\":{\"type\":\"number\"}},"
    "\"required\":[\"k\"],\"additionalProperties\":false}}";

/* ---- (a) automaton tables ---- */

struct text_case {
    const char *schema; /* NULL: JSON mode */
    const char *text;
    bool ok; /* accepted and complete */
};

static bool run_text(const char *schema, const char *text, size_t len) {
    struct pl_grammar *g = NULL;
    struct pl_grammar_state *st = NULL;
    char err[256];
    int r =
        pl_grammar_compile_json(NULL, schema, schema ? strlen(schema) : 0, &g, err, sizeof(err));
    if (r != 0)
        fail_msg("compile %s: %d %s", schema ? schema : "(json)", r, err);
    assert_int_equal(pl_grammar_state_new(g, &st), 0);
    bool ok = pl_grammar_feed_text(st, text, len) == 0 && pl_grammar_state_complete(st);
    /* Byte by byte gives the same verdict. */
    pl_grammar_state_reset(st);
    bool ok2 = true;
    for (size_t i = 0; i < len && ok2; i++)
        ok2 = pl_grammar_feed_text(st, text + i, 1) == 0;
    ok2 = ok2 && pl_grammar_state_complete(st);
    assert_int_equal(ok, ok2);
    if (ok)
        assert_int_equal(pl_grammar_state_distance(st), 0);
    pl_grammar_state_free(st);
    pl_grammar_free(g);
    return ok;
}

static void test_grammar_accepts_and_rejects_texts(void **state) {
    (void)state;
    static const struct text_case cases[] = {
        /* JSON mode */
        {NULL, "{}", true},
        {NULL, "{\"a\":1}", true},
        {NULL, "{\"a\":[1,2,{\"b\":null}],\"c\":\"x\\u00e9\\n\"}", true},
        {NULL, "{\"a\" : true , \"b\":false}", true},
        {NULL, "{\"a\":1e5,\"b\":-0.5E-3,\"c\":0,\"d\":-0}", true},
        {NULL, "{\"a\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x99\x82\"}", true},
        {NULL, "{\"a\":    1}", true},
        {NULL, "{\n\t\"a\": {\"\": []}\n}", true},
        {NULL, "{\"a\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"}", true},
        {NULL, "[]", false},
        {NULL, "\"s\"", false},
        {NULL, "{\"a\":01}", false},
        {NULL, "{\"a\":1,}", false},
        {NULL, "{,}", false},
        {NULL, "{\"a\"}", false},
        {NULL, "{\"a\":tru}", false},
        {NULL, "{\"a\":truex}", false},
        {NULL, "{\"a\":\"\\ud800\"}", false},
        {NULL, "{\"a\":\"\\uDBFF\"}", false},
        {NULL, "{\"a\":\"\x01\"}", false},
        {NULL, "{\"a\":\"\xc3\x28\"}", false},
        {NULL, "{\"a\":\"\xed\xa0\x80\"}", false},
        {NULL, "{\"a\":\"\xc0\xaf\"}", false},
        {NULL, "{\"a\":\"\\x\"}", false},
        {NULL, " {}", false},
        {NULL, "{} ", false},
        {NULL, "{}{}", false},
        {NULL, "{\"a\":     1}", false},
        {NULL, "{\"a\":1.}", false},
        {NULL, "{\"a\":.5}", false},
        {NULL, "{\"a\":1e}", false},
        {NULL, "{\"a\":+1}", false},
        {NULL, "{\"a\":1", false},
        {NULL, "{\"a\":1234567890123456789}", false},
        {NULL, "{\"a\":1e123}", false},
        {NULL, "{\"a\":[1 2]}", false},
        {NULL, "{\"a\":[,]}", false},
        /* a schema with typed, bounded, optional and ordered properties */
        {schema_person, "{\"name\":\"bob\",\"age\":3}", true},
        {schema_person, "{\"name\":\"h\xc3\xa9llo\",\"age\":-12}", true},
        {schema_person, "{\"name\":\"bob\",\"age\":3,\"tags\":[\"x\",\"y\"]}", true},
        {schema_person, "{\"name\":\"bob\",\"age\":3,\"ok\":true,\"n\":null}", true},
        {schema_person, "{ \"name\" : \"b\" , \"age\" : 0 }", true},
        {schema_person, "{\"age\":3,\"name\":\"bob\"}", false},
        {schema_person, "{\"name\":\"bob\"}", false},
        {schema_person, "{\"name\":\"\",\"age\":3}", false},
        {schema_person, "{\"name\":\"bobbyy\",\"age\":3}", false},
        {schema_person, "{\"name\":\"bob\",\"age\":3.5}", false},
        {schema_person, "{\"name\":\"bob\",\"age\":1e3}", false},
        {schema_person, "{\"name\":\"bob\",\"age\":3,\"tags\":[]}", false},
        {schema_person, "{\"name\":\"bob\",\"age\":3,\"tags\":[\"x\",\"y\",\"x\"]}", false},
        {schema_person, "{\"name\":\"bob\",\"age\":3,\"tags\":[\"z\"]}", false},
        {schema_person, "{\"name\":\"bob\",\"age\":3,\"n\":null,\"ok\":true}", false},
        {schema_person, "{\"name\":\"bob\",\"age\":3,\"extra\":1}", false},
        {schema_person, "{\"name\":\"bob\",\"age\":\"3\"}", false},
        {schema_person, "{\"name\":\"bob\",\"age\":3,\"ok\":null}", false},
        {schema_person, "{\"nam\":\"bob\",\"age\":3}", false},
        /* nested objects, enums of mixed literals, unions */
        {schema_nested, "{\"id\":1,\"kind\":\"cat\",\"owner\":{\"first\":\"\",\"pets\":[]}}", true},
        {schema_nested,
         "{\"id\":1,\"score\":2.5,\"kind\":3,\"owner\":{\"first\":\"ann\",\"pets\":[1,2,3]},"
         "\"note\":null}",
         true},
        {schema_nested,
         "{\"id\":1,\"kind\":null,\"owner\":{\"first\":\"a\",\"pets\":[]},"
         "\"note\":\"hi\"}",
         true},
        {schema_nested, "{\"id\":1,\"kind\":\"cow\",\"owner\":{\"first\":\"\",\"pets\":[]}}",
         false},
        {schema_nested, "{\"id\":1,\"kind\":33,\"owner\":{\"first\":\"\",\"pets\":[]}}", false},
        {schema_nested, "{\"id\":1,\"kind\":\"cat\",\"owner\":{\"first\":\"\"}}", false},
        {schema_nested, "{\"id\":1,\"kind\":\"cat\",\"owner\":{\"first\":\"\",\"pets\":[1,2,3,4]}}",
         false},
        {schema_nested,
         "{\"id\":1,\"kind\":\"cat\",\"owner\":{\"first\":\"\",\"pets\":[]},"
         "\"note\":\"toolong\"}",
         false},
        /* top-level non-objects */
        {"{\"type\":\"integer\"}", "42", true},
        {"{\"type\":\"integer\"}", "-7", true},
        {"{\"type\":\"integer\"}", "4.2", false},
        {"{\"type\":\"number\"}", "-0.5e+10", true},
        {"{\"enum\":[1,12,\"a\",null,{\"k\":[1]}]}", "1", true},
        {"{\"enum\":[1,12,\"a\",null,{\"k\":[1]}]}", "12", true},
        {"{\"enum\":[1,12,\"a\",null,{\"k\":[1]}]}", "123", false},
        {"{\"enum\":[1,12,\"a\",null,{\"k\":[1]}]}", "\"a\"", true},
        {"{\"enum\":[1,12,\"a\",null,{\"k\":[1]}]}", "{\"k\":[1]}", true},
        {"{\"enum\":[\"a\\\"b\",\"\\u00e9\"]}", "\"a\\\"b\"", true},
        {"{\"enum\":[\"a\\\"b\",\"\\u00e9\"]}", "\"\xc3\xa9\"", true},
        {"{\"type\":[\"string\",\"null\"]}", "null", true},
        {"{\"type\":[\"string\",\"null\"]}", "\"s\"", true},
        {"{\"type\":[\"string\",\"null\"]}", "1", false},
        {"{\"type\":\"boolean\"}", "false", true},
        {"{\"type\":\"boolean\"}", "null", false},
        {"{}", "[1,\"a\",{\"b\":[]}]", true},
        {"true", "\"x\"", true},
        {"{\"const\":[1,2]}", "[1,2]", true},
        {"{\"const\":[1,2]}", "1", false},
        {schema_list, "[{\"k\":\"v\"},{\"k\":\"v\",\"x\":1.5}]", true},
        {schema_list, "[{\"k\":\"v\"}]", false},
        {schema_list, "[{\"k\":\"w\"},{\"k\":\"v\"}]", false},
        /* optional properties before a required one may be skipped, in order */
        {"{\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"},"
         "\"c\":{\"type\":\"integer\"}},\"required\":[\"c\"]}",
         "{\"c\":1}", true},
        {"{\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"},"
         "\"c\":{\"type\":\"integer\"}},\"required\":[\"c\"]}",
         "{\"b\":1,\"c\":2}", true},
        {"{\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"},"
         "\"c\":{\"type\":\"integer\"}},\"required\":[\"c\"]}",
         "{\"a\":1,\"b\":2}", false},
        {"{\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"},"
         "\"c\":{\"type\":\"integer\"}},\"required\":[\"c\"]}",
         "{}", false},
        /* free-form objects with typed values */
        {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}",
         "{\"a\":1,\"b\":2}", true},
        {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", "{\"a\":\"x\"}",
         false},
        {"{\"type\":\"object\",\"additionalProperties\":false}", "{}", true},
        {"{\"type\":\"object\",\"additionalProperties\":false}", "{\"a\":1}", false},
        {"{\"type\":\"array\",\"maxItems\":0}", "[]", true},
        {"{\"type\":\"array\",\"maxItems\":0}", "[1]", false},
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":2}", "\"\\u00e9\\n\"", true},
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":2}", "\"\xf0\x9f\x99\x82\"", false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        bool got = run_text(cases[i].schema, cases[i].text, strlen(cases[i].text));
        if (got != cases[i].ok)
            fail_msg("case %zu: schema %s text [%s]: got %d want %d", i,
                     cases[i].schema ? cases[i].schema : "(json)", cases[i].text, got, cases[i].ok);
    }
    /* A NUL byte inside a string is rejected (control character). */
    assert_false(run_text(NULL, "{\"a\":\"\0\"}", 8));
}

static void test_grammar_rejects_bad_schemas(void **state) {
    (void)state;
    static const struct {
        const char *schema;
        int want;
    } cases[] = {
        {"{\"type\":\"string\",\"pattern\":\"x\"}", -PL_ERR_UNSUPPORTED},
        {"{\"$ref\":\"#/$defs/a\"}", -PL_ERR_UNSUPPORTED},
        {"{\"anyOf\":[{}]}", -PL_ERR_UNSUPPORTED},
        {"{\"type\":\"object\",\"required\":[\"zz\"]}", -PL_ERR_UNSUPPORTED},
        {"{\"items\":[{}]}", -PL_ERR_UNSUPPORTED},
        {"{\"maxLength\":100000}", -PL_ERR_UNSUPPORTED},
        {"false", -PL_ERR_UNSUPPORTED},
        {"{\"type\":\"strin\"}", -EINVAL},
        {"{\"type\":[]}", -EINVAL},
        {"{\"type\":7}", -EINVAL},
        {"{\"minLength\":5,\"maxLength\":2}", -EINVAL},
        {"{\"minItems\":-1}", -EINVAL},
        {"{\"minItems\":1.5}", -EINVAL},
        {"{\"enum\":[]}", -EINVAL},
        {"{\"type\":\"string\",\"enum\":[1,2]}", -EINVAL},
        {"{\"properties\":{\"a\":{},\"a\":{}}}", -EINVAL},
        {"{\"properties\":[]}", -EINVAL},
        {"{", -EINVAL},
        {"{\"a\":1}x", -EINVAL},
        {"\"\xff\"", -EINVAL},
        {"[1,]", -EINVAL},
        {"{\"enum\":[\"\\ud800\"]}", -EINVAL},
        {"7", -EINVAL},
    };
    char err[256];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct pl_grammar *g = NULL;
        err[0] = '\0';
        int r = pl_grammar_compile_json(NULL, cases[i].schema, strlen(cases[i].schema), &g, err,
                                        sizeof(err));
        if (r != cases[i].want)
            fail_msg("schema %s: got %d want %d (%s)", cases[i].schema, r, cases[i].want, err);
        assert_null(g);
        assert_true(err[0] != '\0');
    }
    /* Nesting deeper than the compiler allows. */
    char deep[1024] = "";
    for (int i = 0; i < 20; i++)
        strcat(deep, "{\"items\":");
    strcat(deep, "{}");
    for (int i = 0; i < 20; i++)
        strcat(deep, "}");
    struct pl_grammar *g = NULL;
    assert_int_equal(pl_grammar_compile_json(NULL, deep, strlen(deep), &g, err, sizeof(err)),
                     -PL_ERR_UNSUPPORTED);
    /* Nesting beyond the JSON reader's depth cap, and garbage, fail cleanly. */
    char *deeper = malloc(200001);
    assert_non_null(deeper);
    memset(deeper, '[', 100000);
    memset(deeper + 100000, ']', 100000);
    deeper[200000] = '\0';
    assert_int_equal(pl_grammar_compile_json(NULL, deeper, 200000, &g, err, sizeof(err)), -EINVAL);
    free(deeper);
    assert_int_equal(pl_grammar_compile_json(NULL, NULL, 3, &g, err, sizeof(err)), -EINVAL);
}

static uint32_t distance_after(const char *schema, const char *prefix) {
    struct pl_grammar *g = NULL;
    struct pl_grammar_state *st = NULL;
    assert_int_equal(
        pl_grammar_compile_json(NULL, schema, schema ? strlen(schema) : 0, &g, NULL, 0), 0);
    assert_int_equal(pl_grammar_state_new(g, &st), 0);
    assert_int_equal(pl_grammar_feed_text(st, prefix, strlen(prefix)), 0);
    uint32_t d = pl_grammar_state_distance(st);
    pl_grammar_state_free(st);
    pl_grammar_free(g);
    return d;
}

static void test_grammar_distance_is_shortest_completion(void **state) {
    (void)state;
    assert_int_equal(distance_after(NULL, ""), 2);               /* {} */
    assert_int_equal(distance_after(NULL, "{\"a\":"), 2);        /* 0} */
    assert_int_equal(distance_after(NULL, "{\"a\":[{\"b"), 6);   /* ":0}]} */
    assert_int_equal(distance_after(NULL, "{\"a\":\"\\u00"), 4); /* 2 hex, ", } */
    assert_int_equal(distance_after(NULL, "{\"a\":-"), 2);
    assert_int_equal(distance_after(NULL, "{\"a\":1"), 1);
    /* {"name":"x","age":0} */
    assert_int_equal(distance_after(schema_person, ""), 20);
    assert_int_equal(distance_after(schema_person, "{\"name\":\"bob\""), 9);
    assert_int_equal(distance_after(schema_person, "{\"name\":\"bob\",\"age\":3"), 1);
    assert_int_equal(distance_after(schema_person, "{\"name\":\"bob\",\"age\":3,\"t"),
                     11);                                   /* ags":["x"]} */
    assert_int_equal(distance_after(schema_list, "["), 20); /* {"k":"v"},{"k":"v"}] */
}

/* ---- (b) and (c): with a real vocabulary and model ---- */

static char g_model_path[4096];
static struct pl_model *g_model;
static struct pl_grammar_vocab *g_vocab;

static int setup_model(void **state) {
    (void)state;
    if (!g_model) {
        char err[256];
        struct pl_model_opts o = {.n_threads = 2};
        int r = pl_model_load(g_model_path, &o, &g_model, err, sizeof(err));
        if (r != 0)
            fail_msg("load %s: %d %s", g_model_path, r, err);
        assert_int_equal(pl_grammar_vocab_new(pl_model_tokenizer(g_model), &g_vocab), 0);
    }
    return 0;
}

/* Brute force: every token's piece fed to a copy of the state. */
static void test_grammar_mask_matches_brute_force(void **state) {
    (void)state;
    const struct pl_tokenizer *t = pl_model_tokenizer(g_model);
    uint32_t n = pl_tokenizer_n_vocab(t);
    static const char *const prefixes[] = {
        "",           "{",        "{\"a",      "{\"a\":",  "{\"a\":1",
        "{\"a\":\"x", "{\"a\":[", "{\"a\":{}", "{\"a\":t", "{\"a\":\"\\u0"};
    const char *schemas[] = {NULL, schema_person};
    float *logits = malloc(n * sizeof(*logits));
    assert_non_null(logits);
    for (size_t si = 0; si < 2; si++) {
        struct pl_grammar *g = NULL;
        struct pl_grammar_state *st = NULL, *probe = NULL;
        const char *sc = schemas[si];
        assert_int_equal(pl_grammar_compile_json(g_vocab, sc, sc ? strlen(sc) : 0, &g, NULL, 0), 0);
        assert_int_equal(pl_grammar_state_new(g, &st), 0);
        assert_int_equal(pl_grammar_state_new(g, &probe), 0);
        for (size_t pi = 0; pi < sizeof(prefixes) / sizeof(prefixes[0]); pi++) {
            const char *pre = si == 1 && pi > 0 ? "{\"name\":\"a" : prefixes[pi];
            pl_grammar_state_reset(st);
            if (pl_grammar_feed_text(st, pre, strlen(pre)) != 0)
                continue;
            for (uint32_t i = 0; i < n; i++)
                logits[i] = 0.0f;
            int k = pl_grammar_mask(st, logits, 0);
            assert_true(k > 0);
            int count = 0;
            for (uint32_t i = 0; i < n; i++) {
                char piece[256];
                int pl = pl_tokenizer_piece(t, (int32_t)i, piece, sizeof(piece));
                bool want;
                if (pl_tokenizer_is_eog(t, (int32_t)i))
                    want = pl_grammar_state_complete(st);
                else if (pl_tokenizer_is_control(t, (int32_t)i) || pl <= 0 ||
                         pl > (int)PL_GRAMMAR_MAX_PIECE)
                    want = false;
                else {
                    pl_grammar_state_reset(probe);
                    want = pl_grammar_feed_text(probe, pre, strlen(pre)) == 0 &&
                           pl_grammar_feed_text(probe, piece, (size_t)pl) == 0;
                }
                bool got = logits[i] == 0.0f;
                if (got != want)
                    fail_msg("prefix [%s] token %u [%.*s]: mask %d, brute force %d", pre, i,
                             pl > 0 ? pl : 0, piece, got, want);
                count += got;
            }
            assert_int_equal(count, k);
        }
        pl_grammar_state_free(probe);
        pl_grammar_state_free(st);
        pl_grammar_free(g);
    }
    free(logits);
}

/* ---- A validator for the schema subset, over the test JSON reader's DOM ---- */

static size_t utf8_count(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

static bool json_equal(const struct pl_json *a, const struct pl_json *b) {
    if (a->type != b->type)
        return false;
    switch (a->type) {
    case PL_JSON_NULL:
        return true;
    case PL_JSON_BOOL:
        return a->boolean == b->boolean;
    case PL_JSON_NUMBER:
        return a->number == b->number;
    case PL_JSON_STRING:
        return a->str_len == b->str_len && memcmp(a->str, b->str, a->str_len) == 0;
    case PL_JSON_ARRAY:
    case PL_JSON_OBJECT:
        if (a->n != b->n)
            return false;
        for (size_t i = 0; i < a->n; i++) {
            if (a->type == PL_JSON_OBJECT && strcmp(a->keys[i], b->keys[i]) != 0)
                return false;
            if (!json_equal(&a->items[i], &b->items[i]))
                return false;
        }
        return true;
    }
    return false;
}

static bool has_type(const struct pl_json *v, const char *t) {
    if (!strcmp(t, "object"))
        return v->type == PL_JSON_OBJECT;
    if (!strcmp(t, "array"))
        return v->type == PL_JSON_ARRAY;
    if (!strcmp(t, "string"))
        return v->type == PL_JSON_STRING;
    if (!strcmp(t, "number"))
        return v->type == PL_JSON_NUMBER;
    if (!strcmp(t, "integer"))
        return v->type == PL_JSON_NUMBER && floor(v->number) == v->number;
    if (!strcmp(t, "boolean"))
        return v->type == PL_JSON_BOOL;
    if (!strcmp(t, "null"))
        return v->type == PL_JSON_NULL;
    return false;
}

static bool validate(const struct pl_json *s, const struct pl_json *v, char *why, size_t wl) {
    if (s->type == PL_JSON_BOOL)
        return s->boolean;
    const struct pl_json *t = pl_json_get(s, "type");
    if (t) {
        bool any = false;
        if (t->type == PL_JSON_STRING)
            any = has_type(v, t->str);
        for (size_t i = 0; t->type == PL_JSON_ARRAY && i < t->n; i++)
            any = any || has_type(v, t->items[i].str);
        if (!any) {
            snprintf(why, wl, "type");
            return false;
        }
    }
    const struct pl_json *e = pl_json_get(s, "enum"), *c = pl_json_get(s, "const");
    if (e) {
        bool any = false;
        for (size_t i = 0; i < e->n; i++)
            any = any || json_equal(&e->items[i], v);
        if (!any) {
            snprintf(why, wl, "enum");
            return false;
        }
    }
    if (c && !json_equal(c, v)) {
        snprintf(why, wl, "const");
        return false;
    }
    if (v->type == PL_JSON_STRING) {
        size_t len = utf8_count(v->str, v->str_len);
        const struct pl_json *mn = pl_json_get(s, "minLength"), *mx = pl_json_get(s, "maxLength");
        if ((mn && len < mn->number) || (mx && len > mx->number)) {
            snprintf(why, wl, "string length %zu", len);
            return false;
        }
    }
    if (v->type == PL_JSON_ARRAY) {
        const struct pl_json *mn = pl_json_get(s, "minItems"), *mx = pl_json_get(s, "maxItems");
        if ((mn && v->n < mn->number) || (mx && v->n > mx->number)) {
            snprintf(why, wl, "items %zu", v->n);
            return false;
        }
        const struct pl_json *it = pl_json_get(s, "items");
        for (size_t i = 0; it && i < v->n; i++)
            if (!validate(it, &v->items[i], why, wl))
                return false;
    }
    if (v->type == PL_JSON_OBJECT) {
        const struct pl_json *props = pl_json_get(s, "properties");
        const struct pl_json *req = pl_json_get(s, "required");
        const struct pl_json *addl = pl_json_get(s, "additionalProperties");
        for (size_t i = 0; req && i < req->n; i++)
            if (!pl_json_get(v, req->items[i].str)) {
                snprintf(why, wl, "missing %s", req->items[i].str);
                return false;
            }
        for (size_t i = 0; i < v->n; i++) {
            const struct pl_json *ps = props ? pl_json_get(props, v->keys[i]) : NULL;
            if (ps) {
                if (!validate(ps, &v->items[i], why, wl))
                    return false;
            } else if (addl) {
                if (!validate(addl, &v->items[i], why, wl))
                    return false;
            }
        }
    }
    return true;
}

/* Every string in a parsed document is valid UTF-8. */
static bool strings_valid(const struct pl_json *v) {
    if (v->type == PL_JSON_STRING)
        return pl_utf8_valid(v->str, v->str_len);
    for (size_t i = 0; (v->type == PL_JSON_ARRAY || v->type == PL_JSON_OBJECT) && i < v->n; i++) {
        if (v->type == PL_JSON_OBJECT && !pl_utf8_valid(v->keys[i], strlen(v->keys[i])))
            return false;
        if (!strings_valid(&v->items[i]))
            return false;
    }
    return true;
}

struct gen {
    struct pl_grammar_state *st;
    struct pl_sampler *smp;
    int32_t last;
    uint32_t n_gen;
    bool active;
    size_t len;
    char text[MAX_TOKENS * PL_GRAMMAR_MAX_PIECE + 1];
    uint64_t seed;
    int schema;
    uint32_t budget;
};

/* n generations cycling through the schemas; each may use at most MAX_TOKENS tokens, or,
 * when tight, only 3 more tokens than the bytes of its shortest completion (so the end of
 * most generations runs in the budget-forcing mode of the mask). */
static void run_generations(int n_generations, bool tight, bool random_logits) {
    const char *schemas[] = {NULL, schema_person, schema_nested, schema_list};
    const size_t n_schemas = sizeof(schemas) / sizeof(schemas[0]);
    struct pl_grammar *grammars[4];
    struct pl_json *parsed_schemas[4] = {NULL};
    const struct pl_tokenizer *t = pl_model_tokenizer(g_model);
    uint32_t n_vocab = pl_tokenizer_n_vocab(t);
    char err[256];
    for (size_t i = 0; i < n_schemas; i++) {
        const char *s = schemas[i];
        assert_int_equal(
            pl_grammar_compile_json(g_vocab, s, s ? strlen(s) : 0, &grammars[i], err, sizeof(err)),
            0);
        if (s)
            assert_int_equal(pl_json_parse(s, strlen(s), &parsed_schemas[i], err, sizeof(err)), 0);
    }
    struct pl_ctx *ctx = NULL;
    struct pl_ctx_opts co = {.n_ctx = MAX_TOKENS + 8, .n_seq = N_SEQ, .n_batch = N_SEQ};
    assert_int_equal(pl_ctx_new(g_model, &co, &ctx), 0);
    float *logits = malloc((size_t)N_SEQ * n_vocab * sizeof(*logits));
    struct gen *gens = calloc(N_SEQ, sizeof(*gens));
    assert_non_null(logits);
    assert_non_null(gens);

    uint64_t master = 0x5DEECE66Dull;
    int started = 0, finished = 0, by_eog = 0, total_tokens = 0;
    int32_t bos = pl_tokenizer_bos(t);
    while (finished < n_generations) {
        /* Start new generations in free slots. */
        for (int s = 0; s < N_SEQ; s++) {
            struct gen *gn = &gens[s];
            if (gn->active || started >= n_generations)
                continue;
            master = master * 6364136223846793005ull + 1442695040888963407ull;
            gn->seed = master >> 11;
            gn->schema = started % (int)n_schemas;
            pl_grammar_state_free(gn->st);
            pl_sampler_free(gn->smp);
            gn->st = NULL;
            gn->smp = NULL;
            assert_int_equal(pl_grammar_state_new(grammars[gn->schema], &gn->st), 0);
            gn->budget = tight ? pl_grammar_state_distance(gn->st) + 3 : MAX_TOKENS;
            assert_true(gn->budget <= MAX_TOKENS);
            struct pl_sampler_params sp;
            pl_sampler_params_default(&sp);
            sp.temp = 1.0f;
            sp.top_k = 0;
            sp.top_p = 1.0f;
            sp.min_p = 0.0f;
            sp.seed = gn->seed;
            assert_int_equal(pl_sampler_new(&sp, n_vocab, &gn->smp), 0);
            pl_ctx_seq_clear(ctx, s);
            gn->last = bos;
            gn->n_gen = 0;
            gn->len = 0;
            gn->active = true;
            started++;
        }
        /* One batched step over the active sequences. */
        int32_t tok[N_SEQ], pos[N_SEQ], seq[N_SEQ];
        bool want[N_SEQ];
        uint32_t nb = 0;
        int slot_of[N_SEQ];
        for (int s = 0; s < N_SEQ; s++) {
            if (!gens[s].active)
                continue;
            tok[nb] = gens[s].last;
            pos[nb] = (int32_t)pl_ctx_seq_len(ctx, s);
            seq[nb] = s;
            want[nb] = true;
            slot_of[nb] = s;
            nb++;
        }
        assert_true(nb > 0);
        struct pl_batch b = {.n = nb, .token = tok, .pos = pos, .seq = seq, .logits = want};
        if (random_logits) {
            /* Uniform noise: explores far more of the grammar than the model does. */
            for (size_t i = 0; i < (size_t)nb * n_vocab; i++) {
                master ^= master << 13;
                master ^= master >> 7;
                master ^= master << 17;
                logits[i] = (float)(master >> 40) * (8.0f / (float)(1 << 24));
            }
        } else {
            assert_int_equal(pl_ctx_decode(ctx, &b, logits), 0);
        }
        for (uint32_t i = 0; i < nb; i++) {
            struct gen *gn = &gens[slot_of[i]];
            float *l = logits + (size_t)i * n_vocab;
            int k = pl_grammar_mask(gn->st, l, gn->budget - gn->n_gen);
            assert_true(k > 0);
            int32_t id = pl_sampler_sample(gn->smp, l);
            assert_true(id >= 0);
            int r = pl_grammar_accept(gn->st, id);
            if (r < 0)
                fail_msg("seed %llu: sampled token %d not accepted", (unsigned long long)gn->seed,
                         id);
            total_tokens++;
            gn->n_gen++;
            gn->last = id;
            bool done = r == 1;
            if (!done) {
                int pl =
                    pl_tokenizer_piece(t, id, gn->text + gn->len, sizeof(gn->text) - gn->len - 1);
                assert_true(pl > 0);
                gn->len += (size_t)pl;
                if (gn->n_gen == gn->budget) {
                    if (!pl_grammar_state_complete(gn->st))
                        fail_msg("seed %llu schema %d: budget ran out before completion: %.*s",
                                 (unsigned long long)gn->seed, gn->schema, (int)gn->len, gn->text);
                    done = true;
                }
            } else {
                by_eog++;
            }
            if (!done)
                continue;
            /* Parse and validate. */
            gn->text[gn->len] = '\0';
            struct pl_json *doc = NULL;
            if (pl_json_parse(gn->text, gn->len, &doc, err, sizeof(err)) != 0)
                fail_msg("seed %llu schema %d: output does not parse (%s): %s",
                         (unsigned long long)gn->seed, gn->schema, err, gn->text);
            char why[128] = "";
            if (gn->schema == 0) {
                if (doc->type != PL_JSON_OBJECT)
                    fail_msg("JSON mode output is no object: %s", gn->text);
            } else if (!validate(parsed_schemas[gn->schema], doc, why, sizeof(why))) {
                fail_msg("seed %llu schema %d: output does not validate (%s): %s",
                         (unsigned long long)gn->seed, gn->schema, why, gn->text);
            }
            if (!strings_valid(doc))
                fail_msg("invalid UTF-8 in output: %s", gn->text);
            if (finished < 2 * (int)n_schemas)
                print_message("schema %d, seed %llu: %s\n", gn->schema,
                              (unsigned long long)gn->seed, gn->text);
            pl_json_free(doc);
            gn->active = false;
            finished++;
        }
    }
    print_message("%d generations (%s budget, %s), %d tokens, %d ended by EOG\n", finished,
                  tight ? "tight" : "128-token", random_logits ? "random logits" : "model",
                  total_tokens, by_eog);
    for (int s = 0; s < N_SEQ; s++) {
        pl_grammar_state_free(gens[s].st);
        pl_sampler_free(gens[s].smp);
    }
    free(gens);
    free(logits);
    pl_ctx_free(ctx);
    for (size_t i = 0; i < n_schemas; i++) {
        pl_grammar_free(grammars[i]);
        pl_json_free(parsed_schemas[i]);
    }
}

static void test_grammar_random_model_generations_are_valid(void **state) {
    (void)state;
    run_generations(N_GENERATIONS, false, false);
}

static void test_grammar_random_logits_generations_are_valid(void **state) {
    (void)state;
    run_generations(N_GENERATIONS, false, true);
    run_generations(N_GENERATIONS / 2, true, true);
}

static void test_grammar_tight_budget_still_completes(void **state) {
    (void)state;
    run_generations(N_GENERATIONS / 2, true, false);
}

int main(void) {
    const struct CMUnitTest table_tests[] = {
        cmocka_unit_test(test_grammar_accepts_and_rejects_texts),
        cmocka_unit_test(test_grammar_rejects_bad_schemas),
        cmocka_unit_test(test_grammar_distance_is_shortest_completion),
    };
    const struct CMUnitTest model_tests[] = {
        cmocka_unit_test_setup(test_grammar_mask_matches_brute_force, setup_model),
        cmocka_unit_test_setup(test_grammar_random_model_generations_are_valid, setup_model),
        cmocka_unit_test_setup(test_grammar_tight_budget_still_completes, setup_model),
        cmocka_unit_test_setup(test_grammar_random_logits_generations_are_valid, setup_model),
    };
    int fails = cmocka_run_group_tests(table_tests, NULL, NULL);
    const char *data = getenv("PICOLM_TEST_DATA");
    if (!data || !*data) {
        fprintf(stderr, "PICOLM_TEST_DATA not set: model tests skipped\n");
        return fails ? fails : 77;
    }
    snprintf(g_model_path, sizeof(g_model_path), "%s/models/tiny-llama-spm-Q4_K_M.gguf", data);
    FILE *f = fopen(g_model_path, "rb");
    if (!f) {
        fprintf(stderr, "%s missing: model tests skipped\n", g_model_path);
        return fails ? fails : 77;
    }
    fclose(f);
    fails += cmocka_run_group_tests(model_tests, NULL, NULL);
    pl_grammar_vocab_free(g_vocab);
    pl_model_free(g_model);
    return fails;
}
