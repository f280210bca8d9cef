/* SPDX-License-Identifier: MIT */
/* UTF-8 decode/encode, category lookup and GPT-2's byte map for the tokenizers
 * (tokenizer.c, tok_bpe.c, pretok.c). Decoding follows llama.cpp's rules exactly, since the
 * token ids must match its output byte for byte. */
#include "unicode.h"

#include <stdbool.h>

uint32_t pl_utf8_decode(const uint8_t *s, size_t len, size_t *pos) {
    size_t i = *pos;
    uint8_t b0 = s[i];
    uint32_t cp;
    size_t n;

    if (b0 < 0x80) {
        *pos = i + 1;
        return b0;
    }
    if (!(b0 & 0x40)) /* a stray continuation byte */
        goto bad;
    if (!(b0 & 0x20)) {
        n = 2;
        cp = b0 & 0x1f;
    } else if (!(b0 & 0x10)) {
        n = 3;
        cp = b0 & 0x0f;
    } else if (!(b0 & 0x08)) {
        n = 4;
        cp = b0 & 0x07;
    } else {
        goto bad;
    }
    if (len - i < n)
        goto bad;
    for (size_t k = 1; k < n; k++) {
        if ((s[i + k] & 0xc0) != 0x80)
            goto bad;
        cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    /* llama.cpp would throw while re-encoding a code point past U+10FFFF; treat it as a
     * malformed sequence instead. */
    if (cp > PL_UNICODE_MAX_CP)
        goto bad;
    *pos = i + n;
    return cp;
bad:
    *pos = i + 1;
    return PL_UNICODE_REPLACEMENT;
}

size_t pl_utf8_decode_all(const uint8_t *s, size_t len, uint32_t *cps) {
    size_t pos = 0, n = 0;
    while (pos < len)
        cps[n++] = pl_utf8_decode(s, len, &pos);
    return n;
}

size_t pl_utf8_encode(uint32_t cp, uint8_t out[4]) {
    if (cp <= 0x7f) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp <= 0x7ff) {
        out[0] = (uint8_t)(0xc0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp <= 0xffff) {
        out[0] = (uint8_t)(0xe0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (uint8_t)(0x80 | (cp & 0x3f));
        return 3;
    }
    if (cp <= PL_UNICODE_MAX_CP) {
        out[0] = (uint8_t)(0xf0 | (cp >> 18));
        out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f));
        out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        out[3] = (uint8_t)(0x80 | (cp & 0x3f));
        return 4;
    }
    return 0;
}

/* ---- Category lookup ---- */

uint32_t pl_unicode_flags(uint32_t cp) {
    if (cp > PL_UNICODE_MAX_CP)
        return PL_UCAT_UNDEFINED;
    /* Last range whose first code point is <= cp; range 0 starts at 0. */
    size_t lo = 0, hi = pl_unicode_n_ranges;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (pl_unicode_ranges[mid].first <= cp)
            lo = mid;
        else
            hi = mid;
    }
    return pl_unicode_ranges[lo].flags;
}

uint32_t pl_unicode_tolower(uint32_t cp) {
    size_t lo = 0, hi = pl_unicode_n_lower;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (pl_unicode_lower[mid].cp < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < pl_unicode_n_lower && pl_unicode_lower[lo].cp == cp)
        return pl_unicode_lower[lo].mapped;
    return cp;
}

/* ---- GPT-2 byte-level map ---- */

/* Bytes that stand for themselves: '!'..'~', 0xA1..0xAC, 0xAE..0xFF. The others (0x00..0x20,
 * 0x7F..0xA0, 0xAD) take U+0100 + their rank among the non-printable bytes. */
static bool byte_is_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
}

uint32_t pl_unicode_byte_to_cp(uint8_t b) {
    if (byte_is_printable(b))
        return b;
    unsigned rank = 0;
    for (unsigned x = 0; x < b; x++)
        rank += !byte_is_printable(x);
    return 0x100 + rank;
}

int pl_unicode_cp_to_byte(uint32_t cp) {
    if (cp < 0x100)
        return byte_is_printable(cp) ? (int)cp : -1;
    if (cp >= 0x100 + 68)
        return -1;
    unsigned rank = cp - 0x100;
    for (unsigned x = 0; x < 256; x++) {
        if (!byte_is_printable(x)) {
            if (rank == 0)
                return (int)x;
            rank--;
        }
    }
    return -1;
}
