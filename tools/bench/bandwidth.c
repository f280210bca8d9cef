/* SPDX-License-Identifier: MIT */
/* Read bandwidth: XOR of every 64-byte line of a buffer with four independent accumulators
 * (enough loads in flight for one core to reach its streaming limit), plain, with T0 and NTA
 * software prefetches at the kernels' distances, with the kernels' page touch alone, and over
 * the kernels' weight streams (pl_quant_prefetch()->streams parts in turn) where there are
 * several, compiled for AVX-512, AVX2 and generic x86-64 and picked from the CPU's features;
 * best of N passes, threads released together by a barrier and each timing its own read. Reused by
 * every picolm-bench subcommand that reports an effective bandwidth against the machine's. */
#include "bandwidth.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

typedef long long v8ll __attribute__((vector_size(64)));

/* Pieces of the loops below: hint the 4 lines at q with locality LOC (3: PREFETCHT0, 0:
 * PREFETCHNTA on x86; prefetches past the end are harmless hints: they never fault); XOR the 4
 * lines at w into the 4 chains; fold the chains into the loop's result. */
#define PF4(q, LOC)                                                                                \
    do {                                                                                           \
        __builtin_prefetch((q), 0, LOC);                                                           \
        __builtin_prefetch((q) + 64, 0, LOC);                                                      \
        __builtin_prefetch((q) + 128, 0, LOC);                                                     \
        __builtin_prefetch((q) + 192, 0, LOC);                                                     \
    } while (0)
#define XOR4(w)                                                                                    \
    do {                                                                                           \
        a0 ^= (w)[0];                                                                              \
        a1 ^= (w)[1];                                                                              \
        a2 ^= (w)[2];                                                                              \
        a3 ^= (w)[3];                                                                              \
    } while (0)
#define FOLD_RETURN                                                                                \
    a0 ^= a1 ^ a2 ^ a3;                                                                            \
    long long s = 0;                                                                               \
    for (int k = 0; k < 8; k++)                                                                    \
        s ^= a0[k];                                                                                \
    return s;

/* The kernels' page touch (pl_x86_pf_lines): with page_ahead set, the first line of the page
 * page_ahead bytes past q, with locality 1 (PREFETCHT2). */
#define PF_PAGE(q, page_ahead)                                                                     \
    do {                                                                                           \
        if (page_ahead)                                                                            \
            __builtin_prefetch(pl_quant_page_line((q), (page_ahead)), 0, 1);                       \
    } while (0)

/* Four independent XOR chains over 4 lines per iteration; with a prefetch (DIST > 0), each
 * iteration first hints the 4 lines DIST bytes ahead, and with TOUCH it touches the page
 * page_ahead past them, as the kernels do. DIST 0 and no TOUCH: plain loads. */
#define READ_LOOP_BODY(LOC, DIST, TOUCH)                                                           \
    const v8ll *v = p;                                                                             \
    v8ll a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};                                                   \
    size_t n = len / sizeof(v8ll);                                                                 \
    for (size_t i = 0; i + 4 <= n; i += 4) {                                                       \
        if (DIST)                                                                                  \
            PF4((const char *)(v + i) + (DIST), LOC);                                              \
        if (TOUCH)                                                                                 \
            PF_PAGE((const char *)(v + i) + (DIST), page_ahead);                                   \
        XOR4(v + i);                                                                               \
    }                                                                                              \
    FOLD_RETURN

/* Vectors in each of the streams' ns parts of len bytes: a multiple of 4 (whole iterations). */
static size_t stream_part(size_t len, uint32_t ns) {
    return len / sizeof(v8ll) / ns & ~(size_t)3;
}

/* The same over ns parts of len / ns bytes (rounded down to 256 bytes: stream_bytes()), 4
 * lines of each in turn, each part prefetched dist ahead. */
#define READ_STREAMS_BODY(LOC)                                                                     \
    const v8ll *v = p;                                                                             \
    v8ll a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};                                                   \
    const size_t part = stream_part(len, ns);                                                      \
    for (size_t i = 0; i < part; i += 4)                                                           \
        for (uint32_t k = 0; k < ns; k++) {                                                        \
            PF4((const char *)(v + k * part + i) + dist, LOC);                                     \
            PF_PAGE((const char *)(v + k * part + i) + dist, page_ahead);                          \
            XOR4(v + k * part + i);                                                                \
        }                                                                                          \
    FOLD_RETURN

/* Bytes a loop reads of len: all of them, or the streams' whole parts. */
static size_t stream_bytes(size_t len, uint32_t ns) {
    return ns <= 1 ? len : stream_part(len, ns) * ns * sizeof(v8ll);
}

typedef long long (*read_fn)(const void *p, size_t len, size_t dist, uint32_t ns,
                             size_t page_ahead);

/* The read loops of a target: name##_plain (dist unused), name##_t0, name##_nta, the
 * streams' name##_st0, name##_snta (ns unused by the others), and name##_touch (dist unused). */
#define DEFINE_READ_LOOPS(name, target)                                                            \
    target static long long name##_plain(const void *p, size_t len, size_t dist, uint32_t ns,      \
                                         size_t page_ahead) {                                      \
        (void)dist;                                                                                \
        (void)ns;                                                                                  \
        READ_LOOP_BODY(3, 0, 0)                                                                    \
    }                                                                                              \
    target static long long name##_t0(const void *p, size_t len, size_t dist, uint32_t ns,         \
                                      size_t page_ahead) {                                         \
        (void)ns;                                                                                  \
        READ_LOOP_BODY(3, dist, 1)                                                                 \
    }                                                                                              \
    target static long long name##_nta(const void *p, size_t len, size_t dist, uint32_t ns,        \
                                       size_t page_ahead) {                                        \
        (void)ns;                                                                                  \
        READ_LOOP_BODY(0, dist, 1)                                                                 \
    }                                                                                              \
    target static long long name##_st0(const void *p, size_t len, size_t dist, uint32_t ns,        \
                                       size_t page_ahead){READ_STREAMS_BODY(                       \
        3)} target static long long name##_snta(const void *p, size_t len, size_t dist,            \
                                                uint32_t ns, size_t page_ahead){READ_STREAMS_BODY( \
        0)} target static long long name##_touch(const void *p, size_t len, size_t dist,           \
                                                 uint32_t ns, size_t page_ahead) {                 \
        (void)dist;                                                                                \
        (void)ns;                                                                                  \
        READ_LOOP_BODY(3, 0, 1)                                                                    \
    }                                                                                              \
    static const read_fn name[6] = {name##_plain, name##_t0,   name##_nta,                         \
                                    name##_st0,   name##_snta, name##_touch};

#if defined(__x86_64__) || defined(__i386__)
DEFINE_READ_LOOPS(read_avx512, __attribute__((target("avx512f"))))
DEFINE_READ_LOOPS(read_avx2, __attribute__((target("avx2"))))
#endif
/* Elsewhere (aarch64): the compiler's vectors of the target's width. */
DEFINE_READ_LOOPS(read_generic, )

/* The loop of a mode (0 plain, 1 T0, 2 NTA, 3 / 4 the streams with T0 / NTA, 5 the page touch
 * alone), its prefetch distance and stream count. The streams take the kernels' hint (T0 for
 * none: the per-row kernels' streams are an Intel setting, where the hint is T0). */
static read_fn pick_read(enum bench_bw_mode mode, size_t *dist, uint32_t *ns) {
    const struct pl_quant_prefetch *pf = pl_quant_prefetch();
    const int hint = mode == BENCH_BW_PLAIN                              ? 0
                     : mode == BENCH_BW_T0 || mode == BENCH_BW_T0_DECODE ? 1
                     : mode == BENCH_BW_STREAMS ? (pf->hint == PL_QUANT_PF_NTA ? 4 : 3)
                     : mode == BENCH_BW_TOUCH   ? 5
                                                : 2;
    *dist =
        mode == BENCH_BW_T0_DECODE || mode == BENCH_BW_NTA_DECODE ? pf->decode_bytes : pf->bytes;
    *ns = mode == BENCH_BW_STREAMS ? pf->streams : 1;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return read_avx512[hint];
    if (__builtin_cpu_supports("avx2"))
        return read_avx2[hint];
#endif
    return read_generic[hint];
}

static double now_s(void) {
    struct timespec ts;
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct run_job {
    pthread_barrier_t *bar;
    bench_work_fn work;
    void *ctx;
    uint32_t i;
    int passes;
    double *t_start, *t_end; /* [passes]: this worker's own clock around its part */
};

void bench_pin_self(uint32_t i) {
    cpu_set_t allowed, one;
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0)
        return;
    int n = CPU_COUNT(&allowed), seen = 0;
    if (n <= 0)
        return;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &allowed))
            continue;
        if ((uint32_t)seen++ == i % (uint32_t)n) {
            CPU_ZERO(&one);
            CPU_SET(cpu, &one);
            (void)pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
            return;
        }
    }
}

/* Each worker stamps its own start and end: the pass's window is then [earliest start,
 * latest end] over the workers, which contains all the work whatever the scheduler does
 * (a timer taken by a third thread between two barriers does not: descheduled after the
 * first barrier, it starts its clock late and over-reports). */
static void *run_worker(void *arg) {
    struct run_job *j = arg;
    bench_pin_self(j->i);
    for (int pass = 0; pass < j->passes; pass++) {
        (void)pthread_barrier_wait(j->bar);
        j->t_start[pass] = now_s();
        j->work(j->ctx, j->i);
        j->t_end[pass] = now_s();
    }
    return NULL;
}

#define MAX_PASSES 64

int bench_run_passes(uint32_t n_threads, int passes, bench_work_fn work, void *ctx, double *ret_s) {
    pthread_t th[BENCH_MAX_THREADS];
    struct run_job jobs[BENCH_MAX_THREADS];
    pthread_barrier_t bar;
    uint32_t started = 0;

    if (n_threads == 0 || n_threads > BENCH_MAX_THREADS || passes <= 0 || !work || !ret_s)
        return -EINVAL;
    if (n_threads == 1) { /* no thread needed: time the calling one */
        for (int pass = 0; pass < passes; pass++) {
            const double t0 = now_s();
            work(ctx, 0);
            ret_s[pass] = now_s() - t0;
        }
        return 0;
    }
    double *stamps = calloc((size_t)2 * n_threads * (size_t)passes, sizeof(double));
    if (!stamps)
        return -ENOMEM;
    /* the workers only: the calling thread takes no part in the timing */
    if (pthread_barrier_init(&bar, NULL, n_threads) != 0) {
        free(stamps);
        return -EAGAIN;
    }
    for (uint32_t i = 0; i < n_threads; i++) {
        jobs[i] = (struct run_job){.bar = &bar,
                                   .work = work,
                                   .ctx = ctx,
                                   .i = i,
                                   .passes = passes,
                                   .t_start = stamps + (size_t)2 * i * (size_t)passes,
                                   .t_end = stamps + ((size_t)2 * i + 1) * (size_t)passes};
        if (pthread_create(&th[i], NULL, run_worker, &jobs[i]) != 0)
            break;
        started++;
    }
    if (started < n_threads) {
        /* the started threads wait at the first barrier forever: release them by
         * cancelling (a barrier wait is a cancellation point; they hold no resources) */
        for (uint32_t k = 0; k < started; k++) {
            (void)pthread_cancel(th[k]);
            (void)pthread_join(th[k], NULL);
        }
        (void)pthread_barrier_destroy(&bar);
        free(stamps);
        return -EAGAIN;
    }
    for (uint32_t i = 0; i < n_threads; i++)
        (void)pthread_join(th[i], NULL);
    (void)pthread_barrier_destroy(&bar);
    for (int pass = 0; pass < passes; pass++) {
        double t0 = jobs[0].t_start[pass], t1 = jobs[0].t_end[pass];
        for (uint32_t i = 1; i < n_threads; i++) {
            if (jobs[i].t_start[pass] < t0)
                t0 = jobs[i].t_start[pass];
            if (jobs[i].t_end[pass] > t1)
                t1 = jobs[i].t_end[pass];
        }
        ret_s[pass] = t1 - t0;
    }
    free(stamps);
    return 0;
}

/* The read loop over worker i's slice. */
struct bw_ctx {
    const uint8_t *base;
    size_t slice;
    read_fn fn;
    size_t dist, page_ahead;
    uint32_t ns;
    volatile long long sink[BENCH_MAX_THREADS]; /* keeps the reads alive */
};

static void bw_work(void *arg, uint32_t i) {
    struct bw_ctx *c = arg;
    c->sink[i] ^= c->fn(c->base + i * c->slice, c->slice, c->dist, c->ns, c->page_ahead);
}

double bench_bw_read_mode(const void *buf, size_t len, uint32_t n_threads, int passes,
                          enum bench_bw_mode mode) {
    double secs[MAX_PASSES], best = 0.0;
    if (!buf || n_threads == 0 || n_threads > BENCH_MAX_THREADS || passes <= 0 ||
        passes > MAX_PASSES || (unsigned)mode >= BENCH_BW_N_MODES)
        return -EINVAL;
    struct bw_ctx c = {.base = buf, .slice = (len / n_threads) & ~(size_t)255};
    c.fn = pick_read(mode, &c.dist, &c.ns);
    c.page_ahead = pl_quant_prefetch()->page_ahead;
    const size_t bytes = stream_bytes(c.slice, c.ns); /* what each thread reads of its slice */
    if (c.slice == 0 || bytes == 0)
        return -EINVAL;
    const int r = bench_run_passes(n_threads, passes, bw_work, &c, secs);
    if (r < 0)
        return r;
    for (int pass = 0; pass < passes; pass++)
        if (secs[pass] > 0 && (double)bytes * n_threads / secs[pass] > best)
            best = (double)bytes * n_threads / secs[pass];
    return best;
}

const char *bench_pf_hint_name(const struct pl_quant_prefetch *pf) {
    return pf->hint == PL_QUANT_PF_NTA ? "nta" : pf->hint == PL_QUANT_PF_T0 ? "t0" : "none";
}

bool bench_bw_mode_distinct(enum bench_bw_mode mode) {
    const struct pl_quant_prefetch *pf = pl_quant_prefetch();
    if (mode == BENCH_BW_STREAMS)
        return pf->streams > 1;
    if (mode == BENCH_BW_TOUCH)
        return pf->page_ahead != 0;
    return (mode != BENCH_BW_T0_DECODE && mode != BENCH_BW_NTA_DECODE) ||
           pf->decode_bytes != pf->bytes;
}

/* Whether mode m reads as the kernels do with hint h (the plain loop counts as neither: it
 * runs with the kernels' modes, after them). */
static bool mode_own(enum bench_bw_mode m, int h) {
    switch (m) {
    case BENCH_BW_T0:
    case BENCH_BW_T0_DECODE:
        return h == PL_QUANT_PF_T0;
    case BENCH_BW_NTA:
    case BENCH_BW_NTA_DECODE:
        return h == PL_QUANT_PF_NTA;
    case BENCH_BW_TOUCH:
        return h == PL_QUANT_PF_NONE;
    case BENCH_BW_STREAMS: /* the streams take the kernels' hint */
    case BENCH_BW_PLAIN:
    case BENCH_BW_N_MODES:
        break;
    }
    return true;
}

double bench_bw_read_modes(const void *buf, size_t len, uint32_t n_threads, int passes,
                           double ret[BENCH_BW_N_MODES]) {
    const int hint = pl_quant_prefetch()->hint;
    const enum bench_bw_mode settle = hint == PL_QUANT_PF_NTA                  ? BENCH_BW_NTA_DECODE
                                      : hint == PL_QUANT_PF_T0                 ? BENCH_BW_T0_DECODE
                                      : bench_bw_mode_distinct(BENCH_BW_TOUCH) ? BENCH_BW_TOUCH
                                                                               : BENCH_BW_PLAIN;
    double best = 0.0;
    for (int m = 0; m < BENCH_BW_N_MODES; m++)
        ret[m] = 0.0;
    /* round 0: the modes of the other hints (a per-row one is always distinct, so one runs);
     * 1: the settling pass, then the plain loop and the kernels' own modes */
    for (int round = 0; round < 2; round++) {
        if (round == 1) {
            const double bw = bench_bw_read_mode(buf, len, n_threads, 1, settle);
            if (bw < 0)
                return bw;
        }
        for (int m = 0; m < BENCH_BW_N_MODES; m++) {
            const enum bench_bw_mode mode = (enum bench_bw_mode)m;
            const bool other = !mode_own(mode, hint);
            if (other != (round == 0) || !bench_bw_mode_distinct(mode))
                continue;
            const double bw = bench_bw_read_mode(buf, len, n_threads, passes, mode);
            if (bw < 0)
                return bw;
            ret[m] = bw;
            if (bw > best)
                best = bw;
        }
    }
    return best;
}

/* ---- Compute speed per CPU ---- */

typedef unsigned v8u __attribute__((vector_size(32)));

#define SPEED_CHAINS 8
#define SPEED_ITERS 4000000L

struct speed_job {
    uint32_t i;
    double secs;
    volatile unsigned sink;
};

/* SPEED_CHAINS independent chains of vector integer multiply-adds (unsigned: they wrap): bound
 * by the core's arithmetic throughput, with no memory traffic. */
static void *speed_worker(void *arg) {
    struct speed_job *j = arg;
    bench_pin_self(j->i);
    v8u a[SPEED_CHAINS];
    const v8u m = {3, 5, 7, 9, 11, 13, 15, 17}, c = {1, 2, 3, 4, 5, 6, 7, 8};
    for (int k = 0; k < SPEED_CHAINS; k++)
        a[k] = c * (unsigned)k;
    const double t0 = now_s();
    for (long it = 0; it < SPEED_ITERS; it++)
        for (int k = 0; k < SPEED_CHAINS; k++)
            a[k] = a[k] * m + c;
    j->secs = now_s() - t0;
    unsigned x = 0;
    for (int k = 0; k < SPEED_CHAINS; k++)
        for (int l = 0; l < 8; l++)
            x ^= a[k][l];
    j->sink = x;
    return NULL;
}

int bench_cpu_speeds(uint32_t n, double *ret) {
    if (n == 0 || n > BENCH_MAX_THREADS || !ret)
        return -EINVAL;
    double best = 0.0;
    for (uint32_t i = 0; i < n; i++) {
        struct speed_job j = {.i = i};
        pthread_t th;
        if (pthread_create(&th, NULL, speed_worker, &j) != 0)
            return -EAGAIN;
        (void)pthread_join(th, NULL);
        ret[i] = j.secs > 0 ? 1.0 / j.secs : 0.0;
        best = ret[i] > best ? ret[i] : best;
    }
    for (uint32_t i = 0; i < n; i++)
        ret[i] = best > 0 ? ret[i] / best : 0.0;
    return 0;
}

double bench_bw_read(const void *buf, size_t len, uint32_t n_threads, int passes) {
    double per_mode[BENCH_BW_N_MODES];
    return bench_bw_read_modes(buf, len, n_threads, passes, per_mode);
}

int bench_bw_measure(size_t len, uint32_t n_threads, int passes, double *ret_bytes_per_s) {
    void *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED)
        return -errno;
    (void)madvise(buf, len, MADV_HUGEPAGE);
    memset(buf, 0x5a, len); /* fault every page in before timing */
    double bw = bench_bw_read(buf, len, n_threads, passes);
    (void)munmap(buf, len);
    if (bw <= 0)
        return (int)bw;
    *ret_bytes_per_s = bw;
    return 0;
}
