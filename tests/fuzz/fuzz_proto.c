/* SPDX-License-Identifier: MIT */
/* libFuzzer target for the broker's request decoding: the first input byte picks the record
 * type (the five requests, 0, an unknown type) and the session state, the rest is the payload.
 * It goes through pl_daemon_dispatch_decode(), the exact rule lookup + size limit + bounded
 * arena unpack picolmd runs on every client record, and a decoded Generate through
 * pl_daemon_dispatch_check_generate(). Checks: everything the decoded message points to lies
 * inside the session-sized arena (or is protobuf-c's static empty string), every byte of it is
 * readable (ASan), a record over its type's limit or in a wrong state is refused, accepted
 * sampling parameters are in range, and the message survives a pack/unpack round trip
 * unchanged. Built only with -DPL_BUILD_FUZZ=ON (clang); run with
 * tests/fuzz/run-fuzz.sh fuzz_proto SECONDS. */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "dispatch.h"
#include "pl/engine_sampler.h"
#include "pl/pl_err.h"
#include "pl/picolm.pb-c.h"
#include "records.h"
#include "request_features.h"
#include "session.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* session.c sizes each session's arena like this (ARENA_BYTES there). */
#define FUZZ_ARENA_BYTES (PL_DAEMON_MAX_RECORD * 12u)

static struct pl_daemon_arena arena, arena2;
static bool ready;
static bool saw_unknown; /* protobuf-c keeps unknown fields verbatim, even odd ones */
static volatile uint8_t sink;

static bool in_arena(const struct pl_daemon_arena *a, const void *p, size_t n) {
    const uint8_t *b = p;
    return b >= a->buf && n <= a->used && b <= a->buf + a->used - n;
}

static void touch(const void *p, size_t n) {
    const uint8_t *b = p;
    uint8_t acc = 0;
    for (size_t i = 0; i < n; i++)
        acc ^= b[i];
    sink = acc;
}

/* A pointer the unpacked message holds: inside the arena, or a static default. */
static void check_ptr(const struct pl_daemon_arena *a, const void *p, size_t n) {
    if (n == 0 && (p == NULL || p == protobuf_c_empty_string))
        return;
    if (p == protobuf_c_empty_string)
        return;
    if (!p || !in_arena(a, p, n))
        abort();
    touch(p, n);
}

static size_t scalar_size(ProtobufCType t) {
    switch (t) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_FLOAT:
    case PROTOBUF_C_TYPE_ENUM:
        return 4;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return 8;
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING:
        return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(ProtobufCMessage *);
    default:
        abort();
    }
}

static void walk(const struct pl_daemon_arena *a, const ProtobufCMessage *m, int depth);

static void walk_value(const struct pl_daemon_arena *a, const ProtobufCFieldDescriptor *f,
                       const void *v, int depth) {
    switch (f->type) {
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(const char *const *)v;
        if (s == protobuf_c_empty_string || (f->default_value && s == f->default_value))
            return;
        if (!s || !in_arena(a, s, 1))
            abort();
        check_ptr(a, s, strlen(s) + 1);
        return;
    }
    case PROTOBUF_C_TYPE_BYTES: {
        const ProtobufCBinaryData *b = v;
        check_ptr(a, b->data, b->len);
        return;
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *sub = *(const ProtobufCMessage *const *)v;
        if (!sub)
            return;
        check_ptr(a, sub, ((const ProtobufCMessageDescriptor *)f->descriptor)->sizeof_message);
        walk(a, sub, depth + 1);
        return;
    }
    case PROTOBUF_C_TYPE_FLOAT:
        sink = (uint8_t)isnan(*(const float *)v);
        return;
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_ENUM:
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
    case PROTOBUF_C_TYPE_BOOL:
    default:
        touch(v, scalar_size(f->type));
        return;
    }
}

/* Every field through the descriptor: repeated arrays, oneof members only when selected,
 * sub-messages recursively; unknown fields kept by protobuf-c too. */
static void walk(const struct pl_daemon_arena *a, const ProtobufCMessage *m, int depth) {
    const ProtobufCMessageDescriptor *d = m->descriptor;
    if (depth > 8 || d->magic != PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC)
        abort();
    const uint8_t *base = (const uint8_t *)m;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const void *v = base + f->offset;
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            uint32_t which;
            memcpy(&which, base + f->quantifier_offset, sizeof(which));
            if (which != f->id)
                continue;
        }
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n;
            const uint8_t *arr;
            memcpy(&n, base + f->quantifier_offset, sizeof(n));
            memcpy(&arr, v, sizeof(arr));
            if (n == 0)
                continue;
            size_t es = scalar_size(f->type);
            if (n > SIZE_MAX / es)
                abort();
            check_ptr(a, arr, n * es);
            for (size_t k = 0; k < n; k++)
                walk_value(a, f, arr + k * es, depth);
            continue;
        }
        walk_value(a, f, v, depth);
    }
    if (m->n_unknown_fields)
        saw_unknown = true;
    for (unsigned i = 0; i < m->n_unknown_fields; i++) {
        check_ptr(a, &m->unknown_fields[i], sizeof(m->unknown_fields[i]));
        check_ptr(a, m->unknown_fields[i].data, m->unknown_fields[i].len);
    }
}

static uint32_t max_len_of(uint32_t type) {
    switch (type) {
    case PL_DAEMON_REC_GENERATE:
        return PL_DAEMON_MAX_RECORD;
    case PL_DAEMON_REC_CANCEL:
    case PL_DAEMON_REC_MODEL_INFO_REQUEST:
        return 64;
    case PL_DAEMON_REC_TOKENIZE:
        return 4096 + 64;
    case PL_DAEMON_REC_DETOKENIZE:
        return 4096 * 5 + 64;
    default:
        return 0;
    }
}

static void check_generate(const Picolm__V1__Generate *g) {
    struct pl_sampler_params sp;
    const char *msg = NULL;
    int code = pl_daemon_dispatch_check_generate(g, &sp, &msg);
    if (code < 0)
        abort();
    if (code > 0) {
        if (!msg || !msg[0] ||
            (code != PICOLM__V1__ERROR_CODE__ERROR_CODE_INVALID_ARGUMENT &&
             code != PICOLM__V1__ERROR_CODE__ERROR_CODE_UNSUPPORTED))
            abort();
        return;
    }
    /* Accepted: what the sampler will get must be sane, whatever the wire said. */
    if (pl_sampler_params_check(&sp) != 0)
        abort();
    if (!isfinite(sp.temp) || sp.temp < 0.0f || !(sp.top_p > 0.0f && sp.top_p <= 1.0f) ||
        !(sp.min_p >= 0.0f && sp.min_p <= 1.0f) || !(sp.repeat_penalty > 0.0f) || sp.top_k < 0 ||
        sp.penalty_last_n < 0 || g->n_stop > PL_DAEMON_MAX_STOP ||
        g->logprobs > PL_DAEMON_MAX_TOP_LOGPROBS || g->json_schema.len > PL_DAEMON_MAX_SCHEMA)
        abort();
    for (size_t i = 0; i < g->n_stop; i++)
        if (g->stop[i].len == 0 || g->stop[i].len > PL_DAEMON_MAX_STOP_LEN)
            abort();
    if (g->input_case == PICOLM__V1__GENERATE__INPUT_MESSAGES &&
        (!g->messages || g->messages->n_messages == 0 ||
         g->messages->n_messages > PL_DAEMON_MAX_MSGS))
        abort();
}

/* Pack what was decoded, unpack that again (into the second arena), pack again: both encodings
 * must be identical. Catches a decoded message whose fields are inconsistent. Skipped when
 * unknown fields were kept: protobuf-c stores them as read (e.g. an overlong tag of field 0)
 * and may refuse its own re-encoding of them; the broker never looks at them. */
static void round_trip(const ProtobufCMessage *m) {
    static uint8_t b1[FUZZ_ARENA_BYTES], b2[FUZZ_ARENA_BYTES];
    size_t n1 = protobuf_c_message_get_packed_size(m);
    if (n1 > sizeof(b1))
        return; /* e.g. many negative int32 ids: 10 bytes each when re-encoded */
    if (protobuf_c_message_pack(m, b1) != n1)
        abort();
    pl_daemon_arena_reset(&arena2);
    ProtobufCMessage *m2 = protobuf_c_message_unpack(m->descriptor, &arena2.pb, n1, b1);
    if (!m2) {
        /* Only the bounded arena may refuse what protobuf-c itself wrote. */
        if (arena2.n_refused == 0)
            abort();
        arena2.n_refused = 0;
        return;
    }
    size_t n2 = protobuf_c_message_get_packed_size(m2);
    if (n2 != n1 || protobuf_c_message_pack(m2, b2) != n2 || memcmp(b1, b2, n1) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!ready) {
        if (pl_daemon_arena_init(&arena, FUZZ_ARENA_BYTES) < 0 ||
            pl_daemon_arena_init(&arena2, FUZZ_ARENA_BYTES) < 0)
            abort();
        ready = true;
    }
    if (size < 1)
        return 0;
    /* Low 3 bits: type 0..7 (1..5 are requests, 0/6/7 must be refused); bit 3: a session
     * still in its handshake (nothing is allowed); bit 4: an ipc-reserved-range type. */
    uint32_t type = data[0] & 7u;
    uint32_t state = (data[0] & 8u) ? PL_DAEMON_SESSION_HANDSHAKE : PL_DAEMON_SESSION_OPEN;
    if (data[0] & 16u)
        type += 100; /* broker->client types sent the wrong way */
    data++;
    size--;
    /* The ring hands the broker at most PL_DAEMON_MAX_RECORD bytes (larger: -EMSGSIZE). */
    if (size > PL_DAEMON_MAX_RECORD)
        return 0;
    /* A private copy, exactly sized, as the ring read gives the broker. */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        abort();
    memcpy(buf, data, size);

    ProtobufCMessage *m = NULL;
    const char *why = NULL;
    saw_unknown = false;
    int r = pl_daemon_dispatch_decode(type, state, buf, (uint32_t)size, &arena, &m, &why);
    bool allowed =
        state == PL_DAEMON_SESSION_OPEN && max_len_of(type) != 0 && size <= max_len_of(type);
    if (r < 0) {
        if (r != -PL_ERR_PROTOCOL || !why || !why[0])
            abort();
    } else {
        if (r != 0 || !m || !allowed || arena.used > arena.cap)
            abort();
        if (!in_arena(&arena, m, m->descriptor->sizeof_message))
            abort();
        walk(&arena, m, 0);
        if (type == PL_DAEMON_REC_GENERATE)
            check_generate((const Picolm__V1__Generate *)m);
        if (!saw_unknown)
            round_trip(m);
    }
    arena.n_refused = 0;
    free(buf);
    return 0;
}
