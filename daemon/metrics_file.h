/* SPDX-License-Identifier: MIT */
/* The Prometheus textfile of picolmd (pl_daemon_metrics_file_*): its directory is opened once
 * at start-up, before the privilege drop (main.c); the seccomp filter then allows creating
 * and renaming files relative to that directory fd only (init.c calls
 * pl_daemon_metrics_file_seccomp() while it builds the filter); the event loop's timer writes
 * the file (admin.c). One file per process, so the state is module-static. */
#ifndef PL_DAEMON_METRICS_FILE_H
#define PL_DAEMON_METRICS_FILE_H

#include <seccomp.h>
#include <stddef.h>

#include "pl/admin.pb-c.h"

/* Open the directory of path (O_PATH) and remember the file name. The directory must be
 * writable by the user picolmd serves as. Returns 0, -EINVAL (no file name, name over 255
 * bytes), or -errno with the reason in err. */
int pl_daemon_metrics_file_open(const char *path, char *err, size_t err_len);
/* Is a metrics file configured (open succeeded)? */
int pl_daemon_metrics_file_dir_fd(void);

/* Add to the broker's filter: openat, renameat and renameat2 whose directory arguments are
 * the metrics directory fd. Nothing when no metrics file is open. Returns 0 or -errno from
 * libseccomp. */
int pl_daemon_metrics_file_seccomp(scmp_filter_ctx filter);

/* Write st to the file (temp file + rename). Returns 0, -EBADF (not open) or -errno. */
int pl_daemon_metrics_file_write(const Picolm__Admin__V1__Stats *st);

void pl_daemon_metrics_file_close(void);

#endif
