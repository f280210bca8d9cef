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

/* One chat message read from a --messages file: both strings NUL-terminated UTF-8, owned
 * by the array (free it with pl_cli_json_messages_free()). */
struct pl_cli_msg {
    char *role;
    char *content;
};

/* Most messages a --messages file may hold (the broker's limit). */
#define PL_CLI_JSON_MAX_MSGS 1024u

/* Parse text (len bytes, untrusted) as a JSON array of 1..PL_CLI_JSON_MAX_MSGS objects with
 * exactly the string members "role" (1..64 bytes) and "content" (any length, may be
 * empty), whitespace allowed around tokens. Escapes are decoded (\uXXXX with surrogate
 * pairs); strings must be valid UTF-8 and may not contain U+0000. On success *ret_msgs is a
 * new array of *ret_n messages. Returns 0, -ENOMEM, or -EINVAL with a one-line message in
 * err naming the message index or the byte offset ("messages[1]: \"role\" is missing"). */
int pl_cli_json_parse_messages(const char *text, size_t len, struct pl_cli_msg **ret_msgs,
                               size_t *ret_n, char *err, size_t err_len);
void pl_cli_json_messages_free(struct pl_cli_msg *msgs, size_t n);

#endif
