/* SPDX-License-Identifier: MIT */
/* Small helpers used everywhere: checked arithmetic, cleanup attributes, fd handling.
 * A monotonic clock. Header-only, no dependencies beyond libc. */
#ifndef PL_COMMON_PL_UTIL_H
#define PL_COMMON_PL_UTIL_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define PL_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define PL_MIN(a, b) ((a) < (b) ? (a) : (b))
#define PL_MAX(a, b) ((a) > (b) ? (a) : (b))
/* clang-format would print "(a) - 1" as "(a)-1", a cast of -1 */
/* clang-format off */
#define PL_ALIGN_UP(x, a) (((x) + ((a) - 1)) & ~((__typeof__(x))(a) - 1))
/* clang-format on */
#define PL_LIKELY(x) __builtin_expect(!!(x), 1)
#define PL_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define PL_EXPORT __attribute__((visibility("default")))

/* Checked arithmetic: return true on overflow (and leave *r unspecified). */
#define pl_add_overflow(a, b, r) __builtin_add_overflow((a), (b), (r))
#define pl_mul_overflow(a, b, r) __builtin_mul_overflow((a), (b), (r))
#define pl_sub_overflow(a, b, r) __builtin_sub_overflow((a), (b), (r))

/* CLOCK_MONOTONIC in nanoseconds (vDSO: no system call). */
static inline uint64_t pl_now_ns(void) {
    struct timespec ts;
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* PL_CLEANUP(fn): run fn(&var) when var leaves scope. */
#define PL_CLEANUP(fn) __attribute__((cleanup(fn)))

static inline void pl_freep(void *p) {
    free(*(void **)p);
}

/* Close *fd if open and reset it to -1; safe on -1. */
static inline void pl_close_fd(int *fd) {
    if (*fd >= 0) {
        int saved = errno;
        (void)close(*fd);
        *fd = -1;
        errno = saved;
    }
}
#define pl_closep pl_close_fd

/* Returns p and sets *pp to NULL: explicit ownership transfer. */
static inline void *pl_steal_ptr_impl(void **pp) {
    void *p = *pp;
    *pp = NULL;
    return p;
}
#define pl_steal_ptr(pp) pl_steal_ptr_impl((void **)(pp))

static inline int pl_steal_fd(int *fd) {
    int r = *fd;
    *fd = -1;
    return r;
}

/* One step of a spin-wait loop: PAUSE (x86) or YIELD (arm64) tells the core it spins: it
 * yields to the other hardware thread and avoids the pipeline flush on leaving the loop. */
static inline void pl_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

/* One step of xorshift64* (S. Vigna, 2016): a small, fast, deterministic generator for the
 * tests' random inputs, seeds and benchmark texts - not for anything secret. *state must not
 * be 0; the high bits of the result are the best ones. */
static inline uint64_t pl_xorshift64s(uint64_t *state) {
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

#endif
