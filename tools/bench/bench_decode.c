/* SPDX-License-Identifier: MIT */
/* picolm-bench decode: the matrix products of a decode step as the forward pass runs them
 * (pl_matmul_rows / pl_matmul_swiglu_rows over weights repacked as the loader repacks them,
 * so the kernels that run are the ones decode uses), on one thread or several (--threads:
 * each pinned, with a contiguous share of the rows), for each weight type with a tiled
 * kernel on this CPU: GB/s of weight bytes over an L2-sized matrix (arithmetic bound) and
 * over a large one (memory bound), each large pass alternating with a pass of the read loop
 * over the same buffer (on as many threads), best of each. Unlike `kernels` (the per-row dot
 * products of the quant table), this measures what decode reads through. Uses the engine's
 * private headers: it measures its internals. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bandwidth.h"
#include "bench.h"
#include "matmul.h"
#include "model_impl.h"
#include "pl/engine_quant.h"
#include "pl/engine_types.h"
#include "pl/pl_util.h"

#define TILE_ROWS 64 /* rows quantized for real, then repeated over the matrix */
#define L2_BYTES ((size_t)384 << 10)
#define L2_PASSES 2000
#define MEM_PASSES 8

static const uint32_t decode_types[] = {PL_GGML_TYPE_Q3_K, PL_GGML_TYPE_Q4_K, PL_GGML_TYPE_Q5_K,
                                        PL_GGML_TYPE_Q6_K, PL_GGML_TYPE_Q4_0, PL_GGML_TYPE_Q8_0};
#define N_DECODE_TYPES (sizeof(decode_types) / sizeof(decode_types[0]))

struct opts {
    uint32_t n;     /* row length */
    size_t mem;     /* large matrix bytes */
    uint32_t n_vec; /* decode vectors per pass (sessions in a step) */
    uint32_t n_th;  /* threads per pass */
    bool swiglu;    /* the FFN's fused gate and up products (two matrices, half each) */
    bool json;
};

struct matrix {
    struct pl_weight w;
    uint8_t *data;
    size_t bytes;
};

/* A matrix of type t, rows of n, about bytes big (whole rows, a multiple of 16), filled
 * with TILE_ROWS quantized random rows and repacked where the kernel has a layout of its
 * own. The random rows come from f (TILE_ROWS x n floats). */
static int matrix_make(uint32_t t, uint32_t n, size_t bytes, const float *f, struct matrix *ret) {
    const struct pl_quant_kernels *k = pl_quant_kernels(t), *ref = pl_quant_kernels_ref(t);
    uint64_t rb, ab;
    if (!k || !ref || !ref->from_f32 || pl_type_row_bytes(t, n, &rb) < 0 ||
        pl_type_row_bytes(k->vec_dot_type, n, &ab) < 0)
        return -ENOTSUP;
    const uint32_t rows = (uint32_t)(bytes / rb) & ~15u;
    if (rows == 0)
        return -EINVAL;
    ret->bytes = (size_t)rows * rb;
    ret->data = mmap(NULL, ret->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ret->data == MAP_FAILED)
        return -errno;
    (void)madvise(ret->data, ret->bytes, MADV_HUGEPAGE);
    ref->from_f32(f, ret->data, (int64_t)n * TILE_ROWS);
    for (uint32_t r = TILE_ROWS; r < rows; r++)
        memcpy(ret->data + (size_t)r * rb, ret->data + (size_t)(r % TILE_ROWS) * rb, rb);
    ret->w = (struct pl_weight){.data = ret->data,
                                .type = t,
                                .n_cols = n,
                                .n_rows = rows,
                                .row_bytes = rb,
                                .k = k,
                                .vk = pl_quant_kernels(k->vec_dot_type),
                                .act_row_bytes = ab,
                                .name = "bench"};
    const int r = pl_mm_repack_weight(&ret->w);
    if (r < 0) {
        (void)munmap(ret->data, ret->bytes);
        return r;
    }
    return 0;
}

/* The decode vectors for w (n_vec tokens from f's rows), as prep_act lays them out for a
 * small batch: per token one one-slot layout, or one half tile where the kernel wants it.
 * *ret_buf, *ret_xq: buffers to free. Returns 0, or -ENOTSUP (no decode kernel). */
static int act_make(const struct pl_weight *w, uint32_t n_vec, const float *f,
                    struct pl_mm_act *ret, uint8_t **ret_buf, uint8_t **ret_xq) {
    const struct pl_mm_tile_kernel *tk = pl_mm_weight_kernel(w);
    if (!tk)
        return -ENOTSUP;
    const bool half = tk->rows8 && tk->vec_max && n_vec > tk->vec_max;
    if (!half && tk->dec)
        tk = tk->dec;
    if (!half && !tk->vec_rows)
        return -ENOTSUP; /* the per-row dot products: `picolm-bench kernels` measures them */
    const size_t xs = (w->act_row_bytes + 63) & ~(size_t)63;
    const uint32_t slots = half ? PL_MM_HALF : 1;
    const size_t lay = (pl_mm_lay_bytes(w->n_cols, slots) + 63) & ~(size_t)63;
    uint8_t *xq = aligned_alloc(64, xs * n_vec);
    uint8_t *buf = aligned_alloc(64, lay * (half ? 1 : n_vec));
    if (!xq || !buf) {
        free(xq);
        free(buf);
        return -ENOMEM;
    }
    for (uint32_t t = 0; t < n_vec; t++) {
        w->vk->from_f32(f + (size_t)t * w->n_cols, xq + t * xs, w->n_cols);
        if (half)
            tk->prep(xq + t * xs, w->n_cols, buf, PL_MM_HALF, t);
        else
            tk->prep(xq + t * xs, w->n_cols, buf + t * lay, 1, 0);
    }
    for (uint32_t t = n_vec; half && t < PL_MM_HALF; t++)
        pl_mm_lay_clear(w->n_cols, buf, PL_MM_HALF, t);
    *ret = (struct pl_mm_act){.xq = xq,
                              .stride = xs,
                              .tk = tk,
                              .tiles = buf,
                              .tile_bytes = lay,
                              .n_tok = n_vec,
                              .slots = slots};
    *ret_buf = buf;
    *ret_xq = xq;
    return 0;
}

/* Rows [lo, hi) of the decode product(s) of w (with swiglu, of each half). */
static void pass_rows(const struct pl_weight *w, const struct pl_mm_act *act, bool swiglu,
                      float *out, uint32_t lo, uint32_t hi) {
    if (swiglu) {
        struct pl_weight g = *w, u = *w;
        g.n_rows = u.n_rows = w->n_rows / 2;
        u.data = (const uint8_t *)w->data + (size_t)g.n_rows * w->row_bytes;
        pl_matmul_swiglu_rows(&g, &u, act, out, g.n_rows, lo, hi);
    } else {
        pl_matmul_rows(w, act, out, w->n_rows, NULL, false, lo, hi);
    }
}

/* A pass over w's rows, worker i of n_th taking a contiguous share in multiples of 16 (as
 * the forward pass's segments). */
struct pass_ctx {
    const struct pl_weight *w;
    const struct pl_mm_act *act;
    bool swiglu;
    float *out;
    uint32_t rows, n_th;
};

static void pass_work(void *arg, uint32_t i) {
    const struct pass_ctx *c = arg;
    const uint32_t units = (c->rows + 15) / 16;
    pass_rows(c->w, c->act, c->swiglu, c->out, PL_MIN(units * i / c->n_th * 16, c->rows),
              PL_MIN(units * (i + 1) / c->n_th * 16, c->rows));
}

/* The fastest of `passes` passes of the decode product(s) over all of w (bytes big) by n_th
 * threads (bench_run_passes), in bytes per second; or a negative errno. */
static double passes_best(const struct pl_weight *w, size_t bytes, const struct pl_mm_act *act,
                          bool swiglu, float *out, uint32_t n_th, int passes) {
    struct pass_ctx c = {w, act, swiglu, out, swiglu ? w->n_rows / 2 : w->n_rows, n_th};
    double *secs = malloc(sizeof(double) * (size_t)passes), best = 0.0;
    if (!secs)
        return -ENOMEM;
    const int r = bench_run_passes(n_th, passes, pass_work, &c, secs);
    for (int p = 0; r == 0 && p < passes; p++)
        if (secs[p] > 0)
            best = PL_MAX(best, (double)bytes / secs[p]);
    free(secs);
    return r < 0 ? r : best;
}

struct result {
    const char *name;
    double l2, mem, bw; /* bytes/s: L2 matrix, large matrix, read loop beside it */
};

static int bench_type(uint32_t t, const struct opts *o, const float *f, struct result *res) {
    struct matrix m[2];
    const size_t sizes[2] = {L2_BYTES, o->mem};
    double best[2] = {0.0, 0.0}, bw = 0.0;
    int r = 0, made = 0;
    for (; made < 2; made++)
        if ((r = matrix_make(t, o->n, sizes[made], f, &m[made])) < 0)
            goto out;
    for (int i = 0; i < 2; i++) {
        struct pl_mm_act act;
        uint8_t *buf, *xq;
        if ((r = act_make(&m[i].w, o->n_vec, f, &act, &buf, &xq)) < 0)
            goto out;
        float *out = malloc(sizeof(float) * m[i].w.n_rows * o->n_vec);
        if (!out) {
            free(buf);
            free(xq);
            r = -ENOMEM;
            goto out;
        }
        /* the large matrix's passes alternate with the read loop over the same buffer */
        for (int p = 0; p < (i == 0 ? 1 : MEM_PASSES) && r >= 0; p++) {
            if (i == 1)
                bw = PL_MAX(bw, bench_bw_read(m[i].data, m[i].bytes, o->n_th, 1));
            const double g = passes_best(&m[i].w, m[i].bytes, &act, o->swiglu, out, o->n_th,
                                         i == 0 ? L2_PASSES : 1);
            if (g < 0)
                r = (int)g;
            else
                best[i] = PL_MAX(best[i], g);
        }
        free(out);
        free(buf);
        free(xq);
        if (r < 0)
            goto out;
    }
    *res = (struct result){pl_type_info(t)->name, best[0], best[1], bw};
out:
    for (int i = 0; i < made; i++)
        (void)munmap(m[i].data, m[i].bytes);
    return r;
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: picolm-bench decode [--n N] [--mem-mib N] [--vectors N] [--swiglu] "
            "[--threads N] [--json]\n"
            "  decode matrix products (the tiled kernels' decode path, weights repacked as at\n"
            "  load): GB/s over an L2-sized matrix and a large one, the large passes\n"
            "  alternating with the read loop over the same buffer.\n"
            "  --n N        row length, a multiple of 256 (default 2048)\n"
            "  --mem-mib N  large matrix size (default 256)\n"
            "  --vectors N  decode vectors per pass, 1..%u (default 1)\n"
            "  --swiglu     the FFN's fused gate and up products (each half of the matrix)\n"
            "  --threads N  threads per pass, 1..%u (default 1), each pinned to a CPU with a\n"
            "               contiguous share of the rows; the read loop on as many\n",
            PL_QUANT_DOTN_MAX, BENCH_MAX_THREADS);
}

static int parse(int argc, char **argv, struct opts *o) {
    *o = (struct opts){2048, (size_t)256 << 20, 1, 1, false, false};
    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        if (!strcmp(argv[i], "--json")) {
            o->json = true;
        } else if (!strcmp(argv[i], "--swiglu")) {
            o->swiglu = true;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 1;
        } else if (i + 1 < argc && !strcmp(argv[i], "--n")) {
            const unsigned long v = strtoul(argv[++i], &end, 10);
            if (*end || v < 256 || v > (1ul << 16) || v % 256)
                return -EINVAL;
            o->n = (uint32_t)v;
        } else if (i + 1 < argc && !strcmp(argv[i], "--mem-mib")) {
            const unsigned long v = strtoul(argv[++i], &end, 10);
            if (*end || v < 16 || v > 65536)
                return -EINVAL;
            o->mem = (size_t)v << 20;
        } else if (i + 1 < argc && !strcmp(argv[i], "--vectors")) {
            const unsigned long v = strtoul(argv[++i], &end, 10);
            if (*end || v < 1 || v > PL_QUANT_DOTN_MAX)
                return -EINVAL;
            o->n_vec = (uint32_t)v;
        } else if (i + 1 < argc && !strcmp(argv[i], "--threads")) {
            const unsigned long v = strtoul(argv[++i], &end, 10);
            if (*end || v < 1 || v > BENCH_MAX_THREADS)
                return -EINVAL;
            o->n_th = (uint32_t)v;
        } else {
            return -EINVAL;
        }
    }
    return 0;
}

int bench_decode_main(int argc, char **argv) {
    struct opts o;
    struct result res[N_DECODE_TYPES];
    size_t n_res = 0;
    int r = parse(argc, argv, &o);
    if (r > 0)
        return 0;
    if (r < 0) {
        usage(stderr);
        return 2;
    }
    pl_quant_init();
    float *f = malloc(sizeof(float) * o.n * PL_MAX(TILE_ROWS, PL_QUANT_DOTN_MAX));
    if (!f)
        return 1;
    unsigned long long rng = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < (size_t)o.n * TILE_ROWS; i++)
        f[i] = bench_normalish(&rng);
    for (size_t i = 0; i < N_DECODE_TYPES; i++) {
        r = bench_type(decode_types[i], &o, f, &res[n_res]);
        if (r == -ENOTSUP)
            continue; /* no decode kernel of its own on this CPU */
        if (r < 0) {
            fprintf(stderr, "picolm-bench decode: type %u: %s\n", decode_types[i], strerror(-r));
            free(f);
            return 1;
        }
        n_res++;
    }
    free(f);
    const struct pl_quant_prefetch *pf = pl_quant_prefetch();
    if (o.json) {
        printf("{\"bench\":\"decode\",\"tile_isa\":\"%s\",\"n_cols\":%u,\"vectors\":%u,"
               "\"swiglu\":%s,\"threads\":%u,\"prefetch\":\"%s:%u:%u:%u:%u\",\"types\":[",
               pl_quant_tile_isa(), o.n, o.n_vec, o.swiglu ? "true" : "false", o.n_th,
               bench_pf_hint_name(pf), pf->bytes, pf->decode_bytes, pf->streams, pf->page_ahead);
        for (size_t i = 0; i < n_res; i++)
            printf("%s{\"type\":\"%s\",\"l2_gbs\":%.3f,\"mem_gbs\":%.3f,\"read_bw_gbs\":%.3f,"
                   "\"mem_over_bw\":%.3f,\"l2_over_bw\":%.3f}",
                   i ? "," : "", res[i].name, res[i].l2 * 1e-9, res[i].mem * 1e-9, res[i].bw * 1e-9,
                   res[i].mem / res[i].bw, res[i].l2 / res[i].bw);
        printf("]}\n");
        return 0;
    }
    printf("picolm-bench decode: tiled kernels '%s', rows of %u, %u vector(s)%s, %u thread(s), "
           "prefetch %s %u B ahead, page touch %u B past (%s)\n",
           pl_quant_tile_isa(), o.n, o.n_vec, o.swiglu ? ", gate+up (SwiGLU)" : "", o.n_th,
           bench_pf_hint_name(pf), pf->decode_bytes, pf->page_ahead, pf->source);
    printf("%-5s | %9s %9s %9s | %8s %8s\n", "type", "L2", "memory", "read bw", "mem/bw", "L2/bw");
    for (size_t i = 0; i < n_res; i++)
        printf("%-5s | %9.2f %9.2f %9.2f | %8.3f %7.2fx\n", res[i].name, res[i].l2 * 1e-9,
               res[i].mem * 1e-9, res[i].bw * 1e-9, res[i].mem / res[i].bw, res[i].l2 / res[i].bw);
    printf("(GB/s of weight bytes; L2 matrix %zu KiB, large matrix %zu MiB; read bw: the read\n"
           " loop over the large matrix's buffer, between its passes)\n",
           L2_BYTES >> 10, o.mem >> 20);
    return 0;
}
