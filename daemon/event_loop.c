/* SPDX-License-Identifier: MIT */
/* The event thread: one io_uring (pl_ipc_uring) waits on the client and admin listening
 * sockets, handshakes, every session's wake-ups (futex waits on its ring indices, or reads of
 * its doorbell: never a plain syscall on a client-shared fd) and hang-up, admin connections,
 * a signalfd (SIGTERM/SIGINT drain, SIGHUP reload) and the scheduler's notice eventfd; a
 * 100 ms wait timeout drives the timers (handshake deadline, drain). Single-threaded; owns the
 * session table. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon.h"
#include "init.h"
#include "pl/ipc_doorbell.h"
#include "pl/ipc_handshake.h"
#include "pl/ipc_uring.h"
#include "pl/pl_err.h"
#include "pl/pl_log.h"
#include "pl/pl_util.h"
#include "scheduler.h"
#include "sd_notify.h"
#include "stats.h"

enum tag_kind {
    T_LISTEN = 1,
    T_ADMIN_LISTEN,
    T_SIGNAL,
    T_NOTIFY,
    T_HANDSHAKE,
    T_HUP,
    T_DOORBELL,
    T_ADMIN_CONN,
    T_CQWAIT, /* futex wait on a completion ring's consumer index, for the scheduler */
};

#define TICK_MS 100
/* After a client's doorbell, and after a request ended, look for the next event this long
 * before sleeping (yielding the CPU at each look, and taking the scheduler's notices every
 * SPIN_SLICE_NS): a client in a request-answer loop sends its next request within tens of
 * microseconds of its answer, and a wake-up of this thread across CPUs costs 10-50 us on a
 * virtual machine - as much as the broker's whole overhead on a short request. Sessions that
 * only stream tokens never ring, so they cost no spin. */
#define DOORBELL_SPIN_NS 200000ull
#define SPIN_SLICE_NS 20000ull

static uint64_t tag(enum tag_kind k, uint32_t gen, uint32_t slot) {
    return ((uint64_t)k << 56) | ((uint64_t)(gen & 0xffffffu) << 32) | slot;
}
static enum tag_kind tag_kind(uint64_t t) {
    return (enum tag_kind)(t >> 56);
}
static uint32_t tag_gen(uint64_t t) {
    return (uint32_t)(t >> 32) & 0xffffffu;
}
static uint32_t tag_slot(uint64_t t) {
    return (uint32_t)t;
}

static void arm(struct pl_daemon *d, int fd, uint32_t mask, uint64_t t, bool multi) {
    int r = pl_ipc_uring_poll(d->uring, fd, mask, t, multi ? PL_IPC_URING_MULTISHOT : 0);
    if (r < 0)
        pl_log_err("cannot arm a poll (tag %llx): %s", (unsigned long long)t, pl_strerror(r));
}

/* ---- Sessions ---- */

static int arm_doorbell_read(struct pl_daemon *d, struct pl_daemon_session *s);

static void cancel_session_polls(struct pl_daemon *d, struct pl_daemon_session *s) {
    (void)pl_ipc_uring_cancel(d->uring, tag(T_HANDSHAKE, s->gen, s->slot));
    (void)pl_ipc_uring_cancel(d->uring, tag(T_HUP, s->gen, s->slot));
    (void)pl_ipc_uring_cancel(d->uring, tag(T_DOORBELL, s->gen, s->slot));
    (void)pl_ipc_uring_cancel(d->uring, tag(T_CQWAIT, s->gen, s->slot));
}

void pl_daemon_event_loop_kill_session(struct pl_daemon *d, struct pl_daemon_session *s,
                                       const char *why) {
    if (s->state == PL_DAEMON_SESSION_FREE || s->state == PL_DAEMON_SESSION_CLOSING)
        return;
    pl_daemon_access_leave(&d->access, s); /* its policy counts end with the connection */
    /* OPEN sessions get their structured end line (stats.c, rate-limited). */
    pl_log_debug("session %llu (pid %d): closing: %s", (unsigned long long)s->id, (int)s->peer.pid,
                 why);
    cancel_session_polls(d, s);
    if (s->state == PL_DAEMON_SESSION_HANDSHAKE) {
        pl_daemon_session_close(&d->sessions, s); /* the scheduler never saw it */
        return;
    }
    pl_daemon_stats_session_end(d->stats, s, why, pl_daemon_now_ns());
    s->state = PL_DAEMON_SESSION_CLOSING;
    /* Release: the scheduler's relaxed loads of dead only stop writes early; the CLOSE
     * message (queue release/acquire) is what hands the session over for good. */
    atomic_store_explicit(&s->dead, true, memory_order_release);
    if (pl_daemon_sched_send(d->sched, PL_DAEMON_CMD_CLOSE, s) < 0)
        pl_log_err("scheduler queue full (sizing bug): session %llu leaks",
                   (unsigned long long)s->id);
}

static void refuse_busy(int fd) {
    (void)pl_ipc_handshake_send_reject(fd, PL_IPC_WELCOME_BUSY);
    (void)close(fd);
}

/* Every slot taken: end now the sessions whose client has hung up but whose hang-up event
 * is not looked at yet (a client that closes and reconnects at once: its accept can come
 * first), so their slots count as closing. Returns the sessions whose slot the scheduler has
 * still to release. One poll() per session, only when the table is full. */
static uint32_t n_closing(struct pl_daemon *d) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < d->sessions.n; i++) {
        struct pl_daemon_session *s = &d->sessions.s[i];
        if (s->state == PL_DAEMON_SESSION_OPEN || s->state == PL_DAEMON_SESSION_HANDSHAKE) {
            struct pollfd p = {.fd = s->sock, .events = POLLRDHUP};
            if (poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
                pl_daemon_event_loop_kill_session(d, s, "client hung up");
        }
        n += s->state == PL_DAEMON_SESSION_CLOSING;
    }
    return n;
}

/* A session for the accepted socket fd: true, or false when every slot is taken. */
static bool admit(struct pl_daemon *d, int fd) {
    struct pl_daemon_session *s = pl_daemon_session_open(&d->sessions, fd, pl_daemon_now_ns());
    if (!s)
        return false;
    d->n_sessions_total++;
    arm(d, fd, POLLIN, tag(T_HANDSHAKE, s->gen, s->slot), false);
    return true;
}

/* A slot came free: the oldest waiting client takes it (draining: all are refused). */
static void admit_pending(struct pl_daemon *d) {
    while (d->n_pending > 0) {
        const int fd = d->pending_fd[0];
        if (!d->draining && !admit(d, fd))
            return;
        if (d->draining)
            refuse_busy(fd);
        d->n_pending--;
        memmove(d->pending_fd, d->pending_fd + 1, d->n_pending * sizeof(d->pending_fd[0]));
    }
}

static void on_accept(struct pl_daemon *d, const struct pl_ipc_uring_event *ev) {
    if (!(ev->flags & PL_IPC_URING_EV_MORE) && d->listen_fd >= 0)
        (void)pl_ipc_uring_accept(d->uring, d->listen_fd, tag(T_LISTEN, 0, 0),
                                  PL_IPC_URING_MULTISHOT);
    if (ev->res < 0) {
        if (ev->res != -ECANCELED)
            pl_log_warn("accept failed: %s, ignoring", pl_strerror(ev->res));
        return;
    }
    int fd = ev->res;
    if (d->draining) {
        refuse_busy(fd);
        return;
    }
    if (d->n_pending == 0 && admit(d, fd))
        return;
    /* Every slot taken. A client that reconnects right after closing (or one arriving as
     * others leave) finds their sessions still CLOSING until the scheduler releases them:
     * it waits for one of those slots rather than being refused for sessions that are gone.
     * A hung-up session still in its handshake frees its slot at once: the clients already
     * waiting take such slots first, in order. */
    const uint32_t closing = n_closing(d);
    admit_pending(d);
    if (d->n_pending == 0 && admit(d, fd))
        return;
    if (d->n_pending < PL_DAEMON_MAX_PENDING && d->n_pending < closing) {
        d->pending_fd[d->n_pending++] = fd;
        return;
    }
    d->n_rejected++;
    pl_log_warn("out of sessions (max_sessions %u): refusing a client", d->sessions.n);
    refuse_busy(fd);
}

static void on_handshake(struct pl_daemon *d, struct pl_daemon_session *s) {
    struct pl_ipc_hello hello;
    struct pl_ipc_peer peer = PL_IPC_PEER_INIT;
    int r = pl_ipc_handshake_recv_hello(s->sock, &hello, &peer);
    if (r == -EAGAIN) {
        arm(d, s->sock, POLLIN, tag(T_HANDSHAKE, s->gen, s->slot), false);
        return;
    }
    if (r == -PL_ERR_VERSION) {
        (void)pl_ipc_handshake_send_reject(s->sock, PL_IPC_WELCOME_VERSION);
        pl_daemon_event_loop_kill_session(d, s, "client speaks another ABI major");
        return;
    }
    if (r < 0) {
        d->n_protocol_errors += r == -PL_ERR_PROTOCOL;
        pl_daemon_event_loop_kill_session(d, s, pl_strerror(r));
        return;
    }
    s->peer = peer;
    if (hello.abi_minor < 1) {
        /* Minor-0 clients sleep on their eventfd doorbell only, and the broker never writes
         * an eventfd a client shares (the client can make it blocking): it wakes clients
         * with FUTEX_WAKE, which they honour from minor 1 on. */
        (void)pl_ipc_handshake_send_reject(s->sock, PL_IPC_WELCOME_VERSION);
        pl_daemon_event_loop_kill_session(d, s, "client speaks ABI minor 0 (minor 1 needed)");
        return;
    }
    /* The policy decides on the kernel's identity of the peer (SO_PEERCRED, SO_PEERGROUPS). */
    char why[160];
    r = pl_daemon_access_admit(&d->access, s, pl_daemon_now_ns(), why, sizeof(why));
    if (r < 0) {
        d->n_rejected++;
        (void)pl_ipc_handshake_send_reject(s->sock, r == -PL_ERR_QUOTA    ? PL_IPC_WELCOME_QUOTA
                                                    : r == -PL_ERR_DENIED ? PL_IPC_WELCOME_DENIED
                                                                          : PL_IPC_WELCOME_ERROR);
        pl_daemon_event_loop_kill_session(d, s, why);
        return;
    }
    r = pl_daemon_session_setup_ipc(s);
    if (r < 0) {
        pl_log_err("session %llu: cannot set up shared memory: %s", (unsigned long long)s->id,
                   pl_strerror(r));
        (void)pl_ipc_handshake_send_reject(s->sock, PL_IPC_WELCOME_ERROR);
        pl_daemon_event_loop_kill_session(d, s, "setup failed");
        return;
    }
    s->futex_waits = pl_ipc_uring_has_futex_wait(d->uring);
    r = pl_ipc_handshake_send_welcome(s->sock, s->id, s->reg.bytes, s->reg.fd, s->db_broker,
                                      s->db_client);
    if (r < 0) {
        pl_daemon_event_loop_kill_session(d, s, pl_strerror(r));
        return;
    }
    s->state = PL_DAEMON_SESSION_OPEN;
    pl_daemon_stats_session_start(d->stats, s, pl_daemon_now_ns());
    pl_log_debug("session %llu: open (pid %d uid %u)", (unsigned long long)s->id, (int)s->peer.pid,
                 s->peer.uid);
    arm(d, s->sock, POLLRDHUP, tag(T_HUP, s->gen, s->slot), false);
    if (!s->futex_waits && arm_doorbell_read(d, s) < 0) {
        pl_daemon_event_loop_kill_session(d, s, "cannot wait for the client");
        return;
    }
    /* Announce our first sleep on the submission ring (or read what came already). */
    if (pl_daemon_dispatch_session(d, s) < 0)
        pl_daemon_event_loop_kill_session(d, s, "protocol violation");
}

/* ---- Waiting for clients ----
 *
 * The broker never makes a syscall on an fd it shares with a client: the client owns half of
 * each eventfd's open file description, so it can clear O_NONBLOCK and then saturate or drain
 * the counter, and a plain write(2) or read(2) from a broker thread would block that thread,
 * and every other client with it. So clients are woken with FUTEX_WAKE on a ring index word
 * (pl_ipc_doorbell_notify_futex), and the broker waits for them through io_uring, whose
 * requests never block the submitting thread: a futex wait on the submission ring's producer
 * index (IORING_OP_FUTEX_WAIT), or where the kernel lacks it, a read of the broker doorbell.
 * One wait is queued per session and direction at most and re-queued only after it completed,
 * so a flood of wake-ups from a client costs one completion per re-arm: it coalesces. */

/* Doorbell mode: the read stays queued for the session's life (re-queued at each completion),
 * since it also carries the client's "completion space freed" wake-ups for the scheduler. */
static int arm_doorbell_read(struct pl_daemon *d, struct pl_daemon_session *s) {
    int r = pl_ipc_uring_read(d->uring, s->db_broker, &s->db_buf, sizeof(s->db_buf),
                              tag(T_DOORBELL, s->gen, s->slot));
    if (r < 0)
        pl_log_err("session %llu: cannot queue a doorbell read: %s", (unsigned long long)s->id,
                   pl_strerror(r));
    s->sq_wait_armed = r == 0;
    return r;
}

int pl_daemon_event_loop_sq_sleep(struct pl_daemon *d, struct pl_daemon_session *s) {
    if (!s->futex_waits)
        return pl_ipc_ring_sleep_prepare(&s->sq, 0); /* the doorbell read is always queued */
    struct pl_ipc_futex f;
    int r = pl_ipc_ring_sleep_prepare_futex(&s->sq, 0, &f);
    /* A queued wait serves this sleep too: it returns at once if the producer index moved
     * since it was queued, and otherwise the client's wake-up for this sleep reaches it. */
    if (r != 0 || s->sq_wait_armed)
        return r;
    r = pl_ipc_uring_futex_wait(d->uring, &f, tag(T_DOORBELL, s->gen, s->slot));
    if (r < 0)
        return pl_log_err_errno(r, "session %llu: cannot queue a futex wait",
                                (unsigned long long)s->id);
    s->sq_wait_armed = true;
    return 0;
}

/* The client woke us (or a doorbell read / futex wait of its session ended). */
static void on_doorbell(struct pl_daemon *d, struct pl_daemon_session *s,
                        const struct pl_ipc_uring_event *ev) {
    s->sq_wait_armed = false;
    d->t_spin_from = pl_daemon_now_ns(); /* more may follow within microseconds */
    /* Futex wait: 0 (woken) or -EAGAIN (the index had moved); doorbell read: 8 bytes. -EINTR
     * and -EAGAIN are spurious. Anything else: we can no longer wait for this client. */
    bool woke = s->futex_waits ? ev->res == 0 : ev->res == (int32_t)sizeof(s->db_buf);
    if (!woke && ev->res != -EAGAIN && ev->res != -EINTR) {
        pl_log_warn("session %llu: waiting for the client failed: %s; ending the session",
                    (unsigned long long)s->id, pl_strerror(ev->res));
        pl_daemon_event_loop_kill_session(d, s, "cannot wait for the client");
        return;
    }
    if (!s->futex_waits) {
        if (arm_doorbell_read(d, s) < 0) {
            pl_daemon_event_loop_kill_session(d, s, "cannot wait for the client");
            return;
        }
        /* A doorbell also means "I freed completion space": the scheduler may wait for it. */
        pl_daemon_sched_kick(d->sched);
    }
    if (s->sq_paused || s->kill_pending) /* kill_pending: picoctl kill, no new work */
        return; /* futex mode: the dispatch after OUTBOX_FREED queues the next wait */
    if (pl_daemon_dispatch_session(d, s) < 0)
        pl_daemon_event_loop_kill_session(d, s, "protocol violation");
}

/* Futex mode: the scheduler sleeps until the client frees completion space (CQ_WAIT notice,
 * with the consumer index it saw). */
static void arm_cq_wait(struct pl_daemon *d, struct pl_daemon_session *s, uint32_t seen) {
    if (s->cq_wait_armed)
        return; /* that wait is woken by the client's next wake-up as well */
    /* The word lies in the region, which stays mapped until the session is closed; the wait
     * is cancelled when the session is killed, before that. */
    struct pl_ipc_ring_ctrl *ctrl =
        (struct pl_ipc_ring_ctrl *)(void *)(s->reg.base + s->reg.cq.ctrl_offset);
    struct pl_ipc_futex f = {.word = &ctrl->cons, .val = seen};
    int r = pl_ipc_uring_futex_wait(d->uring, &f, tag(T_CQWAIT, s->gen, s->slot));
    if (r < 0) {
        pl_log_err("session %llu: cannot queue a futex wait: %s; ending the session",
                   (unsigned long long)s->id, pl_strerror(r));
        pl_daemon_event_loop_kill_session(d, s, "cannot wait for the client");
        return;
    }
    s->cq_wait_armed = true;
}

static void on_cq_wait(struct pl_daemon *d, struct pl_daemon_session *s,
                       const struct pl_ipc_uring_event *ev) {
    s->cq_wait_armed = false;
    if (ev->res != 0 && ev->res != -EAGAIN && ev->res != -EINTR) {
        pl_log_warn("session %llu: waiting for the client failed: %s; ending the session",
                    (unsigned long long)s->id, pl_strerror(ev->res));
        pl_daemon_event_loop_kill_session(d, s, "cannot wait for the client");
        return;
    }
    pl_daemon_sched_kick(d->sched); /* it re-checks the ring, and asks again if still full */
}

static void on_session_event(struct pl_daemon *d, const struct pl_ipc_uring_event *ev) {
    uint32_t slot = tag_slot(ev->tag);
    if (slot >= d->sessions.n)
        return;
    struct pl_daemon_session *s = &d->sessions.s[slot];
    if ((s->gen & 0xffffffu) != tag_gen(ev->tag) || ev->res == -ECANCELED)
        return; /* stale: the slot moved on */
    switch (tag_kind(ev->tag)) {
    case T_HANDSHAKE:
        if (s->state == PL_DAEMON_SESSION_HANDSHAKE)
            on_handshake(d, s);
        break;
    case T_HUP:
        if (s->state != PL_DAEMON_SESSION_OPEN)
            break;
        if (ev->res < 0 || (ev->res & (POLLRDHUP | POLLHUP | POLLERR)))
            pl_daemon_event_loop_kill_session(d, s, "client hung up");
        else
            arm(d, s->sock, POLLRDHUP, tag(T_HUP, s->gen, s->slot), false);
        break;
    case T_DOORBELL:
        if (s->state == PL_DAEMON_SESSION_OPEN)
            on_doorbell(d, s, ev);
        break;
    case T_CQWAIT:
        if (s->state == PL_DAEMON_SESSION_OPEN)
            on_cq_wait(d, s, ev);
        break;
    case T_LISTEN:
    case T_ADMIN_LISTEN:
    case T_SIGNAL:
    case T_NOTIFY:
    case T_ADMIN_CONN:
    default:
        break;
    }
}

/* ---- Scheduler notices ---- */

/* Everything the scheduler queued so far, in order. Called before each batch of events is
 * looked at (the scheduler does not announce every notice: see notice() in scheduler.c) and
 * when it announces some. */
static void take_notices(struct pl_daemon *d) {
    struct pl_daemon_msg m;
    while (pl_daemon_sched_notice(d->sched, &m)) {
        switch (m.kind) {
        case PL_DAEMON_NOTICE_REQ_DONE: {
            struct pl_daemon_req *q = m.ptr;
            uint64_t now = pl_daemon_now_ns();
            d->t_spin_from = now; /* its client may send again soon */
            pl_daemon_access_request_end(&d->access, q, (uint64_t)q->n_fed + q->n_gen, now);
            if (q->s->state != PL_DAEMON_SESSION_FREE)
                pl_daemon_session_req_release(q->s, q);
            break;
        }
        case PL_DAEMON_NOTICE_SESSION_RELEASED: {
            struct pl_daemon_session *s = m.ptr;
            if (s->state == PL_DAEMON_SESSION_CLOSING) {
                pl_daemon_session_close(&d->sessions, s);
                admit_pending(d);
            }
            break;
        }
        case PL_DAEMON_NOTICE_CQ_BROKEN: {
            /* Before its SESSION_RELEASED (notices are in order): the slot is not reused. */
            struct pl_daemon_session *s = m.ptr;
            if (s->state == PL_DAEMON_SESSION_OPEN) {
                d->n_protocol_errors++;
                pl_daemon_stats_add(d->stats, s->stats_ident, PL_DAEMON_CTR_PROTOCOL_ERRORS, 1);
                /* The session's end line (stats.c) is the rate-limited report. */
                pl_log_debug("session %llu (pid %d): broken completion ring; ending the session",
                             (unsigned long long)s->id, (int)s->peer.pid);
                pl_daemon_event_loop_kill_session(d, s, "broken completion ring");
            }
            break;
        }
        case PL_DAEMON_NOTICE_CQ_WAIT: {
            struct pl_daemon_session *s = m.ptr;
            /* Release: pairs with the scheduler's exchange; a later sleep may post again. */
            atomic_store_explicit(&s->cq_wait_posted, false, memory_order_release);
            if (s->state == PL_DAEMON_SESSION_OPEN)
                arm_cq_wait(d, s, m.arg);
            break;
        }
        case PL_DAEMON_NOTICE_OUTBOX_FREED: {
            struct pl_daemon_session *s = m.ptr;
            if (s->state == PL_DAEMON_SESSION_OPEN && s->sq_paused && !s->kill_pending) {
                s->sq_paused = false;
                if (pl_daemon_dispatch_session(d, s) < 0)
                    pl_daemon_event_loop_kill_session(d, s, "protocol violation");
            }
            break;
        }
        default:
            pl_log_err("unknown notice %u", m.kind);
            break;
        }
    }
}

/* Sessions that left a Generate in their ring while notices were pending
 * (pl_daemon_dispatch_session): take the notices, then read on. */
static void redispatch_deferred(struct pl_daemon *d) {
    take_notices(d);
    d->n_gen_deferred = 0;
    for (uint32_t i = 0; i < d->sessions.n; i++) {
        struct pl_daemon_session *s = &d->sessions.s[i];
        if (!s->gen_deferred)
            continue;
        if (s->state != PL_DAEMON_SESSION_OPEN || s->sq_paused || s->kill_pending) {
            s->gen_deferred = false; /* its next doorbell or OUTBOX_FREED reads it */
            continue;
        }
        if (pl_daemon_dispatch_session(d, s) < 0)
            pl_daemon_event_loop_kill_session(d, s, "protocol violation");
    }
}

static void on_notify(struct pl_daemon *d, const struct pl_ipc_uring_event *ev) {
    int nfd = pl_daemon_sched_notify_fd(d->sched);
    (void)pl_ipc_doorbell_drain(nfd);
    if (!(ev->flags & PL_IPC_URING_EV_MORE))
        arm(d, nfd, POLLIN, tag(T_NOTIFY, 0, 0), true);
    take_notices(d);
}

/* ---- Admin connections ---- */

static void on_admin_accept(struct pl_daemon *d, const struct pl_ipc_uring_event *ev) {
    if (!(ev->flags & PL_IPC_URING_EV_MORE) && d->admin_fd >= 0)
        (void)pl_ipc_uring_accept(d->uring, d->admin_fd, tag(T_ADMIN_LISTEN, 0, 0),
                                  PL_IPC_URING_MULTISHOT);
    if (ev->res < 0)
        return;
    /* Besides the socket's mode: root or the policy's admin_group, by SO_PEERCRED. */
    if (pl_daemon_access_admin_check(&d->access, ev->res, pl_daemon_now_ns()) < 0) {
        (void)close(ev->res);
        return;
    }
    for (uint32_t i = 0; i < PL_DAEMON_MAX_ADMIN; i++)
        if (d->admin_conn[i] < 0) {
            d->admin_conn[i] = ev->res;
            d->admin_gen[i]++;
            arm(d, ev->res, POLLIN, tag(T_ADMIN_CONN, d->admin_gen[i], i), false);
            return;
        }
    pl_log_warn("too many admin connections, refusing one");
    (void)close(ev->res);
}

static void on_admin_conn(struct pl_daemon *d, const struct pl_ipc_uring_event *ev) {
    uint32_t i = tag_slot(ev->tag);
    if (i >= PL_DAEMON_MAX_ADMIN || d->admin_conn[i] < 0 ||
        (d->admin_gen[i] & 0xffffffu) != tag_gen(ev->tag))
        return;
    bool close_it = ev->res < 0;
    if (!close_it && (ev->res & POLLIN))
        close_it = pl_daemon_admin_serve(d, d->admin_conn[i]) < 0;
    else if (!close_it && (ev->res & (POLLHUP | POLLERR)))
        close_it = true;
    if (close_it)
        pl_close_fd(&d->admin_conn[i]);
    else
        arm(d, d->admin_conn[i], POLLIN, tag(T_ADMIN_CONN, d->admin_gen[i], i), false);
}

/* ---- Signals, drain, reload ---- */

void pl_daemon_event_loop_drain(struct pl_daemon *d, const char *why) {
    if (d->draining)
        return;
    pl_log_info("draining (%s): no new requests; running ones get %u ms", why,
                d->cfg.drain_timeout_ms);
    d->draining = true;
    (void)pl_daemon_sd_notify("STOPPING=1");
    d->drain_deadline_ns = pl_daemon_now_ns() + (uint64_t)d->cfg.drain_timeout_ms * 1000000ull;
    if (d->listen_fd >= 0) {
        (void)pl_ipc_uring_cancel(d->uring, tag(T_LISTEN, 0, 0));
        char p[600];
        (void)snprintf(p, sizeof(p), "%s/picolm.sock", d->cfg.socket_dir);
        if (!pl_daemon_init_sockets_inherited())
            (void)unlink(p);
        pl_close_fd(&d->listen_fd);
    }
    admit_pending(d); /* draining: refuses the clients still waiting */
}

static void reload(struct pl_daemon *d) {
    struct pl_daemon_config c;
    char err[512] = "";
    if (!d->cfg.config_path[0]) {
        pl_log_info("SIGHUP: no config file to reload");
        return;
    }
    pl_daemon_config_defaults(&c);
    if (pl_daemon_config_load_file(&c, d->cfg.config_path, err, sizeof(err)) < 0) {
        pl_log_err("SIGHUP: %s; keeping the running configuration", err);
        return;
    }
    if (strcmp(c.model, d->cfg.model) || strcmp(c.socket_dir, d->cfg.socket_dir) ||
        c.n_ctx != d->cfg.n_ctx || c.max_sessions != d->cfg.max_sessions ||
        c.max_active != d->cfg.max_active || c.kv_pool_mb != d->cfg.kv_pool_mb ||
        c.kv_pool_tokens != d->cfg.kv_pool_tokens || c.n_cpus != d->cfg.n_cpus)
        pl_log_warn("SIGHUP: model, socket, context, pool, session and cpu settings need a "
                    "restart; only the live keys were applied");
    d->cfg.log_level = c.log_level;
    d->cfg.prefill_chunk = c.prefill_chunk ? c.prefill_chunk : 1;
    d->cfg.stream_coalesce_us = c.stream_coalesce_us;
    d->cfg.queue_max = c.queue_max;
    d->cfg.queue_timeout_ms = c.queue_timeout_ms;
    d->cfg.drain_timeout_ms = c.drain_timeout_ms;
    d->cfg.handshake_timeout_ms = c.handshake_timeout_ms;
    pl_log_set_level((enum pl_log_level)c.log_level);
    pl_daemon_sched_set_live(d->sched, d->cfg.prefill_chunk, c.stream_coalesce_us, c.queue_max,
                             c.queue_timeout_ms);
    pl_log_info("SIGHUP: reloaded %s", d->cfg.config_path);
}

static void on_signal(struct pl_daemon *d, const struct pl_ipc_uring_event *ev) {
    if (!(ev->flags & PL_IPC_URING_EV_MORE))
        arm(d, d->signal_fd, POLLIN, tag(T_SIGNAL, 0, 0), true);
    struct signalfd_siginfo si;
    while (read(d->signal_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        if (si.ssi_signo == SIGHUP) {
            char err[512];
            (void)pl_daemon_sd_notify("RELOADING=1");
            reload(d);
            (void)pl_daemon_access_reload(&d->access, err, sizeof(err));
            (void)pl_daemon_sd_notify("READY=1");
        } else if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT)
            pl_daemon_event_loop_drain(d, si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT");
    }
}

static void timers(struct pl_daemon *d) {
    uint64_t now = pl_daemon_now_ns();
    uint32_t inflight = 0;
    for (uint32_t i = 0; i < d->sessions.n; i++) {
        struct pl_daemon_session *s = &d->sessions.s[i];
        if (s->state == PL_DAEMON_SESSION_HANDSHAKE &&
            now - s->t_open_ns > (uint64_t)d->cfg.handshake_timeout_ms * 1000000ull)
            pl_daemon_event_loop_kill_session(d, s, "no hello within the handshake timeout");
        if (s->state == PL_DAEMON_SESSION_OPEN || s->state == PL_DAEMON_SESSION_CLOSING)
            inflight += s->n_inflight;
    }
    if (!d->draining)
        return;
    if (inflight == 0) {
        pl_log_info("drained: every request finished");
        d->quit = true;
        return;
    }
    if (now >= d->drain_deadline_ns && !d->drain_cancelled) {
        pl_log_info("drain timeout: cancelling %u running requests", inflight);
        d->drain_cancelled = true;
        for (uint32_t i = 0; i < d->sessions.n; i++)
            for (uint32_t j = 0; j < d->sessions.s[i].n_reqs; j++) {
                struct pl_daemon_req *q = &d->sessions.s[i].reqs[j];
                if (q->state != PL_DAEMON_REQ_SUBMITTED)
                    continue;
                atomic_store_explicit(&q->cancel_why, 2, memory_order_relaxed);
                atomic_store_explicit(&q->cancel, true, memory_order_release);
            }
        pl_daemon_sched_kick(d->sched);
    } else if (d->drain_cancelled && now >= d->drain_deadline_ns + 2000000000ull) {
        pl_log_warn("drain: %u requests could not report their end (clients not reading); "
                    "exiting anyway",
                    inflight);
        d->quit = true;
    }
}

/* ---- The loop ---- */

int pl_daemon_event_loop_run(struct pl_daemon *d) {
    struct pl_ipc_uring_event evs[64];
    int r;
    if ((r = pl_ipc_uring_accept(d->uring, d->listen_fd, tag(T_LISTEN, 0, 0),
                                 PL_IPC_URING_MULTISHOT)) < 0 ||
        (r = pl_ipc_uring_accept(d->uring, d->admin_fd, tag(T_ADMIN_LISTEN, 0, 0),
                                 PL_IPC_URING_MULTISHOT)) < 0)
        return pl_log_err_errno(r, "cannot start accepting");
    arm(d, d->signal_fd, POLLIN, tag(T_SIGNAL, 0, 0), true);
    arm(d, pl_daemon_sched_notify_fd(d->sched), POLLIN, tag(T_NOTIFY, 0, 0), true);
    uint64_t next_tick = pl_daemon_now_ns() + TICK_MS * 1000000ull;

    while (!d->quit) {
        /* A Generate deferred by the last redispatch: look again without sleeping. Right
         * after a doorbell or an answer: look for a while before sleeping. */
        while (d->t_spin_from && !d->n_gen_deferred) {
            uint64_t since = pl_daemon_now_ns() - d->t_spin_from;
            if (since >= DOORBELL_SPIN_NS) {
                d->t_spin_from = 0;
                break;
            }
            /* != 0: an event, or a failed submission that the wait reports */
            if (pl_ipc_uring_spin(d->uring, PL_MIN(DOORBELL_SPIN_NS - since, SPIN_SLICE_NS)) != 0)
                break;
            take_notices(d); /* an answer that went out restarts the spin */
        }
        int n =
            pl_ipc_uring_wait(d->uring, evs, PL_ARRAY_SIZE(evs), d->n_gen_deferred ? 0 : TICK_MS);
        if (n < 0 && n != -EINTR)
            return pl_log_err_errno(n, "io_uring wait failed");
        /* First what the scheduler finished: a client that got its Done and submits again
         * must find that request's slot free. */
        take_notices(d);
        for (int i = 0; i < n; i++) {
            switch (tag_kind(evs[i].tag)) {
            case T_LISTEN:
                on_accept(d, &evs[i]);
                break;
            case T_ADMIN_LISTEN:
                on_admin_accept(d, &evs[i]);
                break;
            case T_SIGNAL:
                on_signal(d, &evs[i]);
                break;
            case T_NOTIFY:
                on_notify(d, &evs[i]);
                break;
            case T_ADMIN_CONN:
                on_admin_conn(d, &evs[i]);
                break;
            case T_HANDSHAKE:
            case T_HUP:
            case T_DOORBELL:
            case T_CQWAIT:
                on_session_event(d, &evs[i]);
                break;
            default:
                break;
            }
        }
        if (d->n_gen_deferred)
            redispatch_deferred(d);
        uint64_t now = pl_daemon_now_ns();
        if (n == 0 || now >= next_tick || d->draining) {
            next_tick = now + TICK_MS * 1000000ull;
            timers(d);
            pl_daemon_admin_tick(d, now);
        }
    }
    return d->exit_code;
}
