/* SPDX-License-Identifier: MIT */
/* The portable scalar reference kernels, one table entry per ggml type (quant_ref.c).
 * quant.c copies this table into the dispatch table before any ISA backend patches it;
 * ISA kernels may call these entries for remainders or as a fallback. Needs no init. */
#ifndef PL_ENGINE_QUANT_REF_H
#define PL_ENGINE_QUANT_REF_H

#include "pl/engine_quant.h"
#include "pl/engine_types.h"

/* Indexed by enum pl_ggml_type; an entry with every pointer NULL means "no kernels". */
extern const struct pl_quant_kernels pl_quant_ref_table[_PL_GGML_TYPE_MAX];

#endif
