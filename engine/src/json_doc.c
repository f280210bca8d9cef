/* SPDX-License-Identifier: MIT */
/* Bounded recursive-descent JSON parser (json.h) for schema documents sent by clients.
 * Nodes live in one growing array; strings are decoded into one pool no larger than the
 * input (decoding never lengthens a JSON string), so no per-node allocation happens. */
#include "json_doc.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pl/pl_utf8.h"
#include "pl/pl_util.h"

struct parser {
    const char *s;
    size_t len;
    size_t pos;
    struct pl_json_doc *d;
    uint32_t cap_nodes;
    size_t pool_len;
    char *err;
    size_t err_len;
    int r; /* first error */
};

__attribute__((format(printf, 2, 3))) static int fail(struct parser *p, const char *fmt, ...) {
    if (p->r == 0) {
        p->r = -EINVAL;
        if (p->err && p->err_len > 0) {
            int k = snprintf(p->err, p->err_len, "schema JSON, byte %zu: ", p->pos);
            if (k >= 0 && (size_t)k < p->err_len) {
                va_list ap;
                va_start(ap, fmt);
                (void)vsnprintf(p->err + k, p->err_len - (size_t)k, fmt, ap);
                va_end(ap);
            }
        }
    }
    return p->r;
}

static void skip_ws(struct parser *p) {
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        p->pos++;
    }
}

static int new_node(struct parser *p, enum pl_json_kind k, uint32_t *ret) {
    struct pl_json_doc *d = p->d;
    if (d->n_nodes == p->cap_nodes) {
        uint32_t nc = p->cap_nodes ? p->cap_nodes * 2 : 64;
        struct pl_json_node *nn = realloc(d->nodes, (size_t)nc * sizeof(*nn));
        if (!nn) {
            p->r = -ENOMEM;
            return p->r;
        }
        d->nodes = nn;
        p->cap_nodes = nc;
    }
    d->nodes[d->n_nodes] =
        (struct pl_json_node){.kind = k, .first = PL_JSON_NONE, .next = PL_JSON_NONE};
    *ret = d->n_nodes++;
    return 0;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int read_hex4(struct parser *p, uint32_t *ret) {
    if (p->len - p->pos < 4)
        return fail(p, "truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p->s[p->pos + (size_t)i]);
        if (h < 0)
            return fail(p, "bad \\u escape");
        v = v * 16 + (uint32_t)h;
    }
    p->pos += 4;
    *ret = v;
    return 0;
}

/* Decode the string at p->pos (on the opening quote) into the pool. */
static int parse_string(struct parser *p, const char **ret, uint32_t *ret_len) {
    char *out = p->d->pool + p->pool_len;
    size_t n = 0;
    p->pos++;
    for (;;) {
        if (p->pos >= p->len)
            return fail(p, "unterminated string");
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"') {
            p->pos++;
            break;
        }
        if (c < 0x20)
            return fail(p, "control character in string");
        if (c == '\\') {
            if (p->pos + 1 >= p->len)
                return fail(p, "truncated escape");
            char e = p->s[p->pos + 1];
            p->pos += 2;
            const char *simple = strchr("\"\\/bfnrt", e);
            if (e != '\0' && simple) {
                static const char map[] = "\"\\/\b\f\n\r\t";
                out[n++] = map[simple - "\"\\/bfnrt"];
                continue;
            }
            if (e != 'u')
                return fail(p, "bad escape");
            uint32_t cp;
            if (read_hex4(p, &cp) < 0)
                return p->r;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return fail(p, "lone low surrogate");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo;
                if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
                    return fail(p, "lone high surrogate");
                p->pos += 2;
                if (read_hex4(p, &lo) < 0)
                    return p->r;
                if (lo < 0xDC00 || lo > 0xDFFF)
                    return fail(p, "bad surrogate pair");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (cp < 0x80) {
                out[n++] = (char)cp;
            } else if (cp < 0x800) {
                out[n++] = (char)(0xC0 | (cp >> 6));
                out[n++] = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                out[n++] = (char)(0xE0 | (cp >> 12));
                out[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                out[n++] = (char)(0x80 | (cp & 0x3F));
            } else {
                out[n++] = (char)(0xF0 | (cp >> 18));
                out[n++] = (char)(0x80 | ((cp >> 12) & 0x3F));
                out[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                out[n++] = (char)(0x80 | (cp & 0x3F));
            }
            continue;
        }
        size_t k = pl_utf8_seq(p->s + p->pos, p->len - p->pos, NULL);
        if (k == 0)
            return fail(p, "invalid UTF-8");
        memcpy(out + n, p->s + p->pos, k);
        n += k;
        p->pos += k;
    }
    out[n] = '\0';
    p->pool_len += n + 1;
    *ret = out;
    *ret_len = (uint32_t)n;
    return 0;
}

static int parse_number(struct parser *p, uint32_t id) {
    size_t start = p->pos;
    const char *s = p->s;
    size_t i = p->pos;
    if (i < p->len && s[i] == '-')
        i++;
    if (i >= p->len)
        return fail(p, "bad number");
    if (s[i] == '0') {
        i++;
    } else if (s[i] >= '1' && s[i] <= '9') {
        while (i < p->len && s[i] >= '0' && s[i] <= '9')
            i++;
    } else {
        return fail(p, "bad number");
    }
    if (i < p->len && s[i] == '.') {
        i++;
        if (i >= p->len || s[i] < '0' || s[i] > '9')
            return fail(p, "bad number");
        while (i < p->len && s[i] >= '0' && s[i] <= '9')
            i++;
    }
    if (i < p->len && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < p->len && (s[i] == '+' || s[i] == '-'))
            i++;
        if (i >= p->len || s[i] < '0' || s[i] > '9')
            return fail(p, "bad number");
        while (i < p->len && s[i] >= '0' && s[i] <= '9')
            i++;
    }
    char buf[64];
    if (i - start >= sizeof(buf))
        return fail(p, "number too long");
    memcpy(buf, s + start, i - start);
    buf[i - start] = '\0';
    struct pl_json_node *nd = &p->d->nodes[id];
    nd->number = strtod(buf, NULL);
    nd->str = p->d->src + start;
    nd->str_len = (uint32_t)(i - start);
    p->pos = i;
    return 0;
}

static int parse_value(struct parser *p, uint32_t depth, uint32_t *ret);

static int parse_container(struct parser *p, uint32_t id, bool object, uint32_t depth) {
    char close = object ? '}' : ']';
    uint32_t last = PL_JSON_NONE;
    p->pos++;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == close) {
        p->pos++;
        return 0;
    }
    for (;;) {
        const char *key = NULL;
        uint32_t key_len = 0, child;
        skip_ws(p);
        if (object) {
            if (p->pos >= p->len || p->s[p->pos] != '"')
                return fail(p, "expected a key");
            if (parse_string(p, &key, &key_len) < 0)
                return p->r;
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':')
                return fail(p, "expected ':'");
            p->pos++;
            skip_ws(p);
        }
        if (parse_value(p, depth + 1, &child) < 0)
            return p->r;
        struct pl_json_node *nodes = p->d->nodes;
        nodes[child].key = key;
        nodes[child].key_len = key_len;
        if (last == PL_JSON_NONE)
            nodes[id].first = child;
        else
            nodes[last].next = child;
        last = child;
        nodes[id].n++;
        skip_ws(p);
        if (p->pos >= p->len)
            return fail(p, "unterminated %s", object ? "object" : "array");
        char c = p->s[p->pos++];
        if (c == close)
            return 0;
        if (c != ',')
            return fail(p, "expected ',' or '%c'", close);
    }
}

static bool lit(struct parser *p, const char *w) {
    size_t n = strlen(w);
    if (p->len - p->pos >= n && memcmp(p->s + p->pos, w, n) == 0) {
        p->pos += n;
        return true;
    }
    return false;
}

static int parse_value(struct parser *p, uint32_t depth, uint32_t *ret) {
    uint32_t id;
    if (depth > PL_JSON_DOC_MAX_DEPTH)
        return fail(p, "nested too deep");
    if (p->pos >= p->len)
        return fail(p, "expected a value");
    char c = p->s[p->pos];
    switch (c) {
    case '{':
    case '[':
        if (new_node(p, c == '{' ? PL_JSON_K_OBJECT : PL_JSON_K_ARRAY, &id) < 0)
            return p->r;
        if (parse_container(p, id, c == '{', depth) < 0)
            return p->r;
        break;
    case '"': {
        const char *s;
        uint32_t n;
        if (new_node(p, PL_JSON_K_STRING, &id) < 0 || parse_string(p, &s, &n) < 0)
            return p->r;
        p->d->nodes[id].str = s;
        p->d->nodes[id].str_len = n;
        break;
    }
    case 't':
    case 'f':
    case 'n':
        if (lit(p, "true") || lit(p, "false")) {
            if (new_node(p, PL_JSON_K_BOOL, &id) < 0)
                return p->r;
            p->d->nodes[id].boolean = c == 't';
        } else if (lit(p, "null")) {
            if (new_node(p, PL_JSON_K_NULL, &id) < 0)
                return p->r;
        } else {
            return fail(p, "bad literal");
        }
        break;
    default:
        if (c != '-' && (c < '0' || c > '9'))
            return fail(p, "unexpected character");
        if (new_node(p, PL_JSON_K_NUMBER, &id) < 0 || parse_number(p, id) < 0)
            return p->r;
        break;
    }
    *ret = id;
    return 0;
}

int pl_json_doc_parse(const char *text, size_t len, struct pl_json_doc **ret, char *err,
                      size_t err_len) {
    if (!ret || (!text && len > 0))
        return -EINVAL;
    if (err && err_len > 0)
        err[0] = '\0';
    struct parser p = {.s = text, .len = len, .err = err, .err_len = err_len};
    if (len > PL_JSON_DOC_MAX_BYTES)
        return fail(&p, "document above %u bytes", PL_JSON_DOC_MAX_BYTES);
    struct pl_json_doc *d = calloc(1, sizeof(*d));
    if (!d)
        return -ENOMEM;
    p.d = d;
    d->pool = malloc(len + 1);
    d->src = malloc(len + 1);
    if (!d->pool || !d->src) {
        pl_json_doc_free(d);
        return -ENOMEM;
    }
    if (len > 0)
        memcpy(d->src, text, len);
    d->src[len] = '\0';
    p.s = d->src;
    uint32_t root;
    skip_ws(&p);
    if (parse_value(&p, 0, &root) == 0) {
        skip_ws(&p);
        if (p.pos != p.len)
            (void)fail(&p, "trailing data");
    }
    if (p.r < 0) {
        pl_json_doc_free(d);
        return p.r;
    }
    *ret = d;
    return 0;
}

void pl_json_doc_free(struct pl_json_doc *d) {
    if (!d)
        return;
    free(d->nodes);
    free(d->pool);
    free(d->src);
    free(d);
}

const struct pl_json_node *pl_json_doc_get(const struct pl_json_doc *d,
                                           const struct pl_json_node *o, const char *key) {
    if (!d || !o || o->kind != PL_JSON_K_OBJECT || !key)
        return NULL;
    size_t kl = strlen(key);
    for (uint32_t c = o->first; c != PL_JSON_NONE; c = d->nodes[c].next)
        if (d->nodes[c].key_len == kl && memcmp(d->nodes[c].key, key, kl) == 0)
            return &d->nodes[c];
    return NULL;
}
