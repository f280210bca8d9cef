/* SPDX-License-Identifier: MIT */
/* GGUF v2/v3 reader. Parses the header, metadata and tensor infos of an untrusted file with
 * a bounds-checked cursor, validates every count, length, offset and size with checked
 * arithmetic, and builds sorted indexes for O(log n) lookups. Callers: the model loader, the
 * tokenizer, `picolm info` and the fuzz target. Layout (all little-endian):
 *   magic "GGUF", u32 version, u64 n_tensors, u64 n_kv,
 *   n_kv x { str key, u32 type, value },
 *   n_tensors x { str name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset },
 *   padding to `general.alignment`, tensor data (offsets relative to its start). */
#include "pl/engine_gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pl/engine_types.h"
#include "pl/pl_err.h"
#include "pl/pl_util.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader assumes a little-endian host"
#endif

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32u
/* Smallest possible encodings, used to reject absurd counts before allocating. */
#define KV_MIN_BYTES 14u /* u64 key len + 1 key byte + u32 type + 1 value byte */
#define TENSOR_MIN_BYTES                                                                           \
    33u /* u64 name len + 1 name byte + u32 n_dims + u64 ne + u32 type + u64 off */

struct pl_gguf {
    const uint8_t *base; /* file bytes (mapping or caller buffer) */
    uint64_t size;
    bool mapped;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_off;
    uint64_t n_kv;
    struct pl_gguf_kv *kvs;              /* [n_kv], file order */
    const struct pl_gguf_kv **kv_by_key; /* [n_kv], sorted by key bytes */
    uint64_t n_tensors;
    struct pl_gguf_tensor *tensors;          /* [n_tensors], file order */
    const struct pl_gguf_tensor **t_by_name; /* [n_tensors], sorted by name */
};

/* ---- Parser state and error reporting ---- */

struct parser {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;  /* cursor: next byte to read */
    char ctx[160]; /* "kv 12 'key'" / "tensor 3 'name'" / "header": prefix of messages */
    char *err;
    size_t err_len;
};

/* Quote untrusted bytes for a message: printable ASCII as is, the rest as \xNN, capped. */
static void quote(char *dst, size_t dst_len, const void *src, uint64_t len) {
    static const char hex[] = "0123456789abcdef";
    const uint8_t *s = src;
    size_t o = 0;
    const size_t cap = 64;
    for (uint64_t i = 0; i < len; i++) {
        uint8_t c = s[i];
        if (i >= cap || o + 8 >= dst_len) {
            if (o + 4 < dst_len) {
                memcpy(dst + o, "...", 3);
                o += 3;
            }
            break;
        }
        if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
            dst[o++] = (char)c;
        } else {
            dst[o++] = '\\';
            dst[o++] = 'x';
            dst[o++] = hex[c >> 4];
            dst[o++] = hex[c & 15];
        }
    }
    if (dst_len > 0)
        dst[PL_MIN(o, dst_len - 1)] = '\0';
}

static void set_ctx(struct parser *p, const char *what, uint64_t idx, const void *name,
                    uint64_t name_len) {
    char q[96];
    if (name) {
        quote(q, sizeof(q), name, name_len);
        (void)snprintf(p->ctx, sizeof(p->ctx), "%s %" PRIu64 " '%s'", what, idx, q);
    } else {
        (void)snprintf(p->ctx, sizeof(p->ctx), "%s %" PRIu64, what, idx);
    }
}

/* Write "gguf: <ctx>: <message> (at byte N)" and return code. */
__attribute__((format(printf, 4, 5))) static int fail(struct parser *p, int code, uint64_t at,
                                                      const char *fmt, ...) {
    char msg[256];
    va_list ap;
    if (!p->err || p->err_len == 0)
        return code;
    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    (void)snprintf(p->err, p->err_len, "gguf: %s: %s (at byte %" PRIu64 ")", p->ctx, msg, at);
    return code;
}

#define FAIL(p, at, ...) fail((p), -PL_ERR_FORMAT, (at), __VA_ARGS__)

/* ---- Bounds-checked cursor ---- */

static uint64_t remaining(const struct parser *p) {
    return p->size - p->pos; /* invariant: pos <= size */
}

/* Take n bytes at the cursor; on short input fail naming `what`. */
static int take(struct parser *p, uint64_t n, const char *what, const uint8_t **ret) {
    if (n > remaining(p)) {
        *ret = NULL;
        return FAIL(p, p->pos, "%s: needs %" PRIu64 " bytes, only %" PRIu64 " left in file", what,
                    n, remaining(p));
    }
    *ret = p->base + p->pos;
    p->pos += n;
    return 0;
}

static int rd_u8(struct parser *p, const char *what, uint8_t *ret) {
    const uint8_t *b = NULL;
    int r = take(p, 1, what, &b);
    if (r < 0)
        return r;
    *ret = b[0];
    return 0;
}

static int rd_u32(struct parser *p, const char *what, uint32_t *ret) {
    const uint8_t *b = NULL;
    int r = take(p, 4, what, &b);
    if (r < 0)
        return r;
    memcpy(ret, b, 4);
    return 0;
}

static int rd_u64(struct parser *p, const char *what, uint64_t *ret) {
    const uint8_t *b = NULL;
    int r = take(p, 8, what, &b);
    if (r < 0)
        return r;
    memcpy(ret, b, 8);
    return 0;
}

/* A length-prefixed string: u64 length (capped at cap), then that many bytes. */
static int rd_str(struct parser *p, const char *what, uint64_t cap, struct pl_gguf_str *ret) {
    uint64_t at = p->pos, len;
    const uint8_t *b = NULL;
    int r = rd_u64(p, what, &len);
    if (r < 0)
        return r;
    if (len > cap)
        return FAIL(p, at, "%s length %" PRIu64 " exceeds cap %" PRIu64, what, len, cap);
    if (len > remaining(p))
        return FAIL(p, at, "%s length %" PRIu64 " runs past end of file (%" PRIu64 " bytes left)",
                    what, len, remaining(p));
    r = take(p, len, what, &b);
    if (r < 0)
        return r;
    ret->ptr = (const char *)b;
    ret->len = len;
    return 0;
}

/* ---- Metadata values ---- */

/* Size of a fixed-size scalar type, 0 for STRING/ARRAY/unknown. */
static uint32_t scalar_size(uint32_t t) {
    switch ((enum pl_gguf_type)t) {
    case PL_GGUF_TYPE_UINT8:
    case PL_GGUF_TYPE_INT8:
    case PL_GGUF_TYPE_BOOL:
        return 1;
    case PL_GGUF_TYPE_UINT16:
    case PL_GGUF_TYPE_INT16:
        return 2;
    case PL_GGUF_TYPE_UINT32:
    case PL_GGUF_TYPE_INT32:
    case PL_GGUF_TYPE_FLOAT32:
        return 4;
    case PL_GGUF_TYPE_UINT64:
    case PL_GGUF_TYPE_INT64:
    case PL_GGUF_TYPE_FLOAT64:
        return 8;
    case PL_GGUF_TYPE_STRING:
    case PL_GGUF_TYPE_ARRAY:
    case _PL_GGUF_TYPE_MAX:
        break;
    }
    return 0;
}

/* Smallest encoding of one array element of type t (for rejecting impossible counts early). */
static uint64_t min_elem_bytes(uint32_t t) {
    if (t == PL_GGUF_TYPE_STRING)
        return 8;
    if (t == PL_GGUF_TYPE_ARRAY)
        return 12;
    return scalar_size(t);
}

/* Parse the body of an array (after its type and count) of n elements of type et, at
 * nesting depth `depth` (1 = a kv's own array). When ret_offsets is not NULL and the
 * elements are strings, returns a new [n] index of element offsets relative to the start
 * of the body. Work is bounded by the file size: each non-scalar element consumes >= 8
 * bytes and scalar runs are skipped in O(1). */
static int parse_array_body(struct parser *p, uint32_t et, uint64_t n, unsigned depth,
                            uint64_t **ret_offsets) {
    uint64_t start = p->pos, bytes;
    const uint8_t *b = NULL;
    int r;

    if (scalar_size(et)) {
        if (pl_mul_overflow(n, (uint64_t)scalar_size(et), &bytes) || bytes > remaining(p))
            return FAIL(p, start,
                        "array of %" PRIu64 " elements of %u bytes runs past end of "
                        "file (%" PRIu64 " bytes left)",
                        n, scalar_size(et), remaining(p));
        return take(p, bytes, "array data", &b);
    }

    if (et == PL_GGUF_TYPE_STRING) {
        uint64_t *offs = NULL;
        if (ret_offsets && n > 0) {
            offs = malloc(n * sizeof(*offs)); /* n <= cap and n*8 <= file bytes: no overflow */
            if (!offs)
                return -ENOMEM;
        }
        for (uint64_t i = 0; i < n; i++) {
            struct pl_gguf_str s;
            if (offs)
                offs[i] = p->pos - start;
            r = rd_str(p, "array string", PL_GGUF_MAX_STRING_LEN, &s);
            if (r < 0) {
                free(offs);
                return r;
            }
        }
        if (ret_offsets)
            *ret_offsets = offs;
        return 0;
    }

    /* et == ARRAY: nested arrays are validated but not indexed. */
    for (uint64_t i = 0; i < n; i++) {
        uint64_t at = p->pos, sub_n;
        uint32_t sub_t;
        if (depth >= PL_GGUF_MAX_ARRAY_DEPTH)
            return FAIL(p, at, "arrays nested deeper than %u", PL_GGUF_MAX_ARRAY_DEPTH);
        r = rd_u32(p, "nested array element type", &sub_t);
        if (r < 0)
            return r;
        r = rd_u64(p, "nested array length", &sub_n);
        if (r < 0)
            return r;
        if (sub_t >= _PL_GGUF_TYPE_MAX)
            return FAIL(p, at, "nested array element type %" PRIu32 " unknown", sub_t);
        if (sub_n > PL_GGUF_MAX_ARRAY_LEN)
            return FAIL(p, at + 4, "nested array length %" PRIu64 " exceeds cap %u", sub_n,
                        PL_GGUF_MAX_ARRAY_LEN);
        r = parse_array_body(p, sub_t, sub_n, depth + 1, NULL);
        if (r < 0)
            return r;
    }
    return 0;
}

/* Parse one value of type t into kv->v. */
static int parse_value(struct parser *p, uint32_t t, struct pl_gguf_kv *kv) {
    uint64_t at = p->pos;
    const uint8_t *b = NULL;
    int r;

    switch ((enum pl_gguf_type)t) {
    case PL_GGUF_TYPE_UINT8:
    case PL_GGUF_TYPE_UINT16:
    case PL_GGUF_TYPE_UINT32:
    case PL_GGUF_TYPE_UINT64: {
        uint8_t v8 = 0;
        uint16_t v16 = 0;
        uint32_t v32 = 0;
        uint64_t v64 = 0;
        r = take(p, scalar_size(t), "value", &b);
        if (r < 0)
            return r;
        switch (scalar_size(t)) {
        case 1:
            memcpy(&v8, b, 1);
            v64 = v8;
            break;
        case 2:
            memcpy(&v16, b, 2);
            v64 = v16;
            break;
        case 4:
            memcpy(&v32, b, 4);
            v64 = v32;
            break;
        default:
            memcpy(&v64, b, 8);
            break;
        }
        kv->v.u64 = v64;
        return 0;
    }
    case PL_GGUF_TYPE_INT8:
    case PL_GGUF_TYPE_INT16:
    case PL_GGUF_TYPE_INT32:
    case PL_GGUF_TYPE_INT64: {
        int8_t v8 = 0;
        int16_t v16 = 0;
        int32_t v32 = 0;
        int64_t v64 = 0;
        r = take(p, scalar_size(t), "value", &b);
        if (r < 0)
            return r;
        switch (scalar_size(t)) {
        case 1:
            memcpy(&v8, b, 1);
            v64 = v8;
            break;
        case 2:
            memcpy(&v16, b, 2);
            v64 = v16;
            break;
        case 4:
            memcpy(&v32, b, 4);
            v64 = v32;
            break;
        default:
            memcpy(&v64, b, 8);
            break;
        }
        kv->v.i64 = v64;
        return 0;
    }
    case PL_GGUF_TYPE_BOOL: {
        uint8_t v;
        r = rd_u8(p, "bool value", &v);
        if (r < 0)
            return r;
        if (v > 1)
            return FAIL(p, at, "bool value %u is neither 0 nor 1", v);
        kv->v.u64 = v;
        return 0;
    }
    case PL_GGUF_TYPE_FLOAT32: {
        float f;
        r = take(p, 4, "float32 value", &b);
        if (r < 0)
            return r;
        memcpy(&f, b, 4);
        kv->v.f64 = f;
        return 0;
    }
    case PL_GGUF_TYPE_FLOAT64: {
        double d;
        r = take(p, 8, "float64 value", &b);
        if (r < 0)
            return r;
        memcpy(&d, b, 8);
        kv->v.f64 = d;
        return 0;
    }
    case PL_GGUF_TYPE_STRING:
        return rd_str(p, "string value", PL_GGUF_MAX_STRING_LEN, &kv->v.str);
    case PL_GGUF_TYPE_ARRAY: {
        uint32_t et;
        uint64_t n, *offs = NULL;
        r = rd_u32(p, "array element type", &et);
        if (r < 0)
            return r;
        if (et >= _PL_GGUF_TYPE_MAX)
            return FAIL(p, at, "array element type %" PRIu32 " unknown", et);
        r = rd_u64(p, "array length", &n);
        if (r < 0)
            return r;
        if (n > PL_GGUF_MAX_ARRAY_LEN)
            return FAIL(p, at + 4, "array length %" PRIu64 " exceeds cap %u", n,
                        PL_GGUF_MAX_ARRAY_LEN);
        /* n * min_elem_bytes cannot overflow: n <= 2^26, min bytes <= 12. */
        if (n * min_elem_bytes(et) > remaining(p))
            return FAIL(p, at + 4,
                        "array length %" PRIu64 " runs past end of file (%" PRIu64 " bytes left)",
                        n, remaining(p));
        kv->v.arr.type = et;
        kv->v.arr.n = n;
        kv->v.arr.data = et == PL_GGUF_TYPE_ARRAY ? NULL : p->base + p->pos;
        kv->v.arr.str_offsets = NULL;
        r = parse_array_body(p, et, n, 1, et == PL_GGUF_TYPE_STRING ? &offs : NULL);
        if (r < 0)
            return r;
        kv->v.arr.str_offsets = offs;
        return 0;
    }
    case _PL_GGUF_TYPE_MAX:
        break;
    }
    return FAIL(p, at, "value type %" PRIu32 " unknown", t);
}

/* ---- Indexes ---- */

static int cmp_bytes(const char *a, uint64_t al, const char *b, uint64_t bl) {
    int c = memcmp(a, b, (size_t)PL_MIN(al, bl));
    if (c)
        return c;
    return al < bl ? -1 : al > bl;
}

static int cmp_kv_ptr(const void *a, const void *b) {
    const struct pl_gguf_kv *x = *(const struct pl_gguf_kv *const *)a;
    const struct pl_gguf_kv *y = *(const struct pl_gguf_kv *const *)b;
    int c = cmp_bytes(x->key.ptr, x->key.len, y->key.ptr, y->key.len);
    /* Tie-break on file position so a duplicate is reported at its second occurrence. */
    return c ? c : (x->file_off > y->file_off) - (x->file_off < y->file_off);
}

static int cmp_tensor_name(const void *a, const void *b) {
    const struct pl_gguf_tensor *x = *(const struct pl_gguf_tensor *const *)a;
    const struct pl_gguf_tensor *y = *(const struct pl_gguf_tensor *const *)b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x > y) - (x < y);
}

static int cmp_tensor_off(const void *a, const void *b) {
    const struct pl_gguf_tensor *x = *(const struct pl_gguf_tensor *const *)a;
    const struct pl_gguf_tensor *y = *(const struct pl_gguf_tensor *const *)b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return (x > y) - (x < y);
}

/* ---- Parsing ---- */

static int parse_header(struct parser *p, struct pl_gguf *g) {
    const uint8_t *magic = NULL;
    uint32_t version;
    int r;

    (void)snprintf(p->ctx, sizeof(p->ctx), "header");
    r = take(p, 4, "magic", &magic);
    if (r < 0)
        return r;
    if (memcmp(magic, GGUF_MAGIC, 4) != 0) {
        char q[32];
        quote(q, sizeof(q), magic, 4);
        return FAIL(p, 0, "bad magic '%s' (expected 'GGUF')", q);
    }
    r = rd_u32(p, "version", &version);
    if (r < 0)
        return r;
    if (version != 2 && version != 3) {
        uint32_t swapped = __builtin_bswap32(version);
        if (swapped >= 1 && swapped <= 3)
            return fail(p, -PL_ERR_UNSUPPORTED, 4,
                        "version reads as 0x%08" PRIx32 ": big-endian GGUF files are not supported",
                        version);
        if (version == 1)
            return fail(p, -PL_ERR_UNSUPPORTED, 4,
                        "version 1 is not supported (32-bit counts); convert the file to v3");
        if (version == 0)
            return FAIL(p, 4, "version 0 is invalid");
        return fail(p, -PL_ERR_UNSUPPORTED, 4,
                    "version %" PRIu32 " is not supported (this reader handles 2 and 3)", version);
    }
    g->version = version;
    r = rd_u64(p, "tensor count", &g->n_tensors);
    if (r < 0)
        return r;
    r = rd_u64(p, "kv count", &g->n_kv);
    if (r < 0)
        return r;
    if (g->n_tensors > PL_GGUF_MAX_TENSORS)
        return FAIL(p, 8, "tensor count %" PRIu64 " exceeds cap %u", g->n_tensors,
                    PL_GGUF_MAX_TENSORS);
    if (g->n_kv > PL_GGUF_MAX_KV)
        return FAIL(p, 16, "kv count %" PRIu64 " exceeds cap %u", g->n_kv, PL_GGUF_MAX_KV);
    /* Each kv and tensor info takes a minimum number of bytes: reject impossible counts
     * before allocating for them (no overflow: both counts are capped far below 2^32). */
    if (g->n_kv * KV_MIN_BYTES + g->n_tensors * TENSOR_MIN_BYTES > remaining(p))
        return FAIL(p, 8,
                    "%" PRIu64 " tensors and %" PRIu64 " kvs cannot fit in the %" PRIu64
                    " bytes left in the file",
                    g->n_tensors, g->n_kv, remaining(p));
    return 0;
}

static int parse_kvs(struct parser *p, struct pl_gguf *g) {
    int r;

    g->kvs = calloc(g->n_kv ? g->n_kv : 1, sizeof(*g->kvs));
    g->kv_by_key = calloc(g->n_kv ? g->n_kv : 1, sizeof(*g->kv_by_key));
    if (!g->kvs || !g->kv_by_key)
        return -ENOMEM;

    for (uint64_t i = 0; i < g->n_kv; i++) {
        struct pl_gguf_kv *kv = &g->kvs[i];
        uint64_t at = p->pos;
        uint32_t t;

        set_ctx(p, "kv", i, NULL, 0);
        kv->file_off = at;
        r = rd_str(p, "key", PL_GGUF_MAX_KEY_LEN, &kv->key);
        if (r < 0)
            return r;
        if (kv->key.len == 0)
            return FAIL(p, at, "key is empty");
        set_ctx(p, "kv", i, kv->key.ptr, kv->key.len);
        at = p->pos;
        r = rd_u32(p, "value type", &t);
        if (r < 0)
            return r;
        if (t >= _PL_GGUF_TYPE_MAX)
            return FAIL(p, at, "value type %" PRIu32 " unknown", t);
        kv->type = t;
        r = parse_value(p, t, kv);
        if (r < 0)
            return r;
        g->kv_by_key[i] = kv;
    }

    if (g->n_kv > 1)
        qsort(g->kv_by_key, g->n_kv, sizeof(*g->kv_by_key), cmp_kv_ptr);
    for (uint64_t i = 1; i < g->n_kv; i++) {
        const struct pl_gguf_kv *a = g->kv_by_key[i - 1], *b = g->kv_by_key[i];
        if (cmp_bytes(a->key.ptr, a->key.len, b->key.ptr, b->key.len) == 0) {
            set_ctx(p, "kv", (uint64_t)(b - g->kvs), b->key.ptr, b->key.len);
            return FAIL(p, b->file_off, "duplicate key (first at byte %" PRIu64 ")", a->file_off);
        }
    }

    /* general.alignment: a u32 power of two; 32 when absent. */
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const struct pl_gguf_kv *al = pl_gguf_find(g, "general.alignment");
    if (al) {
        set_ctx(p, "kv", (uint64_t)(al - g->kvs), al->key.ptr, al->key.len);
        if (al->type != PL_GGUF_TYPE_UINT32)
            return FAIL(p, al->file_off,
                        "alignment has value type %" PRIu32 ", expected uint32 (4)", al->type);
        if (al->v.u64 == 0 || (al->v.u64 & (al->v.u64 - 1)) != 0)
            return FAIL(p, al->file_off, "alignment %" PRIu64 " is not a non-zero power of two",
                        al->v.u64);
        g->alignment = al->v.u64;
    }
    return 0;
}

/* One tensor info; stores the file position of its offset field in *ret_off_at. */
static int parse_tensor_info(struct parser *p, uint64_t i, struct pl_gguf_tensor *t,
                             uint64_t *ret_off_at) {
    struct pl_gguf_str name;
    uint64_t at = p->pos;
    int r;

    set_ctx(p, "tensor", i, NULL, 0);
    r = rd_str(p, "name", UINT64_MAX, &name);
    if (r < 0)
        return r;
    if (name.len == 0)
        return FAIL(p, at, "name is empty");
    if (name.len > PL_GGUF_MAX_NAME_LEN) {
        set_ctx(p, "tensor", i, name.ptr, name.len);
        return FAIL(p, at, "name length %" PRIu64 " exceeds cap %u", name.len,
                    PL_GGUF_MAX_NAME_LEN);
    }
    set_ctx(p, "tensor", i, name.ptr, name.len);
    if (memchr(name.ptr, '\0', (size_t)name.len))
        return FAIL(p, at, "name contains a NUL byte");
    memcpy(t->name, name.ptr, (size_t)name.len);
    t->name[name.len] = '\0';

    at = p->pos;
    r = rd_u32(p, "n_dims", &t->n_dims);
    if (r < 0)
        return r;
    if (t->n_dims < 1 || t->n_dims > PL_GGUF_MAX_DIMS)
        return FAIL(p, at, "n_dims %" PRIu32 " not in 1..%u", t->n_dims, PL_GGUF_MAX_DIMS);

    t->n_elems = 1;
    for (uint32_t d = 0; d < PL_GGUF_MAX_DIMS; d++)
        t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        at = p->pos;
        r = rd_u64(p, "ne", &t->ne[d]);
        if (r < 0)
            return r;
        if (t->ne[d] == 0 || t->ne[d] > (uint64_t)INT64_MAX)
            return FAIL(p, at, "ne[%" PRIu32 "] = %" PRIu64 " out of range 1..2^63-1", d, t->ne[d]);
        if (pl_mul_overflow(t->n_elems, t->ne[d], &t->n_elems) || t->n_elems > (uint64_t)INT64_MAX)
            return FAIL(p, at, "element count overflows at ne[%" PRIu32 "] = %" PRIu64, d,
                        t->ne[d]);
    }

    at = p->pos;
    r = rd_u32(p, "type", &t->type);
    if (r < 0)
        return r;
    const struct pl_type_info *ti = pl_type_info(t->type);
    if (!ti)
        return fail(p, -PL_ERR_UNSUPPORTED, at, "unknown tensor type id %" PRIu32, t->type);
    if (t->ne[0] % ti->blck_elems != 0)
        return FAIL(p, at, "ne[0] = %" PRIu64 " is not a multiple of the %s block size %" PRIu32,
                    t->ne[0], ti->name, ti->blck_elems);
    uint64_t row_bytes;
    if (pl_type_row_bytes(t->type, t->ne[0], &row_bytes) < 0 ||
        pl_mul_overflow(row_bytes, t->n_elems / t->ne[0], &t->n_bytes))
        return FAIL(p, at, "byte size of %" PRIu64 " %s elements overflows", t->n_elems, ti->name);

    *ret_off_at = p->pos;
    return rd_u64(p, "offset", &t->offset);
}

static int parse_tensors(struct parser *p, struct pl_gguf *g) {
    uint64_t *off_at = NULL;
    const struct pl_gguf_tensor **by_off = NULL;
    int r;

    g->tensors = calloc(g->n_tensors ? g->n_tensors : 1, sizeof(*g->tensors));
    g->t_by_name = calloc(g->n_tensors ? g->n_tensors : 1, sizeof(*g->t_by_name));
    off_at = calloc(g->n_tensors ? g->n_tensors : 1, sizeof(*off_at));
    by_off = calloc(g->n_tensors ? g->n_tensors : 1, sizeof(*by_off));
    if (!g->tensors || !g->t_by_name || !off_at || !by_off) {
        r = -ENOMEM;
        goto out;
    }

    for (uint64_t i = 0; i < g->n_tensors; i++) {
        r = parse_tensor_info(p, i, &g->tensors[i], &off_at[i]);
        if (r < 0)
            goto out;
        g->t_by_name[i] = &g->tensors[i];
        by_off[i] = &g->tensors[i];
    }

    /* Data section: the first alignment boundary after the infos. */
    (void)snprintf(p->ctx, sizeof(p->ctx), "data section");
    uint64_t data_off;
    if (pl_add_overflow(p->pos, g->alignment - 1, &data_off)) {
        r = FAIL(p, p->pos, "start overflows");
        goto out;
    }
    data_off &= ~(g->alignment - 1);
    if (data_off > g->size) {
        if (g->n_tensors > 0) {
            r = FAIL(p, p->pos, "aligned start %" PRIu64 " is past end of file (size %" PRIu64 ")",
                     data_off, g->size);
            goto out;
        }
        data_off = g->size; /* no tensors: an empty data section without padding is fine */
    }
    g->data_off = data_off;

    for (uint64_t i = 0; i < g->n_tensors; i++) {
        struct pl_gguf_tensor *t = &g->tensors[i];
        uint64_t rel = t->offset, end;
        set_ctx(p, "tensor", i, t->name, strlen(t->name));
        if (rel % g->alignment != 0) {
            r = FAIL(p, off_at[i], "offset %" PRIu64 " is not a multiple of the alignment %" PRIu64,
                     rel, g->alignment);
            goto out;
        }
        if (pl_add_overflow(data_off, rel, &t->offset) ||
            pl_add_overflow(t->offset, t->n_bytes, &end) || end > g->size) {
            r = FAIL(p, off_at[i],
                     "data [offset %" PRIu64 ", %" PRIu64 " bytes] ends past end "
                     "of file (size %" PRIu64 ")",
                     rel, t->n_bytes, g->size);
            goto out;
        }
        t->data = g->base + t->offset;
    }

    if (g->n_tensors > 1) {
        qsort(g->t_by_name, g->n_tensors, sizeof(*g->t_by_name), cmp_tensor_name);
        qsort(by_off, g->n_tensors, sizeof(*by_off), cmp_tensor_off);
    }
    for (uint64_t i = 1; i < g->n_tensors; i++) {
        const struct pl_gguf_tensor *a = g->t_by_name[i - 1], *b = g->t_by_name[i];
        if (strcmp(a->name, b->name) == 0) {
            uint64_t bi = (uint64_t)(b - g->tensors);
            set_ctx(p, "tensor", bi, b->name, strlen(b->name));
            r = FAIL(p, off_at[bi], "duplicate tensor name (first is tensor %" PRIu64 ")",
                     (uint64_t)(a - g->tensors));
            goto out;
        }
    }
    for (uint64_t i = 1; i < g->n_tensors; i++) {
        const struct pl_gguf_tensor *a = by_off[i - 1], *b = by_off[i];
        if (a->offset + a->n_bytes > b->offset) { /* no overflow: checked <= size above */
            uint64_t bi = (uint64_t)(b - g->tensors);
            set_ctx(p, "tensor", bi, b->name, strlen(b->name));
            r = FAIL(p, off_at[bi],
                     "data at offset %" PRIu64 " overlaps tensor %" PRIu64 " '%s' [offset %" PRIu64
                     ", %" PRIu64 " bytes]",
                     b->offset - data_off, (uint64_t)(a - g->tensors), a->name,
                     a->offset - data_off, a->n_bytes);
            goto out;
        }
    }
    r = 0;
out:
    free(off_at);
    free(by_off);
    return r;
}

static int parse(struct pl_gguf *g, char *err, size_t err_len) {
    struct parser p = {
        .base = g->base,
        .size = g->size,
        .pos = 0,
        .err = err,
        .err_len = err_len,
    };
    int r = parse_header(&p, g);
    if (r < 0)
        return r;
    r = parse_kvs(&p, g);
    if (r < 0)
        return r;
    return parse_tensors(&p, g);
}

/* ---- Open / close ---- */

static void set_err(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t err_len, const char *fmt, ...) {
    va_list ap;
    if (!err || err_len == 0)
        return;
    va_start(ap, fmt);
    (void)vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

void pl_gguf_close(struct pl_gguf *g) {
    if (!g)
        return;
    if (g->kvs) {
        for (uint64_t i = 0; i < g->n_kv; i++)
            if (g->kvs[i].type == PL_GGUF_TYPE_ARRAY)
                free((void *)g->kvs[i].v.arr.str_offsets);
    }
    free(g->kvs);
    free(g->kv_by_key);
    free(g->tensors);
    free(g->t_by_name);
    if (g->mapped && g->base)
        (void)munmap((void *)g->base, (size_t)g->size);
    free(g);
}

/* Takes ownership of the mapping when mapped is true (even on failure). */
static int open_common(const void *data, uint64_t len, bool mapped, struct pl_gguf **ret, char *err,
                       size_t err_len) {
    struct pl_gguf *g = calloc(1, sizeof(*g));
    int r;
    if (!g) {
        if (mapped)
            (void)munmap((void *)data, (size_t)len);
        set_err(err, err_len, "gguf: out of memory");
        return -ENOMEM;
    }
    g->base = data;
    g->size = len;
    g->mapped = mapped;
    if (err && err_len)
        err[0] = '\0';
    r = parse(g, err, err_len);
    if (r < 0) {
        if (r == -ENOMEM)
            set_err(err, err_len, "gguf: out of memory while parsing");
        pl_gguf_close(g);
        return r;
    }
    *ret = g;
    return 0;
}

int pl_gguf_open_mem(const void *data, size_t len, struct pl_gguf **ret, char *err,
                     size_t err_len) {
    if (!ret || (!data && len > 0)) {
        set_err(err, err_len, "gguf: invalid argument");
        return -EINVAL;
    }
    if (!data)
        data = ""; /* an empty buffer: parsing fails cleanly at the magic */
    return open_common(data, len, false, ret, err, err_len);
}

int pl_gguf_open(const char *path, struct pl_gguf **ret, char *err, size_t err_len) {
    int fd = -1, r;
    struct stat st;
    void *map;

    if (!path || !ret) {
        set_err(err, err_len, "gguf: invalid argument");
        return -EINVAL;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        r = -errno;
        set_err(err, err_len, "gguf: cannot open '%s': %s", path, strerror(-r));
        return r;
    }
    if (fstat(fd, &st) < 0) {
        r = -errno;
        set_err(err, err_len, "gguf: cannot stat '%s': %s", path, strerror(-r));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        r = -EINVAL;
        set_err(err, err_len, "gguf: '%s' is not a regular file", path);
        goto out;
    }
    if (st.st_size == 0) {
        r = -PL_ERR_FORMAT;
        set_err(err, err_len, "gguf: header: '%s' is empty (at byte 0)", path);
        goto out;
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        r = -EFBIG;
        set_err(err, err_len, "gguf: '%s' is too large to map", path);
        goto out;
    }
    map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        r = -errno;
        set_err(err, err_len, "gguf: cannot map '%s': %s", path, strerror(-r));
        goto out;
    }
    pl_close_fd(&fd); /* the mapping keeps the file alive */
    return open_common(map, (uint64_t)st.st_size, true, ret, err, err_len);
out:
    pl_close_fd(&fd);
    return r;
}

/* ---- Accessors ---- */

uint32_t pl_gguf_version(const struct pl_gguf *g) {
    return g->version;
}

uint64_t pl_gguf_alignment(const struct pl_gguf *g) {
    return g->alignment;
}

uint64_t pl_gguf_file_size(const struct pl_gguf *g) {
    return g->size;
}

const void *pl_gguf_base(const struct pl_gguf *g) {
    return g->base;
}

bool pl_gguf_is_mapped(const struct pl_gguf *g) {
    return g && g->mapped;
}

uint64_t pl_gguf_data_offset(const struct pl_gguf *g) {
    return g->data_off;
}

uint64_t pl_gguf_n_kv(const struct pl_gguf *g) {
    return g->n_kv;
}

const struct pl_gguf_kv *pl_gguf_kv_at(const struct pl_gguf *g, uint64_t i) {
    return i < g->n_kv ? &g->kvs[i] : NULL;
}

const struct pl_gguf_kv *pl_gguf_find(const struct pl_gguf *g, const char *key) {
    uint64_t lo = 0, hi = g->n_kv, klen;
    if (!key)
        return NULL;
    klen = strlen(key);
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        const struct pl_gguf_kv *kv = g->kv_by_key[mid];
        int c = cmp_bytes(kv->key.ptr, kv->key.len, key, klen);
        if (c == 0)
            return kv;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static bool is_unsigned(uint32_t t) {
    return t == PL_GGUF_TYPE_UINT8 || t == PL_GGUF_TYPE_UINT16 || t == PL_GGUF_TYPE_UINT32 ||
           t == PL_GGUF_TYPE_UINT64;
}

static bool is_signed(uint32_t t) {
    return t == PL_GGUF_TYPE_INT8 || t == PL_GGUF_TYPE_INT16 || t == PL_GGUF_TYPE_INT32 ||
           t == PL_GGUF_TYPE_INT64;
}

/* An integer kv as a (negative, magnitude) pair; -PL_ERR_FORMAT for non-integers. */
static int get_int(const struct pl_gguf *g, const char *key, bool *neg, uint64_t *mag) {
    const struct pl_gguf_kv *kv = pl_gguf_find(g, key);
    if (!kv)
        return -ENOENT;
    if (is_unsigned(kv->type)) {
        *neg = false;
        *mag = kv->v.u64;
        return 0;
    }
    if (is_signed(kv->type)) {
        *neg = kv->v.i64 < 0;
        *mag = *neg ? (uint64_t)0 - (uint64_t)kv->v.i64 : (uint64_t)kv->v.i64;
        return 0;
    }
    return -PL_ERR_FORMAT;
}

int pl_gguf_get_u64(const struct pl_gguf *g, const char *key, uint64_t *ret) {
    bool neg;
    uint64_t mag;
    int r = get_int(g, key, &neg, &mag);
    if (r < 0)
        return r;
    if (neg)
        return -PL_ERR_FORMAT;
    *ret = mag;
    return 0;
}

int pl_gguf_get_u32(const struct pl_gguf *g, const char *key, uint32_t *ret) {
    uint64_t v;
    int r = pl_gguf_get_u64(g, key, &v);
    if (r < 0)
        return r;
    if (v > UINT32_MAX)
        return -PL_ERR_FORMAT;
    *ret = (uint32_t)v;
    return 0;
}

int pl_gguf_get_i32(const struct pl_gguf *g, const char *key, int32_t *ret) {
    bool neg;
    uint64_t mag;
    int r = get_int(g, key, &neg, &mag);
    if (r < 0)
        return r;
    if (neg ? mag > (uint64_t)INT32_MAX + 1 : mag > (uint64_t)INT32_MAX)
        return -PL_ERR_FORMAT;
    *ret = neg ? (int32_t)(-(int64_t)mag) : (int32_t)mag;
    return 0;
}

int pl_gguf_get_f32(const struct pl_gguf *g, const char *key, float *ret) {
    const struct pl_gguf_kv *kv = pl_gguf_find(g, key);
    if (!kv)
        return -ENOENT;
    if (kv->type != PL_GGUF_TYPE_FLOAT32 && kv->type != PL_GGUF_TYPE_FLOAT64)
        return -PL_ERR_FORMAT;
    if (isfinite(kv->v.f64) && fabs(kv->v.f64) > FLT_MAX)
        return -PL_ERR_FORMAT; /* a FLOAT64 that float cannot hold */
    *ret = (float)kv->v.f64;
    return 0;
}

int pl_gguf_get_bool(const struct pl_gguf *g, const char *key, bool *ret) {
    const struct pl_gguf_kv *kv = pl_gguf_find(g, key);
    if (!kv)
        return -ENOENT;
    if (kv->type != PL_GGUF_TYPE_BOOL)
        return -PL_ERR_FORMAT;
    *ret = kv->v.u64 != 0;
    return 0;
}

int pl_gguf_get_str(const struct pl_gguf *g, const char *key, struct pl_gguf_str *ret) {
    const struct pl_gguf_kv *kv = pl_gguf_find(g, key);
    if (!kv)
        return -ENOENT;
    if (kv->type != PL_GGUF_TYPE_STRING)
        return -PL_ERR_FORMAT;
    *ret = kv->v.str;
    return 0;
}

int pl_gguf_get_arr(const struct pl_gguf *g, const char *key, uint32_t elem_type,
                    struct pl_gguf_arr *ret) {
    const struct pl_gguf_kv *kv = pl_gguf_find(g, key);
    if (!kv)
        return -ENOENT;
    if (kv->type != PL_GGUF_TYPE_ARRAY)
        return -PL_ERR_FORMAT;
    if (elem_type != _PL_GGUF_TYPE_MAX && kv->v.arr.type != elem_type)
        return -PL_ERR_FORMAT;
    *ret = kv->v.arr;
    return 0;
}

int pl_gguf_arr_str(const struct pl_gguf_arr *arr, uint64_t i, struct pl_gguf_str *ret) {
    uint64_t len;
    if (!arr || arr->type != PL_GGUF_TYPE_STRING || i >= arr->n || !arr->str_offsets || !arr->data)
        return -EINVAL;
    const char *at = (const char *)arr->data + arr->str_offsets[i];
    memcpy(&len, at, sizeof(len));
    ret->ptr = at + sizeof(len);
    ret->len = len;
    return 0;
}

uint64_t pl_gguf_n_tensors(const struct pl_gguf *g) {
    return g->n_tensors;
}

const struct pl_gguf_tensor *pl_gguf_tensor_at(const struct pl_gguf *g, uint64_t i) {
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const struct pl_gguf_tensor *pl_gguf_find_tensor(const struct pl_gguf *g, const char *name) {
    uint64_t lo = 0, hi = g->n_tensors;
    if (!name)
        return NULL;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(g->t_by_name[mid]->name, name);
        if (c == 0)
            return g->t_by_name[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

bool pl_gguf_str_eq(struct pl_gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && memcmp(s.ptr, c, n) == 0;
}
