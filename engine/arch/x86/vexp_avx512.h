/* SPDX-License-Identifier: MIT */
/* exp() of 16 floats with AVX-512F, for the attention kernel's softmax and the SwiGLU
 * activation: the reduction by ln 2 (n = round(x / ln 2), r = x - n ln 2 with ln 2 split in
 * two parts so n ln 2 is exact enough), a degree-7 Taylor polynomial in r (|r| <= ln 2 / 2:
 * relative error below 1e-8, a few ulp of expf), then 2^n by VSCALEFPS. No branch, no libm
 * call. Include from a file compiled with -mavx512f. */
#ifndef PL_ENGINE_VEXP_AVX512_H
#define PL_ENGINE_VEXP_AVX512_H

#include <immintrin.h>

#include "vexp_coef.h"

/* exp(x) for x <= 0; 0 below -104 (where expf is 0 too) and for -inf. */
static inline __attribute__((always_inline)) __m512 pl_vexp_nonpos(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(PL_VEXP_MIN));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(PL_VEXP_LOG2E)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(PL_VEXP_LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(PL_VEXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(PL_VEXP_C7);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(PL_VEXP_C6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(PL_VEXP_C5));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(PL_VEXP_C4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(PL_VEXP_C3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(PL_VEXP_C2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

#endif
