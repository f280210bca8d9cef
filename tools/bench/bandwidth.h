/* SPDX-License-Identifier: MIT */
/* The machine's read bandwidth, for benchmarks that compare a kernel's or a decode's
 * effective bandwidth with what the memory system can deliver: a vectorised read loop
 * (AVX-512, AVX2 or generic, chosen at run time) over a buffer, best of several passes,
 * on 1..64 threads pinned to distinct CPUs. Used by bench_kernels.c (and bench_engine.c). */
#ifndef PL_TOOLS_BANDWIDTH_H
#define PL_TOOLS_BANDWIDTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pl/engine_quant.h" /* pl_quant_prefetch() */

/* The read loop: plain loads, or loads plus a software prefetch of each line some distance
 * ahead: PREFETCHT0 and PREFETCHNTA, each at the distances the kernels use on this CPU
 * (pl_quant_prefetch(): the per-row vec_dot kernels' and the decode kernels'), whichever
 * hint the kernels take, with the kernels' page touch where it is on (every mode but the plain
 * one), and plain loads with that page touch alone (the kernels' scheme when their hint is
 * none). Without them a kernel that prefetches can beat the "limit". On
 * aarch64 the same loops with the compiler's prefetch of locality 3 or 0. */
enum bench_bw_mode {
    BENCH_BW_PLAIN = 0,
    BENCH_BW_T0 = 1,         /* T0, pl_quant_prefetch()->bytes ahead */
    BENCH_BW_NTA = 2,        /* NTA, the same distance */
    BENCH_BW_T0_DECODE = 3,  /* T0, pl_quant_prefetch()->decode_bytes ahead */
    BENCH_BW_NTA_DECODE = 4, /* NTA, the same distance */
    /* the kernels' hint and per-row distance, 4 lines of each of pl_quant_prefetch()->streams
     * parts in turn (the weight streams of a one-token decode) */
    BENCH_BW_STREAMS = 5,
    /* plain loads with the kernels' page touch alone: what the kernels read with when their
     * hint is none (pl_quant_prefetch()->page_ahead; the plain loop where that is 0) */
    BENCH_BW_TOUCH = 6,
    BENCH_BW_N_MODES = 7,
};

/* "t0", "nta" or "none": the kernels' hint in pf, for reports. */
const char *bench_pf_hint_name(const struct pl_quant_prefetch *pf);

/* False for the decode distance's modes where it equals the per-row one (the same loops), for
 * BENCH_BW_STREAMS with one stream, and for BENCH_BW_TOUCH without a page touch. */
bool bench_bw_mode_distinct(enum bench_bw_mode mode);

/* Best-of-passes read bandwidth in bytes/s of n_threads threads (1..64) reading disjoint
 * slices of [buf, buf + len) (borrowed; already faulted in by the caller), passes 1..64.
 * Each worker stamps its own clock around its read; a pass counts all bytes over
 * [earliest start, latest end]. Returns the bandwidth (> 0), or -EINVAL for bad arguments,
 * or -EAGAIN when threads cannot start. Not reentrant (one measurement at a time). */
double bench_bw_read_mode(const void *buf, size_t len, uint32_t n_threads, int passes,
                          enum bench_bw_mode mode);

/* Every distinct mode, each with `passes` passes, in an order that leaves the lines as the
 * kernels would find them: the modes of the hints the kernels do not take first, then one
 * untimed pass of the kernels' own scheme (their hint at their decode distance; with hint
 * none, the page touch alone, or plain loads), then the plain loop and the kernels' own
 * modes. A pass with one hint changes how fast the next pass over the same lines
 * reads: on the Intel VM of 2026-12-04, after one NTA pass over 256 MiB the next plain, T0 or
 * kernel pass over it read ~18% slower (a decode kernel 12.0 against 15.0 GB/s) until those
 * lines were read once more. ret[m]: mode m's bandwidth (0 for a mode not distinct). Returns
 * the best (> 0), the upper bound to compare kernels against, or bench_bw_read_mode's error. */
double bench_bw_read_modes(const void *buf, size_t len, uint32_t n_threads, int passes,
                           double ret[BENCH_BW_N_MODES]);

/* Pin the calling thread to the i-th CPU it may run on (modulo their number). */
void bench_pin_self(uint32_t i);

/* Threads bench_run_passes and the read loops take at most. */
#define BENCH_MAX_THREADS 64u

/* Worker i's part of one pass. */
typedef void (*bench_work_fn)(void *ctx, uint32_t i);

/* `passes` passes of work on n_threads threads (1..64), worker i pinned by bench_pin_self(i),
 * every pass started on all of them together after a barrier; with one thread, on the
 * calling thread. Each worker stamps its own clock around its part: ret_s[p] is pass p's
 * window in seconds, from the earliest start to the latest end. Returns 0, or -EINVAL,
 * -ENOMEM, -EAGAIN (threads could not start). */
int bench_run_passes(uint32_t n_threads, int passes, bench_work_fn work, void *ctx, double *ret_s);

/* The compute speed of each of the first n CPUs this thread may run on (bench_pin_self(i)),
 * one at a time, relative to the fastest (1.0): a loop bound by the core's integer arithmetic,
 * without memory traffic. On a VM whose vCPUs share physical cores with other tenants, one
 * vCPU can run arithmetic at half the speed of the other while memory reads are unaffected
 * (the Zen 5 VM of 2026-12-05: 0.51-0.68 for vCPU 1 at times). 0, -EINVAL or -EAGAIN. */
int bench_cpu_speeds(uint32_t n, double *ret);

/* bench_bw_read_modes's best, without the figures per mode. */
double bench_bw_read(const void *buf, size_t len, uint32_t n_threads, int passes);

/* Same over a fresh len-byte anonymous mapping (huge pages advised, every page faulted in
 * before timing, unmapped after): bandwidth in *ret_bytes_per_s. Returns 0 or -errno. */
int bench_bw_measure(size_t len, uint32_t n_threads, int passes, double *ret_bytes_per_s);

#endif
