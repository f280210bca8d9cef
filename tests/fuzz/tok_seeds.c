/* SPDX-License-Identifier: MIT */
/* Writes a seed corpus for fuzz_tokenizer into the folder given as argv[1]: llama.cpp's 46
 * tokenizer test inputs ($PICOLM_TEST_DATA/tokenizer/ggml-vocab-llama-spm.gguf.inp) under
 * every mode byte (3 vocabularies x add_special x parse_special), and texts with special
 * tokens, malformed UTF-8 and long runs. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "seed_file.h"

static void emit(const char *dir, uint8_t mode, const char *text, size_t len) {
    seed_write(dir, &mode, 1, text, len);
}

static void emit_all_modes(const char *dir, const char *text, size_t len) {
    for (uint8_t mode = 0; mode < 12; mode++)
        if ((mode & 3u) != 3)
            emit(dir, mode, text, len);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    const char *data = getenv("PICOLM_TEST_DATA");
    if (data && data[0]) {
        char path[4096];
        (void)snprintf(path, sizeof(path), "%s/tokenizer/ggml-vocab-llama-spm.gguf.inp", data);
        FILE *f = fopen(path, "rb");
        if (f) {
            static char buf[1 << 16];
            size_t n = fread(buf, 1, sizeof(buf) - 1, f);
            (void)fclose(f);
            buf[n] = '\0';
            const char *sep = "\n__ggml_vocab_test__\n";
            for (char *p = buf, *q; (q = strstr(p, sep)); p = q + strlen(sep))
                emit_all_modes(argv[1], p, (size_t)(q - p));
        }
    }
    static const char *const extra[] = {
        "<s>Hello</s> <|endoftext|> <|im_start|>user\nhi<|im_end|>",
        "\xff\xfe broken \xc3 utf8 \xe2\x82 here \xf0\x9f\x98",
        "\xed\xa0\x80 surrogate, \xc0\xaf overlong, \xf4\x90\x80\x80 too high",
        "    \t\t\n\n\r\n  trailing   ",
        "1234567890123456789 3.14159 1e10 0x1F",
        "caf\xc3\xa9 na\xc3\xafve \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80\xf0\x9f\x91\x8d",
        "I've they're we'll I'M DON'T 'quoted'",
    };
    for (size_t i = 0; i < sizeof(extra) / sizeof(extra[0]); i++)
        emit_all_modes(argv[1], extra[i], strlen(extra[i]));
    static char run[4096];
    memset(run, 'a', sizeof(run));
    emit_all_modes(argv[1], run, sizeof(run));
    memset(run, ' ', sizeof(run));
    emit_all_modes(argv[1], run, sizeof(run));
    return 0;
}
