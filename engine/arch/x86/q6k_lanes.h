/* SPDX-License-Identifier: MIT */
/* Q6_K's quants in the tiled kernels' lane order of layout 16 (matmul.h), shared by the
 * AVX-512 kernels and the AMX tiles: a super-block's 256 values (unsigned, 0..63) as four
 * registers, dword lane j of register k holding elements 16j + 4k .. 16j + 4k + 3, so every
 * lane lies in one sub-block (j). From the GGUF block, or from the layout the AVX-512
 * kernels repack Q6_K into at load (same 210 bytes per super-block):
 *   [64] w[0] | w[2] << 4, [64] w[1] | w[3] << 4   (the low 4 bits of each register)
 *   [64] the high 2 bits: w[0] >> 4 | w[1] >> 4 << 2 | w[2] >> 4 << 4 | w[3] >> 4 << 6
 *   [16] the 16 scales (int8), [2] d (fp16)
 * Include from a file compiled with -mavx512f -mavx512bw. */
#ifndef PL_ENGINE_Q6K_LANES_H
#define PL_ENGINE_Q6K_LANES_H

#include <immintrin.h>
#include <stdint.h>

#include "quant_blocks.h"

#define PL_Q6KP_SC 192 /* offset of the 16 scales in a packed super-block */
#define PL_Q6KP_D 208  /* offset of d */

/* The nibble planes of the packed layouts (Q4_0, Q4_K, and Q6_K's low 4 bits): w[0..3],
 * each byte < 16, from [64] w[0] | w[2] << 4, [64] w[1] | w[3] << 4 at p. */
static inline void pl_nibbles_load(const uint8_t *p, __m512i w[4]) {
    const __m512i lo = _mm512_loadu_si512(p), hi = _mm512_loadu_si512(p + 64);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    w[0] = _mm512_and_si512(lo, m4);
    w[1] = _mm512_and_si512(hi, m4);
    w[2] = _mm512_and_si512(_mm512_srli_epi64(lo, 4), m4);
    w[3] = _mm512_and_si512(_mm512_srli_epi64(hi, 4), m4);
}

/* From the GGUF block: the low 4 bits of element 128h + 32q + l are a nibble of ql[64h +
 * 32(q % 2) + l] (low for q < 2), the high 2 bits bits 2q, 2q + 1 of qh[32h + l]. Dword
 * lane j of register k: half h = j / 8, quarter q = (j % 8) / 2, 16-element half j % 2. */
static inline void pl_q6k_lanes(const struct pl_block_q6_K *b, __m512i w[4]) {
    const __m512i l0 = _mm512_loadu_si512(b->ql), l1 = _mm512_loadu_si512(b->ql + 64);
    const __m512i qh = _mm512_loadu_si512(b->qh);
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(0x03);
    const __m512i lsh = _mm512_set_epi32(4, 4, 4, 4, 0, 0, 0, 0, 4, 4, 4, 4, 0, 0, 0, 0);
    const __m512i hsh = _mm512_set_epi32(6, 6, 4, 4, 2, 2, 0, 0, 6, 6, 4, 4, 2, 2, 0, 0);
    for (int k = 0; k < 4; k++) {
        const __m512i il =
            _mm512_set_epi32(28 + k, 24 + k, 20 + k, 16 + k, 28 + k, 24 + k, 20 + k, 16 + k, 12 + k,
                             8 + k, 4 + k, k, 12 + k, 8 + k, 4 + k, k);
        const __m512i ih = _mm512_set_epi32(12 + k, 8 + k, 12 + k, 8 + k, 12 + k, 8 + k, 12 + k,
                                            8 + k, 4 + k, k, 4 + k, k, 4 + k, k, 4 + k, k);
        const __m512i lo =
            _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutex2var_epi32(l0, il, l1), lsh), m4);
        const __m512i hi =
            _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(ih, qh), hsh), m2);
        w[k] = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 4));
    }
}

/* From the packed super-block at p. */
static inline void pl_q6kp_lanes(const uint8_t *p, __m512i w[4]) {
    const __m512i h = _mm512_loadu_si512(p + 128);
    const __m512i m2 = _mm512_set1_epi8(0x03);
    pl_nibbles_load(p, w);
    for (int k = 0; k < 4; k++) {
        /* bits 2k, 2k + 1 of each byte of h, moved to bits 4, 5 (no byte spills: < 4) */
        const __m512i h2 = _mm512_and_si512(_mm512_srli_epi64(h, 2 * k), m2);
        w[k] = _mm512_or_si512(w[k], _mm512_slli_epi64(h2, 4));
    }
}

#endif
