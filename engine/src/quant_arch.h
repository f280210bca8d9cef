/* SPDX-License-Identifier: MIT */
/* Hook through which an ISA backend (engine/arch/<isa>/quant.c) installs its kernels into
 * the dispatch table of quant.c. The backend's CMake snippet adds its sources to the
 * pl_engine_quant part and defines PL_QUANT_HAVE_ARCH=1 for that part; without it quant.c
 * uses the scalar references only. */
#ifndef PL_ENGINE_QUANT_ARCH_H
#define PL_ENGINE_QUANT_ARCH_H

#include "pl/engine_quant.h"
#include "pl/engine_types.h"

/* Called exactly once (inside pl_quant_init()'s pthread_once, so it must not call
 * pl_quant_init() or pl_quant_kernels(); pl_quant_kernels_ref() and pl_quant_ref_table are
 * safe), with table[t] holding the scalar references, unless PICOLM_FORCE_SCALAR is set.
 * Detects CPU features and overwrites the members of the entries it accelerates. An ISA
 * vec_dot must compute the same quantity as the reference (same vec_dot_type and block
 * semantics), within float rounding. Returns the ISA name ("avx2", static storage), or NULL
 * when it changed nothing. */
const char *pl_quant_arch_init(struct pl_quant_kernels table[_PL_GGML_TYPE_MAX]);

#endif
