/* SPDX-License-Identifier: MIT */
/* Privilege drop (pl_policy_privdrop_*). plan_from_user only looks the user up; apply is the
 * one place in picolm that ACTS on credentials: the daemon calls it once, after all
 * privileged set-up (model open, huge pages, mlock, sockets bound, CPU affinity and
 * scheduling class) and before it reads a byte from a client. In order it: clears ambient
 * capabilities and the bounding set, sets the supplementary groups to the target's gid,
 * setresgid, setresuid, clears every capability with capset(2), checks that root cannot be
 * regained, sets PR_SET_NO_NEW_PRIVS, and loads the seccomp filter (synchronised to all
 * threads). Afterwards /proc/self/status shows CapEff 0, NoNewPrivs 1, Seccomp 2. */
#ifndef PL_POLICY_POLICY_PRIVDROP_H
#define PL_POLICY_POLICY_PRIVDROP_H

#include <seccomp.h>
#include <stdint.h>

#define PL_POLICY_PRIVDROP_DEFAULT_USER "picolm"

struct pl_policy_privdrop_plan {
    char user[64]; /* for messages; may be empty */
    uint32_t uid;
    uint32_t gid;
};

/* Resolve user (a name, or a decimal uid) to its uid and primary gid. Call it before the
 * drop: it also makes NSS load its user and group modules, which it could not do under the
 * broker filter (no executable mappings), so that a policy reload can still resolve names.
 * Returns 0 and *ret, -ENOENT (no such user), -EINVAL (bad name), -ENOMEM or -errno. */
int pl_policy_privdrop_plan_from_user(const char *user, struct pl_policy_privdrop_plan *ret);

/* Drop to plan (see the top of this file) and, if filter is not NULL, load it (borrowed; the
 * caller still releases it). Must run as root (or with CAP_SETUID, CAP_SETGID, CAP_SETPCAP);
 * in a multi-threaded process the target uid must not be 0, since only the uid change clears
 * the other threads' capabilities. Irreversible: on failure the process is in an unknown
 * state and the caller must exit. Returns 0, -EPERM (lacking privilege, or root could be
 * regained), -EBUSY (threads and uid 0), -EINVAL, or -errno. */
int pl_policy_privdrop_apply(const struct pl_policy_privdrop_plan *plan, scmp_filter_ctx filter);

#endif
