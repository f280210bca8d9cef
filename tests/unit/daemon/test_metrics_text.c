/* SPDX-License-Identifier: MIT */
/* daemon/metrics_text.c: the exact Prometheus text of a small Stats message (gauges, counters,
 * a nanosecond histogram in seconds with cumulative buckets, per-identity series with an
 * escaped label), a name with characters metrics may not carry, and the textfile writer
 * (temp file + rename, nothing left behind, errors returned). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "metrics_text.h"

struct fixture {
    Picolm__Admin__V1__Stats st;
    Picolm__Admin__V1__Counter gauge, ctr, id_ctr;
    Picolm__Admin__V1__Counter *gauges[1], *ctrs[1], *id_ctrs[1];
    Picolm__Admin__V1__Histogram h, id_h;
    Picolm__Admin__V1__Histogram *hs[1], *id_hs[1];
    Picolm__Admin__V1__IdentityStats id;
    Picolm__Admin__V1__IdentityStats *ids[1];
    double bounds[2];
    uint64_t counts[3], id_counts[3];
};

static void fixture_init(struct fixture *f) {
    memset(f, 0, sizeof(*f));
    picolm__admin__v1__stats__init(&f->st);
    picolm__admin__v1__counter__init(&f->gauge);
    f->gauge.name = "uptime_ns";
    f->gauge.value = 2500000000ull;
    f->gauges[0] = &f->gauge;
    picolm__admin__v1__counter__init(&f->ctr);
    f->ctr.name = "tokens_out";
    f->ctr.value = 42;
    f->ctrs[0] = &f->ctr;
    f->bounds[0] = 1000000;  /* 1 ms */
    f->bounds[1] = 10000000; /* 10 ms */
    f->counts[0] = 1;
    f->counts[1] = 2;
    f->counts[2] = 3;
    picolm__admin__v1__histogram__init(&f->h);
    f->h.name = "ttft_ns";
    f->h.n_bounds = 2;
    f->h.bounds = f->bounds;
    f->h.n_counts = 3;
    f->h.counts = f->counts;
    f->h.count = 6;
    f->h.sum = 1.5e9;
    f->hs[0] = &f->h;
    f->id_ctr = f->ctr;
    f->id_ctr.value = 40;
    f->id_ctrs[0] = &f->id_ctr;
    f->id_counts[2] = 1;
    f->id_h = f->h;
    f->id_h.counts = f->id_counts;
    f->id_h.count = 1;
    f->id_h.sum = 2e7;
    f->id_hs[0] = &f->id_h;
    picolm__admin__v1__identity_stats__init(&f->id);
    f->id.identity = "a\"b\\c";
    f->id.n_counters = 1;
    f->id.counters = f->id_ctrs;
    f->id.n_histograms = 1;
    f->id.histograms = f->id_hs;
    f->ids[0] = &f->id;
    f->st.n_gauges = 1;
    f->st.gauges = f->gauges;
    f->st.n_counters = 1;
    f->st.counters = f->ctrs;
    f->st.n_histograms = 1;
    f->st.histograms = f->hs;
    f->st.n_identities = 1;
    f->st.identities = f->ids;
}

static const char expected[] =
    "# HELP picolm_uptime_seconds Time since picolmd started.\n"
    "# TYPE picolm_uptime_seconds gauge\n"
    "picolm_uptime_seconds 2.5\n"
    "# HELP picolm_tokens_out_total Tokens generated.\n"
    "# TYPE picolm_tokens_out_total counter\n"
    "picolm_tokens_out_total 42\n"
    "# HELP picolm_ttft_seconds Time from request receipt to the first token.\n"
    "# TYPE picolm_ttft_seconds histogram\n"
    "picolm_ttft_seconds_bucket{le=\"0.001\"} 1\n"
    "picolm_ttft_seconds_bucket{le=\"0.01\"} 3\n"
    "picolm_ttft_seconds_bucket{le=\"+Inf\"} 6\n"
    "picolm_ttft_seconds_sum 1.5\n"
    "picolm_ttft_seconds_count 6\n"
    "# HELP picolm_identity_tokens_out_total Tokens generated. Per policy identity.\n"
    "# TYPE picolm_identity_tokens_out_total counter\n"
    "picolm_identity_tokens_out_total{identity=\"a\\\"b\\\\c\"} 40\n"
    "# HELP picolm_identity_ttft_seconds Time from request receipt to the first token. Per "
    "policy identity.\n"
    "# TYPE picolm_identity_ttft_seconds histogram\n"
    "picolm_identity_ttft_seconds_bucket{identity=\"a\\\"b\\\\c\",le=\"0.001\"} 0\n"
    "picolm_identity_ttft_seconds_bucket{identity=\"a\\\"b\\\\c\",le=\"0.01\"} 0\n"
    "picolm_identity_ttft_seconds_bucket{identity=\"a\\\"b\\\\c\",le=\"+Inf\"} 1\n"
    "picolm_identity_ttft_seconds_sum{identity=\"a\\\"b\\\\c\"} 0.02\n"
    "picolm_identity_ttft_seconds_count{identity=\"a\\\"b\\\\c\"} 1\n";

static char *render(const Picolm__Admin__V1__Stats *st) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    assert_int_equal(pl_daemon_metrics_text_render(f, st), 0);
    fclose(f);
    return buf;
}

static void test_renders_the_exact_text(void **state) {
    struct fixture f;
    fixture_init(&f);
    char *t = render(&f.st);
    assert_string_equal(t, expected);
    free(t);
}

static void test_odd_names_are_made_valid(void **state) {
    struct fixture f;
    fixture_init(&f);
    f.ctr.name = "we ird-name";
    f.st.n_identities = 0;
    f.st.n_histograms = 0;
    f.st.n_gauges = 0;
    char *t = render(&f.st);
    assert_non_null(strstr(t, "\npicolm_we_ird_name_total 42\n"));
    assert_non_null(strstr(t, "# HELP picolm_we_ird_name_total picolm broker statistic.\n"));
    free(t);
    /* Empty stats: empty text. */
    Picolm__Admin__V1__Stats empty = PICOLM__ADMIN__V1__STATS__INIT;
    t = render(&empty);
    assert_string_equal(t, "");
    free(t);
}

static void test_textfile_is_replaced_whole(void **state) {
    struct fixture f;
    char dir[] = "/tmp/pl-metrics-test.XXXXXX", path[128], tmp[128], buf[4096];
    fixture_init(&f);
    assert_non_null(mkdtemp(dir));
    int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    assert_true(dfd >= 0);
    snprintf(path, sizeof(path), "%s/picolm.prom", dir);
    snprintf(tmp, sizeof(tmp), "%s/picolm.prom.tmp", dir);
    assert_int_equal(pl_daemon_metrics_text_write_at(dfd, "picolm.prom", &f.st), 0);
    f.ctr.value = 43;
    assert_int_equal(pl_daemon_metrics_text_write_at(dfd, "picolm.prom", &f.st), 0);
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    assert_non_null(strstr(buf, "picolm_tokens_out_total 43\n"));
    assert_null(strstr(buf, "picolm_tokens_out_total 42\n"));
    assert_int_equal(access(tmp, F_OK), -1); /* renamed away */
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0644); /* umask 022 (main) */

    /* Errors come back as -errno and leave the old file alone. */
    char longname[400];
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    assert_int_equal(pl_daemon_metrics_text_write_at(dfd, longname, &f.st), -ENAMETOOLONG);
    assert_int_equal(pl_daemon_metrics_text_write_at(dfd, "nodir/picolm.prom", &f.st), -ENOENT);
    assert_int_equal(pl_daemon_metrics_text_write_at(-1, "picolm.prom", &f.st), -EBADF);
    assert_int_equal(stat(path, &sb), 0);
    close(dfd);
    unlink(path);
    rmdir(dir);
}

int main(void) {
    umask(022);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_renders_the_exact_text),
        cmocka_unit_test(test_odd_names_are_made_valid),
        cmocka_unit_test(test_textfile_is_replaced_whole),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
