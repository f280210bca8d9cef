/* SPDX-License-Identifier: MIT */
/* The file writing of the fuzz targets' seed generators: seed_write(dir, a, na, b, nb) writes
 * the na bytes at a then the nb bytes at b (either may be empty) to DIR/seed-NNN, numbered in
 * call order; any failure ends the program (the smoke test then fails). Header-only: each
 * generator is a one-file program. */
#ifndef PL_FUZZ_SEED_FILE_H
#define PL_FUZZ_SEED_FILE_H

#include <stdio.h>
#include <stdlib.h>

static int seed_count;

static void seed_write(const char *dir, const void *a, size_t na, const void *b, size_t nb) {
    char path[4096];
    (void)snprintf(path, sizeof(path), "%s/seed-%03d", dir, seed_count++);
    FILE *f = fopen(path, "wb");
    if (!f || (na && fwrite(a, 1, na, f) != na) || (nb && fwrite(b, 1, nb, f) != nb) ||
        fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

#endif
