/* SPDX-License-Identifier: MIT */
/* Error codes shared by every module. Functions return >= 0 on success and a negative
 * value on failure: either -errno or one of the project codes below, which live far above
 * the errno range. pl_strerror() names both kinds. */
#ifndef PL_COMMON_PL_ERR_H
#define PL_COMMON_PL_ERR_H

enum pl_err {
    PL_ERR_BASE = 10000,
    PL_ERR_FORMAT = 10001,      /* a file (GGUF) is malformed */
    PL_ERR_UNSUPPORTED = 10002, /* a valid input uses a feature this build does not have */
    PL_ERR_PROTOCOL = 10003,    /* a peer broke the wire protocol */
    PL_ERR_VERSION = 10004,     /* a peer speaks an incompatible version */
    PL_ERR_EXHAUSTED = 10005,   /* a fixed pool (KV blocks, sessions) is full */
    PL_ERR_QUOTA = 10006,       /* a policy limit was hit */
    PL_ERR_DENIED = 10007,      /* the policy refuses this caller */
    PL_ERR_CANCELLED = 10008,   /* the work was cancelled */
    PL_ERR_GONE = 10009,        /* the peer went away */
    _PL_ERR_MAX
};

/* Returns a static, human-readable string for r (negative errno or -PL_ERR_*). Never NULL. */
const char *pl_strerror(int r);

#endif
