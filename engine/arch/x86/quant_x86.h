/* SPDX-License-Identifier: MIT */
/* Private interface of the x86 kernel backend: the per-ISA table fillers (quant_avx2.c,
 * quant_avx512.c, each compiled with its own -m flags and called only after the CPU check
 * in quant_x86.c) and a lookup of one ISA's kernels, used by the SIMD unit tests and the
 * kernel benchmark to compare the variants on the same machine. */
#ifndef PL_ENGINE_QUANT_X86_H
#define PL_ENGINE_QUANT_X86_H

#include <stdbool.h>
#include <stdint.h>

#include "pl/engine_quant.h"
#include "pl/engine_types.h"

/* The weight-stream prefetch the kernels issue (pl_quant_prefetch()'s setting), read in their
 * loops. Written once, by the first pl_quant_prefetch() call; the fillers below make that
 * call, so no kernel runs before it. */
extern struct pl_quant_prefetch pl_quant_x86_pf;

/* Prefetches of N (1, 2, 4 or 8) consecutive lines from q, with instruction insn, as one asm
 * block: each line's address is q plus a displacement. (Line by line, __builtin_prefetch or a
 * memory operand each, GCC 12 computed every line's address into a register of its own ahead
 * of the hint's branch and, short of registers in the decode kernels, parked half of them in
 * vector registers, two moves each.) */
#define PL_X86_PF1(insn) insn " (%0)\n\t"
#define PL_X86_PF2(insn) PL_X86_PF1(insn) insn " 64(%0)\n\t"
#define PL_X86_PF4(insn) PL_X86_PF2(insn) insn " 128(%0)\n\t" insn " 192(%0)\n\t"
#define PL_X86_PF8(insn)                                                                           \
    PL_X86_PF4(insn)                                                                               \
    insn " 256(%0)\n\t" insn " 320(%0)\n\t" insn " 384(%0)\n\t" insn " 448(%0)"                    \
         "\n\t"
#define PL_X86_PF_BLOCK(N, insn, q) __asm__ volatile(PL_X86_PF##N(insn) : : "r"(q))

/* `lines` lines from q, in blocks of 8, then 4, 2, 1 (with a constant count after inlining,
 * straight-line code). */
#define PL_X86_PF_LINES(insn, q, lines)                                                            \
    do {                                                                                           \
        const char *q_ = (q);                                                                      \
        for (int n_ = (lines); n_ >= 8; n_ -= 8, q_ += 512)                                        \
            PL_X86_PF_BLOCK(8, insn, q_);                                                          \
        if ((lines)&4) {                                                                           \
            PL_X86_PF_BLOCK(4, insn, q_);                                                          \
            q_ += 256;                                                                             \
        }                                                                                          \
        if ((lines)&2) {                                                                           \
            PL_X86_PF_BLOCK(2, insn, q_);                                                          \
            q_ += 128;                                                                             \
        }                                                                                          \
        if ((lines)&1)                                                                             \
            PL_X86_PF_BLOCK(1, insn, q_);                                                          \
    } while (0)

/* Prefetch `lines` 64-byte lines from p with that hint, and with a page touch set, the first
 * line of the 4 KiB page page_ahead bytes past p (PREFETCHT2): the same line at every step
 * within a page, so no step needs a branch on where pages start, and the repeats hit the
 * cache. Prefetches past the end of a row (or buffer) are harmless hints: they never fault.
 * The hint is part of the instruction, so each branch has its own instructions (none: no
 * line prefetch); the branches are the same on every call of a process. */
static inline __attribute__((always_inline)) void pl_x86_pf_lines(const char *p, int lines) {
    const uintptr_t a = pl_quant_x86_pf.page_ahead;
    if (a)
        PL_X86_PF_BLOCK(1, "prefetcht2", pl_quant_page_line(p, a));
    if (pl_quant_x86_pf.hint == PL_QUANT_PF_NTA)
        PL_X86_PF_LINES("prefetchnta", p, lines);
    else if (pl_quant_x86_pf.hint == PL_QUANT_PF_T0)
        PL_X86_PF_LINES("prefetcht0", p, lines);
}

/* Overwrite the entries of table (indexed by enum pl_ggml_type) that the ISA accelerates.
 * The caller must have checked pl_quant_x86_supported() for that ISA: these functions
 * execute its instructions. The AVX-512 set is applied on top of the AVX2 one. */
void pl_quant_avx2_fill(struct pl_quant_kernels table[_PL_GGML_TYPE_MAX]);
/* The AVX2 set's kernels with AVX-VNNI's dot products (quant_avxvnni.c), the same bits; only
 * where the build has it (PL_QUANT_HAVE_AVXVNNI). */
void pl_quant_avxvnni_fill(struct pl_quant_kernels table[_PL_GGML_TYPE_MAX]);
/* flags: PL_QUANT_X86_* below; 0 for the best kernels this CPU runs. */
void pl_quant_avx512_fill(struct pl_quant_kernels table[_PL_GGML_TYPE_MAX], unsigned flags);

/* Do not install the GFNI+VBMI kernels even where the CPU has them (the AVX-512 F/BW/VNNI
 * fallbacks that Cascade Lake class CPUs run instead). */
#define PL_QUANT_X86_NO_GFNI_VBMI 1u

/* True when the CPU and the OS (XSAVE state enabled in XCR0) support the kernel set named
 * isa: "scalar" (always), "avx2" (AVX2 + FMA + F16C), "avxvnni" (the AVX2 set plus
 * AVX-VNNI, where the build has it), "avx512" (the AVX2 set plus AVX-512 F/BW/VL/VNNI; BF16
 * is not needed: Ice Lake and Zen 4 class CPUs qualify). False for any other name. */
bool pl_quant_x86_supported(const char *isa);
/* An AMD (or Hygon) CPU: Zen cores, whose per-vendor settings differ from Intel's. */
bool pl_quant_x86_zen(void);

/* Kernels of type t in the set named isa, regardless of which set pl_quant_kernels() uses
 * (and of PICOLM_FORCE_SCALAR). NULL when isa is unknown or unsupported here (see above),
 * or when t has no kernels. The pointer stays valid for the life of the process. */
const struct pl_quant_kernels *pl_quant_kernels_isa(const char *isa, uint32_t t);

/* Test-only: the kernel variants of the set named isa that this CPU can run, as a
 * NULL-terminated list of names ("default" first: the set as pl_quant_kernels_isa() gives
 * it; then e.g. "no-gfni": the AVX-512 set without its GFNI+VBMI kernels), or NULL when
 * isa is unknown or unsupported here. Static storage. */
const char *const *pl_quant_x86_variants(const char *isa);

/* Test-only: kernels of type t in variant `variant` (a name from pl_quant_x86_variants(),
 * NULL meaning "default") of the set isa; NULL as pl_quant_kernels_isa(), or when the
 * variant is unknown for that set. The pointer stays valid for the life of the process. */
const struct pl_quant_kernels *pl_quant_kernels_variant(const char *isa, const char *variant,
                                                        uint32_t t);

#endif
