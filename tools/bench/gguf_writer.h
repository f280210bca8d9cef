/* SPDX-License-Identifier: MIT */
/* A small streaming GGUF v3 writer for the benchmark tools (picolm-bench mkmodel): collect
 * metadata and tensor declarations in memory, write the header, then stream each tensor's
 * bytes in declaration order, so a model of any size needs only one row in memory. Not part
 * of the engine: the engine only reads GGUF. */
#ifndef PL_TOOLS_BENCH_GGUF_WRITER_H
#define PL_TOOLS_BENCH_GGUF_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pl/engine_gguf.h"

struct bench_gguf_writer;

/* A writer with data alignment `alignment` (a power of two, >= 8; written as
 * general.alignment when it is not the default 32). Returns 0, -EINVAL, -ENOMEM. */
int bench_gguf_writer_new(uint32_t alignment, struct bench_gguf_writer **ret);
/* Frees the writer; an open output file is closed and left as it is (incomplete). */
void bench_gguf_writer_free(struct bench_gguf_writer *w);

/* Metadata, before bench_gguf_writer_open(). Keys must be unique (-EEXIST otherwise).
 * Return 0, -EINVAL (NULL, empty key, writer already open), -EEXIST, -ENOMEM. */
int bench_gguf_writer_add_u32(struct bench_gguf_writer *w, const char *key, uint32_t v);
int bench_gguf_writer_add_f32(struct bench_gguf_writer *w, const char *key, float v);
int bench_gguf_writer_add_bool(struct bench_gguf_writer *w, const char *key, bool v);
int bench_gguf_writer_add_str(struct bench_gguf_writer *w, const char *key, const char *v);
/* Copy one key/value read by the engine's GGUF reader (borrowed), arrays included. Nested
 * arrays, which the reader does not expose, give -PL_ERR_UNSUPPORTED. */
int bench_gguf_writer_copy_kv(struct bench_gguf_writer *w, const struct pl_gguf_kv *kv);

/* Declare a tensor (ggml order: ne[0] = columns); data follows in declaration order.
 * Returns 0, -EINVAL (bad name, type, dims, ne[0] not a multiple of the block size, writer
 * open), -EEXIST (duplicate name), -EOVERFLOW, -ENOMEM. */
int bench_gguf_writer_add_tensor(struct bench_gguf_writer *w, const char *name, uint32_t type,
                                 uint32_t n_dims, const uint64_t *ne);

/* Create path (truncating it) and write header, metadata and tensor infos. Returns 0,
 * -EINVAL (already open), -errno. */
int bench_gguf_writer_open(struct bench_gguf_writer *w, const char *path);
/* Append len bytes of tensor data; crossing the end of a tensor moves on to the next one
 * (alignment padding is inserted). Returns 0, -EINVAL (not open, more bytes than declared),
 * -errno. */
int bench_gguf_writer_write(struct bench_gguf_writer *w, const void *data, size_t len);
/* Finish: check every declared byte was written, flush and close. Returns 0, -EINVAL
 * (not open, data missing), -errno. */
int bench_gguf_writer_close(struct bench_gguf_writer *w);

#endif
