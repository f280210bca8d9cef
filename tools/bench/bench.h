/* SPDX-License-Identifier: MIT */
/* Subcommands of picolm-bench. Each takes the arguments after its name (argv[0] is the
 * subcommand) and returns a process exit code. Add a line here and one in main.c's table. */
#ifndef PL_TOOLS_BENCH_H
#define PL_TOOLS_BENCH_H

int bench_ipc_main(int argc, char **argv);
int bench_mkmodel_main(int argc, char **argv);
int bench_engine_main(int argc, char **argv);
int bench_kernels_main(int argc, char **argv);
int bench_decode_main(int argc, char **argv);
int bench_serve_main(int argc, char **argv);

/* Roughly N(0, 1) weights for kernel benchmarks (a sum of four uniforms from a xorshift64
 * state the caller keeps): cheap, and the same sequence on every run. */
static inline float bench_normalish(unsigned long long *state) {
    float s = 0.f;
    for (int k = 0; k < 4; k++) {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        s += (float)(*state >> 40) * 0x1p-24f - 0.5f;
    }
    return s * 1.7f;
}

#endif
