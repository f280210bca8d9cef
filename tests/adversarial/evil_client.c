/* SPDX-License-Identifier: MIT */
/* picolm-evil-client: one hostile client of a real picolmd, for test_evil_client.c.
 *   picolm-evil-client SOCKET_DIR ATTACK SEED
 * It connects like any client, then attacks through everything a client controls: its
 * submission ring's producer index, record lengths, types and pads, half-written and
 * half-published records, the completion ring's consumer index and flag words, the region
 * header, its doorbell (floods), requests with absurd parameters, and its own death at random
 * points. Exit status: 0 when the broker reacted as it must (below), 1 when it did not, 2 when
 * the attack could not be set up. "ends" attacks expect the broker to end the session (its
 * socket hangs up within 5 s) as a protocol error; "keeps" attacks expect the session to stay
 * usable (every absurd request answered, a normal request afterwards completes); "dies"
 * attacks kill this process (SIGKILL) mid-way and expect nothing. `picolm-evil-client list`
 * prints the attacks, one "NAME ends|keeps|dies" per line. */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pl/ipc_abi.h"
#include "pl/ipc_doorbell.h"
#include "pl/picolm.pb-c.h"
#include "pl_test_client.h"
#include "records.h"

enum expect { ENDS, KEEPS, DIES };

static uint64_t rng;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* ---- Raw writes into our own submission ring ---- */

static uint8_t *sq_at(struct pl_test_client *c, uint32_t idx) {
    return c->sq.data + (idx & (c->sq.size - 1));
}

/* A record header (and payload) at our producer position, not published. Returns the index
 * after it. Fits: the attacks start on a fresh ring. */
static uint32_t raw_record(struct pl_test_client *c, uint32_t len, uint32_t type,
                           const void *payload, uint32_t n_payload) {
    uint32_t at = c->sq.head;
    struct pl_ipc_rec_hdr h = {.len = len, .type = type};
    memcpy(sq_at(c, at), &h, sizeof(h));
    if (n_payload)
        memcpy(sq_at(c, at + 8), payload, n_payload);
    return at + PL_IPC_REC_SPAN(n_payload);
}

static void set_prod(struct pl_test_client *c, uint32_t v) {
    atomic_store_explicit(&c->sq.ctrl->prod, v, memory_order_release);
}

/* Wake the broker every way it may be waiting: its doorbell (io_uring read, on kernels
 * without io_uring futex waits) and FUTEX_WAKE on the two words it may sleep on. */
static void ring_broker(struct pl_test_client *c) {
    uint64_t one = 1;
    (void)!write(c->db_broker, &one, sizeof(one));
    (void)syscall(SYS_futex, (uint32_t *)&c->sq.ctrl->prod, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    (void)syscall(SYS_futex, (uint32_t *)&c->cq.ctrl->cons, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Did the broker hang up on us within timeout_ms? */
static int wait_hangup(struct pl_test_client *c, int timeout_ms) {
    struct pollfd p = {.fd = c->sock, .events = POLLIN};
    for (;;) {
        int r = poll(&p, 1, timeout_ms);
        if (r <= 0)
            return 0;
        char x;
        ssize_t n = recv(c->sock, &x, 1, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN))
            return 1;
    }
}

static int packed(const ProtobufCMessage *m, uint8_t *buf, size_t cap) {
    size_t n = protobuf_c_message_get_packed_size(m);
    if (n > cap)
        return -1;
    return (int)protobuf_c_message_pack(m, buf);
}

/* ---- "ends": the broker must end the session ---- */

static int a_prod_garbage(struct pl_test_client *c) {
    uint32_t v;
    do
        v = rnd();
    while (v % 8 == 0 && v <= c->sq.size);
    set_prod(c, v | 1u); /* misaligned, and (almost always) out of the window */
    ring_broker(c);
    return ENDS;
}

static int a_prod_ahead(struct pl_test_client *c) {
    Picolm__V1__ModelInfoRequest mi = PICOLM__V1__MODEL_INFO_REQUEST__INIT;
    uint8_t b[64];
    mi.request_id = 1;
    int n = packed(&mi.base, b, sizeof(b));
    (void)raw_record(c, (uint32_t)n, PL_DAEMON_REC_MODEL_INFO_REQUEST, b, (uint32_t)n);
    set_prod(c, c->sq.head + c->sq.size + 8); /* more than the ring holds */
    ring_broker(c);
    return ENDS;
}

static int a_len_10mb(struct pl_test_client *c) {
    /* A "10 MB prompt": the header claims it, the ring cannot hold it. */
    uint8_t b[64] = {0x08, 0x01, 0x12, 0x80, 0x80, 0x80, 0x05};
    uint32_t end = raw_record(c, 10u << 20, PL_DAEMON_REC_GENERATE, b, sizeof(b));
    set_prod(c, end);
    ring_broker(c);
    return ENDS;
}

static int a_len_over_type(struct pl_test_client *c) {
    /* A Cancel (limit 64 bytes) of 1000 bytes of valid protobuf (unknown bytes field). */
    uint8_t b[1000];
    memset(b, 'z', sizeof(b));
    b[0] = 0x08;
    b[1] = 0x05;
    b[2] = 0xfa; /* field 31, length-delimited */
    b[3] = 0x01;
    b[4] = 0xe0; /* 995 */
    b[5] = 0x07;
    uint32_t end = raw_record(c, sizeof(b) - 2, PL_DAEMON_REC_CANCEL, b, sizeof(b) - 2);
    set_prod(c, end);
    ring_broker(c);
    return ENDS;
}

static int a_type_unknown(struct pl_test_client *c) {
    uint8_t b[8] = {0x08, 0x01};
    uint32_t types[] = {0, 6, 77, 101, 103, 0x7fffffffu};
    uint32_t end = raw_record(c, 2, types[rnd() % 6], b, 2);
    set_prod(c, end);
    ring_broker(c);
    return ENDS;
}

static int a_type_reserved(struct pl_test_client *c) {
    uint8_t b[8] = {0x08, 0x01};
    uint32_t end = raw_record(c, 2, PL_IPC_REC_TYPE_RESERVED + 1 + rnd() % 200, b, 2);
    set_prod(c, end);
    ring_broker(c);
    return ENDS;
}

static int a_pad_wrong(struct pl_test_client *c) {
    /* A pad in the middle of the ring, with a length that does not reach the end. */
    uint32_t end = raw_record(c, 8 + (rnd() % 4) * 8, PL_IPC_REC_PAD, NULL, 0);
    set_prod(c, end + 16);
    ring_broker(c);
    return ENDS;
}

static int a_payload_garbage(struct pl_test_client *c) {
    uint8_t b[256];
    for (size_t i = 0; i < sizeof(b); i++)
        b[i] = (uint8_t)rnd();
    b[0] = 0xff; /* wire type 7 does not exist: never valid protobuf */
    uint32_t types[] = {PL_DAEMON_REC_GENERATE, PL_DAEMON_REC_TOKENIZE, PL_DAEMON_REC_DETOKENIZE};
    uint32_t end = raw_record(c, sizeof(b), types[rnd() % 3], b, sizeof(b));
    set_prod(c, end);
    ring_broker(c);
    return ENDS;
}

static int a_half_published(struct pl_test_client *c) {
    /* Header says 200 bytes; the index publishes only the header and 8 bytes. */
    uint8_t b[200] = {0x08, 0x01};
    (void)raw_record(c, sizeof(b), PL_DAEMON_REC_GENERATE, b, sizeof(b));
    set_prod(c, c->sq.head + 16);
    ring_broker(c);
    return ENDS;
}

static int a_cq_cons_garbage(struct pl_test_client *c) {
    /* Our consumer index on the completion ring runs ahead of what the broker produced. The
     * broker looks at it only when its cached view of the room runs out: fill the ring with
     * big replies (Tokenize results of ~8 KiB) and never read them. */
    atomic_store_explicit(&c->cq.ctrl->cons, 0x40000000u + (rnd() & ~7u), memory_order_release);
    static uint8_t text[4000];
    for (size_t i = 0; i < sizeof(text); i++)
        text[i] = (uint8_t)('a' + i % 26);
    Picolm__V1__Tokenize t = PICOLM__V1__TOKENIZE__INIT;
    t.text.data = text;
    t.text.len = sizeof(text);
    for (uint64_t id = 1; id <= 40; id++) {
        t.request_id = id;
        if (pl_test_client_send(c, PL_DAEMON_REC_TOKENIZE, &t.base) < 0)
            break; /* the broker may end the session before all are sent */
    }
    return ENDS;
}

static int a_index_rewind(struct pl_test_client *c) {
    /* A valid request, then the producer index goes backwards. */
    if (pl_test_client_generate(c, 3, NULL, 0, "The", 2, true, true) < 0)
        return -1;
    usleep(20000);
    set_prod(c, c->sq.head - 8 * (1 + rnd() % 4));
    ring_broker(c);
    return ENDS;
}

/* ---- "keeps": the session survives and still works ---- */

struct absurd {
    const char *what;
    uint32_t max_tokens;
    float temp, top_p, rep;
    int32_t penalty_n;
    uint64_t id;
    int n_stop;
    int32_t token;     /* non-zero: tokens input with this id */
    bool expect_error; /* an Error (INVALID/...); else a normal Done */
};

static int check_reply(struct pl_test_client *c, uint64_t id, bool expect_error, const char *what) {
    static struct pl_test_result res;
    int r = pl_test_client_collect(c, id, &res, 10000, NULL, NULL);
    if (r < 0) {
        fprintf(stderr, "evil: %s: no reply (%d)\n", what, r);
        return -1;
    }
    if (expect_error != (res.error_code != 0)) {
        fprintf(stderr, "evil: %s: expected %s, got error %u finish %u\n", what,
                expect_error ? "an Error" : "a Done", res.error_code, res.finish);
        return -1;
    }
    return 0;
}

static int a_absurd_params(struct pl_test_client *c) {
    static const struct absurd cases[] = {
        {"max_tokens 2^31", 1u << 31, 0, 0, 0, 0, 11, 0, 0, false},
        {"negative temperature (greedy)", 4, -3.0f, 0, 0, 0, 12, 0, 0, false},
        {"NaN top_p", 4, 0.7f, NAN, 0, 0, 13, 0, 0, true},
        {"infinite temperature", 4, INFINITY, 0, 0, 0, 14, 0, 0, true},
        {"NaN temperature", 4, NAN, 0, 0, 0, 15, 0, 0, true},
        {"negative repeat penalty", 4, 0, 0, -1.0f, 0, 16, 0, 0, true},
        {"negative penalty window", 4, 0, 0, 0, -1, 17, 0, 0, true},
        {"request id 0", 4, 0, 0, 0, 0, 0, 0, 0, true},
        {"100 stop strings", 4, 0, 0, 0, 0, 18, 100, 0, true},
        {"token id 2^31-1", 4, 0, 0, 0, 0, 19, 0, INT32_MAX, true},
        {"token id -5", 4, 0, 0, 0, 0, 20, 0, -5, true},
    };
    static ProtobufCBinaryData stops[100];
    for (int i = 0; i < 100; i++) {
        stops[i].data = (uint8_t *)"stop";
        stops[i].len = 4;
    }
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct absurd *a = &cases[i];
        Picolm__V1__Generate g;
        Picolm__V1__SamplingParams sp;
        Picolm__V1__TokenList tl = PICOLM__V1__TOKEN_LIST__INIT;
        int32_t tok[2] = {1, a->token};
        picolm__v1__generate__init(&g);
        picolm__v1__sampling_params__init(&sp);
        g.request_id = a->id;
        if (a->token) {
            tl.ids = tok;
            tl.n_ids = 2;
            g.input_case = PICOLM__V1__GENERATE__INPUT_TOKENS;
            g.tokens = &tl;
        } else {
            g.input_case = PICOLM__V1__GENERATE__INPUT_PROMPT;
            g.prompt.data = (uint8_t *)"Once";
            g.prompt.len = 4;
        }
        g.max_tokens = a->max_tokens;
        g.ignore_eos = 1;
        sp.temperature = a->temp;
        sp.top_p = a->top_p;
        sp.repeat_penalty = a->rep;
        sp.penalty_last_n = a->penalty_n;
        g.sampling = &sp;
        g.stop = stops;
        g.n_stop = (size_t)a->n_stop;
        if (pl_test_client_send(c, PL_DAEMON_REC_GENERATE, &g.base) < 0)
            return -1;
        if (check_reply(c, a->id, a->expect_error, a->what) < 0)
            return -1;
    }
    /* Unknown fields of every wire type after a valid Generate: ignored. */
    {
        Picolm__V1__Generate g;
        picolm__v1__generate__init(&g);
        g.request_id = 30;
        g.input_case = PICOLM__V1__GENERATE__INPUT_PROMPT;
        g.prompt.data = (uint8_t *)"Once";
        g.prompt.len = 4;
        g.max_tokens = 3;
        uint8_t b[256];
        int n = packed(&g.base, b, sizeof(b));
        static const uint8_t unk[] = {0xf8, 0x01, 0x05, 0xfa, 0x01, 0x02, 'a',  'b',
                                      0xfd, 0x01, 1,    2,    3,    4,    0x81, 0x02,
                                      1,    2,    3,    4,    5,    6,    7,    8};
        memcpy(b + n, unk, sizeof(unk));
        if (pl_test_client_send_raw(c, PL_DAEMON_REC_GENERATE, b, (uint32_t)(n + sizeof(unk))) <
                0 ||
            check_reply(c, 30, false, "unknown fields") < 0)
            return -1;
    }
    /* Tokenize over its limit, Detokenize of a bad id, Cancel of a request never sent. */
    {
        static uint8_t text[4097];
        memset(text, 'a', sizeof(text));
        Picolm__V1__Tokenize t = PICOLM__V1__TOKENIZE__INIT;
        t.request_id = 31;
        t.text.data = text;
        t.text.len = sizeof(text); /* within the record limit, over the text limit */
        uint32_t type, len;
        static uint8_t rb[65536];
        if (pl_test_client_send(c, PL_DAEMON_REC_TOKENIZE, &t.base) < 0 ||
            pl_test_client_recv(c, &type, rb, sizeof(rb), &len, 5000) != 1 ||
            type != PL_DAEMON_REC_ERROR)
            return -1;
        int32_t bad[3] = {1, -7, 1 << 30};
        Picolm__V1__Detokenize dt = PICOLM__V1__DETOKENIZE__INIT;
        dt.request_id = 32;
        dt.ids = bad;
        dt.n_ids = 3;
        if (pl_test_client_send(c, PL_DAEMON_REC_DETOKENIZE, &dt.base) < 0 ||
            pl_test_client_recv(c, &type, rb, sizeof(rb), &len, 5000) != 1 ||
            type != PL_DAEMON_REC_ERROR)
            return -1;
        Picolm__V1__Cancel cn = PICOLM__V1__CANCEL__INIT;
        cn.request_id = 987654321;
        if (pl_test_client_send(c, PL_DAEMON_REC_CANCEL, &cn.base) < 0 ||
            pl_test_client_recv(c, &type, rb, sizeof(rb), &len, 5000) != 1 ||
            type != PL_DAEMON_REC_ERROR)
            return -1;
    }
    return KEEPS;
}

static int a_flags_garbage(struct pl_test_client *c) {
    /* Our flag and sleep words on both rings, the region header's reserved fields, and the
     * reserved words of the control blocks: the broker must not care. */
    for (int k = 0; k < 1000; k++) {
        atomic_store(&c->sq.ctrl->prod_flags, rnd());
        atomic_store(&c->sq.ctrl->prod_sleep_seq, rnd());
        atomic_store(&c->cq.ctrl->cons_flags, rnd() & 3u);
        atomic_store(&c->cq.ctrl->cons_sleep_seq, rnd());
        c->sq.ctrl->prod_reserved[rnd() % 15] = rnd();
        c->cq.ctrl->cons_reserved[rnd() % 15] = rnd();
        ring_broker(c);
    }
    struct pl_ipc_region_hdr *h = (struct pl_ipc_region_hdr *)(void *)c->reg.base;
    for (int i = 0; i < 18; i++)
        h->reserved[i] = ((uint64_t)rnd() << 32) | rnd();
    h->sq.reserved = rnd();
    h->features = rnd();
    atomic_store(&c->sq.ctrl->prod_flags, 0);
    atomic_store(&c->cq.ctrl->cons_flags, 0);
    return KEEPS;
}

static int a_doorbell_flood(struct pl_test_client *c) {
    /* 100k doorbell writes, with real requests in between. */
    for (int k = 0; k < 100000; k++) {
        ring_broker(c);
        if (k % 20000 == 0) {
            Picolm__V1__ModelInfoRequest mi = PICOLM__V1__MODEL_INFO_REQUEST__INIT;
            mi.request_id = 40 + (uint64_t)k;
            if (pl_test_client_send(c, PL_DAEMON_REC_MODEL_INFO_REQUEST, &mi.base) < 0)
                return -1;
        }
    }
    uint32_t type, len;
    static uint8_t rb[65536];
    for (int k = 0; k < 5; k++)
        if (pl_test_client_recv(c, &type, rb, sizeof(rb), &len, 5000) != 1 ||
            type != PL_DAEMON_REC_MODEL_INFO)
            return -1;
    return KEEPS;
}

static int a_never_reads(struct pl_test_client *c) {
    /* Long streams whose completions are never read: the broker must not wait for us. */
    for (uint64_t id = 50; id < 54; id++)
        if (pl_test_client_generate(c, id, NULL, 0, "Once upon a time", 0, true, true) < 0)
            return -1;
    usleep(300000);
    return KEEPS; /* the session is closed by exit; the others' streams are checked */
}

/* ---- "dies": SIGKILL at a random point ---- */

static void die(void) {
    (void)raise(SIGKILL);
}

static int a_die_mid_write(struct pl_test_client *c) {
    /* Half of a record's payload written, nothing published. */
    uint8_t b[300];
    memset(b, 0x41, sizeof(b));
    (void)raw_record(c, sizeof(b), PL_DAEMON_REC_GENERATE, b, 1 + rnd() % 299);
    die();
    return DIES;
}

static int a_die_mid_stream(struct pl_test_client *c) {
    if (pl_test_client_generate(c, 60, NULL, 0, "Once upon a time", 0, true, true) < 0)
        return -1;
    uint32_t type, len;
    static uint8_t rb[65536];
    for (uint32_t k = rnd() % 6; k > 0; k--)
        if (pl_test_client_recv(c, &type, rb, sizeof(rb), &len, 5000) != 1)
            break;
    usleep(rnd() % 5000);
    die();
    return DIES;
}

static int a_die_mid_read(struct pl_test_client *c) {
    /* Killed while the completion ring is full and the broker wants to write. */
    for (uint64_t id = 70; id < 72; id++)
        if (pl_test_client_generate(c, id, NULL, 0, "The little dog", 0, false, true) < 0)
            return -1;
    usleep(1000 + rnd() % 20000);
    die();
    return DIES;
}

static int a_die_random(struct pl_test_client *c) {
    /* A random attack that is cut short after a random delay by a SIGKILL from a thread-less
     * timer: alarm() with SIGKILL is not possible, so fork a killer. */
    pid_t me = getpid();
    pid_t k = fork();
    if (k == 0) {
        usleep(rnd() % 30000);
        (void)kill(me, SIGKILL);
        _exit(0);
    }
    switch (rnd() % 3) {
    case 0:
        (void)a_doorbell_flood(c);
        break;
    case 1:
        (void)a_die_mid_stream(c);
        break;
    default:
        (void)a_never_reads(c);
        break;
    }
    pause();
    return DIES;
}

struct attack {
    const char *name;
    int (*fn)(struct pl_test_client *);
    enum expect expect;
};

static const struct attack attacks[] = {
    {"prod-garbage", a_prod_garbage, ENDS},
    {"prod-ahead", a_prod_ahead, ENDS},
    {"len-10mb", a_len_10mb, ENDS},
    {"len-over-type", a_len_over_type, ENDS},
    {"type-unknown", a_type_unknown, ENDS},
    {"type-reserved", a_type_reserved, ENDS},
    {"pad-wrong", a_pad_wrong, ENDS},
    {"payload-garbage", a_payload_garbage, ENDS},
    {"half-published", a_half_published, ENDS},
    {"cq-cons-garbage", a_cq_cons_garbage, ENDS},
    {"index-rewind", a_index_rewind, ENDS},
    {"absurd-params", a_absurd_params, KEEPS},
    {"flags-garbage", a_flags_garbage, KEEPS},
    {"doorbell-flood", a_doorbell_flood, KEEPS},
    {"never-reads", a_never_reads, KEEPS},
    {"die-mid-write", a_die_mid_write, DIES},
    {"die-mid-stream", a_die_mid_stream, DIES},
    {"die-mid-read", a_die_mid_read, DIES},
    {"die-random", a_die_random, DIES},
};

int main(int argc, char **argv) {
    static const char *const what[] = {"ends", "keeps", "dies"};
    if (argc == 2 && !strcmp(argv[1], "list")) {
        for (size_t i = 0; i < sizeof(attacks) / sizeof(attacks[0]); i++)
            printf("%s %s\n", attacks[i].name, what[attacks[i].expect]);
        return 0;
    }
    if (argc != 4) {
        fprintf(stderr, "usage: %s SOCKET_DIR ATTACK SEED | list\n", argv[0]);
        return 2;
    }
    const struct attack *a = NULL;
    for (size_t i = 0; i < sizeof(attacks) / sizeof(attacks[0]); i++)
        if (!strcmp(attacks[i].name, argv[2]))
            a = &attacks[i];
    if (!a)
        return 2;
    rng = strtoull(argv[3], NULL, 0) * 0x9e3779b97f4a7c15ull + 1;
    signal(SIGPIPE, SIG_IGN);
    struct pl_test_client c;
    if (pl_test_client_connect(argv[1], &c) < 0)
        return 2;
    int r = a->fn(&c);
    if (r < 0) {
        fprintf(stderr, "evil: %s: the attack itself failed or the broker misbehaved\n", a->name);
        return 1;
    }
    if (r == ENDS && !wait_hangup(&c, 5000)) {
        fprintf(stderr, "evil: %s: the broker did not end the session\n", a->name);
        return 1;
    }
    if (r == KEEPS) {
        /* Still served: a normal request completes. */
        static struct pl_test_result res;
        if (pl_test_client_generate(&c, 999, NULL, 0, "Once", 4, true, true) < 0 ||
            pl_test_client_collect(&c, 999, &res, 10000, NULL, NULL) < 0 || res.error_code != 0 ||
            res.n_ids != 4) {
            if (a->fn != a_never_reads) {
                fprintf(stderr, "evil: %s: the session no longer works\n", a->name);
                return 1;
            }
        }
    }
    pl_test_client_close(&c);
    return 0;
}
