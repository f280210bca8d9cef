/* SPDX-License-Identifier: MIT */
/* A real picolmd for tests (see daemon_harness.h). */
#include "daemon_harness.h"

#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pl_test_client.h"

uint64_t pl_test_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int pl_test_model_path(const char *name, char *buf, size_t len) {
    const char *data = getenv("PICOLM_TEST_DATA");
    if (!data || !data[0])
        return -ENOENT;
    if ((size_t)snprintf(buf, len, "%s/models/%s", data, name) >= len)
        return -ENAMETOOLONG;
    return access(buf, R_OK) == 0 ? 0 : -ENOENT;
}

static int spawn(struct pl_test_daemon *d) {
    const char *args[48];
    int n = 0;
    args[n++] = PL_BINARY_DIR "/bin/picolmd";
    args[n++] = "--model";
    args[n++] = d->model;
    args[n++] = "--socket-dir";
    args[n++] = d->dir;
    args[n++] = "--foreground";
    args[n++] = "--ctx";
    args[n++] = "256";
    args[n++] = "--log-level";
    args[n++] = "warn";
    bool has_policy = false;
    for (int i = 0; d->extra[i] && n < 45; i++) {
        has_policy |= strcmp(d->extra[i], "--policy") == 0;
        args[n++] = d->extra[i];
    }
    char policy[128];
    if (!has_policy) {
        /* Every test client runs as one uid: lift the default per-uid limits. */
        static const char text[] = "[rule everyone]\nmatch = default\naccess = allow\n"
                                   "max_sessions = unlimited\nmax_queued = unlimited\n"
                                   "max_prompt_tokens = unlimited\nmax_new_tokens = unlimited\n"
                                   "max_context = unlimited\n";
        (void)snprintf(policy, sizeof(policy), "%s/policy.conf", d->dir);
        FILE *f = fopen(policy, "w");
        if (!f)
            return -errno;
        bool ok = fwrite(text, 1, sizeof(text) - 1, f) == sizeof(text) - 1;
        if (fclose(f) != 0 || !ok)
            return -EIO;
        args[n++] = "--policy";
        args[n++] = policy;
    }
    args[n] = NULL;
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        if (d->log[0]) {
            int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
            if (fd >= 0)
                (void)dup2(fd, 2);
        }
        execv(args[0], (char *const *)args);
        _exit(127);
    }
    d->pid = pid;
    for (int i = 0; i < 500; i++) {
        Picolm__Admin__V1__AdminResponse *resp = NULL;
        if (pl_test_admin_status(d->dir, &resp) == 0) {
            picolm__admin__v1__admin_response__free_unpacked(resp, NULL);
            return 0;
        }
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            d->pid = -1;
            return -ECHILD;
        }
        usleep(10000);
    }
    pl_test_daemon_kill(d);
    return -ETIMEDOUT;
}

int pl_test_daemon_start(struct pl_test_daemon *d, const char *model, const char *const *extra) {
    memset(d, 0, sizeof(*d));
    d->pid = -1;
    if (strlen(model) >= sizeof(d->model))
        return -ENAMETOOLONG;
    strcpy(d->model, model);
    for (int i = 0; extra && extra[i] && i < 23; i++)
        d->extra[i] = extra[i];
    strcpy(d->dir, "/tmp/picolmd-test.XXXXXX");
    if (!mkdtemp(d->dir))
        return -errno;
    return spawn(d);
}

int pl_test_daemon_restart(struct pl_test_daemon *d) {
    if (d->pid > 0)
        return -EBUSY;
    /* A daemon that died leaves its sockets; the new one binds anew. */
    char p[128];
    (void)snprintf(p, sizeof(p), "%s/picolm.sock", d->dir);
    (void)unlink(p);
    (void)snprintf(p, sizeof(p), "%s/admin.sock", d->dir);
    (void)unlink(p);
    return spawn(d);
}

int pl_test_daemon_stop(struct pl_test_daemon *d) {
    int st = 0;
    if (d->pid <= 0)
        return -ECHILD;
    (void)kill(d->pid, SIGTERM);
    if (waitpid(d->pid, &st, 0) != d->pid)
        return -errno;
    d->pid = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void pl_test_daemon_kill(struct pl_test_daemon *d) {
    if (d->pid <= 0)
        return;
    (void)kill(d->pid, SIGKILL);
    (void)waitpid(d->pid, NULL, 0);
    d->pid = -1;
}

int pl_test_daemon_alive(const struct pl_test_daemon *d) {
    if (d->pid <= 0)
        return 0;
    char p[64], st = '?';
    (void)snprintf(p, sizeof(p), "/proc/%d/stat", (int)d->pid);
    FILE *f = fopen(p, "r");
    if (!f)
        return 0;
    /* pid (comm) state ...: comm may hold spaces, so find the last ')'. */
    char line[512];
    if (fgets(line, sizeof(line), f)) {
        char *rp = strrchr(line, ')');
        if (rp && rp[1] == ' ')
            st = rp[2];
    }
    fclose(f);
    return st != '?' && st != 'Z' && st != 'X';
}

void pl_test_daemon_done(struct pl_test_daemon *d) {
    if (d->pid > 0)
        (void)pl_test_daemon_stop(d);
    char p[128];
    (void)snprintf(p, sizeof(p), "%s/picolm.sock", d->dir);
    (void)unlink(p);
    (void)snprintf(p, sizeof(p), "%s/admin.sock", d->dir);
    (void)unlink(p);
    (void)snprintf(p, sizeof(p), "%s/policy.conf", d->dir);
    (void)unlink(p);
    (void)rmdir(d->dir);
}

int pl_test_daemon_status(const struct pl_test_daemon *d, uint32_t *ret_sessions,
                          uint64_t *ret_kv_used) {
    Picolm__Admin__V1__AdminResponse *resp = NULL;
    int r = pl_test_admin_status(d->dir, &resp);
    if (r < 0)
        return r;
    if (!resp->status || !resp->status->kv) {
        picolm__admin__v1__admin_response__free_unpacked(resp, NULL);
        return -EPROTO;
    }
    if (ret_sessions)
        *ret_sessions = resp->status->sessions;
    if (ret_kv_used)
        *ret_kv_used = resp->status->kv->used_tokens;
    picolm__admin__v1__admin_response__free_unpacked(resp, NULL);
    return 0;
}

int pl_test_daemon_counter(const struct pl_test_daemon *d, const char *name, uint64_t *ret) {
    return pl_test_admin_counter(d->dir, name, ret);
}

int pl_test_daemon_fds(const struct pl_test_daemon *d, unsigned *ret) {
    char p[64];
    unsigned n = 0;
    (void)snprintf(p, sizeof(p), "/proc/%d/fd", (int)d->pid);
    DIR *dd = opendir(p);
    if (!dd)
        return -errno;
    struct dirent *e;
    while ((e = readdir(dd)))
        if (e->d_name[0] != '.')
            n++;
    closedir(dd);
    *ret = n;
    return 0;
}

int pl_test_daemon_rss_kb(const struct pl_test_daemon *d, long *ret) {
    char p[64], line[256];
    long kb = -1;
    (void)snprintf(p, sizeof(p), "/proc/%d/status", (int)d->pid);
    FILE *f = fopen(p, "r");
    if (!f)
        return -errno;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    fclose(f);
    if (kb < 0)
        return -EPROTO;
    *ret = kb;
    return 0;
}

int pl_test_daemon_wait_idle(const struct pl_test_daemon *d, int timeout_ms) {
    uint64_t t0 = pl_test_now_ms();
    for (;;) {
        uint32_t s = 1;
        uint64_t kv = 1;
        if (pl_test_daemon_status(d, &s, &kv) == 0 && s == 0 && kv == 0)
            return 0;
        if (pl_test_now_ms() - t0 > (uint64_t)timeout_ms)
            return -ETIMEDOUT;
        usleep(1000);
    }
}
