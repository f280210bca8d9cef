/* SPDX-License-Identifier: MIT */
/* Process-wide syscall counters of the ipc module (pl_ipc_stats_*). See pl/ipc_stats.h. */
#include "pl/ipc_stats.h"

#include <stdatomic.h>

#include "stats.h"

_Atomic uint64_t pl_ipc_stats_counters[_PL_IPC_STAT_MAX];

void pl_ipc_stats_snapshot(struct pl_ipc_stats *ret) {
    ret->wake_syscalls =
        atomic_load_explicit(&pl_ipc_stats_counters[PL_IPC_STAT_WAKE], memory_order_relaxed);
    ret->sleep_syscalls =
        atomic_load_explicit(&pl_ipc_stats_counters[PL_IPC_STAT_SLEEP], memory_order_relaxed);
    ret->other_syscalls =
        atomic_load_explicit(&pl_ipc_stats_counters[PL_IPC_STAT_OTHER], memory_order_relaxed);
}

uint64_t pl_ipc_stats_total(const struct pl_ipc_stats *s) {
    return s->wake_syscalls + s->sleep_syscalls + s->other_syscalls;
}
