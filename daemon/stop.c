/* SPDX-License-Identifier: MIT */
/* Stop-string matching across token boundaries. Invariant: after every feed the hold buffer
 * holds no complete stop string and is shorter than the longest one, so a new piece can
 * only complete a match that overlaps it. */
#include "stop.h"

#include <errno.h>
#include <string.h>

void pl_daemon_stop_init(struct pl_daemon_stop *st) {
    st->n = 0;
    st->held = 0;
}

int pl_daemon_stop_add(struct pl_daemon_stop *st, const void *s, size_t len) {
    if (st->n >= PL_DAEMON_STOP_MAX || len == 0 || len > PL_DAEMON_STOP_MAX_LEN)
        return -EINVAL;
    memcpy(st->str[st->n], s, len);
    st->len[st->n] = (uint8_t)len;
    st->n++;
    return 0;
}

static void emit(struct pl_daemon_stop *st, size_t n, char *out, size_t *out_len) {
    memcpy(out + *out_len, st->hold, n);
    *out_len += n;
    memmove(st->hold, st->hold + n, st->held - n);
    st->held -= (uint32_t)n;
}

int pl_daemon_stop_feed(struct pl_daemon_stop *st, const char *piece, size_t len, char *out,
                        size_t cap, size_t *out_len) {
    if (len > PL_DAEMON_STOP_MAX_PIECE || cap - *out_len < st->held + len)
        return -ENOSPC;
    memcpy(st->hold + st->held, piece, len);
    st->held += (uint32_t)len;
    if (st->n == 0) {
        emit(st, st->held, out, out_len);
        return 0;
    }
    /* The earliest complete match of any stop string wins. */
    size_t best = SIZE_MAX;
    for (uint32_t i = 0; i < st->n; i++) {
        const char *p = memmem(st->hold, st->held, st->str[i], st->len[i]);
        if (p && (size_t)(p - st->hold) < best)
            best = (size_t)(p - st->hold);
    }
    if (best != SIZE_MAX) {
        emit(st, best, out, out_len);
        st->held = 0;
        return 1;
    }
    /* Keep the longest tail that is a proper prefix of some stop string. */
    size_t keep = 0;
    for (uint32_t i = 0; i < st->n; i++) {
        size_t max = PL_DAEMON_STOP_MAX_LEN;
        if (max > st->len[i] - 1u)
            max = st->len[i] - 1u;
        if (max > st->held)
            max = st->held;
        for (size_t k = max; k > keep; k--)
            if (!memcmp(st->hold + st->held - k, st->str[i], k)) {
                keep = k;
                break;
            }
    }
    emit(st, st->held - keep, out, out_len);
    return 0;
}

int pl_daemon_stop_flush(struct pl_daemon_stop *st, char *out, size_t cap, size_t *out_len) {
    if (cap - *out_len < st->held)
        return -ENOSPC;
    emit(st, st->held, out, out_len);
    return 0;
}
