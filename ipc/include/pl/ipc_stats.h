/* SPDX-License-Identifier: MIT */
/* Syscall counters of the ipc module (pl_ipc_stats_*): every syscall that the doorbell and
 * io_uring helpers make on the data path is counted, process-wide, with a relaxed atomic add
 * next to the syscall itself (the fast path, which makes none, counts nothing). Benchmarks and
 * tests read them to report ipc-caused syscalls per record; the daemon may export them. */
#ifndef PL_IPC_IPC_STATS_H
#define PL_IPC_IPC_STATS_H

#include <stdint.h>

struct pl_ipc_stats {
    uint64_t wake_syscalls;  /* doorbell writes and FUTEX_WAKEs */
    uint64_t sleep_syscalls; /* syscalls that may block: poll, FUTEX_WAIT, blocking doorbell
                                reads, io_uring_enter calls that wait */
    uint64_t other_syscalls; /* non-blocking doorbell drains, io_uring submissions */
};

/* Copy the counters of this process (all threads) into *ret. */
void pl_ipc_stats_snapshot(struct pl_ipc_stats *ret);

/* Sum of the three counters. */
uint64_t pl_ipc_stats_total(const struct pl_ipc_stats *s);

#endif
