/* SPDX-License-Identifier: MIT */
/* picolmd's weights on 2 MiB hugetlb pages, end to end. Machines without reserved huge pages
 * (CI's among them) never take that path otherwise, so this test reserves them itself: it
 * raises vm.nr_hugepages by what tools/hugepages-for-model.sh says the model needs, and puts
 * the old value back when it ends, failed or not.
 *   - hugepages = auto takes them: status reports "hugetlb", the mapping is all
 *     Private_Hugetlb in smaps, the pool's free count drops by the pages used and comes back
 *     when the daemon exits; the tokens equal those of the same daemon on THP.
 *   - one page short: MAP_HUGETLB fails at mmap (the pages are reserved then, never at a
 *     fault), the daemon falls back to THP, says why, and answers the same.
 * Needs root and a writable /proc/sys/vm/nr_hugepages with 2 MiB default pages; exits 77
 * (skipped) otherwise, or when the kernel cannot find the pages (fragmented memory).
 * Registered RUN_SERIAL: another test's daemon would take the pages. */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon_harness.h"
#include "pl_test_client.h"

#define NR_PATH "/proc/sys/vm/nr_hugepages"
#define PAGE_2M (2ull << 20)
#define N_GEN 16

static char model[4096];
static long orig_pages = -1; /* vm.nr_hugepages before the test; -1: untouched */
static long need_pages;      /* the script's count for the model */
static uint64_t used_pages;  /* pages the daemon really took (first test) */
static int32_t thp_ids[N_GEN];
static bool no_pages;                  /* the kernel could not find them: skipped */
static struct pl_test_daemon *running; /* a daemon a failed assertion left behind */

static long read_long(const char *path) {
    FILE *f = fopen(path, "r");
    long v = -1;
    if (!f)
        return -1;
    if (fscanf(f, "%ld", &v) != 1)
        v = -1;
    (void)fclose(f);
    return v;
}

static int write_pages(long n) {
    FILE *f = fopen(NR_PATH, "w");
    if (!f)
        return -errno;
    int r = fprintf(f, "%ld\n", n) > 0 ? 0 : -EIO;
    if (fclose(f) != 0 && r == 0)
        r = -errno;
    return r;
}

/* A /proc/meminfo field ("HugePages_Free", "Hugepagesize"), -1 when missing. */
static long meminfo(const char *key) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    long v = -1;
    size_t n = strlen(key);
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, key, n) && line[n] == ':') {
            v = strtol(line + n + 1, NULL, 10);
            break;
        }
    (void)fclose(f);
    return v;
}

static void restore_pages(void) {
    if (orig_pages >= 0 && write_pages(orig_pages) < 0)
        fprintf(stderr, "test_hugetlb: cannot restore vm.nr_hugepages to %ld\n", orig_pages);
}

/* Reserve orig + n pages; false when the kernel found fewer (the old value is back then). */
static bool reserve(long n) {
    assert_int_equal(write_pages(orig_pages + n), 0);
    if (read_long(NR_PATH) >= orig_pages + n)
        return true;
    restore_pages();
    return false;
}

/* The daemon's residency (backing, reason, bytes) into the caller's copies. */
struct residency {
    char backing[32], reason[256];
    uint64_t mapped, hugetlb, address;
};

static void residency(const struct pl_test_daemon *d, struct residency *ret) {
    Picolm__Admin__V1__AdminResponse *resp = NULL;
    assert_int_equal(pl_test_admin_status(d->dir, &resp), 0);
    assert_non_null(resp->status);
    const Picolm__Admin__V1__Residency *r = resp->status->residency;
    assert_non_null(r);
    (void)snprintf(ret->backing, sizeof(ret->backing), "%s", r->backing);
    (void)snprintf(ret->reason, sizeof(ret->reason), "%s", r->backing_reason);
    ret->mapped = r->bytes_mapped;
    ret->hugetlb = r->bytes_hugetlb;
    ret->address = r->address;
    picolm__admin__v1__admin_response__free_unpacked(resp, NULL);
}

/* N_GEN greedy tokens of a fixed prompt. */
static void generate(const struct pl_test_daemon *d, int32_t *ids) {
    struct pl_test_client c;
    static struct pl_test_result res;
    assert_int_equal(pl_test_client_connect(d->dir, &c), 0);
    assert_int_equal(
        pl_test_client_generate(&c, 1, NULL, 0, "Once upon a time there was", N_GEN, true, true),
        0);
    assert_int_equal(pl_test_client_collect(&c, 1, &res, 60000, NULL, NULL), 0);
    pl_test_client_close(&c);
    assert_int_equal(res.error_code, 0);
    assert_int_equal(res.n_ids, N_GEN);
    memcpy(ids, res.ids, sizeof(int32_t) * N_GEN);
}

static void start(struct pl_test_daemon *d, const char *const *extra) {
    assert_int_equal(pl_test_daemon_start(d, model, extra), 0);
    running = d;
}

static void stop(struct pl_test_daemon *d) {
    assert_int_equal(pl_test_daemon_stop(d), 0);
    pl_test_daemon_done(d);
    running = NULL;
}

static void test_hugetlb_backs_the_weights(void **state) {
    (void)state;
    static struct pl_test_daemon d; /* static: `running` may outlive the test */
    struct residency r;
    int32_t ids[N_GEN];

    /* Reference: the same daemon on THP. */
    const char *thp[] = {"--hugepages", "thp", NULL};
    start(&d, thp);
    residency(&d, &r);
    assert_string_not_equal(r.backing, "hugetlb");
    generate(&d, thp_ids);
    stop(&d);

    if (!reserve(need_pages)) {
        print_message("[  SKIP    ] the kernel found fewer than %ld huge pages\n", need_pages);
        no_pages = true;
        skip();
    }
    const long free0 = meminfo("HugePages_Free");
    start(&d, NULL);
    residency(&d, &r);
    print_message("[  INFO    ] %s: %s\n", r.backing, r.reason);
    assert_string_equal(r.backing, "hugetlb");
    assert_true(r.hugetlb > 0 && r.hugetlb % PAGE_2M == 0);
    assert_int_equal(r.hugetlb, r.mapped);
    used_pages = r.hugetlb / PAGE_2M;
    assert_true((long)used_pages <= need_pages); /* the script's count is enough */
    struct pl_test_smaps sm;
    assert_int_equal(pl_test_smaps(d.pid, r.address, &sm), 0);
    assert_int_equal(sm.size_kb * 1024, r.mapped);
    assert_int_equal(sm.hugetlb_kb * 1024, r.hugetlb);
    assert_int_equal(meminfo("HugePages_Free"), free0 - (long)used_pages);
    generate(&d, ids);
    assert_memory_equal(ids, thp_ids, sizeof(ids));
    stop(&d);
    assert_int_equal(meminfo("HugePages_Free"), free0); /* given back at exit */
    restore_pages();
}

static void test_short_of_pages_falls_back(void **state) {
    (void)state;
    if (used_pages == 0)
        skip();                     /* the first test found no pages to measure the need with */
    static struct pl_test_daemon d; /* static: `running` may outlive the test */
    struct residency r;
    int32_t ids[N_GEN];
    if (!reserve((long)used_pages - 1))
        skip();
    start(&d, NULL);
    residency(&d, &r);
    print_message("[  INFO    ] %s: %s\n", r.backing, r.reason);
    assert_string_not_equal(r.backing, "hugetlb");
    assert_int_equal(r.hugetlb, 0);
    assert_non_null(strstr(r.reason, "MAP_HUGETLB"));
    assert_non_null(strstr(r.reason, "failed"));
    generate(&d, ids);
    assert_memory_equal(ids, thp_ids, sizeof(ids));
    stop(&d);
    restore_pages();
}

int main(void) {
    if (pl_test_model_path("tiny-llama-spm-Q4_K_M.gguf", model, sizeof(model)) < 0) {
        fprintf(stderr, "test_hugetlb: no test model (PICOLM_TEST_DATA): skipped\n");
        return 77;
    }
    if (geteuid() != 0 || access(NR_PATH, W_OK) != 0 || meminfo("Hugepagesize") != 2048) {
        fprintf(stderr,
                "test_hugetlb: needs root, a writable %s and 2 MiB huge pages: "
                "skipped\n",
                NR_PATH);
        return 77;
    }
    char cmd[8192];
    (void)snprintf(cmd, sizeof(cmd), "sh '%s/tools/hugepages-for-model.sh' '%s'", PL_SOURCE_DIR,
                   model);
    FILE *p = popen(cmd, "r");
    if (!p || fscanf(p, "%ld", &need_pages) != 1 || pclose(p) != 0 || need_pages <= 0) {
        fprintf(stderr, "test_hugetlb: hugepages-for-model.sh gave no page count\n");
        return 1;
    }
    orig_pages = read_long(NR_PATH);
    if (orig_pages < 0)
        return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hugetlb_backs_the_weights),
        cmocka_unit_test(test_short_of_pages_falls_back),
    };
    int r = cmocka_run_group_tests(tests, NULL, NULL);
    if (running) {
        pl_test_daemon_kill(running);
        pl_test_daemon_done(running);
    }
    restore_pages();
    return r == 0 && no_pages ? 77 : r;
}
