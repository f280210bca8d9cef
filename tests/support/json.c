/* SPDX-License-Identifier: MIT */
/* Minimal recursive-descent JSON parser for tests; see json.h. */
#include "json.h"
#include "run.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_DEPTH 128

struct parser {
    const char *s;
    size_t len, pos;
    char *err;
    size_t err_len;
    int depth;
};

static int fail(struct parser *p, const char *what) {
    if (p->err && p->err_len)
        (void)snprintf(p->err, p->err_len, "json: %s at byte %zu", what, p->pos);
    return -EINVAL;
}

static void skip_ws(struct parser *p) {
    while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' ||
                               p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
        p->pos++;
}

static int parse_value(struct parser *p, struct pl_json *v);

static int hex4(struct parser *p, uint32_t *ret) {
    uint32_t v = 0;
    if (p->len - p->pos < 4)
        return fail(p, "truncated \\u escape");
    for (int i = 0; i < 4; i++) {
        char c = p->s[p->pos++];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (uint32_t)(c - 'A' + 10);
        else
            return fail(p, "bad hex digit in \\u escape");
    }
    *ret = v;
    return 0;
}

static size_t put_utf8(char *out, uint32_t cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* A string starting at the opening quote; the decoded text is never longer than the raw. */
static int parse_string(struct parser *p, char **ret, size_t *ret_len) {
    size_t start = ++p->pos, end = start;
    int r;
    while (end < p->len && p->s[end] != '"') {
        if (p->s[end] == '\\')
            end++;
        end++;
    }
    if (end >= p->len)
        return fail(p, "unterminated string");
    char *out = malloc(end - start + 1);
    if (!out)
        return -ENOMEM;
    size_t n = 0;
    while (p->pos < end) {
        char c = p->s[p->pos++];
        if ((unsigned char)c < 0x20) {
            r = fail(p, "control character in string");
            goto bad;
        }
        if (c != '\\') {
            out[n++] = c;
            continue;
        }
        char e = p->s[p->pos++];
        switch (e) {
        case '"':
            out[n++] = '"';
            break;
        case '\\':
            out[n++] = '\\';
            break;
        case '/':
            out[n++] = '/';
            break;
        case 'b':
            out[n++] = '\b';
            break;
        case 'f':
            out[n++] = '\f';
            break;
        case 'n':
            out[n++] = '\n';
            break;
        case 'r':
            out[n++] = '\r';
            break;
        case 't':
            out[n++] = '\t';
            break;
        case 'u': {
            uint32_t cp, lo;
            if ((r = hex4(p, &cp)) < 0)
                goto bad;
            if (cp >= 0xd800 && cp <= 0xdbff) {
                if (p->pos + 2 > end || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u') {
                    r = fail(p, "unpaired high surrogate");
                    goto bad;
                }
                p->pos += 2;
                if ((r = hex4(p, &lo)) < 0)
                    goto bad;
                if (lo < 0xdc00 || lo > 0xdfff) {
                    r = fail(p, "bad low surrogate");
                    goto bad;
                }
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                r = fail(p, "unpaired low surrogate");
                goto bad;
            }
            n += put_utf8(out + n, cp);
            break;
        }
        default:
            r = fail(p, "bad escape");
            goto bad;
        }
    }
    p->pos = end + 1;
    out[n] = '\0';
    *ret = out;
    *ret_len = n;
    return 0;
bad:
    free(out);
    return r;
}

static int append(struct pl_json *v, size_t *cap, struct pl_json *item, char *key) {
    if (v->n == *cap) {
        size_t c = *cap ? *cap * 2 : 8;
        struct pl_json *it = realloc(v->items, c * sizeof(*it));
        if (!it)
            return -ENOMEM;
        v->items = it;
        if (v->type == PL_JSON_OBJECT) {
            char **k = realloc(v->keys, c * sizeof(*k));
            if (!k)
                return -ENOMEM;
            v->keys = k;
        }
        *cap = c;
    }
    v->items[v->n] = *item;
    if (v->type == PL_JSON_OBJECT)
        v->keys[v->n] = key;
    v->n++;
    return 0;
}

static void json_done(struct pl_json *v);

static int parse_container(struct parser *p, struct pl_json *v, bool object) {
    size_t cap = 0;
    int r;
    v->type = object ? PL_JSON_OBJECT : PL_JSON_ARRAY;
    if (++p->depth > MAX_DEPTH)
        return fail(p, "nesting too deep");
    p->pos++;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == (object ? '}' : ']')) {
        p->pos++;
        p->depth--;
        return 0;
    }
    for (;;) {
        char *key = NULL;
        size_t key_len;
        struct pl_json item = {0};
        skip_ws(p);
        if (object) {
            if (p->pos >= p->len || p->s[p->pos] != '"')
                return fail(p, "expected a key");
            if ((r = parse_string(p, &key, &key_len)) < 0)
                return r;
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') {
                free(key);
                return fail(p, "expected ':'");
            }
            p->pos++;
        }
        if ((r = parse_value(p, &item)) < 0 || (r = append(v, &cap, &item, key)) < 0) {
            json_done(&item);
            free(key);
            return r;
        }
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->pos < p->len && p->s[p->pos] == (object ? '}' : ']')) {
            p->pos++;
            p->depth--;
            return 0;
        }
        return fail(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
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

static int parse_value(struct parser *p, struct pl_json *v) {
    skip_ws(p);
    if (p->pos >= p->len)
        return fail(p, "unexpected end");
    char c = p->s[p->pos];
    if (c == '{' || c == '[')
        return parse_container(p, v, c == '{');
    if (c == '"') {
        v->type = PL_JSON_STRING;
        return parse_string(p, &v->str, &v->str_len);
    }
    if (lit(p, "true")) {
        v->type = PL_JSON_BOOL;
        v->boolean = true;
        return 0;
    }
    if (lit(p, "false")) {
        v->type = PL_JSON_BOOL;
        return 0;
    }
    if (lit(p, "null")) {
        v->type = PL_JSON_NULL;
        return 0;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        char buf[64];
        size_t n = 0;
        while (p->pos + n < p->len && n < sizeof(buf) - 1 &&
               strchr("+-0123456789.eE", p->s[p->pos + n]))
            n++;
        memcpy(buf, p->s + p->pos, n);
        buf[n] = '\0';
        char *endp;
        v->type = PL_JSON_NUMBER;
        v->number = strtod(buf, &endp);
        if (endp != buf + n || n == 0)
            return fail(p, "bad number");
        p->pos += n;
        return 0;
    }
    return fail(p, "unexpected character");
}

static void json_done(struct pl_json *v) {
    free(v->str);
    for (size_t i = 0; i < v->n; i++) {
        json_done(&v->items[i]);
        if (v->keys)
            free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
}

void pl_json_free(struct pl_json *j) {
    if (!j)
        return;
    json_done(j);
    free(j);
}

int pl_json_parse(const char *text, size_t len, struct pl_json **ret, char *err, size_t err_len) {
    struct parser p = {text, len, 0, err, err_len, 0};
    struct pl_json *v = calloc(1, sizeof(*v));
    int r;
    if (!v)
        return -ENOMEM;
    if ((r = parse_value(&p, v)) < 0)
        goto bad;
    skip_ws(&p);
    if (p.pos != len) {
        r = fail(&p, "trailing data");
        goto bad;
    }
    *ret = v;
    return 0;
bad:
    pl_json_free(v);
    return r;
}

int pl_json_load_file(const char *path, struct pl_json **ret, char *err, size_t err_len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t len = 0;
    char *buf = pl_test_read_fd(fd, &len);
    int r = buf ? pl_json_parse(buf, len, ret, err, err_len) : -errno;
    free(buf);
    close(fd);
    return r;
}

const struct pl_json *pl_json_get(const struct pl_json *obj, const char *key) {
    if (!obj || obj->type != PL_JSON_OBJECT)
        return NULL;
    for (size_t i = 0; i < obj->n; i++)
        if (strcmp(obj->keys[i], key) == 0)
            return &obj->items[i];
    return NULL;
}

const struct pl_json *pl_json_at(const struct pl_json *arr, size_t i) {
    if (!arr || (arr->type != PL_JSON_ARRAY && arr->type != PL_JSON_OBJECT) || i >= arr->n)
        return NULL;
    return &arr->items[i];
}
