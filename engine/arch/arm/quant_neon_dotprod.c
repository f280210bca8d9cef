/* SPDX-License-Identifier: MIT */
/* aarch64 kernels with the Armv8.2-A dot-product extension (compiled with
 * -march=armv8.2-a+dotprod; installed by quant_arm.c only where HWCAP_ASIMDDP says the CPU
 * has it): the integer dot products of every quantized weight type with SDOT, which sums
 * four int8 products per int32 lane in one instruction. Everything else (float dot products,
 * activation quantizers) comes from the baseline set (quant_neon.c) it is applied on. */
#include <arm_neon.h>

#include "quant_arm.h"

#if !defined(__ARM_FEATURE_DOTPROD)
#error "quant_neon_dotprod.c must be compiled with -march=armv8.2-a+dotprod"
#endif

#include "quant_neon_dots.h"

void pl_quant_neon_dotprod_fill(struct pl_quant_kernels table[_PL_GGML_TYPE_MAX]) {
    neon_fill_dots(table);
}
