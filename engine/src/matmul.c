/* SPDX-License-Identifier: MIT */
/* Matrix x matrix products for forward.c (see matmul.h): the row-range driver over either
 * the per-row dot products of the quant dispatch table or a tiled kernel, and the choice of
 * tiled kernels, made once from the CPU features and pl_quant_env_allows(). */
#include "matmul.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#ifdef PL_MM_HAVE_NEON
#include <sys/auxv.h>
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1ul << 1)
#endif
#endif
#ifdef PL_MM_HAVE_AMX
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define AMX_ARCH_REQ_XCOMP_PERM 0x1023
#define AMX_XFEATURE_XTILEDATA 18
#endif

#include "model_impl.h"
#include "pl/engine_quant.h"
#include "pl/engine_types.h"
#include "pl/pl_util.h"

/* Per-row dot products and decode vectors: weight rows per block (a block of rows stays in
 * L1/L2 while every token passes). */
#define ROW_BLOCK 16u
/* Decode (up to PL_QUANT_DOTN_MAX tokens, or PL_MM_MIN_TILED_TOK decode vectors): rows whose
 * results wait in a stack buffer, which stays in L2, and then go to out together. A store
 * (or load) to a line of out every few rows, in the middle of the weights' stream, costs
 * that stream ~5% on an Intel Xeon core (a scratch loop over 256 MiB, rows of 3 KB: 18.1-18.6
 * GB/s without, 17.3-17.4 with one store per 16 rows to lines not in L2, 18.1-18.2 with
 * those stores to a 1 KiB ring that stays in L2; in another run 17.4-17.8 without, 16.8-17.0
 * with the stores, 17.5-17.6 when 256 rows' results go out at once). */
#define OUT_BLOCK 128u
/* Decode SwiGLU: rows per pl_mm_swiglu() call (the gate and up products wait on the
 * stack), and, with one weight stream, rows per kernel call for each of the two matrices.
 * The gate's and up's rows were taken ROW_BLOCK at a time in turn before; on the Zen 5 VM,
 * `picolm-bench decode --swiglu`, memory / read loop, median of 5 alternating runs, blocks
 * of 16 -> 256 -> 512 rows: Q4_K 0.78 -> 0.81 -> 0.89, Q6_K 0.72 -> 0.81 -> 0.83, Q4_0 0.78
 * -> 0.85 -> 0.87, Q8_0 0.82 -> 0.91 -> 0.90. */
#define SWIGLU_ROWS 512u

/* Tiled products: the tiles of a block (at most TILE_BLOCK_BYTES of them, so they stay in
 * L2) pass over every group of PL_MM_ROWS weight rows, which the kernel unpacks once per
 * block of tiles. */
#define TILE_BLOCK_BYTES (512u * 1024u)
#define TILE_BLOCK_MAX 32u

static uint32_t tile_block(size_t tile_bytes) {
    size_t tb = TILE_BLOCK_BYTES / tile_bytes;
    return (uint32_t)PL_MAX(PL_MIN(tb, (size_t)TILE_BLOCK_MAX), (size_t)1);
}

/* ---- Kernel choice ---- */

#ifdef PL_MM_HAVE_AVX512
static bool use_avx512;
#endif
#ifdef PL_MM_HAVE_AMX
static bool use_amx;
#endif
static pthread_once_t choose_once = PTHREAD_ONCE_INIT;
static pl_mm_swiglu_fn swiglu = pl_mm_swiglu_scalar;
static pl_mm_rmsnorm_fn rmsnorm = pl_mm_rmsnorm_scalar;
static enum pl_mm_repack repack_mode = PL_MM_REPACK_AUTO;

#ifdef PL_MM_HAVE_AMX
/* AMX-INT8 in CPUID (leaf 7: AMX-TILE EDX bit 24, AMX-INT8 bit 25), the tile state enabled
 * by the OS in XCR0 (bits 17, 18), and the kernel's permission for this process to use it
 * (Linux 5.16+: arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA). The request is made
 * once, from the first kernel lookup, which the model loader triggers: picolmd loads the
 * model before its system call filter is in place. */
static bool amx_usable(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25)))
        return false;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) /* OSXSAVE */
        return false;
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17))
        return false;
    return syscall(SYS_arch_prctl, AMX_ARCH_REQ_XCOMP_PERM, AMX_XFEATURE_XTILEDATA) == 0;
}
#endif

static void choose(void) {
    (void)pl_quant_prefetch(); /* the decode kernels' prefetch setting, before any runs */
#ifdef PL_MM_HAVE_AVX512
    __builtin_cpu_init();
    use_avx512 = pl_quant_env_allows("avx512") && __builtin_cpu_supports("avx512f") &&
                 __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                 __builtin_cpu_supports("avx512vnni");
    if (use_avx512) {
        swiglu = pl_mm_swiglu_avx512;
        rmsnorm = pl_mm_rmsnorm_avx512;
    }
#endif
#ifdef PL_MM_HAVE_AVX2
    __builtin_cpu_init();
    if (swiglu == pl_mm_swiglu_scalar && pl_quant_env_allows("avx2") &&
        __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        swiglu = pl_mm_swiglu_avx2;
        rmsnorm = pl_mm_rmsnorm_avx2;
    }
#endif
#ifdef PL_MM_HAVE_NEON
    if (pl_quant_env_allows("neon") && (getauxval(AT_HWCAP) & HWCAP_ASIMD) != 0) {
        swiglu = pl_mm_swiglu_neon;
        rmsnorm = pl_mm_rmsnorm_neon;
    }
#endif
#ifdef PL_MM_HAVE_AMX
    use_amx = use_avx512 && pl_quant_env_allows("amx") && amx_usable();
    if (use_amx)
        pl_mm_amx_init();
#endif
}

const char *pl_mm_isa(void) {
    (void)pthread_once(&choose_once, choose);
#ifdef PL_MM_HAVE_AMX
    if (use_amx)
        return "amx";
#endif
#ifdef PL_MM_HAVE_AVX512
    if (use_avx512)
        return "avx512";
#endif
    return NULL;
}

/* Its own once: the kernel choice (choose, via pl_mm_amx_init) asks for it. */
static pthread_once_t repack_once = PTHREAD_ONCE_INIT;

static void repack_choose(void) {
    const char *e = getenv("PICOLM_REPACK");
    repack_mode = !e                       ? PL_MM_REPACK_AUTO
                  : strcmp(e, "all") == 0  ? PL_MM_REPACK_ALL
                  : strcmp(e, "rows") == 0 ? PL_MM_REPACK_ROWS
                                           : PL_MM_REPACK_AUTO;
}

enum pl_mm_repack pl_mm_repack_mode(void) {
    (void)pthread_once(&repack_once, repack_choose);
    return repack_mode;
}

const char *pl_quant_tile_isa(void) {
    const char *isa = pl_mm_isa();
    return isa ? isa : "none";
}

const struct pl_mm_tile_kernel *pl_mm_tile_kernel(uint32_t type, int64_t n) {
    (void)pthread_once(&choose_once, choose);
    if (n <= 0 || n % 256 != 0)
        return NULL;
#ifdef PL_MM_HAVE_AMX
    if (use_amx) {
        const struct pl_mm_tile_kernel *k = pl_mm_amx_kernel(type);
        if (k)
            return k;
    }
#endif
#ifdef PL_MM_HAVE_AVX512
    if (use_avx512)
        return pl_mm_avx512_kernel(type, n);
#endif
    (void)type;
    return NULL;
}

const struct pl_mm_tile_kernel *pl_mm_weight_kernel(const struct pl_weight *w) {
    const struct pl_mm_tile_kernel *k = pl_mm_tile_kernel(w->type, w->n_cols);
    return k && w->packed ? k->packed : k;
}

int pl_mm_repack_weight(struct pl_weight *w) {
    const struct pl_mm_tile_kernel *k = pl_mm_tile_kernel(w->type, w->n_cols);
    if (!w->data || w->packed || !k || !k->packed || !k->repack)
        return 0;
    const uint32_t g = PL_MAX(k->packed->row_group, 1u);
    uint8_t *rows = malloc((size_t)g * w->row_bytes);
    if (!rows)
        return -ENOMEM;
    uint8_t *d = (uint8_t *)(uintptr_t)w->data; /* the model's own copy (matmul.h) */
    for (uint32_t r = 0; r < w->n_rows; r += g) {
        const uint32_t nr = PL_MIN(g, w->n_rows - r);
        uint8_t *p = d + (size_t)r * w->row_bytes;
        memcpy(rows, p, (size_t)nr * w->row_bytes);
        k->repack(w->n_cols, w->row_bytes, nr, rows, p);
    }
    free(rows);
    w->packed = true;
    return 1;
}

size_t pl_mm_tile_bytes(int64_t n) {
    return pl_mm_lay_bytes(n, PL_MM_TILE);
}

void pl_mm_lay_clear(int64_t n, uint8_t *buf, uint32_t nt, uint32_t t) {
    for (int64_t s = 0; s < n / 256; s++) {
        for (uint32_t g = 0; g < 64; g++)
            memset(pl_mm_lay_qs(buf, n, nt, s, g, t), 0, 4);
        for (uint32_t j = 0; j < 8; j++)
            pl_mm_lay_da(buf, n, nt, s, j)[t] = 0.0f;
        for (uint32_t j = 0; j < 16; j++) {
            pl_mm_lay_fs(buf, n, nt, s, j)[t] = 0.0f;
            pl_mm_lay_ns(buf, n, nt, s, j)[t] = 0;
        }
    }
}

void pl_mm_tile_clear(int64_t n, uint8_t *tile, uint32_t t) {
    pl_mm_lay_clear(n, tile, PL_MM_TILE, t);
}

/* ---- SwiGLU ---- */

void pl_mm_swiglu_scalar(float *out, const float *g, const float *u, size_t n) {
    for (size_t i = 0; i < n; i++)
        out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void pl_mm_swiglu(float *out, const float *g, const float *u, size_t n) {
    (void)pthread_once(&choose_once, choose);
    swiglu(out, g, u, n);
}

/* ---- RMSNorm ---- */

void pl_mm_rmsnorm_scalar(float *restrict y, const float *restrict x, const float *restrict w,
                          uint32_t n, float eps) {
    double part[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (uint32_t k = 0; k < 8; k++)
            part[k] += (double)(x[i + k] * x[i + k]);
    for (; i < n; i++)
        part[i % 8] += (double)(x[i] * x[i]);
    const double sum =
        ((part[0] + part[4]) + (part[2] + part[6])) + ((part[1] + part[5]) + (part[3] + part[7]));
    const float mean = (float)(sum / n);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (i = 0; i < n; i++)
        y[i] = (x[i] * scale) * w[i];
}

void pl_mm_rmsnorm(float *restrict y, const float *restrict x, const float *restrict w, uint32_t n,
                   float eps) {
    (void)pthread_once(&choose_once, choose);
    rmsnorm(y, x, w, n, eps);
}

/* ---- Drivers ---- */

static inline void store(float *o, float s, const float *bias, uint32_t r, bool accumulate) {
    if (bias)
        s += bias[r];
    *o = accumulate ? s + *o : s;
}

/* Rows [r0, r0 + nr) of n_tok tokens, waiting in st (token t's at st + t * st_stride), to
 * out. */
static void flush(float *out, size_t out_stride, const float *st, size_t st_stride, uint32_t n_tok,
                  uint32_t r0, uint32_t nr, const float *bias, bool accumulate) {
    for (uint32_t t = 0; t < n_tok; t++)
        for (uint32_t r = 0; r < nr; r++)
            store(out + (size_t)t * out_stride + r0 + r, st[(size_t)t * st_stride + r], bias,
                  r0 + r, accumulate);
}

/* One token's Q8_K activations re-laid for the kernel's vec_dot_a (aligned loads of the quants:
 * ggml's 292-byte blocks split every 64-byte load of them over two cache lines). On the Intel
 * AMX VM, with a prototype that padded the Q8_K blocks themselves, `picolm-bench kernels` from
 * memory: Q4_K 16.0-16.6 -> 16.6-17.1 GB/s (3 alternating rounds, L2 rates unchanged); the
 * engine's TinyLlama Q4_K_M decode +1.5% at 1 thread, +1% at 2; this form, 3 rounds at 1
 * thread: 24.0-24.6 -> 24.3-25.1 tok/s. Rows longer than the stack buffer take vec_dot. */
#define ALIGNED_ACT_BYTES (64u * PL_QUANT_Q8_KA_BYTES) /* rows of up to 16384 */
/* The per-row decode's dot product for n_tok tokens of w: vec_dot_a with token 0's activations
 * re-laid into xa (*ret_x0 = xa) for one token where the kernel has it, else vec_dot over
 * act->xq. */
static pl_quant_vec_dot_fn row_dot(const struct pl_weight *w, const struct pl_mm_act *act,
                                   uint8_t *xa, const uint8_t **ret_x0) {
    *ret_x0 = act->xq;
    if (act->n_tok != 1 || !w->k->vec_dot_a || w->k->vec_dot_type != PL_GGML_TYPE_Q8_K ||
        (uint64_t)w->n_cols / 256 * PL_QUANT_Q8_KA_BYTES > ALIGNED_ACT_BYTES)
        return w->k->vec_dot;
    pl_quant_q8_K_align(act->xq, xa, w->n_cols);
    *ret_x0 = xa;
    return w->k->vec_dot_a;
}

/* One token's rows [r_lo, r_hi) as ns weight streams (pl_quant_prefetch()->streams): the range
 * cut into ns parts, one row of each in turn, OUT_BLOCK rows of each part at a time. Each row
 * is the same call as in a single stream, so the results are bit-identical. The row is
 * vec_rows(1 row) over vec where vec_rows is set (the tiled decode kernels), else dot over x.
 *
 * On the Intel AMX VM a core's kernels read more from two streams than from one, though its
 * read loop does not (one stream 17.2-17.3 GB/s, two in turn 17.3-17.5). The engine's TinyLlama
 * Q4_K_M decode, 1 thread, per product (rdtsc around each, 128 tokens): Q4_K per row with
 * vec_dot_q4_K_gv_a, 2048 x 2048 13.8-14.1 -> 16.0-16.9 GB/s, 2048 x 5632 14.1-14.4 -> 16.1-16.8
 * (3 and 4 streams: 17.1-17.2 and 16.2 on the first, 15.3-15.6 on the second); Q6_K with
 * vec_q6_Kp 14.6-15.3 -> 15.4-15.7 (single rows in turn; blocks of 4 or 16 rows, no gain). The
 * fused SwiGLU, which takes a gate row and an up row in turn, was already at 17.2-18.0. */
struct row_fn {
    pl_quant_vec_dot_fn dot;
    const void *x;
    void (*vec_rows)(int64_t n, const uint8_t *w, size_t row_bytes, uint32_t n_rows,
                     const uint8_t *vec, float *out);
    const uint8_t *vec;
};

static inline float row_value(const struct pl_weight *w, const struct row_fn *f, uint32_t r) {
    const uint8_t *row = w->data + (size_t)r * w->row_bytes;
    float v;
    if (!f->vec_rows)
        return f->dot(w->n_cols, row, f->x);
    f->vec_rows(w->n_cols, row, w->row_bytes, 1, f->vec, &v);
    return v;
}

/* Part k of [r_lo, r_hi) in parts of `part` rows: its rows [c, c + max) from its start, as
 * *ret_lo and the count (0 past its end). */
static inline uint32_t part_rows(uint32_t r_lo, uint32_t r_hi, uint32_t part, uint32_t k,
                                 uint32_t c, uint32_t max, uint32_t *ret_lo) {
    const uint32_t end = PL_MIN(r_lo + (k + 1) * part, r_hi);
    *ret_lo = r_lo + k * part + c;
    return *ret_lo < end ? PL_MIN(max, end - *ret_lo) : 0;
}

/* Rows [r_lo, r_hi) of w for one token in ns parts, a row of each in turn. Without up: the
 * products to out (+ bias / accumulate) once per OUT_BLOCK rows of a part. With up (the fused
 * SwiGLU): a row of w (the gate) and the same row of up in turn (2 x ns streams),
 * silu(gate) * up to out once per SWIGLU_ROWS rows of a part. Rows of the tiled decode kernels'
 * SwiGLU were taken in blocks of ROW_BLOCK per matrix before; on the Intel VM, 1 thread, rdtsc
 * per product of the engine's TinyLlama decode: gate and up 11264 x 2048 in Q4_0 (vec_rows)
 * 14.6-15.0 GB/s in blocks, 15.6-15.9 a row each in turn, 16.2-16.5 with two parts (this); Q8_0
 * 15.2 -> 15.6-15.9 -> 15.6-15.7; Q4_K (per row, already a row each in turn) 17.7 -> 17.9. */
_Static_assert(OUT_BLOCK <= SWIGLU_ROWS, "rows_streamed's buffers hold a block of either");
static void rows_streamed(const struct pl_weight *w, const struct pl_weight *up,
                          const struct row_fn *f, uint32_t ns, float *out, const float *bias,
                          bool accumulate, uint32_t r_lo, uint32_t r_hi) {
    float st[PL_QUANT_STREAMS_MAX][SWIGLU_ROWS], su[PL_QUANT_STREAMS_MAX][SWIGLU_ROWS];
    uint32_t lo[PL_QUANT_STREAMS_MAX], nr[PL_QUANT_STREAMS_MAX];
    const uint32_t block = up ? SWIGLU_ROWS : OUT_BLOCK;
    const uint32_t part = (r_hi - r_lo + ns - 1) / ns;
    for (uint32_t c = 0; c < part; c += block) {
        for (uint32_t k = 0; k < ns; k++)
            nr[k] = part_rows(r_lo, r_hi, part, k, c, block, &lo[k]);
        for (uint32_t i = 0; i < nr[0]; i++) /* part 0 is the longest, only the last shorter */
            for (uint32_t k = 0; k < ns && i < nr[k]; k++) {
                st[k][i] = row_value(w, f, lo[k] + i);
                if (up)
                    su[k][i] = row_value(up, f, lo[k] + i);
            }
        for (uint32_t k = 0; k < ns; k++) {
            if (up)
                pl_mm_swiglu(out + lo[k], st[k], su[k], nr[k]);
            else
                flush(out, 0, st[k], block, 1, lo[k], nr[k], bias, accumulate);
        }
    }
}

/* Streams for one token's rows [r_lo, r_hi) with kernel tk (NULL: none): the setting's, while
 * every part keeps STREAM_ROWS_MIN rows; else 1. */
#define STREAM_ROWS_MIN 16u
static uint32_t decode_streams(const struct pl_mm_tile_kernel *tk, uint32_t n_tok, uint32_t r_lo,
                               uint32_t r_hi) {
    if (n_tok != 1 || (tk && tk->row_group > 1)) /* a grouped layout: one row at a time cannot be */
        return 1;
    const uint32_t ns = pl_quant_prefetch()->streams;
    return ns > 1 && r_hi - r_lo >= ns * STREAM_ROWS_MIN ? ns : 1;
}

/* A decode's first bytes of each weight stream, asked for at once. The kernels prefetch a
 * distance past their loads, so a call's first distance of bytes would otherwise come by
 * demand loads and the hardware prefetchers' ramp: at every product's start and at every
 * claim of rows that does not continue the thread's last one (forward.c's shares). Zen 5 VM,
 * TinyLlama, the prologue on every other decode step of a run: steps 0.6-2.2% shorter at 2
 * threads (Q4_K_M, Q4_0, Q8_0; 4 runs), 0.4-1.7% at 1 (2 runs). */
static void decode_prologue(const struct pl_weight *w, const struct pl_weight *up,
                            const struct pl_mm_act *act, uint32_t r_lo, uint32_t r_hi) {
    const struct pl_quant_prefetch *pf = pl_quant_prefetch();
    const bool vec = act->tk && act->slots == 1 && act->tk->vec_rows;
    struct pl_mm_span sp[PL_MM_DECODE_SPANS];
    const uint32_t n =
        pl_mm_decode_spans(w, up, act->n_tok, r_lo, r_hi, vec ? pf->decode_bytes : pf->bytes, sp);
    /* With hint none (Zen 4) these first lines are asked for with T0 all the same: there,
     * on alternate decode steps of one run, T0, NTA and no prologue were within 0.5%. */
    for (uint32_t i = 0; i < n; i++) {
        if (pf->hint == PL_QUANT_PF_NTA)
            pl_mm_prefetch(sp[i].p, sp[i].len, 0);
        else
            pl_mm_prefetch(sp[i].p, sp[i].len, 3);
    }
}

/* ---- Layouts in groups of rows (pl_mm_tile_kernel.row_group) ---- */

/* The row group of act's kernel; 1 for rows laid out one by one. */
static inline uint32_t act_group(const struct pl_mm_act *act) {
    return act->tk && act->tk->row_group > 1 ? act->tk->row_group : 1;
}

/* Whether a range of w's rows may start or end at row r: a group's first row, or a row
 * past the last whole group (laid out on its own), n_rows included. */
static inline bool group_edge(uint32_t r, uint32_t g, uint32_t n_rows) {
    return r % g == 0 || r >= n_rows / g * g;
}

/* The whole group of g rows of w from row r0, as a matrix of its own. */
static struct pl_weight group_view(const struct pl_weight *w, uint32_t r0, uint32_t g) {
    struct pl_weight v = *w;
    v.data = w->data + (size_t)r0 * w->row_bytes;
    v.n_rows = g;
    return v;
}

/* Tokens [t0, t0 + n) of act (t0 a multiple of its slots per tile) as an act of their own. */
static struct pl_mm_act act_tokens(const struct pl_mm_act *act, uint32_t t0, uint32_t n) {
    const uint32_t per = act->slots ? act->slots : PL_MM_TILE;
    struct pl_mm_act a = *act;
    a.xq = act->xq + (size_t)t0 * act->stride;
    a.tiles = act->tiles + (size_t)(t0 / per) * act->tile_bytes;
    a.n_tok = n;
    return a;
}

/* Tokens per piece of cut_groups(): a whole number of tiles. */
#define CUT_TOK PL_MM_TILE

/* Rows [lo, hi) of the group of w (g rows) from row r0, for every token of act: the whole
 * group's products, CUT_TOK tokens at a time, then each wanted row's value to out through
 * store() (or, with up, silu(gate) * up as computed for the group): the values a range on
 * group edges gets. */
static void cut_group(const struct pl_weight *w, const struct pl_weight *up,
                      const struct pl_mm_act *act, float *out, size_t out_stride, const float *bias,
                      bool accumulate, uint32_t r0, uint32_t g, uint32_t lo, uint32_t hi) {
    float tmp[CUT_TOK * PL_MM_ROWS_MAX];
    const struct pl_weight gw = group_view(w, r0, g);
    struct pl_weight gu;
    if (up)
        gu = group_view(up, r0, g);
    for (uint32_t t0 = 0; t0 < act->n_tok; t0 += CUT_TOK) {
        const uint32_t nt = PL_MIN(CUT_TOK, act->n_tok - t0);
        const struct pl_mm_act a = act_tokens(act, t0, nt);
        if (up)
            pl_matmul_swiglu_rows(&gw, &gu, &a, tmp, g, 0, g);
        else
            pl_matmul_rows(&gw, &a, tmp, g, NULL, false, 0, g);
        for (uint32_t t = 0; t < nt; t++)
            for (uint32_t r = lo; r < hi; r++) {
                float *o = out + (size_t)(t0 + t) * out_stride + r;
                if (up)
                    *o = tmp[(size_t)t * g + r - r0];
                else
                    store(o, tmp[(size_t)t * g + r - r0], bias, r, accumulate);
            }
    }
}
_Static_assert(CUT_TOK % PL_MM_TILE == 0 && CUT_TOK % PL_MM_HALF == 0, "pieces of whole tiles");

/* A range [*r_lo, *r_hi) of a grouped layout that cuts a group at either end: the cut groups'
 * rows in it computed here (cut_group), the range narrowed to the rest, whose ends are group
 * edges (possibly empty). */
static void cut_groups(const struct pl_weight *w, const struct pl_weight *up,
                       const struct pl_mm_act *act, float *out, size_t out_stride,
                       const float *bias, bool accumulate, uint32_t g, uint32_t *r_lo,
                       uint32_t *r_hi) {
    if (*r_lo < *r_hi && !group_edge(*r_lo, g, w->n_rows)) {
        const uint32_t r0 = *r_lo / g * g, hi = PL_MIN(r0 + g, *r_hi);
        cut_group(w, up, act, out, out_stride, bias, accumulate, r0, g, *r_lo, hi);
        *r_lo = hi;
    }
    if (*r_lo < *r_hi && !group_edge(*r_hi, g, w->n_rows)) {
        const uint32_t r0 = *r_hi / g * g;
        cut_group(w, up, act, out, out_stride, bias, accumulate, r0, g, r0, *r_hi);
        *r_hi = r0;
    }
}

void pl_matmul_rows(const struct pl_weight *w, const struct pl_mm_act *act, float *out,
                    size_t out_stride, const float *bias, bool accumulate, uint32_t r_lo,
                    uint32_t r_hi) {
    const uint8_t *wd = w->data;
    const uint32_t n_tok = act->n_tok;
    const uint32_t grp = act_group(act);
    if (grp > 1) {
        cut_groups(w, NULL, act, out, out_stride, bias, accumulate, grp, &r_lo, &r_hi);
        if (r_lo >= r_hi)
            return;
    }

    const uint32_t ns = decode_streams(act->tk, n_tok, r_lo, r_hi);
    if (n_tok < PL_MM_MIN_TILED_TOK)
        decode_prologue(w, NULL, act, r_lo, r_hi);
    if (act->tk && act->slots == 1 && act->tk->vec_rows && ns > 1) {
        const struct row_fn f = {NULL, NULL, act->tk->vec_rows, act->tiles};
        rows_streamed(w, NULL, &f, ns, out, bias, accumulate, r_lo, r_hi);
        return;
    }
    if (act->tk && act->slots == 1 && act->tk->vec_rows) {
        /* All tokens in one vec_rowsn call where the kernel has it, else one by one. The
         * results of OUT_BLOCK rows wait in tmp. The kernels store each row's float alone;
         * the loop that adds them to out reads them four or more at a time, which a store
         * cannot forward: it waits for the stores to leave the core (at 2 threads, with
         * blocks of 16 rows, Q4_K_M decode spent 2.3% of its samples in this function, most
         * on that load). So a block's results go to out one block later, from the other half
         * of tmp. */
        float tmp[2][PL_MM_MIN_TILED_TOK][OUT_BLOCK];
        const uint8_t *vec[PL_MM_MIN_TILED_TOK];
        float *outs[2][PL_MM_MIN_TILED_TOK];
        for (uint32_t t = 0; t < n_tok; t++) {
            vec[t] = act->tiles + (size_t)t * act->tile_bytes;
            outs[0][t] = tmp[0][t];
            outs[1][t] = tmp[1][t];
        }
        const bool multi = act->tk->vec_rowsn && n_tok >= 2 && n_tok <= PL_QUANT_DOTN_MAX;
        /* one token: a block's rows in one call; several: ROW_BLOCK rows for each in turn */
        const uint32_t sub = n_tok == 1 ? OUT_BLOCK : ROW_BLOCK;
        uint32_t prev = r_hi, prev_nr = 0, h = 0;
        for (uint32_t r0 = r_lo;; r0 += OUT_BLOCK, h ^= 1u) {
            const uint32_t nr = r0 < r_hi ? PL_MIN(OUT_BLOCK, r_hi - r0) : 0;
            const uint8_t *wr = wd + (size_t)r0 * w->row_bytes;
            if (nr && multi)
                act->tk->vec_rowsn(w->n_cols, wr, w->row_bytes, nr, vec, n_tok, outs[h]);
            else
                for (uint32_t b = 0; b < nr; b += sub)
                    for (uint32_t t = 0; t < n_tok; t++)
                        act->tk->vec_rows(w->n_cols, wr + (size_t)b * w->row_bytes, w->row_bytes,
                                          PL_MIN(sub, nr - b), vec[t], tmp[h][t] + b);
            flush(out, out_stride, tmp[h ^ 1u][0], OUT_BLOCK, n_tok, prev, prev_nr, bias,
                  accumulate);
            if (!nr)
                break;
            prev = r0;
            prev_nr = nr;
        }
        return;
    }
    if (act->tk && act->slots != 1) {
        float tmp[TILE_BLOCK_MAX * PL_MM_ROWS_MAX * PL_MM_TILE];
        const uint32_t ts = act->slots == PL_MM_HALF ? PL_MM_HALF : PL_MM_TILE;
        const pl_mm_rows_fn rows = ts == PL_MM_HALF ? act->tk->rows8 : act->tk->rows;
        const uint32_t n_tiles = (n_tok + ts - 1) / ts;
        const uint32_t tb = tile_block(act->tile_bytes);
        const uint32_t step = act->tk->row_step;
        for (uint32_t i0 = 0; i0 < n_tiles; i0 += tb) {
            const uint32_t ni = PL_MIN(tb, n_tiles - i0);
            for (uint32_t r0 = r_lo; r0 < r_hi; r0 += step) {
                const uint32_t nr = PL_MIN(step, r_hi - r0);
                rows(w->n_cols, wd + (size_t)r0 * w->row_bytes, w->row_bytes, nr,
                     act->tiles + (size_t)i0 * act->tile_bytes, act->tile_bytes, ni, tmp);
                for (uint32_t i = 0; i < ni; i++) {
                    const uint32_t t0 = (i0 + i) * ts;
                    const uint32_t nt = PL_MIN(ts, n_tok - t0);
                    for (uint32_t t = 0; t < nt; t++)
                        for (uint32_t r = 0; r < nr; r++)
                            store(out + (size_t)(t0 + t) * out_stride + r0 + r,
                                  tmp[(i * nr + r) * ts + t], bias, r0 + r, accumulate);
                }
            }
        }
        return;
    }

    /* Per row: all tokens in one vec_dotn call where the type has it (the weights unpacked
     * once for all; bit-identical to vec_dot), else one by one. */
    const pl_quant_vec_dot_fn dot = w->k->vec_dot;
    const void *xs[PL_QUANT_DOTN_MAX];
    const bool multi = w->k->vec_dotn && n_tok >= 2 && n_tok <= PL_QUANT_DOTN_MAX;
    for (uint32_t t = 0; multi && t < n_tok; t++)
        xs[t] = act->xq + (size_t)t * act->stride;
    if (n_tok <= PL_QUANT_DOTN_MAX) {
        /* decode: OUT_BLOCK rows' results wait in st */
        float st[PL_QUANT_DOTN_MAX][OUT_BLOCK];
        _Alignas(64) uint8_t xa[ALIGNED_ACT_BYTES];
        const uint8_t *x1;
        const pl_quant_vec_dot_fn dot1 = row_dot(w, act, xa, &x1);
        if (ns > 1) {
            const struct row_fn f = {dot1, x1, NULL, NULL};
            rows_streamed(w, NULL, &f, ns, out, bias, accumulate, r_lo, r_hi);
            return;
        }
        for (uint32_t c0 = r_lo; c0 < r_hi; c0 += OUT_BLOCK) {
            const uint32_t c1 = PL_MIN(c0 + OUT_BLOCK, r_hi);
            for (uint32_t r0 = c0; r0 < c1; r0 += ROW_BLOCK) {
                const uint32_t r1 = PL_MIN(r0 + ROW_BLOCK, c1);
                for (uint32_t r = r0; multi && r < r1; r++) {
                    float o[PL_QUANT_DOTN_MAX];
                    w->k->vec_dotn(w->n_cols, wd + (size_t)r * w->row_bytes, xs, n_tok, o);
                    for (uint32_t t = 0; t < n_tok; t++)
                        st[t][r - c0] = o[t];
                }
                for (uint32_t t = 0; !multi && t < n_tok; t++) {
                    const uint8_t *x = t == 0 ? x1 : act->xq + (size_t)t * act->stride;
                    for (uint32_t r = r0; r < r1; r++)
                        st[t][r - c0] = dot1(w->n_cols, wd + (size_t)r * w->row_bytes, x);
                }
            }
            flush(out, out_stride, st[0], OUT_BLOCK, n_tok, c0, c1 - c0, bias, accumulate);
        }
        return;
    }
    /* larger batches of a type without tiles: straight to out, PL_QUANT_DOTN_MAX tokens per
     * vec_dotn call where the type has it (each row unpacked once for them) */
    for (uint32_t r0 = r_lo; r0 < r_hi; r0 += ROW_BLOCK) {
        uint32_t r1 = PL_MIN(r0 + ROW_BLOCK, r_hi);
        for (uint32_t t0 = 0; t0 < n_tok; t0 += PL_QUANT_DOTN_MAX) {
            const uint32_t nt = PL_MIN(PL_QUANT_DOTN_MAX, n_tok - t0);
            if (w->k->vec_dotn && nt >= 2) {
                const void *xg[PL_QUANT_DOTN_MAX];
                for (uint32_t t = 0; t < nt; t++)
                    xg[t] = act->xq + (size_t)(t0 + t) * act->stride;
                for (uint32_t r = r0; r < r1; r++) {
                    float o[PL_QUANT_DOTN_MAX];
                    w->k->vec_dotn(w->n_cols, wd + (size_t)r * w->row_bytes, xg, nt, o);
                    for (uint32_t t = 0; t < nt; t++)
                        store(out + (size_t)(t0 + t) * out_stride + r, o[t], bias, r, accumulate);
                }
                continue;
            }
            for (uint32_t t = t0; t < t0 + nt; t++) {
                const uint8_t *x = act->xq + (size_t)t * act->stride;
                for (uint32_t r = r0; r < r1; r++)
                    store(out + (size_t)t * out_stride + r,
                          dot(w->n_cols, wd + (size_t)r * w->row_bytes, x), bias, r, accumulate);
            }
        }
    }
}

/* The decode path of w for one token (as prep_act in forward.c chooses it): true when the
 * weight's tiled kernel decodes through vec_rows, false for the per-row dot products. */
static const struct pl_mm_tile_kernel *decode_kernel(const struct pl_weight *w) {
    const struct pl_mm_tile_kernel *tk = pl_mm_weight_kernel(w);
    return tk && tk->dec ? tk->dec : tk;
}

static bool decode_vec_rows(const struct pl_weight *w) {
    const struct pl_mm_tile_kernel *tk = decode_kernel(w);
    return tk && tk->vec_rows;
}

uint32_t pl_mm_decode_spans(const struct pl_weight *w, const struct pl_weight *up, uint32_t n_tok,
                            uint32_t r_lo, uint32_t r_hi, size_t per_stream,
                            struct pl_mm_span *spans) {
    if (r_lo >= r_hi)
        return 0;
    const uint32_t ns = decode_streams(decode_kernel(w), n_tok, r_lo, r_hi);
    /* one stream through the tiled kernel's SwiGLU: (up to) SWIGLU_ROWS rows of the gate first */
    const bool blocks = up && ns == 1 && decode_vec_rows(w);
    const uint32_t per = up && !blocks ? 2 : 1; /* streams per part */
    const uint32_t part = (r_hi - r_lo + ns - 1) / ns;
    uint32_t n = 0;
    for (uint32_t k = 0; k < ns; k++) {
        uint32_t lo;
        const uint32_t nr = part_rows(r_lo, r_hi, part, k, 0, blocks ? SWIGLU_ROWS : part, &lo);
        const size_t len = PL_MIN(per_stream, (size_t)nr * w->row_bytes);
        for (uint32_t j = 0; j < per && len; j++)
            spans[n++] = (struct pl_mm_span){
                (const uint8_t *)(j ? up : w)->data + (size_t)lo * w->row_bytes, len};
    }
    return n;
}

void pl_matmul_swiglu_rows(const struct pl_weight *gate, const struct pl_weight *up,
                           const struct pl_mm_act *act, float *out, size_t out_stride,
                           uint32_t r_lo, uint32_t r_hi) {
    const uint8_t *gd = gate->data, *ud = up->data;
    const uint32_t n_tok = act->n_tok;
    const uint32_t grp = act_group(act);
    if (grp > 1) {
        cut_groups(gate, up, act, out, out_stride, NULL, false, grp, &r_lo, &r_hi);
        if (r_lo >= r_hi)
            return;
    }
    const size_t rb = gate->row_bytes;
    const uint32_t ns = decode_streams(act->tk, n_tok, r_lo, r_hi);
    if (n_tok < PL_MM_MIN_TILED_TOK)
        decode_prologue(gate, up, act, r_lo, r_hi);

    if (act->tk && act->slots == 1 && act->tk->vec_rows && ns > 1) {
        const struct row_fn f = {NULL, NULL, act->tk->vec_rows, act->tiles};
        rows_streamed(gate, up, &f, ns, out, NULL, false, r_lo, r_hi);
        return;
    }

    if (act->tk && act->slots == 1 && act->tk->vec_rows) {
        /* as pl_matmul_rows(): all tokens in one vec_rowsn call where the kernel has it;
         * gate and up products side by side on the stack, silu(gate) * up to out once per
         * SWIGLU_ROWS (see OUT_BLOCK) */
        float tg[PL_MM_MIN_TILED_TOK][SWIGLU_ROWS], tu[PL_MM_MIN_TILED_TOK][SWIGLU_ROWS];
        const uint8_t *vec[PL_MM_MIN_TILED_TOK];
        float *og[PL_MM_MIN_TILED_TOK], *ou[PL_MM_MIN_TILED_TOK];
        for (uint32_t t = 0; t < n_tok; t++)
            vec[t] = act->tiles + (size_t)t * act->tile_bytes;
        const bool multi = act->tk->vec_rowsn && n_tok >= 2 && n_tok <= PL_QUANT_DOTN_MAX;
        /* One call per matrix covers the whole block when each weight byte is read once
         * (one token, or all of them per call): every switch between the gate's stream and
         * up's restarts the kernel's prefetch. Token by token, ROW_BLOCK rows stay cached
         * for the next token. */
        const uint32_t sub = n_tok == 1 || multi ? SWIGLU_ROWS : ROW_BLOCK;
        for (uint32_t c0 = r_lo; c0 < r_hi; c0 += SWIGLU_ROWS) {
            const uint32_t c1 = PL_MIN(c0 + SWIGLU_ROWS, r_hi);
            for (uint32_t r0 = c0; r0 < c1; r0 += sub) {
                const uint32_t nr = PL_MIN(sub, c1 - r0);
                const uint8_t *gr = gd + (size_t)r0 * rb, *ur = ud + (size_t)r0 * rb;
                for (uint32_t t = 0; t < n_tok; t++) {
                    og[t] = tg[t] + (r0 - c0);
                    ou[t] = tu[t] + (r0 - c0);
                }
                if (multi) {
                    act->tk->vec_rowsn(gate->n_cols, gr, rb, nr, vec, n_tok, og);
                    act->tk->vec_rowsn(up->n_cols, ur, rb, nr, vec, n_tok, ou);
                } else {
                    for (uint32_t t = 0; t < n_tok; t++) {
                        act->tk->vec_rows(gate->n_cols, gr, rb, nr, vec[t], og[t]);
                        act->tk->vec_rows(up->n_cols, ur, rb, nr, vec[t], ou[t]);
                    }
                }
            }
            for (uint32_t t = 0; t < n_tok; t++)
                pl_mm_swiglu(out + (size_t)t * out_stride + c0, tg[t], tu[t], c1 - c0);
        }
        return;
    }
    if (act->tk && act->slots != 1) {
        float tg[TILE_BLOCK_MAX * PL_MM_ROWS_MAX * PL_MM_TILE];
        float tu[TILE_BLOCK_MAX * PL_MM_ROWS_MAX * PL_MM_TILE];
        const uint32_t ts = act->slots == PL_MM_HALF ? PL_MM_HALF : PL_MM_TILE;
        const pl_mm_rows_fn rows = ts == PL_MM_HALF ? act->tk->rows8 : act->tk->rows;
        const uint32_t n_tiles = (n_tok + ts - 1) / ts;
        const uint32_t tb = tile_block(act->tile_bytes);
        const uint32_t step = act->tk->row_step;
        for (uint32_t i0 = 0; i0 < n_tiles; i0 += tb) {
            const uint32_t ni = PL_MIN(tb, n_tiles - i0);
            const uint8_t *tiles = act->tiles + (size_t)i0 * act->tile_bytes;
            for (uint32_t r0 = r_lo; r0 < r_hi; r0 += step) {
                const uint32_t nr = PL_MIN(step, r_hi - r0);
                rows(gate->n_cols, gd + (size_t)r0 * rb, rb, nr, tiles, act->tile_bytes, ni, tg);
                rows(up->n_cols, ud + (size_t)r0 * rb, rb, nr, tiles, act->tile_bytes, ni, tu);
                pl_mm_swiglu(tg, tg, tu, (size_t)ni * nr * ts);
                for (uint32_t i = 0; i < ni; i++) {
                    const uint32_t t0 = (i0 + i) * ts;
                    const uint32_t nt = PL_MIN(ts, n_tok - t0);
                    for (uint32_t t = 0; t < nt; t++)
                        for (uint32_t r = 0; r < nr; r++)
                            out[(size_t)(t0 + t) * out_stride + r0 + r] = tg[(i * nr + r) * ts + t];
                }
            }
        }
        return;
    }

    const pl_quant_vec_dot_fn dot = gate->k->vec_dot;
    const void *xs[PL_QUANT_DOTN_MAX];
    const bool multi = gate->k->vec_dotn && n_tok >= 2 && n_tok <= PL_QUANT_DOTN_MAX;
    for (uint32_t t = 0; multi && t < n_tok; t++)
        xs[t] = act->xq + (size_t)t * act->stride;
    if (n_tok <= PL_QUANT_DOTN_MAX) {
        /* as pl_matmul_rows(): decode, SWIGLU_ROWS rows' products wait on the stack */
        float tg[PL_QUANT_DOTN_MAX][SWIGLU_ROWS], tu[PL_QUANT_DOTN_MAX][SWIGLU_ROWS];
        _Alignas(64) uint8_t xa[ALIGNED_ACT_BYTES];
        const uint8_t *x1 = act->xq;
        const pl_quant_vec_dot_fn dot1 = up->k == gate->k ? row_dot(gate, act, xa, &x1) : dot;
        if (ns > 1) {
            const struct row_fn f = {dot1, x1, NULL, NULL};
            rows_streamed(gate, up, &f, ns, out, NULL, false, r_lo, r_hi);
            return;
        }
        for (uint32_t c0 = r_lo; c0 < r_hi; c0 += SWIGLU_ROWS) {
            const uint32_t c1 = PL_MIN(c0 + SWIGLU_ROWS, r_hi);
            for (uint32_t r0 = c0; r0 < c1; r0 += ROW_BLOCK) {
                const uint32_t r1 = PL_MIN(r0 + ROW_BLOCK, c1);
                for (uint32_t r = r0; multi && r < r1; r++) {
                    float g[PL_QUANT_DOTN_MAX], u[PL_QUANT_DOTN_MAX];
                    gate->k->vec_dotn(gate->n_cols, gd + (size_t)r * rb, xs, n_tok, g);
                    up->k->vec_dotn(up->n_cols, ud + (size_t)r * rb, xs, n_tok, u);
                    for (uint32_t t = 0; t < n_tok; t++) {
                        tg[t][r - c0] = g[t];
                        tu[t][r - c0] = u[t];
                    }
                }
                for (uint32_t t = 0; !multi && t < n_tok; t++) {
                    const uint8_t *x = t == 0 ? x1 : act->xq + (size_t)t * act->stride;
                    for (uint32_t r = r0; r < r1; r++) {
                        tg[t][r - c0] = dot1(gate->n_cols, gd + (size_t)r * rb, x);
                        tu[t][r - c0] = dot1(up->n_cols, ud + (size_t)r * rb, x);
                    }
                }
            }
            for (uint32_t t = 0; t < n_tok; t++)
                pl_mm_swiglu(out + (size_t)t * out_stride + c0, tg[t], tu[t], c1 - c0);
        }
        return;
    }
    /* larger batches of a type without tiles: gate products straight to out, tokens as in
     * pl_matmul_rows() */
    for (uint32_t r0 = r_lo; r0 < r_hi; r0 += ROW_BLOCK) {
        uint32_t r1 = PL_MIN(r0 + ROW_BLOCK, r_hi);
        for (uint32_t t0 = 0; t0 < n_tok; t0 += PL_QUANT_DOTN_MAX) {
            const uint32_t nt = PL_MIN(PL_QUANT_DOTN_MAX, n_tok - t0);
            float u[PL_QUANT_DOTN_MAX][ROW_BLOCK];
            if (gate->k->vec_dotn && nt >= 2) {
                const void *xg[PL_QUANT_DOTN_MAX];
                for (uint32_t t = 0; t < nt; t++)
                    xg[t] = act->xq + (size_t)(t0 + t) * act->stride;
                for (uint32_t r = r0; r < r1; r++) {
                    float g[PL_QUANT_DOTN_MAX], uu[PL_QUANT_DOTN_MAX];
                    gate->k->vec_dotn(gate->n_cols, gd + (size_t)r * rb, xg, nt, g);
                    up->k->vec_dotn(up->n_cols, ud + (size_t)r * rb, xg, nt, uu);
                    for (uint32_t t = 0; t < nt; t++) {
                        out[(size_t)(t0 + t) * out_stride + r] = g[t];
                        u[t][r - r0] = uu[t];
                    }
                }
            } else {
                for (uint32_t t = 0; t < nt; t++) {
                    const uint8_t *x = act->xq + (size_t)(t0 + t) * act->stride;
                    float *o = out + (size_t)(t0 + t) * out_stride;
                    for (uint32_t r = r0; r < r1; r++) {
                        o[r] = dot(gate->n_cols, gd + (size_t)r * rb, x);
                        u[t][r - r0] = dot(up->n_cols, ud + (size_t)r * rb, x);
                    }
                }
            }
            for (uint32_t t = 0; t < nt; t++) {
                float *o = out + (size_t)(t0 + t) * out_stride;
                pl_mm_swiglu(o + r0, o + r0, u[t], r1 - r0);
            }
        }
    }
}
