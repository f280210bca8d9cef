/* SPDX-License-Identifier: MIT */
/* Writes a seed corpus for fuzz_gguf into the folder given as argv[1]: a few small valid
 * GGUF files (every value type, a vocabulary, quantized tensors, custom alignment) and
 * hand-made broken ones (truncated, overlapping, bad alignment, nested arrays...). The
 * shared test models are too big to commit or to fuzz from, so seeds are built at run time
 * by run-fuzz.sh and by the fuzz-smoke CTest test. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pl/engine_gguf.h"
#include "pl/engine_types.h"

struct buf {
    uint8_t *p;
    size_t len, cap;
};

static void put(struct buf *b, const void *src, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 1024;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *np = realloc(b->p, cap);
        if (!np) {
            perror("realloc");
            exit(1);
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}
static void u8(struct buf *b, uint8_t v) {
    put(b, &v, 1);
}
static void u32(struct buf *b, uint32_t v) {
    put(b, &v, 4);
}
static void u64(struct buf *b, uint64_t v) {
    put(b, &v, 8);
}
static void str(struct buf *b, const char *s) {
    u64(b, strlen(s));
    put(b, s, strlen(s));
}
static void header(struct buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    put(b, "GGUF", 4);
    u32(b, version);
    u64(b, n_tensors);
    u64(b, n_kv);
}
static void kv_u32(struct buf *b, const char *key, uint32_t v) {
    str(b, key);
    u32(b, PL_GGUF_TYPE_UINT32);
    u32(b, v);
}
static void kv_str(struct buf *b, const char *key, const char *v) {
    str(b, key);
    u32(b, PL_GGUF_TYPE_STRING);
    str(b, v);
}
static void tensor(struct buf *b, const char *name, uint32_t n_dims, uint64_t ne0, uint64_t ne1,
                   uint32_t type, uint64_t offset) {
    str(b, name);
    u32(b, n_dims);
    u64(b, ne0);
    if (n_dims > 1)
        u64(b, ne1);
    u32(b, type);
    u64(b, offset);
}
static void pad(struct buf *b, size_t align) {
    while (b->len % align)
        u8(b, 0);
}
static void fill(struct buf *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        u8(b, (uint8_t)(i * 31 + 7));
}

static const char *dir;
static int n_written;

/* Write the first len bytes of b as dir/name and reset b. */
static void emit_len(struct buf *b, const char *name, size_t len) {
    char path[4096];
    (void)snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b->p, 1, len, f) != len || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
    n_written++;
}
static void emit(struct buf *b, const char *name) {
    emit_len(b, name, b->len);
    b->len = 0;
}

static void all_types(struct buf *b) {
    float f = 0.5f;
    double d = 3.25;
    header(b, 3, 2, 15);
    kv_str(b, "general.architecture", "llama");
    kv_u32(b, "general.alignment", 32);
    str(b, "a.u8"), u32(b, PL_GGUF_TYPE_UINT8), u8(b, 7);
    str(b, "a.i8"), u32(b, PL_GGUF_TYPE_INT8), u8(b, 0xff);
    str(b, "a.u16"), u32(b, PL_GGUF_TYPE_UINT16), u8(b, 1), u8(b, 2);
    str(b, "a.i16"), u32(b, PL_GGUF_TYPE_INT16), u8(b, 1), u8(b, 0x80);
    str(b, "a.i32"), u32(b, PL_GGUF_TYPE_INT32), u32(b, 0x80000000u);
    str(b, "a.f32"), u32(b, PL_GGUF_TYPE_FLOAT32), put(b, &f, 4);
    str(b, "a.bool"), u32(b, PL_GGUF_TYPE_BOOL), u8(b, 1);
    str(b, "a.u64"), u32(b, PL_GGUF_TYPE_UINT64), u64(b, UINT64_MAX);
    str(b, "a.i64"), u32(b, PL_GGUF_TYPE_INT64), u64(b, (uint64_t)INT64_MIN);
    str(b, "a.f64"), u32(b, PL_GGUF_TYPE_FLOAT64), put(b, &d, 8);
    str(b, "a.strs"), u32(b, PL_GGUF_TYPE_ARRAY), u32(b, PL_GGUF_TYPE_STRING), u64(b, 3);
    str(b, "x"), str(b, ""), str(b, "yz");
    str(b, "a.u16s"), u32(b, PL_GGUF_TYPE_ARRAY), u32(b, PL_GGUF_TYPE_UINT16), u64(b, 2);
    u32(b, 0x00020001u);
    str(b, "a.nested"), u32(b, PL_GGUF_TYPE_ARRAY), u32(b, PL_GGUF_TYPE_ARRAY), u64(b, 2);
    u32(b, PL_GGUF_TYPE_INT8), u64(b, 1), u8(b, 5);
    u32(b, PL_GGUF_TYPE_ARRAY), u64(b, 1), u32(b, PL_GGUF_TYPE_STRING), u64(b, 1), str(b, "q");
    tensor(b, "token_embd.weight", 2, 4, 2, PL_GGML_TYPE_F32, 0);
    tensor(b, "output_norm.weight", 1, 4, 1, PL_GGML_TYPE_F16, 32);
    pad(b, 32);
    fill(b, 32 + 8);
}

int main(int argc, char **argv) {
    struct buf b = {0};
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    dir = argv[1];

    /* ---- valid ---- */
    all_types(&b);
    emit(&b, "valid_all_types.gguf");

    header(&b, 2, 0, 0);
    emit(&b, "valid_header_only_v2.gguf");

    header(&b, 3, 0, 6);
    kv_str(&b, "tokenizer.ggml.model", "gpt2");
    str(&b, "tokenizer.ggml.tokens"), u32(&b, PL_GGUF_TYPE_ARRAY), u32(&b, PL_GGUF_TYPE_STRING);
    u64(&b, 4), str(&b, "<s>"), str(&b, "</s>"), str(&b, "\xc4\xa0the"), str(&b, "a");
    str(&b, "tokenizer.ggml.scores"), u32(&b, PL_GGUF_TYPE_ARRAY), u32(&b, PL_GGUF_TYPE_FLOAT32);
    u64(&b, 4), fill(&b, 16);
    str(&b, "tokenizer.ggml.token_type"), u32(&b, PL_GGUF_TYPE_ARRAY), u32(&b, PL_GGUF_TYPE_INT32);
    u64(&b, 4), u32(&b, 3), u32(&b, 3), u32(&b, 1), u32(&b, 1);
    str(&b, "tokenizer.ggml.merges"), u32(&b, PL_GGUF_TYPE_ARRAY), u32(&b, PL_GGUF_TYPE_STRING);
    u64(&b, 1), str(&b, "\xc4\xa0 t");
    str(&b, "tokenizer.ggml.add_bos_token"), u32(&b, PL_GGUF_TYPE_BOOL), u8(&b, 0);
    emit(&b, "valid_vocab.gguf");

    header(&b, 3, 4, 2);
    kv_u32(&b, "general.alignment", 64);
    kv_u32(&b, "llama.block_count", 1);
    tensor(&b, "q4k", 2, 256, 1, PL_GGML_TYPE_Q4_K, 0);   /* 144 bytes */
    tensor(&b, "q6k", 1, 256, 1, PL_GGML_TYPE_Q6_K, 192); /* 210 bytes */
    tensor(&b, "q80", 2, 32, 2, PL_GGML_TYPE_Q8_0, 448);  /* 68 bytes */
    tensor(&b, "q40", 1, 64, 1, PL_GGML_TYPE_Q4_0, 576);  /* 36 bytes */
    pad(&b, 64);
    fill(&b, 576 + 36);
    emit(&b, "valid_quant_align64.gguf");

    /* ---- broken ---- */
    all_types(&b);
    emit_len(&b, "broken_truncated_in_kvs.gguf", 100);
    emit_len(&b, "broken_truncated_in_tensors.gguf", b.len - 60);
    emit_len(&b, "broken_truncated_in_data.gguf", b.len - 1);
    b.len = 0;

    header(&b, 3, 2, 0);
    tensor(&b, "a", 1, 16, 1, PL_GGML_TYPE_F32, 0);
    tensor(&b, "b", 1, 8, 1, PL_GGML_TYPE_F32, 32);
    pad(&b, 32);
    fill(&b, 64);
    emit(&b, "broken_overlap.gguf");

    header(&b, 3, 0, 1);
    kv_u32(&b, "general.alignment", 3);
    emit(&b, "broken_alignment.gguf");

    header(&b, 3, 0, 1);
    str(&b, "bomb"), u32(&b, PL_GGUF_TYPE_ARRAY);
    for (int i = 0; i < 12; i++)
        u32(&b, PL_GGUF_TYPE_ARRAY), u64(&b, 1);
    u32(&b, PL_GGUF_TYPE_UINT8), u64(&b, 0);
    emit(&b, "broken_nested_arrays.gguf");

    header(&b, 3, 1, 0);
    tensor(&b, "t", 1, 32, 1, 99, 0);
    pad(&b, 32);
    fill(&b, 128);
    emit(&b, "broken_tensor_type.gguf");

    header(&b, 3, 0, 2);
    kv_u32(&b, "k", 1);
    kv_u32(&b, "k", 2);
    emit(&b, "broken_duplicate_key.gguf");

    header(&b, 0x03000000u, 0, 0);
    emit(&b, "broken_big_endian.gguf");

    header(&b, 3, 0, 1);
    str(&b, "s"), u32(&b, PL_GGUF_TYPE_ARRAY), u32(&b, PL_GGUF_TYPE_STRING),
        u64(&b, (uint64_t)1 << 62);
    emit(&b, "broken_array_len.gguf");

    free(b.p);
    printf("%d seeds written to %s\n", n_written, dir);
    return 0;
}
