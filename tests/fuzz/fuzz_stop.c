/* SPDX-License-Identifier: MIT */
/* libFuzzer target for the stop-string matcher (engine/src/stop.c), differential: clients give
 * the stop strings, the model the stream, and the broker cuts the reply where the matcher
 * says. Input: a count byte (1..16 strings), each string as a length byte (1..64) and its
 * bytes, then the stream, fed in chunks whose sizes the stream's own bytes pick. After each
 * feed the result must equal a brute-force reference:
 *   - a match is the first stop string to complete (on the same byte, the longest), with its
 *     [start, end) and index;
 *   - without one, safe is the earliest position from which the rest of the stream is still
 *     a proper prefix of some stop string (everything before is final), else all fed bytes;
 *   - flush at the end makes everything final, or repeats the match.
 * Built only with -DPL_BUILD_FUZZ=ON (clang); tests/fuzz/run-fuzz.sh fuzz_stop SECONDS. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pl/engine_stop.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct ref {
    const uint8_t *strs[PL_STOP_MAX];
    size_t lens[PL_STOP_MAX];
    size_t n;
};

/* The reference's result for stream[0, fed). */
static void reference(const struct ref *r, const uint8_t *stream, size_t fed,
                      struct pl_stop_result *ret) {
    memset(ret, 0, sizeof(*ret));
    for (size_t end = 1; end <= fed; end++) {
        size_t best = SIZE_MAX;
        for (size_t i = 0; i < r->n; i++)
            if (r->lens[i] <= end && !memcmp(stream + end - r->lens[i], r->strs[i], r->lens[i]) &&
                (best == SIZE_MAX || r->lens[i] > r->lens[best]))
                best = i;
        if (best != SIZE_MAX) {
            ret->matched = true;
            ret->which = (uint32_t)best;
            ret->match_start = end - r->lens[best];
            ret->match_end = end;
            ret->safe = ret->match_start;
            return;
        }
    }
    ret->safe = fed;
    for (size_t p = 0; p < fed; p++) {
        bool held = false;
        for (size_t i = 0; i < r->n && !held; i++)
            held = fed - p < r->lens[i] && !memcmp(stream + p, r->strs[i], fed - p);
        if (held) {
            ret->safe = p;
            break;
        }
    }
}

static void same(const struct pl_stop_result *got, const struct pl_stop_result *want) {
    if (got->matched != want->matched || got->safe != want->safe)
        abort();
    if (want->matched && (got->which != want->which || got->match_start != want->match_start ||
                          got->match_end != want->match_end))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct ref r = {.n = 0};
    size_t at = 0;
    if (size < 1)
        return 0;
    size_t want_n = (size_t)(data[at++] % PL_STOP_MAX) + 1;
    while (r.n < want_n && at < size) {
        size_t len = (size_t)(data[at++] % 64) + 1;
        if (at + len > size)
            break;
        r.strs[r.n] = data + at;
        r.lens[r.n++] = len;
        at += len;
    }
    if (r.n == 0)
        return 0;
    const char *strs[PL_STOP_MAX];
    for (size_t i = 0; i < r.n; i++)
        strs[i] = (const char *)r.strs[i];
    struct pl_stop *s = NULL;
    if (pl_stop_new(strs, r.lens, r.n, &s) < 0)
        return 0;
    const uint8_t *stream = data + at;
    const size_t len = size - at < 512 ? size - at : 512; /* the reference is quadratic */
    struct pl_stop_result got, want;
    size_t fed = 0;
    while (fed < len) {
        size_t chunk = (size_t)(stream[fed] % 9); /* 0..8 bytes: a token's piece */
        if (chunk == 0) {                         /* an empty piece changes nothing */
            reference(&r, stream, fed, &want);
            if (pl_stop_feed(s, stream + fed, 0, &got) != 0)
                abort();
            same(&got, &want);
            chunk = 1;
        }
        if (chunk > len - fed)
            chunk = len - fed;
        int m = pl_stop_feed(s, stream + fed, chunk, &got);
        fed += chunk;
        reference(&r, stream, fed, &want);
        if (m < 0 || (m == 1) != want.matched)
            abort();
        same(&got, &want);
        if (want.matched)
            break;
    }
    if (fed == 0)
        reference(&r, stream, 0, &want);
    int m = pl_stop_flush(s, &got);
    if (m < 0 || (m == 1) != want.matched)
        abort();
    if (!want.matched && (got.safe != fed || got.matched))
        abort();
    if (want.matched)
        same(&got, &want);
    pl_stop_free(s);
    return 0;
}
