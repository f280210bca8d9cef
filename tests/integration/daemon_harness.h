/* SPDX-License-Identifier: MIT */
/* Running a real picolmd for the integration, adversarial, fault and load tests
 * (pl_test_daemon_*): start it on a fresh socket dir (or restart it on the same one), wait
 * until its admin socket answers, stop or SIGKILL it, and read what the tests check from
 * outside: admin status (sessions, KV in use), admin stats counters, and the daemon's open
 * fds and RSS from /proc. No CMocka inside: child processes and plain programs use it too.
 * Every function returns 0 or a negative errno. */
#ifndef PL_TESTS_DAEMON_HARNESS_H
#define PL_TESTS_DAEMON_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct pl_test_daemon {
    pid_t pid;             /* -1 when not running */
    char dir[64];          /* socket dir (picolm.sock, admin.sock) */
    char model[4096];      /* model file the daemon was started with */
    const char *extra[24]; /* extra picolmd arguments (borrowed strings), NULL-terminated */
    char log[128];         /* stderr of the daemon goes here ("" = inherited) */
};

/* Path of a test model (name like "stories260K.gguf") under $PICOLM_TEST_DATA/models into
 * buf. Returns 0, or -ENOENT when the variable is unset or the file is missing (skip: 77). */
int pl_test_model_path(const char *name, char *buf, size_t len);

/* Make a fresh socket dir and start picolmd (PL_BINARY_DIR/bin/picolmd, --foreground,
 * --ctx 256, --log-level warn, then extra: NULL-terminated, borrowed, may be NULL) on model.
 * Unless extra names a --policy, a policy file in the dir allows everyone without limits
 * (the test clients all run as one uid; the built-in default allows 4 sessions per uid).
 * Waits up to 5 s for the admin socket. Returns 0 or < 0 (the daemon is reaped). */
int pl_test_daemon_start(struct pl_test_daemon *d, const char *model, const char *const *extra);
/* Start it again on the same dir and arguments (after a crash or a stop). */
int pl_test_daemon_restart(struct pl_test_daemon *d);
/* SIGTERM, wait; returns the exit code (128 + signal when killed) and leaves the dir. */
int pl_test_daemon_stop(struct pl_test_daemon *d);
/* SIGKILL, wait. */
void pl_test_daemon_kill(struct pl_test_daemon *d);
/* Is the daemon process still running (not exited, not a zombie)? */
int pl_test_daemon_alive(const struct pl_test_daemon *d);
/* Stop it if running and remove the socket dir. */
void pl_test_daemon_done(struct pl_test_daemon *d);

/* Admin status: open sessions and KV tokens in use. */
int pl_test_daemon_status(const struct pl_test_daemon *d, uint32_t *ret_sessions,
                          uint64_t *ret_kv_used);
/* One counter of admin stats by name (e.g. "protocol_errors"). -ENOENT if the daemon does not
 * report it, -EOPNOTSUPP if it has no stats command. */
int pl_test_daemon_counter(const struct pl_test_daemon *d, const char *name, uint64_t *ret);
/* Open fds and VmRSS of the daemon process, from /proc. */
int pl_test_daemon_fds(const struct pl_test_daemon *d, unsigned *ret);
int pl_test_daemon_rss_kb(const struct pl_test_daemon *d, long *ret);
/* Wait (polling admin status every ms) until no session is open and no KV is in use, up to
 * timeout_ms. Returns 0 or -ETIMEDOUT. */
int pl_test_daemon_wait_idle(const struct pl_test_daemon *d, int timeout_ms);

uint64_t pl_test_now_ms(void);

#endif
