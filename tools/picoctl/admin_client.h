/* SPDX-License-Identifier: MIT */
/* picoctl's side of the admin protocol (pl_ctl_admin_*): connect to picolmd's admin socket
 * (SOCK_SEQPACKET), send one AdminRequest, wait for its AdminResponse. Errors come back as
 * a negative code plus a message meant for the user. */
#ifndef PL_TOOLS_PICOCTL_ADMIN_CLIENT_H
#define PL_TOOLS_PICOCTL_ADMIN_CLIENT_H

#include <stddef.h>

#include "pl/admin.pb-c.h"

/* Why a round trip failed (picoctl's exit status follows from it). */
enum pl_ctl_fail {
    PL_CTL_FAIL_UNREACHABLE = 1, /* no socket, refused, permission denied on connect */
    PL_CTL_FAIL_REFUSED = 2,     /* the broker closed the connection without answering */
    PL_CTL_FAIL_IO = 3,          /* timeout, malformed answer, other socket errors */
};

struct pl_ctl_admin {
    int fd;
    char path[108];
    int timeout_ms;
    unsigned long long next_id;
};

/* Connect to path. Returns 0, or -1 with *ret_fail and a message in err. */
int pl_ctl_admin_open(struct pl_ctl_admin *a, const char *path, int timeout_ms,
                      enum pl_ctl_fail *ret_fail, char *err, size_t err_len);
void pl_ctl_admin_close(struct pl_ctl_admin *a);

/* One round trip: req->request_id is set here. On success *ret is the answer (free it with
 * picolm__admin__v1__admin_response__free_unpacked); it may carry an error_code. Returns 0,
 * or -1 with *ret_fail and a message in err. */
int pl_ctl_admin_call(struct pl_ctl_admin *a, Picolm__Admin__V1__AdminRequest *req,
                      Picolm__Admin__V1__AdminResponse **ret, enum pl_ctl_fail *ret_fail, char *err,
                      size_t err_len);

#endif
