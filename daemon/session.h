/* SPDX-License-Identifier: MIT */
/* The session table (pl_daemon_session_*): one preallocated slot per possible client, each
 * with its shared-memory region, rings, doorbells and a fixed array of request slots (the
 * bounded per-session queue). The event thread owns the table and every field marked
 * [event]; fields marked [infer] belong to the inference thread while a request is handed
 * over to it; [atomic] fields are the only ones both threads touch.
 *
 * Request life cycle: FREE -(event: validated Generate)-> SUBMITTED, handed to the
 * scheduler with a NEW message; the scheduler owns it until it posts REQ_DONE back; the
 * event thread then frees its sampler and the slot is FREE again. */
#ifndef PL_DAEMON_SESSION_H
#define PL_DAEMON_SESSION_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "pl/ipc_peer.h"
#include "pl/ipc_region.h"
#include "pl/ipc_ring.h"
#include "pl/policy_file.h"
#include "pl/policy_sched.h"
#include "request_features.h"

struct pl_sampler;
struct pl_daemon_session;

/* Output buffered per request between flushes (one TokenChunk). */
#define PL_DAEMON_OUT_IDS 1024
#define PL_DAEMON_OUT_TEXT 8192

/* Region geometry: submissions are small, completions carry token text. */
#define PL_DAEMON_SQ_BYTES (64u * 1024)
#define PL_DAEMON_CQ_BYTES (128u * 1024)
#define PL_DAEMON_MAX_RECORD (32u * 1024)
/* Replies the event thread queues for the inference thread to write (Error, TokenizeResult,
 * DetokenizeResult, ModelInfo): the completion ring has one writer only. */
#define PL_DAEMON_OUTBOX_SLOTS 4u

enum pl_daemon_req_state {
    PL_DAEMON_REQ_FREE = 0,
    PL_DAEMON_REQ_SUBMITTED, /* owned by the scheduler */
};

/* [infer] */
enum pl_daemon_req_phase {
    PL_DAEMON_PHASE_WAITING = 0, /* in the KV wait queue */
    PL_DAEMON_PHASE_PREFILL,
    PL_DAEMON_PHASE_DECODE,
    PL_DAEMON_PHASE_FINISHING, /* output and Done still to be written */
};

struct pl_daemon_req {
    /* ---- set by the event thread before the hand-over, read-only afterwards ---- */
    struct pl_daemon_session *s;
    uint64_t id;     /* client-chosen request id */
    uint32_t state;  /* enum pl_daemon_req_state [event] */
    int32_t *prompt; /* [n_ctx] owned, preallocated */
    uint32_t n_prompt;
    uint32_t n_need;  /* KV tokens reserved: n_prompt + max new tokens */
    uint32_t max_new; /* new tokens allowed (max_tokens clipped to the context) */
    bool max_is_ctx;  /* max_new came from the context, not max_tokens */
    bool stream;
    bool ignore_eos;
    uint64_t seed;
    struct pl_sampler *sampler; /* owned; created by the event thread */
    uint64_t t_recv_ns;
    bool policy_queued;          /* [event] counted against the uid's max_queued */
    uint64_t rate_taken;         /* [event] tokens reserved from the uid's token bucket */
    _Atomic bool cancel;         /* [atomic] event -> infer: Cancel / kill / drain */
    _Atomic uint32_t cancel_why; /* 0 client, 1 admin kill, 2 shutdown */

    /* ---- [infer] scheduler state ---- */
    uint32_t phase;  /* enum pl_daemon_req_phase */
    int32_t seq;     /* engine sequence, -1 when none */
    uint32_t n_fed;  /* prompt tokens fed so far */
    uint32_t n_gen;  /* tokens generated */
    int32_t last;    /* last sampled token, fed next step */
    uint32_t finish; /* picolm.v1 FinishReason once decided, else 0 */
    bool done_written;
    uint64_t deadline_ns; /* wait-queue deadline */
    uint64_t t_start_ns, t_first_ns, t_prefill_end_ns, t_end_ns;
    uint64_t t_last_tok_ns;        /* last token sampled (inter-token histogram) */
    struct pl_daemon_reqfeat feat; /* set up by the event thread, used per token */
    uint32_t n_out_ids;
    size_t n_out_text;
    int32_t out_ids[PL_DAEMON_OUT_IDS];
    char out_text[PL_DAEMON_OUT_TEXT];
    const char *error_code_msg; /* set with error_code: an Error instead of Done */
    uint32_t error_code;
};

struct pl_daemon_outbox_slot {
    uint32_t type;
    uint32_t len;
    uint8_t *buf; /* PL_DAEMON_MAX_RECORD bytes, owned */
};

enum pl_daemon_session_state {
    PL_DAEMON_SESSION_FREE = 0,
    PL_DAEMON_SESSION_HANDSHAKE, /* accepted, waiting for the hello */
    PL_DAEMON_SESSION_OPEN,
    PL_DAEMON_SESSION_CLOSING, /* handed to the scheduler for release */
};

struct pl_daemon_session {
    /* ---- [event] ---- */
    uint32_t slot;
    uint32_t gen;   /* bumped at each reuse: stale io_uring events are dropped */
    uint64_t id;    /* unique over the daemon's life, never 0 */
    uint32_t state; /* enum pl_daemon_session_state */
    int sock;
    int db_broker;      /* the client may ring it; we read it only through io_uring
                           (when io_uring has no futex waits) */
    int db_client;      /* handed to the client, never touched by us: we wake the
                           client with FUTEX_WAKE only (a client can make a shared
                           eventfd blocking: no broker syscall may touch one) */
    bool futex_waits;   /* we wait for the client with io_uring futex waits (else
                           with io_uring reads of db_broker); set before the first
                           request, read by the scheduler too */
    bool sq_wait_armed; /* a futex wait / doorbell read for the client is queued */
    bool cq_wait_armed; /* a futex wait on the completion ring's consumer index is
                           queued (the scheduler waits for room) */
    uint64_t db_buf;    /* target of the io_uring doorbell read */
    struct pl_ipc_peer peer;
    struct pl_ipc_region reg;
    struct pl_ipc_ring sq; /* consumer end, [event] */
    struct pl_daemon_arena arena;
    uint8_t *rx; /* private copy of one record (PL_DAEMON_MAX_RECORD) */
    uint64_t t_open_ns;
    bool sq_paused;                 /* outbox full: stop reading until the scheduler drains it */
    bool gen_deferred;              /* a Generate left in the ring until the notices are taken
                                       (pl_daemon_dispatch_session) */
    uint32_t n_inflight;            /* requests in state SUBMITTED */
    uint32_t outbox_tail;           /* next slot the event thread fills */
    uint32_t access_user;           /* per-uid policy entry + 1 (access.c); 0: none */
    struct pl_policy_limits limits; /* of the policy rule that admitted it (set before the
                                    first request: the scheduler reads weight/priority) */
    char rule[PL_POLICY_MAX_NAME_LEN + 1]; /* name of that rule */
    /* observability (stats.c, admin.c) */
    char exe[16];              /* the peer's comm at handshake */
    uint32_t stats_ident;      /* stats slot; read by the inference thread after NEW */
    uint64_t n_requests;       /* Generates accepted */
    bool kill_pending;         /* picoctl kill: cancelling, then closing */
    bool kill_notified;        /* the session Error is queued in the outbox */
    uint64_t kill_deadline_ns; /* close by then whatever is left */

    /* ---- [infer] ---- */
    struct pl_ipc_ring cq; /* producer end: written by the inference thread only */
    bool cq_dirty;         /* committed records not yet published */
    bool cq_urgent;        /* among them one to publish (and wake for) this step: a
                              request's first token, a Done/Error, a reply, or a ring
                              filling up; else only streamed tokens, which may wait up
                              to stream_coalesce_us for later ones (scheduler.c) */
    uint64_t cq_held_ns;   /* when the oldest unpublished record was committed */
    bool cq_armed;         /* NEED_WAKEUP set on cq while we sleep */
    bool outbox_listed;
    uint32_t outbox_head;              /* next slot the scheduler writes out */
    uint32_t cq_need;                  /* payload bytes the last failed reserve wanted */
    struct pl_policy_sched_entity ent; /* fair share (policy weight and class) */
    bool ent_ready;                    /* ent set up for this session (reset by the event thread
                                          at the handshake, before any request) */
    bool ent_listed;                   /* in the scheduler's runnable list */
    uint64_t sched_stamp;              /* step that last saw it with decode work */
    uint32_t sched_ready;              /* its requests ready to decode in that step */

    /* ---- [atomic] ---- */
    _Atomic bool dead;               /* event -> infer: stop writing, release everything */
    _Atomic uint32_t outbox_pub;     /* slots filled (event, release) */
    _Atomic uint32_t outbox_done;    /* slots written out (infer, release) */
    _Atomic bool want_outbox_notice; /* event asks for a notice when a slot frees */
    _Atomic bool outbox_signalled;   /* an OUTBOX message is queued for the scheduler */
    _Atomic bool cq_wait_posted;     /* a CQ_WAIT notice is queued for the event thread */
    _Atomic uint64_t tokens_in, tokens_out, kv_tokens, ttft_ns, queue_ns;

    uint32_t n_reqs;
    struct pl_daemon_req *reqs; /* [max_requests] */
    struct pl_daemon_outbox_slot outbox[PL_DAEMON_OUTBOX_SLOTS];
};

struct pl_daemon_session_table {
    uint32_t n;      /* slots */
    uint32_t n_open; /* sessions not FREE */
    uint64_t next_id;
    uint32_t n_ctx;
    struct pl_daemon_session *s; /* [n] */
};

/* Preallocate n sessions with max_requests request slots of n_ctx prompt tokens each.
 * Returns 0, -EINVAL, -ENOMEM. */
int pl_daemon_session_table_init(struct pl_daemon_session_table *t, uint32_t n,
                                 uint32_t max_requests, uint32_t n_ctx);
void pl_daemon_session_table_done(struct pl_daemon_session_table *t);

/* Take a free slot for an accepted socket (ownership of sock passes to the session on
 * success). Returns the session or NULL when the table is full. */
struct pl_daemon_session *pl_daemon_session_open(struct pl_daemon_session_table *t, int sock,
                                                 uint64_t now_ns);
/* Build the region, doorbells and rings (before the welcome). Returns 0 or -errno. */
int pl_daemon_session_setup_ipc(struct pl_daemon_session *s);
/* Free everything the session holds and mark the slot FREE. Only once the scheduler has
 * released it (or never saw it). Requests must all be FREE. */
void pl_daemon_session_close(struct pl_daemon_session_table *t, struct pl_daemon_session *s);

/* A FREE request slot or NULL. */
struct pl_daemon_req *pl_daemon_session_req_alloc(struct pl_daemon_session *s);
/* The SUBMITTED request with this id, or NULL. */
struct pl_daemon_req *pl_daemon_session_req_find(struct pl_daemon_session *s, uint64_t id);
/* Back to FREE (frees the sampler). */
void pl_daemon_session_req_release(struct pl_daemon_session *s, struct pl_daemon_req *r);

/* Session by id among open sessions, or NULL. */
struct pl_daemon_session *pl_daemon_session_find(struct pl_daemon_session_table *t, uint64_t id);

/* ---- Outbox (event thread side) ---- */
/* Room for one more reply? */
bool pl_daemon_session_outbox_has_room(struct pl_daemon_session *s);
/* The slot to fill next (check has_room first). */
struct pl_daemon_outbox_slot *pl_daemon_session_outbox_next(struct pl_daemon_session *s);
/* Publish the filled slot to the scheduler. */
void pl_daemon_session_outbox_commit(struct pl_daemon_session *s);

#endif
