/* SPDX-License-Identifier: MIT */
/* Private interface of the aarch64 kernel backend: the per-variant table fillers
 * (quant_neon.c for baseline Armv8-A Advanced SIMD, quant_neon_dotprod.c compiled with
 * -march=armv8.2-a+dotprod and called only after the HWCAP check in quant_arm.c) and a
 * lookup of one variant's kernels, used by the NEON unit tests and the kernel benchmark to
 * compare the variants on the same machine. */
#ifndef PL_ENGINE_QUANT_ARM_H
#define PL_ENGINE_QUANT_ARM_H

#include <stdbool.h>
#include <stdint.h>

#include "pl/engine_quant.h"
#include "pl/engine_types.h"

/* Overwrite the entries of table (indexed by enum pl_ggml_type) that the variant
 * accelerates. Baseline NEON: the integer dot products of every quantized weight type
 * (vmull_s8 / vpadalq_s16), the F32/F16/BF16 dot products and the activation quantizers
 * (Q8_0, Q8_1, Q8_K, F16, BF16; bit-identical to the references). The dot-product set
 * replaces the integer dot products with SDOT ones and is applied on top of the baseline;
 * the caller must have checked pl_quant_arm_supported("neon-dotprod"). */
void pl_quant_neon_fill(struct pl_quant_kernels table[_PL_GGML_TYPE_MAX]);
void pl_quant_neon_dotprod_fill(struct pl_quant_kernels table[_PL_GGML_TYPE_MAX]);

/* True when this CPU runs the kernel set named isa: "scalar" (always), "neon" (Advanced
 * SIMD, HWCAP_ASIMD: every Armv8-A Linux system), "neon-dotprod" (plus HWCAP_ASIMDDP, the
 * Armv8.2-A SDOT/UDOT extension). False for any other name. */
bool pl_quant_arm_supported(const char *isa);

/* Kernels of type t in the set named isa, regardless of which set pl_quant_kernels() uses
 * (and of PICOLM_FORCE_SCALAR). NULL when isa is unknown or unsupported here, or when t
 * has no kernels. The pointer stays valid for the life of the process. */
const struct pl_quant_kernels *pl_quant_kernels_isa(const char *isa, uint32_t t);

#endif
