/* SPDX-License-Identifier: MIT */
/* Session table: preallocated slots, ids, per-session region + rings + doorbells, request
 * slots and the reply outbox. Event thread only (see session.h for the shared fields). */
#include "session.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pl/engine_sampler.h"
#include "pl/ipc_doorbell.h"
#include "pl/pl_util.h"

/* Protobuf allocations for one record: generous next to the record size (repeated fields
 * unpack to arrays of 4-8 bytes per 1-byte varint, plus message structs). */
#define ARENA_BYTES (PL_DAEMON_MAX_RECORD * 12u)

static void session_free_mem(struct pl_daemon_session *s) {
    if (s->reqs)
        for (uint32_t i = 0; i < s->n_reqs; i++)
            free(s->reqs[i].prompt);
    free(s->reqs);
    s->reqs = NULL;
    for (uint32_t i = 0; i < PL_DAEMON_OUTBOX_SLOTS; i++) {
        free(s->outbox[i].buf);
        s->outbox[i].buf = NULL;
    }
    free(s->rx);
    s->rx = NULL;
    pl_daemon_arena_done(&s->arena);
}

int pl_daemon_session_table_init(struct pl_daemon_session_table *t, uint32_t n,
                                 uint32_t max_requests, uint32_t n_ctx) {
    memset(t, 0, sizeof(*t));
    if (!n || !max_requests || !n_ctx)
        return -EINVAL;
    t->s = calloc(n, sizeof(*t->s));
    if (!t->s)
        return -ENOMEM;
    t->n = n;
    t->n_ctx = n_ctx;
    t->next_id = 1;
    for (uint32_t i = 0; i < n; i++) {
        struct pl_daemon_session *s = &t->s[i];
        s->slot = i;
        s->sock = s->db_broker = s->db_client = -1;
        s->reg = (struct pl_ipc_region)PL_IPC_REGION_INIT;
        s->peer = (struct pl_ipc_peer)PL_IPC_PEER_INIT;
        s->n_reqs = max_requests;
        s->reqs = calloc(max_requests, sizeof(*s->reqs));
        s->rx = malloc(PL_DAEMON_MAX_RECORD);
        if (!s->reqs || !s->rx || pl_daemon_arena_init(&s->arena, ARENA_BYTES) < 0)
            goto fail;
        for (uint32_t j = 0; j < max_requests; j++) {
            s->reqs[j].s = s;
            s->reqs[j].seq = -1;
            s->reqs[j].prompt = malloc((size_t)n_ctx * sizeof(int32_t));
            if (!s->reqs[j].prompt)
                goto fail;
        }
        for (uint32_t j = 0; j < PL_DAEMON_OUTBOX_SLOTS; j++)
            if (!(s->outbox[j].buf = malloc(PL_DAEMON_MAX_RECORD)))
                goto fail;
    }
    return 0;
fail:
    pl_daemon_session_table_done(t);
    return -ENOMEM;
}

void pl_daemon_session_table_done(struct pl_daemon_session_table *t) {
    if (!t->s)
        return;
    for (uint32_t i = 0; i < t->n; i++) {
        struct pl_daemon_session *s = &t->s[i];
        if (s->state != PL_DAEMON_SESSION_FREE)
            pl_daemon_session_close(t, s);
        session_free_mem(s);
    }
    free(t->s);
    t->s = NULL;
    t->n = 0;
}

struct pl_daemon_session *pl_daemon_session_open(struct pl_daemon_session_table *t, int sock,
                                                 uint64_t now_ns) {
    for (uint32_t i = 0; i < t->n; i++) {
        struct pl_daemon_session *s = &t->s[i];
        if (s->state != PL_DAEMON_SESSION_FREE)
            continue;
        s->gen++;
        s->id = t->next_id++;
        s->state = PL_DAEMON_SESSION_HANDSHAKE;
        s->sock = sock;
        s->t_open_ns = now_ns;
        s->sq_paused = false;
        s->gen_deferred = false;
        s->n_inflight = 0;
        s->outbox_tail = 0;
        s->outbox_head = 0;
        s->exe[0] = '\0';
        s->stats_ident = UINT32_MAX; /* none until the handshake completes */
        s->n_requests = 0;
        s->kill_pending = s->kill_notified = false;
        s->kill_deadline_ns = 0;
        s->cq_dirty = s->cq_armed = s->outbox_listed = false;
        s->cq_urgent = false;
        s->cq_held_ns = 0;
        s->futex_waits = s->sq_wait_armed = s->cq_wait_armed = false;
        atomic_store_explicit(&s->cq_wait_posted, false, memory_order_relaxed);
        atomic_store_explicit(&s->dead, false, memory_order_relaxed);
        atomic_store_explicit(&s->outbox_pub, 0, memory_order_relaxed);
        atomic_store_explicit(&s->outbox_done, 0, memory_order_relaxed);
        atomic_store_explicit(&s->want_outbox_notice, false, memory_order_relaxed);
        atomic_store_explicit(&s->outbox_signalled, false, memory_order_relaxed);
        atomic_store_explicit(&s->tokens_in, 0, memory_order_relaxed);
        atomic_store_explicit(&s->tokens_out, 0, memory_order_relaxed);
        atomic_store_explicit(&s->kv_tokens, 0, memory_order_relaxed);
        atomic_store_explicit(&s->ttft_ns, 0, memory_order_relaxed);
        atomic_store_explicit(&s->queue_ns, 0, memory_order_relaxed);
        t->n_open++;
        return s;
    }
    return NULL;
}

int pl_daemon_session_setup_ipc(struct pl_daemon_session *s) {
    int r =
        pl_ipc_region_create(&s->reg, PL_DAEMON_SQ_BYTES, PL_DAEMON_CQ_BYTES, PL_DAEMON_MAX_RECORD);
    if (r < 0)
        return r;
    if ((r = pl_ipc_region_rings(&s->reg, PL_IPC_REGION_BROKER, &s->sq, &s->cq)) < 0)
        return r;
    if ((r = pl_ipc_doorbell_open(&s->db_broker)) < 0)
        return r;
    if ((r = pl_ipc_doorbell_open(&s->db_client)) < 0)
        return r;
    /* The event loop announces our first sleep on the submission ring once the client has
     * the region (pl_daemon_event_loop_sq_sleep()). */
    return 0;
}

void pl_daemon_session_close(struct pl_daemon_session_table *t, struct pl_daemon_session *s) {
    for (uint32_t i = 0; i < s->n_reqs; i++)
        if (s->reqs[i].state != PL_DAEMON_REQ_FREE)
            pl_daemon_session_req_release(s, &s->reqs[i]);
    pl_close_fd(&s->sock);
    pl_close_fd(&s->db_broker);
    pl_close_fd(&s->db_client);
    pl_ipc_region_done(&s->reg);
    pl_ipc_peer_done(&s->peer);
    s->peer = (struct pl_ipc_peer)PL_IPC_PEER_INIT;
    memset(&s->sq, 0, sizeof(s->sq));
    memset(&s->cq, 0, sizeof(s->cq));
    s->state = PL_DAEMON_SESSION_FREE;
    s->gen++;
    t->n_open--;
}

struct pl_daemon_req *pl_daemon_session_req_alloc(struct pl_daemon_session *s) {
    for (uint32_t i = 0; i < s->n_reqs; i++)
        if (s->reqs[i].state == PL_DAEMON_REQ_FREE)
            return &s->reqs[i];
    return NULL;
}

struct pl_daemon_req *pl_daemon_session_req_find(struct pl_daemon_session *s, uint64_t id) {
    for (uint32_t i = 0; i < s->n_reqs; i++)
        if (s->reqs[i].state == PL_DAEMON_REQ_SUBMITTED && s->reqs[i].id == id)
            return &s->reqs[i];
    return NULL;
}

void pl_daemon_session_req_release(struct pl_daemon_session *s, struct pl_daemon_req *r) {
    pl_sampler_free(r->sampler);
    r->sampler = NULL;
    pl_daemon_reqfeat_done(&r->feat);
    if (r->state == PL_DAEMON_REQ_SUBMITTED)
        s->n_inflight--;
    r->state = PL_DAEMON_REQ_FREE;
}

struct pl_daemon_session *pl_daemon_session_find(struct pl_daemon_session_table *t, uint64_t id) {
    for (uint32_t i = 0; i < t->n; i++)
        if (t->s[i].state != PL_DAEMON_SESSION_FREE && t->s[i].id == id)
            return &t->s[i];
    return NULL;
}

bool pl_daemon_session_outbox_has_room(struct pl_daemon_session *s) {
    /* Acquire: pairs with the scheduler's release store of outbox_done after it copied the
     * slot into the completion ring, so the slot is free to overwrite. */
    uint32_t done = atomic_load_explicit(&s->outbox_done, memory_order_acquire);
    return s->outbox_tail - done < PL_DAEMON_OUTBOX_SLOTS;
}

struct pl_daemon_outbox_slot *pl_daemon_session_outbox_next(struct pl_daemon_session *s) {
    return &s->outbox[s->outbox_tail % PL_DAEMON_OUTBOX_SLOTS];
}

void pl_daemon_session_outbox_commit(struct pl_daemon_session *s) {
    s->outbox_tail++;
    /* Release: the slot's bytes are visible to the scheduler's acquire load of outbox_pub. */
    atomic_store_explicit(&s->outbox_pub, s->outbox_tail, memory_order_release);
}
