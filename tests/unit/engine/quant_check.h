/* SPDX-License-Identifier: MIT */
/* Kernel-set checks shared by the x86 and aarch64 SIMD tests (quant_check.c). Failures go
 * through cmocka (fail_msg). */
#ifndef PL_TEST_QUANT_CHECK_H
#define PL_TEST_QUANT_CHECK_H

#include <stddef.h>
#include <stdint.h>

struct pl_quant_kernels;

/* A weight type and where its generator writes scales, mins and high bits. */
struct qc_type {
    uint32_t type;
    const char *name;
    int block;             /* elements per block */
    size_t size;           /* bytes per block */
    size_t d_off, min_off; /* fp16 scale and min fields; min_off SIZE_MAX: none */
    size_t hi_off, hi_len; /* high-bit array (qh/hmask), hi_len 0: none */
};

/* Every weight type the kernel sets cover. */
extern const struct qc_type qc_types[];
extern const size_t qc_n_types;
/* The activation types (from_f32 targets). */
extern const uint32_t qc_act_types[];
extern const size_t qc_n_act_types;

/* vec_dot of k (label: its set, for messages) against the reference on 1..19 blocks of every
 * generator mode at unaligned addresses, n = 0 included. Also, where k has them: vec_dot_a
 * and vec_dotn(2..8) bit for bit against k's vec_dot, and (twin not NULL) vec_dot bit for
 * bit against twin's. */
void qc_check_dot(const char *label, const struct pl_quant_kernels *k,
                  const struct pl_quant_kernels *twin, const struct qc_type *ti);
/* Comparisons made so far by qc_check_dot: vec_dotn calls, vec_dot_a calls. */
extern int qc_n_dotn_checked, qc_n_dota_checked;

/* from_f32 of k (label: its set) for type t bit-identical to the reference (normal data,
 * ties, huge/tiny/subnormal values, NaN, Inf, zeros, equal elements). */
void qc_check_from_f32(const char *label, const struct pl_quant_kernels *k, uint32_t t);

#endif
