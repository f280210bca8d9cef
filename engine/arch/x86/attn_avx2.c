/* SPDX-License-Identifier: MIT */
/* Attention with AVX2 (see engine/src/attn.h): attn_simd.h's kernel with a block's 16 slots
 * in two ymm (lo: slots 0..7, hi: 8..15), for CPUs without AVX-512; before it they ran the
 * scalar kernel, whose share of a step grows with the context. Fewer chains and accumulators
 * than the AVX-512 instance, as each takes two of the 16 ymm registers. Compiled with -mavx2
 * -mfma -mf16c; attn.c calls it only on CPUs that have them, head_dim % 16 == 0. */
#include <immintrin.h>
#include <stdint.h>

#include "vexp_avx2.h"

#define INLINE static inline __attribute__((always_inline))

typedef struct {
    __m256 lo, hi;
} vf;
typedef vf vmask; /* all-ones lanes: the valid slots */

INLINE vf vf_zero(void) {
    return (vf){_mm256_setzero_ps(), _mm256_setzero_ps()};
}
INLINE vf vf_set1(float x) {
    const __m256 v = _mm256_set1_ps(x);
    return (vf){v, v};
}
INLINE vf vf_add(vf a, vf b) {
    return (vf){_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)};
}
INLINE vf vf_sub(vf a, vf b) {
    return (vf){_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)};
}
INLINE vf vf_mul(vf a, vf b) {
    return (vf){_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)};
}
INLINE vf vf_fmadd(vf a, vf b, vf c) {
    return (vf){_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
INLINE vf vf_loadu(const float *p) {
    return (vf){_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)};
}
INLINE vf vf_loadu_bytes(const uint8_t *p) {
    return vf_loadu((const float *)(const void *)p);
}
INLINE void vf_storeu(float *p, vf x) {
    _mm256_storeu_ps(p, x.lo);
    _mm256_storeu_ps(p + 8, x.hi);
}
INLINE vf vf_load_f16(const uint8_t *p) {
    return (vf){_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p)),
                _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p + 16)))};
}
INLINE __m256 round8_f16(__m256 x) {
    return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
INLINE vf vf_round_f16(vf x) {
    return (vf){round8_f16(x.lo), round8_f16(x.hi)};
}
/* Across the 16 lanes: halves, then quarters, ... (the AVX-512 reductions' order). */
INLINE float vf_rmax(vf x) {
    __m256 m = _mm256_max_ps(x.lo, x.hi);
    __m128 q = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    q = _mm_max_ps(q, _mm_movehl_ps(q, q));
    q = _mm_max_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}
INLINE float vf_radd(vf x) {
    __m256 s = _mm256_add_ps(x.lo, x.hi);
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}
INLINE float vf_first(vf x) {
    return _mm256_cvtss_f32(x.lo);
}
INLINE vf vf_exp_nonpos(vf x) {
    return (vf){pl_vexp8_nonpos(x.lo), pl_vexp8_nonpos(x.hi)};
}
INLINE vmask vm_first(uint32_t n) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i k = _mm256_set1_epi32((int)(n >= 16 ? 16 : n));
    return (vmask){
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(k, idx)),
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(k, _mm256_add_epi32(idx, _mm256_set1_epi32(8))))};
}
INLINE vf vf_blend(vmask m, vf fill, vf x) {
    return (vf){_mm256_blendv_ps(fill.lo, x.lo, m.lo), _mm256_blendv_ps(fill.hi, x.hi, m.hi)};
}
INLINE vf vf_maskz(vmask m, vf x) {
    return (vf){_mm256_and_ps(m.lo, x.lo), _mm256_and_ps(m.hi, x.hi)};
}

#define ATTN_ITEM pl_attn_item_avx2
#define ATTN_SC_CHAINS 4 /* 4 heads one chain each, 2 heads 2, 1 head 4 */
#define ATTN_PV_ACC 4    /* 4 heads one chunk at a time, 2 heads 2, 1 head 4 */
#include "attn_simd.h"
