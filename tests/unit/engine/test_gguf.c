/* SPDX-License-Identifier: MIT */
/* Unit tests for engine/src/gguf.c: the shared model and tokenizer files open with the
 * values their READMEs state, and a table of hand-made broken files (built in memory by the
 * small GGUF writer below) is rejected with the right code and a message naming the field.
 * The shared-file part needs PICOLM_TEST_DATA; without it the binary exits 77 after the
 * in-memory tests pass. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "pl/engine_gguf.h"
#include "pl/engine_types.h"
#include "pl/pl_err.h"
#include "pl/pl_util.h"

/* ---- A tiny GGUF writer ---- */

struct gb {
    uint8_t *buf;
    size_t len, cap;
};

static void gb_raw(struct gb *b, const void *p, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        b->buf = realloc(b->buf, cap);
        assert_non_null(b->buf);
        b->cap = cap;
    }
    if (n)
        memcpy(b->buf + b->len, p, n);
    b->len += n;
}

static void gb_u8(struct gb *b, uint8_t v) {
    gb_raw(b, &v, 1);
}
static void gb_u32(struct gb *b, uint32_t v) {
    gb_raw(b, &v, 4);
}
static void gb_u64(struct gb *b, uint64_t v) {
    gb_raw(b, &v, 8);
}
static void gb_strn(struct gb *b, const char *s, size_t n) {
    gb_u64(b, n);
    gb_raw(b, s, n);
}
static void gb_str(struct gb *b, const char *s) {
    gb_strn(b, s, strlen(s));
}
static void gb_zeros(struct gb *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        gb_u8(b, 0);
}
static void gb_pad(struct gb *b, size_t align) {
    while (b->len % align)
        gb_u8(b, 0);
}
static void gb_header_v(struct gb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    gb_raw(b, "GGUF", 4);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}
static void gb_header(struct gb *b, uint64_t n_tensors, uint64_t n_kv) {
    gb_header_v(b, 3, n_tensors, n_kv);
}
static void gb_kv_u32(struct gb *b, const char *key, uint32_t v) {
    gb_str(b, key);
    gb_u32(b, PL_GGUF_TYPE_UINT32);
    gb_u32(b, v);
}
static void gb_kv_str(struct gb *b, const char *key, const char *v) {
    gb_str(b, key);
    gb_u32(b, PL_GGUF_TYPE_STRING);
    gb_str(b, v);
}
/* A tensor info with n_dims dims taken from ne. */
static void gb_tensor(struct gb *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                      uint32_t type, uint64_t offset) {
    gb_str(b, name);
    gb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++)
        gb_u64(b, ne[i]);
    gb_u32(b, type);
    gb_u64(b, offset);
}
static void gb_free(struct gb *b) {
    free(b->buf);
    b->buf = NULL;
    b->len = b->cap = 0;
}

/* A valid file using every value type: returns the builder (caller frees). Tensors:
 * "a" F32 [4, 2] at 0 (32 bytes), "b" Q8_0 [32] at 32 (34 bytes); the file ends with b. */
static void build_valid(struct gb *b, uint32_t version) {
    static const uint64_t ne_a[] = {4, 2}, ne_b[] = {32};
    float f = 1.5f;
    double d = -2.25;
    gb_header_v(b, version, 2, 17);
    gb_kv_str(b, "general.architecture", "llama");
    gb_kv_u32(b, "general.alignment", 32);
    gb_str(b, "v.u8"), gb_u32(b, PL_GGUF_TYPE_UINT8), gb_u8(b, 200);
    gb_str(b, "v.i8"), gb_u32(b, PL_GGUF_TYPE_INT8), gb_u8(b, 0xfe); /* -2 */
    gb_str(b, "v.u16"), gb_u32(b, PL_GGUF_TYPE_UINT16), gb_u8(b, 0x34), gb_u8(b, 0x12);
    gb_str(b, "v.i16"), gb_u32(b, PL_GGUF_TYPE_INT16), gb_u8(b, 0x00), gb_u8(b, 0x80);
    gb_str(b, "v.i32"), gb_u32(b, PL_GGUF_TYPE_INT32), gb_u32(b, (uint32_t)-7);
    gb_str(b, "v.f32"), gb_u32(b, PL_GGUF_TYPE_FLOAT32), gb_raw(b, &f, 4);
    gb_str(b, "v.bool"), gb_u32(b, PL_GGUF_TYPE_BOOL), gb_u8(b, 1);
    gb_str(b, "v.u64"), gb_u32(b, PL_GGUF_TYPE_UINT64), gb_u64(b, (uint64_t)1 << 40);
    gb_str(b, "v.i64"), gb_u32(b, PL_GGUF_TYPE_INT64), gb_u64(b, (uint64_t)-5);
    gb_str(b, "v.f64"), gb_u32(b, PL_GGUF_TYPE_FLOAT64), gb_raw(b, &d, 8);
    d = 1e300;
    gb_str(b, "v.f64big"), gb_u32(b, PL_GGUF_TYPE_FLOAT64), gb_raw(b, &d, 8);
    /* string array */
    gb_str(b, "v.strs"), gb_u32(b, PL_GGUF_TYPE_ARRAY), gb_u32(b, PL_GGUF_TYPE_STRING);
    gb_u64(b, 3), gb_str(b, "zero"), gb_str(b, ""), gb_strn(b, "t\0o", 3);
    /* i32 array */
    gb_str(b, "v.ints"), gb_u32(b, PL_GGUF_TYPE_ARRAY), gb_u32(b, PL_GGUF_TYPE_INT32);
    gb_u64(b, 2), gb_u32(b, 10), gb_u32(b, (uint32_t)-20);
    /* array of arrays: [[u8 1, u8 2], ["x"]] */
    gb_str(b, "v.nested"), gb_u32(b, PL_GGUF_TYPE_ARRAY), gb_u32(b, PL_GGUF_TYPE_ARRAY);
    gb_u64(b, 2);
    gb_u32(b, PL_GGUF_TYPE_UINT8), gb_u64(b, 2), gb_u8(b, 1), gb_u8(b, 2);
    gb_u32(b, PL_GGUF_TYPE_STRING), gb_u64(b, 1), gb_str(b, "x");
    /* a key with arbitrary bytes */
    gb_strn(b, "k\xff\x01", 3), gb_u32(b, PL_GGUF_TYPE_UINT32), gb_u32(b, 9);
    gb_tensor(b, "a", 2, ne_a, PL_GGML_TYPE_F32, 0);
    gb_tensor(b, "b", 1, ne_b, PL_GGML_TYPE_Q8_0, 32);
    gb_pad(b, 32);
    for (int i = 0; i < 32 + 34; i++)
        gb_u8(b, (uint8_t)i);
}

/* Parse len bytes from an exact-size heap copy (so ASan sees any over-read). */
static int open_copy(const void *data, size_t len, struct pl_gguf **ret, char *err,
                     size_t err_len) {
    void *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    if (len)
        memcpy(copy, data, len);
    int r = pl_gguf_open_mem(copy, len, ret, err, err_len);
    if (r < 0)
        free(copy);
    return r;
}

static void close_copy(struct pl_gguf *g) {
    void *base = (void *)pl_gguf_base(g);
    pl_gguf_close(g);
    free(base);
}

/* The buffer must be rejected with code, and the message must contain every needle. */
static void expect_reject(struct gb *b, int code, const char *needle1, const char *needle2) {
    struct pl_gguf *g = NULL;
    char err[512] = "";
    int r = open_copy(b->buf, b->len, &g, err, sizeof(err));
    if (r != code || !strstr(err, "gguf: ") || (needle1 && !strstr(err, needle1)) ||
        (needle2 && !strstr(err, needle2)))
        fail_msg("expected %d with '%s' / '%s', got %d: %s", code, needle1 ? needle1 : "",
                 needle2 ? needle2 : "", r, err);
    assert_null(g);
    gb_free(b);
}

/* ---- The valid hand-made file ---- */

static void test_gguf_reads_every_value_type(void **state) {
    (void)state;
    struct gb b = {0};
    struct pl_gguf *g = NULL;
    char err[256];
    uint32_t u32;
    uint64_t u64;
    int32_t i32;
    float f;
    bool bo;
    struct pl_gguf_str s;
    struct pl_gguf_arr arr;

    build_valid(&b, 3);
    assert_int_equal(open_copy(b.buf, b.len, &g, err, sizeof(err)), 0);
    assert_string_equal(err, "");
    assert_int_equal(pl_gguf_version(g), 3);
    assert_int_equal(pl_gguf_n_kv(g), 17);
    assert_int_equal(pl_gguf_alignment(g), 32);
    assert_int_equal(pl_gguf_file_size(g), b.len);
    assert_int_equal(pl_gguf_data_offset(g) % 32, 0);
    assert_int_equal(pl_gguf_data_offset(g) + 66, b.len);

    assert_int_equal(pl_gguf_get_str(g, "general.architecture", &s), 0);
    assert_true(pl_gguf_str_eq(s, "llama"));
    assert_int_equal(pl_gguf_get_u32(g, "v.u8", &u32), 0);
    assert_int_equal(u32, 200);
    assert_int_equal(pl_gguf_get_i32(g, "v.u8", &i32), 0);
    assert_int_equal(i32, 200);
    assert_int_equal(pl_gguf_get_i32(g, "v.i8", &i32), 0);
    assert_int_equal(i32, -2);
    assert_int_equal(pl_gguf_get_u32(g, "v.i8", &u32), -PL_ERR_FORMAT);
    assert_int_equal(pl_gguf_get_u64(g, "v.i8", &u64), -PL_ERR_FORMAT);
    assert_int_equal(pl_gguf_get_u32(g, "v.u16", &u32), 0);
    assert_int_equal(u32, 0x1234);
    assert_int_equal(pl_gguf_get_i32(g, "v.i16", &i32), 0);
    assert_int_equal(i32, -32768);
    assert_int_equal(pl_gguf_get_i32(g, "v.i32", &i32), 0);
    assert_int_equal(i32, -7);
    assert_int_equal(pl_gguf_get_u64(g, "v.u64", &u64), 0);
    assert_int_equal(u64, (uint64_t)1 << 40);
    assert_int_equal(pl_gguf_get_u32(g, "v.u64", &u32), -PL_ERR_FORMAT); /* does not fit */
    assert_int_equal(pl_gguf_get_i32(g, "v.u64", &i32), -PL_ERR_FORMAT);
    assert_int_equal(pl_gguf_get_i32(g, "v.i64", &i32), 0);
    assert_int_equal(i32, -5);
    assert_int_equal(pl_gguf_get_f32(g, "v.f32", &f), 0);
    assert_true(f == 1.5f);
    assert_int_equal(pl_gguf_get_f32(g, "v.f64", &f), 0);
    assert_true(f == -2.25f);
    assert_int_equal(pl_gguf_get_f32(g, "v.f64big", &f), -PL_ERR_FORMAT);
    assert_int_equal(pl_gguf_get_f32(g, "v.u8", &f), -PL_ERR_FORMAT);
    assert_int_equal(pl_gguf_get_bool(g, "v.bool", &bo), 0);
    assert_true(bo);
    assert_int_equal(pl_gguf_get_bool(g, "v.u8", &bo), -PL_ERR_FORMAT);
    assert_int_equal(pl_gguf_get_u32(g, "v.bool", &u32), -PL_ERR_FORMAT);
    assert_int_equal(pl_gguf_get_str(g, "v.u8", &s), -PL_ERR_FORMAT);
    assert_int_equal(pl_gguf_get_u32(g, "no.such.key", &u32), -ENOENT);
    assert_null(pl_gguf_find(g, "no.such.key"));
    assert_null(pl_gguf_find(g, ""));
    assert_int_equal(pl_gguf_get_u32(g, "k\xff\x01", &u32), 0);
    assert_int_equal(u32, 9);

    assert_int_equal(pl_gguf_get_arr(g, "v.strs", PL_GGUF_TYPE_STRING, &arr), 0);
    assert_int_equal(arr.n, 3);
    assert_int_equal(pl_gguf_arr_str(&arr, 0, &s), 0);
    assert_true(pl_gguf_str_eq(s, "zero"));
    assert_int_equal(pl_gguf_arr_str(&arr, 1, &s), 0);
    assert_int_equal(s.len, 0);
    assert_int_equal(pl_gguf_arr_str(&arr, 2, &s), 0);
    assert_int_equal(s.len, 3);
    assert_memory_equal(s.ptr, "t\0o", 3);
    assert_int_equal(pl_gguf_arr_str(&arr, 3, &s), -EINVAL);
    assert_int_equal(pl_gguf_get_arr(g, "v.strs", PL_GGUF_TYPE_INT32, &arr), -PL_ERR_FORMAT);
    assert_int_equal(pl_gguf_get_arr(g, "v.ints", _PL_GGUF_TYPE_MAX, &arr), 0);
    assert_int_equal(arr.type, PL_GGUF_TYPE_INT32);
    assert_int_equal(arr.n, 2);
    memcpy(&i32, (const char *)arr.data + 4, 4);
    assert_int_equal(i32, -20);
    assert_int_equal(pl_gguf_arr_str(&arr, 0, &s), -EINVAL);
    assert_int_equal(pl_gguf_get_arr(g, "v.nested", PL_GGUF_TYPE_ARRAY, &arr), 0);
    assert_int_equal(arr.n, 2);
    assert_null(arr.data);
    assert_int_equal(pl_gguf_get_arr(g, "v.u8", _PL_GGUF_TYPE_MAX, &arr), -PL_ERR_FORMAT);

    assert_int_equal(pl_gguf_n_tensors(g), 2);
    const struct pl_gguf_tensor *a = pl_gguf_find_tensor(g, "a");
    const struct pl_gguf_tensor *tb = pl_gguf_find_tensor(g, "b");
    assert_ptr_equal(a, pl_gguf_tensor_at(g, 0));
    assert_ptr_equal(tb, pl_gguf_tensor_at(g, 1));
    assert_null(pl_gguf_tensor_at(g, 2));
    assert_null(pl_gguf_find_tensor(g, "c"));
    assert_null(pl_gguf_kv_at(g, 17));
    assert_int_equal(a->n_dims, 2);
    assert_int_equal(a->ne[0], 4);
    assert_int_equal(a->ne[1], 2);
    assert_int_equal(a->ne[2], 1);
    assert_int_equal(a->n_elems, 8);
    assert_int_equal(a->n_bytes, 32);
    assert_int_equal(a->offset, pl_gguf_data_offset(g));
    assert_int_equal(tb->type, PL_GGML_TYPE_Q8_0);
    assert_int_equal(tb->n_bytes, 34);
    assert_int_equal(tb->offset, pl_gguf_data_offset(g) + 32);
    assert_ptr_equal(tb->data, (const uint8_t *)pl_gguf_base(g) + tb->offset);
    assert_int_equal(((const uint8_t *)tb->data)[0], 32);
    close_copy(g);
    gb_free(&b);
}

static void test_gguf_accepts_version_2(void **state) {
    (void)state;
    struct gb b = {0};
    struct pl_gguf *g = NULL;
    build_valid(&b, 2);
    assert_int_equal(open_copy(b.buf, b.len, &g, NULL, 0), 0);
    assert_int_equal(pl_gguf_version(g), 2);
    close_copy(g);
    gb_free(&b);
}

static void test_gguf_accepts_empty_file_with_header_only(void **state) {
    (void)state;
    struct gb b = {0};
    struct pl_gguf *g = NULL;
    gb_header(&b, 0, 0);
    assert_int_equal(open_copy(b.buf, b.len, &g, NULL, 0), 0);
    assert_int_equal(pl_gguf_n_kv(g), 0);
    assert_int_equal(pl_gguf_n_tensors(g), 0);
    assert_null(pl_gguf_find(g, "x"));
    assert_null(pl_gguf_find_tensor(g, "x"));
    assert_int_equal(pl_gguf_data_offset(g), 24);
    close_copy(g);
    gb_free(&b);
}

static void test_gguf_honours_custom_alignment(void **state) {
    (void)state;
    static const uint64_t ne[] = {16};
    struct gb b = {0};
    struct pl_gguf *g = NULL;
    gb_header(&b, 2, 1);
    gb_kv_u32(&b, "general.alignment", 64);
    gb_tensor(&b, "x", 1, ne, PL_GGML_TYPE_F32, 0);
    gb_tensor(&b, "y", 1, ne, PL_GGML_TYPE_F32, 64);
    gb_pad(&b, 64);
    gb_zeros(&b, 128);
    assert_int_equal(open_copy(b.buf, b.len, &g, NULL, 0), 0);
    assert_int_equal(pl_gguf_alignment(g), 64);
    assert_int_equal(pl_gguf_data_offset(g) % 64, 0);
    assert_int_equal(pl_gguf_find_tensor(g, "y")->offset, pl_gguf_data_offset(g) + 64);
    close_copy(g);
    gb_free(&b);
}

/* Many keys and tensors: the sorted indexes find every one of them. */
static void test_gguf_finds_every_key_and_tensor_in_a_large_file(void **state) {
    (void)state;
    enum { N_KV = 3000, N_T = 1500 };
    static const uint64_t ne[] = {8};
    struct gb b = {0};
    struct pl_gguf *g = NULL;
    char name[64];
    gb_header(&b, N_T, N_KV);
    for (int i = 0; i < N_KV; i++) {
        (void)snprintf(name, sizeof(name), "key.%d", (i * 7919) % N_KV);
        gb_kv_u32(&b, name, (uint32_t)((i * 7919) % N_KV));
    }
    for (int i = 0; i < N_T; i++) {
        (void)snprintf(name, sizeof(name), "t.%d", N_T - 1 - i);
        gb_tensor(&b, name, 1, ne, PL_GGML_TYPE_F32, (uint64_t)i * 32);
    }
    gb_pad(&b, 32);
    gb_zeros(&b, (size_t)N_T * 32);
    assert_int_equal(open_copy(b.buf, b.len, &g, NULL, 0), 0);
    for (int i = 0; i < N_KV; i++) {
        uint32_t v = 0;
        (void)snprintf(name, sizeof(name), "key.%d", i);
        assert_int_equal(pl_gguf_get_u32(g, name, &v), 0);
        assert_int_equal(v, (uint32_t)i);
    }
    for (int i = 0; i < N_T; i++) {
        (void)snprintf(name, sizeof(name), "t.%d", i);
        const struct pl_gguf_tensor *t = pl_gguf_find_tensor(g, name);
        assert_non_null(t);
        assert_string_equal(t->name, name);
        assert_int_equal(t->offset, pl_gguf_data_offset(g) + (uint64_t)(N_T - 1 - i) * 32);
    }
    assert_null(pl_gguf_find(g, "key.3000"));
    assert_null(pl_gguf_find_tensor(g, "t.1500"));
    close_copy(g);
    gb_free(&b);
}

/* ---- Broken files ---- */

static void test_gguf_rejects_every_truncation(void **state) {
    (void)state;
    struct gb b = {0};
    build_valid(&b, 3);
    for (size_t len = 0; len < b.len; len++) {
        struct pl_gguf *g = NULL;
        char err[512] = "";
        int r = open_copy(b.buf, len, &g, err, sizeof(err));
        if (r != -PL_ERR_FORMAT || !strstr(err, "(at byte "))
            fail_msg("prefix of %zu bytes: got %d: %s", len, r, err);
        assert_null(g);
    }
    gb_free(&b);
}

static void test_gguf_rejects_null_arguments(void **state) {
    (void)state;
    struct pl_gguf *g = NULL;
    char err[64];
    assert_int_equal(pl_gguf_open_mem(NULL, 10, &g, err, sizeof(err)), -EINVAL);
    assert_int_equal(pl_gguf_open_mem("GGUF", 4, NULL, err, sizeof(err)), -EINVAL);
    assert_int_equal(pl_gguf_open_mem(NULL, 0, &g, err, sizeof(err)), -PL_ERR_FORMAT);
    assert_int_equal(pl_gguf_open(NULL, &g, err, sizeof(err)), -EINVAL);
    assert_null(g);
}

static void test_gguf_rejects_wrong_magic(void **state) {
    (void)state;
    struct gb b = {0};
    gb_raw(&b, "GGML", 4);
    gb_u32(&b, 3), gb_u64(&b, 0), gb_u64(&b, 0);
    expect_reject(&b, -PL_ERR_FORMAT, "magic", "at byte 0");
}

static void test_gguf_rejects_version_1(void **state) {
    (void)state;
    struct gb b = {0};
    gb_header_v(&b, 1, 0, 0);
    expect_reject(&b, -PL_ERR_UNSUPPORTED, "version 1", "at byte 4");
}

static void test_gguf_rejects_version_4(void **state) {
    (void)state;
    struct gb b = {0};
    gb_header_v(&b, 4, 0, 0);
    expect_reject(&b, -PL_ERR_UNSUPPORTED, "version 4", NULL);
}

static void test_gguf_rejects_version_0(void **state) {
    (void)state;
    struct gb b = {0};
    gb_header_v(&b, 0, 0, 0);
    expect_reject(&b, -PL_ERR_FORMAT, "version 0", NULL);
}

static void test_gguf_rejects_byte_swapped_version(void **state) {
    (void)state;
    struct gb b = {0};
    gb_header_v(&b, 0x03000000u, 0, 0);
    expect_reject(&b, -PL_ERR_UNSUPPORTED, "big-endian", "version");
    gb_header_v(&b, 0x02000000u, 0, 0);
    expect_reject(&b, -PL_ERR_UNSUPPORTED, "big-endian", NULL);
}

static void test_gguf_rejects_huge_kv_count(void **state) {
    (void)state;
    struct gb b = {0};
    gb_header(&b, 0, (uint64_t)1 << 40);
    expect_reject(&b, -PL_ERR_FORMAT, "kv count", "exceeds cap");
    /* under the cap, but the file cannot hold that many */
    gb_header(&b, 0, 60000);
    gb_kv_u32(&b, "a", 1);
    expect_reject(&b, -PL_ERR_FORMAT, "kvs cannot fit", NULL);
}

static void test_gguf_rejects_huge_tensor_count(void **state) {
    (void)state;
    struct gb b = {0};
    gb_header(&b, UINT64_MAX, 0);
    expect_reject(&b, -PL_ERR_FORMAT, "tensor count", "exceeds cap");
    gb_header(&b, PL_GGUF_MAX_TENSORS, 0);
    expect_reject(&b, -PL_ERR_FORMAT, "tensors and", "cannot fit");
}

static void test_gguf_rejects_key_length_past_eof(void **state) {
    (void)state;
    struct gb b = {0};
    gb_header(&b, 0, 1);
    gb_u64(&b, 1000);
    gb_raw(&b, "abc", 3);
    gb_zeros(&b, 64);
    expect_reject(&b, -PL_ERR_FORMAT, "kv 0", "key length 1000");
    gb_header(&b, 0, 1);
    gb_u64(&b, UINT64_MAX);
    gb_zeros(&b, 16);
    expect_reject(&b, -PL_ERR_FORMAT, "kv 0", "key length");
}

static void test_gguf_rejects_empty_key(void **state) {
    (void)state;
    struct gb b = {0};
    gb_header(&b, 0, 1);
    gb_kv_u32(&b, "", 1);
    expect_reject(&b, -PL_ERR_FORMAT, "kv 0", "key is empty");
}

static void test_gguf_rejects_string_length_past_eof(void **state) {
    (void)state;
    struct gb b = {0};
    gb_header(&b, 0, 1);
    gb_str(&b, "general.name");
    gb_u32(&b, PL_GGUF_TYPE_STRING);
    gb_u64(&b, 100);
    gb_raw(&b, "short", 5);
    expect_reject(&b, -PL_ERR_FORMAT, "'general.name'", "string value length 100");
    gb_header(&b, 0, 1);
    gb_str(&b, "general.name");
    gb_u32(&b, PL_GGUF_TYPE_STRING);
    gb_u64(&b, (uint64_t)PL_GGUF_MAX_STRING_LEN + 1);
    expect_reject(&b, -PL_ERR_FORMAT, "'general.name'", "exceeds cap");
}

static void test_gguf_rejects_array_of_2_pow_62_elements(void **state) {
    (void)state;
    struct gb b = {0};
    gb_header(&b, 0, 1);
    gb_str(&b, "tokenizer.ggml.tokens");
    gb_u32(&b, PL_GGUF_TYPE_ARRAY);
    gb_u32(&b, PL_GGUF_TYPE_STRING);
    gb_u64(&b, (uint64_t)1 << 62);
    gb_zeros(&b, 64);
    expect_reject(&b, -PL_ERR_FORMAT, "'tokenizer.ggml.tokens'",
                  "array length 4611686018427387904");
    /* under the cap but longer than the file */
    gb_header(&b, 0, 1);
    gb_str(&b, "tokenizer.ggml.scores");
    gb_u32(&b, PL_GGUF_TYPE_ARRAY);
    gb_u32(&b, PL_GGUF_TYPE_FLOAT32);
    gb_u64(&b, 1000);
    gb_zeros(&b, 64);
    expect_reject(&b, -PL_ERR_FORMAT, "'tokenizer.ggml.scores'", "past end of file");
}

static void test_gguf_rejects_string_array_element_past_eof(void **state) {
    (void)state;
    struct gb b = {0};
    gb_header(&b, 0, 1);
    gb_str(&b, "tokenizer.ggml.tokens");
    gb_u32(&b, PL_GGUF_TYPE_ARRAY);
    gb_u32(&b, PL_GGUF_TYPE_STRING);
    gb_u64(&b, 2);
    gb_str(&b, "ok");
    gb_u64(&b, 99);
    expect_reject(&b, -PL_ERR_FORMAT, "'tokenizer.ggml.tokens'", "array string length 99");
}

static void test_gguf_rejects_deeply_nested_arrays(void **state) {
    (void)state;
    struct gb b = {0};
    gb_header(&b, 0, 1);
    gb_str(&b, "bomb");
    gb_u32(&b, PL_GGUF_TYPE_ARRAY);
    for (int i = 0; i < 40; i++)
        gb_u32(&b, PL_GGUF_TYPE_ARRAY), gb_u64(&b, 1);
    gb_u32(&b, PL_GGUF_TYPE_UINT8), gb_u64(&b, 0);
    expect_reject(&b, -PL_ERR_FORMAT, "'bomb'", "nested deeper than");
}

static void test_gguf_rejects_nested_array_bombs(void **state) {
    (void)state;
    struct gb b = {0};
    /* an outer array claiming 2^26 inner arrays in a tiny file */
    gb_header(&b, 0, 1);
    gb_str(&b, "bomb");
    gb_u32(&b, PL_GGUF_TYPE_ARRAY);
    gb_u32(&b, PL_GGUF_TYPE_ARRAY);
    gb_u64(&b, PL_GGUF_MAX_ARRAY_LEN);
    gb_u32(&b, PL_GGUF_TYPE_UINT8), gb_u64(&b, 0);
    expect_reject(&b, -PL_ERR_FORMAT, "'bomb'", "past end of file");
    /* an inner array with a huge length */
    gb_header(&b, 0, 1);
    gb_str(&b, "bomb");
    gb_u32(&b, PL_GGUF_TYPE_ARRAY);
    gb_u32(&b, PL_GGUF_TYPE_ARRAY);
    gb_u64(&b, 1);
    gb_u32(&b, PL_GGUF_TYPE_UINT64), gb_u64(&b, (uint64_t)1 << 61);
    expect_reject(&b, -PL_ERR_FORMAT, "'bomb'", "nested array length");
    /* an inner array of u64 whose bytes overflow 64 bits if multiplied unchecked */
    gb_header(&b, 0, 1);
    gb_str(&b, "bomb");
    gb_u32(&b, PL_GGUF_TYPE_ARRAY);
    gb_u32(&b, PL_GGUF_TYPE_ARRAY);
    gb_u64(&b, 1);
    gb_u32(&b, PL_GGUF_TYPE_UINT64), gb_u64(&b, 1000);
    expect_reject(&b, -PL_ERR_FORMAT, "'bomb'", "past end of file");
    /* an inner array of unknown type */
    gb_header(&b, 0, 1);
    gb_str(&b, "bomb");
    gb_u32(&b, PL_GGUF_TYPE_ARRAY);
    gb_u32(&b, PL_GGUF_TYPE_ARRAY);
    gb_u64(&b, 1);
    gb_u32(&b, 77), gb_u64(&b, 0);
    expect_reject(&b, -PL_ERR_FORMAT, "'bomb'", "element type 77 unknown");
}

static void test_gguf_rejects_unknown_value_type(void **state) {
    (void)state;
    struct gb b = {0};
    gb_header(&b, 0, 1);
    gb_str(&b, "general.weird");
    gb_u32(&b, 13);
    gb_u32(&b, 0);
    expect_reject(&b, -PL_ERR_FORMAT, "'general.weird'", "value type 13 unknown");
    gb_header(&b, 0, 1);
    gb_str(&b, "general.weird");
    gb_u32(&b, PL_GGUF_TYPE_ARRAY);
    gb_u32(&b, 0xffffffffu);
    gb_u64(&b, 0);
    expect_reject(&b, -PL_ERR_FORMAT, "'general.weird'", "array element type 4294967295");
}

static void test_gguf_rejects_bool_other_than_0_or_1(void **state) {
    (void)state;
    struct gb b = {0};
    gb_header(&b, 0, 1);
    gb_str(&b, "tokenizer.ggml.add_bos_token");
    gb_u32(&b, PL_GGUF_TYPE_BOOL);
    gb_u8(&b, 2);
    expect_reject(&b, -PL_ERR_FORMAT, "'tokenizer.ggml.add_bos_token'", "bool value 2");
}

static void test_gguf_rejects_duplicate_key(void **state) {
    (void)state;
    struct gb b = {0};
    gb_header(&b, 0, 3);
    gb_kv_u32(&b, "llama.block_count", 5);
    gb_kv_str(&b, "general.name", "x");
    gb_kv_u32(&b, "llama.block_count", 6);
    expect_reject(&b, -PL_ERR_FORMAT, "kv 2 'llama.block_count'", "duplicate key");
}

static void test_gguf_rejects_bad_alignment(void **state) {
    (void)state;
    static const uint32_t bad[] = {0, 3, 48, 0xffffffffu};
    for (size_t i = 0; i < PL_ARRAY_SIZE(bad); i++) {
        struct gb b = {0};
        gb_header(&b, 0, 1);
        gb_kv_u32(&b, "general.alignment", bad[i]);
        expect_reject(&b, -PL_ERR_FORMAT, "'general.alignment'", "power of two");
    }
    struct gb b = {0};
    gb_header(&b, 0, 1);
    gb_kv_str(&b, "general.alignment", "32");
    expect_reject(&b, -PL_ERR_FORMAT, "'general.alignment'", "expected uint32");
    gb_header(&b, 0, 1);
    gb_str(&b, "general.alignment");
    gb_u32(&b, PL_GGUF_TYPE_UINT64);
    gb_u64(&b, 32);
    expect_reject(&b, -PL_ERR_FORMAT, "'general.alignment'", "expected uint32");
}

/* A file with one kv-less tensor info of the given shape/type/offset and `data` bytes. */
static void build_one_tensor(struct gb *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                             uint32_t type, uint64_t offset, size_t data) {
    gb_header(b, 1, 0);
    gb_tensor(b, name, n_dims, ne, type, offset);
    gb_pad(b, 32);
    gb_zeros(b, data);
}

static void test_gguf_rejects_unknown_tensor_type(void **state) {
    (void)state;
    static const uint64_t ne[] = {32};
    struct gb b = {0};
    build_one_tensor(&b, "blk.0.attn_q.weight", 1, ne, 99, 0, 256);
    expect_reject(&b, -PL_ERR_UNSUPPORTED, "tensor 0 'blk.0.attn_q.weight'",
                  "unknown tensor type id 99");
    build_one_tensor(&b, "t", 1, ne, 4 /* retired Q4_2 */, 0, 256);
    expect_reject(&b, -PL_ERR_UNSUPPORTED, "'t'", "type id 4");
}

static void test_gguf_rejects_bad_n_dims(void **state) {
    (void)state;
    static const uint64_t ne[] = {1, 1, 1, 1, 1};
    struct gb b = {0};
    build_one_tensor(&b, "t0", 0, ne, PL_GGML_TYPE_F32, 0, 64);
    expect_reject(&b, -PL_ERR_FORMAT, "tensor 0 't0'", "n_dims 0");
    build_one_tensor(&b, "t5", 5, ne, PL_GGML_TYPE_F32, 0, 64);
    expect_reject(&b, -PL_ERR_FORMAT, "tensor 0 't5'", "n_dims 5");
}

static void test_gguf_rejects_zero_and_negative_dims(void **state) {
    (void)state;
    static const uint64_t zero[] = {4, 0}, neg[] = {4, (uint64_t)-1};
    struct gb b = {0};
    build_one_tensor(&b, "z", 2, zero, PL_GGML_TYPE_F32, 0, 64);
    expect_reject(&b, -PL_ERR_FORMAT, "'z'", "ne[1] = 0");
    build_one_tensor(&b, "n", 2, neg, PL_GGML_TYPE_F32, 0, 64);
    expect_reject(&b, -PL_ERR_FORMAT, "'n'", "ne[1]");
}

static void test_gguf_rejects_dims_whose_product_overflows(void **state) {
    (void)state;
    static const uint64_t big[] = {(uint64_t)1 << 32, (uint64_t)1 << 32};
    static const uint64_t big4[] = {1u << 16, 1u << 16, 1u << 16, 1u << 16};
    struct gb b = {0};
    build_one_tensor(&b, "big", 2, big, PL_GGML_TYPE_F32, 0, 64);
    expect_reject(&b, -PL_ERR_FORMAT, "'big'", "overflows");
    build_one_tensor(&b, "big4", 4, big4, PL_GGML_TYPE_F32, 0, 64);
    expect_reject(&b, -PL_ERR_FORMAT, "'big4'", "overflows");
    /* elements fit in int64, bytes do not: 2^62 F32 elements */
    static const uint64_t bytes_ovf[] = {(uint64_t)1 << 62};
    build_one_tensor(&b, "bytes", 1, bytes_ovf, PL_GGML_TYPE_F32, 0, 64);
    expect_reject(&b, -PL_ERR_FORMAT, "'bytes'", "overflows");
}

static void test_gguf_rejects_row_not_multiple_of_block(void **state) {
    (void)state;
    static const uint64_t ne[] = {16, 2};
    struct gb b = {0};
    build_one_tensor(&b, "q", 2, ne, PL_GGML_TYPE_Q8_0, 0, 64);
    expect_reject(&b, -PL_ERR_FORMAT, "'q'", "block size 32");
}

static void test_gguf_rejects_bad_tensor_names(void **state) {
    (void)state;
    static const uint64_t ne[] = {8};
    char longname[PL_GGUF_MAX_NAME_LEN + 2];
    struct gb b = {0};
    memset(longname, 'n', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    build_one_tensor(&b, longname, 1, ne, PL_GGML_TYPE_F32, 0, 32);
    expect_reject(&b, -PL_ERR_FORMAT, "tensor 0", "name length 256 exceeds cap 255");
    longname[PL_GGUF_MAX_NAME_LEN] = '\0'; /* 255 is fine */
    build_one_tensor(&b, longname, 1, ne, PL_GGML_TYPE_F32, 0, 32);
    struct pl_gguf *g = NULL;
    assert_int_equal(open_copy(b.buf, b.len, &g, NULL, 0), 0);
    assert_non_null(pl_gguf_find_tensor(g, longname));
    close_copy(g);
    gb_free(&b);

    gb_header(&b, 1, 0);
    gb_strn(&b, "a\0b", 3);
    gb_u32(&b, 1), gb_u64(&b, 8), gb_u32(&b, PL_GGML_TYPE_F32), gb_u64(&b, 0);
    gb_pad(&b, 32);
    gb_zeros(&b, 32);
    expect_reject(&b, -PL_ERR_FORMAT, "tensor 0 'a\\x00b'", "NUL");

    build_one_tensor(&b, "", 1, ne, PL_GGML_TYPE_F32, 0, 32);
    expect_reject(&b, -PL_ERR_FORMAT, "tensor 0", "name is empty");

    gb_header(&b, 1, 0);
    gb_u64(&b, 1u << 20);
    gb_raw(&b, "abc", 3);
    gb_zeros(&b, 64);
    expect_reject(&b, -PL_ERR_FORMAT, "tensor 0", "name length 1048576");
}

static void test_gguf_rejects_duplicate_tensor_name(void **state) {
    (void)state;
    static const uint64_t ne[] = {8};
    struct gb b = {0};
    gb_header(&b, 3, 0);
    gb_tensor(&b, "blk.0.ffn_up.weight", 1, ne, PL_GGML_TYPE_F32, 0);
    gb_tensor(&b, "other", 1, ne, PL_GGML_TYPE_F32, 32);
    gb_tensor(&b, "blk.0.ffn_up.weight", 1, ne, PL_GGML_TYPE_F32, 64);
    gb_pad(&b, 32);
    gb_zeros(&b, 96);
    expect_reject(&b, -PL_ERR_FORMAT, "tensor 2 'blk.0.ffn_up.weight'", "duplicate tensor name");
}

static void test_gguf_rejects_offset_past_eof(void **state) {
    (void)state;
    static const uint64_t ne[] = {8};
    struct gb b = {0};
    build_one_tensor(&b, "w", 1, ne, PL_GGML_TYPE_F32, 4096, 32);
    expect_reject(&b, -PL_ERR_FORMAT, "'w'", "ends past end of file");
    build_one_tensor(&b, "w", 1, ne, PL_GGML_TYPE_F32, UINT64_MAX - 31, 32);
    expect_reject(&b, -PL_ERR_FORMAT, "'w'", "ends past end of file");
}

static void test_gguf_rejects_offset_plus_size_past_eof(void **state) {
    (void)state;
    static const uint64_t ne[] = {8};
    struct gb b = {0};
    build_one_tensor(&b, "w", 1, ne, PL_GGML_TYPE_F32, 0, 31);
    expect_reject(&b, -PL_ERR_FORMAT, "tensor 0 'w'", "[offset 0, 32 bytes] ends past end");
}

static void test_gguf_rejects_missing_data_section(void **state) {
    (void)state;
    static const uint64_t ne[] = {8};
    struct gb b = {0};
    gb_header(&b, 1, 0);
    gb_tensor(&b, "w", 1, ne, PL_GGML_TYPE_F32, 0);
    expect_reject(&b, -PL_ERR_FORMAT, "data section", "past end of file");
}

static void test_gguf_rejects_misaligned_offset(void **state) {
    (void)state;
    static const uint64_t ne[] = {8};
    struct gb b = {0};
    build_one_tensor(&b, "w", 1, ne, PL_GGML_TYPE_F32, 16, 64);
    expect_reject(&b, -PL_ERR_FORMAT, "'w'", "offset 16 is not a multiple of the alignment 32");
}

static void test_gguf_rejects_overlapping_tensors(void **state) {
    (void)state;
    static const uint64_t ne_big[] = {16}, ne[] = {8};
    struct gb b = {0};
    gb_header(&b, 3, 0);
    gb_tensor(&b, "c", 1, ne, PL_GGML_TYPE_F32, 128);
    gb_tensor(&b, "a", 1, ne_big, PL_GGML_TYPE_F32, 0); /* [0, 64) */
    gb_tensor(&b, "b", 1, ne, PL_GGML_TYPE_F32, 32);    /* [32, 64): inside a */
    gb_pad(&b, 32);
    gb_zeros(&b, 160);
    expect_reject(&b, -PL_ERR_FORMAT, "'b'", "overlaps tensor 1 'a'");
    /* the same offset twice */
    gb_header(&b, 2, 0);
    gb_tensor(&b, "x", 1, ne, PL_GGML_TYPE_F32, 0);
    gb_tensor(&b, "y", 1, ne, PL_GGML_TYPE_F32, 0);
    gb_pad(&b, 32);
    gb_zeros(&b, 32);
    expect_reject(&b, -PL_ERR_FORMAT, "'y'", "overlaps tensor 0 'x'");
}

static void test_gguf_open_reports_missing_and_odd_files(void **state) {
    (void)state;
    struct pl_gguf *g = NULL;
    char err[512];
    char path[] = "/tmp/pl_test_gguf_XXXXXX";
    assert_int_equal(pl_gguf_open("/nonexistent/x.gguf", &g, err, sizeof(err)), -ENOENT);
    assert_non_null(strstr(err, "/nonexistent/x.gguf"));
    assert_int_equal(pl_gguf_open("/tmp", &g, err, sizeof(err)), -EINVAL);
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(pl_gguf_open(path, &g, err, sizeof(err)), -PL_ERR_FORMAT);
    /* the same valid file through the mmap path */
    struct gb b = {0};
    build_valid(&b, 3);
    assert_int_equal(write(fd, b.buf, b.len), (ssize_t)b.len);
    assert_int_equal(pl_gguf_open(path, &g, err, sizeof(err)), 0);
    assert_int_equal(pl_gguf_n_tensors(g), 2);
    assert_int_equal(pl_gguf_file_size(g), b.len);
    pl_gguf_close(g);
    pl_gguf_close(NULL);
    (void)close(fd);
    (void)unlink(path);
    gb_free(&b);
}

/* ---- Shared model and tokenizer files ---- */

static const char *data_dir(void) {
    const char *d = getenv("PICOLM_TEST_DATA");
    return d && *d ? d : NULL;
}

static struct pl_gguf *open_shared(const char *sub, const char *file) {
    char path[4096], err[512];
    struct pl_gguf *g = NULL;
    (void)snprintf(path, sizeof(path), "%s/%s/%s", data_dir(), sub, file);
    int r = pl_gguf_open(path, &g, err, sizeof(err));
    if (r < 0)
        fail_msg("%s: %d %s", path, r, err);
    return g;
}

static uint32_t get_u32_or_fail(const struct pl_gguf *g, const char *key) {
    uint32_t v = 0;
    assert_int_equal(pl_gguf_get_u32(g, key, &v), 0);
    return v;
}

/* Every .gguf in models/ and tokenizer/ opens; each tensor's data lies inside the file. */
static void test_gguf_opens_every_shared_file(void **state) {
    (void)state;
    static const char *subs[] = {"models", "tokenizer"};
    int n_files = 0;
    for (size_t s = 0; s < PL_ARRAY_SIZE(subs); s++) {
        char dir[4096];
        (void)snprintf(dir, sizeof(dir), "%s/%s", data_dir(), subs[s]);
        DIR *d = opendir(dir);
        assert_non_null(d);
        struct dirent *e;
        while ((e = readdir(d))) {
            size_t n = strlen(e->d_name);
            if (n < 5 || strcmp(e->d_name + n - 5, ".gguf") != 0)
                continue;
            struct pl_gguf *g = open_shared(subs[s], e->d_name);
            assert_int_equal(pl_gguf_version(g), 3);
            for (uint64_t i = 0; i < pl_gguf_n_tensors(g); i++) {
                const struct pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
                assert_true(t->offset >= pl_gguf_data_offset(g));
                assert_true(t->offset + t->n_bytes <= pl_gguf_file_size(g));
                assert_ptr_equal(pl_gguf_find_tensor(g, t->name), t);
            }
            for (uint64_t i = 0; i < pl_gguf_n_kv(g); i++) {
                const struct pl_gguf_kv *kv = pl_gguf_kv_at(g, i);
                char key[256];
                (void)snprintf(key, sizeof(key), "%.*s", (int)kv->key.len, kv->key.ptr);
                assert_ptr_equal(pl_gguf_find(g, key), kv);
            }
            pl_gguf_close(g);
            n_files++;
        }
        (void)closedir(d);
    }
    assert_true(n_files >= 11);
}

static void test_gguf_reads_stories260k_values(void **state) {
    (void)state;
    struct pl_gguf *g = open_shared("models", "stories260K.gguf");
    struct pl_gguf_str s;
    float eps;
    assert_int_equal(pl_gguf_n_kv(g), 19);
    assert_int_equal(pl_gguf_n_tensors(g), 48);
    assert_int_equal(get_u32_or_fail(g, "llama.block_count"), 5);
    assert_int_equal(get_u32_or_fail(g, "llama.embedding_length"), 64);
    assert_int_equal(get_u32_or_fail(g, "llama.feed_forward_length"), 172);
    assert_int_equal(get_u32_or_fail(g, "llama.attention.head_count"), 8);
    assert_int_equal(get_u32_or_fail(g, "llama.attention.head_count_kv"), 4);
    assert_int_equal(get_u32_or_fail(g, "llama.context_length"), 2048);
    assert_int_equal(get_u32_or_fail(g, "tokenizer.ggml.bos_token_id"), 1);
    assert_int_equal(get_u32_or_fail(g, "tokenizer.ggml.eos_token_id"), 2);
    assert_int_equal(pl_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &eps), 0);
    assert_true(eps > 0.99e-5f && eps < 1.01e-5f);
    assert_null(pl_gguf_find(g, "llama.rope.freq_base"));
    assert_int_equal(pl_gguf_get_str(g, "tokenizer.ggml.model", &s), 0);
    assert_true(pl_gguf_str_eq(s, "llama"));
    const struct pl_gguf_tensor *t = pl_gguf_find_tensor(g, "token_embd.weight");
    assert_non_null(t);
    assert_int_equal(t->type, PL_GGML_TYPE_F32);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 64);
    assert_int_equal(t->ne[1], 512);
    assert_int_equal(t->n_bytes, 64 * 512 * 4);
    struct pl_gguf_arr arr;
    assert_int_equal(pl_gguf_get_arr(g, "tokenizer.ggml.tokens", PL_GGUF_TYPE_STRING, &arr), 0);
    assert_int_equal(arr.n, 512);
    assert_int_equal(pl_gguf_arr_str(&arr, 3, &s), 0);
    assert_true(pl_gguf_str_eq(s, "<0x00>"));
    assert_int_equal(pl_gguf_arr_str(&arr, 258, &s), 0);
    assert_true(pl_gguf_str_eq(s, "<0xFF>"));
    pl_gguf_close(g);
}

/* Tensor type counts of each model, as the models README lists them. */
static void test_gguf_tensor_types_match_models_readme(void **state) {
    (void)state;
    static const struct {
        const char *file;
        struct {
            uint32_t type, count;
        } c[5];
    } want[] = {
        {"stories260K.gguf", {{PL_GGML_TYPE_F32, 48}}},
        {"stories260K-F16.gguf", {{PL_GGML_TYPE_F16, 37}, {PL_GGML_TYPE_F32, 11}}},
        {"tiny-llama-spm-Q4_K_M.gguf",
         {{PL_GGML_TYPE_Q6_K, 5}, {PL_GGML_TYPE_F32, 9}, {PL_GGML_TYPE_Q4_K, 25}}},
        {"tiny-llama-spm-Q5_K_M.gguf",
         {{PL_GGML_TYPE_Q6_K, 5}, {PL_GGML_TYPE_F32, 9}, {PL_GGML_TYPE_Q5_K, 25}}},
        {"tiny-llama-spm-Q3_K_M.gguf",
         {{PL_GGML_TYPE_Q6_K, 1},
          {PL_GGML_TYPE_F32, 9},
          {PL_GGML_TYPE_Q3_K, 17},
          {PL_GGML_TYPE_Q4_K, 10},
          {PL_GGML_TYPE_Q5_K, 2}}},
        {"tiny-llama-spm-Q2_K.gguf",
         {{PL_GGML_TYPE_Q6_K, 1},
          {PL_GGML_TYPE_F32, 9},
          {PL_GGML_TYPE_Q2_K, 17},
          {PL_GGML_TYPE_Q3_K, 12}}},
        {"tiny-llama-spm-tied-Q8_0.gguf", {{PL_GGML_TYPE_F32, 9}, {PL_GGML_TYPE_Q8_0, 29}}},
        {"tiny-llama-gpt2-Q4_0.gguf",
         {{PL_GGML_TYPE_Q6_K, 1}, {PL_GGML_TYPE_F32, 9}, {PL_GGML_TYPE_Q4_0, 29}}},
    };
    for (size_t f = 0; f < PL_ARRAY_SIZE(want); f++) {
        struct pl_gguf *g = open_shared("models", want[f].file);
        uint64_t total = 0;
        for (size_t c = 0; c < 5 && want[f].c[c].count; c++) {
            uint64_t n = 0;
            for (uint64_t i = 0; i < pl_gguf_n_tensors(g); i++)
                n += pl_gguf_tensor_at(g, i)->type == want[f].c[c].type;
            if (n != want[f].c[c].count)
                fail_msg("%s: %" PRIu64 " tensors of type %s, expected %u", want[f].file, n,
                         pl_type_info(want[f].c[c].type)->name, want[f].c[c].count);
            total += n;
        }
        assert_int_equal(total, pl_gguf_n_tensors(g));
        pl_gguf_close(g);
    }
    /* the Q4_K_M file in detail */
    struct pl_gguf *g = open_shared("models", "tiny-llama-spm-Q4_K_M.gguf");
    assert_int_equal(pl_gguf_find_tensor(g, "output.weight")->type, PL_GGML_TYPE_Q6_K);
    assert_int_equal(pl_gguf_find_tensor(g, "token_embd.weight")->type, PL_GGML_TYPE_Q4_K);
    assert_int_equal(pl_gguf_find_tensor(g, "token_embd.weight")->ne[1], 32000);
    assert_int_equal(pl_gguf_find_tensor(g, "blk.0.attn_k.weight")->ne[1], 128);
    assert_int_equal(get_u32_or_fail(g, "llama.vocab_size"), 32000);
    assert_null(pl_gguf_find_tensor(g, "blk.4.attn_k.weight"));
    pl_gguf_close(g);
    g = open_shared("models", "tiny-llama-spm-tied-Q8_0.gguf");
    assert_null(pl_gguf_find_tensor(g, "output.weight"));
    pl_gguf_close(g);
}

static void test_gguf_reads_tokenizer_vocabularies(void **state) {
    (void)state;
    static const struct {
        const char *file, *model;
        uint64_t n_tokens, n_merges;
        uint32_t bos;
    } want[] = {
        {"ggml-vocab-llama-spm.gguf", "llama", 32000, 0, 1},
        {"ggml-vocab-gpt-2.gguf", "gpt2", 50257, 50000, 50256},
        {"ggml-vocab-deepseek-llm.gguf", "gpt2", 102400, 99757, 100000},
    };
    for (size_t f = 0; f < PL_ARRAY_SIZE(want); f++) {
        struct pl_gguf *g = open_shared("tokenizer", want[f].file);
        struct pl_gguf_str s;
        struct pl_gguf_arr arr;
        assert_int_equal(pl_gguf_n_tensors(g), 0);
        assert_int_equal(pl_gguf_get_str(g, "tokenizer.ggml.model", &s), 0);
        assert_true(pl_gguf_str_eq(s, want[f].model));
        assert_int_equal(get_u32_or_fail(g, "tokenizer.ggml.bos_token_id"), want[f].bos);
        assert_int_equal(pl_gguf_get_arr(g, "tokenizer.ggml.tokens", PL_GGUF_TYPE_STRING, &arr), 0);
        assert_int_equal(arr.n, want[f].n_tokens);
        for (uint64_t i = 0; i < arr.n; i++)
            assert_int_equal(pl_gguf_arr_str(&arr, i, &s), 0);
        if (want[f].n_merges) {
            assert_int_equal(pl_gguf_get_arr(g, "tokenizer.ggml.merges", PL_GGUF_TYPE_STRING, &arr),
                             0);
            assert_int_equal(arr.n, want[f].n_merges);
        } else {
            assert_int_equal(pl_gguf_get_arr(g, "tokenizer.ggml.merges", _PL_GGUF_TYPE_MAX, &arr),
                             -ENOENT);
        }
        pl_gguf_close(g);
    }
    struct pl_gguf *g = open_shared("tokenizer", "ggml-vocab-llama-spm.gguf");
    struct pl_gguf_arr arr;
    struct pl_gguf_str s;
    bool add_bos = false;
    assert_int_equal(pl_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos), 0);
    assert_true(add_bos);
    assert_int_equal(pl_gguf_get_arr(g, "tokenizer.ggml.tokens", PL_GGUF_TYPE_STRING, &arr), 0);
    assert_int_equal(pl_gguf_arr_str(&arr, 3, &s), 0);
    assert_true(pl_gguf_str_eq(s, "<0x00>"));
    assert_int_equal(pl_gguf_arr_str(&arr, 15043, &s), 0);
    assert_true(pl_gguf_str_eq(s, "\xe2\x96\x81Hello"));
    pl_gguf_close(g);
}

/* Regression inputs found by fuzzing (tests/fuzz/fuzz_gguf.c) go here. */

int main(void) {
    const struct CMUnitTest mem_tests[] = {
        cmocka_unit_test(test_gguf_reads_every_value_type),
        cmocka_unit_test(test_gguf_accepts_version_2),
        cmocka_unit_test(test_gguf_accepts_empty_file_with_header_only),
        cmocka_unit_test(test_gguf_honours_custom_alignment),
        cmocka_unit_test(test_gguf_finds_every_key_and_tensor_in_a_large_file),
        cmocka_unit_test(test_gguf_rejects_every_truncation),
        cmocka_unit_test(test_gguf_rejects_null_arguments),
        cmocka_unit_test(test_gguf_rejects_wrong_magic),
        cmocka_unit_test(test_gguf_rejects_version_1),
        cmocka_unit_test(test_gguf_rejects_version_4),
        cmocka_unit_test(test_gguf_rejects_version_0),
        cmocka_unit_test(test_gguf_rejects_byte_swapped_version),
        cmocka_unit_test(test_gguf_rejects_huge_kv_count),
        cmocka_unit_test(test_gguf_rejects_huge_tensor_count),
        cmocka_unit_test(test_gguf_rejects_key_length_past_eof),
        cmocka_unit_test(test_gguf_rejects_empty_key),
        cmocka_unit_test(test_gguf_rejects_string_length_past_eof),
        cmocka_unit_test(test_gguf_rejects_array_of_2_pow_62_elements),
        cmocka_unit_test(test_gguf_rejects_string_array_element_past_eof),
        cmocka_unit_test(test_gguf_rejects_deeply_nested_arrays),
        cmocka_unit_test(test_gguf_rejects_nested_array_bombs),
        cmocka_unit_test(test_gguf_rejects_unknown_value_type),
        cmocka_unit_test(test_gguf_rejects_bool_other_than_0_or_1),
        cmocka_unit_test(test_gguf_rejects_duplicate_key),
        cmocka_unit_test(test_gguf_rejects_bad_alignment),
        cmocka_unit_test(test_gguf_rejects_unknown_tensor_type),
        cmocka_unit_test(test_gguf_rejects_bad_n_dims),
        cmocka_unit_test(test_gguf_rejects_zero_and_negative_dims),
        cmocka_unit_test(test_gguf_rejects_dims_whose_product_overflows),
        cmocka_unit_test(test_gguf_rejects_row_not_multiple_of_block),
        cmocka_unit_test(test_gguf_rejects_bad_tensor_names),
        cmocka_unit_test(test_gguf_rejects_duplicate_tensor_name),
        cmocka_unit_test(test_gguf_rejects_offset_past_eof),
        cmocka_unit_test(test_gguf_rejects_offset_plus_size_past_eof),
        cmocka_unit_test(test_gguf_rejects_missing_data_section),
        cmocka_unit_test(test_gguf_rejects_misaligned_offset),
        cmocka_unit_test(test_gguf_rejects_overlapping_tensors),
        cmocka_unit_test(test_gguf_open_reports_missing_and_odd_files),
    };
    const struct CMUnitTest data_tests[] = {
        cmocka_unit_test(test_gguf_opens_every_shared_file),
        cmocka_unit_test(test_gguf_reads_stories260k_values),
        cmocka_unit_test(test_gguf_tensor_types_match_models_readme),
        cmocka_unit_test(test_gguf_reads_tokenizer_vocabularies),
    };
    int failed = cmocka_run_group_tests_name("gguf_mem", mem_tests, NULL, NULL);
    if (failed)
        return failed;
    char probe[4096];
    struct stat st;
    if (!data_dir() ||
        (snprintf(probe, sizeof(probe), "%s/models/stories260K.gguf", data_dir()), 0) ||
        stat(probe, &st) != 0) {
        fprintf(stderr, "PICOLM_TEST_DATA not set or has no models/: shared-file tests skipped\n");
        return 77;
    }
    return cmocka_run_group_tests_name("gguf_data", data_tests, NULL, NULL);
}
