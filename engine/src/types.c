/* SPDX-License-Identifier: MIT */
/* The ggml type table: block geometry of every type id GGUF files may name. Sizes follow
 * the block layouts in ggml's ggml-common.h (checked by _Static_assert in quant_blocks.h
 * for the types we compute with). */
#include "pl/engine_types.h"

#include <errno.h>

#include "pl/pl_util.h"

static const struct pl_type_info types[_PL_GGML_TYPE_MAX] = {
    [PL_GGML_TYPE_F32] = {"F32", 1, 4, true},
    [PL_GGML_TYPE_F16] = {"F16", 1, 2, true},
    [PL_GGML_TYPE_Q4_0] = {"Q4_0", 32, 18, true},
    [PL_GGML_TYPE_Q4_1] = {"Q4_1", 32, 20, true},
    [PL_GGML_TYPE_Q5_0] = {"Q5_0", 32, 22, true},
    [PL_GGML_TYPE_Q5_1] = {"Q5_1", 32, 24, true},
    [PL_GGML_TYPE_Q8_0] = {"Q8_0", 32, 34, true},
    [PL_GGML_TYPE_Q8_1] = {"Q8_1", 32, 36, false},
    [PL_GGML_TYPE_Q2_K] = {"Q2_K", 256, 84, true},
    [PL_GGML_TYPE_Q3_K] = {"Q3_K", 256, 110, true},
    [PL_GGML_TYPE_Q4_K] = {"Q4_K", 256, 144, true},
    [PL_GGML_TYPE_Q5_K] = {"Q5_K", 256, 176, true},
    [PL_GGML_TYPE_Q6_K] = {"Q6_K", 256, 210, true},
    [PL_GGML_TYPE_Q8_K] = {"Q8_K", 256, 292, false},
    [PL_GGML_TYPE_IQ2_XXS] = {"IQ2_XXS", 256, 66, false},
    [PL_GGML_TYPE_IQ2_XS] = {"IQ2_XS", 256, 74, false},
    [PL_GGML_TYPE_IQ3_XXS] = {"IQ3_XXS", 256, 98, false},
    [PL_GGML_TYPE_IQ1_S] = {"IQ1_S", 256, 50, false},
    [PL_GGML_TYPE_IQ4_NL] = {"IQ4_NL", 32, 18, false},
    [PL_GGML_TYPE_IQ3_S] = {"IQ3_S", 256, 110, false},
    [PL_GGML_TYPE_IQ2_S] = {"IQ2_S", 256, 82, false},
    [PL_GGML_TYPE_IQ4_XS] = {"IQ4_XS", 256, 136, false},
    [PL_GGML_TYPE_I8] = {"I8", 1, 1, false},
    [PL_GGML_TYPE_I16] = {"I16", 1, 2, false},
    [PL_GGML_TYPE_I32] = {"I32", 1, 4, false},
    [PL_GGML_TYPE_I64] = {"I64", 1, 8, false},
    [PL_GGML_TYPE_F64] = {"F64", 1, 8, false},
    [PL_GGML_TYPE_IQ1_M] = {"IQ1_M", 256, 56, false},
    [PL_GGML_TYPE_BF16] = {"BF16", 1, 2, true},
    [PL_GGML_TYPE_TQ1_0] = {"TQ1_0", 256, 54, false},
    [PL_GGML_TYPE_TQ2_0] = {"TQ2_0", 256, 66, false},
    [PL_GGML_TYPE_MXFP4] = {"MXFP4", 32, 17, false},
};

const struct pl_type_info *pl_type_info(uint32_t t) {
    if (t >= _PL_GGML_TYPE_MAX || !types[t].name)
        return NULL;
    return &types[t];
}

int pl_type_row_bytes(uint32_t t, uint64_t n, uint64_t *ret_bytes) {
    const struct pl_type_info *ti = pl_type_info(t);
    uint64_t bytes;
    if (!ti || n % ti->blck_elems != 0)
        return -EINVAL;
    if (pl_mul_overflow(n / ti->blck_elems, (uint64_t)ti->blck_bytes, &bytes))
        return -EOVERFLOW;
    *ret_bytes = bytes;
    return 0;
}
