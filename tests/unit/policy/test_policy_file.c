/* SPDX-License-Identifier: MIT */
/* Unit tests for policy/src/policy_file.c: the shipped example parses to what it says, names
 * resolve at load (root/0, nobody/65534, nogroup/65534 on Debian), defaults are inherited,
 * and a table of broken files is rejected with the right line and message. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "pl/pl_err.h"
#include "pl/policy_file.h"

static struct pl_policy *parse_ok(const char *text) {
    struct pl_policy *p = NULL;
    struct pl_policy_error err;
    int r = pl_policy_new_from_text(text, strlen(text), "t.conf", &p, &err);
    if (r != 0)
        fail_msg("unexpected parse error %d: %s", r, err.msg);
    assert_non_null(p);
    return p;
}

static const struct pl_policy_rule *rule_named(const struct pl_policy *p, const char *name) {
    for (size_t i = 0; i < pl_policy_n_rules(p); i++)
        if (strcmp(pl_policy_rule_at(p, i)->name, name) == 0)
            return pl_policy_rule_at(p, i);
    fail_msg("no rule '%s'", name);
    return NULL;
}

static void test_file_example_parses(void **state) {
    (void)state;
    struct pl_policy *p = NULL;
    struct pl_policy_error err;
    const char *path = PL_SOURCE_DIR "/packaging/policy.conf.example";
    int r = pl_policy_new_from_file(path, &p, &err);
    if (r != 0)
        fail_msg("example rejected: %s", err.msg);
    assert_string_equal(pl_policy_source(p), path);
    assert_int_equal(pl_policy_n_rules(p), 5);
    uint32_t admin = 1234;
    assert_true(pl_policy_admin_gid(p, &admin));
    assert_int_equal(admin, 0);

    const struct pl_policy_rule *root = pl_policy_rule_at(p, 0);
    assert_string_equal(root->name, "root");
    assert_int_equal(root->access, PL_POLICY_ACCESS_ALLOW);
    assert_int_equal(root->n_match, 1);
    assert_int_equal(root->match[0].kind, PL_POLICY_MATCH_UID);
    assert_int_equal(root->match[0].id, 0);
    assert_int_equal(root->limits.max_sessions, PL_POLICY_UNLIMITED);
    assert_int_equal(root->limits.max_context, PL_POLICY_UNLIMITED);
    assert_int_equal(root->limits.weight, 100); /* from [defaults] */

    const struct pl_policy_rule *blocked = rule_named(p, "blocked");
    assert_int_equal(blocked->access, PL_POLICY_ACCESS_DENY);
    assert_int_equal(blocked->match[0].kind, PL_POLICY_MATCH_UID);
    assert_int_equal(blocked->match[0].id, 65534); /* user:nobody resolved at load */

    const struct pl_policy_rule *batch = rule_named(p, "batch-jobs");
    assert_int_equal(batch->match[0].kind, PL_POLICY_MATCH_GID);
    assert_int_equal(batch->match[0].id, 1); /* group:daemon */
    assert_int_equal(batch->limits.priority, PL_POLICY_CLASS_BATCH);
    assert_int_equal(batch->limits.weight, 25);
    assert_int_equal(batch->limits.rate_tokens_per_s, 200);
    assert_int_equal(batch->limits.rate_burst, 400);
    assert_int_equal(batch->limits.max_sessions, 2);
    assert_int_equal(batch->limits.max_queued, 32);
    assert_int_equal(batch->limits.max_prompt_tokens, 4096); /* from [defaults] */
    assert_int_equal(batch->limits.max_context, 8192);

    const struct pl_policy_rule *users = rule_named(p, "users");
    assert_int_equal(users->n_match, 2);
    assert_int_equal(users->match[0].id, 100);
    assert_int_equal(users->match[1].id, 50);
    assert_int_equal(users->limits.rate_tokens_per_s, 100);
    assert_int_equal(users->limits.rate_burst, 200);
    assert_int_equal(users->limits.priority, PL_POLICY_CLASS_INTERACTIVE);

    const struct pl_policy_rule *last = pl_policy_rule_at(p, 4);
    assert_string_equal(last->name, "everyone-else");
    assert_int_equal(last->match[0].kind, PL_POLICY_MATCH_DEFAULT);
    assert_int_equal(last->access, PL_POLICY_ACCESS_DENY);
    assert_null(pl_policy_rule_at(p, 5));
    assert_null(pl_policy_unref(p));
}

static void test_file_resolves_names_and_numbers(void **state) {
    (void)state;
    struct pl_policy *p = parse_ok("[rule a]\n"
                                   "match = user:root | user:nobody | group:root | "
                                   "group:nogroup | uid:4294967294 | gid:0\n"
                                   "access = allow\n");
    const struct pl_policy_rule *r = pl_policy_rule_at(p, 0);
    assert_int_equal(r->n_match, 6);
    const struct {
        enum pl_policy_match_kind kind;
        uint32_t id;
    } want[] = {{PL_POLICY_MATCH_UID, 0},           {PL_POLICY_MATCH_UID, 65534},
                {PL_POLICY_MATCH_GID, 0},           {PL_POLICY_MATCH_GID, 65534},
                {PL_POLICY_MATCH_UID, 4294967294u}, {PL_POLICY_MATCH_GID, 0}};
    for (size_t i = 0; i < 6; i++) {
        assert_int_equal(r->match[i].kind, want[i].kind);
        assert_int_equal(r->match[i].id, want[i].id);
    }
    pl_policy_unref(p);

    p = parse_ok("[global]\nadmin_group = 65534\n[rule a]\nmatch=default\naccess=deny\n");
    uint32_t g = 0;
    assert_true(pl_policy_admin_gid(p, &g));
    assert_int_equal(g, 65534);
    pl_policy_unref(p);
    p = parse_ok("[global]\nadmin_group = nogroup\n[rule a]\nmatch=default\naccess=deny\n");
    assert_true(pl_policy_admin_gid(p, &g));
    assert_int_equal(g, 65534);
    pl_policy_unref(p);
}

static void test_file_defaults_and_overrides(void **state) {
    (void)state;
    /* No [defaults]: built-ins. With [defaults]: inherited unless the rule sets the key. */
    struct pl_policy *p = parse_ok("[rule a]\nmatch = uid:1\naccess = allow\n"
                                   "[rule b]\nmatch = default\naccess = allow\n"
                                   "rate_tokens_per_s = 50\n");
    const struct pl_policy_rule *a = pl_policy_rule_at(p, 0);
    struct pl_policy_limits def;
    pl_policy_limits_init(&def);
    assert_int_equal(a->limits.max_sessions, PL_POLICY_DEFAULT_MAX_SESSIONS);
    assert_int_equal(a->limits.max_queued, PL_POLICY_DEFAULT_MAX_QUEUED);
    assert_int_equal(a->limits.max_prompt_tokens, PL_POLICY_DEFAULT_MAX_PROMPT_TOKENS);
    assert_int_equal(a->limits.max_new_tokens, PL_POLICY_DEFAULT_MAX_NEW_TOKENS);
    assert_int_equal(a->limits.max_context, PL_POLICY_DEFAULT_MAX_CONTEXT);
    assert_int_equal(a->limits.rate_tokens_per_s, PL_POLICY_UNLIMITED);
    assert_int_equal(a->limits.rate_burst, 1);
    assert_int_equal(a->limits.weight, PL_POLICY_DEFAULT_WEIGHT);
    assert_int_equal(a->limits.priority, PL_POLICY_CLASS_INTERACTIVE);
    const struct pl_policy_rule *b = pl_policy_rule_at(p, 1);
    assert_int_equal(b->limits.rate_tokens_per_s, 50);
    assert_int_equal(b->limits.rate_burst, 50); /* burst defaults to the rate */
    pl_policy_unref(p);

    p = parse_ok("[defaults]\nmax_sessions = 2\nweight = 7\npriority = batch\n"
                 "rate_tokens_per_s = 10\nrate_burst = 30\n"
                 "[rule a]\nmatch = uid:1\naccess = allow\nweight = 9\nrate_tokens_per_s = 20\n"
                 "[rule b]\nmatch = uid:2\naccess = allow\nmax_sessions = 0\n"
                 "priority = interactive\n");
    a = pl_policy_rule_at(p, 0);
    assert_int_equal(a->limits.max_sessions, 2);
    assert_int_equal(a->limits.weight, 9);
    assert_int_equal(a->limits.priority, PL_POLICY_CLASS_BATCH);
    assert_int_equal(a->limits.rate_tokens_per_s, 20);
    assert_int_equal(a->limits.rate_burst, 30);
    b = pl_policy_rule_at(p, 1);
    assert_int_equal(b->limits.max_sessions, 0);
    assert_int_equal(b->limits.weight, 7);
    assert_int_equal(b->limits.priority, PL_POLICY_CLASS_INTERACTIVE);
    assert_int_equal(b->limits.rate_tokens_per_s, 10);
    assert_false(pl_policy_admin_gid(p, NULL));
    pl_policy_unref(p);
}

static void test_file_syntax_tolerances(void **state) {
    (void)state;
    /* CRLF, tabs, comments after values, blank lines, no final newline, spaces in headers. */
    const char *text = "# leading comment\r\n\r\n[ rule   spaced.name@x ]  # c\r\n"
                       "\tmatch\t=\tuid:5|uid:6 # two\r\n"
                       "access=allow\r\nweight=1000";
    struct pl_policy *p = parse_ok(text);
    const struct pl_policy_rule *r = pl_policy_rule_at(p, 0);
    assert_string_equal(r->name, "spaced.name@x");
    assert_int_equal(r->line, 3);
    assert_int_equal(r->n_match, 2);
    assert_int_equal(r->match[1].id, 6);
    assert_int_equal(r->limits.weight, 1000);
    pl_policy_unref(p);
}

struct bad_case {
    const char *text;
    unsigned line;
    const char *needle; /* must appear in the message */
};

static const struct bad_case bad_cases[] = {
    {"", 0, "no rules"},
    {"# only a comment\n", 0, "no rules"},
    {"max_sessions = 3\n", 1, "outside any section"},
    {"[rule a]\nmatch = uid:1\n", 1, "has no 'access'"},
    {"[rule a]\naccess = allow\n", 1, "has no 'match'"},
    {"[rule a]\nmatch = uid:1\naccess = maybe\n", 3, "access: bad value 'maybe'"},
    {"[rule a]\nmatch = uid:1\naccess = allow\nmax_sessions = -1\n", 4, "max_sessions: bad value"},
    {"[rule a]\nmatch = uid:1\naccess = allow\nmax_queued = 99999999999\n", 4, "max_queued"},
    {"[rule a]\nmatch = uid:1\naccess = allow\nmax_new_tokens = 16777217\n", 4, "max_new_tokens"},
    {"[rule a]\nmatch = uid:1\naccess = allow\nweight = 0\n", 4, "weight: bad value '0'"},
    {"[rule a]\nmatch = uid:1\naccess = allow\nweight = 1001\n", 4, "weight"},
    {"[rule a]\nmatch = uid:1\naccess = allow\nweight = unlimited\n", 4, "weight"},
    {"[rule a]\nmatch = uid:1\naccess = allow\nrate_burst = unlimited\n", 4, "rate_burst"},
    {"[rule a]\nmatch = uid:1\naccess = allow\nrate_tokens_per_s = 0\n", 4, "rate_tokens_per_s"},
    {"[rule a]\nmatch = uid:1\naccess = allow\npriority = urgent\n", 4, "priority"},
    {"[rule a]\nmatch = uid:1\naccess = allow\ncolour = blue\n", 4, "unknown key 'colour'"},
    {"[rule a]\nmatch = uid:1\naccess = allow\naccess = deny\n", 4, "access set twice"},
    {"[rule a]\nmatch = uid:1\nmatch = uid:2\naccess = deny\n", 3, "match set twice"},
    {"[rule a]\nmatch = uid:1\naccess = allow\nweight\n", 4, "expected 'key = value'"},
    {"[rule a]\nmatch = uid:1\naccess = allow\n= 5\n", 4, "missing key"},
    {"[rule a]\nmatch = uid:1\naccess = allow\nweight =\n", 4, "missing value"},
    {"[rule a]\nmatch = uid:x\naccess = allow\n", 2, "bad uid 'x'"},
    {"[rule a]\nmatch = uid:4294967295\naccess = allow\n", 2, "bad uid"},
    {"[rule a]\nmatch = gid:+5\naccess = allow\n", 2, "bad gid"},
    {"[rule a]\nmatch = user:no-such-user-picolm\naccess = allow\n", 2,
     "unknown user 'no-such-user-picolm'"},
    {"[rule a]\nmatch = group:no-such-group-picolm\naccess = allow\n", 2,
     "unknown group 'no-such-group-picolm'"},
    {"[rule a]\nmatch = user:1000\naccess = allow\n", 2, "takes a name"},
    {"[rule a]\nmatch = user:a/b\naccess = allow\n", 2, "bad character in user name"},
    {"[rule a]\nmatch = host:x\naccess = allow\n", 2, "unknown item kind 'host'"},
    {"[rule a]\nmatch = uid:1 |\naccess = allow\n", 2, "empty item"},
    {"[rule a]\nmatch = uid:1 | default\naccess = allow\n", 2, "cannot be combined"},
    {"[rule a]\nmatch = oops\naccess = allow\n", 2, "bad item 'oops'"},
    {"[rule a]\nmatch = default\naccess = allow\n[rule b]\nmatch = uid:1\naccess = deny\n", 4,
     "could never match"},
    {"[rule a]\nmatch = uid:1\naccess = allow\n[rule a]\nmatch = uid:2\naccess = deny\n", 4,
     "duplicate rule 'a' (first at line 1)"},
    {"[rule]\n", 1, "rule without a name"},
    {"[rule a b]\nmatch = uid:1\naccess = allow\n", 1, "bad character in rule name"},
    {"[rule aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa]\n", 1, "too long"},
    {"[rules a]\n", 1, "unknown section"},
    {"[global\n", 1, "closing ']'"},
    {"[global]\n[global]\n", 2, "second [global]"},
    {"[defaults]\n[defaults]\n", 2, "second [defaults]"},
    {"[rule a]\nmatch = uid:1\naccess = allow\n[defaults]\nweight = 2\n", 4,
     "must come before the rules"},
    {"[global]\nweight = 3\n", 2, "unknown key 'weight' in [global]"},
    {"[global]\nadmin_group = no-such-group-picolm\n", 2, "unknown group"},
    {"[global]\nadmin_group = wheel-x\nadmin_group = root\n", 2, "unknown group 'wheel-x'"},
    {"[global]\nadmin_group = root\nadmin_group = root\n", 3, "admin_group set twice"},
    {"[defaults]\nmatch = uid:1\n", 2, "belongs in a [rule]"},
    {"[defaults]\naccess = allow\n", 2, "belongs in a [rule]"},
    {"[rule a]\nmatch = uid:1\naccess = allow\nmax_context = 10\nmax_prompt_tokens = 20\n", 1,
     "exceeds max_context"},
    {"[rule a]\nmatch = uid:1\naccess = allow\nweight = 1\x01\n", 4, "control character"},
    {"[rule a]\nmatch = uid:1\naccess = allow\n[rule b]\nmatch = uid:2\n[rule c]\n", 4,
     "rule 'b' has no 'access'"},
};

static void test_file_rejects_broken_files_with_line(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        const struct bad_case *c = &bad_cases[i];
        struct pl_policy *p = (struct pl_policy *)(uintptr_t)0x1; /* must stay untouched */
        struct pl_policy_error err;
        int r = pl_policy_new_from_text(c->text, strlen(c->text), "bad.conf", &p, &err);
        if (r != -EINVAL || p != (struct pl_policy *)(uintptr_t)0x1)
            fail_msg("case %zu accepted (r=%d): %s", i, r, c->text);
        if (err.line != c->line)
            fail_msg("case %zu: line %u, want %u (%s)", i, err.line, c->line, err.msg);
        if (!strstr(err.msg, c->needle))
            fail_msg("case %zu: message '%s' lacks '%s'", i, err.msg, c->needle);
        char prefix[32];
        if (c->line)
            (void)snprintf(prefix, sizeof(prefix), "bad.conf:%u: ", c->line);
        else
            (void)snprintf(prefix, sizeof(prefix), "bad.conf: ");
        if (strncmp(err.msg, prefix, strlen(prefix)) != 0)
            fail_msg("case %zu: message '%s' does not start with '%s'", i, err.msg, prefix);
    }
}

static void test_file_rejects_nul_long_lines_and_caps(void **state) {
    (void)state;
    struct pl_policy *p = NULL;
    struct pl_policy_error err;
    const char nul[] = "[rule a]\nmatch = uid:1\0\naccess = allow\n";
    assert_int_equal(pl_policy_new_from_text(nul, sizeof(nul) - 1, "n", &p, &err), -EINVAL);
    assert_int_equal(err.line, 2);
    assert_non_null(strstr(err.msg, "NUL"));

    size_t n = PL_POLICY_MAX_LINE_BYTES + 10;
    char *longl = malloc(n + 32);
    assert_non_null(longl);
    strcpy(longl, "[rule a]\n#");
    memset(longl + 10, 'x', n);
    longl[10 + n] = '\0';
    assert_int_equal(pl_policy_new_from_text(longl, strlen(longl), "n", &p, &err), -EINVAL);
    assert_int_equal(err.line, 2);
    assert_non_null(strstr(err.msg, "longer than"));
    free(longl);

    /* Too big a file: -EFBIG before parsing. */
    size_t big = PL_POLICY_MAX_FILE_BYTES + 1;
    char *b = malloc(big);
    assert_non_null(b);
    memset(b, '\n', big);
    assert_int_equal(pl_policy_new_from_text(b, big, "n", &p, &err), -EFBIG);
    free(b);

    /* Too many rules and too many match items. */
    size_t cap = (PL_POLICY_MAX_RULES + 1) * 64;
    char *many = malloc(cap);
    assert_non_null(many);
    size_t o = 0;
    for (unsigned i = 0; i <= PL_POLICY_MAX_RULES; i++)
        o += (size_t)snprintf(many + o, cap - o, "[rule r%u]\nmatch = uid:%u\naccess = allow\n", i,
                              i);
    assert_int_equal(pl_policy_new_from_text(many, o, "n", &p, &err), -EINVAL);
    assert_int_equal(err.line, PL_POLICY_MAX_RULES * 3 + 1);
    assert_non_null(strstr(err.msg, "more than 256 rules"));
    o = (size_t)snprintf(many, cap, "[rule a]\naccess = allow\nmatch = uid:0");
    for (unsigned i = 1; i <= PL_POLICY_MAX_MATCH_ITEMS; i++)
        o += (size_t)snprintf(many + o, cap - o, "|uid:%u", i);
    assert_int_equal(pl_policy_new_from_text(many, o, "n", &p, &err), -EINVAL);
    assert_int_equal(err.line, 3);
    assert_non_null(strstr(err.msg, "more than 64 items"));
    free(many);

    assert_int_equal(pl_policy_new_from_text(NULL, 3, "n", &p, &err), -EINVAL);
    assert_int_equal(pl_policy_new_from_text("x", 1, "n", NULL, &err), -EINVAL);
    /* A NULL err is fine. */
    assert_int_equal(pl_policy_new_from_text("x", 1, NULL, &p, NULL), -EINVAL);
}

static void test_file_reads_files_and_reports_io_errors(void **state) {
    (void)state;
    struct pl_policy *p = NULL;
    struct pl_policy_error err;
    assert_int_equal(pl_policy_new_from_file("/nonexistent/picolm/policy.conf", &p, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "/nonexistent/picolm/policy.conf"));
    assert_int_equal(pl_policy_new_from_file("/", &p, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "not a regular file"));

    char path[] = "/tmp/pl_policy_test_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "[rule x]\nmatch = default\naccess = allow\nweight = 3\nfoo = 1\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    assert_int_equal(pl_policy_new_from_file(path, &p, &err), -EINVAL);
    assert_int_equal(err.line, 5);
    char want[128];
    (void)snprintf(want, sizeof(want), "%s:5: unknown key 'foo'", path);
    assert_string_equal(err.msg, want);
    unlink(path);
}

static void test_file_refcount(void **state) {
    (void)state;
    struct pl_policy *p = parse_ok("[rule a]\nmatch = default\naccess = allow\n");
    assert_ptr_equal(pl_policy_ref(p), p);
    assert_null(pl_policy_unref(p));
    assert_int_equal(pl_policy_n_rules(p), 1); /* still alive: one reference left */
    assert_null(pl_policy_unref(p));
    assert_null(pl_policy_unref(NULL));
    assert_null(pl_policy_ref(NULL));
    assert_int_equal(pl_policy_n_rules(NULL), 0);
    assert_string_equal(pl_policy_access_name(PL_POLICY_ACCESS_ALLOW), "allow");
    assert_string_equal(pl_policy_class_name(PL_POLICY_CLASS_BATCH), "batch");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file_example_parses),
        cmocka_unit_test(test_file_resolves_names_and_numbers),
        cmocka_unit_test(test_file_defaults_and_overrides),
        cmocka_unit_test(test_file_syntax_tolerances),
        cmocka_unit_test(test_file_rejects_broken_files_with_line),
        cmocka_unit_test(test_file_rejects_nul_long_lines_and_caps),
        cmocka_unit_test(test_file_reads_files_and_reports_io_errors),
        cmocka_unit_test(test_file_refcount),
    };
    return cmocka_run_group_tests_name("policy_file", tests, NULL, NULL);
}
