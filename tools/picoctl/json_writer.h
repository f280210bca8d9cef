/* SPDX-License-Identifier: MIT */
/* A small streaming JSON writer for picoctl --json (pl_jw_*): objects and arrays nest up to
 * PL_JW_MAX_DEPTH, commas and string escaping are handled here, output goes to a FILE.
 * Keys are given inside objects and must be NULL inside arrays. */
#ifndef PL_TOOLS_PICOCTL_JSON_WRITER_H
#define PL_TOOLS_PICOCTL_JSON_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define PL_JW_MAX_DEPTH 16

struct pl_jw {
    FILE *f;
    int depth;
    bool first[PL_JW_MAX_DEPTH + 1]; /* no member written yet at this level */
    bool bad;                        /* nesting misuse: the output is not valid JSON */
};

void pl_jw_init(struct pl_jw *w, FILE *f);
void pl_jw_obj_begin(struct pl_jw *w, const char *key);
void pl_jw_obj_end(struct pl_jw *w);
void pl_jw_arr_begin(struct pl_jw *w, const char *key);
void pl_jw_arr_end(struct pl_jw *w);
void pl_jw_str(struct pl_jw *w, const char *key, const char *v);
void pl_jw_u64(struct pl_jw *w, const char *key, uint64_t v);
void pl_jw_i64(struct pl_jw *w, const char *key, int64_t v);
/* Non-finite values are written as null (JSON has no NaN). */
void pl_jw_dbl(struct pl_jw *w, const char *key, double v);
void pl_jw_bool(struct pl_jw *w, const char *key, bool v);
/* End the document with a newline. Returns 0, or -EINVAL after misuse, -EIO on a write error. */
int pl_jw_finish(struct pl_jw *w);

#endif
