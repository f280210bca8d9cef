/* SPDX-License-Identifier: MIT */
/* The "avxvnni" kernel set: quant_avx2.c compiled with AVX-VNNI's 256-bit integer dot
 * products (-mavxvnni), installed by quant_x86.c on CPUs with AVX-VNNI and without AVX-512. */
#define PL_QUANT_AVXVNNI 1
#include "quant_avx2.c"
