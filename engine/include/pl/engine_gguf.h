/* SPDX-License-Identifier: MIT */
/* GGUF v2/v3 reader: a bounds-checked parse of the header, metadata and tensor infos of a
 * file mapped read-only (or of a caller's buffer). The file is untrusted input: every
 * count, length, offset and size is checked; a malformed file yields -PL_ERR_FORMAT and a
 * message naming the field and its byte offset. Used by the model loader, the tokenizer,
 * `picolm info` and the fuzz target. */
#ifndef PL_ENGINE_ENGINE_GGUF_H
#define PL_ENGINE_ENGINE_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum pl_gguf_type {
    PL_GGUF_TYPE_UINT8 = 0,
    PL_GGUF_TYPE_INT8 = 1,
    PL_GGUF_TYPE_UINT16 = 2,
    PL_GGUF_TYPE_INT16 = 3,
    PL_GGUF_TYPE_UINT32 = 4,
    PL_GGUF_TYPE_INT32 = 5,
    PL_GGUF_TYPE_FLOAT32 = 6,
    PL_GGUF_TYPE_BOOL = 7,
    PL_GGUF_TYPE_STRING = 8,
    PL_GGUF_TYPE_ARRAY = 9,
    PL_GGUF_TYPE_UINT64 = 10,
    PL_GGUF_TYPE_INT64 = 11,
    PL_GGUF_TYPE_FLOAT64 = 12,
    _PL_GGUF_TYPE_MAX
};

/* Caps on what a file may declare (beyond them the file is rejected as malformed). */
#define PL_GGUF_MAX_KV 65536u
#define PL_GGUF_MAX_TENSORS 1048576u
#define PL_GGUF_MAX_KEY_LEN 65535u
#define PL_GGUF_MAX_STRING_LEN (64u << 20)
#define PL_GGUF_MAX_ARRAY_LEN (64u << 20)
#define PL_GGUF_MAX_DIMS 4u
#define PL_GGUF_MAX_NAME_LEN 255u  /* tensor names, as ggml's GGML_MAX_NAME - 1 */
#define PL_GGUF_MAX_ARRAY_DEPTH 8u /* arrays of arrays: nesting levels, the kv's own included */

/* A string inside the file: not NUL-terminated. */
struct pl_gguf_str {
    const char *ptr;
    uint64_t len;
};

/* An array value. Numeric elements are packed little-endian at data (read them with
 * memcpy; they may be unaligned). String elements: use pl_gguf_arr_str(). Nested arrays
 * are parsed and bounds-checked but not exposed (type PL_GGUF_TYPE_ARRAY, data NULL). */
struct pl_gguf_arr {
    uint32_t type; /* enum pl_gguf_type of each element */
    uint64_t n;
    const void *data;
    const uint64_t *str_offsets; /* for string arrays: offset of element i's length field,
                                    relative to data; owned by the reader */
};

struct pl_gguf_kv {
    struct pl_gguf_str key;
    uint32_t type;     /* enum pl_gguf_type */
    uint64_t file_off; /* byte offset of the key in the file, for error messages */
    union {
        uint64_t u64; /* every unsigned integer type and bool, widened */
        int64_t i64;  /* every signed integer type, widened */
        double f64;   /* FLOAT32 and FLOAT64, widened */
        struct pl_gguf_str str;
        struct pl_gguf_arr arr;
    } v;
};

struct pl_gguf_tensor {
    char name[PL_GGUF_MAX_NAME_LEN + 1]; /* NUL-terminated copy */
    uint32_t type;                       /* enum pl_ggml_type */
    uint32_t n_dims;
    uint64_t ne[PL_GGUF_MAX_DIMS]; /* ggml order: ne[0] = columns; unused dims are 1 */
    uint64_t n_elems;
    uint64_t offset; /* from the start of the file, aligned */
    uint64_t n_bytes;
    const void *data; /* inside the mapping */
};

struct pl_gguf;

/* Map path read-only and parse it. Returns 0 and sets *ret, or a negative code with a
 * message in err (if err_len > 0; err is "" on success):
 *   -errno               open/fstat/mmap failed; -EINVAL: path is not a regular file;
 *   -ENOMEM              out of memory;
 *   -PL_ERR_UNSUPPORTED  a well-formed file this reader does not handle: GGUF version 1,
 *                        a version above 3, a big-endian file (version reads byte-swapped),
 *                        or a tensor whose type id pl_type_info() does not know;
 *   -PL_ERR_FORMAT       anything malformed (truncation, caps, bad counts, types, dims,
 *                        alignment, offsets, overlaps, duplicate keys/names...).
 * Messages name the item, the field and the byte offset, e.g.
 * "gguf: tensor 3 'blk.0.attn_q.weight': data [offset 1234, 4096 bytes] ends past end of
 * file (size 2000) (at byte 812)". Rules beyond the GGUF spec: keys and tensor names are
 * non-empty, names have no NUL byte, every ne >= 1, bool values are 0 or 1,
 * `general.alignment` is a uint32 power of two. The data section starts at the first
 * alignment boundary after the tensor infos (for a file without tensors it may be the
 * file size when the padding is missing). Every pointer the accessors return (kvs, strings,
 * arrays, tensors, tensor data) points into the mapping or the reader and stays valid until
 * pl_gguf_close(). The reader is immutable after open: concurrent lookups are safe. The file
 * must not be truncated while mapped (reads would fault with SIGBUS); weights that must
 * outlive that risk are copied out by the loader. */
int pl_gguf_open(const char *path, struct pl_gguf **ret, char *err, size_t err_len);

/* Parse a caller's buffer (borrowed: it must outlive the returned object). Same errors,
 * plus -EINVAL when ret is NULL or data is NULL with len > 0. */
int pl_gguf_open_mem(const void *data, size_t len, struct pl_gguf **ret, char *err, size_t err_len);

/* Unmap and free; NULL is fine. */
void pl_gguf_close(struct pl_gguf *g);

uint32_t pl_gguf_version(const struct pl_gguf *g);
uint64_t pl_gguf_alignment(const struct pl_gguf *g);
uint64_t pl_gguf_file_size(const struct pl_gguf *g);
const void *pl_gguf_base(const struct pl_gguf *g);     /* start of the mapping */
uint64_t pl_gguf_data_offset(const struct pl_gguf *g); /* start of the tensor data section */
/* True when the bytes are this object's own read-only file mapping (pl_gguf_open), false for
 * a caller's buffer (pl_gguf_open_mem) or NULL. */
bool pl_gguf_is_mapped(const struct pl_gguf *g);

uint64_t pl_gguf_n_kv(const struct pl_gguf *g);
const struct pl_gguf_kv *pl_gguf_kv_at(const struct pl_gguf *g, uint64_t i); /* NULL past end */
/* Lookup by key; NULL when absent. */
const struct pl_gguf_kv *pl_gguf_find(const struct pl_gguf *g, const char *key);

/* Typed getters. Return 0 and set *ret, -ENOENT when the key is absent, -PL_ERR_FORMAT when
 * it has an incompatible type or its value does not fit (integers of any width and sign
 * are accepted when the value fits; get_f32 accepts FLOAT32/FLOAT64). */
int pl_gguf_get_u32(const struct pl_gguf *g, const char *key, uint32_t *ret);
int pl_gguf_get_u64(const struct pl_gguf *g, const char *key, uint64_t *ret);
int pl_gguf_get_i32(const struct pl_gguf *g, const char *key, int32_t *ret);
int pl_gguf_get_f32(const struct pl_gguf *g, const char *key, float *ret);
int pl_gguf_get_bool(const struct pl_gguf *g, const char *key, bool *ret);
int pl_gguf_get_str(const struct pl_gguf *g, const char *key, struct pl_gguf_str *ret);
/* An array with elements of type elem_type (or any type when elem_type is _PL_GGUF_TYPE_MAX). */
int pl_gguf_get_arr(const struct pl_gguf *g, const char *key, uint32_t elem_type,
                    struct pl_gguf_arr *ret);

/* Element i of a string array; 0, or -EINVAL when arr is no string array or i >= n. */
int pl_gguf_arr_str(const struct pl_gguf_arr *arr, uint64_t i, struct pl_gguf_str *ret);

uint64_t pl_gguf_n_tensors(const struct pl_gguf *g);
const struct pl_gguf_tensor *pl_gguf_tensor_at(const struct pl_gguf *g, uint64_t i);
const struct pl_gguf_tensor *pl_gguf_find_tensor(const struct pl_gguf *g, const char *name);

/* Compare a file string with a C string. */
bool pl_gguf_str_eq(struct pl_gguf_str s, const char *c);

#endif
