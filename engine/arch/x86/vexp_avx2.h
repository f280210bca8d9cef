/* SPDX-License-Identifier: MIT */
/* exp() of 8 floats with AVX2 + FMA, for the SwiGLU activation (matmul_avx2.c) and the
 * attention kernel's softmax (attn_avx2.c): vexp_avx512.h's pl_vexp_nonpos on 8 lanes
 * (vexp_coef.h's steps and constants). Include from a file compiled with -mavx2 -mfma. */
#ifndef PL_ENGINE_VEXP_AVX2_H
#define PL_ENGINE_VEXP_AVX2_H

#include <immintrin.h>

#include "vexp_coef.h"

/* 2^n for integer-valued n in [-76, 0] (a normal float), built in the exponent field. */
static inline __attribute__((always_inline)) __m256 pl_vexp8_pow2i(__m256i n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
}

/* exp(x) for x <= 0. AVX2 has no VSCALEFPS: 2^n (n down to -150, below the normal floats) is
 * applied as two normal powers of two, 2^(n - n/2) then 2^(n/2), so only the last multiply
 * rounds into the subnormals. 0 below -104 and for -inf; NaN comes out as exp(-104) (the
 * callers keep NaN themselves). */
static inline __attribute__((always_inline)) __m256 pl_vexp8_nonpos(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(PL_VEXP_MIN));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(PL_VEXP_LOG2E)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(PL_VEXP_LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(PL_VEXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(PL_VEXP_C7);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(PL_VEXP_C6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(PL_VEXP_C5));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(PL_VEXP_C4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(PL_VEXP_C3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(PL_VEXP_C2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i half = _mm256_srai_epi32(ni, 1);
    return _mm256_mul_ps(_mm256_mul_ps(p, pl_vexp8_pow2i(_mm256_sub_epi32(ni, half))),
                         pl_vexp8_pow2i(half));
}

#endif
