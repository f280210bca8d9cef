/* SPDX-License-Identifier: MIT */
/* pl_strerror(): names both -errno values and the project's own -PL_ERR_* codes. */
#include "pl/pl_err.h"

#include <string.h>

const char *pl_strerror(int r) {
    int e = r < 0 ? -r : r;
    switch (e) {
    case PL_ERR_FORMAT:
        return "malformed file";
    case PL_ERR_UNSUPPORTED:
        return "unsupported feature";
    case PL_ERR_PROTOCOL:
        return "protocol violation";
    case PL_ERR_VERSION:
        return "incompatible protocol version";
    case PL_ERR_EXHAUSTED:
        return "resource exhausted";
    case PL_ERR_QUOTA:
        return "quota exceeded";
    case PL_ERR_DENIED:
        return "access denied by policy";
    case PL_ERR_CANCELLED:
        return "cancelled";
    case PL_ERR_GONE:
        return "peer gone";
    default:
        break;
    }
    if (e > 0 && e < PL_ERR_BASE)
        return strerrordesc_np(e) ? strerrordesc_np(e) : "unknown error";
    return "unknown error";
}
