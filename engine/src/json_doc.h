/* SPDX-License-Identifier: MIT */
/* Private JSON reader for engine/ (JSON-Schema documents given to grammar.c): parses a
 * whole document into an array of nodes. Input is untrusted (it comes from clients): the
 * size and nesting are capped, strings must be valid UTF-8 without lone surrogates, and
 * every error is a return value. */
#ifndef PL_ENGINE_JSON_H
#define PL_ENGINE_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PL_JSON_DOC_MAX_BYTES (1u << 20)
#define PL_JSON_DOC_MAX_DEPTH 64u

enum pl_json_kind {
    PL_JSON_K_NULL,
    PL_JSON_K_BOOL,
    PL_JSON_K_NUMBER,
    PL_JSON_K_STRING,
    PL_JSON_K_ARRAY,
    PL_JSON_K_OBJECT,
};

#define PL_JSON_NONE UINT32_MAX

/* Children of arrays and objects are linked through next; an object member's key is in
 * key/key_len of the value node. */
struct pl_json_node {
    enum pl_json_kind kind;
    bool boolean;
    double number;
    const char *str; /* STRING: decoded UTF-8, NUL-terminated; NUMBER: its source text */
    uint32_t str_len;
    const char *key; /* member of an object: decoded key, NUL-terminated */
    uint32_t key_len;
    uint32_t n;     /* ARRAY/OBJECT: child count */
    uint32_t first; /* first child or PL_JSON_NONE */
    uint32_t next;  /* next sibling or PL_JSON_NONE */
};

struct pl_json_doc {
    struct pl_json_node *nodes; /* [n_nodes], nodes[0] is the root */
    uint32_t n_nodes;
    char *pool; /* decoded strings */
    char *src;  /* copy of the text (numbers point into it) */
};

/* Parse len bytes (borrowed; copied). Returns 0, -EINVAL (syntax error, trailing data,
 * invalid UTF-8 or escape, too deep, too long: a message with the byte offset goes to err),
 * -ENOMEM. */
int pl_json_doc_parse(const char *text, size_t len, struct pl_json_doc **ret, char *err,
                      size_t err_len);
void pl_json_doc_free(struct pl_json_doc *d);

/* Member of object node o by key (NUL-terminated), or NULL. */
const struct pl_json_node *pl_json_doc_get(const struct pl_json_doc *d,
                                           const struct pl_json_node *o, const char *key);

#endif
