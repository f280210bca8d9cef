/* SPDX-License-Identifier: MIT */
/* A minimal JSON reader for tests (reference files such as models/NAME.ref.json): parses a
 * whole document into a small DOM of objects, arrays, strings (escapes incl. \uXXXX and
 * surrogate pairs decoded to UTF-8), numbers, bools and null. Not for untrusted input in
 * production code: it is bounded (depth cap, checked sizes) but built for clarity. */
#ifndef PL_TESTS_JSON_H
#define PL_TESTS_JSON_H

#include <stdbool.h>
#include <stddef.h>

enum pl_json_type {
    PL_JSON_NULL,
    PL_JSON_BOOL,
    PL_JSON_NUMBER,
    PL_JSON_STRING,
    PL_JSON_ARRAY,
    PL_JSON_OBJECT,
};

struct pl_json {
    enum pl_json_type type;
    bool boolean;
    double number;
    char *str; /* STRING: UTF-8, NUL-terminated (may hold NULs: use str_len) */
    size_t str_len;
    size_t n;              /* ARRAY / OBJECT: element count */
    struct pl_json *items; /* [n] elements, or the values of an object */
    char **keys;           /* OBJECT: [n] NUL-terminated keys */
};

/* Parse len bytes. 0, -EINVAL (syntax error, message with the byte offset in err), -ENOMEM. */
int pl_json_parse(const char *text, size_t len, struct pl_json **ret, char *err, size_t err_len);
/* Read and parse a file; also -errno from open/read. */
int pl_json_load_file(const char *path, struct pl_json **ret, char *err, size_t err_len);
void pl_json_free(struct pl_json *j);

/* Object member by key, or NULL (also when obj is no object). */
const struct pl_json *pl_json_get(const struct pl_json *obj, const char *key);
/* Array element i, or NULL. */
const struct pl_json *pl_json_at(const struct pl_json *arr, size_t i);

#endif
