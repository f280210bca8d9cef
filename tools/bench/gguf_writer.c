/* SPDX-License-Identifier: MIT */
/* Streaming GGUF v3 writer (see gguf_writer.h): metadata is serialised into a growing
 * buffer as it is added, tensor infos are kept in an array, and bench_gguf_writer_open()
 * writes both; tensor bytes are then appended with padding to the data alignment. Layout:
 * "GGUF", u32 version, u64 n_tensors, u64 n_kv, kvs, tensor infos, padding, data. */
#include "gguf_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pl/engine_types.h"
#include "pl/pl_err.h"
#include "pl/pl_util.h"

#define GGUF_VERSION 3u
#define GGUF_DEFAULT_ALIGNMENT 32u

struct buf {
    uint8_t *p;
    size_t len, cap;
};

struct tensor_info {
    char name[PL_GGUF_MAX_NAME_LEN + 1];
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[PL_GGUF_MAX_DIMS];
    uint64_t n_bytes;
    uint64_t offset; /* relative to the data section */
};

struct bench_gguf_writer {
    uint32_t alignment;
    struct buf kv; /* serialised key/values */
    uint64_t n_kv;
    char **keys;           /* [n_kv] for the uniqueness check */
    struct tensor_info *t; /* [n_t] */
    uint64_t n_t, cap_t;
    uint64_t data_bytes; /* data section size, padding included */

    FILE *f;
    uint64_t cur;      /* tensor being written */
    uint64_t cur_done; /* bytes of it written */
    uint64_t pos;      /* bytes written in the data section */
};

/* ---- Byte buffer ---- */

static int buf_put(struct buf *b, const void *data, size_t len) {
    if (len > SIZE_MAX - b->len)
        return -EOVERFLOW;
    if (b->len + len > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + len)
            cap = cap > SIZE_MAX / 2 ? b->len + len : cap * 2;
        uint8_t *np = realloc(b->p, cap);
        if (!np)
            return -ENOMEM;
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, len);
    b->len += len;
    return 0;
}

static int put_u32(struct buf *b, uint32_t v) {
    return buf_put(b, &v, sizeof(v)); /* GGUF is little-endian, as this host (asserted) */
}

static int put_u64(struct buf *b, uint64_t v) {
    return buf_put(b, &v, sizeof(v));
}

static int put_str(struct buf *b, const char *s, uint64_t len) {
    int r = put_u64(b, len);
    return r < 0 ? r : buf_put(b, s, len);
}

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "GGUF is little-endian");

/* ---- Writer ---- */

int bench_gguf_writer_new(uint32_t alignment, struct bench_gguf_writer **ret) {
    if (!ret || alignment < 8 || (alignment & (alignment - 1)) != 0)
        return -EINVAL;
    struct bench_gguf_writer *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->alignment = alignment;
    if (alignment != GGUF_DEFAULT_ALIGNMENT) {
        int r = bench_gguf_writer_add_u32(w, "general.alignment", alignment);
        if (r < 0) {
            bench_gguf_writer_free(w);
            return r;
        }
    }
    *ret = w;
    return 0;
}

void bench_gguf_writer_free(struct bench_gguf_writer *w) {
    if (!w)
        return;
    if (w->f)
        (void)fclose(w->f);
    for (uint64_t i = 0; i < w->n_kv; i++)
        free(w->keys[i]);
    free(w->keys);
    free(w->kv.p);
    free(w->t);
    free(w);
}

/* Checks the key and appends "key, value type" to the metadata; the caller appends the
 * value. */
static int kv_begin(struct bench_gguf_writer *w, const char *key, uint64_t key_len, uint32_t type) {
    if (!w || !key || key_len == 0 || key_len > PL_GGUF_MAX_KEY_LEN || w->f)
        return -EINVAL;
    if (w->n_kv >= PL_GGUF_MAX_KV)
        return -E2BIG;
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (strlen(w->keys[i]) == key_len && !memcmp(w->keys[i], key, key_len))
            return -EEXIST;
    char **nk = realloc(w->keys, (w->n_kv + 1) * sizeof(*nk));
    if (!nk)
        return -ENOMEM;
    w->keys = nk;
    char *k = strndup(key, key_len);
    if (!k)
        return -ENOMEM;
    int r = put_str(&w->kv, key, key_len);
    if (r == 0)
        r = put_u32(&w->kv, type);
    if (r < 0) {
        free(k);
        return r;
    }
    w->keys[w->n_kv++] = k;
    return 0;
}

int bench_gguf_writer_add_u32(struct bench_gguf_writer *w, const char *key, uint32_t v) {
    int r = kv_begin(w, key, key ? strlen(key) : 0, PL_GGUF_TYPE_UINT32);
    return r < 0 ? r : put_u32(&w->kv, v);
}

int bench_gguf_writer_add_f32(struct bench_gguf_writer *w, const char *key, float v) {
    int r = kv_begin(w, key, key ? strlen(key) : 0, PL_GGUF_TYPE_FLOAT32);
    return r < 0 ? r : buf_put(&w->kv, &v, sizeof(v));
}

int bench_gguf_writer_add_bool(struct bench_gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    int r = kv_begin(w, key, key ? strlen(key) : 0, PL_GGUF_TYPE_BOOL);
    return r < 0 ? r : buf_put(&w->kv, &b, 1);
}

int bench_gguf_writer_add_str(struct bench_gguf_writer *w, const char *key, const char *v) {
    if (!v)
        return -EINVAL;
    int r = kv_begin(w, key, key ? strlen(key) : 0, PL_GGUF_TYPE_STRING);
    return r < 0 ? r : put_str(&w->kv, v, strlen(v));
}

/* Bytes of one element of a fixed-size GGUF value type; 0 for strings/arrays. */
static size_t scalar_size(uint32_t type) {
    switch ((enum pl_gguf_type)type) {
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

int bench_gguf_writer_copy_kv(struct bench_gguf_writer *w, const struct pl_gguf_kv *kv) {
    if (!kv)
        return -EINVAL;
    size_t sz = scalar_size(kv->type);
    if (kv->type == PL_GGUF_TYPE_ARRAY) {
        const struct pl_gguf_arr *a = &kv->v.arr;
        size_t esz = scalar_size(a->type);
        if (a->type != PL_GGUF_TYPE_STRING && esz == 0)
            return -PL_ERR_UNSUPPORTED; /* nested arrays: the reader does not expose them */
        int r = kv_begin(w, kv->key.ptr, kv->key.len, PL_GGUF_TYPE_ARRAY);
        if (r < 0 || (r = put_u32(&w->kv, a->type)) < 0 || (r = put_u64(&w->kv, a->n)) < 0)
            return r;
        if (esz) {
            uint64_t bytes;
            if (pl_mul_overflow(a->n, (uint64_t)esz, &bytes) || bytes > SIZE_MAX)
                return -EOVERFLOW;
            return buf_put(&w->kv, a->data, (size_t)bytes);
        }
        for (uint64_t i = 0; i < a->n; i++) {
            struct pl_gguf_str s;
            if ((r = pl_gguf_arr_str(a, i, &s)) < 0 || (r = put_str(&w->kv, s.ptr, s.len)) < 0)
                return r;
        }
        return 0;
    }
    int r = kv_begin(w, kv->key.ptr, kv->key.len, kv->type);
    if (r < 0)
        return r;
    if (kv->type == PL_GGUF_TYPE_STRING)
        return put_str(&w->kv, kv->v.str.ptr, kv->v.str.len);
    /* Scalars are widened by the reader: narrow them back to the declared width. */
    uint8_t tmp[8];
    switch ((enum pl_gguf_type)kv->type) {
    case PL_GGUF_TYPE_FLOAT32: {
        float f = (float)kv->v.f64;
        memcpy(tmp, &f, 4);
        break;
    }
    case PL_GGUF_TYPE_FLOAT64:
        memcpy(tmp, &kv->v.f64, 8);
        break;
    case PL_GGUF_TYPE_INT8:
    case PL_GGUF_TYPE_INT16:
    case PL_GGUF_TYPE_INT32:
    case PL_GGUF_TYPE_INT64:
        memcpy(tmp, &kv->v.i64, 8); /* little-endian: the low bytes come first */
        break;
    case PL_GGUF_TYPE_UINT8:
    case PL_GGUF_TYPE_UINT16:
    case PL_GGUF_TYPE_UINT32:
    case PL_GGUF_TYPE_UINT64:
    case PL_GGUF_TYPE_BOOL:
        memcpy(tmp, &kv->v.u64, 8);
        break;
    case PL_GGUF_TYPE_STRING:
    case PL_GGUF_TYPE_ARRAY:
    case _PL_GGUF_TYPE_MAX:
        return -EINVAL;
    }
    return buf_put(&w->kv, tmp, sz);
}

int bench_gguf_writer_add_tensor(struct bench_gguf_writer *w, const char *name, uint32_t type,
                                 uint32_t n_dims, const uint64_t *ne) {
    const struct pl_type_info *ti = pl_type_info(type);
    uint64_t n_elems = 1, row_bytes, n_bytes;

    if (!w || !name || !ne || w->f || !ti || n_dims == 0 || n_dims > PL_GGUF_MAX_DIMS)
        return -EINVAL;
    size_t name_len = strlen(name);
    if (name_len == 0 || name_len > PL_GGUF_MAX_NAME_LEN)
        return -EINVAL;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] == 0 || pl_mul_overflow(n_elems, ne[d], &n_elems))
            return ne[d] == 0 ? -EINVAL : -EOVERFLOW;
    }
    int r = pl_type_row_bytes(type, ne[0], &row_bytes);
    if (r < 0)
        return r;
    if (pl_mul_overflow(row_bytes, n_elems / ne[0], &n_bytes))
        return -EOVERFLOW;
    for (uint64_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name))
            return -EEXIST;
    if (w->n_t >= PL_GGUF_MAX_TENSORS)
        return -E2BIG;
    if (w->n_t == w->cap_t) {
        uint64_t cap = w->cap_t ? w->cap_t * 2 : 64;
        struct tensor_info *nt = realloc(w->t, cap * sizeof(*nt));
        if (!nt)
            return -ENOMEM;
        w->t = nt;
        w->cap_t = cap;
    }
    uint64_t off = w->data_bytes, end;
    if (pl_add_overflow(off, n_bytes, &end) || pl_add_overflow(end, w->alignment - 1, &end))
        return -EOVERFLOW;
    struct tensor_info *t = &w->t[w->n_t++];
    memset(t, 0, sizeof(*t));
    memcpy(t->name, name, name_len);
    t->type = type;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < PL_GGUF_MAX_DIMS; d++)
        t->ne[d] = d < n_dims ? ne[d] : 1;
    t->n_bytes = n_bytes;
    t->offset = off;
    w->data_bytes = end & ~((uint64_t)w->alignment - 1);
    return 0;
}

static int write_all(FILE *f, const void *p, size_t len) {
    if (len && fwrite(p, 1, len, f) != len)
        return errno ? -errno : -EIO;
    return 0;
}

static int write_zeros(FILE *f, uint64_t n) {
    static const uint8_t zeros[64];
    while (n > 0) {
        size_t k = (size_t)PL_MIN(n, (uint64_t)sizeof(zeros));
        int r = write_all(f, zeros, k);
        if (r < 0)
            return r;
        n -= k;
    }
    return 0;
}

int bench_gguf_writer_open(struct bench_gguf_writer *w, const char *path) {
    struct buf h = {0};
    int r, fd;

    if (!w || !path || w->f)
        return -EINVAL;
    if ((r = buf_put(&h, "GGUF", 4)) < 0 || (r = put_u32(&h, GGUF_VERSION)) < 0 ||
        (r = put_u64(&h, w->n_t)) < 0 || (r = put_u64(&h, w->n_kv)) < 0 ||
        (r = buf_put(&h, w->kv.p, w->kv.len)) < 0)
        goto out;
    for (uint64_t i = 0; i < w->n_t; i++) {
        const struct tensor_info *t = &w->t[i];
        if ((r = put_str(&h, t->name, strlen(t->name))) < 0 || (r = put_u32(&h, t->n_dims)) < 0)
            goto out;
        for (uint32_t d = 0; d < t->n_dims; d++)
            if ((r = put_u64(&h, t->ne[d])) < 0)
                goto out;
        if ((r = put_u32(&h, t->type)) < 0 || (r = put_u64(&h, t->offset)) < 0)
            goto out;
    }
    size_t pad = PL_ALIGN_UP(h.len, (size_t)w->alignment) - h.len;

    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        r = -errno;
        goto out;
    }
    w->f = fdopen(fd, "wb");
    if (!w->f) {
        r = -errno;
        (void)close(fd);
        goto out;
    }
    if ((r = write_all(w->f, h.p, h.len)) < 0 || (r = write_zeros(w->f, pad)) < 0)
        goto out;
    w->cur = 0;
    w->cur_done = 0;
    w->pos = 0;
out:
    free(h.p);
    return r;
}

/* Skip finished (or empty) tensors, padding the data up to the next tensor's offset. */
static int advance(struct bench_gguf_writer *w) {
    while (w->cur < w->n_t && w->cur_done == w->t[w->cur].n_bytes) {
        w->cur++;
        w->cur_done = 0;
        uint64_t next = w->cur < w->n_t ? w->t[w->cur].offset : w->data_bytes;
        int r = write_zeros(w->f, next - w->pos);
        if (r < 0)
            return r;
        w->pos = next;
    }
    return 0;
}

int bench_gguf_writer_write(struct bench_gguf_writer *w, const void *data, size_t len) {
    const uint8_t *p = data;
    if (!w || !w->f || (!data && len))
        return -EINVAL;
    while (len > 0) {
        if (w->cur >= w->n_t)
            return -EINVAL;
        uint64_t left = w->t[w->cur].n_bytes - w->cur_done;
        size_t k = (size_t)PL_MIN((uint64_t)len, left);
        int r = write_all(w->f, p, k);
        if (r < 0)
            return r;
        p += k;
        len -= k;
        w->cur_done += k;
        w->pos += k;
        if ((r = advance(w)) < 0)
            return r;
    }
    return 0;
}

int bench_gguf_writer_close(struct bench_gguf_writer *w) {
    if (!w || !w->f)
        return -EINVAL;
    int r = advance(w); /* trailing empty tensors, if any */
    bool complete = w->cur >= w->n_t;
    if (fflush(w->f) != 0 && r == 0)
        r = -errno;
    if (fclose(w->f) != 0 && r == 0)
        r = -errno;
    w->f = NULL;
    if (r == 0 && !complete)
        r = -EINVAL;
    return r;
}
