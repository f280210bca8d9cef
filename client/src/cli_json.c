/* SPDX-License-Identifier: MIT */
/* JSON string writer with UTF-8 validation (see cli_json.h for the replacement rule). */
#include "cli_json.h"

#include <stdbool.h>
#include <stdint.h>

size_t pl_cli_json_utf8_seq(const unsigned char *s, size_t len, size_t *ret_skip) {
    unsigned char b = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    if (b < 0x80)
        return 1;
    if (b >= 0xc2 && b <= 0xdf) {
        need = 2;
    } else if (b >= 0xe0 && b <= 0xef) {
        need = 3;
        if (b == 0xe0)
            lo = 0xa0; /* no overlong forms */
        else if (b == 0xed)
            hi = 0x9f; /* no surrogates */
    } else if (b >= 0xf0 && b <= 0xf4) {
        need = 4;
        if (b == 0xf0)
            lo = 0x90;
        else if (b == 0xf4)
            hi = 0x8f; /* nothing above U+10FFFF */
    } else {
        *ret_skip = 1; /* stray continuation byte, C0/C1 or F5..FF */
        return 0;
    }
    size_t i = 1;
    for (; i < need && i < len; i++) {
        unsigned char c = s[i];
        bool ok = i == 1 ? (c >= lo && c <= hi) : (c >= 0x80 && c <= 0xbf);
        if (!ok)
            break;
    }
    if (i == need)
        return need;
    *ret_skip = i; /* lead byte plus the continuation bytes that were valid so far */
    return 0;
}

void pl_cli_json_write_str(FILE *f, const char *str, size_t len) {
    const unsigned char *s = (const unsigned char *)str;
    (void)fputc('"', f);
    size_t i = 0;
    while (i < len) {
        unsigned char c = s[i];
        if (c < 0x80) {
            switch (c) {
            case '"': (void)fputs("\\\"", f); break;
            case '\\': (void)fputs("\\\\", f); break;
            case '\n': (void)fputs("\\n", f); break;
            case '\r': (void)fputs("\\r", f); break;
            case '\t': (void)fputs("\\t", f); break;
            case '\b': (void)fputs("\\b", f); break;
            case '\f': (void)fputs("\\f", f); break;
            default:
                if (c < 0x20 || c == 0x7f)
                    (void)fprintf(f, "\\u%04x", c);
                else
                    (void)fputc(c, f);
                break;
            }
            i++;
            continue;
        }
        size_t skip = 1;
        size_t n = pl_cli_json_utf8_seq(s + i, len - i, &skip);
        if (n > 0) {
            (void)fwrite(s + i, 1, n, f);
            i += n;
        } else {
            (void)fputs("\xef\xbf\xbd", f); /* U+FFFD */
            i += skip;
        }
    }
    (void)fputc('"', f);
}
