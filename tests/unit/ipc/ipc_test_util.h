/* SPDX-License-Identifier: MIT */
/* Helpers shared by the ipc tests: payload patterns with a checksum, and a watchdog that turns
 * a hang into a test failure (it measures nothing: it only notices the absence of progress). */
#ifndef PL_TESTS_IPC_TEST_UTIL_H
#define PL_TESTS_IPC_TEST_UTIL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Fill buf with len bytes derived from seq. */
static inline void pt_fill(uint8_t *buf, uint32_t len, uint64_t seq) {
    uint64_t x = seq * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
    for (uint32_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[i] = (uint8_t)x;
    }
}

/* FNV-1a over len bytes. */
static inline uint64_t pt_hash(const uint8_t *buf, uint32_t len) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint32_t i = 0; i < len; i++)
        h = (h ^ buf[i]) * 0x100000001b3ull;
    return h;
}

/* Count from the environment (scaled down by sanitizer registrations), else def. */
static inline uint64_t pt_env_count(const char *name, uint64_t def) {
    const char *s = getenv(name);
    if (!s || !*s)
        return def;
    return strtoull(s, NULL, 10);
}

/* ---- Watchdog ---- */

struct pt_watchdog {
    pthread_t thread;
    _Atomic uint64_t *progress; /* bumped by the workers */
    unsigned stall_s;           /* no progress for this long = hang */
    _Atomic int stop;
    const char *what;
};

static inline void *pt_watchdog_main(void *arg) {
    struct pt_watchdog *w = arg;
    uint64_t last = atomic_load(w->progress);
    unsigned still = 0;
    while (!atomic_load(&w->stop)) {
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 100000000};
        nanosleep(&ts, NULL);
        uint64_t now = atomic_load(w->progress);
        if (now != last) {
            last = now;
            still = 0;
        } else if (++still >= w->stall_s * 10) {
            fprintf(stderr, "watchdog: %s made no progress for %u s at %llu: hang\n", w->what,
                    w->stall_s, (unsigned long long)now);
            _exit(3);
        }
    }
    return NULL;
}

static inline void pt_watchdog_start(struct pt_watchdog *w, _Atomic uint64_t *progress,
                                     unsigned stall_s, const char *what) {
    w->progress = progress;
    w->stall_s = stall_s;
    w->what = what;
    atomic_store(&w->stop, 0);
    if (pthread_create(&w->thread, NULL, pt_watchdog_main, w) != 0)
        abort();
}

static inline void pt_watchdog_stop(struct pt_watchdog *w) {
    atomic_store(&w->stop, 1);
    pthread_join(w->thread, NULL);
}

#endif
