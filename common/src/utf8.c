/* SPDX-License-Identifier: MIT */
/* Well-formed UTF-8 sequences (pl_utf8.h): the lead byte fixes the length and the range of
 * the second byte (which is where overlong forms, surrogates and code points above U+10FFFF
 * show), the rest must be continuation bytes. */
#include "pl/pl_utf8.h"

#include <stdint.h>

size_t pl_utf8_seq(const void *s, size_t len, size_t *ret_skip) {
    const uint8_t *p = s;
    const uint8_t b = p[0];
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF; /* the second byte's range */
    if (b < 0x80)
        return 1;
    if (b >= 0xC2 && b <= 0xDF) {
        need = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 3;
        if (b == 0xE0)
            lo = 0xA0; /* below: an overlong form */
        else if (b == 0xED)
            hi = 0x9F; /* above: a surrogate */
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 4;
        if (b == 0xF0)
            lo = 0x90; /* below: an overlong form */
        else if (b == 0xF4)
            hi = 0x8F; /* above: past U+10FFFF */
    } else {
        if (ret_skip) /* a stray continuation byte, C0, C1 or F5..FF */
            *ret_skip = 1;
        return 0;
    }
    size_t i = 1;
    for (; i < need && i < len; i++) {
        const uint8_t c = p[i];
        if (i == 1 ? c < lo || c > hi : c < 0x80 || c > 0xBF)
            break;
    }
    if (i == need)
        return need;
    if (ret_skip)
        *ret_skip = i;
    return 0;
}

bool pl_utf8_valid(const void *s, size_t len) {
    const uint8_t *p = s;
    for (size_t i = 0; i < len;) {
        if (p[i] < 0x80) { /* the common case, without the call */
            i++;
            continue;
        }
        const size_t n = pl_utf8_seq(p + i, len - i, NULL);
        if (n == 0)
            return false;
        i += n;
    }
    return true;
}
