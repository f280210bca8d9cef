/* SPDX-License-Identifier: MIT */
/* Admin socket client for picoctl: connect, one datagram per request and per answer, a poll
 * timeout on the answer. The answer is sized with MSG_PEEK | MSG_TRUNC before it is read. */
#include "admin_client.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* Largest answer picoctl accepts (the broker's Stats with every identity fits well). */
#define MAX_ANSWER (16u << 20)

static int fail(enum pl_ctl_fail why, enum pl_ctl_fail *ret_fail, char *err, size_t err_len,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int fail(enum pl_ctl_fail why, enum pl_ctl_fail *ret_fail, char *err, size_t err_len,
                const char *fmt, ...) {
    va_list ap;
    *ret_fail = why;
    va_start(ap, fmt);
    (void)vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
    return -1;
}

int pl_ctl_admin_open(struct pl_ctl_admin *a, const char *path, int timeout_ms,
                      enum pl_ctl_fail *ret_fail, char *err, size_t err_len) {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    a->fd = -1;
    a->timeout_ms = timeout_ms;
    a->next_id = 1;
    if (!path[0] || strlen(path) >= sizeof(sa.sun_path))
        return fail(PL_CTL_FAIL_UNREACHABLE, ret_fail, err, err_len,
                    "cannot reach picolmd: '%s' is not a usable socket path (%s)", path,
                    strerror(ENAMETOOLONG));
    (void)snprintf(a->path, sizeof(a->path), "%s", path);
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return fail(PL_CTL_FAIL_IO, ret_fail, err, err_len, "cannot create a socket for %s: %s",
                    path, strerror(errno));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int e = errno;
        (void)close(fd);
        if (e == EACCES || e == EPERM)
            return fail(PL_CTL_FAIL_UNREACHABLE, ret_fail, err, err_len,
                        "permission denied on %s (%s): picoctl needs root or the policy's "
                        "admin_group",
                        path, strerror(e));
        return fail(PL_CTL_FAIL_UNREACHABLE, ret_fail, err, err_len,
                    "cannot reach picolmd at %s: %s (is picolmd running? see --socket)", path,
                    strerror(e));
    }
    a->fd = fd;
    return 0;
}

void pl_ctl_admin_close(struct pl_ctl_admin *a) {
    if (a->fd >= 0)
        (void)close(a->fd);
    a->fd = -1;
}

int pl_ctl_admin_call(struct pl_ctl_admin *a, Picolm__Admin__V1__AdminRequest *req,
                      Picolm__Admin__V1__AdminResponse **ret, enum pl_ctl_fail *ret_fail, char *err,
                      size_t err_len) {
    uint8_t *buf = NULL;
    int r = -1;
    req->request_id = a->next_id++;
    size_t len = protobuf_c_message_get_packed_size(&req->base);
    buf = malloc(len ? len : 1);
    if (!buf)
        return fail(PL_CTL_FAIL_IO, ret_fail, err, err_len, "%s: %s", "picoctl", strerror(ENOMEM));
    (void)protobuf_c_message_pack(&req->base, buf);
    ssize_t n = send(a->fd, buf, len, MSG_NOSIGNAL);
    free(buf);
    buf = NULL;
    if (n != (ssize_t)len) {
        int e = n < 0 ? errno : EIO;
        if (e == EPIPE || e == ECONNRESET)
            return fail(PL_CTL_FAIL_REFUSED, ret_fail, err, err_len,
                        "picolmd at %s closed the admin connection (%s): permission denied "
                        "(root or the policy's admin_group only), or it is shutting down",
                        a->path, strerror(e));
        return fail(PL_CTL_FAIL_IO, ret_fail, err, err_len, "cannot send to picolmd at %s: %s",
                    a->path, strerror(e));
    }
    struct pollfd p = {.fd = a->fd, .events = POLLIN};
    int pr;
    do
        pr = poll(&p, 1, a->timeout_ms);
    while (pr < 0 && errno == EINTR);
    if (pr == 0)
        return fail(PL_CTL_FAIL_IO, ret_fail, err, err_len,
                    "picolmd at %s did not answer in time (%s)", a->path, strerror(ETIMEDOUT));
    if (pr < 0)
        return fail(PL_CTL_FAIL_IO, ret_fail, err, err_len, "poll on %s: %s", a->path,
                    strerror(errno));
    uint8_t probe;
    n = recv(a->fd, &probe, 1, MSG_PEEK | MSG_TRUNC);
    if (n == 0 || (n < 0 && errno == ECONNRESET))
        return fail(PL_CTL_FAIL_REFUSED, ret_fail, err, err_len,
                    "picolmd at %s closed the admin connection without an answer: permission "
                    "denied (root or the policy's admin_group only), or it is shutting down (%s)",
                    a->path, strerror(ECONNRESET));
    if (n < 0)
        return fail(PL_CTL_FAIL_IO, ret_fail, err, err_len, "cannot read from %s: %s", a->path,
                    strerror(errno));
    if ((size_t)n > MAX_ANSWER)
        return fail(PL_CTL_FAIL_IO, ret_fail, err, err_len, "answer from %s too large (%s)",
                    a->path, strerror(EMSGSIZE));
    size_t cap = (size_t)n;
    buf = malloc(cap ? cap : 1);
    if (!buf)
        return fail(PL_CTL_FAIL_IO, ret_fail, err, err_len, "%s: %s", "picoctl", strerror(ENOMEM));
    n = recv(a->fd, buf, cap, 0);
    if (n != (ssize_t)cap) {
        (void)fail(PL_CTL_FAIL_IO, ret_fail, err, err_len, "short answer from %s: %s", a->path,
                   strerror(n < 0 ? errno : EIO));
        goto out;
    }
    Picolm__Admin__V1__AdminResponse *resp =
        picolm__admin__v1__admin_response__unpack(NULL, cap, buf);
    if (!resp) {
        (void)fail(PL_CTL_FAIL_IO, ret_fail, err, err_len, "malformed answer from %s (%s)", a->path,
                   strerror(EPROTO));
        goto out;
    }
    if (resp->request_id != req->request_id) {
        picolm__admin__v1__admin_response__free_unpacked(resp, NULL);
        (void)fail(PL_CTL_FAIL_IO, ret_fail, err, err_len,
                   "answer from %s is for another request (%s)", a->path, strerror(EPROTO));
        goto out;
    }
    *ret = resp;
    r = 0;
out:
    free(buf);
    return r;
}
