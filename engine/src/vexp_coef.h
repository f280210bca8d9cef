/* SPDX-License-Identifier: MIT */
/* The constants of the vector exp() for x <= 0 (engine/arch/x86/vexp_avx512.h's
 * pl_vexp_nonpos, vexp_avx2.h's pl_vexp8_nonpos and engine/arch/arm/matmul_neon.c's
 * vexp4_nonpos: the same steps on 16, 8 and 4 lanes): inputs clamped at
 * PL_VEXP_MIN (where expf is 0), n = round(x log2 e), r = x - n ln 2 with ln 2 split in two
 * parts so n ln 2 is exact enough, then the degree-7 Taylor polynomial of e^r in Horner form
 * (coefficients 1/k!, the last two 1), times 2^n. */
#ifndef PL_ENGINE_VEXP_COEF_H
#define PL_ENGINE_VEXP_COEF_H

#define PL_VEXP_MIN (-104.0f)
#define PL_VEXP_LOG2E 1.44269504088896341f
#define PL_VEXP_LN2_HI 0.693145751953125f
#define PL_VEXP_LN2_LO 1.428606820309417e-06f
#define PL_VEXP_C7 (1.0f / 5040.0f)
#define PL_VEXP_C6 (1.0f / 720.0f)
#define PL_VEXP_C5 (1.0f / 120.0f)
#define PL_VEXP_C4 (1.0f / 24.0f)
#define PL_VEXP_C3 (1.0f / 6.0f)
#define PL_VEXP_C2 0.5f

#endif
