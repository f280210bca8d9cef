/* SPDX-License-Identifier: MIT */
/* Attention with AVX-512 (see engine/src/attn.h): attn_simd.h's kernel with a block's 16
 * slots in one zmm; the slot masks are opmasks and 2^n in exp() is VSCALEFPS
 * (vexp_avx512.h). Compiled with -mavx512f -mf16c -mfma; attn.c calls it only on CPUs that
 * have them, head_dim % 16 == 0. */
#include <immintrin.h>
#include <stdint.h>

#include "vexp_avx512.h"

#define INLINE static inline __attribute__((always_inline))

typedef __m512 vf;
typedef __mmask16 vmask;

INLINE vf vf_zero(void) {
    return _mm512_setzero_ps();
}
INLINE vf vf_set1(float x) {
    return _mm512_set1_ps(x);
}
INLINE vf vf_add(vf a, vf b) {
    return _mm512_add_ps(a, b);
}
INLINE vf vf_sub(vf a, vf b) {
    return _mm512_sub_ps(a, b);
}
INLINE vf vf_mul(vf a, vf b) {
    return _mm512_mul_ps(a, b);
}
INLINE vf vf_fmadd(vf a, vf b, vf c) {
    return _mm512_fmadd_ps(a, b, c);
}
INLINE vf vf_loadu(const float *p) {
    return _mm512_loadu_ps(p);
}
INLINE vf vf_loadu_bytes(const uint8_t *p) {
    return _mm512_loadu_ps((const float *)(const void *)p);
}
INLINE void vf_storeu(float *p, vf x) {
    _mm512_storeu_ps(p, x);
}
INLINE vf vf_load_f16(const uint8_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
}
INLINE vf vf_round_f16(vf x) {
    return _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
INLINE float vf_rmax(vf x) {
    return _mm512_reduce_max_ps(x);
}
INLINE float vf_radd(vf x) {
    return _mm512_reduce_add_ps(x);
}
INLINE float vf_first(vf x) {
    return _mm512_cvtss_f32(x);
}
INLINE vf vf_exp_nonpos(vf x) {
    return pl_vexp_nonpos(x);
}
INLINE vmask vm_first(uint32_t n) {
    return (vmask)(n >= 16 ? 0xFFFFu : (1u << n) - 1u);
}
INLINE vf vf_blend(vmask m, vf fill, vf x) {
    return _mm512_mask_blend_ps(m, fill, x);
}
INLINE vf vf_maskz(vmask m, vf x) {
    return _mm512_maskz_mov_ps(m, x);
}

#define ATTN_ITEM pl_attn_item_avx512
#define ATTN_SC_CHAINS 8 /* 8 heads one chain each, ..., 1 head 8 */
#define ATTN_PV_ACC 16   /* 8 heads 2 chunks at a time, 4 heads 4, 2 heads 8, 1 head 8 */
#include "attn_simd.h"
