/* SPDX-License-Identifier: MIT */
/* Private to ipc/: the counters behind pl_ipc_stats_snapshot(), bumped by doorbell.c and
 * uring.c right where they make a syscall. */
#ifndef PL_IPC_SRC_STATS_H
#define PL_IPC_SRC_STATS_H

#include <stdatomic.h>
#include <stdint.h>

enum pl_ipc_stat {
    PL_IPC_STAT_WAKE = 0,
    PL_IPC_STAT_SLEEP = 1,
    PL_IPC_STAT_OTHER = 2,
    _PL_IPC_STAT_MAX,
};

extern _Atomic uint64_t pl_ipc_stats_counters[_PL_IPC_STAT_MAX];

/* Relaxed: a counter orders nothing, readers only want a total. */
static inline void pl_ipc_stats_count(enum pl_ipc_stat which) {
    atomic_fetch_add_explicit(&pl_ipc_stats_counters[which], 1, memory_order_relaxed);
}

#endif
