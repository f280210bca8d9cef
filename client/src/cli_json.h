/* SPDX-License-Identifier: MIT */
/* JSON output helpers for the picolm CLI (`generate --json`, `info --json`): strings are
 * written from raw bytes; valid UTF-8 passes through, control characters, '"' and '\' are
 * escaped, and each maximal invalid UTF-8 subsequence becomes one U+FFFD (the Unicode
 * "substitution of maximal subparts" practice, the same as Python's errors="replace" and
 * the `text` field of the llama.cpp references). The exact bytes stay recoverable from the
 * token ids. */
#ifndef PL_CLIENT_CLI_JSON_H
#define PL_CLIENT_CLI_JSON_H

#include <stddef.h>
#include <stdio.h>

/* Write len bytes of s as a quoted JSON string to f. */
void pl_cli_json_write_str(FILE *f, const char *s, size_t len);

/* Length of the valid UTF-8 sequence at s[0..len), or 0 when s starts with an invalid or
 * truncated one; *ret_skip gets the length of the maximal invalid subpart (>= 1) then. */
size_t pl_cli_json_utf8_seq(const unsigned char *s, size_t len, size_t *ret_skip);

#endif
