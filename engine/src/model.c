/* SPDX-License-Identifier: MIT */
/* LLaMA model loader: reads the llama.* hyperparameters from GGUF metadata, checks them
 * (the file is untrusted), finds every weight tensor and checks its shape and type, and
 * builds the tokenizer. Weights stay in the read-only mapping of the GGUF reader. Called by
 * the daemon at start-up and by the CLI; forward.c runs the model. */
#include "pl/engine_model.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "matmul.h"
#include "model_impl.h"
#include "pl/engine_gguf.h"
#include "pl/engine_quant.h"
#include "pl/engine_tokenizer.h"
#include "pl/engine_types.h"
#include "pl/pl_err.h"
#include "pl/pl_util.h"

/* Sanity caps on hyperparameters read from the file (well above any LLaMA released so far:
 * 405B has n_embd 16384, 126 layers, 128 heads, n_ff 53248, vocab 128256). */
#define MAX_EMBD (1u << 16)
#define MAX_LAYER 1024u
#define MAX_HEAD 1024u
#define MAX_FF (1u << 20)
#define MAX_VOCAB (1u << 24)
#define MAX_CTX_TRAIN (1u << 24)
#define MAX_THREADS 512u

static int set_err(char *err, size_t err_len, int r, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int set_err(char *err, size_t err_len, int r, const char *fmt, ...) {
    if (err && err_len > 0) {
        va_list ap;
        va_start(ap, fmt);
        (void)vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return r;
}

/* ---- Hyperparameters ---- */

/* "<arch>.<suffix>" into key; the architecture is known to be "llama" here. */
static void arch_key(char *key, size_t len, const char *suffix) {
    (void)snprintf(key, len, "llama.%s", suffix);
}

/* Reads an unsigned key. Absent: required -> -PL_ERR_FORMAT, else *ret = def. */
static int read_u32(const struct pl_gguf *g, const char *suffix, bool required, uint32_t def,
                    uint32_t *ret, char *err, size_t err_len) {
    char key[96];
    arch_key(key, sizeof(key), suffix);
    int r = pl_gguf_get_u32(g, key, ret);
    if (r == -ENOENT) {
        if (required)
            return set_err(err, err_len, -PL_ERR_FORMAT, "model: missing key '%s'", key);
        *ret = def;
        return 0;
    }
    if (r < 0)
        return set_err(err, err_len, -PL_ERR_FORMAT,
                       "model: key '%s' is not an unsigned 32-bit integer", key);
    return 0;
}

static int read_f32(const struct pl_gguf *g, const char *suffix, bool required, float def,
                    float *ret, bool *ret_found, char *err, size_t err_len) {
    char key[96];
    arch_key(key, sizeof(key), suffix);
    int r = pl_gguf_get_f32(g, key, ret);
    if (ret_found)
        *ret_found = r == 0;
    if (r == -ENOENT) {
        if (required)
            return set_err(err, err_len, -PL_ERR_FORMAT, "model: missing key '%s'", key);
        *ret = def;
        return 0;
    }
    if (r < 0)
        return set_err(err, err_len, -PL_ERR_FORMAT, "model: key '%s' is not a float", key);
    if (!isfinite(*ret))
        return set_err(err, err_len, -PL_ERR_FORMAT, "model: key '%s' is not finite", key);
    return 0;
}

static int check_range(const char *what, uint32_t v, uint32_t lo, uint32_t hi, char *err,
                       size_t err_len) {
    if (v < lo || v > hi)
        return set_err(err, err_len, -PL_ERR_FORMAT, "model: %s = %u is out of range [%u, %u]",
                       what, v, lo, hi);
    return 0;
}

static int read_rope_scaling(const struct pl_gguf *g, struct pl_model_hparams *hp, char *err,
                             size_t err_len) {
    struct pl_gguf_str type = {"linear", 6}; /* llama.cpp's default when only a factor is set */
    float factor = 0.0f;
    bool found = false;
    int r;

    r = pl_gguf_get_str(g, "llama.rope.scaling.type", &type);
    if (r < 0 && r != -ENOENT)
        return set_err(err, err_len, -PL_ERR_FORMAT,
                       "model: key 'llama.rope.scaling.type' is not a string");
    if (r == -ENOENT)
        type = (struct pl_gguf_str){"linear", 6};
    r = read_f32(g, "rope.scaling.factor", false, 0.0f, &factor, &found, err, err_len);
    if (r < 0)
        return r;
    if (!found) { /* the older key name */
        r = read_f32(g, "rope.scale_linear", false, 0.0f, &factor, NULL, err, err_len);
        if (r < 0)
            return r;
    }
    if (factor < 0.0f)
        return set_err(err, err_len, -PL_ERR_FORMAT, "model: rope scaling factor %g is negative",
                       (double)factor);
    hp->rope_freq_scale = 1.0f;
    if (pl_gguf_str_eq(type, "none"))
        return 0;
    if (!pl_gguf_str_eq(type, "linear"))
        return set_err(err, err_len, -PL_ERR_UNSUPPORTED,
                       "model: rope scaling type '%.*s' is not supported (none, linear)",
                       (int)PL_MIN(type.len, (uint64_t)32), type.ptr);
    if (factor != 0.0f)
        hp->rope_freq_scale = 1.0f / factor;
    if (!isfinite(hp->rope_freq_scale) || hp->rope_freq_scale <= 0.0f)
        return set_err(err, err_len, -PL_ERR_FORMAT, "model: rope scaling factor %g is unusable",
                       (double)factor);
    return 0;
}

static int read_hparams(const struct pl_gguf *g, struct pl_model_hparams *hp, char *err,
                        size_t err_len) {
    struct pl_gguf_str arch;
    struct pl_gguf_arr tokens;
    uint32_t key_len, val_len;
    int r;

    r = pl_gguf_get_str(g, "general.architecture", &arch);
    if (r == -ENOENT)
        return set_err(err, err_len, -PL_ERR_FORMAT, "model: missing key 'general.architecture'");
    if (r < 0)
        return set_err(err, err_len, -PL_ERR_FORMAT,
                       "model: key 'general.architecture' is not a string");
    if (!pl_gguf_str_eq(arch, "llama")) {
        /* Untrusted string: length-capped and printed as-is between quotes. */
        return set_err(err, err_len, -PL_ERR_UNSUPPORTED,
                       "model: architecture '%.*s' is not supported (only 'llama')",
                       (int)PL_MIN(arch.len, (uint64_t)64), arch.ptr);
    }
    (void)snprintf(hp->arch, sizeof(hp->arch), "llama");

    if ((r = read_u32(g, "context_length", true, 0, &hp->n_ctx_train, err, err_len)) < 0 ||
        (r = read_u32(g, "embedding_length", true, 0, &hp->n_embd, err, err_len)) < 0 ||
        (r = read_u32(g, "block_count", true, 0, &hp->n_layer, err, err_len)) < 0 ||
        (r = read_u32(g, "feed_forward_length", true, 0, &hp->n_ff, err, err_len)) < 0 ||
        (r = read_u32(g, "attention.head_count", true, 0, &hp->n_head, err, err_len)) < 0)
        return r;
    if ((r = check_range("llama.context_length", hp->n_ctx_train, 1, MAX_CTX_TRAIN, err, err_len)) <
            0 ||
        (r = check_range("llama.embedding_length", hp->n_embd, 1, MAX_EMBD, err, err_len)) < 0 ||
        (r = check_range("llama.block_count", hp->n_layer, 1, MAX_LAYER, err, err_len)) < 0 ||
        (r = check_range("llama.feed_forward_length", hp->n_ff, 1, MAX_FF, err, err_len)) < 0 ||
        (r = check_range("llama.attention.head_count", hp->n_head, 1, MAX_HEAD, err, err_len)) < 0)
        return r;
    if ((r = read_u32(g, "attention.head_count_kv", false, hp->n_head, &hp->n_head_kv, err,
                      err_len)) < 0)
        return r;
    if ((r = check_range("llama.attention.head_count_kv", hp->n_head_kv, 1, hp->n_head, err,
                         err_len)) < 0)
        return r;
    if (hp->n_head % hp->n_head_kv != 0)
        return set_err(err, err_len, -PL_ERR_FORMAT,
                       "model: head_count %u is not a multiple of head_count_kv %u", hp->n_head,
                       hp->n_head_kv);
    if (hp->n_embd % hp->n_head != 0)
        return set_err(err, err_len, -PL_ERR_FORMAT,
                       "model: embedding_length %u is not a multiple of head_count %u", hp->n_embd,
                       hp->n_head);
    hp->head_dim = hp->n_embd / hp->n_head;
    /* Explicit per-head sizes different from n_embd / n_head are another architecture. */
    if ((r = read_u32(g, "attention.key_length", false, hp->head_dim, &key_len, err, err_len)) <
            0 ||
        (r = read_u32(g, "attention.value_length", false, hp->head_dim, &val_len, err, err_len)) <
            0)
        return r;
    if (key_len != hp->head_dim || val_len != hp->head_dim)
        return set_err(err, err_len, -PL_ERR_UNSUPPORTED,
                       "model: attention key/value length %u/%u differs from "
                       "embedding_length / head_count = %u",
                       key_len, val_len, hp->head_dim);

    if ((r = read_u32(g, "rope.dimension_count", false, hp->head_dim, &hp->n_rot, err, err_len)) <
        0)
        return r;
    if (hp->n_rot == 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2 != 0)
        return set_err(err, err_len, -PL_ERR_FORMAT,
                       "model: rope.dimension_count %u must be even and in [2, head_dim %u]",
                       hp->n_rot, hp->head_dim);
    if ((r = read_f32(g, "rope.freq_base", false, 10000.0f, &hp->rope_freq_base, NULL, err,
                      err_len)) < 0)
        return r;
    if (hp->rope_freq_base <= 0.0f)
        return set_err(err, err_len, -PL_ERR_FORMAT, "model: rope.freq_base %g must be > 0",
                       (double)hp->rope_freq_base);
    if ((r = read_rope_scaling(g, hp, err, err_len)) < 0)
        return r;
    if ((r = read_f32(g, "attention.layer_norm_rms_epsilon", true, 0.0f, &hp->rms_eps, NULL, err,
                      err_len)) < 0)
        return r;
    if (hp->rms_eps < 0.0f || hp->rms_eps >= 1.0f)
        return set_err(err, err_len, -PL_ERR_FORMAT,
                       "model: attention.layer_norm_rms_epsilon %g is out of range [0, 1)",
                       (double)hp->rms_eps);

    /* Vocabulary size: the explicit key, else the tokenizer's token count. */
    r = pl_gguf_get_u32(g, "llama.vocab_size", &hp->n_vocab);
    if (r == -ENOENT) {
        r = pl_gguf_get_arr(g, "tokenizer.ggml.tokens", PL_GGUF_TYPE_STRING, &tokens);
        if (r < 0)
            return set_err(err, err_len, -PL_ERR_FORMAT,
                           "model: no 'llama.vocab_size' and no string array "
                           "'tokenizer.ggml.tokens'");
        if (tokens.n > MAX_VOCAB)
            return set_err(err, err_len, -PL_ERR_FORMAT,
                           "model: tokenizer.ggml.tokens has %llu entries (max %u)",
                           (unsigned long long)tokens.n, MAX_VOCAB);
        hp->n_vocab = (uint32_t)tokens.n;
    } else if (r < 0) {
        return set_err(err, err_len, -PL_ERR_FORMAT,
                       "model: key 'llama.vocab_size' is not an unsigned 32-bit integer");
    }
    return check_range("vocabulary size", hp->n_vocab, 1, MAX_VOCAB, err, err_len);
}

/* ---- Tensors ---- */

enum use {
    USE_MATMUL = 1, /* needs vec_dot and an activation quantizer */
    USE_ROWS = 2,   /* needs to_f32 (embedding lookup) */
};

/* Fetch tensor `name` of shape [n_cols, n_rows] (ggml order). Absent and optional: *w is
 * zeroed and 0 is returned. */
static int get_weight(struct pl_model *m, const char *name, bool required, uint32_t n_cols,
                      uint32_t n_rows, unsigned use, struct pl_weight *w, char *err,
                      size_t err_len) {
    const struct pl_gguf_tensor *t = pl_gguf_find_tensor(m->gguf, name);
    const struct pl_type_info *ti;
    const struct pl_quant_kernels *k, *vk = NULL;
    uint64_t row_bytes, act_row_bytes = 0, total;

    memset(w, 0, sizeof(*w));
    if (!t) {
        if (required)
            return set_err(err, err_len, -PL_ERR_FORMAT, "model: missing tensor '%s'", name);
        return 0;
    }
    if (t->ne[0] != n_cols || t->ne[1] != n_rows || t->ne[2] != 1 || t->ne[3] != 1)
        return set_err(err, err_len, -PL_ERR_FORMAT,
                       "model: tensor '%s' has shape [%llu, %llu, %llu, %llu], expected "
                       "[%u, %u]",
                       name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                       (unsigned long long)t->ne[2], (unsigned long long)t->ne[3], n_cols, n_rows);
    ti = pl_type_info(t->type);
    k = pl_quant_kernels(t->type);
    bool ok = ti && k;
    if (ok && (use & USE_ROWS))
        ok = k->to_f32 != NULL;
    if (ok && (use & USE_MATMUL)) {
        vk = pl_quant_kernels(k->vec_dot_type);
        ok = k->vec_dot && vk && (vk->from_f32 || k->vec_dot_type == PL_GGML_TYPE_F32) &&
             pl_type_row_bytes(k->vec_dot_type, n_cols, &act_row_bytes) == 0;
    }
    if (!ok)
        return set_err(err, err_len, -PL_ERR_UNSUPPORTED,
                       "model: tensor '%s' has type %s, which this engine cannot compute with",
                       name, ti ? ti->name : "(unknown)");
    if (pl_type_row_bytes(t->type, n_cols, &row_bytes) < 0 ||
        pl_mul_overflow(row_bytes, (uint64_t)n_rows, &total) || total != t->n_bytes)
        return set_err(err, err_len, -PL_ERR_FORMAT,
                       "model: tensor '%s' of type %s: %u columns do not make whole blocks or "
                       "the size %llu is inconsistent",
                       name, ti->name, n_cols, (unsigned long long)t->n_bytes);
    /* Kernels read f32/f16 scalars in place: the GGUF alignment (32 by default) guarantees
     * this for files; a hand-made image might not. */
    if ((uintptr_t)t->data % 4 != 0)
        return set_err(err, err_len, -PL_ERR_UNSUPPORTED,
                       "model: tensor '%s' data is not 4-byte aligned", name);

    w->data = t->data;
    w->type = t->type;
    w->n_cols = n_cols;
    w->n_rows = n_rows;
    w->row_bytes = (size_t)row_bytes;
    w->k = k;
    w->vk = vk;
    w->act_row_bytes = (size_t)act_row_bytes;
    w->name = t->name;
    return 0;
}

/* A 1-D tensor of n elements, copied to f32. */
static int get_vec(struct pl_model *m, const char *name, bool required, uint32_t n,
                   struct pl_vec *v, char *err, size_t err_len) {
    struct pl_weight w;
    int r = get_weight(m, name, required, n, 1, USE_ROWS, &w, err, err_len);
    if (r < 0)
        return r;
    v->data = NULL;
    v->n = 0;
    if (!w.data)
        return 0;
    v->data = malloc((size_t)n * sizeof(float));
    if (!v->data)
        return set_err(err, err_len, -ENOMEM, "model: out of memory");
    w.k->to_f32(w.data, v->data, n);
    for (uint32_t i = 0; i < n; i++)
        if (!isfinite(v->data[i]))
            return set_err(err, err_len, -PL_ERR_FORMAT,
                           "model: tensor '%s' holds a non-finite value at %u", name, i);
    v->n = n;
    return 0;
}

static int load_layer(struct pl_model *m, uint32_t il, char *err, size_t err_len) {
    const struct pl_model_hparams *hp = &m->hp;
    struct pl_layer *l = &m->layers[il];
    uint32_t q_dim = hp->n_head * hp->head_dim, kv_dim = hp->n_head_kv * hp->head_dim;
    char name[PL_GGUF_MAX_NAME_LEN + 1];
    int r;

#define NAME(suffix) ((void)snprintf(name, sizeof(name), "blk.%u." suffix, il), name)
    if ((r = get_vec(m, NAME("attn_norm.weight"), true, hp->n_embd, &l->attn_norm, err, err_len)) <
            0 ||
        (r = get_weight(m, NAME("attn_q.weight"), true, hp->n_embd, q_dim, USE_MATMUL, &l->wq, err,
                        err_len)) < 0 ||
        (r = get_weight(m, NAME("attn_k.weight"), true, hp->n_embd, kv_dim, USE_MATMUL, &l->wk, err,
                        err_len)) < 0 ||
        (r = get_weight(m, NAME("attn_v.weight"), true, hp->n_embd, kv_dim, USE_MATMUL, &l->wv, err,
                        err_len)) < 0 ||
        (r = get_weight(m, NAME("attn_output.weight"), true, q_dim, hp->n_embd, USE_MATMUL, &l->wo,
                        err, err_len)) < 0 ||
        (r = get_vec(m, NAME("attn_q.bias"), false, q_dim, &l->bq, err, err_len)) < 0 ||
        (r = get_vec(m, NAME("attn_k.bias"), false, kv_dim, &l->bk, err, err_len)) < 0 ||
        (r = get_vec(m, NAME("attn_v.bias"), false, kv_dim, &l->bv, err, err_len)) < 0 ||
        (r = get_vec(m, NAME("attn_output.bias"), false, hp->n_embd, &l->bo, err, err_len)) < 0 ||
        (r = get_vec(m, NAME("ffn_norm.weight"), true, hp->n_embd, &l->ffn_norm, err, err_len)) <
            0 ||
        (r = get_weight(m, NAME("ffn_gate.weight"), true, hp->n_embd, hp->n_ff, USE_MATMUL,
                        &l->w_gate, err, err_len)) < 0 ||
        (r = get_weight(m, NAME("ffn_up.weight"), true, hp->n_embd, hp->n_ff, USE_MATMUL, &l->w_up,
                        err, err_len)) < 0 ||
        (r = get_weight(m, NAME("ffn_down.weight"), true, hp->n_ff, hp->n_embd, USE_MATMUL,
                        &l->w_down, err, err_len)) < 0)
        return r;
#undef NAME
    if (l->bq.data || l->bk.data || l->bv.data)
        m->hp.has_qkv_bias = true;
    return 0;
}

static int load_tensors(struct pl_model *m, char *err, size_t err_len) {
    const struct pl_model_hparams *hp = &m->hp;
    int r;

    m->layers = calloc(hp->n_layer, sizeof(*m->layers));
    if (!m->layers)
        return set_err(err, err_len, -ENOMEM, "model: out of memory");

    if ((r = get_weight(m, "output.weight", false, hp->n_embd, hp->n_vocab, USE_MATMUL, &m->output,
                        err, err_len)) < 0)
        return r;
    m->hp.tied_output = m->output.data == NULL;
    /* Tied: the embedding matrix is also the output projection, so it must multiply too. */
    if ((r = get_weight(m, "token_embd.weight", true, hp->n_embd, hp->n_vocab,
                        USE_ROWS | (m->hp.tied_output ? USE_MATMUL : 0), &m->tok_embd, err,
                        err_len)) < 0)
        return r;
    if (m->hp.tied_output)
        m->output = m->tok_embd;
    if ((r = get_vec(m, "output_norm.weight", true, hp->n_embd, &m->output_norm, err, err_len)) < 0)
        return r;
    if ((r = get_vec(m, "rope_freqs.weight", false, hp->n_rot / 2, &m->rope_freqs, err, err_len)) <
        0)
        return r;
    for (uint32_t i = 0; i < m->rope_freqs.n; i++)
        if (m->rope_freqs.data[i] <= 0.0f)
            return set_err(err, err_len, -PL_ERR_FORMAT,
                           "model: tensor 'rope_freqs.weight' holds %g at %u (must be > 0)",
                           (double)m->rope_freqs.data[i], i);
    for (uint32_t il = 0; il < hp->n_layer; il++)
        if ((r = load_layer(m, il, err, err_len)) < 0)
            return r;

    /* Totals over every tensor in the file, as llama.cpp reports them. */
    for (uint64_t i = 0; i < pl_gguf_n_tensors(m->gguf); i++) {
        const struct pl_gguf_tensor *t = pl_gguf_tensor_at(m->gguf, i);
        m->hp.n_params += t->n_elems;
        m->hp.weight_bytes += t->n_bytes;
    }
    return 0;
}

/* ---- Public API ---- */

static uint32_t default_threads(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        return (uint32_t)PL_MIN(CPU_COUNT(&set), (int)MAX_THREADS);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (uint32_t)PL_MIN(n, (long)MAX_THREADS) : 1;
}

void pl_model_free(struct pl_model *m) {
    if (!m)
        return;
    if (m->layers) {
        for (uint32_t i = 0; i < m->hp.n_layer; i++) {
            struct pl_layer *l = &m->layers[i];
            free(l->attn_norm.data);
            free(l->ffn_norm.data);
            free(l->bq.data);
            free(l->bk.data);
            free(l->bv.data);
            free(l->bo.data);
        }
        free(m->layers);
    }
    free(m->output_norm.data);
    free(m->rope_freqs.data);
    pl_tokenizer_free(m->tok);
    pl_gguf_close(m->gguf);
    if (m->wcopy)
        (void)munmap(m->wcopy, m->wcopy_bytes);
    free(m);
}

/* Takes ownership of g (closed on failure too). */
static int load_from_gguf(struct pl_gguf *g, const struct pl_model_opts *opts,
                          struct pl_model **ret, char *err, size_t err_len) {
    struct pl_model *m = calloc(1, sizeof(*m));
    uint32_t n_tok;
    int r;

    if (!m) {
        pl_gguf_close(g);
        return set_err(err, err_len, -ENOMEM, "model: out of memory");
    }
    m->gguf = g;
    /* Choose the tiled kernels now: the AMX choice asks the kernel for the tile state, which
     * a process must do before it locks down its system calls (picolmd loads first). */
    (void)pl_mm_isa();
    m->n_threads = opts && opts->n_threads ? opts->n_threads : default_threads();
    m->pin = !opts               ? PL_THREADPOOL_PIN_NONE
             : opts->pin_threads ? PL_THREADPOOL_PIN_ALL
             : opts->pin_workers ? PL_THREADPOOL_PIN_WORKERS
                                 : PL_THREADPOOL_PIN_NONE;
    m->idle_yield = opts && opts->yield_idle_workers;

    if ((r = read_hparams(g, &m->hp, err, err_len)) < 0)
        goto fail;
    if ((r = load_tensors(m, err, err_len)) < 0)
        goto fail;
    if ((r = pl_tokenizer_new(g, &m->tok, err, err_len)) < 0)
        goto fail;
    n_tok = pl_tokenizer_n_vocab(m->tok);
    if (n_tok > m->hp.n_vocab) {
        r = set_err(err, err_len, -PL_ERR_FORMAT,
                    "model: the tokenizer has %u tokens but the model only %u embeddings", n_tok,
                    m->hp.n_vocab);
        goto fail;
    }
    if (err && err_len > 0)
        err[0] = '\0';
    *ret = m;
    return 0;

fail:
    pl_model_free(m);
    return r;
}

int pl_model_load(const char *path, const struct pl_model_opts *opts, struct pl_model **ret,
                  char *err, size_t err_len) {
    struct pl_gguf *g = NULL;
    int r;

    if (!path || !ret)
        return set_err(err, err_len, -EINVAL, "model: no path or result pointer");
    if (opts && opts->n_threads > MAX_THREADS)
        return set_err(err, err_len, -EINVAL, "model: n_threads %u exceeds %u", opts->n_threads,
                       MAX_THREADS);
    r = pl_gguf_open(path, &g, err, err_len);
    if (r < 0)
        return r;
    return load_from_gguf(g, opts, ret, err, err_len);
}

int pl_model_load_mem(const void *data, size_t len, const struct pl_model_opts *opts,
                      struct pl_model **ret, char *err, size_t err_len) {
    struct pl_gguf *g = NULL;
    int r;

    if (!data || !ret)
        return set_err(err, err_len, -EINVAL, "model: no data or result pointer");
    if (opts && opts->n_threads > MAX_THREADS)
        return set_err(err, err_len, -EINVAL, "model: n_threads %u exceeds %u", opts->n_threads,
                       MAX_THREADS);
    r = pl_gguf_open_mem(data, len, &g, err, err_len);
    if (r < 0)
        return r;
    return load_from_gguf(g, opts, ret, err, err_len);
}

const struct pl_model_hparams *pl_model_hparams(const struct pl_model *m) {
    return &m->hp;
}

const struct pl_tokenizer *pl_model_tokenizer(const struct pl_model *m) {
    return m->tok;
}

const struct pl_gguf *pl_model_gguf(const struct pl_model *m) {
    return m->gguf;
}
