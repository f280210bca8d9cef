/* SPDX-License-Identifier: MIT */
/* Tensor element types as numbered by GGUF/ggml, and their block geometry. The table is
 * used by the GGUF reader (to size tensors) and by the quant kernels (to dispatch). */
#ifndef PL_ENGINE_ENGINE_TYPES_H
#define PL_ENGINE_ENGINE_TYPES_H

#include <stdbool.h>
#include <stdint.h>

/* Values are the on-disk ggml_type ids; gaps are ids ggml retired. */
enum pl_ggml_type {
    PL_GGML_TYPE_F32 = 0,
    PL_GGML_TYPE_F16 = 1,
    PL_GGML_TYPE_Q4_0 = 2,
    PL_GGML_TYPE_Q4_1 = 3,
    PL_GGML_TYPE_Q5_0 = 6,
    PL_GGML_TYPE_Q5_1 = 7,
    PL_GGML_TYPE_Q8_0 = 8,
    PL_GGML_TYPE_Q8_1 = 9,
    PL_GGML_TYPE_Q2_K = 10,
    PL_GGML_TYPE_Q3_K = 11,
    PL_GGML_TYPE_Q4_K = 12,
    PL_GGML_TYPE_Q5_K = 13,
    PL_GGML_TYPE_Q6_K = 14,
    PL_GGML_TYPE_Q8_K = 15,
    PL_GGML_TYPE_IQ2_XXS = 16,
    PL_GGML_TYPE_IQ2_XS = 17,
    PL_GGML_TYPE_IQ3_XXS = 18,
    PL_GGML_TYPE_IQ1_S = 19,
    PL_GGML_TYPE_IQ4_NL = 20,
    PL_GGML_TYPE_IQ3_S = 21,
    PL_GGML_TYPE_IQ2_S = 22,
    PL_GGML_TYPE_IQ4_XS = 23,
    PL_GGML_TYPE_I8 = 24,
    PL_GGML_TYPE_I16 = 25,
    PL_GGML_TYPE_I32 = 26,
    PL_GGML_TYPE_I64 = 27,
    PL_GGML_TYPE_F64 = 28,
    PL_GGML_TYPE_IQ1_M = 29,
    PL_GGML_TYPE_BF16 = 30,
    PL_GGML_TYPE_TQ1_0 = 34,
    PL_GGML_TYPE_TQ2_0 = 35,
    PL_GGML_TYPE_MXFP4 = 39,
    _PL_GGML_TYPE_MAX = 40
};

struct pl_type_info {
    const char *name;    /* "Q4_K"; NULL for an id that is not a type */
    uint32_t blck_elems; /* elements per block (1 for plain types) */
    uint32_t blck_bytes; /* bytes per block */
    bool compute;        /* this engine can multiply with it (dequantize + dot) */
};

/* Geometry of type id t, or NULL when t is no known type (untrusted ids welcome). */
const struct pl_type_info *pl_type_info(uint32_t t);

/* Bytes of a row of n elements of type t into *ret_bytes. Returns 0, -EINVAL for an
 * unknown type or n not a multiple of the block size, -EOVERFLOW on overflow. */
int pl_type_row_bytes(uint32_t t, uint64_t n, uint64_t *ret_bytes);

#endif
