/* SPDX-License-Identifier: MIT */
/* Quantized block formats and their kernels: dequantize a row, quantize a row (reference
 * round-to-nearest quantizers, also used for activations), and the dot product of a weight
 * row with an activation row already quantized to the weight type's vec_dot_type (as ggml
 * does: Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for K-quants, F16 for F16, BF16
 * for BF16, F32 for F32). Every type has a portable scalar reference (pl_quant_kernels_ref);
 * pl_quant_kernels() returns the fastest variant for this CPU, chosen once at start-up. */
#ifndef PL_ENGINE_ENGINE_QUANT_H
#define PL_ENGINE_ENGINE_QUANT_H

#include <stdbool.h>
#include <stdint.h>

/* n: element count, a multiple of the type's block size (the kernels assert it). src/dst
 * must not overlap. Buffers must be aligned for their block struct: 4 bytes for F32 and
 * Q8_K, 2 bytes for every other type (GGUF's 32-byte data alignment guarantees it for
 * weights). from_f32 never fails: NaN/Inf inputs give valid, if meaningless, blocks. */
typedef void (*pl_quant_to_f32_fn)(const void *restrict src, float *restrict dst, int64_t n);
typedef void (*pl_quant_from_f32_fn)(const float *restrict src, void *restrict dst, int64_t n);
/* Returns sum_i w[i] * x[i] over n elements; w of this type, x of vec_dot_type. Quantized
 * types compute as ggml's CPU reference: an integer dot product per block, scaled by the
 * block scales and summed in float (Q4_1/Q5_1 add m * s of the Q8_1 block; K-quants
 * apply their mins through the Q8_K bsums). F32/F16/BF16 sum float products in double. */
typedef float (*pl_quant_vec_dot_fn)(int64_t n, const void *restrict w, const void *restrict x);
/* nx activation rows (2 .. PL_QUANT_DOTN_MAX) against one weight row: out[t] =
 * vec_dot(n, w, x[t]), bit for bit (the weights are unpacked once for all: a decode step of
 * a few sessions). */
#define PL_QUANT_DOTN_MAX 8u
typedef void (*pl_quant_vec_dotn_fn)(int64_t n, const void *restrict w, const void *const *x,
                                     uint32_t nx, float *out);

/* How far ahead (bytes) the NEON kernels software-prefetch the weight stream (non-temporal
 * hint). The x86 kernels take theirs from pl_quant_prefetch(). */
#define PL_QUANT_PREFETCH_BYTES 4096

/* How the SIMD kernels software-prefetch the weight stream (each weight is read once per
 * token): the hint and how far ahead, for the per-row vec_dot kernels and for the decode
 * kernels of the repacked tiled path. Chosen once per process from the CPU, because the best
 * hint differs between x86 cores: on AMD Zen 5 PREFETCHNTA streams fastest (4 KB ahead per
 * row, 8 KB in the decode kernels); on Zen 4 no line prefetch at all (the hardware
 * prefetchers alone, with the page touch below); on Intel cores an NTA fill skips L2 and its
 * streamer, halving a core's bandwidth, and PREFETCHT0 2 KB ahead is best (see quant_x86.c
 * for the figures). A one-token decode also reads its rows as `streams` weight streams (the
 * rows cut into that many parts, a row of each in turn: see matmul.c); 2 on Intel, 1 on Zen.
 * Each prefetch step also touches, `page_ahead` bytes past its lines, the first line of the
 * 4 KiB page there (PREFETCHT2; 0: off): the hardware prefetchers stop at 4 KiB boundaries,
 * and under a hypervisor each 4 KiB page of the stream can cost its own nested page walk, so
 * one early touch per page starts both long before the loads arrive (on Zen, quant_x86.c).
 * PICOLM_PREFETCH=t0|nta|none[:BYTES[:DECODE_BYTES[:STREAMS[:PAGE_AHEAD]]]] overrides (x86
 * only; BYTES and DECODE_BYTES 256..65536, multiples of 64, with none still how many of a
 * product's first bytes the decode asks for at once, matmul.c; STREAMS 1..PL_QUANT_STREAMS_MAX;
 * PAGE_AHEAD 0 or 256..262144, multiples of 64); an invalid value keeps the CPU's choice and
 * says so in `source`. Benchmarks read memory the same way, so that their read loop stays an upper
 * bound for the kernels. */
enum pl_quant_pf_hint {
    PL_QUANT_PF_NONE = -1, /* no line prefetches (the page touch still runs when set) */
    PL_QUANT_PF_NTA = 0,   /* __builtin_prefetch locality 0: PREFETCHNTA */
    PL_QUANT_PF_T0 = 3,    /* locality 3: PREFETCHT0 */
};
#define PL_QUANT_STREAMS_MAX 4u
struct pl_quant_prefetch {
    int hint;              /* enum pl_quant_pf_hint */
    uint32_t bytes;        /* per-row vec_dot kernels: distance ahead of the loads */
    uint32_t decode_bytes; /* decode kernels of the repacked tiled path */
    uint32_t streams;      /* one-token decode: weight streams per thread, 1..STREAMS_MAX */
    const char *source;    /* why: "amd", "intel", "PICOLM_PREFETCH",
                              "PICOLM_PREFETCH invalid"; "fixed" off x86; static) */
    uint32_t page_ahead;   /* the page touch's distance past each step's lines; 0: none */
};
/* The page the touch starts: the hardware prefetchers' boundary and the smallest page. */
#define PL_QUANT_PAGE_BYTES 4096u
/* The line the page touch prefetches for a step whose lines start at p: p + page_ahead
 * rounded down to its page (only an address to hint: it may lie past any mapping). */
static inline const char *pl_quant_page_line(const char *p, uintptr_t page_ahead) {
    return p + (page_ahead - (((uintptr_t)p + page_ahead) & (PL_QUANT_PAGE_BYTES - 1)));
}
/* The process's setting (decided on first use; thread-safe; never NULL). */
const struct pl_quant_prefetch *pl_quant_prefetch(void);
/* Parses a PICOLM_PREFETCH value into *out (hint and distances; source untouched), given the
 * CPU's choice in *out for what the value leaves out. 0, or -EINVAL (out unchanged). */
int pl_quant_prefetch_parse(const char *s, struct pl_quant_prefetch *out);

struct pl_quant_kernels {
    pl_quant_to_f32_fn to_f32;     /* NULL: cannot dequantize */
    pl_quant_from_f32_fn from_f32; /* NULL: no quantizer for this type */
    uint32_t vec_dot_type;         /* enum pl_ggml_type the activations must be in */
    pl_quant_vec_dot_fn vec_dot;   /* NULL: no dot product */
    pl_quant_vec_dotn_fn vec_dotn; /* NULL: none (use vec_dot per token) */
    /* NULL: none. vec_dot with its Q8_K activations re-laid by pl_quant_q8_K_align() (x
     * 64-byte aligned); bit-identical to vec_dot. */
    pl_quant_vec_dot_fn vec_dot_a;
};

/* Bytes per 256 activations in the layout of vec_dot_a. */
#define PL_QUANT_Q8_KA_BYTES 384
/* Copies n (a multiple of 256) Q8_K activations from src into dst (n / 256 x
 * PL_QUANT_Q8_KA_BYTES bytes) in the layout of vec_dot_a. */
void pl_quant_q8_K_align(const void *restrict src, void *restrict dst, int64_t n);

/* Detect CPU features and fill the dispatch table; idempotent and thread-safe. With the
 * environment variable PICOLM_FORCE_SCALAR=1 the scalar references are used throughout. */
void pl_quant_init(void);

/* Kernels for type t (calls pl_quant_init() if needed), or NULL for an unknown type or a
 * type without any kernel (e.g. the IQ types). Kernels exist for F32, F16, BF16, Q4_0,
 * Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K (all three members) and for the activation types
 * Q8_1 and Q8_K (to_f32 and from_f32 only, vec_dot NULL). The pointer stays valid. */
const struct pl_quant_kernels *pl_quant_kernels(uint32_t t);
/* The portable scalar references, or NULL as above. Needs no pl_quant_init(). */
const struct pl_quant_kernels *pl_quant_kernels_ref(uint32_t t);
/* Name of the kernel set in use: "scalar", "avx2", "avxvnni", "avx512", "neon",
 * "neon-dotprod". */
const char *pl_quant_isa(void);
/* Name of the tiled matrix-product kernels the forward pass uses for batches of 9+ tokens
 * (AMX: 5+): "amx" (AMX-INT8, for Q4_K and Q6_K; the others on AVX-512), "avx512", or
 * "none". */
const char *pl_quant_tile_isa(void);

/* Whether the environment lets the engine use kernels of the set named isa (every SIMD
 * choice in the engine asks: quant, tiled matmul and attention kernels alike), so that each
 * path can be tested on one machine. PICOLM_FORCE_SCALAR=1 (set, not empty, not "0") or
 * PICOLM_ISA=scalar: none; PICOLM_ISA=avx2: "avx2" only; PICOLM_ISA=avxvnni: "avx2" and
 * "avxvnni"; PICOLM_ISA=avx512: those and "avx512"; PICOLM_ISA=amx: those and "amx" (AMX-INT8
 * tiled products); PICOLM_ISA=neon: "neon" only; PICOLM_ISA=neon-dotprod: both ARM sets; unset,
 * empty or "best": every set (the CPU decides). Another PICOLM_ISA value allows none (a typo must
 * not silently test the wrong path). "scalar" is always allowed. */
bool pl_quant_env_allows(const char *isa);

/* IEEE half and bfloat16 conversions (round to nearest even; NaN stays NaN). */
float pl_fp16_to_f32(uint16_t h);
uint16_t pl_f32_to_fp16(float f);
float pl_bf16_to_f32(uint16_t h);
uint16_t pl_f32_to_bf16(float f);

#endif
