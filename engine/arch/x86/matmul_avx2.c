/* SPDX-License-Identifier: MIT */
/* The decode step's element-wise kernels with AVX2 and FMA, for CPUs without AVX-512 (chosen
 * by matmul.c; compiled with -mavx2 -mfma): SwiGLU and RMSNorm, as matmul_avx512.c's. On
 * those CPUs every FFN row went through libm's expf one element at a time. */
#include "matmul.h"
#include "vexp_avx2.h"

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

/* Lanes [0, left) of 8 (left < 8: a tail) as an AVX2 load/store mask. */
static inline __m256i lane_mask(size_t left) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const int k = left >= 8 ? 8 : (int)left;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), idx);
}

void pl_mm_swiglu_avx2(float *out, const float *g, const float *u, size_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    for (size_t i = 0; i < n; i += 8) {
        const __m256i m = lane_mask(n - i);
        const __m256 x = _mm256_maskload_ps(g + i, m);
        /* exp(-|x|); x < 0 takes x e / (1 + e), the rest x / (1 + e) */
        const __m256 e = pl_vexp8_nonpos(_mm256_or_ps(x, sign));
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
