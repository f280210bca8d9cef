/* SPDX-License-Identifier: MIT */
/* Privileged one-time start-up work (pl_daemon_init_*): load the model, move its weights
 * onto huge pages and lock them, bind the client and admin sockets. Everything that may
 * need privileges happens here, before the first byte from a client is read; the place to
 * drop privileges and install the seccomp filter is pl_daemon_init_lockdown(). */
#ifndef PL_DAEMON_INIT_H
#define PL_DAEMON_INIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pl_model;
struct pl_daemon_config;

/* Where the weights live, and why. */
struct pl_daemon_residency {
    char backing[16]; /* "hugetlb", "thp", "anonymous", "file" */
    char reason[256]; /* why this backing (and why not a better one) */
    bool locked;
    char lock_reason[160]; /* "" when locked, else why not */
    void *base;            /* our mapping (NULL for "file") */
    size_t bytes;          /* length of that mapping */
    size_t weight_bytes;   /* bytes of tensor data */
};

/* Load cfg->model with n_threads engine threads, all pinned when cpus are configured, else
 * the workers only (see the function), move the
 * weights per cfg->hugepages and mlock them (cfg->require_mlock: failure to lock is an
 * error). Logs what it got. Returns 0 or a negative code with the reason in err. */
int pl_daemon_init_model(const struct pl_daemon_config *cfg, struct pl_model **ret_model,
                         struct pl_daemon_residency *ret_res, char *err, size_t err_len);
/* Free the model and its mapping. */
void pl_daemon_init_model_done(struct pl_model *m, struct pl_daemon_residency *res);

/* Create dir (0755) if missing, bind SOCK_SEQPACKET sockets dir/picolm.sock (mode 0666:
 * access is the policy's decision at the handshake) and dir/admin.sock (0600), replacing
 * stale socket files but refusing to replace a socket a live daemon listens on. Returns 0
 * with both fds (non-blocking, close-on-exec) or a negative code with err. */
int pl_daemon_init_sockets(const char *dir, int *ret_client_fd, int *ret_admin_fd, char *err,
                           size_t err_len);
void pl_daemon_init_sockets_unlink(const char *dir);
/* True when the sockets came from the service manager (socket activation): with
 * $LISTEN_FDS set, pl_daemon_init_sockets() takes dir/picolm.sock and dir/admin.sock from the
 * inherited fds instead of binding, and nobody may unlink them. */
bool pl_daemon_init_sockets_inherited(void);

/* The end of start-up, once every privileged step is done (model, huge pages, mlock,
 * sockets, CPU affinity, threads, io_uring): give admin.sock to admin_gid with mode 0660
 * (admin_gid < 0: root only, 0600); started as root, switch to cfg->user (no capabilities
 * left, no way back; cfg->no_drop keeps the credentials for development); set no_new_privs
 * and load the broker's seccomp allow-list for the serving phase (cfg->no_seccomp skips it
 * with a warning). Logs the resulting CapEff / NoNewPrivs / Seccomp. Returns 0, or a
 * negative code with the reason in err: the caller must exit (the process may be half
 * dropped). */
int pl_daemon_init_lockdown(const struct pl_daemon_config *cfg, int64_t admin_gid, char *err,
                            size_t err_len);

/* Re-measure residency from /proc/self/smaps for our mapping: bytes locked, on hugetlb and
 * on THP. Zero when unknown. */
void pl_daemon_init_residency_measure(const struct pl_daemon_residency *res, uint64_t *ret_locked,
                                      uint64_t *ret_hugetlb, uint64_t *ret_thp);

#endif
