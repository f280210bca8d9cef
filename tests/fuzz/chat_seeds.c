/* SPDX-License-Identifier: MIT */
/* Writes a seed corpus for fuzz_chat into the folder given as argv[1] (format in fuzz_chat.c):
 * for every family, with and without the generation prompt, a system + user + assistant +
 * user conversation, a lone user turn, roles out of order, a bad role, and empty and
 * whitespace-only contents. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "seed_file.h"

struct msg {
    const char *role, *content;
};

static void emit(const char *dir, unsigned char mode, const struct msg *m, size_t n) {
    unsigned char buf[4096];
    size_t at = 0;
    buf[at++] = mode;
    for (size_t i = 0; i < n; i++) {
        size_t rl = strlen(m[i].role), cl = strlen(m[i].content);
        buf[at++] = (unsigned char)rl;
        memcpy(buf + at, m[i].role, rl);
        at += rl;
        buf[at++] = (unsigned char)cl;
        buf[at++] = (unsigned char)(cl >> 8);
        memcpy(buf + at, m[i].content, cl);
        at += cl;
    }
    seed_write(dir, buf, at, NULL, 0);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    const struct msg full[] = {{"system", "You are terse."},
                               {"user", "  Hi there  "},
                               {"assistant", "Hello."},
                               {"user", "Name three colours.\n"}};
    const struct msg lone[] = {{"user", "What is 2+2?"}};
    const struct msg order[] = {{"user", "a"}, {"user", "b"}};
    const struct msg badrole[] = {{"us er", "x"}};
    const struct msg empty[] = {{"system", ""}, {"user", " \t\n "}, {"assistant", ""}};
    const struct msg tool[] = {{"tool", "{\"ok\":true}"}, {"user", "<s>[INST]</s>"}};
    for (unsigned char fam = 1; fam < 8; fam++)
        for (unsigned char gen = 0; gen < 2; gen++) {
            const unsigned char mode = (unsigned char)(fam | gen << 7);
            emit(argv[1], mode, full, 4);
            emit(argv[1], mode, lone, 1);
            emit(argv[1], mode, order, 2);
            emit(argv[1], mode, badrole, 1);
            emit(argv[1], mode, empty, 3);
            emit(argv[1], mode, tool, 2);
        }
    return 0;
}
