/* SPDX-License-Identifier: MIT */
/* Evil-client harness for ipc (STYLE.md §12): a client process scribbles random bytes over its
 * whole shared region while the broker side consumes it and produces into it; another, honest
 * client runs at the same time. Pass = the broker never reads outside the region (the mapping
 * and the record buffer sit between PROT_NONE guard pages), the hostile session ends with
 * -PL_ERR_PROTOCOL, and the honest session is unaffected. Also: death mid-write, doorbell
 * floods and saturation, garbage consumer indices on the completion ring. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "pl/ipc_abi.h"
#include "pl/ipc_doorbell.h"
#include "pl/ipc_region.h"
#include "pl/ipc_ring.h"
#include "pl/pl_err.h"
#include "pl/pl_util.h"

#define MAX_REC 1024u

static uint64_t env_count(const char *name, uint64_t def) {
    const char *s = getenv(name);
    return s && *s ? strtoull(s, NULL, 10) : def;
}

/* ---- Broker-side session with guard pages ---- */

struct session {
    struct pl_ipc_region reg;
    uint8_t *guard_base; /* PROT_NONE | region | PROT_NONE */
    size_t guard_len;
    struct pl_ipc_ring sq, cq;
    int bfd, cfd;
    pid_t child;
    int end; /* 0 running, else the error that ended it */
};

static void session_open(struct session *s, uint32_t sq_bytes, uint32_t cq_bytes) {
    memset(s, 0, sizeof(*s));
    s->reg = (struct pl_ipc_region)PL_IPC_REGION_INIT;
    assert_int_equal(pl_ipc_region_create(&s->reg, sq_bytes, cq_bytes, MAX_REC), 0);
    /* Re-map the region between two inaccessible pages: any read or write outside it faults. */
    long page = sysconf(_SC_PAGESIZE);
    s->guard_len = s->reg.bytes + 2 * (size_t)page;
    s->guard_base = mmap(NULL, s->guard_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(s->guard_base != MAP_FAILED);
    void *mid = mmap(s->guard_base + page, s->reg.bytes, PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_FIXED, s->reg.fd, 0);
    assert_ptr_equal(mid, s->guard_base + page);
    assert_int_equal(munmap(s->reg.base, s->reg.bytes), 0);
    s->reg.base = mid;
    assert_int_equal(pl_ipc_region_rings(&s->reg, PL_IPC_REGION_BROKER, &s->sq, &s->cq), 0);
    assert_int_equal(pl_ipc_doorbell_open(&s->bfd), 0);
    assert_int_equal(pl_ipc_doorbell_open(&s->cfd), 0);
}

static void session_close(struct session *s) {
    if (s->child > 0) {
        (void)kill(s->child, SIGKILL);
        (void)waitpid(s->child, NULL, 0);
    }
    (void)munmap(s->guard_base, s->guard_len);
    s->reg.base = NULL; /* already unmapped with the guard area */
    pl_ipc_region_done(&s->reg);
    close(s->bfd);
    close(s->cfd);
}

/* A record buffer whose last byte is followed by a PROT_NONE page. */
static uint8_t *guarded_buffer(size_t len, void **ret_map, size_t *ret_map_len) {
    long page = sysconf(_SC_PAGESIZE);
    size_t pages = (len + (size_t)page - 1) / (size_t)page + 1;
    uint8_t *m = mmap(NULL, pages * (size_t)page, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(m != MAP_FAILED);
    assert_int_equal(mprotect(m + (pages - 1) * (size_t)page, (size_t)page, PROT_NONE), 0);
    *ret_map = m;
    *ret_map_len = pages * (size_t)page;
    return m + (pages - 1) * (size_t)page - len;
}

static pid_t fork_client(void) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
    return pid;
}

/* Client process: attach to the region through a dup of its fd, like a real client would. */
static void client_attach(struct session *s, struct pl_ipc_region *creg, struct pl_ipc_ring *sq,
                          struct pl_ipc_ring *cq) {
    *creg = (struct pl_ipc_region)PL_IPC_REGION_INIT;
    if (pl_ipc_region_attach(creg, dup(s->reg.fd), 1000) < 0 ||
        pl_ipc_region_rings(creg, PL_IPC_REGION_CLIENT, sq, cq) < 0)
        _exit(20);
}

static void hostile_main(struct session *s, uint64_t seed) {
    struct pl_ipc_region creg;
    struct pl_ipc_ring sq, cq;
    client_attach(s, &creg, &sq, &cq);
    /* Start honest for a while so the broker is mid-stream, then scribble everywhere. */
    for (int i = 0; i < 1000; i++) {
        if (pl_ipc_ring_push(&sq, 1, &i, sizeof(i)) < 0)
            break;
        (void)pl_ipc_doorbell_notify(&sq, s->bfd);
    }
    uint64_t x = seed | 1;
    uint8_t *base = creg.base;
    size_t len = creg.bytes;
    for (;;) {
        uint64_t r = pl_xorshift64s(&x);
        switch (r & 7) {
        case 0: /* a random index value into either ring's control block */
        case 1: {
            const struct pl_ipc_ring_desc *d = (r & 8) ? &creg.sq : &creg.cq;
            uint32_t v = (uint32_t)(pl_xorshift64s(&x));
            if (r & 16)
                v &= ~7u; /* aligned garbage passes the cheap checks */
            memcpy(base + d->ctrl_offset + ((r >> 5) & 3) * 64, &v, sizeof(v));
            break;
        }
        case 2: { /* a plausible record header at a random aligned data position */
            const struct pl_ipc_ring_desc *d = &creg.sq;
            uint64_t off = d->data_offset + ((pl_xorshift64s(&x) % d->data_bytes) & ~7ull);
            uint32_t h[2] = {(uint32_t)(pl_xorshift64s(&x) % (MAX_REC * 2)), (uint32_t)(r >> 32)};
            if (r & 8)
                h[1] = PL_IPC_REC_PAD;
            memcpy(base + off, h, sizeof(h));
            break;
        }
        default: { /* random bytes at a random place anywhere in the region */
            size_t off = (size_t)(pl_xorshift64s(&x) % len);
            size_t n = (size_t)((r >> 8) % 64);
            for (size_t i = 0; i < n && off + i < len; i++)
                base[off + i] = (uint8_t)pl_xorshift64s(&x);
            break;
        }
        }
        if ((r & 0xff) == 0)
            (void)pl_ipc_doorbell_ring(s->bfd);
    }
}

/* Honest client: n records (seq + payload), verifies each echo on cq. */
static void honest_main(struct session *s, uint64_t n) {
    struct pl_ipc_region creg;
    struct pl_ipc_ring sq, cq;
    client_attach(s, &creg, &sq, &cq);
    uint64_t got = 0;
    uint8_t buf[MAX_REC];
    for (uint64_t i = 0; i < n || got < n;) {
        if (i < n) {
            uint8_t rec[64];
            memset(rec, (int)(i & 0xff), sizeof(rec));
            memcpy(rec, &i, 8);
            int rc = pl_ipc_ring_push(&sq, 2, rec, 8 + (uint32_t)(i % 56));
            if (rc == 0) {
                i++;
                if (pl_ipc_doorbell_notify(&sq, s->bfd) < 0)
                    _exit(21);
            } else if (rc != -EAGAIN) {
                _exit(22);
            }
        }
        uint32_t ty, ln;
        int rc;
        while ((rc = pl_ipc_ring_read(&cq, buf, sizeof(buf), &ty, &ln)) == 1) {
            uint64_t seq;
            memcpy(&seq, buf, 8);
            if (seq != got || ln != 8 + (uint32_t)(got % 56) || ty != 3)
                _exit(23);
            got++;
        }
        if (rc < 0 || pl_ipc_doorbell_notify(&cq, s->bfd) < 0)
            _exit(24);
        if (i == n && got < n && pl_ipc_doorbell_wait(&cq, 0, s->cfd, s->bfd, 20000, 10000) < 0)
            _exit(25);
    }
    _exit(0);
}

/* One broker pass over a session: consume what is there, echo it back. Ends the session on
 * the first error. Returns records handled. */
static uint64_t broker_service(struct session *s, uint8_t *buf) {
    uint64_t n = 0;
    if (s->end)
        return 0;
    for (int k = 0; k < 256; k++) {
        /* only take a submission when its echo is sure to fit (backpressure) */
        int rc = pl_ipc_ring_ready(&s->cq, MAX_REC - 8);
        if (rc <= 0) {
            if (rc < 0)
                s->end = rc;
            break;
        }
        uint32_t ty, ln;
        rc = pl_ipc_ring_read(&s->sq, buf, MAX_REC - 8, &ty, &ln);
        if (rc == 0)
            break;
        if (rc < 0) {
            s->end = rc;
            return n;
        }
        rc = pl_ipc_ring_push(&s->cq, 3, buf, ln);
        if (rc < 0) {
            s->end = rc;
            return n;
        }
        n++;
    }
    int rc = pl_ipc_doorbell_notify(&s->sq, s->cfd);
    if (rc == 0)
        rc = pl_ipc_doorbell_notify(&s->cq, s->cfd);
    if (rc < 0)
        s->end = rc;
    return n;
}

static void test_hostile_scribbler_ends_only_its_own_session(void **state) {
    (void)state;
    uint64_t rounds = env_count("PL_IPC_HOSTILE_ROUNDS", 20);
    uint64_t honest_n = env_count("PL_IPC_HOSTILE_RECORDS", 20000);
    void *bmap;
    size_t bmap_len;
    uint8_t *buf = guarded_buffer(MAX_REC - 8, &bmap, &bmap_len);
    for (uint64_t round = 0; round < rounds; round++) {
        struct session evil, good;
        session_open(&evil, 1u << 14, 1u << 13);
        session_open(&good, 1u << 14, 1u << 14);
        evil.child = fork_client();
        if (evil.child == 0)
            hostile_main(&evil, 0x1234567ull + round * 7919);
        good.child = fork_client();
        if (good.child == 0)
            honest_main(&good, honest_n);

        uint64_t evil_records = 0, good_records = 0;
        int status = -1;
        for (;;) {
            evil_records += broker_service(&evil, buf);
            good_records += broker_service(&good, buf);
            assert_int_equal(good.end, 0);
            pid_t w = waitpid(good.child, &status, WNOHANG);
            if (w == good.child) {
                good.child = 0;
                break;
            }
        }
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
        assert_int_equal(good_records, honest_n);
        /* The scribbler must have been caught (it gets as long as it takes). */
        while (!evil.end)
            evil_records += broker_service(&evil, buf);
        assert_int_equal(evil.end, -PL_ERR_PROTOCOL);
        assert_true(pl_ipc_ring_broken(&evil.sq) || pl_ipc_ring_broken(&evil.cq));
        /* sticky: the ended session does nothing more */
        uint32_t ty, ln;
        if (pl_ipc_ring_broken(&evil.sq))
            assert_int_equal(pl_ipc_ring_read(&evil.sq, buf, 8, &ty, &ln), -PL_ERR_PROTOCOL);
        if (pl_ipc_ring_broken(&evil.cq))
            assert_int_equal(pl_ipc_ring_push(&evil.cq, 1, "x", 1), -PL_ERR_PROTOCOL);
        print_message("round %llu: hostile session ended after %llu records\n",
                      (unsigned long long)round, (unsigned long long)evil_records);
        session_close(&evil);
        session_close(&good);
    }
    munmap(bmap, bmap_len);
}

/* A client that dies after writing a record header but before publishing it. */
static void test_hostile_death_mid_write_is_invisible(void **state) {
    (void)state;
    struct session s;
    session_open(&s, 4096, 4096);
    s.child = fork_client();
    if (s.child == 0) {
        struct pl_ipc_region creg;
        struct pl_ipc_ring sq, cq;
        client_attach(&s, &creg, &sq, &cq);
        (void)pl_ipc_ring_push(&sq, 1, "complete", 8);
        (void)pl_ipc_ring_publish(&sq);
        void *dst;
        if (pl_ipc_ring_reserve(&sq, 100, &dst) == 0) {
            memset(dst, 0x5a, 50);
            (void)pl_ipc_ring_commit(&sq, 1, 100); /* committed, never published */
        }
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(s.child, &status, 0), s.child);
    s.child = 0;
    uint8_t buf[256];
    uint32_t ty, ln;
    assert_int_equal(pl_ipc_ring_read(&s.sq, buf, sizeof(buf), &ty, &ln), 1);
    assert_memory_equal(buf, "complete", 8);
    assert_int_equal(pl_ipc_ring_read(&s.sq, buf, sizeof(buf), &ty, &ln), 0);
    assert_false(pl_ipc_ring_broken(&s.sq));
    session_close(&s);
}

/* Floods and saturation of the broker's doorbell, and of the client's doorbell the broker
 * writes: nothing blocks, and a flood is one wake-up. */
static void test_hostile_doorbell_flood_and_saturation(void **state) {
    (void)state;
    struct session s;
    session_open(&s, 4096, 4096);
    for (int i = 0; i < 100000; i++)
        assert_int_equal(pl_ipc_doorbell_ring(s.bfd), 0);
    assert_int_equal(pl_ipc_doorbell_drain(s.bfd), 1);
    assert_int_equal(pl_ipc_doorbell_drain(s.bfd), 0);
    /* the client saturates its own doorbell; the broker's ring must not block */
    uint64_t v = 0xfffffffffffffffeull;
    assert_int_equal(write(s.cfd, &v, sizeof(v)), (ssize_t)sizeof(v));
    atomic_store(
        &((struct pl_ipc_ring_ctrl *)(void *)(s.reg.base + s.reg.cq.ctrl_offset))->cons_flags,
        0xffffffffu); /* garbage flag word: read as "wake me" */
    assert_int_equal(pl_ipc_ring_push(&s.cq, 1, "x", 1), 0);
    assert_int_equal(pl_ipc_doorbell_notify(&s.cq, s.cfd), 0);
    session_close(&s);
}

/* Garbage consumer indices on the completion ring: the broker's producer refuses to trust them
 * (protocol error) or sees a full ring; it never writes outside the data area or loops. */
static void test_hostile_garbage_cons_index_on_cq(void **state) {
    (void)state;
    const uint32_t values[] = {8, 4096, 4104, 0xfffffff8u, 0x7ffffff8u, 5, 0x1000u + 4096};
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        struct session s;
        session_open(&s, 4096, 4096);
        struct pl_ipc_ring_ctrl *ctrl =
            (struct pl_ipc_ring_ctrl *)(void *)(s.reg.base + s.reg.cq.ctrl_offset);
        for (int k = 0; k < 10; k++)
            assert_int_equal(pl_ipc_ring_push(&s.cq, 1, "0123456789abcdef", 16), 0);
        (void)pl_ipc_ring_publish(&s.cq); /* 240 bytes published */
        atomic_store(&ctrl->cons, values[i]);
        int rc = 0, pushes = 0;
        uint8_t junk[1000];
        memset(junk, 0xee, sizeof(junk));
        while (rc == 0 && pushes < 100) {
            rc = pl_ipc_ring_push(&s.cq, 1, junk, sizeof(junk));
            if (rc == 0)
                (void)pl_ipc_ring_publish(&s.cq);
            pushes++;
        }
        /* only the one in-bounds value (8: the client claims 8 bytes consumed) is legal */
        if (values[i] == 8)
            assert_int_equal(rc, -EAGAIN);
        else
            assert_int_equal(rc, -PL_ERR_PROTOCOL);
        session_close(&s);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostile_scribbler_ends_only_its_own_session),
        cmocka_unit_test(test_hostile_death_mid_write_is_invisible),
        cmocka_unit_test(test_hostile_doorbell_flood_and_saturation),
        cmocka_unit_test(test_hostile_garbage_cons_index_on_cq),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
