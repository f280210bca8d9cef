/* SPDX-License-Identifier: MIT */
/* Admission decisions (pl_policy_match*): which rule of a policy applies to a caller, and
 * whether a caller may use the admin socket. The identity passed in must come from the
 * kernel (SO_PEERCRED for uid/gid, SO_PEERGROUPS for the supplementary groups), never from
 * anything the client wrote. Pure functions: no system calls. */
#ifndef PL_POLICY_POLICY_MATCH_H
#define PL_POLICY_POLICY_MATCH_H

#include <stddef.h>
#include <stdint.h>

struct pl_policy;
struct pl_policy_rule;

/* Most supplementary groups the matcher looks at (the kernel's NGROUPS_MAX is 65536; a caller
 * with more is matched on the first PL_POLICY_MAX_GROUPS only). */
#define PL_POLICY_MAX_GROUPS 65536u

struct pl_policy_verdict {
    const struct pl_policy_rule *rule; /* the rule that decided; NULL: no rule matched */
    char msg[160];                     /* for the client and the log: why, naming the rule */
};

/* Find the first rule matching (uid, gid, groups[0..n_groups)). groups may be NULL when
 * n_groups is 0. *ret is filled in every non-EINVAL case, so a refusal can be explained:
 * returns 0 when the rule allows, -PL_ERR_DENIED when it denies or no rule matched, -EINVAL
 * on bad arguments (ret untouched). ret->rule borrows from p. */
int pl_policy_match(const struct pl_policy *p, uint32_t uid, uint32_t gid, const uint32_t *groups,
                    size_t n_groups, struct pl_policy_verdict *ret);

/* May this caller use the admin socket? Root (uid 0) always may; otherwise the primary or a
 * supplementary gid must equal the policy's admin_group. p may be NULL (root only).
 * Returns 0 or -PL_ERR_DENIED (-EINVAL on bad arguments). */
int pl_policy_match_admin(const struct pl_policy *p, uint32_t uid, uint32_t gid,
                          const uint32_t *groups, size_t n_groups);

#endif
