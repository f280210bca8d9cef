/* SPDX-License-Identifier: MIT */
/* libpicolm client sandbox: after picolm_connect(), an application can confine itself with a
 * seccomp filter that leaves what talking to picolmd needs plus what the caller lists.
 * Part of the libpicolm ABI (link with libpicolm); status codes are those of picolm.h. */
#ifndef PICOLM_SANDBOX_H
#define PICOLM_SANDBOX_H

#include <stddef.h>

#include "picolm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Flags of picolm_sandbox_enter(). */
#define PICOLM_SANDBOX_ERRNO 0x0u /* a syscall outside the list fails with EPERM (default) */
#define PICOLM_SANDBOX_KILL 0x1u  /* a syscall outside the list kills the process (SIGSYS) */

/* Confine the calling process, all its threads and every future child, irreversibly.
 *
 * Call it after picolm_connect() on every connection the program will use: connecting
 * afterwards is impossible (socket() is not allowed). What stays allowed: the rings and
 * doorbells of the connections open at the call (eventfds and picolm's SOCK_SEQPACKET Unix
 * sockets found in /proc/self/fd: read/write on the eventfds, recvmsg on the sockets),
 * poll/ppoll, futex, sched_yield, clocks and sleeps, memory management (mmap, mprotect,
 * munmap, mremap, madvise, brk; never PROT_EXEC), close, fstat of open fds, isatty on
 * stdout/stderr, write/writev to stdout (1) and stderr (2), getrandom, getpid/gettid,
 * rt_sigprocmask, rt_sigreturn, sigaltstack, a tgkill of itself (abort), exit and
 * exit_group. Everything else, open(), socket() and execve() included, fails with EPERM or,
 * with PICOLM_SANDBOX_KILL, kills the process.
 *
 * extra_syscalls lists further native syscall numbers (SYS_xxx from <sys/syscall.h>) the
 * application needs, allowed with any arguments; n_extra may be 0 (then extra_syscalls may
 * be NULL), at most 512.
 *
 * Returns PICOLM_OK; PICOLM_E_INVALID (unknown flag, NULL list with n_extra > 0, an unknown
 * syscall number, more than 512 extras); PICOLM_E_UNSUPPORTED (the kernel has no seccomp
 * filters, or more than 64 eventfds and picolm sockets are open); PICOLM_E_NOMEM; or
 * PICOLM_E_SYSTEM (/proc/self/fd unreadable, or loading failed: errno says why). On failure
 * nothing is confined. */
int picolm_sandbox_enter(unsigned flags, const int *extra_syscalls, size_t n_extra);

#ifdef __cplusplus
}
#endif

#endif
