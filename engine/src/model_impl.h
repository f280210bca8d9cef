/* SPDX-License-Identifier: MIT */
/* Engine-private layout of a loaded model: hparams plus one descriptor per weight tensor.
 * model.c fills it, forward.c reads it. Every weight is reached through the data pointer of
 * its struct pl_weight, so moving the weights (e.g. onto huge pages) changes only them. */
#ifndef PL_ENGINE_MODEL_IMPL_H
#define PL_ENGINE_MODEL_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pl/engine_model.h"
#include "threadpool.h"

struct pl_quant_kernels;

/* A matrix [n_rows][n_cols] in ggml order (ne0 = n_cols), of element type `type`. */
struct pl_weight {
    const void *data; /* n_rows * row_bytes bytes, read-only */
    uint32_t type;    /* enum pl_ggml_type */
    uint32_t n_cols;  /* ne0: the input dimension */
    uint32_t n_rows;  /* ne1: the output dimension */
    size_t row_bytes;
    const struct pl_quant_kernels *k;  /* kernels of type */
    const struct pl_quant_kernels *vk; /* kernels of k->vec_dot_type (activations) */
    size_t act_row_bytes;              /* bytes of one activation row in vec_dot_type */
    const char *name;                  /* tensor name (inside the gguf object) */
    /* Rows repacked at load into the tiled kernel's own layout (pl_mm_repack_weight): only
     * that kernel (pl_mm_weight_kernel) may read them, never the quant table's vec_dot. */
    bool packed;
};

/* Small vectors (norm weights, biases) are copied to f32 at load time: [n] floats. */
struct pl_vec {
    float *data; /* owned; NULL when the (optional) tensor is absent */
    uint32_t n;
};

struct pl_layer {
    struct pl_vec attn_norm;  /* [n_embd] */
    struct pl_weight wq;      /* [n_embd (n_head * head_dim)][n_embd] */
    struct pl_weight wk;      /* [n_head_kv * head_dim][n_embd] */
    struct pl_weight wv;      /* [n_head_kv * head_dim][n_embd] */
    struct pl_weight wo;      /* [n_embd][n_head * head_dim] */
    struct pl_vec bq, bk, bv; /* optional biases: [q_dim], [kv_dim], [kv_dim] */
    struct pl_vec bo;         /* optional: [n_embd] */
    struct pl_vec ffn_norm;   /* [n_embd] */
    struct pl_weight w_gate;  /* [n_ff][n_embd] */
    struct pl_weight w_up;    /* [n_ff][n_embd] */
    struct pl_weight w_down;  /* [n_embd][n_ff] */
};

/* The matrices of a layer, for array initialisers: { PL_LAYER_MATS(l) }. */
#define PL_LAYER_N_MATS 7
#define PL_LAYER_MATS(l)                                                                           \
    &(l)->wq, &(l)->wk, &(l)->wv, &(l)->wo, &(l)->w_gate, &(l)->w_up, &(l)->w_down

struct pl_model {
    struct pl_model_hparams hp;
    struct pl_gguf *gguf; /* owns the mapping the weights point into */
    struct pl_tokenizer *tok;
    uint32_t n_threads;         /* resolved: >= 1 */
    enum pl_threadpool_pin pin; /* how each context's pool is pinned (threadpool.h) */
    bool idle_yield;            /* each context's pool: pl_threadpool_set_idle_yield() */

    struct pl_weight tok_embd; /* [n_vocab][n_embd]; any type with to_f32 */
    struct pl_vec output_norm; /* [n_embd] */
    struct pl_weight output;   /* [n_vocab][n_embd]; == tok_embd when tied */
    struct pl_vec rope_freqs;  /* optional per-pair divisors [n_rot / 2] (llama 3) */
    struct pl_layer *layers;   /* [n_layer] */
    void *wcopy;               /* pl_model_place_weights()'s mapping, or NULL */
    size_t wcopy_bytes;
    uint32_t n_packed; /* matrices repacked at relocation (pl_mm_repack_weight) */
};

#endif
