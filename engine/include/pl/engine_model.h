/* SPDX-License-Identifier: MIT */
/* A LLaMA-family model loaded from GGUF, and inference contexts over it. The model is
 * read-only after loading and shared by every context; a context owns a paged KV cache
 * for up to n_seq sequences and the scratch for batches of up to n_batch tokens, all
 * allocated at creation: pl_ctx_decode() allocates nothing. */
#ifndef PL_ENGINE_ENGINE_MODEL_H
#define PL_ENGINE_ENGINE_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pl_gguf;
struct pl_tokenizer;
struct pl_model;
struct pl_ctx;

struct pl_model_hparams {
    char arch[32]; /* general.architecture */
    uint32_t n_vocab;
    uint32_t n_ctx_train;
    uint32_t n_embd;
    uint32_t n_layer;
    uint32_t n_head;
    uint32_t n_head_kv;
    uint32_t n_ff;
    uint32_t head_dim; /* n_embd / n_head */
    uint32_t n_rot;    /* rope.dimension_count */
    float rope_freq_base;
    float rope_freq_scale; /* 1 / rope.scaling.factor for linear scaling, else 1 */
    float rms_eps;
    bool tied_output; /* output.weight absent: token_embd.weight used */
    bool has_qkv_bias;
    uint64_t n_params;
    uint64_t weight_bytes;
};

struct pl_model_opts {
    uint32_t n_threads;      /* threads of each context's pool; 0: one per CPU we may run on */
    bool pin_threads;        /* pin pool thread i to the i-th allowed CPU (the thread calling
                                pl_ctx_new() becomes thread 0 and is pinned too) */
    bool pin_workers;        /* pin only threads 1.. so (thread 0 stays free to move) */
    bool yield_idle_workers; /* workers waiting for the next step yield the CPU after 2 us
                                instead of pausing until they sleep: for a process whose
                                other threads spin with yields on the same CPUs (picolmd) */
};

/* Load path: parse GGUF, check every tensor's type and shape against the hparams, build the
 * tokenizer. Weights stay in the read-only file mapping. opts may be NULL (defaults).
 * Errors, with a message in err (if err_len > 0) naming the key or tensor:
 *   -errno               open/mmap failed, -ENOMEM;
 *   -EINVAL              bad arguments (NULL path/ret, n_threads > 512);
 *   -PL_ERR_FORMAT       malformed file: missing/ill-typed key, hparams out of range or
 *                        inconsistent, missing tensor, wrong shape;
 *   -PL_ERR_UNSUPPORTED  valid but not handled: architecture other than "llama", a tensor
 *                        type without kernels, rope scaling other than none/linear,
 *                        an unknown tokenizer. */
int pl_model_load(const char *path, const struct pl_model_opts *opts, struct pl_model **ret,
                  char *err, size_t err_len);
/* The same from a GGUF image in memory (borrowed: it must outlive the model). */
int pl_model_load_mem(const void *data, size_t len, const struct pl_model_opts *opts,
                      struct pl_model **ret, char *err, size_t err_len);
void pl_model_free(struct pl_model *m);

/* Weight relocation (model_relocate.c): bytes of the tensor data section (0 for NULL), and
 * copy every weight into dst (cap bytes, aligned to the file's general.alignment; the caller
 * owns it and keeps it alive and unchanged until pl_model_free()) and use it from then on.
 * The matrices whose tiled kernel has a layout of its own (Q4_0, Q8_0 on AVX-512 CPUs) are
 * then rewritten into it in dst (same size; the products stay bit-identical), so dst holds
 * the file's bytes except there. Call before any pl_ctx_new(). Returns 0, -EINVAL (NULL,
 * misaligned dst, a weight outside the data section), -ENOSPC (cap too small). On error the
 * model is unchanged. */
size_t pl_model_relocate_bytes(const struct pl_model *m);
int pl_model_relocate_weights(struct pl_model *m, void *dst, size_t cap);

/* Where the weights live. A decode reads every weight once per token, so this decides its
 * speed: on 4 KiB file pages the TLB misses and the hardware prefetchers' stops at page
 * boundaries cost a third of the bandwidth; on 2 MiB pages the kernels run at the bus's
 * limit. */
enum pl_weights_mode {
    PL_WEIGHTS_AUTO = 0, /* MAP_HUGETLB 2 MiB pages if reserved, else THP, else the file */
    PL_WEIGHTS_THP = 1,  /* anonymous memory with MADV_HUGEPAGE, else the file */
    PL_WEIGHTS_FILE = 2, /* stay in the read-only file mapping */
};

struct pl_weights_info {
    char backing[16];    /* "hugetlb", "thp", "anonymous" (THP disabled), "file" */
    char reason[256];    /* why this backing and why not a better one */
    const void *base;    /* the copy's mapping (NULL when the weights stayed in the file) */
    size_t bytes;        /* length of the copy's mapping (a multiple of 2 MiB), or 0 */
    size_t shift;        /* the copy starts this far into the mapping (< 64, below) */
    size_t weight_bytes; /* bytes of tensor data */
    uint32_t packed;     /* matrices repacked into the tiled kernels' own layout (the copy) */
};

/* Copy the weights per mode into memory the model owns (unmapped by pl_model_free()), made
 * read-only after the copy; the file's pages are released as they are copied, so the peak
 * resident size stays near one copy of the weights. The copy starts `shift` bytes into its
 * mapping, the offset that puts the most matrix bytes on 64-byte boundaries (the file keeps
 * tensors 32-byte aligned, the copy keeps the file's offsets). A failure to get better memory is
 * not an error: the weights stay where they are and info says why. Call once, before any
 * pl_ctx_new(). Returns 0 (info filled), -EINVAL (NULL, bad mode, called twice). */
int pl_model_place_weights(struct pl_model *m, enum pl_weights_mode mode,
                           struct pl_weights_info *ret_info);

/* Parse "auto", "thp" or "file" into *ret: 0, or -EINVAL. */
int pl_weights_mode_parse(const char *s, enum pl_weights_mode *ret);

const struct pl_model_hparams *pl_model_hparams(const struct pl_model *m);
const struct pl_tokenizer *pl_model_tokenizer(const struct pl_model *m);
const struct pl_gguf *pl_model_gguf(const struct pl_model *m);

enum pl_kv_type {
    PL_KV_F16 = 0, /* default */
    PL_KV_F32 = 1,
};

struct pl_ctx_opts {
    uint32_t n_ctx;       /* max tokens per sequence; 0: min(n_ctx_train, 4096) */
    uint32_t n_seq;       /* sequences (sessions) at once; 0: 1 */
    uint32_t n_kv_tokens; /* total KV pool in tokens over all sequences; 0: n_ctx * n_seq */
    uint32_t n_batch;     /* max tokens per pl_ctx_decode(); 0: 512 */
    uint32_t kv_type;     /* enum pl_kv_type */
};

int pl_ctx_new(struct pl_model *m, const struct pl_ctx_opts *opts, struct pl_ctx **ret);
void pl_ctx_free(struct pl_ctx *c);

/* Runs of at least PL_CTX_BATCHED_MIN entries go through the batched (prefill) kernels,
 * shorter ones through the decode kernels. For the types with tiled kernels (Q4_0, Q8_0,
 * Q4_K, Q6_K on AVX-512 / AMX) the two give bit-identical logits; elsewhere a batch is a
 * series of decode products anyway. pl_ctx_decode() still never cuts a batch of at least
 * this many entries into a piece shorter than it, so a prompt gives the same logits however
 * the caller splits it into calls, as long as every call has at least this many entries,
 * whatever kernels a future CPU gets. */
#define PL_CTX_BATCHED_MIN 9u

/* One batched forward step. Entry i feeds token[i] at position pos[i] of sequence seq[i];
 * a sequence's positions must continue what its KV cache holds (pos == current length +
 * the number of earlier entries of the same sequence in this batch).
 * For each entry with logits[i] true, n_vocab floats are written to out, in entry order
 * (logits NULL: the last entry only; out may be NULL when no logits are wanted).
 * Returns 0 (also for n == 0), -EINVAL (NULL arrays, bad token, position, sequence or
 * n > n_batch), -PL_ERR_EXHAUSTED (KV pool full, or a sequence would exceed n_ctx). On any
 * error nothing was changed. Not thread-safe: one call at a time per context (the call
 * itself uses every thread of the context's pool). Allocates nothing. */
struct pl_batch {
    uint32_t n;
    const int32_t *token;
    const int32_t *pos;
    const int32_t *seq;
    const bool *logits;
};
int pl_ctx_decode(struct pl_ctx *c, const struct pl_batch *b, float *out);

/* Tokens the KV cache holds for seq; forget them (returns the blocks to the pool). */
uint32_t pl_ctx_seq_len(const struct pl_ctx *c, int32_t seq);
void pl_ctx_seq_clear(struct pl_ctx *c, int32_t seq);
/* KV pool occupancy in tokens. */
uint32_t pl_ctx_kv_used(const struct pl_ctx *c);
uint32_t pl_ctx_kv_total(const struct pl_ctx *c);

/* ---- KV block sharing (kv_share.c): prefix caching ----
 * The KV pool is made of blocks of PL_CTX_KV_BLOCK_TOKENS token slots, each refcounted: a
 * sequence holds one reference to every block of its table, and a caller (the broker's
 * prefix cache) may hold more. Only full blocks are shared, and a sequence that starts
 * from shared blocks appends into blocks of its own, so a shared block is never written
 * again (no copy-on-write needed). Same threading rule as pl_ctx_decode(). */
#define PL_CTX_KV_BLOCK_TOKENS 16u

/* Ids of blocks [first, first + n) of seq's table into ret_ids (n entries). Only blocks
 * whose every slot is filled may be asked for. Returns 0, -EINVAL (NULL, bad seq, a range
 * beyond the full blocks). */
int pl_ctx_seq_blocks(const struct pl_ctx *c, int32_t seq, uint32_t first, uint32_t n,
                      uint32_t *ret_ids);
/* Start the empty sequence seq with the n_blocks blocks ids (borrowed; each held by the
 * caller, filled, in position order): seq takes a reference to each and its length becomes
 * n_blocks * PL_CTX_KV_BLOCK_TOKENS. Returns 0, -EINVAL (NULL, bad seq, seq not empty, an id
 * out of range or free, too many blocks for n_ctx, a repeated id). */
int pl_ctx_seq_share_prefix(struct pl_ctx *c, int32_t seq, const uint32_t *ids, uint32_t n_blocks);
/* Take one more reference to a held block. Returns 0, -EINVAL (NULL, bad or free id). */
int pl_ctx_kv_block_ref(struct pl_ctx *c, uint32_t id);
/* Drop a reference; the block returns to the pool when nobody holds it. Bad ids are
 * ignored. */
void pl_ctx_kv_block_unref(struct pl_ctx *c, uint32_t id);
/* Take a free block (one reference, held by the caller). Returns 0, -EINVAL,
 * -PL_ERR_EXHAUSTED (no free block). */
int pl_ctx_kv_block_alloc(struct pl_ctx *c, uint32_t *ret_id);
/* Free blocks in the pool. */
uint32_t pl_ctx_kv_free_blocks(const struct pl_ctx *c);
/* Bytes of one block's K and V rows over all layers (the unit of block_read/write), and
 * the cache's element type (enum pl_kv_type), layers and row width (kv_dim). */
size_t pl_ctx_kv_block_bytes(const struct pl_ctx *c);
uint32_t pl_ctx_kv_type(const struct pl_ctx *c);
uint32_t pl_ctx_kv_layers(const struct pl_ctx *c);
uint32_t pl_ctx_kv_dim(const struct pl_ctx *c);
/* Copy a held block out to buf / in from buf (len == pl_ctx_kv_block_bytes()): per layer,
 * the block's K rows then its V rows. Returns 0 or -EINVAL. */
int pl_ctx_kv_block_read(struct pl_ctx *c, uint32_t id, void *buf, size_t len);
int pl_ctx_kv_block_write(struct pl_ctx *c, uint32_t id, const void *buf, size_t len);

#endif
