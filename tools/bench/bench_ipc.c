/* SPDX-License-Identifier: MIT */
/* picolm-bench ipc: round-trip latency of a 64-byte message between two processes pinned to
 * different CPUs over (a) the shared-memory ring with both sides polling, (b) the ring with
 * spin-then-sleep doorbells, (c) the ring with sleeping waiters (no spin), and (d) a
 * SOCK_SEQPACKET socketpair measured in the same run as the baseline; then one-way ring
 * throughput for 64 B and 4 KiB records and the syscalls each side makes per streamed record. */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "pl/ipc_doorbell.h"
#include "pl/ipc_region.h"
#include "pl/ipc_ring.h"
#include "pl/pl_err.h"

#define MSG_BYTES 64u
#define TYPE_DATA 1u
#define TYPE_STOP 2u
#define WAIT_POLL UINT64_MAX /* spin budget meaning "never sleep" */

struct opts {
    bool json;
    uint64_t rtt_iters;   /* polling and spin modes */
    uint64_t sleep_iters; /* sleeping modes and SOCK_SEQPACKET */
    uint64_t spin_ns;
    uint64_t n64, n4k;    /* streamed records */
};

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cpu_a = -1, cpu_b = -1;

static void pick_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) < 0)
        return;
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &set))
            continue;
        if (cpu_a < 0)
            cpu_a = c;
        else if (cpu_b < 0)
            cpu_b = c;
    }
}

static void pin(int cpu) {
    if (cpu < 0)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    (void)sched_setaffinity(0, sizeof(set), &set);
}

/* ---- A session: region, rings on both sides, two doorbells ---- */

struct session {
    struct pl_ipc_region reg;
    struct pl_ipc_ring bsq, bcq, csq, ccq;
    int bfd, cfd;
};

static int session_open(struct session *s, uint32_t ring_bytes, uint32_t max_rec) {
    s->reg = (struct pl_ipc_region)PL_IPC_REGION_INIT;
    int r = pl_ipc_region_create(&s->reg, ring_bytes, ring_bytes, max_rec);
    if (r < 0)
        return r;
    /* Both processes see the same mapping after fork; each uses only its own ring ends. */
    if ((r = pl_ipc_region_rings(&s->reg, PL_IPC_REGION_BROKER, &s->bsq, &s->bcq)) < 0 ||
        (r = pl_ipc_region_rings(&s->reg, PL_IPC_REGION_CLIENT, &s->csq, &s->ccq)) < 0 ||
        (r = pl_ipc_doorbell_open(&s->bfd)) < 0 || (r = pl_ipc_doorbell_open(&s->cfd)) < 0)
        return r;
    return 0;
}

static void session_close(struct session *s) {
    pl_ipc_region_done(&s->reg);
    close(s->bfd);
    close(s->cfd);
}

/* Wait until r is ready: spin forever (WAIT_POLL) or spin_ns then sleep on wait_fd. */
static int wait_ready(struct pl_ipc_ring *r, uint32_t need, int wait_fd, int peer_fd,
                      uint64_t spin_ns) {
    if (spin_ns == WAIT_POLL) {
        int rc = pl_ipc_doorbell_notify(r, peer_fd);
        while (rc == 0)
            rc = pl_ipc_ring_ready(r, need);
        return rc < 0 ? rc : 0;
    }
    return pl_ipc_doorbell_wait(r, need, wait_fd, peer_fd, spin_ns, -1);
}

static pid_t spawn(void) {
    pid_t pid = fork();
    if (pid == 0) {
        (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
        pin(cpu_b);
    }
    return pid;
}

static int reap(pid_t pid) {
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return -ECHILD;
    return WEXITSTATUS(status) == 0 ? 0 : -EPROTO;
}

/* ---- Round trips ---- */

struct pct {
    double p50, p99, p999;
};

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static struct pct percentiles(uint64_t *v, uint64_t n) {
    qsort(v, n, sizeof(*v), cmp_u64);
    struct pct p = {
        .p50 = (double)v[n / 2], .p99 = (double)v[n * 99 / 100], .p999 = (double)v[n * 999 / 1000]};
    return p;
}

/* Echo server on the broker ends: read each record from sq, write it back on cq. */
static void ring_echo_main(struct session *s, uint64_t spin_ns) {
    uint8_t buf[MSG_BYTES];
    for (;;) {
        uint32_t ty, ln;
        int rc;
        while ((rc = pl_ipc_ring_read(&s->bsq, buf, sizeof(buf), &ty, &ln)) == 0)
            if (wait_ready(&s->bsq, 0, s->bfd, s->cfd, spin_ns) < 0)
                _exit(2);
        if (rc < 0)
            _exit(3);
        if (ty == TYPE_STOP)
            _exit(0);
        if (pl_ipc_ring_push(&s->bcq, ty, buf, ln) < 0 || pl_ipc_doorbell_notify(&s->bcq, s->cfd) < 0 ||
            pl_ipc_doorbell_notify(&s->bsq, s->cfd) < 0)
            _exit(4);
    }
}

static int ring_rtt(uint64_t spin_ns, uint64_t iters, struct pct *ret) {
    struct session s;
    int r = session_open(&s, 1u << 16, 1024);
    if (r < 0)
        return r;
    uint64_t *lat = calloc(iters, sizeof(*lat));
    if (!lat)
        return -ENOMEM;
    pid_t pid = spawn();
    if (pid < 0)
        return -errno;
    if (pid == 0)
        ring_echo_main(&s, spin_ns);

    uint8_t msg[MSG_BYTES], buf[MSG_BYTES];
    memset(msg, 0x42, sizeof(msg));
    uint64_t warm = iters / 10 + 100;
    for (uint64_t i = 0; i < warm + iters && r == 0; i++) {
        uint64_t t0 = now_ns();
        r = pl_ipc_ring_push(&s.csq, TYPE_DATA, msg, sizeof(msg));
        if (r == 0)
            r = pl_ipc_doorbell_notify(&s.csq, s.bfd);
        uint32_t ty, ln;
        int rc = 0;
        while (r == 0 && (rc = pl_ipc_ring_read(&s.ccq, buf, sizeof(buf), &ty, &ln)) == 0)
            r = wait_ready(&s.ccq, 0, s.cfd, s.bfd, spin_ns);
        if (r == 0 && rc < 0)
            r = rc;
        if (r == 0)
            r = pl_ipc_doorbell_notify(&s.ccq, s.bfd);
        if (i >= warm)
            lat[i - warm] = now_ns() - t0;
    }
    if (r == 0)
        r = pl_ipc_ring_push(&s.csq, TYPE_STOP, NULL, 0);
    if (r == 0)
        r = pl_ipc_doorbell_notify(&s.csq, s.bfd);
    int rr = reap(pid);
    if (r == 0)
        r = rr;
    if (r == 0)
        *ret = percentiles(lat, iters);
    free(lat);
    session_close(&s);
    return r;
}

static int seqpacket_rtt(uint64_t iters, struct pct *ret) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return -errno;
    uint64_t *lat = calloc(iters, sizeof(*lat));
    if (!lat)
        return -ENOMEM;
    pid_t pid = spawn();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        close(sv[0]); /* else the parent's close never reaches us as EOF */
        uint8_t buf[MSG_BYTES];
        for (;;) {
            ssize_t n = read(sv[1], buf, sizeof(buf));
            if (n <= 0)
                _exit(n == 0 ? 0 : 2);
            if (write(sv[1], buf, (size_t)n) != n)
                _exit(3);
        }
    }
    close(sv[1]);
    uint8_t msg[MSG_BYTES];
    memset(msg, 0x42, sizeof(msg));
    int r = 0;
    uint64_t warm = iters / 10 + 100;
    for (uint64_t i = 0; i < warm + iters; i++) {
        uint64_t t0 = now_ns();
        if (write(sv[0], msg, sizeof(msg)) != (ssize_t)sizeof(msg) ||
            read(sv[0], msg, sizeof(msg)) != (ssize_t)sizeof(msg)) {
            r = -EIO;
            break;
        }
        if (i >= warm)
            lat[i - warm] = now_ns() - t0;
    }
    close(sv[0]);
    int rr = reap(pid);
    if (r == 0)
        r = rr;
    if (r == 0)
        *ret = percentiles(lat, iters);
    free(lat);
    return r;
}

/* ---- One-way streaming and syscall counts ---- */

/* read/write-family syscalls (from /proc/self/io) and voluntary context switches (each one is
 * a blocking poll on a doorbell): together they bound the syscalls made on the data path. */
struct sysc {
    uint64_t rw, vcsw;
};

static struct sysc sysc_now(void) {
    struct sysc s = {0, 0};
    FILE *f = fopen("/proc/self/io", "re");
    if (f) {
        char line[128];
        while (fgets(line, sizeof(line), f)) {
            unsigned long long v;
            if (sscanf(line, "syscr: %llu", &v) == 1 || sscanf(line, "syscw: %llu", &v) == 1)
                s.rw += v;
        }
        fclose(f);
    }
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        s.vcsw = (uint64_t)ru.ru_nvcsw;
    return s;
}

/* Syscalls between two samples, minus what taking a sample itself costs. */
static uint64_t sysc_delta(struct sysc a, struct sysc b, uint64_t overhead) {
    uint64_t d = (b.rw - a.rw) + (b.vcsw - a.vcsw);
    return d > overhead ? d - overhead : 0;
}

static uint64_t sysc_overhead(void) {
    struct sysc a = sysc_now(), b = sysc_now();
    return (b.rw - a.rw) + (b.vcsw - a.vcsw);
}

struct stream_result {
    double rec_per_s, gb_per_s;
    double prod_sys_per_rec, cons_sys_per_rec;
    uint64_t prod_sys, cons_sys;
};

struct shared_out {
    uint64_t cons_sys;
    uint64_t checksum;
};

static int stream(uint64_t n, uint32_t len, uint64_t spin_ns, struct stream_result *ret) {
    struct session s;
    int r = session_open(&s, 1u << 20, 16384);
    if (r < 0)
        return r;
    struct shared_out *out = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (out == MAP_FAILED)
        return -errno;
    uint64_t ovh = sysc_overhead();
    pid_t pid = spawn();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        /* consumer: copy every record out (as the broker must), publish space in batches */
        uint8_t *buf = malloc(16384);
        uint64_t sum = 0;
        struct sysc a = {0, 0};
        for (uint64_t i = 0; i < n; i++) {
            uint32_t ty, ln;
            int rc;
            while ((rc = pl_ipc_ring_read(&s.bsq, buf, 16384, &ty, &ln)) == 0)
                if (wait_ready(&s.bsq, 0, s.bfd, s.cfd, spin_ns) < 0)
                    _exit(2);
            if (rc < 0 || ln != len)
                _exit(3);
            if (i == n / 10) /* steady state: count from here */
                a = sysc_now();
            sum += buf[0] + buf[ln - 1];
            if ((i & 63) == 63 && pl_ipc_doorbell_notify(&s.bsq, s.cfd) < 0)
                _exit(4);
        }
        struct sysc b = sysc_now();
        out->cons_sys = sysc_delta(a, b, ovh);
        out->checksum = sum;
        if (pl_ipc_doorbell_notify(&s.bsq, s.cfd) < 0 ||
            pl_ipc_ring_push(&s.bcq, TYPE_STOP, NULL, 0) < 0 ||
            pl_ipc_doorbell_notify(&s.bcq, s.cfd) < 0)
            _exit(5);
        _exit(0);
    }
    uint8_t *src = malloc(len);
    memset(src, 0x33, len);
    uint64_t t0 = now_ns();
    struct sysc a = {0, 0};
    for (uint64_t i = 0; i < n && r == 0; i++) {
        void *dst;
        while ((r = pl_ipc_ring_reserve(&s.csq, len, &dst)) == -EAGAIN)
            if ((r = wait_ready(&s.csq, len, s.cfd, s.bfd, spin_ns)) < 0)
                break;
        if (r < 0)
            break;
        memcpy(dst, src, len);
        r = pl_ipc_ring_commit(&s.csq, TYPE_DATA, len);
        if (i == n / 10)
            a = sysc_now();
        if (r == 0 && (i & 31) == 31)
            r = pl_ipc_doorbell_notify(&s.csq, s.bfd);
    }
    struct sysc b = sysc_now();
    if (r == 0)
        r = pl_ipc_doorbell_notify(&s.csq, s.bfd);
    /* the consumer's STOP record marks the moment the last record was copied out */
    uint8_t tmp[8];
    uint32_t ty, ln;
    int rc = 0;
    while (r == 0 && (rc = pl_ipc_ring_read(&s.ccq, tmp, sizeof(tmp), &ty, &ln)) == 0)
        r = wait_ready(&s.ccq, 0, s.cfd, s.bfd, spin_ns);
    uint64_t t1 = now_ns();
    int rr = reap(pid);
    if (r == 0)
        r = rc < 0 ? rc : rr;
    if (r == 0) {
        double sec = (double)(t1 - t0) / 1e9;
        uint64_t steady = n - n / 10;
        ret->rec_per_s = (double)n / sec;
        ret->gb_per_s = (double)n * len / sec / 1e9;
        ret->prod_sys = sysc_delta(a, b, ovh);
        ret->cons_sys = out->cons_sys;
        ret->prod_sys_per_rec = (double)ret->prod_sys / (double)steady;
        ret->cons_sys_per_rec = (double)ret->cons_sys / (double)steady;
    }
    free(src);
    munmap(out, 4096);
    session_close(&s);
    return r;
}

/* ---- Driver ---- */

static void usage(void) {
    printf("usage: picolm-bench ipc [--json] [--iters N] [--sleep-iters N] [--spin-us U]\n"
           "                        [--records64 N] [--records4k N]\n");
}

static bool parse_u64(const char *s, uint64_t *ret) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || v == 0)
        return false;
    *ret = v;
    return true;
}

int bench_ipc_main(int argc, char **argv) {
    struct opts o = {.rtt_iters = 200000,
                     .sleep_iters = 20000,
                     .spin_ns = 5000,
                     .n64 = 20000000,
                     .n4k = 1000000};
    for (int i = 1; i < argc; i++) {
        uint64_t v;
        if (!strcmp(argv[i], "--json")) {
            o.json = true;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage();
            return 0;
        } else if (i + 1 < argc && parse_u64(argv[i + 1], &v) &&
                   (!strcmp(argv[i], "--iters") || !strcmp(argv[i], "--sleep-iters") ||
                    !strcmp(argv[i], "--spin-us") || !strcmp(argv[i], "--records64") ||
                    !strcmp(argv[i], "--records4k"))) {
            if (!strcmp(argv[i], "--iters"))
                o.rtt_iters = v;
            else if (!strcmp(argv[i], "--sleep-iters"))
                o.sleep_iters = v;
            else if (!strcmp(argv[i], "--spin-us"))
                o.spin_ns = v * 1000;
            else if (!strcmp(argv[i], "--records64"))
                o.n64 = v;
            else
                o.n4k = v;
            i++;
        } else {
            fprintf(stderr, "picolm-bench ipc: bad argument '%.64s'\n", argv[i]);
            usage();
            return 2;
        }
    }
    pick_cpus();
    pin(cpu_a);

    struct pct poll, spin, sleep, sock;
    struct stream_result s64, s4k;
    int r;
    const char *step = "seqpacket";
    if ((r = seqpacket_rtt(o.sleep_iters, &sock)) < 0 ||
        (step = "ring polling", r = ring_rtt(WAIT_POLL, o.rtt_iters, &poll)) < 0 ||
        (step = "ring spin-then-sleep", r = ring_rtt(o.spin_ns, o.rtt_iters, &spin)) < 0 ||
        (step = "ring sleeping", r = ring_rtt(0, o.sleep_iters, &sleep)) < 0 ||
        (step = "stream 64B", r = stream(o.n64, 64, o.spin_ns, &s64)) < 0 ||
        (step = "stream 4KiB", r = stream(o.n4k, 4096, o.spin_ns, &s4k)) < 0) {
        fprintf(stderr, "picolm-bench ipc: %s failed: %s\n", step, pl_strerror(r));
        return 1;
    }

    double base = sock.p50;
    bool t_poll = poll.p50 <= base / 20, t_spin = spin.p50 <= base / 20, t_sleep = sleep.p50 <= base;
    bool t_sys = s64.prod_sys == 0 && s64.cons_sys == 0 && s4k.prod_sys == 0 && s4k.cons_sys == 0;
    if (o.json) {
        printf("{\"cpus\":[%d,%d],\"message_bytes\":%u,\"spin_us\":%.1f,", cpu_a, cpu_b, MSG_BYTES,
               (double)o.spin_ns / 1000);
        printf("\"rtt_ns\":{");
        const struct {
            const char *name;
            struct pct *p;
        } rows[] = {{"ring_polling", &poll},
                    {"ring_spin_then_sleep", &spin},
                    {"ring_sleeping", &sleep},
                    {"seqpacket", &sock}};
        for (size_t i = 0; i < 4; i++)
            printf("%s\"%s\":{\"p50\":%.0f,\"p99\":%.0f,\"p99_9\":%.0f}", i ? "," : "",
                   rows[i].name, rows[i].p->p50, rows[i].p->p99, rows[i].p->p999);
        printf("},\"p50_ratio_to_seqpacket\":{\"ring_polling\":%.4f,\"ring_spin_then_sleep\":%.4f,"
               "\"ring_sleeping\":%.4f},",
               poll.p50 / base, spin.p50 / base, sleep.p50 / base);
        printf("\"stream\":{\"64B\":{\"records_per_s\":%.0f,\"gb_per_s\":%.3f,"
               "\"producer_syscalls_per_record\":%.6f,\"consumer_syscalls_per_record\":%.6f},"
               "\"4KiB\":{\"records_per_s\":%.0f,\"gb_per_s\":%.3f,"
               "\"producer_syscalls_per_record\":%.6f,\"consumer_syscalls_per_record\":%.6f}},",
               s64.rec_per_s, s64.gb_per_s, s64.prod_sys_per_rec, s64.cons_sys_per_rec,
               s4k.rec_per_s, s4k.gb_per_s, s4k.prod_sys_per_rec, s4k.cons_sys_per_rec);
        printf("\"targets\":{\"polling_p50_le_1_20_seqpacket\":%s,\"spin_p50_le_1_20_seqpacket\":%s,"
               "\"sleeping_p50_le_seqpacket\":%s,\"zero_syscalls_streaming\":%s}}\n",
               t_poll ? "true" : "false", t_spin ? "true" : "false", t_sleep ? "true" : "false",
               t_sys ? "true" : "false");
    } else {
        printf("picolm-bench ipc: 64-byte round trips, processes pinned to CPUs %d and %d\n",
               cpu_a, cpu_b);
        printf("  %-26s %9s %9s %9s %12s\n", "round trip (ns)", "p50", "p99", "p99.9",
               "p50/seqpkt");
        printf("  %-26s %9.0f %9.0f %9.0f %12.3f  %s\n", "ring, both polling", poll.p50,
               poll.p99, poll.p999, poll.p50 / base, t_poll ? "(target <= 0.05: ok)" : "(target <= 0.05: MISSED)");
        printf("  %-26s %9.0f %9.0f %9.0f %12.3f  %s\n", "ring, spin then sleep", spin.p50,
               spin.p99, spin.p999, spin.p50 / base, t_spin ? "(target <= 0.05: ok)" : "(target <= 0.05: MISSED)");
        printf("  %-26s %9.0f %9.0f %9.0f %12.3f  %s\n", "ring, sleeping waiters", sleep.p50,
               sleep.p99, sleep.p999, sleep.p50 / base, t_sleep ? "(target <= 1.0: ok)" : "(target <= 1.0: MISSED)");
        printf("  %-26s %9.0f %9.0f %9.0f %12.3f\n", "SOCK_SEQPACKET", sock.p50, sock.p99,
               sock.p999, 1.0);
        printf("  one-way stream (spin %.1f us then sleep):\n", (double)o.spin_ns / 1000);
        printf("    64 B records:  %6.1f M records/s  %6.2f GB/s  syscalls/record producer %.6f consumer %.6f\n",
               s64.rec_per_s / 1e6, s64.gb_per_s, s64.prod_sys_per_rec, s64.cons_sys_per_rec);
        printf("    4 KiB records: %6.2f M records/s  %6.2f GB/s  syscalls/record producer %.6f consumer %.6f\n",
               s4k.rec_per_s / 1e6, s4k.gb_per_s, s4k.prod_sys_per_rec, s4k.cons_sys_per_rec);
        printf("  (syscalls counted as read/write-family calls from /proc/self/io plus voluntary\n"
               "   context switches from getrusage, over the steady 90%% of each stream)\n");
    }
    return 0;
}
