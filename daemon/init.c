/* SPDX-License-Identifier: MIT */
/* picolmd start-up: model load, weights onto huge pages + mlock with the fallback chain
 * hugetlb -> THP -> plain anonymous -> file mapping (the reason for each step down is kept
 * and reported), and socket binding. Called once by main.c before any thread starts
 * serving clients. */
#include "init.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "config.h"
#include "metrics_file.h"
#include "prefix_cache.h"
#include "sd_listen.h"
#include "pl/engine_gguf.h"
#include "pl/engine_model.h"
#include "pl/pl_err.h"
#include "pl/pl_log.h"
#include "pl/pl_util.h"
#include "pl/policy_privdrop.h"
#include "pl/policy_seccomp.h"

static int set_err(char *err, size_t len, int r, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int set_err(char *err, size_t len, int r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return r;
}

/* ---- Weights onto huge pages (the engine places them; we lock them) ---- */

/* mlock(2) through the system call itself: the sanitizer runtimes intercept mlock() and, under
 * AddressSanitizer, return success without locking anything (the sanitizer builds would then
 * report weights as locked that are not). */
static int lock_range(const void *p, size_t len) {
    return syscall(SYS_mlock, p, len) == 0 ? 0 : -1;
}

/* The kernel's view of our weights' copy after the lock: every byte of the mapping locked, or
 * on hugetlb pages (which are never swapped; mlock leaves their mapping as it is and smaps
 * counts them apart, as Private_Hugetlb). */
static bool lock_confirmed(const struct pl_daemon_residency *res) {
    uint64_t locked, huge, thp;
    pl_daemon_init_residency_measure(res, &locked, &huge, &thp);
    return locked + huge >= res->bytes;
}

int pl_daemon_init_model(const struct pl_daemon_config *cfg, struct pl_model **ret_model,
                         struct pl_daemon_residency *res, char *err, size_t err_len) {
    /* Without configured cpus the matmul workers are still pinned, one per CPU after the
     * first: the inference thread then has a CPU of its own and wake-ups stay where they are;
     * the inference thread itself floats so that it is never stuck behind another process's
     * work (a second daemon, a test) on one CPU. */
    struct pl_model_opts mo = {.n_threads = cfg->n_cpus,
                               .pin_threads = cfg->n_cpus > 0,
                               .pin_workers = cfg->n_cpus == 0,
                               /* the event thread and the clients spin with yields */
                               .yield_idle_workers = true};
    struct pl_model *m = NULL;
    int r;

    memset(res, 0, sizeof(*res));
    r = pl_model_load(cfg->model, &mo, &m, err, err_len);
    if (r < 0)
        return r;

    static const enum pl_weights_mode modes[] = {
        [PL_DAEMON_HUGEPAGES_AUTO] = PL_WEIGHTS_AUTO,
        [PL_DAEMON_HUGEPAGES_THP] = PL_WEIGHTS_THP,
        [PL_DAEMON_HUGEPAGES_OFF] = PL_WEIGHTS_FILE,
    };
    struct pl_weights_info wi;
    enum pl_weights_mode wm =
        cfg->hugepages < sizeof(modes) / sizeof(modes[0]) ? modes[cfg->hugepages] : PL_WEIGHTS_AUTO;
    r = pl_model_place_weights(m, wm, &wi);
    if (r < 0) {
        pl_model_free(m);
        return set_err(err, err_len, r, "placing the weights failed: %s", pl_strerror(r));
    }
    if (cfg->hugepages == PL_DAEMON_HUGEPAGES_OFF)
        (void)snprintf(wi.reason, sizeof(wi.reason), "hugepages = off in the configuration");
    res->weight_bytes = wi.weight_bytes;
    res->base = (void *)(uintptr_t)wi.base;
    res->bytes = wi.bytes;
    (void)snprintf(res->backing, sizeof(res->backing), "%s", wi.backing);
    (void)snprintf(res->reason, sizeof(res->reason), "%s", wi.reason);
    const void *dst = wi.base;
    const size_t bytes = wi.bytes, wb = wi.weight_bytes;

    /* Lock: our copy, or the file's tensor data in place. */
    const void *lock_at = dst;
    size_t lock_len = bytes;
    if (!dst) {
        const struct pl_gguf *g = pl_model_gguf(m);
        lock_at = (const uint8_t *)pl_gguf_base(g) + pl_gguf_data_offset(g);
        lock_len = wb;
    }
    if (lock_len > 0 && lock_range(lock_at, lock_len) == 0) {
        res->locked = true;
        if (res->base && !lock_confirmed(res)) {
            res->locked = false;
            (void)snprintf(res->lock_reason, sizeof(res->lock_reason),
                           "mlock of %zu KiB returned success, but /proc/self/smaps shows the "
                           "pages unlocked",
                           lock_len >> 10);
            if (cfg->require_mlock) {
                r = set_err(err, err_len, -ENOMEM, "%s, and require_mlock is set",
                            res->lock_reason);
                pl_daemon_init_model_done(m, res);
                return r;
            }
            pl_log_warn("weights NOT locked in RAM: %s; they may be paged out", res->lock_reason);
        }
    } else if (lock_len > 0) {
        int e = errno;
        struct rlimit rl = {0};
        (void)getrlimit(RLIMIT_MEMLOCK, &rl);
        (void)snprintf(res->lock_reason, sizeof(res->lock_reason),
                       "mlock of %zu KiB failed: %s (RLIMIT_MEMLOCK %llu KiB; needs "
                       "CAP_IPC_LOCK or a higher LimitMEMLOCK=)",
                       lock_len >> 10, strerror(e), (unsigned long long)(rl.rlim_cur >> 10));
        if (cfg->require_mlock) {
            r = set_err(err, err_len, -e, "%s, and require_mlock is set", res->lock_reason);
            pl_daemon_init_model_done(m, res);
            return r;
        }
        pl_log_warn("weights NOT locked in RAM: %s; they may be paged out", res->lock_reason);
    }
    pl_log_info("weights: %zu KiB on %s (%s), %s", wb >> 10, res->backing, res->reason,
                res->locked ? "locked" : "not locked");
    *ret_model = m;
    return 0;
}

void pl_daemon_init_model_done(struct pl_model *m, struct pl_daemon_residency *res) {
    pl_model_free(m); /* unmaps the weights' copy too */
    res->base = NULL;
}

void pl_daemon_init_residency_measure(const struct pl_daemon_residency *res, uint64_t *ret_locked,
                                      uint64_t *ret_hugetlb, uint64_t *ret_thp) {
    *ret_locked = *ret_hugetlb = *ret_thp = 0;
    if (!res->base)
        return;
    FILE *f = fopen("/proc/self/smaps", "re");
    if (!f)
        return;
    char line[512];
    bool in = false;
    uintptr_t lo = (uintptr_t)res->base, hi = lo + res->bytes;
    while (fgets(line, sizeof(line), f)) {
        unsigned long a, b;
        unsigned long long kb;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, '-') &&
            (size_t)strcspn(line, " ") < 40) {
            in = a >= lo && b <= hi;
            continue;
        }
        if (!in)
            continue;
        if (sscanf(line, "Locked: %llu kB", &kb) == 1)
            *ret_locked += kb << 10;
        else if (sscanf(line, "AnonHugePages: %llu kB", &kb) == 1)
            *ret_thp += kb << 10;
        else if (sscanf(line, "Private_Hugetlb: %llu kB", &kb) == 1)
            *ret_hugetlb += kb << 10;
    }
    (void)fclose(f);
}

/* ---- Sockets ---- */

static int bind_one(const char *dir, const char *name, mode_t mode, int *ret_fd, char *err,
                    size_t err_len) {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int n = snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= sizeof(sa.sun_path))
        return set_err(err, err_len, -ENAMETOOLONG, "socket path %s/%s is too long", dir, name);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return set_err(err, err_len, -errno, "socket(): %s", strerror(errno));
    struct stat st;
    if (lstat(sa.sun_path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            (void)close(fd);
            return set_err(err, err_len, -EEXIST, "%s exists and is not a socket", sa.sun_path);
        }
        /* A live daemon answers connect(); a stale file refuses it. */
        int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            (void)close(probe);
            (void)close(fd);
            return set_err(err, err_len, -EADDRINUSE,
                           "%s: another picolmd is already listening there", sa.sun_path);
        }
        if (probe >= 0)
            (void)close(probe);
        (void)unlink(sa.sun_path);
    }
    mode_t old = umask(0777 & ~mode);
    int r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
    int e = errno;
    (void)umask(old);
    if (r < 0 || chmod(sa.sun_path, mode) < 0 || listen(fd, 128) < 0) {
        if (r == 0)
            e = errno;
        (void)close(fd);
        return set_err(err, err_len, -e, "cannot listen on %s: %s", sa.sun_path, strerror(e));
    }
    *ret_fd = fd;
    return 0;
}

/* Sockets passed by the service manager (picolmd.socket): not ours to unlink. */
static bool sockets_inherited;

bool pl_daemon_init_sockets_inherited(void) {
    return sockets_inherited;
}

/* Socket activation: take dir/picolm.sock and dir/admin.sock from the inherited fds.
 * Returns 1 when taken, 0 when not socket-activated, or a negative code with err. */
static int take_inherited(const char *dir, int *ret_client_fd, int *ret_admin_fd, char *err,
                          size_t err_len) {
    char cp[600], ap[600];
    int n = pl_daemon_sd_listen_fds();
    if (n < 0)
        return set_err(err, err_len, n, "socket activation: bad $LISTEN_FDS/$LISTEN_PID: %s",
                       pl_strerror(n));
    if (n == 0)
        return 0;
    (void)snprintf(cp, sizeof(cp), "%s/picolm.sock", dir);
    (void)snprintf(ap, sizeof(ap), "%s/admin.sock", dir);
    int cfd = pl_daemon_sd_listen_find(n, SOCK_SEQPACKET, cp);
    int afd = pl_daemon_sd_listen_find(n, SOCK_SEQPACKET, ap);
    if (cfd < 0 || afd < 0) {
        if (cfd >= 0)
            (void)close(cfd);
        if (afd >= 0)
            (void)close(afd);
        return set_err(err, err_len, -ENOENT,
                       "socket activation: the %d inherited socket(s) do not include %s and %s "
                       "(the socket units must name the configured socket_dir)",
                       n, cp, ap);
    }
    /* The event loop never blocks on them (io_uring accepts), but accept4 fallbacks must not. */
    int fl;
    if ((fl = fcntl(cfd, F_GETFL)) < 0 || fcntl(cfd, F_SETFL, fl | O_NONBLOCK) < 0 ||
        (fl = fcntl(afd, F_GETFL)) < 0 || fcntl(afd, F_SETFL, fl | O_NONBLOCK) < 0) {
        int e = errno;
        (void)close(cfd);
        (void)close(afd);
        return set_err(err, err_len, -e, "socket activation: fcntl: %s", strerror(e));
    }
    sockets_inherited = true;
    *ret_client_fd = cfd;
    *ret_admin_fd = afd;
    return 1;
}

int pl_daemon_init_sockets(const char *dir, int *ret_client_fd, int *ret_admin_fd, char *err,
                           size_t err_len) {
    int cfd = -1, afd = -1, r;
    if ((r = take_inherited(dir, ret_client_fd, ret_admin_fd, err, err_len)) != 0)
        return r < 0 ? r : 0;
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return set_err(err, err_len, -errno, "cannot create %s: %s", dir, strerror(errno));
    if ((r = bind_one(dir, "picolm.sock", 0666, &cfd, err, err_len)) < 0)
        return r;
    if ((r = bind_one(dir, "admin.sock", 0600, &afd, err, err_len)) < 0) {
        (void)close(cfd);
        return r;
    }
    *ret_client_fd = cfd;
    *ret_admin_fd = afd;
    return 0;
}

void pl_daemon_init_sockets_unlink(const char *dir) {
    char p[600];
    if (sockets_inherited)
        return;
    (void)snprintf(p, sizeof(p), "%s/picolm.sock", dir);
    (void)unlink(p);
    (void)snprintf(p, sizeof(p), "%s/admin.sock", dir);
    (void)unlink(p);
}

/* The lines of /proc/self/status that prove the lock-down, as "CapEff ... NoNewPrivs ...". */
static void lockdown_status(char *buf, size_t len) {
    FILE *f = fopen("/proc/self/status", "re");
    char line[256];
    size_t at = 0;
    buf[0] = '\0';
    if (!f)
        return;
    while (fgets(line, sizeof(line), f) && at < len) {
        if (strncmp(line, "CapEff:", 7) && strncmp(line, "NoNewPrivs:", 11) &&
            strncmp(line, "Seccomp:", 8))
            continue;
        line[strcspn(line, "\n")] = '\0';
        size_t colon = strcspn(line, ":");
        char *v = line + colon + 1;
        v += strspn(v, " \t");
        line[colon] = '\0';
        int n = snprintf(buf + at, len - at, "%s%s %s", at ? ", " : "", line, v);
        if (n < 0)
            break;
        at += (size_t)n;
    }
    (void)fclose(f);
}

/* admin.sock is bound 0600 (root only); with an admin group it becomes root:GROUP 0660. */
static void admin_socket_group(const char *dir, int64_t admin_gid) {
    char p[600];
    if (admin_gid < 0)
        return;
    (void)snprintf(p, sizeof(p), "%s/admin.sock", dir);
    if (chown(p, (uid_t)-1, (gid_t)admin_gid) < 0 || chmod(p, 0660) < 0)
        pl_log_warn("cannot give %s to group %lld with mode 0660: %s; only root can reach it", p,
                    (long long)admin_gid, strerror(errno));
}

int pl_daemon_init_lockdown(const struct pl_daemon_config *cfg, int64_t admin_gid, char *err,
                            size_t err_len) {
    struct pl_policy_privdrop_plan plan;
    scmp_filter_ctx filter = NULL;
    bool drop = !cfg->no_drop && geteuid() == 0;
    char st[160];
    int r;

    admin_socket_group(cfg->socket_dir, admin_gid);
    if (drop) {
        r = pl_policy_privdrop_plan_from_user(cfg->user, &plan);
        if (r == -ENOENT)
            return set_err(err, err_len, r,
                           "user '%s' does not exist: create it (the packaging's sysusers.d "
                           "does), choose another with --user, or pass --no-drop (development)",
                           cfg->user);
        if (r < 0)
            return set_err(err, err_len, r, "cannot look up user '%s': %s", cfg->user,
                           pl_strerror(r));
    } else if (cfg->no_drop) {
        pl_log_warn("--no-drop: keeping uid %u and its capabilities (development only)",
                    (unsigned)geteuid());
    } else {
        pl_log_info("not started as root: running as uid %u without a user switch",
                    (unsigned)geteuid());
    }
    /* The prefix cache directory was made by root: the service user writes it from now on. */
    int pfd = pl_daemon_pcache_persist_fd();
    if (drop && pfd >= 0 && fchown(pfd, plan.uid, plan.gid) < 0)
        pl_log_warn("cannot give the prefix cache directory to uid %u: %s; it stays read-only",
                    (unsigned)plan.uid, strerror(errno));
    if (cfg->no_seccomp) {
        pl_log_warn("--no-seccomp: the broker runs WITHOUT its system call filter "
                    "(development only)");
    } else if ((r = pl_policy_seccomp_broker_at(pfd, &filter)) < 0) {
        return set_err(err, err_len, r, "cannot build the seccomp filter: %s", pl_strerror(r));
    } else if ((r = pl_daemon_pcache_seccomp(filter)) < 0) {
        seccomp_release(filter);
        return set_err(err, err_len, r,
                       "cannot allow the prefix cache directory in the seccomp filter: %s",
                       pl_strerror(r));
    } else if ((r = pl_daemon_metrics_file_seccomp(filter)) < 0) {
        seccomp_release(filter);
        return set_err(err, err_len, r, "cannot allow the metrics file in the seccomp filter: %s",
                       pl_strerror(r));
    }
    if (drop) {
        r = pl_policy_privdrop_apply(&plan, filter);
        if (r < 0) {
            seccomp_release(filter);
            return set_err(err, err_len, r, "cannot drop privileges to '%s' (uid %u): %s",
                           cfg->user, plan.uid, pl_strerror(r));
        }
    } else if (filter) {
        /* Unprivileged: no_new_privs is what allows loading a filter at all. */
        r = prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ? -errno : seccomp_load(filter);
        if (r < 0) {
            seccomp_release(filter);
            return set_err(err, err_len, r, "cannot load the seccomp filter: %s", pl_strerror(r));
        }
    }
    seccomp_release(filter);
    lockdown_status(st, sizeof(st));
    pl_log_info("serving as uid %u gid %u%s%s: %s", (unsigned)getuid(), (unsigned)getgid(),
                drop ? ", user " : "", drop ? cfg->user : "", st);
    return 0;
}
