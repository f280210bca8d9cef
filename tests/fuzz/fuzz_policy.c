/* SPDX-License-Identifier: MIT */
/* libFuzzer target for the policy file parser: parse the input with pl_policy_new_from_text()
 * and, when it is accepted, check the invariants the daemon relies on (at least one rule,
 * every limit in range, a default rule only last) and run matching and admin checks against
 * a few identities. A rejection must come with a "source:line: " message. Built only with
 * -DPL_BUILD_FUZZ=ON (clang); run with tests/fuzz/run-fuzz.sh fuzz_policy SECONDS. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pl/pl_err.h"
#include "pl/policy_file.h"
#include "pl/policy_match.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_limits(const struct pl_policy_limits *l) {
    const uint32_t counts[] = {l->max_sessions,   l->max_queued,  l->max_prompt_tokens,
                               l->max_new_tokens, l->max_context, l->rate_tokens_per_s};
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++)
        if (counts[i] != PL_POLICY_UNLIMITED && counts[i] > PL_POLICY_MAX_COUNT)
            abort();
    if (l->rate_burst < 1 || l->rate_burst > PL_POLICY_MAX_COUNT)
        abort();
    if (l->weight < 1 || l->weight > PL_POLICY_MAX_WEIGHT)
        abort();
    if ((unsigned)l->priority >= _PL_POLICY_CLASS_MAX)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct pl_policy *p = NULL;
    struct pl_policy_error err;
    int r = pl_policy_new_from_text((const char *)data, size, "fuzz", &p, &err);
    if (r < 0) {
        if (p || strncmp(err.msg, "fuzz:", 5) != 0 || !memchr(err.msg, '\0', sizeof(err.msg)))
            abort();
        return 0;
    }
    size_t n = pl_policy_n_rules(p);
    if (n == 0 || n > PL_POLICY_MAX_RULES)
        abort();
    for (size_t i = 0; i < n; i++) {
        const struct pl_policy_rule *rule = pl_policy_rule_at(p, i);
        if (!rule || rule->n_match == 0 || rule->n_match > PL_POLICY_MAX_MATCH_ITEMS ||
            rule->name[0] == '\0' || strlen(rule->name) > PL_POLICY_MAX_NAME_LEN)
            abort();
        for (size_t m = 0; m < rule->n_match; m++)
            if (rule->match[m].kind == PL_POLICY_MATCH_DEFAULT &&
                (i != n - 1 || rule->n_match != 1))
                abort();
        check_limits(&rule->limits);
    }
    const uint32_t ids[] = {0, 1, 29, 50, 100, 1000, 65534, UINT32_MAX - 1};
    uint32_t groups[] = {29, 100, 1000};
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        struct pl_policy_verdict v;
        r = pl_policy_match(p, ids[i], ids[(i + 3) % 8], groups, 3, &v);
        if (r != 0 && r != -PL_ERR_DENIED)
            abort();
        if (r == 0 && (!v.rule || v.rule->access != PL_POLICY_ACCESS_ALLOW))
            abort();
        r = pl_policy_match_admin(p, ids[i], ids[i], groups, 3);
        if (r != 0 && r != -PL_ERR_DENIED)
            abort();
    }
    pl_policy_ref(p);
    pl_policy_unref(p);
    pl_policy_unref(p);
    return 0;
}
