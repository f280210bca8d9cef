/* SPDX-License-Identifier: MIT */
/* Unit tests for ipc/src/doorbell.c: eventfd ring/drain/sleep, the producer rings only when
 * the consumer asked for it, a saturated counter never blocks the ringer, and the lost-wake-up
 * test: a million sleep/wake cycles between two threads with no hang (watchdog), the same with
 * futex sleeps, a batched stream where both sides sleep on futexes, and one wake per sleep. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cmocka.h>

#include "ipc_test_util.h"
#include "pl/ipc_doorbell.h"
#include "pl/ipc_region.h"
#include "pl/ipc_ring.h"
#include "pl/ipc_stats.h"
#include "pl/pl_err.h"

static void test_doorbell_ring_then_drain(void **state) {
    (void)state;
    int fd;
    assert_int_equal(pl_ipc_doorbell_open(&fd), 0);
    assert_int_equal(pl_ipc_doorbell_drain(fd), 0);
    assert_int_equal(pl_ipc_doorbell_ring(fd), 0);
    assert_int_equal(pl_ipc_doorbell_ring(fd), 0); /* rings coalesce */
    assert_int_equal(pl_ipc_doorbell_drain(fd), 1);
    assert_int_equal(pl_ipc_doorbell_drain(fd), 0);
    assert_int_equal(pl_ipc_doorbell_ring(fd), 0);
    assert_int_equal(pl_ipc_doorbell_sleep(fd, -1), 0); /* already rung: returns at once */
    assert_int_equal(pl_ipc_doorbell_drain(fd), 0);
    assert_int_equal(pl_ipc_doorbell_sleep(fd, 0), -ETIMEDOUT);
    close(fd);
}

static void test_doorbell_saturated_counter_does_not_block(void **state) {
    (void)state;
    int fd;
    assert_int_equal(pl_ipc_doorbell_open(&fd), 0);
    /* A hostile peer pushes the counter to its maximum; our ring must still return. */
    uint64_t v = 0xfffffffffffffffeull;
    assert_int_equal(write(fd, &v, sizeof(v)), (ssize_t)sizeof(v));
    assert_int_equal(pl_ipc_doorbell_ring(fd), 0);
    assert_int_equal(pl_ipc_doorbell_drain(fd), 1);
    close(fd);
}

static void test_doorbell_closed_fd_is_an_error(void **state) {
    (void)state;
    assert_true(pl_ipc_doorbell_ring(-1) < 0);
    assert_true(pl_ipc_doorbell_drain(-1) < 0);
}

/* The producer rings the doorbell only while the consumer has NEED_WAKEUP set. */
static void test_doorbell_notify_rings_only_for_sleeper(void **state) {
    (void)state;
    struct pl_ipc_region reg = PL_IPC_REGION_INIT;
    assert_int_equal(pl_ipc_region_create(&reg, 4096, 4096, 256), 0);
    struct pl_ipc_ring bsq, bcq, csq, ccq;
    assert_int_equal(pl_ipc_region_rings(&reg, PL_IPC_REGION_BROKER, &bsq, &bcq), 0);
    assert_int_equal(pl_ipc_region_rings(&reg, PL_IPC_REGION_CLIENT, &csq, &ccq), 0);
    int bfd, cfd;
    assert_int_equal(pl_ipc_doorbell_open(&bfd), 0);
    assert_int_equal(pl_ipc_doorbell_open(&cfd), 0);

    /* steady stream, consumer awake: no ring */
    for (int i = 0; i < 100; i++) {
        assert_int_equal(pl_ipc_ring_push(&csq, 1, "abcdefgh", 8), 0);
        assert_int_equal(pl_ipc_doorbell_notify(&csq, bfd), 0);
    }
    assert_int_equal(pl_ipc_doorbell_drain(bfd), 0);
    uint8_t b[16];
    uint32_t ty, ln;
    while (pl_ipc_ring_read(&bsq, b, sizeof(b), &ty, &ln) == 1) {
    }
    /* consumer goes to sleep: the next publish rings */
    assert_int_equal(pl_ipc_ring_sleep_prepare(&bsq, 0), 0);
    assert_int_equal(pl_ipc_ring_push(&csq, 1, "abcdefgh", 8), 0);
    assert_int_equal(pl_ipc_doorbell_notify(&csq, bfd), 0);
    assert_int_equal(pl_ipc_doorbell_sleep(bfd, -1), 0);
    pl_ipc_ring_sleep_finish(&bsq);
    assert_int_equal(pl_ipc_ring_read(&bsq, b, sizeof(b), &ty, &ln), 1);

    /* wait with data present returns without sleeping, and publishes our consumption */
    assert_int_equal(pl_ipc_ring_push(&csq, 1, "abcdefgh", 8), 0);
    assert_int_equal(pl_ipc_doorbell_notify(&csq, bfd), 0);
    assert_int_equal(pl_ipc_doorbell_wait(&bsq, 0, bfd, cfd, 0, -1), 0);
    /* an empty ring with a timeout */
    assert_int_equal(pl_ipc_ring_read(&bsq, b, sizeof(b), &ty, &ln), 1);
    assert_int_equal(pl_ipc_doorbell_wait(&bsq, 0, bfd, cfd, 1000, 0), -ETIMEDOUT);
    close(bfd);
    close(cfd);
    pl_ipc_region_done(&reg);
}

/* ---- Lost wake-up: ping-pong where every wait ends in a real sleep ---- */

struct pp {
    struct pl_ipc_region reg;
    struct pl_ipc_ring bsq, bcq, csq, ccq;
    int bfd, cfd;
    uint64_t target_sleeps;
    uint64_t rounds; /* round trips done, set by the client side at the end */
    _Atomic uint64_t progress;
    _Atomic uint64_t sleeps;
    int result;
};

/* Wait with no spin: every empty ring leads to the flag/fence/re-check/sleep path. */
static int wait_counted(struct pp *p, struct pl_ipc_ring *r, int wait_fd, int peer_fd) {
    int rc = pl_ipc_doorbell_notify(r, peer_fd);
    if (rc < 0)
        return rc;
    for (;;) {
        rc = pl_ipc_ring_ready(r, 0);
        if (rc != 0)
            return rc < 0 ? rc : 0;
        rc = pl_ipc_ring_sleep_prepare(r, 0);
        if (rc != 0)
            return rc < 0 ? rc : 0;
        atomic_fetch_add_explicit(&p->sleeps, 1, memory_order_relaxed);
        rc = pl_ipc_doorbell_sleep(wait_fd, -1);
        pl_ipc_ring_sleep_finish(r);
        if (rc < 0)
            return rc;
    }
}

static void *pp_broker(void *arg) {
    struct pp *p = arg;
    uint8_t b[64];
    for (uint64_t i = 0;; i++) {
        uint32_t ty, ln;
        int rc;
        while ((rc = pl_ipc_ring_read(&p->bsq, b, sizeof(b), &ty, &ln)) == 0)
            if ((rc = wait_counted(p, &p->bsq, p->bfd, p->cfd)) < 0)
                break;
        if (rc == 1 && ty == 9)
            break; /* the client is done */
        if (rc < 0 || ln != 8 || memcmp(b, &i, 8) != 0 ||
            pl_ipc_doorbell_notify(&p->bsq, p->cfd) < 0) {
            p->result = -1;
            return NULL;
        }
        if (pl_ipc_ring_push(&p->bcq, 2, b, 8) < 0 || pl_ipc_doorbell_notify(&p->bcq, p->cfd) < 0) {
            p->result = -2;
            return NULL;
        }
    }
    (void)pl_ipc_doorbell_notify(&p->bsq, p->cfd);
    return NULL;
}

static void test_doorbell_no_lost_wakeup_in_a_million_cycles(void **state) {
    (void)state;
    struct pp *p = calloc(1, sizeof(*p));
    assert_non_null(p);
    /* Round trips go on until both sides together really slept target_sleeps times (a wait
     * that finds data on its re-check does not count). */
    p->target_sleeps = pt_env_count("PL_IPC_WAKE_CYCLES", 1000000);
    p->reg = (struct pl_ipc_region)PL_IPC_REGION_INIT;
    assert_int_equal(pl_ipc_region_create(&p->reg, 4096, 4096, 256), 0);
    assert_int_equal(pl_ipc_region_rings(&p->reg, PL_IPC_REGION_BROKER, &p->bsq, &p->bcq), 0);
    assert_int_equal(pl_ipc_region_rings(&p->reg, PL_IPC_REGION_CLIENT, &p->csq, &p->ccq), 0);
    assert_int_equal(pl_ipc_doorbell_open(&p->bfd), 0);
    assert_int_equal(pl_ipc_doorbell_open(&p->cfd), 0);

    struct pt_watchdog w;
    pt_watchdog_start(&w, &p->progress, 10, "sleep/wake ping-pong");
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, pp_broker, p), 0);
    uint8_t b[64];
    uint64_t i;
    for (i = 0; atomic_load_explicit(&p->sleeps, memory_order_relaxed) < p->target_sleeps; i++) {
        assert_int_equal(pl_ipc_ring_push(&p->csq, 1, &i, 8), 0);
        assert_int_equal(pl_ipc_doorbell_notify(&p->csq, p->bfd), 0);
        uint32_t ty, ln;
        int rc;
        while ((rc = pl_ipc_ring_read(&p->ccq, b, sizeof(b), &ty, &ln)) == 0)
            assert_int_equal(wait_counted(p, &p->ccq, p->cfd, p->bfd), 0);
        assert_int_equal(rc, 1);
        assert_memory_equal(b, &i, 8);
        /* hand the space back: a consumer that never publishes starves its producer */
        assert_int_equal(pl_ipc_doorbell_notify(&p->ccq, p->bfd), 0);
        atomic_store_explicit(&p->progress, i + 1, memory_order_relaxed);
    }
    p->rounds = i;
    assert_int_equal(pl_ipc_ring_push(&p->csq, 9, NULL, 0), 0);
    assert_int_equal(pl_ipc_doorbell_notify(&p->csq, p->bfd), 0);
    pthread_join(th, NULL);
    pt_watchdog_stop(&w);
    assert_int_equal(p->result, 0);
    uint64_t sleeps = atomic_load(&p->sleeps);
    print_message("round trips %llu, real sleeps %llu\n", (unsigned long long)p->rounds,
                  (unsigned long long)sleeps);
    assert_true(sleeps >= p->target_sleeps);
    close(p->bfd);
    close(p->cfd);
    pl_ipc_region_done(&p->reg);
    free(p);
}

/* ---- Futex sleeps ---- */

static uint64_t wakes(void) {
    struct pl_ipc_stats st;
    pl_ipc_stats_snapshot(&st);
    return st.wake_syscalls;
}

/* However often the producer publishes while the consumer is still flagged asleep, it pays for
 * one wake-up per sleep: a doorbell once, a futex until a wake reaches a sleeper. */
static void test_doorbell_one_wake_per_sleep(void **state) {
    (void)state;
    struct pl_ipc_region reg = PL_IPC_REGION_INIT;
    assert_int_equal(pl_ipc_region_create(&reg, 4096, 4096, 256), 0);
    assert_true(reg.features & PL_IPC_FEATURE_FUTEX_WAKE);
    struct pl_ipc_ring bsq, bcq, csq, ccq;
    assert_int_equal(pl_ipc_region_rings(&reg, PL_IPC_REGION_BROKER, &bsq, &bcq), 0);
    assert_int_equal(pl_ipc_region_rings(&reg, PL_IPC_REGION_CLIENT, &csq, &ccq), 0);
    int bfd;
    assert_int_equal(pl_ipc_doorbell_open(&bfd), 0);

    assert_int_equal(pl_ipc_ring_sleep_prepare(&bsq, 0), 0);
    uint64_t w0 = wakes();
    for (int i = 0; i < 5; i++) {
        assert_int_equal(pl_ipc_ring_push(&csq, 1, "abcdefgh", 8), 0);
        assert_int_equal(pl_ipc_doorbell_notify(&csq, bfd), 0);
    }
    assert_int_equal(wakes() - w0, 1);
    assert_int_equal(pl_ipc_doorbell_drain(bfd), 1);
    pl_ipc_ring_sleep_finish(&bsq);
    uint8_t b[16];
    uint32_t ty, ln;
    while (pl_ipc_ring_read(&bsq, b, sizeof(b), &ty, &ln) == 1) {
    }
    assert_int_equal(pl_ipc_doorbell_notify(&bsq, -1), 0);

    /* a new sleep is woken again */
    assert_int_equal(pl_ipc_ring_sleep_prepare(&bsq, 0), 0);
    assert_int_equal(pl_ipc_ring_push(&csq, 1, "abcdefgh", 8), 0);
    assert_int_equal(pl_ipc_doorbell_notify(&csq, bfd), 0);
    assert_int_equal(pl_ipc_doorbell_drain(bfd), 1);
    pl_ipc_ring_sleep_finish(&bsq);
    while (pl_ipc_ring_read(&bsq, b, sizeof(b), &ty, &ln) == 1) {
    }

    /* futex sleep that nobody has entered yet: the FUTEX_WAKE reaches no one, so it is not
     * counted as delivered and the next publish wakes again */
    struct pl_ipc_futex f;
    assert_int_equal(pl_ipc_ring_sleep_prepare_futex(&bsq, 0, &f), 0);
    assert_ptr_equal(f.word,
                     &((struct pl_ipc_ring_ctrl *)(void *)(reg.base + reg.sq.ctrl_offset))->prod);
    assert_int_equal(pl_ipc_ring_push(&csq, 1, "abcdefgh", 8), 0);
    assert_int_equal(pl_ipc_ring_publish(&csq), PL_IPC_WAKE_FUTEX);
    assert_int_equal(pl_ipc_ring_push(&csq, 1, "abcdefgh", 8), 0);
    w0 = wakes();
    assert_int_equal(pl_ipc_doorbell_notify(&csq, bfd), 0);
    assert_int_equal(wakes() - w0, 1);
    /* the word moved since prepare: the sleep returns at once */
    assert_int_equal(pl_ipc_doorbell_futex_sleep(&f, -1), 0);
    pl_ipc_ring_sleep_finish(&bsq);
    /* and an unmoved word times out */
    while (pl_ipc_ring_read(&bsq, b, sizeof(b), &ty, &ln) == 1) {
    }
    assert_int_equal(pl_ipc_ring_sleep_prepare_futex(&bsq, 0, &f), 0);
    assert_int_equal(pl_ipc_doorbell_futex_sleep(&f, 1), -ETIMEDOUT);
    pl_ipc_ring_sleep_finish(&bsq);
    assert_int_equal(pl_ipc_doorbell_wait_futex(&bsq, 0, bfd, 1000, 0), -ETIMEDOUT);
    close(bfd);
    pl_ipc_region_done(&reg);
}

/* A blocking doorbell waits and drains in one read. */
static void test_doorbell_blocking_read_drains(void **state) {
    (void)state;
    int fd;
    assert_int_equal(pl_ipc_doorbell_open_blocking(&fd), 0);
    assert_int_equal(pl_ipc_doorbell_ring(fd), 0);
    assert_int_equal(pl_ipc_doorbell_ring(fd), 0);
    assert_int_equal(pl_ipc_doorbell_read(fd), 0);
    close(fd);
    assert_int_equal(pl_ipc_doorbell_open(&fd), 0);
    assert_int_equal(pl_ipc_doorbell_read(fd), -EAGAIN);
    close(fd);
}

/* A stream where the producer publishes in batches and both sides wait with no spin, sleeping
 * in FUTEX_WAIT whenever the ring is empty (consumer) or full (producer): every record
 * arrives in order and nothing hangs (a lost futex wake-up would stop it: watchdog). */
struct fs {
    struct pl_ipc_region reg;
    struct pl_ipc_ring bsq, bcq, csq, ccq;
    uint64_t n;
    _Atomic uint64_t progress;
    int result;
};

static void *fs_consumer(void *arg) {
    struct fs *f = arg;
    uint8_t b[256];
    for (uint64_t i = 0; i < f->n; i++) {
        uint32_t ty, ln;
        int rc;
        while ((rc = pl_ipc_ring_read(&f->bsq, b, sizeof(b), &ty, &ln)) == 0)
            if ((rc = pl_ipc_doorbell_wait_futex(&f->bsq, 0, -1, 0, -1)) < 0)
                break;
        uint32_t want = 8 + (uint32_t)(i % 120);
        uint8_t exp[256];
        pt_fill(exp, want, i);
        if (rc != 1 || ln != want || memcmp(b, exp, want) != 0 ||
            pl_ipc_doorbell_notify_batch(&f->bsq, -1, 512) < 0) {
            f->result = -1;
            return NULL;
        }
        atomic_store_explicit(&f->progress, i, memory_order_relaxed);
    }
    (void)pl_ipc_doorbell_notify(&f->bsq, -1);
    return NULL;
}

static void test_doorbell_futex_stream_never_loses_a_wakeup(void **state) {
    (void)state;
    struct fs *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->n = pt_env_count("PL_IPC_THREAD_RECORDS", 1000000);
    f->reg = (struct pl_ipc_region)PL_IPC_REGION_INIT;
    assert_int_equal(pl_ipc_region_create(&f->reg, 1024, 1024, 256), 0);
    assert_int_equal(pl_ipc_region_rings(&f->reg, PL_IPC_REGION_BROKER, &f->bsq, &f->bcq), 0);
    assert_int_equal(pl_ipc_region_rings(&f->reg, PL_IPC_REGION_CLIENT, &f->csq, &f->ccq), 0);
    struct pt_watchdog w;
    pt_watchdog_start(&w, &f->progress, 10, "futex stream");
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, fs_consumer, f), 0);
    uint8_t b[256];
    for (uint64_t i = 0; i < f->n; i++) {
        uint32_t len = 8 + (uint32_t)(i % 120);
        pt_fill(b, len, i);
        int rc;
        while ((rc = pl_ipc_ring_push(&f->csq, 1, b, len)) == -EAGAIN)
            assert_int_equal(pl_ipc_doorbell_wait_futex(&f->csq, len, -1, 0, -1), 0);
        assert_int_equal(rc, 0);
        assert_int_equal(pl_ipc_doorbell_notify_batch(&f->csq, -1, 256), 0);
    }
    assert_int_equal(pl_ipc_doorbell_notify(&f->csq, -1), 0);
    pthread_join(th, NULL);
    pt_watchdog_stop(&w);
    assert_int_equal(f->result, 0);
    pl_ipc_region_done(&f->reg);
    free(f);
}

/* notify_futex never touches an fd: a doorbell-only sleeper gets a FUTEX_WAKE on the word
 * (one per sleep), a futex sleeper is woken and counted once, and a peer that saturated and
 * made blocking the eventfd it shares cannot matter (no write happens at all). */
struct nf {
    struct pl_ipc_futex f;
    _Atomic int tid;
    int rc;
};

static void *nf_sleeper(void *arg) {
    struct nf *n = arg;
    atomic_store(&n->tid, (int)gettid());
    n->rc = pl_ipc_doorbell_futex_sleep(&n->f, 10000);
    return NULL;
}

/* Wait (up to 2 s) until thread tid sleeps in the kernel. */
static bool thread_sleeps(int tid) {
    char path[64], buf[256];
    (void)snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
    for (int i = 0; i < 2000; i++) {
        FILE *f = fopen(path, "r");
        if (f) {
            size_t n = fread(buf, 1, sizeof(buf) - 1, f);
            fclose(f);
            buf[n] = '\0';
            const char *p = strrchr(buf, ')');
            if (p && p[1] == ' ' && p[2] == 'S')
                return true;
        }
        usleep(1000);
    }
    return false;
}

static void test_doorbell_notify_futex_wakes_without_fds(void **state) {
    (void)state;
    struct pl_ipc_region reg = PL_IPC_REGION_INIT;
    assert_int_equal(pl_ipc_region_create(&reg, 4096, 4096, 256), 0);
    struct pl_ipc_ring bsq, bcq, csq, ccq;
    assert_int_equal(pl_ipc_region_rings(&reg, PL_IPC_REGION_BROKER, &bsq, &bcq), 0);
    assert_int_equal(pl_ipc_region_rings(&reg, PL_IPC_REGION_CLIENT, &csq, &ccq), 0);
    uint8_t b[16];
    uint32_t ty, ln;

    /* nobody asleep: no syscall */
    uint64_t w0 = wakes();
    assert_int_equal(pl_ipc_ring_push(&bcq, 1, "abcdefgh", 8), 0);
    assert_int_equal(pl_ipc_doorbell_notify_futex(&bcq), 0);
    assert_int_equal(wakes() - w0, 0);
    while (pl_ipc_ring_read(&ccq, b, sizeof(b), &ty, &ln) == 1) {
    }
    assert_int_equal(pl_ipc_doorbell_notify(&ccq, -1), 0);

    /* doorbell-only sleep: one FUTEX_WAKE for the whole sleep, no eventfd exists at all */
    assert_int_equal(pl_ipc_ring_sleep_prepare(&ccq, 0), 0);
    w0 = wakes();
    for (int i = 0; i < 3; i++) {
        assert_int_equal(pl_ipc_ring_push(&bcq, 1, "abcdefgh", 8), 0);
        assert_int_equal(pl_ipc_doorbell_notify_futex(&bcq), 0);
    }
    assert_int_equal(wakes() - w0, 1);
    pl_ipc_ring_sleep_finish(&ccq);
    while (pl_ipc_ring_read(&ccq, b, sizeof(b), &ty, &ln) == 1) {
    }
    assert_int_equal(pl_ipc_doorbell_notify(&ccq, -1), 0);

    /* a futex sleeper in FUTEX_WAIT is woken, and later publishes of the same sleep cost
     * nothing (the wake counted as delivered) */
    struct nf n = {.rc = 1};
    assert_int_equal(pl_ipc_ring_sleep_prepare_futex(&ccq, 0, &n.f), 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, nf_sleeper, &n), 0);
    while (atomic_load(&n.tid) == 0)
        usleep(100);
    assert_true(thread_sleeps(atomic_load(&n.tid)));
    w0 = wakes();
    assert_int_equal(pl_ipc_ring_push(&bcq, 1, "abcdefgh", 8), 0);
    assert_int_equal(pl_ipc_doorbell_notify_futex(&bcq), 0);
    pthread_join(th, NULL);
    assert_int_equal(n.rc, 0);
    assert_int_equal(pl_ipc_ring_push(&bcq, 1, "abcdefgh", 8), 0);
    assert_int_equal(pl_ipc_doorbell_notify_futex(&bcq), 0);
    assert_int_equal(wakes() - w0, 1);
    pl_ipc_ring_sleep_finish(&ccq);
    pl_ipc_region_done(&reg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_doorbell_notify_futex_wakes_without_fds),
        cmocka_unit_test(test_doorbell_ring_then_drain),
        cmocka_unit_test(test_doorbell_saturated_counter_does_not_block),
        cmocka_unit_test(test_doorbell_closed_fd_is_an_error),
        cmocka_unit_test(test_doorbell_notify_rings_only_for_sleeper),
        cmocka_unit_test(test_doorbell_no_lost_wakeup_in_a_million_cycles),
        cmocka_unit_test(test_doorbell_one_wake_per_sleep),
        cmocka_unit_test(test_doorbell_blocking_read_drains),
        cmocka_unit_test(test_doorbell_futex_stream_never_loses_a_wakeup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
