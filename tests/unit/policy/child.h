/* SPDX-License-Identifier: MIT */
/* Test helper for the seccomp and privilege-drop tests: run a function in a forked child
 * (filters and credential changes are irreversible) and report how the child ended. The child
 * leaves with _exit(), so no atexit handler (sanitizer leak checks included) runs under a
 * filter. */
#ifndef PL_TESTS_POLICY_CHILD_H
#define PL_TESTS_POLICY_CHILD_H

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

struct child_end {
    int exited; /* 1: exit code in code; 0: killed by signal sig */
    int code;
    int sig;
};

static inline struct child_end run_child(int (*fn)(void)) {
    struct child_end e = {0, -1, 0};
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return e;
    if (pid == 0)
        _exit(fn());
    int st;
    while (waitpid(pid, &st, 0) < 0) {
    }
    if (WIFEXITED(st)) {
        e.exited = 1;
        e.code = WEXITSTATUS(st);
    } else if (WIFSIGNALED(st)) {
        e.sig = WTERMSIG(st);
    }
    return e;
}

/* The child exited 0. */
#define assert_child_ok(fn)                                                                        \
    do {                                                                                           \
        struct child_end _e = run_child(fn);                                                       \
        if (!_e.exited || _e.code != 0)                                                            \
            fail_msg("%s: child %s %d", #fn, _e.exited ? "failed check" : "killed by signal",      \
                     _e.exited ? _e.code : _e.sig);                                                \
    } while (0)

/* The child was killed by SIGSYS (a seccomp kill). */
#define assert_child_sigsys(fn)                                                                    \
    do {                                                                                           \
        struct child_end _e = run_child(fn);                                                       \
        if (_e.exited || _e.sig != SIGSYS)                                                         \
            fail_msg("%s: child %s %d, want SIGSYS", #fn,                                          \
                     _e.exited ? "exited with" : "killed by signal",                               \
                     _e.exited ? _e.code : _e.sig);                                                \
    } while (0)

#endif
