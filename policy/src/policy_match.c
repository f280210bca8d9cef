/* SPDX-License-Identifier: MIT */
/* Admission decisions (pl_policy_match*): first matching rule wins, in file order. The daemon
 * calls pl_policy_match() on every handshake with the kernel's view of the caller and
 * pl_policy_match_admin() on every admin connection. */
#include "pl/policy_match.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>

#include "pl/pl_err.h"
#include "pl/policy_file.h"

static bool has_gid(uint32_t gid, const uint32_t *groups, size_t n_groups, uint32_t want) {
    if (gid == want)
        return true;
    for (size_t i = 0; i < n_groups; i++)
        if (groups[i] == want)
            return true;
    return false;
}

static bool rule_matches(const struct pl_policy_rule *rule, uint32_t uid, uint32_t gid,
                         const uint32_t *groups, size_t n_groups) {
    for (size_t i = 0; i < rule->n_match; i++) {
        const struct pl_policy_match_item *m = &rule->match[i];
        switch (m->kind) {
        case PL_POLICY_MATCH_DEFAULT:
            return true;
        case PL_POLICY_MATCH_UID:
            if (m->id == uid)
                return true;
            break;
        case PL_POLICY_MATCH_GID:
            if (has_gid(gid, groups, n_groups, m->id))
                return true;
            break;
        }
    }
    return false;
}

int pl_policy_match(const struct pl_policy *p, uint32_t uid, uint32_t gid, const uint32_t *groups,
                    size_t n_groups, struct pl_policy_verdict *ret) {
    if (!p || !ret || (n_groups > 0 && !groups))
        return -EINVAL;
    if (n_groups > PL_POLICY_MAX_GROUPS)
        n_groups = PL_POLICY_MAX_GROUPS;
    size_t n = pl_policy_n_rules(p);
    for (size_t i = 0; i < n; i++) {
        const struct pl_policy_rule *rule = pl_policy_rule_at(p, i);
        if (!rule_matches(rule, uid, gid, groups, n_groups))
            continue;
        ret->rule = rule;
        if (rule->access == PL_POLICY_ACCESS_ALLOW) {
            (void)snprintf(ret->msg, sizeof(ret->msg), "uid %u allowed by rule '%s' (%s:%u)", uid,
                           rule->name, pl_policy_source(p), rule->line);
            return 0;
        }
        (void)snprintf(ret->msg, sizeof(ret->msg), "uid %u denied by rule '%s' (%s:%u)", uid,
                       rule->name, pl_policy_source(p), rule->line);
        return -PL_ERR_DENIED;
    }
    ret->rule = NULL;
    (void)snprintf(ret->msg, sizeof(ret->msg), "uid %u denied: no rule of %s matches", uid,
                   pl_policy_source(p));
    return -PL_ERR_DENIED;
}

int pl_policy_match_admin(const struct pl_policy *p, uint32_t uid, uint32_t gid,
                          const uint32_t *groups, size_t n_groups) {
    if (n_groups > 0 && !groups)
        return -EINVAL;
    if (uid == 0)
        return 0;
    uint32_t admin;
    if (!pl_policy_admin_gid(p, &admin))
        return -PL_ERR_DENIED;
    if (n_groups > PL_POLICY_MAX_GROUPS)
        n_groups = PL_POLICY_MAX_GROUPS;
    return has_gid(gid, groups, n_groups, admin) ? 0 : -PL_ERR_DENIED;
}
