/* SPDX-License-Identifier: MIT */
/* Writes a seed corpus for fuzz_ring into the folder given as argv[1]: scripts (format in
 * fuzz_ring.c) of an honest peer streaming records through a wrap, at index 0 and just below
 * the 2^32 index wrap, for both roles; and of hostile peers: a raw index out of the window, a
 * wrong pad, an oversized length, a reserved type, a consumer index moving backwards. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct s {
    uint8_t b[4096];
    size_t n;
};

static void b8(struct s *s, uint8_t v) {
    if (s->n < sizeof(s->b))
        s->b[s->n++] = v;
}
static void b16(struct s *s, uint16_t v) {
    b8(s, (uint8_t)v);
    b8(s, (uint8_t)(v >> 8));
}
static void b32(struct s *s, uint32_t v) {
    b16(s, (uint16_t)v);
    b16(s, (uint16_t)(v >> 16));
}
/* mode (bit 0: we consume), size 256 << sz, max record selector, starting index */
static void setup(struct s *s, uint8_t consumer, uint8_t sz, uint8_t maxsel, uint32_t start) {
    s->n = 0;
    b8(s, consumer);
    b8(s, sz);
    b8(s, maxsel);
    b32(s, start);
}

static int n_written;
static void emit(const char *dir, const struct s *s) {
    char path[4096];
    (void)snprintf(path, sizeof(path), "%s/seed-%02d", dir, n_written++);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(s->b, 1, s->n, f) != s->n || fclose(f)) {
        perror(path);
        exit(1);
    }
}

/* consumer ops */
static void c_record(struct s *s, uint16_t len, uint8_t type) {
    b8(s, 2);
    b16(s, len);
    b8(s, type);
}
static void c_publish(struct s *s) {
    b8(s, 1);
}
static void c_read(struct s *s) {
    b8(s, 6);
    b8(s, 1);
}
static void c_free(struct s *s) {
    b8(s, 8);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    struct s s;
    const uint32_t starts[] = {0, 0xffffff00u, 0x7ffffff8u};
    for (size_t k = 0; k < 3; k++) {
        /* an honest stream through several wraps of a 256-byte ring */
        setup(&s, 1, 0, 5, starts[k]);
        for (int i = 0; i < 40; i++) {
            c_record(&s, (uint16_t)(i * 5 % 50), (uint8_t)(1 + i % 5));
            c_publish(&s);
            c_read(&s);
            if (i % 3 == 0)
                c_free(&s);
            b8(&s, 10); /* sleep_prepare */
        }
        emit(dir, &s);
        /* an honest consumer of our completions */
        setup(&s, 0, 1, 9, starts[k]);
        for (int i = 0; i < 40; i++) {
            b8(&s, 3); /* reserve */
            b8(&s, 0);
            b8(&s, (uint8_t)(i * 7));
            b8(&s, 1); /* commit */
            b8(&s, 1); /* whole length */
            b8(&s, 101);
            b8(&s, 5); /* publish */
            if (i % 2)
                b8(&s, 1); /* consumer takes all */
            b8(&s, 7);
            b8(&s, 0);
        }
        emit(dir, &s);
    }
    /* hostile producers */
    setup(&s, 1, 2, 20, 0);
    c_record(&s, 16, 1);
    b8(&s, 0); /* prod = 0x40000000: beyond the window */
    b32(&s, 0x40000000u);
    c_read(&s);
    c_read(&s);
    emit(dir, &s);
    setup(&s, 1, 0, 5, 200);
    b8(&s, 3); /* pad with a wrong length */
    b16(&s, 7);
    b8(&s, 1);
    c_publish(&s);
    c_read(&s);
    emit(dir, &s);
    setup(&s, 1, 1, 5, 0);
    c_record(&s, 0xffff, 1); /* length over the ring */
    c_publish(&s);
    c_read(&s);
    emit(dir, &s);
    setup(&s, 1, 1, 5, 0);
    c_record(&s, 8, 250); /* ipc-reserved type */
    c_publish(&s);
    b8(&s, 7);
    b8(&s, 1);
    emit(dir, &s);
    setup(&s, 1, 1, 5, 0);
    c_record(&s, 8, 1);
    c_publish(&s);
    b8(&s, 4); /* garbage over the header after publishing */
    b16(&s, 0);
    b8(&s, 8);
    b32(&s, 0xffffffffu);
    b32(&s, 0x12345678u);
    c_read(&s);
    b8(&s, 11);
    b32(&s, 3);
    b32(&s, 0);
    c_free(&s);
    emit(dir, &s);
    /* hostile consumers */
    setup(&s, 0, 0, 5, 64);
    b8(&s, 4);
    b8(&s, 40);
    b8(&s, 9);
    b8(&s, 5);
    b8(&s, 2); /* cons moves backwards */
    b8(&s, 0xf0);
    b8(&s, 3);
    b8(&s, 0);
    b8(&s, 100);
    b8(&s, 0);
    b8(&s, 0); /* raw cons */
    b32(&s, 0xdeadbeefu);
    b8(&s, 3);
    b8(&s, 0);
    b8(&s, 10);
    b8(&s, 8);
    b32(&s, 3);
    b32(&s, 7);
    b8(&s, 5);
    emit(dir, &s);
    return 0;
}
