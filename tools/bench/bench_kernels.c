/* SPDX-License-Identifier: MIT */
/* picolm-bench kernels: for each weight type, how fast vec_dot consumes weight bytes, as
 * decode uses it (one activation row against every row of a matrix, one thread), with the
 * scalar references and with the kernel set pl_quant_kernels() picked for this CPU: over a
 * matrix that fits in L2 (compute speed) and over a large one (memory-bound), next to the
 * single-thread read bandwidth measured over the same large buffer in the same run, with
 * and without the kernels' software prefetches (the best one is the ratio's base). */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "bandwidth.h"
#include "bench.h"
#include "pl/engine_quant.h"
#include "pl/engine_types.h"

#define N_COLS 4096  /* row length: a multiple of every block size */
#define TILE_ROWS 64 /* rows quantized for real, then tiled over the matrix */
#define DEFAULT_MEM_MIB 256
#define DEFAULT_MIN_TIME_S 0.25
#define MEM_PASSES 3
#define BW_PASSES 5

static const uint32_t bench_types[] = {
    PL_GGML_TYPE_Q4_K, PL_GGML_TYPE_Q6_K, PL_GGML_TYPE_Q8_0, PL_GGML_TYPE_Q4_0, PL_GGML_TYPE_Q4_1,
    PL_GGML_TYPE_Q5_0, PL_GGML_TYPE_Q5_1, PL_GGML_TYPE_Q2_K, PL_GGML_TYPE_Q3_K, PL_GGML_TYPE_Q5_K,
    PL_GGML_TYPE_F16,  PL_GGML_TYPE_BF16, PL_GGML_TYPE_F32,
};
#define N_BENCH_TYPES (sizeof(bench_types) / sizeof(bench_types[0]))

struct opts {
    bool json;
    size_t l2_bytes;  /* matrix size for the compute-bound run */
    size_t mem_bytes; /* matrix size for the memory-bound run */
    double min_time_s;
};

struct result {
    const char *name;
    uint64_t row_bytes;
    double l2_ref, l2_simd;   /* bytes/s */
    double mem_ref, mem_simd; /* bytes/s */
};

static double now_s(void) {
    struct timespec ts;
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* L2 size of CPU 0 from sysfs ("2048K"), or 0 if unknown. */
static size_t l2_size(void) {
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index2/size", "re");
    unsigned long v = 0;
    char unit = 0;
    if (!f)
        return 0;
    if (fscanf(f, "%lu%c", &v, &unit) < 1)
        v = 0;
    (void)fclose(f);
    if (unit == 'K')
        v <<= 10;
    else if (unit == 'M')
        v <<= 20;
    return v;
}

/* One pass over n_rows rows: returns a sum the caller keeps (so no call is dropped). */
static float pass(pl_quant_vec_dot_fn dot, const uint8_t *w, uint64_t row_bytes, size_t n_rows,
                  const void *x) {
    float s = 0.f;
    for (size_t r = 0; r < n_rows; r++)
        s += dot(N_COLS, w + r * row_bytes, x);
    return s;
}

/* Weight bytes per second of dot over the matrix: repeated passes for at least min_time
 * (best pass), or best of `passes` when passes > 0. */
static double rate(pl_quant_vec_dot_fn dot, const uint8_t *w, uint64_t row_bytes, size_t n_rows,
                   const void *x, double min_time, int passes, float *sink) {
    double best = 0.0, spent = 0.0;
    for (int p = 0; passes > 0 ? p < passes : spent < min_time; p++) {
        double t0 = now_s();
        *sink += pass(dot, w, row_bytes, n_rows, x);
        double dt = now_s() - t0;
        spent += dt;
        if (dt > 0 && (double)(row_bytes * n_rows) / dt > best)
            best = (double)(row_bytes * n_rows) / dt;
    }
    return best;
}

/* Fill [buf, buf + len) with whole rows of type t: TILE_ROWS rows of random N(0,1)-ish data
 * quantized by the reference quantizer, repeated. Returns the number of rows. */
static size_t fill_rows(uint64_t row_bytes, uint8_t *buf, size_t len, const uint8_t *tile) {
    size_t n_rows = len / row_bytes;
    for (size_t r = 0; r < n_rows; r++)
        memcpy(buf + r * row_bytes, tile + (r % TILE_ROWS) * row_bytes, row_bytes);
    return n_rows;
}

static int bench_type(uint32_t t, const struct opts *o, uint8_t *mem, struct result *res,
                      float *sink) {
    const struct pl_quant_kernels *ref = pl_quant_kernels_ref(t);
    const struct pl_quant_kernels *simd = pl_quant_kernels(t);
    const struct pl_type_info *ti = pl_type_info(t);
    uint64_t row_bytes, act_bytes;
    int r = 0;
    if (!ref || !simd || !ti || !ref->vec_dot || !ref->from_f32)
        return -ENOTSUP;
    const struct pl_quant_kernels *xk = pl_quant_kernels_ref(ref->vec_dot_type);
    if ((r = pl_type_row_bytes(t, N_COLS, &row_bytes)) < 0 ||
        (r = pl_type_row_bytes(ref->vec_dot_type, N_COLS, &act_bytes)) < 0)
        return r;
    if (!xk || !xk->from_f32)
        return -ENOTSUP;
    float *f = malloc((size_t)N_COLS * TILE_ROWS * sizeof(float));
    uint8_t *tile = aligned_alloc(64, (row_bytes * TILE_ROWS + 63) & ~(uint64_t)63);
    void *x = aligned_alloc(64, (act_bytes + 63) & ~(uint64_t)63);
    uint8_t *l2 = aligned_alloc(64, (o->l2_bytes + 63) & ~(size_t)63);
    if (!f || !tile || !x || !l2) {
        r = -ENOMEM;
        goto out;
    }
    unsigned long long rng = 0x2545F4914F6CDD1Dull;
    for (size_t i = 0; i < (size_t)N_COLS * TILE_ROWS; i++)
        f[i] = bench_normalish(&rng);
    ref->from_f32(f, tile, (int64_t)N_COLS * TILE_ROWS);
    xk->from_f32(f, x, N_COLS); /* the activation: row 0's data, quantized */

    size_t l2_rows = fill_rows(row_bytes, l2, o->l2_bytes, tile);
    size_t mem_rows = fill_rows(row_bytes, mem, o->mem_bytes, tile);
    if (l2_rows == 0 || mem_rows == 0) {
        r = -EINVAL;
        goto out;
    }
    res->name = ti->name;
    res->row_bytes = row_bytes;
    res->l2_ref = rate(ref->vec_dot, l2, row_bytes, l2_rows, x, o->min_time_s, 0, sink);
    res->l2_simd = rate(simd->vec_dot, l2, row_bytes, l2_rows, x, o->min_time_s, 0, sink);
    res->mem_ref = rate(ref->vec_dot, mem, row_bytes, mem_rows, x, 0, MEM_PASSES, sink);
    res->mem_simd = rate(simd->vec_dot, mem, row_bytes, mem_rows, x, 0, MEM_PASSES, sink);
out:
    free(f);
    free(tile);
    free(x);
    free(l2);
    return r;
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: picolm-bench kernels [--json] [--mem-mib N] [--l2-kib N] [--min-time S]\n"
            "  vec_dot weight-byte throughput per type, scalar vs this CPU's kernel set,\n"
            "  over an L2-sized matrix and a large one, one thread, with the read bandwidth\n"
            "  of a vectorised read loop over the same large buffer.\n"
            "  --mem-mib N    large matrix size (default %d)\n"
            "  --l2-kib N     small matrix size (default: half of CPU 0's L2)\n"
            "  --min-time S   seconds per L2 measurement (default %.2f)\n",
            DEFAULT_MEM_MIB, DEFAULT_MIN_TIME_S);
}

static int parse(int argc, char **argv, struct opts *o) {
    size_t l2 = l2_size();
    *o = (struct opts){false, l2 ? l2 / 2 : (512u << 10), (size_t)DEFAULT_MEM_MIB << 20,
                       DEFAULT_MIN_TIME_S};
    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        if (!strcmp(argv[i], "--json")) {
            o->json = true;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 1;
        } else if (i + 1 < argc && !strcmp(argv[i], "--mem-mib")) {
            unsigned long v = strtoul(argv[++i], &end, 10);
            if (*end || v < 16 || v > 65536)
                return -EINVAL;
            o->mem_bytes = (size_t)v << 20;
        } else if (i + 1 < argc && !strcmp(argv[i], "--l2-kib")) {
            unsigned long v = strtoul(argv[++i], &end, 10);
            if (*end || v < 64 || v > (1ul << 20))
                return -EINVAL;
            o->l2_bytes = (size_t)v << 10;
        } else if (i + 1 < argc && !strcmp(argv[i], "--min-time")) {
            double v = strtod(argv[++i], &end);
            if (*end || !(v > 0.0 && v <= 60.0))
                return -EINVAL;
            o->min_time_s = v;
        } else {
            return -EINVAL;
        }
    }
    return 0;
}

#define GBS(x) (1e-9 * (x))

struct bw {
    double plain, prefetch; /* bytes/s of the read loop without/with software prefetch */
    double best;            /* the larger: the base of the simd/bw ratios */
};

static void print_text(const struct result *res, size_t n, const struct bw *b,
                       const struct opts *o) {
    const struct pl_quant_prefetch *pf = pl_quant_prefetch();
    double bw = b->best;
    printf("picolm-bench kernels: kernel set '%s', row %d elements, 1 thread\n", pl_quant_isa(),
           N_COLS);
    printf("kernels' prefetch %s, %u B ahead (decode kernels %u B), page touch %u B past, from "
           "%s\n",
           bench_pf_hint_name(pf), pf->bytes, pf->decode_bytes, pf->page_ahead, pf->source);
    char streams[32] = "";
    if (pf->streams > 1)
        (void)snprintf(streams, sizeof(streams), ", in 1 and %u streams", pf->streams);
    printf("read bandwidth (vectorised read loop, %zu MiB): %.2f GB/s with prefetch (best of T0 "
           "and NTA, %u B and %u B ahead%s%s), %.2f GB/s without\n",
           o->mem_bytes >> 20, GBS(b->prefetch), pf->bytes, pf->decode_bytes, streams,
           pf->page_ahead ? ", and of the page touch alone" : "", GBS(b->plain));
    printf("%-5s %6s | %9s %9s %7s | %9s %9s %8s %8s\n", "type", "B/row", "L2 ref", "L2 simd",
           "speedup", "mem ref", "mem simd", "simd/bw", "L2/bw");
    for (size_t i = 0; i < n; i++)
        printf("%-5s %6llu | %9.2f %9.2f %6.1fx | %9.2f %9.2f %7.1f%% %7.2fx\n", res[i].name,
               (unsigned long long)res[i].row_bytes, GBS(res[i].l2_ref), GBS(res[i].l2_simd),
               res[i].l2_simd / res[i].l2_ref, GBS(res[i].mem_ref), GBS(res[i].mem_simd),
               100.0 * res[i].mem_simd / bw, res[i].l2_simd / bw);
    printf("(GB/s of weight bytes; L2 matrix %zu KiB, large matrix %zu MiB; bw: the better "
           "read loop, %.2f GB/s)\n",
           o->l2_bytes >> 10, o->mem_bytes >> 20, GBS(bw));
}

static void print_json(const struct result *res, size_t n, const struct bw *b,
                       const struct opts *o) {
    const struct pl_quant_prefetch *pf = pl_quant_prefetch();
    double bw = b->best;
    printf("{\"bench\":\"kernels\",\"isa\":\"%s\",\"n_cols\":%d,\"threads\":1,"
           "\"l2_matrix_bytes\":%zu,\"mem_matrix_bytes\":%zu,\"read_bw_gbs\":%.3f,"
           "\"read_bw_prefetch_gbs\":%.3f,\"read_bw_plain_gbs\":%.3f,\"prefetch_hint\":\"%s\","
           "\"prefetch_bytes\":%u,\"prefetch_decode_bytes\":%u,\"prefetch_page_ahead\":%u,"
           "\"prefetch_source\":\"%s\",\"types\":[",
           pl_quant_isa(), N_COLS, o->l2_bytes, o->mem_bytes, GBS(bw), GBS(b->prefetch),
           GBS(b->plain), bench_pf_hint_name(pf), pf->bytes, pf->decode_bytes, pf->page_ahead,
           pf->source);
    for (size_t i = 0; i < n; i++)
        printf("%s{\"type\":\"%s\",\"row_bytes\":%llu,\"l2_ref_gbs\":%.3f,\"l2_simd_gbs\":%.3f,"
               "\"speedup_l2\":%.2f,\"mem_ref_gbs\":%.3f,\"mem_simd_gbs\":%.3f,"
               "\"speedup_mem\":%.2f,\"mem_simd_over_bw\":%.3f,\"l2_simd_over_bw\":%.3f}",
               i ? "," : "", res[i].name, (unsigned long long)res[i].row_bytes, GBS(res[i].l2_ref),
               GBS(res[i].l2_simd), res[i].l2_simd / res[i].l2_ref, GBS(res[i].mem_ref),
               GBS(res[i].mem_simd), res[i].mem_simd / res[i].mem_ref, res[i].mem_simd / bw,
               res[i].l2_simd / bw);
    printf("]}\n");
}

/* One thread's read bandwidth over buf, plain and with the best of the prefetching modes;
 * raises b's figures to the new ones where better (called before and after the kernels).
 * Returns 0 or a negative errno. */
static int measure_bw(const void *buf, size_t len, struct bw *b) {
    double per_mode[BENCH_BW_N_MODES];
    const double r = bench_bw_read_modes(buf, len, 1, BW_PASSES, per_mode);
    if (r <= 0)
        return (int)r;
    for (int m = 0; m < BENCH_BW_N_MODES; m++) {
        double *dst = m == BENCH_BW_PLAIN ? &b->plain : &b->prefetch;
        if (per_mode[m] > *dst)
            *dst = per_mode[m];
    }
    b->best = b->plain > b->prefetch ? b->plain : b->prefetch;
    return 0;
}

int bench_kernels_main(int argc, char **argv) {
    struct opts o;
    struct result res[N_BENCH_TYPES];
    size_t n_res = 0;
    float sink = 0.f;
    int r = parse(argc, argv, &o);
    if (r > 0)
        return 0;
    if (r < 0) {
        usage(stderr);
        return 2;
    }
    pl_quant_init();
    uint8_t *mem =
        mmap(NULL, o.mem_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        fprintf(stderr, "picolm-bench kernels: cannot map %zu MiB: %s\n", o.mem_bytes >> 20,
                strerror(errno));
        return 1;
    }
    (void)madvise(mem, o.mem_bytes, MADV_HUGEPAGE);
    memset(mem, 0x5a, o.mem_bytes); /* fault in before any timing */
    struct bw bw = {0};
    if ((r = measure_bw(mem, o.mem_bytes, &bw)) < 0) {
        fprintf(stderr, "picolm-bench kernels: read bandwidth failed (%d)\n", r);
        (void)munmap(mem, o.mem_bytes);
        return 1;
    }
    for (size_t i = 0; i < N_BENCH_TYPES; i++) {
        r = bench_type(bench_types[i], &o, mem, &res[n_res], &sink);
        if (r < 0) {
            fprintf(stderr, "picolm-bench kernels: type %u: %s, skipping\n", bench_types[i],
                    strerror(-r));
            continue;
        }
        n_res++;
    }
    /* the bandwidth again after the kernels: keep the better of the two runs */
    if ((r = measure_bw(mem, o.mem_bytes, &bw)) < 0) {
        fprintf(stderr, "picolm-bench kernels: read bandwidth failed (%d)\n", r);
        (void)munmap(mem, o.mem_bytes);
        return 1;
    }
    (void)munmap(mem, o.mem_bytes);
    if (o.json)
        print_json(res, n_res, &bw, &o);
    else
        print_text(res, n_res, &bw, &o);
    if (!isfinite(sink))
        fprintf(stderr, "(non-finite checksum %g)\n", (double)sink);
    return 0;
}
