/* SPDX-License-Identifier: MIT */
/* Running one of the project's binaries from a test: argv, bytes on stdin, environment
 * edits, and its exit status, stdout and stderr captured whole (through temporary files, so
 * no pipe can fill while the test waits). */
#ifndef PL_TESTS_RUN_H
#define PL_TESTS_RUN_H

#include <stddef.h>

struct pl_test_run {
    int status;      /* exit code, or 128 + signal */
    char *out, *err; /* NUL-terminated (may hold NULs: use the lengths) */
    size_t out_len, err_len;
};

/* Run path with argv (NULL-terminated, argv[0] included) and in_len bytes of in on stdin;
 * env (NULL, or NULL-terminated) edits the child's environment: "NAME=value" sets, "NAME"
 * unsets. Returns 0 with *ret filled (free with pl_test_run_free), or -errno when the run
 * could not be made (temporary files, fork, wait, reading the output). */
int pl_test_run(const char *path, const char *const *argv, const char *in, size_t in_len,
                const char *const *env, struct pl_test_run *ret);
void pl_test_run_free(struct pl_test_run *r);

/* The whole content of the file open at fd (from offset 0), NUL-terminated, length in
 * *ret_len; NULL on error (errno set). */
char *pl_test_read_fd(int fd, size_t *ret_len);

#endif
