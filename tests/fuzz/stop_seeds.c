/* SPDX-License-Identifier: MIT */
/* Writes a seed corpus for fuzz_stop into the folder given as argv[1] (format in fuzz_stop.c):
 * stop strings that overlap each other, share prefixes and suffixes, repeat one byte, or
 * hold control bytes, with streams that match them across piece boundaries, almost match, or never.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "seed_file.h"

/* strs: NULL-terminated, lengths by strlen. */
static void emit(const char *dir, const char *const *strs, const char *stream, size_t stream_len) {
    unsigned char buf[4096];
    size_t n = 0, k = 0;
    while (strs[k])
        k++;
    buf[n++] = (unsigned char)(k - 1);
    for (size_t i = 0; i < k; i++) {
        size_t l = strlen(strs[i]);
        buf[n++] = (unsigned char)(l - 1);
        memcpy(buf + n, strs[i], l);
        n += l;
    }
    memcpy(buf + n, stream, stream_len);
    n += stream_len;
    seed_write(dir, buf, n, NULL, 0);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    const char *d = argv[1];
    const char *a[] = {"User:", "\nUser", "###", NULL};
    emit(d, a, "Hello there.\nUse the\nUser: hi", 28);
    const char *b[] = {"aaab", "aab", "ab", NULL};
    emit(d, b, "aaaaaaaaaaab and more", 21);
    const char *c[] = {"abcd", "bc", NULL};
    emit(d, c, "xxabcxbcd", 9);
    const char *e[] = {"</s>", "<|im_end|>", "<|endoftext|>", NULL};
    emit(d, e, "text <|im_en <|im_end|> tail", 28);
    const char *f[] = {"\x01\x02\x03", "\x02\x03", NULL};
    emit(d, f, "\x01\x01\x02\x01\x02\x03", 6);
    const char *g[] = {"never", NULL};
    emit(d, g, "nevenevenevernever", 18);
    return 0;
}
