/* SPDX-License-Identifier: MIT */
/* Well-formed UTF-8 (Unicode 15, table 3-7): shortest forms only, no surrogates, nothing
 * above U+10FFFF. One checker for every module: the client library refuses strings the
 * broker's protobuf-c would reject, the engine's JSON reader and the CLI's JSON writer take
 * their sequences from here, and the tests use it as their oracle. */
#ifndef PL_COMMON_PL_UTF8_H
#define PL_COMMON_PL_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* The sequence at s (len > 0 bytes left): its length (1..4) when well-formed; else 0, with
 * *ret_skip (when not NULL) set to the length of its maximal subpart (Unicode 3.9, U+FFFD
 * substitution: the lead byte plus the continuation bytes valid so far, at least 1), the
 * bytes one replacement character stands for. */
size_t pl_utf8_seq(const void *s, size_t len, size_t *ret_skip);

/* Whether s[0..len) is well-formed UTF-8 throughout (true for len 0). */
bool pl_utf8_valid(const void *s, size_t len);

#endif
