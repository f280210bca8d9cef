/* SPDX-License-Identifier: MIT */
/* vec_dot and vec_dotn (pl/engine_quant.h) over one multi-token kernel
 * fn(n, w, x, out, NT) of NT activation rows (a function, or a function-like macro), for the
 * SIMD backends (engine/arch/x86, engine/arch/arm): vec_dot is NT = 1; vec_dotn passes nx
 * (2 .. PL_QUANT_DOTN_MAX) as a constant NT, so the kernel's loops over tokens unroll. */
#ifndef PL_ENGINE_QUANT_DOTN_H
#define PL_ENGINE_QUANT_DOTN_H

#include <stdint.h>

#include "pl/engine_quant.h"

#define PL_QUANT_DEFINE_DOT1(name, fn)                                                             \
    static float name(int64_t n, const void *restrict w, const void *restrict x1) {                \
        const void *const x[1] = {x1};                                                             \
        float r;                                                                                   \
        fn(n, w, x, &r, 1);                                                                        \
        return r;                                                                                  \
    }

#define PL_QUANT_DEFINE_DOTN(name, fn)                                                             \
    static void name(int64_t n, const void *restrict w, const void *const *x, uint32_t nx,         \
                     float *out) {                                                                 \
        switch (nx) {                                                                              \
        case 8:                                                                                    \
            fn(n, w, x, out, 8);                                                                   \
            break;                                                                                 \
        case 7:                                                                                    \
            fn(n, w, x, out, 7);                                                                   \
            break;                                                                                 \
        case 6:                                                                                    \
            fn(n, w, x, out, 6);                                                                   \
            break;                                                                                 \
        case 5:                                                                                    \
            fn(n, w, x, out, 5);                                                                   \
            break;                                                                                 \
        case 4:                                                                                    \
            fn(n, w, x, out, 4);                                                                   \
            break;                                                                                 \
        case 3:                                                                                    \
            fn(n, w, x, out, 3);                                                                   \
            break;                                                                                 \
        default:                                                                                   \
            fn(n, w, x, out, 2);                                                                   \
            break;                                                                                 \
        }                                                                                          \
    }
_Static_assert(PL_QUANT_DOTN_MAX == 8, "PL_QUANT_DEFINE_DOTN covers 2 .. 8 tokens");

#endif
