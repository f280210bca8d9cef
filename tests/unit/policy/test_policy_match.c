/* SPDX-License-Identifier: MIT */
/* Unit tests for policy/src/policy_match.c: first match wins in file order, uid/user and
 * gid/group items (primary and supplementary groups), deny rules, the default rule, an
 * unmatched caller, and the admin-socket check. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "pl/pl_err.h"
#include "pl/policy_file.h"
#include "pl/policy_match.h"

static struct pl_policy *parse_ok(const char *text) {
    struct pl_policy *p = NULL;
    struct pl_policy_error err;
    int r = pl_policy_new_from_text(text, strlen(text), "m.conf", &p, &err);
    if (r != 0)
        fail_msg("parse error %d: %s", r, err.msg);
    return p;
}

static const char *const order_policy = "[rule deny-nobody]\n"
                                        "match = user:nobody\n"
                                        "access = deny\n"
                                        "[rule alice]\n"
                                        "match = uid:1000 | uid:1001\n"
                                        "access = allow\n"
                                        "weight = 300\n"
                                        "[rule audio]\n"
                                        "match = gid:29\n"
                                        "access = allow\n"
                                        "weight = 50\n"
                                        "[rule blocked-group]\n"
                                        "match = gid:2000\n"
                                        "access = deny\n"
                                        "[rule staff]\n"
                                        "match = group:staff\n"
                                        "access = allow\n"
                                        "priority = batch\n";

static void test_match_first_rule_wins(void **state) {
    (void)state;
    struct pl_policy *p = parse_ok(order_policy);
    struct pl_policy_verdict v;
    /* uid 1000 is also in group 29 and 2000: the uid rule comes first. */
    uint32_t g[] = {29, 2000};
    assert_int_equal(pl_policy_match(p, 1000, 1000, g, 2, &v), 0);
    assert_string_equal(v.rule->name, "alice");
    assert_int_equal(v.rule->limits.weight, 300);
    assert_non_null(strstr(v.msg, "allowed by rule 'alice' (m.conf:4)"));
    assert_int_equal(pl_policy_match(p, 1001, 5, NULL, 0, &v), 0);
    assert_string_equal(v.rule->name, "alice");
    /* Supplementary group 29 before 2000 in file order. */
    assert_int_equal(pl_policy_match(p, 1500, 1500, g, 2, &v), 0);
    assert_string_equal(v.rule->name, "audio");
    /* Only 2000: the deny rule decides, although a later rule (staff) would allow. */
    uint32_t g2[] = {50, 2000};
    assert_int_equal(pl_policy_match(p, 1500, 1500, g2, 2, &v), -PL_ERR_DENIED);
    assert_non_null(v.rule);
    assert_string_equal(v.rule->name, "blocked-group");
    assert_non_null(strstr(v.msg, "denied by rule 'blocked-group'"));
    /* Primary gid 50 (staff). */
    assert_int_equal(pl_policy_match(p, 1500, 50, NULL, 0, &v), 0);
    assert_string_equal(v.rule->name, "staff");
    assert_int_equal(v.rule->limits.priority, PL_POLICY_CLASS_BATCH);
    /* nobody is denied first, even though it is in the staff group. */
    assert_int_equal(pl_policy_match(p, 65534, 50, NULL, 0, &v), -PL_ERR_DENIED);
    assert_string_equal(v.rule->name, "deny-nobody");
    /* No rule matches: refused, with no rule. */
    assert_int_equal(pl_policy_match(p, 4242, 4242, NULL, 0, &v), -PL_ERR_DENIED);
    assert_null(v.rule);
    assert_non_null(strstr(v.msg, "no rule"));
    pl_policy_unref(p);
}

static void test_match_default_rule(void **state) {
    (void)state;
    struct pl_policy *p = parse_ok("[rule root]\nmatch = uid:0\naccess = allow\n"
                                   "[rule rest]\nmatch = default\naccess = allow\n"
                                   "max_sessions = 1\n");
    struct pl_policy_verdict v;
    assert_int_equal(pl_policy_match(p, 0, 0, NULL, 0, &v), 0);
    assert_string_equal(v.rule->name, "root");
    for (uint32_t uid = 1; uid < 70000; uid += 977) {
        assert_int_equal(pl_policy_match(p, uid, uid, NULL, 0, &v), 0);
        assert_string_equal(v.rule->name, "rest");
        assert_int_equal(v.rule->limits.max_sessions, 1);
    }
    pl_policy_unref(p);
    p = parse_ok("[rule root]\nmatch = uid:0\naccess = allow\n"
                 "[rule rest]\nmatch = default\naccess = deny\n");
    assert_int_equal(pl_policy_match(p, 7, 7, NULL, 0, &v), -PL_ERR_DENIED);
    assert_string_equal(v.rule->name, "rest");
    pl_policy_unref(p);
}

static void test_match_rejects_bad_arguments(void **state) {
    (void)state;
    struct pl_policy *p = parse_ok("[rule a]\nmatch = default\naccess = allow\n");
    struct pl_policy_verdict v = {.rule = (const struct pl_policy_rule *)(uintptr_t)1};
    assert_int_equal(pl_policy_match(NULL, 0, 0, NULL, 0, &v), -EINVAL);
    assert_int_equal(pl_policy_match(p, 0, 0, NULL, 0, NULL), -EINVAL);
    assert_int_equal(pl_policy_match(p, 0, 0, NULL, 3, &v), -EINVAL);
    assert_ptr_equal(v.rule, (const struct pl_policy_rule *)(uintptr_t)1);
    pl_policy_unref(p);
}

static void test_match_admin(void **state) {
    (void)state;
    struct pl_policy *p = parse_ok("[global]\nadmin_group = 4000\n"
                                   "[rule a]\nmatch = default\naccess = allow\n");
    uint32_t g[] = {10, 4000};
    assert_int_equal(pl_policy_match_admin(p, 0, 0, NULL, 0), 0);
    assert_int_equal(pl_policy_match_admin(p, 1000, 4000, NULL, 0), 0);
    assert_int_equal(pl_policy_match_admin(p, 1000, 1000, g, 2), 0);
    assert_int_equal(pl_policy_match_admin(p, 1000, 1000, g, 1), -PL_ERR_DENIED);
    assert_int_equal(pl_policy_match_admin(p, 4000, 1000, NULL, 0),
                     -PL_ERR_DENIED); /* uid != gid */
    assert_int_equal(pl_policy_match_admin(p, 1000, 1000, NULL, 1), -EINVAL);
    pl_policy_unref(p);
    /* No admin group: root only, also without a policy at all. */
    p = parse_ok("[rule a]\nmatch = default\naccess = allow\n");
    assert_int_equal(pl_policy_match_admin(p, 0, 0, NULL, 0), 0);
    assert_int_equal(pl_policy_match_admin(p, 1, 0, NULL, 0), -PL_ERR_DENIED);
    assert_int_equal(pl_policy_match_admin(NULL, 0, 0, NULL, 0), 0);
    assert_int_equal(pl_policy_match_admin(NULL, 1, 0, g, 2), -PL_ERR_DENIED);
    pl_policy_unref(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_match_first_rule_wins),
        cmocka_unit_test(test_match_default_rule),
        cmocka_unit_test(test_match_rejects_bad_arguments),
        cmocka_unit_test(test_match_admin),
    };
    return cmocka_run_group_tests_name("policy_match", tests, NULL, NULL);
}
