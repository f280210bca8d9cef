/* SPDX-License-Identifier: MIT */
/* Logging macros. Only daemon/ and tools/ log above debug (STYLE.md §6). The level test is
 * in the macro, so filtered arguments are never evaluated. Output goes to stderr. */
#ifndef PL_COMMON_PL_LOG_H
#define PL_COMMON_PL_LOG_H

#include <stdatomic.h>

enum pl_log_level {
    PL_LOG_ERR = 3,
    PL_LOG_WARN = 4,
    PL_LOG_INFO = 6,
    PL_LOG_DEBUG = 7,
};

extern _Atomic int pl_log_max_level;

void pl_log_set_level(enum pl_log_level level);
void pl_log_write(int level, const char *func, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define pl_log(level, ...)                                                                         \
    do {                                                                                           \
        if ((level) <= atomic_load_explicit(&pl_log_max_level, memory_order_relaxed))              \
            pl_log_write((level), __func__, __VA_ARGS__);                                          \
    } while (0)

#define pl_log_err(...) pl_log(PL_LOG_ERR, __VA_ARGS__)
#define pl_log_warn(...) pl_log(PL_LOG_WARN, __VA_ARGS__)
#define pl_log_info(...) pl_log(PL_LOG_INFO, __VA_ARGS__)
#define pl_log_debug(...) pl_log(PL_LOG_DEBUG, __VA_ARGS__)

/* Log at error level with pl_strerror(r) appended, and evaluate to r. */
#define pl_log_err_errno(r, fmt, ...)                                                              \
    ({                                                                                             \
        int _r = (r);                                                                              \
        pl_log_err(fmt ": %s", ##__VA_ARGS__, pl_strerror(_r));                                    \
        _r;                                                                                        \
    })

#endif
