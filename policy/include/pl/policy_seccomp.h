/* SPDX-License-Identifier: MIT */
/* Seccomp filters as reviewed data (pl_policy_seccomp_*): the broker's serving-phase
 * allow-list and the client sandbox allow-list, each a table with one reason per syscall,
 * built into a libseccomp context. Building does not load anything: the daemon loads the
 * broker filter through pl_policy_privdrop_apply(), libpicolm loads the client filter in
 * picolm_sandbox_enter(). Both filters check the architecture (any other ABI, x32 included,
 * kills the process) and have libseccomp set NO_NEW_PRIVS and synchronise all threads on
 * load. Release a context with seccomp_release(). */
#ifndef PL_POLICY_POLICY_SECCOMP_H
#define PL_POLICY_POLICY_SECCOMP_H

#include <seccomp.h>
#include <stddef.h>
#include <stdint.h>

/* What the filter does for a syscall in a table. */
enum pl_policy_seccomp_how {
    PL_POLICY_SECCOMP_ALLOW = 0, /* allowed (under cond) */
    PL_POLICY_SECCOMP_ERRNO = 1, /* refused with errno_value instead of killing: probes libc
                                    makes on its own (nscd's socket, clone3) */
};

/* Argument condition of an entry; arg says which argument (0..5). */
enum pl_policy_seccomp_cond {
    PL_POLICY_SECCOMP_COND_NONE = 0,      /* any arguments */
    PL_POLICY_SECCOMP_COND_NO_EXEC = 1,   /* (arg & PROT_EXEC) == 0 */
    PL_POLICY_SECCOMP_COND_READ_ONLY = 2, /* (arg & (O_ACCMODE|O_CREAT|O_TRUNC|O_APPEND|
                                             __O_TMPFILE)) == 0: open flags for reading */
    PL_POLICY_SECCOMP_COND_EQ = 3,        /* arg == one of values[0..n_values) */
    PL_POLICY_SECCOMP_COND_ALL_SET = 4,   /* (arg & values[0]) == values[0] */
    PL_POLICY_SECCOMP_COND_SELF_PID = 5,  /* arg == getpid() of the process building it */
    PL_POLICY_SECCOMP_COND_IO_FD = 6,     /* arg is one of the io fds (client filter) */
    PL_POLICY_SECCOMP_COND_OUT_FD = 7,    /* arg is 1, 2 or one of the io fds */
    PL_POLICY_SECCOMP_COND_STD_FD = 8,    /* arg is 1 or 2 */
};

struct pl_policy_seccomp_entry {
    const char *name; /* syscall name as libseccomp knows it */
    enum pl_policy_seccomp_how how;
    enum pl_policy_seccomp_cond cond;
    unsigned arg;
    unsigned n_values;
    uint64_t values[8];
    int errno_value; /* PL_POLICY_SECCOMP_ERRNO only */
    const char *why;
};

/* The tables, for review and tests. Names this architecture lacks are skipped by the
 * builders (e.g. `open` and `poll` on aarch64). */
const struct pl_policy_seccomp_entry *pl_policy_seccomp_broker_table(size_t *ret_n);
const struct pl_policy_seccomp_entry *pl_policy_seccomp_client_table(size_t *ret_n);

/* The broker's filter for its serving phase. Default action: kill the process. Memory may
 * never become executable (mmap/mprotect with PROT_EXEC are not allowed), files may be
 * opened read-only only (the policy file on reload, /proc/self/status), and no process can
 * be started. Returns 0 and *ret (caller releases), -ENOMEM, or -errno from libseccomp. */
int pl_policy_seccomp_broker(scmp_filter_ctx *ret);
/* The same, plus: unlinkat(unlink_dir_fd, NAME, 0) is allowed, so the broker can remove files
 * it owns in that one directory (the prefix cache's evicted chains); unlinkat on any other
 * directory fd or with flags, and unlink, stay refused with EACCES. unlink_dir_fd < 0: as
 * pl_policy_seccomp_broker(). */
int pl_policy_seccomp_broker_at(int unlink_dir_fd, scmp_filter_ctx *ret);

/* Client sandbox flags. */
#define PL_POLICY_SECCOMP_CLIENT_KILL 1u /* default action: kill the process (else EPERM) */
#define PL_POLICY_SECCOMP_CLIENT_FLAGS_ALL PL_POLICY_SECCOMP_CLIENT_KILL

#define PL_POLICY_SECCOMP_MAX_EXTRA 512u
#define PL_POLICY_SECCOMP_MAX_IO_FDS 64u

/* The client sandbox filter: what talking to the broker needs (read/write on the doorbell
 * eventfds and recvmsg on the session socket, all listed in io_fds; poll, futex, memory
 * management without PROT_EXEC, time, exit; writing to stdout/stderr) plus the native
 * syscall numbers in extra_syscalls, which are allowed with any arguments. Everything else
 * fails with EPERM, or kills the process with PL_POLICY_SECCOMP_CLIENT_KILL. Returns 0 and
 * *ret; -EINVAL for unknown flags, a negative or unknown syscall number, a negative fd, or
 * more than PL_POLICY_SECCOMP_MAX_EXTRA extras or PL_POLICY_SECCOMP_MAX_IO_FDS fds; -ENOMEM;
 * or -errno from libseccomp. */
int pl_policy_seccomp_client(unsigned flags, const int *extra_syscalls, size_t n_extra,
                             const int *io_fds, size_t n_io_fds, scmp_filter_ctx *ret);

/* Write filter as libseccomp's human-readable PFC text to fd (borrowed). Returns 0 or -errno. */
int pl_policy_seccomp_export(scmp_filter_ctx filter, int fd);

#endif
