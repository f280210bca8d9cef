/* SPDX-License-Identifier: MIT */
/* Private Unicode helpers for the tokenizers: UTF-8 decoding with llama.cpp's error rules,
 * UTF-8 encoding, general-category flags (\p{L}, \p{N}, ...) and the White_Space property,
 * simple lowercase mapping, and GPT-2's byte <-> unicode map. Tables live in the generated
 * unicode_data.c. */
#ifndef PL_ENGINE_UNICODE_H
#define PL_ENGINE_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* Category flags (one of the first eight per code point) plus helper bits. Keep in sync
 * with tools/gen_unicode_tables.py. */
enum pl_ucat {
    PL_UCAT_UNDEFINED = 0x001,  /* unassigned (Cn) */
    PL_UCAT_NUMBER = 0x002,     /* \p{N} */
    PL_UCAT_LETTER = 0x004,     /* \p{L} */
    PL_UCAT_SEPARATOR = 0x008,  /* \p{Z} */
    PL_UCAT_MARK = 0x010,       /* \p{M} */
    PL_UCAT_PUNCT = 0x020,      /* \p{P} */
    PL_UCAT_SYMBOL = 0x040,     /* \p{S} */
    PL_UCAT_CONTROL = 0x080,    /* \p{C} other than Cn */
    PL_UCAT_WHITESPACE = 0x100, /* the White_Space property: regex \s */
};

#define PL_UNICODE_MAX_CP 0x10FFFFu
#define PL_UNICODE_REPLACEMENT 0xFFFDu

struct pl_unicode_range {
    uint32_t first;
    uint16_t flags;
};

struct pl_unicode_pair {
    uint32_t cp;
    uint32_t mapped;
};

extern const char pl_unicode_version[];
extern const struct pl_unicode_range pl_unicode_ranges[];
extern const size_t pl_unicode_n_ranges;
extern const struct pl_unicode_pair pl_unicode_lower[];
extern const size_t pl_unicode_n_lower;

/* Bytes of the UTF-8 sequence a lead byte announces, from its high nibble only (as
 * llama.cpp: 1 for ASCII and stray continuation bytes, 2, 3 or 4). */
static inline size_t pl_utf8_len(uint8_t lead) {
    static const uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[lead >> 4];
}

/* Decode one code point from s[*pos..len) and advance *pos. A malformed or truncated
 * sequence, or one above U+10FFFF, yields U+FFFD and advances by one byte. Overlong forms
 * and surrogates are decoded as they are (as llama.cpp does). */
uint32_t pl_utf8_decode(const uint8_t *s, size_t len, size_t *pos);

/* Decode all of s into cps (room for len entries); returns the count. */
size_t pl_utf8_decode_all(const uint8_t *s, size_t len, uint32_t *cps);

/* Encode cp (<= U+10FFFF) into out[4]; returns the byte count (0 for cp > U+10FFFF). */
size_t pl_utf8_encode(uint32_t cp, uint8_t out[4]);

/* Flags of cp (enum pl_ucat); code points past U+10FFFF are PL_UCAT_UNDEFINED. */
uint32_t pl_unicode_flags(uint32_t cp);

/* Simple lowercase mapping; cp itself when it has none. */
uint32_t pl_unicode_tolower(uint32_t cp);

/* GPT-2 byte-level map: the code point that stands for byte b (printable Latin-1 bytes map
 * to themselves, the other 68 to U+0100..U+0143), and back (-1 when cp stands for no byte). */
uint32_t pl_unicode_byte_to_cp(uint8_t b);
int pl_unicode_cp_to_byte(uint32_t cp);

#endif
