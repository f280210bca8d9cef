/* SPDX-License-Identifier: MIT */
/* libFuzzer target for the chat templates (engine/src/chat.c): the broker renders every
 * client's conversation into text before tokenizing it. Input: a mode byte (family, and bit 7
 * add_generation_prompt), then messages, each a role length byte (0..63), the role, a
 * content length (2 bytes, little-endian, cut at the input's end) and the content. Checks,
 * besides the sanitizers (each buffer is allocated to its exact size):
 *   - the sizing call (cap 0) and the rendering into exactly length + 1 bytes agree, and
 *     the text is NUL-terminated;
 *   - one byte less is -ENOSPC with the same length, and writes nothing past the buffer;
 *   - a refused conversation is refused the same way with room to spare.
 * Built only with -DPL_BUILD_FUZZ=ON (clang); tests/fuzz/run-fuzz.sh fuzz_chat SECONDS. */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pl/engine_chat.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_MSGS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    const enum pl_chat_family fam = (enum pl_chat_family)(data[0] % (_PL_CHAT_MAX + 1));
    const bool gen = data[0] & 0x80u;
    struct pl_chat_msg m[MAX_MSGS];
    size_t n = 0, at = 1;
    while (n < MAX_MSGS && at < size) {
        size_t rl = data[at++] % 64;
        if (at + rl > size)
            break;
        m[n].role = (const char *)data + at;
        m[n].role_len = rl;
        at += rl;
        size_t cl = 0;
        if (at + 2 <= size)
            cl = (size_t)data[at] | (size_t)data[at + 1] << 8;
        at += 2;
        if (at > size)
            at = size;
        if (cl > size - at)
            cl = size - at;
        m[n].content = (const char *)data + at;
        m[n].content_len = cl;
        at += cl;
        n++;
    }
    size_t len = 0, len2 = 0;
    int r = pl_chat_render(fam, m, n, gen, "<s>", "</s>", NULL, 0, &len);
    if (r == 0 && len != 0)
        abort(); /* a non-empty text cannot fit 0 bytes */
    if (r != -ENOSPC && r != 0) {
        /* refused: the same with room to spare */
        char big[64];
        if (pl_chat_render(fam, m, n, gen, "<s>", "</s>", big, sizeof(big), &len2) != r)
            abort();
        return 0;
    }
    char *out = malloc(len + 1);
    if (!out)
        return 0;
    if (pl_chat_render(fam, m, n, gen, "<s>", "</s>", out, len + 1, &len2) != 0 || len2 != len ||
        out[len] != '\0')
        abort();
    if (len > 0) {
        char *shorter = malloc(len);
        if (!shorter) {
            free(out);
            return 0;
        }
        if (pl_chat_render(fam, m, n, gen, "<s>", "</s>", shorter, len, &len2) != -ENOSPC ||
            len2 != len)
            abort();
        free(shorter);
    }
    free(out);
    return 0;
}
