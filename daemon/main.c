/* SPDX-License-Identifier: MIT */
/* picolmd: keeps one GGUF model resident (huge pages, mlocked) and serves it to local
 * clients over shared memory. Start-up order: configuration, signals, model + residency,
 * sockets, lock-down, inference thread, event loop; then drain and clean up. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "pl/engine_gguf.h"
#include "pl/engine_model.h"
#include "pl/ipc_uring.h"
#include "pl/pl_err.h"
#include "pl/pl_log.h"
#include "pl/pl_util.h"
#include "scheduler.h"
#include "sd_notify.h"

/* ASan builds: LeakSanitizer's end-of-process check ptraces a clone of the process, which the
 * broker's seccomp filter (rightly) kills. */
#if defined(__SANITIZE_ADDRESS__)
#define PL_DAEMON_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PL_DAEMON_LSAN 1
#endif
#endif
#include "metrics_file.h"
#include "stats.h"

/* Detach: the parent waits for the child's start-up verdict on a pipe and exits with it, so
 * `picolmd` without --foreground still reports start-up errors. Done before the model is
 * locked (locks are not inherited across fork). Returns the write end in the child. */
static int detach(void) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -errno;
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid > 0) {
        char c = 1;
        (void)close(p[1]);
        ssize_t n = read(p[0], &c, 1);
        _exit(n == 1 ? c : 1);
    }
    (void)close(p[0]);
    (void)setsid();
    int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (nul >= 0) {
        (void)dup2(nul, STDIN_FILENO);
        (void)dup2(nul, STDOUT_FILENO);
        (void)close(nul);
    }
    return p[1];
}

static void report(int fd, char code) {
    if (fd >= 0) {
        (void)!write(fd, &code, 1);
        (void)close(fd);
    }
}

static void model_name(struct pl_daemon *d) {
    struct pl_gguf_str s;
    const char *base = strrchr(d->cfg.model, '/');
    if (pl_gguf_get_str(pl_model_gguf(d->model), "general.name", &s) == 0 && s.len > 0)
        (void)snprintf(d->model_name, sizeof(d->model_name), "%.*s",
                       (int)PL_MIN(s.len, sizeof(d->model_name) - 1), s.ptr);
    else
        (void)snprintf(d->model_name, sizeof(d->model_name), "%s", base ? base + 1 : d->cfg.model);
}

int main(int argc, char **argv) {
    struct pl_daemon *d = calloc(1, sizeof(*d));
    char err[1024] = "";
    int r, ready_fd = -1, code = 1;
    bool filtered = false; /* the seccomp filter is loaded */
    if (!d) {
        (void)fprintf(stderr, "picolmd: out of memory\n");
        return 1;
    }
    d->listen_fd = d->admin_fd = d->signal_fd = -1;
    for (int i = 0; i < PL_DAEMON_MAX_ADMIN; i++)
        d->admin_conn[i] = -1;
    d->t_start_ns = pl_daemon_now_ns();

    /* ---- configuration ---- */
    pl_daemon_config_defaults(&d->cfg);
    const char *cfg_file = pl_daemon_config_find_file(argc, argv);
    if (cfg_file && pl_daemon_config_load_file(&d->cfg, cfg_file, err, sizeof(err)) < 0) {
        (void)fprintf(stderr, "picolmd: %s\n", err);
        return 2;
    }
    r = pl_daemon_config_parse_args(&d->cfg, argc, argv, err, sizeof(err));
    if (r == 1)
        return 0;
    if (r < 0 || pl_daemon_config_check(&d->cfg, err, sizeof(err)) < 0) {
        (void)fprintf(stderr, "picolmd: %s\n", err);
        return 2;
    }
    pl_log_set_level((enum pl_log_level)d->cfg.log_level);
    /* The access policy: a broken file stops the start here, with its line. */
    if (pl_daemon_access_init(&d->access, d->cfg.policy_path, d->cfg.max_sessions, err,
                              sizeof(err)) < 0) {
        (void)fprintf(stderr, "picolmd: policy: %s\n", err);
        pl_daemon_access_done(&d->access);
        free(d);
        return 2;
    }
    if (!d->cfg.foreground && (ready_fd = detach()) < 0) {
        (void)fprintf(stderr, "picolmd: cannot detach: %s\n", strerror(-ready_fd));
        return 1;
    }

    /* ---- signals: delivered through the signalfd only (the mask is inherited by the
     * inference thread and the engine's workers) ---- */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    (void)signal(SIGPIPE, SIG_IGN);
    if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0 ||
        (d->signal_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC)) < 0) {
        pl_log_err("signalfd: %s", strerror(errno));
        goto out;
    }

    /* ---- privileged one-time work ---- */
    r = pl_daemon_init_model(&d->cfg, &d->model, &d->res, err, sizeof(err));
    if (r < 0) {
        pl_log_err("cannot load %s: %s", d->cfg.model, err);
        goto out;
    }
    const struct pl_model_hparams *hp = pl_model_hparams(d->model);
    d->n_vocab = hp->n_vocab;
    d->n_ctx = d->cfg.n_ctx ? d->cfg.n_ctx : PL_MIN(hp->n_ctx_train, 4096u);
    model_name(d);
    r = pl_daemon_init_sockets(d->cfg.socket_dir, &d->listen_fd, &d->admin_fd, err, sizeof(err));
    if (r < 0) {
        pl_log_err("%s", err);
        goto out;
    }
    /* The service manager's notify socket: connected now, only sendmsg() once locked down. */
    if ((r = pl_daemon_sd_notify_init()) < 0)
        pl_log_warn("$NOTIFY_SOCKET: %s; not notifying the service manager", pl_strerror(r));

    /* ---- KV pool, scheduler, sessions ---- */
    uint64_t kv_tokens = d->cfg.kv_pool_tokens;
    if (!kv_tokens && d->cfg.kv_pool_mb) {
        uint64_t per_tok = 2ull * hp->n_layer * hp->n_head_kv * hp->head_dim *
                           (d->cfg.kv_type == PL_KV_F16 ? 2 : 4);
        kv_tokens = (d->cfg.kv_pool_mb << 20) / per_tok;
    }
    if (!kv_tokens)
        kv_tokens = (uint64_t)d->n_ctx * d->cfg.max_active;
    if (kv_tokens < 16 || kv_tokens > UINT32_MAX) {
        pl_log_err("KV pool of %llu tokens is out of range", (unsigned long long)kv_tokens);
        goto out;
    }
    uint32_t max_held = d->cfg.max_sessions * d->cfg.max_requests;
    struct pl_daemon_sched_opts so = {.n_seq = d->cfg.max_active,
                                      .n_ctx = d->n_ctx,
                                      .n_batch = d->cfg.batch,
                                      .kv_tokens = (uint32_t)kv_tokens,
                                      .kv_type = d->cfg.kv_type,
                                      .cpus = d->cfg.cpus,
                                      .n_cpus = d->cfg.n_cpus,
                                      .prefill_chunk = d->cfg.prefill_chunk,
                                      .stream_coalesce_us = d->cfg.stream_coalesce_us,
                                      .queue_max = d->cfg.queue_max,
                                      .queue_timeout_ms = d->cfg.queue_timeout_ms,
                                      .max_held = max_held,
                                      .max_sessions = d->cfg.max_sessions,
                                      .decode_slots = d->cfg.decode_slots,
                                      .prefix_cache_tokens = d->cfg.prefix_cache_tokens,
                                      .prefix_cache_dir = d->cfg.prefix_cache_dir};
    if ((r = pl_daemon_session_table_init(&d->sessions, d->cfg.max_sessions, d->cfg.max_requests,
                                          d->n_ctx)) < 0) {
        pl_log_err("session table: %s", pl_strerror(r));
        goto out;
    }
    d->scratch_ids = malloc(PL_DAEMON_MAX_RECORD * sizeof(int32_t));
    d->scratch_text = malloc(PL_DAEMON_MAX_RECORD);
    if (!d->scratch_ids || !d->scratch_text) {
        pl_log_err("out of memory");
        goto out;
    }
    d->seed_state = d->t_start_ns ^ ((uint64_t)getpid() << 32);
    if ((r = pl_ipc_uring_new(256, &d->uring)) < 0) {
        pl_log_err("io_uring: %s", pl_strerror(r));
        goto out;
    }
    if ((r = pl_daemon_stats_new(&d->stats)) < 0) {
        pl_log_err("statistics: %s", pl_strerror(r));
        goto out;
    }
    so.stats = d->stats;
    if ((r = pl_daemon_sched_start(d->model, &so, &d->sched, err, sizeof(err))) < 0) {
        pl_log_err("%s", err);
        goto out;
    }
    if (d->cfg.metrics_file[0] &&
        (r = pl_daemon_metrics_file_open(d->cfg.metrics_file, err, sizeof(err))) < 0) {
        pl_log_err("%s", err);
        goto out;
    }
    /* Every privileged step is behind us (threads pinned, io_uring, sockets): lock down. */
    r = pl_daemon_init_lockdown(&d->cfg, pl_daemon_access_admin_gid(&d->access), err, sizeof(err));
    if (r < 0) {
        pl_log_err("%s", err);
        goto out;
    }
    filtered = !d->cfg.no_seccomp;
    pl_log_info("picolmd %s: model '%s' (%s, %u layers, ctx %u), KV pool %u tokens, "
                "%u sessions x %u requests, %u active, sockets in %s",
                PL_DAEMON_VERSION, d->model_name, hp->arch, hp->n_layer, d->n_ctx,
                pl_daemon_sched_kv_total(d->sched), d->cfg.max_sessions, d->cfg.max_requests,
                d->cfg.max_active, d->cfg.socket_dir);
    report(ready_fd, 0);
    ready_fd = -1;
    (void)pl_daemon_sd_notifyf("READY=1\nSTATUS=serving %s", d->model_name);

    code = pl_daemon_event_loop_run(d);

out:
    report(ready_fd, (char)1);
    pl_daemon_sched_stop(d->sched);
    pl_daemon_session_table_done(&d->sessions);
    for (int i = 0; i < PL_DAEMON_MAX_ADMIN; i++)
        pl_close_fd(&d->admin_conn[i]);
    pl_ipc_uring_free(d->uring);
    if (d->listen_fd >= 0 || d->admin_fd >= 0)
        pl_daemon_init_sockets_unlink(d->cfg.socket_dir);
    else if (d->draining)
        pl_daemon_init_sockets_unlink(d->cfg.socket_dir);
    pl_close_fd(&d->listen_fd);
    pl_close_fd(&d->admin_fd);
    pl_close_fd(&d->signal_fd);
    if (d->model)
        pl_daemon_init_model_done(d->model, &d->res);
    pl_daemon_stats_free(d->stats); /* after the scheduler, which records into it */
    pl_daemon_metrics_file_close();
    free(d->scratch_ids);
    free(d->scratch_text);
    pl_daemon_access_done(&d->access);
    pl_daemon_sd_notify_done();
    free(d);
    pl_log_info("exiting with %d", code);
#ifdef PL_DAEMON_LSAN
    if (filtered) { /* no leak check under the filter: --no-seccomp runs keep it */
        (void)fflush(NULL);
        _exit(code);
    }
#else
    (void)filtered;
#endif
    return code;
}
