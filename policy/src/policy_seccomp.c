/* SPDX-License-Identifier: MIT */
/* Seccomp allow-lists (pl_policy_seccomp_*) for the broker's serving phase and the client
 * sandbox, kept as reviewed tables with one reason per syscall, and the builders that turn
 * them into libseccomp contexts. The daemon loads the broker filter via
 * pl_policy_privdrop_apply(); libpicolm loads the client filter in picolm_sandbox_enter().
 *
 * Review notes:
 * - io_uring operations are not seen by seccomp: whatever the broker's ring can do stays
 *   possible. The daemon only queues poll, read, accept and cancel on it (pl/ipc_uring.h).
 * - A syscall missing from a table kills the broker (default action); syscalls libc tries
 *   on its own and copes without are refused with an errno instead, so that e.g. an NSS
 *   lookup during a policy reload falls back to /etc/passwd instead of killing the daemon.
 * - Memory never becomes executable after start-up: mmap and mprotect are allowed only
 *   without PROT_EXEC. */
#include "pl/policy_seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pl/pl_util.h"

#ifndef __O_TMPFILE
#define __O_TMPFILE 020000000
#endif
#define OPEN_WRITE_FLAGS ((uint64_t)(O_ACCMODE | O_CREAT | O_TRUNC | O_APPEND | __O_TMPFILE))

#define ALLOW(n, w)                                                                                \
    { .name = n, .how = PL_POLICY_SECCOMP_ALLOW, .why = w }
#define ALLOW_IF(n, c, a, w)                                                                       \
    { .name = n, .how = PL_POLICY_SECCOMP_ALLOW, .cond = c, .arg = a, .why = w }
#define ALLOW_EQ(n, a, w, ...)                                                                     \
    {                                                                                              \
        .name = n, .how = PL_POLICY_SECCOMP_ALLOW, .cond = PL_POLICY_SECCOMP_COND_EQ, .arg = a,    \
        .values = {__VA_ARGS__}, .n_values = sizeof((uint64_t[]){__VA_ARGS__}) / sizeof(uint64_t), \
        .why = w                                                                                   \
    }
#define ALLOW_SET(n, a, m, w)                                                                      \
    {                                                                                              \
        .name = n, .how = PL_POLICY_SECCOMP_ALLOW, .cond = PL_POLICY_SECCOMP_COND_ALL_SET,         \
        .arg = a, .values = {m}, .n_values = 1, .why = w                                           \
    }
#define REFUSE(n, e, w)                                                                            \
    { .name = n, .how = PL_POLICY_SECCOMP_ERRNO, .errno_value = e, .why = w }

/* ---- Broker: serving phase ---- */

static const struct pl_policy_seccomp_entry broker_table[] = {
    /* Event loop and wake-ups */
    ALLOW("io_uring_enter", "event loop: submit and wait on the ring made at start-up"),
    ALLOW("read", "drain its own eventfds and the signalfd; read the policy file on reload"),
    ALLOW("write", "ring its own eventfds (never a client's: issue 8); log lines to stderr"),
    ALLOW("writev", "log lines to stderr (stdio may gather)"),
    ALLOW("poll", "hang-up check on a session socket (pl_ipc_peer_hung_up)"),
    ALLOW("ppoll", "the same, where libc implements poll with ppoll"),
    ALLOW("eventfd2", "a broker and a client doorbell for every new session"),
    ALLOW("close", "release session fds and the policy file"),
    /* Handshakes */
    ALLOW("accept4", "accept client and admin connections when not accepted via io_uring"),
    ALLOW("recvmsg", "read the handshake hello and admin requests"),
    ALLOW("sendmsg", "send the welcome with its fds (SCM_RIGHTS) and admin replies"),
    ALLOW("recvfrom", "admin requests: recv() is recvfrom(2)"),
    ALLOW_EQ("sendto", 4,
             "admin replies: send() is sendto(2) with no address (connected "
             "sockets only)",
             0),
    ALLOW_EQ("getsockopt", 1, "caller identity: SO_PEERCRED, SO_PEERPIDFD, SO_PEERGROUPS",
             SOL_SOCKET),
    ALLOW("shutdown", "end a session's socket"),
    ALLOW("pidfd_open", "pin the peer process when SO_PEERPIDFD is unavailable"),
    /* Per-session shared memory */
    ALLOW("memfd_create", "create each session's region"),
    ALLOW("ftruncate", "size a new region before sealing it"),
    ALLOW_EQ("fcntl", 1, "add and check region seals; fd flags", F_ADD_SEALS, F_GET_SEALS, F_GETFD,
             F_SETFD, F_GETFL, F_SETFL),
    /* Memory management (never executable) */
    ALLOW_IF("mmap", PL_POLICY_SECCOMP_COND_NO_EXEC, 2, "map regions; malloc; no PROT_EXEC"),
    ALLOW_IF("mprotect", PL_POLICY_SECCOMP_COND_NO_EXEC, 2,
             "malloc arenas, stack guards; no PROT_EXEC"),
    ALLOW("munmap", "unmap closed regions; free"),
    ALLOW("mremap", "realloc of large blocks"),
    ALLOW("madvise", "free(): return memory to the kernel"),
    ALLOW("brk", "malloc's main heap"),
    /* Threads and synchronisation */
    ALLOW("futex", "mutexes, condition variables, the worker pool's barrier"),
    ALLOW("sched_yield", "spin-then-sleep waits"),
    ALLOW_SET("clone", 0, CLONE_THREAD, "threads only (CLONE_THREAD set)"),
    REFUSE("clone3", ENOSYS, "arguments are opaque to seccomp: ENOSYS makes glibc use clone"),
    ALLOW("set_robust_list", "set-up of a new thread"),
    ALLOW("rseq", "set-up of a new thread (glibc registers rseq)"),
    ALLOW("rt_sigprocmask", "threads block signals (signalfd) and glibc internals"),
    ALLOW("rt_sigreturn", "return from a signal handler"),
    ALLOW("sigaltstack", "signal stack of a thread (sanitizer runtimes set one up)"),
    ALLOW("restart_syscall", "the kernel restarting an interrupted call"),
    ALLOW_EQ("prctl", 0, "name threads", PR_SET_NAME, PR_GET_NAME),
    /* Time and identity */
    ALLOW("clock_gettime", "timestamps when the vDSO falls back to the syscall"),
    ALLOW("clock_nanosleep", "timed back-off"),
    ALLOW("nanosleep", "timed back-off (older libc)"),
    ALLOW("gettimeofday", "wall-clock time for admin replies"),
    ALLOW("getpid", "log lines and self checks"),
    ALLOW("gettid", "log lines"),
    ALLOW("getuid", "the start-up log line names the uid it serves as"),
    ALLOW("getgid", "the same for the gid"),
    ALLOW("geteuid", "libc and sanitizer runtimes check the effective uid"),
    ALLOW("getegid", "the same for the effective gid"),
    ALLOW("getrandom", "sampler seeds; malloc's tcache randomisation"),
    ALLOW("getrusage", "CPU time for admin stats"),
    ALLOW("sched_getaffinity", "glibc's CPU count"),
    /* Files: read-only, for the policy reload and /proc/self/status */
    ALLOW_IF("openat", PL_POLICY_SECCOMP_COND_READ_ONLY, 2, "read the policy file; /proc/self"),
    ALLOW_IF("open", PL_POLICY_SECCOMP_COND_READ_ONLY, 1, "the same on ABIs with open(2)"),
    ALLOW("fstat", "size and type of the policy file; stdio"),
    ALLOW("newfstatat", "fstat through fstatat (glibc >= 2.33)"),
    ALLOW("statx", "fstat through statx (some libcs)"),
    ALLOW("lseek", "stdio on read-only files"),
    REFUSE("socket", EACCES, "NSS lookups on reload probe nscd / systemd-userdb sockets"),
    REFUSE("unlink", EACCES,
           "drain/exit removes its socket files: the unprivileged broker "
           "may not (the service manager cleans the runtime directory)"),
    REFUSE("unlinkat", EACCES,
           "the same, where libc implements unlink with unlinkat; "
           "allowed in the prefix cache directory only "
           "(pl_policy_seccomp_broker_at)"),
    /* Ending */
    ALLOW_IF("tgkill", PL_POLICY_SECCOMP_COND_SELF_PID, 0, "abort() on internal corruption"),
    ALLOW("exit", "a thread ends"),
    ALLOW("exit_group", "the daemon ends"),
};

/* ---- Client sandbox ---- */

static const struct pl_policy_seccomp_entry client_table[] = {
    ALLOW_IF("read", PL_POLICY_SECCOMP_COND_IO_FD, 0, "drain its doorbell (io fds only)"),
    ALLOW_IF("write", PL_POLICY_SECCOMP_COND_OUT_FD, 0,
             "ring the broker's doorbell (io fds); its own stdout and stderr"),
    ALLOW_IF("writev", PL_POLICY_SECCOMP_COND_STD_FD, 0, "stdio on stdout and stderr"),
    ALLOW_IF("recvmsg", PL_POLICY_SECCOMP_COND_IO_FD, 0,
             "session socket: see why it became readable (hang-up; io fds only)"),
    ALLOW("poll", "sleep on its doorbell; broker hang-up check"),
    ALLOW("ppoll", "the same, where libc implements poll with ppoll"),
    ALLOW("futex", "locks and waits inside the process"),
    ALLOW("sched_yield", "spin-then-sleep waits on the rings"),
    ALLOW("clock_gettime", "timeouts when the vDSO falls back to the syscall"),
    ALLOW("clock_nanosleep", "back-off"),
    ALLOW("nanosleep", "back-off (older libc)"),
    ALLOW("gettimeofday", "time stamps"),
    ALLOW_IF("mmap", PL_POLICY_SECCOMP_COND_NO_EXEC, 2, "malloc; no PROT_EXEC"),
    ALLOW_IF("mprotect", PL_POLICY_SECCOMP_COND_NO_EXEC, 2, "malloc arenas; no PROT_EXEC"),
    ALLOW("munmap", "free; unmap the region at disconnect"),
    ALLOW("mremap", "realloc of large blocks"),
    ALLOW("madvise", "free(): return memory to the kernel"),
    ALLOW("brk", "malloc's main heap"),
    ALLOW("close", "disconnect: close the session fds"),
    ALLOW("fstat", "stdio checks stdout before its first write"),
    ALLOW_SET("newfstatat", 3, AT_EMPTY_PATH,
              "fstat through fstatat: AT_EMPTY_PATH only (no path lookups)"),
    ALLOW_EQ("ioctl", 1, "isatty() on stdout (stdio buffering)", TCGETS),
    ALLOW("getrandom", "malloc's tcache randomisation"),
    ALLOW("getpid", "libc internals"),
    ALLOW("gettid", "libc internals"),
    ALLOW("rt_sigprocmask", "libc internals (abort, locks)"),
    ALLOW("rt_sigreturn", "return from a signal handler"),
    ALLOW("sigaltstack", "signal stack of a thread (sanitizer runtimes set one up)"),
    ALLOW("restart_syscall", "the kernel restarting an interrupted call"),
    ALLOW_IF("tgkill", PL_POLICY_SECCOMP_COND_SELF_PID, 0, "abort() signals itself"),
    ALLOW("exit", "a thread ends"),
    ALLOW("exit_group", "the process ends"),
};

const struct pl_policy_seccomp_entry *pl_policy_seccomp_broker_table(size_t *ret_n) {
    *ret_n = PL_ARRAY_SIZE(broker_table);
    return broker_table;
}

const struct pl_policy_seccomp_entry *pl_policy_seccomp_client_table(size_t *ret_n) {
    *ret_n = PL_ARRAY_SIZE(client_table);
    return client_table;
}

/* ---- Builders ---- */

struct fdset {
    const int *io;
    size_t n_io;
    int unlink_dir; /* broker: the directory fd unlinkat may use, or -1 */
};

static int add(scmp_filter_ctx ctx, uint32_t action, int nr, unsigned n_cmp,
               const struct scmp_arg_cmp *cmp) {
    return seccomp_rule_add_array(ctx, action, nr, n_cmp, n_cmp ? cmp : NULL);
}

/* One rule per allowed fd value. */
static int add_fds(scmp_filter_ctx ctx, int nr, unsigned arg, bool std, const struct fdset *fds) {
    int r;
    if (std) {
        for (int fd = 1; fd <= 2; fd++) {
            struct scmp_arg_cmp c = SCMP_CMP(arg, SCMP_CMP_EQ, (scmp_datum_t)fd, 0);
            r = add(ctx, SCMP_ACT_ALLOW, nr, 1, &c);
            if (r < 0)
                return r;
        }
    }
    for (size_t i = 0; fds && i < fds->n_io; i++) {
        if (std && (fds->io[i] == 1 || fds->io[i] == 2))
            continue;
        struct scmp_arg_cmp c = SCMP_CMP(arg, SCMP_CMP_EQ, (scmp_datum_t)fds->io[i], 0);
        r = add(ctx, SCMP_ACT_ALLOW, nr, 1, &c);
        if (r < 0)
            return r;
    }
    return 0;
}

static int add_entry(scmp_filter_ctx ctx, const struct pl_policy_seccomp_entry *e,
                     const struct fdset *fds) {
    int nr = seccomp_syscall_resolve_name(e->name);
    if (nr == __NR_SCMP_ERROR || nr < 0)
        return 0; /* not on this architecture (e.g. open, poll on aarch64) */
    if (e->how == PL_POLICY_SECCOMP_ERRNO && fds && fds->unlink_dir >= 0 &&
        !strcmp(e->name, "unlinkat")) {
        /* Conditional rules only: libseccomp lets an unconditional rule for a syscall win
         * over conditional ones. Allowed: (dir, any name, 0); refused: every other dir, and
         * flags (AT_REMOVEDIR) in dir. */
        const uint32_t refuse = SCMP_ACT_ERRNO((uint32_t)e->errno_value);
        const scmp_datum_t dir = (scmp_datum_t)(uint32_t)fds->unlink_dir;
        struct scmp_arg_cmp ok[2] = {SCMP_A0(SCMP_CMP_EQ, dir, 0), SCMP_A2(SCMP_CMP_EQ, 0, 0)};
        struct scmp_arg_cmp other = SCMP_A0(SCMP_CMP_NE, dir, 0);
        struct scmp_arg_cmp flags[2] = {SCMP_A0(SCMP_CMP_EQ, dir, 0), SCMP_A2(SCMP_CMP_NE, 0, 0)};
        int r = add(ctx, SCMP_ACT_ALLOW, nr, 2, ok);
        if (r == 0)
            r = add(ctx, refuse, nr, 1, &other);
        if (r == 0)
            r = add(ctx, refuse, nr, 2, flags);
        return r;
    }
    if (e->how == PL_POLICY_SECCOMP_ERRNO)
        return add(ctx, SCMP_ACT_ERRNO((uint32_t)e->errno_value), nr, 0, NULL);

    struct scmp_arg_cmp c;
    switch (e->cond) {
    case PL_POLICY_SECCOMP_COND_NONE:
        return add(ctx, SCMP_ACT_ALLOW, nr, 0, NULL);
    case PL_POLICY_SECCOMP_COND_NO_EXEC:
        c = SCMP_CMP(e->arg, SCMP_CMP_MASKED_EQ, (scmp_datum_t)PROT_EXEC, 0);
        return add(ctx, SCMP_ACT_ALLOW, nr, 1, &c);
    case PL_POLICY_SECCOMP_COND_READ_ONLY:
        c = SCMP_CMP(e->arg, SCMP_CMP_MASKED_EQ, OPEN_WRITE_FLAGS, 0);
        return add(ctx, SCMP_ACT_ALLOW, nr, 1, &c);
    case PL_POLICY_SECCOMP_COND_EQ:
        for (unsigned i = 0; i < e->n_values; i++) {
            c = SCMP_CMP(e->arg, SCMP_CMP_EQ, e->values[i], 0);
            int r = add(ctx, SCMP_ACT_ALLOW, nr, 1, &c);
            if (r < 0)
                return r;
        }
        return 0;
    case PL_POLICY_SECCOMP_COND_ALL_SET:
        c = SCMP_CMP(e->arg, SCMP_CMP_MASKED_EQ, e->values[0], e->values[0]);
        return add(ctx, SCMP_ACT_ALLOW, nr, 1, &c);
    case PL_POLICY_SECCOMP_COND_SELF_PID:
        c = SCMP_CMP(e->arg, SCMP_CMP_EQ, (scmp_datum_t)getpid(), 0);
        return add(ctx, SCMP_ACT_ALLOW, nr, 1, &c);
    case PL_POLICY_SECCOMP_COND_IO_FD:
        return add_fds(ctx, nr, e->arg, false, fds);
    case PL_POLICY_SECCOMP_COND_OUT_FD:
        return add_fds(ctx, nr, e->arg, true, fds);
    case PL_POLICY_SECCOMP_COND_STD_FD:
        return add_fds(ctx, nr, e->arg, true, NULL);
    }
    return -EINVAL;
}

static int new_ctx(uint32_t def_action, scmp_filter_ctx *ret) {
    scmp_filter_ctx ctx = seccomp_init(def_action);
    if (!ctx)
        return -ENOMEM;
    int r;
    /* Any other ABI (i386 or x32 on x86_64) kills: its numbers mean other syscalls. */
    r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
    if (r < 0)
        goto fail;
    /* no_new_privs on load (needed to load a filter unprivileged) and all threads at once. */
    r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 1);
    if (r < 0)
        goto fail;
    r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1);
    if (r < 0)
        goto fail;
    *ret = ctx;
    return 0;
fail:
    seccomp_release(ctx);
    return r;
}

static int build(uint32_t def_action, const struct pl_policy_seccomp_entry *table, size_t n,
                 const struct fdset *fds, const int *extra, size_t n_extra, scmp_filter_ctx *ret) {
    scmp_filter_ctx ctx = NULL;
    int r = new_ctx(def_action, &ctx);
    if (r < 0)
        return r;
    for (size_t i = 0; i < n; i++) {
        r = add_entry(ctx, &table[i], fds);
        if (r < 0)
            goto fail;
    }
    for (size_t i = 0; i < n_extra; i++) {
        r = add(ctx, SCMP_ACT_ALLOW, extra[i], 0, NULL);
        if (r < 0)
            goto fail;
    }
    *ret = ctx;
    return 0;
fail:
    seccomp_release(ctx);
    return r;
}

int pl_policy_seccomp_broker(scmp_filter_ctx *ret) {
    return pl_policy_seccomp_broker_at(-1, ret);
}

int pl_policy_seccomp_broker_at(int unlink_dir_fd, scmp_filter_ctx *ret) {
    if (!ret)
        return -EINVAL;
    struct fdset fds = {
        .io = NULL, .n_io = 0, .unlink_dir = unlink_dir_fd < 0 ? -1 : unlink_dir_fd};
    return build(SCMP_ACT_KILL_PROCESS, broker_table, PL_ARRAY_SIZE(broker_table), &fds, NULL, 0,
                 ret);
}

int pl_policy_seccomp_client(unsigned flags, const int *extra_syscalls, size_t n_extra,
                             const int *io_fds, size_t n_io_fds, scmp_filter_ctx *ret) {
    if (!ret || (flags & ~PL_POLICY_SECCOMP_CLIENT_FLAGS_ALL) ||
        n_extra > PL_POLICY_SECCOMP_MAX_EXTRA || n_io_fds > PL_POLICY_SECCOMP_MAX_IO_FDS ||
        (n_extra > 0 && !extra_syscalls) || (n_io_fds > 0 && !io_fds))
        return -EINVAL;
    for (size_t i = 0; i < n_extra; i++) {
        /* Only real syscalls of this architecture: no libseccomp pseudo numbers. */
        char *name = extra_syscalls[i] >= 0
                         ? seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, extra_syscalls[i])
                         : NULL;
        if (!name)
            return -EINVAL;
        free(name);
    }
    for (size_t i = 0; i < n_io_fds; i++)
        if (io_fds[i] < 0)
            return -EINVAL;
    uint32_t def =
        (flags & PL_POLICY_SECCOMP_CLIENT_KILL) ? SCMP_ACT_KILL_PROCESS : SCMP_ACT_ERRNO(EPERM);
    struct fdset fds = {.io = io_fds, .n_io = n_io_fds, .unlink_dir = -1};
    return build(def, client_table, PL_ARRAY_SIZE(client_table), &fds, extra_syscalls, n_extra,
                 ret);
}

int pl_policy_seccomp_export(scmp_filter_ctx filter, int fd) {
    if (!filter || fd < 0)
        return -EINVAL;
    return seccomp_export_pfc(filter, fd);
}
