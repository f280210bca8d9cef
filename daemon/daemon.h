/* SPDX-License-Identifier: MIT */
/* The daemon as a whole (struct pl_daemon): configuration, the resident model, the
 * scheduler, the session table and the event thread's sockets. main.c fills it in start-up
 * order; the event loop (event_loop.c), record dispatch (dispatch.c) and admin (admin.c)
 * run on the event thread and share it. */
#ifndef PL_DAEMON_DAEMON_H
#define PL_DAEMON_DAEMON_H

#include <stdbool.h>
#include <stdint.h>

#include "access.h"
#include "config.h"
#include "init.h"
#include "session.h"

struct pl_model;
struct pl_daemon_sched;
struct pl_ipc_uring;
struct pl_daemon_stats;

#define PL_DAEMON_MAX_ADMIN 8
/* Clients accepted while every session slot is taken but some are only waiting for the
 * scheduler to release them (CLOSING): they wait for those slots instead of being refused
 * (event_loop.c), at most this many at once. */
#define PL_DAEMON_MAX_PENDING 16

struct pl_daemon {
    struct pl_daemon_config cfg;
    struct pl_daemon_access access; /* policy in force + per-uid usage (access.h) */
    struct pl_model *model;
    struct pl_daemon_residency res;
    struct pl_daemon_sched *sched;
    struct pl_daemon_session_table sessions;
    struct pl_ipc_uring *uring;
    uint32_t n_ctx; /* resolved */
    uint32_t n_vocab;
    char model_name[128];
    int listen_fd, admin_fd, signal_fd;
    int admin_conn[PL_DAEMON_MAX_ADMIN];
    int pending_fd[PL_DAEMON_MAX_PENDING]; /* accepted sockets waiting for a slot, in order */
    uint32_t n_pending;
    uint32_t admin_gen[PL_DAEMON_MAX_ADMIN];
    bool draining;
    bool drain_cancelled;
    uint64_t drain_deadline_ns;
    bool quit;
    int exit_code;
    uint64_t t_start_ns;
    uint64_t seed_state;
    bool reload_requested;
    /* counters (event thread) */
    uint64_t n_sessions_total, n_protocol_errors, n_rejected, n_requests;
    uint32_t n_gen_deferred;       /* sessions with gen_deferred set (dispatch.c) */
    uint64_t t_spin_from;          /* last client doorbell or answer sent: the event loop looks
                                      for events without sleeping for a while after it; 0: not
                                      since its last sleep (event_loop.c) */
    struct pl_daemon_stats *stats; /* counters + histograms (stats.h), owned */
    uint64_t metrics_next_ns;      /* next metrics textfile write */
    /* scratch for Tokenize / Detokenize (event thread) */
    int32_t *scratch_ids; /* [PL_DAEMON_MAX_RECORD] */
    char *scratch_text;   /* [PL_DAEMON_MAX_RECORD] */
};

/* Run the event loop until the daemon drains or is told to quit (event_loop.c). Returns the
 * exit code. */
int pl_daemon_event_loop_run(struct pl_daemon *d);
/* Begin a drain (SIGTERM, admin): refuse new work, let running requests finish, cancel
 * them at drain_timeout_ms. */
void pl_daemon_event_loop_drain(struct pl_daemon *d, const char *why);
/* Close a session now: cancel its requests, hand it to the scheduler for release. */
void pl_daemon_event_loop_kill_session(struct pl_daemon *d, struct pl_daemon_session *s,
                                       const char *why);

/* s's submission ring is empty: announce that we sleep (NEED_WAKEUP, re-check) and queue the
 * io_uring wait for the client's wake-up (a futex wait on the ring's producer index, or where
 * io_uring has none, a read of the broker doorbell), unless one is queued already. Never a
 * plain syscall on a client-shared fd. Returns like pl_ipc_ring_sleep_prepare(): 0 (sleeping),
 * 1 (records arrived: the caller clears the flag and reads on) or < 0 (broken ring). */
int pl_daemon_event_loop_sq_sleep(struct pl_daemon *d, struct pl_daemon_session *s);

/* Read and handle every record queued in s's submission ring (dispatch.c). Returns 0, or a
 * negative code when the client broke the protocol (the caller ends the session). */
int pl_daemon_dispatch_session(struct pl_daemon *d, struct pl_daemon_session *s);

/* Serve one admin datagram on connection fd (admin.c). Returns 0, or < 0 to close it. */
int pl_daemon_admin_serve(struct pl_daemon *d, int fd);
/* Timers of admin.c, from the event loop's tick: finish sessions picoctl kill is ending
 * (their cancelled requests reported, then a session Error, then the close) and write the
 * metrics textfile when due (and once more when the daemon quits). */
void pl_daemon_admin_tick(struct pl_daemon *d, uint64_t now_ns);

#endif
