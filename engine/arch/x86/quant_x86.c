/* SPDX-License-Identifier: MIT */
/* x86 backend of the quant dispatch table (the quant_arch.h hook): detects AVX2 and
 * AVX-512 at run time, with the OS's XSAVE support, and patches the table with the best
 * supported set; also keeps one table per supported set for the tests and benchmarks
 * (pl_quant_kernels_isa). Compiled without ISA flags, so it runs on any x86-64. */
#include "quant_x86.h"

#include <pthread.h>
#include <string.h>

#include "quant_arch.h"
#include "quant_ref.h"

/* ---- CPU and OS feature detection ---- */

/* XCR0: which register states the OS saves on context switch. */
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* CPUID.1:ECX.OSXSAVE (bit 27): XGETBV is usable. */
static bool have_osxsave(void) {
    uint32_t a = 1, b, c = 0, d;
    __asm__ volatile("cpuid" : "+a"(a), "=b"(b), "+c"(c), "=d"(d));
    return (c >> 27) & 1;
}

/* CPUID.1:ECX.F16C (bit 29). Asked directly: clang before 15 rejects "f16c" in
 * __builtin_cpu_supports(), which broke the clang (fuzz) builds. */
static bool have_f16c(void) {
    uint32_t a = 1, b, c = 0, d;
    __asm__ volatile("cpuid" : "+a"(a), "=b"(b), "+c"(c), "=d"(d));
    return (c >> 29) & 1;
}

#define XCR0_YMM 0x06u /* SSE + AVX (xmm, upper ymm) */
#define XCR0_ZMM 0xE6u /* plus opmask, upper zmm0-15, zmm16-31 */

static bool os_saves(uint64_t bits) {
    return have_osxsave() && (xgetbv0() & bits) == bits;
}

static bool cpu_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && have_f16c() &&
           os_saves(XCR0_YMM);
}

static bool cpu_avx512(void) {
    return cpu_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
           os_saves(XCR0_ZMM);
}

bool pl_quant_x86_supported(const char *isa) {
    if (!isa)
        return false;
    if (strcmp(isa, "scalar") == 0)
        return true;
    if (strcmp(isa, "avx2") == 0)
        return cpu_avx2();
    if (strcmp(isa, "avx512") == 0)
        return cpu_avx512();
    return false;
}

/* ---- The dispatch hook ---- */

/* Applies the best set into table; returns its name or NULL. */
static const char *fill_best(struct pl_quant_kernels table[_PL_GGML_TYPE_MAX]) {
    if (!cpu_avx2() || !pl_quant_env_allows("avx2"))
        return NULL;
    pl_quant_avx2_fill(table);
    if (!cpu_avx512() || !pl_quant_env_allows("avx512"))
        return "avx2";
    pl_quant_avx512_fill(table, 0);
    return "avx512";
}

const char *pl_quant_arch_init(struct pl_quant_kernels table[_PL_GGML_TYPE_MAX]) {
    return fill_best(table);
}

/* ---- Per-set tables for tests and benchmarks ---- */

/* Written only inside isa_tables_once(); read-only afterwards (pthread_once orders the
 * writes before every reader). */
static struct pl_quant_kernels table_avx2[_PL_GGML_TYPE_MAX];
static struct pl_quant_kernels table_avx512[_PL_GGML_TYPE_MAX];
static struct pl_quant_kernels table_avx512_no_gv[_PL_GGML_TYPE_MAX];
static bool have_table_avx2, have_table_avx512;
static pthread_once_t isa_tables_control = PTHREAD_ONCE_INIT;

static void isa_tables_once(void) {
    if (cpu_avx2()) {
        memcpy(table_avx2, pl_quant_ref_table, sizeof(table_avx2));
        pl_quant_avx2_fill(table_avx2);
        have_table_avx2 = true;
    }
    if (cpu_avx512()) {
        memcpy(table_avx512, table_avx2, sizeof(table_avx512));
        pl_quant_avx512_fill(table_avx512, 0);
        memcpy(table_avx512_no_gv, table_avx2, sizeof(table_avx512_no_gv));
        pl_quant_avx512_fill(table_avx512_no_gv, PL_QUANT_X86_NO_GFNI_VBMI);
        have_table_avx512 = true;
    }
}

/* The table of variant v (0: default, 1: no GFNI/VBMI) of set isa, or NULL. */
static const struct pl_quant_kernels *isa_table(const char *isa, int v) {
    (void)pthread_once(&isa_tables_control, isa_tables_once);
    if (strcmp(isa, "avx2") == 0 && have_table_avx2 && v == 0)
        return table_avx2;
    if (strcmp(isa, "avx512") == 0 && have_table_avx512)
        return v == 0 ? table_avx512 : table_avx512_no_gv;
    return NULL;
}

static const char *const variants_default[] = {"default", NULL};
static const char *const variants_avx512[] = {"default", "no-gfni", NULL};

const char *const *pl_quant_x86_variants(const char *isa) {
    if (!isa || !pl_quant_x86_supported(isa))
        return NULL;
    if (strcmp(isa, "avx512") == 0) {
        __builtin_cpu_init();
        /* without GFNI+VBMI the default already is the fallback */
        if (__builtin_cpu_supports("gfni") && __builtin_cpu_supports("avx512vbmi"))
            return variants_avx512;
    }
    return variants_default;
}

const struct pl_quant_kernels *pl_quant_kernels_variant(const char *isa, const char *variant,
                                                        uint32_t t) {
    const struct pl_quant_kernels *table, *k;
    int v;
    if (!isa || t >= _PL_GGML_TYPE_MAX)
        return NULL;
    if (!variant || strcmp(variant, "default") == 0)
        v = 0;
    else if (strcmp(variant, "no-gfni") == 0)
        v = 1;
    else
        return NULL;
    if (strcmp(isa, "scalar") == 0)
        return v == 0 ? pl_quant_kernels_ref(t) : NULL;
    if (!(table = isa_table(isa, v)))
        return NULL;
    k = &table[t];
    return (k->to_f32 || k->from_f32 || k->vec_dot) ? k : NULL;
}

const struct pl_quant_kernels *pl_quant_kernels_isa(const char *isa, uint32_t t) {
    return pl_quant_kernels_variant(isa, NULL, t);
}
