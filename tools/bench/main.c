/* SPDX-License-Identifier: MIT */
/* picolm-bench: one executable, one subcommand per benchmark (ipc, later engine, serve...).
 * This file only dispatches; each subcommand lives in its own bench_<name>.c. */
#include <stdio.h>
#include <string.h>

#include "bench.h"

struct subcommand {
    const char *name;
    const char *help;
    int (*main_fn)(int argc, char **argv);
};

static const struct subcommand subcommands[] = {
    {"ipc", "shared-memory ring and doorbell latency/throughput vs SOCK_SEQPACKET", bench_ipc_main},
    {"mkmodel", "write a random-weight LLaMA GGUF of a given shape and quant type",
     bench_mkmodel_main},
    {"engine", "prefill/decode tok/s, decode bandwidth vs the machine's read bandwidth",
     bench_engine_main},
    {"kernels", "vec_dot GB/s per type (scalar vs SIMD, L2 and memory) vs read bandwidth",
     bench_kernels_main},
    {"decode", "decode matrix products as the forward pass runs them, GB/s vs read bandwidth",
     bench_decode_main},
    {"serve", "picolmd + N libpicolm client processes: tok/s, TTFT, ITL vs in-process",
     bench_serve_main},
};

static void usage(FILE *f) {
    fprintf(f, "usage: picolm-bench <subcommand> [options]   (--help after a subcommand)\n\n");
    for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
        fprintf(f, "  %-10s %s\n", subcommands[i].name, subcommands[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
        if (!strcmp(argv[1], subcommands[i].name))
            return subcommands[i].main_fn(argc - 1, argv + 1);
    fprintf(stderr, "picolm-bench: unknown subcommand '%.64s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
