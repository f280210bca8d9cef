/* SPDX-License-Identifier: MIT */
/* systemd socket activation (pl_daemon_sd_listen_*) without libsystemd: the listening
 * sockets picolmd.socket passes as fds 3, 4, ... with $LISTEN_PID/$LISTEN_FDS. main.c calls
 * pl_daemon_sd_listen_fds() once at start-up, then pl_daemon_sd_listen_find() for each socket
 * it would otherwise bind itself (the client socket, the admin socket). */
#ifndef PL_DAEMON_SD_LISTEN_H
#define PL_DAEMON_SD_LISTEN_H

#include <stddef.h>

/* First inherited fd (SD_LISTEN_FDS_START). */
#define PL_DAEMON_SD_LISTEN_FDS_START 3
/* More inherited sockets than this is refused as a misconfiguration. */
#define PL_DAEMON_SD_LISTEN_FDS_MAX 16

/* Take the sockets passed by the service manager: when $LISTEN_PID is this process and
 * $LISTEN_FDS is n, fds 3..3+n-1 get FD_CLOEXEC and n is returned. $LISTEN_PID, $LISTEN_FDS
 * and $LISTEN_FDNAMES are removed from the environment either way (so nothing we run later
 * believes them). Returns n >= 0 (0: not socket-activated), or -EINVAL (malformed
 * variables, n above PL_DAEMON_SD_LISTEN_FDS_MAX) or -EBADF (an announced fd is not open).
 * Call once, single-threaded (it edits the environment). */
int pl_daemon_sd_listen_fds(void);

/* Among the n inherited fds (from pl_daemon_sd_listen_fds()), the one that is a listening
 * AF_UNIX socket of type sock_type (SOCK_SEQPACKET...) bound to path (borrowed). Returns the
 * fd (>= 3; the caller owns it from then on), -ENOENT when none matches, -EINVAL for a bad
 * argument. */
int pl_daemon_sd_listen_find(int n, int sock_type, const char *path);

#endif
