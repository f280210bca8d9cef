/* SPDX-License-Identifier: MIT */
/* systemd service notification (pl_daemon_sd_notify_*) without libsystemd: sends state lines
 * such as "READY=1", "STOPPING=1" or "STATUS=..." as one datagram to the AF_UNIX socket that
 * systemd names in $NOTIFY_SOCKET (a path, or "@name" for an abstract socket). main.c calls
 * pl_daemon_sd_notify_init() during privileged start-up, before the seccomp filter, and
 * pl_daemon_sd_notify() afterwards; without systemd every call is a cheap no-op.
 * Not thread-safe: call from one thread (the event thread). */
#ifndef PL_DAEMON_SD_NOTIFY_H
#define PL_DAEMON_SD_NOTIFY_H

/* Open a datagram socket and connect it to $NOTIFY_SOCKET, so that later notifications need
 * only sendmsg(2) (no socket/connect after the seccomp filter is in place). Call
 * once at start-up; calling it again reconnects to the current $NOTIFY_SOCKET.
 * Returns 1 when connected, 0 when $NOTIFY_SOCKET is unset or empty (not supervised, nothing
 * to do), -EAFNOSUPPORT for an address that is neither absolute nor abstract (e.g. vsock:),
 * -EINVAL for one too long for sockaddr_un, or -errno from socket/connect. */
int pl_daemon_sd_notify_init(void);

/* Send state (borrowed, NUL-terminated; several assignments may be joined with '\n') to the
 * service manager: through the socket of pl_daemon_sd_notify_init() when it is open, else
 * through a one-shot socket to $NOTIFY_SOCKET. Returns 1 when sent, 0 when not supervised,
 * -EINVAL (state NULL or empty), -EMSGSIZE (short send), or an error of _init/send. */
int pl_daemon_sd_notify(const char *state);

/* printf-style pl_daemon_sd_notify(); a line longer than 4095 bytes is -EMSGSIZE. */
__attribute__((format(printf, 1, 2))) int pl_daemon_sd_notifyf(const char *fmt, ...);

/* Close the socket of pl_daemon_sd_notify_init(), if any. */
void pl_daemon_sd_notify_done(void);

#endif
