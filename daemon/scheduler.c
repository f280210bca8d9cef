/* SPDX-License-Identifier: MIT */
/* The inference thread: continuous batching (see scheduler.h). Owns the engine context, the
 * list of requests handed over by the event thread, and the producer end of every client's
 * completion ring. */
#include "scheduler.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "pl/engine_model.h"
#include "pl/engine_sampler.h"
#include "pl/engine_tokenizer.h"
#include "pl/ipc_doorbell.h"
#include "pl/ipc_ring.h"
#include "pl/picolm.pb-c.h"
#include "pl/pl_err.h"
#include "pl/pl_log.h"
#include "pl/pl_util.h"
#include "prefix_cache.h"
#include "records.h"
#include "request_features.h"
#include "session.h"
#include "stats.h"

#define KV_BLOCK 16u /* tokens per engine KV block (engine/src/kv.h) */

/* Step sizes (tokens) whose cost the scheduler tracks one by one (prefill_alone()). */
#define COST_SIZES 65u

struct pl_daemon_sched {
    struct pl_model *m;
    const struct pl_tokenizer *tok;
    struct pl_ctx *ctx;
    struct pl_daemon_sched_opts o;
    uint32_t cpus[256];
    uint32_t n_vocab;
    uint32_t total_blocks;
    uint32_t reserved_blocks;

    struct pl_daemon_spsc cmdq;  /* event -> scheduler */
    struct pl_daemon_spsc noteq; /* scheduler -> event */
    int wake_fd;                 /* the scheduler sleeps on it */
    int notify_fd;               /* the event thread polls it */
    _Atomic int sleeping;        /* 1 while the scheduler may block on wake_fd */
    _Atomic int kicked;          /* something may have changed: do not sleep */
    _Atomic bool stop;
    _Atomic uint32_t prefill_chunk, stream_coalesce_us, queue_max, queue_timeout_ms;
    uint64_t loop_ns; /* running estimate of one busy loop (step + the rest) */
    /* Step cost model t = fixed + per_token * n: least squares over the recent steps (sums
     * decayed per step), for prefill_alone(); and, since the engine's cost is not linear in
     * the batch (decode vectors, half and full tiles), the recent cost of each small size. */
    double fit_s0, fit_s1, fit_s2, fit_sy, fit_sxy;
    double cost_ns[COST_SIZES]; /* 0: not seen yet */
    bool last_prefill_alone;    /* the last step ran new prompts without the streams */
    bool noticed;               /* urgent notices posted this step: write notify_fd once */
    uint64_t lazy_since_ns;     /* oldest REQ_DONE not announced yet (0: none), see notice() */

    /* Fair share of the decode slots (decode_entries()): policy class, weight, vtime. */
    struct pl_policy_sched psched;
    uint64_t step_stamp;
    struct pl_daemon_session **runnable; /* [max_sessions] had decode work last step */
    uint32_t n_runnable;
    struct pl_daemon_session **cand;          /* [max_sessions] have decode work this step */
    struct pl_policy_sched_entity **cand_ent; /* [max_sessions] their entities */
    size_t *pick_idx;                         /* [max_sessions] pl_policy_sched_pick() order */

    /* Requests held, in arrival order (admission is FIFO). */
    struct pl_daemon_req **held; /* [max_held] */
    uint32_t n_held;
    int32_t *free_seq; /* [n_seq] stack */
    uint32_t n_free_seq;
    struct pl_daemon_session **outbox_list; /* [max_sessions] sessions with replies queued */
    uint32_t n_outbox;
    struct pl_daemon_session **dirty; /* [max_sessions + max_held] cq written, unpublished */
    uint32_t n_dirty, max_dirty;

    /* Batch scratch [n_batch] and logits [n_seq][n_vocab]. */
    int32_t *b_tok, *b_pos, *b_seq;
    bool *b_logits;
    struct pl_daemon_req **b_req; /* request of each logits row, in row order */
    float *logits;
    char piece[PL_DAEMON_PIECE_MAX];
    struct pl_daemon_features *feat;      /* chat templates, grammar vocabulary (shared) */
    struct pl_daemon_pcache *pcache;      /* shared prefix KV cache, NULL when off */
    struct pl_daemon_pcache_stats pc_pub; /* its counters as added to o.stats so far */
    char pcache_dir[4096];

    struct pl_daemon_sched_stats st;
    pthread_t thread;
    bool thread_started;
    /* start-up hand-shake (the only lock, used once) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int start_rc;
    bool start_done;
    char start_err[256];
};

uint64_t pl_daemon_now_ns(void) {
    return pl_now_ns();
}

static uint32_t blocks_for(uint32_t tokens) {
    return (tokens + KV_BLOCK - 1) / KV_BLOCK;
}

/* ---- Notices ---- */

/* A REQ_DONE is not announced by itself: its request's Done reaches the client only when
 * the ring is published after this, so the client's next submission, whose doorbell wakes
 * the event thread, finds it queued, and the event thread takes every queued notice before
 * it looks at any event (pl_daemon_event_loop_run). Announcing each one would cost an eventfd
 * write here and a second wake-up of the event thread per request, on the path from one
 * answer to the next request's step. Left alone, they are announced when this thread is
 * about to sleep, or once they are LAZY_NOTICE_NS old (sleep_until_work(), run()). */
#define LAZY_NOTICE_NS 1000000ull

static void notice(struct pl_daemon_sched *s, uint32_t kind, void *ptr) {
    struct pl_daemon_msg m = {.kind = kind, .ptr = ptr};
    if (pl_daemon_spsc_push(&s->noteq, &m) < 0)
        pl_log_err("notice queue full (sizing bug): notice %u lost", kind);
    if (kind != PL_DAEMON_NOTICE_REQ_DONE)
        s->noticed = true;
    else if (!s->lazy_since_ns)
        s->lazy_since_ns = pl_daemon_now_ns();
}

/* The completion ring of ss is full: announce that we sleep until the client frees room, the
 * way the event thread can wait for it without a syscall on a client-shared fd: a futex sleep
 * (the event thread queues an io_uring futex wait on the consumer index: CQ_WAIT notice), or,
 * where io_uring has no futex waits, a doorbell sleep (the client rings the broker doorbell,
 * which the event thread reads through io_uring). Returns like pl_ipc_ring_sleep_prepare(). */
static int cq_sleep_prepare(struct pl_daemon_sched *s, struct pl_daemon_session *ss) {
    if (!ss->futex_waits)
        return pl_ipc_ring_sleep_prepare(&ss->cq, ss->cq_need);
    struct pl_ipc_futex f;
    int r = pl_ipc_ring_sleep_prepare_futex(&ss->cq, ss->cq_need, &f);
    if (r != 0)
        return r;
    /* One notice queued per session at most (the queue is sized for it): a later sleep whose
     * notice is still queued is served by the earlier one, whose wait returns at once if the
     * index moved since, or is woken by the client's next wake-up (it wakes for this sleep). */
    if (!atomic_exchange_explicit(&ss->cq_wait_posted, true, memory_order_acq_rel)) {
        struct pl_daemon_msg m = {.kind = PL_DAEMON_NOTICE_CQ_WAIT, .arg = f.val, .ptr = ss};
        if (pl_daemon_spsc_push(&s->noteq, &m) < 0)
            pl_log_err("notice queue full (sizing bug): notice %u lost", m.kind);
        s->noticed = true;
    }
    return 0;
}

/* Announce the queued notices: the urgent ones always, the lazy ones when all is true or
 * the oldest is LAZY_NOTICE_NS old. One eventfd write covers everything queued. */
static void flush_notices(struct pl_daemon_sched *s, bool all) {
    bool lazy =
        s->lazy_since_ns && (all || pl_daemon_now_ns() - s->lazy_since_ns >= LAZY_NOTICE_NS);
    if (!s->noticed && !lazy)
        return;
    s->noticed = false;
    s->lazy_since_ns = 0;
    (void)pl_ipc_doorbell_ring(s->notify_fd);
}

/* ---- Completion ring writers (this thread only) ---- */

/* Records were committed to ss's ring; urgent: publish them this step (see publish_dirty). */
static void mark_dirty(struct pl_daemon_sched *s, struct pl_daemon_session *ss, bool urgent) {
    ss->cq_urgent |= urgent;
    if (ss->cq_dirty)
        return;
    ss->cq_dirty = true;
    ss->cq_held_ns = pl_daemon_now_ns();
    if (s->n_dirty < s->max_dirty)
        s->dirty[s->n_dirty++] = ss;
}

/* A completion-ring call on ss returned r. When that call found the ring broken (the client
 * wrote a bad consumer index), tell the event thread, once per session (a ring breaks only
 * once), so that it ends the session as a protocol violation: the client may well stay
 * connected, and its requests would stall holding KV blocks forever. Returns r. */
static int cq_check(struct pl_daemon_sched *s, struct pl_daemon_session *ss, bool was_broken,
                    int r) {
    if (r < 0 && !was_broken && pl_ipc_ring_broken(&ss->cq))
        notice(s, PL_DAEMON_NOTICE_CQ_BROKEN, ss);
    return r;
}

/* Pack msg into the session's completion ring (urgent: see mark_dirty). Returns 0, -EAGAIN
 * (ring full: the session stalls), or another negative code (the ring is broken: the client
 * corrupted it). */
static int put(struct pl_daemon_sched *s, struct pl_daemon_session *ss, uint32_t type,
               const ProtobufCMessage *msg, bool urgent) {
    size_t len = protobuf_c_message_get_packed_size(msg);
    void *p;
    if (len > pl_ipc_ring_max_payload(&ss->cq))
        return -EMSGSIZE;
    bool was_broken = pl_ipc_ring_broken(&ss->cq);
    int r = cq_check(s, ss, was_broken, pl_ipc_ring_reserve(&ss->cq, (uint32_t)len, &p));
    if (r == -EAGAIN) {
        ss->cq_need = (uint32_t)len;
        /* What is held back must go out now: the client frees room only after seeing it. */
        ss->cq_urgent |= ss->cq_dirty;
        return r;
    }
    if (r < 0)
        return r;
    (void)protobuf_c_message_pack(msg, p);
    r = pl_ipc_ring_commit(&ss->cq, type, (uint32_t)len);
    if (r < 0)
        return r;
    mark_dirty(s, ss, urgent);
    return 0;
}

static int put_chunk(struct pl_daemon_sched *s, struct pl_daemon_req *q) {
    if (q->n_out_ids == 0 && q->n_out_text == 0)
        return 0;
    Picolm__V1__TokenChunk c = PICOLM__V1__TOKEN_CHUNK__INIT;
    c.request_id = q->id;
    c.n_ids = q->n_out_ids;
    c.ids = q->out_ids;
    c.text.len = q->n_out_text;
    c.text.data = (uint8_t *)q->out_text;
    /* Logprobs: one per id (and top_n per id) when requested; the buffers hold exactly the
     * ids of this chunk (out_has_room() keeps them in step). */
    Picolm__V1__TokenLogprob tl[PL_DAEMON_LOGPROB_IDS * PL_DAEMON_MAX_TOP_LOGPROBS];
    Picolm__V1__TokenLogprob *tp[PL_DAEMON_LOGPROB_IDS * PL_DAEMON_MAX_TOP_LOGPROBS];
    if (q->feat.lp) {
        c.n_logprobs = q->feat.n_lp;
        c.logprobs = q->feat.lp;
        size_t nt = (size_t)q->feat.n_lp * q->feat.top_n;
        for (size_t i = 0; i < nt; i++) {
            picolm__v1__token_logprob__init(&tl[i]);
            tl[i].id = q->feat.top[i].id;
            tl[i].logprob = q->feat.top[i].logprob;
            tp[i] = &tl[i];
        }
        c.n_top = nt;
        c.top = tp;
    }
    /* The first token of a request goes out at once (time to first token); later ones of a
     * stream may wait a little for more (stream_coalesce_us). */
    bool first = q->n_out_ids == q->n_gen;
    int r = put(s, q->s, PL_DAEMON_REC_TOKEN_CHUNK, &c.base, first);
    if (r == 0) {
        q->n_out_ids = q->n_out_text = 0;
        pl_daemon_reqfeat_clear_logprobs(&q->feat);
    }
    return r;
}

static const char *cancel_reason(uint32_t why) {
    switch (why) {
    case 1:
        return "killed by admin";
    case 2:
        return "daemon shutting down";
    default:
        return "cancelled by the client";
    }
}

static int put_done(struct pl_daemon_sched *s, struct pl_daemon_req *q) {
    if (q->error_code) {
        Picolm__V1__Error e = PICOLM__V1__ERROR__INIT;
        e.request_id = q->id;
        e.code = (Picolm__V1__ErrorCode)q->error_code;
        e.message = (char *)q->error_code_msg;
        return put(s, q->s, PL_DAEMON_REC_ERROR, &e.base, true);
    }
    Picolm__V1__Done d = PICOLM__V1__DONE__INIT;
    d.request_id = q->id;
    d.finish_reason = (Picolm__V1__FinishReason)q->finish;
    d.prompt_tokens = q->n_prompt;
    d.generated_tokens = q->n_gen;
    uint64_t start = q->t_start_ns ? q->t_start_ns : q->t_end_ns;
    d.queue_ns = start - q->t_recv_ns;
    if (q->t_prefill_end_ns) {
        d.prefill_ns = q->t_prefill_end_ns - start;
        d.decode_ns = q->t_end_ns - q->t_prefill_end_ns;
    }
    d.ttft_ns = q->t_first_ns ? q->t_first_ns - q->t_recv_ns : 0;
    d.seed = q->seed;
    d.reason =
        (char *)(q->finish == PICOLM__V1__FINISH_REASON__FINISH_REASON_CANCELLED
                     ? cancel_reason(atomic_load_explicit(&q->cancel_why, memory_order_relaxed))
                     : "");
    return put(s, q->s, PL_DAEMON_REC_DONE, &d.base, true);
}

/* ---- Request state ---- */

static void release_seq(struct pl_daemon_sched *s, struct pl_daemon_req *q) {
    if (q->seq >= 0) {
        pl_ctx_seq_clear(s->ctx, q->seq);
        s->free_seq[s->n_free_seq++] = q->seq;
        q->seq = -1;
        s->reserved_blocks -= blocks_for(q->n_need);
        atomic_store_explicit(&q->s->kv_tokens, 0, memory_order_relaxed);
    }
}

/* Decide how q ends; its output and Done go out from the FINISHING phase. */
static void finish(struct pl_daemon_sched *s, struct pl_daemon_req *q, uint32_t reason,
                   uint64_t now) {
    release_seq(s, q);
    if (reason != PICOLM__V1__FINISH_REASON__FINISH_REASON_STOP && !q->error_code) {
        /* No stop string matched: what was held back is output after all. */
        if (pl_daemon_reqfeat_flush(&q->feat, q->out_text, sizeof(q->out_text), &q->n_out_text) ==
            1)
            reason = PICOLM__V1__FINISH_REASON__FINISH_REASON_STOP; /* completed by the end */
    }
    q->finish = reason;
    q->t_end_ns = now;
    q->phase = PL_DAEMON_PHASE_FINISHING;
}

static void fail(struct pl_daemon_sched *s, struct pl_daemon_req *q, uint32_t code, const char *msg,
                 uint64_t now) {
    q->error_code = code;
    q->error_code_msg = msg;
    q->n_out_ids = q->n_out_text = 0;
    finish(s, q, 0, now);
}

/* The statistics counter for how q ended. */
static enum pl_daemon_ctr finish_ctr(const struct pl_daemon_req *q) {
    if (q->error_code)
        return PL_DAEMON_CTR_REQUESTS_FAILED;
    switch (q->finish) {
    case PICOLM__V1__FINISH_REASON__FINISH_REASON_STOP:
        return PL_DAEMON_CTR_FINISH_STOP;
    case PICOLM__V1__FINISH_REASON__FINISH_REASON_EOS:
        return PL_DAEMON_CTR_FINISH_EOS;
    case PICOLM__V1__FINISH_REASON__FINISH_REASON_CANCELLED:
        return PL_DAEMON_CTR_FINISH_CANCELLED;
    default:
        return PL_DAEMON_CTR_FINISH_LENGTH;
    }
}

/* Try to write out a FINISHING request; true when it is gone. */
static bool try_retire(struct pl_daemon_sched *s, struct pl_daemon_req *q) {
    if (!q->error_code && put_chunk(s, q) < 0)
        return false;
    if (!q->done_written) {
        if (put_done(s, q) < 0)
            return false;
        q->done_written = true;
    }
    atomic_fetch_add_explicit(&s->st.requests_done, 1, memory_order_relaxed);
    pl_daemon_stats_add(s->o.stats, q->s->stats_ident, finish_ctr(q), 1);
    notice(s, PL_DAEMON_NOTICE_REQ_DONE, q);
    return true;
}

/* Room in the KV pool for a request of need blocks. The prefix cache's blocks count as
 * used besides every admitted request's whole reservation (a block both hold is counted
 * twice: safe), so the cache gives up least recently used chains to make room. */
static bool kv_room(struct pl_daemon_sched *s, uint32_t need) {
    uint32_t cached = pl_daemon_pcache_blocks(s->pcache);
    if (s->reserved_blocks + need > s->total_blocks)
        return false;
    if (s->reserved_blocks + need + cached <= s->total_blocks)
        return true;
    (void)pl_daemon_pcache_evict(s->pcache, s->reserved_blocks + need + cached - s->total_blocks);
    return s->reserved_blocks + need + pl_daemon_pcache_blocks(s->pcache) <= s->total_blocks;
}

static void activate(struct pl_daemon_sched *s, struct pl_daemon_req *q, uint64_t now) {
    q->seq = s->free_seq[--s->n_free_seq];
    s->reserved_blocks += blocks_for(q->n_need);
    if (s->pcache) {
        /* A cached prefix: the sequence starts from its blocks and the prefill from its
         * end. The sampler saw the whole prompt already (dispatch). */
        const uint32_t *ids;
        uint32_t k = pl_daemon_pcache_lookup(s->pcache, q->prompt, q->n_prompt, &ids);
        if (k > 0 && pl_ctx_seq_share_prefix(s->ctx, q->seq, ids, k) == 0) {
            q->n_fed = k * KV_BLOCK;
            pl_daemon_stats_add(s->o.stats, q->s->stats_ident, PL_DAEMON_CTR_PREFIX_HITS, 1);
            pl_daemon_stats_add(s->o.stats, q->s->stats_ident, PL_DAEMON_CTR_PREFIX_TOKENS,
                                q->n_fed);
        }
    }
    q->phase = PL_DAEMON_PHASE_PREFILL;
    q->t_start_ns = now;
    atomic_store_explicit(&q->s->queue_ns, now - q->t_recv_ns, memory_order_relaxed);
    pl_daemon_stats_observe(s->o.stats, q->s->stats_ident, PL_DAEMON_HIST_QUEUE_WAIT,
                            now - q->t_recv_ns);
}

/* A new request: admit it, queue it, or refuse it. */
static void admit_new(struct pl_daemon_sched *s, struct pl_daemon_req *q, uint64_t now) {
    q->phase = PL_DAEMON_PHASE_WAITING;
    q->seq = -1;
    q->n_fed = q->n_gen = 0;
    q->finish = 0;
    q->done_written = false;
    q->error_code = 0;
    q->t_start_ns = q->t_first_ns = q->t_prefill_end_ns = q->t_end_ns = 0;
    q->n_out_ids = q->n_out_text = 0;
    pl_daemon_reqfeat_start(&q->feat);
    q->deadline_ns =
        now +
        (uint64_t)atomic_load_explicit(&s->queue_timeout_ms, memory_order_relaxed) * 1000000ull;
    if (s->n_held == s->o.max_held) {
        pl_log_err("session %llu: request table full (sizing bug)", (unsigned long long)q->s->id);
        return;
    }
    s->held[s->n_held++] = q;
    if (blocks_for(q->n_need) > s->total_blocks) {
        atomic_fetch_add_explicit(&s->st.kv_exhausted, 1, memory_order_relaxed);
        fail(s, q, PICOLM__V1__ERROR_CODE__ERROR_CODE_RESOURCE_EXHAUSTED,
             "the request needs more KV tokens than the whole pool holds; lower max_tokens", now);
        return;
    }
    uint32_t waiting = 0;
    for (uint32_t i = 0; i + 1 < s->n_held; i++)
        waiting += s->held[i]->phase == PL_DAEMON_PHASE_WAITING;
    if (waiting == 0 && s->n_free_seq > 0 && kv_room(s, blocks_for(q->n_need))) {
        activate(s, q, now);
        return;
    }
    if (waiting >= atomic_load_explicit(&s->queue_max, memory_order_relaxed)) {
        atomic_fetch_add_explicit(&s->st.kv_exhausted, 1, memory_order_relaxed);
        fail(s, q, PICOLM__V1__ERROR_CODE__ERROR_CODE_RESOURCE_EXHAUSTED,
             "KV pool full and the wait queue is full; retry later", now);
    }
}

/* Drop everything of a closed session without writing to it. */
static void drop_session(struct pl_daemon_sched *s, struct pl_daemon_session *ss) {
    uint32_t j = 0;
    for (uint32_t i = 0; i < s->n_runnable; i++)
        if (s->runnable[i] == ss) {
            s->runnable[i] = s->runnable[--s->n_runnable];
            break;
        }
    for (uint32_t i = 0; i < s->n_held; i++) {
        struct pl_daemon_req *q = s->held[i];
        if (q->s == ss)
            release_seq(s, q);
        else
            s->held[j++] = q;
    }
    s->n_held = j;
    for (uint32_t i = 0; i < s->n_outbox; i++)
        if (s->outbox_list[i] == ss) {
            s->outbox_list[i] = s->outbox_list[--s->n_outbox];
            break;
        }
    ss->outbox_listed = false;
    for (uint32_t i = 0; i < s->n_dirty; i++)
        if (s->dirty[i] == ss) {
            s->dirty[i] = s->dirty[--s->n_dirty];
            break;
        }
    ss->cq_dirty = ss->cq_urgent = false;
    ss->cq_armed = false;
    notice(s, PL_DAEMON_NOTICE_SESSION_RELEASED, ss);
}

static void handle_cmds(struct pl_daemon_sched *s) {
    struct pl_daemon_msg m;
    while (pl_daemon_spsc_pop(&s->cmdq, &m)) {
        switch (m.kind) {
        case PL_DAEMON_CMD_NEW:
            /* Not the loop's time: the request may have been received after it. */
            admit_new(s, m.ptr, pl_daemon_now_ns());
            break;
        case PL_DAEMON_CMD_CLOSE:
            drop_session(s, m.ptr);
            break;
        case PL_DAEMON_CMD_OUTBOX: {
            struct pl_daemon_session *ss = m.ptr;
            atomic_store_explicit(&ss->outbox_signalled, false, memory_order_seq_cst);
            if (!ss->outbox_listed && s->n_outbox < s->o.max_sessions) {
                ss->outbox_listed = true;
                s->outbox_list[s->n_outbox++] = ss;
            }
            break;
        }
        default:
            pl_log_err("unknown scheduler message %u", m.kind);
            break;
        }
    }
}

/* Copy queued replies into completion rings. */
static void handle_outboxes(struct pl_daemon_sched *s) {
    for (uint32_t i = 0; i < s->n_outbox;) {
        struct pl_daemon_session *ss = s->outbox_list[i];
        bool stalled = false;
        /* Acquire: pairs with the event thread's release store in outbox_commit. */
        uint32_t pub = atomic_load_explicit(&ss->outbox_pub, memory_order_acquire);
        while (ss->outbox_head != pub && !atomic_load_explicit(&ss->dead, memory_order_relaxed)) {
            struct pl_daemon_outbox_slot *o = &ss->outbox[ss->outbox_head % PL_DAEMON_OUTBOX_SLOTS];
            bool was_broken = pl_ipc_ring_broken(&ss->cq);
            int r = cq_check(s, ss, was_broken, pl_ipc_ring_push(&ss->cq, o->type, o->buf, o->len));
            if (r == -EAGAIN) {
                ss->cq_need = o->len;
                stalled = true;
                break;
            }
            /* A broken ring: the client scribbled on it; its hang-up will follow. */
            ss->outbox_head++;
            if (r == 0)
                mark_dirty(s, ss, true);
            /* Release: our reads of the slot happen before the event thread reuses it. */
            atomic_store_explicit(&ss->outbox_done, ss->outbox_head, memory_order_release);
            if (atomic_exchange_explicit(&ss->want_outbox_notice, false, memory_order_acq_rel))
                notice(s, PL_DAEMON_NOTICE_OUTBOX_FREED, ss);
        }
        if (!stalled) {
            ss->outbox_listed = false;
            s->outbox_list[i] = s->outbox_list[--s->n_outbox];
        } else {
            i++;
        }
    }
}

/* ---- One step ---- */

/* Room for one more token's output in q's buffers? */
static bool out_has_room(const struct pl_daemon_req *q) {
    return q->n_out_ids < PL_DAEMON_OUT_IDS &&
           q->n_out_text + PL_DAEMON_TEXT_PER_TOKEN <= PL_DAEMON_OUT_TEXT &&
           pl_daemon_reqfeat_room(&q->feat);
}

/* Service cancels, closes, queue deadlines, admission and pending output. Returns true if
 * some request is blocked only on its client's ring. */
static bool prepare(struct pl_daemon_sched *s, uint64_t now) {
    bool stalled = false, admitting = true;
    uint32_t j = 0;
    for (uint32_t i = 0; i < s->n_held; i++) {
        struct pl_daemon_req *q = s->held[i];
        if (q->phase != PL_DAEMON_PHASE_FINISHING &&
            atomic_load_explicit(&q->cancel, memory_order_acquire))
            finish(s, q, PICOLM__V1__FINISH_REASON__FINISH_REASON_CANCELLED, now);
        if (q->phase == PL_DAEMON_PHASE_WAITING) {
            if (admitting && s->n_free_seq > 0 && kv_room(s, blocks_for(q->n_need)))
                activate(s, q, now);
            else if (now >= q->deadline_ns)
                fail(s, q, PICOLM__V1__ERROR_CODE__ERROR_CODE_RESOURCE_EXHAUSTED,
                     "KV pool full: waited the whole queue timeout", now);
            else
                admitting = false; /* FIFO: nobody overtakes the oldest waiter */
        }
        if (q->phase == PL_DAEMON_PHASE_FINISHING) {
            if (try_retire(s, q))
                continue; /* gone */
            stalled = true;
        } else if (q->phase == PL_DAEMON_PHASE_DECODE && (q->n_out_ids || q->n_out_text) &&
                   (q->stream || !out_has_room(q))) {
            if (put_chunk(s, q) < 0)
                stalled = true;
        }
        s->held[j++] = q;
    }
    s->n_held = j;
    return stalled;
}

/* Sample, emit and decide the end of each request that got logits. */
static void after_decode(struct pl_daemon_sched *s, uint32_t n_rows, uint64_t now) {
    for (uint32_t row = 0; row < n_rows; row++) {
        struct pl_daemon_req *q = s->b_req[row];
        float *lg = s->logits + (size_t)row * s->n_vocab;
        if (q->phase == PL_DAEMON_PHASE_PREFILL) {
            q->phase = PL_DAEMON_PHASE_DECODE;
            q->t_prefill_end_ns = now;
            /* The prompt's full blocks are final now: share them with later requests. */
            if (s->pcache)
                pl_daemon_pcache_insert(s->pcache, q->seq, q->prompt, q->n_prompt,
                                        s->total_blocks - s->reserved_blocks);
        }
        /* Grammar mask and the logprobs copy come before the sampler changes lg. */
        uint32_t left = q->max_is_ctx ? 0 : q->max_new - q->n_gen;
        if (pl_daemon_reqfeat_pre_sample(&q->feat, lg, left) < 0) {
            fail(s, q, PICOLM__V1__ERROR_CODE__ERROR_CODE_INTERNAL,
                 "the output grammar allows no token here", now);
            continue;
        }
        int32_t tok = pl_sampler_sample(q->sampler, lg);
        if (tok < 0) {
            fail(s, q, PICOLM__V1__ERROR_CODE__ERROR_CODE_INTERNAL, "sampling failed", now);
            continue;
        }
        pl_sampler_accept(q->sampler, tok);
        int gram = pl_daemon_reqfeat_post_sample(&q->feat, tok);
        if (gram < 0) {
            fail(s, q, PICOLM__V1__ERROR_CODE__ERROR_CODE_INTERNAL,
                 "sampled a token the output grammar refuses", now);
            continue;
        }
        q->n_gen++;
        if (!q->t_first_ns) {
            q->t_first_ns = now;
            atomic_store_explicit(&q->s->ttft_ns, now - q->t_recv_ns, memory_order_relaxed);
            pl_daemon_stats_observe(s->o.stats, q->s->stats_ident, PL_DAEMON_HIST_TTFT,
                                    now - q->t_recv_ns);
        } else {
            pl_daemon_stats_observe(s->o.stats, q->s->stats_ident, PL_DAEMON_HIST_INTER_TOKEN,
                                    now - q->t_last_tok_ns);
        }
        q->t_last_tok_ns = now;
        atomic_fetch_add_explicit(&q->s->tokens_out, 1, memory_order_relaxed);
        pl_daemon_stats_add(s->o.stats, q->s->stats_ident, PL_DAEMON_CTR_TOKENS_OUT, 1);
        atomic_fetch_add_explicit(&s->st.tokens_generated, 1, memory_order_relaxed);
        if (gram == 1 || (!q->ignore_eos && pl_tokenizer_is_eog(s->tok, tok))) {
            /* An EOG's logprob is not reported: its id is not in the output either. */
            if (q->feat.n_lp > q->n_out_ids)
                q->feat.n_lp = q->n_out_ids;
            finish(s, q, PICOLM__V1__FINISH_REASON__FINISH_REASON_EOS, now);
            continue;
        }
        q->out_ids[q->n_out_ids++] = tok;
        int n = pl_tokenizer_piece(s->tok, tok, s->piece, sizeof(s->piece));
        if (n < 0)
            n = 0; /* a piece longer than any stop window: ids still carry it */
        int m = pl_daemon_reqfeat_text(&q->feat, s->piece, (size_t)n, q->out_text,
                                       sizeof(q->out_text), &q->n_out_text);
        if (m == 1) {
            finish(s, q, PICOLM__V1__FINISH_REASON__FINISH_REASON_STOP, now);
            continue;
        }
        q->last = tok;
        if (q->n_gen >= q->max_new) {
            finish(s, q, PICOLM__V1__FINISH_REASON__FINISH_REASON_LENGTH, now);
            continue;
        }
        if (q->stream)
            (void)put_chunk(s, q); /* a full ring leaves it buffered: prepare() retries */
    }
}

/* ---- Fair share of decode slots ---- */

/* A decoding request whose output has room (and, streaming, whose last chunk went out). */
static bool decode_ready(const struct pl_daemon_req *q) {
    return q->phase == PL_DAEMON_PHASE_DECODE && out_has_room(q) &&
           !(q->stream && (q->n_out_ids || q->n_out_text));
}

/* Decode entries: one token per chosen request. The sessions with ready requests are
 * runnable entities of the policy scheduler (weight and class of the rule that admitted
 * them); sessions with nothing ready sleep, so idling banks no credit. Slots go to
 * sessions in pl_policy_sched_pick() order (interactive before batch, then smallest
 * virtual time) and each is charged the tokens it got: with more ready requests than
 * decode_slots, sessions of weights 1 and 3 get tokens 1:3. Without decode_slots every
 * ready request decodes each step (up to the batch). Returns the entries added. */
static uint32_t decode_entries(struct pl_daemon_sched *s, uint32_t *rows) {
    uint32_t slots = s->o.decode_slots ? PL_MIN(s->o.decode_slots, s->o.n_batch) : s->o.n_batch;
    uint64_t stamp = ++s->step_stamp;
    uint32_t n_cand = 0, n = 0;
    for (uint32_t i = 0; i < s->n_held; i++) {
        struct pl_daemon_session *ss = s->held[i]->s;
        if (!decode_ready(s->held[i]) || ss->sched_stamp == stamp)
            continue;
        ss->sched_stamp = stamp;
        if (!ss->ent_ready) {
            pl_policy_sched_entity_init(&s->psched, &ss->ent, ss->limits.weight,
                                        ss->limits.priority);
            ss->ent_ready = true;
        }
        s->cand[n_cand] = ss;
        s->cand_ent[n_cand++] = &ss->ent;
    }
    for (uint32_t i = 0; i < s->n_runnable; i++)
        if (s->runnable[i]->sched_stamp != stamp)
            pl_policy_sched_sleep(&s->runnable[i]->ent);
    for (uint32_t i = 0; i < n_cand; i++) {
        pl_policy_sched_wake(&s->psched, s->cand_ent[i]);
        s->runnable[i] = s->cand[i];
    }
    s->n_runnable = n_cand;
    size_t n_pick = pl_policy_sched_pick(&s->psched, s->cand_ent, n_cand, n_cand, s->pick_idx);
    for (size_t k = 0; k < n_pick && n < slots; k++) {
        struct pl_daemon_session *ss = s->cand[s->pick_idx[k]];
        uint32_t got = 0;
        for (uint32_t i = 0; i < s->n_held && n < slots; i++) {
            struct pl_daemon_req *q = s->held[i];
            if (q->s != ss || !decode_ready(q))
                continue;
            s->b_tok[n] = q->last;
            s->b_pos[n] = (int32_t)(q->n_prompt + q->n_gen - 1);
            s->b_seq[n] = q->seq;
            s->b_logits[n] = true;
            s->b_req[(*rows)++] = q;
            n++;
            got++;
        }
        pl_policy_sched_charge(&ss->ent, got);
    }
    return n;
}

/* ---- Step composition ---- */

#define FIT_DECAY 0.98 /* weight of the older steps in the cost model, per step */

#define COST_EWMA 0.25 /* weight of a new observation of one step size's cost */

static void cost_observe(struct pl_daemon_sched *s, uint32_t n, uint64_t ns) {
    double x = n, y = (double)ns;
    if (n < COST_SIZES)
        s->cost_ns[n] = s->cost_ns[n] > 0 ? s->cost_ns[n] + COST_EWMA * (y - s->cost_ns[n]) : y;
    s->fit_s0 = s->fit_s0 * FIT_DECAY + 1;
    s->fit_s1 = s->fit_s1 * FIT_DECAY + x;
    s->fit_s2 = s->fit_s2 * FIT_DECAY + x * x;
    s->fit_sy = s->fit_sy * FIT_DECAY + y;
    s->fit_sxy = s->fit_sxy * FIT_DECAY + x * y;
}

/* The linear step cost model's fixed part and cost per token. False while the recent steps
 * were all of one size (the model cannot tell the two apart yet). */
static bool cost_line(const struct pl_daemon_sched *s, double *ret_fixed, double *ret_per_token) {
    double det = s->fit_s0 * s->fit_s2 - s->fit_s1 * s->fit_s1;
    if (s->fit_s0 < 4 || det <= 1e-6 * s->fit_s0 * s->fit_s2)
        return false;
    *ret_per_token = (s->fit_s0 * s->fit_sxy - s->fit_s1 * s->fit_sy) / det;
    *ret_fixed = (s->fit_sy - *ret_per_token * s->fit_s1) / s->fit_s0;
    return true;
}

/* Do n_dec decode entries cost more than the fixed part of a step (what every step pays
 * whatever its size: reading the weights, waking the workers)? False while the model does not
 * know yet. */
static bool decode_costlier_than_step(const struct pl_daemon_sched *s, uint32_t n_dec) {
    double fixed, per_token;
    return cost_line(s, &fixed, &per_token) && per_token * n_dec > fixed;
}

/* The expected cost of a step of n tokens: the recent cost of that size, else the linear
 * model's. False when neither is known yet. */
static bool est_cost(const struct pl_daemon_sched *s, uint32_t n, double *ret) {
    double fixed, per_token;
    if (n < COST_SIZES && s->cost_ns[n] > 0) {
        *ret = s->cost_ns[n];
        return true;
    }
    if (!cost_line(s, &fixed, &per_token))
        return false;
    *ret = fixed + per_token * n;
    return true;
}

/* Run this step's prompt tokens without the decode entries? A new request waits for its
 * first token through the step in progress and then its prefill step; with the streams'
 * tokens in the same step it also waits for them. When that makes its step clearly dearer
 * (small models, where a step's cost grows with its tokens, and batch sizes where the
 * engine moves to larger tiles), the prefill goes alone: the newcomer's first token comes
 * sooner and the streams lose one step of the prompt's own cost. When the weights dominate
 * (large models), batching them together costs the newcomer little and saves the streams a
 * step. Only prompts that finish within the chunk budget go alone (a long prompt is chunked
 * beside the streams), and never twice in a row (streams are not starved by a flow of new
 * requests). */
#define ALONE_GAIN 1.1 /* alone when the shared step would cost 10% more than the prefill's */
static bool prefill_alone(struct pl_daemon_sched *s, uint32_t budget) {
    if (s->last_prefill_alone)
        return false;
    uint32_t n_pre = 0, n_dec = 0;
    for (uint32_t i = 0; i < s->n_held; i++) {
        const struct pl_daemon_req *q = s->held[i];
        if (q->phase == PL_DAEMON_PHASE_PREFILL)
            n_pre += q->n_prompt - q->n_fed;
        else
            n_dec += decode_ready(q);
    }
    if (n_pre == 0 || n_pre > budget || n_pre > s->o.n_batch)
        return false;
    if (s->o.decode_slots)
        n_dec = PL_MIN(n_dec, s->o.decode_slots);
    if (n_dec == 0)
        return true;
    double alone, shared;
    if (est_cost(s, n_pre, &alone) && est_cost(s, n_pre + n_dec, &shared))
        return shared > ALONE_GAIN * alone;
    return decode_costlier_than_step(s, n_dec);
}

/* Build and run one batch. Returns the number of entries run. */
static uint32_t step(struct pl_daemon_sched *s, uint64_t now) {
    uint32_t rows = 0, n = 0;
    uint32_t budget = atomic_load_explicit(&s->prefill_chunk, memory_order_relaxed);
    bool alone = prefill_alone(s, budget);
    s->last_prefill_alone = alone;
    if (!alone)
        n = decode_entries(s, &rows);
    /* Prefill: a bounded chunk of prompt tokens per step, oldest request first, so a long
     * prompt never holds back the token streams of the others. */
    for (uint32_t i = 0; i < s->n_held && budget > 0 && n < s->o.n_batch; i++) {
        struct pl_daemon_req *q = s->held[i];
        if (q->phase != PL_DAEMON_PHASE_PREFILL)
            continue;
        uint32_t left = q->n_prompt - q->n_fed;
        uint32_t take = PL_MIN(left, PL_MIN(budget, s->o.n_batch - n));
        /* No tail shorter than the batched kernels take (engine_model.h): a prompt's logits
         * then do not depend on how it was chunked. */
        if (take < left && left - take < PL_CTX_BATCHED_MIN && take >= 2 * PL_CTX_BATCHED_MIN)
            take -= PL_CTX_BATCHED_MIN - (left - take);
        for (uint32_t k = 0; k < take; k++, n++) {
            s->b_tok[n] = q->prompt[q->n_fed];
            s->b_pos[n] = (int32_t)q->n_fed;
            s->b_seq[n] = q->seq;
            q->n_fed++;
            s->b_logits[n] = q->n_fed == q->n_prompt;
            if (s->b_logits[n])
                s->b_req[rows++] = q;
        }
        budget -= take;
        atomic_store_explicit(&q->s->kv_tokens, q->n_fed, memory_order_relaxed);
    }
    if (n == 0)
        return 0;
    struct pl_batch b = {
        .n = n, .token = s->b_tok, .pos = s->b_pos, .seq = s->b_seq, .logits = s->b_logits};
    uint64_t t_step = pl_daemon_now_ns();
    int r = pl_ctx_decode(s->ctx, &b, s->logits);
    atomic_fetch_add_explicit(&s->st.steps, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->st.tokens_decoded, n, memory_order_relaxed);
    now = pl_daemon_now_ns();
    pl_daemon_stats_observe(s->o.stats, PL_DAEMON_STATS_NO_IDENT, PL_DAEMON_HIST_STEP,
                            now - t_step);
    pl_daemon_stats_observe(s->o.stats, PL_DAEMON_STATS_NO_IDENT, PL_DAEMON_HIST_BATCH, n);
    if (r == 0)
        cost_observe(s, n, now - t_step);
    if (r < 0) {
        /* The accounting guarantees room, so this is our bug: fail the batch, keep going. */
        pl_log_err("forward step of %u tokens failed: %s", n, pl_strerror(r));
        for (uint32_t i = 0; i < n; i++)
            for (uint32_t k = 0; k < s->n_held; k++)
                if (s->held[k]->seq == s->b_seq[i] &&
                    s->held[k]->phase != PL_DAEMON_PHASE_FINISHING)
                    fail(s, s->held[k], PICOLM__V1__ERROR_CODE__ERROR_CODE_INTERNAL,
                         "forward pass failed", now);
        return n;
    }
    after_decode(s, rows, now);
    return n;
}

/* Write out what finished in this step right away (not one loop later). Returns the number
 * of requests retired. */
static uint32_t retire_finished(struct pl_daemon_sched *s) {
    uint32_t j = 0;
    for (uint32_t i = 0; i < s->n_held; i++) {
        struct pl_daemon_req *q = s->held[i];
        if (q->phase == PL_DAEMON_PHASE_FINISHING && try_retire(s, q))
            continue;
        s->held[j++] = q;
    }
    uint32_t n = s->n_held - j;
    s->n_held = j;
    return n;
}

/* Publish the committed records of the sessions in the dirty list, waking clients that
 * sleep. A session holding only streamed tokens of running requests is skipped while its
 * oldest record, published at the next opportunity (one loop from now, by the running
 * estimate), would still have waited no longer than stream_coalesce_us: a client that sleeps
 * between tokens costs a FUTEX_WAKE here and, on a machine whose cores all run the forward
 * pass, a preempted engine thread each time it wakes; when tokens come every few tens of
 * microseconds, one wake-up per window instead of per token is most of the difference to
 * in-process speed. Slow tokens (a loop longer than the window) never wait. force: publish
 * everything (before an idle sleep or a long step). */
static void publish_dirty(struct pl_daemon_sched *s, uint64_t now, bool force) {
    uint64_t window =
        (uint64_t)atomic_load_explicit(&s->stream_coalesce_us, memory_order_relaxed) * 1000ull;
    uint32_t j = 0;
    for (uint32_t i = 0; i < s->n_dirty; i++) {
        struct pl_daemon_session *ss = s->dirty[i];
        if (!force && !ss->cq_urgent && now + s->loop_ns < ss->cq_held_ns + window &&
            !atomic_load_explicit(&ss->dead, memory_order_relaxed)) {
            s->dirty[j++] = ss;
            continue;
        }
        ss->cq_dirty = ss->cq_urgent = false;
        /* Publish even when the session was just marked dead: what is committed is the
         * client's to read after the hang-up (picoctl kill's final Error, Dones), and the
         * region stays mapped until we post SESSION_RELEASED. FUTEX_WAKE only: the client
         * shares its eventfd and could make a write to it block this thread. */
        (void)pl_ipc_doorbell_notify_futex(&ss->cq);
    }
    s->n_dirty = j;
}

static void publish_stats(struct pl_daemon_sched *s) {
    uint32_t active = 0, waiting = 0;
    for (uint32_t i = 0; i < s->n_held; i++) {
        active += s->held[i]->seq >= 0;
        waiting += s->held[i]->phase == PL_DAEMON_PHASE_WAITING;
    }
    atomic_store_explicit(&s->st.n_active, active, memory_order_relaxed);
    atomic_store_explicit(&s->st.n_waiting, waiting, memory_order_relaxed);
    atomic_store_explicit(&s->st.kv_used_tokens, pl_ctx_kv_used(s->ctx), memory_order_relaxed);
    atomic_store_explicit(&s->st.kv_reserved_tokens, s->reserved_blocks * KV_BLOCK,
                          memory_order_relaxed);
    if (!s->pcache)
        return;
    atomic_store_explicit(&s->st.prefix_blocks, pl_daemon_pcache_blocks(s->pcache),
                          memory_order_relaxed);
    /* The cache's own counters, as broker-wide counters: what changed since the last call. */
    const struct pl_daemon_pcache_stats *ps = pl_daemon_pcache_stats(s->pcache);
    struct pl_daemon_pcache_stats *pub = &s->pc_pub;
    const struct {
        uint64_t now, *pub;
        enum pl_daemon_ctr c;
    } d[] = {{ps->loaded, &pub->loaded, PL_DAEMON_CTR_PREFIX_LOADED},
             {ps->saved, &pub->saved, PL_DAEMON_CTR_PREFIX_SAVED},
             {ps->evicted, &pub->evicted, PL_DAEMON_CTR_PREFIX_EVICTED},
             {ps->files_rejected, &pub->files_rejected, PL_DAEMON_CTR_PREFIX_REJECTED}};
    for (size_t i = 0; i < sizeof(d) / sizeof(d[0]); i++)
        if (d[i].now != *d[i].pub) {
            pl_daemon_stats_add(s->o.stats, PL_DAEMON_STATS_NO_IDENT, d[i].c, d[i].now - *d[i].pub);
            *d[i].pub = d[i].now;
        }
}

/* Right after the last step, a client that got its answer often sends the next request
 * within tens of microseconds. Look for it that long before sleeping, yielding the CPU at
 * each look (the client and the event thread need it to send that request; on a small
 * machine the engine's workers spin on the other cores): the request then costs neither an
 * eventfd write on the event thread nor a wake-up of this thread. */
#define IDLE_SPIN_NS 100000ull

/* Yield the CPU until a command or a kick arrives, the thread is asked to stop, or budget_ns
 * passed. */
static void yield_for_work(struct pl_daemon_sched *s, uint64_t budget_ns) {
    uint64_t t0 = pl_daemon_now_ns();
    while (pl_daemon_spsc_empty(&s->cmdq) &&
           !atomic_load_explicit(&s->kicked, memory_order_relaxed) &&
           !atomic_load_explicit(&s->stop, memory_order_relaxed) &&
           pl_daemon_now_ns() - t0 < budget_ns)
        (void)sched_yield();
}

/* Sleep until kicked or the earliest wait-queue deadline. Rings of stalled sessions are
 * armed so that their clients ring the broker doorbell (and the event thread kicks us). */
static void sleep_until_work(struct pl_daemon_sched *s, bool stalled, bool was_busy, uint64_t now) {
    int timeout = -1;
    for (uint32_t i = 0; i < s->n_held; i++) {
        struct pl_daemon_req *q = s->held[i];
        if (q->phase == PL_DAEMON_PHASE_WAITING) {
            uint64_t left = q->deadline_ns > now ? q->deadline_ns - now : 0;
            int ms = (int)PL_MIN(left / 1000000ull + 1, (uint64_t)INT32_MAX);
            if (timeout < 0 || ms < timeout)
                timeout = ms;
        }
    }
    if (stalled) {
        for (uint32_t i = 0; i < s->n_held; i++) {
            struct pl_daemon_session *ss = s->held[i]->s;
            if (!ss->cq_armed) {
                ss->cq_armed = true;
                if (cq_sleep_prepare(s, ss) != 0)
                    timeout = 0; /* room already: go round again */
            }
        }
        for (uint32_t i = 0; i < s->n_outbox; i++) {
            struct pl_daemon_session *ss = s->outbox_list[i];
            if (!ss->cq_armed) {
                ss->cq_armed = true;
                if (cq_sleep_prepare(s, ss) != 0)
                    timeout = 0;
            }
        }
        flush_notices(s, false); /* CQ_WAIT notices: the event thread waits for room for us */
    }
    if (was_busy && !stalled && timeout != 0)
        yield_for_work(s, IDLE_SPIN_NS);
    /* About to sleep: nothing may stay unannounced (a request that arrived during the spin
     * will wake the event thread anyway: leave the notices to it, see notice()). */
    if (pl_daemon_spsc_empty(&s->cmdq) && !atomic_load_explicit(&s->kicked, memory_order_relaxed))
        flush_notices(s, true);
    /* Dekker pair with pl_daemon_sched_send/kick: we store sleeping then load kicked and the
     * queue; they store the queue/kicked then load sleeping; seq_cst orders both sides. */
    atomic_store_explicit(&s->sleeping, 1, memory_order_seq_cst);
    atomic_thread_fence(memory_order_seq_cst); /* before the queue's acquire loads */
    if (timeout != 0 && !atomic_exchange_explicit(&s->kicked, 0, memory_order_seq_cst) &&
        pl_daemon_spsc_empty(&s->cmdq) && !atomic_load(&s->stop)) {
        struct pollfd p = {.fd = s->wake_fd, .events = POLLIN};
        (void)poll(&p, 1, timeout);
        (void)pl_ipc_doorbell_drain(s->wake_fd);
    }
    atomic_store_explicit(&s->sleeping, 0, memory_order_seq_cst);
    atomic_store_explicit(&s->kicked, 0, memory_order_relaxed);
    for (uint32_t i = 0; i < s->n_held; i++) {
        struct pl_daemon_session *ss = s->held[i]->s;
        if (ss->cq_armed) {
            ss->cq_armed = false;
            pl_ipc_ring_sleep_finish(&ss->cq);
        }
    }
    for (uint32_t i = 0; i < s->n_outbox; i++) {
        struct pl_daemon_session *ss = s->outbox_list[i];
        if (ss->cq_armed) {
            ss->cq_armed = false;
            pl_ipc_ring_sleep_finish(&ss->cq);
        }
    }
}

/* A step just answered a request while others keep the loop busy. Its client, in a
 * request-answer loop, sends its next request within tens of microseconds - usually just
 * after the next step has started, so that request would wait a whole step (tens of
 * milliseconds on a large model) before its prefill even begins: its time to first token
 * doubles. Waiting up to LINGER_MAX_NS, and at most 1/LINGER_SHARE of a loop, for a new
 * command (or a kick: other new work) lets it join the next step, at a cost to the running
 * streams of at most that share of their speed (none on short steps, where the wait would
 * be no help anyway). */
#define LINGER_MAX_NS 300000ull
#define LINGER_SHARE 200u

static void linger(struct pl_daemon_sched *s) {
    uint64_t budget = PL_MIN(LINGER_MAX_NS, s->loop_ns / LINGER_SHARE);
    if (budget >= 20000u)
        yield_for_work(s, budget);
}

static void run(struct pl_daemon_sched *s) {
    uint64_t t_busy = 0; /* start of the last loop that ran a step, 0 after an idle one */
    while (!atomic_load_explicit(&s->stop, memory_order_relaxed)) {
        uint64_t now = pl_daemon_now_ns();
        if (t_busy) /* busy loop to busy loop: 3/4 of the old estimate, 1/4 of the new */
            s->loop_ns = s->loop_ns - s->loop_ns / 4 + (now - t_busy) / 4;
        handle_cmds(s);
        handle_outboxes(s);
        bool stalled = prepare(s, now);
        uint32_t n = step(s, now);
        uint32_t n_retired = n > 0 ? retire_finished(s) : 0;
        bool busy_before = t_busy != 0;
        t_busy = n > 0 ? now : 0;
        publish_dirty(s, pl_daemon_now_ns(), n == 0);
        publish_stats(s);
        flush_notices(s, false);
        if (n == 0) {
            pl_daemon_pcache_save(s->pcache); /* idle: chains not on disk yet */
            sleep_until_work(s, stalled || s->n_outbox > 0, busy_before, now);
        } else if (n_retired > 0 && s->n_held > 0) {
            linger(s);
        }
    }
}

/* ---- Thread start-up ---- */

static void *thread_main(void *arg) {
    struct pl_daemon_sched *s = arg;
    int r = 0;
    if (s->o.n_cpus > 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        for (uint32_t i = 0; i < s->o.n_cpus; i++)
            CPU_SET(s->cpus[i], &set);
        r = -pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
        if (r < 0)
            (void)snprintf(s->start_err, sizeof(s->start_err),
                           "cannot pin the inference thread to the configured cpus: %s",
                           pl_strerror(r));
    }
    if (r == 0) {
        struct pl_ctx_opts co = {.n_ctx = s->o.n_ctx,
                                 .n_seq = s->o.n_seq,
                                 .n_kv_tokens = s->o.kv_tokens,
                                 .n_batch = s->o.n_batch,
                                 .kv_type = s->o.kv_type};
        r = pl_ctx_new(s->m, &co, &s->ctx);
        if (r < 0)
            (void)snprintf(s->start_err, sizeof(s->start_err),
                           "cannot create the inference context (KV pool %u tokens): %s",
                           s->o.kv_tokens, pl_strerror(r));
    }
    if (r == 0)
        s->total_blocks = pl_ctx_kv_total(s->ctx) / KV_BLOCK;
    if (r == 0 && s->o.prefix_cache_tokens > 0) {
        uint32_t max_blocks = PL_MIN(s->o.prefix_cache_tokens / KV_BLOCK, s->total_blocks);
        if (max_blocks > 0)
            r = pl_daemon_pcache_new(s->ctx, s->m, max_blocks, s->pcache_dir, &s->pcache,
                                     s->start_err, sizeof(s->start_err));
        if (r == 0 && s->pcache) {
            uint32_t loaded = pl_daemon_pcache_load(s->pcache);
            const struct pl_daemon_pcache_stats *ps = pl_daemon_pcache_stats(s->pcache);
            if (s->pcache_dir[0])
                pl_log_info("prefix cache: %u blocks max, %u loaded from %s (%llu files "
                            "ignored: another model or damaged)",
                            max_blocks, loaded, s->pcache_dir,
                            (unsigned long long)ps->files_rejected);
        }
    }
    pthread_mutex_lock(&s->mu);
    s->start_rc = r;
    s->start_done = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (r < 0)
        return NULL;
    run(s);
    return NULL;
}

static void sched_free(struct pl_daemon_sched *s) {
    pl_daemon_pcache_free(s->pcache); /* saves, then drops its blocks: before the context */
    pl_ctx_free(s->ctx);
    pl_daemon_features_free(s->feat);
    pl_daemon_spsc_done(&s->cmdq);
    pl_daemon_spsc_done(&s->noteq);
    pl_close_fd(&s->wake_fd);
    pl_close_fd(&s->notify_fd);
    free(s->held);
    free(s->free_seq);
    free(s->outbox_list);
    free(s->dirty);
    free(s->b_tok);
    free(s->b_pos);
    free(s->b_seq);
    free(s->b_logits);
    free(s->b_req);
    free(s->runnable);
    free(s->cand);
    free(s->cand_ent);
    free(s->pick_idx);
    free(s->logits);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

int pl_daemon_sched_start(struct pl_model *m, const struct pl_daemon_sched_opts *opts,
                          struct pl_daemon_sched **ret, char *err, size_t err_len) {
    struct pl_daemon_sched *s;
    int r;
    if (!m || !opts || !ret || !opts->n_seq || !opts->n_batch || !opts->max_held ||
        !opts->max_sessions || opts->n_cpus > 256)
        return -EINVAL;
    s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->m = m;
    s->tok = pl_model_tokenizer(m);
    s->o = *opts;
    if (opts->n_cpus)
        memcpy(s->cpus, opts->cpus, opts->n_cpus * sizeof(uint32_t));
    s->o.cpus = s->cpus;
    s->n_vocab = pl_model_hparams(m)->n_vocab;
    s->wake_fd = s->notify_fd = -1;
    if (opts->prefix_cache_dir)
        (void)snprintf(s->pcache_dir, sizeof(s->pcache_dir), "%s", opts->prefix_cache_dir);
    s->o.prefix_cache_dir = NULL; /* borrowed for the call only */
    r = pl_daemon_features_new(m, &s->feat);
    if (r < 0) {
        (void)snprintf(err, err_len, "cannot build the grammar vocabulary: %s", pl_strerror(r));
        free(s);
        return r;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    atomic_init(&s->prefill_chunk, opts->prefill_chunk);
    atomic_init(&s->stream_coalesce_us, opts->stream_coalesce_us);
    atomic_init(&s->queue_max, opts->queue_max);
    atomic_init(&s->queue_timeout_ms, opts->queue_timeout_ms);
    s->max_dirty = opts->max_sessions;
    r = -ENOMEM;
    if (pl_daemon_spsc_init(&s->cmdq, opts->max_held + 2 * opts->max_sessions + 16) < 0 ||
        pl_daemon_spsc_init(&s->noteq, opts->max_held + 4 * opts->max_sessions + 16) < 0)
        goto fail;
    s->held = calloc(opts->max_held, sizeof(*s->held));
    s->free_seq = calloc(opts->n_seq, sizeof(*s->free_seq));
    s->outbox_list = calloc(opts->max_sessions, sizeof(*s->outbox_list));
    s->dirty = calloc(s->max_dirty, sizeof(*s->dirty));
    s->b_tok = calloc(opts->n_batch, sizeof(int32_t));
    s->b_pos = calloc(opts->n_batch, sizeof(int32_t));
    s->b_seq = calloc(opts->n_batch, sizeof(int32_t));
    s->b_logits = calloc(opts->n_batch, sizeof(bool));
    s->b_req = calloc(opts->n_batch, sizeof(*s->b_req));
    s->logits = calloc((size_t)opts->n_seq * s->n_vocab, sizeof(float));
    if (!s->held || !s->free_seq || !s->outbox_list || !s->dirty || !s->b_tok || !s->b_pos ||
        !s->b_seq || !s->b_logits || !s->b_req || !s->logits)
        goto fail;
    pl_policy_sched_init(&s->psched);
    s->runnable = calloc(opts->max_sessions, sizeof(*s->runnable));
    s->cand = calloc(opts->max_sessions, sizeof(*s->cand));
    s->cand_ent = calloc(opts->max_sessions, sizeof(*s->cand_ent));
    s->pick_idx = calloc(opts->max_sessions, sizeof(*s->pick_idx));
    if (!s->runnable || !s->cand || !s->cand_ent || !s->pick_idx)
        goto fail;
    for (uint32_t i = 0; i < opts->n_seq; i++)
        s->free_seq[s->n_free_seq++] = (int32_t)(opts->n_seq - 1 - i);
    if ((r = pl_ipc_doorbell_open(&s->wake_fd)) < 0 ||
        (r = pl_ipc_doorbell_open(&s->notify_fd)) < 0)
        goto fail;
    r = -pthread_create(&s->thread, NULL, thread_main, s);
    if (r < 0) {
        (void)snprintf(err, err_len, "cannot start the inference thread: %s", pl_strerror(r));
        goto fail;
    }
    s->thread_started = true;
    pthread_mutex_lock(&s->mu);
    while (!s->start_done)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    if (s->start_rc < 0) {
        r = s->start_rc;
        (void)snprintf(err, err_len, "%s", s->start_err);
        (void)pthread_join(s->thread, NULL);
        goto fail;
    }
    *ret = s;
    return 0;
fail:
    if (err && err_len && !err[0])
        (void)snprintf(err, err_len, "scheduler start-up failed: %s", pl_strerror(r));
    sched_free(s);
    return r;
}

void pl_daemon_sched_stop(struct pl_daemon_sched *s) {
    if (!s)
        return;
    atomic_store_explicit(&s->stop, true, memory_order_seq_cst);
    (void)pl_ipc_doorbell_ring(s->wake_fd);
    (void)pthread_join(s->thread, NULL);
    /* Whatever is still held goes back (the event thread closes the sessions after us). */
    for (uint32_t i = 0; i < s->n_held; i++)
        release_seq(s, s->held[i]);
    sched_free(s);
}

int pl_daemon_sched_send(struct pl_daemon_sched *s, uint32_t kind, void *ptr) {
    struct pl_daemon_msg m = {.kind = kind, .ptr = ptr};
    int r = pl_daemon_spsc_push(&s->cmdq, &m);
    if (r < 0)
        return r;
    /* Dekker pair with sleep_until_work(): the push is a release store, which a later load
     * may overtake (x86 store buffer): without this fence we could read sleeping == 0 while
     * the scheduler, already past its store of sleeping, still sees an empty queue, and the
     * message would wait for the next kick (forever on an idle daemon). */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&s->sleeping, memory_order_seq_cst))
        (void)pl_ipc_doorbell_ring(s->wake_fd);
    return 0;
}

void pl_daemon_sched_kick(struct pl_daemon_sched *s) {
    atomic_store_explicit(&s->kicked, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&s->sleeping, memory_order_seq_cst))
        (void)pl_ipc_doorbell_ring(s->wake_fd);
}

bool pl_daemon_sched_notice(struct pl_daemon_sched *s, struct pl_daemon_msg *ret) {
    return pl_daemon_spsc_pop(&s->noteq, ret);
}

bool pl_daemon_sched_notice_pending(struct pl_daemon_sched *s) {
    return !pl_daemon_spsc_empty(&s->noteq);
}

int pl_daemon_sched_notify_fd(const struct pl_daemon_sched *s) {
    return s->notify_fd;
}

void pl_daemon_sched_set_live(struct pl_daemon_sched *s, uint32_t prefill_chunk,
                              uint32_t stream_coalesce_us, uint32_t queue_max,
                              uint32_t queue_timeout_ms) {
    atomic_store_explicit(&s->prefill_chunk, prefill_chunk ? prefill_chunk : 1,
                          memory_order_relaxed);
    atomic_store_explicit(&s->stream_coalesce_us, stream_coalesce_us, memory_order_relaxed);
    atomic_store_explicit(&s->queue_max, queue_max, memory_order_relaxed);
    atomic_store_explicit(&s->queue_timeout_ms, queue_timeout_ms, memory_order_relaxed);
    pl_daemon_sched_kick(s);
}

struct pl_daemon_sched_stats *pl_daemon_sched_stats(struct pl_daemon_sched *s) {
    return &s->st;
}

uint32_t pl_daemon_sched_kv_total(const struct pl_daemon_sched *s) {
    return s->total_blocks * KV_BLOCK;
}

const struct pl_daemon_features *pl_daemon_sched_features(const struct pl_daemon_sched *s) {
    return s->feat;
}

uint32_t pl_daemon_sched_n_ctx(const struct pl_daemon_sched *s) {
    return s->o.n_ctx;
}
