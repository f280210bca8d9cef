/* SPDX-License-Identifier: MIT */
/* See run.h. */
#include "run.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

char *pl_test_read_fd(int fd, size_t *ret_len) {
    struct stat st;
    if (fstat(fd, &st) != 0 || lseek(fd, 0, SEEK_SET) != 0)
        return NULL;
    char *buf = malloc((size_t)st.st_size + 1);
    if (!buf)
        return NULL;
    size_t len = 0;
    while (len < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + len, (size_t)st.st_size - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = n < 0 ? errno : EIO;
            free(buf);
            errno = e;
            return NULL;
        }
        len += (size_t)n;
    }
    buf[len] = '\0';
    *ret_len = len;
    return buf;
}

/* An unlinked temporary file, or -errno. */
static int tmp_fd(void) {
    char path[] = "/tmp/picolm-test-run-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return -errno;
    (void)unlink(path);
    return fd;
}

static void child(const char *path, const char *const *argv, const char *const *env, int fin,
                  int fout, int ferr) {
    for (size_t i = 0; env && env[i]; i++) {
        const char *eq = strchr(env[i], '=');
        if (!eq) {
            (void)unsetenv(env[i]);
            continue;
        }
        char name[256];
        size_t n = (size_t)(eq - env[i]);
        if (n >= sizeof(name))
            _exit(126);
        memcpy(name, env[i], n);
        name[n] = '\0';
        (void)setenv(name, eq + 1, 1);
    }
    if (dup2(fin, 0) < 0 || dup2(fout, 1) < 0 || dup2(ferr, 2) < 0)
        _exit(126);
    execv(path, (char *const *)argv);
    _exit(127);
}

int pl_test_run(const char *path, const char *const *argv, const char *in, size_t in_len,
                const char *const *env, struct pl_test_run *ret) {
    int fd[3] = {-1, -1, -1}, r = 0;
    memset(ret, 0, sizeof(*ret));
    for (int i = 0; i < 3; i++)
        if ((fd[i] = tmp_fd()) < 0) {
            r = fd[i];
            goto out;
        }
    for (size_t off = 0; off < in_len;) {
        ssize_t n = write(fd[0], in + off, in_len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            r = n < 0 ? -errno : -EIO;
            goto out;
        }
        off += (size_t)n;
    }
    if (lseek(fd[0], 0, SEEK_SET) != 0) {
        r = -errno;
        goto out;
    }
    (void)fflush(NULL); /* nothing buffered here is written twice by the child */
    pid_t pid = fork();
    if (pid < 0) {
        r = -errno;
        goto out;
    }
    if (pid == 0)
        child(path, argv, env, fd[0], fd[1], fd[2]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) {
            r = -errno;
            goto out;
        }
    ret->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    ret->out = pl_test_read_fd(fd[1], &ret->out_len);
    ret->err = pl_test_read_fd(fd[2], &ret->err_len);
    if (!ret->out || !ret->err) {
        r = -EIO;
        pl_test_run_free(ret);
    }
out:
    for (int i = 0; i < 3; i++)
        if (fd[i] >= 0)
            (void)close(fd[i]);
    return r;
}

void pl_test_run_free(struct pl_test_run *r) {
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}
