/* SPDX-License-Identifier: MIT */
/* Unit tests for policy/src/privdrop.c: user lookup, argument checks, and, in forked children
 * running as root, the full drop to uid/gid 65534 with the broker filter: /proc/self/status
 * then shows CapEff 0, NoNewPrivs 1, Seccomp 2 (for every thread), root cannot be regained,
 * and a syscall outside the broker's list kills. Skips (77) when not root. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "child.h"
#include "pl/policy_file.h"
#include "pl/policy_privdrop.h"
#include "pl/policy_seccomp.h"

static void test_plan_from_user(void **state) {
    (void)state;
    struct pl_policy_privdrop_plan p;
    assert_int_equal(pl_policy_privdrop_plan_from_user("nobody", &p), 0);
    assert_int_equal(p.uid, 65534);
    assert_int_equal(p.gid, 65534);
    assert_string_equal(p.user, "nobody");
    assert_int_equal(pl_policy_privdrop_plan_from_user("root", &p), 0);
    assert_int_equal(p.uid, 0);
    assert_int_equal(p.gid, 0);
    assert_int_equal(pl_policy_privdrop_plan_from_user("65534", &p), 0);
    assert_int_equal(p.uid, 65534);
    assert_int_equal(p.gid, 65534);
    struct pl_policy_privdrop_plan keep = {.user = "keep", .uid = 7, .gid = 7};
    p = keep;
    assert_int_equal(pl_policy_privdrop_plan_from_user("no-such-user-picolm", &p), -ENOENT);
    assert_int_equal(pl_policy_privdrop_plan_from_user("4000000", &p), -ENOENT);
    assert_int_equal(pl_policy_privdrop_plan_from_user("a/b", &p), -EINVAL);
    assert_int_equal(pl_policy_privdrop_plan_from_user("", &p), -EINVAL);
    assert_int_equal(pl_policy_privdrop_plan_from_user("99999999999", &p), -EINVAL);
    assert_int_equal(pl_policy_privdrop_plan_from_user(NULL, &p), -EINVAL);
    assert_memory_equal(&p, &keep, sizeof(p));
    struct pl_policy_privdrop_plan bad = {.uid = UINT32_MAX, .gid = 1};
    assert_int_equal(pl_policy_privdrop_apply(&bad, NULL), -EINVAL);
    assert_int_equal(pl_policy_privdrop_apply(NULL, NULL), -EINVAL);
}

/* Fields of a /proc/.../status file. Returns 0 or a check code. */
static int read_status(const char *path, unsigned long long *cap_eff, unsigned long long *cap_prm,
                       unsigned long long *cap_bnd, int *nnp, int *seccomp, unsigned *uid) {
    FILE *f = fopen(path, "re");
    if (!f)
        return 40;
    char line[256];
    int found = 0;
    while (fgets(line, sizeof(line), f)) {
        unsigned u1, u2, u3, u4;
        if (sscanf(line, "CapEff: %llx", cap_eff) == 1)
            found |= 1;
        else if (sscanf(line, "CapPrm: %llx", cap_prm) == 1)
            found |= 2;
        else if (sscanf(line, "CapBnd: %llx", cap_bnd) == 1)
            found |= 4;
        else if (sscanf(line, "NoNewPrivs: %d", nnp) == 1)
            found |= 8;
        else if (sscanf(line, "Seccomp: %d", seccomp) == 1)
            found |= 16;
        else if (sscanf(line, "Uid: %u %u %u %u", &u1, &u2, &u3, &u4) == 4) {
            if (u1 != u2 || u2 != u3 || u3 != u4)
                found |= 64;
            *uid = u1;
            found |= 32;
        }
    }
    fclose(f);
    return found == 63 ? 0 : 41;
}

static int check_status(const char *path) {
    unsigned long long eff = 1, prm = 1, bnd = 1;
    int nnp = 0, sc = 0;
    unsigned uid = 0;
    int r = read_status(path, &eff, &prm, &bnd, &nnp, &sc, &uid);
    if (r)
        return r;
    if (eff != 0)
        return 42;
    if (prm != 0)
        return 43;
    if (nnp != 1)
        return 44;
    if (sc != 2)
        return 45;
    if (uid != 65534)
        return 46;
    return 0;
}

static int drop_to_nobody(void) {
    struct pl_policy_privdrop_plan plan = {.user = "nobody", .uid = 65534, .gid = 65534};
    scmp_filter_ctx f = NULL;
    if (pl_policy_seccomp_broker(&f) != 0)
        return 2;
    int r = pl_policy_privdrop_apply(&plan, f);
    seccomp_release(f);
    return r == 0 ? 0 : 3;
}

static int drop_child(void) {
    int r = drop_to_nobody();
    if (r)
        return r;
    r = check_status("/proc/self/status");
    if (r)
        return r;
    unsigned long long eff, prm, bnd;
    int nnp, sc;
    unsigned uid;
    if (read_status("/proc/self/status", &eff, &prm, &bnd, &nnp, &sc, &uid) || bnd != 0)
        return 50; /* started as root: the bounding set is empty too */
    /* A policy reload under the filter: read the file, resolve names. */
    struct pl_policy *pol = NULL;
    if (pl_policy_new_from_file(PL_SOURCE_DIR "/packaging/policy.conf.example", &pol, NULL) != 0)
        return 55;
    const char *text = "[rule a]\nmatch = user:root | group:nogroup\naccess = allow\n";
    struct pl_policy *pol2 = NULL;
    if (pl_policy_new_from_text(text, strlen(text), "t", &pol2, NULL) != 0)
        return 56;
    pl_policy_unref(pol);
    pl_policy_unref(pol2);
    return 0;
}

/* Without a filter (which would kill setuid itself): root cannot be regained, and the
 * supplementary groups are the target's gid only. */
static int drop_no_filter_child(void) {
    struct pl_policy_privdrop_plan plan = {.uid = 65534, .gid = 65534};
    if (pl_policy_privdrop_apply(&plan, NULL) != 0)
        return 2;
    errno = 0;
    if (setuid(0) == 0 || errno != EPERM || setgid(0) == 0 || seteuid(0) == 0)
        return 51;
    if (geteuid() != 65534 || getegid() != 65534 || getuid() != 65534 || getgid() != 65534)
        return 52;
    gid_t groups[8];
    int n = getgroups(8, groups);
    if (n != 1 || groups[0] != 65534)
        return 53;
    if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1 || prctl(PR_GET_SECCOMP, 0, 0, 0, 0) != 0)
        return 54;
    return 0;
}

static int drop_then_forbidden_child(void) {
    int r = drop_to_nobody();
    if (r)
        return r;
    (void)syscall(SYS_unshare, 0);
    return 10;
}

static int drop_then_execve_child(void) {
    int r = drop_to_nobody();
    if (r)
        return r;
    char *argv[] = {"/bin/true", NULL};
    char *envp[] = {NULL};
    (void)execve("/bin/true", argv, envp);
    return 10;
}

static int pipe_fds[2];

static void *blocked_thread(void *arg) {
    (void)arg;
    char c;
    ssize_t n = read(pipe_fds[0], &c, 1); /* blocks until the process ends */
    return (void *)(intptr_t)n;
}

/* With a second thread: uid 0 is refused (-EBUSY); a real drop reaches that thread too. */
static int drop_threads_child(void) {
    if (pipe(pipe_fds) != 0)
        return 2;
    pthread_t t;
    if (pthread_create(&t, NULL, blocked_thread, NULL) != 0)
        return 3;
    struct pl_policy_privdrop_plan root = {.uid = 0, .gid = 0};
    if (pl_policy_privdrop_apply(&root, NULL) != -EBUSY)
        return 4;
    int r = drop_to_nobody();
    if (r)
        return r;
    char path[96];
    (void)snprintf(path, sizeof(path), "/proc/self/task/%ld/status", (long)syscall(SYS_gettid));
    r = check_status(path);
    if (r)
        return r;
    /* The other thread: find it in /proc/self/task by elimination. */
    for (long tid = getpid(); tid < getpid() + 100000; tid++) {
        if (tid == (long)syscall(SYS_gettid))
            continue;
        (void)snprintf(path, sizeof(path), "/proc/self/task/%ld/status", tid);
        FILE *f = fopen(path, "re");
        if (!f)
            continue;
        fclose(f);
        r = check_status(path);
        return r ? r + 100 : 0;
    }
    return 60;
}

static void test_privdrop_apply(void **state) {
    (void)state;
    assert_child_ok(drop_child);
    assert_child_ok(drop_no_filter_child);
    assert_child_sigsys(drop_then_forbidden_child);
    assert_child_sigsys(drop_then_execve_child);
    assert_child_ok(drop_threads_child);
}

/* Without privilege (already uid 65534): the drop to another user fails cleanly. */
static int unprivileged_child(void) {
    if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0)
        return 2;
    struct pl_policy_privdrop_plan plan = {.uid = 1, .gid = 1};
    int r = pl_policy_privdrop_apply(&plan, NULL);
    if (r != -EPERM)
        return 3;
    /* To itself: fine (drops nothing it has, sets no_new_privs). */
    struct pl_policy_privdrop_plan self = {.uid = 65534, .gid = 65534};
    if (pl_policy_privdrop_apply(&self, NULL) != 0)
        return 4;
    if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1)
        return 5;
    return 0;
}

static void test_privdrop_unprivileged(void **state) {
    (void)state;
    assert_child_ok(unprivileged_child);
}

int main(void) {
    const struct CMUnitTest pure[] = {
        cmocka_unit_test(test_plan_from_user),
    };
    const struct CMUnitTest root[] = {
        cmocka_unit_test(test_privdrop_apply),
        cmocka_unit_test(test_privdrop_unprivileged),
    };
    int r = cmocka_run_group_tests_name("policy_privdrop", pure, NULL, NULL);
    if (r != 0)
        return r;
    if (geteuid() != 0 || prctl(PR_GET_SECCOMP, 0, 0, 0, 0) < 0) {
        fprintf(stderr, "not root or no seccomp: skipping the drop tests\n");
        return 77;
    }
    return cmocka_run_group_tests_name("policy_privdrop_root", root, NULL, NULL);
}
