/* SPDX-License-Identifier: MIT */
/* picolmd's metrics textfile: directory fd opened before the privilege drop, seccomp rules
 * that confine file creation and renames to that fd, and the write itself (rendering and
 * temp file + rename are in metrics_text.c). Note that openat(2) ignores its directory fd
 * for an absolute path: the filter narrows what the broker's own code does, and the
 * unprivileged user's file permissions are what bound a compromised broker. */
#include "metrics_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "metrics_text.h"

static int dir_fd = -1;
static char file_name[256];

int pl_daemon_metrics_file_open(const char *path, char *err, size_t err_len) {
    char dir[4096];
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t dlen = slash ? (size_t)(slash - path) : 0;
    if (!*base || strlen(base) + 5 > sizeof(file_name) || dlen >= sizeof(dir)) {
        (void)snprintf(err, err_len, "metrics_file '%s': needs a file name under 250 bytes", path);
        return -EINVAL;
    }
    if (slash && dlen == 0)
        (void)snprintf(dir, sizeof(dir), "/");
    else if (slash)
        (void)snprintf(dir, sizeof(dir), "%.*s", (int)dlen, path);
    else
        (void)snprintf(dir, sizeof(dir), ".");
    int fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        int r = -errno;
        (void)snprintf(err, err_len, "metrics_file '%s': cannot open its directory %s: %s", path,
                       dir, strerror(-r));
        return r;
    }
    pl_daemon_metrics_file_close();
    dir_fd = fd;
    (void)snprintf(file_name, sizeof(file_name), "%s", base);
    return 0;
}

int pl_daemon_metrics_file_dir_fd(void) {
    return dir_fd;
}

/* Allow syscall name when its arguments a and b (b < 0: only a) are the directory fd. */
static int allow_at(scmp_filter_ctx f, const char *name, int a, int b) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR)
        return 0; /* not on this architecture */
    if (b < 0)
        return seccomp_rule_add(f, SCMP_ACT_ALLOW, nr, 1,
                                SCMP_CMP((unsigned)a, SCMP_CMP_EQ, (scmp_datum_t)dir_fd, 0));
    return seccomp_rule_add(f, SCMP_ACT_ALLOW, nr, 2,
                            SCMP_CMP((unsigned)a, SCMP_CMP_EQ, (scmp_datum_t)dir_fd, 0),
                            SCMP_CMP((unsigned)b, SCMP_CMP_EQ, (scmp_datum_t)dir_fd, 0));
}

int pl_daemon_metrics_file_seccomp(scmp_filter_ctx filter) {
    int r;
    if (dir_fd < 0 || !filter)
        return 0;
    /* openat(dir_fd, "NAME.tmp", O_WRONLY|O_CREAT|O_TRUNC|O_NOFOLLOW): the temp file. */
    if ((r = allow_at(filter, "openat", 0, -1)) < 0)
        return r;
    /* renameat(dir_fd, "NAME.tmp", dir_fd, "NAME"): publish it (renameat2 where libc uses
     * it for renameat). */
    if ((r = allow_at(filter, "renameat", 0, 2)) < 0)
        return r;
    return allow_at(filter, "renameat2", 0, 2);
}

int pl_daemon_metrics_file_write(const Picolm__Admin__V1__Stats *st) {
    if (dir_fd < 0)
        return -EBADF;
    return pl_daemon_metrics_text_write_at(dir_fd, file_name, st);
}

void pl_daemon_metrics_file_close(void) {
    if (dir_fd >= 0)
        (void)close(dir_fd);
    dir_fd = -1;
}
