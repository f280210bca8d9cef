/* SPDX-License-Identifier: MIT */
/* JSON string writer with UTF-8 validation (see cli_json.h for the replacement rule). */
#include "cli_json.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pl/pl_utf8.h"

void pl_cli_json_write_str(FILE *f, const char *str, size_t len) {
    const unsigned char *s = (const unsigned char *)str;
    (void)fputc('"', f);
    size_t i = 0;
    while (i < len) {
        unsigned char c = s[i];
        if (c < 0x80) {
            switch (c) {
            case '"':
                (void)fputs("\\\"", f);
                break;
            case '\\':
                (void)fputs("\\\\", f);
                break;
            case '\n':
                (void)fputs("\\n", f);
                break;
            case '\r':
                (void)fputs("\\r", f);
                break;
            case '\t':
                (void)fputs("\\t", f);
                break;
            case '\b':
                (void)fputs("\\b", f);
                break;
            case '\f':
                (void)fputs("\\f", f);
                break;
            default:
                if (c < 0x20 || c == 0x7f)
                    (void)fprintf(f, "\\u%04x", c);
                else
                    (void)fputc(c, f);
                break;
            }
            i++;
            continue;
        }
        size_t skip = 1;
        size_t n = pl_utf8_seq(s + i, len - i, &skip);
        if (n > 0) {
            (void)fwrite(s + i, 1, n, f);
            i += n;
        } else {
            (void)fputs("\xef\xbf\xbd", f); /* U+FFFD */
            i += skip;
        }
    }
    (void)fputc('"', f);
}

/* ---- --messages files ---- */

struct jp {
    const char *s;
    size_t len, pos;
    char *err;
    size_t err_len;
};

static void skip_ws(struct jp *p) {
    while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' ||
                               p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
        p->pos++;
}

static int jp_fail(struct jp *p, const char *what) {
    (void)snprintf(p->err, p->err_len, "%s at byte %zu", what, p->pos);
    return -EINVAL;
}

static int hex4(struct jp *p, uint32_t *ret) {
    uint32_t v = 0;
    if (p->len - p->pos < 4)
        return jp_fail(p, "truncated \\u escape");
    for (int i = 0; i < 4; i++) {
        char ch = p->s[p->pos++];
        v <<= 4;
        if (ch >= '0' && ch <= '9')
            v |= (uint32_t)(ch - '0');
        else if (ch >= 'a' && ch <= 'f')
            v |= (uint32_t)(ch - 'a' + 10);
        else if (ch >= 'A' && ch <= 'F')
            v |= (uint32_t)(ch - 'A' + 10);
        else
            return jp_fail(p, "bad hex digit in a \\u escape");
    }
    *ret = v;
    return 0;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* A JSON string at p->pos (the opening quote) into a new NUL-terminated buffer. The decoded
 * text is never longer than the source, which bounds the buffer. */
static int parse_string(struct jp *p, char **ret, size_t *ret_len) {
    if (p->pos >= p->len || p->s[p->pos] != '"')
        return jp_fail(p, "expected a string");
    p->pos++;
    size_t start = p->pos;
    char *o = malloc(p->len - start + 1);
    if (!o)
        return -ENOMEM;
    size_t n = 0;
    int r;
    for (;;) {
        if (p->pos >= p->len) {
            r = jp_fail(p, "unterminated string");
            goto fail;
        }
        unsigned char ch = (unsigned char)p->s[p->pos];
        if (ch == '"') {
            p->pos++;
            break;
        }
        if (ch < 0x20) {
            r = jp_fail(p, "control character in a string");
            goto fail;
        }
        if (ch != '\\') {
            size_t skip = 0;
            size_t k = pl_utf8_seq(p->s + p->pos, p->len - p->pos, &skip);
            if (k == 0) {
                r = jp_fail(p, "invalid UTF-8 in a string");
                goto fail;
            }
            memcpy(o + n, p->s + p->pos, k);
            n += k;
            p->pos += k;
            continue;
        }
        p->pos++;
        if (p->pos >= p->len) {
            r = jp_fail(p, "unterminated string");
            goto fail;
        }
        char e = p->s[p->pos++];
        switch (e) {
        case '"':
            o[n++] = '"';
            break;
        case '\\':
            o[n++] = '\\';
            break;
        case '/':
            o[n++] = '/';
            break;
        case 'b':
            o[n++] = '\b';
            break;
        case 'f':
            o[n++] = '\f';
            break;
        case 'n':
            o[n++] = '\n';
            break;
        case 'r':
            o[n++] = '\r';
            break;
        case 't':
            o[n++] = '\t';
            break;
        case 'u': {
            uint32_t cp, lo;
            if ((r = hex4(p, &cp)) < 0)
                goto fail;
            if (cp >= 0xdc00 && cp <= 0xdfff) {
                r = jp_fail(p, "unpaired surrogate in a \\u escape");
                goto fail;
            }
            if (cp >= 0xd800 && cp <= 0xdbff) {
                if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u') {
                    r = jp_fail(p, "unpaired surrogate in a \\u escape");
                    goto fail;
                }
                p->pos += 2;
                if ((r = hex4(p, &lo)) < 0)
                    goto fail;
                if (lo < 0xdc00 || lo > 0xdfff) {
                    r = jp_fail(p, "unpaired surrogate in a \\u escape");
                    goto fail;
                }
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            if (cp == 0) {
                r = jp_fail(p, "\\u0000 is not allowed in a message");
                goto fail;
            }
            n += put_utf8(o + n, cp); /* 6 or 12 source bytes give at most 4 */
            break;
        }
        default:
            r = jp_fail(p, "bad escape in a string");
            goto fail;
        }
    }
    o[n] = '\0';
    *ret = o;
    *ret_len = n;
    return 0;
fail:
    free(o);
    return r;
}

void pl_cli_json_messages_free(struct pl_cli_msg *msgs, size_t n) {
    for (size_t i = 0; msgs && i < n; i++) {
        free(msgs[i].role);
        free(msgs[i].content);
    }
    free(msgs);
}

/* One {"role": ..., "content": ...} object into m (index i for messages). */
static int parse_message(struct jp *p, size_t i, struct pl_cli_msg *m) {
    char what[96];
    if (p->pos >= p->len || p->s[p->pos] != '{') {
        (void)snprintf(what, sizeof(what), "messages[%zu]: expected an object", i);
        return jp_fail(p, what);
    }
    p->pos++;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == '}') {
        p->pos++;
    } else {
        for (;;) {
            char *key = NULL, *val = NULL;
            size_t klen, vlen;
            skip_ws(p);
            int r = parse_string(p, &key, &klen);
            if (r < 0)
                return r;
            char **slot = strcmp(key, "role") == 0      ? &m->role
                          : strcmp(key, "content") == 0 ? &m->content
                                                        : NULL;
            if (!slot) {
                (void)snprintf(what, sizeof(what),
                               "messages[%zu]: unknown member \"%.24s\" (only \"role\" and "
                               "\"content\")",
                               i, key);
                free(key);
                return jp_fail(p, what);
            }
            if (*slot) {
                (void)snprintf(what, sizeof(what), "messages[%zu]: \"%s\" given twice", i, key);
                free(key);
                return jp_fail(p, what);
            }
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') {
                free(key);
                return jp_fail(p, "expected ':'");
            }
            p->pos++;
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != '"') {
                (void)snprintf(what, sizeof(what), "messages[%zu]: \"%s\" must be a string", i,
                               key);
                free(key);
                return jp_fail(p, what);
            }
            bool is_role = slot == &m->role;
            free(key);
            r = parse_string(p, &val, &vlen);
            if (r < 0)
                return r;
            *slot = val;
            if (is_role && (vlen == 0 || vlen > 64)) {
                (void)snprintf(what, sizeof(what), "messages[%zu]: \"role\" must be 1..64 bytes",
                               i);
                return jp_fail(p, what);
            }
            skip_ws(p);
            if (p->pos < p->len && p->s[p->pos] == ',') {
                p->pos++;
                continue;
            }
            if (p->pos < p->len && p->s[p->pos] == '}') {
                p->pos++;
                break;
            }
            return jp_fail(p, "expected ',' or '}'");
        }
    }
    if (!m->role || !m->content) {
        (void)snprintf(p->err, p->err_len, "messages[%zu]: \"%s\" is missing", i,
                       m->role ? "content" : "role");
        return -EINVAL;
    }
    return 0;
}

int pl_cli_json_parse_messages(const char *text, size_t len, struct pl_cli_msg **ret_msgs,
                               size_t *ret_n, char *err, size_t err_len) {
    struct jp p = {.s = text, .len = len, .err = err, .err_len = err_len};
    struct pl_cli_msg *msgs = NULL;
    size_t n = 0, cap = 0;
    int r;
    skip_ws(&p);
    if (p.pos >= p.len || p.s[p.pos] != '[') {
        r = jp_fail(&p, "expected a JSON array of {\"role\", \"content\"} objects");
        goto fail;
    }
    p.pos++;
    skip_ws(&p);
    if (p.pos < p.len && p.s[p.pos] == ']') {
        (void)snprintf(err, err_len, "the array has no messages");
        r = -EINVAL;
        goto fail;
    }
    for (;;) {
        skip_ws(&p);
        if (n == PL_CLI_JSON_MAX_MSGS) {
            (void)snprintf(err, err_len, "more than %u messages", PL_CLI_JSON_MAX_MSGS);
            r = -EINVAL;
            goto fail;
        }
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 8;
            struct pl_cli_msg *t = realloc(msgs, nc * sizeof(*t));
            if (!t) {
                r = -ENOMEM;
                goto fail;
            }
            msgs = t;
            cap = nc;
        }
        msgs[n] = (struct pl_cli_msg){0};
        n++;
        r = parse_message(&p, n - 1, &msgs[n - 1]);
        if (r < 0)
            goto fail;
        skip_ws(&p);
        if (p.pos < p.len && p.s[p.pos] == ',') {
            p.pos++;
            continue;
        }
        if (p.pos < p.len && p.s[p.pos] == ']') {
            p.pos++;
            break;
        }
        r = jp_fail(&p, "expected ',' or ']'");
        goto fail;
    }
    skip_ws(&p);
    if (p.pos != p.len) {
        r = jp_fail(&p, "unexpected text after the array");
        goto fail;
    }
    *ret_msgs = msgs;
    *ret_n = n;
    return 0;
fail:
    pl_cli_json_messages_free(msgs, n);
    return r;
}
