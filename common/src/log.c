/* SPDX-License-Identifier: MIT */
/* The one log sink: stderr, one line per call, with level prefix and function name. */
#include "pl/pl_log.h"

#include <stdarg.h>
#include <stdio.h>

_Atomic int pl_log_max_level = PL_LOG_INFO;

void pl_log_set_level(enum pl_log_level level) {
    atomic_store_explicit(&pl_log_max_level, (int)level, memory_order_relaxed);
}

void pl_log_write(int level, const char *func, const char *fmt, ...) {
    static const char *const names[8] = {"", "", "", "error", "warning", "", "info", "debug"};
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    /* <N> prefix lets journald pick the priority when stderr is the journal. */
    (void)fprintf(stderr, "<%d>%s: %s: %s\n", level, names[level & 7], func, line);
}
