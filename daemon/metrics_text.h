/* SPDX-License-Identifier: MIT */
/* Prometheus text exposition of an admin Stats message (pl_daemon_metrics_text_*), and the
 * textfile writer for node_exporter's textfile collector (temp file + rename, so a scrape
 * never sees half a file). Used by picolmd's metrics timer and by `picoctl stats
 * --prometheus`, so both print the same text. Depends on protobuf-c and libc only. */
#ifndef PL_DAEMON_METRICS_TEXT_H
#define PL_DAEMON_METRICS_TEXT_H

#include <stdio.h>

#include "pl/admin.pb-c.h"

/* Write st in the Prometheus text format (version 0.0.4) to f. Latency histograms ("*_ns")
 * become "*_seconds"; counters get "_total"; per-identity series carry identity="...".
 * Returns 0 or -EIO (a write failed). */
int pl_daemon_metrics_text_render(FILE *f, const Picolm__Admin__V1__Stats *st);

/* Render st to dir_fd/name atomically: the text is rendered in memory, written to
 * dir_fd/name.tmp (mode 0644, O_NOFOLLOW), then renamed over dir_fd/name, so a reader sees
 * the old file or the new one, never a part. Only openat, write, close and renameat are
 * used (picolmd's seccomp filter allows them on dir_fd only, metrics_file.c).
 * Returns 0 or -errno (-ENAMETOOLONG, -ENOMEM, open/write/rename errors). */
int pl_daemon_metrics_text_write_at(int dir_fd, const char *name,
                                    const Picolm__Admin__V1__Stats *st);

#endif
