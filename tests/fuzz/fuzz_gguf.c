/* SPDX-License-Identifier: MIT */
/* libFuzzer target for the GGUF reader: parse the input with pl_gguf_open_mem() and, when it
 * is accepted, walk every kv and tensor through the public accessors, touching every byte
 * they hand out (so ASan sees any pointer that escapes the input). Built only with
 * -DPL_BUILD_FUZZ=ON (clang); run with tests/fuzz/run-fuzz.sh fuzz_gguf SECONDS. */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pl/engine_gguf.h"
#include "pl/engine_types.h"
#include "pl/pl_err.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint8_t sink; /* keeps the reads below from being optimised away */

static void touch(const void *p, uint64_t n) {
    const uint8_t *b = p;
    uint8_t acc = 0;
    for (uint64_t i = 0; i < n; i++)
        acc ^= b[i];
    sink = acc;
}

/* Uses every typed getter on key; each must succeed or fail cleanly. */
static void get_all(const struct pl_gguf *g, const char *key) {
    uint32_t u32;
    uint64_t u64;
    int32_t i32;
    float f;
    bool b;
    struct pl_gguf_str s;
    struct pl_gguf_arr arr;
    if (pl_gguf_get_u32(g, key, &u32) == 0)
        sink = (uint8_t)u32;
    if (pl_gguf_get_u64(g, key, &u64) == 0)
        sink = (uint8_t)u64;
    if (pl_gguf_get_i32(g, key, &i32) == 0)
        sink = (uint8_t)i32;
    if (pl_gguf_get_f32(g, key, &f) == 0)
        sink = (uint8_t)(f == f);
    if (pl_gguf_get_bool(g, key, &b) == 0)
        sink = (uint8_t)b;
    if (pl_gguf_get_str(g, key, &s) == 0)
        touch(s.ptr, s.len);
    if (pl_gguf_get_arr(g, key, _PL_GGUF_TYPE_MAX, &arr) == 0)
        sink = (uint8_t)arr.n;
}

static void walk_array(const struct pl_gguf_arr *arr) {
    static const uint8_t elem_bytes[_PL_GGUF_TYPE_MAX] = {
        [PL_GGUF_TYPE_UINT8] = 1,   [PL_GGUF_TYPE_INT8] = 1,    [PL_GGUF_TYPE_UINT16] = 2,
        [PL_GGUF_TYPE_INT16] = 2,   [PL_GGUF_TYPE_UINT32] = 4,  [PL_GGUF_TYPE_INT32] = 4,
        [PL_GGUF_TYPE_FLOAT32] = 4, [PL_GGUF_TYPE_BOOL] = 1,    [PL_GGUF_TYPE_UINT64] = 8,
        [PL_GGUF_TYPE_INT64] = 8,   [PL_GGUF_TYPE_FLOAT64] = 8,
    };
    struct pl_gguf_str s;
    if (arr->type == PL_GGUF_TYPE_STRING) {
        for (uint64_t i = 0; i < arr->n; i++) {
            if (pl_gguf_arr_str(arr, i, &s) != 0)
                __builtin_trap(); /* every element of an accepted string array is readable */
            touch(s.ptr, s.len);
        }
        if (pl_gguf_arr_str(arr, arr->n, &s) != -EINVAL)
            __builtin_trap();
    } else if (arr->type < _PL_GGUF_TYPE_MAX && elem_bytes[arr->type]) {
        touch(arr->data, arr->n * elem_bytes[arr->type]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct pl_gguf *g = NULL;
    char err[512];
    char key[PL_GGUF_MAX_KEY_LEN + 1];

    int r = pl_gguf_open_mem(data, size, &g, err, sizeof(err));
    if (r < 0) {
        /* A rejection is a project error code with a message. */
        if ((r != -PL_ERR_FORMAT && r != -PL_ERR_UNSUPPORTED && r != -ENOMEM) ||
            strncmp(err, "gguf: ", 6) != 0)
            __builtin_trap();
        return 0;
    }

    sink = (uint8_t)(pl_gguf_version(g) + pl_gguf_alignment(g) + pl_gguf_file_size(g) +
                     pl_gguf_data_offset(g));
    if (pl_gguf_data_offset(g) > size || pl_gguf_base(g) != data)
        __builtin_trap();

    for (uint64_t i = 0; i < pl_gguf_n_kv(g); i++) {
        const struct pl_gguf_kv *kv = pl_gguf_kv_at(g, i);
        touch(kv->key.ptr, kv->key.len);
        if (kv->type == PL_GGUF_TYPE_STRING)
            touch(kv->v.str.ptr, kv->v.str.len);
        else if (kv->type == PL_GGUF_TYPE_ARRAY)
            walk_array(&kv->v.arr);
        /* Look it up by name when the key is a C string: it must come back. */
        if (kv->key.len <= PL_GGUF_MAX_KEY_LEN && !memchr(kv->key.ptr, 0, kv->key.len)) {
            memcpy(key, kv->key.ptr, kv->key.len);
            key[kv->key.len] = '\0';
            if (pl_gguf_find(g, key) != kv)
                __builtin_trap();
            get_all(g, key);
        }
    }
    if (pl_gguf_kv_at(g, pl_gguf_n_kv(g)) != NULL)
        __builtin_trap();

    for (uint64_t i = 0; i < pl_gguf_n_tensors(g); i++) {
        const struct pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
        if (pl_gguf_find_tensor(g, t->name) != t || !pl_type_info(t->type))
            __builtin_trap();
        if (t->offset < pl_gguf_data_offset(g) || t->offset + t->n_bytes > size)
            __builtin_trap();
        touch(t->data, t->n_bytes);
    }
    if (pl_gguf_tensor_at(g, pl_gguf_n_tensors(g)) != NULL)
        __builtin_trap();

    pl_gguf_close(g);
    return 0;
}
