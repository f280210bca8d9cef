/* SPDX-License-Identifier: MIT */
/* Privilege drop (pl_policy_privdrop_*): the single place in picolm that changes the
 * process's credentials. The daemon calls pl_policy_privdrop_apply() once, at the end of its
 * privileged start-up; policy's other files only decide. Capabilities are handled with raw
 * prctl(2)/capset(2) so no libcap is needed. */
#include "pl/policy_privdrop.h"

#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pl/pl_util.h"

/* ---- Plan ---- */

int pl_policy_privdrop_plan_from_user(const char *user, struct pl_policy_privdrop_plan *ret) {
    if (!user || !ret || user[0] == '\0' || strlen(user) >= sizeof(ret->user))
        return -EINVAL;
    bool numeric = true;
    for (const char *c = user; *c; c++) {
        if (*c < '0' || *c > '9')
            numeric = false;
        /* Same name alphabet as the policy file: nothing a shell or NSS could misread. */
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '_' || *c == '.' || *c == '-' || *c == '@'))
            return -EINVAL;
    }
    uid_t uid = 0;
    if (numeric) {
        if (strlen(user) > 10)
            return -EINVAL;
        unsigned long long v = strtoull(user, NULL, 10);
        if (v >= UINT32_MAX)
            return -EINVAL;
        uid = (uid_t)v;
    }
    size_t len = 1024;
    char *buf = NULL;
    int r;
    for (;;) {
        char *nb = realloc(buf, len);
        if (!nb) {
            r = -ENOMEM;
            goto out;
        }
        buf = nb;
        struct passwd pw, *res = NULL;
        int e =
            numeric ? getpwuid_r(uid, &pw, buf, len, &res) : getpwnam_r(user, &pw, buf, len, &res);
        if (e == ERANGE && len < (1u << 20)) {
            len *= 2;
            continue;
        }
        if (e == 0 && res) {
            struct pl_policy_privdrop_plan p = {.uid = (uint32_t)res->pw_uid,
                                                .gid = (uint32_t)res->pw_gid};
            (void)snprintf(p.user, sizeof(p.user), "%s", user);
            /* Warm the group database too: NSS loads its modules (dlopen, which maps code
             * PROT_EXEC) on first use, which the broker filter would kill. After this, name
             * lookups of a policy reload only read files. The result does not matter. */
            struct group gr, *gres = NULL;
            (void)getgrgid_r((gid_t)p.gid, &gr, buf, len, &gres);
            *ret = p;
            r = 0;
        } else if (e == 0 || e == ENOENT || e == ESRCH || e == EBADF || e == EPERM) {
            r = -ENOENT;
        } else {
            r = -e;
        }
        goto out;
    }
out:
    free(buf);
    return r;
}

/* ---- Acting ---- */

static int count_threads(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -errno;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.')
            n++;
    (void)closedir(d);
    return n;
}

static int caps_get(struct __user_cap_data_struct data[2]) {
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    if (syscall(SYS_capget, &h, data) < 0)
        return -errno;
    return 0;
}

static bool cap_effective(const struct __user_cap_data_struct data[2], unsigned cap) {
    return (data[cap / 32].effective >> (cap % 32)) & 1u;
}

int pl_policy_privdrop_apply(const struct pl_policy_privdrop_plan *plan, scmp_filter_ctx filter) {
    if (!plan || plan->uid == UINT32_MAX || plan->gid == UINT32_MAX)
        return -EINVAL;
    uid_t uid = (uid_t)plan->uid;
    gid_t gid = (gid_t)plan->gid;

    /* capset() and the bounding set are per thread; only the uid change (which glibc applies
     * to every thread) clears the capabilities of the others. */
    int n_threads = count_threads();
    if (n_threads < 0)
        return n_threads;
    if (n_threads > 1 && uid == 0)
        return -EBUSY;

    struct __user_cap_data_struct caps[2];
    int r = caps_get(caps);
    if (r < 0)
        return r;

    /* Capabilities must not survive the uid change, nor come back through ambient sets. */
    if (prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0) < 0)
        return -errno;
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
        return -errno;

    /* Empty the bounding set. Without CAP_SETPCAP (started unprivileged, e.g. by systemd
     * with User=) that is impossible and also unneeded: the set only limits what execve()
     * could grant, and no_new_privs plus the filter rule execve out. */
    if (cap_effective(caps, CAP_SETPCAP)) {
        for (unsigned long cap = 0; cap < 64; cap++) {
            if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
                if (errno == EINVAL)
                    break; /* past the kernel's last capability */
                return -errno;
            }
        }
    }

    /* Groups, then gid, then uid: after the uid change we could no longer change groups. */
    uid_t ru, eu, su;
    gid_t rg, eg, sg;
    if (getresuid(&ru, &eu, &su) < 0 || getresgid(&rg, &eg, &sg) < 0)
        return -errno;
    bool same_ids = ru == uid && eu == uid && su == uid && rg == gid && eg == gid && sg == gid;
    if (!same_ids || cap_effective(caps, CAP_SETGID)) {
        if (setgroups(1, &gid) < 0)
            return -errno;
    }
    if (setresgid(gid, gid, gid) < 0)
        return -errno;
    if (setresuid(uid, uid, uid) < 0)
        return -errno;

    /* Clear every capability of this thread (what remains for a uid-0 target). */
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct zero[2];
    memset(zero, 0, sizeof(zero));
    if (syscall(SYS_capset, &h, zero) < 0)
        return -errno;

    /* Paranoia: check the result instead of trusting it. */
    if (getresuid(&ru, &eu, &su) < 0 || getresgid(&rg, &eg, &sg) < 0)
        return -errno;
    if (ru != uid || eu != uid || su != uid || rg != gid || eg != gid || sg != gid)
        return -EPERM;
    if (uid != 0 && (setuid(0) == 0 || seteuid(0) == 0))
        return -EPERM;
    if (gid != 0 && (setgid(0) == 0 || setegid(0) == 0))
        return -EPERM;
    r = caps_get(caps);
    if (r < 0)
        return r;
    if (caps[0].effective | caps[1].effective | caps[0].permitted | caps[1].permitted)
        return -EPERM;

    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return -errno;
    if (filter) {
        r = seccomp_load(filter);
        if (r < 0)
            return r;
    }
    return 0;
}
