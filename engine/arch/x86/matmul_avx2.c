/* SPDX-License-Identifier: MIT */
/* The decode step's element-wise kernels with AVX2 and FMA, for CPUs without AVX-512 (chosen
 * by matmul.c; compiled with -mavx2 -mfma): SwiGLU and RMSNorm, as matmul_avx512.c's. On
 * those CPUs every FFN row went through libm's expf one element at a time. */
#include "matmul.h"
#include "vexp_coef.h"

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

/* Lanes [0, left) of 8 (left < 8: a tail) as an AVX2 load/store mask. */
static inline __m256i lane_mask(size_t left) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const int k = left >= 8 ? 8 : (int)left;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), idx);
}

/* 2^n for integer-valued n in [-76, 0] (a normal float), built in the exponent field. */
static inline __m256 pow2i(__m256i n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
}

/* exp(x) for x <= 0, vexp_avx512.h's pl_vexp_nonpos on 8 lanes (vexp_coef.h's steps and
 * constants). AVX2 has no VSCALEFPS: 2^n (n down to -150, below the normal floats) is
 * applied as two normal powers of two, 2^(n - n/2) then 2^(n/2), so only the last multiply
 * rounds into the subnormals. 0 below -104 and for -inf; NaN comes out as exp(-104) (the
 * callers keep NaN themselves). */
static inline __m256 vexp_nonpos(__m256 x) {
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
    return _mm256_mul_ps(_mm256_mul_ps(p, pow2i(_mm256_sub_epi32(ni, half))), pow2i(half));
}

void pl_mm_swiglu_avx2(float *out, const float *g, const float *u, size_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    for (size_t i = 0; i < n; i += 8) {
        const __m256i m = lane_mask(n - i);
        const __m256 x = _mm256_maskload_ps(g + i, m);
        /* exp(-|x|); x < 0 takes x e / (1 + e), the rest x / (1 + e) */
        const __m256 e = vexp_nonpos(_mm256_or_ps(x, sign));
        const __m256 neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
        const __m256 num = _mm256_blendv_ps(x, _mm256_mul_ps(x, e), neg);
        const __m256 r = _mm256_div_ps(num, _mm256_add_ps(one, e));
        _mm256_maskstore_ps(out + i, m, _mm256_mul_ps(r, _mm256_maskload_ps(u + i, m)));
    }
}

/* The scalar reference's operations lane by lane (as the AVX-512 kernel): parts 0..3 and
 * 4..7 in two vectors of doubles, the tail's missing lanes adding +0.0, and the same
 * additions combining them in the same order. */
void pl_mm_rmsnorm_avx2(float *restrict y, const float *restrict x, const float *restrict w,
                        uint32_t n, float eps) {
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    for (uint32_t i = 0; i < n; i += 8) {
        const __m256 v = _mm256_maskload_ps(x + i, lane_mask(n - i));
        const __m256 sq = _mm256_mul_ps(v, v);
        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
    }
    /* (p0 + p4, p1 + p5, p2 + p6, p3 + p7), then ((p0 + p4) + (p2 + p6), (p1 + p5) + (p3 + p7)) */
    const __m256d a = _mm256_add_pd(lo, hi);
    const __m128d b = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
    const double sum = _mm_cvtsd_f64(b) + _mm_cvtsd_f64(_mm_unpackhi_pd(b, b));
    const float mean = (float)(sum / n);
    const __m256 scale = _mm256_set1_ps(1.0f / sqrtf(mean + eps));
    for (uint32_t i = 0; i < n; i += 8) {
        const __m256i m = lane_mask(n - i);
        const __m256 v = _mm256_mul_ps(_mm256_maskload_ps(x + i, m), scale);
        _mm256_maskstore_ps(y + i, m, _mm256_mul_ps(v, _mm256_maskload_ps(w + i, m)));
    }
}
