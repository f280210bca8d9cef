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

#endif
