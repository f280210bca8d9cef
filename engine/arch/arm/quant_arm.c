/* SPDX-License-Identifier: MIT */
/* aarch64 backend of the quant dispatch table (the quant_arch.h hook): asks the kernel for
 * the CPU's features (getauxval(AT_HWCAP): ASIMD, ASIMDDP) and patches the table with the
 * best supported set, "neon-dotprod" or "neon"; also keeps one table per supported set for
 * the tests and benchmarks (pl_quant_kernels_isa). Compiled for baseline Armv8-A. */
#include "quant_arm.h"

#include <pthread.h>
#include <string.h>
#include <sys/auxv.h>

#include "quant_arch.h"
#include "quant_ref.h"

/* The HWCAP bits (asm/hwcap.h), spelled out for C libraries whose headers lack them. */
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1ul << 1)
#endif
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1ul << 20)
#endif

static bool cpu_neon(void) {
    return (getauxval(AT_HWCAP) & HWCAP_ASIMD) != 0;
}

static bool cpu_dotprod(void) {
    return cpu_neon() && (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
}

bool pl_quant_arm_supported(const char *isa) {
    if (!isa)
        return false;
    if (strcmp(isa, "scalar") == 0)
        return true;
    if (strcmp(isa, "neon") == 0)
        return cpu_neon();
    if (strcmp(isa, "neon-dotprod") == 0)
        return cpu_dotprod();
    return false;
}

/* ---- The dispatch hook ---- */

const char *pl_quant_arch_init(struct pl_quant_kernels table[_PL_GGML_TYPE_MAX]) {
    if (!cpu_neon() || !pl_quant_env_allows("neon"))
        return NULL;
    pl_quant_neon_fill(table);
    if (!cpu_dotprod() || !pl_quant_env_allows("neon-dotprod"))
        return "neon";
    pl_quant_neon_dotprod_fill(table);
    return "neon-dotprod";
}

/* ---- Per-set tables for tests and benchmarks ---- */

/* Written only inside isa_tables_once(); read-only afterwards (pthread_once orders the
 * writes before every reader). */
static struct pl_quant_kernels table_neon[_PL_GGML_TYPE_MAX];
static struct pl_quant_kernels table_dotprod[_PL_GGML_TYPE_MAX];
static bool have_table_neon, have_table_dotprod;
static pthread_once_t isa_tables_control = PTHREAD_ONCE_INIT;

static void isa_tables_once(void) {
    if (!cpu_neon())
        return;
    memcpy(table_neon, pl_quant_ref_table, sizeof(table_neon));
    pl_quant_neon_fill(table_neon);
    have_table_neon = true;
    if (cpu_dotprod()) {
        memcpy(table_dotprod, table_neon, sizeof(table_dotprod));
        pl_quant_neon_dotprod_fill(table_dotprod);
        have_table_dotprod = true;
    }
}

const struct pl_quant_kernels *pl_quant_kernels_isa(const char *isa, uint32_t t) {
    const struct pl_quant_kernels *table = NULL, *k;
    if (!isa || t >= _PL_GGML_TYPE_MAX)
        return NULL;
    if (strcmp(isa, "scalar") == 0)
        return pl_quant_kernels_ref(t);
    (void)pthread_once(&isa_tables_control, isa_tables_once);
    if (strcmp(isa, "neon") == 0 && have_table_neon)
        table = table_neon;
    else if (strcmp(isa, "neon-dotprod") == 0 && have_table_dotprod)
        table = table_dotprod;
    if (!table)
        return NULL;
    k = &table[t];
    return (k->to_f32 || k->from_f32 || k->vec_dot) ? k : NULL;
}
