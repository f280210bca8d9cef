/* SPDX-License-Identifier: MIT */
/* x86 backend of the quant dispatch table (the quant_arch.h hook): detects AVX2, AVX-VNNI and
 * AVX-512 at run time, with the OS's XSAVE support, and patches the table with the best
 * supported set; also keeps one table per supported set for the tests and benchmarks
 * (pl_quant_kernels_isa). Compiled without ISA flags, so it runs on any x86-64. */
#include "quant_x86.h"

#include <pthread.h>
#include <stdlib.h>
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

/* CPUID.(EAX=7, ECX=1):EAX.AVX-VNNI (bit 4), with leaf 7 reporting subleaf 1. Asked
 * directly: GCC 12's __builtin_cpu_supports("avxvnni") answered false on a Zen 5 that has
 * it, and clang 14 does not know the name. */
static bool cpu_avxvnni(void) {
#ifdef PL_QUANT_HAVE_AVXVNNI
    uint32_t a = 0, b, c = 0, d;
    __asm__ volatile("cpuid" : "+a"(a), "=b"(b), "+c"(c), "=d"(d));
    if (a < 7)
        return false;
    a = 7;
    c = 0;
    __asm__ volatile("cpuid" : "+a"(a), "=b"(b), "+c"(c), "=d"(d));
    if (a < 1) /* the highest subleaf of leaf 7 */
        return false;
    a = 7;
    c = 1;
    __asm__ volatile("cpuid" : "+a"(a), "=b"(b), "+c"(c), "=d"(d));
    return cpu_avx2() && ((a >> 4) & 1);
#else
    return false;
#endif
}

static bool cpu_avx512(void) {
    return cpu_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
           os_saves(XCR0_ZMM);
}

/* ---- Weight-stream prefetch ---- */

/* CPUID leaf 0's vendor string: AMD's and Hygon's cores are Zen. Asked once: in a VM every
 * CPUID traps to the hypervisor, and the tile kernel lookup (each matmul, on every thread)
 * asks this. On the Zen 5 VM the CPUIDs took 2-3.5% of a decode's samples (perf, TinyLlama
 * shape, 1-2 threads) before this kept the answer. */
static bool zen, zen4; /* zen4: family 19h with AVX-512 (Zen 3, the same family, has none) */
static pthread_once_t zen_once = PTHREAD_ONCE_INIT;

static void zen_ask(void) {
    uint32_t a = 0, b, c = 0, d;
    char v[13];
    __asm__ volatile("cpuid" : "+a"(a), "=b"(b), "+c"(c), "=d"(d));
    memcpy(v, &b, 4);
    memcpy(v + 4, &d, 4);
    memcpy(v + 8, &c, 4);
    v[12] = '\0';
    zen = !strcmp(v, "AuthenticAMD") || !strcmp(v, "HygonGenuine");
    if (!zen)
        return;
    a = 1;
    c = 0;
    __asm__ volatile("cpuid" : "+a"(a), "=b"(b), "+c"(c), "=d"(d));
    uint32_t family = (a >> 8) & 0xFu; /* CPUID.1's family: base + extended */
    if (family == 0xFu)
        family += (a >> 20) & 0xFFu;
    zen4 = family == 0x19u && cpu_avx512();
}

bool pl_quant_x86_zen(void) {
    (void)pthread_once(&zen_once, zen_ask);
    return zen;
}

/* The setting per vendor, from `picolm-bench kernels` and `picolm-bench decode` (256 MiB
 * matrices, one core, against the read loop over the same buffer):
 * - Zen 4 VM (EPYC, family 19h model 11h, 2026-12-06; ~31-35 GB/s per core, plain loads
 *   alone ~31): every software line prefetch costs memory speed there. `picolm-bench decode`,
 *   memory / read loop, NTA 8 KB ahead with the page touch -> the page touch alone: Q4_K
 *   0.84-0.86 -> 0.91-0.95, Q4_0 0.78-0.92 -> 0.91-0.92, Q8_0 0.66-0.76 -> 0.91-0.96, Q6_K
 *   0.78-0.81 -> 0.78-0.79 (no line prefetch and no touch: 0.87-1.0, 0.88-0.89, 0.88-0.91,
 *   0.70-0.72); T0 at 2-8 KB and NTA at 2-24 KB all 0.63-0.83. In the engine (TinyLlama shape,
 *   the two settings on alternate decode steps of one run, 256 steps): none over NTA Q4_K_M
 *   1.24x at 1 thread, 1.13x at 2; Q4_0 1.25x / 1.10x; Q8_0 1.35x / 1.14x; the page touch at
 *   8 / 32 KB within 0.3% of 16 KB, and off 1% slower. The per-row kernels (compute-bound
 *   there) within the noise either way.
 * - Zen 5 VM: NTA over T0 at the same distances (4 KB per-row, 8 KB decode), 6 alternating
 *   runs, memory / read loop Q4_K 0.84 -> 0.89, Q6_K 0.89 -> 0.95, Q4_0 0.86 -> 0.90, Q8_0
 *   0.87 -> 0.96; the engine's TinyLlama-shape decode 8-17% faster.
 * - Intel Xeon with AMX (a VM, ~16-18 GB/s per core): NTA at 4 KB / 8 KB halves the per-row
 *   kernels (Q4_K 10.2 -> 7.8 GB/s, Q8_0 13.6 -> 7.2) and collapses L2-sized matrices too
 *   (decode Q4_0 in L2 36.7 -> 12.7 GB/s: an NTA fill is not kept in L2). With T0, distances of
 *   1 / 1.5 / 2 / 3 / 4 KB: Q4_K 15.2-15.5 / 15.6-15.8 / 15.7-16.0 / 14.5-14.7 / 10.3, Q8_0
 *   15.0-15.2 / 15.5-16.0 / 15.7-16.3 / 15.8-16.2 / 13.9 GB/s; the decode kernels (Q4_0, Q8_0)
 *   12.4-12.6 and 14.7-14.9 GB/s at 2 KB, below that elsewhere; T1 and T2 at 1.5-2 KB below
 *   T0 at 2 KB. A one-token decode there reads 2 weight streams per thread (matmul.c): the
 *   engine's TinyLlama-shape decode, alternating runs against 1 stream, Q4_K_M 1 thread
 *   24.0-24.8 -> 24.9-26.3 tok/s, 2 threads 47.6-48.4 -> 50.1-50.2; Q4_0 1 thread 24.0-25.2 ->
 *   25.2-25.4, 2 threads 48.0 -> 49.7; Q8_0 1 thread 14.2 -> 14.1-14.5. Zen keeps 1 stream,
 *   its measured best (two adjacent rows interleaved per super-block fell far behind one row
 *   there; rows from two far parts in turn are not measured on Zen). Other vendors get Intel's
 *   setting.
 * - The page touch (engine_quant.h), Zen 5 VM: a scratch read loop over 256-640 MiB in steps
 *   of 144-576 bytes with NTA 8 KB ahead read 25-31 GB/s, and 37-42 with one PREFETCHT2 of
 *   the page 16-64 KB ahead (or NTA, or T0; plain loads 30-32). The touch must be one line per
 *   page: a far prefetch of every step's first line (two prefetches per line, as in two-level
 *   schemes) read 19-33. The engine's TinyLlama-shape Q4_K_M decode, 2 alternating rounds with
 *   PICOLM_PREFETCH=nta:4096:8192:1:PAGE, PAGE = 0 / 16384 / 24576 / 57344: 1 thread 50.0,
 *   47.6 / 61.9, 58.4 / 61.2, 58.7 / 60.8, 49.4 tok/s; 2 threads 92.4, 87.7 / 105.3, 102.9 /
 *   107.5, 105.2 / 103.0, 88.1. The read loop with the same touch rose as much (1 thread
 *   36-38 -> 42-45 GB/s, 2 threads 72-75 -> 82-89). Not measured on Intel: off there. */
static const struct pl_quant_prefetch pf_zen = {PL_QUANT_PF_NTA, 4096, 8192, 1, "amd", 16384};
static const struct pl_quant_prefetch pf_zen4 = {PL_QUANT_PF_NONE, 4096, 8192, 1,
                                                 "amd-zen4",       16384};
static const struct pl_quant_prefetch pf_intel = {PL_QUANT_PF_T0, 2048, 2048, 2, "intel", 0};

struct pl_quant_prefetch pl_quant_x86_pf; /* pf_choose() sets it before any kernel runs */
static pthread_once_t pf_control = PTHREAD_ONCE_INIT;

static void pf_choose(void) {
    /* Zen 3 (family 19h without AVX-512) keeps pf_zen: not measured */
    const bool is_zen = pl_quant_x86_zen(); /* sets zen4 too */
    struct pl_quant_prefetch c = zen4 ? pf_zen4 : is_zen ? pf_zen : pf_intel;
    const char *e = getenv("PICOLM_PREFETCH");
    if (e && e[0])
        c.source =
            pl_quant_prefetch_parse(e, &c) == 0 ? "PICOLM_PREFETCH" : "PICOLM_PREFETCH invalid";
    pl_quant_x86_pf = c;
}

const struct pl_quant_prefetch *pl_quant_prefetch(void) {
    (void)pthread_once(&pf_control, pf_choose);
    return &pl_quant_x86_pf;
}

bool pl_quant_x86_supported(const char *isa) {
    if (!isa)
        return false;
    if (strcmp(isa, "scalar") == 0)
        return true;
    if (strcmp(isa, "avx2") == 0)
        return cpu_avx2();
    if (strcmp(isa, "avxvnni") == 0)
        return cpu_avxvnni();
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
    if (cpu_avx512() && pl_quant_env_allows("avx512")) {
        pl_quant_avx512_fill(table, 0);
        return "avx512";
    }
#ifdef PL_QUANT_HAVE_AVXVNNI
    if (cpu_avxvnni() && pl_quant_env_allows("avxvnni")) {
        pl_quant_avxvnni_fill(table);
        return "avxvnni";
    }
#endif
    return "avx2";
}

const char *pl_quant_arch_init(struct pl_quant_kernels table[_PL_GGML_TYPE_MAX]) {
    return fill_best(table);
}

/* ---- Per-set tables for tests and benchmarks ---- */

/* Written only inside isa_tables_once(); read-only afterwards (pthread_once orders the
 * writes before every reader). */
static struct pl_quant_kernels table_avx2[_PL_GGML_TYPE_MAX];
static struct pl_quant_kernels table_avxvnni[_PL_GGML_TYPE_MAX];
static struct pl_quant_kernels table_avx512[_PL_GGML_TYPE_MAX];
static struct pl_quant_kernels table_avx512_no_gv[_PL_GGML_TYPE_MAX];
static bool have_table_avx2, have_table_avxvnni, have_table_avx512;
static pthread_once_t isa_tables_control = PTHREAD_ONCE_INIT;

static void isa_tables_once(void) {
    if (cpu_avx2()) {
        memcpy(table_avx2, pl_quant_ref_table, sizeof(table_avx2));
        pl_quant_avx2_fill(table_avx2);
        have_table_avx2 = true;
    }
#ifdef PL_QUANT_HAVE_AVXVNNI
    if (cpu_avxvnni()) {
        memcpy(table_avxvnni, table_avx2, sizeof(table_avxvnni));
        pl_quant_avxvnni_fill(table_avxvnni);
        have_table_avxvnni = true;
    }
#endif
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
    if (strcmp(isa, "avxvnni") == 0 && have_table_avxvnni && v == 0)
        return table_avxvnni;
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
