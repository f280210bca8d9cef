/* SPDX-License-Identifier: MIT */
/* picoctl's JSON writer: RFC 8259 output with escaped strings (control characters as \uXXXX;
 * bytes >= 0x80 are passed through, so UTF-8 stays UTF-8). */
#include "json_writer.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>

void pl_jw_init(struct pl_jw *w, FILE *f) {
    w->f = f;
    w->depth = 0;
    w->first[0] = true;
    w->bad = false;
}

static void put_string(FILE *f, const char *s) {
    (void)fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        switch (*p) {
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
        default:
            if (*p < 0x20)
                (void)fprintf(f, "\\u%04x", *p);
            else
                (void)fputc(*p, f);
            break;
        }
    }
    (void)fputc('"', f);
}

/* Separator and key before a value at the current level. */
static void member(struct pl_jw *w, const char *key) {
    if (!w->first[w->depth])
        (void)fputc(',', w->f);
    w->first[w->depth] = false;
    if (key) {
        put_string(w->f, key);
        (void)fputc(':', w->f);
    }
}

static void open_(struct pl_jw *w, const char *key, char c) {
    if (w->depth >= PL_JW_MAX_DEPTH) {
        w->bad = true;
        return;
    }
    member(w, key);
    (void)fputc(c, w->f);
    w->first[++w->depth] = true;
}

static void close_(struct pl_jw *w, char c) {
    if (w->depth == 0) {
        w->bad = true;
        return;
    }
    w->depth--;
    (void)fputc(c, w->f);
}

void pl_jw_obj_begin(struct pl_jw *w, const char *key) {
    open_(w, key, '{');
}
void pl_jw_obj_end(struct pl_jw *w) {
    close_(w, '}');
}
void pl_jw_arr_begin(struct pl_jw *w, const char *key) {
    open_(w, key, '[');
}
void pl_jw_arr_end(struct pl_jw *w) {
    close_(w, ']');
}

void pl_jw_str(struct pl_jw *w, const char *key, const char *v) {
    member(w, key);
    put_string(w->f, v);
}

void pl_jw_u64(struct pl_jw *w, const char *key, uint64_t v) {
    member(w, key);
    (void)fprintf(w->f, "%" PRIu64, v);
}

void pl_jw_i64(struct pl_jw *w, const char *key, int64_t v) {
    member(w, key);
    (void)fprintf(w->f, "%" PRId64, v);
}

void pl_jw_dbl(struct pl_jw *w, const char *key, double v) {
    member(w, key);
    if (isfinite(v))
        (void)fprintf(w->f, "%.17g", v);
    else
        (void)fputs("null", w->f);
}

void pl_jw_bool(struct pl_jw *w, const char *key, bool v) {
    member(w, key);
    (void)fputs(v ? "true" : "false", w->f);
}

int pl_jw_finish(struct pl_jw *w) {
    (void)fputc('\n', w->f);
    if (w->bad || w->depth != 0)
        return -EINVAL;
    return ferror(w->f) || fflush(w->f) != 0 ? -EIO : 0;
}
