/* SPDX-License-Identifier: MIT */
/* Command-line parsing for the picolm CLI: a table of options per subcommand, strict number
 * parsing with ranges, and one-line error messages ("picolm: --top-p: expected a number in
 * (0, 1], got 'abc'"). Used only by picolm_cli.c. */
#ifndef PL_CLIENT_CLI_ARGS_H
#define PL_CLIENT_CLI_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum pl_cli_opt_kind {
    PL_CLI_OPT_FLAG,     /* bool, no value */
    PL_CLI_OPT_STR,      /* const char * (borrowed from argv) */
    PL_CLI_OPT_I64,      /* int64_t within [min, max] */
    PL_CLI_OPT_U64,      /* uint64_t, any value */
    PL_CLI_OPT_FLOAT,    /* float, finite, within the range below */
    PL_CLI_OPT_STR_LIST, /* struct pl_cli_str_list: repeatable, up to max values */
};

/* Values of a repeatable option, in the order given (borrowed from argv). */
#define PL_CLI_LIST_MAX 64
struct pl_cli_str_list {
    const char *v[PL_CLI_LIST_MAX];
    size_t n;
};

struct pl_cli_opt {
    const char *name; /* long name without dashes: "top-p" */
    char short_name;  /* 0 when none */
    enum pl_cli_opt_kind kind;
    void *dst;       /* bool / const char * / int64_t / uint64_t / float */
    double min, max; /* range for I64 and FLOAT; +-INFINITY for open ends; STR_LIST:
                        max is the most values (<= PL_CLI_LIST_MAX) */
    bool min_open;   /* exclusive lower bound: "(0, 1]" */
    bool max_open;
    const char *metavar; /* "N", "TEXT": for --help */
    const char *help;
    bool seen; /* set by the parser */
};

/* Size of the message buffer the parsers fill. */
#define PL_CLI_ERR_LEN 512

/* Parse argv[0..argc) (argv[0] is the first option, not the program name) against opts.
 * Accepts --name VALUE, --name=VALUE, -x VALUE, and the flag --help / -h.
 * Returns 1 when --help was given, 0 on success, and a one-line message in err (without
 * the "picolm: " prefix) with -ENOENT for an unknown option or a positional argument, or
 * -EINVAL for a missing or malformed value, a value out of range, a repeated option (other
 * than a STR_LIST one) or more values than a STR_LIST takes. */
int pl_cli_args_parse(struct pl_cli_opt *opts, size_t n_opts, int argc, char **argv, char *err,
                      size_t err_len);

/* Print the option table as --help text to f (a FILE *). */
void pl_cli_args_usage(const struct pl_cli_opt *opts, size_t n_opts, void *f);

/* Parse "1,2,3" (commas, optional blanks around them) into a new array (*ret_ids, caller
 * frees) of *ret_n ids, each in [0, INT32_MAX]. An empty list is an error. Returns 0 or
 * -EINVAL / -ENOMEM with a message in err. */
int pl_cli_args_parse_ids(const char *s, int32_t **ret_ids, size_t *ret_n, char *err,
                          size_t err_len);

#endif
